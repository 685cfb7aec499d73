//! `granary serve`: build the exports, bind, hand connections to the per-core workers,
//! and shut down cleanly on SIGINT/SIGTERM.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use rpc::budget::ServerBudget;
use rpc::conn::{serve_connection, ConnLimits};
use rpc::drc::ReplyCache;
use rpc::offload::Offload;
use rpc::table::{AdmitLimits, ConnTable};
use rpc::Dispatcher;
use runtime::decode::DecodeWorkers;
use runtime::timers::{Scope, Timers};
use sync::filecache::Evicted;
use tokio::sync::watch;
use vfs::{Export, ExportId, ExportTable, HandleKey};

use crate::config::{BackendConfig, ServerConfig};
use crate::portmap;

/// How long shutdown waits for in-flight requests before exiting anyway.
const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// Pending connections the kernel queues before `accept`.
const LISTEN_BACKLOG: i32 = 1024;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}; pick another port with --listen ADDR:PORT (port 0 picks a free one)")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start workers: {0}")]
    Workers(std::io::Error),
    #[error("{0}")]
    Export(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("export {path}: {message}")]
    Backend { path: String, message: String },
    #[error("configuration refused: {0}")]
    Config(String),
}

/// Runs the server until a shutdown signal.
///
/// # Errors
/// Start-up failures; see [`ServeError`].
pub fn run(config: ServerConfig) -> Result<(), ServeError> {
    crate::config::check_exposure(&config).map_err(ServeError::Config)?;
    // One system clock: wall time for file stamps, monotonic time for the reply cache,
    // timers and connection watchdogs.
    let clock = gtime::SystemClock::shared();
    // One multigrain clock for every export: its floor orders change times across them.
    let stamps = Arc::new(gtime::MultigrainClock::new(
        Arc::clone(&clock),
        config.timestamps,
    ));
    // Room for every connection and the open-file cache of host exports, before any
    // export opens a file (seed 004: the cache's bound is checked against RLIMIT_NOFILE).
    raise_fd_limit(config.limits.max_connections + open_files_wanted(&config));
    let open_files = open_file_entries(&config);
    let (exports, hosts, objects, state_dir) = build_exports(&config, &stamps, open_files)?;
    // check_record_bytes refused a record limit too small for one page of data.
    let max_io_bytes = nfsd::limits::max_io_bytes_for_record(config.limits.max_record_bytes)
        .map_err(|smallest| {
            ServeError::Config(format!(
                "max_record_bytes = {} cannot carry a WRITE of one page; use at least {smallest}",
                config.limits.max_record_bytes
            ))
        })?;
    tracing::info!(max_io_bytes, "READ/WRITE size (FSINFO rtmax/wtmax)");
    tracing::info!(
        fhcache = config.fhcache,
        "credential and open-file caches (seed 004)"
    );
    tracing::info!(sendfile = ?config.sendfile, "large READs of host exports sent with sendfile");
    match &config.idmap_domain {
        Some(domain) => tracing::info!(%domain, "NFSv4 owners sent as name@domain"),
        None => tracing::info!("NFSv4 owners sent as numbers (no --idmap-domain)"),
    }
    let state = Arc::new(
        nfsd::NfsState::new(exports, rand::random(), max_io_bytes)
            .with_cred_cache(config.fhcache)
            .with_sendfile(config.sendfile)
            .with_idmap_domain(config.idmap_domain.as_deref()),
    );
    let mut dispatcher = Dispatcher::new();
    nfsd::register(&mut dispatcher, &state);
    // NFSv4.1/4.2 on the same port, over the same exports, handles and credentials.
    let mut v4_config = state4::Config::new(rand::random());
    v4_config.lease = Duration::from_secs(u64::from(config.lease_secs));
    v4_config.grace = v4_config.lease;
    let v4_dir = state_dir.clone().or_else(|| config.state_dir.clone());
    let v4 = Arc::new(nfs4_state(
        v4_dir.as_deref(),
        Arc::clone(&state),
        Arc::clone(&clock),
        v4_config,
    )?);
    nfsd::v4::register(&mut dispatcher, &v4);
    // NLM v4 and NSM v1 for NFSv3 clients' locks, over the core's lock manager.
    let (outbox, callbacks) = crate::outbox::outbox();
    let monitor = match &state_dir {
        Some(dir) => nfsd::nlm::Monitor::open(dir).map_err(ServeError::Export)?,
        None => nfsd::nlm::Monitor::in_memory(),
    };
    let nlm = nfsd::nlm::NlmState::new(Arc::clone(&state), monitor, Arc::clone(&clock), outbox);
    nfsd::nlm::register(&mut dispatcher, &nlm);
    let reply_cache = Arc::new(ReplyCache::new(
        config.limits.reply_cache_entries,
        rpc::drc::DEFAULT_TTL,
    ));
    dispatcher.set_reply_cache(Arc::clone(&reply_cache), Arc::clone(&clock));
    let table = ConnTable::new(
        AdmitLimits {
            max_connections: config.limits.max_connections,
            max_per_client: config.limits.max_connections_per_client,
            reclaim_idle: config.limits.reclaim_idle,
        },
        Arc::clone(&clock),
    );
    let budget = ServerBudget::new(config.limits.server_budget_bytes);
    let metrics = config.metrics.map(|addr| {
        let m = crate::metrics::Metrics::new(Arc::clone(&table), Arc::clone(&budget));
        dispatcher.set_observer(m.clone(), Arc::clone(&clock));
        (addr, m)
    });
    let dispatcher = Arc::new(dispatcher);
    let listener = bind(config.listen, config.limits.max_connections)?;
    let local = listener.local_addr()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    // NLM and NSM over UDP too, on the same address and port (`udp`); a UDP port taken
    // by another service leaves them TCP only.
    let udp = match crate::udp::start(local, Arc::clone(&dispatcher), stop_rx.clone()) {
        Ok(thread) => Some(thread),
        Err(e) => {
            tracing::warn!(addr = %local, error = %e, "NLM and NSM are not served over UDP (the UDP port is taken?): a client's sm-notify cannot reach granary; its next LOCK with a new NSM state frees its old locks instead");
            None
        }
    };
    // Once every socket is bound: a client that reads the address may call at once.
    announce(local, &config);
    let mut offered: Vec<portmap::Registration> = dispatcher
        .offered()
        .map(|(program, version)| (program, version, portmap::Transport::Tcp))
        .collect();
    if udp.is_some() {
        let over_udp = dispatcher
            .offered()
            .filter(|(program, _)| crate::udp::UDP_PROGRAMS.contains(program))
            .map(|(program, version)| (program, version, portmap::Transport::Udp));
        offered.extend(over_udp);
    }
    let registered = if config.portmap {
        register_portmap(&offered, local.port())
    } else {
        Vec::new()
    };
    let timers = Arc::new(Timers::new(
        config.workers,
        config.timers,
        Arc::clone(&clock),
    ));
    let hooks: Arc<dyn runtime::WorkerHooks> = timers.clone();
    let workers = runtime::Workers::start_with_hooks(
        config.workers,
        "granary-worker",
        DRAIN_DEADLINE,
        Some(hooks),
        if config.pin_workers {
            runtime::Pinning::PerCore
        } else {
            runtime::Pinning::Free
        },
    )
    .map_err(ServeError::Workers)?;
    let main_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    main_rt.spawn(crate::outbox::run(callbacks, config.callback_portmap_port));
    restart_locks(&nlm, config.limits.grace);
    let limits = ConnLimits {
        max_record_bytes: config.limits.max_record_bytes,
        max_in_flight: config.limits.max_in_flight,
        record_timeout: config.limits.record_timeout,
        idle_timeout: config.limits.idle_timeout,
        write_timeout: config.limits.write_timeout,
        budget_bytes: config.limits.conn_budget_bytes,
    };
    let acceptor = Acceptor {
        workers: &workers,
        dispatcher,
        limits,
        stop: stop_rx,
        table: Arc::clone(&table),
        budget,
    };
    if let Some((addr, m)) = metrics {
        let pools = crate::metrics::PoolCollector(workers.pools());
        m.registry().register_collector(Box::new(pools));
        let callbacks = crate::metrics::CallbackCollector(Arc::clone(&v4.callbacks));
        m.registry().register_collector(Box::new(callbacks));
        let locks =
            crate::metrics::LockCollector(Arc::clone(&state.locks), Arc::clone(&state.head_waits));
        m.registry().register_collector(Box::new(locks));
        let operations = crate::metrics::V4Collector(Arc::clone(&v4));
        m.registry().register_collector(Box::new(operations));
        #[cfg(feature = "object")]
        if config.exports.iter().any(|e| e.backend.is_object()) {
            let objects = crate::metrics::ObjectCollector;
            m.registry().register_collector(Box::new(objects));
        }
        let _enter = main_rt.enter();
        let listener = crate::metrics::bind(addr)
            .and_then(tokio::net::TcpListener::from_std)
            .map_err(|source| ServeError::Bind { addr, source })?;
        println!("  metrics: http://{}/metrics", listener.local_addr()?);
        main_rt.spawn(crate::metrics::serve_http(listener, m));
    }
    for w in 0..workers.len() {
        let (timers, stop) = (Arc::clone(&timers), acceptor.stop.clone());
        workers.submit(w, move || timers.drive(w, stop));
    }
    schedule_connection_scan(Arc::clone(&timers), table, limits);
    schedule_reply_cache_prune(Arc::clone(&timers), reply_cache, clock);
    schedule_lease_expiry(Arc::clone(&timers), Arc::clone(&v4));
    schedule_grace_end(&timers, &v4);
    if open_files > 0 {
        schedule_open_file_aging(Arc::clone(&timers), Arc::new(hosts.clone()));
    }
    #[cfg(feature = "object")]
    for fs in objects {
        schedule_object_gc(Arc::clone(&timers), fs);
    }
    #[cfg(not(feature = "object"))]
    drop(objects);
    main_rt.block_on(acceptor.run(listener))?;
    tracing::info!("shutting down: no new connections; finishing requests in progress");
    let _ = stop_tx.send(true);
    workers.join();
    if let Some(thread) = udp {
        let _ = thread.join();
    }
    for host in &hosts {
        // Syncs descriptors that hold UNSTABLE writes before closing them.
        host.close_open_files();
    }
    report_stamps(&stamps);
    if !registered.is_empty() {
        if let Err(e) = portmap::unregister(&registered) {
            tracing::warn!(error = %e, "could not unregister from the portmapper");
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// After a restart with NLM lock holders recorded in the state directory: a grace period
/// (only reclaims are granted; checked when a lock is asked for, so it needs no timer of
/// its own) and SM_NOTIFY to each of those hosts, whose lock managers then reclaim.
fn restart_locks(nlm: &nfsd::nlm::NlmState, grace: Duration) {
    let previous = nlm.monitor.previous_hosts().to_vec();
    tracing::info!(
        state = nlm.monitor.state(),
        hosts = previous.len(),
        "NSM state number"
    );
    if previous.is_empty() {
        return;
    }
    nlm.start_grace(grace);
    nlm.notify_hosts(&previous);
}

/// How often expired reply-cache entries are dropped.
const REPLY_CACHE_PRUNE_INTERVAL: Duration = Duration::from_secs(10);

/// Idle, stalled and non-reading clients are found by one periodic scan of the
/// connection table: a single global timer for the whole server (seed 002: under
/// `--timers pull`, an idle worker hands it to the hierarchy and is not woken for it),
/// not a timer per connection or per request.
fn schedule_connection_scan(timers: Arc<Timers>, table: Arc<ConnTable>, limits: ConnLimits) {
    let from = runtime::current_worker().unwrap_or(0);
    let again = Arc::clone(&timers);
    let scan: runtime::timers::Callback = Box::new(move || {
        rpc::ratelog::flush();
        let closed = table.scan(limits.timeouts());
        if closed > 0 {
            tracing::debug!(closed, "connection scan closed overdue connections");
        }
        schedule_connection_scan(again, table, limits);
    });
    timers.insert(from, limits.scan_period(), Scope::Global, scan);
}

/// Descriptors the open-file caches of host exports may want (0 without host exports or
/// with `--fhcache off`).
fn open_files_wanted(config: &ServerConfig) -> usize {
    let hosts = config.exports.iter().any(|e| e.backend.is_host());
    if config.fhcache && hosts {
        sync::limits::FILECACHE_DEFAULT_ENTRIES
    } else {
        0
    }
}

/// The bound of each host export's open-file cache: what RLIMIT_NOFILE leaves after the
/// connections, shared by the host exports; 0 when the cache is off. A limit too low for
/// every connection as well is not an error: the cache takes a smaller share and the log
/// says how many connections fit and how to raise the limit.
fn open_file_entries(config: &ServerConfig) -> usize {
    let hosts = config
        .exports
        .iter()
        .filter(|e| e.backend.is_host())
        .count();
    if open_files_wanted(config) == 0 || hosts == 0 {
        return 0;
    }
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let connections = u64::try_from(config.limits.max_connections).unwrap_or(u64::MAX);
    let budget = sync::limits::filecache_entries_for(open_files_wanted(config), soft, connections);
    if let Some(fit) = budget.connections_short {
        tracing::warn!(
            nofile = soft,
            max_connections = connections,
            open_files = budget.entries,
            "the open-file limit (RLIMIT_NOFILE {soft}) cannot hold {connections} connections \
             and the open-file cache: about {fit} connections fit at once; raise it \
             (ulimit -n 65536, or LimitNOFILE= in a systemd unit) or lower max_connections"
        );
    }
    let each = (budget.entries / hosts).max(1);
    tracing::info!(
        nofile = soft,
        open_files = each,
        "open-file cache of each host export (seed 004)"
    );
    each
}

/// Ages the open-file caches of host exports off the request path: one global timer
/// (seed 002: under `--timers pull` an idle worker hands it to the hierarchy and is not
/// woken for it) that re-arms itself. Descriptors unused for two passes are evicted and
/// closed on a thread of their own, since closing one that holds UNSTABLE writes
/// `fdatasync`s it first and must not stall the worker that ran the timer.
fn schedule_open_file_aging(timers: Arc<Timers>, hosts: Arc<Vec<Arc<backend_host::HostFs>>>) {
    let (tx, rx) = std::sync::mpsc::channel::<Evicted<backend_host::OpenFile>>();
    let closer = std::thread::Builder::new()
        .name("granary-close".into())
        .spawn(move || rx.into_iter().for_each(drop));
    if let Err(e) = closer {
        tracing::warn!(error = %e, "no thread for closing aged files; the timer closes them");
    }
    arm_open_file_aging(timers, hosts, tx);
}

fn arm_open_file_aging(
    timers: Arc<Timers>,
    hosts: Arc<Vec<Arc<backend_host::HostFs>>>,
    closer: std::sync::mpsc::Sender<Evicted<backend_host::OpenFile>>,
) {
    let from = runtime::current_worker().unwrap_or(0);
    let again = Arc::clone(&timers);
    let age: runtime::timers::Callback = Box::new(move || {
        for host in hosts.iter() {
            let evicted = host.age_open_files_deferred();
            tracing::trace!(closed = evicted.len(), "open-file cache aged");
            if !evicted.is_empty() {
                // If the closing thread is gone, the bundle comes back and closes here.
                drop(closer.send(evicted));
            }
        }
        arm_open_file_aging(again, hosts, closer);
    });
    let every = backend_host::limits::OPEN_FILE_AGE_INTERVAL;
    timers.insert(from, every, Scope::Global, age);
}

/// Starts a round of an object export's garbage collection and compaction every
/// `gc_interval_secs`: one global timer per export (seed 002) that re-arms itself. The
/// round runs on the backend's own runtime, so the worker that fires the timer never
/// waits on the database or the store; a round still running skips the next tick.
#[cfg(feature = "object")]
fn schedule_object_gc(timers: Arc<Timers>, fs: Arc<backend_object::ObjectFs>) {
    let Some(every) = fs.gc_interval() else {
        return;
    };
    let from = runtime::current_worker().unwrap_or(0);
    let again = Arc::clone(&timers);
    let tick: runtime::timers::Callback = Box::new(move || {
        fs.gc_tick();
        schedule_object_gc(again, fs);
    });
    timers.insert(from, every, Scope::Global, tick);
}

/// Raises the soft open-file limit toward the hard one so that `max_connections` sockets
/// fit (a default soft limit of 1024 would refuse connections below the configured cap).
fn raise_fd_limit(max_connections: usize) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let want = u64::try_from(max_connections)
        .unwrap_or(u64::MAX)
        .saturating_add(256);
    let mut limit = getrlimit(Resource::Nofile);
    let (Some(cur), hard) = (limit.current, limit.maximum) else {
        return;
    };
    let target = hard.map_or(want, |h| want.min(h));
    if cur >= target {
        return;
    }
    limit.current = Some(target);
    if let Err(e) = setrlimit(Resource::Nofile, limit) {
        tracing::info!(error = %e, cur, target, "could not raise the open-file limit");
    }
}

/// Ages the duplicate request cache off the request path: a global timer (any worker may
/// run it; an idle worker is not woken for it) that re-arms itself.
fn schedule_reply_cache_prune(
    timers: Arc<Timers>,
    cache: Arc<ReplyCache>,
    clock: Arc<dyn gtime::Clock>,
) {
    let from = runtime::current_worker().unwrap_or(0);
    let again = Arc::clone(&timers);
    let prune: runtime::timers::Callback = Box::new(move || {
        let now_ns = u64::try_from(clock.monotonic().as_nanos()).unwrap_or(u64::MAX);
        let removed = cache.prune(now_ns);
        tracing::trace!(removed, "reply cache pruned");
        schedule_reply_cache_prune(again, cache, clock);
    });
    timers.insert(from, REPLY_CACHE_PRUNE_INTERVAL, Scope::Global, prune);
}

/// Drops the NFSv4 state (opens, locks) of clients that stopped renewing their lease, and
/// the places of blocked LOCKs nobody asks for any more: one global timer
/// (the knfsd laundromat's shape; seed 002: under `--timers pull` an idle worker hands it
/// to the hierarchy and is not woken for it) that runs every half lease, so a client's
/// state goes between one and one and a half leases after its last SEQUENCE. A renewing
/// client costs no timer work at all: SEQUENCE only stores the time.
fn schedule_lease_expiry(timers: Arc<Timers>, v4: Arc<nfsd::v4::Nfs4State>) {
    let from = runtime::current_worker().unwrap_or(0);
    let again = Arc::clone(&timers);
    let every = v4.state.lease() / 2;
    let expire: runtime::timers::Callback = Box::new(move || {
        let now = v4.now();
        for gone in v4.expire(now) {
            tracing::info!(
                client = format_args!("{:#x}", gone.client),
                opens = gone.closed.len(),
                locks = gone.locks,
                "NFSv4 client stopped renewing its lease: its state is released"
            );
        }
        // Blocked LOCKs whose clients stopped asking give up their places.
        v4.state.lock_manager().expire_waiters(now);
        schedule_lease_expiry(again, v4);
    });
    timers.insert(from, every, Scope::Global, expire);
}

/// The NFSv4 server's state, with client records in the state directory when there is
/// one (`--state-dir`, or the default one host and erofs exports use): clients the
/// previous run recorded may reclaim their opens during a grace period of one lease.
fn nfs4_state(
    dir: Option<&std::path::Path>,
    core: Arc<nfsd::NfsState>,
    clock: Arc<dyn gtime::Clock>,
    mut config: state4::Config,
) -> Result<nfsd::v4::Nfs4State, ServeError> {
    let Some(dir) = dir else {
        return Ok(nfsd::v4::Nfs4State::new(core, clock, config));
    };
    crate::state::prepare(dir).map_err(ServeError::Export)?;
    let (records, previous) =
        nfsd::v4::recovery::ClientRecords::open(dir).map_err(ServeError::Export)?;
    config.previous_owners = previous.into_iter().map(|r| r.owner).collect();
    if !config.previous_owners.is_empty() {
        tracing::info!(
            clients = config.previous_owners.len(),
            grace_secs = config.grace.as_secs(),
            dir = %records.dir().display(),
            "NFSv4 grace period: clients of the previous run may reclaim their opens; new opens wait"
        );
    }
    let owner = crate::state::nfs4_server_owner(dir).map_err(ServeError::Export)?;
    Ok(nfsd::v4::Nfs4State::new(core, clock, config)
        .with_records(records)
        .with_server_owner(owner))
}

/// Ends the grace period on a pull-model timer (seed 002) at its deadline, if there is
/// one (it may end earlier, when every client of the previous run has reclaimed).
fn schedule_grace_end(timers: &Arc<Timers>, v4: &Arc<nfsd::v4::Nfs4State>) {
    let Some(deadline) = v4.state.grace_deadline() else {
        return;
    };
    let from = runtime::current_worker().unwrap_or(0);
    let after = deadline.saturating_sub(v4.now());
    let (again, v4) = (Arc::clone(timers), Arc::clone(v4));
    let end: runtime::timers::Callback = Box::new(move || {
        match v4.end_grace() {
        Some(unclaimed) => tracing::info!(
            unclaimed,
            "NFSv4 grace period over: new opens are served; clients that did not reclaim lost their opens"
        ),
        None => schedule_grace_end(&again, &v4),
    }
    });
    timers.insert(from, after, Scope::Global, end);
}

/// How often multigrain took its fine path while the server ran, on stdout (the lab reads
/// it to count fine-clock reads and floor CASes per WRITE).
fn report_stamps(stamps: &gtime::MultigrainClock) {
    let s = stamps.stats();
    println!(
        "granary: multigrain clock ({}): {} fine stamps, {} floors published, {} racing \
         floors adopted, {} fetch_max",
        stamps.mode(),
        s.fine_stamps,
        s.floor_swaps,
        s.floor_adopted,
        s.floor_max
    );
}

/// The exports, the host backends among them (their open-file caches are aged by the
/// server's timer), the object backends (their garbage collection is started by it),
/// and the state directory if an export needs one.
type Built = (
    ExportTable,
    Vec<Arc<backend_host::HostFs>>,
    Objects,
    Option<std::path::PathBuf>,
);

/// The object backends of a server (never any without the `object` feature).
#[cfg(feature = "object")]
type Objects = Vec<Arc<backend_object::ObjectFs>>;
#[cfg(not(feature = "object"))]
type Objects = Vec<std::convert::Infallible>;

fn build_exports(
    config: &ServerConfig,
    clock: &Arc<gtime::MultigrainClock>,
    open_files: usize,
) -> Result<Built, ServeError> {
    tracing::info!(timestamps = %config.timestamps, rangelock = %config.rangelock, "seed designs");
    // Host and erofs exports hand out handles that outlive the process: both need the
    // persisted handle key (and host exports their indexes) from the state directory.
    let persistent = config
        .exports
        .iter()
        .any(|e| !matches!(e.backend, BackendConfig::Mem { .. }))
        && config.handle_key.is_none();
    let state_dir = persistent.then(|| {
        config
            .state_dir
            .clone()
            .unwrap_or_else(|| crate::config::default_state_dir(backend_host::server_identity().0))
    });
    if let Some(dir) = &state_dir {
        crate::state::prepare(dir).map_err(ServeError::Export)?;
    }
    let mut decode = None;
    let mut hosts = Vec::new();
    #[cfg_attr(not(feature = "object"), expect(unused_mut))]
    let mut objects = Objects::new();
    let mut exports = Vec::with_capacity(config.exports.len());
    for (i, c) in config.exports.iter().enumerate() {
        let (backend, id, incarnation): (Arc<dyn vfs::Backend>, ExportId, u32) = match &c.backend {
            BackendConfig::Mem { capacity_bytes } => {
                let mem = backend_mem::MemConfig {
                    capacity_bytes: *capacity_bytes,
                    timestamps: config.timestamps,
                    rangelock: config.rangelock,
                    ..Default::default()
                };
                let fs = Arc::new(backend_mem::MemFs::with_clock(mem, Arc::clone(clock)));
                (fs, numbered(i), rand::random())
            }
            BackendConfig::Host { dir } => {
                let state = state_dir.as_deref().expect("host exports have a state dir");
                let mut host = backend_host::HostConfig::new(dir);
                host.index_path = Some(crate::state::index_path(state, dir, &c.path));
                host.open_files = open_files;
                host.index = backend_host::index::IndexLimits {
                    max_entries: config.limits.index_entries,
                    max_bytes: config.limits.index_bytes,
                };
                let fs = backend_host::HostFs::new(&host)
                    .map_err(|e| ServeError::Export(e.to_string()))?;
                let fs = Arc::new(fs);
                hosts.push(Arc::clone(&fs));
                let incarnation =
                    crate::state::incarnation(state, dir, &c.path).map_err(ServeError::Export)?;
                (fs, host_export_id(dir, &c.path), incarnation)
            }
            BackendConfig::Erofs { image } => {
                let workers = match &decode {
                    Some(w) => Arc::clone(w),
                    None => {
                        let w = Arc::new(DecodeWorkers::start(config.decode, None)?);
                        tracing::info!(decode = ?config.decode, "EROFS decode workers (seed 001)");
                        decode = Some(Arc::clone(&w));
                        w
                    }
                };
                let cache = config.erofs_cache_bytes;
                let image_err = |e: &dyn std::fmt::Display| ServeError::Backend {
                    path: c.path.clone(),
                    message: format!("{}: {e}", image.display()),
                };
                let runner: Arc<dyn backend_erofs::DecodeRunner> = Arc::new(Decoders(workers));
                let fs = backend_erofs::ErofsBackend::open(image, runner, cache)
                    .map_err(|e| image_err(&e))?;
                // From the image itself: the same image (or a copy) keeps its handles
                // across restarts, another image makes them STALE.
                let state = state_dir
                    .as_deref()
                    .expect("erofs exports have a state dir");
                let identity = crate::state::erofs_identity(state, image, || {
                    fs.identity().map_err(|e| e.to_string())
                })
                .map_err(|e| image_err(&e))?;
                let incarnation = backend_erofs::ErofsBackend::incarnation_of(identity);
                (Arc::new(fs), erofs_export_id(&c.path), incarnation)
            }
            #[cfg(feature = "object")]
            BackendConfig::Object {
                postgres,
                store,
                credentials,
                gc,
                lock_lease,
            } => {
                let fail = |message: String| ServeError::Backend {
                    path: c.path.clone(),
                    message,
                };
                let object = backend_object::ObjectConfig {
                    postgres: postgres.0.clone(),
                    store: store.clone(),
                    credentials: backend_object::Credentials::load(credentials.as_deref())
                        .map_err(fail)?,
                    gc: *gc,
                    lock_lease: *lock_lease,
                };
                let fs = backend_object::ObjectFs::open(&object, Arc::clone(clock.source()))
                    .map_err(fail)?;
                let fs = Arc::new(fs);
                objects.push(Arc::clone(&fs));
                // The incarnation lives in the database: every head shares it.
                let incarnation = fs.incarnation();
                (fs, object_export_id(&c.path), incarnation)
            }
        };
        exports.push(Export::new(
            id,
            incarnation,
            c.path.clone(),
            c.options.clone(),
            backend,
        ));
    }
    // Handles of mem exports die with the server: a fresh incarnation per run makes an
    // old handle STALE rather than naming a different file. Host exports keep theirs in
    // the state directory and erofs exports derive theirs from the image; with the key
    // kept there too, their handles survive a restart.
    let key = match (&config.handle_key, &state_dir) {
        (Some(file), _) => crate::state::handle_key_file(file).map_err(ServeError::Export)?,
        (None, Some(dir)) => crate::state::handle_key(dir).map_err(ServeError::Export)?,
        (None, None) => HandleKey::new(rand::random()),
    };
    check_distinct_ids(&exports)?;
    Ok((ExportTable::new(exports, key), hosts, objects, state_dir))
}

/// Seed 001's decode workers as the erofs backend's decode runner.
struct Decoders(Arc<DecodeWorkers>);

impl backend_erofs::DecodeRunner for Decoders {
    fn run(&self, job: backend_erofs::DecodeJob) {
        self.0.run(job);
    }
}

/// A worker's blocking pool as its connections' offload (`rpc::offload`).
struct PoolOffload(runtime::blocking::BlockingHandle);

impl Offload for PoolOffload {
    fn run(
        &self,
        job: rpc::offload::BlockingJob,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'static>> {
        let pool = self.0.clone();
        Box::pin(async move { pool.run(job).await.is_some() })
    }
}

/// Mem and erofs exports: 1, 2, … in config order (their handles die with the server).
fn numbered(index: usize) -> ExportId {
    ExportId(u32::try_from(index + 1).expect("fewer than 2^31 exports"))
}

/// Host exports: from the directory and the export path, so reordering the config keeps
/// handles valid; the top bit is set, so no numbered export has the same id.
fn host_export_id(dir: &std::path::Path, path: &str) -> ExportId {
    hashed_export_id(crate::state::export_hash(dir, path))
}

/// EROFS exports: from the export path alone, so reordering the config or moving the
/// image file keeps handles valid (the image's own identity is the incarnation); the top
/// bit is set as for host exports.
fn erofs_export_id(path: &str) -> ExportId {
    hashed_export_id(crate::state::erofs_export_hash(path))
}

/// Object exports: from the export path, as for erofs exports, so every head that serves
/// the file system under the same path hands out the same handles.
#[cfg(feature = "object")]
fn object_export_id(path: &str) -> ExportId {
    hashed_export_id(crate::state::erofs_export_hash(&format!("object:{path}")))
}

/// A hash folded to an export id with the top bit set (numbered exports never have it).
fn hashed_export_id(h: u64) -> ExportId {
    ExportId((h ^ (h >> 32)) as u32 | 0x8000_0000)
}

/// Refuses two exports whose ids (hashed for host and erofs exports) happen to agree,
/// which would otherwise make one export's handles resolve on the other.
fn check_distinct_ids(exports: &[Export]) -> Result<(), ServeError> {
    for (i, a) in exports.iter().enumerate() {
        if let Some(b) = exports[i + 1..].iter().find(|b| b.id == a.id) {
            return Err(ServeError::Config(format!(
                "exports {:?} and {:?} hash to the same handle id {:#x}; change one export path",
                a.path, b.path, a.id.0
            )));
        }
    }
    Ok(())
}

fn bind(addr: SocketAddr, max_connections: usize) -> Result<TcpListener, ServeError> {
    use socket2::{Domain, Socket, Type};
    let bind_err = |source| ServeError::Bind { addr, source };
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None).map_err(bind_err)?;
    socket.set_reuse_address(true).map_err(bind_err)?;
    socket.bind(&addr.into()).map_err(bind_err)?;
    let backlog = LISTEN_BACKLOG.min(i32::try_from(max_connections).unwrap_or(i32::MAX));
    socket.listen(backlog).map_err(bind_err)?;
    socket.set_nonblocking(true).map_err(bind_err)?;
    Ok(socket.into())
}

fn announce(local: SocketAddr, config: &ServerConfig) {
    let hosts = reachable_hosts(local.ip());
    let port = local.port();
    tracing::info!(%local, workers = config.workers, "serving NFSv3, MOUNT v3, NLM v4, NSM v1 and NFSv4.1/4.2 over TCP (NLM and NSM over UDP too)");
    println!("{SERVING_PREFIX}{local} ({} workers)", config.workers);
    for e in &config.exports {
        let mode = if e.options.read_only { "ro" } else { "rw" };
        let clients = if e.clients_given {
            let nets: Vec<String> = e.options.clients.iter().map(ToString::to_string).collect();
            format!(", clients {}", nets.join(" "))
        } else {
            String::new()
        };
        match &e.backend {
            BackendConfig::Mem { capacity_bytes } => println!(
                "  export {} (mem, {} MiB cap, {mode}{clients})",
                e.path,
                capacity_bytes >> 20
            ),
            BackendConfig::Host { dir } => {
                println!(
                    "  export {} (host {}, {mode}{clients})",
                    e.path,
                    dir.display()
                );
            }
            BackendConfig::Erofs { image } => println!(
                "  export {} (erofs image {}, decode {:?}, {mode}{clients})",
                e.path,
                image.display(),
                config.decode
            ),
            #[cfg(feature = "object")]
            BackendConfig::Object { store, .. } => println!(
                "  export {} (object: PostgreSQL + s3://{}{}, {mode}{clients})",
                e.path,
                store.bucket,
                store
                    .endpoint
                    .as_deref()
                    .map_or(String::new(), |e| format!(" at {e}"))
            ),
        }
        for host in &hosts.names {
            println!("    {}", client_url(host, port, &e.path));
        }
    }
    let first = &hosts.names[0];
    let path = &config.exports[0].path;
    // NFSv4 needs no MOUNT protocol (the export's path in the pseudo file system); on the
    // standard port a mount with no options is NFSv4.2, what every Linux client tries first.
    if port == NFS_PORT {
        println!("  kernel client (NFSv4.2): mount -t nfs {first}:{path} /mnt");
    } else {
        println!(
            "  kernel client (NFSv4.2): mount -t nfs -o vers=4.2,port={port} {first}:{path} /mnt"
        );
    }
    println!("  kernel client (NFSv3): mount -t nfs -o vers=3,proto=tcp,port={port},mountport={port},mountproto=tcp,nolock {first}:{path} /mnt");
    println!("    (locks between v3 clients: leave out nolock and run rpcbind on this host; granary registers NLM and NSM with it)");
    if let Some(note) = hosts.note {
        println!("  {note}");
    }
}

/// The first line `granary serve` prints, before `ADDR (N workers)`. The harness reads
/// the address after it and spells it too (`harness::spawn::SERVING_PREFIX`: this crate
/// does not depend on the harness); server/tests/clients.rs reads it from the binary.
const SERVING_PREFIX: &str = "granary: serving NFSv4.2/4.1, NFSv3 + MOUNT v3, NLM v4 on ";

/// The standard NFS port: a kernel mount needs no port option there.
const NFS_PORT: u16 = 2049;

/// Most host addresses printed for a wildcard listen address (a host with many
/// interfaces, e.g. container bridges, would otherwise print a page of URLs).
const MAX_ANNOUNCED_HOSTS: usize = 4;

/// Placeholder printed when a wildcard listen address has no address to name.
const HOST_PLACEHOLDER: &str = "SERVER-ADDRESS";

/// The host names to print in URLs and the mount line, and a note about them.
struct Hosts {
    /// Never empty.
    names: Vec<String>,
    note: Option<String>,
}

/// Addresses a client can use to reach a server listening on `ip`: `ip` itself, or for a
/// wildcard (0.0.0.0, `::`) this host's non-loopback addresses (IPv4 for 0.0.0.0, both
/// families for `::`, link-local IPv6 left out since it needs a zone), or a placeholder
/// with a note when it has none. Never the wildcard itself, which no client can connect to.
fn reachable_hosts(ip: std::net::IpAddr) -> Hosts {
    if !ip.is_unspecified() {
        return Hosts {
            names: vec![url_host(ip)],
            note: None,
        };
    }
    let mut found: Vec<std::net::IpAddr> = if_addrs::get_if_addrs()
        .unwrap_or_default()
        .into_iter()
        .map(|i| i.ip())
        .filter(|a| !a.is_loopback() && (ip.is_ipv6() || a.is_ipv4()))
        .collect();
    // IPv4 first: the address people usually type.
    found.sort_by_key(std::net::IpAddr::is_ipv6);
    found.dedup();
    let more = found.len().saturating_sub(MAX_ANNOUNCED_HOSTS);
    found.truncate(MAX_ANNOUNCED_HOSTS);
    if found.is_empty() {
        return Hosts {
            names: vec![HOST_PLACEHOLDER.to_string()],
            note: Some(format!(
                "listening on every address of this host, but none besides loopback was \
                 found: replace {HOST_PLACEHOLDER} with a name or address of this host that \
                 the client reaches"
            )),
        };
    }
    let note = (more > 0).then(|| {
        format!("({more} more addresses of this host also reach the server; listed: the first {MAX_ANNOUNCED_HOSTS})")
    });
    Hosts {
        names: found.into_iter().map(url_host).collect(),
        note,
    }
}

/// An address as the host part of a URL (IPv6 in brackets).
fn url_host(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        std::net::IpAddr::V4(ip) => ip.to_string(),
    }
}

/// The libnfs URL of an export. `auto-traverse-mounts=0` because libnfs (4.x) otherwise
/// asks for the export list after MNT and refuses a mount path that is empty, which is
/// what it derives for a file directly under `/` (e.g. `nfs-cp x nfs://host/x`).
fn client_url(host: &str, port: u16, path: &str) -> String {
    format!("nfs://{host}{path}?version=3&nfsport={port}&mountport={port}&auto-traverse-mounts=0")
}

/// The registrations (program, version, transport) the portmapper took (to unregister at
/// exit).
fn register_portmap(offered: &[portmap::Registration], port: u16) -> Vec<portmap::Registration> {
    match portmap::register(offered, port) {
        Ok(taken) => {
            tracing::info!(port, programs = ?taken, "registered with the portmapper");
            taken
        }
        Err(portmap::PortmapError::Absent(e)) => {
            tracing::info!(error = %e, "no portmapper running; serving without it (clients must be given the port)");
            Vec::new()
        }
        Err(e) => {
            tracing::warn!(error = %e, "portmapper registration failed; serving without it");
            Vec::new()
        }
    }
}

struct Acceptor<'w> {
    workers: &'w runtime::Workers,
    dispatcher: Arc<Dispatcher>,
    limits: ConnLimits,
    stop: watch::Receiver<bool>,
    table: Arc<ConnTable>,
    budget: Arc<ServerBudget>,
}

impl Acceptor<'_> {
    async fn run(self, listener: TcpListener) -> Result<(), ServeError> {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let mut sigterm =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        loop {
            let accepted = tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = sigterm.recv() => break,
                a = listener.accept() => a,
            };
            match accepted {
                Ok((stream, peer)) => self.hand_off(stream, peer),
                Err(e) => {
                    // EMFILE and friends: log, back off, keep serving existing clients.
                    rpc::warn_limited!(rpc::ratelog::Kind::Refused, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        Ok(())
    }

    fn hand_off(&self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        let ticket = match self.table.admit(peer) {
            Ok(t) => t,
            Err(e) => {
                rpc::warn_limited!(rpc::ratelog::Kind::Refused, %peer, "refusing connection: {e}");
                return;
            }
        };
        let Ok(stream) = stream.into_std() else {
            return;
        };
        let (dispatcher, limits, stop, budget) = (
            Arc::clone(&self.dispatcher),
            self.limits,
            self.stop.clone(),
            Arc::clone(&self.budget),
        );
        let worker = self.workers.least_loaded();
        tracing::debug!(%peer, worker, "connection accepted");
        self.workers.submit(worker, move || async move {
            // Calls that must block run on this worker's blocking pool.
            let offload = runtime::blocking::current()
                .map(|pool| Arc::new(PoolOffload(pool)) as Arc<dyn Offload>);
            if let Ok(stream) = tokio::net::TcpStream::from_std(stream) {
                serve_connection(stream, ticket, dispatcher, limits, budget, stop, offload).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_hosts_are_never_the_wildcard() {
        let one = reachable_hosts("192.0.2.7".parse().unwrap());
        assert_eq!((one.names, one.note), (vec!["192.0.2.7".to_string()], None));
        let v6 = reachable_hosts("2001:db8::1".parse().unwrap());
        assert_eq!(v6.names, ["[2001:db8::1]"]);
        for wildcard in ["0.0.0.0", "::"] {
            let hosts = reachable_hosts(wildcard.parse().unwrap());
            assert!(!hosts.names.is_empty() && hosts.names.len() <= MAX_ANNOUNCED_HOSTS);
            for name in &hosts.names {
                if name == HOST_PLACEHOLDER {
                    assert!(hosts
                        .note
                        .as_deref()
                        .unwrap_or("")
                        .contains(HOST_PLACEHOLDER));
                    continue;
                }
                let ip: std::net::IpAddr = name.trim_matches(['[', ']']).parse().unwrap();
                assert!(!ip.is_unspecified() && !ip.is_loopback(), "{name}");
                assert!(wildcard == "::" || ip.is_ipv4(), "{name} for {wildcard}");
            }
        }
    }
}
