//! The measuring code of `granary lab decode` (seed 001): eligible→running latency of
//! decode jobs handed to the decode workers (`runtime::decode`) while every core also runs
//! CPU-bound background work.
//!
//! One feeder thread per core, pinned to it, plays the code that has just completed the
//! read of a compressed cluster (in the kernel, the I/O completion, which runs above every
//! task; here SCHED_FIFO 2 where permitted, so that the background load does not starve
//! the feeders themselves): it hands a real LZ4 decode of a 64 KiB extent to the decode workers
//! (as if from that core), waits for it, pauses, and repeats. One spinning thread per core
//! is the background load. The probe records, per job, the time from being queued to
//! starting to run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gtime::Clock;
use runtime::decode::{DecodeMode, DecodeWorkers, LatencyProbe};

/// Bytes one job decodes.
const JOB_BYTES: usize = 64 << 10;

/// What one run measured.
#[derive(Debug, Clone)]
pub struct LatencyStats {
    pub avg_us: f64,
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub stddev_us: f64,
}

impl LatencyStats {
    /// Statistics of `samples` (all zero when empty).
    #[must_use]
    pub fn of(samples: &[Duration]) -> Self {
        let mut us: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        us.sort_by(f64::total_cmp);
        let n = us.len();
        if n == 0 {
            return Self {
                avg_us: 0.0,
                median_us: 0.0,
                min_us: 0.0,
                max_us: 0.0,
                stddev_us: 0.0,
            };
        }
        let avg = us.iter().sum::<f64>() / n as f64;
        let var = us.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        Self {
            avg_us: avg,
            median_us: if n % 2 == 1 {
                us[n / 2]
            } else {
                (us[n / 2 - 1] + us[n / 2]) / 2.0
            },
            min_us: us[0],
            max_us: us[n - 1],
            stddev_us: var.sqrt(),
        }
    }
}

/// CPU-bound threads, one pinned per core, spinning until dropped.
pub struct Background {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Background {
    /// Starts `per_core` spinning threads on every core.
    #[must_use]
    pub fn start(per_core: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let mut threads = Vec::new();
        for core in cores
            .into_iter()
            .flat_map(|c| (0..per_core).map(move |_| c))
        {
            let stop = Arc::clone(&stop);
            threads.push(std::thread::spawn(move || {
                core_affinity::set_for_current(core);
                let mut x = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..10_000 {
                        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005) ^ 1);
                    }
                }
            }));
        }
        Self { stop, threads }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn job_input() -> (Vec<u8>, usize) {
    let words: [&[u8]; 4] = [b"granary ", b"erofs ", b"decode ", b"cluster\n"];
    let mut x = 7u64;
    let mut data = Vec::with_capacity(JOB_BYTES);
    while data.len() < JOB_BYTES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(words[(x % 4) as usize]);
    }
    data.truncate(JOB_BYTES);
    let mut padded = vec![0u8; 64];
    padded.extend(lz4_flex::block::compress(&data));
    (padded, JOB_BYTES)
}

/// Runs decode jobs through `mode` for `duration`, one feeder per core pausing
/// `interval` between jobs, under `background` spinning threads per core. Returns the
/// eligible→running latencies.
///
/// # Errors
/// If the decode workers cannot start.
pub fn eligible_to_running(
    mode: DecodeMode,
    duration: Duration,
    interval: Duration,
    background: usize,
    clock: &Arc<dyn Clock>,
) -> std::io::Result<Vec<Duration>> {
    let probe = LatencyProbe::new(Arc::clone(clock));
    let workers = Arc::new(DecodeWorkers::start(mode, Some(Arc::clone(&probe)))?);
    let load = Background::start(background);
    let (input, out_len) = job_input();
    let input: Arc<[u8]> = Arc::from(input);
    let deadline = clock.monotonic() + duration;
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let feeders: Vec<_> = cores
        .into_iter()
        .enumerate()
        .map(|(i, core)| {
            let (workers, input, clock) =
                (Arc::clone(&workers), Arc::clone(&input), Arc::clone(clock));
            std::thread::spawn(move || {
                core_affinity::set_for_current(core);
                if let Err(e) = runtime::sched::set_fifo(2) {
                    eprintln!("granary lab: a feeder runs at normal priority ({e})");
                }
                // At least one job per feeder, even if the machine kept this thread from
                // running until after the deadline (a busy CI machine did).
                loop {
                    let input = Arc::clone(&input);
                    let codec = erofs::Codec::Lz4 { zero_padding: true };
                    let out =
                        workers.run_from(Some(i), move || erofs::decode(codec, &input, out_len));
                    assert!(out.is_ok_and(|o| o.len() == out_len), "decode job failed");
                    if clock.monotonic() >= deadline {
                        break;
                    }
                    std::thread::sleep(interval);
                }
            })
        })
        .collect();
    for f in feeders {
        let _ = f.join();
    }
    drop(load);
    Ok(probe.take())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_and_a_short_run_of_every_mode() {
        let s = LatencyStats::of(&[Duration::from_micros(1), Duration::from_micros(3)]);
        assert_eq!(
            (s.avg_us, s.median_us, s.min_us, s.max_us, s.stddev_us),
            (2.0, 2.0, 1.0, 3.0, 1.0)
        );
        let clock = gtime::SystemClock::shared();
        for mode in [DecodeMode::PerCore, DecodeMode::Pool, DecodeMode::Inline] {
            let got = eligible_to_running(
                mode,
                Duration::from_millis(50),
                Duration::from_millis(1),
                1,
                &clock,
            )
            .unwrap();
            assert!(!got.is_empty(), "{mode:?} ran no job");
        }
    }
}
