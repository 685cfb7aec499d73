//! Per-procedure tests of the real `granary` binary, read against RFC 1813 appendix I:
//! every MOUNT v3 procedure (NULL is in `procedures.rs`), and what several exports from
//! one config file mean for MNT and for NFS procedures that span two of them.

mod common;

use std::time::Duration;

use bytes::Bytes;
use client::{auth_sys, Nfs3Client};
use common::nfs::*;
use common::Server;
use nfs3::mount::{
    DirPath, ExportNode, Exports, MntName, MntRes, MountBody, MountList, Mountstat3,
};
use nfs3::nfs::{
    Fattr3, LinkArgs, LinkFail, NfsFh3, Nfsstat3, PostOpAttr, PreOpAttr, RenameArgs, RenameFail,
    Res3, WccAttr, WccData,
};

/// AUTH_SYS and AUTH_NONE, the flavors MNT offers.
const AUTH_FLAVORS: [u32; 2] = [1, 0];

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// Starts `granary serve --config` with `toml` (written to a file named after `test`).
fn start_with_config(test: &str, toml: &str) -> Server {
    let path = std::env::temp_dir().join(format!(
        "granary-procedures-{}-{test}.toml",
        std::process::id()
    ));
    std::fs::write(&path, toml).expect("write config");
    let server = Server::start(&["--config", path.to_str().expect("UTF-8 temp path")]);
    std::fs::remove_file(&path).expect("remove config");
    server
}

/// "/" for loopback clients only, "/private" for 10/8 only, "/b" for everyone without
/// squashing.
const THREE_EXPORTS: &str = r#"
[[export]]
path = "/"
clients = ["127.0.0.0/8"]

[[export]]
path = "/private"
clients = ["10.0.0.0/8"]

[[export]]
path = "/b"
squash = "none"
"#;

async fn mnt(client: &Nfs3Client, path: impl AsRef<[u8]>) -> MntRes {
    client.mnt(path).await.expect("MNT call")
}

fn mounted(fhandle: &NfsFh3) -> MntRes {
    MntRes::Ok {
        fhandle: fhandle.clone(),
        auth_flavors: AUTH_FLAVORS.to_vec(),
    }
}

fn mount_list(paths: &[&str]) -> MountList {
    let body = |path: &&str| MountBody {
        ml_hostname: MntName(Bytes::from_static(b"127.0.0.1")),
        ml_directory: DirPath(Bytes::copy_from_slice(path.as_bytes())),
    };
    MountList(paths.iter().map(body).collect())
}

fn unchanged(a: &Fattr3) -> WccData {
    WccData {
        before: PreOpAttr(Some(WccAttr {
            size: a.size,
            mtime: a.mtime,
            ctime: a.ctime,
        })),
        after: PostOpAttr(Some(*a)),
    }
}

// ---------------------------------------------------------------------------------------
// MNT
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn mnt_of_the_export_root_and_of_a_directory_below_it() {
    let server = Server::start(&[]);
    let client = connect(&server).await;
    let res = mnt(&client, "/").await;
    let MntRes::Ok { fhandle: root, .. } = &res else {
        panic!("MNT /: {res:?}");
    };
    assert_eq!(res, mounted(root));
    assert_eq!(
        client.getattr_ok(root).await.unwrap().ftype,
        nfs3::nfs::Ftype3::Dir
    );

    let b = client.mkdir_p(root, "a/b", 0o755).await.unwrap();
    assert_eq!(mnt(&client, "/a/b").await, mounted(&b));
    // Empty and `.` components are ignored.
    assert_eq!(mnt(&client, "//a/./b/").await, mounted(&b));
    assert_eq!(mnt(&client, "/./").await, mounted(root));
    // The same directory is the same handle for every caller.
    let user = client.clone().with_auth(&auth_sys(1000, 1000, &[]));
    assert_eq!(mnt(&user, "/a/b").await, mounted(&b));
}

#[tokio::test]
async fn mnt_of_what_is_no_directory_of_the_export_fails() {
    let server = Server::start(&[]);
    let client = connect(&server).await;
    let root = client.mount("/").await.unwrap();
    client.mkdir_p(&root, "a/b", 0o755).await.unwrap();
    client.create_file(&root, "file", 0o644).await.unwrap();
    let symlink = nfs3::nfs::SymlinkArgs {
        where_: dirop(&root, "link"),
        symlink: nfs3::nfs::SymlinkData3 {
            symlink_attributes: nfs3::nfs::Sattr3::default(),
            symlink_data: nfs3::nfs::NfsPath3(Bytes::from_static(b"a")),
        },
    };
    expect_ok(client.symlink(&symlink).await.unwrap(), "SYMLINK");

    let long = format!("/{}", "n".repeat(256));
    let cases: [(&str, Mountstat3); 10] = [
        ("/nope", Mountstat3::NoEnt),
        ("/a/nope", Mountstat3::NoEnt),
        ("/file", Mountstat3::NotDir),
        ("/file/x", Mountstat3::NotDir),
        ("/link", Mountstat3::NotDir),
        (&long, Mountstat3::NameTooLong),
        // `..` never climbs, not even when it would stay inside the export.
        ("/..", Mountstat3::Acces),
        ("/../etc", Mountstat3::Acces),
        ("/a/..", Mountstat3::Acces),
        ("/a/b/../../..", Mountstat3::Acces),
    ];
    for (path, status) in cases {
        assert_eq!(mnt(&client, path).await, MntRes::Fail(status), "MNT {path}");
    }
    // Failed mounts are not remembered.
    assert_eq!(client.dump().await.unwrap(), mount_list(&["/"]));
}

// ---------------------------------------------------------------------------------------
// DUMP, UMNT, UMNTALL
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn dump_lists_mounts_until_umnt_or_umntall() {
    let server = Server::start(&[]);
    let client = connect(&server).await;
    assert_eq!(
        client.dump().await.unwrap(),
        MountList::default(),
        "nothing mounted yet"
    );
    let root = client.mount("/").await.unwrap();
    client.mkdir_ok(&root, "a", 0o755).await.unwrap();
    assert_eq!(client.dump().await.unwrap(), mount_list(&["/"]));
    client.mount("/a").await.unwrap();
    client.mount("/a").await.unwrap();
    assert_eq!(
        client.dump().await.unwrap(),
        mount_list(&["/", "/a"]),
        "listed once"
    );

    client.umnt("/").await.unwrap();
    assert_eq!(client.dump().await.unwrap(), mount_list(&["/a"]));
    client
        .umnt("/never-mounted")
        .await
        .expect("UMNT of what is not mounted is fine");
    assert_eq!(client.dump().await.unwrap(), mount_list(&["/a"]));
    // UMNT is informational: the handle keeps working.
    assert!(client.getattr_ok(&root).await.is_ok());

    client.mount("/").await.unwrap();
    let other_connection = connect(&server).await;
    other_connection.umntall().await.unwrap();
    assert_eq!(
        client.dump().await.unwrap(),
        MountList::default(),
        "UMNTALL forgets the host"
    );
    client
        .umntall()
        .await
        .expect("UMNTALL with nothing mounted");
}

// ---------------------------------------------------------------------------------------
// EXPORT and several exports
// ---------------------------------------------------------------------------------------

fn export_node(path: &str, groups: &[&str]) -> ExportNode {
    ExportNode {
        ex_dir: DirPath(Bytes::copy_from_slice(path.as_bytes())),
        ex_groups: groups
            .iter()
            .map(|g| MntName(Bytes::copy_from_slice(g.as_bytes())))
            .collect(),
    }
}

#[tokio::test]
async fn export_lists_every_export_with_its_client_networks() {
    let server = Server::start(&[]);
    let client = connect(&server).await;
    let want = Exports(vec![export_node("/", &["0.0.0.0/0", "::/0"])]);
    assert_eq!(client.export().await.unwrap(), want);

    let server = start_with_config("export", THREE_EXPORTS);
    let client = connect(&server).await;
    let want = Exports(vec![
        export_node("/", &["127.0.0.0/8"]),
        export_node("/private", &["10.0.0.0/8"]),
        export_node("/b", &["0.0.0.0/0", "::/0"]),
    ]);
    assert_eq!(client.export().await.unwrap(), want);
}

#[tokio::test]
async fn mnt_by_a_client_outside_the_export_networks_is_acces() {
    let server = start_with_config("acces", THREE_EXPORTS);
    let client = connect(&server).await;
    for path in ["/private", "/private/", "/private/below"] {
        assert_eq!(
            mnt(&client, path).await,
            MntRes::Fail(Mountstat3::Acces),
            "MNT {path}"
        );
    }
    // The exports this client may use mount; "/privateer" is below "/", not "/private".
    let root = client.mount("/").await.expect("MNT /");
    client.mount("/b").await.expect("MNT /b");
    client.mkdir_ok(&root, "privateer", 0o755).await.unwrap();
    client.mount("/privateer").await.expect("MNT /privateer");
    assert_eq!(
        client.dump().await.unwrap(),
        mount_list(&["/", "/b", "/privateer"])
    );
}

#[tokio::test]
async fn each_export_is_its_own_file_system() {
    let server = start_with_config("separate", THREE_EXPORTS);
    let client = connect(&server).await;
    let first = client.mount("/").await.unwrap();
    let second = client.mount("/b").await.unwrap();
    let (a, b) = (
        client.getattr_ok(&first).await.unwrap(),
        client.getattr_ok(&second).await.unwrap(),
    );
    assert_ne!(a.fsid, b.fsid);
    // `..` of an export's root is that root: "/b" never reaches "/".
    assert_eq!(client.lookup_ok(&second, "..").await.unwrap().0, second);
    let listed = client.list_dir(&second).await.unwrap();
    assert_eq!(
        listed.iter().find(|e| &e.0[..] == b"..").map(|e| e.1),
        Some(b.fileid)
    );
    // Names in one are not in the other, and each export squashes as configured.
    let f = client.create_file(&first, "f", 0o644).await.unwrap();
    assert_eq!(
        client
            .lookup_ok(&second, "f")
            .await
            .unwrap_err()
            .nfs_status(),
        Some(Nfsstat3::NoEnt)
    );
    let g = client.create_file(&second, "g", 0o644).await.unwrap();
    assert_eq!(
        client.getattr_ok(&f).await.unwrap().uid,
        65_534,
        "\"/\" squashes root"
    );
    assert_eq!(
        client.getattr_ok(&g).await.unwrap().uid,
        0,
        "\"/b\" does not"
    );
    // A directory below the second export mounts as a directory of the second export.
    let sub = client.mkdir_ok(&second, "sub", 0o755).await.unwrap();
    assert_eq!(client.mount("/b/sub").await.unwrap(), sub);
}

#[tokio::test]
async fn rename_and_link_across_exports_are_xdev() {
    let server = start_with_config("xdev", THREE_EXPORTS);
    let client = connect(&server).await;
    let first = client.mount("/").await.unwrap();
    let second = client.mount("/b").await.unwrap();
    let f = client.create_file(&first, "f", 0o666).await.unwrap();
    let (a, b) = (
        client.getattr_ok(&first).await.unwrap(),
        client.getattr_ok(&second).await.unwrap(),
    );

    let args = RenameArgs {
        from: dirop(&first, "f"),
        to: dirop(&second, "f"),
    };
    let res = client.rename(&args).await.unwrap();
    let want = RenameFail {
        fromdir_wcc: unchanged(&a),
        todir_wcc: unchanged(&b),
    };
    assert_eq!(res, Res3::Fail(Nfsstat3::XDev, want));

    let args = LinkArgs {
        file: f.clone(),
        link: dirop(&second, "f"),
    };
    let res = client.link(&args).await.unwrap();
    let file_attributes = PostOpAttr(Some(client.getattr_ok(&f).await.unwrap()));
    let want = LinkFail {
        file_attributes,
        linkdir_wcc: unchanged(&b),
    };
    assert_eq!(res, Res3::Fail(Nfsstat3::XDev, want));

    assert_eq!(
        client.lookup_ok(&first, "f").await.unwrap().0,
        f,
        "nothing moved"
    );
    assert!(client
        .list_dir(&second)
        .await
        .unwrap()
        .iter()
        .all(|e| &e.0[..] != b"f"));
}

#[tokio::test]
async fn squashed_callers_take_the_configured_anonymous_identity() {
    let config = "[[export]]\npath = \"/\"\nsquash = \"all\"\nanon_uid = 4321\nanon_gid = 4322\n";
    let server = start_with_config("anon", config);
    let client = connect(&server).await;
    let root = client.mount("/").await.unwrap();
    let callers = [
        ("root", client.clone()),
        (
            "a user",
            client.clone().with_auth(&auth_sys(1000, 1000, &[5])),
        ),
        ("AUTH_NONE", client.clone().with_auth(&client::Auth::None)),
    ];
    for (i, (who, caller)) in callers.iter().enumerate() {
        let fh = caller
            .create_file(&root, format!("f{i}"), 0o644)
            .await
            .unwrap();
        let a = caller.getattr_ok(&fh).await.unwrap();
        assert_eq!((a.uid, a.gid), (4321, 4322), "{who}");
    }
}

/// A client connecting from `source` (any 127/8 address works on Linux loopback).
async fn connect_from(server: &Server, source: [u8; 4]) -> Nfs3Client {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind((std::net::Ipv4Addr::from(source), 0).into())
        .expect("bind");
    let stream = socket.connect(server.addr).await.expect("connect");
    let conn = client::RpcConnection::from_stream(stream).expect("connection");
    Nfs3Client::new(conn).with_timeout(Duration::from_secs(10))
}

#[tokio::test]
async fn nfs_calls_from_a_client_outside_the_export_networks_are_acces() {
    let config = "[[export]]\npath = \"/\"\nclients = [\"127.0.0.1\"]\n\n\
                  [[export]]\npath = \"/two\"\nclients = [\"127.0.0.2\"]\n";
    let server = start_with_config("nfs-acces", config);
    let two = connect_from(&server, [127, 0, 0, 2]).await;
    let one = connect_from(&server, [127, 0, 0, 1]).await;
    assert_eq!(mnt(&two, "/").await, MntRes::Fail(Mountstat3::Acces));
    assert_eq!(mnt(&one, "/two").await, MntRes::Fail(Mountstat3::Acces));
    let root = two.mount("/two").await.expect("MNT /two from 127.0.0.2");
    let file = two.create_file(&root, "f", 0o666).await.unwrap();
    two.write_all(&file, 0, b"secret", nfs3::nfs::StableHow::FileSync)
        .await
        .unwrap();
    let host = |h: &'static [u8]| MountBody {
        ml_hostname: MntName(Bytes::from_static(h)),
        ml_directory: DirPath(Bytes::from_static(b"/two")),
    };
    assert_eq!(
        one.dump().await.unwrap(),
        MountList(vec![host(b"127.0.0.2")])
    );
    let want = Exports(vec![
        export_node("/", &["127.0.0.1/32"]),
        export_node("/two", &["127.0.0.2/32"]),
    ]);
    assert_eq!(
        one.export().await.unwrap(),
        want,
        "single addresses are /32 networks"
    );

    // The handles mean nothing to a client the export does not list.
    let getattr = nfs3::nfs::GetattrArgs {
        object: file.clone(),
    };
    assert_eq!(
        one.getattr(&getattr).await.unwrap().status(),
        Nfsstat3::Acces
    );
    let read = nfs3::nfs::ReadArgs {
        file: file.clone(),
        offset: 0,
        count: 100,
    };
    assert_eq!(one.read(&read).await.unwrap().status(), Nfsstat3::Acces);
    let lookup = nfs3::nfs::LookupArgs {
        what: dirop(&root, "f"),
    };
    assert_eq!(one.lookup(&lookup).await.unwrap().status(), Nfsstat3::Acces);
    let err = one.create_file(&root, "g", 0o644).await.unwrap_err();
    assert_eq!(err.nfs_status(), Some(Nfsstat3::Acces));
    let err = one.list_dir(&root).await.unwrap_err();
    assert_eq!(err.nfs_status(), Some(Nfsstat3::Acces));
    let err = one.fsinfo_ok(&root).await.unwrap_err();
    assert_eq!(err.nfs_status(), Some(Nfsstat3::Acces));
    // Nothing changed, and the allowed client still reads its data.
    assert_eq!(two.read_all(&file).await.unwrap(), b"secret");
    assert_eq!(two.list_dir(&root).await.unwrap().len(), 3);
}
