//! A concurrent history check of every locking mode against the sequential reference (a
//! list of held ranges): many threads take random ranges with `read`, `write`, `try_read`
//! and `try_write`, hold them a random while and release them, stamping every step with a
//! global counter. The history is then checked:
//!
//! - **linearizable against the reference**: each grant is placed at its `granted` stamp
//!   (taken after the call returned) and each release at its `releasing` stamp (taken
//!   before the guard is dropped). Those points lie inside the calls, and replaying them in
//!   stamp order through the reference must never grant a range that conflicts with one
//!   held: if the lock ever let two conflicting ranges be held at once, their stamped
//!   intervals overlap and the replay fails (a stamp is an `AcqRel` RMW on one counter, so
//!   a release that happened before a grant is stamped before it);
//! - **every refusal justified**: a failed `try_*` must have overlapped in time (from its
//!   request to its release) some other request that conflicts with it (in cheat mode
//!   while the lock is still cheating, any request: its view is the whole file);
//! - **every request granted**: all threads finish before a watchdog fires and every
//!   blocking request appears as granted in the history.
//!
//! A failure prints the seed; `GRANARY_LIN_SEED=<seed>` replays the same random choices.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use granary_sync::{RangeLock, RangeLockMode};

const THREADS: usize = 8;
const OPS_PER_THREAD: usize = 1_500;
/// Ranges fall in `0..UNITS`, with an occasional range to the end of the file.
const UNITS: u64 = 64;
const WATCHDOG: Duration = Duration::from_secs(120);

/// A small deterministic generator, so a failure replays from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone)]
struct Op {
    thread: usize,
    range: Range<u64>,
    write: bool,
    /// A `try_*` call (else a blocking one).
    attempt: bool,
    /// Stamp taken before the call.
    requested: u64,
    /// Stamp after the call returned a guard; `None` for a refused try.
    granted: Option<u64>,
    /// Stamp before the guard was dropped (for a refused try: when the call returned).
    releasing: u64,
    /// Stamp after the guard was dropped.
    released: u64,
    /// Whether the lock was still cheating when the request was made.
    cheating: bool,
}

fn conflicts(a: &Op, b: &Op) -> bool {
    (a.write || b.write) && a.range.start < b.range.end && b.range.start < a.range.end
}

fn random_range(rng: &mut Rng) -> Range<u64> {
    let start = rng.below(UNITS);
    if rng.below(16) == 0 {
        return start..u64::MAX;
    }
    start..(start + 1 + rng.below(12))
}

/// Holds a granted range for a random while: nothing, a short spin, or a yield.
fn hold(rng: &mut Rng) {
    match rng.below(4) {
        0 => {}
        1 | 2 => {
            for i in 0..rng.below(200) {
                std::hint::black_box(i);
            }
        }
        _ => thread::yield_now(),
    }
}

fn worker(lock: &RangeLock, clock: &AtomicU64, thread: usize, seed: u64) -> Vec<Op> {
    let stamp = || clock.fetch_add(1, Ordering::AcqRel);
    let mut rng = Rng(seed ^ (thread as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut ops = Vec::with_capacity(OPS_PER_THREAD);
    for _ in 0..OPS_PER_THREAD {
        let range = random_range(&mut rng);
        let write = rng.below(3) == 0;
        let attempt = rng.below(5) == 0;
        let cheating = lock.is_cheating();
        let requested = stamp();
        let guard = match (attempt, write) {
            (false, false) => Some(lock.read(range.clone())),
            (false, true) => Some(lock.write(range.clone())),
            (true, false) => lock.try_read(range.clone()),
            (true, true) => lock.try_write(range.clone()),
        };
        let granted = guard.as_ref().map(|_| stamp());
        if guard.is_some() {
            hold(&mut rng);
        }
        let releasing = stamp();
        drop(guard);
        let released = stamp();
        ops.push(Op {
            thread,
            range,
            write,
            attempt,
            requested,
            granted,
            releasing,
            released,
            cheating,
        });
    }
    ops
}

/// Runs the threads on one lock and returns the whole history.
fn history(mode: RangeLockMode, seed: u64) -> Vec<Op> {
    let (done_tx, done_rx) = mpsc::channel();
    let runner = thread::spawn(move || {
        let lock = Arc::new(RangeLock::new(mode));
        let clock = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (lock, clock) = (Arc::clone(&lock), Arc::clone(&clock));
                thread::spawn(move || worker(&lock, &clock, t, seed))
            })
            .collect();
        let ops: Vec<Op> = workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker"))
            .collect();
        // Everything was released: the whole range is free again.
        assert!(lock.try_write(0..u64::MAX).is_some(), "{mode}: left held");
        let _ = done_tx.send(ops);
    });
    match done_rx.recv_timeout(WATCHDOG) {
        Ok(ops) => {
            runner.join().expect("runner");
            ops
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            runner.join().expect("history run panicked");
            unreachable!("the runner sends before it ends")
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!(
            "{mode} seed {seed:#x}: requests still waiting after {WATCHDOG:?}: a lost \
             wake-up or a deadlock"
        ),
    }
}

/// The sequential reference: the ranges held, and whether a new one may be granted.
#[derive(Default)]
struct Reference {
    held: Vec<usize>,
}

/// Replays grants and releases in stamp order through the reference.
fn check_linearizable(ops: &[Op]) -> Result<(), String> {
    // (stamp, grant?, op): a release sorts before a grant only by its stamp.
    let mut events: Vec<(u64, bool, usize)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if let Some(granted) = op.granted {
            events.push((granted, true, i));
            events.push((op.releasing, false, i));
        }
    }
    events.sort_unstable();
    let mut reference = Reference::default();
    for (stamp, grant, i) in events {
        if !grant {
            reference.held.retain(|&h| h != i);
            continue;
        }
        if let Some(&other) = reference
            .held
            .iter()
            .find(|&&h| conflicts(&ops[h], &ops[i]))
        {
            return Err(format!(
                "at stamp {stamp}, {:?} was granted while {:?} held a conflicting range",
                ops[i], ops[other]
            ));
        }
        reference.held.push(i);
    }
    Ok(())
}

/// A refused try must have met, during its call, a conflicting request of another thread.
fn check_refusals(mode: RangeLockMode, ops: &[Op]) -> Result<(), String> {
    for op in ops.iter().filter(|op| op.attempt && op.granted.is_none()) {
        let whole_file = mode == RangeLockMode::Cheat && op.cheating;
        let justified = ops.iter().any(|other| {
            other.thread != op.thread
                && other.requested < op.released
                && op.requested < other.released
                && (whole_file || conflicts(op, other))
        });
        if !justified {
            return Err(format!(
                "{op:?} was refused with no conflicting request around"
            ));
        }
    }
    Ok(())
}

fn check_mode(mode: RangeLockMode) {
    let seed = std::env::var("GRANARY_LIN_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0x5eed_0003 ^ mode as u64);
    let ops = history(mode, seed);
    let blocking = ops.iter().filter(|op| !op.attempt).count();
    let granted = ops
        .iter()
        .filter(|op| !op.attempt && op.granted.is_some())
        .count();
    assert_eq!(
        granted, blocking,
        "{mode}: every blocking request is granted"
    );
    assert_eq!(ops.len(), THREADS * OPS_PER_THREAD);
    let result = check_linearizable(&ops).and_then(|()| check_refusals(mode, &ops));
    if let Err(e) = result {
        panic!("{mode} seed {seed:#x} (GRANARY_LIN_SEED={seed:x}): {e}");
    }
    let refused = ops.iter().filter(|op| op.granted.is_none()).count();
    assert!(refused > 0, "{mode}: the run had no contention to check");
}

#[test]
fn lockfree_history_is_linearizable() {
    check_mode(RangeLockMode::LockFree);
}

#[test]
fn cheat_history_is_linearizable() {
    check_mode(RangeLockMode::Cheat);
}

#[test]
fn mutex_history_is_linearizable() {
    check_mode(RangeLockMode::Mutex);
}

/// The checker itself: a history where two conflicting ranges overlap in time, or a
/// refusal without a conflicting request, is rejected.
#[test]
fn checker_rejects_bad_histories() {
    let op = |thread, range: Range<u64>, write, stamps: [u64; 4]| Op {
        thread,
        range,
        write,
        attempt: false,
        requested: stamps[0],
        granted: Some(stamps[1]),
        releasing: stamps[2],
        released: stamps[3],
        cheating: false,
    };
    let fine = [
        op(0, 0..10, true, [0, 1, 2, 5]),
        op(1, 5..6, false, [3, 6, 7, 8]),
    ];
    assert!(check_linearizable(&fine).is_ok());
    let overlapping = [
        op(0, 0..10, true, [0, 1, 4, 5]),
        op(1, 5..6, false, [2, 3, 6, 7]),
    ];
    assert!(check_linearizable(&overlapping).is_err());
    let disjoint = [
        op(0, 0..10, true, [0, 1, 4, 5]),
        op(1, 10..20, true, [2, 3, 6, 7]),
    ];
    assert!(check_linearizable(&disjoint).is_ok());
    let mut refused = op(1, 20..30, true, [2, 3, 3, 4]);
    refused.attempt = true;
    refused.granted = None;
    let alone = [op(0, 0..10, true, [0, 1, 5, 6]), refused.clone()];
    assert!(check_refusals(RangeLockMode::LockFree, &alone).is_err());
    refused.cheating = true;
    let cheating = [op(0, 0..10, true, [0, 1, 5, 6]), refused];
    assert!(check_refusals(RangeLockMode::Cheat, &cheating).is_ok());
}
