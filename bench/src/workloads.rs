//! The workloads of issue 4, each written once against [`Conn`] so that it runs the same
//! against granary, every peer and the limit responder.
//!
//! A workload sets up what it needs in its own directory under the export root (named
//! after the workload, repeat and bench PID), runs its phases one after the other on one
//! target, and removes its large files so the next workload starts with free memory.
//! A setup failure fails every phase of that workload on that target, with the reason.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use client::{Nfs3Client, ServerAddrs};
use gtime::Clock;
use nfs3::nfs::{NfsFh3, StableHow};

use super::gen::{self, Done, Load, Measured, Stop};
use super::limits::{
    COMMIT_EVERY_WRITES, CONNECT_TIMEOUT, IO_CHUNK_BYTES, MAX_LIST_PAGES, SEQ_DEPTH, SETUP_DEPTH,
    SMALL_IO_BYTES,
};
use super::pattern;
use super::sample::{Metric, PhaseInfo, Sample};
use super::targets::Group;
use super::wire::{dir_entry_name, Conn, OpError};
use super::Settings;

/// How long a count- or size-bound step (setup, the sequential passes) may take before it
/// is abandoned: a 1 GiB pass at 10 MiB/s.
pub const SIZED_STEP_DEADLINE: Duration = Duration::from_secs(110);

/// One workload: its name (as `--workloads` takes it), which server configuration it
/// needs, and what it measures.
#[derive(Debug)]
pub struct WorkloadDef {
    pub name: &'static str,
    pub group: Group,
    /// Runs only against the limit (the raw TCP stream ceiling).
    pub limit_only: bool,
    /// Never runs against the limit (it answers NFSv3 calls only: the lock rows).
    pub servers_only: bool,
    pub about: &'static str,
}

/// Every workload, in run order: small-op ones first, then data ones, so ganesha switches
/// FSAL once per run.
pub const WORKLOADS: [WorkloadDef; 11] = [
    WorkloadDef {
        name: "null",
        group: Group::Small,
        limit_only: false,
        servers_only: false,
        about: "NULL calls: the RPC round trip with no file-system work",
    },
    WorkloadDef {
        name: "getattr",
        group: Group::Small,
        limit_only: false,
        servers_only: false,
        about: "GETATTR of the export root",
    },
    WorkloadDef {
        name: "meta",
        group: Group::Small,
        limit_only: false,
        servers_only: false,
        about: "CREATE + SETATTR + REMOVE cycles (ops = cycles), LOOKUP of existing names",
    },
    WorkloadDef {
        name: "readdirplus",
        group: Group::Small,
        limit_only: false,
        servers_only: false,
        about: "whole READDIRPLUS listings of a 10,000-entry directory (32 KiB pages)",
    },
    WorkloadDef {
        name: "conns",
        group: Group::Small,
        limit_only: false,
        servers_only: false,
        about: "N clients (connections) doing GETATTR at depth 1; how many were served",
    },
    WorkloadDef {
        name: "locks",
        group: Group::Small,
        limit_only: false,
        servers_only: true,
        about: "byte-range lock + unlock pairs: NFSv4.1 LOCK/LOCKU (new and existing \
                lock-owner), NLM LOCK/UNLOCK, two owners on one range or on two",
    },
    WorkloadDef {
        name: "v4",
        group: Group::Data,
        limit_only: false,
        servers_only: true,
        about: "NFSv4.1 against NFSv3 on the same server: GETATTR, LOOKUP, create (v3 \
                CREATE; v4 OPEN+CLOSE; then REMOVE), 4 KiB, 64 KiB and 1 MiB READ, 4 KiB and \
                1 MiB UNSTABLE WRITE (+COMMIT every 64), each phase over v3 then v4, with the \
                v4÷v3 ratio",
    },
    WorkloadDef {
        name: "rand4k",
        group: Group::Data,
        limit_only: false,
        servers_only: false,
        about: "4 KiB random WRITE (UNSTABLE + COMMIT every 64, FILE_SYNC) and verified READ",
    },
    WorkloadDef {
        name: "seq",
        group: Group::Data,
        limit_only: false,
        servers_only: false,
        about: "1 MiB sequential WRITE (UNSTABLE, COMMIT at the end) and verified READ",
    },
    WorkloadDef {
        name: "stream",
        group: Group::Data,
        limit_only: true,
        servers_only: false,
        about: "loopback TCP stream, 1 MiB writes: the bandwidth ceiling",
    },
    WorkloadDef {
        name: "iozone",
        group: Group::Data,
        limit_only: false,
        servers_only: false,
        about: "iozone -a -i0 -i1 -I style matrix: write/rewrite/read/reread per record size",
    },
];

/// The phases of `def` under `s`, before `--workloads` filtering.
#[must_use]
pub fn phases(def: &WorkloadDef, s: &Settings) -> Vec<PhaseInfo> {
    let p = |phase: String, metric, conns, depth| PhaseInfo {
        workload: def.name,
        phase,
        metric,
        conns,
        depth,
    };
    match def.name {
        "null" | "getattr" => [(1, 1), (64, 1), (1, 16), (64, 16)]
            .into_iter()
            .map(|(d, c)| p(format!("d{d}-c{c}"), Metric::Ops, c, d))
            .collect(),
        "meta" => vec![
            p("cycle-d1".into(), Metric::Ops, 1, 1),
            p("cycle-d16".into(), Metric::Ops, 1, 16),
            p("lookup-d1".into(), Metric::Ops, 1, 1),
            p("lookup-d16".into(), Metric::Ops, 1, 16),
        ],
        "readdirplus" => vec![p("list".into(), Metric::Entries, 1, 1)],
        "locks" => super::locks::phases(),
        "v4" => super::v4::phases(),
        "conns" => s
            .conn_steps
            .iter()
            .map(|&n| p(format!("c{n}"), Metric::Ops, n, 1))
            .collect(),
        "rand4k" => ["write-unstable", "write-filesync", "read"]
            .into_iter()
            .flat_map(|kind| [1, 32].map(|d| (kind, d)))
            .map(|(kind, d)| p(format!("{kind}-d{d}"), Metric::Ops, 1, d))
            .collect(),
        "seq" => ["write", "read"]
            .into_iter()
            .map(|k| p(k.into(), Metric::Mib, 1, SEQ_DEPTH))
            .collect(),
        "stream" => vec![p("tcp".into(), Metric::Mib, 1, 1)],
        "iozone" => super::iozone::phases(s)
            .into_iter()
            .map(|name| p(name, Metric::Kib, 1, 1))
            .collect(),
        _ => super::suites::phases(def),
    }
}

/// Everything a workload needs to run on one target.
pub struct Env<'a> {
    pub clock: &'a Arc<dyn Clock>,
    pub settings: &'a Settings,
    pub target: &'a str,
    pub backend: &'a str,
    pub addrs: ServerAddrs,
    pub limit: bool,
    pub repeat: u32,
    /// Every head's NFS address: connections alternate between them (the object suite's
    /// two-head target; one address elsewhere).
    pub heads: Vec<SocketAddr>,
    /// Every head's metrics address (object heads), to read what a phase cost.
    pub metrics: Vec<SocketAddr>,
    /// The engines themselves (the object suite's `engines` target).
    pub engines: Option<&'a backend_object::ObjectConfig>,
    /// The processes whose CPU time a pass of the object suite costs.
    pub cpu: super::object::CpuWatch,
}

impl WorkloadDef {
    /// Whether this workload runs on `target` (the limit, or a server).
    #[must_use]
    pub fn runs_on(&self, limit: bool) -> bool {
        if limit {
            !self.servers_only
        } else {
            !self.limit_only
        }
    }
}

impl Env<'_> {
    /// The export's root handle (MNT), or a stand-in for the limit.
    pub async fn root(&self) -> Result<NfsFh3, OpError> {
        if self.limit {
            return Ok(Conn::fake_handle(0));
        }
        let connect = Nfs3Client::connect(self.addrs.nfs, self.addrs.mount);
        let client = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(Ok(c)) => c.with_timeout(self.settings.op_timeout),
            Ok(Err(e)) => return Err(OpError::Connect(e.to_string())),
            Err(_) => return Err(OpError::Connect("MOUNT: no answer".into())),
        };
        client
            .mount(&self.addrs.export_path)
            .await
            .map_err(|e| OpError::Protocol(format!("MNT {}: {e}", self.addrs.export_path)))
    }

    /// One connection and a fresh directory for `workload` under the root.
    pub async fn workdir(&self, workload: &str) -> Result<(Conn, NfsFh3), OpError> {
        let root = self.root().await?;
        let conn = Conn::connect(self.addrs.nfs, self.limit, self.settings.op_timeout).await?;
        // The target's name too: the host suite's servers export the same directory.
        let name = format!(
            "gb-{workload}-{}-r{}-{}",
            self.target,
            self.repeat,
            std::process::id()
        );
        let dir = conn.mkdir(&root, name.as_bytes()).await?;
        Ok((conn, dir))
    }

    pub async fn connect(&self, n: usize) -> Vec<Result<Conn, OpError>> {
        if self.heads.len() <= 1 {
            return gen::connect_all(self.nfs_addr(), self.limit, n, self.settings.op_timeout)
                .await;
        }
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let at = self.heads[i % self.heads.len()];
            out.push(Conn::connect(at, self.limit, self.settings.op_timeout).await);
        }
        out
    }

    fn nfs_addr(&self) -> SocketAddr {
        self.addrs.nfs
    }

    /// The load of a timed phase: warm-up, then `--duration` or `--count`.
    #[must_use]
    pub fn timed(&self, info: &PhaseInfo) -> Load {
        let stop = match self.settings.count {
            Some(ops) => Stop::Count {
                ops,
                deadline: SIZED_STEP_DEADLINE,
                deadline_fails: true,
            },
            None => Stop::Time(self.settings.duration),
        };
        Load {
            conns: info.conns,
            depth: info.depth,
            warmup: self.settings.warmup,
            stop,
        }
    }

    #[must_use]
    pub fn sample(&self, info: &PhaseInfo, m: &Measured) -> Sample {
        Sample::from_measured(info, self.target, self.backend, self.repeat, m)
    }

    /// Failed samples for every phase, all for `why`.
    #[must_use]
    pub fn all_failed(&self, phases: &[PhaseInfo], why: &str) -> Vec<Sample> {
        phases
            .iter()
            .map(|info| Sample::failed(info, self.target, self.backend, self.repeat, why))
            .collect()
    }
}

/// One step of a sequential pass: the UNSTABLE WRITE of 1 MiB chunk `ticket` (its bytes
/// from [`pattern`]) or that chunk's verified READ.
pub async fn seq_chunk(
    conn: &Conn,
    fh: &NfsFh3,
    ticket: u64,
    write: bool,
) -> Result<Done, OpError> {
    let at = ticket * u64::from(IO_CHUNK_BYTES);
    if write {
        let data = pattern::fill(at, IO_CHUNK_BYTES as usize);
        conn.write(fh, at, data, StableHow::Unstable).await?;
    } else {
        conn.read(fh, at, IO_CHUNK_BYTES).await?;
    }
    Ok(Done {
        calls: 1,
        bytes: u64::from(IO_CHUNK_BYTES),
        entries: 0,
    })
}

/// A count-bound load with no warm-up (setup and size-bound passes).
#[must_use]
pub fn counted(conns: usize, depth: usize, ops: u64) -> Load {
    Load {
        conns,
        depth,
        warmup: Duration::ZERO,
        stop: Stop::Count {
            ops,
            deadline: SIZED_STEP_DEADLINE,
            deadline_fails: true,
        },
    }
}

/// Turns a setup measurement into an error if any op failed.
pub(super) fn setup_ok(what: &str, m: &Measured, expected: u64) -> Result<(), String> {
    if m.ops == expected && m.error_count() == 0 && m.aborted.is_none() {
        return Ok(());
    }
    Err(format!(
        "setup ({what}) failed after {} of {expected}: {}",
        m.ops,
        m.aborted
            .clone()
            .or_else(|| m.first_error.clone())
            .unwrap_or_default()
    ))
}

/// Runs `def`'s `phases` on the target in `env`.
pub async fn run(def: &WorkloadDef, env: &Env<'_>, phases: &[PhaseInfo]) -> Vec<Sample> {
    let result = match def.name {
        "null" | "getattr" => small_ops(env, def.name == "null", phases).await,
        "meta" => meta(env, phases).await,
        "readdirplus" => readdirplus(env, phases).await,
        "conns" => conns(env, phases).await,
        "locks" => super::locks::run(env, phases).await,
        "v4" => super::v4::run(env, phases).await,
        "rand4k" => rand4k(env, phases).await,
        "seq" => seq(env, phases).await,
        "stream" => Ok(stream(env, phases)),
        "iozone" => super::iozone::run(env, phases).await,
        name if super::object::is_object_workload(name) => {
            super::object::run(def, env, phases).await
        }
        name if super::suites::is_suite_workload(name) => {
            super::suites::run(def, env, phases).await
        }
        other => Err(format!("unknown workload {other}")),
    };
    result.unwrap_or_else(|why| env.all_failed(phases, &why))
}

async fn small_ops(env: &Env<'_>, null: bool, phases: &[PhaseInfo]) -> Result<Vec<Sample>, String> {
    // NULL needs no handle (and no MOUNT: it measures the RPC path alone).
    let root = if null {
        Conn::fake_handle(0)
    } else {
        env.root().await.map_err(|e| e.to_string())?
    };
    let mut out = Vec::new();
    for info in phases {
        let conns = env.connect(info.conns).await;
        let fh = Rc::new(root.clone());
        let m = gen::run(env.clock, env.timed(info), conns, move |ctx| {
            let fh = Rc::clone(&fh);
            async move {
                if null {
                    ctx.conn.null().await?;
                } else {
                    ctx.conn.getattr(&fh).await?;
                }
                Ok(Done::calls(1))
            }
        })
        .await;
        out.push(env.sample(info, &m));
    }
    Ok(out)
}

fn lookup_name(i: u64) -> String {
    format!("l{i:05}")
}

async fn meta(env: &Env<'_>, phases: &[PhaseInfo]) -> Result<Vec<Sample>, String> {
    let (conn, dir) = env.workdir("meta").await.map_err(|e| e.to_string())?;
    let dir = Rc::new(dir);
    let names = u64::from(env.settings.lookup_names);
    let d = Rc::clone(&dir);
    let m = gen::run(
        env.clock,
        counted(1, SETUP_DEPTH, names),
        vec![Ok(conn)],
        move |ctx| {
            let d = Rc::clone(&d);
            async move {
                ctx.conn
                    .create(&d, lookup_name(ctx.ticket).as_bytes())
                    .await?;
                Ok(Done::calls(1))
            }
        },
    )
    .await;
    setup_ok("CREATE of the LOOKUP names", &m, names)?;
    let mut out = Vec::new();
    for info in phases {
        let conns = env.connect(info.conns).await;
        let d = Rc::clone(&dir);
        let m = if info.phase.starts_with("cycle") {
            gen::run(env.clock, env.timed(info), conns, move |ctx| {
                let d = Rc::clone(&d);
                async move {
                    let name = format!("c{}", ctx.ticket);
                    let fh = ctx.conn.create(&d, name.as_bytes()).await?;
                    ctx.conn.chmod(&fh, 0o600).await?;
                    ctx.conn.remove(&d, name.as_bytes()).await?;
                    Ok(Done::calls(3))
                }
            })
            .await
        } else {
            gen::run(env.clock, env.timed(info), conns, move |ctx| {
                let d = Rc::clone(&d);
                async move {
                    let name = lookup_name(ctx.rand % names);
                    ctx.conn.lookup(&d, name.as_bytes()).await?;
                    Ok(Done::calls(1))
                }
            })
            .await
        };
        out.push(env.sample(info, &m));
    }
    Ok(out)
}

async fn readdirplus(env: &Env<'_>, phases: &[PhaseInfo]) -> Result<Vec<Sample>, String> {
    let (conn, dir) = env
        .workdir("readdirplus")
        .await
        .map_err(|e| e.to_string())?;
    let dir = Rc::new(dir);
    let entries = env.settings.dir_entries;
    let d = Rc::clone(&dir);
    let setup = counted(1, SETUP_DEPTH, u64::from(entries));
    let m = gen::run(env.clock, setup, vec![Ok(conn)], move |ctx| {
        let d = Rc::clone(&d);
        async move {
            let i = u32::try_from(ctx.ticket).unwrap_or(u32::MAX);
            ctx.conn.create(&d, dir_entry_name(i).as_bytes()).await?;
            Ok(Done::calls(1))
        }
    })
    .await;
    setup_ok("CREATE of the directory entries", &m, u64::from(entries))?;
    let mut out = Vec::new();
    for info in phases {
        let conns = env.connect(info.conns).await;
        let d = Rc::clone(&dir);
        let m = gen::run(env.clock, env.timed(info), conns, move |ctx| {
            let d = Rc::clone(&d);
            async move { list_all(&ctx.conn, &d, entries).await }
        })
        .await;
        out.push(env.sample(info, &m));
    }
    Ok(out)
}

/// One whole listing; checks (against a real server) that it has every entry once.
pub(super) async fn list_all(conn: &Conn, dir: &NfsFh3, expected: u32) -> Result<Done, OpError> {
    let (mut cookie, mut verf) = (0u64, [0u8; 8]);
    let mut done = Done::default();
    loop {
        let page = conn.readdirplus(dir, cookie, verf, expected).await?;
        done.calls += 1;
        done.entries += page
            .names
            .iter()
            .filter(|n| n.as_ref() != b"." && n.as_ref() != b"..")
            .count() as u64;
        if page.eof {
            break;
        }
        if page.names.is_empty() || done.calls > u64::from(MAX_LIST_PAGES) {
            return Err(OpError::Protocol(format!(
                "READDIRPLUS made no progress after {} pages",
                done.calls
            )));
        }
        cookie = page.cookie;
        verf = page.cookieverf;
    }
    if conn.verifies() && done.entries != u64::from(expected) {
        return Err(OpError::Verify(format!(
            "listed {} entries, the directory has {expected}",
            done.entries
        )));
    }
    Ok(done)
}

async fn conns(env: &Env<'_>, phases: &[PhaseInfo]) -> Result<Vec<Sample>, String> {
    let root = Rc::new(env.root().await.map_err(|e| e.to_string())?);
    let mut out = Vec::new();
    for info in phases {
        let conns = env.connect(info.conns).await;
        let fh = Rc::clone(&root);
        let m = gen::run(env.clock, env.timed(info), conns, move |ctx| {
            let fh = Rc::clone(&fh);
            async move {
                ctx.conn.getattr(&fh).await?;
                Ok(Done::calls(1))
            }
        })
        .await;
        out.push(env.sample(info, &m).with_clients(&m));
    }
    Ok(out)
}

/// Creates `name` in `dir` and fills it with the pattern, 1 MiB FILE_SYNC WRITEs
/// pipelined (FILE_SYNC so that servers without COMMIT can still be read from).
pub(super) async fn make_file(
    env: &Env<'_>,
    conn: Conn,
    dir: &NfsFh3,
    name: &str,
    size_bytes: u64,
) -> Result<NfsFh3, String> {
    let fh = conn
        .create(dir, name.as_bytes())
        .await
        .map_err(|e| format!("setup (CREATE {name}) failed: {e}"))?;
    let chunks = size_bytes.div_ceil(u64::from(IO_CHUNK_BYTES));
    let f = Rc::new(fh.clone());
    let load = counted(1, SEQ_DEPTH, chunks);
    let m = gen::run(env.clock, load, vec![Ok(conn)], move |ctx| {
        let f = Rc::clone(&f);
        async move {
            let at = ctx.ticket * u64::from(IO_CHUNK_BYTES);
            let len = (size_bytes - at).min(u64::from(IO_CHUNK_BYTES));
            let data = pattern::fill(at, usize::try_from(len).unwrap_or(0));
            ctx.conn.write(&f, at, data, StableHow::FileSync).await?;
            Ok(Done::calls(1))
        }
    })
    .await;
    setup_ok(&format!("writing {name}"), &m, chunks)?;
    Ok(fh)
}

async fn rand4k(env: &Env<'_>, phases: &[PhaseInfo]) -> Result<Vec<Sample>, String> {
    let (conn, dir) = env.workdir("rand4k").await.map_err(|e| e.to_string())?;
    let size = env.settings.rand_file_bytes;
    let fh = Rc::new(make_file(env, conn.clone(), &dir, "data", size).await?);
    let blocks = size / u64::from(SMALL_IO_BYTES);
    let mut out = Vec::new();
    for info in phases {
        let conns = env.connect(info.conns).await;
        let f = Rc::clone(&fh);
        let kind = info
            .phase
            .rsplit_once('-')
            .map_or("", |(k, _)| k)
            .to_owned();
        let m = gen::run(env.clock, env.timed(info), conns, move |ctx| {
            let f = Rc::clone(&f);
            let kind = kind.clone();
            async move {
                let at = (ctx.rand % blocks) * u64::from(SMALL_IO_BYTES);
                let bytes = u64::from(SMALL_IO_BYTES);
                if kind == "read" {
                    ctx.conn.read(&f, at, SMALL_IO_BYTES).await?;
                    return Ok(Done {
                        calls: 1,
                        bytes,
                        entries: 0,
                    });
                }
                let data = pattern::fill(at, SMALL_IO_BYTES as usize);
                let stable = if kind == "write-filesync" {
                    StableHow::FileSync
                } else {
                    StableHow::Unstable
                };
                ctx.conn.write(&f, at, data, stable).await?;
                let mut calls = 1;
                if stable == StableHow::Unstable && (ctx.worker_seq + 1) % COMMIT_EVERY_WRITES == 0
                {
                    ctx.conn.commit(&f).await?;
                    calls += 1;
                }
                Ok(Done {
                    calls,
                    bytes,
                    entries: 0,
                })
            }
        })
        .await;
        out.push(env.sample(info, &m));
    }
    remove_quietly(&conn, &dir, "data").await;
    Ok(out)
}

/// Removes a large file so its memory is free for the next workload; a failure only
/// leaves memory in use on a server the bench stops at the end.
pub async fn remove_quietly(conn: &Conn, dir: &NfsFh3, name: &str) {
    if let Err(e) = conn.remove(dir, name.as_bytes()).await {
        tracing::debug!(error = %e, name, "cleanup REMOVE failed");
    }
}

async fn seq(env: &Env<'_>, phases: &[PhaseInfo]) -> Result<Vec<Sample>, String> {
    let (conn, dir) = env.workdir("seq").await.map_err(|e| e.to_string())?;
    let size = env.settings.seq_file_bytes;
    let fh = if phases.iter().any(|p| p.phase == "write") {
        conn.create(&dir, b"data")
            .await
            .map_err(|e| format!("setup (CREATE) failed: {e}"))?
    } else {
        // The read pass alone still needs the file.
        make_file(env, conn.clone(), &dir, "data", size).await?
    };
    let chunks = size / u64::from(IO_CHUNK_BYTES);
    let mut out = Vec::new();
    for info in phases {
        let f = Rc::new(fh.clone());
        let write = info.phase == "write";
        let conns = vec![Ok(conn.clone())];
        let mut m = gen::run(
            env.clock,
            counted(1, SEQ_DEPTH, chunks),
            conns,
            move |ctx| {
                let f = Rc::clone(&f);
                async move { seq_chunk(&ctx.conn, &f, ctx.ticket, write).await }
            },
        )
        .await;
        if write && m.ops == chunks {
            // The pass ends when the data is stable: its COMMIT is part of the time.
            let started = env.clock.monotonic();
            match conn.commit(&fh).await {
                Ok(_) => m.calls += 1,
                Err(e) => {
                    m.add_error(&e);
                    m.aborted = Some(format!("the closing COMMIT failed: {e}"));
                }
            }
            m.elapsed += env.clock.monotonic() - started;
        }
        out.push(env.sample(info, &m));
    }
    remove_quietly(&conn, &dir, "data").await;
    Ok(out)
}

/// The loopback TCP stream ceiling (limit only), as many bytes as the sequential file.
fn stream(env: &Env<'_>, phases: &[PhaseInfo]) -> Vec<Sample> {
    let bytes = env.settings.seq_file_bytes;
    phases
        .iter()
        .map(|info| {
            let mut m = Measured::failed(&OpError::Protocol(String::new()), 1);
            m.errors.clear();
            m.first_error = None;
            match super::limit::stream_ceiling(env.clock, bytes) {
                Ok(elapsed) => {
                    m.elapsed = elapsed;
                    m.bytes = bytes;
                    m.ops = bytes / super::limits::STREAM_CHUNK_BYTES as u64;
                    m.calls = m.ops;
                }
                Err(e) => m.add_error(&OpError::Protocol(e.to_string())),
            }
            env.sample(info, &m)
        })
        .collect()
}
