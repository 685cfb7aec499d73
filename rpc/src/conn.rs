//! Serving one TCP connection: read records, run them concurrently, write replies.
//!
//! Requests on a connection are pipelined: the reader keeps reading while earlier
//! requests run (each in its own task), replies are written in completion order (which may
//! differ from arrival order), and at most `max_in_flight` requests of one connection are
//! in progress; past that the reader stops reading, so TCP pushes back on the client.
//! On shutdown the reader stops, in-flight requests finish, their replies are flushed,
//! and the connection closes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Notify, OwnedSemaphorePermit, Semaphore};

use crate::dispatch::Dispatcher;
use crate::limits;
use crate::record::{read_record, read_record_watched, Activity, RecordError, RecordTimeouts};

/// Per-connection limits, from CLI/config with defaults in [`crate::limits`].
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub max_record_bytes: u32,
    pub max_in_flight: usize,
    pub record_timeout: Duration,
    pub idle_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_record_bytes: limits::DEFAULT_MAX_RECORD_BYTES,
            max_in_flight: limits::DEFAULT_MAX_IN_FLIGHT,
            record_timeout: limits::DEFAULT_RECORD_TIMEOUT,
            idle_timeout: limits::DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// Runs a connection's periodic check as a local timer of the connection's own worker.
pub trait Watchdog: Send + Sync + 'static {
    /// Calls `check` every `period`, on the calling worker, until it returns false.
    fn watch(&self, period: Duration, check: Box<dyn FnMut() -> bool + Send>);
    /// The clock the checks compare against.
    fn clock(&self) -> Arc<dyn gtime::Clock>;
}

/// How often a watchdog looks at a connection: often enough to be late by at most a
/// quarter of the shorter limit, never more than once per 50 ms nor less than once a second.
fn watch_period(limits: &ConnLimits) -> Duration {
    (limits.idle_timeout.min(limits.record_timeout) / 4)
        .clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// Bytes the reader buffers from the socket: one syscall picks up many small requests.
const READ_BUFFER_BYTES: usize = 64 << 10;
/// Bytes the writer gathers before a socket write.
const WRITE_BUFFER_BYTES: usize = 64 << 10;

/// Serves `stream` until the peer closes it, it breaks a limit, or `shutdown` turns true.
/// With a `watchdog`, the idle and stall limits are enforced by its periodic local timer
/// (one timer per connection, not two per request); without, by tokio's timers.
pub async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    dispatcher: Arc<Dispatcher>,
    limits: ConnLimits,
    mut shutdown: watch::Receiver<bool>,
    watchdog: Option<Arc<dyn Watchdog>>,
) {
    let _ = stream.set_nodelay(true);
    let (read_half, write_half) = stream.into_split();
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, read_half);
    let (tx, rx) = mpsc::unbounded_channel::<(Bytes, OwnedSemaphorePermit)>();
    let writer = tokio::spawn(write_replies(write_half, rx, peer));
    let slots = Arc::new(Semaphore::new(limits.max_in_flight));
    let timeouts = RecordTimeouts {
        idle: limits.idle_timeout,
        record: limits.record_timeout,
    };
    let guard = watchdog.map(|w| WatchGuard::start(&*w, &limits, timeouts));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        let record = tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => break,
            Some(e) = overdue(guard.as_ref()) => Err(e),
            r = read_one(&mut reader, limits.max_record_bytes, timeouts, guard.as_ref()) => r,
        };
        match record {
            Ok(record) => spawn_request(record, peer, &dispatcher, &tx, permit),
            Err(e) => {
                log_end(peer, &e);
                break;
            }
        }
    }
    drop(guard);
    // Let in-flight requests finish, then close the reply channel so the writer drains.
    let _ = slots
        .acquire_many(u32::try_from(limits.max_in_flight).unwrap_or(u32::MAX))
        .await;
    drop(tx);
    let _ = writer.await;
}

async fn read_one<R: tokio::io::AsyncRead + Unpin>(
    r: &mut R,
    max_bytes: u32,
    timeouts: RecordTimeouts,
    guard: Option<&WatchGuard>,
) -> Result<Bytes, RecordError> {
    match guard {
        Some(g) => read_record_watched(r, max_bytes, &g.activity).await,
        None => read_record(r, max_bytes, timeouts).await,
    }
}

/// Resolves when the watchdog finds the connection idle or stalled; never without one.
async fn overdue(guard: Option<&WatchGuard>) -> Option<RecordError> {
    match guard {
        Some(g) => {
            g.kill.notified().await;
            g.verdict
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
        }
        None => std::future::pending().await,
    }
}

/// A connection's side of its watchdog: the activity the reader records, and the
/// verdict the timer leaves. Dropping it stops the timer at its next tick.
struct WatchGuard {
    activity: Arc<Activity>,
    kill: Arc<Notify>,
    verdict: Arc<std::sync::Mutex<Option<RecordError>>>,
    open: Arc<AtomicBool>,
}

impl WatchGuard {
    fn start(w: &dyn Watchdog, limits: &ConnLimits, timeouts: RecordTimeouts) -> Self {
        let guard = Self {
            activity: Arc::new(Activity::new(w.clock())),
            kill: Arc::new(Notify::new()),
            verdict: Arc::new(std::sync::Mutex::new(None)),
            open: Arc::new(AtomicBool::new(true)),
        };
        let (activity, kill, verdict, open) = (
            Arc::clone(&guard.activity),
            Arc::clone(&guard.kill),
            Arc::clone(&guard.verdict),
            Arc::clone(&guard.open),
        );
        w.watch(
            watch_period(limits),
            Box::new(move || {
                if !open.load(Ordering::Acquire) {
                    return false;
                }
                let Some(e) = activity.overdue(timeouts) else {
                    return true;
                };
                *verdict
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
                kill.notify_one();
                false
            }),
        );
        guard
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.open.store(false, Ordering::Release);
    }
}

fn spawn_request(
    record: Bytes,
    peer: SocketAddr,
    dispatcher: &Arc<Dispatcher>,
    tx: &mpsc::UnboundedSender<(Bytes, OwnedSemaphorePermit)>,
    permit: OwnedSemaphorePermit,
) {
    let dispatcher = Arc::clone(dispatcher);
    let tx = tx.clone();
    tokio::spawn(async move {
        match dispatcher.handle(record, peer) {
            Ok(reply) => {
                let _ = tx.send((reply, permit));
            }
            Err(e @ crate::dispatch::Unanswerable::DuplicateInProgress(_)) => {
                tracing::debug!(%peer, error = %e, "dropping retransmission");
            }
            Err(e) => tracing::warn!(%peer, error = %e, "dropping unanswerable record"),
        }
    });
}

fn log_end(peer: SocketAddr, e: &RecordError) {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    match e {
        RecordError::Closed => tracing::debug!(%peer, "connection closed by client"),
        RecordError::Io(io)
            if matches!(io.kind(), ConnectionReset | ConnectionAborted | BrokenPipe) =>
        {
            tracing::debug!(%peer, error = %e, "connection reset by client");
        }
        RecordError::Idle(_) => tracing::info!(%peer, error = %e, "closing idle connection"),
        _ => tracing::warn!(%peer, error = %e, "closing connection"),
    }
}

/// Writes replies as they complete, batching those that are ready into one write.
async fn write_replies(
    write_half: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<(Bytes, OwnedSemaphorePermit)>,
    peer: SocketAddr,
) {
    let mut w = BufWriter::with_capacity(WRITE_BUFFER_BYTES, write_half);
    while let Some((reply, permit)) = rx.recv().await {
        if let Err(e) = w.write_all(&reply).await {
            tracing::debug!(%peer, error = %e, "reply write failed");
            return;
        }
        drop(permit);
        let mut batched = 1;
        while batched < limits::WRITE_BATCH {
            let Ok((reply, permit)) = rx.try_recv() else {
                break;
            };
            if w.write_all(&reply).await.is_err() {
                return;
            }
            drop(permit);
            batched += 1;
        }
        if let Err(e) = w.flush().await {
            tracing::debug!(%peer, error = %e, "reply flush failed");
            return;
        }
    }
    let _ = w.shutdown().await;
}
