//! The server's configuration: CLI flags, an optional TOML file, and their validation.
//!
//! A bad configuration fails at start with one message that names the file, the line,
//! what is wrong and how to fix it.

use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;
use toml::Spanned;

/// Everything `granary serve` needs, after CLI and file are merged.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub workers: usize,
    /// Bind each worker to a core (`runtime::Pinning::PerCore`); off by default, see
    /// `runtime::Pinning` for why.
    pub pin_workers: bool,
    pub limits: Limits,
    pub exports: Vec<ExportConfig>,
    /// Register with a local portmapper/rpcbind if one runs.
    pub portmap: bool,
    /// The port of client hosts' portmappers, asked where their NLM and statd listen for
    /// granary's callbacks (111; tests run a portmapper of their own elsewhere).
    pub callback_portmap_port: u16,
    /// Where to serve Prometheus metrics (`--metrics ADDR`); off when `None`.
    pub metrics: Option<SocketAddr>,
    /// Timer design (seed 002): pull (default), push or global.
    pub timers: runtime::timers::TimerMode,
    /// How file changes are stamped (seed 000): coarse, fine or multigrain (default).
    pub timestamps: backend_mem::TimestampMode,
    /// Range lock of each file (seed 003): mutex, lockfree or cheat (default).
    pub rangelock: backend_mem::RangeLockMode,
    /// Where persistent state lives (handle key, handle indexes of host exports); `None`
    /// picks [`default_state_dir`].
    pub state_dir: Option<PathBuf>,
    /// `handle_key = "/path"`: the 16-byte key that signs handles, made (mode 0600) if
    /// missing. Heads of one object file system share it (copy the file to each), so a
    /// handle from one resolves on another. `None`: the state directory's key.
    pub handle_key: Option<PathBuf>,
    /// Where EROFS decompression runs (seed 001): percore (default), pool or inline.
    pub decode: runtime::decode::DecodeMode,
    /// Bytes of decoded EROFS extents kept in memory.
    pub erofs_cache_bytes: u64,
    /// Seed 004's caches (credential cache; open-file cache of host exports): on
    /// (default) or off (every call maps its credential, and a host export opens and
    /// closes the file for every READ and WRITE).
    pub fhcache: bool,
    /// When large READs of host exports are sent with `sendfile`: auto (default: not to
    /// loopback peers), always or never.
    pub sendfile: nfsd::SendfileMode,
    /// The NFSv4 lease, in seconds: a client that stops renewing for this long loses its
    /// opens and locks.
    pub lease_secs: u32,
    /// NFSv4 owners as `name@domain` in this domain (`--idmap-domain`); numbers when
    /// `None` (the default, as knfsd with `nfs4_disable_idmapping`).
    pub idmap_domain: Option<String>,
}

/// Connection limits (defaults in `rpc::limits`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub max_record_bytes: u32,
    pub max_in_flight: usize,
    /// Entries of the duplicate request cache.
    pub reply_cache_entries: usize,
    pub idle_timeout: Duration,
    pub record_timeout: Duration,
    pub max_connections_per_client: usize,
    /// How long a connection must be idle to be reclaimed at the connection limit.
    pub reclaim_idle: Duration,
    /// How long a reply write may make no progress.
    pub write_timeout: Duration,
    /// Memory budget of one connection (requests and queued replies), bytes.
    pub conn_budget_bytes: usize,
    /// Memory budget of all connections together, bytes.
    pub server_budget_bytes: usize,
    /// Records each host export's handle index keeps in memory (`backend_host::index`).
    pub index_entries: usize,
    /// Bytes each host export's handle index may charge its records.
    pub index_bytes: usize,
    /// The NLM grace period after a restart with locks recorded: only reclaims are
    /// granted while it runs.
    pub grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        let conn = rpc::conn::ConnLimits::default();
        Self {
            max_connections: rpc::limits::DEFAULT_MAX_CONNECTIONS,
            max_record_bytes: conn.max_record_bytes,
            max_in_flight: conn.max_in_flight,
            reply_cache_entries: rpc::drc::DEFAULT_CAPACITY,
            idle_timeout: conn.idle_timeout,
            record_timeout: conn.record_timeout,
            max_connections_per_client: rpc::limits::DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            reclaim_idle: rpc::limits::DEFAULT_RECLAIM_IDLE,
            write_timeout: conn.write_timeout,
            conn_budget_bytes: conn.budget_bytes,
            server_budget_bytes: rpc::limits::DEFAULT_SERVER_BUDGET_BYTES,
            index_entries: backend_host::limits::DEFAULT_INDEX_ENTRIES,
            index_bytes: backend_host::limits::DEFAULT_INDEX_BYTES,
            grace: nfsd::limits::DEFAULT_GRACE,
        }
    }
}

/// Which backend serves an export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendConfig {
    Mem {
        capacity_bytes: u64,
    },
    /// A directory of the host (`backend = "host"`, `dir = "/srv/data"`).
    Host {
        dir: PathBuf,
    },
    /// A read-only EROFS image file.
    Erofs {
        image: std::path::PathBuf,
    },
    /// Metadata in PostgreSQL, data in an S3 store (`backend = "object"`, docs/OBJECT.md).
    #[cfg(feature = "object")]
    Object {
        /// `postgres = "postgres://USER@HOST:PORT/DB"`; a password comes from the URL or
        /// `PGPASSWORD`. Never printed.
        postgres: Secret,
        /// `store = "s3://BUCKET?endpoint=http://HOST:PORT"`.
        store: backend_object::StoreUrl,
        /// `credentials = "/path"`: the S3 keys, else `AWS_ACCESS_KEY_ID` and
        /// `AWS_SECRET_ACCESS_KEY` from the environment.
        credentials: Option<PathBuf>,
        /// `gc_interval_secs`, `gc_grace_secs`, `compact_slices`: garbage collection and
        /// compaction on this head (docs/OBJECT.md).
        gc: backend_object::GcConfig,
        /// `lock_lease_secs`: how long this head's byte-range locks and share
        /// reservations hold the other heads off after its last heartbeat (docs/LOCKS.md,
        /// "Across heads").
        lock_lease: std::time::Duration,
    },
}

/// A string that may hold a password: its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl BackendConfig {
    /// The backend a `granary serve PATH` argument names: a directory is a host export.
    ///
    /// # Errors
    /// A missing path, or one that is not a directory, with what to do instead.
    pub fn for_path(path: &Path) -> Result<Self, String> {
        let meta = std::fs::metadata(path).map_err(|e| {
            format!(
                "cannot export {}: {e}; give an existing directory",
                path.display()
            )
        })?;
        if meta.is_dir() {
            return Ok(Self::Host {
                dir: path.to_path_buf(),
            });
        }
        Err(format!(
            "cannot export {}: not a directory; `granary serve PATH` exports a directory",
            path.display()
        ))
    }

    #[must_use]
    pub fn is_host(&self) -> bool {
        matches!(self, Self::Host { .. })
    }

    #[cfg(feature = "object")]
    #[must_use]
    pub fn is_object(&self) -> bool {
        matches!(self, Self::Object { .. })
    }
}

/// One export.
#[derive(Debug, Clone)]
pub struct ExportConfig {
    pub path: String,
    pub backend: BackendConfig,
    pub options: vfs::ExportOptions,
    /// Whether a client list was given (`clients =` in the file, `--clients` on the
    /// command line). Without one `options.clients` is every address, which
    /// [`check_exposure`] refuses on a listen address beyond loopback.
    pub clients_given: bool,
}

/// Default size cap of a mem export.
pub const DEFAULT_MEM_CAPACITY_BYTES: u64 = 1 << 30;

/// A configuration error, already phrased for a person.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<Spanned<String>>,
    workers: Option<Spanned<usize>>,
    pin_workers: Option<bool>,
    portmap: Option<bool>,
    timers: Option<Spanned<String>>,
    timestamps: Option<Spanned<String>>,
    rangelock: Option<Spanned<String>>,
    state_dir: Option<PathBuf>,
    handle_key: Option<PathBuf>,
    decode: Option<Spanned<String>>,
    fhcache: Option<Spanned<String>>,
    sendfile: Option<Spanned<String>>,
    lease_secs: Option<Spanned<u32>>,
    idmap_domain: Option<Spanned<String>>,
    #[serde(default)]
    limits: FileLimits,
    #[serde(default, rename = "export")]
    exports: Vec<FileExport>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLimits {
    max_connections: Option<Spanned<usize>>,
    max_record_bytes: Option<Spanned<u32>>,
    max_in_flight: Option<Spanned<usize>>,
    reply_cache_entries: Option<Spanned<usize>>,
    idle_timeout_secs: Option<Spanned<u64>>,
    record_timeout_secs: Option<Spanned<u64>>,
    max_connections_per_client: Option<Spanned<usize>>,
    reclaim_idle_secs: Option<Spanned<u64>>,
    grace_secs: Option<Spanned<u64>>,
    write_timeout_secs: Option<Spanned<u64>>,
    conn_budget_bytes: Option<Spanned<usize>>,
    server_budget_bytes: Option<Spanned<usize>>,
    index_entries: Option<Spanned<usize>>,
    index_bytes: Option<Spanned<usize>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileExport {
    path: Spanned<String>,
    #[serde(default = "default_backend")]
    backend: Spanned<String>,
    capacity_bytes: Option<u64>,
    dir: Option<Spanned<PathBuf>>,
    image: Option<Spanned<String>>,
    // Parsed without the object feature too, so such a config is refused by name.
    #[cfg_attr(not(feature = "object"), expect(dead_code))]
    postgres: Option<Spanned<String>>,
    #[cfg_attr(not(feature = "object"), expect(dead_code))]
    store: Option<Spanned<String>>,
    #[cfg_attr(not(feature = "object"), expect(dead_code))]
    credentials: Option<PathBuf>,
    #[cfg_attr(not(feature = "object"), expect(dead_code))]
    gc_interval_secs: Option<u64>,
    #[cfg_attr(not(feature = "object"), expect(dead_code))]
    gc_grace_secs: Option<Spanned<u64>>,
    #[cfg_attr(not(feature = "object"), expect(dead_code))]
    compact_slices: Option<Spanned<u32>>,
    #[cfg_attr(not(feature = "object"), expect(dead_code))]
    lock_lease_secs: Option<Spanned<u64>>,
    #[serde(default)]
    read_only: bool,
    clients: Option<Vec<Spanned<String>>>,
    squash: Option<Spanned<String>>,
    anon_uid: Option<u32>,
    anon_gid: Option<u32>,
}

fn default_backend() -> Spanned<String> {
    Spanned::new(0..0, "mem".to_string())
}

/// Reads and validates a TOML configuration file.
///
/// # Errors
/// A message naming the file, line and fix.
pub fn load_file(path: &Path) -> Result<ServerConfig, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("cannot read config file {}: {e}", path.display())))?;
    parse(&text, &path.display().to_string())
}

/// Parses configuration text; `origin` names it in messages.
///
/// # Errors
/// A message naming the origin, line and fix.
pub fn parse(text: &str, origin: &str) -> Result<ServerConfig, ConfigError> {
    let file: FileConfig = toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map_or(String::new(), |s| format!(" line {}", line_of(text, &s)));
        ConfigError(format!("{origin}:{line}: {}", e.message().trim()))
    })?;
    let at = |span: &Range<usize>, msg: String| {
        ConfigError(format!("{origin}: line {}: {msg}", line_of(text, span)))
    };
    let mut config = ServerConfig::defaults();
    if let Some(listen) = &file.listen {
        config.listen = parse_listen(listen.get_ref()).map_err(|m| at(&listen.span(), m))?;
    }
    if let Some(workers) = &file.workers {
        config.workers = check_workers(*workers.get_ref()).map_err(|m| at(&workers.span(), m))?;
    }
    config.pin_workers = file.pin_workers.unwrap_or(false);
    config.portmap = file.portmap.unwrap_or(true);
    if let Some(t) = &file.timers {
        config.timers = t.get_ref().parse().map_err(|m| at(&t.span(), m))?;
    }
    if let Some(t) = &file.timestamps {
        config.timestamps = parse_timestamps(t.get_ref()).map_err(|m| at(&t.span(), m))?;
    }
    if let Some(r) = &file.rangelock {
        config.rangelock = parse_rangelock(r.get_ref()).map_err(|m| at(&r.span(), m))?;
    }
    if let Some(f) = &file.fhcache {
        config.fhcache = parse_fhcache(f.get_ref()).map_err(|m| at(&f.span(), m))?;
    }
    if let Some(f) = &file.sendfile {
        config.sendfile = f.get_ref().parse().map_err(|m| at(&f.span(), m))?;
    }
    if let Some(d) = &file.decode {
        config.decode = d.get_ref().parse().map_err(|m| at(&d.span(), m))?;
    }
    if let Some(l) = &file.lease_secs {
        config.lease_secs = check_lease_secs(*l.get_ref()).map_err(|m| at(&l.span(), m))?;
    }
    if let Some(d) = &file.idmap_domain {
        config.idmap_domain = Some(parse_idmap_domain(d.get_ref()).map_err(|m| at(&d.span(), m))?);
    }
    apply_limits(&mut config.limits, &file.limits, &at)?;
    config.state_dir.clone_from(&file.state_dir);
    config.handle_key.clone_from(&file.handle_key);
    config.exports = Vec::new();
    for export in &file.exports {
        let parsed = parse_export(export, &at)?;
        if let Some(dup) = config.exports.iter().find(|e| e.path == parsed.path) {
            let msg = format!(
                "export path {:?} is defined twice; give each export its own path",
                dup.path
            );
            return Err(at(&export.path.span(), msg));
        }
        config.exports.push(parsed);
    }
    if config.exports.is_empty() {
        return Err(ConfigError(format!(
            "{origin}: no exports defined; add at least one [[export]] table with a path, e.g.\n\n[[export]]\npath = \"/\"\nbackend = \"mem\"\n"
        )));
    }
    Ok(config)
}

type At<'a> = &'a dyn Fn(&Range<usize>, String) -> ConfigError;

fn apply_limits(limits: &mut Limits, file: &FileLimits, at: At<'_>) -> Result<(), ConfigError> {
    if let Some(v) = &file.max_connections {
        limits.max_connections =
            check_positive(*v.get_ref(), "max_connections").map_err(|m| at(&v.span(), m))?;
    }
    if let Some(v) = &file.max_record_bytes {
        limits.max_record_bytes = check_record_bytes(*v.get_ref()).map_err(|m| at(&v.span(), m))?;
    }
    if let Some(v) = &file.max_in_flight {
        limits.max_in_flight =
            check_positive(*v.get_ref(), "max_in_flight").map_err(|m| at(&v.span(), m))?;
    }
    if let Some(v) = &file.reply_cache_entries {
        limits.reply_cache_entries =
            check_positive(*v.get_ref(), "reply_cache_entries").map_err(|m| at(&v.span(), m))?;
    }
    if let Some(v) = &file.idle_timeout_secs {
        let secs =
            check_positive(*v.get_ref(), "idle_timeout_secs").map_err(|m| at(&v.span(), m))?;
        limits.idle_timeout = Duration::from_secs(secs);
    }
    if let Some(v) = &file.record_timeout_secs {
        let secs =
            check_positive(*v.get_ref(), "record_timeout_secs").map_err(|m| at(&v.span(), m))?;
        limits.record_timeout = Duration::from_secs(secs);
    }
    apply_budget_limits(limits, file, at)
}

/// The admission and memory-budget limits (issue 16) of a config file.
fn apply_budget_limits(
    limits: &mut Limits,
    file: &FileLimits,
    at: At<'_>,
) -> Result<(), ConfigError> {
    let usize_of =
        |v: &Spanned<usize>, what| check_positive(*v.get_ref(), what).map_err(|m| at(&v.span(), m));
    let secs_of = |v: &Spanned<u64>, what| {
        check_positive(*v.get_ref(), what)
            .map(Duration::from_secs)
            .map_err(|m| at(&v.span(), m))
    };
    if let Some(v) = &file.max_connections_per_client {
        limits.max_connections_per_client = usize_of(v, "max_connections_per_client")?;
    }
    if let Some(v) = &file.reclaim_idle_secs {
        limits.reclaim_idle = secs_of(v, "reclaim_idle_secs")?;
    }
    if let Some(v) = &file.grace_secs {
        limits.grace = secs_of(v, "grace_secs")?;
    }
    if let Some(v) = &file.write_timeout_secs {
        limits.write_timeout = secs_of(v, "write_timeout_secs")?;
    }
    if let Some(v) = &file.conn_budget_bytes {
        limits.conn_budget_bytes = usize_of(v, "conn_budget_bytes")?;
    }
    if let Some(v) = &file.server_budget_bytes {
        limits.server_budget_bytes = usize_of(v, "server_budget_bytes")?;
    }
    if let Some(v) = &file.index_entries {
        limits.index_entries = check_index_entries(*v.get_ref()).map_err(|m| at(&v.span(), m))?;
    }
    if let Some(v) = &file.index_bytes {
        limits.index_bytes = check_index_bytes(*v.get_ref()).map_err(|m| at(&v.span(), m))?;
    }
    Ok(())
}

/// A bound of the host handle index's records, at least `MIN_INDEX_ENTRIES`.
///
/// # Errors
/// Too small, with the smallest accepted value.
pub fn check_index_entries(n: usize) -> Result<usize, String> {
    let min = backend_host::limits::MIN_INDEX_ENTRIES;
    if n < min {
        return Err(format!(
            "index_entries = {n} is too small; give at least {min}"
        ));
    }
    Ok(n)
}

/// A bound of the host handle index's bytes, at least `MIN_INDEX_BYTES`.
///
/// # Errors
/// Too small, with the smallest accepted value.
pub fn check_index_bytes(n: usize) -> Result<usize, String> {
    let min = backend_host::limits::MIN_INDEX_BYTES;
    if n < min {
        return Err(format!(
            "index_bytes = {n} is too small; give at least {min}"
        ));
    }
    Ok(n)
}

/// `backend = "object"`: its database and store, both required.
#[cfg(feature = "object")]
fn parse_object(export: &FileExport, at: At<'_>) -> Result<BackendConfig, ConfigError> {
    let span = export.backend.span();
    let Some(postgres) = &export.postgres else {
        let msg = "backend = \"object\" needs its database: add postgres = \"postgres://USER@HOST:PORT/DB\"".to_string();
        return Err(at(&span, msg));
    };
    let Some(store) = &export.store else {
        let msg = "backend = \"object\" needs its S3 store: add store = \"s3://BUCKET?endpoint=http://HOST:PORT\"".to_string();
        return Err(at(&span, msg));
    };
    let parsed =
        backend_object::StoreUrl::parse(store.get_ref()).map_err(|m| at(&store.span(), m))?;
    let mut gc = backend_object::GcConfig::default();
    if let Some(secs) = export.gc_interval_secs {
        gc.interval = Duration::from_secs(secs);
    }
    if let Some(grace) = &export.gc_grace_secs {
        let min = backend_object::limits::GC_MIN_GRACE.as_secs();
        if *grace.get_ref() < min {
            let msg = format!(
                "gc_grace_secs = {} is too short: a read in flight on another head may still \
                 fetch an object for up to {min} s after its last row went; give at least {min}",
                grace.get_ref()
            );
            return Err(at(&grace.span(), msg));
        }
        gc.grace = Duration::from_secs(*grace.get_ref());
    }
    if let Some(n) = &export.compact_slices {
        if *n.get_ref() < 2 {
            let msg = "compact_slices must be at least 2 (a file of one slice has nothing to \
                       compact)"
                .to_string();
            return Err(at(&n.span(), msg));
        }
        gc.compact_slices = *n.get_ref();
    }
    let mut lock_lease = backend_object::limits::HEAD_LOCK_LEASE;
    if let Some(secs) = &export.lock_lease_secs {
        let min = backend_object::limits::HEAD_LOCK_MIN_LEASE.as_secs();
        if *secs.get_ref() < min {
            let msg = format!(
                "lock_lease_secs = {} is too short: a head renews its lease every second, \
                 so one late heartbeat would let another head past its locks; give at least \
                 {min}",
                secs.get_ref()
            );
            return Err(at(&secs.span(), msg));
        }
        lock_lease = Duration::from_secs(*secs.get_ref());
    }
    Ok(BackendConfig::Object {
        postgres: Secret(postgres.get_ref().clone()),
        store: parsed,
        credentials: export.credentials.clone(),
        gc,
        lock_lease,
    })
}

/// A server built without the `object` feature refuses object exports by name.
#[cfg(not(feature = "object"))]
fn parse_object(export: &FileExport, at: At<'_>) -> Result<BackendConfig, ConfigError> {
    let msg = "backend = \"object\" needs a granary built with the object feature \
               (the default): this one was built with --no-default-features; rebuild with \
               `cargo build --release --features object`"
        .to_string();
    Err(at(&export.backend.span(), msg))
}

fn parse_export(export: &FileExport, at: At<'_>) -> Result<ExportConfig, ConfigError> {
    let path = check_export_path(export.path.get_ref()).map_err(|m| at(&export.path.span(), m))?;
    let backend = match export.backend.get_ref().as_str() {
        "mem" => BackendConfig::Mem {
            capacity_bytes: export.capacity_bytes.unwrap_or(DEFAULT_MEM_CAPACITY_BYTES),
        },
        "host" => {
            let Some(dir) = &export.dir else {
                let msg =
                    "backend = \"host\" needs the directory to export: add dir = \"/srv/data\""
                        .to_string();
                return Err(at(&export.backend.span(), msg));
            };
            if !dir.get_ref().is_absolute() {
                let msg = format!("dir = {:?} must be an absolute path", dir.get_ref());
                return Err(at(&dir.span(), msg));
            }
            BackendConfig::Host {
                dir: dir.get_ref().clone(),
            }
        }
        "erofs" => match &export.image {
            Some(image) => BackendConfig::Erofs {
                image: image.get_ref().into(),
            },
            None => {
                let msg = "backend = \"erofs\" needs image = \"/path/to/image.erofs\"".to_string();
                return Err(at(&export.backend.span(), msg));
            }
        },
        "object" => parse_object(export, at)?,
        other => {
            let msg = format!(
                "unknown backend {other:?}; this version supports backend = \"mem\", \"host\", \"erofs\" and \"object\""
            );
            return Err(at(&export.backend.span(), msg));
        }
    };
    if let (Some(dir), false) = (&export.dir, backend.is_host()) {
        let msg = "dir is only for backend = \"host\"".to_string();
        return Err(at(&dir.span(), msg));
    }
    let erofs = matches!(backend, BackendConfig::Erofs { .. });
    let mut options = vfs::ExportOptions {
        read_only: export.read_only || erofs,
        ..Default::default()
    };
    if let Some(clients) = &export.clients {
        options.clients = clients
            .iter()
            .map(|c| parse_client(c.get_ref()).map_err(|m| at(&c.span(), m)))
            .collect::<Result<_, _>>()?;
    }
    if let Some(squash) = &export.squash {
        options.squash = parse_squash(squash.get_ref()).map_err(|m| at(&squash.span(), m))?;
    }
    options.anon_uid = export.anon_uid.unwrap_or(options.anon_uid);
    options.anon_gid = export.anon_gid.unwrap_or(options.anon_gid);
    if backend.is_host() {
        let explicit = export
            .squash
            .as_ref()
            .map(|s| (s.get_ref().as_str(), s.span()));
        unprivileged_host_squash(&mut options, explicit.as_ref().map(|(s, _)| *s))
            .map_err(|m| at(&explicit.map_or(export.backend.span(), |(_, sp)| sp), m))?;
    }
    Ok(ExportConfig {
        path,
        backend,
        options,
        clients_given: export.clients.is_some(),
    })
}

fn line_of(text: &str, span: &Range<usize>) -> usize {
    text[..span.start.min(text.len())].matches('\n').count() + 1
}

impl ServerConfig {
    /// `granary serve` with no arguments: one empty mem export `/` on 127.0.0.1:2049.
    #[must_use]
    pub fn defaults() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 2049)),
            workers: default_workers(),
            pin_workers: false,
            limits: Limits::default(),
            exports: vec![ExportConfig {
                path: "/".to_string(),
                backend: BackendConfig::Mem {
                    capacity_bytes: DEFAULT_MEM_CAPACITY_BYTES,
                },
                options: vfs::ExportOptions::default(),
                clients_given: false,
            }],
            portmap: true,
            callback_portmap_port: 111,
            metrics: None,
            timers: runtime::timers::TimerMode::default(),
            timestamps: backend_mem::TimestampMode::default(),
            rangelock: backend_mem::RangeLockMode::default(),
            state_dir: None,
            handle_key: None,
            decode: runtime::decode::DecodeMode::default(),
            erofs_cache_bytes: backend_erofs::default_cache_bytes(),
            fhcache: true,
            sendfile: nfsd::SendfileMode::default(),
            lease_secs: state4::limits::DEFAULT_LEASE_SECS,
            idmap_domain: None,
        }
    }
}

/// Checks `--lease-secs` / `lease_secs =` against the bounds of `state4::limits`.
///
/// # Errors
/// A lease outside them, with the range to use.
pub fn check_lease_secs(secs: u32) -> Result<u32, String> {
    let (lo, hi) = (
        state4::limits::MIN_LEASE_SECS,
        state4::limits::MAX_LEASE_SECS,
    );
    if (lo..=hi).contains(&secs) {
        Ok(secs)
    } else {
        Err(format!(
            "an NFSv4 lease of {secs} s is out of range; give {lo} to {hi} seconds (default {})",
            state4::limits::DEFAULT_LEASE_SECS
        ))
    }
}

/// An NFSv4 idmap domain (`--idmap-domain`, `idmap_domain`): a DNS-like name that the
/// server's `name@domain` owners end in, as `Domain` in the clients' idmapd.conf.
///
/// # Errors
/// An empty name, or one with `@`, spaces or control characters, with what to write.
pub fn parse_idmap_domain(s: &str) -> Result<String, String> {
    let fine = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    if s.is_empty() || s.len() > 253 || !s.chars().all(fine) {
        return Err(format!(
            "invalid idmap domain {s:?}: use the DNS domain the clients' idmapd.conf names \
             (letters, digits, '.', '-', '_'; for example \"example.com\"), or leave it out \
             to send owners as numbers"
        ));
    }
    Ok(s.to_string())
}

/// An unprivileged server's host export acts as the server's own user: every caller is
/// squashed to the server's uid/gid. Asking for another squash mode is refused (the host
/// would refuse to give files to other owners anyway). As root nothing changes.
///
/// # Errors
/// `explicit` is a squash mode other than "all" while unprivileged.
pub fn unprivileged_host_squash(
    options: &mut vfs::ExportOptions,
    explicit: Option<&str>,
) -> Result<(), String> {
    let (root, uid, gid) = backend_host::server_identity();
    if root {
        return Ok(());
    }
    if explicit.is_some_and(|s| s != "all") {
        return Err(format!(
            "granary runs unprivileged (uid {uid}), so a host export acts as that user for every client; squash must be \"all\" (the default then), or run granary as root"
        ));
    }
    options.squash = vfs::Squash::All;
    options.anon_uid = uid;
    options.anon_gid = gid;
    Ok(())
}

/// Where state lives when `--state-dir` is not given: `/var/lib/granary` for root,
/// `$XDG_STATE_HOME/granary` (or `~/.local/state/granary`) for other users.
#[must_use]
pub fn default_state_dir(is_root: bool) -> PathBuf {
    if is_root {
        return PathBuf::from("/var/lib/granary");
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("granary");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".local/state/granary")
}

/// Parses `--timestamps` / `timestamps =`.
///
/// # Errors
/// A message listing the choices.
pub fn parse_timestamps(s: &str) -> Result<backend_mem::TimestampMode, String> {
    s.parse()
        .map_err(|e: gtime::multigrain::UnknownTimestampMode| e.to_string())
}

/// Parses `--rangelock` / `rangelock =`; `none` is refused: it gives up the atomicity of
/// overlapping READ and WRITE (only `granary lab` uses it).
///
/// # Errors
/// A message listing the choices.
pub fn parse_rangelock(s: &str) -> Result<backend_mem::RangeLockMode, String> {
    match s.parse() {
        Ok(backend_mem::RangeLockMode::None) | Err(_) => Err(format!(
            "unknown range-lock mode {s:?}; use \"mutex\", \"lockfree\" or \"cheat\" (the default)"
        )),
        Ok(mode) => Ok(mode),
    }
}

/// Parses `--fhcache` / `fhcache =`: `on` (true) or `off` (false).
///
/// # Errors
/// A message listing the choices.
pub fn parse_fhcache(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!(
            "unknown fhcache setting {s:?}; use \"on\" (the default) or \"off\""
        )),
    }
}

/// One worker per core.
#[must_use]
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// Parses `ADDR:PORT` (IPv6 in brackets).
///
/// # Errors
/// A message with an example.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| {
        format!("invalid listen address {s:?}; use ADDR:PORT such as 127.0.0.1:2049 or [::1]:2049")
    })
}

/// # Errors
/// Out of range.
pub fn check_workers(n: usize) -> Result<usize, String> {
    if (1..=runtime::MAX_WORKERS).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "workers = {n} is out of range; use 1 to {}",
            runtime::MAX_WORKERS
        ))
    }
}

fn check_positive<T: PartialEq + Default + std::fmt::Display>(
    v: T,
    name: &str,
) -> Result<T, String> {
    if v == T::default() {
        Err(format!("{name} must be at least 1"))
    } else {
        Ok(v)
    }
}

/// # Errors
/// Outside the range the RPC layer can work with, or too small for a WRITE of one page
/// (FSINFO's rtmax/wtmax are derived from it: `nfsd::limits::max_io_bytes_for_record`).
pub fn check_record_bytes(v: u32) -> Result<u32, String> {
    let nfs_lo = nfsd::limits::max_io_bytes_for_record(0).err().unwrap_or(0);
    let (lo, hi) = (rpc::limits::MIN_MAX_RECORD_BYTES.max(nfs_lo), 1u32 << 30);
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "max_record_bytes = {v} is out of range; use {lo} to {hi} (default {})",
            rpc::limits::DEFAULT_MAX_RECORD_BYTES
        ))
    }
}

fn check_export_path(p: &str) -> Result<String, String> {
    let ok = p.starts_with('/')
        && !p.split('/').any(|c| c == "." || c == "..")
        && !p.contains('\0')
        && (p == "/" || !p.ends_with('/'));
    if ok {
        Ok(p.to_string())
    } else {
        Err(format!("export path {p:?} must be absolute, without '.', '..' or a trailing '/', e.g. \"/\" or \"/data\""))
    }
}

/// Refuses exports open to every address when the server listens where other hosts can
/// reach it (as knfsd needs a client in /etc/exports and nfs-ganesha's default
/// `Access_Type` is `None`). On a loopback address only local processes connect, so the
/// default of every address stays.
///
/// # Errors
/// The listen address is not loopback and an export has no client list; the message
/// names `--clients` and the `clients` key of `[[export]]`.
pub fn check_exposure(config: &ServerConfig) -> Result<(), String> {
    if is_loopback(config.listen.ip()) {
        return Ok(());
    }
    let open: Vec<String> = config
        .exports
        .iter()
        .filter(|e| !e.clients_given)
        .map(|e| format!("{:?}", e.path))
        .collect();
    if open.is_empty() {
        return Ok(());
    }
    Err(format!(
        "listening on {} reaches other hosts, and export {} has no client list, so every \
         address could use it; name the clients allowed: --clients 192.168.1.0/24[,CIDR...] \
         for the export given on the command line, or clients = [\"192.168.1.0/24\"] in \
         each [[export]] of a --config file (docs/CONFIG.md); --clients 0.0.0.0/0,::/0 \
         opens it to every address on purpose",
        config.listen,
        open.join(", ")
    ))
}

/// Loopback, IPv4-mapped loopback (`::ffff:127.0.0.1`) included.
fn is_loopback(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(v6.is_loopback(), |v4| v4.is_loopback()),
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
    }
}

/// Parses `--clients CIDR[,CIDR...]` (each a CIDR or an address).
///
/// # Errors
/// An empty list or a bad entry, with examples.
pub fn parse_clients(list: &[String]) -> Result<Vec<IpNet>, String> {
    if list.iter().all(|c| c.trim().is_empty()) {
        return Err("give at least one client network, e.g. --clients 192.168.1.0/24".into());
    }
    list.iter().map(|c| parse_client(c.trim())).collect()
}

/// Parses a client network: a CIDR (`10.0.0.0/8`) or a single address.
///
/// # Errors
/// A message with examples.
pub fn parse_client(s: &str) -> Result<IpNet, String> {
    if let Ok(net) = s.parse::<IpNet>() {
        return Ok(net);
    }
    if let Ok(addr) = s.parse::<std::net::IpAddr>() {
        return Ok(IpNet::from(addr));
    }
    Err(format!("invalid client network {s:?}; use CIDR notation such as \"127.0.0.0/8\", \"10.1.2.3\" or \"::1/128\""))
}

/// # Errors
/// A message listing the choices.
pub fn parse_squash(s: &str) -> Result<vfs::Squash, String> {
    match s {
        "none" => Ok(vfs::Squash::None),
        "root" => Ok(vfs::Squash::Root),
        "all" => Ok(vfs::Squash::All),
        _ => Err(format!(
            "invalid squash {s:?}; use \"none\", \"root\" (the default) or \"all\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_config_parses() {
        let text = r#"
listen = "127.0.0.1:3049"
workers = 3
pin_workers = true
[limits]
max_connections = 10
idle_timeout_secs = 5
[[export]]
path = "/"
[[export]]
path = "/ro"
read_only = true
clients = ["127.0.0.0/8", "::1"]
squash = "all"
anon_uid = 1000
capacity_bytes = 4096
"#;
        let c = parse(text, "t.toml").unwrap();
        assert_eq!(c.listen, "127.0.0.1:3049".parse().unwrap());
        assert_eq!(c.workers, 3);
        assert!(c.pin_workers);
        assert!(!ServerConfig::defaults().pin_workers);
        assert_eq!(c.limits.max_connections, 10);
        assert_eq!(c.limits.idle_timeout, Duration::from_secs(5));
        assert_eq!(c.exports.len(), 2);
        let ro = &c.exports[1];
        assert!(ro.options.read_only);
        assert_eq!(ro.options.squash, vfs::Squash::All);
        assert_eq!(ro.options.anon_uid, 1000);
        assert_eq!(ro.options.clients.len(), 2);
        assert_eq!(
            ro.backend,
            BackendConfig::Mem {
                capacity_bytes: 4096
            }
        );
    }

    fn error_of(text: &str) -> String {
        parse(text, "t.toml").unwrap_err().0
    }

    #[test]
    fn errors_name_the_line_and_the_fix() {
        let e = error_of("[[export]]\npath = \"/\"\nclients = [\"10.0.0.0/33\"]\n");
        assert!(
            e.starts_with("t.toml: line 3: invalid client network"),
            "{e}"
        );
        assert!(e.contains("CIDR"), "{e}");
        let e = error_of("[[export]]\npath = \"/\"\n[[export]]\npath = \"/\"\n");
        assert!(e.contains("line 4") && e.contains("defined twice"), "{e}");
        let e = error_of("[[export]]\npath = \"/\"\nsquahs = \"all\"\n");
        assert!(e.contains("line 3") && e.contains("unknown field"), "{e}");
        let e = error_of("[[export]]\npath = \"data\"\n");
        assert!(
            e.contains("line 2") && e.contains("must be absolute"),
            "{e}"
        );
        let e = error_of("[[export]]\npath = \"/\"\nbackend = \"zfs\"\n");
        assert!(e.contains("line 3") && e.contains("unknown backend"), "{e}");
        let e = error_of("[[export]]\npath = \"/\"\nbackend = \"host\"\n");
        assert!(e.contains("line 3") && e.contains("dir = "), "{e}");
        let e = error_of("[[export]]\npath = \"/\"\nbackend = \"host\"\ndir = \"rel\"\n");
        assert!(e.contains("line 4") && e.contains("absolute"), "{e}");
        let c = parse(
            "state_dir = \"/s\"\n[[export]]\npath = \"/\"\nbackend = \"host\"\ndir = \"/srv\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(
            c.exports[0].backend,
            BackendConfig::Host { dir: "/srv".into() }
        );
        assert_eq!(c.state_dir, Some(PathBuf::from("/s")));
        let e = error_of("listen = \"localhost\"\n[[export]]\npath = \"/\"\n");
        assert!(e.contains("line 1") && e.contains("ADDR:PORT"), "{e}");
        let e = error_of("workers = 0\n[[export]]\npath = \"/\"\n");
        assert!(e.contains("line 1") && e.contains("out of range"), "{e}");
        let e = error_of("");
        assert!(e.contains("no exports"), "{e}");
        let e = error_of("timestamps = \"exact\"\n[[export]]\npath = \"/\"\n");
        assert!(e.contains("line 1") && e.contains("\"multigrain\""), "{e}");
    }

    #[test]
    fn the_nfsv4_lease_is_checked() {
        let c = parse("[[export]]\npath = \"/\"\n", "t.toml").unwrap();
        assert_eq!(c.lease_secs, 90);
        let c = parse("lease_secs = 10\n[[export]]\npath = \"/\"\n", "t.toml").unwrap();
        assert_eq!(c.lease_secs, 10);
        let e = error_of("lease_secs = 5\n[[export]]\npath = \"/\"\n");
        assert!(
            e.contains("line 1") && e.contains("give 10 to 3600 seconds"),
            "{e}"
        );
    }

    #[test]
    fn seed_switches_parse_and_default() {
        let c = parse("[[export]]\npath = \"/\"\n", "t.toml").unwrap();
        assert_eq!(c.timestamps, backend_mem::TimestampMode::Multigrain);
        assert_eq!(c.rangelock, backend_mem::RangeLockMode::Cheat);
        assert!(c.fhcache);
        let text = "timestamps = \"coarse\"\nrangelock = \"mutex\"\nfhcache = \"off\"\n\
                    [[export]]\npath = \"/\"\n";
        let c = parse(text, "t.toml").unwrap();
        assert_eq!(c.timestamps, backend_mem::TimestampMode::Coarse);
        assert_eq!(c.rangelock, backend_mem::RangeLockMode::Mutex);
        assert!(!c.fhcache);
        let e = parse(
            "\nrangelock = \"none\"\n[[export]]\npath = \"/\"\n",
            "t.toml",
        )
        .unwrap_err()
        .0;
        assert!(
            e.starts_with("t.toml: line 2: unknown range-lock mode"),
            "{e}"
        );
        assert!(parse_timestamps("fine").is_ok() && parse_rangelock("cheat").is_ok());
        assert_eq!(
            (parse_fhcache("on"), parse_fhcache("off")),
            (Ok(true), Ok(false))
        );
        assert!(parse_fhcache("yes").is_err());
        assert_eq!(c.sendfile, nfsd::SendfileMode::Auto);
        let c = parse("sendfile = \"never\"\n[[export]]\npath = \"/\"\n", "t.toml").unwrap();
        assert_eq!(c.sendfile, nfsd::SendfileMode::Never);
        let e = parse("sendfile = \"yes\"\n[[export]]\npath = \"/\"\n", "t.toml")
            .unwrap_err()
            .0;
        assert!(
            e.starts_with("t.toml: line 1: unknown sendfile setting"),
            "{e}"
        );
    }

    #[test]
    fn idmap_domain_is_a_plain_domain_name() {
        let c = parse("[[export]]\npath = \"/\"\n", "t.toml").unwrap();
        assert_eq!(c.idmap_domain, None, "numbers by default");
        let c = parse(
            "idmap_domain = \"example.com\"\n[[export]]\npath = \"/\"\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(c.idmap_domain.as_deref(), Some("example.com"));
        for bad in ["", "a@b", "two words", "tab\there"] {
            let text = format!("idmap_domain = {bad:?}\n[[export]]\npath = \"/\"\n");
            let e = parse(&text, "t.toml").unwrap_err().0;
            assert!(
                e.starts_with("t.toml: line 1: invalid idmap domain"),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn listening_beyond_loopback_needs_a_client_list_per_export() {
        let text = "[[export]]\npath = \"/a\"\nclients = [\"10.0.0.0/8\"]\n\
                    [[export]]\npath = \"/b\"\n";
        let mut c = parse(text, "t.toml").unwrap();
        assert!(c.exports[0].clients_given && !c.exports[1].clients_given);
        for loopback in [
            "127.0.0.1:2049",
            "127.3.4.5:0",
            "[::1]:2049",
            "[::ffff:127.0.0.1]:1",
        ] {
            c.listen = loopback.parse().unwrap();
            assert_eq!(check_exposure(&c), Ok(()), "{loopback}");
        }
        for open in [
            "0.0.0.0:2049",
            "[::]:2049",
            "192.168.1.5:2049",
            "[::ffff:10.0.0.1]:1",
        ] {
            c.listen = open.parse().unwrap();
            let e = check_exposure(&c).unwrap_err();
            assert!(e.contains("export \"/b\" has no client list"), "{e}");
            assert!(!e.contains("\"/a\""), "{e}");
            assert!(e.contains("--clients") && e.contains("clients = ["), "{e}");
        }
        c.exports[1].clients_given = true;
        assert_eq!(check_exposure(&c), Ok(()));
        let mut d = ServerConfig::defaults();
        d.listen = "0.0.0.0:2049".parse().unwrap();
        assert!(
            check_exposure(&d).is_err(),
            "the default export has no list"
        );
    }

    #[test]
    fn the_clients_flag_parses_cidrs_and_addresses() {
        let list = [
            "192.168.1.0/24".to_string(),
            " 10.0.0.7".to_string(),
            "::1".to_string(),
        ];
        let nets = parse_clients(&list).unwrap();
        let shown: Vec<String> = nets.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["192.168.1.0/24", "10.0.0.7/32", "::1/128"]);
        assert!(parse_clients(&[String::new()])
            .unwrap_err()
            .contains("at least one"));
        assert!(parse_clients(&["10.0.0.0/33".into()])
            .unwrap_err()
            .contains("invalid client network"));
    }

    #[test]
    fn erofs_exports_are_read_only_and_need_an_image() {
        let text = "decode = \"pool\"\n[[export]]\npath = \"/img\"\nbackend = \"erofs\"\nimage = \"/tmp/x.erofs\"\n";
        let c = parse(text, "test.toml").unwrap();
        assert_eq!(c.decode, runtime::decode::DecodeMode::Pool);
        assert!(c.exports[0].options.read_only);
        assert_eq!(
            c.exports[0].backend,
            BackendConfig::Erofs {
                image: "/tmp/x.erofs".into()
            }
        );
        let e = error_of("[[export]]\npath = \"/\"\nbackend = \"erofs\"\n");
        assert!(e.contains("line 3") && e.contains("image ="), "{e}");
        let e = error_of("decode = \"fast\"\n[[export]]\npath = \"/\"\n");
        assert!(e.contains("line 1") && e.contains("percore"), "{e}");
    }

    #[cfg(feature = "object")]
    #[test]
    fn object_exports_need_a_database_and_a_store_and_hide_the_password() {
        let text = "handle_key = \"/k\"\n[[export]]\npath = \"/\"\nbackend = \"object\"\n\
                    postgres = \"postgres://u:pw@127.0.0.1:5/db\"\n\
                    store = \"s3://b?endpoint=http://127.0.0.1:9&prefix=fs\"\n";
        let c = parse(text, "test.toml").unwrap();
        assert_eq!(c.handle_key, Some(PathBuf::from("/k")));
        let BackendConfig::Object {
            postgres,
            store,
            credentials,
            gc,
            lock_lease,
        } = &c.exports[0].backend
        else {
            panic!("not an object export: {:?}", c.exports[0].backend);
        };
        assert_eq!(postgres.0, "postgres://u:pw@127.0.0.1:5/db");
        assert_eq!(store.prefix, "fs");
        assert_eq!(*credentials, None);
        assert_eq!(*gc, backend_object::GcConfig::default());
        assert_eq!(*lock_lease, backend_object::limits::HEAD_LOCK_LEASE);
        assert!(
            !format!("{:?}", c.exports[0]).contains("pw"),
            "the password is never printed"
        );
        let e = error_of("[[export]]\npath = \"/\"\nbackend = \"object\"\nstore = \"s3://b\"\n");
        assert!(e.contains("line 3") && e.contains("postgres ="), "{e}");
        let e = error_of(
            "[[export]]\npath = \"/\"\nbackend = \"object\"\npostgres = \"x\"\nstore = \"http://b\"\n",
        );
        assert!(e.contains("line 5") && e.contains("s3://"), "{e}");
        let object = "[[export]]\npath = \"/\"\nbackend = \"object\"\npostgres = \"x\"\n\
                      store = \"s3://b\"\n";
        let c = parse(
            &format!("{object}gc_interval_secs = 0\ngc_grace_secs = 90\ncompact_slices = 4\n"),
            "t",
        )
        .unwrap();
        let BackendConfig::Object { gc, .. } = &c.exports[0].backend else {
            panic!("not an object export");
        };
        assert_eq!(gc.interval, Duration::ZERO);
        assert_eq!(gc.grace, Duration::from_secs(90));
        assert_eq!(gc.compact_slices, 4);
        let e = error_of(&format!("{object}gc_grace_secs = 5\n"));
        assert!(e.contains("line 6") && e.contains("at least 20"), "{e}");
        let e = error_of(&format!("{object}compact_slices = 1\n"));
        assert!(e.contains("line 6") && e.contains("at least 2"), "{e}");
        let e = error_of(&format!("{object}lock_lease_secs = 2\n"));
        assert!(e.contains("line 6") && e.contains("at least 3"), "{e}");
        let c = parse(&format!("{object}lock_lease_secs = 4\n"), "t").unwrap();
        let BackendConfig::Object { lock_lease, .. } = &c.exports[0].backend else {
            panic!("not an object export");
        };
        assert_eq!(*lock_lease, Duration::from_secs(4));
    }
}
