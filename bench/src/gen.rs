//! The load generator's core: runs one phase of one workload against one target.
//!
//! A phase is `conns` connections with `depth` workers each; a worker runs one op at a
//! time (an op is one call, or a short fixed sequence such as CREATE + SETATTR + REMOVE),
//! so `depth` is the number of calls in flight per connection. Everything runs on the
//! caller's single-threaded runtime (inside a `LocalSet`), so the client side costs the
//! same one core for every target, the limit included.
//!
//! Promises:
//! - warm-up ops are never counted; in timed mode an op counts if it completes inside the
//!   measured window `[t0, t1]` and the rate is ops / (t1 - t0); in count mode exactly
//!   `n` ops are attempted after the warm-up, ops + errors = n, and the rate is ops over
//!   the time from t0 to the last completion;
//! - a failed op (any [`OpError`]) is counted as an error by kind, never as an op, and its
//!   latency is not recorded;
//! - the phase stops by itself: workers start nothing after t1, a dead connection stops
//!   its workers, [`MAX_PHASE_ERRORS`] errors stop the phase, and workers still busy
//!   [`STOP_GRACE`] after t1 are aborted and the phase is marked as not stopping on time.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use gtime::Clock;
use hdrhistogram::Histogram;
use tokio::task::{spawn_local, AbortHandle, JoinHandle};

use super::limits::{MAX_PHASE_ERRORS, STOP_GRACE};
use super::wire::{Conn, OpError};

/// When a phase's measurement ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// After this long (plus, if no op completed by then, until the first one does).
    Time(Duration),
    /// After exactly this many attempts, or at the deadline: then the phase is aborted
    /// if `deadline_fails`, else the deadline is a time cap and the ops done by then are
    /// the measurement.
    Count {
        ops: u64,
        deadline: Duration,
        deadline_fails: bool,
    },
}

/// The shape of one phase.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub conns: usize,
    pub depth: usize,
    pub warmup: Duration,
    pub stop: Stop,
}

/// What one successful op did, beyond counting as one op.
#[derive(Debug, Clone, Copy, Default)]
pub struct Done {
    /// RPC calls it made.
    pub calls: u64,
    /// Payload bytes read or written.
    pub bytes: u64,
    /// Directory entries listed.
    pub entries: u64,
}

impl Done {
    #[must_use]
    pub fn calls(calls: u64) -> Self {
        Self {
            calls,
            ..Self::default()
        }
    }
}

/// Handed to the op for each run.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub conn: Conn,
    /// A phase-wide number, unique per op started (in count mode: 0..n after warm-up).
    pub ticket: u64,
    /// How many ops this worker started before this one.
    pub worker_seq: u64,
    /// A fresh pseudo-random number (seeded per worker; the run is repeatable).
    pub rand: u64,
}

/// What a phase measured.
#[derive(Debug)]
pub struct Measured {
    pub ops: u64,
    pub calls: u64,
    pub bytes: u64,
    pub entries: u64,
    pub warmup_ops: u64,
    /// Failed ops by kind, warm-up included.
    pub errors: BTreeMap<String, u64>,
    pub first_error: Option<String>,
    pub elapsed: Duration,
    /// Latency of counted ops, nanoseconds.
    pub latency_ns: Histogram<u64>,
    /// Counted ops per connection (0 for a connection that never connected).
    pub per_conn_ops: Vec<u64>,
    pub connected: usize,
    /// Why the phase ended early, if it did.
    pub aborted: Option<String>,
}

impl Measured {
    #[must_use]
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// A phase that never ran (setup failed, no connection): `reason` as its one error.
    #[must_use]
    pub fn failed(reason: &OpError, conns: usize) -> Self {
        let mut m = Self::empty(conns);
        m.errors.insert(reason.kind(), 1);
        m.first_error = Some(reason.to_string());
        m
    }

    pub fn empty(conns: usize) -> Self {
        Self {
            ops: 0,
            calls: 0,
            bytes: 0,
            entries: 0,
            warmup_ops: 0,
            errors: BTreeMap::new(),
            first_error: None,
            elapsed: Duration::ZERO,
            latency_ns: new_histogram(),
            per_conn_ops: vec![0; conns],
            connected: 0,
            aborted: None,
        }
    }

    /// Adds one error that happened outside the op loop (a closing COMMIT, say).
    pub fn add_error(&mut self, e: &OpError) {
        *self.errors.entry(e.kind()).or_insert(0) += 1;
        self.first_error.get_or_insert_with(|| e.to_string());
    }
}

/// Latency histogram: 1 ns to 100 s at 3 significant digits.
#[must_use]
pub fn new_histogram() -> Histogram<u64> {
    // Ends: constant bounds that hdrhistogram accepts (low >= 1, high >= 2 * low).
    Histogram::new_with_bounds(1, 100_000_000_000, 3).unwrap_or_else(|_| unreachable!())
}

/// Tickets of warm-up ops start here, far above any measured ticket.
const WARMUP_TICKETS: u64 = 1 << 62;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Warmup,
    Measure,
    /// The time is up but nothing completed yet: start nothing, count what completes.
    Drain,
    Stop,
}

/// State shared by a phase's workers (one thread, so `Cell`s).
struct Shared {
    mode: Cell<Mode>,
    tickets: Cell<u64>,
    warm_tickets: Cell<u64>,
    last_done: Cell<Duration>,
    stats: RefCell<Measured>,
}

/// Opens `n` connections to `addr` concurrently; failed ones are `None`.
pub async fn connect_all(
    addr: SocketAddr,
    limit: bool,
    n: usize,
    op_timeout: Duration,
) -> Vec<Result<Conn, OpError>> {
    let handles: Vec<JoinHandle<Result<Conn, OpError>>> = (0..n)
        .map(|_| spawn_local(Conn::connect(addr, limit, op_timeout)))
        .collect();
    let mut out = Vec::with_capacity(n);
    for h in handles {
        out.push(
            h.await
                .unwrap_or_else(|e| Err(OpError::Connect(e.to_string()))),
        );
    }
    out
}

/// Runs one phase: `op` on every worker of every connection in `conns` (one entry per
/// requested connection; failed connects count as clients never served).
pub async fn run<F, Fut>(
    clock: &Arc<dyn Clock>,
    load: Load,
    conns: Vec<Result<Conn, OpError>>,
    op: F,
) -> Measured
where
    F: Fn(Ctx) -> Fut + 'static,
    Fut: Future<Output = Result<Done, OpError>> + 'static,
{
    debug_assert_eq!(
        load.conns,
        conns.len(),
        "one entry per requested connection"
    );
    let shared = Rc::new(Shared {
        mode: Cell::new(if load.warmup.is_zero() {
            Mode::Measure
        } else {
            Mode::Warmup
        }),
        tickets: Cell::new(0),
        warm_tickets: Cell::new(0),
        last_done: Cell::new(Duration::ZERO),
        stats: RefCell::new(Measured::empty(conns.len())),
    });
    let op = Rc::new(op);
    let mut handles = Vec::new();
    for (conn_index, conn) in conns.into_iter().enumerate() {
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                shared.stats.borrow_mut().add_error(&e);
                continue;
            }
        };
        shared.stats.borrow_mut().connected += 1;
        for d in 0..load.depth {
            let worker = Worker {
                conn: conn.clone(),
                conn_index,
                worker: conn_index * load.depth + d,
                clock: Arc::clone(clock),
                shared: Rc::clone(&shared),
                stop: load.stop,
            };
            handles.push(spawn_local(worker.run(Rc::clone(&op))));
        }
    }
    let t0 = control(clock, load, &shared, handles).await;
    let mut m = Rc::try_unwrap(shared)
        .map(|s| s.stats.into_inner())
        .unwrap_or_else(|s| s.stats.replace(Measured::empty(0)));
    debug_assert!(m.ops == 0 || !m.elapsed.is_zero() || t0.is_zero());
    if m.elapsed.is_zero() && m.ops > 0 {
        m.elapsed = Duration::from_nanos(1);
    }
    m
}

/// Drives the phase's clock: warm-up, measure, stop, and wait for the workers. Returns t0.
async fn control(
    clock: &Arc<dyn Clock>,
    load: Load,
    shared: &Rc<Shared>,
    mut handles: Vec<JoinHandle<()>>,
) -> Duration {
    let aborts: Vec<AbortHandle> = handles.iter().map(JoinHandle::abort_handle).collect();
    let all_done = async {
        for h in &mut handles {
            // A worker that panicked ends like one that returned; its ops are counted.
            drop(h.await);
        }
    };
    tokio::pin!(all_done);
    let mut finished = false;
    let mut drained = false;
    if !load.warmup.is_zero() {
        tokio::select! {
            () = tokio::time::sleep(load.warmup) => {}
            () = &mut all_done => finished = true,
        }
    }
    let t0 = clock.monotonic();
    shared.mode.set(Mode::Measure);
    match load.stop {
        Stop::Time(d) if !finished => {
            tokio::select! {
                () = tokio::time::sleep(d) => {}
                () = &mut all_done => finished = true,
            }
            if !finished && shared.stats.borrow().ops == 0 {
                // Ops that outlast the phase (a slow listing): start nothing new, and
                // measure until the ones in flight complete.
                shared.mode.set(Mode::Drain);
                drained = true;
            }
        }
        Stop::Count {
            deadline,
            deadline_fails,
            ..
        } if !finished => {
            tokio::select! {
                () = tokio::time::sleep(deadline) => if deadline_fails {
                    shared.stats.borrow_mut().aborted =
                        Some(format!("did not finish within {deadline:?}"));
                },
                () = &mut all_done => finished = true,
            }
        }
        _ => {}
    }
    let t1 = clock.monotonic();
    if !drained {
        shared.mode.set(Mode::Stop);
    }
    if !finished
        && tokio::time::timeout(STOP_GRACE, &mut all_done)
            .await
            .is_err()
    {
        aborts.iter().for_each(AbortHandle::abort);
        shared.stats.borrow_mut().aborted = Some(format!(
            "workers still busy {STOP_GRACE:?} after the stop time (aborted)"
        ));
    }
    let mut stats = shared.stats.borrow_mut();
    stats.elapsed = match load.stop {
        Stop::Time(_) if drained && stats.ops > 0 => shared.last_done.get().saturating_sub(t0),
        Stop::Time(_) => t1.saturating_sub(t0),
        Stop::Count { .. } => shared.last_done.get().saturating_sub(t0),
    };
    t0
}

struct Worker {
    conn: Conn,
    conn_index: usize,
    worker: usize,
    clock: Arc<dyn Clock>,
    shared: Rc<Shared>,
    stop: Stop,
}

impl Worker {
    async fn run<F, Fut>(self, op: Rc<F>)
    where
        F: Fn(Ctx) -> Fut,
        Fut: Future<Output = Result<Done, OpError>>,
    {
        let mut rng = SplitMix(0x5eed_0000 + self.worker as u64);
        let mut worker_seq = 0u64;
        loop {
            let began_in = self.shared.mode.get();
            let ticket = match self.take_ticket(began_in) {
                Some(t) => t,
                None => return,
            };
            let ctx = Ctx {
                conn: self.conn.clone(),
                ticket,
                worker_seq,
                rand: rng.next(),
            };
            worker_seq += 1;
            let began = self.clock.monotonic();
            let result = op(ctx).await;
            let ended = self.clock.monotonic();
            let counted = match self.stop {
                Stop::Time(_) => matches!(self.shared.mode.get(), Mode::Measure | Mode::Drain),
                Stop::Count { .. } => began_in == Mode::Measure,
            };
            if !self.record(result, counted, began_in, ended - began, ended) {
                return;
            }
        }
    }

    /// The next ticket, or `None` when this worker must stop. Warm-up ops draw from a
    /// separate range so that their names and offsets never collide with measured ones.
    fn take_ticket(&self, mode: Mode) -> Option<u64> {
        match mode {
            Mode::Stop | Mode::Drain => None,
            Mode::Warmup => {
                let t = self.shared.warm_tickets.get();
                self.shared.warm_tickets.set(t + 1);
                Some(WARMUP_TICKETS + t)
            }
            Mode::Measure => {
                let t = self.shared.tickets.get();
                if matches!(self.stop, Stop::Count { ops, .. } if t >= ops) {
                    return None;
                }
                self.shared.tickets.set(t + 1);
                Some(t)
            }
        }
    }

    /// Records one op's outcome; returns whether the worker goes on.
    fn record(
        &self,
        result: Result<Done, OpError>,
        counted: bool,
        began_in: Mode,
        latency: Duration,
        ended: Duration,
    ) -> bool {
        let mut s = self.shared.stats.borrow_mut();
        match result {
            Ok(done) if counted => {
                s.ops += 1;
                s.calls += done.calls;
                s.bytes += done.bytes;
                s.entries += done.entries;
                let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX).max(1);
                s.latency_ns.saturating_record(ns);
                s.per_conn_ops[self.conn_index] += 1;
                self.shared.last_done.set(ended);
                true
            }
            Ok(_) => {
                if began_in == Mode::Warmup {
                    s.warmup_ops += 1;
                }
                true
            }
            Err(e) => {
                s.add_error(&e);
                if counted {
                    self.shared.last_done.set(ended);
                }
                if s.error_count() >= MAX_PHASE_ERRORS {
                    s.aborted
                        .get_or_insert_with(|| format!("gave up after {MAX_PHASE_ERRORS} errors"));
                    self.shared.mode.set(Mode::Stop);
                }
                !e.is_fatal()
            }
        }
    }
}

/// SplitMix64: a tiny, fast, seedable generator (offsets and names need no more).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
