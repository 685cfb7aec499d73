//! The Linux NFS client's writeback replayed against one head on real engines
//! (`scripts/object-env.sh start DIR`, then `. DIR/env`): many UNSTABLE WRITEs of up to
//! 1 MiB, several in flight and out of order, some pages written again (overlapping),
//! COMMITs while later writes still arrive (the kernel's background writeback), then the
//! COMMIT of close. A client retries a JUKEBOX as the kernel does, so a head that never
//! finishes shows up as a bound broken: every call answers within the operation timeout,
//! the close's COMMIT within a few of them, and the head uploads about what was written
//! (the bytes of the engine counters), not the same data again and again.
//!
//! The same client through an S3 outage: the FILE_SYNC WRITE of a close answered JUKEBOX
//! and sent again and again (what hung the kernel client in CI: the head kept every
//! copy it was sent and uploaded them all, 1.9 GB for a 4 KiB file), then the store back.
//!
//! The uploads a full file starts in the background before any COMMIT: one the store's
//! outage cut (never acknowledged, uploaded again once the store is back), ones that land
//! after the file was truncated or written again (only what the file holds commits), and
//! one older than `UPLOAD_FRESH` when its rows commit (uploaded again).
//!
//! The tests of this binary run one at a time: the engine counters are the process's.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use granary_backend_object::{engine_counters, limits, ObjectFs, TestEngines};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use vfs::{Backend, CreateMode, FileId, FsError, FsResult, SetAttr, Stability};

mod common;

use common::{create, head, read, ROOT};

/// The Linux client's largest WRITE here (granary's `max_io_bytes`, the mount's wsize).
const WSIZE: usize = 1 << 20;
/// RPCs the client keeps in flight on one file (its writeback sends them all at once).
const IN_FLIGHT: usize = 8;
/// How long the client waits before it sends a call again after JUKEBOX. The kernel
/// waits longer (5 s for NFSv3, from 0.1 s up for NFSv4); the bound is the same.
const RETRY_AFTER: Duration = Duration::from_millis(50);
/// Longest one call may take, retries included, before the test says the head hangs:
/// three operation timeouts (the kernel's writeback waited 300 s in CI when it hung).
fn patience() -> Duration {
    3 * limits::OPERATION_TIMEOUT
}

/// One client's view of the head: calls retried on JUKEBOX, counted and timed.
struct Client {
    fs: ObjectFs,
    jukebox: AtomicU64,
    slowest: Mutex<Duration>,
}

impl Client {
    fn call<T>(&self, what: &str, f: impl Fn() -> FsResult<T>) -> T {
        let start = Instant::now();
        loop {
            let one = Instant::now();
            let done = f();
            let took = one.elapsed();
            {
                let mut slowest = self.slowest.lock().unwrap();
                *slowest = (*slowest).max(took);
            }
            assert!(
                took <= limits::OPERATION_TIMEOUT + Duration::from_secs(2),
                "{what} took {took:?}, past the operation timeout"
            );
            match done {
                Ok(v) => return v,
                Err(FsError::Jukebox) => {
                    self.jukebox.fetch_add(1, Ordering::Relaxed);
                    assert!(
                        start.elapsed() < patience(),
                        "{what} still answers JUKEBOX after {:?}: the head does not get \
                         through the client's writeback",
                        start.elapsed()
                    );
                    std::thread::sleep(RETRY_AFTER);
                }
                Err(e) => panic!("{what}: {e:?}"),
            }
        }
    }

    fn write(&self, file: FileId, offset: u64, data: &[u8]) {
        let w = self.call(&format!("WRITE of {} at {offset}", data.len()), || {
            self.fs
                .write(file, offset, data, Stability::Unstable, &ROOT)
        });
        assert_eq!(w.count as usize, data.len());
    }

    fn commit(&self, file: FileId) -> Duration {
        let start = Instant::now();
        self.call("COMMIT", || self.fs.commit(file, 0, 0));
        start.elapsed()
    }
}

/// The WRITEs a Linux client's writeback sends for `data`: WSIZE pieces, sent
/// `IN_FLIGHT` at a time by as many threads, so they arrive out of order; then some pages
/// again (dirtied again while their first WRITE was in flight: the same range twice,
/// overlapping), and the last partial page again (an append's). Meanwhile a thread sends
/// COMMIT now and then, as background writeback does for the ranges it finished. Returns
/// the bytes sent.
fn writeback(client: &Client, file: FileId, data: &[u8], seed: u64) -> usize {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut pieces: Vec<(usize, usize)> = (0..data.len())
        .step_by(WSIZE)
        .map(|at| (at, (at + WSIZE).min(data.len())))
        .collect();
    // Out of order within a window, as RPCs in flight complete and are sent.
    for window in pieces.chunks_mut(IN_FLIGHT) {
        window.shuffle(&mut rng);
    }
    let pages = data.len() / 4096;
    for _ in 0..pieces.len() / 2 {
        let page = rng.gen_range(0..pages);
        let len = 4096 * rng.gen_range(1..=16usize);
        pieces.push((page * 4096, (page * 4096 + len).min(data.len())));
    }
    pieces.push((pages * 4096, data.len()));
    pieces.retain(|(from, to)| from < to);
    let sent: usize = pieces.iter().map(|(from, to)| to - from).sum();

    let next = AtomicUsize::new(0);
    let writing = AtomicUsize::new(IN_FLIGHT);
    std::thread::scope(|s| {
        for _ in 0..IN_FLIGHT {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(from, to)) = pieces.get(i) else {
                        break;
                    };
                    client.write(file, from as u64, &data[from..to]);
                }
                writing.fetch_sub(1, Ordering::Release);
            });
        }
        s.spawn(|| {
            while writing.load(Ordering::Acquire) > 0 {
                std::thread::sleep(Duration::from_millis(200));
                client.commit(file);
            }
        });
    });
    sent
}

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn a_linux_clients_writeback_commits_in_bounded_time_and_uploads_what_it_wrote() {
    let _serial = one_at_a_time();
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let client = Client {
        fs: head(&env.fresh("writeback")),
        jukebox: AtomicU64::new(0),
        slowest: Mutex::new(Duration::ZERO),
    };
    let root = client.fs.root();
    let mut sent = 0;
    let mut written = 0;
    let before = engine_counters();
    let mut closes = Vec::new();
    // A file of several objects with a partial last page, and a file of one object and
    // a bit (the heads group's largest), each written and closed as `cp` would.
    for (n, size) in [(0u64, (24 << 20) + 4097), (1, (4 << 20) + 5)] {
        let file = create(&client.fs, root, &format!("f{n}"));
        let data: Vec<u8> = {
            let mut rng = rand::rngs::StdRng::seed_from_u64(n);
            (0..size).map(|_| rng.gen()).collect()
        };
        sent += writeback(&client, file, &data, n);
        written += data.len();
        let close = client.commit(file);
        closes.push(close);
        assert!(
            close <= 2 * limits::OPERATION_TIMEOUT,
            "the COMMIT of close took {close:?}"
        );
        for at in (0..size).step_by(WSIZE) {
            let got = read(&client.fs, file, at as u64, WSIZE as u32).unwrap();
            let end = (at + WSIZE).min(size);
            assert!(got == data[at..end], "file {n}: bytes at {at} differ");
        }
    }
    let after = engine_counters();
    let uploaded = after.s3_put_bytes - before.s3_put_bytes;
    let puts = after.s3_puts - before.s3_puts;
    eprintln!(
        "writeback: {written} bytes in files, {sent} sent in WRITEs, {uploaded} uploaded in \
         {puts} PUTs; closes took {closes:?}; {} JUKEBOX answers, slowest call {:?}",
        client.jukebox.load(Ordering::Relaxed),
        client.slowest.lock().unwrap()
    );
    // Every byte sent is uploaded once (pages sent twice are sent twice); a publish cut
    // short may upload its object again, but not the file over and over.
    assert!(
        uploaded as usize <= sent + sent / 4,
        "{uploaded} bytes uploaded for {sent} bytes of WRITEs"
    );
    assert!(uploaded as usize >= written, "{uploaded} < {written}");
}

/// A TCP proxy in front of the S3 server that can be cut: while down it closes every
/// connection it holds and every new one at once (the head's requests fail fast, as they
/// did in CI), while up it forwards both ways. While held, it keeps what the head sends
/// (an upload stays in flight, neither failed nor stored) until it is let go.
struct Cut {
    port: u16,
    up: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    hold: Arc<AtomicBool>,
    /// Pieces of requests the hold kept back so far.
    held: Arc<AtomicU64>,
    /// With [`Cut::hold_first`]: the hold keeps back only the first connection that
    /// sends while it is on, and lets the others through.
    first_only: Arc<AtomicBool>,
}

impl Cut {
    fn start(to: String) -> Cut {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let open = Arc::new(Mutex::new(Vec::new()));
        let hold = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicU64::new(0));
        let first_only = Arc::new(AtomicBool::new(false));
        // The number of the connection the hold keeps back with `first_only` (0: none yet).
        let holder = Arc::new(AtomicU64::new(0));
        let (up2, open2) = (Arc::clone(&up), Arc::clone(&open));
        let (hold2, held2) = (Arc::clone(&hold), Arc::clone(&held));
        let (first2, holder2) = (Arc::clone(&first_only), holder);
        std::thread::spawn(move || {
            let mut conns = 0u64;
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                if !up2.load(Ordering::SeqCst) {
                    drop(conn);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&to) else {
                    continue;
                };
                conns += 1;
                let id = conns;
                let mut kept = open2.lock().unwrap();
                kept.push(conn.try_clone().unwrap());
                kept.push(server.try_clone().unwrap());
                for (mut from, mut to, upstream) in [
                    (conn.try_clone().unwrap(), server.try_clone().unwrap(), true),
                    (server, conn, false),
                ] {
                    let (hold, held) = (Arc::clone(&hold2), Arc::clone(&held2));
                    let (first, holder) = (Arc::clone(&first2), Arc::clone(&holder2));
                    let mine = move || {
                        !first.load(Ordering::SeqCst)
                            || holder
                                .compare_exchange(0, id, Ordering::SeqCst, Ordering::SeqCst)
                                .map_or_else(|h| h == id, |_| true)
                    };
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; 64 << 10];
                        while let Ok(n) = from.read(&mut buf) {
                            if upstream && hold.load(Ordering::SeqCst) && mine() {
                                held.fetch_add(1, Ordering::SeqCst);
                                while hold.load(Ordering::SeqCst) {
                                    std::thread::sleep(Duration::from_millis(5));
                                }
                            }
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Cut {
            port,
            up,
            open,
            hold,
            held,
            first_only,
        }
    }

    /// A configuration of `env`'s engines whose store is reached through a new proxy.
    fn in_front_of(env: &TestEngines, tag: &str) -> (Cut, granary_backend_object::ObjectConfig) {
        let mut config = env.fresh(tag);
        let endpoint = config
            .store
            .endpoint
            .clone()
            .expect("the test S3 server's endpoint");
        let cut = Cut::start(endpoint.trim_start_matches("http://").to_string());
        config.store.endpoint = Some(format!("http://127.0.0.1:{}", cut.port));
        (cut, config)
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            for c in self.open.lock().unwrap().drain(..) {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }

    /// Holds what the head sends from now on, until [`Cut::release`].
    fn hold(&self) {
        self.hold.store(true, Ordering::SeqCst);
    }

    /// Holds what the head sends from now on on one connection only, the first that
    /// sends (one upload stays in flight), until [`Cut::release`]; others go through.
    fn hold_first(&self) {
        self.first_only.store(true, Ordering::SeqCst);
        self.hold();
    }

    /// Waits until the hold keeps a request back (an upload is in flight).
    fn wait_held(&self) {
        let start = Instant::now();
        while self.held.load(Ordering::SeqCst) == 0 {
            assert!(
                start.elapsed() < limits::OPERATION_TIMEOUT / 2,
                "no upload reached the store"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn release(&self) {
        self.hold.store(false, Ordering::SeqCst);
    }
}

#[test]
fn a_close_retried_through_an_s3_outage_uploads_its_file_once_the_store_is_back() {
    let _serial = one_at_a_time();
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let (cut, config) = Cut::in_front_of(&env, "s3cut");
    let fs = head(&config);
    let file = create(&fs, fs.root(), "f.4097");
    // The heads group's first file past the inline size: its close is one FILE_SYNC WRITE.
    let data: Vec<u8> = (0..4097u32).map(|i| (i % 251) as u8).collect();
    cut.set_up(false);
    let before = engine_counters();
    let outage = Instant::now();
    let mut sent = 0;
    while outage.elapsed() < Duration::from_secs(4) {
        let r = fs.write(file, 0, &data, Stability::FileSync, &ROOT);
        assert_eq!(r.map(|_| ()), Err(FsError::Jukebox), "the store is down");
        sent += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let down = engine_counters();
    cut.set_up(true);
    let back = Instant::now();
    let w = loop {
        match fs.write(file, 0, &data, Stability::FileSync, &ROOT) {
            Ok(w) => break w,
            Err(FsError::Jukebox) => {
                assert!(
                    back.elapsed() < patience(),
                    "the store is back for {:?} and the close still answers JUKEBOX",
                    back.elapsed()
                );
                std::thread::sleep(RETRY_AFTER);
            }
            Err(e) => panic!("WRITE: {e:?}"),
        }
    };
    let recovered = back.elapsed();
    assert_eq!(w.committed, Stability::FileSync);
    let after = engine_counters();
    let tried = down.s3_put_bytes - before.s3_put_bytes;
    let uploaded = after.s3_put_bytes - down.s3_put_bytes;
    eprintln!(
        "s3 outage: {sent} FILE_SYNC WRITEs of {} bytes answered JUKEBOX; {} PUTs of {tried} \
         bytes tried meanwhile; the store back, the close answered in {recovered:?} after \
         {} PUTs of {uploaded} bytes",
        data.len(),
        down.s3_puts - before.s3_puts,
        after.s3_puts - down.s3_puts
    );
    assert_eq!(read(&fs, file, 0, 8192).unwrap(), data);
    // The file once (twice at most: a publish the outage cut short may be redone), not
    // every copy the client sent.
    assert!(
        uploaded as usize <= 2 * data.len(),
        "{uploaded} bytes uploaded for a file of {} bytes sent {sent} times",
        data.len()
    );
    // While the store was down the head did not keep sending it ever more.
    assert!(
        tried as usize <= sent * data.len(),
        "{tried} bytes tried during the outage for {sent} WRITEs of {} bytes",
        data.len()
    );
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ seed.wrapping_mul(37))
        .collect()
}

fn size_of(fs: &ObjectFs, file: FileId) -> u64 {
    fs.getattr(file).expect("GETATTR").size_bytes
}

fn resize(size: u64) -> SetAttr {
    SetAttr {
        size_bytes: Some(size),
        ..SetAttr::default()
    }
}

/// Races one truncation with a publish of the same head deterministically: the publish
/// (a COMMIT) has taken its snapshot and its upload is held in the proxy when the
/// truncation runs; the upload is let go once the truncation answered (or after 2 s, if
/// it waits for the publish). Returns the truncation's answer.
fn truncate_while_uploading<T: Send>(
    fs: &ObjectFs,
    cut: &Cut,
    file: FileId,
    truncate: impl FnOnce() -> FsResult<T> + Send,
) -> FsResult<T> {
    cut.hold();
    std::thread::scope(|s| {
        let commit = s.spawn(|| fs.commit(file, 0, 0));
        cut.wait_held();
        let truncation = s.spawn(truncate);
        let start = Instant::now();
        while !truncation.is_finished() && start.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(10));
        }
        cut.release();
        commit.join().unwrap().expect("the COMMIT");
        truncation.join().unwrap()
    })
}

/// A truncation on a head while a publish of the same file on that head uploads (COMMIT
/// or the timer took the file's buffered writes, and their rows are not committed yet):
/// the publish commits none of the bytes the truncation removed, whichever way it comes
/// (CREATE UNCHECKED with a size, as an NFSv3 create over a file or an NFSv4 OPEN with
/// size 0; SETATTR of the size), a later extension reads zeros there, another head reads
/// the same, and a truncation refused (a guard that does not match) drops none of the
/// buffered writes.
#[test]
fn a_truncation_while_a_publish_uploads_keeps_none_of_the_bytes_it_removed() {
    let _serial = one_at_a_time();
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let (cut, config) = Cut::in_front_of(&env, "trunc-race");
    let fs = head(&config);
    let mut direct = config.clone();
    direct.store.endpoint = env.config.store.endpoint.clone();
    let other = head(&direct);
    let root = fs.root();
    let file = create(&fs, root, "f");
    let old = bytes(64 << 10, 1);

    // CREATE UNCHECKED of size 0 over the file while its 64 KiB upload is held.
    fs.write(file, 0, &old, Stability::Unstable, &ROOT).unwrap();
    let made = truncate_while_uploading(&fs, &cut, file, || {
        fs.create(
            root,
            &common::name("f"),
            &CreateMode::Unchecked(resize(0)),
            &ROOT,
        )
    })
    .expect("CREATE over the file");
    assert_eq!(made.attr.fileid, file);
    assert_eq!(made.attr.size_bytes, 0);
    assert_eq!(
        size_of(&fs, file),
        0,
        "the publish brought back truncated bytes"
    );
    assert_eq!(size_of(&other, file), 0, "on the other head");
    assert_eq!(read(&other, file, 0, 1 << 20).unwrap(), b"");

    // SETATTR of the size to 1000 while the next upload is held; then an extension.
    fs.write(file, 0, &old, Stability::Unstable, &ROOT).unwrap();
    truncate_while_uploading(&fs, &cut, file, || {
        fs.setattr(file, &resize(1000), None, &ROOT)
    })
    .expect("SETATTR of the size");
    assert_eq!(size_of(&fs, file), 1000);
    assert_eq!(size_of(&other, file), 1000);
    fs.setattr(file, &resize(3000), None, &ROOT).unwrap();
    let mut want = old[..1000].to_vec();
    want.resize(3000, 0);
    for (head, fs) in [("this", &fs), ("the other", &other)] {
        assert!(
            read(fs, file, 0, 1 << 20).unwrap() == want,
            "{head} head: the bytes past the cut came back on extension"
        );
    }

    // A truncation refused (its guard is not the file's ctime) drops no buffered write.
    let new = bytes(8192, 2);
    fs.write(file, 0, &new, Stability::Unstable, &ROOT).unwrap();
    let stale_guard = Some(gtime::Timestamp::from_nanos(1));
    assert_eq!(
        fs.setattr(file, &resize(0), stale_guard, &ROOT).map(|_| ()),
        Err(FsError::NotSync)
    );
    fs.commit(file, 0, 0).unwrap();
    assert!(
        read(&other, file, 0, 1 << 20).unwrap() == new,
        "a refused truncation dropped buffered writes"
    );
    let audit = fs.audit().unwrap();
    assert!(audit.missing.is_empty(), "{audit:?}");
}

/// A truncation on head B while head A's publish of the same file uploads: B cannot cut
/// what A holds unpublished (other heads see data once it is published), so A's publish
/// lands after the truncation, as a client's own write-back cache flushed late would; but
/// none of the bytes B's truncation removed comes back (they read as zeros), and both
/// heads read the same bytes and size once A's COMMIT answered.
#[test]
fn a_truncation_on_one_head_while_another_publishes_brings_nothing_back() {
    let _serial = one_at_a_time();
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let (cut, config) = Cut::in_front_of(&env, "trunc-heads");
    let a = head(&config);
    let mut direct = config.clone();
    direct.store.endpoint = env.config.store.endpoint.clone();
    let b = head(&direct);
    let file = create(&a, a.root(), "f");
    let old = bytes(2 << 20, 3);
    a.write(file, 0, &old, Stability::Unstable, &ROOT).unwrap();
    a.commit(file, 0, 0).unwrap();
    let at = 3 << 19;
    let late = bytes(64 << 10, 4);
    a.write(file, at, &late, Stability::Unstable, &ROOT)
        .unwrap();
    let cut_to = 100_000;
    truncate_while_uploading(&a, &cut, file, || {
        let r = b.setattr(file, &resize(cut_to), None, &ROOT);
        assert_eq!(
            size_of(&b, file),
            cut_to,
            "B's truncation is seen on B at once"
        );
        r
    })
    .expect("SETATTR on B");
    let end = at + late.len() as u64;
    let mut want = old[..cut_to as usize].to_vec();
    want.resize(at as usize, 0);
    want.extend_from_slice(&late);
    for (name, fs) in [("A", &a), ("B", &b)] {
        assert_eq!(size_of(fs, file), end, "head {name}");
        let mut got = Vec::new();
        for from in (0..end).step_by(1 << 20) {
            got.extend(read(fs, file, from, 1 << 20).unwrap());
        }
        assert!(
            got == want,
            "head {name} reads bytes the truncation removed"
        );
    }
    assert_eq!(
        a.getattr(file).unwrap().ctime,
        b.getattr(file).unwrap().ctime
    );
}

/// Log lines the backend wrote in this test binary (WARN and above), kept for the tests
/// that count them.
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct Capture;

impl Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends this process's log lines to [`LOG`] (once; every thread, the backend's too).
fn capture_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| Capture)
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
    });
}

/// Lines of [`LOG`] from `from` on that contain `what`.
fn logged(from: usize, what: &str) -> usize {
    let log = LOG.lock().unwrap();
    String::from_utf8_lossy(&log[from.min(log.len())..])
        .lines()
        .filter(|l| l.contains(what))
        .count()
}

/// An S3 outage while the head serves metadata, its clients' FILE_SYNC WRITEs answered
/// JUKEBOX and its publish timer trying a file's buffered writes: one line when the
/// store goes away and one when it answers again, not one per operation or per try (each
/// GETATTR between two failed WRITEs once logged the store back and the next WRITE gone
/// again); the JUKEBOX answers are counted in the engine counters (the
/// `granary_object_jukebox_total` metric).
#[test]
fn an_s3_outage_is_one_log_line_each_way_and_its_jukebox_answers_are_counted() {
    let _serial = one_at_a_time();
    capture_logs();
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let (cut, config) = Cut::in_front_of(&env, "s3-log");
    let fs = head(&config);
    let file = create(&fs, fs.root(), "f");
    let other = create(&fs, fs.root(), "buffered");
    let data = bytes(8192, 5);
    let from = LOG.lock().unwrap().len();
    let before = engine_counters();
    cut.set_up(false);
    // Buffered writes the publish timer tries (and fails) during the outage.
    fs.write(other, 0, &data, Stability::Unstable, &ROOT)
        .unwrap();
    let outage = Instant::now();
    let mut jukebox = 0;
    while outage.elapsed() < limits::PUBLISH_AGE + Duration::from_secs(3) {
        fs.getattr(file)
            .expect("metadata is served during an S3 outage");
        let w = fs.write(file, 0, &data, Stability::FileSync, &ROOT);
        assert_eq!(w.map(|_| ()), Err(FsError::Jukebox), "the store is down");
        jukebox += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = || String::from_utf8_lossy(&LOG.lock().unwrap()[from..]).into_owned();
    assert_eq!(logged(from, "engine unreachable"), 1, "{}", text());
    assert_eq!(logged(from, "answers again"), 0, "{}", text());
    assert_eq!(logged(from, "publish"), 0, "{}", text());
    let counted = engine_counters().jukebox - before.jukebox;
    assert!(
        counted >= jukebox,
        "{counted} JUKEBOX counted, {jukebox} answered"
    );
    cut.set_up(true);
    let back = Instant::now();
    loop {
        match fs.write(file, 0, &data, Stability::FileSync, &ROOT) {
            Ok(_) => break,
            Err(FsError::Jukebox) => {
                assert!(
                    back.elapsed() < patience(),
                    "the store is back, the head is not"
                );
                std::thread::sleep(RETRY_AFTER);
            }
            Err(e) => panic!("WRITE: {e:?}"),
        }
    }
    fs.commit(other, 0, 0).unwrap();
    assert_eq!(logged(from, "answers again"), 1, "{}", text());
    assert_eq!(logged(from, "engine unreachable"), 1, "{}", text());
    eprintln!(
        "s3 outage of {:?}: {jukebox} JUKEBOX answers ({counted} counted), log:\n{}",
        back - outage,
        text()
    );
}

/// Writes `data` to `file` in 1 MiB UNSTABLE WRITEs, in order.
fn write_mibs(fs: &ObjectFs, file: FileId, at: u64, data: &[u8]) {
    for (i, piece) in data.chunks(1 << 20).enumerate() {
        let offset = at + (i << 20) as u64;
        let w = fs.write(file, offset, piece, Stability::Unstable, &ROOT);
        assert_eq!(
            w.map(|w| w.count as usize),
            Ok(piece.len()),
            "WRITE at {offset}"
        );
    }
}

/// Every byte of `file` through `fs`, in 1 MiB READs up to its size.
fn whole(fs: &ObjectFs, file: FileId) -> Vec<u8> {
    let size = size_of(fs, file);
    let mut got = Vec::new();
    for from in (0..size).step_by(1 << 20) {
        got.extend(read(fs, file, from, 1 << 20).unwrap());
    }
    got
}

/// No row names an object the store lacks; the objects no row names (uploads not
/// committed, or redone).
fn unnamed_objects(fs: &ObjectFs) -> Vec<i64> {
    let audit = fs.audit().expect("audit");
    assert!(
        audit.missing.is_empty(),
        "rows name missing objects: {audit:?}"
    );
    audit.unnamed
}

/// COMMITs `file` until it answers OK, each try answering OK or JUKEBOX, within
/// [`patience`]; the JUKEBOX answers it took.
fn commit_until_ok(fs: &ObjectFs, file: FileId) -> usize {
    let start = Instant::now();
    let mut jukebox = 0;
    loop {
        match fs.commit(file, 0, 0) {
            Ok(_) => return jukebox,
            Err(FsError::Jukebox) => {
                jukebox += 1;
                assert!(
                    start.elapsed() < patience(),
                    "COMMIT still answers JUKEBOX after {:?}",
                    start.elapsed()
                );
                std::thread::sleep(RETRY_AFTER);
            }
            Err(e) => panic!("COMMIT: {e:?}"),
        }
    }
}

/// The store cut while a sealed object uploads in the background, before any COMMIT (the
/// fifth 1 MiB WRITE found the file's 4 MiB of open data full, sealed it and started its
/// upload, which the proxy holds; then the store goes away and the upload fails): every
/// COMMIT meanwhile answers JUKEBOX, never OK, and no row is committed (another head sees
/// an empty file, and no row names a missing object). Once the store is back, a COMMIT
/// uploads the failed object again and answers OK; the other head reads every byte, and
/// the head uploaded the file about once, not once per try.
#[test]
fn a_background_upload_the_store_cut_is_never_acknowledged_and_is_redone_when_it_is_back() {
    let _serial = one_at_a_time();
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let (cut, config) = Cut::in_front_of(&env, "bg-cut");
    let fs = head(&config);
    let mut direct = config.clone();
    direct.store.endpoint = env.config.store.endpoint.clone();
    let other = head(&direct);
    let file = create(&fs, fs.root(), "f");
    let data = bytes(5 << 20, 6);
    write_mibs(&fs, file, 0, &data[..4 << 20]);
    cut.hold();
    let before = engine_counters();
    write_mibs(&fs, file, 4 << 20, &data[4 << 20..]);
    cut.wait_held();
    assert_eq!(
        engine_counters().s3_puts - before.s3_puts,
        1,
        "the fifth WRITE started one upload"
    );
    cut.set_up(false);
    cut.release();
    let outage = Instant::now();
    let mut tries = 0;
    while outage.elapsed() < Duration::from_secs(3) {
        assert_eq!(
            fs.commit(file, 0, 0).map(|_| ()),
            Err(FsError::Jukebox),
            "a COMMIT acknowledged data the store does not hold"
        );
        tries += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        size_of(&other, file),
        0,
        "a row was committed during the outage"
    );
    assert!(
        unnamed_objects(&other).is_empty(),
        "an object was stored during the outage"
    );
    let down = engine_counters();
    cut.set_up(true);
    let back = Instant::now();
    let jukebox = commit_until_ok(&fs, file);
    let recovered = back.elapsed();
    let after = engine_counters();
    let uploaded = after.s3_put_bytes - down.s3_put_bytes;
    eprintln!(
        "background upload cut: {tries} COMMITs answered JUKEBOX during the outage; the store \
         back, COMMIT answered OK after {jukebox} more JUKEBOX in {recovered:?}, {} PUTs of \
         {uploaded} bytes",
        after.s3_puts - down.s3_puts
    );
    assert!(
        whole(&other, file) == data,
        "the other head reads other bytes"
    );
    assert!(whole(&fs, file) == data, "this head reads other bytes");
    assert!(
        uploaded as usize >= data.len() && uploaded as usize <= 2 * data.len(),
        "{uploaded} bytes uploaded after the outage for a file of {}",
        data.len()
    );
    let unnamed = unnamed_objects(&other);
    assert!(unnamed.len() <= 1, "objects no row names: {unnamed:?}");
}

/// A sequential writer while its oldest upload hangs in the store (held in the proxy)
/// and the two after it were stored: the file's next objects seal and upload at once,
/// beside the hung one, instead of the writer waiting for it (an upload that ended early
/// leaves its slot to the next; `SEALED_PER_FILE`); nothing commits before the oldest
/// (another head sees an empty file); once it lands, a COMMIT commits them all in order
/// and both heads read every byte. (When the three slots counted sealed objects, the
/// 17th WRITE waited for the hung upload: its timeout, 10 s.)
#[test]
fn uploads_that_end_before_an_older_one_leave_their_slots_to_the_next() {
    let _serial = one_at_a_time();
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let (cut, config) = Cut::in_front_of(&env, "bg-order");
    let fs = head(&config);
    let mut direct = config.clone();
    direct.store.endpoint = env.config.store.endpoint.clone();
    let other = head(&direct);
    let file = create(&fs, fs.root(), "f");
    let mib = 1usize << 20;
    let data = bytes(20 * mib, 9);
    write_mibs(&fs, file, 0, &data[..4 * mib]);
    let before = engine_counters();
    cut.hold_first();
    // The fifth WRITE seals the first object; its upload hangs.
    write_mibs(&fs, file, 4 * mib as u64, &data[4 * mib..5 * mib]);
    cut.wait_held();
    // The 9th and 13th seal the second and third, which the store takes.
    write_mibs(&fs, file, 5 * mib as u64, &data[5 * mib..16 * mib]);
    let start = Instant::now();
    while unnamed_objects(&other).len() < 2 {
        assert!(
            start.elapsed() < patience(),
            "the 2nd and 3rd uploads never landed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(engine_counters().s3_puts - before.s3_puts, 3);
    // The 17th finds the file full with one upload in flight: it seals the fourth and
    // goes on, as do the rest.
    let start = Instant::now();
    write_mibs(&fs, file, 16 * mib as u64, &data[16 * mib..]);
    let took = start.elapsed();
    assert!(
        took < limits::OPERATION_TIMEOUT / 2,
        "the WRITEs waited {took:?} for the hung upload"
    );
    assert_eq!(
        engine_counters().s3_puts - before.s3_puts,
        4,
        "a fourth upload started beside the hung one"
    );
    assert_eq!(
        size_of(&other, file),
        0,
        "a row committed before the oldest"
    );
    cut.release();
    commit_until_ok(&fs, file);
    assert!(
        whole(&other, file) == data,
        "the other head reads other bytes"
    );
    assert!(whole(&fs, file) == data, "this head reads other bytes");
    assert!(unnamed_objects(&other).is_empty(), "an object no row names");
}

/// Uploads that went stale before their rows committed, each held in the proxy while the
/// file changed under it: (1) the file was truncated (its sealed bytes past the new end
/// must not come back, not even when the file grows again); (2) the client wrote the
/// sealed range again (the newer bytes win on every head). Both heads read the same
/// bytes, and no row names a missing object.
#[test]
fn a_background_upload_that_lands_after_a_truncation_or_a_rewrite_commits_only_what_the_file_holds()
{
    let _serial = one_at_a_time();
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let (cut, config) = Cut::in_front_of(&env, "bg-stale");
    let fs = head(&config);
    let mut direct = config.clone();
    direct.store.endpoint = env.config.store.endpoint.clone();
    let other = head(&direct);
    let root = fs.root();

    // (1) Truncated to 1 MiB + 10 while the sealed first 4 MiB upload.
    let file = create(&fs, root, "truncated");
    let data = bytes(5 << 20, 7);
    write_mibs(&fs, file, 0, &data[..4 << 20]);
    cut.hold();
    write_mibs(&fs, file, 4 << 20, &data[4 << 20..]);
    cut.wait_held();
    let cut_to = (1 << 20) + 10;
    fs.setattr(file, &resize(cut_to), None, &ROOT)
        .expect("SETATTR of the size");
    cut.release();
    commit_until_ok(&fs, file);
    for (name, head) in [("this", &fs), ("the other", &other)] {
        assert_eq!(size_of(head, file), cut_to, "{name} head");
        assert!(
            whole(head, file) == data[..cut_to as usize],
            "{name} head: other bytes"
        );
    }
    fs.setattr(file, &resize(6 << 20), None, &ROOT).unwrap();
    let mut want = data[..cut_to as usize].to_vec();
    want.resize(6 << 20, 0);
    for (name, head) in [("this", &fs), ("the other", &other)] {
        assert!(
            whole(head, file) == want,
            "{name} head: the bytes past the cut came back on extension"
        );
    }

    // (2) The first MiB written again while the sealed first 4 MiB upload.
    let file = create(&fs, root, "rewritten");
    let data = bytes(5 << 20, 8);
    write_mibs(&fs, file, 0, &data[..4 << 20]);
    cut.hold();
    write_mibs(&fs, file, 4 << 20, &data[4 << 20..]);
    cut.wait_held();
    let newer = bytes(1 << 20, 9);
    write_mibs(&fs, file, 0, &newer);
    let mut want = data.clone();
    want[..1 << 20].copy_from_slice(&newer);
    assert!(whole(&fs, file) == want, "this head reads its newer write");
    cut.release();
    commit_until_ok(&fs, file);
    for (name, head) in [("this", &fs), ("the other", &other)] {
        assert!(
            whole(head, file) == want,
            "{name} head: the stale upload's bytes won over the newer write"
        );
    }
    unnamed_objects(&other);
}

/// An upload that stored its object long before its rows commit (older than
/// `UPLOAD_FRESH`, on the head's clock) is uploaded again under a new id: the orphan sweep
/// may take an object that old, so the rows must name a fresh one. The old object is the
/// one no row names; the head's clock is a manual one, moved past `UPLOAD_FRESH` between
/// the upload and the COMMIT.
#[test]
fn an_upload_older_than_upload_fresh_is_done_again_before_its_rows_commit() {
    let _serial = one_at_a_time();
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let config = env.fresh("bg-old");
    let clock = Arc::new(gtime::ManualClock::new(gtime::Clock::now(
        &gtime::SystemClock::new(),
    )));
    let fs = ObjectFs::open(&config, Arc::clone(&clock) as Arc<dyn gtime::Clock>)
        .expect("the head opens");
    let other = head(&config);
    let file = create(&fs, fs.root(), "f");
    let data = bytes(5 << 20, 10);
    let before = engine_counters();
    write_mibs(&fs, file, 0, &data);
    // The fifth WRITE started the first object's upload: wait until it is stored.
    let start = Instant::now();
    while unnamed_objects(&other).is_empty() {
        assert!(
            start.elapsed() < limits::OPERATION_TIMEOUT,
            "the background upload never stored its object"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let first = unnamed_objects(&other);
    assert_eq!(first.len(), 1, "{first:?}");
    clock.advance(limits::UPLOAD_FRESH + Duration::from_secs(1));
    commit_until_ok(&fs, file);
    let after = engine_counters();
    assert!(
        whole(&other, file) == data,
        "the other head reads other bytes"
    );
    // The first object twice (its upload, then again at the commit), the last MiB once.
    assert_eq!(after.s3_puts - before.s3_puts, 3);
    assert_eq!(after.s3_put_bytes - before.s3_put_bytes, 9 << 20);
    assert_eq!(
        unnamed_objects(&other),
        first,
        "the rows name the object uploaded again, not the old one"
    );
}

/// Heads whose clocks differ: head A (its clock an hour ahead) holds buffered writes of a
/// file, and head B (on the system clock) commits a change to it, stamped below A's
/// stamp. A's clients must still see the ctime (their change attribute) move, once,
/// and the publish must commit at least what they saw, so it never goes back.
#[test]
fn a_change_from_a_head_whose_clock_is_behind_moves_the_ctime_of_buffered_writes() {
    let _serial = one_at_a_time();
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let config = env.fresh("skew");
    // B first: a head reads the heads' ctime floor when it starts, and A writes its own
    // (an hour ahead) back there.
    let b = head(&config);
    let clock = Arc::new(gtime::ManualClock::new(gtime::Clock::now(
        &gtime::SystemClock::new(),
    )));
    clock.advance(Duration::from_secs(3600));
    let a =
        ObjectFs::open(&config, Arc::clone(&clock) as Arc<dyn gtime::Clock>).expect("head A opens");
    let file = create(&b, b.root(), "f");
    a.write(file, 0, b"buffered", Stability::Unstable, &ROOT)
        .expect("an UNSTABLE write on A");
    let told = a.getattr(file).expect("GETATTR on A").ctime;
    let mode = SetAttr {
        mode: Some(0o600),
        ..SetAttr::default()
    };
    b.setattr(file, &mode, None, &ROOT).expect("a chmod on B");
    let on_b = b.getattr(file).expect("GETATTR on B");
    assert!(
        on_b.ctime < told,
        "no skew to test: B stamped {:?}, A's clients were told {:?}",
        on_b.ctime,
        told
    );
    let seen = a.getattr(file).expect("GETATTR on A");
    assert_eq!(seen.mode & 0o7777, 0o600, "A reads B's change");
    assert!(
        seen.ctime > told,
        "B's change did not move the ctime A tells its clients ({:?})",
        seen.ctime
    );
    assert_eq!(
        a.getattr(file).expect("GETATTR on A").ctime,
        seen.ctime,
        "with no other change the ctime stays"
    );
    commit_until_ok(&a, file);
    for (name, fs) in [("A", &a), ("B", &b)] {
        let after = fs.getattr(file).expect("GETATTR");
        assert!(
            after.ctime >= seen.ctime,
            "{name}: the published ctime {:?} is below what A's clients saw {:?}",
            after.ctime,
            seen.ctime
        );
        assert_eq!(after.size_bytes, 8, "{name}: the published size");
    }
}
