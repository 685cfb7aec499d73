//! Serving one TCP connection: read records, run them concurrently, write replies.
//!
//! The connection is two-way: the server may send calls to the client on it (an NFSv4.1
//! back channel, [`crate::backchannel`]); the reader hands the client's REPLY records to
//! the calls waiting for them and runs every CALL record as a request.
//!
//! Requests on a connection are pipelined: replies are written in completion order (which
//! may differ from arrival order). The reader runs each request it reads where it is, on
//! the connection's event loop, with blocking forbidden (handlers are synchronous): one
//! that must block runs in a task of its own on the offload while the reader reads on.
//! A reply answered where it was read goes straight into the socket when nothing else
//! waits to be written and no further request is already buffered (one call at a time:
//! no task and no hand-over per call); otherwise it is queued for the writer task, which
//! gathers the replies that are ready into one write (see [`crate::outbound`]). Two
//! limits push back on a client by not reading its socket (so TCP flow control stops
//! it): at most `max_in_flight` requests in progress, and at most `budget_bytes` of
//! request records and queued replies (see [`crate::budget`]).
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
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::backchannel::BackChannel;
use crate::budget::{ConnBudget, Reservation, ServerBudget};
use crate::dispatch::{Dispatcher, ReplyBuf, Unanswerable};
use crate::limits;
use crate::offload::Offload;
use crate::outbound::{self, outbound, Drain, Now, Outbound};
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

impl Held {
    pub(crate) fn new(
        slot: OwnedSemaphorePermit,
        bytes: Reservation,
        state: Arc<ConnState>,
    ) -> Self {
        Self {
            _slot: slot,
            bytes,
            state,
        }
    }
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
    let (out, drain) = outbound();
    let out = Arc::new(out);
    let mut writer = tokio::spawn(write_replies(write_half, drain, Arc::clone(&state)));
    let slots = Arc::new(Semaphore::new(limits.max_in_flight));
    let back = Arc::new(BackChannel::new(
        ticket.id(),
        peer,
        Arc::clone(&out),
        tokio::runtime::Handle::current(),
    ));
    let conn = Conn {
        back: Arc::clone(&back),
        state: Arc::clone(&state),
        dispatcher,
        budget: ConnBudget::new(limits.budget_bytes, server_budget),
        slots: Arc::clone(&slots),
        out,
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
    out: Arc<Outbound>,
    limits: ConnLimits,
    offload: Option<Arc<dyn Offload>>,
}

impl Conn {
    /// Reads and runs requests. Returns the error to close with, or `None` when the
    /// client closed or the server shuts down (replies should drain).
    async fn read_loop(
        &self,
        mut reader: BufReader<OwnedReadHalf>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Option<RecordError> {
        // Made once: each select below polls them again, without a new subscription.
        let killed = self.state.killed();
        let stop = shutdown.wait_for(|stop| *stop);
        tokio::pin!(killed, stop);
        // The requests run here encode their replies into one buffer (see `ReplyBuf`).
        let mut replies = ReplyBuf::default();
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
                e = &mut killed => return Some(e),
                _ = &mut stop => return None,
                r = next => r,
            };
            match read {
                Ok((Ok(_), record, _)) if is_reply(&record) => {
                    // A client's answer to a call of ours: its waiter takes it (and its
                    // slot and bytes are given back here).
                    self.back.deliver(record);
                }
                Ok((Ok(slot), record, bytes)) => {
                    // Another request already read with this one: its reply joins the
                    // writer's next batch rather than a write of its own.
                    let alone = reader.buffer().is_empty();
                    let sock = (alone, reader.get_ref().as_ref());
                    self.run_request(record, slot, bytes, sock, &mut replies);
                }
                Ok((Err(_), _, _)) | Err(RecordError::Closed) => return None,
                Err(e @ RecordError::Truncated { .. }) => {
                    log_end(self.state.peer, &e);
                    return None;
                }
                Err(e) => return Some(e),
            }
        }
    }

    /// Runs a request here, with blocking forbidden when there is an offload to send it
    /// to if it must block (then it runs there, in a task of its own), and sends its
    /// reply: straight into `sock` when it is `alone` (no other request read with it) and
    /// nothing else waits to be written, else through the writer. The reply is encoded
    /// into `replies`, the connection's reply buffer.
    fn run_request(
        &self,
        record: Bytes,
        slot: OwnedSemaphorePermit,
        bytes: Reservation,
        (alone, sock): (bool, &TcpStream),
        replies: &mut ReplyBuf,
    ) {
        self.state.activity.request_started();
        let held = Held::new(slot, bytes, Arc::clone(&self.state));
        let peer = self.state.peer;
        let back = Some(&self.back);
        let answered = match &self.offload {
            None => catch(|| self.dispatcher.handle_into(record, peer, back, replies)),
            Some(offload) => {
                // A clone of `Bytes` is a reference count, not a copy of the record.
                let again = record.clone();
                let here = catch(|| {
                    sync::blocking::forbidden(|| {
                        self.dispatcher.handle_into(record, peer, back, replies)
                    })
                });
                if let Some(Err(Unanswerable::Deferred(_))) = here {
                    self.spawn_offloaded(again, held, Arc::clone(offload));
                    return;
                }
                here
            }
        };
        let Some(answered) = answered else {
            tracing::error!(%peer, "a request's handler panicked: no reply");
            return;
        };
        let reply = match answered {
            Ok(reply) => reply,
            Err(e) => return unanswerable(peer, &e),
        };
        if alone {
            match self.out.write_now(sock, reply, held) {
                Now::Done => {}
                Now::Busy(reply, held) => queue(&self.out, reply, held),
            }
            return;
        }
        queue(&self.out, reply, held);
    }

    /// Runs a request that must block on the offload, in a task of its own (it holds its
    /// in-flight slot and reservation while it waits for room there), and queues its
    /// reply.
    fn spawn_offloaded(&self, record: Bytes, held: Held, offload: Arc<dyn Offload>) {
        let dispatcher = Arc::clone(&self.dispatcher);
        let out = Arc::clone(&self.out);
        let peer = self.state.peer;
        let back = Arc::clone(&self.back);
        tokio::spawn(async move {
            let (done, result) = tokio::sync::oneshot::channel();
            let job = Box::new(move || {
                let _ = done.send(dispatcher.handle_on(record, peer, Some(&back)));
            });
            let answered = if offload.run(job).await {
                result.await.unwrap_or(Err(Unanswerable::PoolStopped))
            } else {
                Err(Unanswerable::PoolStopped)
            };
            match answered {
                Ok(reply) => queue(&out, reply, held),
                Err(e) => unanswerable(peer, &e),
            }
        });
    }
}

/// Runs `f`, a request's handler, catching a panic (`None`), so that a bug in one
/// procedure costs its request and not the connection, as when each ran in a task.
fn catch<T>(f: impl FnOnce() -> T) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok()
}

/// Queues a reply for the writer, holding what its request holds until it is written:
/// the record is gone, so only what the reply takes (data sent from a file stays in the
/// file's pages). A reply larger than the reservation waits for room in a task.
fn queue(out: &Arc<Outbound>, reply: Reply, mut held: Held) {
    let bytes = reply.memory_bytes();
    if !held.bytes.shrink_to(bytes) {
        let out = Arc::clone(out);
        tokio::spawn(async move {
            held.bytes.resize(bytes).await;
            queue(&out, reply, held);
        });
        return;
    }
    held.state.activity.write_progress();
    // The writer gone (the connection ended): the reply is dropped with what it held.
    let _ = out.queue((reply, Some(held)));
}

fn unanswerable(peer: SocketAddr, e: &Unanswerable) {
    if let Unanswerable::DuplicateInProgress(_) = e {
        tracing::debug!(%peer, error = %e, "dropping retransmission");
    } else {
        crate::warn_limited!(
            crate::ratelog::Kind::Unanswerable,
            %peer, error = %e, "dropping unanswerable record"
        );
    }
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
/// straight to the socket after the buffer is flushed, or a body in memory with the head
/// and padding in `writev`s (into the buffer if they fit it, else past it to the socket,
/// uncopied).
async fn put(w: &mut ReplyWriter, reply: &Reply) -> std::io::Result<()> {
    let Some(body) = &reply.body else {
        return w.write_all(&reply.head).await;
    };
    match body {
        Body::Memory(_) => {
            let mut pieces = reply.memory_pieces().unwrap_or_default();
            while !pieces.is_empty() {
                let n = w.write_vectored(&outbound::io_slices(&pieces)).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::WriteZero.into());
                }
                outbound::consume(&mut pieces, n);
            }
            return Ok(());
        }
        Body::File(file) => {
            w.write_all(&reply.head).await?;
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

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.state.activity.write_progress();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
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
    mut drain: Drain,
    state: Arc<ConnState>,
) {
    let peer = state.peer;
    let activity: &Activity = &state.activity;
    let progress = Progress {
        inner: write_half,
        state: Arc::clone(&state),
    };
    let mut w = BufWriter::with_capacity(limits::WRITE_BUFFER_BYTES, progress);
    while let Some((reply, held)) = drain.queue.recv().await {
        activity.write_progress();
        if let Err(e) = put(&mut w, &reply).await {
            log_write_error(peer, &e);
            return;
        }
        drop((reply, held));
        let mut batched = 1;
        while batched < limits::WRITE_BATCH {
            let Ok((reply, held)) = drain.queue.try_recv() else {
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
        if drain.settle() {
            activity.write_idle();
        }
    }
    let _ = w.shutdown().await;
}
