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
mod decode_jobs;
mod e2e;
mod fhcache;
mod idle;
mod measure;
mod multigrain;
mod plot;
mod rangelock;
mod report;
pub mod timer_experiment;
mod timers;

use std::time::Duration;

use clap::Args;
use harness::machine::{self, LoadCheck, Machine};

pub use report::Report;

#[derive(Debug, Args)]
pub struct LabArgs {
    /// `list`, or the experiment to run (`decode`, `multigrain`, `rangelock`, `timers`,
    /// `fhcache`).
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

    /// Also draw the report as a PNG in this file: one bar per design in each group, its
    /// median with a min..max whisker, on a log scale.
    #[arg(long, value_name = "FILE")]
    plot: Option<std::path::PathBuf>,

    /// Samples per variant (default 5, 2 with --quick).
    #[arg(long, value_name = "N")]
    samples: Option<usize>,

    /// Run even if the 1-minute load average is above the core count (the report is then
    /// marked BUSY). Without it such a run is refused, except with --quick.
    #[arg(long)]
    allow_busy: bool,
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
    /// `--json-file`, for experiments that keep more files beside it (fhcache's iozone).
    pub json_file: Option<std::path::PathBuf>,
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
            json_file: args.json_file.clone(),
        })
    }
}

struct Experiment {
    name: &'static str,
    seed: &'static str,
    summary: &'static str,
    run: fn(&Settings) -> Result<Report, String>,
}

const EXPERIMENTS: [Experiment; 5] = [
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
    Experiment {
        name: "fhcache",
        seed: "004_118b3be918185a92.txt",
        summary: "handle/credential/open-file caches, --fhcache off vs on: one 4 KiB \
                  WRITE/READ stage by stage in process (decode, handle verify, export, \
                  credential, open, I/O, close, encode), 4 KiB at depth 64 and the seed's \
                  iozone table (granary bench) through granary serve DIR",
        run: fhcache::run,
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
    let load = LoadCheck::now();
    load.refuse_unless(args.allow_busy || args.quick)?;
    if let Some(warning) = load.warning() {
        eprintln!("granary lab: {warning}");
    }
    let machine = machine::describe();
    let mut report = (experiment.run)(&settings)?;
    let load_after = machine::loadavg();
    report.context.splice(
        0..0,
        machine_context(&settings, &machine, &load, load_after),
    );
    let mut json = report.to_json();
    json["machine"] = serde_json::json!({
        "description": machine,
        "load_before": load.load_before,
        "load_after": load_after,
        "busy": load.busy,
        "warning": load.warning(),
    });
    let json = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
    if let Some(path) = &args.plot {
        plot::draw(&report, path)?;
    }
    if let Some(path) = &args.json_file {
        std::fs::write(path, format!("{json}\n"))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if args.json {
        println!("{json}");
    } else {
        let banner = load
            .warning()
            .map(|w| format!("!! {w}\n"))
            .unwrap_or_default();
        print!("{banner}{}{banner}", report.to_table());
    }
    Ok(())
}

/// Cores this process may run on.
fn cores() -> usize {
    machine::cores()
}

/// Facts about the machine and the run that every report starts with.
fn machine_context(
    settings: &Settings,
    machine: &Machine,
    load: &LoadCheck,
    load_after: [f64; 3],
) -> Vec<(String, String)> {
    let avg = |l: [f64; 3]| format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2]);
    let mut context = vec![
        ("nproc".into(), machine.cores.to_string()),
        ("cpu".into(), machine.cpu.clone()),
        ("kernel".into(), machine.kernel.clone()),
        (
            "build".into(),
            format!("{}, commit {}", machine.granary_build, machine.git_commit),
        ),
        ("loadavg at start".into(), avg(load.load_before)),
        ("loadavg at end".into(), avg(load_after)),
    ];
    if let Some(warning) = load.warning() {
        context.push(("BUSY".into(), warning));
    }
    context.extend([(
        "samples".into(),
        format!(
            "{} per variant, {} ms each in process, {} ms through the server{}",
            settings.samples,
            settings.sample.as_millis(),
            settings.server_sample.as_millis(),
            if settings.quick { " (--quick)" } else { "" }
        ),
    )]);
    context
}
