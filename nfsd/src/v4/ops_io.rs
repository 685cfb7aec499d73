//! Opens and I/O (RFC 8881 sections 18.2, 18.3, 18.16, 18.18, 18.22, 18.32): OPEN,
//! CLOSE, OPEN_DOWNGRADE, READ, WRITE and COMMIT, with the stateid checks of `state4`
//! (CLOSE and OPEN_DOWNGRADE only of an open of the current file).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use nfs4::ops::{
    open_result, share, CloseArgs, CommitArgs, Createhow4, OpenArgs, OpenClaim4, OpenDowngradeArgs,
    Openflag4, ReadArgs, StableHow4, WriteArgs,
};
use nfs4::results::{why_no_delegation, OpenDelegation4, OpenOk, ReadOk, WriteOk};
use nfs4::types::{Bitmap4, ChangeInfo4, Verifier4};
use nfs4::{Nfsstat4, Stateid4};
use state4::{ClientId, IoStateid, LockKey, OpenRequest};
use vfs::{AccessMask, Attr, CreateMode, Cred, Export, FileId, FileType, SetAttr, Stability};

use super::compound::{Cx, Fh};
use super::convert::{change_of, status_of};
use super::ops_attr::setattr_of;
use super::ops_dir::cinfo;
use super::ops_fh::check_name;
use super::FileKey;
use crate::heads::ShareAcross;

/// What an OPEN resolved to before its state is taken.
struct Opened {
    export: Arc<Export>,
    attr: Attr,
    cinfo: ChangeInfo4,
    attrset: Bitmap4,
    /// The caller created the file in this OPEN (it may then write it whatever the mode).
    created: bool,
}

pub fn open(cx: &mut Cx<'_>, a: &OpenArgs) -> Result<OpenOk, Nfsstat4> {
    let client = cx.client()?;
    let access = a.share_access & share::ACCESS_BOTH;
    let want = a.share_access & !share::ACCESS_BOTH;
    if want
        & !(share::WANT_DELEG_MASK
            | share::WANT_SIGNAL_DELEG_WHEN_RESRC_AVAIL
            | share::WANT_PUSH_DELEG_WHEN_UNCONTENDED)
        != 0
    {
        return Err(Nfsstat4::Inval);
    }
    let (opened, reclaim) = match &a.claim {
        OpenClaim4::Null(name) => (open_by_name(cx, a, name)?, false),
        OpenClaim4::Fh => (open_current(cx)?, false),
        OpenClaim4::Previous(_) => (open_current(cx)?, true),
        // granary grants no delegations, so there are none to claim.
        _ => return Err(Nfsstat4::Notsupp),
    };
    check_type(&opened.attr)?;
    let (export, attr) = (&opened.export, &opened.attr);
    if !opened.created {
        check_open_access(cx, export, attr, access)?;
    }
    let req = OpenRequest {
        owner: a.owner.owner.0.clone(),
        file: Cx::key(export, attr.fileid),
        access,
        deny: a.share_deny,
        reclaim,
    };
    // The open holds the file (its data outlives its last name until CLOSE; seed 004's
    // entry stays cached) once per open stateid: an upgrade of an existing one lets go.
    let preserved = export.hold(attr.fileid).map_err(status_of)?;
    // On an object export the other heads' reservations are checked too.
    let state = &cx.s.state;
    let across = crate::heads::share(
        &cx.s.core.exports,
        req.file.lock_key(),
        access,
        req.deny,
        || state.open(client, &req, cx.now),
        |g| match g {
            // Not recorded for the other heads: the client is not told of it.
            Ok(g) if !g.upgraded => drop(state.close(client, &g.stateid)),
            _ => {}
        },
    );
    let granted = match across {
        ShareAcross::Local(g) => g,
        ShareAcross::OtherHead(other) => {
            tracing::debug!(
                head = other.head,
                "NFSv4 OPEN refused by another head's share reservation"
            );
            Err(Nfsstat4::ShareDenied)
        }
        ShareAcross::Engine(e) => Err(status_of(e)),
    };
    for r in cx.s.state.take_courtesy_releases() {
        cx.s.release_opens(&r.closed);
    }
    let granted = match granted {
        Ok(g) => g,
        Err(e) => {
            export.release(attr.fileid);
            return Err(e);
        }
    };
    if granted.upgraded {
        export.release(attr.fileid);
    }
    let mut rflags = open_result::LOCKTYPE_POSIX | super::ops_lock::may_notify_lock(cx);
    if preserved {
        rflags |= open_result::PRESERVE_UNLINKED;
    }
    cx.cur = Some(Fh::file(cx.s, Arc::clone(export), attr));
    cx.cur_sid = Some(granted.stateid);
    // A client that says what it wants is told why it gets no delegation (NONE_EXT, RFC
    // 8881 section 18.16.3): it asked for none, it cancelled its want, or granary grants
    // none.
    let why = match want & share::WANT_DELEG_MASK {
        0 => None,
        share::WANT_NO_DELEG => Some(why_no_delegation::NOT_WANTED),
        share::WANT_CANCEL => Some(why_no_delegation::CANCELLED),
        _ => Some(why_no_delegation::NOT_SUPP_FTYPE),
    };
    let delegation = why.map_or(OpenDelegation4::None, |why| OpenDelegation4::NoneExt {
        why,
        will_signal: None,
    });
    Ok(OpenOk {
        stateid: granted.stateid,
        cinfo: opened.cinfo,
        rflags,
        attrset: opened.attrset,
        delegation,
    })
}

fn check_type(attr: &Attr) -> Result<(), Nfsstat4> {
    match attr.file_type {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(Nfsstat4::Isdir),
        FileType::Symlink => Err(Nfsstat4::Symlink),
        _ => Err(Nfsstat4::WrongType),
    }
}

/// An open of an existing file needs the permission its share access implies.
fn check_open_access(
    cx: &Cx<'_>,
    export: &Export,
    attr: &Attr,
    access: u32,
) -> Result<(), Nfsstat4> {
    let cred = cx.s.core.cred(export, &cx.ctx.auth);
    let mut want = 0;
    if access & share::ACCESS_READ != 0 {
        want |= AccessMask::READ;
    }
    if access & share::ACCESS_WRITE != 0 {
        want |= AccessMask::MODIFY;
    }
    let (granted, _) = export
        .access(&cred, attr.fileid, AccessMask(want))
        .map_err(status_of)?;
    // Reading needs READ, or EXECUTE (a client reads a program it may run).
    let read_ok = want & AccessMask::READ == 0
        || granted.0 & AccessMask::READ != 0
        || executable(export, &cred, attr);
    if !read_ok || granted.0 & AccessMask::MODIFY != want & AccessMask::MODIFY {
        return Err(Nfsstat4::Access);
    }
    Ok(())
}

fn executable(export: &Export, cred: &Cred, attr: &Attr) -> bool {
    export
        .access(cred, attr.fileid, AccessMask(AccessMask::EXECUTE))
        .is_ok_and(|(g, _)| g.0 & AccessMask::EXECUTE != 0)
}

fn open_current(cx: &Cx<'_>) -> Result<Opened, Nfsstat4> {
    let (export, id, _) = cx.file()?;
    let attr = export.getattr(id).map_err(status_of)?;
    let c = change_of(&attr);
    Ok(Opened {
        export,
        attr,
        cinfo: ChangeInfo4 {
            atomic: true,
            before: c,
            after: c,
        },
        attrset: Bitmap4::default(),
        created: false,
    })
}

fn open_by_name(
    cx: &Cx<'_>,
    a: &OpenArgs,
    name: &nfs4::types::Component4,
) -> Result<Opened, Nfsstat4> {
    let (export, dir, cred) = cx.file()?;
    let raw = check_name(name)?;
    let name = vfs::Name::new(Bytes::copy_from_slice(raw)).map_err(status_of)?;
    let Openflag4::Create(how) = &a.openhow else {
        let found = export
            .lookup(&cred, dir, name.as_bytes())
            .map_err(status_of)?;
        let c = change_of(&found.dir);
        return Ok(Opened {
            export,
            attr: found.attr,
            cinfo: ChangeInfo4 {
                atomic: true,
                before: c,
                after: c,
            },
            attrset: Bitmap4::default(),
            created: false,
        });
    };
    let (mode, attrset, extra, owner) = create_mode(&cx.s.core.idmap, how)?;
    let made = export.create(&cred, dir, &name, &mode).map_err(status_of)?;
    let created = made
        .dir
        .before
        .as_ref()
        .is_some_and(|b| b.ctime != made.dir.after.ctime);
    let mut attr = made.attr;
    // An owner asked for in UNCHECKED4/GUARDED4 attributes applies to a file this OPEN
    // made (the backends' create gives new files the caller's ids), as knfsd does.
    let owner = owner.filter(|_| created);
    if let Some(set) = extra.or(owner).filter(|s| !s.is_empty()) {
        attr = export
            .setattr(&cred, attr.fileid, &set, None)
            .map_err(status_of)?
            .after;
    }
    Ok(Opened {
        export,
        attr,
        cinfo: cinfo(&made.dir),
        attrset,
        created,
    })
}

/// The owner and group of `set` as a change of their own (empty when it names neither).
fn owner_only(set: &SetAttr) -> SetAttr {
    SetAttr {
        uid: set.uid,
        gid: set.gid,
        ..SetAttr::default()
    }
}

/// The vfs create mode of an OPEN4_CREATE and what goes with it ([`Created4`]).
fn create_mode(idmap: &crate::idmap::Idmap, how: &Createhow4) -> Result<Created4, Nfsstat4> {
    Ok(match how {
        Createhow4::Unchecked(f) => {
            let (set, mask) = setattr_of(idmap, f)?;
            let owner = owner_only(&set);
            (CreateMode::Unchecked(set), mask, None, Some(owner))
        }
        Createhow4::Guarded(f) => {
            let (set, mask) = setattr_of(idmap, f)?;
            let owner = owner_only(&set);
            (CreateMode::Guarded(set), mask, None, Some(owner))
        }
        Createhow4::Exclusive(verf) => {
            (CreateMode::Exclusive(*verf), Bitmap4::default(), None, None)
        }
        Createhow4::Exclusive41(c) => {
            let (set, mask) = setattr_of(idmap, &c.cva_attrs)?;
            if set.atime != vfs::SetTime::DontChange || set.mtime != vfs::SetTime::DontChange {
                // The verifier lives in the times: the client may not set them here.
                return Err(Nfsstat4::Inval);
            }
            (CreateMode::Exclusive(c.cva_verf), mask, Some(set), None)
        }
    })
}

/// What an OPEN4_CREATE asks for: the vfs create mode, the attributes it sets, the
/// attributes to set after an EXCLUSIVE4_1 create (its verifier takes the place of the
/// times), and the owner to set on a file an UNCHECKED4/GUARDED4 create made.
type Created4 = (CreateMode, Bitmap4, Option<SetAttr>, Option<SetAttr>);

/// The file of open stateid `sid`, which must be the current filehandle's: CLOSE and
/// OPEN_DOWNGRADE act on the current file (RFC 8881 sections 18.2.3 and 18.18.3; knfsd
/// answers `NFS4ERR_BAD_STATEID` for a stateid of another file). So the file whose share
/// state they change is the one the COMPOUND named, as `super::reach` assumes.
fn current_open(cx: &Cx<'_>, client: ClientId, sid: &Stateid4) -> Result<FileKey, Nfsstat4> {
    let cur = match cx.cur()? {
        Fh::File { export, id, .. } => Some(Cx::key(export, *id)),
        Fh::Pseudo(_) => None,
    };
    let file = cx.s.state.open_file(client, sid)?;
    if cur != Some(file) {
        return Err(Nfsstat4::BadStateid);
    }
    Ok(file)
}

pub fn close(cx: &mut Cx<'_>, a: &CloseArgs) -> Result<Stateid4, Nfsstat4> {
    let client = cx.client()?;
    let sid = cx.stateid(&a.open_stateid)?;
    let file = current_open(cx, client, &sid)?;
    let closed = crate::heads::unshare(&cx.s.core.exports, file.lock_key(), || {
        cx.s.state.close(client, &sid)
    })?;
    cx.s.release_opens([&closed]);
    // RFC 8881 section 18.2.4: a 4.1 server answers with the invalid stateid.
    cx.cur_sid = None;
    Ok(Stateid4::INVALID)
}

pub fn open_downgrade(cx: &mut Cx<'_>, a: &OpenDowngradeArgs) -> Result<Stateid4, Nfsstat4> {
    let client = cx.client()?;
    let sid = cx.stateid(&a.open_stateid)?;
    let file = current_open(cx, client, &sid)?;
    let new = crate::heads::unshare(&cx.s.core.exports, file.lock_key(), || {
        cx.s.state.open_downgrade(
            client,
            &sid,
            a.share_access & share::ACCESS_BOTH,
            a.share_deny,
        )
    })?;
    cx.cur_sid = Some(new);
    Ok(new)
}

/// The current file, checked as the target of I/O with stateid `sid`, and what the
/// stateid grants.
fn io_target(
    cx: &Cx<'_>,
    sid: &Stateid4,
    write: bool,
) -> Result<(Arc<Export>, FileId, Arc<Cred>, IoStateid), Nfsstat4> {
    let (export, id, cred) = cx.file()?;
    let client = cx.client()?;
    let sid = cx.stateid(sid)?;
    let io =
        cx.s.state
            .check_io(client, &sid, &Cx::key(&export, id), write)?;
    Ok((export, id, cred, io))
}

/// A READ that is the COMPOUND's last operation: its stateid and file are checked when it
/// runs, and its bytes are read once every result before it is encoded, straight into
/// the reply (or left in the file for `sendfile`), as NFSv3's READ does; see
/// `compound::finish_read`. Any other READ reads into its own buffer.
pub struct TailRead {
    pub export: Arc<Export>,
    pub id: FileId,
    pub cred: Arc<Cred>,
    pub offset: u64,
    pub count: u32,
    /// An open of the caller grants reading: its access was checked at OPEN, and the
    /// read needs no permission check nor attributes (`vfs::Backend::read_opened`).
    pub opened: bool,
}

pub fn read(cx: &mut Cx<'_>, a: &ReadArgs) -> Result<ReadOk, Nfsstat4> {
    let (export, id, cred, io) = io_target(cx, &a.stateid, false)?;
    let count = a.count.min(cx.s.core.max_io_bytes);
    if cx.last_op {
        cx.tail_read = Some(TailRead {
            export,
            id,
            cred,
            offset: a.offset,
            count,
            opened: io.open_reads(),
        });
        // Encoded as eof = false and no data, then completed in place.
        return Ok(ReadOk {
            eof: false,
            data: Bytes::new(),
        });
    }
    let mut buf = BytesMut::with_capacity(count as usize);
    let eof = if io.open_reads() {
        export.read_opened(&cred, id, a.offset, count, &mut buf)
    } else {
        export
            .read_into(&cred, id, a.offset, count, &mut buf)
            .map(|done| done.eof)
    }
    .map_err(status_of)?;
    Ok(ReadOk {
        eof,
        data: buf.freeze(),
    })
}

fn stability(s: StableHow4) -> Stability {
    match s {
        StableHow4::Unstable => Stability::Unstable,
        StableHow4::DataSync => Stability::DataSync,
        StableHow4::FileSync => Stability::FileSync,
    }
}

fn stable_how(s: Stability) -> StableHow4 {
    match s {
        Stability::Unstable => StableHow4::Unstable,
        Stability::DataSync => StableHow4::DataSync,
        Stability::FileSync => StableHow4::FileSync,
    }
}

fn verifier(cx: &Cx<'_>, export: &Export) -> Verifier4 {
    cx.s.core.write_verifier_for(export)
}

/// WRITE. Through an open for writing its access was checked at OPEN, as knfsd writes
/// through the open's `nfsd_file` (`vfs::Opened`); one that also ends its COMPOUND (the
/// Linux client's O_DIRECT WRITE: SEQUENCE, PUTFH, WRITE) asks for no attributes, since
/// no GETATTR follows to use them ([`Cx::written`]): on a host export no `statx` before
/// and after (`vfs::Backend::write_opened`).
pub fn write(cx: &mut Cx<'_>, a: &WriteArgs) -> Result<WriteOk, Nfsstat4> {
    let (export, id, cred, io) = io_target(cx, &a.stateid, true)?;
    if a.data.len() > cx.s.core.max_io_bytes as usize {
        return Err(Nfsstat4::Inval);
    }
    let stable = stability(a.stable);
    let (count, committed, after) = if io.open_writes() {
        export
            .write_opened(&cred, id, a.offset, &a.data, (stable, !cx.last_op))
            .map_err(|e| blocked(cx, e))?
    } else {
        let w = export
            .write_shared(&cred, id, a.offset, &a.data, stable)
            .map_err(|e| blocked(cx, e))?;
        (w.count, w.committed, Some(w.file.after))
    };
    if let Some(after) = after {
        cx.written = Some((export.id.0, id, after));
    }
    Ok(WriteOk {
        count,
        committed: stable_how(committed),
        writeverf: verifier(cx, &export),
    })
}

pub fn commit(cx: &mut Cx<'_>, a: &CommitArgs) -> Result<Verifier4, Nfsstat4> {
    let (export, id, _) = cx.file()?;
    export
        .commit(id, a.offset, a.count)
        .map_err(|e| blocked(cx, e))?;
    Ok(verifier(cx, &export))
}

/// The status of a WRITE's or COMMIT's failure; `WouldBlock` (the call would sleep where
/// it may not: a COMPOUND tried on a network worker, see `compound::worker_try`) also
/// tells the COMPOUND to run again on the blocking pool.
fn blocked(cx: &mut Cx<'_>, e: vfs::FsError) -> Nfsstat4 {
    if e == vfs::FsError::WouldBlock {
        cx.blocked = true;
    }
    status_of(e)
}
