//! Calls the server sends to a client on the client's own connection (an NFSv4.1 back
//! channel, RFC 8881 section 2.10.3.1): the connection becomes two-way.
//!
//! A [`BackChannel`] is the sending end of one server connection. A call is a whole RPC
//! CALL record queued to the connection's writer beside the replies; the connection's
//! reader hands every REPLY record it reads (message type 1) to [`BackChannel::deliver`],
//! which wakes the call waiting on that xid. Nothing blocks a thread while a call waits:
//! [`BackChannel::call`] is a future, and [`BackChannel::spawn`] runs one on the
//! connection's own event loop from any thread (a handler on the blocking pool included).
//!
//! Promises:
//! - a call gets the reply carrying its own xid, or an error (closed, timed out, too many
//!   waiting, or the client's RPC-level refusal); never another call's reply;
//! - at most [`limits::MAX_BACK_CALLS`] calls wait per connection; more are refused at
//!   once ([`CallError::TooMany`]) rather than queued without bound;
//! - once the connection ends, every waiting and every later call fails with
//!   [`CallError::Closed`], and the channel keeps no reference to the writer (so the
//!   connection's writer can finish);
//! - a reply nobody waits for (its call timed out) is dropped with one debug line.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use xdr::{Decoder, Encoder};

use crate::limits;
use crate::msg::{decode_reply_header, AcceptStat, CallHeader, OpaqueAuth, ReplyStatus};
use crate::outbound::Outbound;
use crate::record::{seal, start_record};
use crate::reply::Reply;

/// Why a call on a back channel got no results.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The connection ended (before or while the call waited). Permanent for this
    /// channel: the client must bind another connection.
    #[error("the connection is closed")]
    Closed,
    /// No reply within the time the caller allowed. The client may still answer later;
    /// the reply is then dropped.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// [`limits::MAX_BACK_CALLS`] calls already wait on this connection. Transient.
    #[error("too many calls waiting on this connection")]
    TooMany,
    /// The client refused the call at the RPC level (PROG_UNAVAIL, AUTH_ERROR, ...).
    #[error("the client refused the call: {0:?}")]
    Refused(ReplyStatus),
    /// The reply did not decode as an RPC reply.
    #[error("malformed reply: {0}")]
    Malformed(String),
}

/// One server connection's sending end for calls. See the module docs.
pub struct BackChannel {
    id: u64,
    peer: SocketAddr,
    runtime: tokio::runtime::Handle,
    next_xid: AtomicU32,
    open: AtomicBool,
    inner: Mutex<Inner>,
}

struct Inner {
    /// The connection's writer; `None` once the connection ended.
    writer: Option<Arc<Outbound>>,
    waiting: HashMap<u32, oneshot::Sender<Bytes>>,
}

impl std::fmt::Debug for BackChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackChannel")
            .field("id", &self.id)
            .field("peer", &self.peer)
            .field("open", &self.is_open())
            .finish_non_exhaustive()
    }
}

/// The call header's words before the arguments: what [`BackChannel::call`] sends.
#[derive(Debug, Clone)]
pub struct CallTo {
    pub program: u32,
    pub version: u32,
    pub procedure: u32,
    /// The credential the client asked callbacks to carry (AUTH_NONE or AUTH_SYS).
    pub cred: OpaqueAuth,
}

impl BackChannel {
    /// The channel of connection `id` from `peer`, writing through `writer`, whose calls
    /// wait on `runtime` (the connection's event loop).
    pub(crate) fn new(
        id: u64,
        peer: SocketAddr,
        writer: Arc<Outbound>,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        Self {
            id,
            peer,
            runtime,
            // The two directions of a connection have separate xid spaces (RFC 8881
            // section 2.10.3.1); spreading the start only makes captures easier to read.
            next_xid: AtomicU32::new((id as u32).wrapping_mul(0x9E37_79B9)),
            open: AtomicBool::new(true),
            inner: Mutex::new(Inner {
                writer: Some(writer),
                waiting: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every change under the lock is one insert, remove or clear.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Unique per connection for the server's life.
    #[must_use]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The client's address.
    #[must_use]
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Whether the connection still lives.
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Runs `fut` on the connection's event loop (callable from any thread).
    pub fn spawn<F>(&self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        drop(self.runtime.spawn(fut));
    }

    /// Sends a call with `args` (already encoded) and waits at most `timeout` for its
    /// reply. Returns the procedure's results (the bytes after an accepted SUCCESS
    /// header).
    ///
    /// # Errors
    /// See [`CallError`].
    pub async fn call(
        &self,
        to: &CallTo,
        args: &[u8],
        timeout: Duration,
    ) -> Result<Bytes, CallError> {
        let xid = self.next_xid.fetch_add(1, Ordering::Relaxed);
        let mut e = Encoder::from_buf(start_record(64 + to.cred.body.len() + args.len()));
        CallHeader {
            xid,
            program: to.program,
            version: to.version,
            procedure: to.procedure,
            cred: to.cred.clone(),
            verf: OpaqueAuth::default(),
        }
        .encode(&mut e);
        e.fixed_opaque(args);
        let record = seal(e.into_inner());
        let rx = self.send(xid, record)?;
        let waited = tokio::time::timeout(timeout, rx).await;
        let body = match waited {
            Ok(Ok(body)) => body,
            Ok(Err(_)) => return Err(CallError::Closed),
            Err(_) => {
                self.lock().waiting.remove(&xid);
                return Err(CallError::Timeout(timeout));
            }
        };
        let mut d = Decoder::new(body);
        let (got, status) =
            decode_reply_header(&mut d).map_err(|e| CallError::Malformed(e.to_string()))?;
        debug_assert_eq!(got, xid, "deliver matched the reply by xid");
        match status {
            ReplyStatus::Accepted(AcceptStat::Success) => Ok(d.rest()),
            other => Err(CallError::Refused(other)),
        }
    }

    fn send(&self, xid: u32, record: Bytes) -> Result<oneshot::Receiver<Bytes>, CallError> {
        let mut g = self.lock();
        let Some(writer) = g.writer.clone() else {
            return Err(CallError::Closed);
        };
        if g.waiting.len() >= limits::MAX_BACK_CALLS {
            return Err(CallError::TooMany);
        }
        let (tx, rx) = oneshot::channel();
        g.waiting.insert(xid, tx);
        if writer.queue((Reply::from(record), None)).is_err() {
            g.waiting.remove(&xid);
            return Err(CallError::Closed);
        }
        Ok(rx)
    }

    /// Hands a REPLY record (read by the connection) to the call waiting on its xid.
    /// Returns whether one was waiting.
    pub(crate) fn deliver(&self, record: Bytes) -> bool {
        let Some(xid) = record
            .get(..4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
        else {
            return false;
        };
        let Some(tx) = self.lock().waiting.remove(&xid) else {
            tracing::debug!(peer = %self.peer, xid, "dropping a reply no callback waits for");
            return false;
        };
        // The caller may have given up in between; nothing to do then.
        drop(tx.send(record));
        true
    }

    /// The connection ended: fail every waiting call and let go of the writer.
    pub(crate) fn close(&self) {
        self.open.store(false, Ordering::Release);
        let mut g = self.lock();
        g.writer = None;
        // Dropping the senders wakes every waiter with `Closed`.
        g.waiting.clear();
    }
}
