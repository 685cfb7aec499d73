//! `granary bench`: granary side by side with the userspace NFSv3 servers people use
//! (nfs-ganesha, go-nfs, nfsserve) and with the loopback limit of this machine, in one run.
//!
//! The bench owns the whole experiment: it starts granary from its own binary, starts and
//! stops the peers through the repository's `bench/peers/*.sh`, measures the limit itself, runs every
//! workload on every target interleaved (all targets for one workload and repeat, in an
//! order that rotates per repeat, then the next), and writes a JSON file with every
//! sample, a markdown report with ratios and spread, PNG plots, and a terminal table.
//!
//! Suites (`--suite`): `peers` (the default: granary's mem backend beside every peer),
//! `host` and `erofs` (granary's host and EROFS backends against nfs-ganesha FSAL VFS on
//! the same data, with the issues' goals per row; [`suites`], [`fixtures`]), and `object`
//! (granary's object backend with one head and two, beside the host backend and the
//! engines' own limits, with what each NFS operation cost the engines; [`object`]).
//!
//! Module map: [`gen`] the load generator core; [`wire`] one connection (NFS or limit);
//! [`workloads`] and [`iozone`] what is run; [`limit`] the loopback responder and stream;
//! [`targets`] starting and stopping servers; `harness::machine` machine, noise and the
//! load check;
//! [`sample`], [`report`] and [`plot`] the results; [`limits`] every bound.
//!
//! The load generator runs on one thread (a current-thread runtime), so the client costs
//! every target the same core; on a 2-core machine the server under test gets the other.
#![forbid(unsafe_code)]

mod fixtures;
mod gen;
mod iozone;
mod limit;
mod limits;
mod locks;
mod object;
mod pattern;
mod plot;
mod report;
mod sample;
mod suites;
mod targets;
mod v4;
mod wire;
mod workloads;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use client::ServerAddrs;
use gtime::Clock;
use harness::machine;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use self::fixtures::Fixtures;
use self::sample::{PhaseInfo, Sample};
use self::suites::Suite;
use self::targets::{Group, Target};
use self::workloads::WorkloadDef;

/// `granary bench` flags.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure: `peers` (granary's mem backend beside ganesha, go-nfs, nfsserve),
    /// `host` (`granary serve DIR` vs ganesha FSAL VFS on the same tmpfs and root-fs
    /// directories) or `erofs` (`granary serve IMAGE` vs ganesha FSAL VFS on the kernel's
    /// mount of the same lz4 image, cold and warm), or `object` (the object backend with
    /// one head and two, beside the host backend and PostgreSQL and S3 themselves; needs
    /// the engines of `scripts/object-env.sh start DIR`, `. DIR/env` first). host and
    /// erofs need root (erofs: mkfs.erofs, mount, drop_caches) and run ganesha unless
    /// --peers none.
    #[arg(long, value_enum, default_value = "peers")]
    suite: Suite,

    /// A short run (under 2 minutes): one repeat of short phases and small files, granary
    /// and the limit only unless --peers is given (the host and erofs suites keep ganesha).
    #[arg(long)]
    quick: bool,

    /// Peers to run beside granary, comma-separated: ganesha, gonfs, nfsserve, or none.
    /// Default: all in a full run, none with --quick; ganesha for the host and erofs suites.
    #[arg(long, value_name = "LIST")]
    peers: Option<String>,

    /// Benchmark a server that is already running instead of starting granary and peers:
    /// NAME=nfs://HOST/EXPORT?nfsport=P&mountport=Q (repeatable).
    #[arg(long = "target", value_name = "NAME=URL")]
    targets: Vec<String>,

    /// Output directory. Default: bench/results/<date>-bench/ (-bench-host/, -bench-erofs/
    /// for those suites).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,

    /// Workloads or phases to run, comma-separated: `getattr`, `rand4k/read-d32`, `seq/*`,
    /// `iozone/f4m-*` (a trailing * matches any suffix). Default: all.
    #[arg(long, value_name = "LIST")]
    workloads: Option<String>,

    /// Measured seconds of each timed phase.
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,

    /// Warm-up seconds before each timed phase.
    #[arg(long, value_name = "SECS")]
    warmup: Option<f64>,

    /// Repeats of every workload (median and spread are reported).
    #[arg(long, value_name = "N")]
    repeats: Option<u32>,

    /// Repeats of the iozone matrix (default 1: it is long and count-bound).
    #[arg(long, value_name = "N")]
    iozone_repeats: Option<u32>,

    /// Count mode: each timed phase does exactly N ops after its warm-up, instead of
    /// running for --duration.
    #[arg(long, value_name = "N")]
    count: Option<u64>,

    /// Seconds one call may wait for its reply before it fails as a timeout (at most 20,
    /// the default).
    #[arg(long, value_name = "SECS")]
    op_timeout_secs: Option<f64>,

    /// Do not measure the loopback limit.
    #[arg(long)]
    no_limit: bool,

    /// Do not draw PNG plots.
    #[arg(long)]
    no_plots: bool,

    /// The granary binary to benchmark (default: this one).
    #[arg(long, value_name = "PATH")]
    granary_bin: Option<PathBuf>,

    /// Object suite: also run one head of this other granary binary (target `baseline`,
    /// on the same file system), to compare two builds in one run.
    #[arg(long, value_name = "PATH")]
    baseline_bin: Option<PathBuf>,

    /// Directory of the peer scripts (default: the repository's bench/peers).
    #[arg(long, value_name = "DIR")]
    peers_dir: Option<PathBuf>,

    /// Size of the random-I/O file, MiB.
    #[arg(long, value_name = "MIB")]
    rand_file_mib: Option<u64>,

    /// Size of the sequential file, MiB (also the stream ceiling's length).
    #[arg(long, value_name = "MIB")]
    seq_file_mib: Option<u64>,

    /// Entries of the READDIRPLUS directory.
    #[arg(long, value_name = "N")]
    dir_entries: Option<u32>,

    /// Client counts of the connections workload, comma-separated (default 1,10,100,1000).
    #[arg(long, value_name = "LIST")]
    conns: Option<String>,

    /// iozone matrix file sizes in MiB, comma-separated (default 1,128; quick 4).
    #[arg(long, value_name = "LIST")]
    iozone_file_mib: Option<String>,

    /// Run even if the 1-minute load average is above the core count (the results are
    /// then marked BUSY). Without it such a run is refused, except with --quick.
    #[arg(long)]
    allow_busy: bool,
}

/// What a run does, resolved from the flags.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub suite: Suite,
    pub quick: bool,
    pub warmup: Duration,
    pub duration: Duration,
    pub count: Option<u64>,
    pub op_timeout: Duration,
    pub repeats: u32,
    pub iozone_repeats: u32,
    pub rand_file_bytes: u64,
    pub seq_file_bytes: u64,
    pub dir_entries: u32,
    pub lookup_names: u32,
    pub conn_steps: Vec<usize>,
    pub iozone_file_bytes: Vec<u64>,
    pub filters: Vec<String>,
    pub peers: Vec<String>,
    pub limit: bool,
    pub plots: bool,
    pub out: PathBuf,
}

impl Settings {
    fn from_args(a: &BenchArgs, date: &str) -> Result<Self, String> {
        let quick = a.quick;
        let secs = |v: Option<f64>, default: Duration, flag: &str| -> Result<Duration, String> {
            let d = match v {
                None => default,
                Some(s) if s.is_finite() && s >= 0.0 => Duration::from_secs_f64(s),
                Some(s) => return Err(format!("{flag}: {s} is not a duration")),
            };
            if d > limits::MAX_PHASE_DURATION {
                return Err(format!("{flag}: at most {:?}", limits::MAX_PHASE_DURATION));
            }
            Ok(d)
        };
        let (warmup, duration) = if quick {
            (limits::QUICK_WARMUP, limits::QUICK_DURATION)
        } else {
            (limits::FULL_WARMUP, limits::FULL_DURATION)
        };
        let repeats = a
            .repeats
            .unwrap_or(if quick { 1 } else { limits::FULL_REPEATS });
        if repeats == 0 || repeats > limits::MAX_REPEATS {
            return Err(format!("--repeats: 1 to {}", limits::MAX_REPEATS));
        }
        if let Some(n) = a.count {
            if n == 0 || n > limits::MAX_COUNT_OPS {
                return Err(format!("--count: 1 to {}", limits::MAX_COUNT_OPS));
            }
        }
        let mib = |v: Option<u64>, default: u64, flag: &str| -> Result<u64, String> {
            let bytes = v.map_or(default, |m| m << 20);
            if bytes == 0 || bytes > limits::SEQ_FILE_BYTES * 4 {
                return Err(format!(
                    "{flag}: 1 to {} MiB",
                    (limits::SEQ_FILE_BYTES * 4) >> 20
                ));
            }
            Ok(bytes)
        };
        let conn_steps = match &a.conns {
            Some(list) => parse_list(list, "--conns")?,
            None => vec![1, 10, 100, 1000],
        };
        if conn_steps
            .iter()
            .any(|&n| n == 0 || n > limits::MAX_CONNECTIONS)
        {
            return Err(format!("--conns: 1 to {}", limits::MAX_CONNECTIONS));
        }
        let iozone_file_bytes: Vec<u64> = match &a.iozone_file_mib {
            Some(list) => parse_list::<u64>(list, "--iozone-file-mib")?
                .into_iter()
                .map(|m| m << 20)
                .collect(),
            None if quick => limits::QUICK_IOZONE_FILE_BYTES.to_vec(),
            None => limits::IOZONE_FILE_BYTES.to_vec(),
        };
        if iozone_file_bytes
            .iter()
            .any(|&b| b == 0 || b > limits::SEQ_FILE_BYTES)
        {
            return Err("--iozone-file-mib: 1 to 1024".into());
        }
        let peers = match a.peers.as_deref() {
            Some("none" | "") => Vec::new(),
            _ if a.suite == Suite::Object => Vec::new(),
            Some(list) => list.split(',').map(|p| p.trim().to_owned()).collect(),
            None if !a.targets.is_empty() => Vec::new(),
            None if a.suite != Suite::Peers => vec!["ganesha".to_owned()],
            None if quick => Vec::new(),
            None => targets::PEERS.iter().map(|p| (*p).to_owned()).collect(),
        };
        if a.suite != Suite::Peers && peers.iter().any(|p| p != "ganesha") {
            return Err("--peers: the host and erofs suites compare with ganesha only".into());
        }
        if let Some(bad) = peers.iter().find(|p| !targets::PEERS.contains(&p.as_str())) {
            return Err(format!(
                "--peers: unknown peer {bad} (ganesha, gonfs, nfsserve)"
            ));
        }
        let (rand_default, seq_default) = file_defaults(a.suite, quick);
        let dir_entries = a.dir_entries.unwrap_or(match (a.suite, quick) {
            (Suite::Object, true) => limits::QUICK_OBJECT_DIR_ENTRIES,
            _ => limits::DIR_ENTRIES,
        });
        if dir_entries == 0 || dir_entries > 99_999 {
            return Err("--dir-entries: 1 to 99999".into());
        }
        Ok(Self {
            suite: a.suite,
            quick,
            warmup: secs(a.warmup, warmup, "--warmup")?,
            duration: secs(a.duration, duration, "--duration")?,
            count: a.count,
            op_timeout: secs(a.op_timeout_secs, limits::OP_TIMEOUT, "--op-timeout-secs")?
                .clamp(Duration::from_millis(10), limits::OP_TIMEOUT),
            repeats,
            iozone_repeats: a.iozone_repeats.unwrap_or(1).clamp(1, repeats),
            rand_file_bytes: mib(a.rand_file_mib, rand_default, "--rand-file-mib")?,
            seq_file_bytes: mib(a.seq_file_mib, seq_default, "--seq-file-mib")?,
            dir_entries,
            lookup_names: limits::LOOKUP_NAMES,
            conn_steps,
            iozone_file_bytes,
            filters: a
                .workloads
                .as_deref()
                .map(|l| l.split(',').map(|w| w.trim().to_owned()).collect())
                .unwrap_or_default(),
            peers,
            // The object suite's limits are the engines themselves (a target of its own).
            limit: !a.no_limit && a.suite != Suite::Object,
            plots: !a.no_plots,
            out: a
                .out
                .clone()
                .unwrap_or_else(|| PathBuf::from(default_out(a.suite, date))),
        })
    }

    /// Whether `phase` of `workload` passes the `--workloads` filter.
    fn selects(&self, workload: &str, phase: &str) -> bool {
        let key = format!("{workload}/{phase}");
        self.filters.is_empty()
            || self.filters.iter().any(|f| {
                let f = f.as_str();
                f == workload
                    || f == key
                    || f.strip_suffix('*')
                        .is_some_and(|prefix| key.starts_with(prefix) || workload == prefix)
            })
    }
}

/// The suite's random-I/O and sequential file sizes (the erofs suite's image file is the
/// sequential one).
fn file_defaults(suite: Suite, quick: bool) -> (u64, u64) {
    match (suite, quick) {
        (Suite::Peers, false) => (limits::RAND_FILE_BYTES, limits::SEQ_FILE_BYTES),
        (Suite::Peers, true) => (limits::QUICK_RAND_FILE_BYTES, limits::QUICK_SEQ_FILE_BYTES),
        (Suite::Host, false) => (limits::HOST_SMALL_FILE_BYTES, limits::HOST_BIG_FILE_BYTES),
        (Suite::Host, true) => (
            limits::QUICK_HOST_SMALL_FILE_BYTES,
            limits::QUICK_HOST_BIG_FILE_BYTES,
        ),
        (Suite::Erofs, false) => (limits::EROFS_FILE_BYTES, limits::EROFS_FILE_BYTES),
        (Suite::Erofs, true) => (
            limits::QUICK_EROFS_FILE_BYTES,
            limits::QUICK_EROFS_FILE_BYTES,
        ),
        (Suite::Object, false) => (
            limits::OBJECT_RAND_FILE_BYTES,
            limits::OBJECT_SEQ_FILE_BYTES,
        ),
        (Suite::Object, true) => (
            limits::QUICK_OBJECT_RAND_FILE_BYTES,
            limits::QUICK_OBJECT_SEQ_FILE_BYTES,
        ),
    }
}

fn default_out(suite: Suite, date: &str) -> String {
    match suite {
        Suite::Peers => format!("bench/results/{date}-bench"),
        Suite::Host => format!("bench/results/{date}-bench-host"),
        Suite::Erofs => format!("bench/results/{date}-bench-erofs"),
        Suite::Object => format!("bench/results/{date}-object"),
    }
}

fn parse_list<T: std::str::FromStr>(list: &str, flag: &str) -> Result<Vec<T>, String> {
    list.split(',')
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|_| format!("{flag}: {v:?} is not a number"))
        })
        .collect()
}

/// Runs the bench. Returns an error only if the bench itself could not run (no output
/// directory, granary would not start); failing peers and workloads are results.
///
/// # Errors
/// A message for the user.
pub fn run(args: &BenchArgs) -> Result<(), String> {
    let clock = gtime::SystemClock::shared();
    let date = machine::date(clock.now());
    let settings = Settings::from_args(args, &date)?;
    std::fs::create_dir_all(&settings.out)
        .map_err(|e| format!("cannot create {}: {e}", settings.out.display()))?;
    let plan = plan(&settings);
    if plan.is_empty() {
        return Err("--workloads selects nothing".into());
    }
    let load = machine::LoadCheck::now();
    load.refuse_unless(args.allow_busy || args.quick)?;
    if let Some(warning) = load.warning() {
        eprintln!("granary bench: {warning}");
    }
    let machine = machine::describe();
    let noise_start = machine::noise(clock.now());
    let began = clock.monotonic();
    let fixtures = make_fixtures(&settings)?;
    let mut targets = build_targets(args, &settings, fixtures.as_ref())?;
    let samples = run_plan(&clock, &settings, &plan, &mut targets)?;
    let groups = match settings.suite {
        Suite::Peers => [Group::Small, Group::Data],
        Suite::Host => [Group::HostTmpfs, Group::HostDisk],
        Suite::Erofs => [Group::ErofsCold, Group::ErofsCold],
        Suite::Object => [Group::Object, Group::Object],
    };
    let mut target_info = report::target_info(&targets, groups);
    for t in &mut targets {
        t.stop();
    }
    // Every server is stopped: the mount and the directories can go.
    drop(targets);
    let fixture_notes = fixtures
        .as_ref()
        .map(|f| f.notes.clone())
        .unwrap_or_default();
    drop(fixtures);
    if let Some(g) = target_info.iter_mut().find(|t| t.name == "granary") {
        g.notes.extend(fixture_notes);
    }
    let mut results = report::Results {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date,
        busy: load.warning(),
        load,
        machine,
        noise_start,
        noise_end: machine::noise(clock.now()),
        run_seconds: (clock.monotonic() - began).as_secs_f64(),
        settings,
        targets: target_info,
        workloads: plan
            .iter()
            .map(|(def, _)| report::WorkloadInfo {
                name: def.name,
                about: def.about,
            })
            .collect(),
        samples,
        goals: Vec::new(),
        cost_goals: Vec::new(),
        v4_ratios: Vec::new(),
    };
    results.goals = report::check_goals(&results);
    results.cost_goals = report::check_cost_goals(&results);
    results.v4_ratios = report::v4_ratios(&results);
    report::write_all(&results)?;
    if results.settings.plots {
        plot::draw_all(&results)?;
    }
    println!("{}", report::terminal_table(&results));
    println!("results: {}", results.settings.out.display());
    let granary_failed = results
        .samples
        .iter()
        .any(|s| s.target == "granary" && s.status == sample::Status::Failed);
    if granary_failed {
        eprintln!("granary bench: some granary phases failed (see report.md)");
    }
    Ok(())
}

/// The selected workloads and their selected phases, in run order.
fn plan(s: &Settings) -> Vec<(&'static WorkloadDef, Vec<PhaseInfo>)> {
    suites::workloads(s.suite)
        .iter()
        .filter(|def| !def.limit_only || s.limit)
        .map(|def| {
            let phases: Vec<PhaseInfo> = workloads::phases(def, s)
                .into_iter()
                .filter(|p| s.selects(def.name, &p.phase))
                .collect();
            (def, phases)
        })
        .filter(|(_, phases)| !phases.is_empty())
        .collect()
}

/// What the host and erofs suites serve (none for the peers suite).
fn make_fixtures(s: &Settings) -> Result<Option<Arc<Fixtures>>, String> {
    let f = match s.suite {
        Suite::Peers => return Ok(None),
        Suite::Host => Fixtures::host()?,
        Suite::Object => Fixtures::object()?,
        Suite::Erofs => {
            eprintln!(
                "granary bench: building the EROFS image ({} MiB file)",
                s.seq_file_bytes >> 20
            );
            Fixtures::erofs(s.seq_file_bytes)?
        }
    };
    for note in &f.notes {
        eprintln!("granary bench: {note}");
    }
    Ok(Some(Arc::new(f)))
}

fn build_targets(
    args: &BenchArgs,
    s: &Settings,
    fixtures: Option<&Arc<Fixtures>>,
) -> Result<Vec<Target>, String> {
    let mut out = Vec::new();
    if args.targets.is_empty() {
        let bin = match &args.granary_bin {
            Some(b) => b.clone(),
            None => std::env::current_exe().map_err(|e| format!("own binary: {e}"))?,
        };
        let build = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        let version = format!("{} ({build} build)", env!("CARGO_PKG_VERSION"));
        if s.suite == Suite::Object {
            out.extend(object_targets(&bin, &version, fixtures));
            if let Some(old) = &args.baseline_bin {
                let at = crate::fixtures::OBJECT_HEADS - 1;
                let name = format!("{} (baseline build)", old.display());
                let mut t = Target::object("baseline", old.clone(), at, 1, name);
                if let Some(f) = fixtures {
                    t = t.with_fixtures(Arc::clone(f));
                }
                out.insert(1, t);
            }
        } else {
            let mut g = Target::granary(bin, version);
            if let Some(f) = fixtures {
                g = g.with_fixtures(Arc::clone(f));
            }
            out.push(g);
        }
    }
    for spec in &args.targets {
        let (name, url) = spec
            .split_once('=')
            .ok_or_else(|| format!("--target {spec}: expected NAME=URL"))?;
        let addrs =
            ServerAddrs::parse(url).ok_or_else(|| format!("--target {spec}: not an nfs:// URL"))?;
        out.push(Target::external(name, addrs));
    }
    if !s.peers.is_empty() {
        let dir = args
            .peers_dir
            .clone()
            .or_else(targets::find_peers_dir)
            .ok_or(
                "cannot find the peer scripts, bench/peers (give --peers-dir or --peers none)",
            )?;
        let data_root = PathBuf::from(format!("/dev/shm/granary-bench-{}", std::process::id()));
        for name in targets::PEERS {
            if s.peers.iter().any(|p| p == name) {
                let script = dir.join(format!("{name}.sh"));
                let version = targets::peer_version(&dir, name);
                let mut p = Target::peer(name, script, version, &data_root);
                if let Some(f) = fixtures {
                    p = p.with_fixtures(Arc::clone(f));
                }
                out.push(p);
            }
        }
    }
    if s.limit {
        out.push(Target::limit().map_err(|e| format!("limit responder: {e}"))?);
    }
    Ok(out)
}

/// The object suite's targets: `granary` (the object backend, one head), `granary-2h`
/// (two heads of the same file system), `host` (the host backend on a tmpfs directory)
/// and `engines` (PostgreSQL and S3 without NFS).
fn object_targets(
    bin: &std::path::Path,
    version: &str,
    fixtures: Option<&Arc<Fixtures>>,
) -> Vec<Target> {
    let mut out = vec![
        Target::object("granary", bin.to_path_buf(), 0, 1, version.to_owned()),
        Target::object("granary-2h", bin.to_path_buf(), 1, 2, version.to_owned()),
        Target::granary(bin.to_path_buf(), version.to_owned()),
        Target::engines("PostgreSQL + S3 (tokio-postgres, object_store)".to_owned()),
    ];
    out[2].name = "host".to_owned();
    if let Some(f) = fixtures {
        out = out
            .into_iter()
            .map(|t| t.with_fixtures(Arc::clone(f)))
            .collect();
    }
    out
}

fn repeats_of(def: &WorkloadDef, s: &Settings) -> u32 {
    if def.name == "iozone" {
        s.iozone_repeats
    } else {
        s.repeats
    }
}

fn run_plan(
    clock: &Arc<dyn Clock>,
    s: &Settings,
    plan: &[(&'static WorkloadDef, Vec<PhaseInfo>)],
    targets: &mut [Target],
) -> Result<Vec<Sample>, String> {
    let runs: u64 = plan
        .iter()
        .map(|(def, _)| {
            let n = targets.iter().filter(|t| def.runs_on(t.is_limit())).count();
            u64::from(repeats_of(def, s)) * n as u64
        })
        .sum();
    let bar = ProgressBar::new(runs);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .map_err(|e| e.to_string())?
            .progress_chars("=> "),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let local = tokio::task::LocalSet::new();
    let mut samples = Vec::new();
    local.block_on(&rt, async {
        for (def, phases) in plan {
            for repeat in 0..repeats_of(def, s) {
                let n = targets.len();
                for k in 0..n {
                    let t = &mut targets[(k + repeat as usize) % n];
                    if !def.runs_on(t.is_limit()) {
                        continue;
                    }
                    let what = format!("{} #{} on {}", def.name, repeat + 1, t.name);
                    bar.set_message(what.clone());
                    let started = clock.monotonic();
                    samples.extend(run_one(clock, s, def, phases, t, repeat).await);
                    bar.inc(1);
                    if bar.is_hidden() {
                        // No terminal: a plain line per step, for logs.
                        let secs = (clock.monotonic() - started).as_secs_f64();
                        eprintln!("[{}/{runs}] {what}: {secs:.1} s", bar.position());
                    }
                }
            }
        }
    });
    bar.finish_and_clear();
    Ok(samples)
}

/// One workload, one repeat, one target.
async fn run_one(
    clock: &Arc<dyn Clock>,
    s: &Settings,
    def: &WorkloadDef,
    phases: &[PhaseInfo],
    t: &mut Target,
    repeat: u32,
) -> Vec<Sample> {
    let backend = t.backend(def.group);
    let name = t.name.clone();
    let failed = |why: String| {
        phases
            .iter()
            .map(|info| Sample::failed(info, &name, backend, repeat, &why))
            .collect::<Vec<_>>()
    };
    if let Err(why) = t.prepare(def.group) {
        return failed(format!("{} did not start: {why}", t.name));
    }
    let Some(addrs) = t.addrs().cloned() else {
        return failed(format!("{} has no address", t.name));
    };
    let env = workloads::Env {
        clock,
        settings: s,
        target: &t.name,
        backend,
        addrs,
        limit: t.is_limit(),
        repeat,
        heads: t.heads(),
        metrics: t.metrics(),
        engines: t.engine_config(),
        cpu: t.cpu_watch(),
    };
    let mut out = workloads::run(def, &env, phases).await;
    if !t.alive() {
        let why = format!("{} exited during {}", t.name, def.name);
        tracing::warn!("{why}");
        t.notes.push(why.clone());
        for sample in &mut out {
            sample.reason.get_or_insert_with(|| why.clone());
        }
        t.stop();
    }
    out
}
