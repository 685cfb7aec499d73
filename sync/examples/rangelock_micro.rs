//! Microbenchmark of one lock+unlock of a 4 KiB range, per design, for profiling
//! (`perf record`) and quick A/B checks; `granary lab rangelock` is the published one.
//!
//! ```sh
//! cargo run --release -p granary-sync --example rangelock_micro -- [THREADS] [MODE] [MS]
//! ```
//! THREADS (default 1) threads each take their own disjoint 4 KiB range of one lock in a
//! loop for MS milliseconds (default 300); MODE is `all` (default) or one mode name.
//!
//! Besides the wall-clock rate it prints the CPU time per operation (each thread's run
//! time from `/proc/thread-self/schedstat`), which a busy machine moves much less: time a
//! thread spends preempted is not counted.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use granary_sync::{RangeLock, RangeLockMode};

/// This thread's CPU time so far, in nanoseconds (0 where schedstat is missing).
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Operations per second (wall clock) and CPU nanoseconds per operation.
fn rate(mode: RangeLockMode, threads: usize, write: bool, run: Duration) -> (f64, f64) {
    let lock = RangeLock::new(mode);
    let start = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let cpu = AtomicU64::new(0);
    let began = std::thread::scope(|s| {
        for t in 0..threads {
            let (lock, start, stop, total, cpu) = (&lock, &start, &stop, &total, &cpu);
            s.spawn(move || {
                let at = t as u64 * 4096;
                start.wait();
                let cpu_start = cpu_ns();
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..64 {
                        let g = if write {
                            lock.write(at..at + 4096)
                        } else {
                            lock.read(at..at + 4096)
                        };
                        std::hint::black_box(&g);
                        drop(g);
                    }
                    done += 64;
                }
                total.fetch_add(done, Ordering::Relaxed);
                cpu.fetch_add(cpu_ns() - cpu_start, Ordering::Relaxed);
            });
        }
        start.wait();
        let began = Instant::now();
        std::thread::sleep(run);
        stop.store(true, Ordering::Relaxed);
        began
    });
    let ops = total.load(Ordering::Relaxed) as f64;
    (
        ops / began.elapsed().as_secs_f64(),
        cpu.load(Ordering::Relaxed) as f64 / ops,
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1);
    let modes: Vec<RangeLockMode> = match args.get(2).map(String::as_str) {
        None | Some("all") => RangeLockMode::ALL.to_vec(),
        Some(name) => vec![name.parse().expect("mode")],
    };
    let ms = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(300);
    for write in [false, true] {
        for &mode in &modes {
            let (r, cpu) = rate(mode, threads, write, Duration::from_millis(ms));
            println!(
                "{} T={threads} {:>8}: {:7.2} M/s wall, {:6.1} CPU ns/op",
                if write { "write" } else { "read " },
                mode.name(),
                r / 1e6,
                cpu
            );
        }
    }
}
