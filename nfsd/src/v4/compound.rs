//! The COMPOUND procedure (RFC 8881 sections 2.10.6, 15.2, 16.2): operations run in
//! order over a current (and saved) filehandle and stateid until one fails, and the
//! reply carries every result up to and including the failed one.
//!
//! Session rules: a COMPOUND starts with SEQUENCE, except one that is only EXCHANGE_ID,
//! CREATE_SESSION, DESTROY_SESSION, BIND_CONN_TO_SESSION or DESTROY_CLIENTID. SEQUENCE
//! admits the request on its slot: a retransmission gets the slot's kept reply, byte for
//! byte, and runs nothing. A reply is kept when the client asked (`sa_cachethis`) and it
//! fits the session's `ca_maxresponsesize_cached`; otherwise a retransmission gets
//! `NFS4ERR_RETRY_UNCACHED_REP` (granary never runs a request twice).
//!
//! Where it runs: on the network worker, unless before any operation ran it is sent
//! whole to the worker's blocking pool: on a server with a host or erofs export, when it
//! holds a call that may sleep on a disk (`may_block`; the Linux client's READ and
//! syncing WRITE COMPOUNDs are tried on the worker first, `worker_try`); when it may
//! reach a remote export ([`super::reach`]); when CREATE_SESSION writes a client record.
//! So a server of mem and object exports runs a COMPOUND that reaches no object export as
//! a server of mem exports only would.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nfs4::compound::Stopped;
use nfs4::ops::{opnum, ArgOp, StableHow4};
use nfs4::results::{Res4, SequenceOk};
use nfs4::types::{ChannelAttrs4, Stateid4, Tag4};
use nfs4::{Compound4Args, Nfsstat4, ResOp};
use rpc::dispatch::ProcError;
use rpc::CallContext;
use rpc::FileSlice;
use state4::{Admission, ClientId, Session, Ticket};
use vfs::limits::ZERO_COPY_READ_MIN_BYTES;
use vfs::{Cred, Export, FileId};
use xdr::{Decode, Decoder, Encode, Encoder};

use super::convert::status_of;
use super::ops_io::TailRead;
use super::{FileKey, Nfs4State};

/// The current or saved filehandle.
#[derive(Clone)]
pub enum Fh {
    /// A pseudo directory (see [`super::pseudo`]).
    Pseudo(u32),
    /// A file of an export, with the handle bytes that name it.
    File {
        export: Arc<Export>,
        id: FileId,
        raw: Bytes,
    },
}

impl Fh {
    /// A file of `export` with attributes `attr`, named by the handle the core signs for
    /// it (the same bytes NFSv3 hands out).
    #[must_use]
    pub fn file(s: &Nfs4State, export: Arc<Export>, attr: &vfs::Attr) -> Self {
        let raw = s.core.handle(&export, attr).0;
        Self::File {
            export,
            id: attr.fileid,
            raw,
        }
    }
}

/// What one COMPOUND works with.
pub struct Cx<'a> {
    pub s: &'a Nfs4State,
    pub ctx: &'a CallContext,
    pub minor: u32,
    pub cur: Option<Fh>,
    pub saved: Option<Fh>,
    pub cur_sid: Option<Stateid4>,
    pub saved_sid: Option<Stateid4>,
    pub session: Option<Arc<Session>>,
    pub now: Duration,
    /// The operation running is the COMPOUND's last.
    pub last_op: bool,
    /// A READ that ended the COMPOUND, to read into the reply (see [`finish_read`]).
    pub tail_read: Option<TailRead>,
    /// Bytes the running operation's result may take after its operation number and
    /// status, and the error of a result past them: what the session's reply has left
    /// (`None` outside a session). The last READDIR shortens its list to fit.
    pub result_room: Option<(usize, Nfsstat4)>,
    /// A WRITE or COMMIT of a COMPOUND tried on a network worker ([`worker_try`]) found
    /// that its backend call would sleep (`WouldBlock`, before it changed anything).
    pub blocked: bool,
    /// The attributes the WRITE just run left its file with (export id, file): what a
    /// GETATTR right after it answers without asking the backend again (the Linux client
    /// sends SEQUENCE, PUTFH, WRITE, GETATTR; on a host export that is one `statx`
    /// fewer). Only the operation that follows the WRITE sees it (see [`execute`]).
    pub written: Option<(u32, FileId, vfs::Attr)>,
}

impl Cx<'_> {
    /// The current filehandle.
    pub fn cur(&self) -> Result<&Fh, Nfsstat4> {
        self.cur.as_ref().ok_or(Nfsstat4::Nofilehandle)
    }

    /// The current filehandle as a file of an export, with the caller's credential there.
    pub fn file(&self) -> Result<(Arc<Export>, FileId, Arc<Cred>), Nfsstat4> {
        match self.cur()? {
            Fh::File { export, id, .. } => {
                let cred = self.s.core.cred(export, &self.ctx.auth);
                Ok((Arc::clone(export), *id, cred))
            }
            // Pseudo directories are read-only directories.
            Fh::Pseudo(_) => Err(Nfsstat4::Rofs),
        }
    }

    /// The client of this COMPOUND's session.
    pub fn client(&self) -> Result<ClientId, Nfsstat4> {
        self.session
            .as_ref()
            .map(|s| s.client)
            .ok_or(Nfsstat4::OpNotInSession)
    }

    /// A stateid argument, with the "current stateid" replaced (RFC 8881 16.2.3.1.2).
    pub fn stateid(&self, sid: &Stateid4) -> Result<Stateid4, Nfsstat4> {
        if *sid == Stateid4::CURRENT {
            return self.cur_sid.ok_or(Nfsstat4::BadStateid);
        }
        Ok(*sid)
    }

    /// The state key of a file.
    pub fn key(export: &Export, id: FileId) -> FileKey {
        (export.id.0, id.0)
    }
}

/// Operations that may open a COMPOUND without SEQUENCE, alone.
fn sessionless(op: &ArgOp) -> bool {
    matches!(
        op,
        ArgOp::ExchangeId(_)
            | ArgOp::CreateSession(_)
            | ArgOp::DestroySession(_)
            | ArgOp::BindConnToSession(_)
            | ArgOp::DestroyClientid(_)
    )
}

/// How the COMPOUND was answered.
enum Outcome {
    /// Encoded into the reply; the slot's ticket and whether the client asked to keep it.
    Fresh(Option<(Ticket, bool)>),
    Replay(Bytes),
    /// A COMPOUND tried on a network worker (see [`worker_try`]) whose READ, WRITE or
    /// COMMIT would sleep on the disk: nothing was changed but its slot, whose ticket this
    /// is; the reply so far is to be dropped and the COMPOUND run again on the blocking
    /// pool.
    Blocked(Option<(Ticket, bool)>),
}

/// The RPC reply header in front of every COMPOUND reply, which the channel's response
/// sizes count (RFC 8881 section 18.36.3): xid, message type, reply status, an AUTH_NONE
/// verifier (flavor and empty body) and the accept status.
const RPC_REPLY_HEADER_BYTES: usize = 24;

/// SEQUENCE's result: operation number, status, session id, sequence id, slot id,
/// highest and target highest slot ids, status flags.
const SEQUENCE_RESULT_BYTES: usize = 4 + 4 + 16 + 5 * 4;

/// The largest result of an operation that failed: operation number, status, and the
/// empty bitmap of SETATTR's failure.
const FAILED_RESULT_BYTES: usize = 12;

/// A COMPOUND reply encoded straight into the RPC reply, result by result, within the
/// session's reply size.
struct Writer<'a> {
    e: &'a mut Encoder,
    ops: &'a super::OpStats,
    /// Offsets of the reply's status and of its result count, written last.
    status_at: usize,
    count_at: usize,
    count: u32,
    /// Where the last result starts.
    last_at: usize,
    /// Bytes the body may take, and the error of a result past them (no session: no
    /// bound but the RPC layer's).
    room: Option<(usize, Nfsstat4)>,
    /// Results counted only once the COMPOUND is answered here (a COMPOUND tried on a
    /// network worker may run again on the blocking pool, and must be counted once):
    /// the number held and each one's operation number and success.
    held: Option<(usize, [(u32, bool); WORKER_TRY_MAX_OPS])>,
}

impl<'a> Writer<'a> {
    fn new(e: &'a mut Encoder, ops: &'a super::OpStats, tag: &Tag4, hold: bool) -> Self {
        let status_at = e.len();
        e.u32(0);
        tag.encode(e);
        let count_at = e.len();
        e.u32(0);
        Self {
            e,
            ops,
            status_at,
            count_at,
            count: 0,
            last_at: count_at + 4,
            room: None,
            held: hold.then_some((0, [(0, false); WORKER_TRY_MAX_OPS])),
        }
    }

    /// Counts a result, or holds it until the COMPOUND is answered.
    fn record(&mut self, op: u32, ok: bool) {
        match &mut self.held {
            Some((n, held)) if *n < held.len() => {
                held[*n] = (op, ok);
                *n += 1;
            }
            _ => self.ops.record(op, ok),
        }
    }

    /// Bytes of the body so far.
    fn len(&self) -> usize {
        self.e.len() - self.status_at
    }

    /// Whether `more` bytes still fit the room.
    fn fits(&self, more: usize) -> Result<(), Nfsstat4> {
        match self.room {
            Some((room, error)) if self.len() + more > room => Err(error),
            _ => Ok(()),
        }
    }

    /// Adds a result, or the room's error in its place when it does not fit; returns the
    /// status sent. A result that fits leaves room for the error of the next one, so the
    /// reply never passes the room.
    fn push(&mut self, r: ResOp) -> Nfsstat4 {
        let at = self.e.len();
        self.last_at = at;
        r.encode(self.e);
        let r = match self.room {
            Some((room, error)) if self.len() + FAILED_RESULT_BYTES > room => {
                self.e.truncate(at);
                let failed = ResOp::failed(r.opnum(), error);
                failed.encode(self.e);
                failed
            }
            _ => r,
        };
        self.record(r.opnum(), r.status().is_ok());
        self.count += 1;
        r.status()
    }

    /// Replaces the last result, which succeeded, by `r`, a failure.
    fn fail_last(&mut self, r: ResOp) {
        self.e.truncate(self.last_at);
        r.encode(self.e);
        match &mut self.held {
            Some((n, held)) if *n > 0 => held[*n - 1].1 = false,
            _ => self.ops.record_failure(r.opnum()),
        }
    }

    /// Writes the COMPOUND's status and result count.
    fn finish(self, status: Nfsstat4, ticket: Option<(Ticket, bool)>) -> Outcome {
        self.e.patch_u32(self.status_at, status as u32);
        self.e.patch_u32(self.count_at, self.count);
        if let Some((n, held)) = &self.held {
            for &(op, ok) in &held[..*n] {
                self.ops.record(op, ok);
            }
        }
        Outcome::Fresh(ticket)
    }

    /// Drops what was written: the reply is a replay of a kept one.
    fn discard(self, kept: Bytes) -> Outcome {
        self.e.truncate(self.status_at);
        Outcome::Replay(kept)
    }
}

/// The bytes a reply body may take on a session's fore channel, and the error for a reply
/// past them: `NFS4ERR_REP_TOO_BIG_TO_CACHE` when the client asked for the reply to be kept
/// and the cached size is the smaller bound, `NFS4ERR_REP_TOO_BIG` otherwise.
fn room(fore: &ChannelAttrs4, cachethis: bool) -> (usize, Nfsstat4) {
    let body = |n: u32| (n as usize).saturating_sub(RPC_REPLY_HEADER_BYTES);
    let whole = body(fore.ca_maxresponsesize);
    let cached = body(fore.ca_maxresponsesize_cached);
    if cachethis && cached < whole {
        (cached, Nfsstat4::RepTooBigToCache)
    } else {
        (whole, Nfsstat4::RepTooBig)
    }
}

/// The largest result of an operation that changes something, checked against the room
/// before it runs; `None` for the operations that change nothing, whose result is checked
/// once encoded.
fn change_result_bytes(op: &ArgOp) -> Option<usize> {
    match op {
        ArgOp::Lock(_) => Some(crate::limits::MAX_LOCK_RESULT_BYTES),
        ArgOp::Open(_)
        | ArgOp::Create(_)
        | ArgOp::Remove(_)
        | ArgOp::Rename(_)
        | ArgOp::Link(_)
        | ArgOp::Setattr(_)
        | ArgOp::Write(_)
        | ArgOp::Close(_)
        | ArgOp::OpenDowngrade(_)
        | ArgOp::Locku(_)
        | ArgOp::FreeStateid(_)
        | ArgOp::Allocate(_)
        | ArgOp::Deallocate(_)
        | ArgOp::Copy(_)
        | ArgOp::Clone(_) => Some(crate::limits::MAX_CHANGE_RESULT_BYTES),
        _ => None,
    }
}

/// The COMPOUND row's body: decode, run, encode (and keep the reply in its slot).
pub fn run(
    s: &Nfs4State,
    ctx: &CallContext,
    d: &mut Decoder,
    e: &mut Encoder,
) -> Result<(), ProcError> {
    // The call as the channel sizes count it: the RPC header and credentials included.
    let request_bytes = d.position() + d.remaining();
    let args = Compound4Args::decode(d)?;
    // On a network worker, a READ, WRITE or COMMIT COMPOUND of an export that may block is
    // tried where it is: its read takes only what the page cache holds, as NFSv3's READ
    // does, and its sync runs only where it never waits on a disk (a memory-backed host
    // export); the backend answers `WouldBlock` otherwise, before anything changed.
    // On a server with a remote export, only a COMPOUND that may reach one (or the
    // state its heads share) goes to the pool for that ([`super::reach`]); the others
    // run as on a server without one.
    let remote = s.remote && super::reach::reaches_remote(s, &args);
    let tried = (s.may_block && !remote && !sync::blocking::allowed())
        .then(|| worker_try(&args))
        .flatten();
    let try_here = tried.is_some();
    let blocks = s.may_block && !try_here && args.ops.iter().any(may_block);
    // CREATE_SESSION writes and syncs a client record in the state directory.
    let record = s.records.is_some()
        && args
            .ops
            .iter()
            .any(|op| matches!(op, ArgOp::CreateSession(_)));
    if !sync::blocking::allowed() && (remote || blocks || record) {
        // Before any operation ran (SEQUENCE's slot included): the whole COMPOUND runs
        // again on the worker's blocking pool.
        return Err(ProcError::WouldBlock);
    }
    let start = e.len();
    let local = s.remote && !remote;
    let run_here = |e: &mut Encoder| {
        if try_here {
            execute(s, ctx, args, request_bytes, e, true, local)
        } else {
            // A COMPOUND cannot give up half way (its first operations may have changed
            // state), so its calls run where it runs: a rare call that blocks and is not
            // in `may_block` (an OPEN that truncates) blocks the event loop, as every call
            // did before the pool.
            sync::blocking::permitted(|| execute(s, ctx, args, request_bytes, e, false, local))
        }
    };
    let outcome = if local {
        // Judged not to reach a remote export: a remote backend asserts it was not called.
        sync::blocking::remote_forbidden(|| run_here(e))
    } else {
        run_here(e)
    };
    if let Some(kind) = tried {
        s.ops
            .record_worker_try(kind, !matches!(outcome, Outcome::Blocked(_)));
    }
    match outcome {
        Outcome::Replay(bytes) => e.fixed_opaque(&bytes),
        Outcome::Fresh(None) => {}
        Outcome::Fresh(Some((ticket, cachethis))) => {
            // The reply fits the cached size when the client asked for it to be kept (the
            // room was that size).
            let reply = e.written_since(start);
            let limit = (ticket.session().fore.ca_maxresponsesize_cached as usize)
                .saturating_sub(RPC_REPLY_HEADER_BYTES);
            let keep = cachethis && reply.len() <= limit;
            ticket.finish(keep.then(|| Bytes::copy_from_slice(reply)));
        }
        Outcome::Blocked(ticket) => {
            e.truncate(start);
            if let Some((ticket, _)) = ticket {
                ticket.withdraw();
            }
            return Err(ProcError::WouldBlock);
        }
    }
    Ok(())
}

/// The most operations of a COMPOUND tried on a network worker ([`worker_try`]).
const WORKER_TRY_MAX_OPS: usize = 8;

/// Whether a COMPOUND may be tried on a network worker although it reads or syncs, and
/// which kind it is: SEQUENCE, then only operations that change nothing and never wait
/// on the disk (setting the current or saved filehandle), then either a READ that ends
/// it, as the Linux client sends each READ (SEQUENCE, PUTFH, READ), or a WRITE that
/// syncs (FILE_SYNC or DATA_SYNC) or a COMMIT, followed by at most one GETATTR, as it
/// sends an O_DIRECT WRITE (SEQUENCE, PUTFH, WRITE, GETATTR) and a COMMIT. That READ,
/// WRITE or COMMIT is the one call that may find the disk in its way (`WouldBlock` from
/// the backend, before it changes anything: a READ of uncached data, a sync on a disk);
/// the COMPOUND then gives its slot back ([`Ticket::withdraw`]) and runs again on the
/// blocking pool. An UNSTABLE WRITE never syncs, and runs on the worker anyway.
fn worker_try(args: &Compound4Args) -> Option<WorkerTry> {
    let ops = &args.ops;
    if args.stopped.is_some()
        || !(2..=WORKER_TRY_MAX_OPS).contains(&ops.len())
        || !matches!(ops.first(), Some(ArgOp::Sequence(_)))
    {
        return None;
    }
    let syncs = |op: &ArgOp| match op {
        ArgOp::Write(w) => w.stable != StableHow4::Unstable,
        ArgOp::Commit(_) => true,
        _ => false,
    };
    let (kind, before) = match ops.as_slice() {
        [.., ArgOp::Read(_)] => (WorkerTry::Read, &ops[1..ops.len() - 1]),
        [before @ .., op, ArgOp::Getattr(_)] | [before @ .., op] if syncs(op) => {
            (WorkerTry::Write, &before[1..])
        }
        _ => return None,
    };
    before
        .iter()
        .all(|op| {
            matches!(
                op,
                ArgOp::Putfh(_)
                    | ArgOp::Putrootfh
                    | ArgOp::Putpubfh
                    | ArgOp::Getfh
                    | ArgOp::Savefh
                    | ArgOp::Restorefh
            )
        })
        .then_some(kind)
}

/// What a COMPOUND tried on a network worker does ([`worker_try`]), for its metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerTry {
    /// It ends with a READ.
    Read,
    /// It has a WRITE that syncs, or a COMMIT.
    Write,
}

/// Completes the final READ's result (encoded as `eof = false` and an empty opaque, so
/// its last 8 bytes) with the file's bytes, at most `room` of them (what the session's
/// reply has left: a short read, as knfsd answers): read straight into the reply, one
/// copy as NFSv3's READ, or for a large READ from a backend that can hand over the file,
/// for a peer `--sendfile` allows, left in the file for the connection to send with
/// `sendfile`, or from one that holds them in memory (object), handed over as its pieces
/// (`vfs::Backend::read_shared`), unless the slot keeps the reply for a retransmission
/// (`kept`): it keeps one buffer, not files or pieces.
fn finish_read(
    s: &Nfs4State,
    ctx: &CallContext,
    e: &mut Encoder,
    read: &TailRead,
    room: Option<usize>,
    kept: bool,
) -> Result<(), vfs::FsError> {
    let eof_at = e.len() - 8;
    let TailRead {
        export,
        id,
        cred,
        offset,
        count,
        opened,
    } = read;
    let count = room.map_or(*count, |left| {
        (*count).min(u32::try_from(left).unwrap_or(u32::MAX))
    });
    if !kept && count >= ZERO_COPY_READ_MIN_BYTES && s.core.sendfile.applies_to(ctx.peer.ip()) {
        let slice = export.read_slice(cred, *id, *offset, count)?;
        if let Some(slice) = slice {
            e.patch_u32(eof_at, u32::from(slice.done.eof));
            e.patch_u32(eof_at + 4, slice.len);
            if slice.len > 0 {
                ctx.end_with_file(FileSlice {
                    file: slice.file,
                    offset: slice.offset,
                    len: slice.len,
                });
            }
            return Ok(());
        }
    }
    if !kept && count >= ZERO_COPY_READ_MIN_BYTES {
        // A backend that holds the bytes in memory (mem, object) hands over its pieces.
        if let Some(shared) = export.read_shared(cred, *id, *offset, count, *opened)? {
            let len = u32::try_from(shared.len()).unwrap_or(u32::MAX);
            e.patch_u32(eof_at, u32::from(shared.done.eof));
            e.patch_u32(eof_at + 4, len);
            if len > 0 {
                ctx.end_with_bytes(shared.parts);
            }
            return Ok(());
        }
    }
    e.truncate(eof_at + 4);
    let (_, eof) = e.opaque_with(|out| {
        if *opened {
            export.read_opened(cred, *id, *offset, count, out)
        } else {
            export
                .read_into(cred, *id, *offset, count, out)
                .map(|done| done.eof)
        }
    })?;
    e.patch_u32(eof_at, u32::from(eof));
    Ok(())
}

/// Operations whose backend call may sleep on the disk: a COMPOUND holding one runs on the
/// blocking pool, unless it is a READ, WRITE or COMMIT COMPOUND tried first on the worker
/// ([`worker_try`])
/// (READ: a page-cache miss, or an EROFS decode; SETATTR: a size change;
/// NFSv4.2's SEEK, ALLOCATE, DEALLOCATE, COPY and CLONE: extent maps, block allocation
/// and copies of up to `vfs::limits::MAX_COPY_BYTES`).
fn may_block(op: &ArgOp) -> bool {
    match op {
        ArgOp::Read(_) | ArgOp::Commit(_) | ArgOp::Setattr(_) => true,
        ArgOp::Seek(_)
        | ArgOp::Allocate(_)
        | ArgOp::Deallocate(_)
        | ArgOp::Copy(_)
        | ArgOp::Clone(_) => true,
        ArgOp::Write(w) => w.stable != StableHow4::Unstable,
        _ => false,
    }
}

fn execute(
    s: &Nfs4State,
    ctx: &CallContext,
    args: Compound4Args,
    request_bytes: usize,
    e: &mut Encoder,
    tried_here: bool,
    judged_local: bool,
) -> Outcome {
    let mut w = Writer::new(e, &s.ops, &args.tag, tried_here);
    if !(1..=2).contains(&args.minorversion) {
        return w.finish(Nfsstat4::MinorVersMismatch, None);
    }
    if let Some(Stopped::TooMany(_)) = args.stopped {
        return w.finish(Nfsstat4::Resource, None);
    }
    let Some(first) = args.ops.first() else {
        // Nothing decoded: an empty COMPOUND, or its first operation was unreadable.
        return match &args.stopped {
            Some(Stopped::BadXdr { opnum, .. }) => {
                w.push(ResOp::failed(*opnum, Nfsstat4::Badxdr));
                w.finish(Nfsstat4::Badxdr, None)
            }
            _ => w.finish(Nfsstat4::Ok, None),
        };
    };
    let mut cx = Cx {
        s,
        ctx,
        minor: args.minorversion,
        cur: None,
        saved: None,
        cur_sid: None,
        saved_sid: None,
        session: None,
        now: s.now(),
        last_op: false,
        tail_read: None,
        result_room: None,
        blocked: false,
        written: None,
    };
    let mut ticket = None;
    let mut rest = &args.ops[..];
    match first {
        ArgOp::Sequence(sa) => {
            let sizes = Sizes {
                ops: args.ops.len(),
                request: request_bytes,
                reply_head: w.len(),
            };
            match sequence(&mut cx, sa, &sizes) {
                Ok(Admission::Replay(bytes)) => return w.discard(bytes),
                Ok(Admission::Run(t)) => {
                    let session = Arc::clone(t.session());
                    let flags = s.callbacks.status_flags(session.client, &session.id);
                    let ok = sequence_ok(&session, sa, flags);
                    w.push(ResOp::Sequence(Res4::Ok(ok)));
                    w.room = Some(room(&session.fore, sa.sa_cachethis));
                    cx.session = Some(session);
                    ticket = Some((t, sa.sa_cachethis));
                    rest = &args.ops[1..];
                }
                Err(status) => {
                    w.push(ResOp::Sequence(Res4::Err(status)));
                    return w.finish(status, None);
                }
            }
        }
        op if sessionless(op) && args.ops.len() > 1 => {
            w.push(ResOp::failed(op.opnum(), Nfsstat4::NotOnlyOp));
            return w.finish(Nfsstat4::NotOnlyOp, None);
        }
        op if !sessionless(op) && !matches!(op, ArgOp::NotSupported(_) | ArgOp::Illegal(_)) => {
            w.push(refuse(op, Nfsstat4::OpNotInSession));
            return w.finish(Nfsstat4::OpNotInSession, None);
        }
        _ => {}
    }
    let mut status = Nfsstat4::Ok;
    for (i, op) in rest.iter().enumerate() {
        cx.last_op = i + 1 == rest.len() && args.stopped.is_none();
        // After the result's operation number and status, room is kept for the error
        // result of the next operation (`Writer::push`).
        cx.result_room = w.room.map(|(room, error)| {
            (
                room.saturating_sub(w.len() + 8 + FAILED_RESULT_BYTES),
                error,
            )
        });
        let r = match change_result_bytes(op).map(|bytes| w.fits(bytes)) {
            Some(Err(too_big)) => refuse(op, too_big),
            _ => super::ops_session::dispatch(&mut cx, op),
        };
        if !matches!(op, ArgOp::Write(_)) {
            // A WRITE's attributes serve the one operation after it, no later one.
            cx.written = None;
        }
        debug_assert!(
            !judged_local || !(holds_remote(cx.cur.as_ref()) || holds_remote(cx.saved.as_ref())),
            "a COMPOUND judged not to reach a remote export reached one at {}",
            op.opnum()
        );
        if cx.blocked && tried_here {
            // The tried WRITE or COMMIT would sleep: it changed nothing, nor did the
            // operations before it (`worker_try`).
            return Outcome::Blocked(ticket);
        }
        status = w.push(r);
        if !status.is_ok() {
            break;
        }
    }
    // Only a READ that succeeded and ended the COMPOUND leaves one.
    if let Some(read) = cx.tail_read.take().filter(|_| status.is_ok()) {
        let room = w.room.map(|(room, _)| room.saturating_sub(w.len() + 3));
        let kept = ticket.as_ref().is_some_and(|(_, cachethis)| *cachethis);
        match finish_read(s, ctx, w.e, &read, room, kept) {
            Ok(()) => {}
            Err(vfs::FsError::WouldBlock) if tried_here => return Outcome::Blocked(ticket),
            Err(err) => {
                // The read failed after all: the READ's result and the COMPOUND's status
                // say so, and nothing ran after it.
                let failed = status_of(err);
                w.fail_last(ResOp::Read(Res4::Err(failed)));
                status = failed;
            }
        }
    }
    if status.is_ok() {
        if let Some(Stopped::BadXdr {
            opnum,
            error,
            index,
        }) = &args.stopped
        {
            tracing::debug!(peer = %ctx.peer, index, opnum, %error, "COMPOUND operation does not decode");
            status = w.push(ResOp::failed(*opnum, Nfsstat4::Badxdr));
        }
    }
    w.finish(status, ticket)
}

/// Whether `fh` is a file of a remote export (for [`execute`]'s check of
/// [`super::reach`]'s judgement).
fn holds_remote(fh: Option<&Fh>) -> bool {
    matches!(fh, Some(Fh::File { export, .. }) if export.backend().remote())
}

/// The error result of `op`, of the right result type for it.
pub fn refuse(op: &ArgOp, status: Nfsstat4) -> ResOp {
    let op = match op {
        ArgOp::Illegal(_) => opnum::ILLEGAL,
        op => op.opnum(),
    };
    ResOp::failed(op, status)
}

/// What SEQUENCE checks against the session's channel sizes.
struct Sizes {
    /// Operations in the COMPOUND, SEQUENCE included.
    ops: usize,
    /// The whole call, RPC header included.
    request: usize,
    /// The reply body before SEQUENCE's result (status, tag, result count).
    reply_head: usize,
}

/// SEQUENCE's checks in RFC 8881's order (section 18.46.3): the session, the COMPOUND's
/// length and size, and a reply that could not even hold SEQUENCE's result, all before
/// the slot, whose state a failed SEQUENCE leaves as it was.
fn sequence(
    cx: &mut Cx<'_>,
    sa: &nfs4::ops::SequenceArgs,
    sizes: &Sizes,
) -> Result<Admission, Nfsstat4> {
    let session = cx.s.state.session(&sa.sa_sessionid)?;
    if sizes.ops > session.fore.ca_maxoperations as usize {
        return Err(Nfsstat4::TooManyOps);
    }
    if sizes.request > session.fore.ca_maxrequestsize as usize {
        return Err(Nfsstat4::ReqTooBig);
    }
    let (room, too_big) = room(&session.fore, sa.sa_cachethis);
    if sizes.reply_head + SEQUENCE_RESULT_BYTES > room {
        return Err(too_big);
    }
    cx.s.state.admit(&session, sa, cx.now)
}

fn sequence_ok(session: &Session, sa: &nfs4::ops::SequenceArgs, flags: u32) -> SequenceOk {
    SequenceOk {
        sr_sessionid: sa.sa_sessionid,
        sr_sequenceid: sa.sa_sequenceid,
        sr_slotid: sa.sa_slotid,
        sr_highest_slotid: session.highest_slot(),
        sr_target_highest_slotid: session.highest_slot(),
        sr_status_flags: flags,
    }
}

/// The Tag4 type is re-exported for tests building COMPOUNDs.
pub type Tag = Tag4;
