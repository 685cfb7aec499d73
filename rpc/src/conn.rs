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
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

use crate::dispatch::Dispatcher;
use crate::limits;
use crate::record::{read_record, RecordError, RecordTimeouts};

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

/// Bytes the reader buffers from the socket: one syscall picks up many small requests.
const READ_BUFFER_BYTES: usize = 64 << 10;
/// Bytes the writer gathers before a socket write.
const WRITE_BUFFER_BYTES: usize = 64 << 10;

/// Serves `stream` until the peer closes it, it breaks a limit, or `shutdown` turns true.
pub async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    dispatcher: Arc<Dispatcher>,
    limits: ConnLimits,
    mut shutdown: watch::Receiver<bool>,
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
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        let record = tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => break,
            r = read_record(&mut reader, limits.max_record_bytes, timeouts) => r,
        };
        match record {
            Ok(record) => spawn_request(record, peer, &dispatcher, &tx, permit),
            Err(e) => {
                log_end(peer, &e);
                break;
            }
        }
    }
    // Let in-flight requests finish, then close the reply channel so the writer drains.
    let _ = slots
        .acquire_many(u32::try_from(limits.max_in_flight).unwrap_or(u32::MAX))
        .await;
    drop(tx);
    let _ = writer.await;
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
