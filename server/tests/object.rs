//! The real binary serving an object export (PostgreSQL + S3 from
//! `scripts/object-env.sh`), two heads on one database and bucket: what one head's client
//! does, the other head's client sees, through granary's client crate and through
//! libnfs-utils. Fails when the engines are absent unless GRANARY_OBJECT_TESTS=skip.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use backend_object::{ObjectConfig, TestEngines};
use common::nfs::connect;
use common::object::{engine, head_config, head_config_with, scratch};
use common::Server;
use nfs3::nfs::{NfsFh3, StableHow};

/// The outage test stops the database every test here uses: the tests of this file run
/// one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Two heads of one fresh object file system.
fn two_heads(tag: &str) -> Option<(Server, Server, PathBuf)> {
    heads(tag).map(|h| (h.a, h.b, h.dir))
}

/// Two heads, their file system, and where head A's config is (to start it again).
struct Heads {
    a: Server,
    b: Server,
    dir: PathBuf,
    fs: ObjectConfig,
}

fn heads(tag: &str) -> Option<Heads> {
    let env = TestEngines::from_env()?;
    let fs = env.fresh(tag);
    let dir = scratch(tag);
    let key = dir.join("handle.key");
    let a = head_config(&dir, "a", &fs, &key);
    let b = head_config(&dir, "b", &fs, &key);
    let a = Server::start(&["--config", a.to_str().unwrap()]);
    let b = Server::start(&["--config", b.to_str().unwrap()]);
    Some(Heads { a, b, dir, fs })
}

/// A head in this process, for what the tests check in the database and the store: no
/// row names a missing object, and after a round of garbage collection past a short
/// grace, no object lies in the store that no row names (the dead and the orphans of a
/// crash are gone).
fn audit_and_sweep(fs: &ObjectConfig) {
    let mut config = fs.clone();
    config.gc.grace = Duration::from_secs(1);
    config.gc.interval = Duration::ZERO;
    let auditor =
        backend_object::ObjectFs::open(&config, std::sync::Arc::new(gtime::SystemClock::new()))
            .expect("an auditing head opens");
    let before = auditor.audit().expect("audit");
    assert!(
        before.missing.is_empty(),
        "rows name missing objects: {before:?}"
    );
    // Twice: the first round records orphans, the second deletes them past the grace.
    auditor.gc_round().expect("a round of garbage collection");
    std::thread::sleep(Duration::from_millis(1500));
    let r = auditor.gc_round().expect("a round of garbage collection");
    let after = auditor.audit().expect("audit");
    assert!(
        after.missing.is_empty() && after.unnamed.is_empty(),
        "after the sweep: {after:?} (before: {before:?}, round: {r:?})"
    );
    eprintln!(
        "audit: {} objects named, {} unnamed before the sweep, {} deleted",
        before.named,
        before.unnamed.len(),
        r.objects_deleted
    );
}

/// A client that waits longer than the head's own operation timeout (10 s), so that an
/// outage's JUKEBOX reaches the test rather than the client's timeout.
async fn patient(server: &Server) -> client::Nfs3Client {
    connect(server).await.with_timeout(Duration::from_secs(30))
}

fn write_args(fh: &NfsFh3, offset: u64, data: &[u8], stable: StableHow) -> nfs3::nfs::WriteArgs {
    nfs3::nfs::WriteArgs {
        file: fh.clone(),
        offset,
        count: data.len() as u32,
        stable,
        data: bytes::Bytes::copy_from_slice(data),
    }
}

fn commit_args(fh: &NfsFh3) -> nfs3::nfs::CommitArgs {
    nfs3::nfs::CommitArgs {
        file: fh.clone(),
        offset: 0,
        count: 0,
    }
}

/// COMMITs `fh` until it is OK (JUKEBOX meanwhile), within `bound`; its verifier.
async fn commit_until_ok(c: &client::Nfs3Client, fh: &NfsFh3, bound: Duration) -> [u8; 8] {
    let deadline = Instant::now() + bound;
    loop {
        match c.commit(&commit_args(fh)).await {
            Ok(nfs3::nfs::Res3::Ok(ok)) => return ok.verf,
            Ok(nfs3::nfs::Res3::Fail(nfs3::nfs::Nfsstat3::Jukebox, _))
                if Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => panic!("COMMIT did not recover: {other:?}"),
        }
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 253) as u8).collect()
}

#[test]
fn a_file_made_on_one_head_is_seen_and_read_through_the_other() {
    let _serial = one_at_a_time();
    let Some((a, b, _dir)) = two_heads("srv-heads") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let ca = connect(&a).await;
        let cb = connect(&b).await;
        let root_a = ca.mount("/").await.expect("MNT / on head A");
        let root_b = cb.mount("/").await.expect("MNT / on head B");
        assert_eq!(root_a, root_b, "both heads hand out the same root handle");
        let fh = ca.create_file(&root_a, "shared", 0o644).await.unwrap();
        let data = pattern(3 << 20);
        ca.write_all(&fh, 0, &data, StableHow::Unstable)
            .await
            .unwrap();
        let commit = nfs3::nfs::CommitArgs {
            file: fh.clone(),
            offset: 0,
            count: 0,
        };
        common::nfs::expect_ok(ca.commit(&commit).await.unwrap(), "COMMIT on A");
        // Head B resolves head A's handle, finds the name and reads the committed data.
        let on_b = cb.getattr_ok(&fh).await.expect("A's handle on B");
        assert_eq!(on_b.size, data.len() as u64);
        let (found, _) = cb.lookup_ok(&root_b, "shared").await.unwrap();
        assert_eq!(found, fh);
        assert!(
            cb.read_all(&fh).await.unwrap() == data,
            "B reads what A committed"
        );
        // A directory made on B is listed on A at once.
        cb.mkdir_ok(&root_b, "from-b", 0o755).await.unwrap();
        let names: Vec<String> = ca
            .list_dir(&root_a)
            .await
            .unwrap()
            .into_iter()
            .map(|(name, _, _)| String::from_utf8_lossy(&name).into_owned())
            .collect();
        assert!(names.contains(&"from-b".to_string()), "{names:?}");
        cb.rename_ok(&root_b, "shared", &root_b, "renamed")
            .await
            .unwrap();
        assert!(ca.lookup_ok(&root_a, "shared").await.is_err());
        assert_eq!(ca.lookup_ok(&root_a, "renamed").await.unwrap().0, fh);
    });
}

#[test]
fn libnfs_utils_copy_in_through_one_head_and_out_through_the_other() {
    let _serial = one_at_a_time();
    let Some((a, b, dir)) = two_heads("srv-libnfs") else {
        return;
    };
    for (name, len) in [("tiny", 100), ("page", 4096), ("mib-plus", (1 << 20) + 3)] {
        let local = dir.join(name);
        let data = pattern(len);
        std::fs::write(&local, &data).unwrap();
        run("nfs-cp", &[local.to_str().unwrap(), &a.url_of(name)]);
        let out = run("nfs-cat", &[&b.url_of(name)]);
        assert!(out == data, "{name}: nfs-cat through head B differs");
    }
    let listing = String::from_utf8(run("nfs-ls", &[&b.url_of("")])).unwrap();
    for name in ["tiny", "page", "mib-plus"] {
        assert!(listing.contains(name), "nfs-ls on B: {listing}");
    }
}

/// libnfs's POSIX-like API (`tests/libnfs/posix.c`, the program libnfs_posix.rs runs on
/// the mem backend: 50-odd checks of creates, O_EXCL, reads and writes, holes,
/// truncation, renames, links, symlinks, device nodes, chmod/chown/utimes, readdir) through
/// one head of an object export, root not squashed.
#[test]
fn libnfs_posix_operations_through_an_object_head() {
    let _serial = one_at_a_time();
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let fs = env.fresh("srv-posix");
    let dir = scratch("srv-posix");
    let config = head_config_with(
        &dir,
        "a",
        &fs,
        &dir.join("handle.key"),
        "squash = \"none\"\n",
    );
    let head = Server::start(&["--config", config.to_str().unwrap()]);
    let program = common::build_libnfs_posix();
    let out = Command::new(&program)
        .arg(head.url_of(""))
        .output()
        .expect("run posix");
    let _ = std::fs::remove_file(&program);
    let text = String::from_utf8_lossy(&out.stdout);
    let passes = text.lines().filter(|l| l.starts_with("PASS ")).count();
    assert!(
        out.status.success(),
        "libnfs checks failed on the object head:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(passes >= 50, "only {passes} checks ran:\n{text}");
}

fn run(tool: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new(tool).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run {tool} ({e}); install libnfs-utils: apt-get install libnfs-utils")
    });
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn a_stopped_database_answers_jukebox_and_the_head_recovers_when_it_is_back() {
    let _serial = one_at_a_time();
    let Some(Heads { a, fs, .. }) = heads("srv-dbdown") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let data = pattern(3 << 20);
    rt.block_on(async {
        let c = patient(&a).await;
        let root = c.mount("/").await.expect("MNT /");
        let fh = c.create_file(&root, "f", 0o644).await.unwrap();
        // 3 MiB buffered in the head, to be published while the database is down.
        let big = c.create_file(&root, "big", 0o644).await.unwrap();
        write_unstable(&c, &big, 0, &data).await;
        let mut v4 = common::v4::V4::connect(&a, "object-outage").await;
        engine("pg-stop");
        let started = Instant::now();
        let args = nfs3::nfs::GetattrArgs { object: fh.clone() };
        let res = c.getattr(&args).await;
        let commit = c.commit(&commit_args(&big)).await;
        let lookup =
            nfs4::ops::ArgOp::Lookup(nfs4::types::Component4(bytes::Bytes::from_static(b"f")));
        let (v4_status, _) = v4
            .run_unchecked(vec![nfs4::ops::ArgOp::Putrootfh, lookup])
            .await;
        let took = started.elapsed();
        engine("pg-start");
        match res {
            Ok(nfs3::nfs::Res3::Fail(status, _)) => {
                assert_eq!(status, nfs3::nfs::Nfsstat3::Jukebox);
            }
            other => panic!("GETATTR with the database stopped: {other:?}"),
        }
        assert!(
            matches!(
                commit,
                Ok(nfs3::nfs::Res3::Fail(nfs3::nfs::Nfsstat3::Jukebox, _))
            ),
            "COMMIT with the database stopped: {commit:?}"
        );
        assert_eq!(
            v4_status,
            nfs4::Nfsstat4::Delay,
            "NFSv4 LOOKUP with the database stopped"
        );
        assert!(took < Duration::from_secs(30), "three calls took {took:?}");
        // Back by itself: the head's pool drops the dead connections and makes new ones.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match c.getattr_ok(&fh).await {
                Ok(attr) => {
                    assert_eq!(attr.size, 0);
                    break;
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("not yet: {e:?}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("the head did not recover: {e:?}"),
            }
        }
        c.create_file(&root, "after", 0o644)
            .await
            .expect("CREATE after recovery");
        // The buffered data was kept through the outage and publishes now.
        commit_until_ok(&c, &big, Duration::from_secs(30)).await;
        assert!(c.read_all(&big).await.unwrap() == data);
    });
    drop(a);
    audit_and_sweep(&fs);
}

/// Writes `data` at `offset` in `chunk`-byte UNSTABLE WRITEs, checking each count.
async fn write_unstable(c: &client::Nfs3Client, fh: &NfsFh3, offset: u64, data: &[u8]) -> [u8; 8] {
    let mut verf = [0; 8];
    for (i, piece) in data.chunks(CHUNK).enumerate() {
        let at = offset + (i * CHUNK) as u64;
        let ok = common::nfs::expect_ok(
            c.write(&write_args(fh, at, piece, StableHow::Unstable))
                .await
                .unwrap(),
            "UNSTABLE WRITE",
        );
        assert_eq!(ok.count as usize, piece.len());
        verf = ok.verf;
    }
    verf
}

const CHUNK: usize = 64 << 10;

#[test]
fn a_head_killed_mid_unstable_writes_loses_nothing_stable_and_its_clients_resend() {
    let _serial = one_at_a_time();
    let Some(Heads { a, b, dir, fs }) = heads("srv-kill") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let data = pattern(4 << 20);
    let committed = 1 << 20;
    let synced = committed..committed + CHUNK;
    let (fh, verf_a) = rt.block_on(async {
        let ca = connect(&a).await;
        let root = ca.mount("/").await.expect("MNT / on head A");
        let fh = ca.create_file(&root, "f", 0o644).await.unwrap();
        // The first MiB UNSTABLE and COMMITted, the next 64 KiB FILE_SYNC: both stable.
        let verf = write_unstable(&ca, &fh, 0, &data[..committed]).await;
        let commit = common::nfs::expect_ok(ca.commit(&commit_args(&fh)).await.unwrap(), "COMMIT");
        assert_eq!(commit.verf, verf, "the verifier held from WRITE to COMMIT");
        let sync = common::nfs::expect_ok(
            ca.write(&write_args(
                &fh,
                synced.start as u64,
                &data[synced.clone()],
                StableHow::FileSync,
            ))
            .await
            .unwrap(),
            "FILE_SYNC WRITE",
        );
        assert_eq!(sync.committed, StableHow::FileSync);
        (fh, verf)
    });
    // The rest UNSTABLE, from another thread, while head A is killed under it.
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = {
        let (acked, data, addr) = (acked.clone(), data.clone(), a.addr);
        let fh = fh.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let c = client::Nfs3Client::connect(addr, addr).await.unwrap();
                for at in (synced.end..data.len()).step_by(CHUNK) {
                    let args =
                        write_args(&fh, at as u64, &data[at..at + CHUNK], StableHow::Unstable);
                    match c.write(&args).await {
                        Ok(nfs3::nfs::Res3::Ok(_)) => {
                            acked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        _ => return, // the head is gone
                    }
                }
            });
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while acked.load(std::sync::atomic::Ordering::SeqCst) < 8 {
        assert!(
            Instant::now() < deadline,
            "UNSTABLE writes did not get going"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(a); // kill -9
    writer.join().unwrap();
    let acked = acked.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        acked < (data.len() - synced.end) / CHUNK,
        "the kill came after every write ({acked})"
    );
    rt.block_on(async {
        let cb = connect(&b).await;
        cb.mount("/").await.expect("MNT / on head B");
        // Everything acknowledged as stable is there, through the other head.
        let size = cb.getattr_ok(&fh).await.expect("A's handle on B").size;
        assert!(size >= synced.end as u64, "size {size}");
        let read = cb.read_all(&fh).await.unwrap();
        assert!(read[..synced.end] == data[..synced.end], "stable data lost");
        // The client's rule (RFC 1813 3.3.21): a COMMIT whose verifier differs from the
        // WRITEs' means resending every write since the last good COMMIT.
        let verf_b =
            common::nfs::expect_ok(cb.commit(&commit_args(&fh)).await.unwrap(), "COMMIT on B").verf;
        assert_ne!(verf_b, verf_a, "head B's verifier is its own");
        let again = write_unstable(&cb, &fh, synced.end as u64, &data[synced.end..]).await;
        assert_eq!(again, verf_b);
        let done =
            common::nfs::expect_ok(cb.commit(&commit_args(&fh)).await.unwrap(), "COMMIT on B");
        assert_eq!(
            done.verf, verf_b,
            "no restart between: the resend is stable"
        );
        assert!(
            cb.read_all(&fh).await.unwrap() == data,
            "the file after the resend"
        );
    });
    // Head A started again: a new verifier, and the same file.
    let a = Server::start(&["--config", dir.join("a.toml").to_str().unwrap()]);
    rt.block_on(async {
        let ca = connect(&a).await;
        ca.mount("/").await.expect("MNT / on the restarted head");
        let verf = write_unstable(&ca, &fh, 0, &data[..CHUNK]).await;
        assert_ne!(verf, verf_a, "a restarted head has a new write verifier");
        assert!(ca.read_all(&fh).await.unwrap() == data);
    });
    drop(a);
    audit_and_sweep(&fs);
}

#[test]
fn an_s3_server_killed_mid_upload_answers_jukebox_and_the_head_recovers_by_itself() {
    let _serial = one_at_a_time();
    let Some(Heads { a, b, fs, .. }) = heads("srv-s3down") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let data: Vec<Vec<u8>> = (0..4).map(|i| pattern((3 << 20) + i * 1000)).collect();
    rt.block_on(async {
        let ca = std::sync::Arc::new(patient(&a).await);
        let root = ca.mount("/").await.expect("MNT / on head A");
        let mut files = Vec::new();
        for (i, d) in data.iter().enumerate() {
            let fh = ca.create_file(&root, format!("f{i}"), 0o644).await.unwrap();
            write_unstable(&ca, &fh, 0, d).await;
            files.push(fh);
        }
        // Four COMMITs upload 12 MiB at once; the S3 server is killed under them.
        let commits: Vec<_> = files
            .iter()
            .map(|fh| {
                let (c, fh) = (ca.clone(), fh.clone());
                tokio::spawn(async move { c.commit(&commit_args(&fh)).await.unwrap() })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        tokio::task::spawn_blocking(|| engine("s3-kill"))
            .await
            .unwrap();
        let mut failed = 0;
        for c in commits {
            match c.await.unwrap() {
                nfs3::nfs::Res3::Ok(_) => {}
                nfs3::nfs::Res3::Fail(status, _) => {
                    assert_eq!(status, nfs3::nfs::Nfsstat3::Jukebox);
                    failed += 1;
                }
            }
        }
        // While it is down: data that needs the store waits, metadata does not.
        let g = ca
            .create_file(&root, "g", 0o644)
            .await
            .expect("CREATE while S3 is down");
        let started = Instant::now();
        let w = ca
            .write(&write_args(&g, 0, &data[0][..CHUNK], StableHow::FileSync))
            .await
            .unwrap();
        assert!(
            matches!(w, nfs3::nfs::Res3::Fail(nfs3::nfs::Nfsstat3::Jukebox, _)),
            "a FILE_SYNC WRITE with the store down: {w:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{:?}",
            started.elapsed()
        );
        let upload_started = Instant::now();
        tokio::task::spawn_blocking(|| engine("s3-start"))
            .await
            .unwrap();
        eprintln!(
            "{failed} of 4 COMMITs answered JUKEBOX; S3 back in {:?}",
            upload_started.elapsed()
        );
        // Back by itself: every COMMIT goes through, and head B reads every byte.
        for fh in files.iter().chain([&g]) {
            commit_until_ok(&ca, fh, Duration::from_secs(60)).await;
        }
        let cb = connect(&b).await;
        cb.mount("/").await.expect("MNT / on head B");
        for (fh, d) in files.iter().zip(&data) {
            assert!(
                cb.read_all(fh).await.unwrap() == *d,
                "a file differs after the outage"
            );
        }
        assert!(cb.read_all(&g).await.unwrap() == data[0][..CHUNK]);
    });
    drop((a, b));
    audit_and_sweep(&fs);
}

/// The head's `granary_object_*` counters (what `granary bench --suite object` divides by
/// the NFS operations of a phase).
fn engine_counters(port: u16) -> std::collections::BTreeMap<String, f64> {
    let text = common::metrics::scrape(port);
    [
        "db_transactions",
        "s3_puts",
        "s3_put_bytes",
        "s3_gets",
        "s3_get_bytes",
    ]
    .into_iter()
    .map(|name| {
        let v = common::metrics::sample(&text, &format!("granary_object_{name}_total "));
        (name.to_string(), v)
    })
    .collect()
}

#[test]
fn a_create_costs_one_transaction_and_no_s3_request_and_a_big_write_one_put() {
    let _serial = one_at_a_time();
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let fs = env.fresh("srv-costs");
    let dir = scratch("srv-costs");
    let config = head_config(&dir, "a", &fs, &dir.join("handle.key"));
    let port = common::metrics::free_port();
    let metrics = format!("127.0.0.1:{port}");
    let a = Server::start(&["--config", config.to_str().unwrap(), "--metrics", &metrics]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = connect(&a).await;
        let root = c.mount("/").await.expect("MNT /");
        let before = engine_counters(port);
        let creates = 20;
        for i in 0..creates {
            c.create_file(&root, &format!("f{i}"), 0o644).await.unwrap();
        }
        let after = engine_counters(port);
        let d = |k: &str,
                 from: &std::collections::BTreeMap<String, f64>,
                 to: &std::collections::BTreeMap<String, f64>| to[k] - from[k];
        let tx = d("db_transactions", &before, &after);
        // One each, and the head's ctime-floor write (once a second) at most twice.
        assert!(
            (f64::from(creates)..=f64::from(creates) + 2.0).contains(&tx),
            "{creates} CREATEs cost {tx} database transactions"
        );
        assert_eq!(d("s3_puts", &before, &after), 0.0, "a CREATE sent a PUT");
        assert_eq!(d("s3_gets", &before, &after), 0.0, "a CREATE sent a GET");
        // 64 KiB written FILE_SYNC: one object; read back: one ranged GET of those bytes.
        let fh = c.create_file(&root, "big", 0o644).await.unwrap();
        let data = pattern(64 << 10);
        let before = engine_counters(port);
        c.write_all(&fh, 0, &data, StableHow::FileSync)
            .await
            .unwrap();
        let written = engine_counters(port);
        assert_eq!(d("s3_puts", &before, &written), 1.0);
        assert_eq!(d("s3_put_bytes", &before, &written), (64 << 10) as f64);
        assert!(c.read_all(&fh).await.unwrap() == data);
        let read = engine_counters(port);
        assert_eq!(d("s3_gets", &written, &read), 1.0);
        assert_eq!(d("s3_get_bytes", &written, &read), (64 << 10) as f64);
    });
}

/// The Linux NFSv4.2 client's writeback through a head, on granary's NFSv4.1 client:
/// OPEN, UNSTABLE WRITEs of 1 MiB with the open stateid on 8 session slots at once and
/// out of order (NFS4ERR_DELAY sent again, as Linux does), the COMMIT of close, CLOSE.
/// The COMMIT answers in bounded time, the other head reads every byte, and the head
/// uploaded about the file's size (its `granary_object_s3_put_bytes_total`).
#[test]
fn a_v4_clients_writeback_through_a_head_commits_in_bounded_time() {
    use nfs4::ops::{ArgOp, CloseArgs, CommitArgs, StableHow4, WriteArgs};
    use nfs4::Nfsstat4;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let _serial = one_at_a_time();
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let fs = env.fresh("srv-v4wb");
    let dir = scratch("srv-v4wb");
    let key = dir.join("handle.key");
    let port = common::metrics::free_port();
    let metrics = format!("127.0.0.1:{port}");
    let a = head_config(&dir, "a", &fs, &key);
    let a = Server::start(&["--config", a.to_str().unwrap(), "--metrics", &metrics]);
    let b = head_config(&dir, "b", &fs, &key);
    let b = Server::start(&["--config", b.to_str().unwrap()]);
    let data = Arc::new(pattern((12 << 20) + 4097));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = engine_counters(port);
    let close = rt.block_on(async {
        let conn = client::RpcConnection::connect(a.addr)
            .await
            .unwrap()
            .with_auth(&client::auth_sys(0, 0, &[]))
            .with_timeout(Duration::from_secs(60));
        let s = Arc::new(
            client::v4::Nfs4Session::connect(conn, b"linux-like", 8)
                .await
                .expect("a session of 8 slots"),
        );
        let (fh, sid) = s.open(0, &[], b"f", b"owner").await.expect("OPEN");
        // Each window of 8 WRITEs arrives last first.
        let mut order: Vec<usize> = (0..data.len()).step_by(1 << 20).collect();
        for window in order.chunks_mut(8) {
            window.reverse();
        }
        let order = Arc::new(order);
        let next = Arc::new(AtomicUsize::new(0));
        let call = |s: Arc<client::v4::Nfs4Session>, slot: u32, ops: Vec<ArgOp>| async move {
            let start = Instant::now();
            loop {
                let (status, r) = s.compound(slot, ops.clone()).await.expect("SEQUENCE");
                match status {
                    Nfsstat4::Ok => return,
                    Nfsstat4::Delay if start.elapsed() < Duration::from_secs(30) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    other => panic!("{other:?} after {:?}: {r:?}", start.elapsed()),
                }
            }
        };
        let mut writers = Vec::new();
        for slot in 1..8u32 {
            let (s, fh, data, order, next) = (
                Arc::clone(&s),
                fh.clone(),
                Arc::clone(&data),
                Arc::clone(&order),
                Arc::clone(&next),
            );
            writers.push(tokio::spawn(async move {
                while let Some(&at) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let end = (at + (1 << 20)).min(data.len());
                    let write = ArgOp::Write(WriteArgs {
                        stateid: sid,
                        offset: at as u64,
                        stable: StableHow4::Unstable,
                        data: bytes::Bytes::copy_from_slice(&data[at..end]),
                    });
                    call(Arc::clone(&s), slot, vec![ArgOp::Putfh(fh.clone()), write]).await;
                }
            }));
        }
        for w in writers {
            w.await.unwrap();
        }
        let start = Instant::now();
        let commit = ArgOp::Commit(CommitArgs {
            offset: 0,
            count: 0,
        });
        call(Arc::clone(&s), 0, vec![ArgOp::Putfh(fh.clone()), commit]).await;
        let close = start.elapsed();
        let done = ArgOp::Close(CloseArgs {
            seqid: 0,
            open_stateid: sid,
        });
        call(Arc::clone(&s), 0, vec![ArgOp::Putfh(fh), done]).await;
        close
    });
    let after = engine_counters(port);
    let uploaded = after["s3_put_bytes"] - before["s3_put_bytes"];
    eprintln!(
        "v4 writeback: {} bytes, close's COMMIT {close:?}, {uploaded} bytes in {} PUTs",
        data.len(),
        after["s3_puts"] - before["s3_puts"]
    );
    assert!(
        close < Duration::from_secs(20),
        "the COMMIT of close took {close:?}"
    );
    assert!(
        (data.len() as f64..=1.25 * data.len() as f64).contains(&uploaded),
        "{uploaded} bytes uploaded for {} written",
        data.len()
    );
    rt.block_on(async {
        let c = connect(&b).await;
        let root = c.mount("/").await.expect("MNT / on head B");
        let (fh, _) = c.lookup_ok(&root, "f").await.expect("f on head B");
        assert!(
            c.read_all(&fh).await.unwrap() == *data,
            "head B reads every byte"
        );
    });
}

/// SETATTR with a ctime guard (sattrguard3) through two heads: the guard is compared
/// with the ctime every head answers at that moment, so a change committed through head B
/// makes head A's guard of the ctime before it NFS3ERR_NOT_SYNC (and changes nothing),
/// a guard of the ctime read after it goes through, and so does a guard of the ctime
/// head A told its client after an UNSTABLE WRITE it still holds; ctime only goes
/// forward, whichever head is asked.
#[test]
fn a_guarded_setattr_compares_the_ctime_each_head_answers() {
    use nfs3::nfs::{Nfsstat3, Nfstime3, Sattr3, SattrGuard3, SetattrArgs};
    let _serial = one_at_a_time();
    let Some((a, b, _dir)) = two_heads("srv-guard") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let at = |t: Nfstime3| (t.seconds, t.nseconds);
    rt.block_on(async {
        let ca = connect(&a).await;
        let cb = connect(&b).await;
        let root = ca.mount("/").await.expect("MNT / on head A");
        cb.mount("/").await.expect("MNT / on head B");
        let fh = ca.create_file(&root, "g", 0o644).await.unwrap();
        let chmod = |mode: u32, guard: Option<Nfstime3>| SetattrArgs {
            object: fh.clone(),
            new_attributes: Sattr3 {
                mode: Some(mode),
                ..Sattr3::default()
            },
            guard: SattrGuard3(guard),
        };
        let c0 = ca.getattr_ok(&fh).await.unwrap().ctime;
        let r = cb.setattr(&chmod(0o600, None)).await.unwrap();
        assert_eq!(r.status(), Nfsstat3::Ok, "chmod on B");
        let c1 = ca.getattr_ok(&fh).await.unwrap().ctime;
        assert!(at(c1) > at(c0), "B's change moved the ctime A answers");
        assert_eq!(at(cb.getattr_ok(&fh).await.unwrap().ctime), at(c1));
        let r = ca.setattr(&chmod(0o644, Some(c0))).await.unwrap();
        assert_eq!(
            r.status(),
            Nfsstat3::NotSync,
            "A's guard predates B's change"
        );
        assert_eq!(ca.getattr_ok(&fh).await.unwrap().mode & 0o7777, 0o600);
        let r = ca.setattr(&chmod(0o640, Some(c1))).await.unwrap();
        assert_eq!(r.status(), Nfsstat3::Ok, "the guard A answered");
        let c2 = cb.getattr_ok(&fh).await.unwrap().ctime;
        assert!(at(c2) > at(c1));
        let r = cb.setattr(&chmod(0o600, Some(c1))).await.unwrap();
        assert_eq!(
            r.status(),
            Nfsstat3::NotSync,
            "B's guard predates A's change"
        );

        // An UNSTABLE WRITE head A holds: its client's guard is the ctime A tells it.
        write_unstable(&ca, &fh, 0, &pattern(100)).await;
        let told = ca.getattr_ok(&fh).await.unwrap().ctime;
        assert!(at(told) > at(c2), "the WRITE moved the ctime A answers");
        let r = ca.setattr(&chmod(0o604, Some(told))).await.unwrap();
        assert_eq!(
            r.status(),
            Nfsstat3::Ok,
            "the guard A told its client after a WRITE"
        );
        let c3 = ca.getattr_ok(&fh).await.unwrap().ctime;
        assert!(at(c3) > at(told));
        commit_until_ok(&ca, &fh, Duration::from_secs(10)).await;
        let c4 = cb.getattr_ok(&fh).await.unwrap();
        assert!(at(c4.ctime) > at(c3), "the publish moved the ctime on");
        assert_eq!((c4.size, c4.mode & 0o7777), (100, 0o604));
        assert_eq!(at(ca.getattr_ok(&fh).await.unwrap().ctime), at(c4.ctime));
    });
}

/// A server with a mem export beside an object export (`/mem`, `/obj`): an NFSv4
/// COMPOUND that cannot reach the object export runs on the network worker, as on a
/// server of mem exports only (GETATTR, the Linux client's READ COMPOUND, a lease
/// renewal, SETATTR, OPEN, WRITE and CLOSE of a mem file, LOOKUP from the pseudo root into
/// the mem export: no call on the blocking pool); one that may reach it goes to the pool whole
/// before anything runs (LOOKUP from the pseudo root into it, a READDIR of the pseudo
/// root that lists it, LOOKUPP out of the mem export, I/O on its files: one pool call
/// each), and both are answered right (`nfsd/src/v4/reach.rs`).
#[test]
fn v4_compounds_that_cannot_reach_the_object_export_stay_on_the_worker() {
    let _serial = one_at_a_time();
    let Some((server, port)) = mem_beside_object("srv-v4pool") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(mixed_exports_v4(&server, port));
}

/// A server (a debug build) with `/mem` (mem) and `/obj` (object, a fresh file system),
/// and the port of its metrics; `None` without the engines.
fn mem_beside_object(tag: &str) -> Option<(Server, u16)> {
    let env = TestEngines::from_env()?;
    let fs = env.fresh(tag);
    let dir = scratch(tag);
    let config = dir.join("mixed.toml");
    let text = format!(
        "handle_key = {:?}\n[[export]]\npath = \"/mem\"\nbackend = \"mem\"\nsquash = \"none\"\n{}squash = \"none\"\n",
        dir.join("handle.key"),
        common::object::export_table("/obj", &fs)
    );
    std::fs::write(&config, text).unwrap();
    let port = common::metrics::free_port();
    let metrics = format!("127.0.0.1:{port}");
    let server = Server::start(&["--config", config.to_str().unwrap(), "--metrics", &metrics]);
    Some((server, port))
}

/// Random COMPOUNDs (a printed seed; `GRANARY_SWEEP_SEED` replays one) over both exports
/// of a mem-beside-object server and its pseudo root: PUTFH of every kind of handle,
/// PUTROOTFH, LOOKUP and LOOKUPP across the pseudo tree, SAVEFH/RESTOREFH, GETATTR (with
/// and without the file system's figures), ACCESS, READDIR, SECINFO_NO_NAME, READ, LOCKT,
/// OPEN, CLOSE, SETATTR, TEST_STATEID. The server is a debug build, where a COMPOUND
/// judged not to reach the object export asserts that it never calls its engines nor
/// holds one of its files (`nfsd/src/v4/reach.rs`): a wrong judgement panics the handler,
/// the call gets no reply and the test fails. Both judgements must occur.
#[test]
fn random_v4_compounds_judged_local_never_reach_the_object_engines() {
    let _serial = one_at_a_time();
    let Some((server, port)) = mem_beside_object("srv-v4sweep") else {
        return;
    };
    let seed = std::env::var("GRANARY_SWEEP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("GRANARY_SWEEP_SEED={seed}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(sweep_v4(&server, port, seed));
}

async fn sweep_v4(server: &Server, port: u16, seed: u64) {
    use common::v4::{name, V4};
    use nfs4::ops::{
        share, ArgOp, CloseArgs, LocktArgs, NfsLockType4, OpenArgs, OpenClaim4, Openflag4,
        ReadArgs, ReaddirArgs, SecinfoStyle4, SetattrArgs, TestStateidArgs,
    };
    use nfs4::results::Res4;
    use nfs4::types::{Bitmap4, NfsFh4};
    use nfs4::{ResOp, Stateid4};
    let mut c = V4::connect(server, "sweep").await;
    c.cachethis = false;
    let pool = || {
        common::metrics::sample(
            &common::metrics::scrape(port),
            "granary_blocking_pool_calls_total",
        )
    };
    let (mem_root, f, f_sid) = v4_create(&mut c, ArgOp::Lookup(name("mem")), b"mem").await;
    let (obj_root, g, g_sid) = v4_create(&mut c, ArgOp::Lookup(name("obj")), b"obj").await;
    let (_, r) = c.run(vec![ArgOp::Putrootfh, ArgOp::Getfh]).await;
    let ResOp::Getfh(Res4::Ok(pseudo)) = &r[1] else {
        panic!("GETFH: {r:?}")
    };
    let handles = [
        pseudo.clone(),
        mem_root,
        f,
        obj_root,
        g,
        NfsFh4(bytes::Bytes::from_static(b"not a handle")),
    ];
    let sids = [f_sid, g_sid];
    let names = ["mem", "obj", "f", "nope"];
    let mut rng = seed | 1;
    let mut next = move |n: usize| {
        // xorshift64: reproducible from the seed.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let attrs = |bits: &[u32]| Bitmap4::from_bits(bits);
    let (compounds, before) = (300, pool());
    for i in 0..compounds {
        let ops: Vec<ArgOp> = (0..1 + next(6))
            .map(|_| match next(17) {
                0 | 1 => ArgOp::Putfh(handles[next(handles.len())].clone()),
                2 => ArgOp::Putrootfh,
                3 | 4 => ArgOp::Lookup(name(names[next(names.len())])),
                5 => ArgOp::Lookupp,
                6 => ArgOp::Savefh,
                7 => ArgOp::Restorefh,
                8 => ArgOp::Getattr(if next(2) == 0 {
                    attrs(&[nfs4::attr::num::TYPE, nfs4::attr::num::SIZE])
                } else {
                    attrs(&[nfs4::attr::num::SPACE_FREE])
                }),
                9 => ArgOp::Access(0x3f),
                10 => ArgOp::Readdir(ReaddirArgs {
                    cookie: 0,
                    cookieverf: [0; 8],
                    dircount: 4096,
                    maxcount: 8192,
                    attr_request: attrs(&[nfs4::attr::num::TYPE]),
                }),
                11 => ArgOp::SecinfoNoName(SecinfoStyle4::CurrentFh),
                12 => ArgOp::Read(ReadArgs {
                    stateid: Stateid4::ANONYMOUS,
                    offset: 0,
                    count: 100,
                }),
                13 => ArgOp::Lockt(LocktArgs {
                    locktype: NfsLockType4::Write,
                    offset: 0,
                    length: 10,
                    owner: common::v4::owner("sweeper"),
                }),
                14 => ArgOp::Close(CloseArgs {
                    seqid: 0,
                    open_stateid: sids[next(2)],
                }),
                15 => ArgOp::Open(OpenArgs {
                    seqid: 0,
                    share_access: share::ACCESS_READ,
                    share_deny: share::DENY_NONE,
                    owner: common::v4::owner("sweeper"),
                    openhow: Openflag4::NoCreate,
                    claim: OpenClaim4::Null(name("f")),
                }),
                _ => {
                    if next(2) == 0 {
                        ArgOp::Setattr(SetattrArgs {
                            stateid: Stateid4::ANONYMOUS,
                            obj_attributes: nfs4::attr::Fattr {
                                mode: Some(0o644),
                                ..nfs4::attr::Fattr::default()
                            }
                            .to_fattr4(),
                        })
                    } else {
                        ArgOp::TestStateid(TestStateidArgs {
                            ts_stateids: sids.to_vec(),
                        })
                    }
                }
            })
            .collect();
        let sent = ops.len();
        let (status, r) = c.run(ops).await;
        // Every result up to the first failure, which ends the COMPOUND.
        let failed = r.iter().position(|r| !r.status().is_ok());
        assert_eq!(
            failed.map_or(sent, |at| at + 1),
            r.len(),
            "COMPOUND {i}: {r:?}"
        );
        assert_eq!(
            failed.map(|at| r[at].status()),
            Some(status).filter(|s| !s.is_ok())
        );
    }
    let deferred = pool() - before;
    eprintln!("{compounds} random COMPOUNDs: {deferred} on the blocking pool");
    assert!(
        deferred > 0.0 && deferred < f64::from(compounds),
        "both judgements occur: {deferred} of {compounds} deferred"
    );
}

/// [`v4_compounds_that_cannot_reach_the_object_export_stay_on_the_worker`]'s client.
async fn mixed_exports_v4(server: &Server, port: u16) {
    use common::v4::{name, V4};
    use nfs4::ops::{ArgOp, CloseArgs, ReaddirArgs, SetattrArgs};
    use nfs4::results::Res4;
    use nfs4::{Nfsstat4, ResOp, Stateid4};
    let mut c = V4::connect(server, "mixed").await;
    c.cachethis = false;
    let metric = |name: &str| common::metrics::sample(&common::metrics::scrape(port), name);
    let pool = || metric("granary_blocking_pool_calls_total");
    let mem_data = pattern(4096);
    let before = pool();
    let (mem_root, f, f_sid) = v4_create(&mut c, ArgOp::Lookup(name("mem")), &mem_data).await;
    assert_eq!(
        pool() - before,
        0.0,
        "PUTROOTFH, LOOKUP mem, OPEN, WRITE ran on the loop"
    );

    // What the Linux client sends most: GETATTR, READ, SEQUENCE alone (lease renewal);
    // and what a server with a host export sends to the pool, a SETATTR (a mem export
    // never sleeps on a disk, nor does a server's object export make it).
    let before = pool();
    let rounds = 20;
    for _ in 0..rounds {
        let (status, r) = c.run(vec![ArgOp::Putfh(f.clone()), getattr_size()]).await;
        assert_eq!(status, Nfsstat4::Ok, "{r:?}");
        assert_eq!(v4_size(&r[1]), 4096);
        let got = v4_read(&mut c, &f, Stateid4::ANONYMOUS).await;
        assert!(got == mem_data, "the mem file's bytes");
        assert_eq!(c.run(vec![]).await.0, Nfsstat4::Ok);
    }
    let chmod = ArgOp::Setattr(SetattrArgs {
        stateid: Stateid4::ANONYMOUS,
        obj_attributes: nfs4::attr::Fattr {
            mode: Some(0o600),
            ..nfs4::attr::Fattr::default()
        }
        .to_fattr4(),
    });
    let (status, r) = c.run(vec![ArgOp::Putfh(f.clone()), chmod]).await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    assert_eq!(
        pool() - before,
        0.0,
        "GETATTR, READ, SEQUENCE or SETATTR of a mem file went to the blocking pool"
    );
    let worker = |outcome: &str| {
        metric(&format!(
            r#"granary_nfs4_worker_reads_total{{outcome="{outcome}"}}"#
        ))
    };
    assert_eq!(
        (worker("answered"), worker("deferred")),
        (0.0, 0.0),
        "READs of mem run where they arrive without a try"
    );

    // The object export, named from the pseudo root: each COMPOUND on the pool, once.
    let obj_data = pattern(10_000);
    let before = pool();
    let (obj_root, g, g_sid) = v4_create(&mut c, ArgOp::Lookup(name("obj")), &obj_data).await;
    assert!(
        v4_read(&mut c, &g, g_sid).await == obj_data,
        "the object file's bytes"
    );
    assert_eq!(pool() - before, 2.0, "LOOKUP obj + OPEN + WRITE, then READ");

    // A stateid of the object file under the mem file's handle: refused on the loop.
    let before = pool();
    let close = |sid| {
        ArgOp::Close(CloseArgs {
            seqid: 0,
            open_stateid: sid,
        })
    };
    let (status, _) = c.run(vec![ArgOp::Putfh(f.clone()), close(g_sid)]).await;
    assert_eq!(status, Nfsstat4::BadStateid);
    let (status, _) = c.run(vec![ArgOp::Putfh(f.clone()), close(f_sid)]).await;
    assert_eq!(status, Nfsstat4::Ok);
    assert_eq!(pool() - before, 0.0, "CLOSEs under a mem file's handle");
    let (status, _) = c.run(vec![ArgOp::Putfh(g.clone()), close(g_sid)]).await;
    assert_eq!(status, Nfsstat4::Ok);
    assert_eq!(pool() - before, 1.0, "the object file's CLOSE");

    // Ways into the object export without its handle: on the pool, and right.
    let before = pool();
    let readdir = ArgOp::Readdir(ReaddirArgs {
        cookie: 0,
        cookieverf: [0; 8],
        dircount: 8192,
        maxcount: 32768,
        attr_request: nfs4::types::Bitmap4::from_bits(&[nfs4::attr::num::TYPE]),
    });
    let (status, r) = c.run(vec![ArgOp::Putrootfh, readdir]).await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let ResOp::Readdir(Res4::Ok(list)) = &r[1] else {
        panic!("READDIR: {r:?}")
    };
    let names: Vec<&[u8]> = list.entries.iter().map(|e| e.name.as_bytes()).collect();
    assert_eq!(names, [&b"mem"[..], b"obj"]);
    let (status, r) = c
        .run(vec![
            ArgOp::Putfh(mem_root.clone()),
            ArgOp::Lookupp,
            ArgOp::Lookup(name("obj")),
            ArgOp::Getfh,
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    assert_eq!(r[3], ResOp::Getfh(Res4::Ok(obj_root.clone())));
    assert_eq!(
        pool() - before,
        2.0,
        "READDIR of the pseudo root, LOOKUPP out of mem"
    );

    // NFSv3's MOUNT: MNT of a path in the mem export on the loop, in the object one on
    // the pool; a path in no export is refused on the loop.
    let v3 = connect(server).await;
    let before = pool();
    let mem = v3.mount("/mem").await.expect("MNT /mem");
    assert_eq!(nfs4::types::NfsFh4(mem.0.clone()), mem_root);
    assert!(v3.mount("/nowhere").await.is_err());
    assert_eq!(pool() - before, 0.0, "MNT of /mem and of /nowhere");
    let obj = v3.mount("/obj").await.expect("MNT /obj");
    assert_eq!(nfs4::types::NfsFh4(obj.0.clone()), obj_root);
    assert_eq!(pool() - before, 1.0, "MNT of /obj");
}

/// PUTROOTFH, `into` (a LOOKUP of an export), GETFH, OPEN(CREATE) of `f`, an UNSTABLE
/// WRITE of `data`, GETFH: the export's root, the file and its open stateid.
async fn v4_create(
    c: &mut common::v4::V4,
    into: nfs4::ops::ArgOp,
    data: &[u8],
) -> (nfs4::types::NfsFh4, nfs4::types::NfsFh4, nfs4::Stateid4) {
    use nfs4::ops::{share, ArgOp, StableHow4, WriteArgs};
    use nfs4::results::Res4;
    use nfs4::{Nfsstat4, ResOp, Stateid4};
    let open = common::v4::open_create("owner", "f", share::ACCESS_BOTH, share::DENY_NONE);
    let write = ArgOp::Write(WriteArgs {
        stateid: Stateid4::CURRENT,
        offset: 0,
        stable: StableHow4::Unstable,
        data: bytes::Bytes::copy_from_slice(data),
    });
    let (status, r) = c
        .run(vec![
            ArgOp::Putrootfh,
            into,
            ArgOp::Getfh,
            open,
            write,
            ArgOp::Getfh,
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let (ResOp::Getfh(Res4::Ok(root)), ResOp::Open(Res4::Ok(o)), ResOp::Getfh(Res4::Ok(f))) =
        (&r[2], &r[3], &r[5])
    else {
        panic!("{r:?}")
    };
    (root.clone(), f.clone(), o.stateid)
}

/// SEQUENCE, PUTFH, READ of up to 64 KiB: the bytes.
async fn v4_read(
    c: &mut common::v4::V4,
    f: &nfs4::types::NfsFh4,
    sid: nfs4::Stateid4,
) -> bytes::Bytes {
    use nfs4::ops::{ArgOp, ReadArgs};
    use nfs4::results::Res4;
    use nfs4::{Nfsstat4, ResOp};
    let read = ArgOp::Read(ReadArgs {
        stateid: sid,
        offset: 0,
        count: 64 << 10,
    });
    let (status, r) = c.run(vec![ArgOp::Putfh(f.clone()), read]).await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let ResOp::Read(Res4::Ok(got)) = &r[1] else {
        panic!("READ: {r:?}")
    };
    got.data.clone()
}

fn getattr_size() -> nfs4::ops::ArgOp {
    nfs4::ops::ArgOp::Getattr(nfs4::types::Bitmap4::from_bits(&[nfs4::attr::num::SIZE]))
}

fn v4_size(r: &nfs4::ResOp) -> u64 {
    let nfs4::ResOp::Getattr(nfs4::results::Res4::Ok(f)) = r else {
        panic!("GETATTR: {r:?}")
    };
    nfs4::attr::Fattr::from_fattr4(f)
        .expect("attributes")
        .size
        .expect("size")
}
