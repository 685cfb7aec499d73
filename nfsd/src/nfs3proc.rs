//! The NFSv3 procedures (RFC 1813 section 3.3), one handler per procedure and one table.
//!
//! Every handler reads the same way: resolve the handle(s) (which checks the MAC, the
//! export, the client's address and squashes the credential, and asks the backend
//! nothing), make one call to the export, and encode what it returned. A change returns
//! its own weak cache consistency data (attributes before and after, taken inside the
//! backend's critical section); a failure replies with attributes after only, read by one
//! more call. Permission and name checks live in `vfs`, not here.

use nfs3::limits::{NFS_PROGRAM, NFS_V3};
use nfs3::nfs::*;
use rpc::{procedure, CacheClass, CallContext, FileSlice, ProcError, Procedure};
use vfs::limits::ZERO_COPY_READ_MIN_BYTES;
use vfs::{AccessMask, CreateMode, Name, ReadSlice, SpecialFile};
use xdr::{Decode, Decoder, Encode, Encoder};

use crate::convert::{
    deferred, device, failed_wcc, fattr, post_op, set_attr, stability, stable_how, status_of,
    timestamp, wcc,
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
    procedure!("setattr", setattr, SMALL, NonIdempotent, may_block),
    procedure!("lookup", lookup, SMALL, Idempotent),
    procedure!("access", access, SMALL, Idempotent),
    procedure!("readlink", readlink, SMALL + 4096, Idempotent),
    // The bound the connection's memory budget charges; the reply buffer itself starts
    // small (rpc's INITIAL_REPLY_BYTES) and READ reserves room for its own `count`.
    Procedure {
        name: "read",
        run: read,
        max_reply_bytes: SMALL + limits::MAX_IO_BYTES as usize,
        cache: Idempotent,
    },
    procedure!("write", write, SMALL, NonIdempotent, may_block),
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
    procedure!("commit", commit, SMALL, Idempotent, may_block),
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

fn setattr(s: &NfsState, ctx: &CallContext, a: SetattrArgs) -> Result<SetattrRes, ProcError> {
    let t = match s.resolve(ctx, &a.object) {
        Ok(t) => t,
        Err(st) => return Ok(Res3::Fail(st, SetattrFail::default())),
    };
    let guard = a.guard.0.map(timestamp);
    let set = set_attr(&a.new_attributes);
    Ok(
        match deferred(t.export.setattr(&t.cred, t.id, &set, guard))? {
            Ok(change) => Res3::Ok(SetattrOk {
                obj_wcc: wcc(&change),
            }),
            Err(e) => Res3::Fail(
                status_of(e),
                SetattrFail {
                    obj_wcc: failed_wcc(&t),
                },
            ),
        },
    )
}

fn lookup(s: &NfsState, ctx: &CallContext, a: LookupArgs) -> LookupRes {
    let dir = match s.resolve(ctx, &a.what.dir) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, LookupFail::default()),
    };
    match dir.export.lookup(&dir.cred, dir.id, a.what.name.as_bytes()) {
        Ok(found) => Res3::Ok(LookupOk {
            object: s.handle(dir.export, &found.attr),
            obj_attributes: PostOpAttr(Some(fattr(&found.attr))),
            dir_attributes: PostOpAttr(Some(fattr(&found.dir))),
        }),
        Err(e) => Res3::Fail(
            status_of(e),
            LookupFail {
                dir_attributes: post_op(&dir),
            },
        ),
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
    match t.export.readlink(t.id) {
        Ok((target, attr)) => Res3::Ok(ReadlinkOk {
            symlink_attributes: PostOpAttr(Some(fattr(&attr))),
            data: NfsPath3(target),
        }),
        Err(e) => Res3::Fail(
            status_of(e),
            ReadlinkFail {
                symlink_attributes: post_op(&t),
            },
        ),
    }
}

/// `post_op_attr` with attributes: the flag and a `fattr3`.
const POST_OP_ATTR_BYTES: usize = 4 + 84;

/// READ's reply before the data: status, post-op attributes, count, eof, data length.
const READ_REPLY_HEAD_BYTES: usize = 4 + POST_OP_ATTR_BYTES + 4 + 4 + 4;

/// READ encodes its own reply so that the file's bytes go from the backend straight into
/// the reply buffer (one copy; through a `ReadOk` they were copied twice). A large READ
/// from a backend that can hand over the file (host), for a peer `--sendfile` allows
/// ([`crate::SendfileMode`]), copies nothing: the reply ends with
/// the file's range, which the connection sends with `sendfile` (see `rpc::reply`); nor
/// does one from a backend that holds the bytes in memory (object), whose pieces end
/// the reply as they are ([`read_uncopied`]). The
/// attributes are the ones the permission check took just before the read: their slot
/// is reserved and filled once the read is done. The buffer grows by what this READ can
/// return (its `count`, at most rtmax), not by the largest READ: the procedure's row
/// starts it small.
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
    let count = a.count.min(s.max_io_bytes);
    if count >= ZERO_COPY_READ_MIN_BYTES && read_uncopied(s, ctx, &t, a.offset, count, e)? {
        return Ok(());
    }
    // With room after the data for the attributes, which are encoded there and moved
    // into their slot (`patch_encoded`): a 1 MiB READ's buffer must not double for them.
    e.reserve(READ_REPLY_HEAD_BYTES + count as usize + 3 + POST_OP_ATTR_BYTES);
    let start = e.len();
    Nfsstat3::Ok.encode(e);
    let attrs_at = e.len();
    e.fixed_opaque(&[0; POST_OP_ATTR_BYTES]);
    let count_at = e.len();
    e.u32(0);
    e.bool(false);
    let read = e.opaque_with(|out| t.export.read_into(&t.cred, t.id, a.offset, count, out));
    if matches!(read, Err(vfs::FsError::WouldBlock)) {
        // Nothing was read: the whole READ runs again where it may block.
        e.truncate(start);
        return Err(ProcError::WouldBlock);
    }
    match read {
        Ok((len, done)) => {
            let attrs = e.patch_encoded(attrs_at, &PostOpAttr(Some(fattr(&done.attr))));
            debug_assert_eq!(attrs, POST_OP_ATTR_BYTES);
            e.patch_u32(count_at, u32::try_from(len).unwrap_or(u32::MAX));
            e.patch_u32(count_at + 4, u32::from(done.eof));
        }
        Err(err) => {
            e.truncate(start);
            read_failed(&t, err, e);
        }
    }
    Ok(())
}

/// A large READ answered without copying its bytes into the reply: from the file with
/// `sendfile` (a backend that can hand over the file, for a peer `--sendfile` allows),
/// or as the pieces a backend holds in memory (`vfs::Backend::read_shared`: the object
/// backend's cached S3 objects), which the connection sends as they are. True if it
/// answered (a failure too); false if the backend has neither, and the caller copies.
fn read_uncopied(
    s: &NfsState,
    ctx: &CallContext,
    t: &Target<'_>,
    offset: u64,
    count: u32,
    e: &mut Encoder,
) -> Result<bool, ProcError> {
    let read = |e: &mut Encoder, done: &vfs::ReadDone, len: u32| {
        Nfsstat3::Ok.encode(e);
        PostOpAttr(Some(fattr(&done.attr))).encode(e);
        e.u32(len);
        e.bool(done.eof);
        e.u32(len); // the opaque's length; its bytes and padding come after the head
    };
    if s.sendfile.applies_to(ctx.peer.ip()) {
        match deferred(t.export.read_slice(&t.cred, t.id, offset, count))? {
            Ok(Some(slice)) => {
                let ReadSlice {
                    file,
                    offset,
                    len,
                    done,
                } = slice;
                read(e, &done, len);
                if len > 0 {
                    ctx.end_with_file(FileSlice { file, offset, len });
                }
                return Ok(true);
            }
            Ok(None) => {}
            Err(err) => {
                read_failed(t, err, e);
                return Ok(true);
            }
        }
    }
    match deferred(t.export.read_shared(&t.cred, t.id, offset, count, false))? {
        Ok(Some(shared)) => {
            let len = u32::try_from(shared.len()).unwrap_or(u32::MAX);
            debug_assert!(len <= count, "{len} bytes for a READ of {count}");
            read(e, &shared.done, len);
            if len > 0 {
                ctx.end_with_bytes(shared.parts);
            }
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(err) => {
            read_failed(t, err, e);
            Ok(true)
        }
    }
}

/// READ's failure reply: the status and the file's attributes as they are now.
fn read_failed(t: &Target<'_>, err: vfs::FsError, e: &mut Encoder) {
    let file_attributes = post_op(t);
    ReadRes::Fail(status_of(err), ReadFail { file_attributes }).encode(e);
}

fn write(s: &NfsState, ctx: &CallContext, a: WriteArgs) -> Result<WriteRes, ProcError> {
    let t = match s.resolve(ctx, &a.file) {
        Ok(t) => t,
        Err(st) => return Ok(Res3::Fail(st, WriteFail::default())),
    };
    // The count must describe the data that came with it (Linux nfsd refuses a mismatch).
    if a.data.len() != a.count as usize {
        return Ok(Res3::Fail(
            Nfsstat3::Inval,
            WriteFail {
                file_wcc: failed_wcc(&t),
            },
        ));
    }
    let stable = stability(a.stable);
    Ok(
        match deferred(
            t.export
                .write_shared(&t.cred, t.id, a.offset, &a.data, stable),
        )? {
            Ok(w) => Res3::Ok(WriteOk {
                file_wcc: wcc(&w.file),
                count: w.count,
                committed: stable_how(w.committed),
                verf: s.write_verifier_for(t.export),
            }),
            Err(e) => Res3::Fail(
                status_of(e),
                WriteFail {
                    file_wcc: failed_wcc(&t),
                },
            ),
        },
    )
}

/// The reply shared by CREATE, MKDIR, SYMLINK and MKNOD.
fn created(s: &NfsState, dir: &Target<'_>, made: vfs::FsResult<vfs::Created>) -> CreateRes {
    match made {
        Ok(made) => Res3::Ok(CreateOk {
            obj: PostOpFh3(Some(s.handle(dir.export, &made.attr))),
            obj_attributes: PostOpAttr(Some(fattr(&made.attr))),
            dir_wcc: wcc(&made.dir),
        }),
        Err(e) => Res3::Fail(
            status_of(e),
            CreateFail {
                dir_wcc: failed_wcc(dir),
            },
        ),
    }
}

/// Resolves the directory of a create-like call and validates the new name.
fn create_target<'s>(
    s: &'s NfsState,
    ctx: &CallContext,
    where_: &DirOpArgs3,
) -> Result<(Target<'s>, vfs::FsResult<Name>), Nfsstat3> {
    let dir = s.resolve(ctx, &where_.dir)?;
    let name = Name::new(where_.name.0.clone());
    Ok((dir, name))
}

fn create(s: &NfsState, ctx: &CallContext, a: CreateArgs) -> CreateRes {
    let (dir, name) = match create_target(s, ctx, &a.where_) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, CreateFail::default()),
    };
    let mode = match a.how {
        CreateHow3::Unchecked(attrs) => CreateMode::Unchecked(set_attr(&attrs)),
        CreateHow3::Guarded(attrs) => CreateMode::Guarded(set_attr(&attrs)),
        CreateHow3::Exclusive(verf) => CreateMode::Exclusive(verf),
    };
    let made = name.and_then(|n| dir.export.create(&dir.cred, dir.id, &n, &mode));
    created(s, &dir, made)
}

fn mkdir(s: &NfsState, ctx: &CallContext, a: MkdirArgs) -> MkdirRes {
    let (dir, name) = match create_target(s, ctx, &a.where_) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, CreateFail::default()),
    };
    let attrs = set_attr(&a.attributes);
    let made = name.and_then(|n| dir.export.mkdir(&dir.cred, dir.id, &n, &attrs));
    created(s, &dir, made)
}

fn symlink(s: &NfsState, ctx: &CallContext, a: SymlinkArgs) -> SymlinkRes {
    let (dir, name) = match create_target(s, ctx, &a.where_) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, CreateFail::default()),
    };
    let attrs = set_attr(&a.symlink.symlink_attributes);
    let target = a.symlink.symlink_data.as_bytes();
    let made = name.and_then(|n| dir.export.symlink(&dir.cred, dir.id, &n, target, &attrs));
    created(s, &dir, made)
}

fn mknod(s: &NfsState, ctx: &CallContext, a: MknodArgs) -> MknodRes {
    let (dir, name) = match create_target(s, ctx, &a.where_) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, CreateFail::default()),
    };
    let (kind, attrs) = match a.what {
        MknodData3::Chr(d) => (SpecialFile::CharDevice(device(d.spec)), d.dev_attributes),
        MknodData3::Blk(d) => (SpecialFile::BlockDevice(device(d.spec)), d.dev_attributes),
        MknodData3::Sock(attrs) => (SpecialFile::Socket, attrs),
        MknodData3::Fifo(attrs) => (SpecialFile::Fifo, attrs),
        MknodData3::Reg | MknodData3::Dir | MknodData3::Lnk => {
            let dir_wcc = failed_wcc(&dir);
            return Res3::Fail(Nfsstat3::BadType, CreateFail { dir_wcc });
        }
    };
    let attrs = set_attr(&attrs);
    let made = name.and_then(|n| dir.export.mknod(&dir.cred, dir.id, &n, kind, &attrs));
    created(s, &dir, made)
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
    let done = Name::new(what.name.0.clone()).and_then(|n| {
        if is_dir {
            dir.export.rmdir(&dir.cred, dir.id, &n)
        } else {
            dir.export.remove(&dir.cred, dir.id, &n)
        }
    });
    match done {
        Ok(change) => Res3::Ok(RemoveOk {
            dir_wcc: wcc(&change),
        }),
        Err(e) => Res3::Fail(
            status_of(e),
            RemoveFail {
                dir_wcc: failed_wcc(&dir),
            },
        ),
    }
}

fn rename(s: &NfsState, ctx: &CallContext, a: RenameArgs) -> RenameRes {
    let (from, to) = match (s.resolve(ctx, &a.from.dir), s.resolve(ctx, &a.to.dir)) {
        (Ok(f), Ok(t)) => (f, t),
        (Err(st), _) | (_, Err(st)) => return Res3::Fail(st, RenameFail::default()),
    };
    let done = if from.export.id == to.export.id {
        Name::new(a.from.name.0.clone()).and_then(|f| {
            let t = Name::new(a.to.name.0.clone())?;
            from.export.rename(&from.cred, from.id, &f, to.id, &t)
        })
    } else {
        Err(vfs::FsError::XDev)
    };
    match done {
        Ok(done) => Res3::Ok(RenameOk {
            fromdir_wcc: wcc(&done.from_dir),
            todir_wcc: wcc(&done.to_dir),
        }),
        Err(e) => Res3::Fail(
            status_of(e),
            RenameFail {
                fromdir_wcc: failed_wcc(&from),
                todir_wcc: failed_wcc(&to),
            },
        ),
    }
}

fn link(s: &NfsState, ctx: &CallContext, a: LinkArgs) -> LinkRes {
    let (file, dir) = match (s.resolve(ctx, &a.file), s.resolve(ctx, &a.link.dir)) {
        (Ok(f), Ok(d)) => (f, d),
        (Err(st), _) | (_, Err(st)) => return Res3::Fail(st, LinkFail::default()),
    };
    let done = if file.export.id == dir.export.id {
        Name::new(a.link.name.0.clone())
            .and_then(|n| dir.export.link(&dir.cred, file.id, dir.id, &n))
    } else {
        Err(vfs::FsError::XDev)
    };
    match done {
        Ok(done) => Res3::Ok(LinkOk {
            file_attributes: PostOpAttr(Some(fattr(&done.attr))),
            linkdir_wcc: wcc(&done.dir),
        }),
        Err(e) => Res3::Fail(
            status_of(e),
            LinkFail {
                file_attributes: post_op(&file),
                linkdir_wcc: failed_wcc(&dir),
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
    match listing {
        Ok(l) => Res3::Ok(ReaddirOk {
            dir_attributes: PostOpAttr(Some(fattr(&l.dir))),
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
        Err(e) => Res3::Fail(
            status_of(e),
            ReaddirFail {
                dir_attributes: post_op(&dir),
            },
        ),
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
            // Attributes the backend read with the listing need no GETATTR; an entry
            // removed since the listing was read is skipped, not an error.
            let attr = match &entry.attr {
                Some(a) => a.clone(),
                None => export.getattr(entry.fileid).ok()?,
            };
            let handle = s.handle(export, &attr);
            let size = entryplus3_size(entry.name.len(), true, Some(handle.0.len()));
            Some((size, (attr, handle)))
        },
        budget,
    );
    match listing {
        Ok(l) => Res3::Ok(ReaddirplusOk {
            dir_attributes: PostOpAttr(Some(fattr(&l.dir))),
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
        Err(e) => Res3::Fail(
            status_of(e),
            ReaddirplusFail {
                dir_attributes: post_op(&dir),
            },
        ),
    }
}

fn fsstat(s: &NfsState, ctx: &CallContext, a: FsstatArgs) -> FsstatRes {
    let t = match s.resolve(ctx, &a.fsroot) {
        Ok(t) => t,
        Err(st) => return Res3::Fail(st, FsstatFail::default()),
    };
    let obj_attributes = post_op(&t);
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
        obj_attributes: post_op(&t),
        rtmax: s.max_io_bytes,
        rtpref: s.max_io_bytes,
        rtmult: limits::IO_MULTIPLE_BYTES,
        wtmax: s.max_io_bytes,
        wtpref: s.max_io_bytes,
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
        obj_attributes: post_op(&t),
        linkmax: props.max_links,
        name_max: props.max_name_bytes,
        no_trunc: true,
        chown_restricted: true,
        case_insensitive: props.case_insensitive,
        case_preserving: props.case_preserving,
    })
}

fn commit(s: &NfsState, ctx: &CallContext, a: CommitArgs) -> Result<CommitRes, ProcError> {
    let t = match s.resolve(ctx, &a.file) {
        Ok(t) => t,
        Err(st) => return Ok(Res3::Fail(st, CommitFail::default())),
    };
    // A range past 2^64 - 1 is invalid (Linux nfsd: NFS3ERR_INVAL), not "commit to EOF".
    let commit = if a.offset.checked_add(u64::from(a.count)).is_none() {
        Err(vfs::FsError::Inval)
    } else {
        deferred(t.export.commit(t.id, a.offset, a.count))?
    };
    Ok(match commit {
        Ok(change) => Res3::Ok(CommitOk {
            file_wcc: wcc(&change),
            verf: s.write_verifier_for(t.export),
        }),
        Err(e) => Res3::Fail(
            status_of(e),
            CommitFail {
                file_wcc: failed_wcc(&t),
            },
        ),
    })
}
