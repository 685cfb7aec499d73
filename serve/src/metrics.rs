//! The Prometheus endpoint (`--metrics ADDR`, off by default): per-procedure request
//! counts and latency histograms, bytes of READ replies and WRITE arguments, connections
//! (open, accepted, refused by which limit, closed by which timeout), memory-budget use,
//! reply-cache hits, byte-range locks per protocol (held, waiting, granted, denied), and
//! NFSv4 operations by operation and the NFSv4 state held. Built on `prometheus-client`; other parts of the server register their
//! own metrics (cache hit rates, ...) through [`Metrics::registry`].

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use rpc::budget::ServerBudget;
use rpc::dispatch::{CallObserver, Observed};
use rpc::table::ConnTable;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Labels = Vec<(&'static str, &'static str)>;

/// The request counter and latency histogram of one program and procedure, cloned from
/// their families (each clone shares the family's value).
type Handles = (Counter, Histogram);

/// Most (server, program, procedure) handles one thread keeps: every procedure of every
/// program granary serves (NFSv3, MOUNT, NFSv4, NLM, NSM: under 100) fits; past it a call
/// looks its metrics up in the families as before.
const MAX_CACHED_HANDLES: usize = 256;

thread_local! {
    /// This thread's handles by server ([`Metrics::id`]), program and procedure name: a
    /// call's request metrics cost two atomic updates and a short scan, not two family
    /// lookups (a label vector allocated and hashed, a lock taken) per call.
    static HANDLES: std::cell::RefCell<Vec<(u64, &'static str, &'static str, Handles)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Distinguishes the servers of one process in [`HANDLES`].
static NEXT_METRICS_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Most bytes of an HTTP request the endpoint reads (it only needs the request line).
const MAX_HTTP_REQUEST_BYTES: usize = 4096;

/// The server's metrics registry and the request metrics the dispatcher feeds.
pub struct Metrics {
    /// This server's key in each thread's [`HANDLES`].
    id: u64,
    registry: Mutex<Registry>,
    requests: Family<Labels, Counter>,
    latency: Family<Labels, Histogram>,
    read_bytes: Counter,
    write_bytes: Counter,
    reply_cache_hits: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn latency_histogram() -> Histogram {
    // 10 µs .. ~5 s in 20 doubling buckets.
    Histogram::new(exponential_buckets(1e-5, 2.0, 20))
}

impl Metrics {
    /// A registry with the request, connection and budget metrics of one server.
    #[must_use]
    pub fn new(table: Arc<ConnTable>, budget: Arc<ServerBudget>) -> Arc<Self> {
        let m = Self {
            id: NEXT_METRICS_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            registry: Mutex::new(Registry::with_prefix("granary")),
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            read_bytes: Counter::default(),
            write_bytes: Counter::default(),
            reply_cache_hits: Counter::default(),
        };
        {
            let mut r = m.lock();
            r.register(
                "requests",
                "Calls answered, by program and procedure",
                m.requests.clone(),
            );
            r.register(
                "request_duration_seconds",
                "Time to run a call and build its reply",
                m.latency.clone(),
            );
            r.register(
                "read_reply_bytes",
                "Bytes of NFS READ replies (data and headers)",
                m.read_bytes.clone(),
            );
            r.register(
                "write_args_bytes",
                "Bytes of NFS WRITE arguments (data and headers)",
                m.write_bytes.clone(),
            );
            r.register(
                "reply_cache_hits",
                "Retransmissions answered from the duplicate request cache",
                m.reply_cache_hits.clone(),
            );
            r.register_collector(Box::new(ConnCollector { table, budget }));
        }
        Arc::new(m)
    }

    /// The registry, for other parts of the server to add their metrics to.
    pub fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The text exposition of every metric.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.lock()).is_err() {
            out.clear();
        }
        out
    }
}

impl Metrics {
    /// Counts one call of `program`'s `procedure` and its latency, through this thread's
    /// cache of their handles (filled from the families on first use).
    fn count(&self, program: &'static str, procedure: &'static str, latency_secs: f64) {
        HANDLES.with(|cell| {
            let mut cached = cell.borrow_mut();
            let hit = cached
                .iter()
                .find(|(id, p, q, _)| *id == self.id && *p == program && *q == procedure);
            if let Some((_, _, _, (counter, histogram))) = hit {
                counter.inc();
                histogram.observe(latency_secs);
                return;
            }
            let labels = vec![("program", program), ("procedure", procedure)];
            let counter = self.requests.get_or_create(&labels).clone();
            let histogram = self.latency.get_or_create(&labels).clone();
            counter.inc();
            histogram.observe(latency_secs);
            if cached.len() < MAX_CACHED_HANDLES {
                cached.push((self.id, program, procedure, (counter, histogram)));
            }
        });
    }
}

fn program_name(program: u32, version: u32) -> &'static str {
    match (program, version) {
        (nfs3::limits::NFS_PROGRAM, 4) => "nfs4",
        (nfs3::limits::NFS_PROGRAM, _) => "nfs3",
        (nfs3::limits::MOUNT_PROGRAM, _) => "mount3",
        _ => "other",
    }
}

impl CallObserver for Metrics {
    fn observe(&self, call: &Observed) {
        let program = program_name(call.program, call.version);
        self.count(program, call.procedure, call.latency.as_secs_f64());
        if call.program == nfs3::limits::NFS_PROGRAM && call.version == 3 {
            match call.procedure {
                "read" => drop(self.read_bytes.inc_by(call.reply_bytes as u64)),
                "write" => drop(self.write_bytes.inc_by(call.args_bytes as u64)),
                _ => {}
            }
        }
        if call.from_reply_cache {
            self.reply_cache_hits.inc();
        }
    }
}

/// The workers' blocking pools at scrape time (summed over workers).
#[derive(Clone)]
pub struct PoolCollector(pub Vec<runtime::blocking::BlockingHandle>);

impl std::fmt::Debug for PoolCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PoolCollector")
    }
}

impl Collector for PoolCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::metrics::MetricType;
        let loads: Vec<_> = self
            .0
            .iter()
            .map(runtime::blocking::BlockingHandle::load)
            .collect();
        let sum = |f: fn(&runtime::blocking::PoolLoad) -> usize| {
            i64::try_from(loads.iter().map(f).sum::<usize>()).unwrap_or(i64::MAX)
        };
        let gauges: [(&str, &str, i64); 3] = [
            (
                "blocking_pool_running",
                "Calls running on the workers' blocking pools",
                sum(|l| l.running),
            ),
            (
                "blocking_pool_waiting",
                "Calls queued for a blocking-pool thread",
                sum(|l| l.waiting),
            ),
            (
                "blocking_pool_peak_waiting",
                "Most calls ever queued for one worker's blocking pool",
                i64::try_from(loads.iter().map(|l| l.peak_waiting).max().unwrap_or(0))
                    .unwrap_or(i64::MAX),
            ),
        ];
        for (name, help, v) in gauges {
            let m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(v).encode(m)?;
        }
        let ran: u64 = loads.iter().map(|l| l.ran).sum();
        let m = encoder.encode_descriptor(
            "blocking_pool_calls",
            "Calls run on the workers' blocking pools (they would have blocked an event loop)",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(ran).encode(m)
    }
}

/// The NFSv4 back channel's counters at scrape time.
#[derive(Clone)]
pub struct CallbackCollector(pub Arc<nfsd::v4::callback::Callbacks>);

impl std::fmt::Debug for CallbackCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallbackCollector")
    }
}

impl Collector for CallbackCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::metrics::MetricType;
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.0.counters;
        let counters: [(&str, &str, u64); 4] = [
            (
                "nfs4_cb_null_answered",
                "CB_NULL probes of NFSv4 back channels the client answered",
                c.probes_answered.load(Relaxed),
            ),
            (
                "nfs4_cb_null_failed",
                "CB_NULL probes that failed (no answer, refused, connection gone)",
                c.probes_failed.load(Relaxed),
            ),
            (
                "nfs4_cb_compound_answered",
                "CB_COMPOUNDs (CB_SEQUENCE first) whose CB_SEQUENCE the client accepted",
                c.compounds_answered.load(Relaxed),
            ),
            (
                "nfs4_cb_compound_failed",
                "CB_COMPOUNDs that failed (no back channel, no answer, CB_SEQUENCE refused)",
                c.compounds_failed.load(Relaxed),
            ),
        ];
        for (name, help, v) in counters {
            let m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(v).encode(m)?;
        }
        Ok(())
    }
}

/// The lock manager's counts per protocol at scrape time, and the requests waiting for
/// other heads' locks (docs/LOCKS.md).
#[derive(Clone)]
pub struct LockCollector(pub Arc<locks::LockManager>, pub Arc<nfsd::heads::HeadWaits>);

impl std::fmt::Debug for LockCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LockCollector")
    }
}

impl Collector for LockCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::metrics::MetricType;
        let m = self.0.metrics();
        let per = |f: fn(&locks::ProtocolMetrics) -> u64| -> Vec<(&'static str, u64)> {
            locks::Protocol::ALL
                .iter()
                .map(|p| (p.name(), f(m.get(*p))))
                .collect()
        };
        for (name, help, values) in [
            (
                "locks_held",
                "Byte-range locks held, by protocol",
                per(|p| p.held),
            ),
            (
                "lock_waiters",
                "Lock requests waiting in a file's queue, by protocol",
                per(|p| p.waiters),
            ),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (protocol, v) in values {
                let labels = [("protocol", protocol)];
                ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX))
                    .encode(family.encode_family(&labels)?)?;
            }
        }
        let m2 = encoder.encode_descriptor(
            "lock_head_waiters",
            "Blocking lock requests waiting for another head's lock (object exports)",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::try_from(self.1.waiting()).unwrap_or(i64::MAX)).encode(m2)?;
        counter_family(
            &mut encoder,
            "lock_grants",
            "Lock requests granted (waiters granted by the server included), by protocol",
            "protocol",
            &per(|p| p.grants),
        )?;
        counter_family(
            &mut encoder,
            "lock_denials",
            "Lock requests refused because a lock or an earlier waiter was in the way, by protocol",
            "protocol",
            &per(|p| p.denials),
        )?;
        counter_family(
            &mut encoder,
            "lock_limited",
            "Lock requests refused by a bound of locks/src/limits.rs, by protocol",
            "protocol",
            &per(|p| p.limited),
        )?;
        counter_family(
            &mut encoder,
            "lock_deadlocks",
            "Blocking lock requests refused because waiting would have deadlocked, by protocol",
            "protocol",
            &per(|p| p.deadlocks),
        )?;
        counter_family(
            &mut encoder,
            "lock_wakes",
            "Waiters woken when their range came free, by protocol",
            "protocol",
            &per(|p| p.wakes),
        )
    }
}

/// NFSv4 at scrape time: operations run and failed by operation, and the state held
/// (clients, sessions, opens).
pub struct V4Collector(pub Arc<nfsd::v4::Nfs4State>);

impl std::fmt::Debug for V4Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("V4Collector")
    }
}

impl Collector for V4Collector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::metrics::MetricType;
        let ops = self.0.ops.snapshot();
        let calls: Vec<_> = ops.iter().map(|o| (o.name, o.calls)).collect();
        let errors: Vec<_> = ops.iter().map(|o| (o.name, o.errors)).collect();
        counter_family(
            &mut encoder,
            "nfs4_operations",
            "NFSv4 operations run in COMPOUNDs (a replay from a slot's cache runs none)",
            "op",
            &calls,
        )?;
        counter_family(
            &mut encoder,
            "nfs4_operation_errors",
            "NFSv4 operations that failed (the last result of their COMPOUND)",
            "op",
            &errors,
        )?;
        let (here, pool) = self.0.ops.worker_reads();
        counter_family(
            &mut encoder,
            "nfs4_worker_reads",
            "NFSv4 READ COMPOUNDs of exports that may block, tried on a network worker: \
             answered there (the page cache held the range) or sent to the blocking pool",
            "outcome",
            &[("answered", here), ("deferred", pool)],
        )?;
        let (here, pool) = self.0.ops.worker_writes();
        counter_family(
            &mut encoder,
            "nfs4_worker_writes",
            "NFSv4 COMPOUNDs of a WRITE that syncs or a COMMIT, of exports that may block, \
             tried on a network worker: answered there (a memory-backed export) or sent to \
             the blocking pool (the sync would wait on a disk)",
            "outcome",
            &[("answered", here), ("deferred", pool)],
        )?;
        let (clients, sessions, opens) = self.0.state.counts();
        for (name, help, n) in [
            ("nfs4_clients", "NFSv4 client records", clients),
            ("nfs4_sessions", "NFSv4 sessions", sessions),
            ("nfs4_opens", "NFSv4 open stateids", opens),
        ] {
            let m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX)).encode(m)?;
        }
        Ok(())
    }
}

/// Reads the connection table's counters and the budget at scrape time.
struct ConnCollector {
    table: Arc<ConnTable>,
    budget: Arc<ServerBudget>,
}

impl std::fmt::Debug for ConnCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnCollector")
    }
}

fn counter_family(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &'static str,
    values: &[(&'static str, u64)],
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        name,
        help,
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    for (value, n) in values {
        let labels = [(label, *value)];
        ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for ConnCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.table.counters;
        let gauge = |e: &mut DescriptorEncoder, name: &str, help: &str, v: i64| {
            let m = e.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            ConstGauge::new(v).encode(m)
        };
        let open = i64::try_from(self.table.open()).unwrap_or(i64::MAX);
        gauge(
            &mut encoder,
            "connections_open",
            "Open client connections",
            open,
        )?;
        let budget = i64::try_from(self.budget.in_use_bytes()).unwrap_or(i64::MAX);
        gauge(
            &mut encoder,
            "budget_in_use_bytes",
            "Bytes of requests and queued replies held by all connections",
            budget,
        )?;
        let m = encoder.encode_descriptor(
            "connections_accepted",
            "Connections admitted",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        ConstCounter::new(c.accepted.load(Relaxed)).encode(m)?;
        counter_family(
            &mut encoder,
            "connections_refused",
            "Connections refused at accept, by the limit that refused them",
            "limit",
            &[
                ("per_client", c.refused_per_client.load(Relaxed)),
                ("global", c.refused_global.load(Relaxed)),
            ],
        )?;
        counter_family(
            &mut encoder,
            "connections_closed",
            "Connections closed by the server, by reason",
            "reason",
            &[
                ("idle", c.closed_idle.load(Relaxed)),
                ("stalled_record", c.closed_stalled.load(Relaxed)),
                ("write_stalled", c.closed_write_stalled.load(Relaxed)),
                ("reclaimed", c.reclaimed.load(Relaxed)),
            ],
        )
    }
}

/// Serves `GET /metrics` (any path, in fact) on `listener` until the task is dropped.
pub async fn serve_http(listener: tokio::net::TcpListener, metrics: Arc<Metrics>) {
    loop {
        let Ok((mut stream, peer)) = listener.accept().await else {
            continue;
        };
        let metrics = Arc::clone(&metrics);
        tokio::spawn(async move {
            let mut buf = vec![0u8; MAX_HTTP_REQUEST_BYTES];
            let mut got = 0;
            // Read until the end of the headers (or the cap); the request itself is ignored.
            while got < buf.len() && !buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf[got..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got += n,
                }
            }
            let body = metrics.render();
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            if stream.write_all(head.as_bytes()).await.is_ok() {
                let _ = stream.write_all(body.as_bytes()).await;
            }
            tracing::trace!(%peer, "metrics scraped");
        });
    }
}

/// Binds the metrics endpoint.
///
/// # Errors
/// If the address cannot be bound.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// The object backend's use of its engines (`backend_object::engine_counters`, counted
/// per process, so per head): database transactions and S3 requests and bytes, which
/// `granary bench --suite object` divides by the NFS operations of a phase.
#[cfg(feature = "object")]
#[derive(Debug, Clone, Copy)]
pub struct ObjectCollector;

#[cfg(feature = "object")]
impl Collector for ObjectCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::metrics::MetricType;
        let c = backend_object::engine_counters();
        let counters: [(&str, &str, u64); 10] = [
            (
                "object_db_transactions",
                "Database transactions begun by object exports (each try; a statement sent \
                 outside a transaction counts as one)",
                c.db_transactions,
            ),
            (
                "object_db_retries",
                "Object-export transactions run again (serialization failure, deadlock, race)",
                c.db_retries,
            ),
            (
                "object_db_prepares",
                "Statements object exports prepared (once per database connection and \
                 statement text)",
                c.db_prepares,
            ),
            (
                "object_db_statements",
                "Statements object exports sent to the database (BEGIN, COMMIT and ROLLBACK \
                 included)",
                c.db_statements,
            ),
            (
                "object_db_round_trips",
                "Times object exports waited for the database's answer (statements sent \
                 together count once, a prepare once)",
                c.db_round_trips,
            ),
            (
                "object_s3_puts",
                "S3 PUT requests of object exports",
                c.s3_puts,
            ),
            (
                "object_s3_put_bytes",
                "Bytes of S3 PUT requests of object exports",
                c.s3_put_bytes,
            ),
            (
                "object_s3_gets",
                "S3 GET requests of object exports",
                c.s3_gets,
            ),
            (
                "object_s3_get_bytes",
                "Bytes S3 GET requests of object exports returned",
                c.s3_get_bytes,
            ),
            (
                "object_jukebox",
                "Object-export operations answered NFS3ERR_JUKEBOX / NFS4ERR_DELAY (an engine \
                 unreachable or slow, or a publish resting after a failure)",
                c.jukebox,
            ),
        ];
        for (name, help, v) in counters {
            let m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(v).encode(m)?;
        }
        Ok(())
    }
}
