//! Random sequences of try-lock and release on one lock, compared step by step with a
//! reference: a plain vector of the ranges held. A `try_*` must succeed exactly when the
//! reference says no held range conflicts (in cheat mode: as if every range covered the
//! whole file), so every grant and every refusal is checked, in every mode.
//!
//! Set `PROPTEST_CASES` to run more than the default 256 cases.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use granary_sync::{RangeGuard, RangeLock, RangeLockMode};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Read(Range<u64>),
    Write(Range<u64>),
    /// Releases the held range at this index (modulo the number held).
    Release(usize),
}

fn range() -> impl Strategy<Value = Range<u64>> {
    prop_oneof![
        8 => (0u64..48, 1u64..12).prop_map(|(start, len)| start..start + len),
        1 => (0u64..48).prop_map(|start| start..u64::MAX),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => range().prop_map(Op::Read),
        2 => range().prop_map(Op::Write),
        4 => (0usize..16).prop_map(Op::Release),
    ]
}

/// How the reference judges conflicts.
#[derive(Debug, Clone, Copy, PartialEq)]
enum View {
    /// Exact ranges.
    Precise,
    /// Every range is the whole file (cheat mode before its first conflict).
    WholeFile,
    /// Everything is granted.
    Nothing,
}

#[derive(Debug, Default)]
struct Reference {
    held: Vec<(Range<u64>, bool)>,
}

impl Reference {
    fn grants(&self, view: View, range: &Range<u64>, write: bool) -> bool {
        self.held.iter().all(|(held, held_write)| {
            let overlap = match view {
                View::Precise => held.start < range.end && range.start < held.end,
                View::WholeFile => true,
                View::Nothing => false,
            };
            !(overlap && (write || *held_write))
        })
    }
}

/// A cheat-mode lock already switched to precise mode: a reader holds it while another
/// thread asks for a disjoint write, which conflicts in the whole-file view.
fn switched_cheat_lock() -> RangeLock {
    let lock = RangeLock::new(RangeLockMode::Cheat);
    let granted = AtomicBool::new(false);
    thread::scope(|s| {
        let reader = lock.read(0..1);
        s.spawn(|| {
            let _w = lock.write(5..6);
            granted.store(true, Ordering::SeqCst);
        });
        // Once the writer started the drain, even a compatible cheat-mode try is refused.
        while lock.try_read(1000..1001).is_some() {
            thread::sleep(Duration::from_micros(100));
        }
        assert!(
            !granted.load(Ordering::SeqCst),
            "the writer waits for the drain"
        );
        drop(reader);
    });
    assert!(granted.load(Ordering::SeqCst));
    assert!(!lock.is_cheating());
    lock
}

fn run(lock: &RangeLock, view: View, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut reference = Reference::default();
    let mut guards: Vec<RangeGuard<'_>> = Vec::new();
    for op in ops {
        match op {
            Op::Read(range) | Op::Write(range) => {
                let write = matches!(op, Op::Write(_));
                let expected = reference.grants(view, range, write);
                let got = if write {
                    lock.try_write(range.clone())
                } else {
                    lock.try_read(range.clone())
                };
                prop_assert_eq!(
                    got.is_some(),
                    expected,
                    "{:?} with {:?}",
                    op,
                    reference.held
                );
                if let Some(guard) = got {
                    guards.push(guard);
                    reference.held.push((range.clone(), write));
                }
            }
            Op::Release(i) if !guards.is_empty() => {
                let at = i % guards.len();
                drop(guards.swap_remove(at));
                reference.held.swap_remove(at);
            }
            Op::Release(_) => {}
        }
    }
    drop(guards);
    // Everything released: the whole range is free again.
    prop_assert!(lock.try_write(0..u64::MAX).is_some());
    Ok(())
}

proptest! {
    #[test]
    fn lockfree_matches_reference(ops in prop::collection::vec(op(), 1..60)) {
        run(&RangeLock::new(RangeLockMode::LockFree), View::Precise, &ops)?;
    }

    #[test]
    fn mutex_fifo_matches_reference(ops in prop::collection::vec(op(), 1..60)) {
        run(&RangeLock::new(RangeLockMode::Mutex), View::Precise, &ops)?;
    }

    #[test]
    fn cheat_matches_whole_file_reference(ops in prop::collection::vec(op(), 1..60)) {
        let lock = RangeLock::new(RangeLockMode::Cheat);
        run(&lock, View::WholeFile, &ops)?;
        prop_assert!(lock.is_cheating(), "tries alone never switch");
    }

    #[test]
    fn switched_cheat_matches_reference(ops in prop::collection::vec(op(), 1..60)) {
        run(&switched_cheat_lock(), View::Precise, &ops)?;
    }

    #[test]
    fn none_grants_everything(ops in prop::collection::vec(op(), 1..30)) {
        run(&RangeLock::new(RangeLockMode::None), View::Nothing, &ops)?;
    }
}
