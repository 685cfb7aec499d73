//! The seed designs behind `granary lab`, seen by a client of the real server:
//! - multigrain (the default): a WRITE after the client saw the file's attributes always
//!   shows a later ctime and mtime, however fast the WRITEs come; with `--timestamps
//!   coarse` WRITEs within one clock tick repeat the ctime (the problem the seed fixes);
//! - every `--rangelock` the server accepts serves WRITE and READ, and `none` (no lock,
//!   lab only) and unknown modes are refused with the flag named.

mod common;

use std::process::Command;

use bytes::Bytes;
use client::{nfs_ok, Nfs3Client};
use common::Server;
use nfs3::nfs::{Fattr3, NfsFh3, ReadArgs, StableHow, WriteArgs};

/// WRITEs tried when looking for a repeated coarse ctime: far more than one tick's worth.
const MAX_WRITES: usize = 2_000;

fn nanos(attr: &Fattr3, ctime: bool) -> u128 {
    let t = if ctime { &attr.ctime } else { &attr.mtime };
    u128::from(t.seconds) * 1_000_000_000 + u128::from(t.nseconds)
}

async fn file(server: &Server) -> (Nfs3Client, NfsFh3) {
    let client = Nfs3Client::connect(server.addr, server.addr)
        .await
        .expect("connect");
    let root = client.mount("/").await.expect("mount");
    let fh = client.create_file(&root, "f", 0o644).await.expect("create");
    (client, fh)
}

async fn write(client: &Nfs3Client, fh: &NfsFh3, offset: u64, data: &'static [u8]) {
    let args = WriteArgs {
        file: fh.clone(),
        offset,
        count: data.len() as u32,
        stable: StableHow::Unstable,
        data: Bytes::from_static(data),
    };
    nfs_ok(client.write(&args).await.expect("write")).expect("WRITE ok");
}

/// WRITE then GETATTR, `n` times; returns the attributes seen after each WRITE.
async fn write_and_look(client: &Nfs3Client, fh: &NfsFh3, n: usize) -> Vec<Fattr3> {
    let mut seen = Vec::with_capacity(n);
    for i in 0..n {
        write(client, fh, (i % 64) as u64, b"x").await;
        seen.push(client.getattr_ok(fh).await.expect("getattr"));
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multigrain_shows_every_observed_write() {
    for args in [
        &[][..],
        &["--timestamps", "multigrain"][..],
        &["--timestamps", "fine"][..],
    ] {
        let server = Server::start(args);
        let (client, fh) = file(&server).await;
        let seen = write_and_look(&client, &fh, 300).await;
        for pair in seen.windows(2) {
            assert!(
                nanos(&pair[1], true) > nanos(&pair[0], true),
                "{args:?}: a WRITE after GETATTR kept ctime {:?}",
                pair[0].ctime
            );
            assert_eq!(
                nanos(&pair[1], true),
                nanos(&pair[1], false),
                "mtime = ctime"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coarse_timestamps_repeat_within_a_tick() {
    let server = Server::start(&["--timestamps", "coarse"]);
    let (client, fh) = file(&server).await;
    let mut last = client.getattr_ok(&fh).await.expect("getattr");
    for _ in 0..MAX_WRITES {
        write(&client, &fh, 0, b"y").await;
        let now = client.getattr_ok(&fh).await.expect("getattr");
        assert!(
            nanos(&now, true) >= nanos(&last, true),
            "ctime went backwards"
        );
        if nanos(&now, true) == nanos(&last, true) {
            return; // A change the client cannot see: what multigrain exists to fix.
        }
        last = now;
    }
    panic!("{MAX_WRITES} WRITEs never repeated a coarse ctime: is the coarse clock coarse?");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_accepted_range_lock_serves_io() {
    for mode in ["lockfree", "cheat", "mutex"] {
        let server = Server::start(&["--rangelock", mode]);
        let (client, fh) = file(&server).await;
        write(&client, &fh, 0, b"hello").await;
        write(&client, &fh, 4096, b"world").await;
        let args = ReadArgs {
            file: fh.clone(),
            offset: 4096,
            count: 5,
        };
        let read = nfs_ok(client.read(&args).await.expect("read")).expect("READ ok");
        assert_eq!(&read.data[..], b"world", "{mode}");
    }
}

#[test]
fn unknown_and_lab_only_modes_are_refused() {
    for (flag, value, expect) in [
        (
            "--rangelock",
            "none",
            "--rangelock: unknown range-lock mode \"none\"",
        ),
        (
            "--timestamps",
            "exact",
            "--timestamps: unknown timestamp mode \"exact\"",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_granary"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--no-portmap",
                flag,
                value,
            ])
            .output()
            .expect("run granary");
        assert!(!out.status.success(), "{flag} {value} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{flag} {value}: {err}");
    }
}
