//! Byte-range locks across two heads of one object export (the real binary, PostgreSQL
//! and S3 from `scripts/object-env.sh`), over NFSv4.1 and NLM as clients send them: a
//! write lock through head A makes the same bytes DENIED through head B (both
//! protocols, and across them), disjoint ranges and shared locks are granted, an unlock
//! on A lets B take the range at once, a head killed with SIGKILL frees its locks on the
//! other head after its lease, and with the database stopped a LOCK answers
//! NFS4ERR_DELAY / NLM4_DENIED_NOLOCKS while the locks held before stay held after. A
//! blocking NLM LOCK on B held up by A's lock waits on B and is granted (GRANTED to the
//! client host the test plays) within a few seconds of A's unlock, of A's death, and of
//! A's unlock after a restart of the database; an NFSv4.1 waiter on B is told
//! (CB_NOTIFY_LOCK) within a few seconds of A's unlock.
//! Fails when the engines are absent unless GRANARY_OBJECT_TESTS=skip.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use client::RpcConnection;
use common::nlm_host::Host;
use common::object::{self, engine, one_at_a_time};
use common::v4::{name, owner, V4};
use common::{rt, Server};
use nfs4::attr::Fattr;
use nfs4::ops::*;
use nfs4::results::*;
use nfs4::types::*;
use nfs4::{Nfsstat4, Stateid4};
use nlm::nlm4;

const NLM: u32 = 100_021;

/// Lease of the heads here, the least a config may give: the killed head's locks go
/// within it.
const LEASE_SECS: u64 = 3;

/// The lock lease of the test that stops the database while a waiter waits: longer than
/// the outage.
const OUTAGE_LEASE_SECS: u64 = 15;

/// Two heads of one fresh file system with a short lock lease.
fn two_heads(tag: &str) -> Option<(Server, Server)> {
    two_heads_with(tag, &[], &[])
}

/// [`two_heads`], head A started with `a_args` too and head B with `b_args`.
fn two_heads_with(tag: &str, a_args: &[&str], b_args: &[&str]) -> Option<(Server, Server)> {
    object::two_heads_with(tag, LEASE_SECS, a_args, b_args)
}

/// An NFSv4 client of one head with `file` open (created if new).
struct Locker {
    v4: V4,
    open: Stateid4,
    fh: Bytes,
}

impl Locker {
    async fn new(server: &Server, client: &str, file: &str) -> Self {
        Self::with(V4::connect(server, client).await, file).await
    }

    /// `v4` with `file` open (created if new).
    async fn with(mut v4: V4, file: &str) -> Self {
        let (status, r) = v4
            .run(vec![
                ArgOp::Putrootfh,
                ArgOp::Open(OpenArgs {
                    seqid: 0,
                    share_access: share::ACCESS_BOTH,
                    share_deny: share::DENY_NONE,
                    owner: owner("open-owner"),
                    openhow: Openflag4::Create(Createhow4::Unchecked(
                        Fattr {
                            mode: Some(0o644),
                            ..Fattr::default()
                        }
                        .to_fattr4(),
                    )),
                    claim: OpenClaim4::Null(name(file)),
                }),
                ArgOp::Getfh,
            ])
            .await;
        assert_eq!(status, Nfsstat4::Ok, "OPEN");
        let ResOp::Open(Res4::Ok(o)) = &r[1] else {
            panic!("OPEN: {r:?}")
        };
        let ResOp::Getfh(Res4::Ok(fh)) = &r[2] else {
            panic!("GETFH: {r:?}")
        };
        Self {
            v4,
            open: o.stateid,
            fh: fh.0.clone(),
        }
    }

    /// PUTFH of the file, then `op`: its result.
    async fn on(&mut self, op: ArgOp) -> ResOp {
        let (_, mut r) = self
            .v4
            .run_unchecked(vec![ArgOp::Putfh(NfsFh4(self.fh.clone())), op])
            .await;
        assert_eq!(r.len(), 2, "PUTFH succeeds: {r:?}");
        r.pop().expect("a result")
    }

    /// A LOCK of a new lock-owner `lo`.
    async fn lock(&mut self, t: NfsLockType4, offset: u64, length: u64, lo: &str) -> ResOp {
        let open = self.open;
        self.on(ArgOp::Lock(LockArgs {
            locktype: t,
            reclaim: false,
            offset,
            length,
            locker: Locker4::New(OpenToLockOwner4 {
                open_seqid: 0,
                open_stateid: open,
                lock_seqid: 0,
                lock_owner: owner(lo),
            }),
        }))
        .await
    }

    /// A write LOCK by the lock-owner that holds `sid` (its lock stateid).
    async fn relock(&mut self, sid: Stateid4, offset: u64, length: u64) -> ResOp {
        self.on(ArgOp::Lock(LockArgs {
            locktype: NfsLockType4::Write,
            reclaim: false,
            offset,
            length,
            locker: Locker4::Existing(ExistLockOwner4 {
                lock_stateid: sid,
                lock_seqid: 0,
            }),
        }))
        .await
    }

    async fn lockt(&mut self, t: NfsLockType4, offset: u64, length: u64, lo: &str) -> ResOp {
        self.on(ArgOp::Lockt(LocktArgs {
            locktype: t,
            offset,
            length,
            owner: owner(lo),
        }))
        .await
    }

    async fn locku(&mut self, sid: Stateid4, offset: u64, length: u64) -> ResOp {
        self.on(ArgOp::Locku(LockuArgs {
            locktype: NfsLockType4::Write,
            seqid: 0,
            lock_stateid: sid,
            offset,
            length,
        }))
        .await
    }
}

/// The NFSv3 handle of `file` in the root of `server`'s export, for NLM calls.
async fn nlm_fh(server: &Server, file: &str) -> nlm4::Netobj {
    let nfs = common::nfs::connect(server).await;
    let root = nfs.mount("/").await.expect("MNT /");
    let (fh, _) = nfs.lookup_ok(&root, file).await.expect("LOOKUP");
    nlm4::Netobj(fh.0)
}

fn granted(r: &ResOp) -> Stateid4 {
    match r {
        ResOp::Lock(LockRes::Ok(sid)) => *sid,
        other => panic!("expected a granted LOCK, got {other:?}"),
    }
}

/// The lock in the way, of a LOCK or LOCKT refused with NFS4ERR_DENIED.
fn denied(r: &ResOp) -> LockDenied4 {
    match r {
        ResOp::Lock(LockRes::Denied(d)) | ResOp::Lockt(LockRes::Denied(d)) => d.clone(),
        other => panic!("expected NFS4ERR_DENIED, got {other:?}"),
    }
}

/// An NLM client host `host` (svid 1) on one head.
struct Nlm {
    conn: RpcConnection,
    host: &'static str,
}

impl Nlm {
    async fn new(server: &Server, host: &'static str) -> Self {
        let conn = RpcConnection::connect(server.addr)
            .await
            .unwrap()
            .with_timeout(Duration::from_secs(30));
        Self { conn, host }
    }

    fn alock(&self, fh: &nlm4::Netobj, offset: u64, len: u64) -> nlm4::Lock {
        nlm4::Lock {
            caller_name: nlm4::CallerName::new(self.host.as_bytes().to_vec()),
            fh: fh.clone(),
            oh: nlm4::Netobj::new(format!("1@{}", self.host).into_bytes()),
            svid: 1,
            l_offset: offset,
            l_len: len,
        }
    }

    async fn lock(
        &self,
        fh: &nlm4::Netobj,
        exclusive: bool,
        block: bool,
        offset: u64,
        len: u64,
    ) -> nlm4::Stats {
        let args = nlm4::LockArgs {
            cookie: nlm4::Netobj::new(&b"c"[..]),
            block,
            exclusive,
            alock: self.alock(fh, offset, len),
            reclaim: false,
            state: 1,
        };
        let r: nlm4::Res = self
            .conn
            .call_decode(NLM, 4, nlm4::Proc::Lock as u32, &args)
            .await
            .expect("NLM LOCK");
        r.stat
    }

    async fn test(
        &self,
        fh: &nlm4::Netobj,
        exclusive: bool,
        offset: u64,
        len: u64,
    ) -> nlm4::TestReply {
        let args = nlm4::TestArgs {
            cookie: nlm4::Netobj::new(&b"t"[..]),
            exclusive,
            alock: self.alock(fh, offset, len),
        };
        let r: nlm4::TestRes = self
            .conn
            .call_decode(NLM, 4, nlm4::Proc::Test as u32, &args)
            .await
            .expect("NLM TEST");
        r.stat
    }

    async fn unlock(&self, fh: &nlm4::Netobj, offset: u64, len: u64) -> nlm4::Stats {
        let args = nlm4::UnlockArgs {
            cookie: nlm4::Netobj::new(&b"u"[..]),
            alock: self.alock(fh, offset, len),
        };
        let r: nlm4::Res = self
            .conn
            .call_decode(NLM, 4, nlm4::Proc::Unlock as u32, &args)
            .await
            .expect("NLM UNLOCK");
        r.stat
    }
}

/// Another head's lock, as NFSv4 reports its holder: client id 0, `granary head N`.
fn is_another_head(d: &LockDenied4) -> bool {
    d.owner.clientid == 0 && d.owner.owner.0.starts_with(b"granary head ")
}

#[test]
fn locks_exclude_each_other_across_heads_over_nfsv4_and_nlm() {
    let _serial = one_at_a_time();
    let Some((a, b)) = two_heads("xlock-basic") else {
        return;
    };
    rt().block_on(async {
        let mut va = Locker::new(&a, "client-a", "db").await;
        let mut vb = Locker::new(&b, "client-b", "db").await;
        let fh = nlm_fh(&b, "db").await;
        let (na, nb) = (Nlm::new(&a, "alpha").await, Nlm::new(&b, "beta").await);

        // NFSv4 on A holds bytes 0-99 for writing.
        let la = granted(&va.lock(NfsLockType4::Write, 0, 100, "lo-a").await);
        // NFSv4 on B: the same bytes DENIED, named as head A's range; LOCKT too.
        let d = denied(&vb.lock(NfsLockType4::Write, 50, 10, "lo-b").await);
        assert!(is_another_head(&d), "{d:?}");
        assert_eq!(
            (d.offset, d.length, d.locktype),
            (0, 100, NfsLockType4::Write)
        );
        let d = denied(&vb.lockt(NfsLockType4::Read, 99, 1, "lo-b").await);
        assert!(is_another_head(&d), "{d:?}");
        assert_eq!(
            vb.lockt(NfsLockType4::Write, 100, 100, "lo-b").await,
            ResOp::Lockt(LockRes::Ok(Nothing)),
            "the bytes after it are free"
        );
        // NLM on B (across protocols and heads): DENIED, TEST names the holder, and a
        // blocking LOCK is BLOCKED (its client polls).
        assert_eq!(nb.lock(&fh, true, false, 10, 5).await, nlm4::Stats::Denied);
        assert!(matches!(
            nb.test(&fh, false, 0, 1).await,
            nlm4::TestReply::Denied(h) if h.svid == 0 && h.oh.0.starts_with(b"granary head ")
        ));
        assert_eq!(nb.lock(&fh, true, true, 10, 5).await, nlm4::Stats::Blocked);
        // Disjoint ranges: both heads grant.
        let lb = granted(&vb.lock(NfsLockType4::Write, 200, 100, "lo-b").await);
        assert_eq!(
            nb.lock(&fh, true, false, 400, 10).await,
            nlm4::Stats::Granted
        );
        // NLM on A against B's NFSv4 and NLM locks, the other way round.
        assert_eq!(na.lock(&fh, true, false, 250, 1).await, nlm4::Stats::Denied);
        assert_eq!(
            na.lock(&fh, false, false, 405, 1).await,
            nlm4::Stats::Denied
        );
        // Shared locks share across heads: read on A (NLM) and on B (NFSv4).
        assert_eq!(
            na.lock(&fh, false, false, 1000, 10).await,
            nlm4::Stats::Granted
        );
        granted(&vb.lock(NfsLockType4::Read, 1005, 10, "lo-b2").await);
        let d = denied(&va.lock(NfsLockType4::Write, 1010, 1, "lo-a2").await);
        assert!(is_another_head(&d), "B's read is in A's write's way: {d:?}");

        // A lets go: B takes the range at once (the unlock's reply waits for its record).
        let u = va.locku(la, 0, 100).await;
        assert!(matches!(u, ResOp::Locku(Res4::Ok(_))), "LOCKU: {u:?}");
        granted(&vb.relock(lb, 0, 100).await);
        let d = denied(&va.lock(NfsLockType4::Read, 0, 1, "lo-a3").await);
        assert!(is_another_head(&d), "now B's is in A's way: {d:?}");
        // NLM's unlock does the same for the other head's NFSv4 client.
        assert_eq!(nb.unlock(&fh, 400, 10).await, nlm4::Stats::Granted);
        granted(&va.lock(NfsLockType4::Write, 400, 10, "lo-a4").await);
    });
}

#[test]
fn a_killed_head_frees_its_locks_on_the_other_head_after_its_lease() {
    let _serial = one_at_a_time();
    let Some((a, b)) = two_heads("xlock-kill") else {
        return;
    };
    rt().block_on(async {
        let mut va = Locker::new(&a, "client-a", "f").await;
        let mut vb = Locker::new(&b, "client-b", "f").await;
        let fh = nlm_fh(&b, "f").await;
        let nb = Nlm::new(&b, "beta").await;
        granted(&va.lock(NfsLockType4::Write, 0, u64::MAX, "lo-a").await);
        // Alive, A keeps its lease past the lease's length.
        tokio::time::sleep(Duration::from_secs(LEASE_SECS + 1)).await;
        denied(&vb.lock(NfsLockType4::Write, 0, 1, "lo-b").await);
        let pid = a.pid();
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let at = Instant::now();
        loop {
            match vb.lock(NfsLockType4::Write, 0, 1, "lo-b").await {
                ResOp::Lock(LockRes::Ok(_)) => break,
                ResOp::Lock(LockRes::Denied(d))
                    if at.elapsed() < Duration::from_secs(LEASE_SECS + 5) =>
                {
                    assert!(is_another_head(&d));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                other => panic!(
                    "head A's locks never went: {other:?} after {:?}",
                    at.elapsed()
                ),
            }
        }
        eprintln!("head A's lock went {:?} after its kill", at.elapsed());
        assert_eq!(
            nb.lock(&fh, true, false, 10, 10).await,
            nlm4::Stats::Granted
        );
    });
    drop(a);
}

/// How soon after the other head let go a waiter across heads must be granted: the
/// release is heard through LISTEN/NOTIFY (milliseconds); without the notice, the next
/// recheck (`backend_object::limits::HEAD_WAIT_RECHECK`, 10 s) or the client's own poll
/// (30 s) would grant it.
const PROMPT: Duration = Duration::from_secs(3);

/// A blocking NLM LOCK on head B refused for head A's lock: BLOCKED, no GRANTED while A
/// holds it.
async fn blocked_on_b(b: &Server, host: &mut Host, file: &str) -> (Nlm, nlm4::Netobj) {
    let fh = nlm_fh(b, file).await;
    let nb = Nlm::new(b, "beta").await;
    assert_eq!(nb.lock(&fh, true, true, 10, 5).await, nlm4::Stats::Blocked);
    host.quiet(Duration::from_secs(1)).await;
    (nb, fh)
}

/// The GRANTED call for `nb`'s blocked lock, and how long after `since` it came.
async fn granted_call(host: &mut Host, nb: &Nlm, fh: &nlm4::Netobj, since: Instant) -> Duration {
    let (program, procedure, args) = host.next().await;
    let took = since.elapsed();
    assert_eq!((program, procedure), (NLM, nlm4::Proc::Granted as u32));
    let args = <nlm4::TestArgs as xdr::Decode>::from_xdr(args).expect("GRANTED args");
    assert_eq!(args.alock, nb.alock(fh, 10, 5));
    assert!(args.exclusive);
    took
}

#[test]
fn a_blocked_nlm_lock_is_granted_when_the_other_head_unlocks() {
    let _serial = one_at_a_time();
    let rt = rt();
    let mut host = rt.block_on(Host::start());
    let port = host.port.to_string();
    let Some((a, b)) = two_heads_with("xlock-wait", &[], &["--callback-portmap-port", &port])
    else {
        return;
    };
    rt.block_on(async {
        let mut va = Locker::new(&a, "client-a", "f").await;
        let la = granted(&va.lock(NfsLockType4::Write, 0, 100, "lo-a").await);
        let (nb, fh) = blocked_on_b(&b, &mut host, "f").await;
        let unlocked = Instant::now();
        assert!(matches!(
            va.locku(la, 0, 100).await,
            ResOp::Locku(Res4::Ok(_))
        ));
        let took = granted_call(&mut host, &nb, &fh, unlocked).await;
        eprintln!("head B's blocked NLM lock granted {took:?} after head A's LOCKU");
        assert!(took < PROMPT, "granted {took:?} after the unlock");
        // B holds it now: A is refused, for head B's lock.
        let d = denied(&va.lock(NfsLockType4::Write, 12, 1, "lo-a2").await);
        assert!(is_another_head(&d), "{d:?}");
        // B's unlock lets A's client take it at once.
        assert_eq!(nb.unlock(&fh, 10, 5).await, nlm4::Stats::Granted);
        granted(&va.lock(NfsLockType4::Write, 12, 1, "lo-a2").await);
    });
}

#[test]
fn a_blocked_nlm_lock_is_granted_when_the_other_head_dies() {
    let _serial = one_at_a_time();
    let rt = rt();
    let mut host = rt.block_on(Host::start());
    let port = host.port.to_string();
    let Some((a, b)) = two_heads_with("xlock-wait-kill", &[], &["--callback-portmap-port", &port])
    else {
        return;
    };
    rt.block_on(async {
        let mut va = Locker::new(&a, "client-a", "f").await;
        granted(&va.lock(NfsLockType4::Write, 0, u64::MAX, "lo-a").await);
        let (nb, fh) = blocked_on_b(&b, &mut host, "f").await;
        let killed = std::process::Command::new("kill")
            .args(["-9", &a.pid().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let at = Instant::now();
        let took = granted_call(&mut host, &nb, &fh, at).await;
        eprintln!(
            "head B's blocked NLM lock granted {took:?} after head A's kill (lease {LEASE_SECS} s)"
        );
        assert!(
            took < Duration::from_secs(LEASE_SECS) + PROMPT,
            "granted {took:?} after the kill"
        );
        drop(a);
    });
}

/// The database restarting under a waiter on head B: B's listening connection drops
/// with it, B asks again every second while it cannot listen and listens again once the
/// database is back, so A's LOCKU after the restart still reaches B's waiter within a
/// few seconds (nothing waits on a connection that went away).
#[test]
fn a_waiter_across_heads_outlives_a_database_restart() {
    let _serial = one_at_a_time();
    let rt = rt();
    let mut host = rt.block_on(Host::start());
    let port = host.port.to_string();
    // A lease longer than the outage (a 2 s pause plus the engine's stop and start, over
    // 3 s at load 7-9): with the short one, head A's lease could lapse in the outage and
    // B be granted before A's unlock, which is the other test's case, not this one's.
    let Some((a, b)) = object::two_heads_with(
        "xlock-wait-pg",
        OUTAGE_LEASE_SECS,
        &[],
        &["--callback-portmap-port", &port],
    ) else {
        return;
    };
    rt.block_on(async {
        let mut va = Locker::new(&a, "client-a", "f").await;
        let la = granted(&va.lock(NfsLockType4::Write, 0, 100, "lo-a").await);
        let (nb, fh) = blocked_on_b(&b, &mut host, "f").await;
        tokio::task::spawn_blocking(|| engine("pg-stop"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        tokio::task::spawn_blocking(|| engine("pg-start"))
            .await
            .unwrap();
        host.quiet(Duration::from_millis(500)).await;
        // A's LOCKU, once the database answers A again.
        let back = Instant::now();
        let unlocked = loop {
            let at = Instant::now();
            match va.locku(la, 0, 100).await {
                ResOp::Locku(Res4::Ok(_)) => break at,
                r if r.status() == Nfsstat4::Delay && back.elapsed() < Duration::from_secs(60) => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                other => panic!("LOCKU after the restart: {other:?}"),
            }
        };
        let took = granted_call(&mut host, &nb, &fh, unlocked).await;
        eprintln!("head B's blocked NLM lock granted {took:?} after head A's LOCKU, after a database restart");
        assert!(took < PROMPT, "granted {took:?} after the unlock");
    });
}

/// An NFSv4.1 WRITEW_LT on head B refused for head A's lock is told on B's back channel
/// (CB_NOTIFY_LOCK) within a few seconds of A's LOCKU, and takes the lock when it asks
/// again. Before, it was refused without a place to wait and the client polled (Linux:
/// backing off to 30 s).
#[test]
fn an_nfs4_waiter_on_one_head_is_told_when_the_other_head_unlocks() {
    use common::v4::answer_cb;
    use nfs4::compound::{CbArgOp, CbNotifyLockArgs};
    let _serial = one_at_a_time();
    let Some((a, b)) = two_heads("xlock-wait-v4") else {
        return;
    };
    rt().block_on(async {
        let mut va = Locker::new(&a, "client-a", "f").await;
        let la = granted(&va.lock(NfsLockType4::Write, 0, 100, "lo-a").await);
        let (v4, mut calls) = V4::connect_with_back_channel(&b, "client-b").await;
        let conn = v4.conn.clone();
        let mut vb = Locker::with(v4, "f").await;
        let d = denied(&vb.lock(NfsLockType4::WriteW, 10, 5, "lo-b").await);
        assert!(is_another_head(&d), "{d:?}");
        let early = tokio::time::timeout(Duration::from_secs(1), calls.recv()).await;
        assert!(early.is_err(), "told while A holds it: {early:?}");
        let unlocked = Instant::now();
        assert!(matches!(
            va.locku(la, 0, 100).await,
            ResOp::Locku(Res4::Ok(_))
        ));
        let told = answer_cb(&conn, &mut calls, vb.v4.session).await;
        let took = unlocked.elapsed();
        assert_eq!(
            told,
            [CbArgOp::NotifyLock(CbNotifyLockArgs {
                cnla_fh: NfsFh4(vb.fh.clone()),
                cnla_lock_owner: StateOwner4 {
                    clientid: vb.v4.clientid,
                    owner: Opaque4(Bytes::from_static(b"lo-b")),
                },
            })]
        );
        eprintln!("head B's NFSv4 waiter told {took:?} after head A's LOCKU");
        assert!(took < PROMPT, "told {took:?} after the unlock");
        granted(&vb.lock(NfsLockType4::WriteW, 10, 5, "lo-b").await);
    });
}

#[test]
fn with_the_database_stopped_a_lock_is_delayed_and_held_locks_survive_it() {
    let _serial = one_at_a_time();
    let Some((a, b)) = two_heads("xlock-dbdown") else {
        return;
    };
    rt().block_on(async {
        let mut va = Locker::new(&a, "client-a", "f").await;
        let mut vb = Locker::new(&b, "client-b", "f").await;
        let fh = nlm_fh(&b, "f").await;
        let nb = Nlm::new(&b, "beta").await;
        let la = granted(&va.lock(NfsLockType4::Write, 0, 100, "lo-a").await);
        tokio::task::spawn_blocking(|| engine("pg-stop"))
            .await
            .unwrap();
        let v4 = vb.lock(NfsLockType4::Write, 500, 1, "lo-b").await;
        let nlm = nb.lock(&fh, true, false, 600, 1).await;
        tokio::task::spawn_blocking(|| engine("pg-start"))
            .await
            .unwrap();
        assert_eq!(
            v4.status(),
            Nfsstat4::Delay,
            "NFSv4 LOCK with the database down"
        );
        assert_eq!(
            nlm,
            nlm4::Stats::DeniedNolocks,
            "NLM LOCK with the database down"
        );
        // Back: A's lock still keeps B off, disjoint bytes are granted again.
        let back = Instant::now();
        let r = loop {
            let r = vb.lock(NfsLockType4::Write, 50, 1, "lo-b").await;
            if r.status() != Nfsstat4::Delay || back.elapsed() > Duration::from_secs(60) {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        assert!(
            is_another_head(&denied(&r)),
            "A's lock held through the outage"
        );
        granted(&vb.lock(NfsLockType4::Write, 500, 1, "lo-b").await);
        assert!(matches!(
            va.locku(la, 0, 100).await,
            ResOp::Locku(Res4::Ok(_))
        ));
        assert_eq!(nb.lock(&fh, true, false, 50, 1).await, nlm4::Stats::Granted);
    });
}

/// What a LOCK and a LOCKU cost the database on an object export, from head A's
/// `granary_object_db_*` metrics over 20 pairs on one range (the head's first LOCK,
/// which registers it, left out): each call reads the file's row (the handle's file must
/// be a regular file) and runs one transaction of its own (LOCK: the check with its
/// BEGIN, then the rows with the COMMIT; LOCKU: the per-file lock, then the rows with the
/// COMMIT; the unlock's change is the LOCKU's own to record, not the keeper's too). The
/// head's heartbeat (one a second) adds one now and then.
#[test]
fn a_lock_and_an_unlock_cost_two_transactions_each() {
    let _serial = one_at_a_time();
    let port = common::metrics::free_port();
    let metrics = format!("127.0.0.1:{port}");
    let Some((a, _b)) = two_heads_with("xlock-cost", &["--metrics", &metrics], &[]) else {
        return;
    };
    let counters = || {
        let text = common::metrics::scrape(port);
        let v = |n: &str| common::metrics::sample(&text, &format!("granary_object_{n}_total "));
        (v("db_transactions"), v("db_round_trips"))
    };
    rt().block_on(async {
        let mut va = Locker::new(&a, "client-a", "f").await;
        let first = granted(&va.lock(NfsLockType4::Write, 0, 100, "lo-a").await);
        let mut sid = match va.locku(first, 0, 100).await {
            ResOp::Locku(Res4::Ok(s)) => s,
            other => panic!("LOCKU: {other:?}"),
        };
        let pairs = 20;
        let (tx0, rt0) = counters();
        let started = Instant::now();
        for _ in 0..pairs {
            sid = granted(&va.relock(sid, 0, 100).await);
            sid = match va.locku(sid, 0, 100).await {
                ResOp::Locku(Res4::Ok(s)) => s,
                other => panic!("LOCKU: {other:?}"),
            };
        }
        let took = started.elapsed();
        let (tx1, rt1) = counters();
        let per_pair = (tx1 - tx0) / f64::from(pairs);
        let trips = (rt1 - rt0) / f64::from(pairs);
        eprintln!(
            "a LOCK+LOCKU pair: {per_pair:.2} database transactions, {trips:.2} round trips, \
             {:.1} ms",
            took.as_secs_f64() * 1000.0 / f64::from(pairs)
        );
        // Four, and the heartbeats of the time it took (one a second).
        let beats = took.as_secs_f64().ceil() + 1.0;
        assert!(
            per_pair >= 4.0 && tx1 - tx0 <= 4.0 * f64::from(pairs) + beats,
            "{per_pair} transactions per pair"
        );
    });
}
