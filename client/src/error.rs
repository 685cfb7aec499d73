//! The one error type of the client, from the socket up to NFS statuses.

use std::sync::Arc;
use std::time::Duration;

use nfs3::mount::Mountstat3;
use nfs3::nfs::{Nfsstat3, Res3, Writeverf3};
use rpc::msg::ReplyStatus;
use xdr::DecodeError;

/// Why a call did not produce a successful result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Connecting failed, or the caller asked for something that cannot be sent (e.g. a
    /// raw record shorter than an xid). Permanent for that call.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The connection is gone: the server closed it, a read or write failed, or a reply
    /// could not be framed. Permanent: every pending and later call on this connection
    /// fails the same way; open a new connection.
    #[error("connection closed: {reason}")]
    Closed { reason: Arc<str> },
    /// No reply within the handle's timeout. Transient: the connection stays usable, and a
    /// reply that arrives later is dropped.
    #[error("no reply within {after:?}")]
    Timeout { after: Duration },
    /// The server answered with a non-SUCCESS accept status or denied the call
    /// (`GARBAGE_ARGS`, `PROC_UNAVAIL`, `PROG_MISMATCH`, `AUTH_ERROR`, ...).
    #[error("RPC call not executed: {0:?}")]
    Rpc(ReplyStatus),
    /// The reply header or results do not decode as the procedure's result.
    #[error("reply does not decode: {0}")]
    Decode(#[from] DecodeError),
    /// An NFS procedure returned a status other than `NFS3_OK` (convenience layer only;
    /// the typed procedure methods return the status inside their result).
    #[error("NFS error {0:?}")]
    Nfs(Nfsstat3),
    /// An NFSv4 operation failed (SEQUENCE, or an operation of the `v4` layer).
    #[error("NFSv4 error {0:?}")]
    Nfs4(nfs4::Nfsstat4),
    /// An NLM procedure returned a status other than `NLM4_GRANTED` where the caller
    /// asked for success ([`crate::nlm::nlm_ok`]).
    #[error("NLM status {0:?}")]
    Nlm(nlm::nlm4::Stats),
    /// MNT returned a status other than `MNT3_OK` (convenience layer only).
    #[error("MOUNT error {0:?}")]
    Mount(Mountstat3),
    /// `call_raw` was given an xid that another call on this connection is waiting on.
    #[error("xid {0:#010x} already has a call in flight")]
    XidInUse(u32),
    /// The write verifier changed between WRITEs, or between WRITE and COMMIT: the server
    /// may have lost unstable data (it restarted) and the data must be written again.
    #[error("write verifier changed from {before:02x?} to {after:02x?}")]
    VerifierChanged {
        before: Writeverf3,
        after: Writeverf3,
    },
    /// The server's answer is well-formed but breaks the protocol (trailing bytes, a READ
    /// `count` that disagrees with its data, a READDIR that makes no progress, ...).
    #[error("server broke the protocol: {0}")]
    Protocol(String),
}

impl ClientError {
    /// The NFS status, if this is [`ClientError::Nfs`].
    #[must_use]
    pub fn nfs_status(&self) -> Option<Nfsstat3> {
        match self {
            Self::Nfs(status) => Some(*status),
            _ => None,
        }
    }

    /// The RPC reply status, if this is [`ClientError::Rpc`].
    #[must_use]
    pub fn rpc_status(&self) -> Option<&ReplyStatus> {
        match self {
            Self::Rpc(status) => Some(status),
            _ => None,
        }
    }

    /// Whether the connection is gone ([`ClientError::Closed`]).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        matches!(self, Self::Closed { .. })
    }
}

/// The `Ok` body of an NFS result, or [`ClientError::Nfs`] with its status.
///
/// # Errors
/// [`ClientError::Nfs`] for any status but `NFS3_OK`.
pub fn nfs_ok<T, F>(res: Res3<T, F>) -> Result<T, ClientError> {
    match res {
        Res3::Ok(ok) => Ok(ok),
        Res3::Fail(status, _) => Err(ClientError::Nfs(status)),
    }
}
