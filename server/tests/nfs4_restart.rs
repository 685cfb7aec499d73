//! NFSv4.1 restart recovery of the real `granary` binary (RFC 8881 section 8.4.2): a
//! client confirmed by CREATE_SESSION is recorded in the state directory; after a restart
//! on the same directory it reclaims its open with CLAIM_PREVIOUS during the grace period
//! and keeps reading and writing the file, while new opens wait (`NFS4ERR_GRACE`) and a
//! client the previous run did not record cannot reclaim (`NFS4ERR_NO_GRACE`); the grace
//! period ends when every recorded client sent RECLAIM_COMPLETE, or on its timer.
//!
//! Locks after a restart by `kill -9`: a recorded client takes its lock back with a
//! reclaiming LOCK, an NLM host with a reclaiming NLM LOCK, and while NFSv4's or NLM's
//! grace period runs neither protocol grants a new lock, so neither can take a lock the
//! other's client has not reclaimed yet.

mod common;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use client::RpcConnection;
use common::v4::{Setup, V4};
use common::Server;
use nfs4::ops::*;
use nfs4::results::*;
use nfs4::types::*;
use nfs4::{Compound4Args, Nfsstat4, Stateid4};

/// A client that may reclaim after a restart: minor version 1, no reply caching, four
/// slots, the same verifier every time (the client did not reboot, the server did), and
/// no RECLAIM_COMPLETE until the test sends it.
async fn connect(server: &Server, owner: &str) -> V4 {
    let setup = Setup {
        verifier: [3; 8],
        slots: 4,
        minor: 1,
        cachethis: false,
        reclaim_complete: false,
        ..Setup::default()
    };
    V4::connect_with(server, owner, &setup).await
}

/// EXCHANGE_ID's server owner (major id) and scope, asked by a client never confirmed
/// (so never recorded).
async fn server_scope(server: &Server) -> (Bytes, Bytes) {
    let conn = RpcConnection::connect(server.addr)
        .await
        .expect("connect")
        .with_auth(&client::auth_sys(0, 0, &[]));
    let eid = common::v4::exchange_id("scope-probe", [9; 8]);
    let res = common::v4::call(&conn, &Compound4Args::new(1, vec![eid])).await;
    let ResOp::ExchangeId(Res4::Ok(e)) = &res.results[0] else {
        panic!("EXCHANGE_ID: {res:?}")
    };
    (
        e.eir_server_owner.so_major_id.0.clone(),
        e.eir_server_scope.0.clone(),
    )
}

fn open(owner: &str, claim: OpenClaim4, create: bool) -> ArgOp {
    let openhow = if create {
        Openflag4::Create(Createhow4::Unchecked(Fattr4::default()))
    } else {
        Openflag4::NoCreate
    };
    ArgOp::Open(OpenArgs {
        seqid: 0,
        share_access: share::ACCESS_BOTH,
        share_deny: share::DENY_NONE,
        owner: StateOwner4 {
            clientid: 0,
            owner: Opaque4(Bytes::from(owner.to_string())),
        },
        openhow,
        claim,
    })
}

fn opened(results: &[ResOp]) -> Stateid4 {
    results
        .iter()
        .find_map(|r| match r {
            ResOp::Open(Res4::Ok(o)) => Some(o.stateid),
            _ => None,
        })
        .expect("an OPEN result")
}

fn write(sid: Stateid4, offset: u64, data: &'static [u8]) -> ArgOp {
    ArgOp::Write(WriteArgs {
        stateid: sid,
        offset,
        stable: StableHow4::FileSync,
        data: Bytes::from_static(data),
    })
}

fn records(state: &Path) -> usize {
    std::fs::read_dir(state.join("nfs4-clients"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_client_reclaims_its_open_after_a_restart() {
    let dir = std::env::temp_dir().join(format!("granary-v4-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("export")).unwrap();
    let (export, state) = (dir.join("export"), dir.join("state"));
    let args = [
        export.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--squash",
        "none",
        "--lease-secs",
        "10",
    ];
    let server = Server::start(&args);

    // Client A opens a file and writes to it; client T comes and goes.
    let mut a = connect(&server, "restart-a").await;
    let (status, _) = a.run_unchecked(vec![ArgOp::ReclaimComplete(false)]).await;
    assert_eq!(status, Nfsstat4::Ok);
    let name = Component4(Bytes::from_static(b"held"));
    let ops = vec![
        ArgOp::Putrootfh,
        open("proc-1", OpenClaim4::Null(name), true),
        ArgOp::Getfh,
    ];
    let (status, res) = a.run_unchecked(ops).await;
    assert_eq!(status, Nfsstat4::Ok, "OPEN: {res:?}");
    let sid = opened(&res);
    let ResOp::Getfh(Res4::Ok(fh)) = &res[2] else {
        panic!("GETFH: {res:?}")
    };
    let fh = fh.clone();
    let (status, _) = a
        .run_unchecked(vec![ArgOp::Putfh(fh.clone()), write(sid, 0, b"before ")])
        .await;
    assert_eq!(status, Nfsstat4::Ok);
    let t = connect(&server, "restart-t").await;
    assert_eq!(records(&state), 2, "both confirmed clients are recorded");
    let res = common::v4::call(
        &t.conn,
        &Compound4Args::new(1, vec![ArgOp::DestroySession(t.session)]),
    )
    .await;
    assert_eq!(res.status, Nfsstat4::Ok);
    let res = common::v4::call(
        &t.conn,
        &Compound4Args::new(1, vec![ArgOp::DestroyClientid(t.clientid)]),
    )
    .await;
    assert_eq!(res.status, Nfsstat4::Ok);
    assert_eq!(records(&state), 1, "DESTROY_CLIENTID removes the record");

    // The server restarts on the same state directory, the same server to its clients
    // (a Linux client that sees another scope reclaims nothing).
    let scope = server_scope(&server).await;
    drop(a.conn);
    assert!(server.terminate().success());
    let server = Server::start(&args);
    assert_eq!(server_scope(&server).await, scope, "owner and scope kept");

    // A client the previous run did not record: new opens wait, reclaims are refused.
    let mut b = connect(&server, "restart-b").await;
    let new_open = || {
        vec![
            ArgOp::Putrootfh,
            open(
                "proc-b",
                OpenClaim4::Null(Component4(Bytes::from_static(b"new"))),
                true,
            ),
        ]
    };
    assert_eq!(b.run_unchecked(new_open()).await.0, Nfsstat4::Grace);
    let reclaim = |owner| {
        vec![
            ArgOp::Putfh(fh.clone()),
            open(
                owner,
                OpenClaim4::Previous(OpenDelegationType4::None),
                false,
            ),
        ]
    };
    assert_eq!(
        b.run_unchecked(reclaim("proc-b")).await.0,
        Nfsstat4::NoGrace
    );
    assert_eq!(
        b.run_unchecked(vec![ArgOp::ReclaimComplete(false)]).await.0,
        Nfsstat4::Ok
    );
    assert_eq!(
        b.run_unchecked(new_open()).await.0,
        Nfsstat4::Grace,
        "A has not reclaimed"
    );

    // A comes back: a new client id for the same owner reclaims the open and uses it.
    let mut a = connect(&server, "restart-a").await;
    let (status, res) = a.run_unchecked(reclaim("proc-1")).await;
    assert_eq!(status, Nfsstat4::Ok, "CLAIM_PREVIOUS: {res:?}");
    let sid = opened(&res);
    let ops = vec![
        ArgOp::Putfh(fh.clone()),
        write(sid, 7, b"after"),
        ArgOp::Read(ReadArgs {
            stateid: sid,
            offset: 0,
            count: 100,
        }),
    ];
    let (status, res) = a.run_unchecked(ops).await;
    assert_eq!(status, Nfsstat4::Ok);
    let ResOp::Read(Res4::Ok(read)) = &res[2] else {
        panic!("READ: {res:?}")
    };
    assert_eq!(&read.data[..], b"before after");
    // Its RECLAIM_COMPLETE was the last one owed: the grace period ends early.
    assert_eq!(
        a.run_unchecked(vec![ArgOp::ReclaimComplete(false)]).await.0,
        Nfsstat4::Ok
    );
    assert_eq!(b.run_unchecked(new_open()).await.0, Nfsstat4::Ok);
    assert_eq!(records(&state), 2, "A and B are recorded by this run");

    // A restart where only B comes back: new opens wait until the grace period's timer
    // (one lease, 10 s here) ends it, and A's record goes then.
    drop((a, b));
    assert!(server.terminate().success());
    let server = Server::start(&args);
    let mut b = connect(&server, "restart-b").await;
    assert_eq!(
        b.run_unchecked(vec![ArgOp::ReclaimComplete(false)]).await.0,
        Nfsstat4::Ok
    );
    assert_eq!(
        b.run_unchecked(new_open()).await.0,
        Nfsstat4::Grace,
        "A may still come"
    );
    let mut waited = 0;
    while b.run_unchecked(new_open()).await.0 == Nfsstat4::Grace {
        waited += 1;
        assert!(waited < 60, "the grace period outlived 15 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(b.run_unchecked(new_open()).await.0, Nfsstat4::Ok);
    for _ in 0..40 {
        if records(&state) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        records(&state),
        1,
        "A did not come back: its record is gone"
    );
    drop(b);
    assert!(server.terminate().success());
    let _ = std::fs::remove_dir_all(&dir);
}

const NLM: u32 = 100_021;

/// An NLM host's whole-file write lock on the NFSv3 handle `fh` (svid 1).
fn nlm_lock(host: &str, fh: &nlm::nlm4::Netobj) -> nlm::nlm4::Lock {
    nlm::nlm4::Lock {
        caller_name: nlm::nlm4::CallerName::new(host.as_bytes().to_vec()),
        fh: fh.clone(),
        oh: nlm::nlm4::Netobj::new(format!("1@{host}").into_bytes()),
        svid: 1,
        l_offset: 0,
        l_len: 0,
    }
}

/// NLM LOCK (not blocking) of `l`, reclaiming or not: its status.
async fn nlm_call(conn: &RpcConnection, l: &nlm::nlm4::Lock, reclaim: bool) -> nlm::nlm4::Stats {
    let args = nlm::nlm4::LockArgs {
        cookie: nlm::nlm4::Netobj::new(&b"c"[..]),
        block: false,
        exclusive: true,
        alock: l.clone(),
        reclaim,
        state: 1,
    };
    let r: nlm::nlm4::Res = conn
        .call_decode(NLM, 4, nlm::nlm4::Proc::Lock as u32, &args)
        .await
        .expect("NLM LOCK");
    r.stat
}

/// NLM TEST of `l`.
async fn nlm_test(conn: &RpcConnection, l: &nlm::nlm4::Lock) -> nlm::nlm4::TestReply {
    let args = nlm::nlm4::TestArgs {
        cookie: nlm::nlm4::Netobj::new(&b"t"[..]),
        exclusive: true,
        alock: l.clone(),
    };
    let r: nlm::nlm4::TestRes = conn
        .call_decode(NLM, 4, nlm::nlm4::Proc::Test as u32, &args)
        .await
        .expect("NLM TEST");
    r.stat
}

/// A whole-file write LOCK by lock-owner `lo`: new (from the open `sid`), reclaiming or not.
fn lock(sid: Stateid4, lo: &str, reclaim: bool) -> ArgOp {
    ArgOp::Lock(LockArgs {
        locktype: NfsLockType4::Write,
        reclaim,
        offset: 0,
        length: u64::MAX,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: sid,
            lock_seqid: 0,
            lock_owner: StateOwner4 {
                clientid: 0,
                owner: Opaque4(Bytes::from(lo.to_string())),
            },
        }),
    })
}

/// The status of the LOCK (or LOCKT) at the end of `ops` run by `c`.
async fn lock_status(c: &mut V4, ops: Vec<ArgOp>) -> Nfsstat4 {
    let (status, res) = c.run_unchecked(ops).await;
    match res.last() {
        Some(ResOp::Lock(LockRes::Denied(_)) | ResOp::Lockt(LockRes::Denied(_))) => {
            Nfsstat4::Denied
        }
        _ => status,
    }
}

/// Opens `fh` anew (CLAIM_FH) as open-owner `owner`: the open stateid.
async fn open_fh(c: &mut V4, fh: &NfsFh4, owner: &str) -> Stateid4 {
    let ops = vec![ArgOp::Putfh(fh.clone()), open(owner, OpenClaim4::Fh, false)];
    let (status, res) = c.run_unchecked(ops).await;
    assert_eq!(status, Nfsstat4::Ok, "OPEN: {res:?}");
    opened(&res)
}

/// Reclaims the open of `fh` (CLAIM_PREVIOUS) as open-owner `owner`.
async fn reclaim_open(c: &mut V4, fh: &NfsFh4, owner: &str) -> Stateid4 {
    let claim = OpenClaim4::Previous(OpenDelegationType4::None);
    let ops = vec![ArgOp::Putfh(fh.clone()), open(owner, claim, false)];
    let (status, res) = c.run_unchecked(ops).await;
    assert_eq!(status, Nfsstat4::Ok, "CLAIM_PREVIOUS: {res:?}");
    opened(&res)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_are_reclaimed_after_a_kill_and_no_protocol_grants_new_ones_in_grace() {
    use nlm::nlm4::{Stats, TestReply};
    let dirs = common::HostDirs::new("relock");
    let state = dirs.state();
    let args = ["--lease-secs", "10", "--grace-secs", "4"];
    let server = dirs.serve_with(&args);
    // Two files, with their NFSv3 handles for NLM and NFSv4 handles for LOCK.
    let nfs = common::nfs::connect(&server).await;
    let root = nfs.mount("/").await.expect("MNT /");
    let mut v3 = Vec::new();
    for name in ["f3", "f4"] {
        let fh = nfs.create_file(&root, name, 0o644).await.expect("CREATE");
        v3.push(nlm::nlm4::Netobj(fh.0));
    }
    let (f3, f4) = (v3[0].clone(), v3[1].clone());
    let mut a = connect(&server, "relock-a").await;
    assert_eq!(
        a.run_unchecked(vec![ArgOp::ReclaimComplete(false)]).await.0,
        Nfsstat4::Ok
    );
    let mut fh = Vec::new();
    for name in ["f3", "f4"] {
        let ops = vec![
            ArgOp::Putrootfh,
            ArgOp::Lookup(Component4(Bytes::from_static(name.as_bytes()))),
            ArgOp::Getfh,
        ];
        let (status, res) = a.run_unchecked(ops).await;
        let ResOp::Getfh(Res4::Ok(h)) = &res[2] else {
            panic!("GETFH {name}: {status:?} {res:?}")
        };
        fh.push(h.clone());
    }
    let (fh3, fh4) = (fh[0].clone(), fh[1].clone());
    // A write-locks f4; B is a recorded client that will come back.
    let sid = open_fh(&mut a, &fh4, "proc-a").await;
    let ops = vec![ArgOp::Putfh(fh4.clone()), lock(sid, "lo-a", false)];
    assert_eq!(lock_status(&mut a, ops).await, Nfsstat4::Ok);
    let mut b = connect(&server, "relock-b").await;
    assert_eq!(
        b.run_unchecked(vec![ArgOp::ReclaimComplete(false)]).await.0,
        Nfsstat4::Ok
    );
    assert_eq!(records(&state), 2);
    drop((a, b, nfs));
    drop(server); // SIGKILL: nothing is written on the way out

    // Boot 2: two NFSv4 clients recorded, no NLM host.
    let server = dirs.serve_with(&args);
    let nlm = RpcConnection::connect(server.addr).await.unwrap();
    let beta4 = nlm_lock("beta", &f4);
    assert_eq!(
        nlm_call(&nlm, &beta4, false).await,
        Stats::DeniedGracePeriod,
        "NFSv4's grace period holds back a new NLM lock"
    );
    assert_eq!(
        nlm_test(&nlm, &beta4).await,
        TestReply::Other(Stats::DeniedGracePeriod)
    );
    assert_eq!(
        nlm_call(&nlm, &beta4, true).await,
        Stats::DeniedGracePeriod,
        "an NLM reclaim outside NLM's grace period"
    );
    let mut a = connect(&server, "relock-a").await;
    let sid = reclaim_open(&mut a, &fh4, "proc-a").await;
    let new_lock = vec![ArgOp::Putfh(fh4.clone()), lock(sid, "lo-a2", false)];
    assert_eq!(lock_status(&mut a, new_lock).await, Nfsstat4::Grace);
    let reclaim = vec![ArgOp::Putfh(fh4.clone()), lock(sid, "lo-a", true)];
    assert_eq!(
        lock_status(&mut a, reclaim).await,
        Nfsstat4::Ok,
        "LOCK reclaim"
    );
    let mut b = connect(&server, "relock-b").await;
    assert_eq!(
        b.run_unchecked(vec![ArgOp::ReclaimComplete(false)]).await.0,
        Nfsstat4::Ok
    );
    let late = vec![ArgOp::Putfh(fh4.clone()), lock(sid, "lo-b", true)];
    assert_eq!(
        lock_status(&mut b, late).await,
        Nfsstat4::NoGrace,
        "a reclaim after the client's RECLAIM_COMPLETE"
    );
    assert_eq!(
        a.run_unchecked(vec![ArgOp::ReclaimComplete(false)]).await.0,
        Nfsstat4::Ok
    );
    // Every recorded client is back: grace is over, and A's reclaimed lock excludes.
    assert_eq!(nlm_call(&nlm, &beta4, false).await, Stats::Denied);
    let sid_b = open_fh(&mut b, &fh4, "proc-b").await;
    let ops = vec![ArgOp::Putfh(fh4.clone()), lock(sid_b, "lo-b", false)];
    assert_eq!(lock_status(&mut b, ops).await, Nfsstat4::Denied);
    // An NLM host write-locks f3.
    let alpha3 = nlm_lock("alpha", &f3);
    assert_eq!(nlm_call(&nlm, &alpha3, false).await, Stats::Granted);
    drop((a, b, nlm));
    drop(server);

    // Boot 3: both NFSv4 clients and NLM host alpha recorded. The NFSv4 clients are back
    // first, which ends NFSv4's grace period; NLM's (4 s) still holds new NFSv4 locks.
    let server = dirs.serve_with(&args);
    let nlm = RpcConnection::connect(server.addr).await.unwrap();
    let mut a = connect(&server, "relock-a").await;
    let sid = reclaim_open(&mut a, &fh4, "proc-a").await;
    let reclaim = vec![ArgOp::Putfh(fh4.clone()), lock(sid, "lo-a", true)];
    assert_eq!(lock_status(&mut a, reclaim).await, Nfsstat4::Ok);
    assert_eq!(
        a.run_unchecked(vec![ArgOp::ReclaimComplete(false)]).await.0,
        Nfsstat4::Ok
    );
    let mut b = connect(&server, "relock-b").await;
    assert_eq!(
        b.run_unchecked(vec![ArgOp::ReclaimComplete(false)]).await.0,
        Nfsstat4::Ok
    );
    let sid_b = open_fh(&mut b, &fh3, "proc-b").await;
    let take = || vec![ArgOp::Putfh(fh3.clone()), lock(sid_b, "lo-b", false)];
    assert_eq!(
        lock_status(&mut b, take()).await,
        Nfsstat4::Grace,
        "NLM's grace period holds back a new NFSv4 lock"
    );
    let test = ArgOp::Lockt(LocktArgs {
        locktype: NfsLockType4::Write,
        offset: 0,
        length: u64::MAX,
        owner: StateOwner4 {
            clientid: 0,
            owner: Opaque4(Bytes::from_static(b"lo-b")),
        },
    });
    let ops = vec![ArgOp::Putfh(fh3.clone()), test];
    assert_eq!(lock_status(&mut b, ops).await, Nfsstat4::Grace);
    assert_eq!(
        nlm_call(&nlm, &alpha3, true).await,
        Stats::Granted,
        "NLM reclaim"
    );
    assert_eq!(
        nlm_call(&nlm, &beta4, false).await,
        Stats::DeniedGracePeriod
    );
    let mut waited = 0;
    let after = loop {
        let status = lock_status(&mut b, take()).await;
        if status != Nfsstat4::Grace {
            break status;
        }
        waited += 1;
        assert!(waited < 40, "NLM's grace period outlived 10 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(after, Nfsstat4::Denied, "alpha's reclaimed lock excludes");
    assert_eq!(
        nlm_call(&nlm, &beta4, false).await,
        Stats::Denied,
        "A's too"
    );
    assert_eq!(
        nlm_call(&nlm, &alpha3, true).await,
        Stats::DeniedGracePeriod,
        "no NLM reclaim after grace"
    );
    drop((a, b, nlm));
    drop(server);
}
