//! `granary lab`: re-runs each seed design's experiment on this machine, the design and the
//! one it replaced side by side in one run, and prints the seed's own headline beside the
//! result. See docs/LAB.md for what each experiment does and how to read it.
//!
//! - `granary lab list`: the experiments;
//! - `granary lab <experiment> [--json] [--json-file F] [--quick] [--samples N]`: a table
//!   (median, min, max and after/before per variant), or one JSON object (see `report`).
//!
//! Every experiment is bounded in time: well under a minute by default, a few seconds
//! with `--quick` (for CI: the numbers then only show that everything runs).
#![forbid(unsafe_code)]

mod decode;
mod e2e;
mod measure;
mod multigrain;
mod rangelock;
mod report;
pub mod timer_experiment;
mod timers;

use std::time::Duration;

use clap::Args;

pub use report::Report;

#[derive(Debug, Args)]
pub struct LabArgs {
    /// `list`, or the experiment to run (`decode`, `multigrain`, `rangelock`, `timers`).
    experiment: String,

    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,

    /// CI-sized run: two short samples per variant (checks that it runs, not speed).
    #[arg(long)]
    quick: bool,

    /// Also write the JSON object to this file (the table still goes to stdout), so one
    /// run gives both.
    #[arg(long, value_name = "FILE")]
    json_file: Option<std::path::PathBuf>,

    /// Samples per variant (default 5, 2 with --quick).
    #[arg(long, value_name = "N")]
    samples: Option<usize>,
}

/// How long and how often to measure.
#[derive(Debug, Clone)]
pub struct Settings {
    pub samples: usize,
    /// Length of one sample of an in-process loop.
    pub sample: Duration,
    /// Length of one sample through the server.
    pub server_sample: Duration,
    pub quick: bool,
}

/// Most samples a run may ask for: keeps any run bounded in time.
const MAX_SAMPLES: usize = 50;

impl Settings {
    fn from_args(args: &LabArgs) -> Result<Self, String> {
        let samples = args.samples.unwrap_or(if args.quick { 2 } else { 5 });
        if !(1..=MAX_SAMPLES).contains(&samples) {
            return Err(format!("--samples {samples}: use 1 to {MAX_SAMPLES}"));
        }
        let (sample, server_sample) = if args.quick {
            (Duration::from_millis(10), Duration::from_millis(50))
        } else {
            (Duration::from_millis(100), Duration::from_millis(400))
        };
        Ok(Self {
            samples,
            sample,
            server_sample,
            quick: args.quick,
        })
    }
}

struct Experiment {
    name: &'static str,
    seed: &'static str,
    summary: &'static str,
    run: fn(&Settings) -> Result<Report, String>,
}

const EXPERIMENTS: [Experiment; 4] = [
    Experiment {
        name: "decode",
        seed: "001_fdc9453f708f3db9.txt",
        summary: "decode workers: eligible→running latency of LZ4 decode jobs with every core \
                  busy (pool vs percore vs inline), and 1 MiB READ latency of a compressed \
                  file through granary serve IMAGE --decode MODE",
        run: decode::run,
    },
    Experiment {
        name: "multigrain",
        seed: "000_a7f635558418b800.txt",
        summary: "multigrain timestamps: pipe1-like change loop (coarse vs floor read \
                  separately vs combined), a stat every k changes, WRITE rate through the \
                  server by --timestamps",
        run: multigrain::run,
    },
    Experiment {
        name: "rangelock",
        seed: "003_aa3bd601831e2c39.txt",
        summary: "range locks: readseek3-like 4 KiB readers at disjoint offsets of one file \
                  and disjoint writers, T = 1, 2, 4, 8, no lock vs mutex FIFO vs lock-free vs \
                  cheat, on the lock alone and through the mem backend",
        run: rangelock::run,
    },
    Experiment {
        name: "timers",
        seed: "002_615ad6ffaa5df233.txt",
        summary: "timer hierarchy: insert+cancel with other workers busy (global vs push vs \
                  pull vs tokio), idle-worker wake-ups, fire rate, WRITE rate by --timers",
        run: timers::run,
    },
];

/// Runs `granary lab`.
///
/// # Errors
/// An unknown experiment, bad flags, or an experiment that could not run.
pub fn run(args: &LabArgs) -> Result<(), String> {
    if args.experiment == "list" {
        for e in &EXPERIMENTS {
            println!("{:<12} seed {}\n             {}", e.name, e.seed, e.summary);
        }
        return Ok(());
    }
    let experiment = EXPERIMENTS
        .iter()
        .find(|e| e.name == args.experiment)
        .ok_or_else(|| {
            let names: Vec<&str> = EXPERIMENTS.iter().map(|e| e.name).collect();
            format!(
                "unknown experiment {:?}; use `granary lab list` ({})",
                args.experiment,
                names.join(", ")
            )
        })?;
    let settings = Settings::from_args(args)?;
    let mut report = (experiment.run)(&settings)?;
    report.context.splice(0..0, machine_context(&settings));
    let json = serde_json::to_string_pretty(&report.to_json()).map_err(|e| e.to_string())?;
    if let Some(path) = &args.json_file {
        std::fs::write(path, format!("{json}\n"))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if args.json {
        println!("{json}");
    } else {
        print!("{}", report.to_table());
    }
    Ok(())
}

/// Cores this process may run on.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// Facts about the machine and the run that every report starts with.
fn machine_context(settings: &Settings) -> Vec<(String, String)> {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown".to_string());
    vec![
        ("nproc".into(), cores().to_string()),
        ("cpu".into(), cpu),
        (
            "kernel".into(),
            read("/proc/sys/kernel/osrelease").trim().to_string(),
        ),
        (
            "loadavg at start".into(),
            read("/proc/loadavg").trim().to_string(),
        ),
        (
            "samples".into(),
            format!(
                "{} per variant, {} ms each in process, {} ms through the server{}",
                settings.samples,
                settings.sample.as_millis(),
                settings.server_sample.as_millis(),
                if settings.quick { " (--quick)" } else { "" }
            ),
        ),
    ]
}
