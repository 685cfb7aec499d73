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

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nfs4::compound::Stopped;
use nfs4::ops::{opnum, ArgOp, StableHow4};
use nfs4::results::{Res4, SequenceOk};
use nfs4::types::{Stateid4, Tag4};
use nfs4::{Compound4Args, Compound4Res, Nfsstat4, ResOp};
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
    Fresh {
        res: Compound4Res,
        ticket: Option<(Ticket, bool)>,
        tail: Option<TailRead>,
    },
    Replay(Bytes),
}

/// The COMPOUND row's body: decode, run, encode (and keep the reply in its slot).
pub fn run(
    s: &Nfs4State,
    ctx: &CallContext,
    d: &mut Decoder,
    e: &mut Encoder,
) -> Result<(), ProcError> {
    let args = Compound4Args::decode(d)?;
    let defer = s.remote || args.ops.iter().any(may_block);
    // CREATE_SESSION writes and syncs a client record in the state directory.
    let record = s.records.is_some()
        && args
            .ops
            .iter()
            .any(|op| matches!(op, ArgOp::CreateSession(_)));
    if !sync::blocking::allowed() && ((s.may_block && defer) || record) {
        // Before any operation ran (SEQUENCE's slot included): the whole COMPOUND runs
        // again on the worker's blocking pool.
        return Err(ProcError::WouldBlock);
    }
    // A COMPOUND cannot give up half way (its first operations may have changed state),
    // so its calls run where it runs: a rare call that blocks and is not in `may_block`
    // (an OPEN that truncates) blocks the event loop, as every call did before the pool.
    sync::blocking::permitted(|| match execute(s, ctx, args) {
        Outcome::Replay(bytes) => e.fixed_opaque(&bytes),
        Outcome::Fresh { res, ticket, tail } => answer(s, ctx, e, res, ticket, tail),
    });
    Ok(())
}

/// Encodes a COMPOUND's results, reads a final READ's bytes into them, and keeps the
/// reply in the session's slot when the client asked for that.
fn answer(
    s: &Nfs4State,
    ctx: &CallContext,
    e: &mut Encoder,
    mut res: Compound4Res,
    ticket: Option<(Ticket, bool)>,
    tail: Option<TailRead>,
) {
    // The size of a reply the slot keeps (`sa_cachethis`); without it none is kept.
    let keep_limit = ticket
        .as_ref()
        .filter(|(_, cachethis)| *cachethis)
        .map(|(t, _)| t.session().fore.ca_maxresponsesize_cached as usize);
    let start = e.len();
    res.encode(e);
    if let Some(read) = tail {
        let kept = keep_limit.map(|limit| (start, limit));
        if let Err(status) = finish_read(s, ctx, e, &read, kept) {
            // The read failed after all: the READ's result and the COMPOUND's status say
            // so, and nothing ran after it.
            e.truncate(start);
            res.status = status;
            if let Some(last) = res.results.last_mut() {
                *last = ResOp::Read(Res4::Err(status));
            }
            res.encode(e);
        }
    }
    s.ops.record(&res.results);
    if let Some((ticket, _)) = ticket {
        let reply = e.written_since(start);
        let keep = keep_limit.is_some_and(|limit| reply.len() <= limit);
        ticket.finish(keep.then(|| Bytes::copy_from_slice(reply)));
    }
}

/// Completes the final READ's result (encoded as `eof = false` and an empty opaque, so
/// its last 8 bytes) with the file's bytes: read straight into the reply, one copy as
/// NFSv3's READ, or for a large READ from a backend that can hand over the file, for a
/// peer `--sendfile` allows, left in the file for the connection to send with
/// `sendfile`, unless the slot would keep the reply for a retransmission (`kept`: where
/// the reply started and the size the slot keeps): it keeps bytes, not files.
fn finish_read(
    s: &Nfs4State,
    ctx: &CallContext,
    e: &mut Encoder,
    read: &TailRead,
    kept: Option<(usize, usize)>,
) -> Result<(), Nfsstat4> {
    let eof_at = e.len() - 8;
    let TailRead {
        export,
        id,
        cred,
        offset,
        count,
    } = read;
    if *count >= ZERO_COPY_READ_MIN_BYTES && s.core.sendfile.applies_to(ctx.peer.ip()) {
        let slice = export
            .read_slice(cred, *id, *offset, *count)
            .map_err(status_of)?;
        let fits_slot = |len: u32| {
            kept.is_some_and(|(start, limit)| e.len() - start + len as usize + 3 <= limit)
        };
        if let Some(slice) = slice.filter(|sl| !fits_slot(sl.len)) {
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
    e.truncate(eof_at + 4);
    let (_, done) = e
        .opaque_with(|out| export.read_into(cred, *id, *offset, *count, out))
        .map_err(status_of)?;
    e.patch_u32(eof_at, u32::from(done.eof));
    Ok(())
}

/// Operations whose backend call may sleep on the disk: a COMPOUND holding one runs on the
/// blocking pool (READ: a page-cache miss, or an EROFS decode; SETATTR: a size change;
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

fn execute(s: &Nfs4State, ctx: &CallContext, args: Compound4Args) -> Outcome {
    let tag = args.tag.clone();
    let done = |status, results| Outcome::Fresh {
        res: Compound4Res {
            status,
            tag: tag.clone(),
            results,
        },
        ticket: None,
        tail: None,
    };
    if !(1..=2).contains(&args.minorversion) {
        return done(Nfsstat4::MinorVersMismatch, Vec::new());
    }
    if let Some(Stopped::TooMany(_)) = args.stopped {
        return done(Nfsstat4::Resource, Vec::new());
    }
    let Some(first) = args.ops.first() else {
        // Nothing decoded: an empty COMPOUND, or its first operation was unreadable.
        return match &args.stopped {
            Some(Stopped::BadXdr { opnum, .. }) => done(
                Nfsstat4::Badxdr,
                vec![ResOp::failed(*opnum, Nfsstat4::Badxdr)],
            ),
            _ => done(Nfsstat4::Ok, Vec::new()),
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
    };
    let mut results = Vec::with_capacity(args.ops.len());
    let mut ticket = None;
    let mut rest = &args.ops[..];
    match first {
        ArgOp::Sequence(sa) => {
            let r = sequence(&mut cx, sa, args.ops.len());
            match r {
                Ok(Admission::Replay(bytes)) => return Outcome::Replay(bytes),
                Ok(Admission::Run(t)) => {
                    let session = Arc::clone(t.session());
                    let flags = s.callbacks.status_flags(session.client, &session.id);
                    let ok = sequence_ok(&session, sa, flags);
                    results.push(ResOp::Sequence(Res4::Ok(ok)));
                    cx.session = Some(session);
                    ticket = Some((t, sa.sa_cachethis));
                    rest = &args.ops[1..];
                }
                Err(status) => {
                    results.push(ResOp::Sequence(Res4::Err(status)));
                    return done(status, results);
                }
            }
        }
        op if sessionless(op) && args.ops.len() > 1 => {
            results.push(ResOp::failed(op.opnum(), Nfsstat4::NotOnlyOp));
            return done(Nfsstat4::NotOnlyOp, results);
        }
        op if !sessionless(op) && !matches!(op, ArgOp::NotSupported(_) | ArgOp::Illegal(_)) => {
            results.push(refuse(op, Nfsstat4::OpNotInSession));
            return done(Nfsstat4::OpNotInSession, results);
        }
        _ => {}
    }
    let mut status = Nfsstat4::Ok;
    for (i, op) in rest.iter().enumerate() {
        cx.last_op = i + 1 == rest.len() && args.stopped.is_none();
        let r = super::ops_session::dispatch(&mut cx, op);
        status = r.status();
        results.push(r);
        if !status.is_ok() {
            break;
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
            results.push(ResOp::failed(*opnum, Nfsstat4::Badxdr));
            status = Nfsstat4::Badxdr;
        }
    }
    Outcome::Fresh {
        res: Compound4Res {
            status,
            tag,
            results,
        },
        ticket,
        // Only a READ that succeeded and ended the COMPOUND leaves one.
        tail: cx.tail_read.take().filter(|_| status.is_ok()),
    }
}

/// The error result of `op`, of the right result type for it.
pub fn refuse(op: &ArgOp, status: Nfsstat4) -> ResOp {
    let op = match op {
        ArgOp::Illegal(_) => opnum::ILLEGAL,
        op => op.opnum(),
    };
    ResOp::failed(op, status)
}

fn sequence(
    cx: &mut Cx<'_>,
    sa: &nfs4::ops::SequenceArgs,
    ops: usize,
) -> Result<Admission, Nfsstat4> {
    let session = cx.s.state.session(&sa.sa_sessionid)?;
    if ops > session.fore.ca_maxoperations as usize {
        return Err(Nfsstat4::TooManyOps);
    }
    let (_, admission) = cx.s.state.sequence(sa, cx.now)?;
    Ok(admission)
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
