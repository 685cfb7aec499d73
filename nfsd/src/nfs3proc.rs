//! The NFSv3 procedures (RFC 1813 section 3.3), one handler per procedure and one table.
//!
//! Every handler reads the same way: resolve the handle(s) (which checks the MAC, the
//! export, the client's address and squashes the credential), take pre-operation
//! attributes where the reply carries weak cache consistency data, call the export, and
//! encode. Permission and name checks live in `vfs::Export`, not here.

use nfs3::limits::{NFS_PROGRAM, NFS_V3};
use nfs3::nfs::*;
use rpc::{procedure, CacheClass, CallContext, ProcError, Procedure};
use vfs::{AccessMask, CreateMode, FileId, Name, SpecialFile};
use xdr::{Decode, Decoder, Encode, Encoder};

use crate::convert::{
    device, fattr, post_op, pre_op, set_attr, stability, stable_how, status_of, timestamp, wcc,
};
use crate::limits;
use crate::readdir::{collect, Budget};
use crate::state::{NfsState, Target};

use CacheClass::{Idempotent, NonIdempotent};

/// Reply bound for procedures whose results are a few attributes and handles.
const SMALL: usize = 512;

/// The NFSv3 procedure table, indexed by procedure number.
pub static PROCEDURES: [Procedure<NfsState>; 22] = [
    procedure!("null", null, SMALL, Idempotent),
    procedure!("getattr", getattr, SMALL, Idempotent),
    procedure!("setattr", setattr, SMALL, NonIdempotent),
    procedure!("lookup", lookup, SMALL, Idempotent),
    procedure!("access", access, SMALL, Idempotent),
    procedure!("readlink", readlink, SMALL + 4096, Idempotent),
    Procedure {
        name: "read",
        run: read,
        max_reply_bytes: SMALL + limits::MAX_IO_BYTES as usize,
        cache: Idempotent,
    },
    procedure!("write", write, SMALL, NonIdempotent),
    procedure!("create", create, SMALL, NonIdempotent),
    procedure!("mkdir", mkdir, SMALL, NonIdempotent),
    procedure!("symlink", symlink, SMALL, NonIdempotent),
    procedure!("mknod", mknod, SMALL, NonIdempotent),
    procedure!("remove", remove, SMALL, NonIdempotent),
    procedure!("rmdir", rmdir, SMALL, NonIdempotent),
    procedure!("rename", rename, SMALL, NonIdempotent),
    procedure!("link", link, SMALL, NonIdempotent),
    procedure!(
        "readdir",
        readdir,
        limits::READDIR_REPLY_CAPACITY,
        Idempotent
    ),
    procedure!(
        "readdirplus",
        readdirplus,
        limits::READDIR_REPLY_CAPACITY,
        Idempotent
    ),
    procedure!("fsstat", fsstat, SMALL, Idempotent),
    procedure!("fsinfo", fsinfo, SMALL, Idempotent),
    procedure!("pathconf", pathconf, SMALL, Idempotent),
    procedure!("commit", commit, SMALL, Idempotent),
];

pub const PROGRAM: u32 = NFS_PROGRAM;
pub const VERSION: u32 = NFS_V3;

fn null(_: &NfsState, _: &CallContext, _: Void) -> Void {
    Void
}

fn getattr(s: &NfsState, ctx: &CallContext, a: GetattrArgs) -> GetattrRes {
    let t = match s.resolve(ctx, &a.object) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, Void),
    };
    match t.export.getattr(t.id) {
        Ok(attr) => Res3::Ok(GetattrOk {
            obj_attributes: fattr(&attr),
        }),
        Err(e) => Res3::Fail(status_of(e), Void),
    }
}

fn setattr(s: &NfsState, ctx: &CallContext, a: SetattrArgs) -> SetattrRes {
    let t = match s.resolve(ctx, &a.object) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, SetattrFail::default()),
    };
    let before = pre_op(t.export, t.id);
    let guard = a.guard.0.map(timestamp);
    match t
        .export
        .setattr(&t.cred, t.id, &set_attr(&a.new_attributes), guard)
    {
        Ok(_) => Res3::Ok(SetattrOk {
            obj_wcc: wcc(t.export, t.id, before),
        }),
        Err(e) => Res3::Fail(
            status_of(e),
            SetattrFail {
                obj_wcc: wcc(t.export, t.id, before),
            },
        ),
    }
}

fn lookup(s: &NfsState, ctx: &CallContext, a: LookupArgs) -> LookupRes {
    let dir = match s.resolve(ctx, &a.what.dir) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, LookupFail::default()),
    };
    let found = dir.export.lookup(&dir.cred, dir.id, a.what.name.as_bytes());
    let attr = found.and_then(|id| dir.export.getattr(id));
    let dir_attributes = post_op(dir.export, dir.id);
    match attr {
        Ok(attr) => Res3::Ok(LookupOk {
            object: s.handle(dir.export, &attr),
            obj_attributes: PostOpAttr(Some(fattr(&attr))),
            dir_attributes,
        }),
        Err(e) => Res3::Fail(status_of(e), LookupFail { dir_attributes }),
    }
}

fn access(s: &NfsState, ctx: &CallContext, a: AccessArgs) -> AccessRes {
    let t = match s.resolve(ctx, &a.object) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, AccessFail::default()),
    };
    match t.export.access(&t.cred, t.id, AccessMask(a.access)) {
        Ok((granted, attr)) => Res3::Ok(AccessOk {
            obj_attributes: PostOpAttr(Some(fattr(&attr))),
            access: granted.0,
        }),
        Err(e) => Res3::Fail(status_of(e), AccessFail::default()),
    }
}

fn readlink(s: &NfsState, ctx: &CallContext, a: ReadlinkArgs) -> ReadlinkRes {
    let t = match s.resolve(ctx, &a.symlink) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, ReadlinkFail::default()),
    };
    let symlink_attributes = post_op(t.export, t.id);
    match t.export.readlink(t.id) {
        Ok(target) => Res3::Ok(ReadlinkOk {
            symlink_attributes,
            data: NfsPath3(target),
        }),
        Err(e) => Res3::Fail(status_of(e), ReadlinkFail { symlink_attributes }),
    }
}

/// `post_op_attr` with attributes: the flag and a `fattr3`.
const POST_OP_ATTR_BYTES: usize = 4 + 84;

/// READ encodes its own reply so that the file's bytes go from the backend straight into
/// the reply buffer (one copy; through a `ReadOk` they were copied twice). The
/// attributes are the ones the permission check took just before the read: their slot
/// is reserved and filled once the read is done.
fn read(
    s: &NfsState,
    ctx: &CallContext,
    d: &mut Decoder,
    e: &mut Encoder,
) -> Result<(), ProcError> {
    let a = ReadArgs::decode(d)?;
    let t = match s.resolve(ctx, &a.file) {
        Ok(t) => t,
        Err(st) => {
            ReadRes::Fail(st, ReadFail::default()).encode(e);
            return Ok(());
        }
    };
    let count = a.count.min(limits::MAX_IO_BYTES);
    let start = e.len();
    Nfsstat3::Ok.encode(e);
    let attrs_at = e.len();
    e.fixed_opaque(&[0; POST_OP_ATTR_BYTES]);
    let count_at = e.len();
    e.u32(0);
    e.bool(false);
    match e.opaque_with(|out| t.export.read_into(&t.cred, t.id, a.offset, count, out)) {
        Ok((len, (attr, eof))) => {
            let attrs = PostOpAttr(Some(fattr(&attr))).to_xdr();
            debug_assert_eq!(attrs.len(), POST_OP_ATTR_BYTES);
            e.patch(attrs_at, &attrs);
            e.patch_u32(count_at, u32::try_from(len).unwrap_or(u32::MAX));
            e.patch_u32(count_at + 4, u32::from(eof));
        }
        Err(err) => {
            e.truncate(start);
            let file_attributes = post_op(t.export, t.id);
            ReadRes::Fail(status_of(err), ReadFail { file_attributes }).encode(e);
        }
    }
    Ok(())
}

fn write(s: &NfsState, ctx: &CallContext, a: WriteArgs) -> WriteRes {
    let t = match s.resolve(ctx, &a.file) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, WriteFail::default()),
    };
    let before = pre_op(t.export, t.id);
    // The count must describe the data that came with it (Linux nfsd refuses a mismatch).
    if a.data.len() != a.count as usize {
        return Res3::Fail(
            Nfsstat3::Inval,
            WriteFail {
                file_wcc: wcc(t.export, t.id, before),
            },
        );
    }
    match t
        .export
        .write(&t.cred, t.id, a.offset, &a.data, stability(a.stable))
    {
        Ok(w) => Res3::Ok(WriteOk {
            file_wcc: wcc(t.export, t.id, before),
            count: w.count,
            committed: stable_how(w.committed),
            verf: s.write_verifier,
        }),
        Err(e) => Res3::Fail(
            status_of(e),
            WriteFail {
                file_wcc: wcc(t.export, t.id, before),
            },
        ),
    }
}

/// The reply shared by CREATE, MKDIR, SYMLINK and MKNOD.
fn created(
    s: &NfsState,
    dir: &Target<'_>,
    before: PreOpAttr,
    made: vfs::FsResult<FileId>,
) -> CreateRes {
    let attr = made.and_then(|id| dir.export.getattr(id));
    let dir_wcc = wcc(dir.export, dir.id, before);
    match attr {
        Ok(attr) => Res3::Ok(CreateOk {
            obj: PostOpFh3(Some(s.handle(dir.export, &attr))),
            obj_attributes: PostOpAttr(Some(fattr(&attr))),
            dir_wcc,
        }),
        Err(e) => Res3::Fail(status_of(e), CreateFail { dir_wcc }),
    }
}

/// Resolves the directory of a create-like call and validates the new name.
fn create_target<'s>(
    s: &'s NfsState,
    ctx: &CallContext,
    where_: &DirOpArgs3,
) -> Result<(Target<'s>, PreOpAttr, vfs::FsResult<Name>), Nfsstat3> {
    let dir = s.resolve(ctx, &where_.dir)?;
    let before = pre_op(dir.export, dir.id);
    let name = Name::new(where_.name.0.clone());
    Ok((dir, before, name))
}

fn create(s: &NfsState, ctx: &CallContext, a: CreateArgs) -> CreateRes {
    let (dir, before, name) = match create_target(s, ctx, &a.where_) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, CreateFail::default()),
    };
    let mode = match a.how {
        CreateHow3::Unchecked(attrs) => CreateMode::Unchecked(set_attr(&attrs)),
        CreateHow3::Guarded(attrs) => CreateMode::Guarded(set_attr(&attrs)),
        CreateHow3::Exclusive(verf) => CreateMode::Exclusive(verf),
    };
    let made = name.and_then(|n| dir.export.create(&dir.cred, dir.id, &n, &mode));
    created(s, &dir, before, made)
}

fn mkdir(s: &NfsState, ctx: &CallContext, a: MkdirArgs) -> MkdirRes {
    let (dir, before, name) = match create_target(s, ctx, &a.where_) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, CreateFail::default()),
    };
    let attrs = set_attr(&a.attributes);
    let made = name.and_then(|n| dir.export.mkdir(&dir.cred, dir.id, &n, &attrs));
    created(s, &dir, before, made)
}

fn symlink(s: &NfsState, ctx: &CallContext, a: SymlinkArgs) -> SymlinkRes {
    let (dir, before, name) = match create_target(s, ctx, &a.where_) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, CreateFail::default()),
    };
    let attrs = set_attr(&a.symlink.symlink_attributes);
    let target = a.symlink.symlink_data.as_bytes();
    let made = name.and_then(|n| dir.export.symlink(&dir.cred, dir.id, &n, target, &attrs));
    created(s, &dir, before, made)
}

fn mknod(s: &NfsState, ctx: &CallContext, a: MknodArgs) -> MknodRes {
    let (dir, before, name) = match create_target(s, ctx, &a.where_) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, CreateFail::default()),
    };
    let (kind, attrs) = match a.what {
        MknodData3::Chr(d) => (SpecialFile::CharDevice(device(d.spec)), d.dev_attributes),
        MknodData3::Blk(d) => (SpecialFile::BlockDevice(device(d.spec)), d.dev_attributes),
        MknodData3::Sock(attrs) => (SpecialFile::Socket, attrs),
        MknodData3::Fifo(attrs) => (SpecialFile::Fifo, attrs),
        MknodData3::Reg | MknodData3::Dir | MknodData3::Lnk => {
            let dir_wcc = wcc(dir.export, dir.id, before);
            return Res3::Fail(Nfsstat3::BadType, CreateFail { dir_wcc });
        }
    };
    let attrs = set_attr(&attrs);
    let made = name.and_then(|n| dir.export.mknod(&dir.cred, dir.id, &n, kind, &attrs));
    created(s, &dir, before, made)
}

fn remove(s: &NfsState, ctx: &CallContext, a: RemoveArgs) -> RemoveRes {
    unlink(s, ctx, &a.object, false)
}

fn rmdir(s: &NfsState, ctx: &CallContext, a: RmdirArgs) -> RmdirRes {
    unlink(s, ctx, &a.object, true)
}

fn unlink(s: &NfsState, ctx: &CallContext, what: &DirOpArgs3, is_dir: bool) -> RemoveRes {
    let dir = match s.resolve(ctx, &what.dir) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, RemoveFail::default()),
    };
    let before = pre_op(dir.export, dir.id);
    let done = Name::new(what.name.0.clone()).and_then(|n| {
        if is_dir {
            dir.export.rmdir(&dir.cred, dir.id, &n)
        } else {
            dir.export.remove(&dir.cred, dir.id, &n)
        }
    });
    let dir_wcc = wcc(dir.export, dir.id, before);
    match done {
        Ok(()) => Res3::Ok(RemoveOk { dir_wcc }),
        Err(e) => Res3::Fail(status_of(e), RemoveFail { dir_wcc }),
    }
}

fn rename(s: &NfsState, ctx: &CallContext, a: RenameArgs) -> RenameRes {
    let (from, to) = match (s.resolve(ctx, &a.from.dir), s.resolve(ctx, &a.to.dir)) {
        (Ok(f), Ok(t)) => (f, t),
        (Err(st), _) | (_, Err(st)) => return Res3::Fail(st, RenameFail::default()),
    };
    let (from_before, to_before) = (pre_op(from.export, from.id), pre_op(to.export, to.id));
    let done = if from.export.id == to.export.id {
        Name::new(a.from.name.0.clone()).and_then(|f| {
            let t = Name::new(a.to.name.0.clone())?;
            from.export.rename(&from.cred, from.id, &f, to.id, &t)
        })
    } else {
        Err(vfs::FsError::XDev)
    };
    let fromdir_wcc = wcc(from.export, from.id, from_before);
    let todir_wcc = wcc(to.export, to.id, to_before);
    match done {
        Ok(()) => Res3::Ok(RenameOk {
            fromdir_wcc,
            todir_wcc,
        }),
        Err(e) => Res3::Fail(
            status_of(e),
            RenameFail {
                fromdir_wcc,
                todir_wcc,
            },
        ),
    }
}

fn link(s: &NfsState, ctx: &CallContext, a: LinkArgs) -> LinkRes {
    let (file, dir) = match (s.resolve(ctx, &a.file), s.resolve(ctx, &a.link.dir)) {
        (Ok(f), Ok(d)) => (f, d),
        (Err(st), _) | (_, Err(st)) => return Res3::Fail(st, LinkFail::default()),
    };
    let before = pre_op(dir.export, dir.id);
    let done = if file.export.id == dir.export.id {
        Name::new(a.link.name.0.clone())
            .and_then(|n| dir.export.link(&dir.cred, file.id, dir.id, &n))
    } else {
        Err(vfs::FsError::XDev)
    };
    let file_attributes = post_op(file.export, file.id);
    let linkdir_wcc = wcc(dir.export, dir.id, before);
    match done {
        Ok(()) => Res3::Ok(LinkOk {
            file_attributes,
            linkdir_wcc,
        }),
        Err(e) => Res3::Fail(
            status_of(e),
            LinkFail {
                file_attributes,
                linkdir_wcc,
            },
        ),
    }
}

fn readdir(s: &NfsState, ctx: &CallContext, a: ReaddirArgs) -> ReaddirRes {
    let dir = match s.resolve(ctx, &a.dir) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, ReaddirFail::default()),
    };
    let budget = a.count.min(limits::MAX_READDIR_BYTES) as usize;
    let budget = Budget {
        reply_bytes: budget.saturating_sub(READDIR3_RESOK_FIXED_SIZE),
        dir_bytes: usize::MAX,
    };
    let listing = collect(
        &dir,
        a.cookie,
        a.cookieverf,
        |e, _| Some((entry3_size(e.name.len()), ())),
        budget,
    );
    let dir_attributes = post_op(dir.export, dir.id);
    match listing {
        Ok(l) => Res3::Ok(ReaddirOk {
            dir_attributes,
            cookieverf: l.verifier,
            entries: l
                .entries
                .into_iter()
                .map(|(e, ())| Entry3 {
                    fileid: e.fileid.0,
                    name: Filename3(e.name),
                    cookie: e.cookie.0,
                })
                .collect(),
            eof: l.eof,
        }),
        Err(e) => Res3::Fail(status_of(e), ReaddirFail { dir_attributes }),
    }
}

fn readdirplus(s: &NfsState, ctx: &CallContext, a: ReaddirplusArgs) -> ReaddirplusRes {
    let dir = match s.resolve(ctx, &a.dir) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, ReaddirplusFail::default()),
    };
    let maxcount = a.maxcount.min(limits::MAX_READDIR_BYTES) as usize;
    let budget = Budget {
        reply_bytes: maxcount.saturating_sub(READDIRPLUS3_RESOK_FIXED_SIZE),
        dir_bytes: a.dircount as usize,
    };
    let listing = collect(
        &dir,
        a.cookie,
        a.cookieverf,
        |entry, export| {
            // An entry removed since the listing was read is skipped, not an error.
            let attr = export.getattr(entry.fileid).ok()?;
            let handle = s.handle(export, &attr);
            let size = entryplus3_size(entry.name.len(), true, Some(handle.0.len()));
            Some((size, (attr, handle)))
        },
        budget,
    );
    let dir_attributes = post_op(dir.export, dir.id);
    match listing {
        Ok(l) => Res3::Ok(ReaddirplusOk {
            dir_attributes,
            cookieverf: l.verifier,
            entries: l
                .entries
                .into_iter()
                .map(|(e, (attr, handle))| Entryplus3 {
                    fileid: e.fileid.0,
                    name: Filename3(e.name),
                    cookie: e.cookie.0,
                    name_attributes: PostOpAttr(Some(fattr(&attr))),
                    name_handle: PostOpFh3(Some(handle)),
                })
                .collect(),
            eof: l.eof,
        }),
        Err(e) => Res3::Fail(status_of(e), ReaddirplusFail { dir_attributes }),
    }
}

fn fsstat(s: &NfsState, ctx: &CallContext, a: FsstatArgs) -> FsstatRes {
    let t = match s.resolve(ctx, &a.fsroot) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, FsstatFail::default()),
    };
    let obj_attributes = post_op(t.export, t.id);
    match t.export.fsstat() {
        Ok(st) => Res3::Ok(FsstatOk {
            obj_attributes,
            tbytes: st.total_bytes,
            fbytes: st.free_bytes,
            abytes: st.avail_bytes,
            tfiles: st.total_files,
            ffiles: st.free_files,
            afiles: st.avail_files,
            invarsec: limits::FSSTAT_INVARSEC,
        }),
        Err(e) => Res3::Fail(status_of(e), FsstatFail { obj_attributes }),
    }
}

fn fsinfo(s: &NfsState, ctx: &CallContext, a: FsinfoArgs) -> FsinfoRes {
    let t = match s.resolve(ctx, &a.fsroot) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, FsinfoFail::default()),
    };
    let props = t.export.properties();
    let mut properties = FSF3_HOMOGENEOUS | FSF3_CANSETTIME;
    if props.supports_hard_links {
        properties |= FSF3_LINK;
    }
    if props.supports_symlinks {
        properties |= FSF3_SYMLINK;
    }
    Res3::Ok(FsinfoOk {
        obj_attributes: post_op(t.export, t.id),
        rtmax: limits::MAX_IO_BYTES,
        rtpref: limits::PREF_IO_BYTES,
        rtmult: limits::IO_MULTIPLE_BYTES,
        wtmax: limits::MAX_IO_BYTES,
        wtpref: limits::PREF_IO_BYTES,
        wtmult: limits::IO_MULTIPLE_BYTES,
        dtpref: limits::PREF_READDIR_BYTES,
        maxfilesize: props.max_file_size,
        time_delta: Nfstime3 {
            seconds: 0,
            nseconds: props.time_granularity_ns,
        },
        properties,
    })
}

fn pathconf(s: &NfsState, ctx: &CallContext, a: PathconfArgs) -> PathconfRes {
    let t = match s.resolve(ctx, &a.object) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, PathconfFail::default()),
    };
    let props = t.export.properties();
    Res3::Ok(PathconfOk {
        obj_attributes: post_op(t.export, t.id),
        linkmax: props.max_links,
        name_max: props.max_name_bytes,
        no_trunc: true,
        chown_restricted: true,
        case_insensitive: props.case_insensitive,
        case_preserving: props.case_preserving,
    })
}

fn commit(s: &NfsState, ctx: &CallContext, a: CommitArgs) -> CommitRes {
    let t = match s.resolve(ctx, &a.file) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, CommitFail::default()),
    };
    let before = pre_op(t.export, t.id);
    // A range past 2^64 - 1 is invalid (Linux nfsd: NFS3ERR_INVAL), not "commit to EOF".
    let commit = if a.offset.checked_add(u64::from(a.count)).is_none() {
        Err(vfs::FsError::Inval)
    } else {
        t.export.commit(t.id, a.offset, a.count)
    };
    match commit {
        Ok(()) => Res3::Ok(CommitOk {
            file_wcc: wcc(t.export, t.id, before),
            verf: s.write_verifier,
        }),
        Err(e) => Res3::Fail(
            status_of(e),
            CommitFail {
                file_wcc: wcc(t.export, t.id, before),
            },
        ),
    }
}
