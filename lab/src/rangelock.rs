//! Seed 003, range locks. The seed ran `readseek3_processes -t 10` on FreeBSD: ten workers
//! each reading at its own offset of one file. Taking the old range lock (a mutex-protected
//! queue per file) on every read cost 90% of the throughput (25.7M to 2.46M reads/s).
//!
//! The same loops here, T = 1, 2, 4, 8 threads, for each design: no lock (the ceiling),
//! the mutex FIFO (before), the lock-free list (after) and the lock-free list in cheat mode:
//! - `read4k/lock`: each thread read-locks its own 4 KiB range of one lock and copies 4 KiB
//!   out of a shared buffer: the lock's cost and scaling with nothing else in the way;
//! - `write4k/lock`: disjoint writers: write lock of its own range, copy into its own page;
//! - `read4k/mem` and `write4k/mem`: the same through the mem backend's READ and WRITE on one
//!   file (range lock, chunk map, data copy, ctime stamp), each thread in its own 64 KiB chunk;
//! - `nfs READ` and `nfs WRITE`: a real `granary serve --rangelock X` per locking design,
//!   4 KiB calls on one file from one connection per server worker, 64 in flight on each.
//!
//! Thread counts above the machine's cores are labelled `oversubscribed`: there a lock
//! holder can be preempted while the others wait, which is not the contention the seed
//! measured on many cores.

use std::hint::black_box;

use backend_mem::{MemConfig, MemFs, RangeLockMode, CHUNK_BYTES};
use bytes::BytesMut;
use gtime::SystemClock;
use sync::RangeLock;
use vfs::{Backend, CreateMode, FileId, Name, SetAttr, Stability, Trusted};

use super::e2e::{self, Load, Op, Placement};
use super::measure::{interleaved, rate};
use super::report::{Report, Variant};
use super::Settings;

pub const SEED_CLAIM: &str = "readseek3, 10 workers at disjoint offsets of one file: the old \
    per-file mutex range lock took throughput from 25.7M to 2.46M reads/s (-90%)";

const THREADS: [usize; 4] = [1, 2, 4, 8];
const PAGE: usize = 4096;

fn label(mode: RangeLockMode) -> &'static str {
    match mode {
        RangeLockMode::None => "no lock (ceiling)",
        RangeLockMode::Mutex => "mutex FIFO (before)",
        RangeLockMode::LockFree => "lock-free list (after)",
        RangeLockMode::Cheat => "lock-free, cheat mode",
    }
}

/// The mutex FIFO is the "before" of each group; every design is compared with it, and
/// the single-thread cost of each lock shows in the no-lock note below the table.
fn variant(group: &str, mode: RangeLockMode, samples: Vec<f64>) -> Variant {
    let baseline =
        (mode != RangeLockMode::Mutex).then(|| format!("{group} {}", RangeLockMode::Mutex.name()));
    Variant {
        name: format!("{group} {}", mode.name()),
        label: label(mode).to_string(),
        group: group.to_string(),
        baseline,
        samples,
    }
}

/// `T=n`, marked when the threads outnumber the cores.
fn threads_label(threads: usize) -> String {
    if threads > crate::cores() {
        format!("T={threads} oversubscribed")
    } else {
        format!("T={threads}")
    }
}

fn lock_group(threads: usize, write: bool, settings: &Settings, out: &mut Vec<Variant>) {
    let kind = if write { "write4k" } else { "read4k" };
    let group = format!("{kind}/lock {}", threads_label(threads));
    let shared: Vec<u8> = vec![7; THREADS[THREADS.len() - 1] * PAGE];
    let locks: Vec<RangeLock> = RangeLockMode::ALL.into_iter().map(RangeLock::new).collect();
    let measured = interleaved(locks.len(), settings.samples, |d| {
        let (lock, shared) = (&locks[d], &shared);
        rate(threads, settings.sample, |t| {
            let at = t * PAGE;
            let range = at as u64..(at + PAGE) as u64;
            let mut page = vec![0u8; PAGE];
            move || {
                let guard = if write {
                    lock.write(range.clone())
                } else {
                    lock.read(range.clone())
                };
                if write {
                    page.copy_from_slice(black_box(&shared[..PAGE]));
                } else {
                    page.copy_from_slice(&shared[at..at + PAGE]);
                }
                black_box(&page);
                drop(guard);
            }
        })
    });
    for (mode, measured) in RangeLockMode::ALL.into_iter().zip(measured) {
        out.push(variant(&group, mode, measured));
    }
}

/// A mem file system using `mode`, with one file filled over every thread's chunk.
fn filled_fs(mode: RangeLockMode) -> (MemFs, FileId) {
    let config = MemConfig {
        rangelock: mode,
        ..MemConfig::default()
    };
    let fs = MemFs::new(config, SystemClock::shared());
    let name = Name::new(b"shared".to_vec()).expect("valid name");
    let create = CreateMode::Unchecked(SetAttr::default());
    let file = fs
        .create(fs.root(), &name, &create, &Trusted::ROOT)
        .expect("create")
        .attr
        .fileid;
    let span = THREADS[THREADS.len() - 1] as u64 * CHUNK_BYTES;
    for at in (0..span).step_by(PAGE) {
        fs.write(file, at, &[7; PAGE], Stability::Unstable, &Trusted::ROOT)
            .expect("fill");
    }
    (fs, file)
}

fn mem_group(threads: usize, write: bool, settings: &Settings, out: &mut Vec<Variant>) {
    let kind = if write { "write4k" } else { "read4k" };
    let group = format!("{kind}/mem {}", threads_label(threads));
    let setups: Vec<(MemFs, FileId)> = RangeLockMode::ALL.into_iter().map(filled_fs).collect();
    let measured = interleaved(setups.len(), settings.samples, |d| {
        let (fs, file) = (&setups[d].0, setups[d].1);
        rate(threads, settings.sample, |t| {
            let at = t as u64 * CHUNK_BYTES;
            let page = vec![9u8; PAGE];
            move || {
                if write {
                    let done = fs.write(file, at, &page, Stability::Unstable, &Trusted::ROOT);
                    black_box(done.is_ok());
                } else {
                    let mut out = BytesMut::with_capacity(PAGE);
                    let done = fs.read_into(file, at, PAGE as u32, &mut out, &Trusted::ROOT);
                    black_box(done.map(|_| out.len()).ok());
                }
            }
        })
    });
    for (mode, measured) in RangeLockMode::ALL.into_iter().zip(measured) {
        out.push(variant(&group, mode, measured));
    }
}

/// Per group kind, each lock's median over the no-lock median: at one thread (the lock's
/// own cost) and at the most threads (the seed's comparison).
fn costs_over_no_lock(variants: &[Variant]) -> Vec<String> {
    let median = |name: String| {
        variants
            .iter()
            .find(|v| v.name == name)
            .map(Variant::median)
    };
    let locks = [
        RangeLockMode::Mutex,
        RangeLockMode::LockFree,
        RangeLockMode::Cheat,
    ];
    let most = THREADS[THREADS.len() - 1];
    let mut notes = Vec::new();
    for kind in ["read4k/lock", "write4k/lock", "read4k/mem", "write4k/mem"] {
        for threads in [1, most] {
            let t = threads_label(threads);
            let none = median(format!("{kind} {t} none"));
            let parts: Vec<String> = locks
                .into_iter()
                .filter_map(|mode| {
                    let this = median(format!("{kind} {t} {}", mode.name()))?;
                    Some(format!("{} {:.3}", mode.name(), this / none?))
                })
                .collect();
            notes.push(format!(
                "rate over no lock, {kind} {t}: {}",
                parts.join(", ")
            ));
        }
    }
    notes
}

/// Calls in flight on each connection of the `nfs` groups.
const NFS_DEPTH: usize = 64;

/// One server per locking design (the mutex first: the baseline), the same load on each.
fn nfs_group(op: Op, settings: &Settings, out: &mut Vec<Variant>) -> Result<(), String> {
    let name = if op == Op::Read { "READ" } else { "WRITE" };
    let conns = crate::cores();
    let group = format!("nfs {name} 4KiB c{conns} d{NFS_DEPTH}");
    let modes = [
        RangeLockMode::Mutex,
        RangeLockMode::LockFree,
        RangeLockMode::Cheat,
    ];
    let flags: Vec<[&str; 2]> = modes.iter().map(|m| ["--rangelock", m.name()]).collect();
    let args: Vec<&[&str]> = flags.iter().map(|f| &f[..]).collect();
    let load = Load {
        op,
        conns,
        in_flight: NFS_DEPTH,
        placement: Placement::Shared,
    };
    for (mode, run) in modes.into_iter().zip(e2e::runs(&args, load, settings)?) {
        out.push(variant(&group, mode, run.samples));
    }
    Ok(())
}

pub fn run(settings: &Settings) -> Result<Report, String> {
    let mut variants = Vec::new();
    for write in [false, true] {
        for threads in THREADS {
            lock_group(threads, write, settings, &mut variants);
        }
    }
    for write in [false, true] {
        for threads in THREADS {
            mem_group(threads, write, settings, &mut variants);
        }
    }
    nfs_group(Op::Read, settings, &mut variants)?;
    nfs_group(Op::Write, settings, &mut variants)?;
    let mut notes = costs_over_no_lock(&variants);
    notes.push(
        "after/before is each variant's median over the mutex FIFO's median in its group; \
         the seed's -90% corresponds to `mutex` over `no lock` at T=8 (0.10)"
            .to_string(),
    );
    notes.push(format!(
        "this machine has {} cores: groups marked oversubscribed have more threads than \
         cores and measure preempted lock holders, not many-core contention; `nfs` groups \
         use one connection per server worker, and the client shares the cores",
        crate::cores()
    ));
    Ok(Report {
        experiment: "rangelock",
        title: "scalable range locks (seed 003)",
        unit: "ops/s",
        higher_is_better: true,
        seed_claim: SEED_CLAIM,
        variants,
        context: Vec::new(),
        notes,
    })
}
