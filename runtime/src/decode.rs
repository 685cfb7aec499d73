//! Decode workers (seed 001): where CPU-heavy decoding jobs (EROFS decompression) run.
//!
//! - `percore`: one decode thread per core, pinned to it and raised to real-time priority
//!   (`SCHED_FIFO` 1, like the kernel's `sched_set_fifo_low`) or, where the process may not,
//!   to nice -10 (said once in the log). A job goes to the decode thread of the core whose
//!   network worker finished reading the compressed bytes, so the data stays in that
//!   core's cache and the job preempts whatever else that core runs. A caller that is not
//!   a network worker, or whose core has no decode thread, falls back to the pool.
//! - `pool`: the design the seed replaced — one shared queue served by
//!   `cores + cores / 4` unbound threads at high (nice -20) priority, like the kernel's
//!   `WQ_UNBOUND | WQ_HIGHPRI` workqueue.
//! - `inline`: the job runs on the calling thread (no hand-off at all).
//!
//! The promise: [`DecodeWorkers::run`] returns the job's result, whichever thread ran it.
//! With a [`LatencyProbe`] every hand-off records the time from the job becoming eligible
//! (queued) to it starting to run, from the injected clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use gtime::Clock;

use crate::queue::{Job, Queue};

/// Which design runs decode jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecodeMode {
    /// Per-core pinned, raised-priority workers fed by the core that read the data.
    #[default]
    PerCore,
    /// One shared queue of unbound high-priority threads (the seed's "before").
    Pool,
    /// On the calling thread.
    Inline,
}

impl std::str::FromStr for DecodeMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "percore" => Ok(Self::PerCore),
            "pool" => Ok(Self::Pool),
            "inline" => Ok(Self::Inline),
            other => Err(format!(
                "unknown decode mode {other:?}: use percore, pool or inline"
            )),
        }
    }
}

/// Most decode-latency samples a probe keeps (older ones are kept, newer dropped).
pub const MAX_PROBE_SAMPLES: usize = 1 << 20;

/// Records eligible→running latencies of hand-offs.
pub struct LatencyProbe {
    clock: Arc<dyn Clock>,
    samples: Mutex<Vec<Duration>>,
}

impl LatencyProbe {
    #[must_use]
    pub fn new(clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            clock,
            samples: Mutex::new(Vec::new()),
        })
    }

    fn record(&self, d: Duration) {
        let mut s = self
            .samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.len() < MAX_PROBE_SAMPLES {
            s.push(d);
        }
    }

    /// Takes the samples recorded so far.
    pub fn take(&self) -> Vec<Duration> {
        std::mem::take(
            &mut *self
                .samples
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// The decode workers of one server.
pub struct DecodeWorkers {
    mode: DecodeMode,
    percore: Vec<Arc<Queue>>,
    pool: Arc<Queue>,
    threads: Vec<JoinHandle<()>>,
    probe: Option<Arc<LatencyProbe>>,
}

static PRIORITY_WARNED: AtomicBool = AtomicBool::new(false);

impl DecodeWorkers {
    /// Starts the threads `mode` needs: per-core workers on every core the process may
    /// use (plus the fallback pool), or the pool alone, or none.
    ///
    /// # Errors
    /// If a thread cannot be spawned.
    pub fn start(mode: DecodeMode, probe: Option<Arc<LatencyProbe>>) -> std::io::Result<Self> {
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let ncores = cores.len().max(1);
        let mut me = Self {
            mode,
            percore: Vec::new(),
            pool: Queue::new(),
            threads: Vec::new(),
            probe,
        };
        if mode == DecodeMode::Inline {
            return Ok(me);
        }
        let pool_threads = if mode == DecodeMode::Pool {
            ncores + ncores / 4
        } else {
            1
        };
        for i in 0..pool_threads {
            let q = Arc::clone(&me.pool);
            me.threads
                .push(spawn(format!("granary-decode-pool-{i}"), move || {
                    raise_priority(false);
                    q.serve();
                })?);
        }
        if mode == DecodeMode::PerCore {
            for (i, core) in cores.into_iter().enumerate() {
                let q = Queue::new();
                me.percore.push(Arc::clone(&q));
                me.threads
                    .push(spawn(format!("granary-decode-{i}"), move || {
                        if !core_affinity::set_for_current(core) {
                            tracing::debug!(core = i, "could not pin decode worker");
                        }
                        raise_priority(true);
                        q.serve();
                    })?);
            }
        }
        Ok(me)
    }

    #[must_use]
    pub fn mode(&self) -> DecodeMode {
        self.mode
    }

    /// Runs `job` per the mode, fed from the calling network worker's core (or, on a
    /// worker's blocking pool, from that worker's), and returns its result.
    pub fn run<R: Send + 'static>(&self, job: impl FnOnce() -> R + Send + 'static) -> R {
        self.run_from(crate::home_worker(), job)
    }

    /// Like [`DecodeWorkers::run`], as if called from network worker `from`.
    pub fn run_from<R: Send + 'static>(
        &self,
        from: Option<usize>,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> R {
        if self.mode == DecodeMode::Inline {
            if let Some(p) = &self.probe {
                let t0 = p.clock.monotonic();
                p.record(p.clock.monotonic().saturating_sub(t0));
            }
            return job();
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let probe = self.probe.clone();
        let queued = probe.as_ref().map(|p| p.clock.monotonic());
        let wrapped: Job = Box::new(move || {
            if let (Some(p), Some(t0)) = (&probe, queued) {
                p.record(p.clock.monotonic().saturating_sub(t0));
            }
            let _ = tx.send(job());
        });
        let queue = match (self.mode, from) {
            (DecodeMode::PerCore, Some(w)) if !self.percore.is_empty() => {
                &self.percore[w % self.percore.len()]
            }
            _ => &self.pool,
        };
        queue.push(wrapped);
        rx.recv().expect("decode workers outlive every caller")
    }
}

impl Drop for DecodeWorkers {
    fn drop(&mut self) {
        self.pool.close();
        for q in &self.percore {
            q.close();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name).spawn(f)
}

/// Raises the calling thread: real-time FIFO 1 for per-core workers (falling back to
/// nice -10), nice -20 for pool threads. Says once in the log when it may not.
fn raise_priority(realtime: bool) {
    let result = if realtime {
        crate::sched::set_fifo_low().or_else(|_| crate::sched::set_nice(-10))
    } else {
        crate::sched::set_nice(-20)
    };
    if let Err(e) = result {
        if !PRIORITY_WARNED.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, "decode workers run at normal priority (no permission to raise it)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_returns_results_and_records_latency() {
        for mode in [DecodeMode::PerCore, DecodeMode::Pool, DecodeMode::Inline] {
            let probe = LatencyProbe::new(gtime::SystemClock::shared());
            let w = DecodeWorkers::start(mode, Some(Arc::clone(&probe))).unwrap();
            let sum: u64 = (0..100u64)
                .map(|i| w.run_from(Some(i as usize), move || i * 2))
                .sum();
            assert_eq!(sum, 9900);
            assert_eq!(w.run(|| 7), 7);
            let samples = probe.take().len();
            assert_eq!(samples, 101, "{mode:?}");
        }
    }

    #[test]
    fn percore_jobs_run_on_the_callers_core_worker() {
        let w = DecodeWorkers::start(DecodeMode::PerCore, None).unwrap();
        let cores = core_affinity::get_core_ids().unwrap_or_default().len();
        for i in 0..cores {
            let name = w.run_from(Some(i), || std::thread::current().name().map(str::to_owned));
            assert_eq!(
                name.as_deref(),
                Some(format!("granary-decode-{i}").as_str())
            );
        }
        let name = w.run_from(None, || std::thread::current().name().map(str::to_owned));
        assert_eq!(
            name.as_deref(),
            Some("granary-decode-pool-0"),
            "fallback to the pool"
        );
    }
}
