//! Helpers for tests that drive the real server through granary's own client crate.

use std::fmt::Debug;
use std::time::Duration;

use bytes::Bytes;
use client::Nfs3Client;
use nfs3::nfs::{
    DirOpArgs3, Fattr3, Filename3, NfsFh3, Nfstime3, PostOpAttr, PreOpAttr, Res3, Sattr3, WccAttr,
    WccData,
};

use super::Server;

/// A client on one connection for NFS and MOUNT, as AUTH_SYS root, that never waits
/// more than 10 s for a reply.
pub async fn connect(server: &Server) -> Nfs3Client {
    Nfs3Client::connect(server.addr, server.addr)
        .await
        .expect("connect")
        .with_timeout(Duration::from_secs(10))
}

/// Starts `granary serve` with `args`, connects as AUTH_SYS root and mounts `/`.
pub async fn start(args: &[&str]) -> (Server, Nfs3Client, NfsFh3) {
    let server = Server::start(args);
    let client = connect(&server).await;
    let root = client.mount("/").await.expect("MNT /");
    (server, client, root)
}

/// The `Ok` body of a result, or a panic that shows the whole failed reply.
pub fn expect_ok<T: Debug, F: Debug>(res: Res3<T, F>, what: &str) -> T {
    match res {
        Res3::Ok(ok) => ok,
        Res3::Fail(status, body) => panic!("{what}: {status:?} {body:?}"),
    }
}

pub fn dirop(dir: &NfsFh3, name: impl AsRef<[u8]>) -> DirOpArgs3 {
    DirOpArgs3 {
        dir: dir.clone(),
        name: Filename3(Bytes::copy_from_slice(name.as_ref())),
    }
}

pub fn mode_only(mode: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(mode),
        ..Sattr3::default()
    }
}

pub fn wcc_attr(a: &Fattr3) -> WccAttr {
    WccAttr {
        size: a.size,
        mtime: a.mtime,
        ctime: a.ctime,
    }
}

/// The `wcc_data` a reply should carry for an object that went from `before` to `after`.
pub fn wcc(before: &Fattr3, after: &Fattr3) -> WccData {
    WccData {
        before: PreOpAttr(Some(wcc_attr(before))),
        after: PostOpAttr(Some(*after)),
    }
}

/// True if `a` is strictly after `b`.
pub fn later(a: Nfstime3, b: Nfstime3) -> bool {
    (a.seconds, a.nseconds) > (b.seconds, b.nseconds)
}

pub async fn getattr(client: &Nfs3Client, fh: &NfsFh3) -> Fattr3 {
    client.getattr_ok(fh).await.expect("GETATTR")
}
