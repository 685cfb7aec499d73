//! Model checks of the multigrain clock under loom: every interleaving (within loom's
//! preemption bound) of changes, observations and clock ticks on two or three threads.
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p granary-time --release --lib loom
//! ```
#![forbid(unsafe_code)]

use std::time::Duration;

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

use crate::multigrain::{Ctime, MultigrainClock, TimestampMode};
use crate::{Clock, Timestamp};

const START: u64 = 1_700_000_000_000_000_000;
/// One coarse tick of the model clock.
const TICK: u64 = 4_000_000;

/// A clock whose fine time is `fine` and whose coarse time lags to the last tick; a
/// thread can move it, and loom interleaves those moves with everything else.
struct ModelClock {
    fine: AtomicU64,
}

impl ModelClock {
    fn at(nanos: u64) -> Self {
        Self {
            fine: AtomicU64::new(nanos),
        }
    }

    fn advance(&self, nanos: u64) {
        self.fine.fetch_add(nanos, Ordering::AcqRel);
    }
}

impl Clock for ModelClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(self.fine.load(Ordering::Acquire))
    }

    fn coarse_now(&self) -> Timestamp {
        let fine = self.fine.load(Ordering::Acquire);
        Timestamp::from_nanos(fine - fine % TICK)
    }

    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.fine.load(Ordering::Acquire) - START)
    }
}

fn model(body: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(body);
}

fn setup() -> (Arc<ModelClock>, Arc<MultigrainClock>) {
    setup_at(START)
}

fn setup_at(nanos: u64) -> (Arc<ModelClock>, Arc<MultigrainClock>) {
    let source = Arc::new(ModelClock::at(nanos));
    let clock = MultigrainClock::new(
        std::sync::Arc::new(ProxyClock(source.clone())),
        TimestampMode::Multigrain,
    );
    (source, Arc::new(clock))
}

/// `MultigrainClock` wants a `std::sync::Arc<dyn Clock>`; this forwards to the model's.
struct ProxyClock(Arc<ModelClock>);

impl Clock for ProxyClock {
    fn now(&self) -> Timestamp {
        self.0.now()
    }
    fn coarse_now(&self) -> Timestamp {
        self.0.coarse_now()
    }
    fn monotonic(&self) -> Duration {
        self.0.monotonic()
    }
}

fn nanos(t: Timestamp) -> u64 {
    t.as_nanos()
}

/// Two changes of one inode race with an observation: whatever the order, a change that
/// starts after the observation ends later than what was observed, and the ctime a thread
/// reads never goes backwards.
#[test]
fn loom_observed_then_changed_is_later() {
    model(|| {
        let (_, clock) = setup();
        let cell = Arc::new(Ctime::new(Timestamp::from_nanos(START), false));
        let racer = {
            let (clock, cell) = (clock.clone(), cell.clone());
            thread::spawn(move || {
                let before = nanos(cell.load().time);
                let stamp = nanos(clock.stamp(&cell, true).time);
                assert!(stamp >= before);
                assert!(nanos(cell.load().time) >= stamp);
            })
        };
        let seen = nanos(cell.observe().time);
        let stamp = nanos(clock.stamp(&cell, true).time);
        assert!(stamp > seen, "change after observing {seen} got {stamp}");
        assert!(nanos(cell.load().time) >= stamp);
        racer.join().unwrap();
        let a = cell.observe();
        let b = cell.observe();
        assert_eq!(a.time, b.time, "observing changes nothing");
    });
}

/// A change of file 1 finishes, then (seen through a flag) a change of file 2 starts,
/// while a third thread observes file 1 and changes it again and the clock ticks: file
/// 2's ctime is never earlier than file 1's first one.
#[test]
fn loom_finished_change_orders_later_changes_of_other_files() {
    model(|| {
        let (source, clock) = setup();
        let one = Arc::new(Ctime::new(Timestamp::from_nanos(START), false));
        let two = Arc::new(Ctime::new(Timestamp::from_nanos(START), false));
        let finished = Arc::new(AtomicU64::new(0));
        one.observe();
        let first = {
            let (clock, one, finished) = (clock.clone(), one.clone(), finished.clone());
            thread::spawn(move || {
                let t = nanos(clock.stamp(&one, true).time);
                finished.store(t, Ordering::Release);
            })
        };
        let ticker = {
            let source = source.clone();
            thread::spawn(move || source.advance(TICK))
        };
        let done = finished.load(Ordering::Acquire);
        if done != 0 {
            let t = nanos(clock.stamp(&two, true).time);
            assert!(t >= done, "file 2 got {t}, before file 1's finished {done}");
        }
        first.join().unwrap();
        ticker.join().unwrap();
    });
}

/// A slow change of file 2 reads the clock before a tick and installs its stamp after
/// the tick; meanwhile file 1 is changed after the tick and then, after that change
/// finished, file 2 is changed again. The second change of file 2 must not end with the
/// slow change's older stamp, even when that one lands between its load and its CAS.
#[test]
fn loom_an_older_concurrent_stamp_does_not_stand() {
    model(|| {
        let (source, clock) = setup();
        let one = Arc::new(Ctime::new(Timestamp::from_nanos(START), false));
        let two = Arc::new(Ctime::new(Timestamp::from_nanos(START), false));
        let finished = Arc::new(AtomicU64::new(0));
        let slow = {
            let (clock, two) = (clock.clone(), two.clone());
            thread::spawn(move || {
                clock.stamp(&two, true);
            })
        };
        let first = {
            let (clock, one, finished) = (clock.clone(), one.clone(), finished.clone());
            thread::spawn(move || {
                source.advance(TICK);
                let t = nanos(clock.stamp(&one, true).time);
                finished.store(t, Ordering::Release);
            })
        };
        let done = finished.load(Ordering::Acquire);
        if done != 0 {
            let t = nanos(clock.stamp(&two, true).time);
            assert!(t >= done, "file 2 got {t}, before file 1's finished {done}");
            assert!(nanos(two.load().time) >= done);
        }
        slow.join().unwrap();
        first.join().unwrap();
    });
}

/// Two threads each observe their own file and change it on a stopped clock: both need
/// fine stamps, so their floor CASes race; the loser adopts or passes the winner, and
/// each file's new ctime is later than what was observed.
#[test]
fn loom_racing_fine_stamps_on_a_still_clock() {
    model(|| {
        let (_, clock) = setup();
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let clock = clock.clone();
                thread::spawn(move || {
                    let cell = Ctime::new(Timestamp::from_nanos(START), false);
                    let seen = nanos(cell.observe().time);
                    let t = nanos(clock.stamp(&cell, false).time);
                    assert!(t > seen);
                    t
                })
            })
            .collect();
        let stamps: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        // The floor covers both: a later unobserved change is not earlier than either.
        let other = Ctime::new(Timestamp::from_nanos(START), false);
        let later = nanos(clock.stamp(&other, false).time);
        assert!(stamps.iter().all(|&t| later >= t));
    });
}

/// The stale winner: another thread read its fine time before a tick and publishes it as
/// the floor after the tick, between this thread's floor load and its CAS. Adopting that
/// floor would give a ctime below the coarse one this inode already has; the change must
/// still end up later than what was observed.
#[test]
fn loom_stale_floor_winner() {
    model(|| {
        let (source, clock) = setup_at(START + 1_000);
        let early = {
            let clock = clock.clone();
            thread::spawn(move || {
                let cell = Ctime::new(Timestamp::from_nanos(START), false);
                cell.observe();
                clock.stamp(&cell, false);
            })
        };
        let ticker = {
            let source = source.clone();
            thread::spawn(move || source.advance(TICK))
        };
        let cell = Ctime::new(Timestamp::from_nanos(START), false);
        clock.stamp(&cell, true);
        let seen = nanos(cell.observe().time);
        let t = nanos(clock.stamp(&cell, true).time);
        assert!(t > seen, "observed {seen}, then stamped {t}");
        early.join().unwrap();
        ticker.join().unwrap();
    });
}
