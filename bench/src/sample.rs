//! One measured sample: one phase of one workload on one target in one repeat, as it goes
//! into the JSON (every sample is kept) and the reports.

use std::collections::BTreeMap;

use serde::Serialize;

use super::gen::Measured;
use super::limits::CDF_POINTS;

/// The number a phase is judged by (higher is better for all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Metric {
    #[serde(rename = "ops/s")]
    Ops,
    #[serde(rename = "MiB/s")]
    Mib,
    #[serde(rename = "entries/s")]
    Entries,
    #[serde(rename = "KiB/s")]
    Kib,
}

impl Metric {
    #[must_use]
    pub fn unit(self) -> &'static str {
        match self {
            Self::Ops => "ops/s",
            Self::Mib => "MiB/s",
            Self::Entries => "entries/s",
            Self::Kib => "KiB/s",
        }
    }
}

/// Whether a sample can be compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Every op succeeded.
    Ok,
    /// Some ops failed; the rate counts only the ones that succeeded.
    Errors,
    /// Nothing was measured (no op succeeded, setup failed, or the server did not start).
    Failed,
}

/// Latency summary of the counted ops, microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub min: f64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// The connections workload's fairness: how many clients got served.
#[derive(Debug, Clone, Serialize)]
pub struct Clients {
    pub requested: usize,
    pub connected: usize,
    /// Clients with at least one op completed in the measured window.
    pub served: usize,
    pub min_ops: u64,
    pub median_ops: u64,
    pub max_ops: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub target: String,
    pub workload: String,
    pub phase: String,
    pub repeat: u32,
    pub status: Status,
    /// Why the sample failed or has errors (first error, or why it stopped early).
    pub reason: Option<String>,
    pub metric: Metric,
    /// The phase's number in `metric` (0 when failed).
    pub value: f64,
    pub conns: usize,
    pub depth: usize,
    pub ops: u64,
    pub calls: u64,
    pub bytes: u64,
    pub entries: u64,
    pub warmup_ops: u64,
    pub errors: BTreeMap<String, u64>,
    pub elapsed_s: f64,
    pub ops_per_s: f64,
    pub calls_per_s: f64,
    pub latency_us: Option<Latency>,
    /// (percentile, µs) points of the latency CDF.
    pub cdf_us: Vec<(f64, f64)>,
    pub clients: Option<Clients>,
    /// Backend or configuration of the target for this sample (e.g. "FSAL MEM").
    pub backend: String,
    /// Anything else a reader needs (e.g. how an iozone record maps to calls).
    pub note: Option<String>,
    /// The object suite: what each NFS operation of this phase cost the engines, from the
    /// heads' `granary_object_*` counters over a count-bound pass (`db_transactions`,
    /// `s3_puts`, `s3_gets`, `s3_put_kib`, `s3_get_kib`, per op).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub costs: BTreeMap<String, f64>,
}

/// What a workload says about one phase besides the measurement.
#[derive(Debug, Clone)]
pub struct PhaseInfo {
    pub workload: &'static str,
    pub phase: String,
    pub metric: Metric,
    pub conns: usize,
    pub depth: usize,
}

impl Sample {
    /// Builds a sample from a measurement.
    #[must_use]
    pub fn from_measured(
        info: &PhaseInfo,
        target: &str,
        backend: &str,
        repeat: u32,
        m: &Measured,
    ) -> Self {
        let secs = m.elapsed.as_secs_f64();
        let per_s = |n: f64| if secs > 0.0 { n / secs } else { 0.0 };
        let value = match info.metric {
            Metric::Ops => per_s(m.ops as f64),
            Metric::Mib => per_s(m.bytes as f64) / f64::from(1u32 << 20),
            Metric::Kib => per_s(m.bytes as f64) / 1024.0,
            Metric::Entries => per_s(m.entries as f64),
        };
        let errors = m.error_count();
        let status = if m.ops == 0 {
            Status::Failed
        } else if errors > 0 || m.aborted.is_some() {
            Status::Errors
        } else {
            Status::Ok
        };
        let reason = match (&m.aborted, &m.first_error) {
            (Some(a), Some(e)) => Some(format!("{a}; first error: {e}")),
            (Some(a), None) => Some(a.clone()),
            (None, Some(e)) => Some(e.clone()),
            (None, None) if m.ops == 0 => Some("no op completed".into()),
            (None, None) => None,
        };
        Self {
            target: target.to_owned(),
            workload: info.workload.to_owned(),
            phase: info.phase.clone(),
            repeat,
            status,
            reason,
            metric: info.metric,
            value: if status == Status::Failed { 0.0 } else { value },
            conns: info.conns,
            depth: info.depth,
            ops: m.ops,
            calls: m.calls,
            bytes: m.bytes,
            entries: m.entries,
            warmup_ops: m.warmup_ops,
            errors: m.errors.clone(),
            elapsed_s: secs,
            ops_per_s: per_s(m.ops as f64),
            calls_per_s: per_s(m.calls as f64),
            latency_us: latency(m),
            cdf_us: cdf(m),
            clients: None,
            backend: backend.to_owned(),
            note: None,
            costs: BTreeMap::new(),
        }
    }

    /// A sample for a phase that could not run at all.
    #[must_use]
    pub fn failed(info: &PhaseInfo, target: &str, backend: &str, repeat: u32, why: &str) -> Self {
        let m = Measured::failed(&super::wire::OpError::Protocol(String::new()), 0);
        let mut s = Self::from_measured(info, target, backend, repeat, &m);
        s.errors.clear();
        s.reason = Some(why.to_owned());
        s
    }

    /// Adds the fairness figures of the connections workload.
    #[must_use]
    pub fn with_clients(mut self, m: &Measured) -> Self {
        let mut per: Vec<u64> = m.per_conn_ops.clone();
        per.sort_unstable();
        self.clients = Some(Clients {
            requested: per.len(),
            connected: m.connected,
            served: per.iter().filter(|&&n| n > 0).count(),
            min_ops: per.first().copied().unwrap_or(0),
            median_ops: per.get(per.len() / 2).copied().unwrap_or(0),
            max_ops: per.last().copied().unwrap_or(0),
        });
        self
    }

    #[must_use]
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// `workload/phase`.
    #[must_use]
    pub fn key(&self) -> String {
        format!("{}/{}", self.workload, self.phase)
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn latency(m: &Measured) -> Option<Latency> {
    let h = &m.latency_ns;
    if h.is_empty() {
        return None;
    }
    Some(Latency {
        min: us(h.min()),
        mean: h.mean() / 1000.0,
        p50: us(h.value_at_quantile(0.5)),
        p90: us(h.value_at_quantile(0.9)),
        p99: us(h.value_at_quantile(0.99)),
        p999: us(h.value_at_quantile(0.999)),
        max: us(h.max()),
    })
}

/// CDF points spaced evenly in "nines" (0, 50, 75, 87.5, ... 99.99.., max), the shape a
/// latency CDF is read in.
fn cdf(m: &Measured) -> Vec<(f64, f64)> {
    let h = &m.latency_ns;
    if h.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(CDF_POINTS);
    for i in 0..CDF_POINTS - 1 {
        // Quantile 1 - 2^(-i/4): 0, 0.16, 0.29, ... approaching 1.
        let q = 1.0 - (-(i as f64) / 4.0).exp2();
        out.push((q * 100.0, us(h.value_at_quantile(q))));
    }
    out.push((100.0, us(h.max())));
    out
}
