//! MOUNT v3 (RFC 1813 appendix I): turning an export path into a root handle, and the
//! informational DUMP and EXPORT lists. Served on the same port as NFS.

use bytes::Bytes;
use nfs3::limits::{MOUNT_PROGRAM, MOUNT_V3};
use nfs3::mount::*;
use rpc::msg::{AUTH_NONE, AUTH_SYS};
use rpc::{procedure, CacheClass, CallContext, Procedure};
use vfs::FsError;

use crate::limits::MAX_MOUNT_LIST_REPLY_BYTES;
use crate::state::{MountEntry, NfsState};

use CacheClass::{Idempotent, NonIdempotent};

pub const PROGRAM: u32 = MOUNT_PROGRAM;
pub const VERSION: u32 = MOUNT_V3;

/// The MOUNT v3 procedure table, indexed by procedure number.
pub static PROCEDURES: [Procedure<NfsState>; 6] = [
    procedure!("null", null, 64, Idempotent),
    procedure!("mnt", mnt, 256, NonIdempotent),
    procedure!("dump", dump, MAX_MOUNT_LIST_REPLY_BYTES, Idempotent),
    procedure!("umnt", umnt, 64, NonIdempotent),
    procedure!("umntall", umntall, 64, NonIdempotent),
    procedure!("export", export, MAX_MOUNT_LIST_REPLY_BYTES, Idempotent),
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
    let refused = |e: FsError| {
        tracing::info!(peer = %ctx.peer, path = %shown, error = %e, "mount refused");
        MntRes::Fail(mount_status(e))
    };
    let (export, below) = match s.exports.by_mount_path(path.as_bytes()) {
        Ok(found) => found,
        Err(e) => return refused(e),
    };
    if !export.options.allows(ctx.peer.ip()) {
        rpc::warn_limited!(
            rpc::ratelog::Kind::Handle,
            peer = %ctx.peer, path = %shown, export = %export.path,
            "mount refused: client not allowed by the export's clients list"
        );
        return MntRes::Fail(Mountstat3::Acces);
    }
    match resolve_mount(s, ctx, export, below, path.as_bytes()) {
        Ok((fhandle, canonical)) => {
            tracing::info!(peer = %ctx.peer, path = %shown, "mounted");
            s.add_mount(MountEntry {
                host: host_of(ctx),
                path: canonical,
            });
            MntRes::Ok {
                fhandle,
                auth_flavors: vec![AUTH_SYS, AUTH_NONE],
            }
        }
        Err(e) => refused(e),
    }
}

/// The one spelling of a mount path the mount list keeps: `/` plus its components, with
/// empty and `.` components gone (`//x/./y/` is `/x/y`).
fn canonical_path(path: &[u8]) -> String {
    let parts: Vec<String> = path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    format!("/{}", parts.join("/"))
}

/// Whether a caller may see the mount list and export list: only clients that some
/// export allows (Linux nfsd answers anyone, revealing client addresses and paths).
fn may_list(s: &NfsState, ctx: &CallContext) -> bool {
    s.exports.iter().any(|e| e.options.allows(ctx.peer.ip()))
}

/// Bytes an XDR string of `len` bytes takes, length word included.
fn xdr_string_bytes(len: usize) -> usize {
    4 + len.div_ceil(4) * 4
}

/// The handle of a mount path: an export path, or a directory below one (`below`, its
/// components) reached by ordinary lookups as the caller (so permissions apply and `..`
/// never climbs out). The caller has checked the export's clients list.
fn resolve_mount(
    s: &NfsState,
    ctx: &CallContext,
    export: &vfs::Export,
    below: Vec<&[u8]>,
    path: &[u8],
) -> Result<(NfsFh3, String), FsError> {
    let cred = s.cred(export, &ctx.auth);
    let mut attr = export.getattr(export.root())?;
    for component in below {
        attr = export.lookup(&cred, attr.fileid, component)?.attr;
    }
    if !attr.is_dir() {
        return Err(FsError::NotDir);
    }
    Ok((s.handle(export, &attr), canonical_path(path)))
}

fn dump(s: &NfsState, ctx: &CallContext, _: Void) -> MountList {
    if !may_list(s, ctx) {
        return MountList(Vec::new());
    }
    let mut room = MAX_MOUNT_LIST_REPLY_BYTES - 8;
    let entries = s
        .mounts()
        .into_iter()
        .take_while(|m| {
            let size = 4 + xdr_string_bytes(m.host.len()) + xdr_string_bytes(m.path.len());
            room = room.saturating_sub(size);
            room > 0
        })
        .map(|m| MountBody {
            ml_hostname: MntName(Bytes::from(m.host)),
            ml_directory: DirPath(Bytes::from(m.path)),
        })
        .collect();
    MountList(entries)
}

fn umnt(s: &NfsState, ctx: &CallContext, path: DirPath) -> Void {
    s.remove_mounts(&host_of(ctx), Some(&canonical_path(path.as_bytes())));
    Void
}

fn umntall(s: &NfsState, ctx: &CallContext, _: Void) -> Void {
    s.remove_mounts(&host_of(ctx), None);
    Void
}

fn export(s: &NfsState, ctx: &CallContext, _: Void) -> Exports {
    if !may_list(s, ctx) {
        return Exports(Vec::new());
    }
    let mut room = MAX_MOUNT_LIST_REPLY_BYTES - 8;
    let nodes = s.exports.iter().map(|e| ExportNode {
        ex_dir: DirPath(Bytes::from(e.path.clone())),
        ex_groups: e
            .options
            .clients
            .iter()
            .map(|c| MntName(Bytes::from(c.to_string())))
            .collect(),
    });
    let fits = |n: &ExportNode| {
        let groups: usize = n
            .ex_groups
            .iter()
            .map(|g| 4 + xdr_string_bytes(g.0.len()))
            .sum();
        let size = 8 + xdr_string_bytes(n.ex_dir.0.len()) + groups;
        room = room.saturating_sub(size);
        room > 0
    };
    Exports(nodes.take_while(fits).collect())
}
