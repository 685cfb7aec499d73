//! `granary lab EXPERIMENT --plot FILE.png`: one PNG of a report, drawn by the `plot`
//! crate's bar chart (the one `granary bench` draws its throughput plots with), so
//! nothing depends on the machine's fonts.
//!
//! Each group of the report is a cluster on the x axis; each design (a variant's label
//! without "(before)") is a bar of one colour in every cluster: its median over the run's
//! samples, with a whisker from the smallest to the largest sample. The y axis is
//! logarithmic (latencies of decode jobs span 0.1 µs to tens of ms) and carries the
//! report's unit; the line under the chart carries the load average and any BUSY mark
//! from the report's context, so a plot never travels without them.

use std::path::Path;

use super::report::{Report, Variant};

const WIDTH: u32 = 1400;
const HEIGHT: u32 = 720;
/// Smallest value drawn: a log axis has no zero (an `inline` job starts in ~0.1 µs).
const FLOOR: f64 = 1e-3;

/// The design a variant belongs to: its row label without the "(before)" mark.
fn design(v: &Variant) -> &str {
    v.label.trim_end_matches(" (before)")
}

/// Draws `report` into `path` (PNG).
///
/// # Errors
/// The font does not load or the file cannot be drawn or written.
pub fn draw(report: &Report, path: &Path) -> Result<(), String> {
    plot::register_font()?;
    match plot::bars(&chart(report), path) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!(
            "{}: nothing to plot, no value is above zero",
            path.display()
        )),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn first_seen<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

fn caption(report: &Report) -> String {
    format!("granary lab {}: {}", report.experiment, report.title)
}

/// The line under the chart: what a bar and a whisker are, and the load of the run.
fn footnote(report: &Report) -> String {
    let ctx = |k: &str| {
        report
            .context
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let busy = if ctx("BUSY").is_some() {
        " — BUSY MACHINE: not a quiet-machine result"
    } else {
        ""
    };
    format!(
        "bar: median {} of the run's samples, whisker: min..max; load average {} → {}{busy}",
        report.unit,
        ctx("loadavg at start").unwrap_or("?"),
        ctx("loadavg at end").unwrap_or("?"),
    )
}

/// The chart of `report`: its groups as clusters, its designs as series.
fn chart(report: &Report) -> plot::BarChart<'static> {
    let groups = first_seen(report.variants.iter().map(|v| v.group.as_str()));
    let designs = first_seen(report.variants.iter().map(design));
    let groups = groups
        .iter()
        .map(|g| plot::Group {
            label: (*g).to_owned(),
            bars: report
                .variants
                .iter()
                .filter(|v| v.group == *g)
                .map(|v| plot::Bar {
                    series: designs.iter().position(|d| *d == design(v)).unwrap_or(0),
                    median: v.median(),
                    range: Some((v.min(), v.max())),
                })
                .collect(),
        })
        .collect();
    plot::BarChart {
        caption: caption(report),
        unit: report.unit,
        size: (WIDTH, HEIGHT),
        series: designs
            .iter()
            .enumerate()
            .map(|(k, d)| ((*d).to_owned(), plot::PALETTE[k % plot::PALETTE.len()]))
            .collect(),
        groups,
        y_label: &super::report::si,
        legend: plot::SeriesLabelPosition::UpperLeft,
        footnote: Some(footnote(report)),
        floor: FLOOR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(group: &str, label: &str, samples: &[f64]) -> Variant {
        Variant {
            name: format!("{group} {label}"),
            label: label.into(),
            group: group.into(),
            baseline: None,
            samples: samples.to_vec(),
        }
    }

    #[test]
    fn draws_a_png_of_a_report() {
        let report = Report {
            experiment: "decode",
            title: "t",
            unit: "µs",
            higher_is_better: false,
            seed_claim: "",
            variants: vec![
                v("avg", "pool (before)", &[100.0, 120.0]),
                v("avg", "percore", &[10.0, 12.0]),
                v("avg", "inline", &[0.0, 0.1]),
                v("max", "pool (before)", &[9000.0]),
                v("max", "percore", &[300.0]),
            ],
            context: vec![("loadavg at start".into(), "0.1 0.2 0.3".into())],
            notes: Vec::new(),
        };
        let dir = std::env::temp_dir().join(format!("granary-lab-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("decode.png");
        draw(&report, &path).unwrap();
        let png = std::fs::read(&path).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        assert!(png.len() > 10_000, "a real picture, {} bytes", png.len());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(first_seen(["a", "b", "a"].into_iter()), ["a", "b"]);
        assert_eq!(caption(&report), "granary lab decode: t");
        assert!(footnote(&report).contains("load average 0.1 0.2 0.3 → ?"));
    }
}
