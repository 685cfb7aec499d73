//! Turning one request record into one reply record.
//!
//! A program version is a static table of [`Procedure`] rows ({name, run, max reply size,
//! cache class}); adding a procedure is adding a row. The [`Dispatcher`] owns every
//! registered program version and answers the RPC-level errors itself: RPC_MISMATCH,
//! AUTH_ERROR, PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL, GARBAGE_ARGS and SYSTEM_ERR.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use gtime::Clock;
use xdr::{Decode, DecodeError, Decoder, Encoder};

use crate::backchannel::BackChannel;
use crate::drc::{CallKey, Lookup, ReplyCache};
use crate::ratelog::Kind;

use crate::msg::{
    encode_accepted, encode_denied, AcceptStat, Auth, Denial, OpaqueAuth, MSG_CALL, RPC_VERSION,
};
use crate::record::{seal, seal_before, start_record};
use crate::reply::{Body, FileSlice, Reply};

/// What the server knows about one call while running it.
#[derive(Debug, Clone)]
pub struct CallContext {
    pub xid: u32,
    pub peer: SocketAddr,
    pub auth: Auth,
    pub procedure: u32,
    /// The connection the call came on, as a channel for calls back to the client (see
    /// [`crate::backchannel`]); `None` where the call did not come from a connection
    /// (tests, the fuzzers, the lab).
    pub back: Option<Arc<BackChannel>>,
    /// Bytes the reply ends with, sent from a file or from the backend's memory (see
    /// [`CallContext::end_with_file`], [`CallContext::end_with_bytes`]).
    body: RefCell<Option<Body>>,
}

impl CallContext {
    #[must_use]
    pub fn new(xid: u32, peer: SocketAddr, auth: Auth, procedure: u32) -> Self {
        Self {
            xid,
            peer,
            auth,
            procedure,
            back: None,
            body: RefCell::new(None),
        }
    }

    /// Ends a successful reply with `slice`'s bytes and their XDR padding, sent from the
    /// file (see [`crate::reply`]). The procedure has encoded everything before them, the
    /// opaque's length word included. Ignored if the procedure then fails.
    pub fn end_with_file(&self, slice: FileSlice) {
        *self.body.borrow_mut() = Some(Body::File(slice));
    }

    /// Ends a successful reply with `parts` (in order) and their XDR padding, sent as
    /// they are: bytes a backend holds in memory already, not copied into the reply. As
    /// [`CallContext::end_with_file`] otherwise.
    pub fn end_with_bytes(&self, parts: Vec<Bytes>) {
        *self.body.borrow_mut() = Some(Body::Memory(parts));
    }

    fn take_body(&self) -> Option<Body> {
        self.body.borrow_mut().take()
    }
}

/// Whether running a procedure twice is harmless (for the duplicate request cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheClass {
    /// Reads and lookups: a retransmission may simply run again.
    Idempotent,
    /// Changes: a retransmission must get the first reply, not run again.
    NonIdempotent,
}

/// How a procedure body ended, when not with a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcError {
    /// The arguments did not decode: GARBAGE_ARGS.
    Garbage(DecodeError),
    /// The server failed (a bug or an unrecoverable state): SYSTEM_ERR.
    System(&'static str),
    /// The call must block (a sync, a read from the disk) and this thread may not
    /// (`sync::blocking::allowed` is false): nothing was changed. The dispatcher answers
    /// [`Unanswerable::Deferred`] and the connection runs the call again on a thread that
    /// may block.
    WouldBlock,
}

impl From<DecodeError> for ProcError {
    fn from(e: DecodeError) -> Self {
        Self::Garbage(e)
    }
}

/// One row of a program's procedure table. `S` is the program's shared state.
pub struct Procedure<S> {
    pub name: &'static str,
    /// Decodes the arguments, runs the procedure, encodes the results.
    pub run: fn(&S, &CallContext, &mut Decoder, &mut Encoder) -> Result<(), ProcError>,
    /// Upper bound of the encoded results: what a connection's memory budget charges for
    /// the reply before it exists (the buffer starts smaller and grows).
    pub max_reply_bytes: usize,
    pub cache: CacheClass,
}

/// Builds a [`Procedure`] row from a handler `fn(&S, &CallContext, Args) -> Res`, or,
/// with `may_block` last, from one that returns `Result<Res, ProcError>` because it may
/// answer [`ProcError::WouldBlock`] (before it changed anything).
#[macro_export]
macro_rules! procedure {
    ($name:literal, $handler:path, $max_reply:expr, $cache:expr, may_block) => {
        $crate::dispatch::Procedure {
            name: $name,
            run: |state, ctx, d, e| {
                let args = $crate::__xdr::Decode::decode(d)?;
                let res = $handler(state, ctx, args)?;
                $crate::__xdr::Encode::encode(&res, e);
                Ok(())
            },
            max_reply_bytes: $max_reply,
            cache: $cache,
        }
    };
    ($name:literal, $handler:path, $max_reply:expr, $cache:expr) => {
        $crate::dispatch::Procedure {
            name: $name,
            run: |state, ctx, d, e| {
                let args = $crate::__xdr::Decode::decode(d)?;
                let res = $handler(state, ctx, args);
                $crate::__xdr::Encode::encode(&res, e);
                Ok(())
            },
            max_reply_bytes: $max_reply,
            cache: $cache,
        }
    };
}

/// One version of one RPC program.
pub trait Program: Send + Sync {
    fn program(&self) -> u32;
    fn version(&self) -> u32;
    /// The row for `procedure`, if the table has one.
    fn procedure_name(&self, procedure: u32) -> Option<&'static str>;
    /// Runs a procedure; `None` if the table has no such row.
    fn call(
        &self,
        ctx: &CallContext,
        d: &mut Decoder,
        e: &mut Encoder,
    ) -> Option<Result<(), ProcError>>;
    /// Reply-size bound for `procedure` (0 if unknown).
    fn max_reply_bytes(&self, procedure: u32) -> usize;
    /// Whether `procedure` may run twice (`None` if the table has no such row).
    fn cache_class(&self, procedure: u32) -> Option<CacheClass>;
}

/// A procedure table bound to its state.
pub struct Service<S: 'static> {
    pub program: u32,
    pub version: u32,
    pub procedures: &'static [Procedure<S>],
    pub state: Arc<S>,
}

impl<S: Send + Sync + 'static> Service<S> {
    fn row(&self, procedure: u32) -> Option<&'static Procedure<S>> {
        self.procedures.get(usize::try_from(procedure).ok()?)
    }
}

impl<S: Send + Sync + 'static> Program for Service<S> {
    fn program(&self) -> u32 {
        self.program
    }

    fn version(&self) -> u32 {
        self.version
    }

    fn procedure_name(&self, procedure: u32) -> Option<&'static str> {
        self.row(procedure).map(|p| p.name)
    }

    fn call(
        &self,
        ctx: &CallContext,
        d: &mut Decoder,
        e: &mut Encoder,
    ) -> Option<Result<(), ProcError>> {
        self.row(ctx.procedure)
            .map(|p| (p.run)(&self.state, ctx, d, e))
    }

    fn max_reply_bytes(&self, procedure: u32) -> usize {
        self.row(procedure).map_or(0, |p| p.max_reply_bytes)
    }

    fn cache_class(&self, procedure: u32) -> Option<CacheClass> {
        self.row(procedure).map(|p| p.cache)
    }
}

/// Why a record got no reply at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unanswerable {
    #[error("record of {0} bytes is too short to hold a call header")]
    TooShort(usize),
    #[error("message type {0} is not a call")]
    NotACall(u32),
    /// A retransmission of a call that is still running; the original's reply answers it.
    #[error("retransmission of xid {0:#x} while the original is in progress")]
    DuplicateInProgress(u32),
    /// The reply's data could not be read from its file (only from [`Dispatcher::handle`],
    /// which reads it into memory).
    #[error("reply data unreadable: {0}")]
    BodyUnreadable(String),
    /// The call must block and the calling thread may not (an event loop: see
    /// `sync::blocking`). Nothing was done, not even a reply-cache entry: run the same
    /// record again on a thread that may block. Never returned on any other thread.
    #[error("xid {0:#x} must run where it may block")]
    Deferred(u32),
    /// A deferred call found the blocking pool stopped (shutdown) or its job panicked.
    #[error("the blocking pool did not run the call")]
    PoolStopped,
}

/// What the dispatcher reports about one answered call (for metrics).
#[derive(Debug, Clone, Copy)]
pub struct Observed {
    pub program: u32,
    pub version: u32,
    pub procedure: &'static str,
    /// Bytes of the arguments (the record after the call header).
    pub args_bytes: usize,
    /// Bytes of the reply record, mark included.
    pub reply_bytes: usize,
    pub latency: std::time::Duration,
    /// The reply came from the duplicate request cache.
    pub from_reply_cache: bool,
}

/// Told about every answered call; must be cheap and never block.
pub trait CallObserver: Send + Sync {
    fn observe(&self, call: &Observed);
}

/// Every program version a server offers, on one port.
#[derive(Default)]
pub struct Dispatcher {
    programs: Vec<Box<dyn Program>>,
    reply_cache: Option<(Arc<ReplyCache>, Arc<dyn Clock>)>,
    observer: Option<(Arc<dyn CallObserver>, Arc<dyn Clock>)>,
}

/// Reply body budget when a procedure's own bound is unknown (errors only).
const ERROR_REPLY_BYTES: usize = 64;

/// Record mark and accepted-reply header in front of a reply body (with room to spare).
const REPLY_HEADER_BYTES: usize = 64;

impl Dispatcher {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a program version.
    ///
    /// # Panics
    /// If the same program and version is registered twice.
    pub fn register(&mut self, program: Box<dyn Program>) {
        assert!(
            !self
                .programs
                .iter()
                .any(|p| p.program() == program.program() && p.version() == program.version()),
            "program {} version {} registered twice",
            program.program(),
            program.version()
        );
        self.programs.push(program);
    }

    /// Remembers replies of non-idempotent calls in `cache`, aged by `clock`.
    pub fn set_reply_cache(&mut self, cache: Arc<ReplyCache>, clock: Arc<dyn Clock>) {
        self.reply_cache = Some((cache, clock));
    }

    /// Reports every answered call to `observer`, timed by `clock`.
    pub fn set_observer(&mut self, observer: Arc<dyn CallObserver>, clock: Arc<dyn Clock>) {
        self.observer = Some((observer, clock));
    }

    /// (program, version) pairs, for portmapper registration.
    pub fn offered(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.programs.iter().map(|p| (p.program(), p.version()))
    }

    /// Handles one request record and returns the reply record, record mark included, in
    /// memory (data a procedure sends from a file is read with `pread`).
    ///
    /// # Errors
    /// As [`Dispatcher::handle_reply`], and [`Unanswerable::BodyUnreadable`].
    pub fn handle(&self, record: Bytes, peer: SocketAddr) -> Result<Bytes, Unanswerable> {
        self.handle_reply(record, peer)?
            .into_bytes()
            .map_err(|e| Unanswerable::BodyUnreadable(e.to_string()))
    }

    /// Handles one request record and returns the reply record, record mark included,
    /// whose end may be sent from a file (see [`crate::reply`]).
    ///
    /// # Errors
    /// Records that cannot be answered at all (no xid, or not a call); the caller logs
    /// and drops them, as RFC 5531 servers do.
    pub fn handle_reply(&self, record: Bytes, peer: SocketAddr) -> Result<Reply, Unanswerable> {
        self.handle_on(record, peer, None)
    }

    /// [`Dispatcher::handle_reply`] for a call that came on a connection whose `back`
    /// channel procedures may use to call the client.
    ///
    /// # Errors
    /// As [`Dispatcher::handle_reply`].
    pub fn handle_on(
        &self,
        record: Bytes,
        peer: SocketAddr,
        back: Option<&Arc<BackChannel>>,
    ) -> Result<Reply, Unanswerable> {
        self.handle_into(record, peer, back, &mut ReplyBuf::default())
    }

    /// [`Dispatcher::handle_on`] encoding the reply into `out`, a connection's reply
    /// buffer, so that calls one after another reuse one allocation.
    ///
    /// # Errors
    /// As [`Dispatcher::handle_reply`].
    pub fn handle_into(
        &self,
        record: Bytes,
        peer: SocketAddr,
        back: Option<&Arc<BackChannel>>,
        out: &mut ReplyBuf,
    ) -> Result<Reply, Unanswerable> {
        let len = record.len();
        let mut d = Decoder::new(record);
        let (Ok(xid), Ok(mtype)) = (d.u32(), d.u32()) else {
            return Err(Unanswerable::TooShort(len));
        };
        if mtype != MSG_CALL {
            return Err(Unanswerable::NotACall(mtype));
        }
        self.handle_call(xid, &mut d, peer, back, out)
    }

    fn handle_call(
        &self,
        xid: u32,
        d: &mut Decoder,
        peer: SocketAddr,
        back: Option<&Arc<BackChannel>>,
        out: &mut ReplyBuf,
    ) -> Result<Reply, Unanswerable> {
        let header = match decode_call_rest(d) {
            Ok(h) => h,
            Err(HeaderError::Auth(stat)) => {
                crate::warn_limited!(Kind::Auth, %peer, xid, ?stat, "AUTH_ERROR: credential or verifier over 400 bytes");
                return Ok(Reply::from(seal(denied(xid, Denial::Auth(stat)))));
            }
            Err(HeaderError::Garbage(e)) => {
                crate::warn_limited!(Kind::Garbage, %peer, xid, error = %e, "GARBAGE_ARGS: malformed call header");
                return Ok(Reply::from(seal(accepted_only(
                    xid,
                    AcceptStat::GarbageArgs,
                ))));
            }
        };
        let (rpcvers, program, version, procedure, cred) = header;
        if rpcvers != RPC_VERSION {
            crate::warn_limited!(Kind::Auth, %peer, xid, rpcvers, "RPC_MISMATCH: unsupported RPC version");
            let range = Denial::RpcMismatch {
                low: RPC_VERSION,
                high: RPC_VERSION,
            };
            return Ok(Reply::from(seal(denied(xid, range))));
        }
        let auth = match Auth::from_cred(&cred) {
            Ok(a) => a,
            Err(stat) => {
                crate::warn_limited!(Kind::Auth, %peer, xid, flavor = cred.flavor, ?stat, "AUTH_ERROR: credential refused");
                return Ok(Reply::from(seal(denied(xid, Denial::Auth(stat)))));
            }
        };
        let Some(prog) = self.find(program, version) else {
            return Ok(Reply::from(seal(
                self.program_error(xid, program, version, peer),
            )));
        };
        let mut ctx = CallContext::new(xid, peer, auth, procedure);
        ctx.back = back.cloned();
        let Some((observer, clock)) = &self.observer else {
            return self
                .run_cached(prog, &ctx, d, (program, version), out)
                .map(|(r, _)| r);
        };
        let (request_bytes, started) = (d.remaining(), clock.monotonic());
        let result = self.run_cached(prog, &ctx, d, (program, version), out);
        if let Ok((reply, cached)) = &result {
            observer.observe(&Observed {
                program,
                version,
                procedure: prog.procedure_name(procedure).unwrap_or("?"),
                args_bytes: request_bytes,
                reply_bytes: reply.len(),
                latency: clock.monotonic().saturating_sub(started),
                from_reply_cache: *cached,
            });
        }
        result.map(|(r, _)| r)
    }

    /// Runs a call, through the reply cache if it is non-idempotent. Returns the reply and
    /// whether it came from the cache.
    fn run_cached(
        &self,
        prog: &dyn Program,
        ctx: &CallContext,
        d: &mut Decoder,
        (program, version): (u32, u32),
        out: &mut ReplyBuf,
    ) -> Result<(Reply, bool), Unanswerable> {
        let (peer, xid, procedure) = (ctx.peer, ctx.xid, ctx.procedure);
        let cache = match (&self.reply_cache, prog.cache_class(procedure)) {
            (Some(cache), Some(CacheClass::NonIdempotent)) => cache,
            _ => return Ok((run(prog, ctx, d, out)?, false)),
        };
        let (cache, clock) = cache;
        let key = CallKey::new(peer, xid, (program, version, procedure), &d.rest());
        let now_ns = u64::try_from(clock.monotonic().as_nanos()).unwrap_or(u64::MAX);
        match cache.begin(key, now_ns) {
            Lookup::Done(reply) => {
                tracing::debug!(%peer, xid, procedure, "retransmission answered from the reply cache");
                Ok((reply.into(), true))
            }
            Lookup::InProgress => Err(Unanswerable::DuplicateInProgress(xid)),
            Lookup::New => {
                // The cache keeps bytes: a procedure that changes state never sends from a
                // file, and if one did its data is read into memory here.
                let reply = match run(prog, ctx, d, out) {
                    Ok(reply) => reply,
                    Err(e) => {
                        // Deferred: the call runs again where it may block and begins
                        // its entry then; a retransmission meanwhile finds none and is
                        // deferred too, and the first of the two to begin runs.
                        cache.abandon(&key);
                        return Err(e);
                    }
                };
                let reply = reply
                    .into_bytes()
                    .map_err(|e| Unanswerable::BodyUnreadable(e.to_string()))?;
                // A copy of its own: the reply is cut from a buffer the connection reuses,
                // which the cache must not keep alive (nor more than the reply's bytes).
                cache.complete(&key, Bytes::copy_from_slice(&reply));
                Ok((reply.into(), false))
            }
        }
    }

    /// Bytes the reply to `record` may take at most, record mark included: the bound of
    /// its procedure's table row, or an error reply's size. Read from the header's fixed
    /// words only, so it costs nothing to ask before running the call.
    #[must_use]
    pub fn reply_bound(&self, record: &[u8]) -> usize {
        let word = |i| crate::msg::header_word(record, i);
        let body = match (word(3), word(4), word(5)) {
            (Some(program), Some(version), Some(procedure)) => self
                .find(program, version)
                .map_or(0, |p| p.max_reply_bytes(procedure)),
            _ => 0,
        };
        body.max(ERROR_REPLY_BYTES) + REPLY_HEADER_BYTES
    }

    fn find(&self, program: u32, version: u32) -> Option<&dyn Program> {
        self.programs
            .iter()
            .find(|p| p.program() == program && p.version() == version)
            .map(|p| &**p)
    }

    fn program_error(&self, xid: u32, program: u32, version: u32, peer: SocketAddr) -> BytesMut {
        let versions = self
            .programs
            .iter()
            .filter(|p| p.program() == program)
            .map(|p| p.version());
        let (low, high) = versions.fold((u32::MAX, 0), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if low > high {
            tracing::debug!(%peer, xid, program, "PROG_UNAVAIL");
            return accepted_only(xid, AcceptStat::ProgUnavail);
        }
        tracing::debug!(%peer, xid, program, version, low, high, "PROG_MISMATCH");
        accepted_only(xid, AcceptStat::ProgMismatch { low, high })
    }
}

type CallRest = (u32, u32, u32, u32, OpaqueAuth);

/// Why a call header could not be taken apart.
enum HeaderError {
    /// Truncated or malformed: GARBAGE_ARGS.
    Garbage(DecodeError),
    /// A credential (BADCRED) or verifier (BADVERF) over 400 bytes: RFC 5531 makes
    /// that an authentication error, not garbage.
    Auth(crate::msg::AuthStat),
}

fn decode_call_rest(d: &mut Decoder) -> Result<CallRest, HeaderError> {
    let mut word = || d.u32().map_err(HeaderError::Garbage);
    let (rpcvers, program, version, procedure) = (word()?, word()?, word()?, word()?);
    let auth = |d: &mut Decoder, stat| match OpaqueAuth::decode(d) {
        Err(DecodeError::TooLong { .. }) => Err(HeaderError::Auth(stat)),
        r => r.map_err(HeaderError::Garbage),
    };
    let cred = auth(d, crate::msg::AuthStat::BadCred)?;
    let _verf = auth(d, crate::msg::AuthStat::BadVerf)?;
    Ok((rpcvers, program, version, procedure, cred))
}

/// A reply buffer starts at most this large and grows while a procedure encodes: the
/// procedure's `max_reply_bytes` is the bound a connection's memory budget charges, not an
/// allocation (a 4 KiB READ must not reserve the largest READ's 1 MiB).
const INITIAL_REPLY_BYTES: usize = 16 << 10;
const _: () = assert!(ERROR_REPLY_BYTES <= INITIAL_REPLY_BYTES);
const _: () = assert!(
    INITIAL_REPLY_BYTES + REPLY_HEADER_BYTES + 4 <= crate::limits::KEEP_REPLY_BUFFER_BYTES,
    "a connection keeps a buffer its next small reply fits"
);

/// Where one connection's replies are encoded: a buffer each reply is cut from
/// ([`BytesMut::split`]), kept for the next one. A reply shares the buffer until it is
/// written; the next one is encoded in the room after it if the size it starts with fits
/// there, or, once every reply cut from it is gone (one call at a time), from its start
/// again: small calls one after another cost no allocation for their replies. Otherwise
/// it gets a new buffer, as every reply did before. A buffer that grew past
/// [`crate::limits::KEEP_REPLY_BUFFER_BYTES`] (a large reply) is not kept, so an idle
/// connection holds at most that much.
#[derive(Debug, Default)]
pub struct ReplyBuf {
    buf: BytesMut,
}

impl ReplyBuf {
    /// A buffer with room for `capacity_bytes` after a record mark (see [`start_record`]).
    fn start(&mut self, capacity_bytes: usize) -> BytesMut {
        let mut buf = std::mem::take(&mut self.buf);
        buf.reserve(capacity_bytes + 4);
        buf.extend_from_slice(&[0; 4]);
        buf
    }

    /// Cuts the reply encoded in `buf` (from [`ReplyBuf::start`]) off it, keeping the rest
    /// of a small buffer. A large one is handed over whole: not cut, it is frozen as any
    /// buffer was before (a 64 KiB READ's, filled to its capacity, with no shared header
    /// to allocate).
    fn finish(&mut self, mut buf: BytesMut) -> BytesMut {
        if buf.capacity() > crate::limits::KEEP_REPLY_BUFFER_BYTES {
            return buf;
        }
        let reply = buf.split();
        self.buf = buf;
        reply
    }

    /// Takes back a buffer whose reply was dropped.
    fn abandon(&mut self, mut buf: BytesMut) {
        buf.clear();
        if buf.capacity() <= crate::limits::KEEP_REPLY_BUFFER_BYTES {
            self.buf = buf;
        }
    }
}

/// Runs one call and seals its reply record.
///
/// # Errors
/// [`Unanswerable::Deferred`] when the procedure answered [`ProcError::WouldBlock`].
fn run(
    prog: &dyn Program,
    ctx: &CallContext,
    d: &mut Decoder,
    out: &mut ReplyBuf,
) -> Result<Reply, Unanswerable> {
    let budget = prog
        .max_reply_bytes(ctx.procedure)
        .clamp(ERROR_REPLY_BYTES, INITIAL_REPLY_BYTES);
    let mut e = Encoder::from_buf(out.start(budget + REPLY_HEADER_BYTES));
    encode_accepted(&mut e, ctx.xid, AcceptStat::Success);
    let body_start = e.len();
    let stat = match prog.call(ctx, d, &mut e) {
        Some(Ok(())) => {
            let body = ctx.take_body();
            let more = body.as_ref().map_or(0, |b| b.len() + b.pad_bytes());
            return Ok(Reply {
                head: seal_before(out.finish(e.into_inner()), more),
                body,
            });
        }
        Some(Err(ProcError::WouldBlock)) => {
            drop(ctx.take_body());
            out.abandon(e.into_inner());
            return Err(Unanswerable::Deferred(ctx.xid));
        }
        None => {
            tracing::debug!(peer = %ctx.peer, xid = ctx.xid, procedure = ctx.procedure, "PROC_UNAVAIL");
            AcceptStat::ProcUnavail
        }
        Some(Err(ProcError::Garbage(err))) => {
            let name = prog.procedure_name(ctx.procedure).unwrap_or("?");
            crate::warn_limited!(Kind::Garbage, peer = %ctx.peer, xid = ctx.xid, procedure = name, error = %err, "GARBAGE_ARGS");
            AcceptStat::GarbageArgs
        }
        Some(Err(ProcError::System(why))) => {
            tracing::error!(peer = %ctx.peer, xid = ctx.xid, why, "SYSTEM_ERR");
            AcceptStat::SystemErr
        }
    };
    // Rewrite the reply: header with the error status, no body.
    drop(ctx.take_body());
    e.truncate(body_start - 4);
    e.u32(stat.code());
    Ok(seal(out.finish(e.into_inner())).into())
}

fn accepted_only(xid: u32, stat: AcceptStat) -> BytesMut {
    let mut e = Encoder::from_buf(start_record(ERROR_REPLY_BYTES));
    encode_accepted(&mut e, xid, stat);
    e.into_inner()
}

fn denied(xid: u32, denial: Denial) -> BytesMut {
    let mut e = Encoder::from_buf(start_record(ERROR_REPLY_BYTES));
    encode_denied(&mut e, xid, denial);
    e.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROGRAM: u32 = 400_500;

    /// Procedure 1: answers the number of bytes its argument asks for, each 7.
    fn fill(_: &(), _: &CallContext, d: &mut Decoder, e: &mut Encoder) -> Result<(), ProcError> {
        let n = d.u32()? as usize;
        e.fixed_opaque(&vec![7; n]);
        Ok(())
    }

    static PROCS: [Procedure<()>; 2] = [
        Procedure {
            name: "null",
            run: fill,
            max_reply_bytes: 0,
            cache: CacheClass::Idempotent,
        },
        Procedure {
            name: "fill",
            run: fill,
            max_reply_bytes: 1 << 20,
            cache: CacheClass::Idempotent,
        },
    ];

    fn dispatcher() -> Dispatcher {
        let mut d = Dispatcher::new();
        d.register(Box::new(Service {
            program: PROGRAM,
            version: 1,
            procedures: &PROCS,
            state: Arc::new(()),
        }));
        d
    }

    /// A call of procedure `xid % 2`: 1 starts with a 16 KiB buffer, 0 with a small one.
    fn call(xid: u32, n: u32) -> Bytes {
        let words = [xid, 0, 2, PROGRAM, 1, xid % 2, 0, 0, 0, 0, n];
        words.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    const PEER: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::LOCALHOST,
        700,
    ));

    fn answer(d: &Dispatcher, out: &mut ReplyBuf, xid: u32, n: u32) -> Bytes {
        let reply = d.handle_into(call(xid, n), PEER, None, out).unwrap();
        assert!(reply.body.is_none());
        // Mark, xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS, then the bytes.
        assert_eq!(reply.head.len(), 4 + 24 + n as usize);
        assert_eq!(&reply.head[4..8], &xid.to_be_bytes());
        assert!(
            reply.head[28..].iter().all(|&b| b == 7),
            "reply {xid} intact"
        );
        reply.head
    }

    /// Calls one after another reuse one buffer; while a reply is held, the next is
    /// encoded in the room after it if its start size fits there, else elsewhere, and the
    /// held one keeps its bytes; a buffer grown for a large reply is let go.
    #[test]
    fn replies_reuse_the_connections_buffer_and_a_large_one_is_not_kept() {
        let d = dispatcher();
        let mut out = ReplyBuf::default();
        let first = answer(&d, &mut out, 1, 4096);
        let at = first.as_ptr();
        drop(first);
        let second = answer(&d, &mut out, 3, 4096);
        assert_eq!(second.as_ptr(), at, "the same memory, from its start");
        let third = answer(&d, &mut out, 4, 100);
        assert_eq!(
            third.as_ptr(),
            at.wrapping_add(second.len()),
            "a small reply encoded after one still held"
        );
        let fourth = answer(&d, &mut out, 5, 4096);
        let room = at.wrapping_add(second.len() + third.len());
        assert_ne!(fourth.as_ptr(), room, "16 KiB do not fit the room left");
        assert!(
            second[28..].iter().all(|&b| b == 7),
            "the held replies intact"
        );
        assert!(
            third[28..].iter().all(|&b| b == 7),
            "the held replies intact"
        );
        drop((second, third, fourth));
        let large = answer(&d, &mut out, 7, 100 << 10);
        assert_eq!(
            out.buf.capacity(),
            0,
            "a buffer grown past the keep size is let go"
        );
        drop(large);
        let small = answer(&d, &mut out, 9, 8);
        assert!(out.buf.capacity() <= crate::limits::KEEP_REPLY_BUFFER_BYTES);
        drop(small);
    }
}
