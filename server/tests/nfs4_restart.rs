//! NFSv4.1 restart recovery of the real `granary` binary (RFC 8881 section 8.4.2): a
//! client confirmed by CREATE_SESSION is recorded in the state directory; after a restart
//! on the same directory it reclaims its open with CLAIM_PREVIOUS during the grace period
//! and keeps reading and writing the file, while new opens wait (`NFS4ERR_GRACE`) and a
//! client the previous run did not record cannot reclaim (`NFS4ERR_NO_GRACE`); the grace
//! period ends when every recorded client sent RECLAIM_COMPLETE, or on its timer.

mod common;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
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

    // The server restarts on the same state directory.
    drop(a.conn);
    assert!(server.terminate().success());
    let server = Server::start(&args);

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
