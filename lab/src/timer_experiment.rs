//! The measurements behind `granary lab timers` (seed 002), driving `runtime::timers`
//! through its public API; `timers` only formats them.
//!
//! Every design runs on the same rig, so that only the design differs:
//! - workers are `runtime::Workers` threads (one current-thread event loop each, pinned to
//!   core `i % cores`), as in the server; callers pass at most one worker per core unless
//!   they label the result "oversubscribed";
//! - our designs' timer drivers (`Timers::drive`) run on every worker in every variant, so
//!   a driver's `sleeping_until` is real and an insert wakes a driver only when it must;
//! - background load is the same spinning task ([`spin`]) for every design, tokio's
//!   included: it spins for [`SPIN`] and yields, so the worker stays busy (never parks)
//!   and its event loop still runs timers;
//! - nothing is counted on one design's insert or cancel path only: wake-ups are counted
//!   as event-loop unparks by the same hook in every design.
//!
//! - [`insert_cancel_ns`]: worker 0 inserts [`BATCH`] global timers and cancels them, in a
//!   loop, while the other workers spin: ns per insert+cancel pair, per design (pull,
//!   push, global) and for tokio's own timer.
//! - [`fire_rate`]: global timers fired per second with every worker inserting short ones.
//! - [`idle_wakeups`]: every worker arms global timers, then all but worker 0 go idle
//!   while worker 0 spins: how often were the idle workers woken, and how late did the
//!   timers fire.
//!
//! Each function runs for a bounded time and returns raw samples.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gtime::{Clock, SystemClock};

use runtime::timers::{Callback, Scope, TimerMode, Timers};
use runtime::{Pinning, WorkerHooks, Workers};

/// Timers per measured batch (the seed's loop size).
pub const BATCH: usize = 1000;

/// How long the background load spins between yields to its event loop.
pub const SPIN: Duration = Duration::from_micros(50);

/// How long a worker pool may take to drain at the end of a measurement.
const DRAIN: Duration = Duration::from_secs(5);

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

/// Counts event-loop unparks per worker and forwards park/unpark to the timers, if any:
/// the same instrumentation for every design.
struct Unparks {
    timers: Option<Arc<Timers>>,
    count: Vec<AtomicU64>,
}

impl WorkerHooks for Unparks {
    fn parked(&self, worker: usize) {
        if let Some(t) = &self.timers {
            t.parked(worker);
        }
    }
    fn unparked(&self, worker: usize) {
        self.count[worker].fetch_add(1, Ordering::Relaxed);
        if let Some(t) = &self.timers {
            t.unparked(worker);
        }
    }
}

/// A worker pool for one design: our timers with a driver on every worker, or plain
/// workers for tokio's timer; both with the same unpark counter.
struct Rig {
    pool: Workers,
    timers: Option<Arc<Timers>>,
    unparks: Arc<Unparks>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Rig {
    fn start(design: Design, workers: usize, name: &str) -> Option<Self> {
        let timers = match design {
            Design::Ours(mode) => {
                let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
                Some(Arc::new(Timers::new(workers, mode, clock)))
            }
            Design::Tokio => None,
        };
        let unparks = Arc::new(Unparks {
            timers: timers.clone(),
            count: (0..workers).map(|_| AtomicU64::new(0)).collect(),
        });
        let hooks: Arc<dyn WorkerHooks> = unparks.clone();
        let pool =
            Workers::start_with_hooks(workers, name, DRAIN, Some(hooks), Pinning::PerCore).ok()?;
        let (stop, _) = tokio::sync::watch::channel(false);
        if let Some(t) = &timers {
            for w in 0..workers {
                let (t, rx) = (Arc::clone(t), stop.subscribe());
                pool.submit(w, move || t.drive(w, rx));
            }
        }
        Some(Self {
            pool,
            timers,
            unparks,
            stop,
        })
    }

    /// Starts the background load on worker `w`.
    fn spin_on(&self, w: usize) {
        let rx = self.stop.subscribe();
        self.pool.submit(w, move || spin(rx));
    }

    fn unparks(&self, range: std::ops::Range<usize>) -> u64 {
        range
            .map(|w| self.unparks.count[w].load(Ordering::Relaxed))
            .sum()
    }

    fn finish(self) {
        let _ = self.stop.send(true);
        self.pool.join();
    }
}

/// The background load: spin for [`SPIN`], yield to the event loop, until stopped (or
/// the rig is gone).
async fn spin(stop: tokio::sync::watch::Receiver<bool>) {
    while !*stop.borrow() && stop.has_changed().is_ok() {
        let started = Instant::now();
        while started.elapsed() < SPIN {
            std::hint::spin_loop();
        }
        tokio::task::yield_now().await;
    }
}

/// ns per insert+cancel of a global timer on worker 0, one sample per batch of
/// [`BATCH`], while workers `1..workers` run the background load. `workers` is at least 2.
#[must_use]
pub fn insert_cancel_ns(design: Design, workers: usize, duration: Duration) -> Vec<f64> {
    let workers = workers.max(2);
    let Some(rig) = Rig::start(design, workers, "lab-insert") else {
        return Vec::new();
    };
    for w in 1..workers {
        rig.spin_on(w);
    }
    let samples = Arc::new(Mutex::new(Vec::new()));
    let out = Arc::clone(&samples);
    let timers = rig.timers.clone();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    rig.pool.submit(0, move || async move {
        let end = Instant::now() + duration;
        loop {
            let ns = match &timers {
                Some(t) => ours_batch_ns(t),
                None => tokio_batch_ns(),
            };
            lock(&out).push(ns);
            if Instant::now() >= end {
                break;
            }
            // Lets this worker's own timer driver (or tokio's) run between batches.
            tokio::task::yield_now().await;
        }
        let _ = done_tx.send(());
    });
    let _ = done_rx.recv_timeout(duration + DRAIN);
    rig.finish();
    let samples = std::mem::take(&mut *lock(&samples));
    samples
}

fn ours_batch_ns(timers: &Timers) -> f64 {
    let mut handles = Vec::with_capacity(BATCH);
    let started = Instant::now();
    for i in 0..BATCH {
        let delay = Duration::from_millis(1000 + (i as u64 % 4096));
        handles.push(timers.insert(0, delay, Scope::Global, noop()));
    }
    for h in handles.drain(..) {
        timers.cancel(&h);
    }
    started.elapsed().as_nanos() as f64 / BATCH as f64
}

/// Tokio's timer on the calling worker's runtime: a `Sleep` is registered with the
/// wheel at its first poll and removed when dropped. Each one is boxed (it must be
/// pinned to be polled): one allocation per timer that our designs do not make.
fn tokio_batch_ns() -> f64 {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let started = Instant::now();
    let mut sleeps: Vec<_> = (0..BATCH)
        .map(|i| {
            Box::pin(tokio::time::sleep(Duration::from_millis(
                1000 + i as u64 % 4096,
            )))
        })
        .collect();
    for s in &mut sleeps {
        let _ = s.as_mut().poll(&mut cx);
    }
    drop(sleeps);
    started.elapsed().as_nanos() as f64 / BATCH as f64
}

/// Global timers fired per second with every worker busy: each worker inserts timers due
/// in 0-2 ms and yields every 16 inserts, so its driver runs. One sample per 100 ms.
#[must_use]
pub fn fire_rate(mode: TimerMode, workers: usize, duration: Duration) -> Vec<f64> {
    let Some(rig) = Rig::start(Design::Ours(mode), workers, "lab-fire") else {
        return Vec::new();
    };
    let Some(timers) = rig.timers.clone() else {
        return Vec::new();
    };
    for w in 0..workers {
        let (t, stop) = (Arc::clone(&timers), rig.stop.subscribe());
        rig.pool.submit(w, move || async move {
            let mut n = 0u64;
            while !*stop.borrow() {
                t.insert(w, Duration::from_millis(n % 3), Scope::Global, noop());
                if n.is_multiple_of(16) {
                    tokio::task::yield_now().await;
                }
                n += 1;
            }
        });
    }
    let mut samples = Vec::new();
    let end = Instant::now() + duration;
    let mut last = timers.stats.fired.load(Ordering::Relaxed);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
        let now = timers.stats.fired.load(Ordering::Relaxed);
        samples.push((now - last) as f64 * 10.0);
        last = now;
    }
    rig.finish();
    samples
}

/// What [`idle_wakeups`] measured.
#[derive(Debug, Clone, Default)]
pub struct Wakeups {
    /// Unparks of the idle workers' event loops, per second.
    pub idle_wakeups_per_sec: f64,
    /// Timers that fired, of those armed.
    pub fired: u64,
    pub armed: u64,
    /// Lateness of each firing, in ms.
    pub lateness_ms: Vec<f64>,
}

/// Every worker arms `per_worker` one-shot global timers spread over `duration`; then
/// every worker but 0 is idle while worker 0 runs the background load. Counts unparks of
/// the idle workers (the same hook for every design). `workers` is at least 2.
#[must_use]
pub fn idle_wakeups(
    design: Design,
    workers: usize,
    per_worker: usize,
    duration: Duration,
) -> Wakeups {
    let workers = workers.max(2);
    let Some(rig) = Rig::start(design, workers, "lab-idle") else {
        return Wakeups::default();
    };
    rig.spin_on(0);
    let lateness = Arc::new(Mutex::new(Vec::new()));
    let fired = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    for w in 0..workers {
        for i in 0..per_worker {
            let delay = spread(i, per_worker, duration);
            let probe = Probe::new(delay, &lateness, &fired);
            match &rig.timers {
                Some(t) => {
                    let t = Arc::clone(t);
                    rig.pool.submit(w, move || async move {
                        t.insert(w, delay, Scope::Global, Box::new(move || probe.fire()));
                    });
                }
                None => rig.pool.submit(w, move || async move {
                    tokio::time::sleep(delay).await;
                    probe.fire();
                }),
            }
        }
    }
    // Let the arming finish before counting.
    std::thread::sleep(Duration::from_millis(20));
    let before = rig.unparks(1..workers);
    std::thread::sleep(duration.saturating_sub(start.elapsed()));
    let after = rig.unparks(1..workers);
    let counted = start
        .elapsed()
        .saturating_sub(Duration::from_millis(20))
        .as_secs_f64();
    // Timers armed near the end may still be due: let them fire before stopping.
    std::thread::sleep(Duration::from_millis(50));
    rig.finish();
    let lateness_ms = std::mem::take(&mut *lock(&lateness));
    Wakeups {
        idle_wakeups_per_sec: (after - before) as f64 / counted,
        fired: fired.load(Ordering::Relaxed),
        armed: (workers * per_worker) as u64,
        lateness_ms,
    }
}

fn spread(i: usize, per_worker: usize, duration: Duration) -> Duration {
    duration.mul_f64(0.1 + 0.8 * (i as f64 + 0.5) / per_worker as f64)
}

/// Records one timer's firing and its lateness.
struct Probe {
    due: Instant,
    lateness: Arc<Mutex<Vec<f64>>>,
    fired: Arc<AtomicU64>,
}

impl Probe {
    fn new(delay: Duration, lateness: &Arc<Mutex<Vec<f64>>>, fired: &Arc<AtomicU64>) -> Self {
        Self {
            due: Instant::now() + delay,
            lateness: Arc::clone(lateness),
            fired: Arc::clone(fired),
        }
    }

    fn fire(self) {
        let late = Instant::now().saturating_duration_since(self.due);
        lock(&self.lateness).push(late.as_secs_f64() * 1e3);
        self.fired.fetch_add(1, Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
