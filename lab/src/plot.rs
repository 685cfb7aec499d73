//! `granary lab EXPERIMENT --plot FILE.png`: one PNG of a report, drawn with `plotters` on
//! its bitmap backend with the embedded DejaVu Sans font (as `granary bench` draws), so
//! nothing depends on the machine's fonts.
//!
//! Each group of the report is a cluster on the x axis; each design (a variant's label
//! without "(before)") is a bar of one colour in every cluster: its median over the run's
//! samples, with a whisker from the smallest to the largest sample. The y axis is
//! logarithmic (latencies of decode jobs span 0.1 µs to tens of ms) and carries the
//! report's unit; the line under the chart carries the load average and any BUSY mark
//! from the report's context, so a plot never travels without them.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::FontStyle;

use super::report::{Report, Variant};

const FONT: &str = "sans-serif";
const WIDTH: u32 = 1400;
const HEIGHT: u32 = 720;
/// Smallest value drawn: a log axis has no zero (an `inline` job starts in ~0.1 µs).
const FLOOR: f64 = 1e-3;
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 100, 180),
    RGBColor(214, 96, 18),
    RGBColor(44, 150, 60),
    RGBColor(140, 70, 160),
    RGBColor(180, 160, 30),
    RGBColor(120, 120, 120),
];

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// The design a variant belongs to: its row label without the "(before)" mark.
fn design(v: &Variant) -> &str {
    v.label.trim_end_matches(" (before)")
}

/// Draws `report` into `path` (PNG).
///
/// # Errors
/// The font does not load or the file cannot be drawn or written.
pub fn draw(report: &Report, path: &Path) -> Result<(), String> {
    plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "embedded font does not load".to_owned())?;
    bars(report, path).map_err(|e| format!("{}: {e}", path.display()))
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

fn bars(report: &Report, path: &Path) -> DrawResult {
    let groups = first_seen(report.variants.iter().map(|v| v.group.as_str()));
    let designs = first_seen(report.variants.iter().map(design));
    let values = report
        .variants
        .iter()
        .flat_map(|v| v.samples.iter().copied());
    let hi = values.clone().fold(FLOOR, f64::max);
    let lo = values.filter(|x| *x > 0.0).fold(hi, f64::min).max(FLOOR);
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let (y_lo, y_hi) = (lo / 2.0, hi * 2.0);
    let n = groups.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption(report), (FONT, 20))
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..n, (y_lo..y_hi).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .disable_x_axis()
        .y_desc(report.unit)
        .y_label_formatter(&|v| super::report::si(*v))
        .label_style((FONT, 14))
        .draw()?;
    let width = 0.8 / designs.len() as f64;
    for (i, g) in groups.iter().enumerate() {
        for v in report.variants.iter().filter(|v| v.group == *g) {
            let k = designs.iter().position(|d| *d == design(v)).unwrap_or(0);
            let x0 = i as f64 + 0.1 + k as f64 * width;
            let c = PALETTE[k % PALETTE.len()];
            let m = v.median().max(y_lo);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x0, y_lo), (x0 + width * 0.9, m)],
                c.filled(),
            )))?;
            let xm = x0 + width * 0.45;
            let (a, b) = (v.min().max(y_lo), v.max().max(y_lo));
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(xm, a), (xm, b)],
                BLACK.stroke_width(2),
            )))?;
        }
        let (px, py) = chart.backend_coord(&(i as f64 + 0.5, y_lo));
        let half = 7 * i32::try_from(g.chars().count()).unwrap_or(0) / 2;
        root.draw(&Text::new(
            (*g).to_owned(),
            (px - half, py + 10),
            (FONT, 14),
        ))?;
    }
    let h = i32::try_from(HEIGHT).unwrap_or(i32::MAX);
    root.draw(&Text::new(footnote(report), (90, h - 22), (FONT, 14)))?;
    for (k, d) in designs.iter().enumerate() {
        let c = PALETTE[k % PALETTE.len()];
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
            .label(*d)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 15))
        .draw()?;
    root.present()?;
    Ok(())
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
