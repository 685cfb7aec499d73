//! The `host` and `erofs` suites (`granary bench --suite host|erofs`): granary's host and
//! EROFS backends against nfs-ganesha FSAL VFS serving the same data, with the loopback
//! limit of each phase, and the goals of issues 12 and 14 checked per row.
//!
//! - `host-tmpfs`, `host-disk`: `granary serve DIR` and ganesha exporting the same
//!   directory (a tmpfs one, then one on the root file system); GETATTR, CREATE, 4 KiB
//!   random WRITE and READ, 1 MiB WRITE and READ, all at [`SUITE_CONNS`] connections ×
//!   [`SUITE_DEPTH`] calls in flight. WRITEs are UNSTABLE and each WRITE phase ends with a
//!   COMMIT of its file, counted in the phase's time (the data is stable when it ends).
//! - `erofs-seq1m`, `erofs-rand4k`: `granary serve IMAGE` and ganesha exporting the
//!   kernel's loop mount of the same lz4 image. Each workload starts cold (server
//!   restarted, page cache dropped, see [`super::targets::Group::ErofsCold`]): `cold` is
//!   the first pass (one whole sequential pass; a fixed count of random READs), `warm` the
//!   same again right after (a second pass; a timed phase with warm-up).

use std::rc::Rc;

use bytes::Bytes;
use clap::ValueEnum;
use nfs3::nfs::{NfsFh3, StableHow};
use serde::Serialize;

use super::fixtures::EROFS_FILE;
use super::gen::{self, Done, Measured};
use super::limits::{
    EROFS_COLD_RAND_OPS, IO_CHUNK_BYTES, SEQ_DEPTH, SMALL_IO_BYTES, SUITE_CONNS, SUITE_DEPTH,
};
use super::pattern;
use super::sample::{Metric, PhaseInfo, Sample};
use super::targets::Group;
use super::wire::{Conn, OpError};
use super::workloads::{counted, make_file, remove_quietly, Env, WorkloadDef};

/// What `granary bench` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Suite {
    /// granary (mem backend) beside the peers and the limit: the original workloads.
    Peers,
    /// granary's host backend vs ganesha FSAL VFS on the same directories (issue 12).
    Host,
    /// granary's erofs backend vs ganesha FSAL VFS on the kernel's mount (issue 14).
    Erofs,
    /// granary's object backend, one head and two, beside the host backend and the
    /// engines' own limits (issue 29).
    Object,
}

pub const HOST_WORKLOADS: [WorkloadDef; 2] = [
    WorkloadDef {
        name: "host-tmpfs",
        group: Group::HostTmpfs,
        limit_only: false,
        servers_only: false,
        about: "the same tmpfs directory served by each server, 4 connections × 64 in flight",
    },
    WorkloadDef {
        name: "host-disk",
        group: Group::HostDisk,
        limit_only: false,
        servers_only: false,
        about: "the same root-fs directory served by each server, 4 connections × 64 in flight",
    },
];

pub const EROFS_WORKLOADS: [WorkloadDef; 2] = [
    WorkloadDef {
        name: "erofs-seq1m",
        group: Group::ErofsCold,
        limit_only: false,
        servers_only: false,
        about: "1 MiB sequential READ passes over the image's file (1 connection × 16), \
                cold then warm",
    },
    WorkloadDef {
        name: "erofs-rand4k",
        group: Group::ErofsCold,
        limit_only: false,
        servers_only: false,
        about: "4 KiB random READ of the image's file (4 connections × 64), cold then warm",
    },
];

const HOST_PHASES: [&str; 6] = [
    "getattr", "create", "write4k", "read4k", "write1m", "read1m",
];

/// A goal of the issues: granary ÷ `against` at least `min` (median over repeats).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Goal {
    pub against: &'static str,
    pub min: f64,
}

/// The workloads of `suite`, in run order.
#[must_use]
pub fn workloads(suite: Suite) -> &'static [WorkloadDef] {
    match suite {
        Suite::Peers => &super::workloads::WORKLOADS,
        Suite::Host => &HOST_WORKLOADS,
        Suite::Erofs => &EROFS_WORKLOADS,
        Suite::Object => &super::object::OBJECT_WORKLOADS,
    }
}

#[must_use]
pub fn is_suite_workload(name: &str) -> bool {
    HOST_WORKLOADS
        .iter()
        .chain(&EROFS_WORKLOADS)
        .any(|d| d.name == name)
}

/// The goals of one phase (issue 12 for the host rows, issue 14 for the erofs rows).
#[must_use]
pub fn goals(workload: &str, phase: &str) -> Vec<Goal> {
    let g = |against, min| Goal { against, min };
    if workload.starts_with("host-") {
        return match phase {
            "getattr" | "create" | "write4k" | "read4k" => vec![g("ganesha", 3.0)],
            "write1m" | "read1m" => vec![g("ganesha", 1.3), g("limit", 0.8)],
            _ => Vec::new(),
        };
    }
    if workload.starts_with("erofs-") {
        return vec![g("ganesha", 1.0)];
    }
    if workload.starts_with("object-") {
        return super::object::goals(workload, phase);
    }
    Vec::new()
}

/// The phases of a suite workload.
#[must_use]
pub fn phases(def: &WorkloadDef) -> Vec<PhaseInfo> {
    let p = |phase: &str, metric, conns, depth| PhaseInfo {
        workload: def.name,
        phase: phase.to_owned(),
        metric,
        conns,
        depth,
    };
    match def.name {
        "host-tmpfs" | "host-disk" => HOST_PHASES
            .iter()
            .map(|&ph| {
                let metric = if ph.ends_with("1m") {
                    Metric::Mib
                } else {
                    Metric::Ops
                };
                p(ph, metric, SUITE_CONNS, SUITE_DEPTH)
            })
            .collect(),
        "erofs-seq1m" => ["cold", "warm"]
            .map(|ph| p(ph, Metric::Mib, 1, SEQ_DEPTH))
            .to_vec(),
        "erofs-rand4k" => ["cold", "warm"]
            .map(|ph| p(ph, Metric::Ops, SUITE_CONNS, SUITE_DEPTH))
            .to_vec(),
        name if super::object::is_object_workload(name) => super::object::phases(def),
        _ => Vec::new(),
    }
}

/// Runs a suite workload's `phases` on the target in `env`.
///
/// # Errors
/// Setup failed (every phase then fails with the reason).
pub async fn run(
    def: &WorkloadDef,
    env: &Env<'_>,
    phases: &[PhaseInfo],
) -> Result<Vec<Sample>, String> {
    if def.name.starts_with("host-") {
        host(env, phases).await
    } else {
        erofs(env, def.name == "erofs-seq1m", phases).await
    }
}

/// A file of the host workload: its handle, size and content (sliced per WRITE).
struct File {
    fh: Rc<NfsFh3>,
    data: Bytes,
}

async fn host(env: &Env<'_>, phases: &[PhaseInfo]) -> Result<Vec<Sample>, String> {
    let (conn, dir) = env.workdir("host").await.map_err(|e| e.to_string())?;
    let wants = |suffix: &str| phases.iter().any(|p| p.phase.ends_with(suffix));
    let mut files: Vec<(&str, Option<File>)> = Vec::new();
    for (name, suffix, bytes) in [
        ("small", "4k", env.settings.rand_file_bytes),
        ("big", "1m", env.settings.seq_file_bytes),
    ] {
        let file = if wants(suffix) {
            let fh = make_file(env, conn.clone(), &dir, name, bytes).await?;
            let data = pattern::fill(0, usize::try_from(bytes).unwrap_or(0));
            Some(File {
                fh: Rc::new(fh),
                data,
            })
        } else {
            None
        };
        files.push((name, file));
    }
    let creates = if wants("create") {
        Some(Rc::new(
            conn.mkdir(&dir, b"creates")
                .await
                .map_err(|e| format!("setup (MKDIR creates) failed: {e}"))?,
        ))
    } else {
        None
    };
    let dir = Rc::new(dir);
    let mut out = Vec::new();
    for info in phases {
        let file = if info.phase.ends_with("4k") {
            files[0].1.as_ref()
        } else {
            files[1].1.as_ref()
        };
        let m = match info.phase.as_str() {
            "getattr" => getattr(env, info, Rc::clone(&dir)).await,
            "create" => match &creates {
                Some(d) => create(env, info, Rc::clone(d)).await,
                None => continue,
            },
            ph => match file {
                Some(f) => io(env, info, &conn, f, ph.starts_with("write")).await,
                None => continue,
            },
        };
        out.push(env.sample(info, &m));
    }
    for (name, file) in &files {
        if file.is_some() {
            remove_quietly(&conn, &dir, name).await;
        }
    }
    Ok(out)
}

async fn getattr(env: &Env<'_>, info: &PhaseInfo, dir: Rc<NfsFh3>) -> Measured {
    let conns = env.connect(info.conns).await;
    gen::run(env.clock, env.timed(info), conns, move |ctx| {
        let d = Rc::clone(&dir);
        async move {
            ctx.conn.getattr(&d).await?;
            Ok(Done::calls(1))
        }
    })
    .await
}

/// CREATE of new names (the files stay; the fixtures go at the end of the run).
async fn create(env: &Env<'_>, info: &PhaseInfo, dir: Rc<NfsFh3>) -> Measured {
    let conns = env.connect(info.conns).await;
    gen::run(env.clock, env.timed(info), conns, move |ctx| {
        let d = Rc::clone(&dir);
        async move {
            let name = format!("c{}", ctx.ticket);
            ctx.conn.create(&d, name.as_bytes()).await?;
            Ok(Done::calls(1))
        }
    })
    .await
}

/// 4 KiB random or 1 MiB cyclic WRITE (UNSTABLE, closing COMMIT) or verified READ.
async fn io(env: &Env<'_>, info: &PhaseInfo, conn: &Conn, f: &File, write: bool) -> Measured {
    let small = info.phase.ends_with("4k");
    let len = if small {
        SMALL_IO_BYTES
    } else {
        IO_CHUNK_BYTES
    };
    let blocks = (f.data.len() / len as usize).max(1) as u64;
    let conns = env.connect(info.conns).await;
    let (fh, data) = (Rc::clone(&f.fh), f.data.clone());
    let mut m = gen::run(env.clock, env.timed(info), conns, move |ctx| {
        let (fh, data) = (Rc::clone(&fh), data.clone());
        async move {
            let block = if small {
                ctx.rand % blocks
            } else {
                ctx.ticket % blocks
            };
            let at = block * u64::from(len);
            let start = usize::try_from(at).unwrap_or(0);
            if write {
                let piece = data.slice(start..start + len as usize);
                ctx.conn.write(&fh, at, piece, StableHow::Unstable).await?;
            } else {
                ctx.conn.read(&fh, at, len).await?;
            }
            Ok(Done {
                calls: 1,
                bytes: u64::from(len),
                entries: 0,
            })
        }
    })
    .await;
    if write && m.ops > 0 {
        // The phase ends when its data is stable: the COMMIT is part of the time.
        let started = env.clock.monotonic();
        match conn.commit(&f.fh).await {
            Ok(_) => m.calls += 1,
            Err(e) => {
                m.add_error(&e);
                m.aborted = Some(format!("the closing COMMIT failed: {e}"));
            }
        }
        m.elapsed += env.clock.monotonic() - started;
    }
    m
}

async fn erofs(env: &Env<'_>, seq: bool, phases: &[PhaseInfo]) -> Result<Vec<Sample>, String> {
    let root = env.root().await.map_err(|e| e.to_string())?;
    let conn = Conn::connect(env.addrs.nfs, env.limit, env.settings.op_timeout)
        .await
        .map_err(|e| e.to_string())?;
    let fh = conn
        .lookup(&root, EROFS_FILE.as_bytes())
        .await
        .map_err(|e| format!("setup (LOOKUP {EROFS_FILE}) failed: {e}"))?;
    let fh = Rc::new(fh);
    let size = env.settings.seq_file_bytes;
    let mut out = Vec::new();
    for info in phases {
        let conns = env.connect(info.conns).await;
        let cold = info.phase == "cold";
        let f = Rc::clone(&fh);
        let m = if seq {
            let chunks = size / u64::from(IO_CHUNK_BYTES);
            gen::run(
                env.clock,
                counted(1, SEQ_DEPTH, chunks),
                conns,
                move |ctx| {
                    let at = ctx.ticket * u64::from(IO_CHUNK_BYTES);
                    read_text(ctx.conn, Rc::clone(&f), at, IO_CHUNK_BYTES)
                },
            )
            .await
        } else {
            let load = if cold {
                counted(info.conns, info.depth, EROFS_COLD_RAND_OPS)
            } else {
                env.timed(info)
            };
            let blocks = size / u64::from(SMALL_IO_BYTES);
            gen::run(env.clock, load, conns, move |ctx| {
                let at = (ctx.rand % blocks) * u64::from(SMALL_IO_BYTES);
                read_text(ctx.conn, Rc::clone(&f), at, SMALL_IO_BYTES)
            })
            .await
        };
        out.push(env.sample(info, &m));
    }
    Ok(out)
}

/// One READ of the image's file, checked against the compressible pattern.
async fn read_text(conn: Conn, fh: Rc<NfsFh3>, at: u64, len: u32) -> Result<Done, OpError> {
    if let Some(data) = conn.read_data(&fh, at, len).await? {
        pattern::text_verify(at, &data).map_err(OpError::Verify)?;
    }
    Ok(Done {
        calls: 1,
        bytes: u64::from(len),
        entries: 0,
    })
}
