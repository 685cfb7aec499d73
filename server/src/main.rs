//! `granary`: the command-line entry point. `granary serve` is always built;
//! `granary bench` and `granary lab` only with the `lab` feature (`--features lab`), so the
//! server binary links none of their plotting, font, image, histogram and progress-bar
//! crates (`cargo tree -e normal -p granary` lists none; `scripts/test-all.sh` checks it).
// `unsafe` only in `keep_freed_memory` (one call into the allocator's C API).
#![deny(unsafe_code)]

use serve::config;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// mimalloc keeps freed memory in per-thread heaps for reuse. With glibc's allocator every
/// 1 MiB READ or WRITE buffer came from pages a thread arena had just handed back to the
/// kernel (`madvise`), so each large request paid about 256 page faults and page clears:
/// a quarter of the server's CPU time in 1 MiB sequential READ, which went from about 900
/// to 2,070 MiB/s with this allocator (same client, same run).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

// mimalloc's C API (linked through the `mimalloc` crate, whose build compiles all of it).
#[allow(unsafe_code)]
extern "C" {
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` in mimalloc 3's `mi_option_e` (libmimalloc-sys 0.1.49 names no
/// constant for it); its default is 1,000 ms, which `keep_freed_memory` checks.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
const MI_PURGE_DELAY_DEFAULT_MS: std::ffi::c_long = 1000;

/// Tells mimalloc never to give freed memory back to the kernel (purge delay -1; its default
/// hands back what stayed free for a second). Memory handed back is cleared by the kernel
/// when it is faulted in again, and these are large buffers: an object head's GET bodies
/// (hyper's `BytesMut::reserve`, `recv` into them) and the NFS WRITEs' request buffers.
/// In `granary bench --suite object`'s 1 MiB sequential passes (256 MiB file, 3 repeats,
/// release build) a head took 23,848 page faults with the default and 719 without purging,
/// its resident size flat all along (freed, handed back, faulted in again), and 1.18 s of
/// CPU per GiB moved instead of 1.26 (1.24 instead of 1.65 with a 128 MiB file; see
/// bench/results/2026-11-28-object-seq-1). What the
/// process holds is bounded by its own limits (caches, buffered writes, in-flight requests:
/// each crate's `limits.rs`), so keeping its peak costs no more than that peak. A
/// `MIMALLOC_PURGE_DELAY` in the environment is left to rule.
#[allow(unsafe_code)]
fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: both functions only read or store one entry of mimalloc's option table
    // (an atomic); any option index below `_mi_option_last` is valid, and 15 is.
    let before = unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) };
    if before != MI_PURGE_DELAY_DEFAULT_MS {
        // Another mimalloc whose option 15 is something else: left alone (the test
        // `freed_memory_is_kept` fails on such a build).
        return;
    }
    // SAFETY: as above.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}

/// A userspace NFS server: NFSv3 + MOUNT over TCP.
#[derive(Debug, Parser)]
#[command(name = "granary", version, about, long_about = None)]
struct Cli {
    /// Log filter, RUST_LOG syntax (e.g. "info", "debug", "rpc=debug,info").
    /// The RUST_LOG environment variable is used when this is not given.
    #[arg(long, global = true)]
    log: Option<String>,

    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Serve exports over NFSv3. With no arguments: an empty in-memory export "/" on
    /// 127.0.0.1:2049.
    Serve(Box<ServeArgs>),
    /// Create the schema and root directory of each object export (backend = "object") in
    /// a config file. A head's first start does the same; running it again changes nothing.
    Format(FormatArgs),
    /// Benchmark granary beside the peer NFS servers and the loopback limit.
    #[cfg(feature = "lab")]
    Bench(Box<bench::BenchArgs>),
    /// Re-run the seed designs' experiments, before and after, on this machine.
    #[cfg(feature = "lab")]
    Lab(lab::LabArgs),
    /// Benchmark granary beside the peer NFS servers (not in this build: needs
    /// `--features lab`).
    #[cfg(not(feature = "lab"))]
    Bench(NotBuilt),
    /// Re-run the seed designs' experiments (not in this build: needs `--features lab`).
    #[cfg(not(feature = "lab"))]
    Lab(NotBuilt),
}

/// The arguments of `granary bench` or `granary lab` in a build without them, taken as
/// they come so that the one message says how to get a build that has them.
#[cfg(not(feature = "lab"))]
#[derive(Debug, Args)]
struct NotBuilt {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    args: Vec<String>,
}

/// Why `granary bench` and `granary lab` are missing, and the commands that build them.
#[cfg(not(feature = "lab"))]
fn not_built(what: &str) -> String {
    format!(
        "`granary {what}` is not in this build: the server binary leaves out the benchmark's \
         plotting, font, image, histogram and progress-bar crates. Build granary with the \
         `lab` feature: `cargo build --release --features lab` and then \
         `target/release/granary {what} ...`, or `cargo run --release --features lab -- {what} ...`"
    )
}

#[derive(Debug, Args)]
struct FormatArgs {
    /// TOML file whose object exports to format (see docs/OBJECT.md).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// What to export as "/": a directory (the host backend) or an EROFS image file
    /// (read-only). Without it: an empty in-memory file system (or the exports of
    /// --config).
    #[arg(value_name = "PATH")]
    source: Option<PathBuf>,

    /// Where persistent state lives: the handle key (used when a host or erofs export is
    /// served) and the handle indexes of host exports. Default: /var/lib/granary as root, else $XDG_STATE_HOME/granary
    /// (~/.local/state/granary).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,

    /// Address and port for NFS and MOUNT (both on the same port). Port 0 picks a free one.
    /// An address beyond loopback (e.g. 0.0.0.0:2049) needs --clients (or clients = [...]
    /// in each [[export]] of --config): without a client list the server does not start.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<String>,

    /// Client addresses allowed to mount and use the export given on the command line:
    /// CIDRs or addresses, comma-separated (e.g. 192.168.1.0/24,10.0.0.7). Default: every
    /// address, which only a loopback --listen accepts. With --config, set clients = [...]
    /// in each [[export]] instead.
    #[arg(long, value_name = "CIDR[,CIDR...]", value_delimiter = ',')]
    clients: Option<Vec<String>>,

    /// TOML file with exports and limits (see docs/CONFIG.md). Flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Worker threads (event loops), one per core by default.
    #[arg(long, value_name = "N")]
    workers: Option<usize>,

    /// Bind worker i to core i. Off by default: a client on this host is woken onto its
    /// server's core, where a pinned worker cannot leave it (1 MiB READs one at a time
    /// went 5x slower there).
    #[arg(long)]
    pin_workers: bool,

    /// Size cap of the default in-memory export, in bytes (refused with --config: set it
    /// in the file).
    #[arg(long, value_name = "BYTES")]
    mem_capacity_bytes: Option<u64>,

    /// Serve the default export read-only (refused with --config: set it in the file).
    #[arg(long)]
    read_only: bool,

    /// Identity squashing of the default export: none, root (default) or all (refused
    /// with --config: set it in the file).
    #[arg(long, value_name = "MODE")]
    squash: Option<String>,

    /// Most open client connections; past it an idle one is reclaimed, else the new
    /// one is closed at once.
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,

    /// Most open connections from one client address.
    #[arg(long, value_name = "N")]
    max_connections_per_client: Option<usize>,

    /// Seconds a connection must be idle to be reclaimed for a new client at the limit.
    #[arg(long, value_name = "SECS")]
    reclaim_idle_secs: Option<u64>,

    /// Seconds of the NLM grace period after a restart with locks recorded in the state
    /// directory: clients reclaim their locks, new locks are refused (default 90).
    #[arg(long, value_name = "SECS")]
    grace_secs: Option<u64>,

    /// Close a connection whose replies make no progress (client not reading) this long.
    #[arg(long, value_name = "SECS")]
    write_timeout_secs: Option<u64>,

    /// Memory budget of one connection in bytes (requests read or running, replies
    /// waiting to be sent); past it the connection is not read until replies drain.
    #[arg(long, value_name = "BYTES")]
    conn_budget_bytes: Option<usize>,

    /// Memory budget of all connections together, in bytes.
    #[arg(long, value_name = "BYTES")]
    server_budget_bytes: Option<usize>,

    /// Records each host export's handle index keeps (default 1,048,576); a file beyond
    /// them is found again by one search of the export when its handle is used.
    #[arg(long, value_name = "N")]
    index_entries: Option<usize>,

    /// Bytes each host export's handle index may take (default 256 MiB; 320 per record
    /// plus its name and kernel handle).
    #[arg(long, value_name = "BYTES")]
    index_bytes: Option<usize>,

    /// Largest request record in bytes; larger ones close the connection.
    #[arg(long, value_name = "BYTES")]
    max_record_bytes: Option<u32>,

    /// Most requests in progress per connection.
    #[arg(long, value_name = "N")]
    max_in_flight: Option<usize>,

    /// Entries of the duplicate request cache (replies of non-idempotent calls kept for
    /// retransmissions).
    #[arg(long, value_name = "N")]
    reply_cache_entries: Option<usize>,

    /// Close connections idle this long, in seconds.
    #[arg(long, value_name = "SECS")]
    idle_timeout_secs: Option<u64>,

    /// Drop clients that stall this long inside a request, in seconds.
    #[arg(long, value_name = "SECS")]
    record_timeout_secs: Option<u64>,

    /// Timer design (seed 002): pull (timers enqueued locally; idle workers' timers
    /// expired by a busy migrator), push (enqueued on another busy worker) or global (one
    /// wheel behind a mutex).
    #[arg(long, value_name = "MODE")]
    timers: Option<String>,

    /// File change times (seed 000): multigrain (coarse unless observed; default), coarse
    /// or fine.
    #[arg(long, value_name = "MODE")]
    timestamps: Option<String>,

    /// Byte-range lock of each file (seed 003): cheat (default: one reader/writer word
    /// until a first conflict, then the lock-free list), lockfree or mutex (the old
    /// per-file FIFO).
    #[arg(long, value_name = "MODE")]
    rangelock: Option<String>,

    /// Seed 004's caches: on (default: the mapped credential per export and client
    /// identity is kept; a host export keeps files open across READs and WRITEs) or off
    /// (every call maps its credential; a host export opens and closes the file per call).
    #[arg(long, value_name = "on|off")]
    fhcache: Option<String>,

    /// When READs of 64 KiB and more from a host export are sent from the file with
    /// sendfile: auto (default: for every client not on a loopback address; a local
    /// client is faster when the server copies), always or never.
    #[arg(long, value_name = "auto|always|never")]
    sendfile: Option<String>,

    /// The NFSv4 lease in seconds (10 to 3600, default 90): a client that stops renewing
    /// for this long loses its opens and locks.
    #[arg(long, value_name = "SECS")]
    lease_secs: Option<u32>,

    /// NFSv4 owners and groups as name@DOMAIN, named by this host's users and groups
    /// (DOMAIN as in the clients' idmapd.conf); without it they are sent as numbers, as
    /// knfsd does with nfs4_disable_idmapping. Both forms are accepted either way.
    #[arg(long, value_name = "DOMAIN")]
    idmap_domain: Option<String>,

    /// Where EROFS decompression runs (seed 001): percore (pinned per-core workers at raised
    /// priority, fed by the core that read the data; default), pool (one shared queue, the
    /// design the seed replaced) or inline (on the network worker).
    #[arg(long, value_name = "MODE")]
    decode: Option<String>,

    /// Bytes of decoded EROFS extents kept in memory (default: a sixteenth of the
    /// machine's or the cgroup's memory, from 64 MiB to 256 MiB; 0 decodes every READ
    /// again, as `granary lab decode` does).
    #[arg(long, value_name = "BYTES")]
    erofs_cache_bytes: Option<u64>,

    /// Do not register with a local portmapper/rpcbind.
    #[arg(long)]
    no_portmap: bool,

    /// Port of the client hosts' portmappers for NLM and NSM callbacks (tests only).
    #[arg(long, value_name = "PORT", hide = true)]
    callback_portmap_port: Option<u16>,

    /// Serve Prometheus metrics over HTTP on this address (e.g. 127.0.0.1:9100); off by
    /// default.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<SocketAddr>,
}

fn main() -> ExitCode {
    keep_freed_memory();
    let cli = Cli::parse();
    init_logging(cli.log.as_deref());
    let result = match cli.command {
        Command::Serve(args) => {
            build_config(*args).and_then(|c| serve::run(c).map_err(|e| e.to_string()))
        }
        Command::Format(args) => config::load_file(&args.config)
            .map_err(|e| e.0)
            .and_then(|c| serve::format(&c))
            .map(|lines| {
                for line in lines {
                    println!("granary: {line}");
                }
            }),
        #[cfg(feature = "lab")]
        Command::Bench(args) => bench::run(&args),
        #[cfg(feature = "lab")]
        Command::Lab(args) => lab::run(&args),
        #[cfg(not(feature = "lab"))]
        Command::Bench(_) => Err(not_built("bench")),
        #[cfg(not(feature = "lab"))]
        Command::Lab(_) => Err(not_built("lab")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("granary: {message}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(filter: Option<&str>) {
    use tracing_subscriber::EnvFilter;
    let filter = filter
        .map(EnvFilter::new)
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
}

fn build_config(args: ServeArgs) -> Result<config::ServerConfig, String> {
    let mut c = match &args.config {
        Some(path) => config::load_file(path).map_err(|e| e.0)?,
        None => config::ServerConfig::defaults(),
    };
    if args.config.is_some() && args.source.is_some() {
        return Err("give either a PATH to export or --config FILE, not both (a config file names its exports' directories with dir = ... and images with image = ...)".to_string());
    }
    if args.config.is_some() {
        // The options of the command line's one export: a config file sets each export's
        // own, and a flag that would be ignored is refused instead.
        let per_export = [
            (
                args.clients.is_some(),
                "--clients",
                "clients = [\"CIDR\", ...]",
            ),
            (
                args.squash.is_some(),
                "--squash",
                "squash = \"none\" | \"root\" | \"all\"",
            ),
            (args.read_only, "--read-only", "read_only = true"),
            (
                args.mem_capacity_bytes.is_some(),
                "--mem-capacity-bytes",
                "capacity_bytes = N (in an export with backend = \"mem\")",
            ),
        ];
        if let Some((_, flag, key)) = per_export.iter().find(|(given, _, _)| *given) {
            return Err(format!("{flag} sets an option of the export given on the command line; with --config, set {key} in each [[export]] of the file (docs/CONFIG.md)"));
        }
    }
    if args.config.is_none() {
        let export = &mut c.exports[0];
        if let Some(list) = &args.clients {
            export.options.clients =
                config::parse_clients(list).map_err(|m| format!("--clients: {m}"))?;
            export.clients_given = true;
        }
        if let Some(bytes) = args.mem_capacity_bytes {
            export.backend = config::BackendConfig::Mem {
                capacity_bytes: bytes,
            };
        }
        export.options.read_only = args.read_only;
        if let Some(source) = &args.source {
            if args.mem_capacity_bytes.is_some() {
                return Err("--mem-capacity-bytes is for the in-memory export; drop it when exporting a PATH".to_string());
            }
            export.backend = source_backend(source)?;
            export.options.read_only |= !export.backend.is_host();
        }
        if let Some(s) = &args.squash {
            export.options.squash =
                config::parse_squash(s).map_err(|m| format!("--squash: {m}"))?;
        }
        if export.backend.is_host() {
            config::unprivileged_host_squash(&mut export.options, args.squash.as_deref())
                .map_err(|m| format!("--squash: {m}"))?;
        }
    }
    if let Some(dir) = &args.state_dir {
        c.state_dir = Some(dir.clone());
    }
    if let Some(listen) = &args.listen {
        c.listen = config::parse_listen(listen).map_err(|m| format!("--listen: {m}"))?;
    }
    if let Some(n) = args.workers {
        c.workers = config::check_workers(n).map_err(|m| format!("--workers: {m}"))?;
    }
    if let Some(t) = &args.timers {
        c.timers = t.parse().map_err(|m| format!("--timers: {m}"))?;
    }
    if let Some(t) = &args.timestamps {
        c.timestamps = config::parse_timestamps(t).map_err(|m| format!("--timestamps: {m}"))?;
    }
    if let Some(d) = &args.decode {
        c.decode = d.parse().map_err(|m| format!("--decode: {m}"))?;
    }
    if let Some(b) = args.erofs_cache_bytes {
        c.erofs_cache_bytes = b;
    }
    if let Some(f) = &args.fhcache {
        c.fhcache = config::parse_fhcache(f).map_err(|m| format!("--fhcache: {m}"))?;
    }
    if let Some(m) = &args.sendfile {
        c.sendfile = m.parse().map_err(|m| format!("--sendfile: {m}"))?;
    }
    if let Some(l) = args.lease_secs {
        c.lease_secs = config::check_lease_secs(l).map_err(|m| format!("--lease-secs: {m}"))?;
    }
    if let Some(d) = &args.idmap_domain {
        c.idmap_domain =
            Some(config::parse_idmap_domain(d).map_err(|m| format!("--idmap-domain: {m}"))?);
    }
    if let Some(r) = &args.rangelock {
        c.rangelock = config::parse_rangelock(r).map_err(|m| format!("--rangelock: {m}"))?;
    }
    apply_limit_flags(&mut c.limits, &args)?;
    c.pin_workers |= args.pin_workers;
    c.portmap &= !args.no_portmap;
    if let Some(p) = args.callback_portmap_port {
        c.callback_portmap_port = p;
    }
    if args.metrics.is_some() {
        c.metrics = args.metrics;
    }
    Ok(c)
}

/// The backend for `granary serve PATH`: a directory is a host export, a regular file
/// with an EROFS superblock an erofs export.
fn source_backend(path: &std::path::Path) -> Result<config::BackendConfig, String> {
    let meta = std::fs::metadata(path).map_err(|e| {
        format!(
            "cannot export {}: {e}; give an existing directory or EROFS image",
            path.display()
        )
    })?;
    if meta.is_dir() {
        return config::BackendConfig::for_path(path);
    }
    if meta.is_file() && backend_erofs::ErofsBackend::is_image(path) {
        return Ok(config::BackendConfig::Erofs {
            image: path.to_path_buf(),
        });
    }
    Err(format!(
        "{}: not a directory nor an EROFS image (granary serve PATH serves directories and EROFS image files)",
        path.display()
    ))
}

fn apply_limit_flags(l: &mut config::Limits, args: &ServeArgs) -> Result<(), String> {
    let positive = |v: u64, flag: &str| {
        if v == 0 {
            Err(format!("{flag} must be at least 1"))
        } else {
            Ok(v)
        }
    };
    if let Some(n) = args.max_connections {
        l.max_connections =
            usize::try_from(positive(n as u64, "--max-connections")?).unwrap_or(usize::MAX);
    }
    if let Some(n) = args.max_record_bytes {
        l.max_record_bytes =
            config::check_record_bytes(n).map_err(|m| format!("--max-record-bytes: {m}"))?;
    }
    if let Some(n) = args.max_in_flight {
        l.max_in_flight =
            usize::try_from(positive(n as u64, "--max-in-flight")?).unwrap_or(usize::MAX);
    }
    if let Some(n) = args.reply_cache_entries {
        l.reply_cache_entries =
            usize::try_from(positive(n as u64, "--reply-cache-entries")?).unwrap_or(usize::MAX);
    }
    if let Some(s) = args.idle_timeout_secs {
        l.idle_timeout = std::time::Duration::from_secs(positive(s, "--idle-timeout-secs")?);
    }
    if let Some(s) = args.record_timeout_secs {
        l.record_timeout = std::time::Duration::from_secs(positive(s, "--record-timeout-secs")?);
    }
    apply_budget_flags(l, args)
}

/// The admission and memory-budget flags.
fn apply_budget_flags(l: &mut config::Limits, args: &ServeArgs) -> Result<(), String> {
    let positive = |v: u64, flag: &str| {
        if v == 0 {
            Err(format!("{flag} must be at least 1"))
        } else {
            Ok(v)
        }
    };
    let size = |v: usize, flag: &str| positive(v as u64, flag).map(|_| v);
    let secs = |v: u64, flag: &str| positive(v, flag).map(std::time::Duration::from_secs);
    if let Some(n) = args.max_connections_per_client {
        l.max_connections_per_client = size(n, "--max-connections-per-client")?;
    }
    if let Some(s) = args.reclaim_idle_secs {
        l.reclaim_idle = secs(s, "--reclaim-idle-secs")?;
    }
    if let Some(s) = args.grace_secs {
        l.grace = secs(s, "--grace-secs")?;
    }
    if let Some(s) = args.write_timeout_secs {
        l.write_timeout = secs(s, "--write-timeout-secs")?;
    }
    if let Some(n) = args.conn_budget_bytes {
        l.conn_budget_bytes = size(n, "--conn-budget-bytes")?;
    }
    if let Some(n) = args.server_budget_bytes {
        l.server_budget_bytes = size(n, "--server-budget-bytes")?;
    }
    if let Some(n) = args.index_entries {
        l.index_entries =
            config::check_index_entries(n).map_err(|m| format!("--index-entries: {m}"))?;
    }
    if let Some(n) = args.index_bytes {
        l.index_bytes = config::check_index_bytes(n).map_err(|m| format!("--index-bytes: {m}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    #[allow(unsafe_code)]
    fn freed_memory_is_kept() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        super::keep_freed_memory();
        // SAFETY: reads one entry of mimalloc's option table.
        let now = unsafe { super::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(now, -1);
    }
}
