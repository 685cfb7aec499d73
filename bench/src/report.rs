//! The results of a run: `results.json` (every sample, the machine, the noise, the
//! versions), `report.md` (medians, spread over repeats, ratios granary/peer and
//! granary/limit, latency, failures), and the terminal table.
//!
//! Ratios are paired: each repeat ran every target back to back, so the ratio is taken
//! per repeat and the report gives the median of those ratios and their range. For every
//! metric here higher is better, so a ratio above 1 means granary is faster.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::iozone;
use super::sample::{Metric, Sample, Status};
use super::suites;
use super::targets::{Group, Target};
use super::v4;
use super::Settings;
use harness::machine::{LoadCheck, Machine, Noise};

#[derive(Debug, Serialize)]
pub struct WorkloadInfo {
    pub name: &'static str,
    pub about: &'static str,
}

#[derive(Debug, Serialize)]
pub struct TargetInfo {
    pub name: String,
    pub version: String,
    pub small_op_backend: String,
    pub data_backend: String,
    pub broken: Option<String>,
    pub notes: Vec<String>,
}

/// Everything a run produced; serialized whole as `results.json`.
#[derive(Debug, Serialize)]
pub struct Results {
    pub command: String,
    pub date: String,
    /// The BUSY warning, if the run started with load above the core count.
    pub busy: Option<String>,
    pub load: LoadCheck,
    pub machine: Machine,
    pub noise_start: Noise,
    pub noise_end: Noise,
    pub run_seconds: f64,
    pub settings: Settings,
    pub targets: Vec<TargetInfo>,
    pub workloads: Vec<WorkloadInfo>,
    pub samples: Vec<Sample>,
    /// The issues' goals per phase (host and erofs suites), checked on the medians.
    pub goals: Vec<GoalCheck>,
    /// The object suite's goals on what an operation costs the engines.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cost_goals: Vec<CostCheck>,
    /// NFSv4.1 ÷ NFSv3 per pair of the `v4` workload and target.
    pub v4_ratios: Vec<ProtoRatio>,
}

/// One pair of the `v4` workload on one target: its `-v4` rate ÷ its `-v3` rate.
#[derive(Debug, Serialize)]
pub struct ProtoRatio {
    pub workload: String,
    /// The `-v4` phase.
    pub phase: String,
    pub target: String,
    /// The ratio per repeat: median, min, max (None: a side has no value).
    pub ratio: Option<(f64, f64, f64)>,
}

/// Every `-v4` phase's ratio to its `-v3` phase, per target.
#[must_use]
pub fn v4_ratios(r: &Results) -> Vec<ProtoRatio> {
    let sum = Summary::new(r);
    let mut out = Vec::new();
    for (w, p, _) in &sum.keys {
        let Some(v3) = v4::v3_of(p) else { continue };
        for t in &sum.targets {
            if sum.cell(w, p, t).is_none() {
                continue;
            }
            out.push(ProtoRatio {
                workload: w.clone(),
                phase: p.clone(),
                target: t.clone(),
                ratio: sum.pair_ratio(w, (p, t), (&v3, t)),
            });
        }
    }
    out
}

/// The ratio row of a `-v4` phase: its label and each target's ratio (None: not a `-v4`
/// phase).
fn v4_ratio_row(
    r: &Results,
    workload: &str,
    phase: &str,
    targets: &[String],
) -> Option<Vec<String>> {
    let base = phase.strip_suffix("-v4")?;
    let ours: Vec<&ProtoRatio> = r
        .v4_ratios
        .iter()
        .filter(|x| x.workload == workload && x.phase == phase)
        .collect();
    if ours.is_empty() {
        return None;
    }
    let mut row = vec![format!("{workload}/{base} v4÷v3"), "ratio".to_owned()];
    for t in targets {
        let cell = ours.iter().find(|x| x.target == *t);
        row.push(cell.map_or_else(String::new, |x| ratio_text(x.ratio)));
    }
    Some(row)
}

/// One cost goal of one target and whether this run met it.
#[derive(Debug, Serialize)]
pub struct CostCheck {
    pub workload: String,
    pub phase: String,
    pub target: String,
    /// A key of the samples' `costs`: per op, at most `max`.
    pub cost: String,
    pub max: f64,
    /// The median over repeats, and the highest.
    pub median: Option<f64>,
    pub highest: Option<f64>,
    pub met: Option<bool>,
}

/// Checks the object suite's cost goals on every target that reported costs.
#[must_use]
pub fn check_cost_goals(r: &Results) -> Vec<CostCheck> {
    let mut out = Vec::new();
    for g in &super::object::COST_GOALS {
        let targets = each_once(
            r.samples
                .iter()
                .filter(|s| {
                    s.workload == g.workload && s.phase == g.phase && s.costs.contains_key(g.cost)
                })
                .map(|s| s.target.as_str()),
        );
        for t in targets {
            let v: Vec<f64> = r
                .samples
                .iter()
                .filter(|s| s.workload == g.workload && s.phase == g.phase && s.target == t)
                .filter_map(|s| s.costs.get(g.cost).copied())
                .collect();
            let m = median(&v);
            let highest = v.iter().copied().reduce(f64::max);
            out.push(CostCheck {
                workload: g.workload.to_owned(),
                phase: g.phase.to_owned(),
                target: t.to_owned(),
                cost: g.cost.to_owned(),
                max: g.max,
                median: m,
                highest,
                met: highest.map(|h| h <= g.max),
            });
        }
    }
    out
}

/// Each name once, in the order first seen: the repeats interleave the targets' samples
/// (a, b, a, b), so dropping only repeated neighbours would keep one per repeat.
fn each_once<'a>(names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for n in names {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// The columns of the cost tables: key of `Sample::costs` and its heading.
const COST_COLUMNS: [(&str, &str); 8] = [
    ("db_transactions", "db tx"),
    ("db_retries", "db retries"),
    ("db_statements", "db statements"),
    ("db_round_trips", "db round trips"),
    ("s3_puts", "S3 PUTs"),
    ("s3_put_kib", "PUT KiB"),
    ("s3_gets", "S3 GETs"),
    ("s3_get_kib", "GET KiB"),
];

/// The columns of the CPU table: key of `Sample::costs` and its heading.
const CPU_COLUMNS: [(&str, &str); 4] = [
    ("cpu_head_s_gib", "heads"),
    ("cpu_s3_s_gib", "S3 server"),
    ("cpu_db_s_gib", "PostgreSQL"),
    ("cpu_bench_s_gib", "bench (client or probe)"),
];

/// Rows of `columns` of the samples' costs: (phase, target, medians per column), for the
/// samples that have any of them.
fn cost_rows(r: &Results, columns: &[(&str, &str)]) -> Vec<(String, String, Vec<String>)> {
    let sum = Summary::new(r);
    let mut rows = Vec::new();
    for (w, p, _) in &sum.keys {
        for t in &sum.targets {
            let samples: Vec<&Sample> = r
                .samples
                .iter()
                .filter(|s| &s.workload == w && &s.phase == p && &s.target == t)
                .filter(|s| columns.iter().any(|(key, _)| s.costs.contains_key(*key)))
                .collect();
            if samples.is_empty() {
                continue;
            }
            let cols = columns
                .iter()
                .map(|(key, _)| {
                    let v: Vec<f64> = samples
                        .iter()
                        .filter_map(|s| s.costs.get(*key))
                        .copied()
                        .collect();
                    median(&v).map_or_else(|| "–".to_owned(), |m| format!("{m:.3}"))
                })
                .collect();
            rows.push((format!("{w}/{p}"), t.clone(), cols));
        }
    }
    rows
}

/// The object suite's CPU seconds per GiB moved, per process.
fn cpu_section(md: &mut String, r: &Results) {
    let rows = cost_rows(r, &CPU_COLUMNS);
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(md, "\n## CPU seconds per GiB moved\n");
    let _ = writeln!(
        md,
        "Each process's user + system time (`/proc/PID/stat`, 10 ms ticks) around the \
         data pass, per GiB it moved, median over repeats: the heads, the S3 server and \
         PostgreSQL (found by their ports; `–` if not found) and the bench itself (the load \
         generator; on the engines row, the probe's client). Counts, not rates: other \
         jobs on the machine do not move them much (see docs/BENCH.md).\n"
    );
    let heads: Vec<&str> = CPU_COLUMNS.iter().map(|(_, h)| *h).collect();
    let _ = writeln!(md, "| phase | target | {} |", heads.join(" | "));
    let _ = writeln!(md, "|---|---|{}", "---|".repeat(heads.len()));
    for (phase, target, cols) in rows {
        let _ = writeln!(md, "| {phase} | {target} | {} |", cols.join(" | "));
    }
}

/// The object suite's cost per operation and its goals.
fn costs_section(md: &mut String, r: &Results) {
    cpu_section(md, r);
    let rows = cost_rows(r, &COST_COLUMNS);
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(md, "\n## What one NFS operation cost the engines\n");
    let _ = writeln!(
        md,
        "From the heads' `granary_object_*` counters around a count-bound pass (see \
         docs/BENCH.md), per op, median over repeats.\n"
    );
    let heads: Vec<&str> = COST_COLUMNS.iter().map(|(_, h)| *h).collect();
    let _ = writeln!(md, "| phase | target | {} |", heads.join(" | "));
    let _ = writeln!(md, "|---|---|{}", "---|".repeat(heads.len()));
    for (phase, target, cols) in rows {
        let _ = writeln!(md, "| {phase} | {target} | {} |", cols.join(" | "));
    }
    if !r.cost_goals.is_empty() {
        let _ = writeln!(md, "\n| phase | target | goal | median (highest) | met |");
        let _ = writeln!(md, "|---|---|---|---|---|");
        for g in &r.cost_goals {
            let _ = writeln!(
                md,
                "| {}/{} | {} | {} ≤ {} per op | {} | {} |",
                g.workload,
                g.phase,
                g.target,
                g.cost,
                g.max,
                cost_value(g.median, g.highest),
                met_text(g.met)
            );
        }
    }
}

fn cost_value(median: Option<f64>, highest: Option<f64>) -> String {
    match (median, highest) {
        (Some(m), Some(h)) => format!("{m:.3} ({h:.3})"),
        _ => "–".to_owned(),
    }
}

fn met_text(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "yes",
        Some(false) => "**no**",
        None => "no value",
    }
}

/// The cost table for the terminal.
fn cost_terminal(out: &mut String, r: &Results) {
    let cpu = cost_rows(r, &CPU_COLUMNS);
    if !cpu.is_empty() {
        let heads: Vec<&str> = CPU_COLUMNS.iter().map(|(_, h)| *h).collect();
        let _ = writeln!(out, "\nCPU s per GiB (median): {}", heads.join(", "));
        for (phase, target, cols) in cpu {
            let _ = writeln!(out, "{phase:<28} {target:<11} {}", cols.join("  "));
        }
    }
    let rows = cost_rows(r, &COST_COLUMNS);
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nper NFS operation (median): {}",
        COST_COLUMNS
            .iter()
            .map(|(_, h)| *h)
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (phase, target, cols) in rows {
        let _ = writeln!(out, "{phase:<28} {target:<11} {}", cols.join("  "));
    }
    for g in &r.cost_goals {
        let _ = writeln!(
            out,
            "goal {}/{} {}: {} ≤ {} per op: {} {}",
            g.workload,
            g.phase,
            g.target,
            g.cost,
            g.max,
            cost_value(g.median, g.highest),
            met_text(g.met)
        );
    }
}

/// One goal of one phase and whether this run met it.
#[derive(Debug, Serialize)]
pub struct GoalCheck {
    pub workload: String,
    pub phase: String,
    /// granary ÷ `against` must be at least `min`.
    pub against: String,
    pub min: f64,
    /// The ratio per repeat: median, min, max (None: a side has no value).
    pub ratio: Option<(f64, f64, f64)>,
    pub met: Option<bool>,
}

/// Checks every phase's goals against the run's paired ratios.
#[must_use]
pub fn check_goals(r: &Results) -> Vec<GoalCheck> {
    let sum = Summary::new(r);
    let mut out = Vec::new();
    for (w, p, _) in &sum.keys {
        for g in suites::goals(w, p) {
            let ratio = sum.ratio(w, p, g.against);
            out.push(GoalCheck {
                workload: w.clone(),
                phase: p.clone(),
                against: g.against.to_owned(),
                min: g.min,
                ratio,
                met: ratio.map(|(m, _, _)| m >= g.min),
            });
        }
    }
    out
}

/// The goals of one row: `≥3× ganesha ✓` per goal.
fn goal_text(r: &Results, workload: &str, phase: &str) -> String {
    r.goals
        .iter()
        .filter(|g| g.workload == workload && g.phase == phase)
        .map(|g| {
            let mark = match g.met {
                Some(true) => "✓",
                Some(false) => "✗",
                None => "?",
            };
            format!("≥{}× {} {mark}", g.min, g.against)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[must_use]
pub fn target_info(targets: &[Target], groups: [Group; 2]) -> Vec<TargetInfo> {
    targets
        .iter()
        .map(|t| TargetInfo {
            name: t.name.clone(),
            version: t.version.clone(),
            small_op_backend: t.backend(groups[0]).to_owned(),
            data_backend: t.backend(groups[1]).to_owned(),
            broken: t.broken.clone(),
            notes: t.notes.clone(),
        })
        .collect()
}

/// Writes `results.json` and `report.md` into the output directory.
///
/// # Errors
/// A file could not be written.
pub fn write_all(r: &Results) -> Result<(), String> {
    let out = &r.settings.out;
    let json = serde_json::to_string_pretty(r).map_err(|e| e.to_string())?;
    let write = |name: &str, text: &str| {
        std::fs::write(out.join(name), text)
            .map_err(|e| format!("cannot write {}: {e}", out.join(name).display()))
    };
    write("results.json", &json)?;
    write("report.md", &markdown(r))
}

/// One target's samples of one phase, over the repeats.
#[derive(Debug, Default)]
pub struct Cell<'a> {
    /// Samples that measured something (ok or with errors), by repeat.
    pub by_repeat: BTreeMap<u32, &'a Sample>,
    /// Samples that failed.
    pub failed: Vec<&'a Sample>,
}

impl Cell<'_> {
    #[must_use]
    pub fn values(&self) -> Vec<f64> {
        self.by_repeat.values().map(|s| s.value).collect()
    }

    #[must_use]
    pub fn median(&self) -> Option<f64> {
        median(&self.values())
    }

    /// The sample whose value is the median one (for latency and CDFs).
    #[must_use]
    pub fn median_sample(&self) -> Option<&Sample> {
        let mut v: Vec<&Sample> = self.by_repeat.values().copied().collect();
        v.sort_by(|a, b| a.value.total_cmp(&b.value));
        v.get(v.len() / 2).copied()
    }

    /// (max - min) / median, as a fraction.
    #[must_use]
    pub fn spread(&self) -> Option<f64> {
        let v = self.values();
        let m = median(&v)?;
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (m > 0.0 && v.len() > 1).then(|| (hi - lo) / m)
    }

    fn has_errors(&self) -> bool {
        self.by_repeat.values().any(|s| s.status == Status::Errors)
    }
}

#[must_use]
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Samples grouped by phase (in run order) and target.
pub struct Summary<'a> {
    /// (workload, phase, metric) in the order they ran.
    pub keys: Vec<(String, String, Metric)>,
    /// Target names in report order: limit, granary, peers, others.
    pub targets: Vec<String>,
    pub cells: BTreeMap<(String, String), Cell<'a>>,
}

impl<'a> Summary<'a> {
    #[must_use]
    pub fn new(r: &'a Results) -> Self {
        let mut keys: Vec<(String, String, Metric)> = Vec::new();
        let mut cells: BTreeMap<(String, String), Cell<'a>> = BTreeMap::new();
        for s in &r.samples {
            let key = s.key();
            if !keys
                .iter()
                .any(|(w, p, _)| *w == s.workload && *p == s.phase)
            {
                keys.push((s.workload.clone(), s.phase.clone(), s.metric));
            }
            let cell = cells.entry((key, s.target.clone())).or_default();
            if s.status == Status::Failed {
                cell.failed.push(s);
            } else {
                cell.by_repeat.insert(s.repeat, s);
            }
        }
        let rank = |n: &str| match n {
            "limit" => 0,
            "granary" => 1,
            "ganesha" => 2,
            "gonfs" => 3,
            "nfsserve" => 4,
            _ => 5,
        };
        let mut targets: Vec<String> = r.targets.iter().map(|t| t.name.clone()).collect();
        targets.sort_by_key(|n| rank(n));
        Self {
            keys,
            targets,
            cells,
        }
    }

    #[must_use]
    pub fn cell(&self, workload: &str, phase: &str, target: &str) -> Option<&Cell<'a>> {
        self.cells
            .get(&(format!("{workload}/{phase}"), target.to_owned()))
    }

    /// granary / `other` per repeat: (median, min, max).
    #[must_use]
    pub fn ratio(&self, workload: &str, phase: &str, other: &str) -> Option<(f64, f64, f64)> {
        self.pair_ratio(workload, (phase, "granary"), (phase, other))
    }

    /// (phase, target) `a` ÷ (phase, target) `b` of one workload per repeat: (median, min,
    /// max).
    #[must_use]
    pub fn pair_ratio(
        &self,
        workload: &str,
        a: (&str, &str),
        b: (&str, &str),
    ) -> Option<(f64, f64, f64)> {
        let g = self.cell(workload, a.0, a.1)?;
        let o = self.cell(workload, b.0, b.1)?;
        let ratios: Vec<f64> = g
            .by_repeat
            .iter()
            .filter_map(|(r, gs)| {
                let os = o.by_repeat.get(r)?;
                (os.value > 0.0).then(|| gs.value / os.value)
            })
            .collect();
        let m = median(&ratios)?;
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some((m, lo, hi))
    }

    /// The comparison targets: everything but granary.
    #[must_use]
    pub fn others(&self) -> Vec<&str> {
        self.targets
            .iter()
            .map(String::as_str)
            .filter(|t| *t != "granary")
            .collect()
    }
}

/// A number with sensible precision.
#[must_use]
pub fn num(v: f64) -> String {
    if v >= 1000.0 {
        let s = format!("{v:.0}");
        let bytes = s.as_bytes();
        let mut out = String::new();
        for (i, c) in bytes.iter().enumerate() {
            if i > 0 && (bytes.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(char::from(*c));
        }
        out
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A cell's median with its spread, or why it has none.
fn value_text(cell: Option<&Cell>) -> String {
    let Some(c) = cell else {
        return "–".into();
    };
    match c.median() {
        None if !c.failed.is_empty() => "failed".into(),
        None => "–".into(),
        Some(m) => {
            let mut s = num(m);
            if let Some(sp) = c.spread() {
                let _ = write!(s, " ±{:.0}%", sp * 50.0);
            }
            if c.has_errors() || !c.failed.is_empty() {
                s.push_str(" ⚠");
            }
            s
        }
    }
}

fn ratio_text(r: Option<(f64, f64, f64)>) -> String {
    match r {
        None => "–".into(),
        Some((m, lo, hi)) if (hi - lo).abs() < 1e-9 => format!("{m:.2}"),
        Some((m, lo, hi)) => format!("{m:.2} ({lo:.2}–{hi:.2})"),
    }
}

/// The terminal table: one row per phase, medians and ratios.
#[must_use]
pub fn terminal_table(r: &Results) -> String {
    let sum = Summary::new(r);
    let mut header = vec!["phase".to_owned(), "unit".to_owned()];
    header.extend(sum.targets.iter().cloned());
    header.extend(sum.others().iter().map(|o| format!("g/{o}")));
    let goals = !r.goals.is_empty();
    if goals {
        header.push("goal".to_owned());
    }
    let mut rows = vec![header];
    for (w, p, metric) in &sum.keys {
        if w == "iozone" && !p.contains("-r4k-") && !p.contains("-r1m-") {
            continue; // the full matrix is in report.md
        }
        let mut row = vec![format!("{w}/{p}"), metric.unit().to_owned()];
        for t in &sum.targets {
            row.push(value_text(sum.cell(w, p, t)));
        }
        for o in sum.others() {
            // With goals the range over repeats matters: show it.
            let ratio = sum.ratio(w, p, o);
            row.push(ratio_text(if goals {
                ratio
            } else {
                ratio.map(|(m, _, _)| (m, m, m))
            }));
        }
        if goals {
            row.push(goal_text(r, w, p));
        }
        let width = row.len();
        rows.push(row);
        if let Some(mut ratios) = v4_ratio_row(r, w, p, &sum.targets) {
            ratios.resize(width, String::new());
            rows.push(ratios);
        }
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    let m = &r.machine;
    let _ = writeln!(
        out,
        "{} cores ({}), Linux {}; load average {} at start, {} at end",
        m.cores, m.cpu, m.kernel, r.noise_start.loadavg, r.noise_end.loadavg
    );
    if let Some(busy) = &r.busy {
        let _ = writeln!(out, "!! {busy}");
    }
    for (n, row) in rows.iter().enumerate() {
        for (i, cell) in row.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            if i < 2 {
                let _ = write!(out, "{cell}{}  ", " ".repeat(pad));
            } else {
                let _ = write!(out, "{}{cell}  ", " ".repeat(pad));
            }
        }
        out.push('\n');
        if n == 0 {
            out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * widths.len()));
            out.push('\n');
        }
    }
    cost_terminal(&mut out, r);
    out
}

/// `report.md`.
#[must_use]
pub fn markdown(r: &Results) -> String {
    let sum = Summary::new(r);
    let mut md = String::new();
    header(&mut md, r);
    headline(&mut md, r, &sum);
    goals_section(&mut md, r);
    costs_section(&mut md, r);
    latency(&mut md, &sum);
    connections(&mut md, &sum);
    iozone_tables(&mut md, r, &sum);
    failures(&mut md, r);
    md
}

/// The issues' goals, one line per goal, with the paired ratio and its range.
fn goals_section(md: &mut String, r: &Results) {
    if r.goals.is_empty() {
        return;
    }
    let _ = writeln!(md, "\n## Goals\n");
    let _ = writeln!(
        md,
        "| phase | goal | granary ÷ it, median (min–max) | met |"
    );
    let _ = writeln!(md, "|---|---|---|---|");
    for g in &r.goals {
        let met = match g.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "no value",
        };
        let _ = writeln!(
            md,
            "| {}/{} | ≥ {}× {} | {} | {met} |",
            g.workload,
            g.phase,
            g.min,
            g.against,
            ratio_text(g.ratio)
        );
    }
    md.push('\n');
}

fn header(md: &mut String, r: &Results) {
    let m = &r.machine;
    let _ = writeln!(md, "# granary bench, {}\n", r.date);
    if let Some(busy) = &r.busy {
        let _ = writeln!(md, "> **{busy}.**\n");
    }
    let _ = writeln!(md, "Command: `{}`  ", r.command);
    let _ = writeln!(
        md,
        "Machine: {} × {} ({:.0} GiB RAM), {}, Linux {}  ",
        m.cores, m.cpu, m.memory_gib, m.os, m.kernel
    );
    let _ = writeln!(
        md,
        "Code: commit {}{}, granary {} build; run took {:.0} s  ",
        m.git_commit,
        if m.git_dirty {
            " (with uncommitted changes)"
        } else {
            ""
        },
        m.granary_build,
        r.run_seconds
    );
    let s = &r.settings;
    let _ = writeln!(
        md,
        "Settings: suite {:?}, warm-up {:?}, {} per timed phase, {} repeat(s) (iozone {}), random file {} MiB, \
         sequential file {} MiB, directory {} entries, iozone files {:?} MiB\n",
        s.suite,
        s.warmup,
        s.count
            .map_or_else(|| format!("{:?}", s.duration), |n| format!("{n} ops")),
        s.repeats,
        s.iozone_repeats,
        s.rand_file_bytes >> 20,
        s.seq_file_bytes >> 20,
        s.dir_entries,
        s.iozone_file_bytes.iter().map(|b| b >> 20).collect::<Vec<_>>()
    );
    let _ = writeln!(md, "Noise (the machine is shared):\n");
    for (when, n) in [("start", &r.noise_start), ("end", &r.noise_end)] {
        let _ = writeln!(
            md,
            "- {when} {}: load average {}; qemu guest running: {}; busiest: {}",
            n.at,
            n.loadavg,
            if n.qemu_running { "yes" } else { "no" },
            n.busiest.join("; ")
        );
    }
    let _ = writeln!(
        md,
        "\n| target | version | small-op backend | data backend | status |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|");
    for t in &r.targets {
        let mut status = t.broken.clone().unwrap_or_else(|| "ran".into());
        for n in &t.notes {
            let _ = write!(status, "; {n}");
        }
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            t.name, t.version, t.small_op_backend, t.data_backend, status
        );
    }
    let _ = writeln!(
        md,
        "\nHow to read: each value is the median over repeats, ± half the range as a \
         percentage of it; ⚠ marks a target with errors or failed repeats in that phase \
         (see Failures). `g/X` is granary ÷ X, taken per repeat (the targets of one repeat \
         ran back to back) and given as median (min–max). Higher is better everywhere, so \
         g/X > 1 means granary is faster. `limit` is the same workload against a loopback \
         responder that does no work (same client, same message sizes): g/limit is the \
         share of the machine's floor granary reaches. See docs/BENCH.md.\n"
    );
}

fn headline(md: &mut String, r: &Results, sum: &Summary) {
    let others = sum.others();
    let mut last_workload = String::new();
    for (w, p, metric) in &sum.keys {
        if w == "iozone" {
            continue;
        }
        if *w != last_workload {
            last_workload.clone_from(w);
            let about = r
                .workloads
                .iter()
                .find(|x| x.name == w)
                .map_or("", |x| x.about);
            let _ = writeln!(md, "\n## {w}: {about}\n");
            let _ = write!(md, "| phase | unit |");
            for t in &sum.targets {
                let _ = write!(md, " {t} |");
            }
            for o in &others {
                let _ = write!(md, " g/{o} |");
            }
            let _ = writeln!(md);
            let _ = writeln!(
                md,
                "|{}",
                "---|".repeat(2 + sum.targets.len() + others.len())
            );
        }
        let _ = write!(md, "| {p} | {} |", metric.unit());
        for t in &sum.targets {
            let _ = write!(md, " {} |", value_text(sum.cell(w, p, t)));
        }
        for o in &others {
            let _ = write!(md, " {} |", ratio_text(sum.ratio(w, p, o)));
        }
        let _ = writeln!(md);
        if let Some(row) = v4_ratio_row(r, w, p, &sum.targets) {
            let _ = write!(md, "| {} | {} |", row[0], row[1]);
            for cell in &row[2..] {
                let _ = write!(md, " {cell} |");
            }
            let _ = writeln!(md, "{}", " |".repeat(others.len()));
        }
    }
}

fn latency(md: &mut String, sum: &Summary) {
    let _ = writeln!(
        md,
        "\n## Latency, µs: p50 / p99 / p99.9 (repeat with the median rate)\n"
    );
    let _ = write!(md, "| phase |");
    for t in &sum.targets {
        let _ = write!(md, " {t} |");
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "|{}", "---|".repeat(1 + sum.targets.len()));
    for (w, p, _) in &sum.keys {
        if !matches!(w.as_str(), "null" | "getattr" | "meta" | "rand4k") {
            continue;
        }
        let _ = write!(md, "| {w}/{p} |");
        for t in &sum.targets {
            let text = sum
                .cell(w, p, t)
                .and_then(Cell::median_sample)
                .and_then(|s| s.latency_us.as_ref())
                .map_or_else(
                    || "–".into(),
                    |l| format!("{} / {} / {}", num(l.p50), num(l.p99), num(l.p999)),
                );
            let _ = write!(md, " {text} |");
        }
        let _ = writeln!(md);
    }
}

fn connections(md: &mut String, sum: &Summary) {
    let phases: Vec<&String> = sum
        .keys
        .iter()
        .filter(|(w, _, _)| w == "conns")
        .map(|(_, p, _)| p)
        .collect();
    if phases.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "\n## Connections: clients served (≥1 reply in the window) / requested, and ops per \
         client min / median / max\n"
    );
    let _ = write!(md, "| phase |");
    for t in &sum.targets {
        let _ = write!(md, " {t} |");
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "|{}", "---|".repeat(1 + sum.targets.len()));
    for p in phases {
        let _ = write!(md, "| {p} |");
        for t in &sum.targets {
            let text = sum
                .cell("conns", p, t)
                .and_then(Cell::median_sample)
                .and_then(|s| s.clients.as_ref())
                .map_or_else(
                    || "–".into(),
                    |c| {
                        format!(
                            "{}/{} ({} / {} / {})",
                            c.served, c.requested, c.min_ops, c.median_ops, c.max_ops
                        )
                    },
                );
            let _ = write!(md, " {text} |");
        }
        let _ = writeln!(md);
    }
}

fn iozone_tables(md: &mut String, r: &Results, sum: &Summary) {
    let cells = iozone::cells(&r.settings);
    if !sum.keys.iter().any(|(w, _, _)| w == "iozone") {
        return;
    }
    let _ = writeln!(
        md,
        "\n## iozone matrix (seed 004: `iozone -az -i0 -i1 -y1k -s128m -I -N`)\n\n\
         µs per record (the seed's unit; lower is better) and KiB/s, per target. A record \
         of at most 1 MiB is one FILE_SYNC WRITE or one READ; larger records are 1 MiB \
         pieces in parallel (+ one COMMIT for writes). The seed's 128 MiB row (Linux nfsd, \
         tmpfs, FDR InfiniBand, 2015) reads 48 / 48 / 43 / 43 µs at 1 KiB records and \
         6835 / 5416 / 3132 / 3134 µs at 16 MiB.\n"
    );
    for t in &sum.targets {
        let _ = writeln!(md, "\n### {t}\n");
        let _ = writeln!(
            md,
            "| file | record | write µs | rewrite µs | read µs | reread µs | write KiB/s | \
             rewrite KiB/s | read KiB/s | reread KiB/s |"
        );
        let _ = writeln!(md, "|{}", "---|".repeat(10));
        for &(f, rec) in &cells {
            let mut us_cols = String::new();
            let mut kib_cols = String::new();
            for pass in iozone::PASSES {
                let phase = iozone::phase_name(f, rec, pass);
                let cell = sum.cell("iozone", &phase, t);
                let us = cell
                    .and_then(Cell::median_sample)
                    .and_then(|s| s.latency_us.as_ref())
                    .map_or_else(
                        || {
                            if cell.is_some_and(|c| !c.failed.is_empty()) {
                                "failed".into()
                            } else {
                                "–".into()
                            }
                        },
                        |l| num(l.mean),
                    );
                let _ = write!(us_cols, " {us} |");
                let _ = write!(kib_cols, " {} |", value_text(cell));
            }
            let _ = writeln!(
                md,
                "| {} | {} |{us_cols}{kib_cols}",
                iozone::size_name(f),
                iozone::size_name(rec)
            );
        }
    }
    let others = sum.others();
    let _ = writeln!(
        md,
        "\n### granary ÷ peer, KiB/s (write / rewrite / read / reread)\n"
    );
    let _ = write!(md, "| file | record |");
    for o in &others {
        let _ = write!(md, " g/{o} |");
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "|{}", "---|".repeat(2 + others.len()));
    for &(f, rec) in &cells {
        let _ = write!(
            md,
            "| {} | {} |",
            iozone::size_name(f),
            iozone::size_name(rec)
        );
        for o in &others {
            let parts: Vec<String> = iozone::PASSES
                .iter()
                .map(|pass| {
                    sum.ratio("iozone", &iozone::phase_name(f, rec, pass), o)
                        .map_or_else(|| "–".into(), |(m, _, _)| format!("{m:.2}"))
                })
                .collect();
            let _ = write!(md, " {} |", parts.join(" / "));
        }
        let _ = writeln!(md);
    }
}

fn failures(md: &mut String, r: &Results) {
    let bad: Vec<&Sample> = r
        .samples
        .iter()
        .filter(|s| s.status != Status::Ok)
        .collect();
    let _ = writeln!(md, "\n## Failures and errors\n");
    if bad.is_empty() {
        let _ = writeln!(
            md,
            "None: every op of every phase on every target succeeded."
        );
        return;
    }
    // One line per (target, workload, reason) so a peer that fails a whole matrix does
    // not print a hundred lines.
    let mut grouped: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();
    for s in bad {
        let errors: Vec<String> = s.errors.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
        let reason = format!(
            "{:?}: {}{}",
            s.status,
            s.reason.clone().unwrap_or_default(),
            if errors.is_empty() {
                String::new()
            } else {
                format!(" [{}]", errors.join(", "))
            }
        );
        grouped
            .entry((s.target.clone(), s.workload.clone(), reason))
            .or_default()
            .push(format!("{}#{}", s.phase, s.repeat + 1));
    }
    let _ = writeln!(
        md,
        "| target | workload | phases (#repeat) | what happened |"
    );
    let _ = writeln!(md, "|---|---|---|---|");
    for ((target, workload, reason), phases) in grouped {
        let shown = if phases.len() > 8 {
            format!("{} … ({} phases)", phases[..8].join(", "), phases.len())
        } else {
            phases.join(", ")
        };
        let reason = reason.replace('|', "\\|");
        let _ = writeln!(md, "| {target} | {workload} | {shown} | {reason} |");
    }
}

#[cfg(test)]
mod tests {
    use super::each_once;

    #[test]
    fn a_cost_goal_names_each_target_once_whatever_the_repeats() {
        let samples = ["granary", "granary-2h", "granary", "granary-2h", "granary"];
        assert_eq!(
            each_once(samples.into_iter()),
            ["granary", "granary-2h"],
            "one goal line per target"
        );
    }
}
