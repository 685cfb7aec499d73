//! The charts `granary bench` and `granary lab` draw, in one place: `plotters` on its
//! bitmap backend with an embedded font (DejaVu Sans from the `dejavu` crate, rendered by
//! `ab_glyph`), so nothing depends on the fonts installed on the machine.
//!
//! [`register_font`] makes [`FONT`] usable; [`bars`] draws the chart both tools share:
//! clusters of bars on a logarithmic y axis, one colour per series, each bar a median with
//! a whisker over the range of its samples. Line charts (bench's latency CDFs and iozone
//! curves) stay with bench, their only user. Only the benchmark and lab binaries link this
//! crate: `granary serve` is built without it (see `server/Cargo.toml`).
#![forbid(unsafe_code)]

use std::path::Path;

pub use plotters::chart::SeriesLabelPosition;
pub use plotters::style::RGBColor;

use plotters::prelude::*;
use plotters::style::FontStyle;

/// The font family every chart uses; [`register_font`] binds it to DejaVu Sans.
pub const FONT: &str = "sans-serif";

/// Colours for series without a colour of their own, in order.
pub const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 100, 180),
    RGBColor(214, 96, 18),
    RGBColor(44, 150, 60),
    RGBColor(140, 70, 160),
    RGBColor(180, 160, 30),
    RGBColor(120, 120, 120),
];

/// The result of drawing into a bitmap.
pub type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Binds [`FONT`] to the embedded DejaVu Sans. Registering twice (a second run in one
/// process) is harmless: it replaces the font.
///
/// # Errors
/// The embedded font does not load.
pub fn register_font() -> Result<(), String> {
    plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "embedded font does not load".to_owned())
}

/// One bar: a median and the whisker drawn over it.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// Index into [`BarChart::series`].
    pub series: usize,
    pub median: f64,
    /// Smallest and largest sample; `None` draws no whisker.
    pub range: Option<(f64, f64)>,
}

/// One cluster of bars on the x axis, labelled below the axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub label: String,
    pub bars: Vec<Bar>,
}

/// A clustered bar chart on a logarithmic y axis.
pub struct BarChart<'a> {
    pub caption: String,
    /// The y axis' description (the unit).
    pub unit: &'a str,
    /// Image size in pixels.
    pub size: (u32, u32),
    /// Legend entries in order: name and colour. A bar's slot in its cluster is its
    /// series index, so a series keeps its place in every cluster.
    pub series: Vec<(String, RGBColor)>,
    pub groups: Vec<Group>,
    /// Labels of the y axis.
    pub y_label: &'a dyn Fn(f64) -> String,
    pub legend: SeriesLabelPosition,
    /// A line under the chart (what a bar means, the load of the run), if any.
    pub footnote: Option<String>,
    /// Values below it are drawn at it (a log axis has no zero).
    pub floor: f64,
}

impl BarChart<'_> {
    /// The y range: half the smallest and twice the largest positive value (raised to the
    /// floor); `None` if no value is positive.
    fn y_range(&self) -> Option<(f64, f64)> {
        let values = self.groups.iter().flat_map(|g| {
            g.bars.iter().flat_map(|b| {
                let (lo, hi) = b.range.unwrap_or((b.median, b.median));
                [b.median, lo, hi]
            })
        });
        let (lo, hi) = values
            .filter(|v| *v > 0.0)
            .map(|v| v.max(self.floor))
            .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
        (hi > 0.0).then_some((lo / 2.0, hi * 2.0))
    }
}

/// Draws `chart` into `path` (PNG). Returns `false`, and writes nothing, when no value
/// is positive. [`register_font`] must have run.
///
/// # Errors
/// The file cannot be drawn or written.
pub fn bars(chart: &BarChart, path: &Path) -> Result<bool, Box<dyn std::error::Error>> {
    let Some((y_lo, y_hi)) = chart.y_range() else {
        return Ok(false);
    };
    let root = BitMapBackend::new(path, chart.size).into_drawing_area();
    root.fill(&WHITE)?;
    let below = if chart.footnote.is_some() { 70 } else { 50 };
    let n = chart.groups.len() as f64;
    let mut c = ChartBuilder::on(&root)
        .caption(&chart.caption, (FONT, 21))
        .margin(12)
        .x_label_area_size(below)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..n, (y_lo..y_hi).log_scale())?;
    c.configure_mesh()
        .disable_x_mesh()
        .disable_x_axis()
        .y_desc(chart.unit)
        .y_label_formatter(&|v| (chart.y_label)(*v))
        .label_style((FONT, 14))
        .draw()?;
    let width = 0.8 / chart.series.len().max(1) as f64;
    for (i, g) in chart.groups.iter().enumerate() {
        for bar in &g.bars {
            let x0 = i as f64 + 0.1 + bar.series as f64 * width;
            let colour = chart.series.get(bar.series).map_or(BLACK, |(_, c)| *c);
            c.draw_series(std::iter::once(Rectangle::new(
                [(x0, y_lo), (x0 + width * 0.9, bar.median.max(y_lo))],
                colour.filled(),
            )))?;
            if let Some((lo, hi)) = bar.range {
                let xm = x0 + width * 0.45;
                c.draw_series(std::iter::once(PathElement::new(
                    vec![(xm, lo.max(y_lo)), (xm, hi.max(y_lo))],
                    BLACK.stroke_width(2),
                )))?;
            }
        }
        let (px, py) = c.backend_coord(&(i as f64 + 0.5, y_lo));
        let half = 7 * i32::try_from(g.label.chars().count()).unwrap_or(0) / 2;
        root.draw(&Text::new(g.label.clone(), (px - half, py + 9), (FONT, 14)))?;
    }
    if let Some(note) = &chart.footnote {
        let h = i32::try_from(chart.size.1).unwrap_or(i32::MAX);
        root.draw(&Text::new(note.clone(), (90, h - 22), (FONT, 14)))?;
    }
    for (name, colour) in &chart.series {
        let colour = *colour;
        c.draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled()));
    }
    c.configure_series_labels()
        .position(chart.legend.clone())
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 15))
        .draw()?;
    root.present()?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(groups: Vec<Group>) -> BarChart<'static> {
        BarChart {
            caption: "t".into(),
            unit: "ops/s",
            size: (800, 500),
            series: vec![("a".into(), PALETTE[0]), ("b".into(), PALETTE[1])],
            groups,
            y_label: &|v| format!("{v}"),
            legend: SeriesLabelPosition::UpperRight,
            footnote: Some("note".into()),
            floor: 1e-3,
        }
    }

    #[test]
    fn draws_a_png_and_nothing_without_values() {
        register_font().unwrap();
        let dir = std::env::temp_dir().join(format!("granary-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bars.png");
        let bar = |series, median, range| Bar {
            series,
            median,
            range,
        };
        let c = chart(vec![
            Group {
                label: "g1".into(),
                bars: vec![bar(0, 10.0, Some((8.0, 12.0))), bar(1, 100.0, None)],
            },
            Group {
                label: "g2".into(),
                bars: vec![bar(0, 0.0, Some((0.0, 0.1)))],
            },
        ]);
        assert_eq!(c.y_range(), Some((0.05, 200.0)));
        assert!(bars(&c, &path).unwrap());
        let png = std::fs::read(&path).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        assert!(png.len() > 5_000, "a real picture, {} bytes", png.len());
        let empty = chart(vec![Group {
            label: "g".into(),
            bars: vec![bar(0, 0.0, None)],
        }]);
        let none = dir.join("none.png");
        assert!(!bars(&empty, &none).unwrap());
        assert!(!none.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
