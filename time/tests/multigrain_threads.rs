//! The multigrain promises under many threads, on the real clock and on a clock that
//! stands still (which forces the fine-grained path on every observed change):
//! 1. an inode's ctime never goes backwards (as any one thread reads it);
//! 2. a change after an observed stamp gets a strictly later one;
//! 3. a change that starts after another (of any file) finished gets a ctime no earlier;
//! 4. observing alone leaves the ctime as it was.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use granary_time::{
    Ctime, FloorRead, ManualClock, MultigrainClock, SystemClock, Timestamp, TimestampMode,
};

const THREADS: usize = 8;
const FILES: usize = 4;
const ROUNDS: usize = 20_000;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Runs the four checks with `THREADS` threads over `FILES` shared inodes.
fn hammer(clock: &Arc<MultigrainClock>) {
    let files: Arc<Vec<Ctime>> =
        Arc::new((0..FILES).map(|_| Ctime::new(clock.now(), false)).collect());
    // The ctime of the last finished change, published for the other threads (check 3).
    let last_finished = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (clock, files, last_finished) = (
                Arc::clone(clock),
                Arc::clone(&files),
                Arc::clone(&last_finished),
            );
            thread::spawn(move || {
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (t as u64 + 1));
                let mut seen = [0u64; FILES];
                for _ in 0..ROUNDS {
                    let i = rng.below(FILES as u64) as usize;
                    let file = &files[i];
                    match rng.below(3) {
                        0 => {
                            let before = file.load().time.as_nanos();
                            let value = file.observe().time.as_nanos();
                            assert!(value >= before && value >= seen[i], "1: went backwards");
                            seen[i] = value;
                            let again = file.load().time.as_nanos();
                            assert!(again >= value, "1: went backwards after observing");
                        }
                        1 => {
                            let observed = file.observe().time.as_nanos();
                            let stamp = clock.stamp(file, true).time.as_nanos();
                            assert!(stamp > observed, "2: {stamp} not after observed {observed}");
                            seen[i] = seen[i].max(stamp);
                        }
                        _ => {
                            let floor = last_finished.load(Ordering::Acquire);
                            let stamp = clock.stamp(file, true).time.as_nanos();
                            assert!(
                                stamp >= floor,
                                "3: {stamp} before a finished change {floor}"
                            );
                            assert!(stamp >= seen[i], "1: stamp went backwards");
                            seen[i] = stamp;
                            last_finished.fetch_max(stamp, Ordering::AcqRel);
                        }
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker");
    }
    // 4: with nobody changing anything, observing is idempotent.
    for file in files.iter() {
        let a = file.observe();
        let b = file.observe();
        assert_eq!(a.time, b.time);
        assert!(b.queried);
    }
}

#[test]
fn system_clock_combined_and_separate() {
    for floor_read in [FloorRead::Combined, FloorRead::Separate] {
        let clock = Arc::new(MultigrainClock::with_floor_read(
            SystemClock::shared(),
            TimestampMode::Multigrain,
            floor_read,
        ));
        hammer(&clock);
        assert!(
            clock.stats().fine_stamps > 0,
            "observed changes took the fine path"
        );
    }
}

#[test]
fn a_still_clock_and_a_ticking_one() {
    let manual = Arc::new(ManualClock::new(Timestamp {
        seconds: 1_700_000_000,
        nanos: 0,
    }));
    let clock = Arc::new(MultigrainClock::new(
        manual.clone(),
        TimestampMode::Multigrain,
    ));
    hammer(&clock);
    // Now with the clock jumping forward by "ticks" while the threads run.
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (manual, stop) = (Arc::clone(&manual), Arc::clone(&stop));
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                manual.advance(Duration::from_micros(50));
                thread::yield_now();
            }
        })
    };
    hammer(&clock);
    stop.store(true, Ordering::Relaxed);
    ticker.join().expect("ticker");
    let stats = clock.stats();
    assert_eq!(
        stats.fine_stamps,
        stats.floor_swaps + stats.floor_adopted + stats.floor_max
    );
}

/// The coarse source really is coarse: within one tick, unobserved changes repeat a stamp,
/// and the multigrain clock's stamps stay within a tick of the fine clock.
#[test]
fn real_clock_stamps_are_coarse_until_observed() {
    let clock = MultigrainClock::new(SystemClock::shared(), TimestampMode::Multigrain);
    let cell = Ctime::new(clock.now(), false);
    let mut repeats = 0;
    let mut previous = clock.stamp(&cell, true).time;
    for _ in 0..10_000 {
        let t = clock.stamp(&cell, true).time;
        assert!(t >= previous);
        repeats += usize::from(t == previous);
        previous = t;
    }
    assert!(
        repeats > 0,
        "10 000 coarse stamps all differed: is the coarse clock coarse?"
    );
    let fine = clock.source().now();
    let tick = granary_time::coarse_resolution();
    let stamp = clock.stamp(&cell, true).time;
    let lag = fine.as_nanos().saturating_sub(stamp.as_nanos());
    assert!(lag <= 2 * u64::try_from(tick.as_nanos()).unwrap() + 50_000_000);
}
