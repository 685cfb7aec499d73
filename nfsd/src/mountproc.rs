//! MOUNT v3 (RFC 1813 appendix I): turning an export path into a root handle, and the
//! informational DUMP and EXPORT lists. Served on the same port as NFS.

use bytes::Bytes;
use nfs3::limits::{MOUNT_PROGRAM, MOUNT_V3};
use nfs3::mount::*;
use rpc::msg::{AUTH_NONE, AUTH_SYS};
use rpc::{procedure, CacheClass, CallContext, Procedure};
use vfs::FsError;

use crate::state::{sent_cred, MountEntry, NfsState};

use CacheClass::{Idempotent, NonIdempotent};

pub const PROGRAM: u32 = MOUNT_PROGRAM;
pub const VERSION: u32 = MOUNT_V3;

/// The MOUNT v3 procedure table, indexed by procedure number.
pub static PROCEDURES: [Procedure<NfsState>; 6] = [
    procedure!("null", null, 64, Idempotent),
    procedure!("mnt", mnt, 256, NonIdempotent),
    procedure!("dump", dump, 64 << 10, Idempotent),
    procedure!("umnt", umnt, 64, NonIdempotent),
    procedure!("umntall", umntall, 64, NonIdempotent),
    procedure!("export", export, 64 << 10, Idempotent),
];

fn null(_: &NfsState, _: &CallContext, _: Void) -> Void {
    Void
}

fn mount_status(e: FsError) -> Mountstat3 {
    match e {
        FsError::Perm => Mountstat3::Perm,
        FsError::NoEnt | FsError::Stale => Mountstat3::NoEnt,
        FsError::Access => Mountstat3::Acces,
        FsError::NotDir => Mountstat3::NotDir,
        FsError::Inval => Mountstat3::Inval,
        FsError::NameTooLong => Mountstat3::NameTooLong,
        FsError::Io => Mountstat3::Io,
        FsError::NotSupp => Mountstat3::NotSupp,
        _ => Mountstat3::ServerFault,
    }
}

fn host_of(ctx: &CallContext) -> String {
    ctx.peer.ip().to_string()
}

fn mnt(s: &NfsState, ctx: &CallContext, path: DirPath) -> MntRes {
    let shown = String::from_utf8_lossy(path.as_bytes()).into_owned();
    match resolve_mount(s, ctx, path.as_bytes()) {
        Ok(fhandle) => {
            tracing::info!(peer = %ctx.peer, path = %shown, "mounted");
            s.add_mount(MountEntry {
                host: host_of(ctx),
                path: shown,
            });
            MntRes::Ok {
                fhandle,
                auth_flavors: vec![AUTH_SYS, AUTH_NONE],
            }
        }
        Err(e) => {
            tracing::info!(peer = %ctx.peer, path = %shown, error = %e, "mount refused");
            MntRes::Fail(mount_status(e))
        }
    }
}

/// The handle of a mount path: an export path, or a directory below one reached by
/// ordinary lookups as the caller (so permissions apply and `..` never climbs out).
fn resolve_mount(s: &NfsState, ctx: &CallContext, path: &[u8]) -> Result<NfsFh3, FsError> {
    let (export, below) = s.exports.by_mount_path(path)?;
    if !export.options.allows(ctx.peer.ip()) {
        return Err(FsError::Access);
    }
    let cred = export.options.map_cred(sent_cred(&ctx.auth).as_ref());
    let mut id = export.root();
    for component in below {
        id = export.lookup(&cred, id, component)?;
    }
    let attr = export.getattr(id)?;
    if !attr.is_dir() {
        return Err(FsError::NotDir);
    }
    Ok(s.handle(export, &attr))
}

fn dump(s: &NfsState, _: &CallContext, _: Void) -> MountList {
    MountList(
        s.mounts()
            .into_iter()
            .map(|m| MountBody {
                ml_hostname: MntName(Bytes::from(m.host)),
                ml_directory: DirPath(Bytes::from(m.path)),
            })
            .collect(),
    )
}

fn umnt(s: &NfsState, ctx: &CallContext, path: DirPath) -> Void {
    let path = String::from_utf8_lossy(path.as_bytes()).into_owned();
    s.remove_mounts(&host_of(ctx), Some(&path));
    Void
}

fn umntall(s: &NfsState, ctx: &CallContext, _: Void) -> Void {
    s.remove_mounts(&host_of(ctx), None);
    Void
}

fn export(s: &NfsState, _: &CallContext, _: Void) -> Exports {
    Exports(
        s.exports
            .iter()
            .map(|e| ExportNode {
                ex_dir: DirPath(Bytes::from(e.path.clone())),
                ex_groups: e
                    .options
                    .clients
                    .iter()
                    .map(|c| MntName(Bytes::from(c.to_string())))
                    .collect(),
            })
            .collect(),
    )
}
