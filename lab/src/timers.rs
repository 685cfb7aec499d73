//! `granary lab timers` (seed 002): where a timer is enqueued, and who expires it.
//!
//! Groups (each with its unit in its name; after/before is over `push`, the design the
//! seed's pull model replaced):
//! - insert+cancel of 1000 global timers on worker 0 while the other workers are busy
//!   with timers of their own, ns per pair: global / push / pull, and tokio's own timer;
//! - wake-ups of idle workers per second when every worker armed timers and went idle
//!   but worker 0 (lower is better: pull lets the busy migrator expire them);
//! - global timers fired per second with every worker busy;
//! - WRITE rate through the server started with each `--timers` mode.
//!
//! The measuring code is `timer_experiment`.

use std::time::Duration;

use runtime::timers::TimerMode;

use super::report::{Report, Variant};
use super::timer_experiment::{fire_rate, idle_wakeups, insert_cancel_ns, Design};
use super::{e2e, measure, Settings};

const SEED_CLAIM: &str = "enqueue+cancel of 1000 timers with the other CPUs busy: 145 ns \
                          (push: enqueue on a remote busy CPU) → 109 ns (pull: always local), \
                          -25%; idle CPUs no longer woken for global timers";

/// Workers in the in-process experiments: the seed needs busy *other* workers, so at
/// least 4 even on this 2-core machine (the extra ones oversubscribe).
const WORKERS: usize = 4;

const DESIGNS: [Design; 4] = [
    Design::Ours(TimerMode::Push),
    Design::Ours(TimerMode::Global),
    Design::Ours(TimerMode::Pull),
    Design::Tokio,
];

fn variant(group: &str, design: Design, samples: Vec<f64>) -> Variant {
    let name = design.name();
    let baseline = (design != DESIGNS[0]).then(|| format!("{group} {}", DESIGNS[0].name()));
    let label = if baseline.is_none() {
        format!("{name} (before)")
    } else {
        name.to_string()
    };
    Variant {
        name: format!("{group} {name}"),
        label,
        group: group.to_string(),
        baseline,
        samples,
    }
}

/// Runs the experiment.
///
/// # Errors
/// If the server for the end-to-end runs cannot start.
pub fn run(settings: &Settings) -> Result<Report, String> {
    let mut variants = Vec::new();
    let group = "insert+cancel, ns per pair (others busy)";
    for design in DESIGNS {
        let samples = measure::samples(settings.samples, || {
            let per_batch = insert_cancel_ns(design, WORKERS, settings.sample);
            median(&per_batch)
        });
        variants.push(variant(group, design, samples));
    }
    let group = "idle-worker wake-ups per second";
    let window = if settings.quick {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(1)
    };
    let mut lateness = Vec::new();
    for design in DESIGNS {
        let mut late = Vec::new();
        let samples = measure::samples(settings.samples, || {
            let w = idle_wakeups(design, WORKERS, 50, window);
            late.extend(w.lateness_ms);
            w.idle_wakeups_per_sec
        });
        lateness.push((design.name(), percentile(&mut late, 0.99)));
        variants.push(variant(group, design, samples));
    }
    let group = "global timers fired per second, all busy";
    for design in DESIGNS.into_iter().filter(|d| *d != Design::Tokio) {
        let Design::Ours(mode) = design else { continue };
        let samples = measure::samples(settings.samples, || {
            median(&fire_rate(
                mode,
                WORKERS,
                settings.sample.max(Duration::from_millis(200)),
            ))
        });
        variants.push(variant(group, design, samples));
    }
    let group = "server WRITE 4 KiB ops/s by --timers";
    for design in DESIGNS.into_iter().filter(|d| *d != Design::Tokio) {
        let samples = e2e::write_rate(&["--timers", design.name()], settings)?;
        variants.push(variant(group, design, samples));
    }
    let mut notes = vec![
        "units differ per group (see each group's name); after/before is over push in every group: \
         for ns per pair and wake-ups lower is better, for fired/s and WRITE ops/s higher is better"
            .to_string(),
        format!(
            "p99 lateness of idle workers' timers (ms): {}",
            lateness.iter().map(|(n, p)| format!("{n} {p:.2}")).collect::<Vec<_>>().join(", ")
        ),
    ];
    notes.push(format!(
        "{WORKERS} workers on a {}-core machine: the busy workers of the first group and the \
         measured one share cores",
        crate::cores()
    ));
    Ok(Report {
        experiment: "timers",
        title: "pull-model timer hierarchy (seed 002)",
        unit: "per group",
        higher_is_better: false,
        seed_claim: SEED_CLAIM,
        variants,
        context: Vec::new(),
        notes,
    })
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    percentile(&mut v, 0.5)
}

fn percentile(xs: &mut [f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    let i = ((xs.len() - 1) as f64 * q).round() as usize;
    xs[i]
}
