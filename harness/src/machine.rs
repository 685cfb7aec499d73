//! What machine a run was on and how busy it was: CPU, cores, memory, kernel, load
//! average and the busiest processes at start and end, the git commit, the date. The
//! machine is shared and noisy, so the noise is part of every result.

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
        cores: std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
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
    fn dates() {
        assert_eq!(date(Timestamp::from_nanos(0)), "1970-01-01");
        let t = Timestamp {
            seconds: 1_709_210_096, // 2024-02-29T12:34:56Z
            nanos: 0,
        };
        assert_eq!(iso_time(t), "2024-02-29T12:34:56Z");
    }
}
