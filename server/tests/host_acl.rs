//! A host export acts as its caller: with granary run as root, the host kernel decides
//! every permission as the client's (squashed) AUTH_SYS uid, gid and groups, so POSIX
//! ACLs count both ways, a parent's default ACL and a set-gid directory shape what CREATE
//! and MKDIR make, and ACCESS tells the kernel's answer. Each case is checked in
//! granary's NFSv3 replies (granary's own client, AUTH_SYS users of the test's choosing)
//! on a tmpfs directory and an ext4 one, and once with libnfs-utils (`nfs-cat` with
//! `uid=`/`gid=` in the URL).
//!
//! These tests need root (granary switches identities only as root) and the `acl`
//! package (`setfacl`, `getfacl`). Run as another user they fail, saying so.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use client::Nfs3Client;
use common::nfs::{connect, dirop};
use common::Server;
use nfs3::nfs::{
    AccessArgs, NfsFh3, Nfsstat3, ReadArgs, RenameArgs, Res3, Sattr3, SattrGuard3, SetTime,
    SetattrArgs, StableHow, WriteArgs,
};

const ALICE: u32 = 1001;
const BOB: u32 = 1002;
const TEAM: u32 = 2000;

const READ: u32 = 0x01;
const LOOKUP: u32 = 0x02;
const MODIFY: u32 = 0x04;
const EXTEND: u32 = 0x08;
const DELETE: u32 = 0x10;
const EXECUTE: u32 = 0x20;

fn require_root() {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective uid.
    let euid = std::fs::metadata("/proc/self").map(|m| m.uid());
    assert!(
        euid.is_ok_and(|u| u == 0),
        "these tests check that granary, run as root, acts as each client's user on a host \
         export; run them as root (the CI does): sudo -E cargo test -p granary --test host_acl"
    );
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run {cmd} ({e}); install it: apt-get install acl libnfs-utils")
    });
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn setfacl(path: &Path, args: &[&str]) {
    let mut all: Vec<&str> = args.to_vec();
    all.push(path.to_str().unwrap());
    run("setfacl", &all);
}

fn getfacl(path: &Path) -> String {
    run("getfacl", &["-cp", path.to_str().unwrap()])
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn file(path: &Path, mode: u32, data: &[u8]) {
    std::fs::write(path, data).unwrap();
    chmod(path, mode);
}

fn dir(path: &Path, mode: u32) {
    std::fs::create_dir(path).unwrap();
    chmod(path, mode);
}

fn meta(path: &Path) -> (u32, u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).unwrap();
    (m.uid(), m.gid(), m.mode() & 0o7777)
}

/// A directory on tmpfs or ext4 served by `granary serve DIR` with the default root squash.
struct Export {
    base: PathBuf,
    server: Option<Server>,
}

impl Export {
    fn new(parent: &str, name: &str) -> Self {
        let base = PathBuf::from(parent).join(format!("granary-acl-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("export")).unwrap();
        chmod(&base, 0o755);
        chmod(&base.join("export"), 0o755);
        Self { base, server: None }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.base.join("export").join(rel)
    }

    fn start(&mut self) {
        let (e, s) = (self.path(""), self.base.join("state"));
        let args = [e.to_str().unwrap(), "--state-dir", s.to_str().unwrap()];
        self.server = Some(Server::start(&args));
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("started")
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        self.server.take();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// A client sending AUTH_SYS `uid`, `gid`, `groups`.
async fn user(server: &Server, uid: u32, gid: u32, groups: &[u32]) -> Nfs3Client {
    connect(server)
        .await
        .with_auth(&client::auth_sys(uid, gid, groups))
}

fn status<T, F>(res: Res3<T, F>) -> Nfsstat3 {
    match res {
        Res3::Ok(_) => Nfsstat3::Ok,
        Res3::Fail(s, _) => s,
    }
}

async fn lookup(c: &Nfs3Client, root: &NfsFh3, path: &str) -> NfsFh3 {
    c.lookup_path(root, path)
        .await
        .unwrap_or_else(|e| panic!("lookup {path}: {e:?}"))
        .0
}

async fn read(c: &Nfs3Client, fh: &NfsFh3) -> Nfsstat3 {
    let args = ReadArgs {
        file: fh.clone(),
        offset: 0,
        count: 4096,
    };
    status(c.read(&args).await.unwrap())
}

async fn write(c: &Nfs3Client, fh: &NfsFh3, data: &[u8]) -> Nfsstat3 {
    let args = WriteArgs {
        file: fh.clone(),
        offset: 0,
        count: data.len() as u32,
        stable: StableHow::FileSync,
        data: Bytes::copy_from_slice(data),
    };
    status(c.write(&args).await.unwrap())
}

async fn access(c: &Nfs3Client, fh: &NfsFh3, want: u32) -> u32 {
    let args = AccessArgs {
        object: fh.clone(),
        access: want,
    };
    match c.access(&args).await.unwrap() {
        Res3::Ok(ok) => ok.access,
        Res3::Fail(s, _) => panic!("ACCESS failed: {s:?}"),
    }
}

async fn setattr(c: &Nfs3Client, fh: &NfsFh3, set: Sattr3) -> Nfsstat3 {
    let args = SetattrArgs {
        object: fh.clone(),
        new_attributes: set,
        guard: SattrGuard3(None),
    };
    status(c.setattr(&args).await.unwrap())
}

async fn create(c: &Nfs3Client, dir: &NfsFh3, name: &str, mode: u32) -> Nfsstat3 {
    match c.create_file_guarded(dir, name, mode).await {
        Ok(_) => Nfsstat3::Ok,
        Err(e) => e.nfs_status().expect("an NFS status"),
    }
}

async fn remove(c: &Nfs3Client, dir: &NfsFh3, name: &str) -> Nfsstat3 {
    let args = nfs3::nfs::RemoveArgs {
        object: dirop(dir, name),
    };
    status(c.remove(&args).await.unwrap())
}

async fn rename(c: &Nfs3Client, dir: &NfsFh3, from: &str, to: &str) -> Nfsstat3 {
    let args = RenameArgs {
        from: dirop(dir, from),
        to: dirop(dir, to),
    };
    status(c.rename(&args).await.unwrap())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The files every case starts from, made on the host by root.
fn lay_out(x: &Export) {
    // 0644, but alice is denied everything by an ACL.
    file(&x.path("deny"), 0o644, b"denied to alice");
    setfacl(&x.path("deny"), &["-m", &format!("u:{ALICE}:---")]);
    // 0600 root's, but alice may read and write by an ACL.
    file(&x.path("grant"), 0o600, b"granted to alice");
    setfacl(&x.path("grant"), &["-m", &format!("u:{ALICE}:rw-")]);
    // 0666, but alice may only read.
    file(&x.path("wdeny"), 0o666, b"alice reads only");
    setfacl(&x.path("wdeny"), &["-m", &format!("u:{ALICE}:r--")]);
    // A world-writable directory in which alice may only read and search.
    dir(&x.path("rxonly"), 0o777);
    setfacl(&x.path("rxonly"), &["-m", &format!("u:{ALICE}:r-x")]);
    file(&x.path("rxonly/victim"), 0o666, b"");
    // A directory only alice (by ACL) may change.
    dir(&x.path("gdir"), 0o755);
    setfacl(&x.path("gdir"), &["-m", &format!("u:{ALICE}:rwx")]);
    // A default ACL: what is made inside gives bob rwx (within the mode's group bits).
    dir(&x.path("inherit"), 0o755);
    setfacl(
        &x.path("inherit"),
        &[
            "-m",
            &format!("u:{ALICE}:rwx"),
            "-d",
            "-m",
            &format!("u:{BOB}:rwx"),
        ],
    );
    // Group-only access, through a supplementary group.
    file(&x.path("team"), 0o640, b"team only");
    chown(&x.path("team"), 0, TEAM);
    dir(&x.path("teamdir"), 0o770);
    chown(&x.path("teamdir"), 0, TEAM);
    // A set-gid directory of the team.
    dir(&x.path("sgid"), 0o2775);
    chown(&x.path("sgid"), 0, TEAM);
    chmod(&x.path("sgid"), 0o2775);
    // Read by bob from a cached descriptor, then changed on the server.
    file(&x.path("shared"), 0o644, b"shared");
    file(&x.path("wshared"), 0o666, b"shared");
}

/// Every case on one export.
fn cases(parent: &str, name: &str) {
    require_root();
    let mut x = Export::new(parent, name);
    lay_out(&x);
    x.start();
    let server = x.server();
    let url = |path: &str, uid: u32| format!("{}&uid={uid}&gid={uid}", server.url_of(path));
    // libnfs-utils, a client nobody here wrote: the ACL denies alice, not bob.
    let denied = Command::new("nfs-cat")
        .arg(url("deny", ALICE))
        .output()
        .expect("nfs-cat (apt-get install libnfs-utils)");
    assert!(
        !denied.status.success(),
        "nfs-cat as alice read a file her ACL denies"
    );
    assert_eq!(run("nfs-cat", &[&url("deny", BOB)]), "denied to alice");
    assert_eq!(run("nfs-cat", &[&url("grant", ALICE)]), "granted to alice");
    let rt = runtime();
    rt.block_on(async {
        let alice = user(server, ALICE, ALICE, &[]).await;
        let bob = user(server, BOB, BOB, &[]).await;
        let root = alice.mount("/").await.unwrap();
        acl_denies_what_the_mode_allows(&x, &alice, &bob, &root).await;
        acl_grants_what_the_mode_denies(&x, &alice, &bob, &root).await;
        default_acl_is_inherited(&x, &alice, &bob, &root).await;
        groups_and_set_gid(&x, server, &root).await;
        setattr_is_the_kernels(&x, &alice, &root).await;
        server_side_changes_apply_to_the_next_call(&x, &bob, &root).await;
    });
}

async fn acl_denies_what_the_mode_allows(
    x: &Export,
    alice: &Nfs3Client,
    bob: &Nfs3Client,
    root: &NfsFh3,
) {
    let deny = lookup(alice, root, "deny").await;
    assert_eq!(
        read(alice, &deny).await,
        Nfsstat3::Acces,
        "READ denied by ACL"
    );
    assert_eq!(read(bob, &deny).await, Nfsstat3::Ok);
    assert_eq!(access(alice, &deny, READ | MODIFY | EXTEND).await, 0);
    assert_eq!(access(bob, &deny, READ | MODIFY | EXTEND).await, READ);
    let wdeny = lookup(alice, root, "wdeny").await;
    assert_eq!(
        write(alice, &wdeny, b"x").await,
        Nfsstat3::Acces,
        "WRITE denied"
    );
    assert_eq!(write(bob, &wdeny, b"b").await, Nfsstat3::Ok);
    assert_eq!(access(alice, &wdeny, READ | MODIFY | EXTEND).await, READ);
    assert_eq!(
        access(bob, &wdeny, READ | MODIFY | EXTEND | EXECUTE).await,
        READ | MODIFY | EXTEND
    );
    // A truncation is a write: refused by the same ACL.
    let trunc = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    assert_eq!(setattr(alice, &wdeny, trunc).await, Nfsstat3::Acces);
    // The directory's mode (0777) lets anyone change it; its ACL lets alice only look.
    let rx = lookup(alice, root, "rxonly").await;
    assert_eq!(
        create(alice, &rx, "a", 0o644).await,
        Nfsstat3::Acces,
        "CREATE"
    );
    assert_eq!(
        remove(alice, &rx, "victim").await,
        Nfsstat3::Acces,
        "REMOVE"
    );
    assert_eq!(rename(alice, &rx, "victim", "v2").await, Nfsstat3::Acces);
    assert_eq!(create(bob, &rx, "b", 0o644).await, Nfsstat3::Ok);
    assert_eq!(rename(bob, &rx, "b", "b2").await, Nfsstat3::Ok);
    assert_eq!(remove(bob, &rx, "b2").await, Nfsstat3::Ok);
    let all = READ | LOOKUP | MODIFY | EXTEND | DELETE;
    assert_eq!(
        access(alice, &rx, all).await,
        READ | LOOKUP,
        "ACCESS of rxonly"
    );
    assert_eq!(access(bob, &rx, all).await, all);
    assert!(x.path("rxonly/victim").exists());
}

async fn acl_grants_what_the_mode_denies(
    x: &Export,
    alice: &Nfs3Client,
    bob: &Nfs3Client,
    root: &NfsFh3,
) {
    let grant = lookup(alice, root, "grant").await;
    assert_eq!(
        read(alice, &grant).await,
        Nfsstat3::Ok,
        "READ granted by ACL"
    );
    assert_eq!(
        write(alice, &grant, b"G").await,
        Nfsstat3::Ok,
        "WRITE granted"
    );
    assert_eq!(read(bob, &grant).await, Nfsstat3::Acces);
    assert_eq!(write(bob, &grant, b"B").await, Nfsstat3::Acces);
    let want = READ | MODIFY | EXTEND | EXECUTE;
    assert_eq!(access(alice, &grant, want).await, READ | MODIFY | EXTEND);
    assert_eq!(access(bob, &grant, want).await, 0);
    assert_eq!(std::fs::read(x.path("grant")).unwrap(), b"Granted to alice");
    // The directory's mode (0755 root's) lets nobody else change it; its ACL lets alice.
    let gdir = lookup(alice, root, "gdir").await;
    assert_eq!(create(alice, &gdir, "mine", 0o640).await, Nfsstat3::Ok);
    assert_eq!(
        meta(&x.path("gdir/mine")),
        (ALICE, ALICE, 0o640),
        "owned by alice"
    );
    assert_eq!(rename(alice, &gdir, "mine", "ours").await, Nfsstat3::Ok);
    assert_eq!(create(bob, &gdir, "his", 0o644).await, Nfsstat3::Acces);
    assert_eq!(remove(bob, &gdir, "ours").await, Nfsstat3::Acces);
    assert_eq!(remove(alice, &gdir, "ours").await, Nfsstat3::Ok);
    let all = READ | LOOKUP | MODIFY | EXTEND | DELETE;
    assert_eq!(access(alice, &gdir, all).await, all);
    assert_eq!(access(bob, &gdir, all).await, READ | LOOKUP);
}

async fn default_acl_is_inherited(x: &Export, alice: &Nfs3Client, bob: &Nfs3Client, root: &NfsFh3) {
    let inherit = lookup(alice, root, "inherit").await;
    assert_eq!(create(alice, &inherit, "f", 0o664).await, Nfsstat3::Ok);
    let acl = getfacl(&x.path("inherit/f"));
    assert!(acl.contains(&format!("user:{BOB}:rwx")), "CREATE: {acl}");
    assert!(
        acl.contains("mask::rw-"),
        "the mode's group bits are the mask: {acl}"
    );
    assert_eq!(meta(&x.path("inherit/f")), (ALICE, ALICE, 0o664));
    let f = lookup(bob, root, "inherit/f").await;
    assert_eq!(
        write(bob, &f, b"bob").await,
        Nfsstat3::Ok,
        "bob by inherited ACL"
    );
    alice.mkdir_ok(&inherit, "d", 0o770).await.unwrap();
    let acl = getfacl(&x.path("inherit/d"));
    assert!(acl.contains(&format!("user:{BOB}:rwx")), "MKDIR: {acl}");
    assert!(
        acl.contains(&format!("default:user:{BOB}:rwx")),
        "MKDIR: {acl}"
    );
    assert_eq!(meta(&x.path("inherit/d")), (ALICE, ALICE, 0o770));
    let d = lookup(bob, root, "inherit/d").await;
    assert_eq!(create(bob, &d, "bobs", 0o600).await, Nfsstat3::Ok);
}

async fn groups_and_set_gid(x: &Export, server: &Server, root: &NfsFh3) {
    let member = user(server, ALICE, ALICE, &[TEAM]).await;
    let outsider = user(server, ALICE, ALICE, &[]).await;
    let team = lookup(&member, root, "team").await;
    assert_eq!(
        read(&member, &team).await,
        Nfsstat3::Ok,
        "by a supplementary group"
    );
    assert_eq!(read(&outsider, &team).await, Nfsstat3::Acces);
    assert_eq!(access(&member, &team, READ | MODIFY).await, READ);
    assert_eq!(access(&outsider, &team, READ | MODIFY).await, 0);
    let teamdir = lookup(&member, root, "teamdir").await;
    assert_eq!(create(&member, &teamdir, "t", 0o644).await, Nfsstat3::Ok);
    assert_eq!(
        create(&outsider, &teamdir, "u", 0o644).await,
        Nfsstat3::Acces
    );
    // A set-gid directory: what is made inside is the team's; a directory stays set-gid.
    let sgid = lookup(&member, root, "sgid").await;
    assert_eq!(create(&member, &sgid, "f", 0o644).await, Nfsstat3::Ok);
    assert_eq!(meta(&x.path("sgid/f")), (ALICE, TEAM, 0o644));
    member.mkdir_ok(&sgid, "d", 0o755).await.unwrap();
    assert_eq!(meta(&x.path("sgid/d")), (ALICE, TEAM, 0o2755));
}

async fn setattr_is_the_kernels(x: &Export, alice: &Nfs3Client, root: &NfsFh3) {
    let mode = |m: u32| Sattr3 {
        mode: Some(m),
        ..Sattr3::default()
    };
    let theirs = lookup(alice, root, "shared").await;
    assert_eq!(setattr(alice, &theirs, mode(0o666)).await, Nfsstat3::Perm);
    let gdir = lookup(alice, root, "gdir").await;
    assert_eq!(create(alice, &gdir, "own", 0o600).await, Nfsstat3::Ok);
    let own = lookup(alice, root, "gdir/own").await;
    assert_eq!(setattr(alice, &own, mode(0o640)).await, Nfsstat3::Ok);
    let give = Sattr3 {
        uid: Some(BOB),
        ..Sattr3::default()
    };
    assert_eq!(
        setattr(alice, &own, give).await,
        Nfsstat3::Perm,
        "chown away"
    );
    let to_group = |gid: u32| Sattr3 {
        gid: Some(gid),
        ..Sattr3::default()
    };
    assert_eq!(setattr(alice, &own, to_group(TEAM)).await, Nfsstat3::Perm);
    let member = alice
        .clone()
        .with_auth(&client::auth_sys(ALICE, ALICE, &[TEAM]));
    assert_eq!(setattr(&member, &own, to_group(TEAM)).await, Nfsstat3::Ok);
    assert_eq!(meta(&x.path("gdir/own")), (ALICE, TEAM, 0o640));
    // Times: both "now" (what `touch` sends) needs write permission (the ACL gives it on
    // `grant`); a given time needs ownership.
    let grant = lookup(alice, root, "grant").await;
    let now = Sattr3 {
        atime: SetTime::SetToServerTime,
        mtime: SetTime::SetToServerTime,
        ..Sattr3::default()
    };
    assert_eq!(setattr(alice, &grant, now).await, Nfsstat3::Ok);
    let given = Sattr3 {
        mtime: SetTime::SetToClientTime(nfs3::nfs::Nfstime3 {
            seconds: 1,
            nseconds: 0,
        }),
        ..Sattr3::default()
    };
    assert_eq!(setattr(alice, &grant, given).await, Nfsstat3::Perm);
}

async fn server_side_changes_apply_to_the_next_call(x: &Export, bob: &Nfs3Client, root: &NfsFh3) {
    let shared = lookup(bob, root, "shared").await;
    assert_eq!(read(bob, &shared).await, Nfsstat3::Ok, "opened, now cached");
    chmod(&x.path("shared"), 0o600);
    assert_eq!(
        read(bob, &shared).await,
        Nfsstat3::Acces,
        "chmod applies at once"
    );
    setfacl(&x.path("shared"), &["-m", &format!("u:{BOB}:r--")]);
    assert_eq!(
        read(bob, &shared).await,
        Nfsstat3::Ok,
        "setfacl applies at once"
    );
    setfacl(&x.path("shared"), &["-m", &format!("u:{BOB}:---")]);
    assert_eq!(read(bob, &shared).await, Nfsstat3::Acces);
    let wshared = lookup(bob, root, "wshared").await;
    assert_eq!(write(bob, &wshared, b"1").await, Nfsstat3::Ok);
    chmod(&x.path("wshared"), 0o644);
    assert_eq!(write(bob, &wshared, b"2").await, Nfsstat3::Acces);
    assert_eq!(std::fs::read(x.path("wshared")).unwrap(), b"1hared");
}

#[test]
fn acls_decide_on_tmpfs() {
    cases("/dev/shm", "tmpfs");
}

#[test]
fn acls_decide_on_ext4() {
    let parent = std::env::temp_dir();
    cases(parent.to_str().unwrap(), "disk");
}
