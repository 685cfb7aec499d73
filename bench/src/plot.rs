//! PNG plots of a run, drawn with `plotters` and the embedded font of the `plot` crate
//! (shared with `granary lab`; its bar chart draws the throughput plots):
//!
//! - `throughput-<workload>.png`: each phase's median per target (log scale), with the
//!   range over repeats as a whisker;
//! - `latency-<workload>.png`: the latency CDF of each phase per target (the repeat with
//!   the median rate), percentiles on a "nines" scale so the tail is visible;
//! - `iozone-<file size>.png`: µs per record against record size, per pass and target.

use std::path::Path;

use plot::FONT;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::iozone;
use super::report::{Results, Summary};

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 700;
/// Deepest percentile drawn: 99.999% is 5 nines.
const MAX_NINES: f64 = 5.0;

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

fn color(target: &str) -> RGBColor {
    match target {
        "limit" => RGBColor(120, 120, 120),
        "granary" => RGBColor(214, 96, 18),
        "ganesha" => RGBColor(31, 100, 180),
        "gonfs" => RGBColor(44, 150, 60),
        "nfsserve" => RGBColor(140, 70, 160),
        _ => RGBColor(180, 160, 30),
    }
}

/// Draws every plot into the output directory.
///
/// # Errors
/// A plot could not be drawn or written.
pub fn draw_all(r: &Results) -> Result<(), String> {
    plot::register_font()?;
    let sum = Summary::new(r);
    let mut workloads: Vec<&str> = Vec::new();
    for (w, _, _) in &sum.keys {
        if !workloads.contains(&w.as_str()) {
            workloads.push(w);
        }
    }
    let out = &r.settings.out;
    for w in workloads {
        if w == "iozone" {
            for &file in &r.settings.iozone_file_bytes {
                let path = out.join(format!("iozone-{}.png", iozone::size_name(file)));
                iozone_plot(&path, r, &sum, file)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            continue;
        }
        let path = out.join(format!("throughput-{w}.png"));
        throughput(&path, &sum, w).map_err(|e| format!("{}: {e}", path.display()))?;
        if matches!(
            w,
            "null" | "getattr" | "meta" | "rand4k" | "host-tmpfs" | "host-disk" | "erofs-rand4k"
        ) {
            let path = out.join(format!("latency-{w}.png"));
            latency(&path, &sum, w).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn throughput(path: &Path, sum: &Summary, workload: &str) -> DrawResult {
    let phases: Vec<(&str, &str)> = sum
        .keys
        .iter()
        .filter(|(w, _, _)| w == workload)
        .map(|(_, p, m)| (p.as_str(), m.unit()))
        .collect();
    // The host suite mixes ops/s and MiB/s phases: each label then names its unit.
    let mixed = phases
        .iter()
        .any(|(_, u)| Some(*u) != phases.first().map(|(_, u)| *u));
    let unit = if mixed {
        "ops/s or MiB/s (see phase)"
    } else {
        phases.first().map_or("", |(_, u)| *u)
    };
    let groups = phases
        .iter()
        .map(|(p, u)| plot::Group {
            label: if mixed {
                format!("{p} ({u})")
            } else {
                (*p).to_owned()
            },
            bars: sum
                .targets
                .iter()
                .enumerate()
                .filter_map(|(k, t)| throughput_bar(sum.cell(workload, p, t)?, k))
                .collect(),
        })
        .collect();
    let chart = plot::BarChart {
        caption: format!("{workload}: median {unit} per phase (whiskers: range over repeats)"),
        unit,
        size: (WIDTH, HEIGHT),
        series: sum.targets.iter().map(|t| (t.clone(), color(t))).collect(),
        groups,
        y_label: &super::report::num,
        legend: SeriesLabelPosition::UpperRight,
        footnote: None,
        floor: f64::MIN_POSITIVE,
    };
    plot::bars(&chart, path)?;
    Ok(())
}

/// A target's bar in one phase: the median over repeats, whiskered when there were several.
fn throughput_bar(cell: &super::report::Cell<'_>, series: usize) -> Option<plot::Bar> {
    let median = cell.median()?;
    let v = cell.values();
    let (a, b) = v
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
    let range = (v.len() > 1 && a > 0.0).then_some((a, b));
    Some(plot::Bar {
        series,
        median,
        range,
    })
}

/// Percentile → "nines": 90% → 1, 99% → 2, ...
fn nines(percentile: f64) -> f64 {
    let rest = (1.0 - percentile / 100.0).max(10f64.powf(-MAX_NINES));
    -rest.log10()
}

fn latency(path: &Path, sum: &Summary, workload: &str) -> DrawResult {
    let phases: Vec<&str> = sum
        .keys
        .iter()
        .filter(|(w, _, _)| w == workload)
        .map(|(_, p, _)| p.as_str())
        .collect();
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!("{workload}: latency CDF (µs, log) per phase"),
        (FONT, 22),
    )?;
    let cols = phases.len().clamp(1, 3);
    let rows = phases.len().div_ceil(cols).max(1);
    let panels = root.split_evenly((rows, cols));
    for (panel, p) in panels.iter().zip(&phases) {
        latency_panel(panel, sum, workload, p)?;
    }
    root.present()?;
    Ok(())
}

fn latency_panel(area: &Area, sum: &Summary, workload: &str, phase: &str) -> DrawResult {
    let mut lines = Vec::new();
    for t in &sum.targets {
        let Some(s) = sum.cell(workload, phase, t).and_then(|c| c.median_sample()) else {
            continue;
        };
        let pts: Vec<(f64, f64)> = s
            .cdf_us
            .iter()
            .filter(|(_, us)| *us > 0.0)
            .map(|&(pct, us)| (us, nines(pct)))
            .collect();
        if !pts.is_empty() {
            lines.push((t.clone(), pts));
        }
    }
    let all = lines.iter().flat_map(|(_, p)| p.iter().map(|(us, _)| *us));
    let (lo, hi) = all.fold((f64::INFINITY, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
    if hi <= 0.0 {
        return Ok(());
    }
    let mut chart = ChartBuilder::on(area)
        .caption(phase, (FONT, 17))
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(55)
        .build_cartesian_2d((lo / 1.5..hi * 1.5).log_scale(), 0.0..MAX_NINES)?;
    chart
        .configure_mesh()
        .y_labels(6)
        .x_labels(6)
        .x_label_formatter(&|v| super::report::num(*v))
        .y_label_formatter(&|y| {
            let pct = 100.0 * (1.0 - 10f64.powf(-*y));
            format!("{pct:.3}")
                .trim_end_matches('0')
                .trim_end_matches('.')
                .to_owned()
                + "%"
        })
        .label_style((FONT, 12))
        .draw()?;
    for (t, pts) in lines {
        let c = color(&t);
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
            .label(t)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 12))
        .draw()?;
    Ok(())
}

fn iozone_plot(path: &Path, r: &Results, sum: &Summary, file: u64) -> DrawResult {
    let records: Vec<u64> = iozone::cells(&r.settings)
        .into_iter()
        .filter(|(f, _)| *f == file)
        .map(|(_, rec)| rec)
        .collect();
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!(
            "iozone, {} file: µs per record vs record size (KiB), log-log",
            iozone::size_name(file)
        ),
        (FONT, 22),
    )?;
    let panels = root.split_evenly((2, 2));
    for (panel, pass) in panels.iter().zip(iozone::PASSES) {
        let mut lines = Vec::new();
        for t in &sum.targets {
            let pts: Vec<(f64, f64)> = records
                .iter()
                .filter_map(|&rec| {
                    let phase = iozone::phase_name(file, rec, pass);
                    let s = sum.cell("iozone", &phase, t)?.median_sample()?;
                    let us = s.latency_us.as_ref()?.mean;
                    (us > 0.0).then_some((rec as f64 / 1024.0, us))
                })
                .collect();
            if !pts.is_empty() {
                lines.push((t.clone(), pts));
            }
        }
        let all = lines.iter().flat_map(|(_, p)| p.iter().map(|(_, us)| *us));
        let (lo, hi) = all.fold((f64::INFINITY, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
        if hi <= 0.0 {
            continue;
        }
        let max_kib = records.last().map_or(2.0, |r| *r as f64 / 1024.0);
        let mut chart = ChartBuilder::on(panel)
            .caption(pass, (FONT, 17))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(
                (0.8..max_kib * 1.25).log_scale(),
                (lo / 1.5..hi * 1.5).log_scale(),
            )?;
        chart
            .configure_mesh()
            .x_labels(8)
            .y_labels(6)
            .x_label_formatter(&|v| super::report::num(*v))
            .y_label_formatter(&|v| super::report::num(*v))
            .label_style((FONT, 12))
            .draw()?;
        for (t, pts) in lines {
            let c = color(&t);
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
                .label(t)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
            chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font((FONT, 12))
            .draw()?;
    }
    root.present()?;
    Ok(())
}
