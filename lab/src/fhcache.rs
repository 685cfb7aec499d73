//! `granary lab fhcache` (seed 004): the handle/export/credential/open-file caches, on
//! against off, through the real server on a host export and stage by stage in process.
//!
//! Groups (all in ns per call; lower is better; `off` is the baseline of each group):
//!
//! - `iozone fN rR PASS`: the seed's table (`iozone -az -i0 -i1 -y1k -s128m -I -N`), re-run
//!   by `granary bench`'s iozone matrix (granary's own client, one call at a time) against
//!   two `granary serve DIR` host exports on tmpfs (`/dev/shm` when there is one, as the
//!   seed's share was tmpfs), `--fhcache off` and `--fhcache on`, interleaved by the bench.
//!   Records up to 1 MiB are one call (FILE_SYNC WRITE or READ); larger ones are 1 MiB
//!   pieces (UNSTABLE WRITEs then COMMIT). The matrix runs twice, `off` first and then
//!   `on` first, since whichever server goes first tends to be faster: two samples (one
//!   pass each) per cell. The bench's own JSON, report and PNG plot are kept in the
//!   iozone directory the notes name (`off-first/`, `on-first/`).
//! - `nfs WRITE|READ 4KiB d64`: 64 calls in flight on one connection to each server, as
//!   ns per call (the inverse of the rate), client and servers sharing the cores; `...
//!   split`: the same with each server on one worker pinned to the last core and the client
//!   on the first ([`e2e::Placement::Split`]), so that the rate is one server core's.
//! - `stage ...`: one 4 KiB WRITE or READ taken apart in process ([`stages`]): decode,
//!   handle verify, export, credential, open, the I/O system call, close, encode; and the
//!   whole call through the dispatcher to a host export, cache off and on.

mod stages;

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::e2e::{self, Load, Op, Placement};
use crate::report::{Report, Variant};
use crate::Settings;

const SEED_CLAIM: &str = "nfsd_open ~20 us per 4 KiB WRITE (15 us of it fh_verify); the \
                          open cache saved ~1 us per WRITE below 64 KiB records";

/// Calls in flight on the connection of the `nfs ... d64` groups (the goal:
/// `on` at least 1.3 times `off` there).
const NFS_DEPTH: usize = 64;

/// The iozone file, MiB (the seed's `-s128m`); `--quick` uses a small one.
const IOZONE_FILE_MIB: u32 = 128;
const QUICK_IOZONE_FILE_MIB: u32 = 4;

const MODES: [&str; 2] = ["off", "on"];

/// A scratch directory holding one export directory per mode; removed when dropped.
pub(crate) struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(what: &str) -> Result<Self, String> {
        let base = ["/dev/shm", "/tmp"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("granary-lab-{what}-{}", std::process::id()));
        for mode in MODES {
            std::fs::create_dir_all(dir.join(mode))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        Ok(Self { dir })
    }

    pub fn export(&self, mode: &str) -> String {
        self.dir.join(mode).display().to_string()
    }

    /// `granary serve` flags of one mode: its export directory, its own state directory,
    /// no squashing (the lab runs as the directory's owner, usually root) and the switch.
    pub fn serve_args(&self, mode: &str) -> Vec<String> {
        let state = self.dir.join(format!("state-{mode}")).display().to_string();
        [
            &self.export(mode),
            "--state-dir",
            &state,
            "--squash",
            "none",
            "--fhcache",
            mode,
        ]
        .map(String::from)
        .to_vec()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(crate) fn variant(group: &str, mode: &str, samples: Vec<f64>) -> Variant {
    Variant {
        name: format!("{group} {mode}"),
        label: if mode == "off" {
            "off (before)".to_string()
        } else {
            mode.to_string()
        },
        group: group.to_string(),
        baseline: (mode != "off").then(|| format!("{group} off")),
        samples,
    }
}

/// 4 KiB calls at depth 64 to a host export per mode: ns per call (1 / rate).
fn nfs_group(
    op: Op,
    placement: Placement,
    scratch: &Scratch,
    settings: &Settings,
    out: &mut Vec<Variant>,
) -> Result<(), String> {
    let name = if op == Op::Read { "READ" } else { "WRITE" };
    let split = if placement == Placement::Split {
        " split"
    } else {
        ""
    };
    let group = format!("nfs {name} 4KiB d{NFS_DEPTH}{split}");
    let flags: Vec<Vec<String>> = MODES.iter().map(|m| scratch.serve_args(m)).collect();
    let flags: Vec<Vec<&str>> = flags
        .iter()
        .map(|f| f.iter().map(String::as_str).collect())
        .collect();
    let args: Vec<&[&str]> = flags.iter().map(Vec::as_slice).collect();
    let load = Load {
        op,
        conns: 1,
        in_flight: NFS_DEPTH,
        placement,
    };
    for (mode, run) in MODES.into_iter().zip(e2e::runs(&args, load, settings)?) {
        let ns: Vec<f64> = run.samples.iter().map(|rate| 1e9 / rate).collect();
        out.push(variant(&group, mode, ns));
    }
    Ok(())
}

/// The iozone matrix through two servers by `granary bench` (run as a child process of
/// this binary, its terminal output kept in `bench.txt`), the servers named in `order`
/// (indexes into `MODES`; the bench runs its targets in that order); its results.json.
fn iozone_bench(
    scratch: &Scratch,
    out: &Path,
    settings: &Settings,
    order: [usize; 2],
) -> Result<Value, String> {
    let servers: Vec<harness::ServeProcess> = MODES
        .iter()
        .map(|m| {
            let flags = scratch.serve_args(m);
            e2e::start(&flags.iter().map(String::as_str).collect::<Vec<_>>())
        })
        .collect::<Result<_, _>>()?;
    let mib = if settings.quick {
        QUICK_IOZONE_FILE_MIB
    } else {
        IOZONE_FILE_MIB
    };
    let mut argv = vec!["--log".to_string(), "warn".to_string(), "bench".to_string()];
    for i in order {
        let (mode, port) = (MODES[i], servers[i].addr().port());
        argv.push("--target".into());
        argv.push(format!(
            "{mode}=nfs://127.0.0.1/?nfsport={port}&mountport={port}"
        ));
    }
    argv.extend(
        [
            "--workloads",
            "iozone",
            "--no-limit",
            "--allow-busy",
            "--iozone-file-mib",
            &mib.to_string(),
            "--out",
            &out.display().to_string(),
        ]
        .map(String::from),
    );
    let exe = std::env::current_exe().map_err(|e| format!("cannot find granary: {e}"))?;
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let ran = std::process::Command::new(exe)
        .args(&argv)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("granary bench: {e}"))?;
    drop(servers);
    let said = [ran.stdout, ran.stderr].concat();
    let _ = std::fs::write(out.join("bench.txt"), &said);
    if !ran.status.success() {
        return Err(format!(
            "granary bench {argv:?} failed: {}",
            String::from_utf8_lossy(&said)
        ));
    }
    let path = out.join("results.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The bench's iozone samples as lab variants: ns per record, one sample per pass and run
/// (the runs name the servers in opposite orders, so neither always goes first); the
/// table gives each cell's mean over the runs.
fn iozone_variants(runs: &[Value], out: &mut Vec<Variant>) -> Vec<String> {
    let mut rows: Vec<(String, [Vec<f64>; 2])> = Vec::new();
    let samples: Vec<Value> = runs
        .iter()
        .flat_map(|r| r["samples"].as_array().cloned().unwrap_or_default())
        .collect();
    for s in samples.iter().filter(|s| s["workload"] == "iozone") {
        let (Some(phase), Some(target)) = (s["phase"].as_str(), s["target"].as_str()) else {
            continue;
        };
        let Some(mode) = MODES.iter().position(|m| *m == target) else {
            continue;
        };
        let us = s["latency_us"]["mean"]
            .as_f64()
            .or_else(|| s["ops_per_s"].as_f64().map(|r| 1e6 / r))
            .filter(|us| us.is_finite() && *us > 0.0);
        let row = match rows.iter_mut().find(|(p, _)| p == phase) {
            Some(row) => row,
            None => {
                rows.push((phase.to_string(), [Vec::new(), Vec::new()]));
                rows.last_mut().expect("just pushed")
            }
        };
        row.1[mode].extend(us);
    }
    let mut table = vec![
        "iozone through granary (µs per record, off / on):  KB  reclen  write  rewrite  read  \
         reread"
            .to_string(),
    ];
    let mut line = String::new();
    for (phase, us) in &rows {
        let group = format!("iozone {}", phase.replace('-', " "));
        for (mode, us) in MODES.iter().zip(us) {
            out.push(variant(&group, mode, us.iter().map(|u| u * 1e3).collect()));
        }
        let cell = |u: &Vec<f64>| {
            if u.is_empty() {
                "-".to_string()
            } else {
                format!("{:.0}", u.iter().sum::<f64>() / u.len() as f64)
            }
        };
        if phase.ends_with("-write") {
            let head = phase.trim_end_matches("-write").replace('-', " ");
            line = format!("  {head}:");
        }
        line += &format!(" {}/{}", cell(&us[0]), cell(&us[1]));
        if phase.ends_with("-reread") {
            table.push(std::mem::take(&mut line));
        }
    }
    table
}

/// Where the iozone run writes: beside `--json-file` (`F-iozone/`), or a temporary
/// directory.
fn iozone_dir(settings: &Settings) -> PathBuf {
    match &settings.json_file {
        Some(f) => {
            let stem = f.file_stem().map_or_else(
                || "fhcache".to_string(),
                |s| s.to_string_lossy().into_owned(),
            );
            f.with_file_name(format!("{stem}-iozone"))
        }
        None => std::env::temp_dir().join(format!("granary-lab-fhcache-{}", std::process::id())),
    }
}

/// Runs the experiment.
///
/// # Errors
/// A scratch directory cannot be made, or a server or the bench cannot run.
pub fn run(settings: &Settings) -> Result<Report, String> {
    let scratch = Scratch::new("fhcache")?;
    let mut variants = Vec::new();
    let mut notes = stages::run(&scratch, settings, &mut variants)?;
    for placement in [Placement::Shared, Placement::Split] {
        nfs_group(Op::Write, placement, &scratch, settings, &mut variants)?;
        nfs_group(Op::Read, placement, &scratch, settings, &mut variants)?;
    }
    let dir = iozone_dir(settings);
    // Twice, off first and then on first: whichever server goes first tends to be faster
    // (bench/results/2026-11-24-iozone-order).
    let runs = [
        iozone_bench(&scratch, &dir.join("off-first"), settings, [0, 1])?,
        iozone_bench(&scratch, &dir.join("on-first"), settings, [1, 0])?,
    ];
    notes.extend(iozone_variants(&runs, &mut variants));
    notes.push(format!(
        "iozone: granary bench's JSON, report.md and PNG plot in {}/off-first and on-first; \
         one pass per cell and order, the table gives their mean (a pass stops after 2 s \
         and counts the records done)",
        dir.display()
    ));
    notes.push(format!(
        "exports on {} ({}); `nfs` groups: ns per call = 1 / rate, one connection, {NFS_DEPTH} \
         in flight; the client shares the machine's cores with the server",
        scratch.dir.display(),
        if scratch.dir.starts_with("/dev/shm") {
            "tmpfs, like the seed's share"
        } else {
            "not tmpfs: fsync costs more than in the seed"
        }
    ));
    Ok(Report {
        experiment: "fhcache",
        title: "handle, export, credential and open-file caches (seed 004)",
        unit: "ns per call",
        higher_is_better: false,
        seed_claim: SEED_CLAIM,
        variants,
        context: Vec::new(),
        notes,
    })
}
