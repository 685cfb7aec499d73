//! NLM v4 (program 100021, version 4) on an RPC connection: the lock procedures a client
//! sends to a server (TEST, LOCK, CANCEL, UNLOCK), with the `nlm` crate's codec. granary
//! serves NLM on its NFS port, so the same connection serves both. Used by `granary
//! bench`'s lock rows and tests.

use bytes::Bytes;
use nfs3::nfs::NfsFh3;
use nlm::limits::NLM_PROGRAM;
use nlm::nlm4::{
    CallerName, CancArgs, Lock, LockArgs, Netobj, Proc, Res, Stats, TestArgs, TestRes, UnlockArgs,
};

use crate::error::ClientError;
use crate::RpcConnection;

const VERSION: u32 = 4;

/// NLM v4 calls as one host (`caller_name`).
#[derive(Debug, Clone)]
pub struct NlmClient {
    conn: RpcConnection,
    caller_name: Bytes,
}

impl NlmClient {
    #[must_use]
    pub fn new(conn: RpcConnection, caller_name: &str) -> Self {
        Self {
            conn,
            caller_name: Bytes::copy_from_slice(caller_name.as_bytes()),
        }
    }

    /// The `nlm4_lock` of this host's process `svid` (owner handle `oh`) on `offset` and
    /// `len` (0: to the end) of the file `fh`.
    #[must_use]
    pub fn alock(&self, fh: &NfsFh3, svid: i32, oh: &[u8], offset: u64, len: u64) -> Lock {
        Lock {
            caller_name: CallerName(self.caller_name.clone()),
            fh: Netobj(fh.0.clone()),
            oh: Netobj(Bytes::copy_from_slice(oh)),
            svid,
            l_offset: offset,
            l_len: len,
        }
    }

    async fn call<R: xdr::Decode>(
        &self,
        proc: Proc,
        args: &impl xdr::Encode,
    ) -> Result<R, ClientError> {
        self.conn
            .call_decode(NLM_PROGRAM, VERSION, proc as u32, args)
            .await
    }

    /// LOCK (`block`: queue it and be sent GRANTED later); the status.
    ///
    /// # Errors
    /// The connection's errors.
    pub async fn lock(
        &self,
        alock: Lock,
        exclusive: bool,
        block: bool,
    ) -> Result<Stats, ClientError> {
        let args = LockArgs {
            cookie: Netobj(Bytes::new()),
            block,
            exclusive,
            alock,
            reclaim: false,
            state: 1,
        };
        Ok(self.call::<Res>(Proc::Lock, &args).await?.stat)
    }

    /// UNLOCK; the status.
    ///
    /// # Errors
    /// The connection's errors.
    pub async fn unlock(&self, alock: Lock) -> Result<Stats, ClientError> {
        let args = UnlockArgs {
            cookie: Netobj(Bytes::new()),
            alock,
        };
        Ok(self.call::<Res>(Proc::Unlock, &args).await?.stat)
    }

    /// CANCEL of a blocked LOCK; the status.
    ///
    /// # Errors
    /// The connection's errors.
    pub async fn cancel(&self, alock: Lock, exclusive: bool) -> Result<Stats, ClientError> {
        let args = CancArgs {
            cookie: Netobj(Bytes::new()),
            block: true,
            exclusive,
            alock,
        };
        Ok(self.call::<Res>(Proc::Cancel, &args).await?.stat)
    }

    /// TEST; the reply (granted, or the holder in the way).
    ///
    /// # Errors
    /// The connection's errors.
    pub async fn test(&self, alock: Lock, exclusive: bool) -> Result<TestRes, ClientError> {
        let args = TestArgs {
            cookie: Netobj(Bytes::new()),
            exclusive,
            alock,
        };
        self.call(Proc::Test, &args).await
    }
}

/// [`ClientError::Nlm`] unless `stat` is `NLM4_GRANTED`.
///
/// # Errors
/// [`ClientError::Nlm`] with the status.
pub fn nlm_ok(stat: Stats) -> Result<(), ClientError> {
    match stat {
        Stats::Granted => Ok(()),
        other => Err(ClientError::Nlm(other)),
    }
}
