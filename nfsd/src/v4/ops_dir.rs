//! Directories and names (RFC 8881 sections 18.4, 18.9, 18.23, 18.24-18.26):
//! CREATE (directories, symlinks, devices, sockets, FIFOs), REMOVE, RENAME, LINK,
//! READLINK and READDIR.

use bytes::Bytes;
use nfs4::ops::{CreateArgs, Createtype4, ReaddirArgs, RenameArgs};
use nfs4::results::{CreateOk, Entry4, ReaddirOk, RenameOk};
use nfs4::types::{Bitmap4, ChangeInfo4, Component4, Linktext4};
use nfs4::Nfsstat4;
use vfs::{Change, Cookie, DeviceNumber, FsError, Name, SpecialFile};

use super::compound::{Cx, Fh};
use super::convert::{change_of, status_of};
use super::ops_attr::{attrs_of, setattr_of};
use super::ops_fh::check_name;
use super::pseudo::Child;

/// A directory's change info from a vfs [`Change`]: atomic when the backend took the
/// before-attributes in the same critical section as the change.
pub fn cinfo(c: &Change) -> ChangeInfo4 {
    let after = change_of(&c.after);
    match &c.before {
        Some(b) => ChangeInfo4 {
            atomic: true,
            before: b.ctime.as_nanos(),
            after,
        },
        None => ChangeInfo4 {
            atomic: false,
            before: 0,
            after,
        },
    }
}

fn name_of(name: &Component4) -> Result<Name, Nfsstat4> {
    let raw = check_name(name)?;
    Name::new(Bytes::copy_from_slice(raw)).map_err(status_of)
}

pub fn create(cx: &mut Cx<'_>, a: &CreateArgs) -> Result<CreateOk, Nfsstat4> {
    let (export, dir, cred) = cx.file()?;
    let name = name_of(&a.objname)?;
    let (set, attrset) = setattr_of(&cx.s.core.idmap, &a.createattrs)?;
    let made = match &a.objtype {
        Createtype4::Dir => export.mkdir(&cred, dir, &name, &set),
        Createtype4::Link(target) => export.symlink(&cred, dir, &name, target.as_bytes(), &set),
        Createtype4::Blk(d) => {
            export.mknod(&cred, dir, &name, SpecialFile::BlockDevice(dev(d)), &set)
        }
        Createtype4::Chr(d) => {
            export.mknod(&cred, dir, &name, SpecialFile::CharDevice(dev(d)), &set)
        }
        Createtype4::Sock => export.mknod(&cred, dir, &name, SpecialFile::Socket, &set),
        Createtype4::Fifo => export.mknod(&cred, dir, &name, SpecialFile::Fifo, &set),
        Createtype4::Other(_) => return Err(Nfsstat4::Badtype),
    }
    .map_err(status_of)?;
    cx.cur = Some(Fh::file(cx.s, export, &made.attr));
    cx.cur_sid = None;
    Ok(CreateOk {
        cinfo: cinfo(&made.dir),
        attrset,
    })
}

fn dev(d: &nfs4::types::Specdata4) -> DeviceNumber {
    DeviceNumber {
        major: d.specdata1,
        minor: d.specdata2,
    }
}

/// REMOVE of a file or an empty directory.
pub fn remove(cx: &mut Cx<'_>, name: &Component4) -> Result<ChangeInfo4, Nfsstat4> {
    let (export, dir, cred) = cx.file()?;
    let name = name_of(name)?;
    let change = match export.remove(&cred, dir, &name) {
        Err(FsError::IsDir) => export.rmdir(&cred, dir, &name),
        other => other,
    }
    .map_err(status_of)?;
    Ok(cinfo(&change))
}

/// RENAME from the saved directory to the current one.
pub fn rename(cx: &mut Cx<'_>, a: &RenameArgs) -> Result<RenameOk, Nfsstat4> {
    let (to_export, to_dir, cred) = cx.file()?;
    let Some(Fh::File {
        export: from_export,
        id: from_dir,
        ..
    }) = cx.saved.clone()
    else {
        return Err(if cx.saved.is_none() {
            Nfsstat4::Nofilehandle
        } else {
            Nfsstat4::Xdev
        });
    };
    if from_export.id != to_export.id {
        return Err(Nfsstat4::Xdev);
    }
    let (from, to) = (name_of(&a.oldname)?, name_of(&a.newname)?);
    let done = to_export
        .rename(&cred, from_dir, &from, to_dir, &to)
        .map_err(status_of)?;
    Ok(RenameOk {
        source_cinfo: cinfo(&done.from_dir),
        target_cinfo: cinfo(&done.to_dir),
    })
}

/// LINK: the saved file gets `name` in the current directory.
pub fn link(cx: &mut Cx<'_>, name: &Component4) -> Result<ChangeInfo4, Nfsstat4> {
    let (export, dir, cred) = cx.file()?;
    let Some(Fh::File {
        export: src_export,
        id,
        ..
    }) = cx.saved.clone()
    else {
        return Err(if cx.saved.is_none() {
            Nfsstat4::Nofilehandle
        } else {
            Nfsstat4::Xdev
        });
    };
    if src_export.id != export.id {
        return Err(Nfsstat4::Xdev);
    }
    let name = name_of(name)?;
    let done = export.link(&cred, id, dir, &name).map_err(status_of)?;
    Ok(cinfo(&done.dir))
}

pub fn readlink(cx: &mut Cx<'_>) -> Result<Linktext4, Nfsstat4> {
    let (export, id, _) = cx.file()?;
    let (target, _) = export.readlink(id).map_err(|e| match e {
        FsError::Inval => Nfsstat4::Inval,
        e => status_of(e),
    })?;
    Ok(Linktext4(target))
}

/// Cookies 1 and 2 are reserved (RFC 8881 section 18.23.3): a backend cookie `c` is sent
/// as `c + 2`, and 0 starts a listing.
const COOKIE_BIAS: u64 = 2;

/// Bytes of READDIR4resok around the entries: verifier, the list's end marker, eof.
const READDIR_FIXED_BYTES: usize = 8 + 4 + 4;

/// Most entries asked of the backend per page.
const READDIR_PAGE_ENTRIES: usize = 256;

pub fn readdir(cx: &mut Cx<'_>, a: &ReaddirArgs) -> Result<ReaddirOk, Nfsstat4> {
    if a.cookie == 1 || a.cookie == 2 {
        return Err(Nfsstat4::BadCookie);
    }
    let limit = limit(cx, a.maxcount);
    match cx.cur()?.clone() {
        Fh::Pseudo(n) => pseudo_readdir(cx, n, a, limit),
        Fh::File { .. } => file_readdir(cx, a, limit),
    }
}

/// How many bytes of entries a READDIR may answer: its `maxcount`, or, for the COMPOUND's
/// last operation, less when the session's reply has less room left (the list is
/// shortened to fit, as knfsd does; a READDIR that is not last and does not fit is
/// `NFS4ERR_REP_TOO_BIG`).
#[derive(Clone, Copy)]
struct Limit {
    bytes: usize,
    /// The error when not even one entry fits `bytes`: `NFS4ERR_TOOSMALL` for the client's
    /// `maxcount`, the session's error for its reply room.
    too_small: Nfsstat4,
}

fn limit(cx: &Cx<'_>, maxcount: u32) -> Limit {
    let asked = Limit {
        bytes: maxcount as usize,
        too_small: Nfsstat4::Toosmall,
    };
    match cx.result_room {
        Some((room, error)) if cx.last_op && room < asked.bytes => Limit {
            bytes: room,
            too_small: error,
        },
        _ => asked,
    }
}

fn entry_bytes(e: &Entry4) -> usize {
    // value_follows + cookie + name + fattr (mask words + values).
    4 + 8
        + 4
        + xdr::padded(e.name.0.len())
        + 4
        + 4 * e.attrs.attrmask.0.len()
        + 4
        + xdr::padded(e.attrs.attr_vals.0.len())
}

fn pseudo_readdir(
    cx: &mut Cx<'_>,
    n: u32,
    a: &ReaddirArgs,
    limit: Limit,
) -> Result<ReaddirOk, Nfsstat4> {
    let mut out = Vec::new();
    let mut used = READDIR_FIXED_BYTES;
    let entries = cx.s.pseudo.entries(n).to_vec();
    let start = usize::try_from(a.cookie.saturating_sub(COOKIE_BIAS)).unwrap_or(usize::MAX);
    for (i, (name, child)) in entries.iter().enumerate().skip(start) {
        let fh = match child {
            Child::Pseudo(m) => Fh::Pseudo(*m),
            Child::Export(e) => match super::ops_fh::export_root(cx, e) {
                Ok(fh) => fh,
                Err(_) => continue,
            },
        };
        let attrs = attrs_of(cx, &fh, &a.attr_request)?.to_fattr4();
        let e = Entry4 {
            cookie: i as u64 + 1 + COOKIE_BIAS,
            name: Component4(Bytes::copy_from_slice(name)),
            attrs,
        };
        used += entry_bytes(&e);
        if used > limit.bytes {
            return if out.is_empty() {
                Err(limit.too_small)
            } else {
                Ok(ReaddirOk {
                    cookieverf: [0; 8],
                    entries: out,
                    eof: false,
                })
            };
        }
        out.push(e);
    }
    Ok(ReaddirOk {
        cookieverf: [0; 8],
        entries: out,
        eof: true,
    })
}

fn file_readdir(cx: &mut Cx<'_>, a: &ReaddirArgs, limit: Limit) -> Result<ReaddirOk, Nfsstat4> {
    let (export, dir, cred) = cx.file()?;
    let mut cookie = Cookie(a.cookie.saturating_sub(COOKIE_BIAS));
    let mut out = Vec::new();
    let mut used = READDIR_FIXED_BYTES;
    let mut verifier;
    loop {
        let (page, _) = export
            .readdir(&cred, dir, cookie, READDIR_PAGE_ENTRIES)
            .map_err(status_of)?;
        verifier = page.verifier.to_be_bytes();
        if a.cookie != 0 && a.cookieverf != [0; 8] && a.cookieverf != verifier && out.is_empty() {
            return Err(Nfsstat4::NotSame);
        }
        for entry in &page.entries {
            cookie = entry.cookie;
            if entry.name.as_ref() == b"." || entry.name.as_ref() == b".." {
                continue;
            }
            let attrs = entry_attrs(cx, &export, entry, &a.attr_request)?;
            let e = Entry4 {
                cookie: entry
                    .cookie
                    .0
                    .checked_add(COOKIE_BIAS)
                    .ok_or(Nfsstat4::Serverfault)?,
                name: Component4(entry.name.clone()),
                attrs,
            };
            used += entry_bytes(&e);
            if used > limit.bytes {
                return if out.is_empty() {
                    Err(limit.too_small)
                } else {
                    Ok(ReaddirOk {
                        cookieverf: verifier,
                        entries: out,
                        eof: false,
                    })
                };
            }
            out.push(e);
        }
        if page.eof || page.entries.is_empty() {
            return Ok(ReaddirOk {
                cookieverf: verifier,
                entries: out,
                eof: true,
            });
        }
    }
}

/// One entry's attributes. A file removed since the listing reports its error in
/// `rdattr_error` when the client asked for that attribute, and fails the READDIR
/// otherwise (RFC 8881 section 18.23.3).
fn entry_attrs(
    cx: &Cx<'_>,
    export: &std::sync::Arc<vfs::Export>,
    entry: &vfs::DirEntry,
    mask: &Bitmap4,
) -> Result<nfs4::types::Fattr4, Nfsstat4> {
    let got = match &entry.attr {
        // Read with the listing (the object backend): no GETATTR.
        Some(a) => Ok(a.clone()),
        None => export.getattr(entry.fileid),
    };
    let attr = match got {
        Ok(a) => a,
        Err(e) if mask.contains(nfs4::attr::num::RDATTR_ERROR) => {
            let f = nfs4::attr::Fattr {
                rdattr_error: Some(status_of(e)),
                ..Default::default()
            };
            return Ok(f.to_fattr4());
        }
        Err(e) => return Err(status_of(e)),
    };
    let raw = cx.s.core.handle(export, &attr).0;
    Ok(super::ops_attr::file_attrs(cx, export, &attr, raw, mask)?.to_fattr4())
}
