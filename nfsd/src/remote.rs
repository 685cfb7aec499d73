//! Calls on a remote backend's export (the object backend: every call waits on a
//! database or an S3 store) run on the blocking pool from the start.
//!
//! The procedure tables defer only the calls that may sleep on a local disk (WRITE,
//! COMMIT, SETATTR, READ). For an export whose backend says [`vfs::Backend::remote`], every
//! call may wait on the network, so this wrapper answers `WouldBlock` before the procedure
//! runs when the call's first argument, its file handle, names such an export: the
//! connection then runs the whole call on its worker's blocking pool (`rpc::offload`),
//! and nothing was done on the event loop; MOUNT's MNT likewise when its path is in such
//! an export. A server without a remote export never peeks
//! (the flag is read once at registration). NFSv4 decides per COMPOUND, from all its
//! operations, in [`crate::v4::reach`].

use rpc::{CacheClass, CallContext, ProcError, Program, Service};
use xdr::{Decode, Decoder, Encoder};

use crate::state::NfsState;

/// Which calls of a program to defer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Defer {
    /// NFSv3: any procedure but NULL whose file handle names a remote export.
    ByHandle,
    /// MOUNT: MNT (it reads the root of the export its path names, and walks below
    /// it) of a path in a remote export.
    Mount,
}

/// A program's table, deferring calls on remote exports.
pub(crate) struct Deferring {
    pub service: Service<NfsState>,
    pub defer: Defer,
}

/// True if some export of `s` is on a remote backend.
pub(crate) fn any_remote(s: &NfsState) -> bool {
    s.exports.iter().any(|e| e.backend().remote())
}

impl Deferring {
    fn must_defer(&self, procedure: u32, d: &Decoder) -> bool {
        let s = &self.service.state;
        match self.defer {
            Defer::Mount if procedure != 1 => false,
            Defer::Mount => {
                // A path no export holds fails before MNT reads anything.
                let mut peek = d.clone();
                let Ok(path) = nfs3::mount::DirPath::decode(&mut peek) else {
                    return false;
                };
                s.exports
                    .by_mount_path(path.as_bytes())
                    .is_ok_and(|(e, _)| e.backend().remote())
            }
            Defer::ByHandle if procedure == 0 => false,
            Defer::ByHandle => {
                let mut peek = d.clone();
                let Ok(fh) = peek.opaque("fh", nfs3::limits::FHSIZE3) else {
                    return false;
                };
                vfs::HandleKey::parse(&fh)
                    .ok()
                    .and_then(|h| s.exports.by_id(h.export))
                    .is_some_and(|e| e.backend().remote())
            }
        }
    }
}

impl Program for Deferring {
    fn program(&self) -> u32 {
        self.service.program()
    }

    fn version(&self) -> u32 {
        self.service.version()
    }

    fn procedure_name(&self, procedure: u32) -> Option<&'static str> {
        self.service.procedure_name(procedure)
    }

    fn call(
        &self,
        ctx: &CallContext,
        d: &mut Decoder,
        e: &mut Encoder,
    ) -> Option<Result<(), ProcError>> {
        self.procedure_name(ctx.procedure)?;
        if !sync::blocking::allowed() && self.must_defer(ctx.procedure, d) {
            return Some(Err(ProcError::WouldBlock));
        }
        self.service.call(ctx, d, e)
    }

    fn max_reply_bytes(&self, procedure: u32) -> usize {
        self.service.max_reply_bytes(procedure)
    }

    fn cache_class(&self, procedure: u32) -> Option<CacheClass> {
        self.service.cache_class(procedure)
    }
}
