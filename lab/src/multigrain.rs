//! Seed 000, multigrain timestamps. The seed measured will-it-scale's `pipe1_threads`
//! (threads writing their own pipe, whose inode times every write updates, nobody
//! looking): the multigrain series cost 7% against coarse-only timestamps, and reading the
//! coarse time and the floor in one go instead of two won back 4 points.
//!
//! The same comparison here, in four groups:
//! - `stamp`: T threads each stamp their own inode's ctime in a loop, nobody observing:
//!   coarse only (before), multigrain with the floor read separately (two clock reads),
//!   multigrain with the combined read (after), and fine for reference;
//! - `write`: the same through the mem backend, each thread writing one byte of its own
//!   file (range lock, data copy and stamp: a "change" as granary serves it), nobody
//!   observing (`MemFs::write_unobserved`, the seed's case);
//! - `write observed`: the same through the backend's WRITE, which hands out the
//!   attributes after the change (as every NFS WRITE reply does), so multigrain stamps
//!   the next write within the tick with the fine clock;
//! - `write+stat k`: a getattr (a client looking) after every k-th write, which is what
//!   sends multigrain to the fine clock;
//! - `nfs WRITE`: 4 KiB WRITEs to one file through a real `granary serve` per
//!   `--timestamps` mode, 16 in flight on one connection.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backend_mem::{MemConfig, MemFs};
use gtime::{Clock, Ctime, FloorRead, MultigrainClock, SystemClock, TimestampMode};
use vfs::{Backend, CreateMode, FileId, Name, SetAttr, Stability, Trusted};

use super::measure::{interleaved, rate};
use super::report::{Report, Variant};
use super::{e2e, Settings};

pub const SEED_CLAIM: &str = "pipe1_threads: multigrain series with the floor read separately \
    at 93% of the coarse-only baseline; with one combined read, 97%";

struct Design {
    key: &'static str,
    label: &'static str,
    mode: TimestampMode,
    floor_read: FloorRead,
}

const COARSE: Design = Design {
    key: "coarse",
    label: "coarse only (before)",
    mode: TimestampMode::Coarse,
    floor_read: FloorRead::Combined,
};
const SEPARATE: Design = Design {
    key: "separate",
    label: "multigrain, 2 reads",
    mode: TimestampMode::Multigrain,
    floor_read: FloorRead::Separate,
};
const COMBINED: Design = Design {
    key: "combined",
    label: "multigrain, 1 read (after)",
    mode: TimestampMode::Multigrain,
    floor_read: FloorRead::Combined,
};
const FINE: Design = Design {
    key: "fine",
    label: "fine every change",
    mode: TimestampMode::Fine,
    floor_read: FloorRead::Combined,
};

/// Writes between two getattrs in the `write+stat` groups.
const STAT_EVERY: [u64; 2] = [1, 64];

impl Design {
    fn clock(&self) -> Arc<MultigrainClock> {
        Arc::new(MultigrainClock::with_floor_read(
            SystemClock::shared(),
            self.mode,
            self.floor_read,
        ))
    }

    fn fs(&self) -> MemFs {
        MemFs::with_clock(MemConfig::default(), self.clock())
    }
}

/// 1 thread and one per core.
pub fn thread_counts() -> Vec<usize> {
    let mut counts = vec![1, crate::cores()];
    counts.dedup();
    counts
}

fn variant(group: &str, design: &Design, base: &Design, samples: Vec<f64>) -> Variant {
    let name = format!("{group} {}", design.key);
    let baseline = (design.key != base.key).then(|| format!("{group} {}", base.key));
    Variant {
        name,
        label: design.label.to_string(),
        group: group.to_string(),
        baseline,
        samples,
    }
}

fn new_file(fs: &MemFs, name: &str) -> FileId {
    let name = Name::new(name.as_bytes().to_vec()).expect("lab file names are valid");
    let mode = CreateMode::Unchecked(SetAttr::default());
    fs.create(fs.root(), &name, &mode, &Trusted::ROOT)
        .expect("a fresh mem file system has room")
        .attr
        .fileid
}

fn stamp_group(threads: usize, settings: &Settings, out: &mut Vec<Variant>) {
    let group = format!("stamp T={threads}");
    let designs = [&COARSE, &SEPARATE, &COMBINED, &FINE];
    let clocks: Vec<_> = designs.iter().map(|d| d.clock()).collect();
    let measured = interleaved(designs.len(), settings.samples, |d| {
        let clock = &clocks[d];
        rate(threads, settings.sample, |_| {
            let cell = Ctime::new(clock.now(), true);
            move || {
                black_box(clock.stamp(&cell, true));
            }
        })
    });
    for (design, measured) in designs.into_iter().zip(measured) {
        out.push(variant(&group, design, &COARSE, measured));
    }
}

/// Each thread's own file in a fresh file system per design.
fn setups(designs: &[&Design], threads: usize) -> Vec<(MemFs, Vec<FileId>)> {
    designs
        .iter()
        .map(|design| {
            let fs = design.fs();
            let files = (0..threads)
                .map(|t| new_file(&fs, &format!("t{t}")))
                .collect();
            (fs, files)
        })
        .collect()
}

/// Whether a `write` group's changes hand out the file's attributes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Nobody looks (the seed's `pipe1`): `MemFs::write_unobserved`.
    Unobserved,
    /// As every NFS WRITE: the backend's write returns the attributes after the change,
    /// which marks the ctime observed, so the next write within the tick is fine.
    Observed,
}

fn write_group(threads: usize, seen: Seen, settings: &Settings, out: &mut Vec<Variant>) {
    let group = match seen {
        Seen::Unobserved => format!("write T={threads}"),
        Seen::Observed => format!("write observed T={threads}"),
    };
    let designs = [&COARSE, &SEPARATE, &COMBINED, &FINE];
    let setups = setups(&designs, threads);
    let measured = interleaved(designs.len(), settings.samples, |d| {
        let (fs, files) = &setups[d];
        rate(threads, settings.sample, |t| {
            let file = files[t];
            move || {
                let ok = match seen {
                    Seen::Unobserved => fs.write_unobserved(file, 0, b"x").is_ok(),
                    Seen::Observed => fs
                        .write(file, 0, b"x", Stability::Unstable, &Trusted::ROOT)
                        .is_ok(),
                };
                black_box(ok);
            }
        })
    });
    for (design, measured) in designs.into_iter().zip(measured) {
        out.push(variant(&group, design, &COARSE, measured));
    }
}

/// Adds the changes one thread made to a total when its loop ends (no shared counter on
/// the measured path).
struct Tally<'a> {
    n: u64,
    total: &'a AtomicU64,
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        self.total.fetch_add(self.n, Ordering::Relaxed);
    }
}

/// Returns notes on how often multigrain took the fine path.
fn stat_group(threads: usize, settings: &Settings, out: &mut Vec<Variant>) -> Vec<String> {
    let mut notes = Vec::new();
    let designs = [&COARSE, &COMBINED, &FINE];
    for every in STAT_EVERY {
        let group = format!("write+stat k={every} T={threads}");
        let setups = setups(&designs, threads);
        let changes: Vec<AtomicU64> = designs.iter().map(|_| AtomicU64::new(0)).collect();
        let measured = interleaved(designs.len(), settings.samples, |d| {
            let (fs, files) = &setups[d];
            let total = &changes[d];
            rate(threads, settings.sample, |t| {
                let file = files[t];
                let mut tally = Tally { n: 0, total };
                move || {
                    // The whole tally moves into the closure (not a copy of its count), so
                    // its drop at the end of the loop adds the count.
                    let tally = &mut tally;
                    // Unobserved writes: the getattr is the only look at the ctime.
                    black_box(fs.write_unobserved(file, 0, b"x").is_ok());
                    tally.n += 1;
                    if tally.n.is_multiple_of(every) {
                        black_box(fs.getattr(file).is_ok());
                    }
                }
            })
        });
        for (((design, measured), (fs, _)), changes) in
            designs.iter().zip(measured).zip(&setups).zip(&changes)
        {
            if design.key == COMBINED.key {
                let s = fs.clock().stats();
                let counts = [s.fine_stamps, s.floor_swaps, s.floor_adopted, s.floor_max];
                let changes = changes.load(Ordering::Relaxed);
                notes.push(format!(
                    "{group}, multigrain: {}",
                    per_change(counts, changes)
                ));
            }
            out.push(variant(&group, design, &COARSE, measured));
        }
    }
    notes
}

/// Parses the server's shutdown line (`... N fine stamps, N floors published, N racing
/// floors adopted, N fetch_max`) into its four counts.
fn server_counts(report: &[String]) -> Option<[u64; 4]> {
    let line = report.last()?;
    let (_, counts) = line.split_once("): ")?;
    let mut out = [0u64; 4];
    let mut parts = counts.split(", ");
    for slot in &mut out {
        *slot = parts.next()?.split_whitespace().next()?.parse().ok()?;
    }
    Some(out)
}

/// Fine-clock reads and floor CASes per change, from a clock's counters and the changes.
fn per_change(counts: [u64; 4], changes: u64) -> String {
    let per = |n: u64| n as f64 / changes.max(1) as f64;
    let [fine, swaps, adopted, max] = counts;
    format!(
        "{:.3} fine-clock reads and {:.3} floor CASes per change ({:.3} published, {:.3} \
         adopted a racing floor, {:.3} more fetch_max), over {changes} changes",
        per(fine),
        per(fine + max),
        per(swaps),
        per(adopted),
        per(max)
    )
}

fn nfs_group(settings: &Settings, out: &mut Vec<Variant>) -> Result<Vec<String>, String> {
    let group = "nfs WRITE 4KiB";
    let designs = [
        (&COARSE, TimestampMode::Coarse),
        (&FINE, TimestampMode::Fine),
        (&COMBINED, TimestampMode::Multigrain),
    ];
    let flags: Vec<[&str; 2]> = designs
        .iter()
        .map(|(_, mode)| ["--timestamps", mode.name()])
        .collect();
    let args: Vec<&[&str]> = flags.iter().map(|f| &f[..]).collect();
    let runs = e2e::runs(&args, e2e::WRITES, settings)?;
    let mut notes = Vec::new();
    for ((design, mode), run) in designs.into_iter().zip(runs) {
        if mode == TimestampMode::Multigrain {
            let counted = server_counts(&run.report).map_or_else(
                || "the server reported no counters".to_string(),
                |counts| per_change(counts, run.ops),
            );
            notes.push(format!(
                "{group}, server in multigrain mode: {counted} (WRITEs)"
            ));
        }
        out.push(variant(group, design, &COARSE, run.samples));
    }
    Ok(notes)
}

/// The smallest step of the coarse clock seen while spinning on it for `spin`.
fn observed_tick(spin: Duration) -> Option<Duration> {
    let clock = SystemClock::new();
    let until = clock.monotonic() + spin;
    let mut last = clock.coarse_now().as_nanos();
    let mut smallest: Option<u64> = None;
    while clock.monotonic() < until {
        let now = clock.coarse_now().as_nanos();
        if now > last {
            let step = now - last;
            smallest = Some(smallest.map_or(step, |s| s.min(step)));
            last = now;
        }
    }
    smallest.map(Duration::from_nanos)
}

pub fn run(settings: &Settings) -> Result<Report, String> {
    let mut variants = Vec::new();
    let threads = thread_counts();
    for &t in &threads {
        stamp_group(t, settings, &mut variants);
    }
    for seen in [Seen::Unobserved, Seen::Observed] {
        for &t in &threads {
            write_group(t, seen, settings, &mut variants);
        }
    }
    let most = *threads.last().unwrap_or(&1);
    let mut notes = stat_group(most, settings, &mut variants);
    notes.extend(nfs_group(settings, &mut variants)?);
    let tick = gtime::coarse_resolution();
    let seen = observed_tick(Duration::from_millis(if settings.quick { 20 } else { 100 }));
    notes.push(
        "after/before is each variant's median over the coarse-only median of its group; \
         compare the seed's 93% and 97% with the `multigrain, 2 reads` and `1 read` rows of \
         `write` (a whole change nobody observes, as pipe1's write(2) is); `write observed` \
         is the same write through the backend's WRITE, which returns the attributes after \
         it as an NFS WRITE does; `stamp` isolates the clock, so its ratios are larger"
            .to_string(),
    );
    notes.push(
        "through NFS a WRITE reply carries the file's attributes before and after the write \
         (wcc data), and the client sees both: each WRITE marks the ctime observed, so the \
         next WRITE within the tick reads the fine clock and CASes the floor, as knfsd does \
         on Linux; the per-WRITE counts above say how often, the `nfs WRITE` rows what it costs"
            .to_string(),
    );
    Ok(Report {
        experiment: "multigrain",
        title: "multigrain timestamps (seed 000)",
        unit: "changes/s",
        higher_is_better: true,
        seed_claim: SEED_CLAIM,
        variants,
        context: vec![
            (
                "coarse clock resolution".into(),
                format!(
                    "{} ns (clock_getres(CLOCK_REALTIME_COARSE))",
                    tick.as_nanos()
                ),
            ),
            (
                "coarse clock step seen".into(),
                seen.map_or("none seen".into(), |d| format!("{} ns", d.as_nanos())),
            ),
        ],
        notes,
    })
}
