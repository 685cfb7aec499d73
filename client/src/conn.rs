//! One pipelined ONC RPC connection over TCP (RFC 5531, record marking of section 11).
//!
//! Owns the socket, xid allocation, the table of calls waiting for replies and two
//! background tasks: a writer that sends whole records handed to it through a channel (so
//! records of concurrent callers never interleave), and a reader that frames replies and
//! hands each to the caller waiting on its xid, in whatever order they arrive.
//!
//! Promises:
//!
//! - a call gets the reply carrying its own xid, or an error; never another call's reply;
//! - once the connection dies (EOF, a read or write error, a reply that cannot be framed),
//!   every pending and every later call fails with [`ClientError::Closed`] and the reason;
//! - with a timeout set, no call waits longer than it, waiting for a slot and for the
//!   socket included;
//! - a caller that gives up (timeout, dropped future) leaves nothing behind: its xid is
//!   forgotten and a reply that comes later is dropped;
//! - at most [`MAX_IN_FLIGHT`] calls wait per connection; more callers wait for a slot.
//! - calls the server sends on the connection (an NFSv4.1 back channel) go to the
//!   receiver of [`RpcConnection::serve_calls`], or are dropped when nobody took it.
//!
//! A handle ([`RpcConnection`]) is cheap to clone. Clones share the socket but each has
//! its own credential and timeout, so one connection can act as several users.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use rpc::msg::{decode_reply_header, AcceptStat, Auth, CallHeader, OpaqueAuth, ReplyStatus};
use rpc::record::{read_record, seal, start_record, RecordError, RecordTimeouts};
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;
use xdr::{Decode, Decoder, Encode, Encoder};

use crate::auth::{credential, default_auth};
use crate::error::ClientError;
use crate::limits::{
    MAX_IN_FLIGHT, MAX_REPLY_BYTES, REPLY_IDLE_POLL, REPLY_STALL_TIMEOUT, WRITE_BATCH_RECORDS,
    WRITE_QUEUE_RECORDS,
};

/// The first xid a new connection hands out.
const FIRST_XID: u32 = 1;

/// Capacity reserved for a call record before its arguments are known: a call header with
/// an `AUTH_SYS` credential and small arguments fit; larger ones grow the buffer.
const CALL_CAPACITY_BYTES: usize = 512;

/// Capacity of the writer's buffer: small records are gathered, large ones bypass it.
const WRITE_BUFFER_BYTES: usize = 64 << 10;

/// A handle to one TCP connection to an ONC RPC server. See the module docs.
#[derive(Clone)]
pub struct RpcConnection {
    inner: Arc<Inner>,
    cred: OpaqueAuth,
    timeout: Option<Duration>,
}

impl std::fmt::Debug for RpcConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcConnection")
            .field("peer", &self.inner.peer)
            .field("local", &self.inner.local)
            .field("cred_flavor", &self.cred.flavor)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// What all handles of one connection share. Dropping the last one stops the reader and
/// lets the writer flush, shut down the socket and end.
struct Inner {
    records: mpsc::Sender<Bytes>,
    table: Arc<Table>,
    next_xid: AtomicU32,
    peer: SocketAddr,
    local: SocketAddr,
    reader: AbortHandle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.table.close("connection handle dropped".to_owned());
        self.reader.abort();
    }
}

impl RpcConnection {
    /// Connects to `addr`, with the default credential (`AUTH_SYS` root) and no timeout.
    ///
    /// # Errors
    /// Connecting failed.
    pub async fn connect(addr: SocketAddr) -> io::Result<Self> {
        Self::from_stream(TcpStream::connect(addr).await?)
    }

    /// Wraps a connected stream and starts the reader and writer tasks (on the current
    /// tokio runtime).
    ///
    /// # Errors
    /// The socket has no peer or local address (it is not connected).
    pub fn from_stream(stream: TcpStream) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        let peer = stream.peer_addr()?;
        let local = stream.local_addr()?;
        let (read_half, write_half) = stream.into_split();
        let table = Arc::new(Table::new());
        let (records, queue) = mpsc::channel(WRITE_QUEUE_RECORDS);
        let writer = BufWriter::with_capacity(WRITE_BUFFER_BYTES, write_half);
        tokio::spawn(write_loop(writer, queue, Arc::clone(&table)));
        let reader = tokio::spawn(read_loop(read_half, Arc::clone(&table))).abort_handle();
        let inner = Inner {
            records,
            table,
            next_xid: AtomicU32::new(FIRST_XID),
            peer,
            local,
            reader,
        };
        Ok(Self {
            inner: Arc::new(inner),
            cred: credential(&default_auth()),
            timeout: None,
        })
    }

    /// The server's address.
    #[must_use]
    pub fn peer_addr(&self) -> SocketAddr {
        self.inner.peer
    }

    /// This end's address (what the server sees as the client's port).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    /// Whether the connection is known to be dead.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.inner.table.lock().closed.is_some()
    }

    /// Sends later calls of this handle as `auth`.
    pub fn set_auth(&mut self, auth: &Auth) {
        self.cred = credential(auth);
    }

    /// This handle, sending its calls as `auth`.
    #[must_use]
    pub fn with_auth(mut self, auth: &Auth) -> Self {
        self.set_auth(auth);
        self
    }

    /// Sends later calls of this handle with `cred` as given, e.g. a flavor the server
    /// does not support or a body that does not decode.
    pub fn set_credential(&mut self, cred: OpaqueAuth) {
        self.cred = cred;
    }

    /// The credential this handle sends.
    #[must_use]
    pub fn credential(&self) -> &OpaqueAuth {
        &self.cred
    }

    /// Limits how long each call of this handle waits (`None`: forever).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// This handle, with each call limited to `timeout`.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The per-call timeout of this handle.
    #[must_use]
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Calls `procedure` and returns the procedure results that follow a SUCCESS reply
    /// header.
    ///
    /// # Errors
    /// [`ClientError::Rpc`] for any other reply status; `Closed`, `Timeout`, `Decode`.
    pub async fn call(
        &self,
        program: u32,
        version: u32,
        procedure: u32,
        args: &impl Encode,
    ) -> Result<Bytes, ClientError> {
        within(self.timeout, async {
            let pending = self.send_untimed(program, version, procedure, args).await?;
            pending.results_untimed().await
        })
        .await
    }

    /// [`RpcConnection::call`], then decodes the results as `R`, refusing trailing bytes.
    ///
    /// # Errors
    /// As [`RpcConnection::call`]; [`ClientError::Protocol`] for trailing bytes.
    pub async fn call_decode<R: Decode>(
        &self,
        program: u32,
        version: u32,
        procedure: u32,
        args: &impl Encode,
    ) -> Result<R, ClientError> {
        decode_all(self.call(program, version, procedure, args).await?)
    }

    /// Sends a call and returns at once with a handle to its reply, so one task can keep
    /// many calls in flight (this is how `write_all` pipelines).
    ///
    /// # Errors
    /// The connection is closed, or no slot or queue room came within the timeout.
    pub async fn send_call(
        &self,
        program: u32,
        version: u32,
        procedure: u32,
        args: &impl Encode,
    ) -> Result<PendingReply, ClientError> {
        within(
            self.timeout,
            self.send_untimed(program, version, procedure, args),
        )
        .await
    }

    /// Sends `record_body` as one record, as is, and returns the whole body of the reply
    /// whose xid is the first four bytes of `record_body` (the reply header is not
    /// checked). For wire tests; build a valid body with [`RpcConnection::build_call`].
    ///
    /// # Errors
    /// [`ClientError::Io`] if `record_body` is shorter than an xid;
    /// [`ClientError::XidInUse`] if that xid is pending; `Closed`, `Timeout`.
    pub async fn call_raw(&self, record_body: Bytes) -> Result<Bytes, ClientError> {
        let Some(xid) = first_u32(&record_body) else {
            let msg = "a raw record needs at least the 4 bytes of an xid";
            return Err(io::Error::new(io::ErrorKind::InvalidInput, msg).into());
        };
        within(self.timeout, async {
            let record = frame(&record_body);
            let mut pending = self.send_record(Some(xid), |_| record).await?;
            pending.recv_untimed().await
        })
        .await
    }

    /// Takes the calls the server sends on this connection (an NFSv4.1 back channel):
    /// from now on each CALL record's body (no record mark) comes out of the receiver,
    /// and the caller answers with [`RpcConnection::send_record_body`]. Without this,
    /// calls from the server are dropped.
    #[must_use]
    pub fn serve_calls(&self) -> mpsc::UnboundedReceiver<Bytes> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self
            .inner
            .table
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(tx);
        rx
    }

    /// Sends `body` as one record, waiting for nothing (a reply to a server's call).
    ///
    /// # Errors
    /// [`ClientError::Closed`].
    pub async fn send_record_body(&self, body: &[u8]) -> Result<(), ClientError> {
        let table = &self.inner.table;
        self.inner
            .records
            .send(frame(body))
            .await
            .map_err(|_| table.closed_error())
    }

    /// An xid this connection will not hand out soon (for raw calls).
    #[must_use]
    pub fn next_xid(&self) -> u32 {
        self.inner.next_xid.fetch_add(1, Ordering::Relaxed)
    }

    /// The body (no record mark) of a call with this handle's credential: what
    /// [`RpcConnection::call`] would send, for tests to cut or corrupt.
    #[must_use]
    pub fn build_call(
        &self,
        xid: u32,
        program: u32,
        version: u32,
        procedure: u32,
        args: &impl Encode,
    ) -> Bytes {
        self.encode_call(xid, program, version, procedure, args)
            .slice(4..)
    }

    async fn send_untimed(
        &self,
        program: u32,
        version: u32,
        procedure: u32,
        args: &impl Encode,
    ) -> Result<PendingReply, ClientError> {
        self.send_record(None, |xid| {
            self.encode_call(xid, program, version, procedure, args)
        })
        .await
    }

    /// Takes a slot, registers an xid (`xid`, or a fresh one), builds the record for it
    /// and queues it for the writer.
    async fn send_record(
        &self,
        xid: Option<u32>,
        build: impl FnOnce(u32) -> Bytes,
    ) -> Result<PendingReply, ClientError> {
        let table = &self.inner.table;
        let slot = Arc::clone(&table.slots)
            .acquire_owned()
            .await
            .map_err(|_| table.closed_error())?;
        let (xid, rx) = table.register(xid, &self.inner.next_xid)?;
        // From here on, dropping `pending` forgets the xid.
        let pending = PendingReply {
            xid,
            rx,
            done: false,
            conn: Arc::clone(&self.inner),
            timeout: self.timeout,
            _slot: slot,
        };
        let record = build(xid);
        debug_assert_eq!(first_u32(&record[4..]), Some(xid), "record carries its xid");
        self.inner
            .records
            .send(record)
            .await
            .map_err(|_| table.closed_error())?;
        Ok(pending)
    }

    /// A whole call record, record mark included.
    fn encode_call(
        &self,
        xid: u32,
        program: u32,
        version: u32,
        procedure: u32,
        args: &impl Encode,
    ) -> Bytes {
        let mut e = Encoder::from_buf(start_record(CALL_CAPACITY_BYTES));
        let header = CallHeader {
            xid,
            program,
            version,
            procedure,
            cred: self.cred.clone(),
            verf: OpaqueAuth::default(),
        };
        header.encode(&mut e);
        args.encode(&mut e);
        seal(e.into_inner())
    }
}

/// A call that was sent and whose reply has not been taken yet. Dropping it abandons the
/// call: the xid is forgotten and a late reply is dropped.
pub struct PendingReply {
    xid: u32,
    rx: oneshot::Receiver<Bytes>,
    /// The reply was taken, so the table no longer holds this xid.
    done: bool,
    /// Keeps the connection (and its reader) alive while the reply is awaited.
    conn: Arc<Inner>,
    timeout: Option<Duration>,
    _slot: OwnedSemaphorePermit,
}

impl std::fmt::Debug for PendingReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingReply")
            .field("xid", &self.xid)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl PendingReply {
    /// The xid of the call.
    #[must_use]
    pub fn xid(&self) -> u32 {
        self.xid
    }

    /// Waits for the reply and returns the procedure results after a SUCCESS header.
    ///
    /// # Errors
    /// As [`RpcConnection::call`].
    pub async fn wait(self) -> Result<Bytes, ClientError> {
        within(self.timeout, self.results_untimed()).await
    }

    /// [`PendingReply::wait`], then decodes the results as `R`, refusing trailing bytes.
    ///
    /// # Errors
    /// As [`RpcConnection::call_decode`].
    pub async fn wait_decode<R: Decode>(self) -> Result<R, ClientError> {
        decode_all(self.wait().await?)
    }

    async fn results_untimed(mut self) -> Result<Bytes, ClientError> {
        let body = self.recv_untimed().await?;
        let mut d = Decoder::new(body);
        let (xid, status) = decode_reply_header(&mut d)?;
        debug_assert_eq!(xid, self.xid, "the reader matched the reply by xid");
        match status {
            ReplyStatus::Accepted(AcceptStat::Success) => Ok(d.rest()),
            other => Err(ClientError::Rpc(other)),
        }
    }

    async fn recv_untimed(&mut self) -> Result<Bytes, ClientError> {
        let body = (&mut self.rx)
            .await
            .map_err(|_| self.conn.table.closed_error())?;
        self.done = true;
        Ok(body)
    }
}

impl Drop for PendingReply {
    fn drop(&mut self) {
        if !self.done {
            self.conn.table.forget(self.xid);
        }
    }
}

/// Calls waiting for replies, and whether the connection is dead. One mutex so that a
/// call cannot register after the table was emptied by `close`.
struct Table {
    state: Mutex<TableState>,
    /// Where calls from the server go (see [`RpcConnection::serve_calls`]).
    calls: Mutex<Option<mpsc::UnboundedSender<Bytes>>>,
    /// One permit per call that may wait; closed with the connection.
    slots: Arc<Semaphore>,
}

struct TableState {
    waiting: HashMap<u32, oneshot::Sender<Bytes>>,
    /// Why the connection died; `None` while it lives.
    closed: Option<Arc<str>>,
}

impl Table {
    fn new() -> Self {
        Self {
            state: Mutex::new(TableState {
                waiting: HashMap::new(),
                closed: None,
            }),
            calls: Mutex::new(None),
            slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, TableState> {
        // The state stays consistent even if a holder panicked: every change is one
        // insert, remove or clear.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `xid`, or the next free xid from `next`.
    fn register(
        &self,
        xid: Option<u32>,
        next: &AtomicU32,
    ) -> Result<(u32, oneshot::Receiver<Bytes>), ClientError> {
        let mut state = self.lock();
        if let Some(reason) = &state.closed {
            return Err(ClientError::Closed {
                reason: Arc::clone(reason),
            });
        }
        // Ends: the semaphore keeps far fewer than 2^32 xids registered.
        debug_assert!(state.waiting.len() < MAX_IN_FLIGHT);
        let xid = match xid {
            Some(xid) if state.waiting.contains_key(&xid) => {
                return Err(ClientError::XidInUse(xid))
            }
            Some(xid) => xid,
            None => loop {
                let xid = next.fetch_add(1, Ordering::Relaxed);
                if !state.waiting.contains_key(&xid) {
                    break xid;
                }
            },
        };
        let (tx, rx) = oneshot::channel();
        state.waiting.insert(xid, tx);
        Ok((xid, rx))
    }

    /// Hands a reply to the call waiting on its xid. A reply nobody waits for (the caller
    /// gave up) is dropped; a record too short to hold an xid kills the connection.
    fn deliver(&self, body: Bytes) -> Result<(), String> {
        let Some(xid) = first_u32(&body) else {
            return Err(format!("reply record of {} bytes has no xid", body.len()));
        };
        if body.get(4..8) == Some(&rpc::msg::MSG_CALL.to_be_bytes()[..]) {
            let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
            match calls.as_ref() {
                Some(tx) => drop(tx.send(body)),
                None => tracing::debug!(xid, "dropping a call from the server"),
            }
            return Ok(());
        }
        let waiter = self.lock().waiting.remove(&xid);
        if let Some(tx) = waiter {
            // The caller may have given up in between; nothing to do then.
            drop(tx.send(body));
        } else {
            tracing::debug!(xid, "dropping a reply nobody waits for");
        }
        Ok(())
    }

    fn forget(&self, xid: u32) {
        self.lock().waiting.remove(&xid);
    }

    /// Marks the connection dead (the first reason wins) and fails every waiting call.
    fn close(&self, reason: String) {
        let mut state = self.lock();
        if state.closed.is_none() {
            tracing::debug!(%reason, "RPC connection closed");
            state.closed = Some(reason.into());
        }
        // Dropping the senders wakes every waiter with an error.
        state.waiting.clear();
        self.slots.close();
    }

    fn closed_error(&self) -> ClientError {
        let reason = self
            .lock()
            .closed
            .clone()
            .unwrap_or_else(|| Arc::from("connection closed"));
        ClientError::Closed { reason }
    }
}

/// Sends queued records until every handle is gone or the socket fails.
async fn write_loop(
    mut w: BufWriter<OwnedWriteHalf>,
    mut queue: mpsc::Receiver<Bytes>,
    table: Arc<Table>,
) {
    while let Some(first) = queue.recv().await {
        if let Err(e) = write_batch(&mut w, first, &mut queue).await {
            table.close(format!("writing to the server failed: {e}"));
            return;
        }
    }
    // Every handle is gone; the server sees EOF. A failure here has nobody to tell.
    if let Err(e) = w.shutdown().await {
        tracing::debug!(error = %e, "shutting down the write half failed");
    }
}

/// Writes `first` and whatever else is queued (up to a batch), then flushes once.
async fn write_batch(
    w: &mut BufWriter<OwnedWriteHalf>,
    first: Bytes,
    queue: &mut mpsc::Receiver<Bytes>,
) -> io::Result<()> {
    w.write_all(&first).await?;
    for _ in 1..WRITE_BATCH_RECORDS {
        let Ok(record) = queue.try_recv() else { break };
        w.write_all(&record).await?;
    }
    w.flush().await
}

/// Frames replies and delivers them until the connection ends, then closes the table.
async fn read_loop(mut r: OwnedReadHalf, table: Arc<Table>) {
    let timeouts = RecordTimeouts {
        idle: REPLY_IDLE_POLL,
        record: REPLY_STALL_TIMEOUT,
    };
    let reason = loop {
        match read_record(&mut r, MAX_REPLY_BYTES, timeouts).await {
            Ok(body) => {
                if let Err(reason) = table.deliver(body) {
                    break reason;
                }
            }
            // Nothing was read: a quiet connection is fine for a client.
            Err(RecordError::Idle(_)) => {}
            Err(RecordError::Closed) => break "the server closed the connection".to_owned(),
            Err(e) => break format!("reading a reply failed: {e}"),
        }
    };
    table.close(reason);
}

/// Runs `fut`, failing with [`ClientError::Timeout`] after `limit`.
async fn within<T>(
    limit: Option<Duration>,
    fut: impl Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    match limit {
        None => fut.await,
        Some(after) => tokio::time::timeout(after, fut)
            .await
            .unwrap_or(Err(ClientError::Timeout { after })),
    }
}

/// Decodes a whole result; bytes left over mean the server encoded something else.
pub(crate) fn decode_all<R: Decode>(results: Bytes) -> Result<R, ClientError> {
    let mut d = Decoder::new(results);
    let value = R::decode(&mut d)?;
    if d.remaining() != 0 {
        return Err(ClientError::Protocol(format!(
            "{} bytes left after decoding {}",
            d.remaining(),
            std::any::type_name::<R>()
        )));
    }
    Ok(value)
}

/// `body` as one record: the last-fragment mark, then the bytes.
fn frame(body: &[u8]) -> Bytes {
    let mut buf = start_record(body.len());
    buf.extend_from_slice(body);
    seal(buf)
}

fn first_u32(bytes: &[u8]) -> Option<u32> {
    let word: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
    Some(u32::from_be_bytes(word))
}
