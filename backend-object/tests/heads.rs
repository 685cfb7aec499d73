//! Byte-range locks across heads through the backend's seam (`vfs::HeadLocks`), on the
//! real engines: two heads of one file system, each with a stand-in for its lock manager
//! (what it holds per file, which the seam reads after a grant and on each change).
//! A write lock on one head keeps the other head off its bytes, not off others; shared
//! locks share; a release reaches the other head; a head that stops heartbeating frees
//! its ranges after its lease; the rows per file stay bounded; a head that watches a
//! file hears of the other head's release of it (LISTEN/NOTIFY) at once, and of the
//! other head's lease running out within a heartbeat of it.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{create, fresh_with_lease, head, query_i64, stand_in, Held};
use granary_backend_object::{ObjectConfig, ObjectFs, TestEngines};
use vfs::{Backend, FileId, HeadLock, HeadLocks, LockSpan};

/// One head and what its "lock manager" holds per file.
struct Head {
    fs: ObjectFs,
    held: Held<Vec<LockSpan>>,
}

impl Head {
    fn open(config: &ObjectConfig) -> Self {
        let fs = head(config);
        let (held, source) = stand_in();
        fs.head_locks()
            .expect("the object backend keeps locks across heads")
            .attach(source);
        Self { fs, held }
    }

    fn seam(&self) -> &dyn HeadLocks {
        self.fs.head_locks().unwrap()
    }

    /// A LOCK of `want`: granted (the stand-in then holds it beside what it held), or
    /// the other head's lock in the way.
    fn lock(&self, id: FileId, want: LockSpan) -> Option<HeadLock> {
        let held = Arc::clone(&self.held);
        let mut grant = move || held.lock().unwrap().entry(id).or_default().push(want);
        self.seam().lock(id, want, &mut grant).expect("LOCK")
    }

    /// Lets go of everything on `id` and waits for the record, as an unlock does.
    fn unlock_all(&self, id: FileId) {
        let held = Arc::clone(&self.held);
        let mut release = move || {
            held.lock().unwrap().remove(&id);
        };
        self.seam().settle(id, &mut release).expect("the record");
    }
}

fn span(exclusive: bool, first: u64, last: u64) -> LockSpan {
    LockSpan {
        exclusive,
        first,
        last,
    }
}

fn engines() -> Option<TestEngines> {
    TestEngines::from_env()
}

#[test]
fn a_write_lock_on_one_head_keeps_the_other_off_its_bytes_until_it_is_released() {
    let Some(env) = engines() else { return };
    let config = fresh_with_lease(&env, "heads-basic", 20);
    let (a, b) = (Head::open(&config), Head::open(&config));
    let f = create(&a.fs, a.fs.root(), "f");
    let g = create(&a.fs, a.fs.root(), "g");

    assert_eq!(a.lock(f, span(true, 0, 99)), None, "A's write lock");
    let other = b.lock(f, span(true, 50, 59)).expect("B is refused");
    assert_eq!(other.span, span(true, 0, 99), "the range in the way");
    assert!(
        b.lock(f, span(false, 99, 99)).is_some(),
        "a read inside it too"
    );
    assert_eq!(
        b.seam().test(f, span(false, 0, 0)).unwrap().map(|o| o.span),
        Some(span(true, 0, 99)),
        "a test sees it"
    );
    assert_eq!(
        b.lock(f, span(true, 100, 199)),
        None,
        "the bytes after it are free"
    );
    assert_eq!(
        b.lock(g, span(true, 0, u64::MAX)),
        None,
        "another file is free"
    );
    // The refused requests took nothing on B: only what it was granted is recorded.
    assert_eq!(
        a.lock(f, span(true, 100, 100)).map(|o| o.span),
        Some(span(true, 100, 199))
    );
    // Shared locks share across heads.
    let h = create(&a.fs, a.fs.root(), "h");
    assert_eq!(a.lock(h, span(false, 0, 9)), None);
    assert_eq!(b.lock(h, span(false, 5, 14)), None);
    assert!(
        b.lock(h, span(true, 0, 0)).is_some(),
        "A's read is in B's write's way"
    );
    assert!(
        a.lock(h, span(true, 10, 10)).is_some(),
        "B's read is in A's write's way"
    );

    a.unlock_all(f);
    assert_eq!(b.lock(f, span(true, 50, 59)), None, "free once A let go");
    assert!(
        a.lock(f, span(false, 55, 55)).is_some(),
        "and now B's is in A's way"
    );
}

/// A release noted with `changed` alone (no `settle`: a lease expiry, FREE_ALL) reaches
/// the other heads through the keeper, in the background.
#[test]
fn a_release_in_the_background_reaches_the_other_head() {
    let Some(env) = engines() else { return };
    let config = fresh_with_lease(&env, "heads-bg", 20);
    let (a, b) = (Head::open(&config), Head::open(&config));
    let f = create(&a.fs, a.fs.root(), "f");
    assert_eq!(a.lock(f, span(true, 0, u64::MAX)), None);
    assert!(b.lock(f, span(false, 7, 7)).is_some());
    a.held.lock().unwrap().clear();
    a.seam().changed(None);
    let started = Instant::now();
    while b.lock(f, span(false, 7, 7)).is_some() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the release never reached B"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let rows = format!("SELECT count(*) FROM lock_ranges WHERE inode = {}", f.0);
    assert_eq!(query_i64(&config, &rows), 1, "only B's row is left");
}

/// A head that stops (dropped: its heartbeat ends, as when it is killed) holds its
/// ranges for its lease, then every other head ignores them; a later heartbeat sweeps
/// its rows.
#[test]
fn a_head_that_stops_frees_its_ranges_after_its_lease() {
    let Some(env) = engines() else { return };
    let lease = 3;
    let config = fresh_with_lease(&env, "heads-lease", lease);
    let (a, b) = (Head::open(&config), Head::open(&config));
    let f = create(&a.fs, a.fs.root(), "f");
    assert_eq!(a.lock(f, span(true, 0, 99)), None);
    // Heartbeats keep A's lease well past its length while A lives.
    std::thread::sleep(Duration::from_secs(lease + 1));
    assert!(
        b.lock(f, span(true, 0, 0)).is_some(),
        "A is alive: still refused"
    );
    drop(a);
    let stopped = Instant::now();
    while b.lock(f, span(true, 0, 0)).is_some() {
        assert!(
            stopped.elapsed() < Duration::from_secs(lease + 3),
            "A's lease never ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = stopped.elapsed();
    assert!(
        took > Duration::from_secs(1),
        "A's ranges held for its lease, not {took:?}"
    );
    // Swept a lease after A's lease ended, by B's heartbeat.
    let rows = "SELECT count(*) FROM lock_ranges r WHERE r.head NOT IN \
                (SELECT head FROM lock_heads WHERE lease_until > now())";
    let swept = Instant::now();
    while query_i64(&config, rows) > 0 {
        assert!(
            swept.elapsed() < Duration::from_secs(2 * lease + 3),
            "never swept"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The times at which the seam of `h` said that ranges of a watched file may have freed.
fn freed_calls(h: &Head) -> std::sync::mpsc::Receiver<(FileId, Instant)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = Mutex::new(tx);
    h.seam().on_freed(Arc::new(move |id| {
        let _ = tx.lock().unwrap().send((id, Instant::now()));
    }));
    rx
}

/// Drains what `rx` got within `quiet`, as the seam's own look at every watched file
/// when it starts listening may call it.
fn settle_calls(rx: &std::sync::mpsc::Receiver<(FileId, Instant)>, quiet: Duration) {
    while rx.recv_timeout(quiet).is_ok() {}
}

/// B waits on A's range of a file: A's unlock reaches B's callback through the
/// database's notice within a fraction of a second (without it, B's next look comes
/// with `HEAD_WAIT_RECHECK`, 10 s later); a lock A takes frees nothing and tells no one.
#[test]
fn a_head_that_watches_a_file_hears_the_other_heads_release_at_once() {
    let Some(env) = engines() else { return };
    let config = fresh_with_lease(&env, "heads-notify", 20);
    let (a, b) = (Head::open(&config), Head::open(&config));
    let f = create(&a.fs, a.fs.root(), "f");
    let calls = freed_calls(&b);
    assert_eq!(a.lock(f, span(true, 0, 99)), None);
    let mark = b.seam().notices();
    assert!(b.lock(f, span(true, 10, 19)).is_some());
    b.seam().watch(f, mark);
    settle_calls(&calls, Duration::from_millis(1500));
    assert_eq!(a.lock(f, span(false, 500, 599)), None, "more locks of A");
    assert!(
        calls.recv_timeout(Duration::from_millis(1500)).is_err(),
        "a lock frees nothing"
    );
    let released = Instant::now();
    a.unlock_all(f);
    let (id, at) = calls
        .recv_timeout(Duration::from_secs(3))
        .expect("B hears of A's release");
    assert_eq!(id, f);
    let took = at - released;
    eprintln!("head B heard of head A's release {took:?} after the unlock began");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(b.lock(f, span(true, 10, 19)), None, "B takes it now");
    b.seam().unwatch(f);
}

/// B waits on A's range and A stops: B is told within a heartbeat of A's lease's end,
/// though nothing was written (a lease that ran out is only a time in the database).
#[test]
fn a_head_that_watches_a_file_hears_of_the_other_heads_lease_running_out() {
    let Some(env) = engines() else { return };
    let lease = 3;
    let config = fresh_with_lease(&env, "heads-notify-lease", lease);
    let (a, b) = (Head::open(&config), Head::open(&config));
    let f = create(&a.fs, a.fs.root(), "f");
    let calls = freed_calls(&b);
    assert_eq!(a.lock(f, span(true, 0, 99)), None);
    let mark = b.seam().notices();
    assert!(b.lock(f, span(true, 10, 19)).is_some());
    b.seam().watch(f, mark);
    settle_calls(&calls, Duration::from_millis(1500));
    drop(a);
    let stopped = Instant::now();
    let (id, at) = calls
        .recv_timeout(Duration::from_secs(lease + 5))
        .expect("B hears of A's lease running out");
    assert_eq!(id, f);
    let took = at - stopped;
    eprintln!("head B heard of head A's lease ending {took:?} after A stopped (lease {lease} s)");
    assert!(took < Duration::from_secs(lease + 2), "{took:?}");
    assert_eq!(b.lock(f, span(true, 10, 19)), None, "B takes it now");
}

/// A head holding more separate ranges on a file than it keeps rows for records their
/// hulls: the other head is refused between them too, never granted inside one.
#[test]
fn many_ranges_on_one_file_are_recorded_as_bounded_hulls() {
    let Some(env) = engines() else { return };
    let config = fresh_with_lease(&env, "heads-bound", 20);
    let (a, b) = (Head::open(&config), Head::open(&config));
    let f = create(&a.fs, a.fs.root(), "f");
    let n = granary_backend_object::limits::HEAD_LOCK_SPANS_PER_FILE as u64 + 10;
    for i in 0..n {
        assert_eq!(a.lock(f, span(true, i * 10, i * 10)), None);
    }
    let rows = format!("SELECT count(*) FROM lock_ranges WHERE inode = {}", f.0);
    assert!(query_i64(&config, &rows) <= 2, "at most two hulls");
    for i in 0..n {
        assert!(
            b.lock(f, span(false, i * 10, i * 10)).is_some(),
            "inside a lock of A's"
        );
    }
    assert!(
        b.lock(f, span(false, 5, 5)).is_some(),
        "between two: refused (the hull)"
    );
    assert_eq!(
        b.lock(f, span(false, n * 10, n * 10)),
        None,
        "past the hull: free"
    );
}
