//! What machine a run was on and how busy it was: CPU, cores, memory, kernel, load
//! average and the busiest processes at start and end, the git commit, the date. The
//! machine is shared and noisy, so the noise is part of every result.
//!
//! [`LoadCheck`] is the rule `granary bench` and `granary lab` share: a run that starts
//! with a 1-minute load average above the core count measures the other jobs as much as
//! granary, so it is refused unless asked for (`--allow-busy`), and then marked BUSY in
//! its JSON and its table.

use std::process::Command;

use gtime::Timestamp;
use serde::Serialize;

/// The machine and the code, taken once per run.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub os: String,
    pub git_commit: String,
    pub git_dirty: bool,
    pub granary_build: &'static str,
}

/// How busy the machine was at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct Noise {
    pub at: String,
    pub loadavg: String,
    /// Other processes using CPU (`ps`, busiest first).
    pub busiest: Vec<String>,
    /// Whether a qemu guest (the kernel-client suite) was running.
    pub qemu_running: bool,
}

/// The 1-, 5- and 15-minute load averages (zeros if `/proc/loadavg` cannot be read).
#[must_use]
pub fn loadavg() -> [f64; 3] {
    let text = read("/proc/loadavg");
    let mut fields = text.split_whitespace().map(|f| f.parse().unwrap_or(0.0));
    [(); 3].map(|()| fields.next().unwrap_or(0.0))
}

/// Cores this process may run on.
#[must_use]
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// Whether the machine was quiet enough to measure when a run started.
#[derive(Debug, Clone, Serialize)]
pub struct LoadCheck {
    pub cores: usize,
    /// Load averages (1, 5, 15 minutes) when the run started.
    pub load_before: [f64; 3],
    /// True if the 1-minute load was above the core count.
    pub busy: bool,
}

impl LoadCheck {
    /// Reads the load now.
    #[must_use]
    pub fn now() -> Self {
        Self::from(cores(), loadavg())
    }

    #[must_use]
    pub fn from(cores: usize, load_before: [f64; 3]) -> Self {
        Self {
            cores,
            load_before,
            busy: load_before[0] > cores as f64,
        }
    }

    /// The loud line a busy run carries in its table and JSON (`None` if quiet).
    #[must_use]
    pub fn warning(&self) -> Option<String> {
        self.busy.then(|| {
            format!(
                "BUSY MACHINE: 1-minute load {:.2} was above the {} cores when this run \
                 started; the numbers include contention with other jobs and are not a \
                 quiet-machine result",
                self.load_before[0], self.cores
            )
        })
    }

    /// Refuses a busy start unless `allow` (the `--allow-busy` flag).
    ///
    /// # Errors
    /// A message saying what the load was and how to run anyway.
    pub fn refuse_unless(&self, allow: bool) -> Result<(), String> {
        if !self.busy || allow {
            return Ok(());
        }
        Err(format!(
            "the 1-minute load average is {:.2}, above the {} cores: the numbers would \
             measure the other jobs as much as granary. Run on a quiet machine, or pass \
             --allow-busy to run anyway (the results are then marked BUSY)",
            self.load_before[0], self.cores
        ))
    }
}

/// Takes the machine's description.
#[must_use]
pub fn describe() -> Machine {
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or_else(|| "unknown".into(), |s| s.trim().to_owned());
    let memory_kib: f64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let os = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map_or_else(String::new, |s| s.trim_matches('"').to_owned());
    let status = command("git", &["status", "--porcelain", "--untracked-files=no"]);
    Machine {
        cpu,
        cores: cores(),
        memory_gib: memory_kib / (1024.0 * 1024.0),
        kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        os,
        git_commit: command("git", &["rev-parse", "--short=12", "HEAD"]),
        git_dirty: !status.is_empty(),
        granary_build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    }
}

/// How busy the machine is now.
#[must_use]
pub fn noise(now: Timestamp) -> Noise {
    let ps = command(
        "ps",
        &["-eo", "pcpu,etime,comm", "--sort=-pcpu", "--no-headers"],
    );
    Noise {
        at: iso_time(now),
        loadavg: read("/proc/loadavg")
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        busiest: ps
            .lines()
            .filter(|l| !l.trim_start().starts_with("0.0"))
            .take(6)
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect(),
        qemu_running: !command("pgrep", &["qemu"]).is_empty(),
    }
}

/// `YYYY-MM-DD` of a timestamp (UTC).
#[must_use]
pub fn date(t: Timestamp) -> String {
    let (y, m, d) = civil_from_days(t.seconds.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// `YYYY-MM-DDTHH:MM:SSZ` of a timestamp.
#[must_use]
pub fn iso_time(t: Timestamp) -> String {
    let secs = t.seconds.rem_euclid(86_400);
    format!(
        "{}T{:02}:{:02}:{:02}Z",
        date(t),
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn command(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_above_the_core_count_is_busy() {
        let quiet = LoadCheck::from(2, [2.0, 5.0, 5.0]);
        assert!(!quiet.busy && quiet.warning().is_none());
        assert!(quiet.refuse_unless(false).is_ok());
        let busy = LoadCheck::from(2, [2.01, 0.0, 0.0]);
        assert!(busy.busy);
        assert!(busy.warning().unwrap().contains("BUSY"));
        assert!(busy
            .refuse_unless(false)
            .unwrap_err()
            .contains("--allow-busy"));
        assert!(busy.refuse_unless(true).is_ok());
        assert!(loadavg().iter().all(|l| *l >= 0.0));
    }

    #[test]
    fn dates() {
        assert_eq!(date(Timestamp::from_nanos(0)), "1970-01-01");
        let t = Timestamp {
            seconds: 1_709_210_096, // 2024-02-29T12:34:56Z
            nanos: 0,
        };
        assert_eq!(iso_time(t), "2024-02-29T12:34:56Z");
    }
}
