//! Per-procedure tests of the real `granary` binary, read against RFC 1813: the
//! procedures that add, remove and move names. CREATE (section 3.3.8), MKDIR (3.3.9),
//! MKNOD (3.3.11), REMOVE (3.3.12), RMDIR (3.3.13), RENAME (3.3.14), LINK (3.3.15).

mod common;

use bytes::Bytes;
use client::{auth_sys, Nfs3Client};
use common::nfs::*;
use nfs3::nfs::{
    CreateArgs, CreateFail, CreateHow3, CreateOk, DeviceData3, Fattr3, Ftype3, GetattrArgs,
    LinkArgs, LinkFail, LinkOk, MkdirArgs, MknodArgs, MknodData3, NfsFh3, NfsPath3, Nfsstat3,
    PostOpAttr, PostOpFh3, RemoveArgs, RemoveFail, RemoveOk, RenameArgs, RenameFail, RenameOk,
    Res3, Sattr3, Specdata3, StableHow, SymlinkArgs, SymlinkData3,
};

/// The anonymous identity squashed callers get.
const NOBODY: u32 = 65_534;

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn as_user(client: &Nfs3Client, uid: u32, gid: u32) -> Nfs3Client {
    client.clone().with_auth(&auth_sys(uid, gid, &[]))
}

async fn status_of_getattr(client: &Nfs3Client, fh: &NfsFh3) -> Nfsstat3 {
    let args = GetattrArgs { object: fh.clone() };
    client.getattr(&args).await.expect("GETATTR call").status()
}

/// The status of LOOKUP `name` in `dir`.
async fn lookup_status(client: &Nfs3Client, dir: &NfsFh3, name: impl AsRef<[u8]>) -> Nfsstat3 {
    match client.lookup_ok(dir, name).await {
        Ok(_) => Nfsstat3::Ok,
        Err(e) => e.nfs_status().expect("an NFS status"),
    }
}

/// The names in `dir`, `.` and `..` left out.
async fn names(client: &Nfs3Client, dir: &NfsFh3) -> Vec<Bytes> {
    let listed = client.list_dir(dir).await.expect("READDIR");
    let real = |n: &Bytes| &n[..] != b"." && &n[..] != b"..";
    listed.into_iter().map(|(n, _, _)| n).filter(real).collect()
}

async fn create(
    client: &Nfs3Client,
    dir: &NfsFh3,
    name: impl AsRef<[u8]>,
    how: CreateHow3,
) -> Res3<CreateOk, CreateFail> {
    let args = CreateArgs {
        where_: dirop(dir, name),
        how,
    };
    client.create(&args).await.expect("CREATE call")
}

async fn mkdir(
    client: &Nfs3Client,
    dir: &NfsFh3,
    name: impl AsRef<[u8]>,
    mode: u32,
) -> Res3<CreateOk, CreateFail> {
    let args = MkdirArgs {
        where_: dirop(dir, name),
        attributes: mode_only(mode),
    };
    client.mkdir(&args).await.expect("MKDIR call")
}

async fn mknod(
    client: &Nfs3Client,
    dir: &NfsFh3,
    name: impl AsRef<[u8]>,
    what: MknodData3,
) -> Res3<CreateOk, CreateFail> {
    let args = MknodArgs {
        where_: dirop(dir, name),
        what,
    };
    client.mknod(&args).await.expect("MKNOD call")
}

async fn remove(
    client: &Nfs3Client,
    dir: &NfsFh3,
    name: impl AsRef<[u8]>,
) -> Res3<RemoveOk, RemoveFail> {
    let args = RemoveArgs {
        object: dirop(dir, name),
    };
    client.remove(&args).await.expect("REMOVE call")
}

async fn rmdir(
    client: &Nfs3Client,
    dir: &NfsFh3,
    name: impl AsRef<[u8]>,
) -> Res3<RemoveOk, RemoveFail> {
    let args = RemoveArgs {
        object: dirop(dir, name),
    };
    client.rmdir(&args).await.expect("RMDIR call")
}

async fn rename(
    client: &Nfs3Client,
    from_dir: &NfsFh3,
    from: impl AsRef<[u8]>,
    to_dir: &NfsFh3,
    to: impl AsRef<[u8]>,
) -> Res3<RenameOk, RenameFail> {
    let args = RenameArgs {
        from: dirop(from_dir, from),
        to: dirop(to_dir, to),
    };
    client.rename(&args).await.expect("RENAME call")
}

async fn link(
    client: &Nfs3Client,
    file: &NfsFh3,
    dir: &NfsFh3,
    name: impl AsRef<[u8]>,
) -> Res3<LinkOk, LinkFail> {
    let args = LinkArgs {
        file: file.clone(),
        link: dirop(dir, name),
    };
    client.link(&args).await.expect("LINK call")
}

/// Checks the reply of a create-like procedure that succeeded in `dir` (whose attributes
/// were `dir_before`): the handle is the name's, the attributes are the new object's, the
/// directory's wcc data spans the call. Returns the new handle and attributes.
async fn check_created(
    client: &Nfs3Client,
    dir: &NfsFh3,
    name: &str,
    dir_before: &Fattr3,
    res: Res3<CreateOk, CreateFail>,
) -> (NfsFh3, Fattr3) {
    let ok = expect_ok(res, name);
    let (fh, attrs) = client
        .lookup_ok(dir, name)
        .await
        .expect("LOOKUP of the new name");
    let dir_after = getattr(client, dir).await;
    let want = CreateOk {
        obj: PostOpFh3(Some(fh.clone())),
        obj_attributes: PostOpAttr(Some(attrs)),
        dir_wcc: wcc(dir_before, &dir_after),
    };
    assert_eq!(ok, want, "reply to making {name}");
    assert!(
        later(dir_after.mtime, dir_before.mtime),
        "a new name moves the directory's mtime"
    );
    (fh, attrs)
}

/// A failed create-like reply in `dir`, with attributes `dir_attrs` that did not change.
fn create_fail(status: Nfsstat3, dir_attrs: &Fattr3) -> Res3<CreateOk, CreateFail> {
    Res3::Fail(
        status,
        CreateFail {
            dir_wcc: wcc(dir_attrs, dir_attrs),
        },
    )
}

// ---------------------------------------------------------------------------------------
// CREATE
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn create_unchecked_makes_a_file_with_the_given_attributes() {
    let (_server, client, root) = start(&[]).await;
    let before = getattr(&client, &root).await;
    let set = Sattr3 {
        mode: Some(0o640),
        size: Some(10),
        ..Sattr3::default()
    };
    let res = create(&client, &root, "f", CreateHow3::Unchecked(set)).await;
    let (fh, a) = check_created(&client, &root, "f", &before, res).await;
    assert_eq!(
        (a.ftype, a.mode, a.size, a.nlink),
        (Ftype3::Reg, 0o640, 10, 1)
    );
    assert_eq!((a.uid, a.gid), (NOBODY, NOBODY), "root is squashed");
    assert_eq!(client.read_all(&fh).await.unwrap(), [0; 10]);
}

#[tokio::test]
async fn create_unchecked_on_an_existing_file_keeps_it_and_truncates_only_if_asked() {
    let (_server, client, root) = start(&[]).await;
    let fh = client.create_file(&root, "f", 0o644).await.unwrap();
    client
        .write_all(&fh, 0, b"contents", StableHow::FileSync)
        .await
        .unwrap();
    let dir_before = getattr(&client, &root).await;

    let res = create(&client, &root, "f", CreateHow3::Unchecked(mode_only(0o600))).await;
    let ok = expect_ok(res, "CREATE UNCHECKED over a file");
    let a = getattr(&client, &fh).await;
    assert_eq!(ok.obj, PostOpFh3(Some(fh.clone())), "the same file");
    assert_eq!(ok.obj_attributes, PostOpAttr(Some(a)));
    assert_eq!(
        (a.size, a.mode),
        (8, 0o644),
        "nothing changed: no size was given"
    );
    assert_eq!(ok.dir_wcc, wcc(&dir_before, &dir_before), "no new name");

    let set = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    let res = create(&client, &root, "f", CreateHow3::Unchecked(set)).await;
    let ok = expect_ok(res, "CREATE UNCHECKED size 0 over a file");
    assert_eq!(ok.obj, PostOpFh3(Some(fh.clone())));
    assert_eq!(getattr(&client, &fh).await.size, 0, "truncated");
    assert_eq!(client.read_all(&fh).await.unwrap(), b"");
    // A directory is never "the existing file".
    client.mkdir_ok(&root, "d", 0o755).await.unwrap();
    let dir_attrs = getattr(&client, &root).await;
    let res = create(
        &client,
        &root,
        "d",
        CreateHow3::Unchecked(Sattr3::default()),
    )
    .await;
    assert_eq!(res, create_fail(Nfsstat3::Exist, &dir_attrs));
}

/// RFC 1813 makes CREATE UNCHECKED "create or truncate", and truncation is a write: as
/// Linux nfsd (which checks it as a SETATTR of the size), granary needs write permission
/// on the existing file, or a user could empty anyone's file in a world-writable directory.
#[tokio::test]
async fn create_unchecked_does_not_let_another_user_truncate_a_file() {
    let (_server, client, root) = start(&[]).await;
    let owner = as_user(&client, 1000, 1000);
    let fh = owner.create_file(&root, "victim", 0o644).await.unwrap();
    owner
        .write_all(&fh, 0, b"precious", StableHow::FileSync)
        .await
        .unwrap();
    let other = as_user(&client, 1001, 1001);
    let set = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    let res = create(&other, &root, "victim", CreateHow3::Unchecked(set)).await;
    assert_eq!(res.status(), Nfsstat3::Acces, "{res:?}");
    assert_eq!(client.read_all(&fh).await.unwrap(), b"precious");
}

#[tokio::test]
async fn create_guarded_refuses_an_existing_name() {
    let (_server, client, root) = start(&[]).await;
    let before = getattr(&client, &root).await;
    let res = create(&client, &root, "f", CreateHow3::Guarded(mode_only(0o600))).await;
    let (fh, a) = check_created(&client, &root, "f", &before, res).await;
    assert_eq!(a.mode, 0o600);
    client
        .write_all(&fh, 0, b"kept", StableHow::FileSync)
        .await
        .unwrap();
    let dir_attrs = getattr(&client, &root).await;
    let set = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    let res = create(&client, &root, "f", CreateHow3::Guarded(set)).await;
    assert_eq!(res, create_fail(Nfsstat3::Exist, &dir_attrs));
    assert_eq!(client.read_all(&fh).await.unwrap(), b"kept");
}

#[tokio::test]
async fn create_exclusive_is_idempotent_for_its_verifier_only() {
    let (_server, client, root) = start(&[]).await;
    let verifier = *b"retry-me";
    let before = getattr(&client, &root).await;
    let res = create(&client, &root, "x", CreateHow3::Exclusive(verifier)).await;
    let (fh, a) = check_created(&client, &root, "x", &before, res).await;
    assert_eq!((a.ftype, a.size), (Ftype3::Reg, 0));

    // A retransmission (same verifier) gets the same file, not EXIST.
    let res = create(&client, &root, "x", CreateHow3::Exclusive(verifier)).await;
    let ok = expect_ok(res, "CREATE EXCLUSIVE again");
    assert_eq!(ok.obj, PostOpFh3(Some(fh.clone())));
    let again = ok.obj_attributes.0.expect("attributes");
    assert_eq!(again.fileid, a.fileid);
    // Another client's creation (another verifier) is refused, and so is a file that was
    // not made exclusively.
    let dir_attrs = getattr(&client, &root).await;
    let res = create(&client, &root, "x", CreateHow3::Exclusive(*b"someone!")).await;
    assert_eq!(res, create_fail(Nfsstat3::Exist, &dir_attrs));
    client.create_file(&root, "plain", 0o644).await.unwrap();
    let dir_attrs = getattr(&client, &root).await;
    let res = create(&client, &root, "plain", CreateHow3::Exclusive(verifier)).await;
    assert_eq!(res, create_fail(Nfsstat3::Exist, &dir_attrs));
    // The client then sets the attributes with SETATTR; a late retransmission still works.
    let args = nfs3::nfs::SetattrArgs {
        object: fh.clone(),
        new_attributes: mode_only(0o640),
        guard: nfs3::nfs::SattrGuard3(None),
    };
    expect_ok(
        client.setattr(&args).await.unwrap(),
        "SETATTR after EXCLUSIVE",
    );
    let res = create(&client, &root, "x", CreateHow3::Exclusive(verifier)).await;
    assert_eq!(
        expect_ok(res, "late retransmission").obj,
        PostOpFh3(Some(fh))
    );
}

/// Every procedure that makes a name refuses the same bad names, and makes nothing.
#[tokio::test]
async fn invalid_names_are_refused_by_every_procedure_that_makes_a_name() {
    let (_server, client, root) = start(&["--squash", "none"]).await;
    let dir = client.mkdir_ok(&root, "d", 0o777).await.unwrap();
    let existing = client.create_file(&root, "existing", 0o644).await.unwrap();
    let long = vec![b'n'; 256];
    let cases: [(&[u8], Nfsstat3); 7] = [
        (b"", Nfsstat3::Inval),
        (b".", Nfsstat3::Inval),
        (b"..", Nfsstat3::Inval),
        (b"a/b", Nfsstat3::Inval),
        (b"/", Nfsstat3::Inval),
        (b"nul\0byte", Nfsstat3::Inval),
        (&long, Nfsstat3::NameTooLong),
    ];
    for (name, want) in cases {
        let dir_attrs = getattr(&client, &dir).await;
        let fail = create_fail(want, &dir_attrs);
        let how = CreateHow3::Unchecked(mode_only(0o644));
        assert_eq!(
            create(&client, &dir, name, how).await,
            fail,
            "CREATE {name:?}"
        );
        let how = CreateHow3::Exclusive(*b"verifier");
        assert_eq!(
            create(&client, &dir, name, how).await,
            fail,
            "CREATE EXCLUSIVE {name:?}"
        );
        assert_eq!(
            mkdir(&client, &dir, name, 0o755).await,
            fail,
            "MKDIR {name:?}"
        );
        let fifo = MknodData3::Fifo(Sattr3::default());
        assert_eq!(
            mknod(&client, &dir, name, fifo).await,
            fail,
            "MKNOD {name:?}"
        );
        let args = SymlinkArgs {
            where_: dirop(&dir, name),
            symlink: SymlinkData3 {
                symlink_attributes: Sattr3::default(),
                symlink_data: NfsPath3(Bytes::from_static(b"target")),
            },
        };
        assert_eq!(
            client.symlink(&args).await.unwrap(),
            fail,
            "SYMLINK {name:?}"
        );
        let res = link(&client, &existing, &dir, name).await;
        assert_eq!(res.status(), want, "LINK {name:?}");
        let res = rename(&client, &root, "existing", &dir, name).await;
        assert_eq!(res.status(), want, "RENAME to {name:?}");
        assert_eq!(
            names(&client, &dir).await,
            Vec::<Bytes>::new(),
            "nothing made for {name:?}"
        );
    }
    // The longest allowed name works.
    let longest = vec![b'n'; 255];
    client
        .create_file(&dir, &longest, 0o644)
        .await
        .expect("a 255-byte name");
    assert_eq!(names(&client, &dir).await, [Bytes::from(longest.clone())]);
    // Any other bytes make a name, exactly as sent: case, blanks, dots, control and
    // non-UTF-8 bytes.
    let odd: [&[u8]; 7] = [
        b"F",
        b"f",
        b" spaced ",
        b"...",
        b"tab\there",
        b"\xff\xfe",
        b"caf\xc3\xa9",
    ];
    for name in odd {
        client.create_file(&dir, name, 0o644).await.expect("CREATE");
        assert_eq!(
            lookup_status(&client, &dir, name).await,
            Nfsstat3::Ok,
            "{name:?}"
        );
    }
    let mut listed = names(&client, &dir).await;
    listed.sort();
    let mut want: Vec<Bytes> = odd.iter().map(|n| Bytes::copy_from_slice(n)).collect();
    want.push(Bytes::from(longest));
    want.sort();
    assert_eq!(listed, want);
}

#[tokio::test]
async fn create_needs_write_and_search_permission_on_the_directory() {
    let (_server, client, root) = start(&[]).await;
    let owner = as_user(&client, 1000, 1000);
    let dir = owner.mkdir_ok(&root, "d", 0o755).await.unwrap();
    let other = as_user(&client, 1001, 1001);
    let dir_attrs = getattr(&client, &dir).await;
    let how = CreateHow3::Unchecked(Sattr3::default());
    assert_eq!(
        create(&other, &dir, "f", how).await,
        create_fail(Nfsstat3::Acces, &dir_attrs)
    );
    assert_eq!(
        mkdir(&other, &dir, "d", 0o755).await,
        create_fail(Nfsstat3::Acces, &dir_attrs)
    );
    // A file is no directory to create in.
    let file = owner.create_file(&dir, "f", 0o644).await.unwrap();
    let res = create(&owner, &file, "x", CreateHow3::Unchecked(Sattr3::default())).await;
    assert_eq!(res.status(), Nfsstat3::NotDir);
}

// ---------------------------------------------------------------------------------------
// MKDIR
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn mkdir_makes_an_empty_directory_and_raises_the_parent_link_count() {
    let (_server, client, root) = start(&[]).await;
    let before = getattr(&client, &root).await;
    assert_eq!(before.nlink, 2);
    let res = mkdir(&client, &root, "d", 0o750).await;
    let (fh, a) = check_created(&client, &root, "d", &before, res).await;
    assert_eq!((a.ftype, a.mode, a.nlink), (Ftype3::Dir, 0o750, 2));
    assert_eq!((a.uid, a.gid), (NOBODY, NOBODY));
    assert_eq!(
        getattr(&client, &root).await.nlink,
        3,
        "the new directory's `..`"
    );
    assert_eq!(names(&client, &fh).await, Vec::<Bytes>::new());
    mkdir(&client, &fh, "sub", 0o755).await;
    assert_eq!(getattr(&client, &fh).await.nlink, 3);

    let dir_attrs = getattr(&client, &root).await;
    assert_eq!(
        mkdir(&client, &root, "d", 0o755).await,
        create_fail(Nfsstat3::Exist, &dir_attrs)
    );
    client.create_file(&root, "f", 0o644).await.unwrap();
    let dir_attrs = getattr(&client, &root).await;
    assert_eq!(
        mkdir(&client, &root, "f", 0o755).await,
        create_fail(Nfsstat3::Exist, &dir_attrs)
    );
}

#[tokio::test]
async fn a_setgid_directory_gives_new_entries_its_group() {
    let (_server, client, root) = start(&[]).await;
    let owner = client.clone().with_auth(&auth_sys(1000, 100, &[]));
    let shared = owner.mkdir_ok(&root, "shared", 0o2777).await.unwrap();
    assert_eq!(getattr(&client, &shared).await.mode, 0o2777);
    let other = as_user(&client, 1001, 200);
    let file = other.create_file(&shared, "f", 0o644).await.unwrap();
    let a = getattr(&client, &file).await;
    assert_eq!((a.uid, a.gid), (1001, 100));
    let plain = other.create_file(&root, "g", 0o644).await.unwrap();
    assert_eq!(getattr(&client, &plain).await.gid, 200);
}

/// SERVER BUG (see the report): a directory made in a setgid directory does not get the
/// setgid bit, so group inheritance stops one level down. Linux (`inode_init_owner`:
/// "directories are special, and always inherit S_ISGID") and the BSDs (where every new
/// entry takes its directory's group) both keep the whole tree in the group.
#[tokio::test]
async fn a_setgid_directory_passes_its_setgid_bit_to_new_subdirectories() {
    let (_server, client, root) = start(&[]).await;
    let owner = as_user(&client, 1000, 100);
    let shared = owner.mkdir_ok(&root, "shared", 0o2777).await.unwrap();
    let other = as_user(&client, 1001, 200);
    let sub = other.mkdir_ok(&shared, "sub", 0o777).await.unwrap();
    let a = getattr(&client, &sub).await;
    assert_eq!((a.uid, a.gid), (1001, 100));
    assert_eq!(
        a.mode, 0o2777,
        "the new directory is setgid too, not {:o}",
        a.mode
    );
    let deeper = other.create_file(&sub, "f", 0o644).await.unwrap();
    assert_eq!(getattr(&client, &deeper).await.gid, 100, "two levels down");
}

/// SERVER BUG (see the report): a caller outside a setgid directory's group creates a
/// group-executable setgid file there, so it runs with a group the caller is not in.
/// Linux strips the setgid bit in that case (`inode_init_owner`, since CVE-2018-13405;
/// now `mode_strip_sgid`).
#[tokio::test]
async fn a_non_member_cannot_create_a_setgid_program_in_a_setgid_directory() {
    let (_server, client, root) = start(&[]).await;
    let owner = as_user(&client, 1000, 100);
    let shared = owner.mkdir_ok(&root, "shared", 0o2777).await.unwrap();
    let member = as_user(&client, 1002, 100);
    let kept = member
        .create_file(&shared, "member-prog", 0o2755)
        .await
        .unwrap();
    assert_eq!(getattr(&client, &kept).await.mode, 0o2755, "a member may");
    let outsider = as_user(&client, 1001, 200);
    let fh = outsider.create_file(&shared, "prog", 0o2755).await.unwrap();
    let a = getattr(&client, &fh).await;
    assert_eq!(a.gid, 100);
    assert_eq!(
        a.mode, 0o755,
        "setgid of a group the creator is not in: {:o}",
        a.mode
    );
}

// ---------------------------------------------------------------------------------------
// MKNOD
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn mknod_makes_fifos_and_sockets_for_anyone() {
    let (_server, client, root) = start(&[]).await;
    let user = as_user(&client, 1000, 1000);
    for (name, what, ftype) in [
        ("fifo", MknodData3::Fifo(mode_only(0o620)), Ftype3::Fifo),
        ("sock", MknodData3::Sock(mode_only(0o620)), Ftype3::Sock),
    ] {
        let before = getattr(&client, &root).await;
        let res = mknod(&user, &root, name, what).await;
        let (_, a) = check_created(&client, &root, name, &before, res).await;
        assert_eq!((a.ftype, a.mode, a.size), (ftype, 0o620, 0));
        assert_eq!((a.uid, a.gid, a.rdev), (1000, 1000, Specdata3::default()));
    }
}

fn device(major: u32, minor: u32) -> DeviceData3 {
    DeviceData3 {
        dev_attributes: mode_only(0o660),
        spec: Specdata3 {
            specdata1: major,
            specdata2: minor,
        },
    }
}

#[tokio::test]
async fn mknod_of_a_device_needs_root() {
    let (_server, client, root) = start(&[]).await;
    let user = as_user(&client, 1000, 1000);
    for (caller, who) in [(&user, "a user"), (&client, "squashed root")] {
        let dir_attrs = getattr(&client, &root).await;
        let fail = create_fail(Nfsstat3::Perm, &dir_attrs);
        assert_eq!(
            mknod(caller, &root, "c", MknodData3::Chr(device(1, 3))).await,
            fail,
            "{who}"
        );
        assert_eq!(
            mknod(caller, &root, "b", MknodData3::Blk(device(8, 1))).await,
            fail,
            "{who}"
        );
    }
    assert_eq!(names(&client, &root).await, Vec::<Bytes>::new());
}

#[tokio::test]
async fn mknod_of_a_device_as_unsquashed_root_keeps_its_numbers() {
    let (_server, client, root) = start(&["--squash", "none"]).await;
    for (name, what, ftype, rdev) in [
        ("null", MknodData3::Chr(device(1, 3)), Ftype3::Chr, (1, 3)),
        ("sda1", MknodData3::Blk(device(8, 1)), Ftype3::Blk, (8, 1)),
        (
            "big",
            MknodData3::Blk(device(u32::MAX, 7)),
            Ftype3::Blk,
            (u32::MAX, 7),
        ),
    ] {
        let before = getattr(&client, &root).await;
        let res = mknod(&client, &root, name, what).await;
        let (_, a) = check_created(&client, &root, name, &before, res).await;
        assert_eq!((a.ftype, a.mode, a.uid), (ftype, 0o660, 0));
        assert_eq!((a.rdev.specdata1, a.rdev.specdata2), rdev);
    }
}

#[tokio::test]
async fn mknod_of_a_regular_file_directory_or_symlink_is_badtype() {
    let (_server, client, root) = start(&["--squash", "none"]).await;
    for what in [MknodData3::Reg, MknodData3::Dir, MknodData3::Lnk] {
        let dir_attrs = getattr(&client, &root).await;
        let res = mknod(&client, &root, "x", what).await;
        assert_eq!(res, create_fail(Nfsstat3::BadType, &dir_attrs), "{what:?}");
    }
    assert_eq!(names(&client, &root).await, Vec::<Bytes>::new());
}

// ---------------------------------------------------------------------------------------
// REMOVE and RMDIR
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn remove_drops_the_name_and_the_file() {
    let (_server, client, root) = start(&[]).await;
    let fh = client.create_file(&root, "f", 0o644).await.unwrap();
    let before = getattr(&client, &root).await;
    let res = remove(&client, &root, "f").await;
    let after = getattr(&client, &root).await;
    assert_eq!(
        res,
        Res3::Ok(RemoveOk {
            dir_wcc: wcc(&before, &after)
        })
    );
    assert!(later(after.mtime, before.mtime));
    assert_eq!(lookup_status(&client, &root, "f").await, Nfsstat3::NoEnt);
    assert_eq!(status_of_getattr(&client, &fh).await, Nfsstat3::Stale);
    let res = remove(&client, &root, "f").await;
    assert_eq!(
        res,
        Res3::Fail(
            Nfsstat3::NoEnt,
            RemoveFail {
                dir_wcc: wcc(&after, &after)
            }
        )
    );
    // Special files and symlinks go with REMOVE too.
    client.create_file(&root, "g", 0o644).await.unwrap();
    mknod(&client, &root, "p", MknodData3::Fifo(Sattr3::default())).await;
    for name in ["g", "p"] {
        assert_eq!(
            remove(&client, &root, name).await.status(),
            Nfsstat3::Ok,
            "{name}"
        );
    }
    assert_eq!(names(&client, &root).await, Vec::<Bytes>::new());
}

#[tokio::test]
async fn remove_and_rmdir_each_refuse_the_other_kind() {
    let (_server, client, root) = start(&[]).await;
    client.mkdir_ok(&root, "d", 0o755).await.unwrap();
    client.create_file(&root, "f", 0o644).await.unwrap();
    let attrs = getattr(&client, &root).await;
    let fail = |status| {
        Res3::Fail(
            status,
            RemoveFail {
                dir_wcc: wcc(&attrs, &attrs),
            },
        )
    };
    // REMOVE of a directory: ISDIR, as Linux nfsd answers (its unlink says EISDIR).
    assert_eq!(remove(&client, &root, "d").await, fail(Nfsstat3::IsDir));
    assert_eq!(rmdir(&client, &root, "f").await, fail(Nfsstat3::NotDir));
    assert_eq!(
        rmdir(&client, &root, "missing").await,
        fail(Nfsstat3::NoEnt)
    );
    assert_eq!(rmdir(&client, &root, ".").await, fail(Nfsstat3::Inval));
    assert_eq!(rmdir(&client, &root, "..").await, fail(Nfsstat3::Inval));
    assert_eq!(remove(&client, &root, "..").await, fail(Nfsstat3::Inval));
    assert_eq!(getattr(&client, &root).await, attrs);
}

#[tokio::test]
async fn rmdir_removes_only_empty_directories() {
    let (_server, client, root) = start(&[]).await;
    let d = client.mkdir_ok(&root, "d", 0o755).await.unwrap();
    client.create_file(&d, "f", 0o644).await.unwrap();
    let attrs = getattr(&client, &root).await;
    assert_eq!(attrs.nlink, 3);
    let res = rmdir(&client, &root, "d").await;
    assert_eq!(
        res,
        Res3::Fail(
            Nfsstat3::NotEmpty,
            RemoveFail {
                dir_wcc: wcc(&attrs, &attrs)
            }
        )
    );
    client.remove_file(&d, "f").await.unwrap();
    let before = getattr(&client, &root).await;
    let res = rmdir(&client, &root, "d").await;
    let after = getattr(&client, &root).await;
    assert_eq!(
        res,
        Res3::Ok(RemoveOk {
            dir_wcc: wcc(&before, &after)
        })
    );
    assert_eq!(after.nlink, 2);
    assert_eq!(status_of_getattr(&client, &d).await, Nfsstat3::Stale);
}

#[tokio::test]
async fn removing_needs_write_permission_on_the_directory() {
    let (_server, client, root) = start(&[]).await;
    let owner = as_user(&client, 1000, 1000);
    let dir = owner.mkdir_ok(&root, "d", 0o755).await.unwrap();
    owner.create_file(&dir, "f", 0o666).await.unwrap();
    let other = as_user(&client, 1001, 1001);
    assert_eq!(remove(&other, &dir, "f").await.status(), Nfsstat3::Acces);
    assert_eq!(
        rename(&other, &dir, "f", &root, "g").await.status(),
        Nfsstat3::Acces
    );
    assert_eq!(lookup_status(&client, &dir, "f").await, Nfsstat3::Ok);
}

#[tokio::test]
async fn a_sticky_directory_lets_only_owners_remove_or_rename_entries() {
    let (_server, client, root) = start(&[]).await;
    let dir_owner = as_user(&client, 1000, 1000);
    let alice = as_user(&client, 1001, 1001);
    let bob = as_user(&client, 1002, 1002);
    let tmp = dir_owner.mkdir_ok(&root, "tmp", 0o1777).await.unwrap();
    assert_eq!(getattr(&client, &tmp).await.mode, 0o1777);
    for name in ["a1", "a2", "a3", "a4"] {
        alice.create_file(&tmp, name, 0o666).await.unwrap();
    }
    bob.create_file(&tmp, "b", 0o666).await.unwrap();

    let attrs = getattr(&client, &tmp).await;
    let refused = Res3::Fail(
        Nfsstat3::Perm,
        RemoveFail {
            dir_wcc: wcc(&attrs, &attrs),
        },
    );
    assert_eq!(
        remove(&bob, &tmp, "a1").await,
        refused,
        "bob removes alice's file"
    );
    assert_eq!(
        rename(&bob, &tmp, "a1", &tmp, "mine").await.status(),
        Nfsstat3::Perm
    );
    assert_eq!(
        rename(&bob, &tmp, "b", &tmp, "a1").await.status(),
        Nfsstat3::Perm,
        "replacing hers"
    );
    assert_eq!(
        remove(&client, &tmp, "a1").await.status(),
        Nfsstat3::Perm,
        "squashed root"
    );
    assert_eq!(getattr(&client, &tmp).await, attrs, "nothing changed");

    // Her own files, the directory's owner, and (unsquashed) root may.
    assert_eq!(remove(&alice, &tmp, "a1").await.status(), Nfsstat3::Ok);
    assert_eq!(
        rename(&alice, &tmp, "a2", &tmp, "a2-renamed")
            .await
            .status(),
        Nfsstat3::Ok
    );
    assert_eq!(remove(&dir_owner, &tmp, "a3").await.status(), Nfsstat3::Ok);
    let mut remaining: Vec<Bytes> = names(&client, &tmp).await;
    remaining.sort();
    assert_eq!(remaining, [&b"a2-renamed"[..], b"a4", b"b"]);
    // Without the sticky bit, anyone who may write the directory may remove.
    let open = dir_owner.mkdir_ok(&root, "open", 0o777).await.unwrap();
    alice.create_file(&open, "a", 0o666).await.unwrap();
    assert_eq!(remove(&bob, &open, "a").await.status(), Nfsstat3::Ok);
}

// ---------------------------------------------------------------------------------------
// RENAME
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn rename_over_an_existing_file_replaces_it() {
    let (_server, client, root) = start(&[]).await;
    let a = client.create_file(&root, "a", 0o644).await.unwrap();
    let b = client.create_file(&root, "b", 0o644).await.unwrap();
    client
        .write_all(&a, 0, b"AAA", StableHow::FileSync)
        .await
        .unwrap();
    client
        .write_all(&b, 0, b"B", StableHow::FileSync)
        .await
        .unwrap();
    let a_before = getattr(&client, &a).await;
    let before = getattr(&client, &root).await;
    let res = rename(&client, &root, "a", &root, "b").await;
    let after = getattr(&client, &root).await;
    let same_dir = wcc(&before, &after);
    assert_eq!(
        res,
        Res3::Ok(RenameOk {
            fromdir_wcc: same_dir,
            todir_wcc: same_dir
        })
    );

    let (found, attrs) = client.lookup_ok(&root, "b").await.unwrap();
    assert_eq!(found, a, "the name now means the moved file");
    assert_eq!(attrs.fileid, a_before.fileid);
    assert!(
        later(attrs.ctime, a_before.ctime),
        "a rename moves the file's ctime"
    );
    assert_eq!(client.read_all(&found).await.unwrap(), b"AAA");
    assert_eq!(lookup_status(&client, &root, "a").await, Nfsstat3::NoEnt);
    assert_eq!(
        status_of_getattr(&client, &b).await,
        Nfsstat3::Stale,
        "the replaced file is gone"
    );
    assert_eq!(after.nlink, before.nlink);
}

#[tokio::test]
async fn rename_between_directories_moves_dotdot_and_link_counts() {
    let (_server, client, root) = start(&[]).await;
    let d1 = client.mkdir_ok(&root, "d1", 0o755).await.unwrap();
    let d2 = client.mkdir_ok(&root, "d2", 0o755).await.unwrap();
    let sub = client.mkdir_ok(&d1, "sub", 0o755).await.unwrap();
    let (d1_before, d2_before) = (getattr(&client, &d1).await, getattr(&client, &d2).await);
    let res = rename(&client, &d1, "sub", &d2, "moved").await;
    let (d1_after, d2_after) = (getattr(&client, &d1).await, getattr(&client, &d2).await);
    let want = RenameOk {
        fromdir_wcc: wcc(&d1_before, &d1_after),
        todir_wcc: wcc(&d2_before, &d2_after),
    };
    assert_eq!(res, Res3::Ok(want));
    assert_eq!((d1_before.nlink, d1_after.nlink), (3, 2));
    assert_eq!((d2_before.nlink, d2_after.nlink), (2, 3));
    assert_eq!(client.lookup_ok(&d2, "moved").await.unwrap().0, sub);
    assert_eq!(client.lookup_ok(&sub, "..").await.unwrap().0, d2);
}

#[tokio::test]
async fn rename_of_a_directory_over_an_empty_one_replaces_it() {
    let (_server, client, root) = start(&[]).await;
    let a = client.mkdir_ok(&root, "a", 0o755).await.unwrap();
    client.create_file(&a, "inside", 0o644).await.unwrap();
    let empty = client.mkdir_ok(&root, "empty", 0o755).await.unwrap();
    let before = getattr(&client, &root).await;
    let res = rename(&client, &root, "a", &root, "empty").await;
    let after = getattr(&client, &root).await;
    let same_dir = wcc(&before, &after);
    assert_eq!(
        res,
        Res3::Ok(RenameOk {
            fromdir_wcc: same_dir,
            todir_wcc: same_dir
        })
    );
    assert_eq!(after.nlink, before.nlink - 1, "one subdirectory fewer");
    assert_eq!(
        client
            .lookup_path(&root, "empty/inside")
            .await
            .unwrap()
            .1
            .size,
        0
    );
    assert_eq!(status_of_getattr(&client, &empty).await, Nfsstat3::Stale);
}

#[tokio::test]
async fn rename_refuses_incompatible_targets_and_loops() {
    let (_server, client, root) = start(&[]).await;
    let a = client.mkdir_ok(&root, "a", 0o755).await.unwrap();
    let b = client.mkdir_ok(&a, "b", 0o755).await.unwrap();
    client.create_file(&b, "c", 0o644).await.unwrap();
    client.create_file(&root, "f", 0o644).await.unwrap();
    client.mkdir_ok(&root, "empty", 0o755).await.unwrap();
    let other = client.mkdir_ok(&root, "other", 0o755).await.unwrap();
    client.create_file(&other, "x", 0o644).await.unwrap();
    let attrs = getattr(&client, &root).await;
    let fail = |status| {
        let same = wcc(&attrs, &attrs);
        Res3::Fail(
            status,
            RenameFail {
                fromdir_wcc: same,
                todir_wcc: same,
            },
        )
    };
    // A non-empty directory is not replaced (RFC 1813 allows NOTEMPTY or EXIST).
    assert_eq!(
        rename(&client, &root, "empty", &root, "other").await,
        fail(Nfsstat3::NotEmpty)
    );
    assert_eq!(
        rename(&client, &root, "f", &root, "empty").await,
        fail(Nfsstat3::IsDir)
    );
    assert_eq!(
        rename(&client, &root, "empty", &root, "f").await,
        fail(Nfsstat3::NotDir)
    );
    assert_eq!(
        rename(&client, &root, "missing", &root, "x").await,
        fail(Nfsstat3::NoEnt)
    );
    // A directory never moves into its own subtree.
    let res = rename(&client, &root, "a", &b, "a").await;
    assert_eq!(res.status(), Nfsstat3::Inval, "into a descendant");
    let res = rename(&client, &root, "a", &a, "self").await;
    assert_eq!(res.status(), Nfsstat3::Inval, "into itself");
    assert_eq!(
        client.lookup_path(&root, "a/b/c").await.unwrap().1.ftype,
        Ftype3::Reg
    );
    assert_eq!(client.lookup_ok(&b, "..").await.unwrap().0, a);
    // The source must be a directory to rename from.
    let file = client.lookup_ok(&root, "f").await.unwrap().0;
    assert_eq!(
        rename(&client, &file, "x", &root, "y").await.status(),
        Nfsstat3::NotDir
    );
}

#[tokio::test]
async fn moving_a_directory_to_another_parent_needs_write_permission_on_it() {
    let (_server, client, root) = start(&[]).await;
    let user = as_user(&client, 1000, 1000);
    let target = user.mkdir_ok(&root, "target", 0o755).await.unwrap();
    let sealed = user.mkdir_ok(&root, "sealed", 0o555).await.unwrap();
    // Its `..` would change, and that is an entry of the directory itself.
    assert_eq!(
        rename(&user, &root, "sealed", &target, "sealed")
            .await
            .status(),
        Nfsstat3::Acces
    );
    // Renaming within the same parent leaves `..` alone.
    assert_eq!(
        rename(&user, &root, "sealed", &root, "renamed")
            .await
            .status(),
        Nfsstat3::Ok
    );
    assert_eq!(client.lookup_ok(&sealed, "..").await.unwrap().0, root);
}

#[tokio::test]
async fn rename_onto_another_link_of_the_same_file_changes_nothing() {
    let (_server, client, root) = start(&[]).await;
    let fh = client.create_file(&root, "a", 0o644).await.unwrap();
    expect_ok(link(&client, &fh, &root, "b").await, "LINK");
    let before = getattr(&client, &root).await;
    let res = rename(&client, &root, "a", &root, "b").await;
    let same = wcc(&before, &before);
    assert_eq!(
        res,
        Res3::Ok(RenameOk {
            fromdir_wcc: same,
            todir_wcc: same
        }),
        "POSIX: a no-op"
    );
    assert_eq!(getattr(&client, &fh).await.nlink, 2);
    let mut both = names(&client, &root).await;
    both.sort();
    assert_eq!(both, [&b"a"[..], b"b"]);
}

// ---------------------------------------------------------------------------------------
// LINK
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn link_adds_a_name_that_outlives_the_first() {
    let (_server, client, root) = start(&[]).await;
    let dir = client.mkdir_ok(&root, "d", 0o755).await.unwrap();
    let fh = client.create_file(&root, "f", 0o644).await.unwrap();
    client
        .write_all(&fh, 0, b"shared data", StableHow::FileSync)
        .await
        .unwrap();
    let file_before = getattr(&client, &fh).await;
    let dir_before = getattr(&client, &dir).await;
    let res = link(&client, &fh, &dir, "g").await;
    let file_after = getattr(&client, &fh).await;
    let dir_after = getattr(&client, &dir).await;
    let want = LinkOk {
        file_attributes: PostOpAttr(Some(file_after)),
        linkdir_wcc: wcc(&dir_before, &dir_after),
    };
    assert_eq!(res, Res3::Ok(want));
    assert_eq!(file_after.nlink, 2);
    assert!(
        later(file_after.ctime, file_before.ctime),
        "LINK moves the file's ctime"
    );
    assert_eq!(
        client.lookup_ok(&dir, "g").await.unwrap().0,
        fh,
        "one file, two names"
    );

    client.remove_file(&root, "f").await.unwrap();
    assert_eq!(getattr(&client, &fh).await.nlink, 1);
    let (g, _) = client.lookup_ok(&dir, "g").await.unwrap();
    assert_eq!(client.read_all(&g).await.unwrap(), b"shared data");
    client.remove_file(&dir, "g").await.unwrap();
    assert_eq!(status_of_getattr(&client, &fh).await, Nfsstat3::Stale);
}

#[tokio::test]
async fn link_refuses_directories_and_existing_names() {
    let (_server, client, root) = start(&[]).await;
    let dir = client.mkdir_ok(&root, "d", 0o755).await.unwrap();
    let fh = client.create_file(&root, "f", 0o644).await.unwrap();
    client.create_file(&root, "taken", 0o644).await.unwrap();
    let root_attrs = getattr(&client, &root).await;
    let fail = |status, file: &Fattr3| {
        let file_attributes = PostOpAttr(Some(*file));
        Res3::Fail(
            status,
            LinkFail {
                file_attributes,
                linkdir_wcc: wcc(&root_attrs, &root_attrs),
            },
        )
    };
    // ISDIR for a directory, as Linux nfsd answers.
    let dir_attrs = getattr(&client, &dir).await;
    assert_eq!(
        link(&client, &dir, &root, "dirlink").await,
        fail(Nfsstat3::IsDir, &dir_attrs)
    );
    let file_attrs = getattr(&client, &fh).await;
    assert_eq!(
        link(&client, &fh, &root, "taken").await,
        fail(Nfsstat3::Exist, &file_attrs)
    );
    assert_eq!(
        link(&client, &fh, &root, "f").await,
        fail(Nfsstat3::Exist, &file_attrs)
    );
    assert_eq!(getattr(&client, &fh).await.nlink, 1);
    // Into a file: NOTDIR.
    let res = link(&client, &fh, &fh, "x").await;
    assert_eq!(res.status(), Nfsstat3::NotDir);
}
