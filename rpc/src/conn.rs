//! Serving one TCP connection: read records, run them concurrently, write replies.
//!
//! The connection is two-way: the server may send calls to the client on it (an NFSv4.1
//! back channel, [`crate::backchannel`]); the reader hands the client's REPLY records to
//! the calls waiting for them and runs every CALL record as a request.
//!
//! Requests on a connection are pipelined: the reader keeps reading while earlier
//! requests run (each in its own task), replies are written in completion order (which may
//! differ from arrival order). Two limits push back on a client by not reading its socket
//! (so TCP flow control stops it): at most `max_in_flight` requests in progress, and at
//! most `budget_bytes` of request records and queued replies (see [`crate::budget`]).
//!
//! Ending: when the client closes, or on server shutdown, in-flight requests finish and
//! their replies are flushed. When the connection's watchdog (the table's scan) finds it
//! idle, stalled mid-record or not reading its replies, or it is reclaimed for another
//! client, the socket is closed at once and every queued reply and budget byte is freed.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt, BufReader, BufWriter, Interest};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

use crate::backchannel::BackChannel;
use crate::budget::{ConnBudget, Reservation, ServerBudget};
use crate::dispatch::{Dispatcher, Unanswerable};
use crate::limits;
use crate::offload::Offload;
use crate::record::{read_record_watched, Activity, ConnTimeouts, RecordError};
use crate::reply::{read_exact_at, Body, FileSlice, Reply, SliceShrank};
use crate::table::{ConnState, Ticket};

/// Per-connection limits, from CLI/config with defaults in [`crate::limits`].
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub max_record_bytes: u32,
    pub max_in_flight: usize,
    pub record_timeout: Duration,
    pub idle_timeout: Duration,
    pub write_timeout: Duration,
    pub budget_bytes: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_record_bytes: limits::DEFAULT_MAX_RECORD_BYTES,
            max_in_flight: limits::DEFAULT_MAX_IN_FLIGHT,
            record_timeout: limits::DEFAULT_RECORD_TIMEOUT,
            idle_timeout: limits::DEFAULT_IDLE_TIMEOUT,
            write_timeout: limits::DEFAULT_WRITE_TIMEOUT,
            budget_bytes: limits::DEFAULT_CONN_BUDGET_BYTES,
        }
    }
}

impl ConnLimits {
    /// The time limits the table's scan enforces.
    #[must_use]
    pub fn timeouts(&self) -> ConnTimeouts {
        ConnTimeouts {
            idle: self.idle_timeout,
            record: self.record_timeout,
            write: self.write_timeout,
        }
    }

    /// How often the scan should run: late by at most a quarter of the shortest limit,
    /// never more than once per 50 ms nor less than once a second.
    #[must_use]
    pub fn scan_period(&self) -> Duration {
        (self
            .idle_timeout
            .min(self.record_timeout)
            .min(self.write_timeout)
            / 4)
        .clamp(Duration::from_millis(50), Duration::from_secs(1))
    }
}

/// What one request holds until its reply is written or dropped.
pub(crate) struct Held {
    _slot: OwnedSemaphorePermit,
    bytes: Reservation,
    state: Arc<ConnState>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.state.activity.request_done();
    }
}

/// A record for the writer: a reply with what its request holds, or a call to the client
/// (see [`crate::backchannel`]), which holds nothing.
pub(crate) type Queued = (Reply, Option<Held>);

/// Serves `stream` until the peer closes it, it breaks a limit, or `shutdown` turns true.
/// With an `offload`, requests run with blocking forbidden and those that must block run
/// again there (see [`crate::offload`]); without one, every request runs on this thread.
pub async fn serve_connection(
    stream: TcpStream,
    ticket: Ticket,
    dispatcher: Arc<Dispatcher>,
    limits: ConnLimits,
    server_budget: Arc<ServerBudget>,
    shutdown: watch::Receiver<bool>,
    offload: Option<Arc<dyn Offload>>,
) {
    let state = Arc::clone(ticket.state());
    let peer = state.peer;
    let _ = stream.set_nodelay(true);
    let (read_half, write_half) = stream.into_split();
    let reader = BufReader::with_capacity(limits::READ_BUFFER_BYTES, read_half);
    let (tx, rx) = mpsc::unbounded_channel::<Queued>();
    let mut writer = tokio::spawn(write_replies(write_half, rx, Arc::clone(&state)));
    let slots = Arc::new(Semaphore::new(limits.max_in_flight));
    let back = Arc::new(BackChannel::new(
        ticket.id(),
        peer,
        tx.clone(),
        tokio::runtime::Handle::current(),
    ));
    let conn = Conn {
        back: Arc::clone(&back),
        state: Arc::clone(&state),
        dispatcher,
        budget: ConnBudget::new(limits.budget_bytes, server_budget),
        slots: Arc::clone(&slots),
        tx,
        limits,
        offload,
    };
    let end = conn.read_loop(reader, shutdown).await;
    // Calls to the client fail from now on, and the channel lets go of the writer.
    back.close();
    drop(conn);
    if let Some(e) = end {
        // Killed: drop the socket and every queued reply now.
        writer.abort();
        log_end(peer, &e);
    } else {
        // Client closed or shutdown: let replies drain, unless the client stops reading.
        tokio::select! {
            _ = &mut writer => {}
            e = state.killed() => {
                writer.abort();
                log_end(peer, &e);
            }
        }
    }
    // Requests still running finish (handlers are synchronous; those on the blocking
    // pool within one blocking call); their replies find the writer gone and are dropped
    // with what they held.
    let all = u32::try_from(limits.max_in_flight).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
    drop(ticket);
}

struct Conn {
    state: Arc<ConnState>,
    back: Arc<BackChannel>,
    dispatcher: Arc<Dispatcher>,
    budget: Arc<ConnBudget>,
    slots: Arc<Semaphore>,
    tx: mpsc::UnboundedSender<Queued>,
    limits: ConnLimits,
    offload: Option<Arc<dyn Offload>>,
}

impl Conn {
    /// Reads and dispatches requests. Returns the error to close with, or `None` when the
    /// client closed or the server shuts down (replies should drain).
    async fn read_loop<R: tokio::io::AsyncRead + Unpin>(
        &self,
        mut reader: R,
        mut shutdown: watch::Receiver<bool>,
    ) -> Option<RecordError> {
        loop {
            let next = async {
                let slot = Arc::clone(&self.slots).acquire_owned().await;
                let mut bytes = self.budget.reservation();
                let record = read_record_watched(
                    &mut reader,
                    self.limits.max_record_bytes,
                    &self.state.activity,
                    &mut bytes,
                )
                .await?;
                bytes.grow(self.dispatcher.reply_bound(&record)).await;
                Ok::<_, RecordError>((slot, record, bytes))
            };
            let read = tokio::select! {
                biased;
                e = self.state.killed() => return Some(e),
                _ = shutdown.wait_for(|stop| *stop) => return None,
                r = next => r,
            };
            match read {
                Ok((Ok(_), record, _)) if is_reply(&record) => {
                    // A client's answer to a call of ours: its waiter takes it (and its
                    // slot and bytes are given back here).
                    self.back.deliver(record);
                }
                Ok((Ok(slot), record, bytes)) => self.spawn_request(record, slot, bytes),
                Ok((Err(_), _, _)) | Err(RecordError::Closed) => return None,
                Err(e @ RecordError::Truncated { .. }) => {
                    log_end(self.state.peer, &e);
                    return None;
                }
                Err(e) => return Some(e),
            }
        }
    }

    fn spawn_request(&self, record: Bytes, slot: OwnedSemaphorePermit, bytes: Reservation) {
        self.state.activity.request_started();
        let held = Held {
            _slot: slot,
            bytes,
            state: Arc::clone(&self.state),
        };
        let dispatcher = Arc::clone(&self.dispatcher);
        let tx = self.tx.clone();
        let peer = self.state.peer;
        let offload = self.offload.clone();
        let back = Arc::clone(&self.back);
        tokio::spawn(async move {
            let mut held = held;
            match answer(dispatcher, record, (peer, back), offload).await {
                Ok(reply) => {
                    // The record is gone; hold what the reply really takes until written
                    // (data sent from a file stays in the file's pages).
                    held.bytes.resize(reply.memory_bytes()).await;
                    held.state.activity.write_progress();
                    let _ = tx.send((reply, Some(held)));
                }
                Err(e @ Unanswerable::DuplicateInProgress(_)) => {
                    tracing::debug!(%peer, error = %e, "dropping retransmission");
                }
                Err(e) => crate::warn_limited!(
                    crate::ratelog::Kind::Unanswerable,
                    %peer, error = %e, "dropping unanswerable record"
                ),
            }
        });
    }
}

/// Runs one request: on this event loop with blocking forbidden, and again on the
/// offload if it must block (it holds its in-flight slot and reservation while it waits
/// for room there). Without an offload, on this thread as it is.
async fn answer(
    dispatcher: Arc<Dispatcher>,
    record: Bytes,
    (peer, back): (SocketAddr, Arc<BackChannel>),
    offload: Option<Arc<dyn Offload>>,
) -> Result<Reply, Unanswerable> {
    let Some(offload) = offload else {
        return dispatcher.handle_on(record, peer, Some(&back));
    };
    // A clone of `Bytes` is a reference count, not a copy of the record.
    let again = record.clone();
    match sync::blocking::forbidden(|| dispatcher.handle_on(record, peer, Some(&back))) {
        Err(Unanswerable::Deferred(_)) => {}
        answered => return answered,
    }
    let (done, result) = tokio::sync::oneshot::channel();
    let job = Box::new(move || {
        let _ = done.send(dispatcher.handle_on(again, peer, Some(&back)));
    });
    if !offload.run(job).await {
        return Err(Unanswerable::PoolStopped);
    }
    result.await.unwrap_or(Err(Unanswerable::PoolStopped))
}

/// Whether a record is an RPC REPLY (message type 1) rather than a call.
fn is_reply(record: &[u8]) -> bool {
    record.get(4..8) == Some(&crate::msg::MSG_REPLY.to_be_bytes()[..])
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
        RecordError::Idle(_) | RecordError::Reclaimed => {
            tracing::info!(%peer, error = %e, "closing idle connection");
        }
        _ => crate::warn_limited!(
            crate::ratelog::Kind::ConnectionClosed,
            %peer, error = %e, "closing connection"
        ),
    }
}

type ReplyWriter = BufWriter<Progress<OwnedWriteHalf>>;

/// Writes one reply into `w`: the head into the buffer, then any data sent from a file
/// straight to the socket after the buffer is flushed, or the pieces of a body in memory
/// (each larger than the buffer goes past it to the socket, uncopied).
async fn put(w: &mut ReplyWriter, reply: &Reply) -> std::io::Result<()> {
    w.write_all(&reply.head).await?;
    let Some(body) = &reply.body else {
        return Ok(());
    };
    match body {
        Body::Memory(parts) => {
            for p in parts {
                w.write_all(p).await?;
            }
        }
        Body::File(file) => {
            w.flush().await?;
            if let Spliced::No = send_file(w.get_ref(), file).await? {
                // A filesystem that cannot splice: the range read into memory and written.
                let mut buf = vec![0; file.len as usize];
                read_exact_at(file, &mut buf)?;
                w.write_all(&buf).await?;
            }
        }
    }
    w.write_all(&[0; 3][..body.pad_bytes()]).await
}

/// Whether [`send_file`] sent the range.
enum Spliced {
    Yes,
    /// The file's filesystem cannot splice (`EINVAL`, `ENOSYS`, `EOPNOTSUPP` before the
    /// first byte): nothing was sent.
    No,
}

/// Sends `body` with `sendfile`: for page-cache files the socket takes references to the
/// cached pages, so the server copies nothing.
async fn send_file(out: &Progress<OwnedWriteHalf>, body: &FileSlice) -> std::io::Result<Spliced> {
    let sock: &TcpStream = out.inner.as_ref();
    let end = body.offset + u64::from(body.len);
    let mut offset = body.offset;
    while offset < end {
        let left = usize::try_from(end - offset).unwrap_or(usize::MAX);
        sock.writable().await?;
        let sent = sock.try_io(Interest::WRITABLE, || {
            rustix::fs::sendfile(sock, body.file.as_fd(), Some(&mut offset), left)
                .map_err(std::io::Error::from)
        });
        match sent {
            Ok(0) => return Err(body.shrank(offset - body.offset)),
            Ok(_) => out.state.activity.write_progress(),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if offset == body.offset && cannot_splice(&e) => return Ok(Spliced::No),
            Err(e) => return Err(e),
        }
    }
    Ok(Spliced::Yes)
}

fn cannot_splice(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    e.raw_os_error().is_some_and(|n| {
        [Errno::INVAL, Errno::NOSYS, Errno::OPNOTSUPP]
            .iter()
            .any(|no| no.raw_os_error() == n)
    })
}

fn log_write_error(peer: SocketAddr, e: &std::io::Error) {
    if e.get_ref().is_some_and(|inner| inner.is::<SliceShrank>()) {
        // The record's length is already on the wire: closing is the only honest end.
        tracing::info!(%peer, error = %e, "closing connection: a READ's file shrank while it was sent (the client retries)");
    } else {
        tracing::debug!(%peer, error = %e, "reply write failed");
    }
}

/// A socket write half that tells the connection's activity whenever bytes leave, so a
/// watchdog can tell a slow reader (progress) from one that reads nothing (a stall).
struct Progress<W> {
    inner: W,
    state: Arc<ConnState>,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Progress<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.state.activity.write_progress();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Writes replies as they complete, batching those that are ready into one write. Each
/// reply's budget and slot are given back once it is in the socket.
async fn write_replies(
    write_half: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Queued>,
    state: Arc<ConnState>,
) {
    let peer = state.peer;
    let activity: &Activity = &state.activity;
    let progress = Progress {
        inner: write_half,
        state: Arc::clone(&state),
    };
    let mut w = BufWriter::with_capacity(limits::WRITE_BUFFER_BYTES, progress);
    while let Some((reply, held)) = rx.recv().await {
        activity.write_progress();
        if let Err(e) = put(&mut w, &reply).await {
            log_write_error(peer, &e);
            return;
        }
        drop((reply, held));
        let mut batched = 1;
        while batched < limits::WRITE_BATCH {
            let Ok((reply, held)) = rx.try_recv() else {
                break;
            };
            if let Err(e) = put(&mut w, &reply).await {
                log_write_error(peer, &e);
                return;
            }
            drop((reply, held));
            batched += 1;
        }
        if let Err(e) = w.flush().await {
            tracing::debug!(%peer, error = %e, "reply flush failed");
            return;
        }
        if rx.is_empty() {
            activity.write_idle();
        }
    }
    let _ = w.shutdown().await;
}
