//! Filehandles and names (RFC 8881 sections 18.19-18.24, 18.13-18.14, 18.29, 18.45):
//! PUTFH, PUTROOTFH, PUTPUBFH, GETFH, SAVEFH, RESTOREFH, LOOKUP, LOOKUPP, SECINFO and
//! SECINFO_NO_NAME, across the pseudo file system and into exports.

use std::sync::Arc;

use nfs4::results::{Secinfo4, SecinfoOk};
use nfs4::types::{Component4, NfsFh4};
use nfs4::Nfsstat4;
use vfs::{Export, FsError};

use super::compound::{Cx, Fh};
use super::convert::status_of;
use super::pseudo::{Child, Pseudo};

/// The filehandle of an export's root.
pub fn export_root(cx: &Cx<'_>, export: &Arc<Export>) -> Result<Fh, Nfsstat4> {
    if !export.options.allows(cx.ctx.peer.ip()) {
        // The export exists but not for this client: as if it were not there, and the
        // client may ask SECINFO why.
        return Err(Nfsstat4::Access);
    }
    let attr = export.getattr(export.root()).map_err(status_of)?;
    Ok(Fh::file(cx.s, Arc::clone(export), &attr))
}

fn set_cur(cx: &mut Cx<'_>, fh: Fh) {
    cx.cur = Some(fh);
    cx.cur_sid = None;
}

pub fn putrootfh(cx: &mut Cx<'_>) -> Result<(), Nfsstat4> {
    let fh = match cx.s.pseudo.root_export() {
        Some(export) => export_root(cx, &Arc::clone(export))?,
        None => Fh::Pseudo(0),
    };
    set_cur(cx, fh);
    Ok(())
}

pub fn putfh(cx: &mut Cx<'_>, fh: &NfsFh4) -> Result<(), Nfsstat4> {
    if let Some(n) = cx.s.pseudo.parse(fh.as_bytes()) {
        set_cur(cx, Fh::Pseudo(n));
        return Ok(());
    }
    let (export, id) = cx.s.core.exports.resolve(fh.as_bytes()).map_err(|e| {
        if e == FsError::BadHandle {
            rpc::warn_limited!(rpc::ratelog::Kind::Handle, peer = %cx.ctx.peer, len = fh.0.len(), "refusing a malformed or forged NFSv4 file handle");
        }
        status_of(e)
    })?;
    if !export.options.allows(cx.ctx.peer.ip()) {
        return Err(Nfsstat4::Access);
    }
    let fh = Fh::File {
        export: Arc::clone(export),
        id,
        raw: fh.0.clone(),
    };
    set_cur(cx, fh);
    Ok(())
}

pub fn getfh(cx: &mut Cx<'_>) -> Result<NfsFh4, Nfsstat4> {
    Ok(match cx.cur()? {
        Fh::Pseudo(n) => NfsFh4(Pseudo::handle(*n)),
        Fh::File { raw, .. } => NfsFh4(raw.clone()),
    })
}

pub fn savefh(cx: &mut Cx<'_>) -> Result<(), Nfsstat4> {
    cx.saved = Some(cx.cur()?.clone());
    cx.saved_sid = cx.cur_sid;
    Ok(())
}

pub fn restorefh(cx: &mut Cx<'_>) -> Result<(), Nfsstat4> {
    cx.cur = Some(cx.saved.clone().ok_or(Nfsstat4::Restorefh)?);
    cx.cur_sid = cx.saved_sid;
    Ok(())
}

/// Checks a component name as RFC 8881 section 14.2 asks: not empty, UTF-8, not `.` or
/// `..`, no `/` or NUL.
pub fn check_name(name: &Component4) -> Result<&[u8], Nfsstat4> {
    let b = name.as_bytes();
    if b.is_empty() {
        return Err(Nfsstat4::Inval);
    }
    if b.len() > vfs::limits::MAX_NAME_BYTES {
        return Err(Nfsstat4::Nametoolong);
    }
    if std::str::from_utf8(b).is_err() {
        return Err(Nfsstat4::Inval);
    }
    if b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(Nfsstat4::Badname);
    }
    Ok(b)
}

pub fn lookup(cx: &mut Cx<'_>, name: &Component4) -> Result<(), Nfsstat4> {
    let name = check_name(name)?;
    let fh = match cx.cur()?.clone() {
        Fh::Pseudo(n) => match cx.s.pseudo.lookup(n, name).ok_or(Nfsstat4::Noent)? {
            Child::Pseudo(m) => Fh::Pseudo(m),
            Child::Export(export) => export_root(cx, &export)?,
        },
        Fh::File { export, id, .. } => {
            let cred = cx.s.core.cred(&export, &cx.ctx.auth);
            let found = export.lookup(&cred, id, name).map_err(status_of)?;
            Fh::file(cx.s, export, &found.attr)
        }
    };
    set_cur(cx, fh);
    Ok(())
}

pub fn lookupp(cx: &mut Cx<'_>) -> Result<(), Nfsstat4> {
    let fh = match cx.cur()?.clone() {
        Fh::Pseudo(0) => return Err(Nfsstat4::Noent),
        Fh::Pseudo(n) => Fh::Pseudo(cx.s.pseudo.parent(n)),
        Fh::File { export, id, .. } if id == export.root() => {
            match cx.s.pseudo.parent_of_export(&export) {
                Some(n) => Fh::Pseudo(n),
                None => return Err(Nfsstat4::Noent),
            }
        }
        Fh::File { export, id, .. } => {
            let cred = cx.s.core.cred(&export, &cx.ctx.auth);
            let attr = export.getattr(id).map_err(status_of)?;
            match attr.file_type {
                vfs::FileType::Directory => {}
                vfs::FileType::Symlink => return Err(Nfsstat4::Symlink),
                _ => return Err(Nfsstat4::Notdir),
            }
            let found = export.lookup(&cred, id, b"..").map_err(status_of)?;
            Fh::file(cx.s, export, &found.attr)
        }
    };
    set_cur(cx, fh);
    Ok(())
}

/// SECINFO (`name` given) and SECINFO_NO_NAME: AUTH_SYS, the flavor granary serves. Both
/// consume the current filehandle (RFC 8881 section 2.6.3.1.1.8).
pub fn secinfo(
    cx: &mut Cx<'_>,
    name: Option<&Component4>,
    style_parent: bool,
) -> Result<SecinfoOk, Nfsstat4> {
    if let Some(name) = name {
        let name = check_name(name)?;
        match cx.cur()?.clone() {
            Fh::Pseudo(n) => {
                cx.s.pseudo.lookup(n, name).ok_or(Nfsstat4::Noent)?;
            }
            Fh::File { export, id, .. } => {
                let cred = cx.s.core.cred(&export, &cx.ctx.auth);
                export.lookup(&cred, id, name).map_err(status_of)?;
            }
        }
    } else if style_parent {
        // The parent of the current directory: none above the root.
        match cx.cur()? {
            Fh::Pseudo(0) => return Err(Nfsstat4::Noent),
            Fh::File { export, id, .. }
                if *id == export.root() && cx.s.pseudo.parent_of_export(export).is_none() =>
            {
                return Err(Nfsstat4::Noent)
            }
            _ => {}
        }
    } else {
        cx.cur()?;
    }
    cx.cur = None;
    Ok(SecinfoOk(vec![Secinfo4::Flavor(1)]))
}
