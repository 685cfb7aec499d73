//! `granary lab decode` (seed 001): where EROFS decompression runs.
//!
//! Groups (after/before is over `pool`, the shared high-priority queue the seed replaced):
//! - eligible→running latency of decode jobs (queued → started), in µs: average, median,
//!   min, max and standard deviation per run, while every core runs a CPU-bound spinning
//!   thread; one feeder per core plays the network worker that has just read a compressed
//!   cluster (`decode_jobs`);
//! - end-to-end: 1 MiB READs of an LZ4-compressed file through `granary serve IMAGE
//!   --decode MODE --erofs-cache-bytes 0` (every READ decodes) under the same load,
//!   latency per READ in µs (average and standard deviation per run).
//!
//! `inline` decodes on the network worker itself: no hand-off, so its eligible→running
//! latency is the cost of reading the clock twice; its price shows in the READ latency.

use std::sync::Arc;
use std::time::Duration;

use crate::decode_jobs::{eligible_to_running, Background, LatencyStats};
use client::{nfs_ok, ClientError, Nfs3Client};
use gtime::Clock;
use nfs3::nfs::ReadArgs;
use runtime::decode::DecodeMode;

use super::report::{Report, Variant};
use super::Settings;

const SEED_CLAIM: &str = "scheduling latency of decompression, workqueue → per-CPU kthread \
                          workers: avg 15253 → 2914 µs (-81%), median -79%, max -87%, \
                          stddev 7166 → 359 µs (Android app launch, arm64)";

const MODES: [(&str, DecodeMode); 3] = [
    ("pool", DecodeMode::Pool),
    ("percore", DecodeMode::PerCore),
    ("inline", DecodeMode::Inline),
];

/// Pause of each feeder between jobs: reads arriving, not a saturated queue.
const FEED_INTERVAL: Duration = Duration::from_micros(500);
/// Spinning background threads per core.
const BACKGROUND_PER_CORE: usize = 1;
/// Size of the compressed file read end to end, and of each READ.
const FILE_BYTES: usize = 16 << 20;
const READ_BYTES: u32 = 1 << 20;

fn variant(group: &str, mode: &str, samples: Vec<f64>) -> Variant {
    let baseline = (mode != "pool").then(|| format!("{group} pool"));
    Variant {
        name: format!("{group} {mode}"),
        label: if baseline.is_none() {
            format!("{mode} (before)")
        } else {
            mode.to_string()
        },
        group: group.to_string(),
        baseline,
        samples,
    }
}

/// Runs the experiment.
///
/// # Errors
/// If decode workers, mkfs.erofs or the server cannot start.
pub fn run(settings: &Settings) -> Result<Report, String> {
    let clock = gtime::SystemClock::shared();
    let stats = ["avg", "median", "min", "max", "stddev"];
    let mut per_mode: Vec<Vec<LatencyStats>> = vec![Vec::new(); MODES.len()];
    let mut jobs = vec![0usize; MODES.len()];
    for _ in 0..settings.samples {
        for (i, (_, mode)) in MODES.iter().enumerate() {
            let d = settings.server_sample * 2;
            let lat = eligible_to_running(*mode, d, FEED_INTERVAL, BACKGROUND_PER_CORE, &clock)
                .map_err(|e| format!("decode workers: {e}"))?;
            jobs[i] += lat.len();
            per_mode[i].push(LatencyStats::of(&lat));
        }
    }
    let mut variants = Vec::new();
    for stat in stats {
        let group = format!("eligible→running {stat} µs");
        for (i, (name, _)) in MODES.iter().enumerate() {
            let samples = per_mode[i].iter().map(|s| pick(s, stat)).collect();
            variants.push(variant(&group, name, samples));
        }
    }
    let reads = read_latencies(settings, &clock)?;
    for (stat, f) in [("avg", 0usize), ("stddev", 1)] {
        let group = format!("1 MiB READ latency {stat} µs");
        for (i, (name, _)) in MODES.iter().enumerate() {
            let samples = reads[i]
                .iter()
                .map(|s| if f == 0 { s.avg_us } else { s.stddev_us })
                .collect();
            variants.push(variant(&group, name, samples));
        }
    }
    let notes = vec![
        format!(
            "decode jobs per mode over all runs: {}",
            MODES
                .iter()
                .zip(&jobs)
                .map(|((n, _), j)| format!("{n} {j}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        format!(
            "load: {BACKGROUND_PER_CORE} spinning thread per core; one feeder per core pausing \
             {} µs between 64 KiB LZ4 decodes; percore workers run SCHED_FIFO 1 (nice -10 if not \
             permitted), pool threads nice -20 (see the server log for a priority warning)",
            FEED_INTERVAL.as_micros()
        ),
        "each sample is one run's statistic; after/before is over pool; lower is better".into(),
    ];
    Ok(Report {
        experiment: "decode",
        title: "per-core decode workers vs the shared pool (seed 001)",
        unit: "µs",
        higher_is_better: false,
        seed_claim: SEED_CLAIM,
        variants,
        context: Vec::new(),
        notes,
    })
}

fn pick(s: &LatencyStats, stat: &str) -> f64 {
    match stat {
        "avg" => s.avg_us,
        "median" => s.median_us,
        "min" => s.min_us,
        "max" => s.max_us,
        _ => s.stddev_us,
    }
}

/// Builds an LZ4 image of one compressible file with mkfs.erofs.
fn make_image(dir: &std::path::Path) -> Result<std::path::PathBuf, String> {
    let src = dir.join("tree");
    std::fs::create_dir_all(&src).map_err(|e| e.to_string())?;
    let words: [&[u8]; 4] = [b"granary ", b"lab ", b"decode ", b"erofs\n"];
    let mut data = Vec::with_capacity(FILE_BYTES);
    let mut x = 11u64;
    while data.len() < FILE_BYTES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(words[(x % 4) as usize]);
    }
    std::fs::write(src.join("file"), &data).map_err(|e| e.to_string())?;
    let image = dir.join("lab.erofs");
    let st = std::process::Command::new("mkfs.erofs")
        .args(["--quiet", "-zlz4hc", "-C65536"])
        .arg(&image)
        .arg(&src)
        .status()
        .map_err(|e| format!("cannot run mkfs.erofs ({e}); apt-get install erofs-utils"))?;
    if !st.success() {
        return Err("mkfs.erofs failed".into());
    }
    Ok(image)
}

/// Per mode, per sample: statistics of 1 MiB READ latencies under the background load.
fn read_latencies(
    settings: &Settings,
    clock: &Arc<dyn Clock>,
) -> Result<Vec<Vec<LatencyStats>>, String> {
    let dir = std::env::temp_dir().join(format!("granary-lab-decode-{}", std::process::id()));
    let image = make_image(&dir)?;
    let img = image.to_string_lossy().to_string();
    let state = dir.join("state").to_string_lossy().to_string();
    let servers = MODES
        .iter()
        .map(|(name, _)| {
            let args = [
                img.as_str(),
                "--decode",
                name,
                "--erofs-cache-bytes",
                "0",
                "--state-dir",
                state.as_str(),
            ];
            super::e2e::start(&args)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let load = Background::start(BACKGROUND_PER_CORE);
    let result = rt.block_on(async {
        let mut out = vec![Vec::new(); servers.len()];
        let mut targets = Vec::new();
        for s in &servers {
            let c = Nfs3Client::connect(s.addr(), s.addr()).await?;
            let root = c.mount("/").await?;
            let (fh, _) = c.lookup_ok(&root, "file").await?;
            targets.push((c, fh));
        }
        for _ in 0..settings.samples {
            for (i, (c, fh)) in targets.iter().enumerate() {
                let mut lat = Vec::new();
                let end = clock.monotonic() + settings.server_sample;
                let mut offset = 0u64;
                while clock.monotonic() < end {
                    let t0 = clock.monotonic();
                    let args = ReadArgs {
                        file: fh.clone(),
                        offset,
                        count: READ_BYTES,
                    };
                    let ok = nfs_ok(c.read(&args).await?)?;
                    lat.push(clock.monotonic() - t0);
                    offset = if ok.eof {
                        0
                    } else {
                        offset + u64::from(READ_BYTES)
                    };
                }
                out[i].push(LatencyStats::of(&lat));
            }
        }
        Ok::<_, ClientError>(out)
    });
    drop(load);
    let _ = std::fs::remove_dir_all(&dir);
    result.map_err(|e| format!("READ loop: {e}"))
}
