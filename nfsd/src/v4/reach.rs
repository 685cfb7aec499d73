//! Which COMPOUNDs of a server with a remote export (object: every call waits on a
//! database or an S3 store) can reach that export, decided from the decoded operations
//! before any of them runs: a COMPOUND cannot give up half way, so one that may reach a
//! remote export runs whole on the worker's blocking pool, and one that cannot runs
//! where it arrived, under the rules of a server without a remote export
//! (`compound::run`: `may_block`, `worker_try`).
//!
//! [`reaches_remote`] follows the COMPOUND operation by operation over where its current
//! and saved filehandles can be ([`At`]): nowhere, a pseudo directory, a file of one
//! export that is not remote, or anywhere. It answers `false` only when no operation can
//! call a remote export's backend or the state the heads of an object file system share:
//!
//! - **PUTFH** of a pseudo directory's handle, or of a handle whose export (read without
//!   the MAC, as NFSv3's deferral reads it, `crate::remote`) is not remote; a handle that
//!   names no export fails PUTFH, and nothing after it runs. **PUTROOTFH** and
//!   **PUTPUBFH** when `/` is a pseudo directory or an export that is not remote.
//! - **LOOKUP** from a pseudo directory to a pseudo directory or an export that is not
//!   remote (the pseudo tree is fixed at start, so the name says which). Within an
//!   export LOOKUP stays in it: exports have no junctions (an export below another is
//!   not reached through it, [`super::pseudo`]).
//! - **LOOKUPP** from a pseudo directory (its parent). From an export's file it may come
//!   out at the pseudo directory the export sits in, from where another LOOKUP or a
//!   READDIR could enter a remote export: the filehandle is then anywhere, and an
//!   operation that uses it makes the COMPOUND remote.
//! - **READDIR** of a pseudo directory none of whose entries is a remote export (it reads
//!   each entry's root attributes). Every other operation on a pseudo directory reads
//!   nothing of an export (GETATTR takes the first export's fixed properties) or fails.
//! - Every other operation that uses the current filehandle (and RENAME, LINK, COPY and
//!   CLONE the saved one) acts on that file and its export only, and so does the state
//!   the heads share: `crate::heads` asks the other heads only for the file of a LOCK,
//!   LOCKT or LOCKU (the current filehandle), an OPEN (the file it opens, in the current
//!   directory's export) and a CLOSE or OPEN_DOWNGRADE (whose open stateid must name
//!   the current file, `ops_io::close`).
//! - Operations without a filehandle (SEQUENCE, EXCHANGE_ID, CREATE_SESSION,
//!   DESTROY_SESSION, DESTROY_CLIENTID, BIND_CONN_TO_SESSION, BACKCHANNEL_CTL,
//!   RECLAIM_COMPLETE, TEST_STATEID, FREE_STATEID) change only this server's memory
//!   (`state4`, callbacks; CREATE_SESSION's client record is deferred on its own). When
//!   that releases locks or share reservations on a remote export's file (a rebooted
//!   client's state dropped, an OPEN purging an expired courtesy client), the lock
//!   manager and share table tell the backend through their observers
//!   (`heads::attach`), which only mark the file for the backend's keeper task; the
//!   backend's `release` of an open is a no-op. SEQUENCE renews the client's lease in
//!   memory: a head's own lease in the database is its keeper's heartbeat, not a
//!   client's.
//!
//! Two checks pair with the judgement in debug builds: a COMPOUND judged local never
//! holds a remote export's file as its current or saved filehandle (`compound::execute`),
//! and runs inside `sync::blocking::remote_forbidden`, so a remote backend called from it
//! anyway, by whatever path, asserts (`backend-object`'s engine).

use nfs4::ops::ArgOp;
use nfs4::types::NfsFh4;
use nfs4::Compound4Args;
use vfs::{Export, ExportId};

use super::pseudo::Child;
use super::Nfs4State;

/// Where a filehandle can be, as far as the operations so far tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// No filehandle: an operation that needs one fails before it calls anything.
    Nothing,
    /// A pseudo directory.
    Pseudo(u32),
    /// A file of this export, which is not remote.
    Local(ExportId),
    /// Unknown: possibly a file of a remote export.
    Anywhere,
}

/// The operation may reach a remote export.
struct Remote;

/// Whether `args` may reach a remote export of `s` or the state the heads share (see
/// the module's doc). Meaningful on a server with a remote export (`s.remote`).
#[must_use]
pub fn reaches_remote(s: &Nfs4State, args: &Compound4Args) -> bool {
    let mut walk = Walk {
        s,
        cur: At::Nothing,
        saved: At::Nothing,
    };
    args.ops.iter().any(|op| walk.step(op).is_err())
}

struct Walk<'a> {
    s: &'a Nfs4State,
    cur: At,
    saved: At,
}

impl Walk<'_> {
    fn step(&mut self, op: &ArgOp) -> Result<(), Remote> {
        if (uses_cur(op) && self.cur == At::Anywhere)
            || (uses_saved(op) && self.saved == At::Anywhere)
        {
            return Err(Remote);
        }
        match op {
            ArgOp::Putfh(fh) => self.cur = self.handle(fh)?,
            ArgOp::Putrootfh | ArgOp::Putpubfh => {
                self.cur = match self.s.pseudo.root_export() {
                    Some(e) => local(e)?,
                    None => At::Pseudo(0),
                };
            }
            ArgOp::Savefh => self.saved = self.cur,
            ArgOp::Restorefh => self.cur = self.saved,
            ArgOp::Lookup(name) => {
                if let At::Pseudo(n) = self.cur {
                    self.cur = match self.s.pseudo.lookup(n, name.as_bytes()) {
                        Some(Child::Pseudo(m)) => At::Pseudo(m),
                        Some(Child::Export(e)) => local(&e)?,
                        // LOOKUP fails: nothing after it runs.
                        None => At::Nothing,
                    };
                }
            }
            ArgOp::Lookupp => {
                self.cur = match self.cur {
                    At::Pseudo(n) => At::Pseudo(self.s.pseudo.parent(n)),
                    At::Local(id) => match self.s.core.exports.by_id(id) {
                        Some(e) if self.s.pseudo.parent_of_export(e).is_none() => At::Local(id),
                        _ => At::Anywhere,
                    },
                    other => other,
                };
            }
            ArgOp::Secinfo(_) | ArgOp::SecinfoNoName(_) => self.cur = At::Nothing,
            ArgOp::Readdir(_) => {
                if let At::Pseudo(n) = self.cur {
                    let remote = self.s.pseudo.entries(n).iter().any(
                        |(_, child)| matches!(child, Child::Export(e) if e.backend().remote()),
                    );
                    if remote {
                        return Err(Remote);
                    }
                }
            }
            // OPEN and CREATE leave the current filehandle in the same export.
            _ => {}
        }
        Ok(())
    }

    /// Where PUTFH of `fh` leads.
    fn handle(&self, fh: &NfsFh4) -> Result<At, Remote> {
        let raw = fh.as_bytes();
        if let Some(n) = self.s.pseudo.parse(raw) {
            return Ok(At::Pseudo(n));
        }
        match vfs::HandleKey::parse(raw)
            .ok()
            .and_then(|h| self.s.core.exports.by_id(h.export))
        {
            Some(e) => local(e),
            // PUTFH fails (a malformed handle, or one of no export): nothing after it runs.
            None => Ok(At::Nothing),
        }
    }
}

/// An export's file, unless the export is remote.
fn local(e: &Export) -> Result<At, Remote> {
    if e.backend().remote() {
        Err(Remote)
    } else {
        Ok(At::Local(e.id))
    }
}

/// Whether `op` reads or acts on the current filehandle's file (GETFH and SAVEFH copy
/// the handle without asking anything of its export).
fn uses_cur(op: &ArgOp) -> bool {
    !matches!(
        op,
        ArgOp::Sequence(_)
            | ArgOp::Putfh(_)
            | ArgOp::Putrootfh
            | ArgOp::Putpubfh
            | ArgOp::Getfh
            | ArgOp::Savefh
            | ArgOp::Restorefh
            | ArgOp::ExchangeId(_)
            | ArgOp::CreateSession(_)
            | ArgOp::DestroySession(_)
            | ArgOp::DestroyClientid(_)
            | ArgOp::BindConnToSession(_)
            | ArgOp::BackchannelCtl(_)
            | ArgOp::ReclaimComplete(_)
            | ArgOp::TestStateid(_)
            | ArgOp::FreeStateid(_)
            | ArgOp::NotSupported(_)
            | ArgOp::Illegal(_)
    )
}

/// Whether `op` acts on the saved filehandle's file too.
fn uses_saved(op: &ArgOp) -> bool {
    matches!(
        op,
        ArgOp::Rename(_) | ArgOp::Link(_) | ArgOp::Copy(_) | ArgOp::Clone(_)
    )
}
