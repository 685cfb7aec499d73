//! Byte-range locks across heads, for both lock front ends (NFSv4 `ops_lock`, NLM):
//! on an export whose backend has [`vfs::HeadLocks`] (the object backend, several
//! servers on one namespace), a LOCK is checked against the other heads' locks before
//! the server's own lock manager is asked, LOCKT and NLM TEST look there too, and every
//! change of the manager's state on such a file is reported to the backend (the
//! manager's [`locks::Observer`]), which records it for the other heads.
//!
//! The server's lock manager stays the authority among its own clients: owners, queues,
//! deadlock detection, grace. Another head's lock in the way is reported as a holder
//! named `granary head N` (NFSv4: client id 0; NLM: svid 0), and is never waited for
//! here: NFSv4 clients poll, a blocking NLM request is answered `NLM4_BLOCKED` without a
//! place in the queue, and the client's own retry takes the lock once it is free.
//!
//! Share reservations (NFSv4 OPEN's deny modes, NLM SHARE) go the same way through
//! [`vfs::HeadShares`]: an OPEN or SHARE is checked against the other heads before the
//! server's one share table is asked ([`share`]), a CLOSE, OPEN_DOWNGRADE or UNSHARE
//! is recorded before its reply ([`unshare`]), and every other change of the table
//! (a lease expiry, FREE_ALL) reaches the backend through the table's observer.

use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use locks::{
    Client, Conflict, FileKey, Kind, LockError, LockManager, Owner, Protocol, Range, Request,
    ShareTable,
};
use vfs::{
    Export, ExportId, ExportTable, FileId, FsError, HeadLock, HeadLocks, HeadShare, HeadShares,
    LockSpan, ShareMode,
};

/// Connects each export whose backend keeps locks across heads to the server's lock
/// manager: the backend reads what the manager holds on a file
/// ([`LockManager::mirror`]), and the manager tells it which files changed.
pub fn attach(exports: &ExportTable, mgr: &Arc<LockManager>) {
    let mut watched = Vec::new();
    for e in exports.iter() {
        let Some(h) = e.backend().head_locks() else {
            continue;
        };
        // Weak: the manager holds the observer, which holds the export; the export's
        // backend must not hold the manager back.
        let weak: Weak<LockManager> = Arc::downgrade(mgr);
        let export = e.id.0;
        h.attach(Arc::new(move |id: FileId| {
            weak.upgrade().map_or_else(Vec::new, |m| {
                m.mirror(FileKey { export, file: id.0 })
                    .into_iter()
                    .map(|(r, k)| span(k, r))
                    .collect()
            })
        }));
        watched.push(Arc::clone(e));
    }
    if !watched.is_empty() {
        mgr.set_observer(Arc::new(Watch { exports: watched }));
    }
}

/// The manager's observer: passes each change on to the export's backend.
struct Watch {
    exports: Vec<Arc<Export>>,
}

impl locks::Observer for Watch {
    fn changed(&self, file: Option<FileKey>) {
        for e in &self.exports {
            let Some(h) = e.backend().head_locks() else {
                continue;
            };
            match file {
                Some(f) if f.export == e.id.0 => h.changed(Some(FileId(f.file))),
                Some(_) => {}
                None => h.changed(None),
            }
        }
    }
}

fn head_locks(exports: &ExportTable, file: FileKey) -> Option<&dyn HeadLocks> {
    exports.by_id(ExportId(file.export))?.backend().head_locks()
}

fn span(kind: Kind, range: Range) -> LockSpan {
    LockSpan {
        exclusive: kind == Kind::Write,
        first: range.start(),
        last: range.end(),
    }
}

/// Another head's lock as the front ends report a holder: the owner `granary head N`,
/// an NLM-style owner so that NFSv4 says client id 0 and NLM says svid 0.
fn conflict(h: &HeadLock) -> Conflict {
    let name = Bytes::from(format!("granary head {}", h.head));
    let mut id = vec![0u8; 4];
    id.extend_from_slice(&name);
    Conflict {
        owner: Owner {
            client: Client {
                protocol: Protocol::Nlm,
                name,
            },
            id: Bytes::from(id),
        },
        kind: if h.span.exclusive {
            Kind::Write
        } else {
            Kind::Read
        },
        range: Range::new(h.span.first, h.span.last).unwrap_or(Range::WHOLE),
    }
}

/// What a LOCK came to.
pub enum Across {
    /// The server's lock manager answered (after the other heads were checked, where
    /// the export has them).
    Local(Result<(), LockError>),
    /// Another head's lock is in the way; the manager was not asked.
    OtherHead(Conflict),
    /// The other heads could not be checked or the lock not recorded: the engine is
    /// down (`Jukebox`: NFS4ERR_DELAY, NLM4_DENIED_NOLOCKS) or this head keeps rows for
    /// its most files (`NoSpc`: NFS4ERR_RESOURCE, NLM4_DENIED_NOLOCKS).
    Engine(FsError),
}

/// A LOCK of `req`: `local` asks the server's lock manager. On an export with heads, it
/// runs only if no other head's lock is in the way, and the answer comes after the
/// backend recorded what it changed. When the record fails after `local` took a lock
/// for an owner that held nothing on the file before, that lock is given back (no lock
/// a client was not told of); a changed lock of an owner that held some is kept (the
/// client asks again, and the backend records it once the engine answers).
pub fn lock(
    exports: &ExportTable,
    mgr: &LockManager,
    req: &Request,
    now: Duration,
    local: impl FnOnce() -> Result<(), LockError>,
) -> Across {
    let Some(h) = head_locks(exports, req.file) else {
        return Across::Local(local());
    };
    let fresh = mgr.locks_of(req.file, &req.owner).is_empty();
    let mut local = Some(local);
    let mut got = None;
    let r = h.lock(
        FileId(req.file.file),
        span(req.kind, req.range),
        &mut || {
            if let Some(f) = local.take() {
                got = Some(f());
            }
        },
    );
    match r {
        Ok(Some(other)) => Across::OtherHead(conflict(&other)),
        Ok(None) => got.map_or(Across::Engine(FsError::ServerFault), Across::Local),
        Err(e) => {
            if fresh && matches!(got, Some(Ok(()))) {
                mgr.unlock(req.file, &req.owner, req.range, now);
            }
            Across::Engine(e)
        }
    }
}

/// LOCKT, NLM TEST: another head's lock in the way of `kind` on `range` (asked only
/// when the server's own manager found none).
///
/// # Errors
/// The engine's: the caller answers NFS4ERR_DELAY / NLM4_DENIED_NOLOCKS.
pub fn test(
    exports: &ExportTable,
    file: FileKey,
    kind: Kind,
    range: Range,
) -> Result<Option<Conflict>, FsError> {
    let Some(h) = head_locks(exports, file) else {
        return Ok(None);
    };
    Ok(h.test(FileId(file.file), span(kind, range))?
        .map(|o| conflict(&o)))
}

/// An unlock: `release` (the server's lock manager) runs, and on an export with heads
/// the backend's record of `file` is brought in step before the reply, so another head's
/// client finds the range free at once. A failed record is left to the backend's own
/// retries (the release itself is done).
pub fn unlock(exports: &ExportTable, file: FileKey, release: impl FnOnce()) {
    let Some(h) = head_locks(exports, file) else {
        release();
        return;
    };
    let mut release = Some(release);
    let r = h.settle(FileId(file.file), &mut || {
        if let Some(f) = release.take() {
            f();
        }
    });
    if let Some(f) = release.take() {
        f();
    }
    if let Err(e) = r {
        tracing::debug!(error = %e, "unlock not recorded for the other heads yet; recorded in the background");
    }
}

/// Connects each export whose backend keeps share reservations across heads to the
/// server's share table: the backend reads what the table holds on a file
/// ([`ShareTable::summary`]), and the table tells it which files changed.
pub fn attach_shares(exports: &ExportTable, table: &Arc<ShareTable>) {
    let mut watched = Vec::new();
    for e in exports.iter() {
        let Some(h) = e.backend().head_shares() else {
            continue;
        };
        let weak: Weak<ShareTable> = Arc::downgrade(table);
        let export = e.id.0;
        h.attach(Arc::new(move |id: FileId| {
            weak.upgrade().map_or_else(ShareMode::default, |t| {
                let (access, deny) = t.summary(FileKey { export, file: id.0 });
                ShareMode { access, deny }
            })
        }));
        watched.push(Arc::clone(e));
    }
    if !watched.is_empty() {
        table.set_observer(Arc::new(WatchShares { exports: watched }));
    }
}

/// The share table's observer: passes each change on to the export's backend.
struct WatchShares {
    exports: Vec<Arc<Export>>,
}

impl locks::Observer for WatchShares {
    fn changed(&self, file: Option<FileKey>) {
        for e in &self.exports {
            let Some(h) = e.backend().head_shares() else {
                continue;
            };
            match file {
                Some(f) if f.export == e.id.0 => h.changed(Some(FileId(f.file))),
                Some(_) => {}
                None => h.changed(None),
            }
        }
    }
}

fn head_shares(exports: &ExportTable, file: FileKey) -> Option<&dyn HeadShares> {
    exports
        .by_id(ExportId(file.export))?
        .backend()
        .head_shares()
}

/// What an OPEN or SHARE came to.
pub enum ShareAcross<T> {
    /// The server's share table answered (`local`'s result), after the other heads were
    /// checked where the export has them.
    Local(T),
    /// Another head's reservation is in the way; the table was not asked.
    OtherHead(HeadShare),
    /// The other heads could not be checked or the reservation not recorded (the
    /// engine is down, or a deny waited too long for the other heads: `Jukebox`).
    Engine(FsError),
}

/// An OPEN or SHARE asking for `access` and `deny` on `file`: `local` asks the server's
/// share table (it may refuse). On an export with heads it runs only if no other
/// head's reservation is in the way, and the answer comes after the backend recorded
/// what changed. When the record fails after `local` ran, `undo` gets its result to
/// give back what it took (no reservation a client was not told of).
pub fn share<T>(
    exports: &ExportTable,
    file: FileKey,
    access: u32,
    deny: u32,
    local: impl FnOnce() -> T,
    undo: impl FnOnce(&T),
) -> ShareAcross<T> {
    let Some(h) = head_shares(exports, file) else {
        return ShareAcross::Local(local());
    };
    let mut local = Some(local);
    let mut got = None;
    let r = h.share(FileId(file.file), ShareMode { access, deny }, &mut || {
        if let Some(f) = local.take() {
            got = Some(f());
        }
    });
    match r {
        Ok(Some(other)) => ShareAcross::OtherHead(other),
        Ok(None) => got.map_or(
            ShareAcross::Engine(FsError::ServerFault),
            ShareAcross::Local,
        ),
        Err(e) => {
            if let Some(g) = &got {
                undo(g);
            }
            ShareAcross::Engine(e)
        }
    }
}

/// A CLOSE, OPEN_DOWNGRADE or UNSHARE: `release` (the server's share table) runs, and
/// on an export with heads the backend's record of `file` is brought in step before the
/// reply, so another head's client finds the file free at once. A failed record is left
/// to the backend's own retries (the release itself is done).
pub fn unshare<T>(exports: &ExportTable, file: FileKey, release: impl FnOnce() -> T) -> T {
    let Some(h) = head_shares(exports, file) else {
        return release();
    };
    let mut release = Some(release);
    let mut got = None;
    let r = h.settle(FileId(file.file), &mut || {
        if let Some(f) = release.take() {
            got = Some(f());
        }
    });
    if let Err(e) = r {
        tracing::debug!(error = %e, "share release not recorded for the other heads yet; recorded in the background");
    }
    match (got, release) {
        (Some(v), _) => v,
        (None, Some(f)) => f(),
        // `settle` runs `release` always; unreachable, but never a panic on that.
        (None, None) => unreachable_release(),
    }
}

#[cold]
fn unreachable_release<T>() -> T {
    panic!("HeadShares::settle returned without running the release")
}
