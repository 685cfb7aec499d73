//! Attributes (RFC 8881 sections 18.1, 18.7, 18.15, 18.30, 18.31): GETATTR, SETATTR,
//! VERIFY, NVERIFY and ACCESS, of files and of pseudo directories.

use gtime::Timestamp;
use nfs4::attr::{num, Fattr};
use nfs4::ops::SetattrArgs;
use nfs4::results::AccessOk;
use nfs4::types::{Bitmap4, Fattr4, Settime4};
use nfs4::Nfsstat4;
use vfs::{AccessMask, Attr, FileId, FileType, FsProperties, SetAttr, SetTime};

use super::compound::{Cx, Fh};
use crate::idmap::Idmap;

use super::convert::{self, status_of, Context};
use super::pseudo::Pseudo;

/// Attributes that need the file system's figures (a statfs).
fn wants_fsstat(mask: &Bitmap4) -> bool {
    [
        num::FILES_AVAIL,
        num::FILES_FREE,
        num::FILES_TOTAL,
        num::SPACE_AVAIL,
        num::SPACE_FREE,
        num::SPACE_TOTAL,
    ]
    .iter()
    .any(|&b| mask.contains(b))
}

/// A pseudo directory's attributes: read-only, root's, on a file system of its own.
fn pseudo_attr(n: u32, entries: usize) -> Attr {
    Attr {
        file_type: FileType::Directory,
        mode: 0o555,
        nlink: 2,
        uid: 0,
        gid: 0,
        size_bytes: 4096,
        used_bytes: 4096,
        rdev: vfs::DeviceNumber::default(),
        fsid: u64::MAX,
        fileid: FileId(Pseudo::fileid(n)),
        generation: 0,
        atime: Timestamp::default(),
        mtime: Timestamp::default(),
        ctime: Timestamp {
            seconds: i64::try_from(entries).unwrap_or(0),
            nanos: 0,
        },
    }
}

fn pseudo_props(cx: &Cx<'_>) -> FsProperties {
    let mut props =
        cx.s.core
            .exports
            .iter()
            .next()
            .map(|e| e.properties())
            .unwrap_or(FsProperties {
                stable_ids: true,
                max_file_size: 0,
                time_granularity_ns: 1,
                supports_hard_links: false,
                supports_symlinks: false,
                max_links: 1,
                max_name_bytes: 255,
                case_insensitive: false,
                case_preserving: true,
                read_only: true,
            });
    props.read_only = true;
    props
}

/// The current filehandle's attributes in `mask`.
///
/// # Errors
/// `NFS4ERR_NOFILEHANDLE`, and the backend's.
pub fn attrs_of(cx: &Cx<'_>, fh: &Fh, mask: &Bitmap4) -> Result<Fattr, Nfsstat4> {
    let lease_secs = u32::try_from(cx.s.state.lease().as_secs()).unwrap_or(u32::MAX);
    let max_io_bytes = cx.s.core.max_io_bytes;
    match fh {
        Fh::Pseudo(n) => {
            let attr = pseudo_attr(*n, cx.s.pseudo.entries(*n).len());
            let raw = nfs4::types::NfsFh4(Pseudo::handle(*n));
            let c = Context {
                fh: &raw,
                props: pseudo_props(cx),
                stat: None,
                lease_secs,
                max_io_bytes,
                idmap: &cx.s.core.idmap,
                clone_blksize: None,
                mounted_on_fileid: attr.fileid.0,
            };
            Ok(convert::fattr(&attr, mask, &c))
        }
        Fh::File { export, id, raw } => {
            let attr = match &cx.written {
                // Right after a WRITE of this file: the attributes it left.
                Some((e, w, attr)) if *e == export.id.0 && w == id => attr.clone(),
                _ => export.getattr(*id).map_err(status_of)?,
            };
            file_attrs(cx, export, &attr, raw.clone(), mask)
        }
    }
}

/// A file's attributes in `mask`, from attributes already taken.
///
/// # Errors
/// The backend's, for a statfs the mask needs.
pub fn file_attrs(
    cx: &Cx<'_>,
    export: &vfs::Export,
    attr: &Attr,
    raw: bytes::Bytes,
    mask: &Bitmap4,
) -> Result<Fattr, Nfsstat4> {
    let lease_secs = u32::try_from(cx.s.state.lease().as_secs()).unwrap_or(u32::MAX);
    let stat = if wants_fsstat(mask) {
        Some(export.fsstat().map_err(status_of)?)
    } else {
        None
    };
    let raw = nfs4::types::NfsFh4(raw);
    let c = Context {
        fh: &raw,
        props: export.properties(),
        stat,
        lease_secs,
        max_io_bytes: cx.s.core.max_io_bytes,
        idmap: &cx.s.core.idmap,
        clone_blksize: export.clone_block_bytes(),
        mounted_on_fileid: attr.fileid.0,
    };
    Ok(convert::fattr(attr, mask, &c))
}

pub fn getattr(cx: &mut Cx<'_>, mask: &Bitmap4) -> Result<Fattr4, Nfsstat4> {
    let fh = cx.cur()?.clone();
    Ok(attrs_of(cx, &fh, mask)?.to_fattr4())
}

fn settime(t: Settime4) -> SetTime {
    match t {
        Settime4::ServerTime => SetTime::ServerTime,
        Settime4::ClientTime(t) => SetTime::Client(Timestamp {
            seconds: t.seconds,
            nanos: t.nseconds,
        }),
    }
}

/// The changes an `fattr4` of SETATTR, CREATE or OPEN asks for, and the mask of them.
///
/// # Errors
/// `NFS4ERR_ATTRNOTSUPP` / `NFS4ERR_BADXDR` for an unreadable set, `NFS4ERR_INVAL` for
/// a read-only attribute, `NFS4ERR_BADOWNER` for an owner `idmap` cannot map.
pub fn setattr_of(idmap: &Idmap, f: &Fattr4) -> Result<(SetAttr, Bitmap4), Nfsstat4> {
    let settable = convert::settable();
    if let Some(bit) = f.attrmask.iter().find(|b| !settable.contains(*b)) {
        return Err(
            if Fattr::known().contains(bit)
                || bit == num::TIME_ACCESS_SET
                || bit == num::TIME_MODIFY_SET
            {
                Nfsstat4::Inval
            } else {
                Nfsstat4::Attrnotsupp
            },
        );
    }
    let v = Fattr::from_fattr4(f).map_err(|e| e.status())?;
    if v.mode.is_some_and(|m| m & !0o7777 != 0) {
        return Err(Nfsstat4::Inval);
    }
    let set = SetAttr {
        mode: v.mode,
        uid: v.owner.as_ref().map(|o| idmap.user_id(o)).transpose()?,
        gid: v
            .owner_group
            .as_ref()
            .map(|g| idmap.group_id(g))
            .transpose()?,
        size_bytes: v.size,
        atime: v.time_access_set.map_or(SetTime::DontChange, settime),
        mtime: v.time_modify_set.map_or(SetTime::DontChange, settime),
    };
    Ok((set, f.attrmask.clone()))
}

pub fn setattr(cx: &mut Cx<'_>, a: &SetattrArgs) -> (Nfsstat4, Bitmap4) {
    match try_setattr(cx, a) {
        Ok(set) => (Nfsstat4::Ok, set),
        Err(s) => (s, Bitmap4::default()),
    }
}

fn try_setattr(cx: &mut Cx<'_>, a: &SetattrArgs) -> Result<Bitmap4, Nfsstat4> {
    let (export, id, cred) = cx.file()?;
    let (set, mask) = setattr_of(&cx.s.core.idmap, &a.obj_attributes)?;
    if set.size_bytes.is_some() {
        let sid = cx.stateid(&a.stateid)?;
        let client = cx.client()?;
        cx.s.state
            .check_io(client, &sid, &Cx::key(&export, id), true)?;
    }
    export.setattr(&cred, id, &set, None).map_err(status_of)?;
    Ok(mask)
}

/// VERIFY (`negate` false: `NFS4ERR_NOT_SAME` unless every value matches) and NVERIFY
/// (`negate` true: `NFS4ERR_SAME` when they all match).
pub fn verify(cx: &mut Cx<'_>, f: &Fattr4, negate: bool) -> Nfsstat4 {
    let fh = match cx.cur() {
        Ok(fh) => fh.clone(),
        Err(s) => return s,
    };
    if let Err(e) = Fattr::from_fattr4(f) {
        return e.status();
    }
    if f.attrmask.contains(num::RDATTR_ERROR) {
        return Nfsstat4::Inval;
    }
    let ours = match attrs_of(cx, &fh, &f.attrmask) {
        Ok(v) => v.to_fattr4(),
        Err(s) => return s,
    };
    let same = ours.attrmask == f.attrmask && ours.attr_vals == f.attr_vals;
    match (same, negate) {
        (true, false) | (false, true) => Nfsstat4::Ok,
        (false, false) => Nfsstat4::NotSame,
        (true, true) => Nfsstat4::Same,
    }
}

const ALL_ACCESS: u32 = 0x3f;

pub fn access(cx: &mut Cx<'_>, bits: u32) -> Result<AccessOk, Nfsstat4> {
    let want = bits & ALL_ACCESS;
    match cx.cur()?.clone() {
        Fh::Pseudo(_) => Ok(AccessOk {
            supported: want,
            access: want & (AccessMask::READ | AccessMask::LOOKUP),
        }),
        Fh::File { .. } => {
            let (export, id, cred) = cx.file()?;
            let (granted, _) = export
                .access(&cred, id, AccessMask(want))
                .map_err(status_of)?;
            Ok(AccessOk {
                supported: want,
                access: granted.0,
            })
        }
    }
}
