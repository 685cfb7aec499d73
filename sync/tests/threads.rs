//! Many threads on one lock: exclusion is never violated, disjoint ranges are held at the
//! same time, no waiter is left asleep (every run finishes before a watchdog fires), and a
//! cheat-mode lock switches to precise ranges while its cheat-mode holders still hold.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use granary_sync::{RangeLock, RangeLockMode};

const LOCKING: [RangeLockMode; 3] = [
    RangeLockMode::Mutex,
    RangeLockMode::LockFree,
    RangeLockMode::Cheat,
];

/// A hang here means a lost wake-up (or a deadlock): fail instead of waiting forever.
const WATCHDOG: Duration = Duration::from_secs(120);

/// Runs `body` on another thread and fails if it does not finish within `WATCHDOG`.
fn with_watchdog(name: &str, body: impl FnOnce() + Send + 'static) {
    let (done_tx, done_rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        body();
        let _ = done_tx.send(());
    });
    match done_rx.recv_timeout(WATCHDOG) {
        Ok(()) => handle.join().expect("test body"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            handle.join().expect("test body panicked");
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{name}: still waiting after {WATCHDOG:?}: a lost wake-up or a deadlock")
        }
    }
}

/// Per-unit occupancy: a reader count, or `WRITER`.
const WRITER: u32 = 1 << 31;

struct Occupancy(Vec<AtomicU32>);

impl Occupancy {
    fn new(units: usize) -> Self {
        Self((0..units).map(|_| AtomicU32::new(0)).collect())
    }

    fn enter(&self, start: usize, end: usize, write: bool) {
        for unit in &self.0[start..end] {
            if write {
                let got = unit.compare_exchange(0, WRITER, Ordering::SeqCst, Ordering::SeqCst);
                assert!(got.is_ok(), "writer entered a held unit: {got:?}");
            } else {
                let before = unit.fetch_add(1, Ordering::SeqCst);
                assert_eq!(before & WRITER, 0, "reader entered a written unit");
            }
        }
    }

    fn leave(&self, start: usize, end: usize, write: bool) {
        for unit in &self.0[start..end] {
            if write {
                unit.store(0, Ordering::SeqCst);
            } else {
                unit.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

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

#[test]
fn exclusion_holds_under_contention() {
    const UNITS: u64 = 48;
    const THREADS: u64 = 4;
    const ROUNDS: usize = 3_000;
    for mode in LOCKING {
        with_watchdog(mode.name(), move || {
            let lock = Arc::new(RangeLock::new(mode));
            let occupancy = Arc::new(Occupancy::new(UNITS as usize));
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (lock, occupancy) = (Arc::clone(&lock), Arc::clone(&occupancy));
                    thread::spawn(move || {
                        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t + 1));
                        for _ in 0..ROUNDS {
                            let start = rng.below(UNITS - 1);
                            let end = (start + 1 + rng.below(12)).min(UNITS);
                            let write = rng.below(3) == 0;
                            let guard = if write {
                                lock.write(start..end)
                            } else {
                                lock.read(start..end)
                            };
                            let (s, e) = (start as usize, end as usize);
                            occupancy.enter(s, e, write);
                            if rng.below(8) == 0 {
                                thread::yield_now();
                            }
                            occupancy.leave(s, e, write);
                            drop(guard);
                        }
                    })
                })
                .collect();
            for worker in workers {
                worker.join().expect("worker");
            }
        });
    }
}

/// Writers and readers fight over one small range, with tiny critical sections, so that
/// waiters sleep and wake thousands of times; a single lost wake-up hangs the run.
#[test]
fn no_lost_wakeups() {
    const THREADS: usize = 6;
    const ROUNDS: usize = 4_000;
    for mode in LOCKING {
        with_watchdog(mode.name(), move || {
            let lock = Arc::new(RangeLock::new(mode));
            let occupancy = Arc::new(Occupancy::new(16));
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (lock, occupancy) = (Arc::clone(&lock), Arc::clone(&occupancy));
                    thread::spawn(move || {
                        for i in 0..ROUNDS {
                            let write = (i + t) % 3 == 0;
                            let (start, end) = if t % 2 == 0 { (0, 10) } else { (5, 15) };
                            let guard = if write {
                                lock.write(start..end)
                            } else {
                                lock.read(start..end)
                            };
                            occupancy.enter(start as usize, end as usize, write);
                            occupancy.leave(start as usize, end as usize, write);
                            drop(guard);
                        }
                    })
                })
                .collect();
            for worker in workers {
                worker.join().expect("worker");
            }
        });
    }
}

/// Two writers of disjoint ranges hold them at the same time: each waits at a barrier
/// while holding, which only completes if the lock did not serialize them. (A cheat-mode
/// lock does serialize them until its switch; `cheat_switches_to_precise_with_live_holders`
/// shows the same after the switch.)
#[test]
fn disjoint_writers_hold_at_once() {
    for mode in [RangeLockMode::Mutex, RangeLockMode::LockFree] {
        with_watchdog(mode.name(), move || {
            let lock = Arc::new(RangeLock::new(mode));
            let both = Arc::new(Barrier::new(2));
            let workers: Vec<_> = [(0u64, 4096u64), (4096, 8192)]
                .into_iter()
                .map(|(start, end)| {
                    let (lock, both) = (Arc::clone(&lock), Arc::clone(&both));
                    thread::spawn(move || {
                        let _guard = lock.write(start..end);
                        both.wait();
                    })
                })
                .collect();
            for worker in workers {
                worker.join().expect("worker");
            }
        });
    }
}

/// A cheat-mode lock with a live reader: a disjoint writer conflicts in the whole-file
/// view, so it starts the drain and waits; a new reader waits behind the drain too; the
/// cheat-mode reader is never disturbed. When it leaves, the lock is precise, and the
/// writer and the reader (disjoint) hold their ranges at the same time.
#[test]
fn cheat_switches_to_precise_with_live_holders() {
    with_watchdog("cheat switch", || {
        let lock = Arc::new(RangeLock::new(RangeLockMode::Cheat));
        let holder = lock.read(0..10);
        assert!(lock.is_cheating());
        let granted = Arc::new(AtomicU32::new(0));
        let both = Arc::new(Barrier::new(2));
        let spawn = |range: std::ops::Range<u64>, write: bool| {
            let (lock, granted, both) =
                (Arc::clone(&lock), Arc::clone(&granted), Arc::clone(&both));
            thread::spawn(move || {
                let _guard = if write {
                    lock.write(range)
                } else {
                    lock.read(range)
                };
                granted.fetch_add(1, Ordering::SeqCst);
                both.wait();
            })
        };
        let writer = spawn(100..200, true);
        thread::sleep(Duration::from_millis(20));
        let reader = spawn(300..310, false);
        thread::sleep(Duration::from_millis(20));
        assert_eq!(granted.load(Ordering::SeqCst), 0, "both wait for the drain");
        assert!(
            lock.is_cheating(),
            "still cheating while the cheat-mode reader holds"
        );
        drop(holder);
        writer.join().expect("writer");
        reader.join().expect("reader");
        assert_eq!(granted.load(Ordering::SeqCst), 2);
        assert!(!lock.is_cheating());
        // Precise now: disjoint ranges coexist, overlapping ones do not.
        let a = lock.write(0..10);
        assert!(lock.try_read(10..20).is_some());
        assert!(lock.try_read(5..6).is_none());
        drop(a);
    });
}
