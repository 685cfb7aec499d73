//! The harness every lab loop runs in: T threads start together, each runs its operation
//! in batches until told to stop, and the rate is the operations finished over the time
//! measured (the monotonic clock of `gtime`, the one place that reads clocks).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use gtime::Clock;

/// Operations between two looks at the stop flag: small enough that a thread stops within
/// microseconds, large enough that the look costs nothing.
const BATCH: u64 = 64;

/// Runs `threads` threads for about `duration`; thread `t` builds its operation with
/// `make(t)` before the start and then calls it in a loop. Returns operations per second,
/// all threads together.
pub fn rate<F, O>(threads: usize, duration: Duration, make: F) -> f64
where
    F: Fn(usize) -> O + Sync,
    O: FnMut(),
{
    let clock = gtime::SystemClock::new();
    let start = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let mut began = Duration::ZERO;
    thread::scope(|s| {
        for t in 0..threads {
            let (start, stop, total, make) = (&start, &stop, &total, &make);
            s.spawn(move || {
                let mut op = make(t);
                start.wait();
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..BATCH {
                        op();
                    }
                    done += BATCH;
                }
                total.fetch_add(done, Ordering::Relaxed);
            });
        }
        start.wait();
        began = clock.monotonic();
        thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
    });
    // The scope joined the threads: the time includes their last batches.
    let seconds = (clock.monotonic() - began).as_secs_f64();
    total.load(Ordering::Relaxed) as f64 / seconds
}

/// `n` samples of each of `designs` designs, taken in turn (design 0, 1, ..., 0 again),
/// so that a machine whose load changes during the run weighs on every design alike.
pub fn interleaved(
    designs: usize,
    n: usize,
    mut sample: impl FnMut(usize) -> f64,
) -> Vec<Vec<f64>> {
    let mut out = vec![Vec::with_capacity(n); designs];
    for _ in 0..n {
        for (design, samples) in out.iter_mut().enumerate() {
            samples.push(sample(design));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_thread() {
        let calls = AtomicU64::new(0);
        let r = rate(3, Duration::from_millis(20), |_| {
            || {
                calls.fetch_add(1, Ordering::Relaxed);
            }
        });
        assert!(r > 0.0);
        assert_eq!(calls.load(Ordering::Relaxed) % BATCH, 0);
    }
}
