//! Model checks of the range lock under loom: every interleaving (up to loom's preemption
//! bound) of a few threads inserting, validating, waiting, releasing and unlinking.
//!
//! ```sh
//! RUSTFLAGS="--cfg loom --cfg crossbeam_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     CARGO_TARGET_DIR=target/loom cargo test -p granary-sync --release --lib loom
//! ```
//!
//! Each model keeps to two or three threads and a couple of ranges so it finishes in
//! seconds. Exclusion is checked with an occupancy word per model; a lost wake-up shows
//! up as loom's deadlock report (every thread blocked).
#![forbid(unsafe_code)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use crate::{RangeLock, RangeLockMode};

const WRITER: usize = 1 << 20;

/// Units 0..4 of occupancy for ranges given in units of 10 bytes.
struct Occupancy([AtomicUsize; 4]);

impl Occupancy {
    fn new() -> Self {
        Self([
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        ])
    }

    fn units(&self, start: u64, end: u64) -> &[AtomicUsize] {
        &self.0[(start / 10) as usize..(end / 10) as usize]
    }

    fn enter(&self, start: u64, end: u64, write: bool) {
        for unit in self.units(start, end) {
            let before = unit.fetch_add(if write { WRITER } else { 1 }, Ordering::SeqCst);
            if write {
                assert_eq!(before, 0, "writer overlapped a holder");
            } else {
                assert!(before < WRITER, "reader overlapped a writer");
            }
        }
    }

    fn leave(&self, start: u64, end: u64, write: bool) {
        for unit in self.units(start, end) {
            unit.fetch_sub(if write { WRITER } else { 1 }, Ordering::SeqCst);
        }
    }
}

/// Runs one thread per `(start, end, write, repeat)`: each takes its range `repeat`
/// times, checking occupancy while it holds it.
fn model(mode: RangeLockMode, requests: &'static [(u64, u64, bool, usize)]) {
    loom::model(move || {
        let lock = Arc::new(RangeLock::new(mode));
        let occupancy = Arc::new(Occupancy::new());
        let threads: Vec<_> = requests
            .iter()
            .map(|&(start, end, write, repeat)| {
                let (lock, occupancy) = (Arc::clone(&lock), Arc::clone(&occupancy));
                thread::spawn(move || {
                    for _ in 0..repeat {
                        let guard = if write {
                            lock.write(start..end)
                        } else {
                            lock.read(start..end)
                        };
                        occupancy.enter(start, end, write);
                        occupancy.leave(start, end, write);
                        drop(guard);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("model thread");
        }
        // Everything was released: a whole-range try must succeed.
        assert!(lock.try_write(0..40).is_some());
    });
}

/// Insert/validate race between a reader and an overlapping writer (reader back-off,
/// writer waiting in place).
#[test]
fn loom_lockfree_reader_vs_writer() {
    model(
        RangeLockMode::LockFree,
        &[(0, 20, false, 1), (10, 30, true, 1)],
    );
}

/// Two overlapping writers, one of them twice: its second insert walks past (and
/// unlinks) its own deleted node while the other writer inserts, validates and releases.
#[test]
fn loom_lockfree_writers_and_lazy_unlink() {
    model(
        RangeLockMode::LockFree,
        &[(0, 20, true, 2), (10, 30, true, 1)],
    );
}

/// Disjoint writers never wait for each other, racing on the same list links.
#[test]
fn loom_lockfree_disjoint_writers() {
    model(
        RangeLockMode::LockFree,
        &[(0, 10, true, 1), (20, 30, true, 1)],
    );
}

/// Cheat mode: a reader and a disjoint writer conflict in the whole-file view, so the
/// writer drains the reader's cheat grant and both end up precise.
#[test]
fn loom_cheat_drain_and_switch() {
    model(
        RangeLockMode::Cheat,
        &[(0, 10, false, 1), (20, 30, true, 1)],
    );
}

/// The mutex FIFO baseline: a waiter sleeps on the condition variable and is woken.
#[test]
fn loom_mutex_fifo() {
    model(
        RangeLockMode::Mutex,
        &[(0, 20, false, 1), (10, 30, true, 1)],
    );
}
