//! The NLM v4 procedures (XNFS chapter 10), one handler per procedure and one table.
//!
//! Each handler reads the same way: resolve the NFSv3 handle in the arguments exactly as
//! NFSv3 does (MAC, export, client address; `NLM4_STALE_FH` when it names no file), check
//! the grace period, turn (offset, length) into a range (`NLM4_FBIG` past 2^64), and make
//! one call to the lock manager. The `_MSG` variants run the same code and send the
//! result back as the matching `_RES` call to the caller's NLM; the `_RES` procedures are
//! clients' answers to such calls (only GRANTED_RES means something to a server).
//!
//! Whether the file exists is the backend's answer (GETATTR), and a backend that must
//! wait for it (the object backend asks its database) answers `WouldBlock` on the event
//! loop: every handler that names a file then answers [`ProcError::WouldBlock`] before it
//! changed anything, and the connection runs the call again on its worker's blocking
//! pool, as NFSv3 does. An engine that is down (`Jukebox`) is `NLM4_DENIED_NOLOCKS`,
//! which the Linux client retries after a few seconds, as it retries NFSv3's JUKEBOX.

use std::net::IpAddr;
use std::sync::Arc;

use locks::{FileKey, LockError, Range, Request, Wait};
use nfs3::nfs::{NfsFh3, Nfsstat3};
use nlm::limits::{NLM_PROGRAM, NLM_V4};
use nlm::nlm4::*;
use rpc::dispatch::{ProcError, Program};
use rpc::{procedure, CacheClass, CallContext, Procedure};
use vfs::FsError;
use xdr::{Decoder, Encode, Encoder};

use super::{kind, nlm_owner, share, BlockedLock, Callback, NlmState};
use crate::heads::{Across, ShareAcross};

use CacheClass::Idempotent;

pub const PROGRAM: u32 = NLM_PROGRAM;
pub const VERSION: u32 = NLM_V4;

/// Reply bound: a cookie and a holder's owner handle (each a netobj of at most 1 KiB).
const REPLY_BYTES: usize = 2 * (4 + 1024) + 64;

/// The procedures by table index: 0..=15 are procedures 0..=15, 16..=19 are 20..=23.
/// Every NLM call may be run twice harmlessly (a lock already held by its owner is
/// granted again), as knfsd keeps no reply cache for NLM either.
pub static PROCEDURES: [Procedure<NlmState>; 20] = [
    procedure!("nlm_null", null, 0, Idempotent),
    procedure!("nlm_test", test, REPLY_BYTES, Idempotent, may_block),
    procedure!("nlm_lock", lock, REPLY_BYTES, Idempotent, may_block),
    procedure!("nlm_cancel", cancel, REPLY_BYTES, Idempotent, may_block),
    procedure!("nlm_unlock", unlock, REPLY_BYTES, Idempotent, may_block),
    procedure!("nlm_granted", granted, REPLY_BYTES, Idempotent),
    procedure!("nlm_test_msg", test_msg, 0, Idempotent, may_block),
    procedure!("nlm_lock_msg", lock_msg, 0, Idempotent, may_block),
    procedure!("nlm_cancel_msg", cancel_msg, 0, Idempotent, may_block),
    procedure!("nlm_unlock_msg", unlock_msg, 0, Idempotent, may_block),
    procedure!("nlm_granted_msg", granted_msg, 0, Idempotent),
    procedure!("nlm_test_res", test_res, 0, Idempotent),
    procedure!("nlm_lock_res", ignored_res, 0, Idempotent),
    procedure!("nlm_cancel_res", ignored_res, 0, Idempotent),
    procedure!("nlm_unlock_res", ignored_res, 0, Idempotent),
    procedure!("nlm_granted_res", granted_res, 0, Idempotent),
    procedure!("nlm_share", share, REPLY_BYTES, Idempotent, may_block),
    procedure!("nlm_unshare", unshare, REPLY_BYTES, Idempotent, may_block),
    procedure!("nlm_nm_lock", nm_lock, REPLY_BYTES, Idempotent, may_block),
    procedure!("nlm_free_all", free_all, 0, Idempotent),
];

/// The table row of procedure `p`: version 4 defines no procedures 16 to 19.
fn row(p: u32) -> Option<&'static Procedure<NlmState>> {
    let index = match p {
        0..=15 => p,
        20..=23 => p - 4,
        _ => return None,
    };
    PROCEDURES.get(index as usize)
}

/// NLM v4 as an RPC program: the table with its gap (PROC_UNAVAIL for 16 to 19).
pub struct NlmProgram(pub Arc<NlmState>);

impl Program for NlmProgram {
    fn program(&self) -> u32 {
        PROGRAM
    }

    fn version(&self) -> u32 {
        VERSION
    }

    fn procedure_name(&self, procedure: u32) -> Option<&'static str> {
        row(procedure).map(|p| p.name)
    }

    fn call(
        &self,
        ctx: &CallContext,
        d: &mut Decoder,
        e: &mut Encoder,
    ) -> Option<Result<(), ProcError>> {
        row(ctx.procedure).map(|p| (p.run)(&self.0, ctx, d, e))
    }

    fn max_reply_bytes(&self, procedure: u32) -> usize {
        row(procedure).map_or(0, |p| p.max_reply_bytes)
    }

    fn cache_class(&self, procedure: u32) -> Option<CacheClass> {
        row(procedure).map(|p| p.cache)
    }
}

fn null(_: &NlmState, _: &CallContext, _: Void) -> Void {
    Void
}

/// The file an NLM handle names, as the lock manager keys it, and whether its export is
/// read-only; or the NLM status that refuses the call. The handle is checked exactly as
/// NFSv3 checks it, and the file must exist.
///
/// # Errors
/// [`ProcError::WouldBlock`] when the backend must wait to answer whether the file exists
/// and this thread may not (the object backend on an event loop): nothing was done.
fn file_of(
    s: &NlmState,
    ctx: &CallContext,
    fh: &Netobj,
) -> Result<Result<(FileKey, bool), Stats>, ProcError> {
    if fh.0.len() > nfs3::limits::FHSIZE3 as usize {
        rpc::warn_limited!(rpc::ratelog::Kind::Handle, peer = %ctx.peer, len = fh.0.len(), "NLM: a file handle longer than NFSv3 allows");
        return Ok(Err(Stats::StaleFh));
    }
    let t = match s.core.resolve(ctx, &NfsFh3(fh.0.clone())) {
        Ok(t) => t,
        Err(Nfsstat3::Acces) => return Ok(Err(Stats::Failed)),
        Err(Nfsstat3::Jukebox) => return Ok(Err(Stats::DeniedNolocks)),
        Err(_) => return Ok(Err(Stats::StaleFh)),
    };
    match t.export.getattr(t.id) {
        Ok(_) => {}
        Err(FsError::WouldBlock) => return Err(ProcError::WouldBlock),
        Err(e) => {
            tracing::debug!(peer = %ctx.peer, error = %e, "NLM: the handle's file cannot be locked");
            return Ok(Err(refusal(e)));
        }
    }
    let key = FileKey {
        export: t.export.id.0,
        file: t.id.0,
    };
    Ok(Ok((key, t.export.properties().read_only)))
}

/// The NLM status for a backend's error about the file of a call: a file that is gone is
/// `NLM4_STALE_FH`; an engine that is down or slow (`Jukebox`) `NLM4_DENIED_NOLOCKS`, which
/// a client tries again later; anything else `NLM4_FAILED`.
fn refusal(e: FsError) -> Stats {
    match e {
        FsError::Stale | FsError::BadHandle | FsError::NoEnt => Stats::StaleFh,
        FsError::Jukebox | FsError::WouldBlock => Stats::DeniedNolocks,
        _ => Stats::Failed,
    }
}

fn range_of(l: &Lock) -> Result<Range, Stats> {
    Range::nlm(l.l_offset, l.l_len).map_err(|_| Stats::Fbig)
}

fn owner_of(ctx: &CallContext, l: &Lock) -> locks::Owner {
    nlm_owner(
        ctx.peer.ip(),
        l.caller_name.as_bytes(),
        l.svid,
        l.oh.as_bytes(),
    )
}

/// The NLM holder of a conflicting lock: an NLM owner's svid and oh; another protocol's
/// owner as svid 0 and its owner bytes (at most a netobj's worth).
fn holder(c: &locks::Conflict) -> Holder {
    let (l_offset, l_len) = c.range.to_nlm();
    let (svid, oh) = if c.owner.protocol() == locks::Protocol::Nlm && c.owner.id.len() >= 4 {
        let svid = i32::from_be_bytes([c.owner.id[0], c.owner.id[1], c.owner.id[2], c.owner.id[3]]);
        (svid, c.owner.id.slice(4..))
    } else {
        let n = c.owner.id.len().min(nlm::limits::MAXNETOBJ_SZ as usize);
        (0, c.owner.id.slice(..n))
    };
    Holder {
        exclusive: c.kind == locks::Kind::Write,
        svid,
        oh: Netobj(oh),
        l_offset,
        l_len,
    }
}

/// # Errors
/// [`ProcError::WouldBlock`] from [`file_of`].
fn test_reply(s: &NlmState, ctx: &CallContext, a: &TestArgs) -> Result<TestReply, ProcError> {
    let (file, _) = match file_of(s, ctx, &a.alock.fh)? {
        Ok(f) => f,
        Err(st) => return Ok(TestReply::Other(st)),
    };
    if s.locks_in_grace() {
        return Ok(TestReply::Other(Stats::DeniedGracePeriod));
    }
    let range = match range_of(&a.alock) {
        Ok(r) => r,
        Err(st) => return Ok(TestReply::Other(st)),
    };
    let owner = owner_of(ctx, &a.alock);
    let k = kind(a.exclusive);
    if let Some(c) = s.locks.test(file, &owner, k, range) {
        return Ok(TestReply::Denied(holder(&c)));
    }
    Ok(match crate::heads::test(&s.core.exports, file, k, range) {
        Ok(Some(c)) => TestReply::Denied(holder(&c)),
        Ok(None) => TestReply::Other(Stats::Granted),
        Err(_) => TestReply::Other(Stats::DeniedNolocks),
    })
}

fn test(s: &NlmState, ctx: &CallContext, a: TestArgs) -> Result<TestRes, ProcError> {
    let stat = test_reply(s, ctx, &a)?;
    Ok(TestRes {
        cookie: a.cookie,
        stat,
    })
}

/// LOCK and NM_LOCK: `monitor` records the host for SM_NOTIFY after a restart.
///
/// # Errors
/// [`ProcError::WouldBlock`] when a new host must be written to the state directory or
/// the backend must wait to find the file, and this thread may not block (nothing was
/// changed).
fn lock_stat(
    s: &NlmState,
    ctx: &CallContext,
    a: &LockArgs,
    monitor: bool,
) -> Result<Stats, ProcError> {
    let (file, read_only) = match file_of(s, ctx, &a.alock.fh)? {
        Ok(f) => f,
        Err(st) => return Ok(st),
    };
    if a.exclusive && read_only {
        return Ok(Stats::Rofs);
    }
    if s.grace_refuses(a.reclaim) {
        return Ok(Stats::DeniedGracePeriod);
    }
    let range = match range_of(&a.alock) {
        Ok(r) => r,
        Err(st) => return Ok(st),
    };
    let host = ctx.peer.ip();
    let name = a.alock.caller_name.as_bytes();
    if monitor && !s.watch(host, name)? {
        return Ok(Stats::DeniedNolocks);
    }
    if monitor && s.monitor.rebooted(host, name, a.state) {
        tracing::info!(%host, name = %String::from_utf8_lossy(name), state = a.state, "NLM client restarted (new NSM state in LOCK): its old locks go");
        s.free_client(host, name);
        // free_client forgot the host; it holds a lock again from now on.
        if !s.watch(host, name)? {
            return Ok(Stats::DeniedNolocks);
        }
        s.monitor.rebooted(host, name, a.state);
    }
    Ok(take_lock(s, ctx, a, file, range))
}

/// Asks the lock manager for the lock of a checked LOCK request.
fn take_lock(s: &NlmState, ctx: &CallContext, a: &LockArgs, file: FileKey, range: Range) -> Stats {
    let host = ctx.peer.ip();
    let owner = owner_of(ctx, &a.alock);
    let block = a.block
        && s.remember_blocked(
            file,
            owner.clone(),
            BlockedLock {
                host,
                exclusive: a.exclusive,
                alock: a.alock.clone(),
            },
        );
    let req = Request {
        file,
        owner: owner.clone(),
        kind: kind(a.exclusive),
        range,
        wait: if block { Wait::Grant } else { Wait::No },
    };
    let across = crate::heads::lock(&s.core.exports, &s.locks, &req, s.now(), || {
        s.locks.lock(&req, s.now()).map(|_| ())
    });
    let other_head = matches!(across, Across::OtherHead { .. });
    // Waits here for the other head's lock (GRANTED when it frees), or waits no more.
    let across_wait = match &across {
        Across::OtherHead { mark, .. } if block => {
            crate::heads::wait(&s.core, &req, true, *mark, s.now())
        }
        _ => {
            crate::heads::stop_waiting(&s.core, file, &owner);
            false
        }
    };
    let result = match across {
        Across::Local(r) => r,
        // Not queued in the manager: waiting across heads, or the client's own retry
        // (Linux: every 30 s) takes it later.
        Across::OtherHead { conflict, .. } => Err(LockError::Denied {
            conflict,
            queued: None,
        }),
        Across::Engine(e) => {
            tracing::debug!(peer = %ctx.peer, error = %e, "NLM lock: the other heads could not be checked");
            if block {
                super::lock(&s.waiting).blocked.remove(&(file, owner));
            }
            return Stats::DeniedNolocks;
        }
    };
    if !matches!(
        result,
        Err(LockError::Denied {
            queued: Some(_),
            ..
        })
    ) && block
        && !across_wait
    {
        super::lock(&s.waiting).blocked.remove(&(file, owner));
    }
    match result {
        // Waiters a downgrade woke reach their protocols' wakers from the manager.
        Ok(()) => Stats::Granted,
        Err(LockError::Denied { queued: None, .. }) if other_head && a.block => Stats::Blocked,
        Err(LockError::Denied {
            queued: Some(_), ..
        }) => Stats::Blocked,
        Err(LockError::Denied { queued: None, .. }) if a.block => Stats::DeniedNolocks,
        Err(LockError::Denied { .. }) => Stats::Denied,
        Err(LockError::Deadlock { conflict }) => {
            tracing::debug!(peer = %ctx.peer, holder = ?conflict.owner, "NLM blocking lock would deadlock");
            Stats::Deadlck
        }
        Err(LockError::Limit(why)) => {
            rpc::warn_limited!(rpc::ratelog::Kind::Refused, peer = %ctx.peer, "NLM lock refused: {why}");
            Stats::DeniedNolocks
        }
    }
}

fn lock(s: &NlmState, ctx: &CallContext, a: LockArgs) -> Result<Res, ProcError> {
    let stat = lock_stat(s, ctx, &a, true)?;
    Ok(Res {
        cookie: a.cookie,
        stat,
    })
}

/// NM_LOCK: a non-monitored lock of a client without a status monitor; never blocks.
/// Not monitored, so nothing is written to the state directory; deferred only when the
/// backend must wait to find the file.
fn nm_lock(s: &NlmState, ctx: &CallContext, a: LockArgs) -> Result<Res, ProcError> {
    let a = LockArgs { block: false, ..a };
    let stat = lock_stat(s, ctx, &a, false)?;
    Ok(Res {
        cookie: a.cookie,
        stat,
    })
}

/// # Errors
/// [`ProcError::WouldBlock`] from [`file_of`].
fn cancel_stat(s: &NlmState, ctx: &CallContext, a: &CancArgs) -> Result<Stats, ProcError> {
    let (file, _) = match file_of(s, ctx, &a.alock.fh)? {
        Ok(f) => f,
        Err(st) => return Ok(st),
    };
    let owner = owner_of(ctx, &a.alock);
    crate::heads::stop_waiting(&s.core, file, &owner);
    let released = s.locks.cancel(file, &owner, s.now());
    // Granted meanwhile, GRANTED not answered yet: the client gave up, so give it back.
    if let Some(p) = s.forget_waiting(file, &owner) {
        if released.waiters == 0 {
            s.locks.unlock(p.file, &p.owner, p.range, s.now());
        }
    }
    Ok(Stats::Granted)
}

fn cancel(s: &NlmState, ctx: &CallContext, a: CancArgs) -> Result<Res, ProcError> {
    let stat = cancel_stat(s, ctx, &a)?;
    Ok(Res {
        cookie: a.cookie,
        stat,
    })
}

/// # Errors
/// [`ProcError::WouldBlock`] from [`file_of`].
fn unlock_stat(s: &NlmState, ctx: &CallContext, a: &UnlockArgs) -> Result<Stats, ProcError> {
    let (file, _) = match file_of(s, ctx, &a.alock.fh)? {
        Ok(f) => f,
        Err(st) => return Ok(st),
    };
    let range = match range_of(&a.alock) {
        Ok(r) => r,
        Err(st) => return Ok(st),
    };
    let owner = owner_of(ctx, &a.alock);
    s.drop_pending(file, &owner);
    crate::heads::unlock(&s.core.exports, file, || {
        s.locks.unlock(file, &owner, range, s.now());
    });
    Ok(Stats::Granted)
}

fn unlock(s: &NlmState, ctx: &CallContext, a: UnlockArgs) -> Result<Res, ProcError> {
    let stat = unlock_stat(s, ctx, &a)?;
    Ok(Res {
        cookie: a.cookie,
        stat,
    })
}

/// GRANTED is a client's procedure (its server grants a lock it waited for); granary
/// waits for no lock, so no request matches: `NLM4_DENIED`, as a client answers then.
fn granted(_: &NlmState, _: &CallContext, a: TestArgs) -> Res {
    Res {
        cookie: a.cookie,
        stat: Stats::Denied,
    }
}

/// Sends the `_RES` call `procedure` with `res` back to the caller's NLM.
fn reply_res(s: &NlmState, host: IpAddr, procedure: Proc, res: &impl Encode) {
    s.send(Callback {
        host,
        program: PROGRAM,
        version: VERSION,
        procedure: procedure as u32,
        args: res.to_xdr(),
        local_name_first: false,
        done: None,
    });
}

/// The `_MSG` variants send their `_RES` call only once the procedure ran: a call
/// deferred to the blocking pool ([`ProcError::WouldBlock`]) sends it from there.
fn test_msg(s: &NlmState, ctx: &CallContext, a: TestArgs) -> Result<Void, ProcError> {
    let res = test(s, ctx, a)?;
    reply_res(s, ctx.peer.ip(), Proc::TestRes, &res);
    Ok(Void)
}

fn lock_msg(s: &NlmState, ctx: &CallContext, a: LockArgs) -> Result<Void, ProcError> {
    let res = lock(s, ctx, a)?;
    reply_res(s, ctx.peer.ip(), Proc::LockRes, &res);
    Ok(Void)
}

fn cancel_msg(s: &NlmState, ctx: &CallContext, a: CancArgs) -> Result<Void, ProcError> {
    let res = cancel(s, ctx, a)?;
    reply_res(s, ctx.peer.ip(), Proc::CancelRes, &res);
    Ok(Void)
}

fn unlock_msg(s: &NlmState, ctx: &CallContext, a: UnlockArgs) -> Result<Void, ProcError> {
    let res = unlock(s, ctx, a)?;
    reply_res(s, ctx.peer.ip(), Proc::UnlockRes, &res);
    Ok(Void)
}

fn granted_msg(s: &NlmState, ctx: &CallContext, a: TestArgs) -> Void {
    let res = granted(s, ctx, a);
    reply_res(s, ctx.peer.ip(), Proc::GrantedRes, &res);
    Void
}

/// TEST_RES, LOCK_RES, CANCEL_RES, UNLOCK_RES: answers to calls a server never makes.
fn test_res(_: &NlmState, ctx: &CallContext, _: TestRes) -> Void {
    tracing::debug!(peer = %ctx.peer, "NLM TEST_RES ignored: granary sends no TEST_MSG");
    Void
}

fn ignored_res(_: &NlmState, ctx: &CallContext, _: Res) -> Void {
    tracing::debug!(peer = %ctx.peer, procedure = ctx.procedure, "NLM _RES ignored: granary sends no such _MSG");
    Void
}

/// GRANTED_RES: a client answers a GRANTED as an asynchronous call of its own.
fn granted_res(s: &NlmState, _: &CallContext, a: Res) -> Void {
    s.granted_answered(&a.cookie.0.clone(), Ok(a.to_xdr()));
    Void
}

/// # Errors
/// [`ProcError::WouldBlock`] from [`file_of`].
fn share_res(s: &NlmState, ctx: &CallContext, a: &ShareArgs, on: bool) -> Result<Stats, ProcError> {
    let (file, _) = match file_of(s, ctx, &a.share.fh)? {
        Ok(f) => f,
        Err(st) => return Ok(st),
    };
    if on && s.grace_refuses(a.reclaim) {
        return Ok(Stats::DeniedGracePeriod);
    }
    let client = super::nlm_client(ctx.peer.ip(), a.share.caller_name.as_bytes());
    let holder = share::holder(client, a.share.oh.0.clone());
    let (table, exports) = (&s.core.shares, &s.core.exports);
    if !on {
        crate::heads::unshare(exports, file, || table.remove(file, &holder));
        return Ok(Stats::Granted);
    }
    let fresh = !table.holds(file, &holder);
    let (access, mode) = (a.share.access, a.share.mode);
    Ok(
        match crate::heads::share(
            exports,
            file,
            access as u32,
            mode as u32,
            || share::share(table, file, &holder, access, mode),
            |st| {
                if fresh && *st == Stats::Granted {
                    // Not recorded for the other heads: the client is not told of it.
                    table.remove(file, &holder);
                }
            },
        ) {
            ShareAcross::Local(st) => st,
            ShareAcross::OtherHead(_) => Stats::Denied,
            ShareAcross::Engine(_) => Stats::DeniedNolocks,
        },
    )
}

fn share(s: &NlmState, ctx: &CallContext, a: ShareArgs) -> Result<ShareRes, ProcError> {
    let stat = share_res(s, ctx, &a, true)?;
    Ok(ShareRes {
        cookie: a.cookie,
        stat,
        sequence: 0,
    })
}

fn unshare(s: &NlmState, ctx: &CallContext, a: ShareArgs) -> Result<ShareRes, ProcError> {
    let stat = share_res(s, ctx, &a, false)?;
    Ok(ShareRes {
        cookie: a.cookie,
        stat,
        sequence: 0,
    })
}

/// FREE_ALL: every lock of the named host goes (it rebooted). From another address only
/// that address's host of that name; from loopback (a local status monitor) every host
/// of that name.
fn free_all(s: &NlmState, ctx: &CallContext, a: Notify) -> Void {
    let name = a.name.as_bytes();
    let peer = ctx.peer.ip().to_canonical();
    let mut hosts = vec![peer];
    if peer.is_loopback() {
        hosts.extend(s.monitor.hosts_named(name));
    }
    hosts.sort();
    hosts.dedup();
    for host in hosts {
        s.free_client(host, name);
    }
    Void
}
