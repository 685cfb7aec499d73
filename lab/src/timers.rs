//! `granary lab timers` (seed 002): where a timer is enqueued, and who expires it.
//!
//! Groups (each with its unit in its name; after/before is over `push`, the design the
//! seed's pull model replaced):
//! - insert+cancel of 1000 global timers on worker 0 while the other workers run the
//!   same spinning load, ns per pair: global / push / pull, and tokio's own timer;
//! - wake-ups of idle workers per second when every worker armed timers and went idle
//!   but worker 0 (lower is better: pull lets the busy migrator expire them);
//! - global timers fired per second with every worker busy;
//! - WRITE rate through the server started with each `--timers` mode;
//! - a server per mode holding 1,000 idle connections: its workers' wake-ups and its CPU
//!   time per second (the connections' idle/stall checks are one global scan timer).
//!
//! The measuring code is `timer_experiment`.

use std::time::Duration;

use runtime::timers::TimerMode;

use super::report::{Report, Variant};
use super::timer_experiment::{fire_rate, idle_wakeups, insert_cancel_ns, Design, SPIN};
use super::{e2e, idle, measure, Settings};

const SEED_CLAIM: &str = "enqueue+cancel of 1000 timers with the other CPUs busy: 145 ns \
                          (push: enqueue on a remote busy CPU) → 109 ns (pull: always local), \
                          -25%; idle CPUs no longer woken for global timers";

/// Workers in the in-process experiments: one per core, and at least 2 (the seed needs a
/// busy *other* worker); on a 1-core machine the result is labelled oversubscribed.
fn workers() -> usize {
    crate::cores().max(2)
}

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
    let workers = workers();
    let over = if workers > crate::cores() {
        ", oversubscribed"
    } else {
        ""
    };
    let mut variants = Vec::new();
    // Samples of the designs are taken in turn, so a machine whose load changes during
    // the run weighs on every design alike.
    let group = format!("insert+cancel, ns per pair (others spin; {workers} workers{over})");
    let per_design = measure::interleaved(DESIGNS.len(), settings.samples, |d| {
        median(&insert_cancel_ns(DESIGNS[d], workers, settings.sample))
    });
    for (design, samples) in DESIGNS.into_iter().zip(per_design) {
        variants.push(variant(&group, design, samples));
    }
    let group = format!("idle-worker wake-ups per second ({workers} workers{over})");
    let window = if settings.quick {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(1)
    };
    let mut late: Vec<Vec<f64>> = vec![Vec::new(); DESIGNS.len()];
    let per_design = measure::interleaved(DESIGNS.len(), settings.samples, |d| {
        let w = idle_wakeups(DESIGNS[d], workers, 50, window);
        late[d].extend(w.lateness_ms);
        w.idle_wakeups_per_sec
    });
    let mut lateness = Vec::new();
    for ((design, samples), mut late) in DESIGNS.into_iter().zip(per_design).zip(late) {
        lateness.push((design.name(), percentile(&mut late, 0.99)));
        variants.push(variant(&group, design, samples));
    }
    let group = format!("global timers fired per second, all busy ({workers} workers{over})");
    let ours: Vec<Design> = DESIGNS
        .into_iter()
        .filter(|d| *d != Design::Tokio)
        .collect();
    let per_design = measure::interleaved(ours.len(), settings.samples, |d| {
        let Design::Ours(mode) = ours[d] else {
            return f64::NAN;
        };
        let window = settings.sample.max(Duration::from_millis(200));
        median(&fire_rate(mode, workers, window))
    });
    for (design, samples) in ours.into_iter().zip(per_design) {
        variants.push(variant(&group, design, samples));
    }
    let group = "server WRITE 4 KiB ops/s by --timers";
    let ours: Vec<Design> = DESIGNS
        .into_iter()
        .filter(|d| *d != Design::Tokio)
        .collect();
    let flags: Vec<[&str; 2]> = ours.iter().map(|d| ["--timers", d.name()]).collect();
    let designs: Vec<&[&str]> = flags.iter().map(|f| &f[..]).collect();
    for (design, run) in ours
        .iter()
        .copied()
        .zip(e2e::runs(&designs, e2e::WRITES, settings)?)
    {
        variants.push(variant(group, design, run.samples));
    }
    let conns = if settings.quick { 200 } else { 1000 };
    let window = if settings.quick {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(3)
    };
    let idle = idle::idle_servers(&designs, conns, window, settings.samples)?;
    let wake_group = format!("server with {conns} idle connections: worker wake-ups per second");
    let cpu_group = format!("server with {conns} idle connections: CPU ms per second");
    let mut cpu = Vec::new();
    let baseline = idle::tokio_baseline(conns, window, settings.samples)?;
    for (design, run) in ours
        .iter()
        .chain([&Design::Tokio])
        .zip(idle.into_iter().chain([baseline]))
    {
        variants.push(variant(&wake_group, *design, run.wakeups_per_sec));
        cpu.push(variant(&cpu_group, *design, run.cpu_ms_per_sec));
    }
    variants.extend(cpu);
    let mut notes = vec![
        "units differ per group (see each group's name); after/before is over push in every group: \
         for ns per pair and wake-ups lower is better, for fired/s and WRITE ops/s higher is better"
            .to_string(),
        format!(
            "p99 lateness of the armed timers in the wake-up group (ms): {}",
            lateness.iter().map(|(n, p)| format!("{n} {p:.2}")).collect::<Vec<_>>().join(", ")
        ),
    ];
    notes.push(format!(
        "{workers} workers on a {}-core machine, each pinned to its core; our designs' timer \
         drivers run on every worker; the background load is the same spinning task (spin \
         {} us, yield) for every design, tokio included; wake-ups are event-loop unparks \
         counted by one hook for every design. tokio's insert+cancel includes one allocation \
         per timer (a Sleep must be boxed to be polled); in the idle-connection groups, tokio \
         is a plain multi-thread tokio server in the lab's process (a task per connection \
         with a watchdog re-armed every second, as granary had before its global scan)",
        crate::cores(),
        SPIN.as_micros()
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
