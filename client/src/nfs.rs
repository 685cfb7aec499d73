//! [`Nfs3Client`]: one typed method per NFSv3 and MOUNT v3 procedure.
//!
//! Each method sends the `nfs3` argument type and returns the `nfs3` result type exactly
//! as the server encoded it: an NFS error status is a `Res3::Fail` inside `Ok`, not an
//! `Err`. `Err` means the call itself failed (connection, timeout, RPC-level refusal,
//! undecodable reply). The convenience layer in [`crate::ops`] turns statuses into errors.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nfs3::limits::{MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3};
use nfs3::mount::{DirPath, DumpRes, ExportRes, MntRes, MountProc};
use nfs3::nfs::{
    AccessArgs, AccessRes, CommitArgs, CommitRes, CreateArgs, CreateRes, FsinfoArgs, FsinfoRes,
    FsstatArgs, FsstatRes, GetattrArgs, GetattrRes, LinkArgs, LinkRes, LookupArgs, LookupRes,
    MkdirArgs, MkdirRes, MknodArgs, MknodRes, NfsProc, PathconfArgs, PathconfRes, ReadArgs,
    ReadRes, ReaddirArgs, ReaddirRes, ReaddirplusArgs, ReaddirplusRes, ReadlinkArgs, ReadlinkRes,
    RemoveArgs, RemoveRes, RenameArgs, RenameRes, RmdirArgs, RmdirRes, SetattrArgs, SetattrRes,
    SymlinkArgs, SymlinkRes, Void, WriteArgs, WriteRes,
};
use rpc::msg::Auth;
use tokio::sync::OnceCell;
use xdr::{Decode, Encode};

use crate::conn::{PendingReply, RpcConnection};
use crate::error::ClientError;

/// An NFSv3 client: a connection for NFS and one for MOUNT (the same one when both
/// programs share a port). Cheap to clone; clones share the connections and the cached
/// FSINFO sizes but have their own credential and timeout.
#[derive(Clone, Debug)]
pub struct Nfs3Client {
    nfs: RpcConnection,
    mount: RpcConnection,
    /// Explicit READ/WRITE chunk size for `read_all` / `write_all`; else FSINFO's.
    pub(crate) io_size_bytes: Option<u32>,
    /// `rtmax` and `wtmax` from the first FSINFO the convenience layer made.
    pub(crate) fsinfo_sizes: Arc<OnceCell<IoSizes>>,
}

/// The server's largest READ and WRITE, from FSINFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoSizes {
    pub(crate) rtmax: u32,
    pub(crate) wtmax: u32,
}

impl Nfs3Client {
    /// A client that sends both NFS and MOUNT calls on `conn`.
    #[must_use]
    pub fn new(conn: RpcConnection) -> Self {
        Self::with_mount(conn.clone(), conn)
    }

    /// A client with separate NFS and MOUNT connections.
    #[must_use]
    pub fn with_mount(nfs: RpcConnection, mount: RpcConnection) -> Self {
        Self {
            nfs,
            mount,
            io_size_bytes: None,
            fsinfo_sizes: Arc::new(OnceCell::new()),
        }
    }

    /// Connects to NFS at `nfs_addr` and MOUNT at `mount_addr` (one connection if they are
    /// the same address).
    ///
    /// # Errors
    /// Connecting failed.
    pub async fn connect(nfs_addr: SocketAddr, mount_addr: SocketAddr) -> io::Result<Self> {
        let nfs = RpcConnection::connect(nfs_addr).await?;
        if mount_addr == nfs_addr {
            return Ok(Self::new(nfs));
        }
        let mount = RpcConnection::connect(mount_addr).await?;
        Ok(Self::with_mount(nfs, mount))
    }

    /// The connection NFS calls use (for `call_raw` and friends).
    #[must_use]
    pub fn nfs_connection(&self) -> &RpcConnection {
        &self.nfs
    }

    /// The connection MOUNT calls use.
    #[must_use]
    pub fn mount_connection(&self) -> &RpcConnection {
        &self.mount
    }

    /// Sends later NFS and MOUNT calls of this handle as `auth`.
    pub fn set_auth(&mut self, auth: &Auth) {
        self.nfs.set_auth(auth);
        self.mount.set_auth(auth);
    }

    /// This handle, sending its calls as `auth`.
    #[must_use]
    pub fn with_auth(mut self, auth: &Auth) -> Self {
        self.set_auth(auth);
        self
    }

    /// Limits how long each call of this handle waits (`None`: forever).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.nfs.set_timeout(timeout);
        self.mount.set_timeout(timeout);
    }

    /// This handle, with each call limited to `timeout`.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.set_timeout(Some(timeout));
        self
    }

    /// This handle, with `read_all` / `write_all` chunks of `size_bytes` instead of the
    /// server's FSINFO `rtmax` / `wtmax`.
    ///
    /// # Panics
    /// If `size_bytes` is 0.
    #[must_use]
    pub fn with_io_size(mut self, size_bytes: u32) -> Self {
        assert!(size_bytes > 0, "an I/O chunk must hold at least one byte");
        self.io_size_bytes = Some(size_bytes);
        self
    }

    /// Calls NFS procedure `proc` with `args`; the result decodes as `R`.
    ///
    /// # Errors
    /// See [`RpcConnection::call_decode`].
    pub async fn call_nfs<R: Decode>(
        &self,
        proc: NfsProc,
        args: &impl Encode,
    ) -> Result<R, ClientError> {
        self.nfs
            .call_decode(NFS_PROGRAM, NFS_V3, proc as u32, args)
            .await
    }

    /// Sends NFS procedure `proc` without waiting for its reply (for pipelining).
    ///
    /// # Errors
    /// See [`RpcConnection::send_call`].
    pub async fn send_nfs(
        &self,
        proc: NfsProc,
        args: &impl Encode,
    ) -> Result<PendingReply, ClientError> {
        self.nfs
            .send_call(NFS_PROGRAM, NFS_V3, proc as u32, args)
            .await
    }

    /// Calls MOUNT procedure `proc` with `args`; the result decodes as `R`.
    ///
    /// # Errors
    /// See [`RpcConnection::call_decode`].
    pub async fn call_mount<R: Decode>(
        &self,
        proc: MountProc,
        args: &impl Encode,
    ) -> Result<R, ClientError> {
        self.mount
            .call_decode(MOUNT_PROGRAM, MOUNT_V3, proc as u32, args)
            .await
    }

    /// NFS procedure 0, NULL.
    ///
    /// # Errors
    /// The call failed (see [`ClientError`]).
    pub async fn null(&self) -> Result<(), ClientError> {
        self.call_nfs::<Void>(NfsProc::Null, &Void).await.map(drop)
    }

    /// MOUNT procedure 0, NULL.
    ///
    /// # Errors
    /// The call failed.
    pub async fn mount_null(&self) -> Result<(), ClientError> {
        self.call_mount::<Void>(MountProc::Null, &Void)
            .await
            .map(drop)
    }

    /// MOUNT procedure 1, MNT: the root handle of export `path`.
    ///
    /// # Errors
    /// The call failed; a MOUNT status is inside [`MntRes`].
    pub async fn mnt(&self, path: impl AsRef<[u8]>) -> Result<MntRes, ClientError> {
        self.call_mount(MountProc::Mnt, &dir_path(path)).await
    }

    /// MOUNT procedure 2, DUMP: who has what mounted.
    ///
    /// # Errors
    /// The call failed.
    pub async fn dump(&self) -> Result<DumpRes, ClientError> {
        self.call_mount(MountProc::Dump, &Void).await
    }

    /// MOUNT procedure 3, UMNT.
    ///
    /// # Errors
    /// The call failed.
    pub async fn umnt(&self, path: impl AsRef<[u8]>) -> Result<(), ClientError> {
        self.call_mount::<Void>(MountProc::Umnt, &dir_path(path))
            .await
            .map(drop)
    }

    /// MOUNT procedure 4, UMNTALL.
    ///
    /// # Errors
    /// The call failed.
    pub async fn umntall(&self) -> Result<(), ClientError> {
        self.call_mount::<Void>(MountProc::Umntall, &Void)
            .await
            .map(drop)
    }

    /// MOUNT procedure 5, EXPORT: the export list.
    ///
    /// # Errors
    /// The call failed.
    pub async fn export(&self) -> Result<ExportRes, ClientError> {
        self.call_mount(MountProc::Export, &Void).await
    }
}

fn dir_path(path: impl AsRef<[u8]>) -> DirPath {
    DirPath(Bytes::copy_from_slice(path.as_ref()))
}

/// The procedure table: one row per NFSv3 procedure that takes arguments (method, `NfsProc`
/// variant, argument type, result type).
macro_rules! nfs_procedures {
    ($( $method:ident = $proc:ident ($args:ty) -> $res:ty; )*) => {
        impl Nfs3Client {
            $(
                #[doc = concat!("NFS procedure ", stringify!($proc), ".")]
                ///
                /// # Errors
                /// The call failed; an NFS status is inside the result.
                pub async fn $method(&self, args: &$args) -> Result<$res, ClientError> {
                    self.call_nfs(NfsProc::$proc, args).await
                }
            )*
        }
    };
}

nfs_procedures! {
    getattr = Getattr(GetattrArgs) -> GetattrRes;
    setattr = Setattr(SetattrArgs) -> SetattrRes;
    lookup = Lookup(LookupArgs) -> LookupRes;
    access = Access(AccessArgs) -> AccessRes;
    readlink = Readlink(ReadlinkArgs) -> ReadlinkRes;
    read = Read(ReadArgs) -> ReadRes;
    write = Write(WriteArgs) -> WriteRes;
    create = Create(CreateArgs) -> CreateRes;
    mkdir = Mkdir(MkdirArgs) -> MkdirRes;
    symlink = Symlink(SymlinkArgs) -> SymlinkRes;
    mknod = Mknod(MknodArgs) -> MknodRes;
    remove = Remove(RemoveArgs) -> RemoveRes;
    rmdir = Rmdir(RmdirArgs) -> RmdirRes;
    rename = Rename(RenameArgs) -> RenameRes;
    link = Link(LinkArgs) -> LinkRes;
    readdir = Readdir(ReaddirArgs) -> ReaddirRes;
    readdirplus = Readdirplus(ReaddirplusArgs) -> ReaddirplusRes;
    fsstat = Fsstat(FsstatArgs) -> FsstatRes;
    fsinfo = Fsinfo(FsinfoArgs) -> FsinfoRes;
    pathconf = Pathconf(PathconfArgs) -> PathconfRes;
    commit = Commit(CommitArgs) -> CommitRes;
}
