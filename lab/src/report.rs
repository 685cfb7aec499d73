//! One experiment's results: samples per variant, printed as a table or as one JSON
//! object `{experiment, unit, higher_is_better, seed_claim, variants: {name: {median, min,
//! max, samples}}, baselines, context, notes}`.
//!
//! Variants come in groups (a workload at a thread count); each group names its
//! "before" variant, and every row shows its median over that baseline's median.

use serde_json::{json, Map, Value};

/// Samples of one variant.
#[derive(Debug, Clone)]
pub struct Variant {
    /// Unique within the report, e.g. `read4k/lock T=2 mutex`.
    pub name: String,
    /// The row label within its group, e.g. `mutex (before)`.
    pub label: String,
    /// The variant's group, e.g. `read4k/lock T=2`.
    pub group: String,
    /// Name of the variant this one is compared with (`None`: it is the baseline).
    pub baseline: Option<String>,
    pub samples: Vec<f64>,
}

impl Variant {
    pub fn median(&self) -> f64 {
        let mut sorted = self.samples.clone();
        sorted.sort_by(f64::total_cmp);
        match sorted.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        }
    }

    pub fn min(&self) -> f64 {
        self.samples.iter().copied().fold(f64::INFINITY, f64::min)
    }

    pub fn max(&self) -> f64 {
        self.samples
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max)
    }
}

/// A finished experiment.
#[derive(Debug, Clone)]
pub struct Report {
    pub experiment: &'static str,
    pub title: &'static str,
    pub unit: &'static str,
    pub higher_is_better: bool,
    pub seed_claim: &'static str,
    pub variants: Vec<Variant>,
    /// Machine and run facts, in order (`nproc`, coarse tick, sample length, ...).
    pub context: Vec<(String, String)>,
    pub notes: Vec<String>,
}

impl Report {
    fn find(&self, name: &str) -> Option<&Variant> {
        self.variants.iter().find(|v| v.name == name)
    }

    /// Median of `v` over its baseline's median (1 for a baseline).
    pub fn ratio(&self, v: &Variant) -> f64 {
        match &v.baseline {
            None => 1.0,
            Some(base) => self
                .find(base)
                .map_or(f64::NAN, |b| v.median() / b.median()),
        }
    }

    pub fn to_json(&self) -> Value {
        let mut variants = Map::new();
        let mut baselines = Map::new();
        for v in &self.variants {
            variants.insert(
                v.name.clone(),
                json!({
                    "median": v.median(),
                    "min": v.min(),
                    "max": v.max(),
                    "samples": v.samples,
                }),
            );
            if let Some(base) = &v.baseline {
                baselines.insert(v.name.clone(), json!(base));
            }
        }
        let context: Map<String, Value> = self
            .context
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        json!({
            "experiment": self.experiment,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "seed_claim": self.seed_claim,
            "variants": variants,
            "baselines": baselines,
            "context": context,
            "notes": self.notes,
        })
    }

    pub fn to_table(&self) -> String {
        let mut out = format!("granary lab {}: {}\n", self.experiment, self.title);
        out += &format!("seed's headline: {}\n", self.seed_claim);
        let better = if self.higher_is_better {
            "higher"
        } else {
            "lower"
        };
        out += &format!("unit: {} ({better} is better)\n", self.unit);
        for (key, value) in &self.context {
            out += &format!("  {key}: {value}\n");
        }
        out += &format!(
            "\n{:<34} {:>10} {:>10} {:>10} {:>12}\n",
            "variant", "median", "min", "max", "after/before"
        );
        let mut group = "";
        for v in &self.variants {
            if v.group != group {
                group = &v.group;
                out += &format!("{group}\n");
            }
            out += &format!(
                "  {:<32} {:>10} {:>10} {:>10} {:>12.3}\n",
                v.label,
                si(v.median()),
                si(v.min()),
                si(v.max()),
                self.ratio(v)
            );
        }
        for note in &self.notes {
            out += &format!("\nnote: {note}");
        }
        out.push('\n');
        out
    }
}

/// `12.3M`-style numbers: three significant digits and an SI suffix.
pub fn si(x: f64) -> String {
    if !x.is_finite() {
        return "-".to_string();
    }
    let (scaled, suffix) = [(1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(div, _)| x.abs() >= *div)
        .map_or((x, ""), |(div, s)| (x / div, s));
    let digits = if scaled.abs() >= 100.0 {
        0
    } else if scaled.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{scaled:.digits$}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variant(name: &str, baseline: Option<&str>, samples: &[f64]) -> Variant {
        Variant {
            name: name.to_string(),
            label: name.to_string(),
            group: "g".to_string(),
            baseline: baseline.map(str::to_string),
            samples: samples.to_vec(),
        }
    }

    #[test]
    fn medians_ratios_and_shape() {
        let report = Report {
            experiment: "x",
            title: "t",
            unit: "ops/s",
            higher_is_better: true,
            seed_claim: "claim",
            variants: vec![
                variant("before", None, &[10.0, 30.0, 20.0]),
                variant("after", Some("before"), &[5.0, 15.0, 10.0, 20.0]),
            ],
            context: vec![("nproc".into(), "2".into())],
            notes: vec![],
        };
        assert_eq!(report.variants[0].median(), 20.0);
        assert_eq!(report.variants[1].median(), 12.5);
        assert!((report.ratio(&report.variants[1]) - 0.625).abs() < 1e-9);
        let json = report.to_json();
        assert_eq!(json["variants"]["after"]["min"], 5.0);
        assert_eq!(
            json["variants"]["after"]["samples"]
                .as_array()
                .unwrap()
                .len(),
            4
        );
        assert_eq!(json["baselines"]["after"], "before");
        assert!(report.to_table().contains("0.625"));
        assert_eq!(si(1_234_567.0), "1.23M");
        assert_eq!(si(999.0), "999");
        assert_eq!(si(45_600.0), "45.6k");
    }
}
