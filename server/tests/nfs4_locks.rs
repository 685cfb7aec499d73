//! NFSv4.1 byte-range locks of the real `granary` binary (RFC 8881 sections 9 and
//! 18.10-18.12), through whole COMPOUNDs of two (or three) clients: conflicting locks and
//! the NFS4ERR_DENIED that names the lock in the way, LOCKT, LOCKU and the lock
//! stateid's seqid, CLOSE and FREE_STATEID while locks are held, bad ranges and stateids,
//! a blocked LOCK that keeps its place, and locks that die with their client's lease.

mod common;

use std::time::Duration;

use bytes::Bytes;
use client::RpcConnection;
use common::v4::{name, owner, V4};
use common::Server;
use nfs4::attr::Fattr;
use nfs4::ops::*;
use nfs4::results::*;
use nfs4::types::*;
use nfs4::{Nfsstat4, Stateid4};

impl V4 {
    /// Opens (creating) `file` in the root for reading and writing.
    async fn open(&mut self, file: &str) -> Stateid4 {
        let (status, r) = self
            .run(vec![
                ArgOp::Putrootfh,
                ArgOp::Open(OpenArgs {
                    seqid: 0,
                    share_access: share::ACCESS_BOTH,
                    share_deny: share::DENY_NONE,
                    owner: StateOwner4 {
                        clientid: 0,
                        owner: Opaque4(Bytes::from_static(b"open-owner")),
                    },
                    openhow: Openflag4::Create(Createhow4::Unchecked(
                        Fattr {
                            mode: Some(0o644),
                            ..Fattr::default()
                        }
                        .to_fattr4(),
                    )),
                    claim: OpenClaim4::Null(name(file)),
                }),
            ])
            .await;
        assert_eq!(status, Nfsstat4::Ok, "OPEN");
        let ResOp::Open(Res4::Ok(o)) = &r[1] else {
            panic!("OPEN: {r:?}")
        };
        o.stateid
    }

    /// PUTROOTFH, LOOKUP `file`, then `op`; the last result.
    async fn on(&mut self, file: &str, op: ArgOp) -> ResOp {
        let (_, mut r) = self
            .run(vec![ArgOp::Putrootfh, ArgOp::Lookup(name(file)), op])
            .await;
        assert_eq!(r.len(), 3, "PUTROOTFH and LOOKUP succeed: {r:?}");
        r.pop().expect("a result")
    }
}

fn new_lock(t: NfsLockType4, offset: u64, length: u64, open: Stateid4, lo: &str) -> ArgOp {
    ArgOp::Lock(LockArgs {
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
    })
}

fn more_lock(t: NfsLockType4, offset: u64, length: u64, sid: Stateid4) -> ArgOp {
    ArgOp::Lock(LockArgs {
        locktype: t,
        reclaim: false,
        offset,
        length,
        locker: Locker4::Existing(ExistLockOwner4 {
            lock_stateid: sid,
            lock_seqid: 0,
        }),
    })
}

fn lockt(t: NfsLockType4, offset: u64, length: u64, lo: &str) -> ArgOp {
    ArgOp::Lockt(LocktArgs {
        locktype: t,
        offset,
        length,
        owner: owner(lo),
    })
}

fn locku(sid: Stateid4, offset: u64, length: u64) -> ArgOp {
    ArgOp::Locku(LockuArgs {
        locktype: NfsLockType4::Write,
        seqid: 0,
        lock_stateid: sid,
        offset,
        length,
    })
}

fn granted(r: &ResOp) -> Stateid4 {
    match r {
        ResOp::Lock(LockRes::Ok(sid)) => *sid,
        other => panic!("expected a granted LOCK, got {other:?}"),
    }
}

#[tokio::test]
async fn two_clients_conflict_and_denied_names_the_lock_in_the_way() {
    let server = Server::start(&[]);
    let mut a = V4::connect(&server, "client-a").await;
    let mut b = V4::connect(&server, "client-b").await;
    let oa = a.open("db").await;
    let ob = b.open("db").await;

    let la = granted(
        &a.on("db", new_lock(NfsLockType4::Write, 0, 100, oa, "lo-a"))
            .await,
    );
    assert_eq!(la.seqid, 1, "a new lock stateid starts at seqid 1");
    assert_ne!(la.other, oa.other);

    // B's read lock inside A's write lock: DENIED with A's whole lock.
    let r = b
        .on("db", new_lock(NfsLockType4::Read, 50, 10, ob, "lo-b"))
        .await;
    let want = LockDenied4 {
        offset: 0,
        length: 100,
        locktype: NfsLockType4::Write,
        owner: StateOwner4 {
            clientid: a.clientid,
            owner: Opaque4(Bytes::from_static(b"lo-a")),
        },
    };
    assert_eq!(r, ResOp::Lock(LockRes::Denied(want.clone())));
    assert_eq!(
        b.on("db", lockt(NfsLockType4::Write, 99, 1, "lo-b")).await,
        ResOp::Lockt(LockRes::Denied(want))
    );
    assert_eq!(
        b.on("db", lockt(NfsLockType4::Write, 100, u64::MAX, "lo-b"))
            .await,
        ResOp::Lockt(LockRes::Ok(Nothing)),
        "the bytes after A's lock are free"
    );
    // A's own lock-owner is never in its own way; a second range merges into the first.
    let la2 = granted(
        &a.on("db", more_lock(NfsLockType4::Write, 100, 50, la))
            .await,
    );
    assert_eq!((la2.other, la2.seqid), (la.other, 2));
    // The old version of the stateid is refused; another client's is not B's.
    assert_eq!(
        a.on("db", more_lock(NfsLockType4::Read, 0, 1, la))
            .await
            .status(),
        Nfsstat4::OldStateid
    );
    assert_eq!(
        b.on("db", locku(la2, 0, 1)).await.status(),
        Nfsstat4::BadStateid
    );
    // Bad ranges: length 0, and an end past 2^64 - 1.
    for (off, len) in [(0, 0), (u64::MAX - 5, 10)] {
        assert_eq!(
            b.on("db", new_lock(NfsLockType4::Read, off, len, ob, "lo-b"))
                .await
                .status(),
            Nfsstat4::Inval
        );
    }
    // I/O through the lock stateid (Linux does it while it holds a lock).
    let w = a
        .on(
            "db",
            ArgOp::Write(WriteArgs {
                stateid: la2,
                offset: 0,
                stable: StableHow4::FileSync,
                data: Bytes::from_static(b"row"),
            }),
        )
        .await;
    assert_eq!(w.status(), Nfsstat4::Ok);
    // Locks are advisory: B reads under A's write lock.
    let rd = b
        .on(
            "db",
            ArgOp::Read(ReadArgs {
                stateid: ob,
                offset: 0,
                count: 3,
            }),
        )
        .await;
    assert_eq!(rd.status(), Nfsstat4::Ok);

    // CLOSE and FREE_STATEID wait for the locks to go.
    let close_a = ArgOp::Close(CloseArgs {
        seqid: 0,
        open_stateid: oa,
    });
    assert_eq!(
        a.on("db", close_a.clone()).await.status(),
        Nfsstat4::LocksHeld
    );
    let (status, _) = a.run(vec![ArgOp::FreeStateid(la2)]).await;
    assert_eq!(status, Nfsstat4::LocksHeld);
    let u = a.on("db", locku(la2, 0, u64::MAX)).await;
    assert_eq!(u, ResOp::Locku(Res4::Ok(Stateid4 { seqid: 3, ..la })));

    // Now B gets what it asked for, and A may close.
    let lb = granted(
        &b.on("db", new_lock(NfsLockType4::Read, 50, 10, ob, "lo-b"))
            .await,
    );
    assert_eq!(a.on("db", close_a).await.status(), Nfsstat4::Ok);
    let (status, r) = b.run(vec![ArgOp::FreeStateid(lb)]).await;
    assert_eq!(status, Nfsstat4::LocksHeld, "{r:?}");
    let u = b.on("db", locku(lb, 50, 10)).await;
    let lb = match u {
        ResOp::Locku(Res4::Ok(s)) => s,
        other => panic!("LOCKU: {other:?}"),
    };
    let (status, _) = b.run(vec![ArgOp::FreeStateid(lb)]).await;
    assert_eq!(status, Nfsstat4::Ok);
    let (status, r) = b
        .run(vec![ArgOp::TestStateid(TestStateidArgs {
            ts_stateids: vec![lb],
        })])
        .await;
    assert_eq!(status, Nfsstat4::Ok);
    assert_eq!(
        r[0],
        ResOp::TestStateid(Res4::Ok(TestStateidOk(vec![Nfsstat4::BadStateid])))
    );
}

/// The Prometheus samples of the lock manager, as "name{labels} value" lines.
fn lock_metrics(port: u16) -> Vec<String> {
    common::metrics::scrape(port)
        .lines()
        .filter(|l| l.starts_with("granary_lock") && l.contains("nfs4"))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_blocked_lock_keeps_its_place_while_it_polls() {
    let port = common::metrics::free_port();
    let addr = format!("127.0.0.1:{port}");
    let server = Server::start(&["--metrics", &addr]);
    let mut a = V4::connect(&server, "holder").await;
    let mut b = V4::connect(&server, "waiter").await;
    let mut c = V4::connect(&server, "latecomer").await;
    let (oa, ob, oc) = (a.open("f").await, b.open("f").await, c.open("f").await);
    let la = granted(
        &a.on("f", new_lock(NfsLockType4::Write, 0, u64::MAX, oa, "a"))
            .await,
    );
    // B blocks (WRITEW_LT): refused, and queued.
    let wb = new_lock(NfsLockType4::WriteW, 0, 10, ob, "b");
    assert_eq!(b.on("f", wb.clone()).await.status(), Nfsstat4::Denied);
    a.on("f", locku(la, 0, u64::MAX)).await;
    // C asks after A unlocked, but B asked first: C is refused in B's favour.
    let r = c
        .on("f", new_lock(NfsLockType4::Write, 5, 1, oc, "c"))
        .await;
    let ResOp::Lock(LockRes::Denied(d)) = r else {
        panic!("expected C to be refused: {r:?}")
    };
    assert_eq!((d.offset, d.length, d.owner.clientid), (0, 10, b.clientid));
    // A request elsewhere is not held back.
    granted(
        &c.on("f", new_lock(NfsLockType4::Write, 100, 1, oc, "c"))
            .await,
    );
    // B polls again and gets its lock.
    let lb = granted(&b.on("f", wb).await);
    assert_eq!(lb.seqid, 1);
    // A, C and B were granted once each; C and B refused once each; B was woken when A
    // unlocked; B and C hold one lock each now.
    assert_eq!(
        lock_metrics(port),
        [
            "granary_locks_held{protocol=\"nfs4\"} 2",
            "granary_lock_waiters{protocol=\"nfs4\"} 0",
            "granary_lock_grants_total{protocol=\"nfs4\"} 3",
            "granary_lock_denials_total{protocol=\"nfs4\"} 2",
            "granary_lock_limited_total{protocol=\"nfs4\"} 0",
            "granary_lock_deadlocks_total{protocol=\"nfs4\"} 0",
            "granary_lock_wakes_total{protocol=\"nfs4\"} 1",
        ]
    );
}

#[tokio::test]
async fn locks_die_with_the_lease() {
    let server = Server::start(&["--lease-secs", "10"]);
    let mut a = V4::connect(&server, "goes-away").await;
    let mut b = V4::connect(&server, "stays").await;
    let (oa, ob) = (a.open("f").await, b.open("f").await);
    granted(
        &a.on("f", new_lock(NfsLockType4::Write, 0, u64::MAX, oa, "a"))
            .await,
    );
    assert_eq!(
        b.on("f", lockt(NfsLockType4::Read, 0, 1, "b"))
            .await
            .status(),
        Nfsstat4::Denied
    );
    // B renews its lease; A stops. Within one and a half leases A's state goes.
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (status, _) = b.run(vec![]).await;
        assert_eq!(status, Nfsstat4::Ok);
    }
    let (_, seq, _) = a.try_run(vec![]).await;
    assert_eq!(
        seq,
        Nfsstat4::Badsession,
        "A's lease ran out and its session went"
    );
    assert_eq!(
        b.on("f", lockt(NfsLockType4::Write, 0, u64::MAX, "b"))
            .await,
        ResOp::Lockt(LockRes::Ok(Nothing))
    );
    granted(
        &b.on("f", new_lock(NfsLockType4::Write, 0, u64::MAX, ob, "b"))
            .await,
    );
}

#[tokio::test]
async fn a_waiter_is_told_on_its_back_channel_when_the_lock_frees() {
    use common::v4::answer_cb;
    use nfs4::compound::{CbArgOp, CbNotifyLockArgs};
    let server = Server::start(&[]);
    let mut a = V4::connect(&server, "holder").await;
    // B's creating connection is its back channel.
    let (mut b, mut calls) =
        V4::connect_with_back_channel(&server, "waiter-with-back-channel").await;
    let conn = b.conn.clone();

    // OPEN offers notices to B (a working back channel), not to A (none).
    a.open("f").await;
    b.open("f").await;
    let rflags = |r: &ResOp| match r {
        ResOp::Open(Res4::Ok(o)) => (o.rflags, o.stateid),
        other => panic!("OPEN: {other:?}"),
    };
    let reopen = || {
        vec![
            ArgOp::Putrootfh,
            ArgOp::Open(OpenArgs {
                seqid: 0,
                share_access: share::ACCESS_BOTH,
                share_deny: share::DENY_NONE,
                owner: owner("open-owner"),
                openhow: Openflag4::NoCreate,
                claim: OpenClaim4::Null(name("f")),
            }),
            ArgOp::Getfh,
        ]
    };
    let (_, ra) = a.run(reopen()).await;
    let (_, rb) = b.run(reopen()).await;
    // (The second OPEN of the same owner gives the open stateid its next seqid.)
    let ((fa, oa), (fb, ob)) = (rflags(&ra[1]), rflags(&rb[1]));
    assert_eq!(fa & open_result::MAY_NOTIFY_LOCK, 0);
    assert_ne!(fb & open_result::MAY_NOTIFY_LOCK, 0);
    let ResOp::Getfh(Res4::Ok(fh)) = &rb[2] else {
        panic!("GETFH: {rb:?}")
    };

    let la = granted(
        &a.on("f", new_lock(NfsLockType4::Write, 0, 10, oa, "a"))
            .await,
    );
    let wb = new_lock(NfsLockType4::WriteW, 0, 10, ob, "b");
    assert_eq!(b.on("f", wb.clone()).await.status(), Nfsstat4::Denied);
    a.on("f", locku(la, 0, 10)).await;
    let told = answer_cb(&conn, &mut calls, b.session).await;
    assert_eq!(
        told,
        [CbArgOp::NotifyLock(CbNotifyLockArgs {
            cnla_fh: fh.clone(),
            cnla_lock_owner: StateOwner4 {
                clientid: b.clientid,
                owner: Opaque4(Bytes::from_static(b"b")),
            },
        })]
    );
    granted(&b.on("f", wb).await);
}

const NLM: u32 = 100_021;

/// NLM host `host`'s (svid 1) whole-file write LOCK on the NFSv3 handle `fh`, blocking or
/// not: its status.
async fn nlm_lock(
    conn: &RpcConnection,
    host: &str,
    fh: &nlm::nlm4::Netobj,
    block: bool,
) -> nlm::nlm4::Stats {
    let args = nlm::nlm4::LockArgs {
        cookie: nlm::nlm4::Netobj::new(&b"c"[..]),
        block,
        exclusive: true,
        alock: nlm::nlm4::Lock {
            caller_name: nlm::nlm4::CallerName::new(host.as_bytes().to_vec()),
            fh: fh.clone(),
            oh: nlm::nlm4::Netobj::new(format!("1@{host}").into_bytes()),
            svid: 1,
            l_offset: 0,
            l_len: 0,
        },
        reclaim: false,
        state: 1,
    };
    let r: nlm::nlm4::Res = conn
        .call_decode(NLM, 4, nlm::nlm4::Proc::Lock as u32, &args)
        .await
        .expect("NLM LOCK");
    r.stat
}

#[tokio::test]
async fn a_blocking_lock_that_would_close_a_cycle_across_protocols_is_refused() {
    use nlm::nlm4::Stats;
    let port = common::metrics::free_port();
    let addr = format!("127.0.0.1:{port}");
    let server = Server::start(&["--metrics", &addr]);
    let mut v = V4::connect(&server, "v4-side").await;
    let opens = [
        v.open("f1").await,
        v.open("f2").await,
        v.open("f3").await,
        v.open("f4").await,
    ];
    let nfs = common::nfs::connect(&server).await;
    let root = nfs.mount("/").await.expect("MNT /");
    let mut v3 = Vec::new();
    for f in ["f1", "f2", "f3", "f4"] {
        let (fh, _) = nfs.lookup_ok(&root, f).await.expect("LOOKUP");
        v3.push(nlm::nlm4::Netobj(fh.0));
    }
    let nlm = RpcConnection::connect(server.addr).await.expect("connect");

    // The NFSv4 owner waits for the NLM owner, whose blocking request would close the
    // cycle: NLM4_DEADLCK.
    assert_eq!(nlm_lock(&nlm, "h1", &v3[0], false).await, Stats::Granted);
    granted(
        &v.on(
            "f2",
            new_lock(NfsLockType4::Write, 0, u64::MAX, opens[1], "lo-a"),
        )
        .await,
    );
    let wait = new_lock(NfsLockType4::WriteW, 0, u64::MAX, opens[0], "lo-a");
    assert_eq!(v.on("f1", wait).await.status(), Nfsstat4::Denied);
    assert_eq!(nlm_lock(&nlm, "h1", &v3[1], true).await, Stats::Deadlck);

    // The NLM owner waits (blocked, to be GRANTED) for the NFSv4 owner, whose blocking
    // request would close the cycle: NFS4ERR_DEADLOCK.
    assert_eq!(nlm_lock(&nlm, "h2", &v3[2], false).await, Stats::Granted);
    granted(
        &v.on(
            "f4",
            new_lock(NfsLockType4::Write, 0, u64::MAX, opens[3], "lo-b"),
        )
        .await,
    );
    assert_eq!(nlm_lock(&nlm, "h2", &v3[3], true).await, Stats::Blocked);
    let wait = new_lock(NfsLockType4::WriteW, 0, u64::MAX, opens[2], "lo-b");
    assert_eq!(v.on("f3", wait).await.status(), Nfsstat4::Deadlock);
    // Not blocking, the same request is only refused.
    let try_once = new_lock(NfsLockType4::Write, 0, u64::MAX, opens[2], "lo-b");
    assert_eq!(v.on("f3", try_once).await.status(), Nfsstat4::Denied);

    let deadlocks: Vec<String> = common::metrics::scrape(port)
        .lines()
        .filter(|l| l.starts_with("granary_lock_deadlocks_total"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        deadlocks,
        [
            "granary_lock_deadlocks_total{protocol=\"nfs4\"} 1",
            "granary_lock_deadlocks_total{protocol=\"nlm\"} 1",
        ]
    );
}

/// NLM SHARE (or UNSHARE, `on` false) of host `host` on the NFSv3 handle `fh`.
async fn nlm_share(
    conn: &RpcConnection,
    host: &str,
    fh: &nlm::nlm4::Netobj,
    access: nlm::nlm4::FshAccess,
    mode: nlm::nlm4::FshMode,
    on: bool,
) -> nlm::nlm4::Stats {
    let args = nlm::nlm4::ShareArgs {
        cookie: nlm::nlm4::Netobj::new(&b"s"[..]),
        share: nlm::nlm4::Share {
            caller_name: nlm::nlm4::CallerName::new(host.as_bytes().to_vec()),
            fh: fh.clone(),
            oh: nlm::nlm4::Netobj::new(&b"share-oh"[..]),
            mode,
            access,
        },
        reclaim: false,
    };
    let proc = if on {
        nlm::nlm4::Proc::Share
    } else {
        nlm::nlm4::Proc::Unshare
    };
    let r: nlm::nlm4::ShareRes = conn
        .call_decode(NLM, 4, proc as u32, &args)
        .await
        .expect("NLM SHARE");
    r.stat
}

/// OPEN of the existing `file` by open-owner `oo` with `access` and `deny`: the status.
async fn open_share(v: &mut V4, file: &str, oo: &str, access: u32, deny: u32) -> Nfsstat4 {
    let ops = vec![
        ArgOp::Putrootfh,
        ArgOp::Open(OpenArgs {
            seqid: 0,
            share_access: access,
            share_deny: deny,
            owner: owner(oo),
            openhow: Openflag4::NoCreate,
            claim: OpenClaim4::Null(name(file)),
        }),
    ];
    v.run_unchecked(ops).await.0
}

#[tokio::test]
async fn nlm_share_and_nfs4_open_share_reservations_exclude_each_other() {
    use nlm::nlm4::{FshAccess, FshMode, Stats};
    let server = Server::start(&[]);
    let mut v = V4::connect(&server, "v4-shares").await;
    // Made over NFSv3, so no NFSv4 open holds them.
    let nfs = common::nfs::connect(&server).await;
    let root = nfs.mount("/").await.expect("MNT /");
    let s1 = nfs.create_file(&root, "s1", 0o644).await.expect("CREATE");
    let s2 = nfs.create_file(&root, "s2", 0o644).await.expect("CREATE");
    let (s1, s2) = (nlm::nlm4::Netobj(s1.0), nlm::nlm4::Netobj(s2.0));
    let nlm = RpcConnection::connect(server.addr).await.expect("connect");
    let (read, write) = (share::ACCESS_READ, share::ACCESS_WRITE);

    // An NLM SHARE that denies writing: an NFSv4 OPEN for writing is refused, one for
    // reading is not; after UNSHARE the OPEN for writing succeeds.
    let dw = FshMode::DenyWrite;
    assert_eq!(
        nlm_share(&nlm, "dos", &s1, FshAccess::Read, dw, true).await,
        Stats::Granted
    );
    assert_eq!(
        open_share(&mut v, "s1", "w1", write, share::DENY_NONE).await,
        Nfsstat4::ShareDenied
    );
    assert_eq!(
        open_share(&mut v, "s1", "r1", read, share::DENY_NONE).await,
        Nfsstat4::Ok
    );
    assert_eq!(
        nlm_share(&nlm, "dos", &s1, FshAccess::Read, dw, false).await,
        Stats::Granted
    );
    assert_eq!(
        open_share(&mut v, "s1", "w1", write, share::DENY_NONE).await,
        Nfsstat4::Ok
    );

    // An NFSv4 OPEN that denies writing: an NLM SHARE for writing is refused, one that
    // only reads and denies nothing is granted.
    assert_eq!(
        open_share(&mut v, "s2", "dw", read, share::DENY_WRITE).await,
        Nfsstat4::Ok
    );
    let none = FshMode::DenyNone;
    assert_eq!(
        nlm_share(&nlm, "dos", &s2, FshAccess::ReadWrite, none, true).await,
        Stats::Denied
    );
    assert_eq!(
        nlm_share(&nlm, "dos", &s2, FshAccess::Read, none, true).await,
        Stats::Granted
    );
}
