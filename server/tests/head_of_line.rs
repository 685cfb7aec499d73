//! No client's slow system call stalls another's (issue 25): on a one-worker server
//! exporting a directory on a real disk, one connection COMMITs hundreds of MiB of
//! UNSTABLE data (an `fdatasync` that takes tens to hundreds of ms) while another issues
//! GETATTRs; the GETATTRs keep their idle latency because the COMMIT runs on the worker's
//! blocking pool, not its event loop.

mod common;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use client::Nfs3Client;
use common::nfs::connect;
use common::Server;
use nfs3::nfs::{CommitArgs, CommitRes, NfsFh3, NfsProc, StableHow, WriteArgs, WriteRes};

/// Bytes written UNSTABLE before the COMMIT: the case (512 MiB took 152 ms to
/// flush on this machine's ext4).
const DIRTY_BYTES: usize = 512 << 20;
const WRITE_BYTES: usize = 1 << 20;
/// WRITEs in flight while dirtying the file.
const WRITE_WINDOW: usize = 8;
/// How long the idle GETATTR latency is sampled.
const IDLE_SAMPLE: Duration = Duration::from_millis(500);
/// How far the median GETATTR latency during the COMMIT may rise above the idle median:
/// a few ms of a shared, busy 2-core machine's scheduling noise (the writeback itself
/// takes CPU), far below a COMMIT's time. The tail is bounded separately: no GETATTR may
/// wait for half the COMMIT, which every one that is queued behind it does.
const ALLOWED_RISE: Duration = Duration::from_millis(5);

/// A scratch directory on the disk that holds the temporary directory (`df -T /tmp`
/// says ext4 here; a tmpfs would make `fdatasync` free and the test meaningless).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("granary-hol-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("export")).unwrap();
        Self(dir)
    }

    fn serve(&self, workers: &str) -> Server {
        let (e, s) = (self.0.join("export"), self.0.join("state"));
        Server::start(&[
            e.to_str().unwrap(),
            "--state-dir",
            s.to_str().unwrap(),
            "--squash",
            "none",
            "--workers",
            workers,
        ])
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    assert!(!samples.is_empty(), "no samples");
    samples.sort();
    let at = ((samples.len() - 1) as f64 * p).round() as usize;
    samples[at]
}

/// GETATTRs one after another until `stop` says so; returns each one's latency.
async fn getattrs_until(
    client: &Nfs3Client,
    fh: &NfsFh3,
    mut stop: impl FnMut() -> bool,
) -> Vec<Duration> {
    let mut lat = Vec::new();
    while !stop() {
        let t = Instant::now();
        client.getattr_ok(fh).await.expect("GETATTR");
        lat.push(t.elapsed());
    }
    lat
}

async fn dirty(client: &Nfs3Client, fh: &NfsFh3) {
    let chunk = Bytes::from(vec![0x5a; WRITE_BYTES]);
    let mut window = VecDeque::new();
    for i in 0..DIRTY_BYTES / WRITE_BYTES {
        if window.len() == WRITE_WINDOW {
            let w: client::PendingReply = window.pop_front().unwrap();
            let res: WriteRes = w.wait_decode().await.expect("WRITE");
            client::nfs_ok(res).expect("WRITE ok");
        }
        let args = WriteArgs {
            file: fh.clone(),
            offset: (i * WRITE_BYTES) as u64,
            count: WRITE_BYTES as u32,
            stable: StableHow::Unstable,
            data: chunk.clone(),
        };
        window.push_back(
            client
                .send_nfs(NfsProc::Write, &args)
                .await
                .expect("send WRITE"),
        );
    }
    for w in window {
        let res: WriteRes = w.wait_decode().await.expect("WRITE");
        client::nfs_ok(res).expect("WRITE ok");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_commit_does_not_stall_getattrs_of_another_connection() {
    let scratch = Scratch::new("commit");
    let server = scratch.serve("1");
    let (writer, reader) = (connect(&server).await, connect(&server).await);
    let root = writer.mount("/").await.expect("MNT");
    reader.mount("/").await.expect("MNT");
    let file = writer
        .create_file(&root, "big", 0o644)
        .await
        .expect("CREATE");
    let probe = reader
        .create_file(&root, "probe", 0o644)
        .await
        .expect("CREATE");

    let start = Instant::now();
    let mut idle = getattrs_until(&reader, &probe, || start.elapsed() >= IDLE_SAMPLE).await;
    dirty(&writer, &file).await;

    let commit = CommitArgs {
        file: file.clone(),
        offset: 0,
        count: 0,
    };
    let started = Instant::now();
    let pending = writer
        .send_nfs(NfsProc::Commit, &commit)
        .await
        .expect("send COMMIT");
    let mut pending = Box::pin(pending.wait_decode::<CommitRes>());
    let mut during = Vec::new();
    let commit_took = loop {
        tokio::select! {
            biased;
            res = &mut pending => {
                client::nfs_ok(res.expect("COMMIT")).expect("COMMIT ok");
                break started.elapsed();
            }
            lat = async {
                let t = Instant::now();
                reader.getattr_ok(&probe).await.expect("GETATTR");
                t.elapsed()
            } => during.push(lat),
        }
    };
    let (idle_n, during_n) = (idle.len(), during.len());
    let idle_p50 = percentile(&mut idle, 0.5);
    let idle_p99 = percentile(&mut idle, 0.99);
    // No GETATTR answered during the COMMIT: each waited for all of it.
    let (during_p50, during_p99) = if during.is_empty() {
        (commit_took, commit_took)
    } else {
        (percentile(&mut during, 0.5), percentile(&mut during, 0.99))
    };
    let during_max = during.iter().max().copied().unwrap_or(commit_took);
    println!(
        "COMMIT of {} MiB took {commit_took:?}; GETATTR idle: {idle_n} calls, p50 {idle_p50:?}, \
         p99 {idle_p99:?}; during the COMMIT: {during_n} calls, p50 {during_p50:?}, p99 \
         {during_p99:?}, max {during_max:?}",
        DIRTY_BYTES >> 20
    );
    // The test tells the designs apart only if the COMMIT is slow next to the bound.
    assert!(
        commit_took >= 4 * (idle_p50 + ALLOWED_RISE),
        "the COMMIT took {commit_took:?}: too fast on this disk to show a stall"
    );
    assert!(
        during_n >= 10,
        "only {during_n} GETATTRs were answered during a {commit_took:?} COMMIT"
    );
    assert!(
        during_p50 <= idle_p50 + ALLOWED_RISE,
        "GETATTR p50 rose from {idle_p50:?} idle to {during_p50:?} during the COMMIT"
    );
    assert!(
        during_max < commit_took / 2,
        "a GETATTR waited {during_max:?} during a {commit_took:?} COMMIT"
    );
    drop((writer, reader));
    server.terminate();
}
