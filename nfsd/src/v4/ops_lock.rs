//! Byte-range locks (RFC 8881 sections 9, 18.10-18.12): LOCK, LOCKT and LOCKU over the
//! server's one lock manager (`granary-locks`, shared with NLM, so NFSv3 and NFSv4
//! clients exclude each other) and `state4`'s lock stateids.
//!
//! - Ranges are NFSv4's: a length of all ones reaches the end of the file; a length of 0
//!   or an offset + length past 2^64 - 1 is `NFS4ERR_INVAL`. POSIX split and merge are
//!   the lock manager's, so `NFS4ERR_LOCK_RANGE` is never needed.
//! - The first LOCK of a lock-owner names an open (`open_to_lock_owner4`); later ones
//!   and LOCKU name the lock stateid, whose seqid goes up with each change. The
//!   `clientid` inside a 4.1 `lock_owner4` is ignored (section 18.10.3): the session's
//!   client is the owner's.
//! - A refused LOCK or LOCKT is `NFS4ERR_DENIED` with the lock in the way: its range,
//!   type and owner (an NLM holder is reported with client id 0 and its caller name).
//! - READW_LT/WRITEW_LT are polls: a refused one keeps its place in the file's queue
//!   while the client asks again within [`LOCK_POLL_KEEPS_PLACE_SECS`], so a later
//!   request for the same bytes is refused in its favour. When its range frees, the
//!   lock manager wakes it through [`NotifyLock`], which sends CB_NOTIFY_LOCK on the
//!   client's back channel. One that would wait for an owner that waits, directly or
//!   through others and over either protocol, for its own lock-owner is
//!   `NFS4ERR_DEADLOCK` and does not wait.
//! - After a restart, a LOCK with `reclaim` set takes back a lock of a client the
//!   previous run recorded, during the grace period; a new LOCK or a LOCKT gets
//!   `NFS4ERR_GRACE` while NFSv4's or NLM's grace period runs ([`crate::grace`]).
//! - A courteous server: a lock of a client whose lease ran out is in nobody's way; the
//!   first request it is in the way of releases that client's state.
//! - Locks are advisory: READ and WRITE never wait for them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use locks::{Conflict, Kind, LockError, Owner, Range, Request, Wait, Wake};
use nfs4::compound::{CbArgOp, CbNotifyLockArgs};
use nfs4::ops::seq_status;
use nfs4::ops::{LockArgs, LockDenied4, Locker4, LocktArgs, LockuArgs, NfsLockType4};
use nfs4::results::{LockRes, Nothing};
use nfs4::types::NfsFh4;
use nfs4::types::{Opaque4, StateOwner4};
use nfs4::{Nfsstat4, Stateid4};
use state4::{ClientId, LockKey};
use vfs::FileType;

use super::callback::Callbacks;
use super::compound::{Cx, Fh};
use super::convert::status_of;
use super::FileKey;
use crate::heads::{self, Across};
use crate::limits::LOCK_POLL_KEEPS_PLACE_SECS;

/// Why a LOCK or LOCKT did not succeed.
enum Refusal {
    Denied(LockDenied4),
    Status(Nfsstat4),
}

impl From<Nfsstat4> for Refusal {
    fn from(s: Nfsstat4) -> Self {
        Self::Status(s)
    }
}

fn answer<T>(r: Result<T, Refusal>) -> LockRes<T> {
    match r {
        Ok(v) => LockRes::Ok(v),
        Err(Refusal::Denied(d)) => LockRes::Denied(d),
        Err(Refusal::Status(s)) => LockRes::Err(s),
    }
}

/// The lock's kind, and whether it is a blocking (polling) request.
fn kind_of(t: NfsLockType4) -> (Kind, bool) {
    match t {
        NfsLockType4::Read => (Kind::Read, false),
        NfsLockType4::Write => (Kind::Write, false),
        NfsLockType4::ReadW => (Kind::Read, true),
        NfsLockType4::WriteW => (Kind::Write, true),
    }
}

fn range(offset: u64, length: u64) -> Result<Range, Nfsstat4> {
    Range::nfs4(offset, length).map_err(|_| Nfsstat4::Inval)
}

/// The current filehandle as a file that can be locked: a regular file.
fn lock_target(cx: &Cx<'_>) -> Result<FileKey, Nfsstat4> {
    let Fh::File { export, id, .. } = cx.cur()? else {
        return Err(Nfsstat4::Isdir);
    };
    match export.getattr(*id).map_err(status_of)?.file_type {
        FileType::Regular => Ok(Cx::key(export, *id)),
        FileType::Directory => Err(Nfsstat4::Isdir),
        FileType::Symlink => Err(Nfsstat4::Symlink),
        _ => Err(Nfsstat4::WrongType),
    }
}

/// The status for a failure of the other heads' check ([`heads`]): a head keeping rows
/// for its most files is a bound (NFS4ERR_RESOURCE), anything else the engine's
/// (NFS4ERR_DELAY while the database is down).
fn head_status(e: vfs::FsError) -> Nfsstat4 {
    match e {
        vfs::FsError::NoSpc => Nfsstat4::Resource,
        e => status_of(e),
    }
}

/// LOCK4denied for the lock in the way.
fn denied(c: &Conflict) -> LockDenied4 {
    let (offset, length) = c.range.to_nfs4();
    let owner = match c.owner.client.nfs4_clientid() {
        Some(clientid) => StateOwner4 {
            clientid,
            owner: Opaque4(c.owner.id.clone()),
        },
        None => StateOwner4 {
            clientid: 0,
            owner: Opaque4(c.owner.client.name.clone()),
        },
    };
    LockDenied4 {
        offset,
        length,
        locktype: match c.kind {
            Kind::Read => NfsLockType4::Read,
            Kind::Write => NfsLockType4::Write,
        },
        owner,
    }
}

/// Asks the lock manager; when a client whose lease ran out is in the way, releases it
/// and asks once more (a courteous server).
fn ask(cx: &Cx<'_>, client: ClientId, req: &Request) -> Result<(), LockError> {
    let mgr = cx.s.state.lock_manager();
    let first = mgr.lock(req, cx.now);
    let Err(LockError::Denied { conflict, .. }) = &first else {
        return first.map(|_| ());
    };
    match conflict.owner.client.nfs4_clientid() {
        Some(holder) if holder != client && cx.s.state.expire_client(holder, cx.now) => {
            tracing::info!(
                client = format_args!("{holder:#x}"),
                "NFSv4 client's lease had run out and its lock was in another's way: its state is released"
            );
            mgr.lock(req, cx.now).map(|_| ())
        }
        _ => first.map(|_| ()),
    }
}

pub fn lock(cx: &mut Cx<'_>, a: &LockArgs) -> LockRes<Stateid4> {
    answer(try_lock(cx, a))
}

fn try_lock(cx: &mut Cx<'_>, a: &LockArgs) -> Result<Stateid4, Refusal> {
    let client = cx.client()?;
    let file = lock_target(cx)?;
    let (kind, blocking) = kind_of(a.locktype);
    let range = range(a.offset, a.length)?;
    cx.s.state.check_lock_grace(client, a.reclaim, cx.now)?;
    if !a.reclaim && cx.s.core.lock_grace.any(cx.now) {
        // NLM hosts may still be taking back their locks (crate::grace).
        return Err(Nfsstat4::Grace.into());
    }
    let write = kind == Kind::Write;
    let (owner, open) = match &a.locker {
        Locker4::New(n) => {
            let sid = cx.stateid(&n.open_stateid)?;
            let owner = n.lock_owner.owner.0.clone();
            let open = cx.s.state.lock_open(client, &sid, &owner, &file, write)?;
            (owner, open)
        }
        Locker4::Existing(e) => {
            let sid = cx.stateid(&e.lock_stateid)?;
            let l = cx.s.state.lock_stateid(client, &sid, &file, Some(write))?;
            (l.owner, l.open)
        }
    };
    let wait = if blocking {
        Wait::Poll {
            deadline: cx.now + Duration::from_secs(LOCK_POLL_KEEPS_PLACE_SECS),
        }
    } else {
        Wait::No
    };
    let req = Request {
        file: file.lock_key(),
        owner: Owner::nfs4(client, owner.clone()),
        kind,
        range,
        wait,
    };
    let notify = &cx.s.notify_lock;
    let mgr = cx.s.state.lock_manager();
    let asked = match heads::lock(&cx.s.core.exports, mgr, &req, cx.now, || {
        ask(cx, client, &req)
    }) {
        Across::Local(r) => {
            heads::stop_waiting(&cx.s.core, req.file, &req.owner);
            r
        }
        // Not queued in the manager: a blocking request waits here for the other head
        // (CB_NOTIFY_LOCK when it frees); the client polls meanwhile, and asks the other
        // heads again each time.
        Across::OtherHead { conflict, mark } => {
            if blocking {
                // The handle first: the wait may end (and tell) before `wait` returns.
                if let Some(Fh::File { raw, .. }) = cx.cur.as_ref() {
                    notify.waiting(client, &owner, req.file, raw.clone());
                }
                if !heads::wait(&cx.s.core, &req, false, mark, cx.now) {
                    notify.done(client, &owner, req.file);
                }
            }
            Err(LockError::Denied {
                conflict,
                queued: None,
            })
        }
        Across::Engine(e) => return Err(head_status(e).into()),
    };
    match asked {
        Ok(()) => notify.done(client, &owner, req.file),
        Err(LockError::Denied { conflict, queued }) => {
            if let (Some(_), Some(Fh::File { raw, .. })) = (queued, cx.cur.as_ref()) {
                notify.waiting(client, &owner, req.file, raw.clone());
            }
            return Err(Refusal::Denied(denied(&conflict)));
        }
        Err(LockError::Deadlock { conflict }) => {
            tracing::debug!(peer = %cx.ctx.peer, holder = ?conflict.owner, "NFSv4 blocking LOCK would deadlock");
            notify.done(client, &owner, req.file);
            return Err(Nfsstat4::Deadlock.into());
        }
        Err(LockError::Limit(reason)) => {
            tracing::debug!(peer = %cx.ctx.peer, %reason, "NFSv4 LOCK refused by a bound");
            return Err(Nfsstat4::Resource.into());
        }
    }
    let sid = match cx.s.state.lock_granted(client, &owner, &file, open) {
        Ok(sid) => sid,
        Err(e) => {
            // The open was closed while the lock was taken: nothing may hold it now.
            cx.s.state
                .lock_manager()
                .unlock(req.file, &req.owner, range, cx.now);
            return Err(e.into());
        }
    };
    if a.reclaim {
        // One line per lock a client of the previous run takes back: only in the grace
        // period, and bounded by the locks it may hold.
        tracing::info!(
            client = format_args!("{client:#x}"),
            write,
            "NFSv4 lock reclaimed"
        );
    }
    cx.cur_sid = Some(sid);
    Ok(sid)
}

pub fn lockt(cx: &mut Cx<'_>, a: &LocktArgs) -> LockRes<Nothing> {
    answer(try_lockt(cx, a))
}

fn try_lockt(cx: &mut Cx<'_>, a: &LocktArgs) -> Result<Nothing, Refusal> {
    let client = cx.client()?;
    let file = lock_target(cx)?;
    let (kind, _) = kind_of(a.locktype);
    let range = range(a.offset, a.length)?;
    if cx.s.state.in_grace(cx.now) || cx.s.core.lock_grace.any(cx.now) {
        // Locks not yet reclaimed, over either protocol, are not there to be seen
        // (knfsd answers the same).
        return Err(Nfsstat4::Grace.into());
    }
    let owner = Owner::nfs4(client, a.owner.owner.0.clone());
    let mgr = cx.s.state.lock_manager();
    let Some(c) = mgr.test(file.lock_key(), &owner, kind, range) else {
        return lockt_other_heads(cx, &file, kind, range);
    };
    let expired = c
        .owner
        .client
        .nfs4_clientid()
        .is_some_and(|holder| holder != client && cx.s.state.expire_client(holder, cx.now));
    match expired.then(|| mgr.test(file.lock_key(), &owner, kind, range)) {
        Some(None) => lockt_other_heads(cx, &file, kind, range),
        Some(Some(again)) => Err(Refusal::Denied(denied(&again))),
        None => Err(Refusal::Denied(denied(&c))),
    }
}

/// LOCKT past this server's own locks: another head's lock in the way ([`heads`]).
fn lockt_other_heads(
    cx: &Cx<'_>,
    file: &FileKey,
    kind: Kind,
    range: Range,
) -> Result<Nothing, Refusal> {
    match heads::test(&cx.s.core.exports, file.lock_key(), kind, range) {
        Ok(None) => Ok(Nothing),
        Ok(Some(c)) => Err(Refusal::Denied(denied(&c))),
        Err(e) => Err(head_status(e).into()),
    }
}

pub fn locku(cx: &mut Cx<'_>, a: &LockuArgs) -> Result<Stateid4, Nfsstat4> {
    let client = cx.client()?;
    let file = lock_target(cx)?;
    let range = range(a.offset, a.length)?;
    let sid = cx.stateid(&a.lock_stateid)?;
    let l = cx.s.state.lock_stateid(client, &sid, &file, None)?;
    heads::unlock(&cx.s.core.exports, file.lock_key(), || {
        cx.s.state
            .lock_manager()
            .unlock(file.lock_key(), &l.lock_owner(), range, cx.now);
    });
    let new = cx.s.state.lock_changed(client, &sid)?;
    cx.cur_sid = Some(new);
    Ok(new)
}

/// CB_NOTIFY_LOCK (RFC 8881 section 20.11): the lock manager hands this waker the NFSv4
/// waiters whose ranges came free, and it tells each client on its back channel, naming
/// the file by the handle the client locked it through and the lock-owner the client
/// sent. OPEN offers it (`OPEN4_RESULT_MAY_NOTIFY_LOCK`) only to a client whose back
/// channel works ([`may_notify_lock`]); a Linux client then waits for the notice (at most
/// 30 s) before it asks again. A notice that cannot be sent changes nothing: the waiter
/// keeps its place and the client asks again when its wait ends.
pub struct NotifyLock {
    callbacks: Arc<Callbacks>,
    /// The handle each waiting (client, lock-owner, file) locked through; at most
    /// [`crate::limits::MAX_LOCK_NOTIFY_HANDLES`] (past it a waiter is not told: it polls).
    handles: Mutex<HashMap<(ClientId, Bytes, locks::FileKey), Bytes>>,
}

impl NotifyLock {
    #[must_use]
    pub fn new(callbacks: Arc<Callbacks>) -> Self {
        Self {
            callbacks,
            handles: Mutex::new(HashMap::new()),
        }
    }

    fn handles(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(ClientId, Bytes, locks::FileKey), Bytes>> {
        self.handles.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A refused blocking LOCK waits: remember its handle for the notice.
    fn waiting(&self, client: ClientId, owner: &Bytes, file: locks::FileKey, fh: Bytes) {
        let mut h = self.handles();
        if h.len() < crate::limits::MAX_LOCK_NOTIFY_HANDLES {
            h.insert((client, owner.clone(), file), fh);
        }
    }

    /// Keeps the handles of the clients `live` says are still there (the lease timer
    /// drops those of clients that went away).
    pub fn retain(&self, live: impl Fn(ClientId) -> bool) {
        self.handles().retain(|(client, _, _), _| live(*client));
    }

    /// The owner got its lock (or stopped waiting): nothing to tell.
    fn done(&self, client: ClientId, owner: &Bytes, file: locks::FileKey) {
        self.handles().remove(&(client, owner.clone(), file));
    }
}

impl locks::Waker for NotifyLock {
    fn wake(&self, wakes: &[Wake]) {
        for w in wakes.iter().filter(|w| !w.granted) {
            let Some(client) = w.owner.client.nfs4_clientid() else {
                continue;
            };
            let Some(fh) = self.handles().remove(&(client, w.owner.id.clone(), w.file)) else {
                continue;
            };
            let op = CbArgOp::NotifyLock(CbNotifyLockArgs {
                cnla_fh: NfsFh4(fh),
                cnla_lock_owner: StateOwner4 {
                    clientid: client,
                    owner: Opaque4(w.owner.id.clone()),
                },
            });
            let call = self.callbacks.cb_compound(client, vec![op]);
            let sent = self.callbacks.spawn(client, async move {
                if let Err(e) = call.await {
                    tracing::debug!(client = format_args!("{client:#x}"), error = ?e, "CB_NOTIFY_LOCK not delivered; the client polls");
                }
            });
            if !sent {
                tracing::debug!(
                    client = format_args!("{client:#x}"),
                    "no back channel for CB_NOTIFY_LOCK; the client polls"
                );
            }
        }
    }
}

/// `OPEN4_RESULT_MAY_NOTIFY_LOCK` when the session's back channel works, else 0.
pub fn may_notify_lock(cx: &Cx<'_>) -> u32 {
    let Some(session) = &cx.session else {
        return 0;
    };
    let down = cx.s.callbacks.status_flags(session.client, &session.id);
    if down & (seq_status::CB_PATH_DOWN | seq_status::CB_PATH_DOWN_SESSION) == 0 {
        nfs4::ops::open_result::MAY_NOTIFY_LOCK
    } else {
        0
    }
}
