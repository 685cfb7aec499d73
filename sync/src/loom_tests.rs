//! Model checks of the range lock under loom: every interleaving (up to loom's preemption
//! bound) of a few threads inserting, validating, waiting, releasing and unlinking.
//!
//! ```sh
//! RUSTFLAGS="--cfg loom --cfg crossbeam_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p granary-sync --release --lib loom
//! ```
//!
//! Each model keeps to two threads and a couple of ranges. With loom's preemption bound
//! at 1 (2 for the validation model, which needs two), the six models take about a
//! minute on a 2-core machine; `LOOM_MAX_PREEMPTIONS=2` runs all of them at 2 (several
//! minutes).
//! Exclusion is checked with an occupancy word per model; a lost wake-up shows up as
//! loom's deadlock report (every thread blocked). crossbeam-epoch runs on loom's atomics
//! too (`crossbeam_loom`), which is most of the state space.
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
    model_holding(mode, None, 1, requests);
}

/// As [`model`], with the main thread holding `held` (a read range) throughout, so that
/// the list has a node in it that the others insert around.
fn model_holding(
    mode: RangeLockMode,
    held: Option<(u64, u64)>,
    preemptions: usize,
    requests: &'static [(u64, u64, bool, usize)],
) {
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = Some(preemptions);
    }
    builder.check(move || {
        let lock = Arc::new(RangeLock::new(mode));
        let occupancy = Arc::new(Occupancy::new());
        let holding = held.map(|(start, end)| {
            occupancy.enter(start, end, false);
            lock.read(start..end)
        });
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
        drop(holding);
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

/// The race writer validation exists for: with a node already in the list, the writer
/// walks past the place where the reader then inserts in front of that node, so neither
/// insert walk sees the other; only validation (the writer's of its predecessors, the
/// reader's of its successors) keeps them apart. Two preemptions: one to let the reader
/// in between the writer's walk and its insert, one to let the writer in while the reader
/// holds its range. (Without the fence after inserting, or without writer validation,
/// this model fails.)
#[test]
fn loom_lockfree_validation_catches_concurrent_inserts() {
    model_holding(
        RangeLockMode::LockFree,
        Some((10, 20)),
        2,
        &[(0, 30, false, 1), (20, 40, true, 1)],
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
