//! The measurements behind `granary lab timers` (seed 002), driving `runtime::timers`
//! through its public API; `timers` only formats them.
//!
//! - [`insert_cancel_ns`]: one worker inserts 1000 global timers and cancels them, in a
//!   loop, while the other workers are busy with timers of their own: ns per
//!   insert+cancel pair, per design (pull, push, global) and for tokio's own timer.
//! - [`fire_rate`]: global timers fired per second with every worker busy.
//! - [`idle_wakeups`]: workers arm global timers and go idle while worker 0 stays busy;
//!   how often were idle workers woken, and how late did timers fire.
//!
//! Each function runs for a bounded time and returns raw samples.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gtime::{Clock, SystemClock};

use runtime::timers::{Callback, Scope, TimerMode, Timers};
use runtime::{WorkerHooks, Workers};

/// Timers per measured batch (the seed's loop size).
pub const BATCH: usize = 1000;

/// The design under test: one of ours, or tokio's per-runtime timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Design {
    Ours(TimerMode),
    Tokio,
}

impl Design {
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Ours(TimerMode::Pull) => "pull",
            Self::Ours(TimerMode::Push) => "push",
            Self::Ours(TimerMode::Global) => "global",
            Self::Tokio => "tokio",
        }
    }
}

fn noop() -> Callback {
    Box::new(|| {})
}

/// ns per insert+cancel of a global timer on worker 0, one sample per batch of
/// [`BATCH`], while workers `1..workers` insert and cancel timers of their own and run
/// timer passes (busy cores touching their wheels).
#[must_use]
pub fn insert_cancel_ns(design: Design, workers: usize, duration: Duration) -> Vec<f64> {
    match design {
        Design::Tokio => tokio_insert_cancel_ns(duration),
        Design::Ours(mode) => ours_insert_cancel_ns(mode, workers.max(2), duration),
    }
}

fn ours_insert_cancel_ns(mode: TimerMode, workers: usize, duration: Duration) -> Vec<f64> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let timers = Timers::new(workers, mode, clock);
    let stop = AtomicBool::new(false);
    let mut samples = Vec::new();
    std::thread::scope(|s| {
        for w in 1..workers {
            let (timers, stop) = (&timers, &stop);
            s.spawn(move || busy_worker(timers, w, stop));
        }
        let end = Instant::now() + duration;
        let mut handles = Vec::with_capacity(BATCH);
        while Instant::now() < end {
            let started = Instant::now();
            for i in 0..BATCH {
                let delay = Duration::from_millis(1000 + (i as u64 % 4096));
                handles.push(timers.insert(0, delay, Scope::Global, noop()));
            }
            for h in handles.drain(..) {
                timers.cancel(&h);
            }
            samples.push(started.elapsed().as_nanos() as f64 / BATCH as f64);
        }
        stop.store(true, Ordering::Relaxed);
    });
    samples
}

/// A busy core: inserts and cancels its own global timers and runs timer passes.
fn busy_worker(timers: &Timers, w: usize, stop: &AtomicBool) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let h = timers.insert(
            w,
            Duration::from_millis(500 + n % 1000),
            Scope::Global,
            noop(),
        );
        if !n.is_multiple_of(4) {
            timers.cancel(&h);
        }
        if n.is_multiple_of(64) {
            timers.run_expiry(w, timers.now());
        }
        n += 1;
    }
}

fn tokio_insert_cancel_ns(duration: Duration) -> Vec<f64> {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => return Vec::new(),
    };
    rt.block_on(async {
        let mut samples = Vec::new();
        let end = Instant::now() + duration;
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        while Instant::now() < end {
            let started = Instant::now();
            let mut sleeps: Vec<_> = (0..BATCH)
                .map(|i| {
                    Box::pin(tokio::time::sleep(Duration::from_millis(
                        1000 + i as u64 % 4096,
                    )))
                })
                .collect();
            for s in &mut sleeps {
                // The first poll registers the timer with tokio's wheel.
                let _ = s.as_mut().poll(&mut cx);
            }
            drop(sleeps);
            samples.push(started.elapsed().as_nanos() as f64 / BATCH as f64);
        }
        samples
    })
}

use std::future::Future;

/// Global timers fired per second with every worker busy: each worker keeps inserting
/// short timers and running passes. One sample per 100 ms window.
#[must_use]
pub fn fire_rate(mode: TimerMode, workers: usize, duration: Duration) -> Vec<f64> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let timers = Timers::new(workers, mode, clock);
    let stop = AtomicBool::new(false);
    let mut samples = Vec::new();
    std::thread::scope(|s| {
        for w in 0..workers {
            let (timers, stop) = (&timers, &stop);
            s.spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    timers.insert(w, Duration::from_millis(n % 3), Scope::Global, noop());
                    if n.is_multiple_of(16) {
                        timers.run_expiry(w, timers.now());
                    }
                    n += 1;
                }
            });
        }
        let end = Instant::now() + duration;
        let mut last = timers.stats.fired.load(Ordering::Relaxed);
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
            let now = timers.stats.fired.load(Ordering::Relaxed);
            samples.push((now - last) as f64 * 10.0);
            last = now;
        }
        stop.store(true, Ordering::Relaxed);
    });
    samples
}

/// What [`idle_wakeups`] measured.
#[derive(Debug, Clone, Default)]
pub struct Wakeups {
    /// Wake-ups of the idle workers' timer drivers, per second.
    pub idle_wakeups_per_sec: f64,
    /// Timers that fired, of those armed.
    pub fired: u64,
    pub armed: u64,
    /// Lateness of each firing, in ms.
    pub lateness_ms: Vec<f64>,
}

/// Every worker arms `per_worker` one-shot global timers spread over `duration`, then
/// goes idle, except worker 0, which stays busy. Counts wake-ups of the idle workers.
#[must_use]
pub fn idle_wakeups(
    design: Design,
    workers: usize,
    per_worker: usize,
    duration: Duration,
) -> Wakeups {
    let workers = workers.max(2);
    match design {
        Design::Ours(mode) => ours_idle_wakeups(mode, workers, per_worker, duration),
        Design::Tokio => tokio_idle_wakeups(workers, per_worker, duration),
    }
}

fn spread(i: usize, per_worker: usize, duration: Duration) -> Duration {
    duration.mul_f64(0.1 + 0.8 * (i as f64 + 0.5) / per_worker as f64)
}

fn ours_idle_wakeups(
    mode: TimerMode,
    workers: usize,
    per_worker: usize,
    duration: Duration,
) -> Wakeups {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let timers = Arc::new(Timers::new(workers, mode, Arc::clone(&clock)));
    let hooks: Arc<dyn WorkerHooks> = timers.clone();
    let Ok(pool) =
        Workers::start_with_hooks(workers, "lab-timer", Duration::from_secs(5), Some(hooks))
    else {
        return Wakeups::default();
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    for w in 0..workers {
        let (t, stop) = (Arc::clone(&timers), stop_rx.clone());
        pool.submit(w, move || t.drive(w, stop));
    }
    let lateness = Arc::new(Mutex::new(Vec::new()));
    let fired = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    for w in 0..workers {
        let (t, lateness, fired) = (
            Arc::clone(&timers),
            Arc::clone(&lateness),
            Arc::clone(&fired),
        );
        pool.submit(w, move || async move {
            for i in 0..per_worker {
                let delay = spread(i, per_worker, duration);
                let (lateness, fired) = (Arc::clone(&lateness), Arc::clone(&fired));
                let due = Instant::now() + delay;
                t.insert(
                    w,
                    delay,
                    Scope::Global,
                    Box::new(move || {
                        let late = Instant::now().saturating_duration_since(due);
                        lock(&lateness).push(late.as_secs_f64() * 1e3);
                        fired.fetch_add(1, Ordering::Relaxed);
                    }),
                );
            }
        });
    }
    let busy_stop = stop_rx.clone();
    pool.submit(0, move || async move {
        while !*busy_stop.borrow() {
            tokio::task::yield_now().await;
        }
    });
    // Let the arming finish before counting.
    std::thread::sleep(Duration::from_millis(20));
    let before: Vec<u64> = (1..workers).map(|w| timers.driver_passes(w)).collect();
    std::thread::sleep(duration.saturating_sub(start.elapsed()));
    let after: Vec<u64> = (1..workers).map(|w| timers.driver_passes(w)).collect();
    let counted = start
        .elapsed()
        .saturating_sub(Duration::from_millis(20))
        .as_secs_f64();
    let _ = stop_tx.send(true);
    pool.join();
    let wakeups: u64 = after.iter().zip(&before).map(|(a, b)| a - b).sum();
    let lateness_ms = std::mem::take(&mut *lock(&lateness));
    Wakeups {
        idle_wakeups_per_sec: wakeups as f64 / counted,
        fired: fired.load(Ordering::Relaxed),
        armed: (workers * per_worker) as u64,
        lateness_ms,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Tokio's design: each worker's timers live in its own runtime, so each firing wakes
/// the worker that armed it. Wake-ups are counted as firings on idle workers.
fn tokio_idle_wakeups(workers: usize, per_worker: usize, duration: Duration) -> Wakeups {
    let Ok(pool) = Workers::start(workers, "lab-tokio", Duration::from_secs(5)) else {
        return Wakeups::default();
    };
    let lateness = Arc::new(Mutex::new(Vec::new()));
    let fired = Arc::new(AtomicU64::new(0));
    let idle_fired = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    for w in 0..workers {
        for i in 0..per_worker {
            let (lateness, fired, idle_fired) = (
                Arc::clone(&lateness),
                Arc::clone(&fired),
                Arc::clone(&idle_fired),
            );
            let delay = spread(i, per_worker, duration);
            pool.submit(w, move || async move {
                let due = Instant::now() + delay;
                tokio::time::sleep(delay).await;
                let late = Instant::now().saturating_duration_since(due);
                lock(&lateness).push(late.as_secs_f64() * 1e3);
                fired.fetch_add(1, Ordering::Relaxed);
                if w != 0 {
                    idle_fired.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    }
    std::thread::sleep(duration.saturating_sub(start.elapsed()));
    pool.join();
    let lateness_ms = std::mem::take(&mut *lock(&lateness));
    Wakeups {
        idle_wakeups_per_sec: idle_fired.load(Ordering::Relaxed) as f64 / duration.as_secs_f64(),
        fired: fired.load(Ordering::Relaxed),
        armed: (workers * per_worker) as u64,
        lateness_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_design_measures_something() {
        for design in [
            Design::Ours(TimerMode::Pull),
            Design::Ours(TimerMode::Push),
            Design::Ours(TimerMode::Global),
            Design::Tokio,
        ] {
            let s = insert_cancel_ns(design, 2, Duration::from_millis(30));
            assert!(
                !s.is_empty() && s.iter().all(|v| *v > 0.0),
                "{}: {s:?}",
                design.name()
            );
        }
        assert!(!fire_rate(TimerMode::Pull, 2, Duration::from_millis(250)).is_empty());
    }

    #[test]
    fn pull_fires_idle_workers_timers_without_waking_them() {
        // 40 timers of idle worker 1 over 0.8 s: tokio wakes it for each; pull lets the
        // busy worker 0 expire them.
        let pull = idle_wakeups(
            Design::Ours(TimerMode::Pull),
            2,
            40,
            Duration::from_millis(800),
        );
        assert_eq!(pull.fired, pull.armed, "{pull:?}");
        let tokio = idle_wakeups(Design::Tokio, 2, 40, Duration::from_millis(800));
        assert_eq!(tokio.fired, tokio.armed);
        assert!(
            pull.idle_wakeups_per_sec * 4.0 < tokio.idle_wakeups_per_sec,
            "pull {:.1}/s vs tokio {:.1}/s",
            pull.idle_wakeups_per_sec,
            tokio.idle_wakeups_per_sec
        );
    }
}
