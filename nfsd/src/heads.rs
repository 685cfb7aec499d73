//! Byte-range locks across heads, for both lock front ends (NFSv4 `ops_lock`, NLM):
//! on an export whose backend has [`vfs::HeadLocks`] (the object backend, several
//! servers on one namespace), a LOCK is checked against the other heads' locks before
//! the server's own lock manager is asked, LOCKT and NLM TEST look there too, and every
//! change of the manager's state on such a file is reported to the backend (the
//! manager's [`locks::Observer`]), which records it for the other heads.
//!
//! The server's lock manager stays the authority among its own clients: owners, queues,
//! deadlock detection, grace. Another head's lock in the way is reported as a holder
//! named `granary head N` (NFSv4: client id 0; NLM: svid 0).
//!
//! **Waiting across heads** ([`HeadWaits`]). A blocking request refused for another
//! head's lock (NLM LOCK with `block`, NFSv4 READW_LT/WRITEW_LT) waits here, outside the
//! lock manager's queues, and the backend watches its file ([`HeadLocks::watch`]). When
//! another head frees ranges of the file (the backend hears it from the database, or its
//! lease ran out), one thread of this server asks again for each waiter of the file: an
//! NLM waiter's LOCK is taken as a local waiter's would be, and handed to NLM's waker
//! (GRANTED); an NFSv4 waiter whose bytes are free of other heads is told
//! (CB_NOTIFY_LOCK) and asks again itself. A waiter that finds a local lock in its way
//! then joins the manager's queue, which wakes it as any other. Waiters are bounded
//! ([`crate::limits::MAX_HEAD_WAITERS`]) and let go when their client stops asking
//! ([`crate::limits::LOCK_POLL_KEEPS_PLACE_SECS`]). Deadlocks across heads are not
//! detected.
//!
//! Share reservations (NFSv4 OPEN's deny modes, NLM SHARE) go the same way through
//! [`vfs::HeadShares`]: an OPEN or SHARE is checked against the other heads before the
//! server's one share table is asked ([`share`]), a CLOSE, OPEN_DOWNGRADE or UNSHARE
//! is recorded before its reply ([`unshare`]), and every other change of the table
//! (a lease expiry, FREE_ALL) reaches the backend through the table's observer.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;
use locks::{
    Client, Conflict, FileKey, Kind, LockError, LockManager, Owner, Protocol, Range, Request,
    ShareTable, Wait, WaiterId, Wake,
};
use vfs::{
    Export, ExportId, ExportTable, FileId, FsError, HeadLock, HeadLocks, HeadShare, HeadShares,
    LockSpan, ShareMode,
};

use crate::limits::{HEAD_WAIT_TICK, LOCK_POLL_KEEPS_PLACE_SECS, MAX_HEAD_WAITERS};
use crate::NfsState;

/// Connects each export whose backend keeps locks across heads to the server's lock
/// manager: the backend reads what the manager holds on a file
/// ([`LockManager::mirror`]), the manager tells it which files changed, and the
/// backend tells `waits` which watched files may have freed on another head.
pub fn attach(exports: &ExportTable, mgr: &Arc<LockManager>, waits: &Arc<HeadWaits>) {
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
        let waits = Arc::downgrade(waits);
        h.on_freed(Arc::new(move |id: FileId| {
            if let Some(w) = waits.upgrade() {
                w.freed(FileKey { export, file: id.0 });
            }
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
    /// Another head's lock is in the way; the manager was not asked. `mark`: the
    /// backend's [`HeadLocks::notices`] before it looked, for [`wait`].
    OtherHead { conflict: Conflict, mark: u64 },
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
    let mark = h.notices();
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
        Ok(Some(other)) => Across::OtherHead {
            conflict: conflict(&other),
            mark,
        },
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

/// Requests of this server that wait for other heads' ranges (see the module's doc).
#[derive(Default)]
pub struct HeadWaits {
    book: Mutex<WaitBook>,
    /// Signalled when a file is due.
    due: Condvar,
    /// The thread that asks again runs (once per server).
    started: OnceLock<()>,
}

#[derive(Default)]
struct WaitBook {
    files: HashMap<FileKey, Vec<HeadWaiter>>,
    waiters: usize,
    /// Files to ask again for: another head may have freed ranges of them.
    due: HashSet<FileKey>,
    /// Numbers each registration, so a retry's outcome ends only the one it tried.
    next: u64,
}

#[derive(Debug, Clone)]
struct HeadWaiter {
    owner: Owner,
    kind: Kind,
    range: Range,
    /// NLM (`Wait::Grant`): the lock is taken for it and GRANTED sent. NFSv4: it is told
    /// (CB_NOTIFY_LOCK) and asks again.
    grant: bool,
    /// Let go after this unless its client asks again.
    deadline: Duration,
    seq: u64,
}

impl HeadWaits {
    fn book(&self) -> MutexGuard<'_, WaitBook> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Requests waiting for other heads' ranges now.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.book().waiters
    }

    /// The backend: another head may have freed ranges of `file`.
    fn freed(&self, file: FileKey) {
        let mut b = self.book();
        if b.files.contains_key(&file) && b.due.insert(file) {
            self.due.notify_one();
        }
    }

    /// Waits up to `tick` for due files, and takes them with their waiters.
    fn next_due(&self, tick: Duration) -> Vec<(FileKey, Vec<HeadWaiter>)> {
        let mut b = self.book();
        if b.due.is_empty() {
            b = self
                .due
                .wait_timeout(b, tick)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let due: Vec<FileKey> = b.due.drain().collect();
        due.into_iter()
            .filter_map(|f| b.files.get(&f).map(|ws| (f, ws.clone())))
            .collect()
    }

    /// Ends the waiters of `file` that `keep` refuses; whether that left the file
    /// without any.
    fn end(&self, file: FileKey, keep: impl Fn(&HeadWaiter) -> bool) -> bool {
        let mut guard = self.book();
        let b = &mut *guard;
        let Some(ws) = b.files.get_mut(&file) else {
            return false;
        };
        let before = ws.len();
        ws.retain(|w| keep(w));
        let gone = before - ws.len();
        let empty = ws.is_empty();
        if empty {
            b.files.remove(&file);
            b.due.remove(&file);
        }
        b.waiters -= gone;
        empty && gone > 0
    }

    /// Lets go of the waiters whose deadline passed; the files left without any.
    fn expire(&self, now: Duration) -> Vec<FileKey> {
        let mut guard = self.book();
        let b = &mut *guard;
        let mut gone = 0;
        let mut empty = Vec::new();
        for (f, ws) in &mut b.files {
            let before = ws.len();
            ws.retain(|w| w.deadline > now);
            gone += before - ws.len();
            if ws.is_empty() {
                empty.push(*f);
            }
        }
        for f in &empty {
            b.files.remove(f);
            b.due.remove(f);
        }
        b.waiters -= gone;
        empty
    }
}

fn unwatch(exports: &ExportTable, file: FileKey) {
    if let Some(h) = head_locks(exports, file) {
        h.unwatch(FileId(file.file));
    }
}

/// `req`, refused for another head's lock ([`Across::OtherHead`] with `mark`), waits for
/// it: `grant` for NLM (the lock is taken and GRANTED sent when it frees), else NFSv4
/// (told with CB_NOTIFY_LOCK). Asking again replaces the owner's earlier request on the
/// file and moves its deadline on. False at [`MAX_HEAD_WAITERS`] (or on an export
/// without heads): the request does not wait, and its client polls.
pub fn wait(core: &NfsState, req: &Request, grant: bool, mark: u64, now: Duration) -> bool {
    let Some(h) = head_locks(&core.exports, req.file) else {
        return false;
    };
    {
        let mut guard = core.head_waits.book();
        let b = &mut *guard;
        b.next += 1;
        let (seq, full) = (b.next, b.waiters >= MAX_HEAD_WAITERS);
        let w = HeadWaiter {
            owner: req.owner.clone(),
            kind: req.kind,
            range: req.range,
            grant,
            deadline: now + Duration::from_secs(LOCK_POLL_KEEPS_PLACE_SECS),
            seq,
        };
        let ws = b.files.entry(req.file).or_default();
        if let Some(old) = ws.iter_mut().find(|o| o.owner == req.owner) {
            *old = w;
        } else if full {
            if ws.is_empty() {
                b.files.remove(&req.file);
            }
            rpc::warn_limited!(
                rpc::ratelog::Kind::Refused,
                "too many requests wait for other heads' locks (MAX_HEAD_WAITERS); this one polls"
            );
            return false;
        } else {
            ws.push(w);
            b.waiters += 1;
        }
    }
    h.watch(FileId(req.file.file), mark);
    true
}

/// `owner` no longer waits on `file` for another head (granted, cancelled, refused).
pub fn stop_waiting(core: &NfsState, file: FileKey, owner: &Owner) {
    if core.head_waits.end(file, |w| w.owner != *owner) {
        unwatch(&core.exports, file);
    }
}

/// No owner of `client` waits for another head any more (NLM FREE_ALL, SM_NOTIFY).
pub fn stop_waiting_client(core: &NfsState, client: &Client) {
    let files: Vec<FileKey> = core.head_waits.book().files.keys().copied().collect();
    for f in files {
        if core.head_waits.end(f, |w| w.owner.client != *client) {
            unwatch(&core.exports, f);
        }
    }
}

/// Starts the thread that asks again for the requests waiting across heads, once per
/// server and only when an export has heads; `clock` is the front ends' (the lock
/// manager's times).
pub fn start_waiting(core: &Arc<NfsState>, clock: Arc<dyn gtime::Clock>) {
    if !core
        .exports
        .iter()
        .any(|e| e.backend().head_locks().is_some())
    {
        return;
    }
    if core.head_waits.started.set(()).is_err() {
        return;
    }
    let weak = Arc::downgrade(core);
    let spawned = std::thread::Builder::new()
        .name("granary-head-waits".into())
        .spawn(move || asker(&weak, clock.as_ref()));
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the thread for lock waits across heads; their clients poll");
    }
}

/// The thread: asks again for the waiters of each due file, lets go of expired ones;
/// ends with the server.
fn asker(core: &Weak<NfsState>, clock: &dyn gtime::Clock) {
    loop {
        let Some(core) = core.upgrade() else {
            return;
        };
        let due = core.head_waits.next_due(HEAD_WAIT_TICK);
        let now = clock.monotonic();
        for (file, ws) in due {
            for w in ws {
                if ask_again(&core, file, &w, now) && core.head_waits.end(file, |o| o.seq != w.seq)
                {
                    unwatch(&core.exports, file);
                }
            }
        }
        for file in core.head_waits.expire(now) {
            unwatch(&core.exports, file);
        }
    }
}

/// Whether `held` (an owner's locks on a file, in order of offset) hold all of `w`'s
/// range, as strongly as it asks.
fn holds(held: &[(Range, Kind)], w: &HeadWaiter) -> bool {
    let mut next = w.range.start();
    for (r, _) in held
        .iter()
        .filter(|(_, k)| *k == Kind::Write || w.kind == Kind::Read)
    {
        if r.end() < next {
            continue;
        }
        if r.start() > next {
            return false;
        }
        if r.end() >= w.range.end() {
            return true;
        }
        next = r.end() + 1;
    }
    false
}

/// Asks again for `w` on `file`: true when it waits here no more (granted or told, or
/// now queued in the lock manager, or refused for good).
fn ask_again(core: &NfsState, file: FileKey, w: &HeadWaiter, now: Duration) -> bool {
    let wake = |granted: bool| Wake {
        waiter: WaiterId::ELSEWHERE,
        file,
        owner: w.owner.clone(),
        kind: w.kind,
        range: w.range,
        granted,
    };
    if !w.grant {
        // NFSv4: tell it once no other head is in its way; it asks again itself.
        return match test(&core.exports, file, w.kind, w.range) {
            Ok(None) => {
                core.locks.wake(vec![wake(false)]);
                true
            }
            Ok(Some(_)) | Err(_) => false,
        };
    }
    if holds(&core.locks.locks_of(file, &w.owner), w) {
        // Granted already (its client asked again meanwhile, or an earlier round): a
        // second GRANTED would be refused by the client and give the lock back.
        return true;
    }
    let req = Request {
        file,
        owner: w.owner.clone(),
        kind: w.kind,
        range: w.range,
        wait: Wait::Grant,
    };
    match lock(&core.exports, &core.locks, &req, now, || {
        core.locks.lock(&req, now).map(|_| ())
    }) {
        Across::OtherHead { .. } | Across::Engine(_) => false,
        Across::Local(Ok(())) => {
            core.locks.wake(vec![wake(true)]);
            true
        }
        // In the manager's queue now: it grants the lock when the local holder lets go.
        Across::Local(Err(LockError::Denied {
            queued: Some(_), ..
        })) => true,
        Across::Local(Err(e)) => {
            tracing::debug!(error = ?e, owner = ?w.owner, "NLM waiter across heads refused when it asked again; its client asks again");
            true
        }
    }
}
