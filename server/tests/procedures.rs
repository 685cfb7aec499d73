//! Per-procedure tests of the real `granary` binary through granary's own client, read
//! against RFC 1813: each test sends whole requests and compares whole replies (status,
//! attributes, weak cache consistency data, handles).
//!
//! This file: NULL, GETATTR, SETATTR, LOOKUP, ACCESS, SYMLINK + READLINK, FSSTAT, FSINFO,
//! PATHCONF, and who a caller is (root squash, `--squash none|all`, AUTH_NONE). Data
//! procedures are in `procedures_io.rs`, entry procedures in `procedures_names.rs`,
//! listings in `procedures_readdir.rs`, MOUNT and exports in `procedures_mount.rs`,
//! concurrent clients in `procedures_concurrency.rs`.

mod common;

use bytes::Bytes;
use client::{auth_sys, Auth, Nfs3Client};
use common::nfs::*;
use nfs3::nfs::{
    AccessArgs, CreateOk, Fattr3, FsinfoArgs, FsinfoOk, FsstatArgs, Ftype3, GetattrArgs, GetattrOk,
    LookupArgs, LookupFail, LookupOk, MkdirArgs, NfsFh3, NfsPath3, Nfsstat3, Nfstime3,
    PathconfArgs, PathconfOk, PostOpAttr, PostOpFh3, ReadArgs, ReadlinkArgs, ReadlinkFail,
    ReadlinkOk, Res3, Sattr3, SattrGuard3, SetTime, SetattrArgs, SetattrFail, SetattrOk, Specdata3,
    StableHow, SymlinkArgs, SymlinkData3, ACCESS3_DELETE, ACCESS3_EXECUTE, ACCESS3_EXTEND,
    ACCESS3_LOOKUP, ACCESS3_MODIFY, ACCESS3_READ, FSF3_CANSETTIME, FSF3_HOMOGENEOUS, FSF3_LINK,
    FSF3_SYMLINK,
};

/// The anonymous identity squashed callers and AUTH_NONE get (Linux `nobody`).
const NOBODY: u32 = 65_534;

/// Every ACCESS3 bit.
const ACCESS_ALL: u32 = 0x3f;

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// The same connection, calling as AUTH_SYS `uid`/`gid` with supplementary `groups`.
fn as_user(client: &Nfs3Client, uid: u32, gid: u32, groups: &[u32]) -> Nfs3Client {
    client.clone().with_auth(&auth_sys(uid, gid, groups))
}

async fn getattr_status(client: &Nfs3Client, fh: &NfsFh3) -> Nfsstat3 {
    let args = GetattrArgs { object: fh.clone() };
    client.getattr(&args).await.expect("GETATTR call").status()
}

/// SETATTR without a guard.
async fn setattr(client: &Nfs3Client, fh: &NfsFh3, set: Sattr3) -> Res3<SetattrOk, SetattrFail> {
    let args = SetattrArgs {
        object: fh.clone(),
        new_attributes: set,
        guard: SattrGuard3(None),
    };
    client.setattr(&args).await.expect("SETATTR call")
}

async fn lookup(
    client: &Nfs3Client,
    dir: &NfsFh3,
    name: impl AsRef<[u8]>,
) -> Res3<LookupOk, LookupFail> {
    let args = LookupArgs {
        what: dirop(dir, name),
    };
    client.lookup(&args).await.expect("LOOKUP call")
}

async fn access(client: &Nfs3Client, fh: &NfsFh3, want: u32) -> u32 {
    let args = AccessArgs {
        object: fh.clone(),
        access: want,
    };
    let ok = expect_ok(client.access(&args).await.expect("ACCESS call"), "ACCESS");
    assert_eq!(
        ok.obj_attributes,
        PostOpAttr(Some(getattr(client, fh).await))
    );
    ok.access
}

async fn read_bytes(client: &Nfs3Client, fh: &NfsFh3, offset: u64, count: u32) -> Bytes {
    let args = ReadArgs {
        file: fh.clone(),
        offset,
        count,
    };
    expect_ok(client.read(&args).await.expect("READ call"), "READ").data
}

// ---------------------------------------------------------------------------------------
// NULL
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn null_procedures_answer_with_nothing() {
    let (_server, client, _root) = start(&[]).await;
    client.null().await.expect("NFS NULL");
    client.mount_null().await.expect("MOUNT NULL");
    as_user(&client, 1000, 1000, &[])
        .null()
        .await
        .expect("NULL as a user");
    client
        .clone()
        .with_auth(&Auth::None)
        .null()
        .await
        .expect("NULL as AUTH_NONE");
}

// ---------------------------------------------------------------------------------------
// GETATTR (RFC 1813 section 3.3.1)
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn getattr_of_the_root_is_an_empty_world_writable_directory() {
    let (_server, client, root) = start(&[]).await;
    let res = client
        .getattr(&GetattrArgs {
            object: root.clone(),
        })
        .await
        .unwrap();
    let Res3::Ok(GetattrOk { obj_attributes: a }) = res else {
        panic!("GETATTR of the root: {res:?}");
    };
    assert_eq!(a.ftype, Ftype3::Dir);
    assert_eq!(a.mode, 0o777, "the default export's root is world-writable");
    assert_eq!((a.uid, a.gid), (0, 0));
    assert_eq!(a.nlink, 2, "an empty directory: its name and its `.`");
    assert_eq!(a.rdev, Specdata3::default());
    assert_eq!(
        (a.atime, a.mtime),
        (a.ctime, a.ctime),
        "born at one instant"
    );
    // fileid names the file: the root's `.` and `..` carry it too.
    let listed = client.list_dir(&root).await.unwrap();
    let dots: Vec<(&[u8], u64)> = listed.iter().map(|(n, id, _)| (&n[..], *id)).collect();
    assert_eq!(dots, [(&b"."[..], a.fileid), (&b".."[..], a.fileid)]);
    // fsid names the file system: every file of the export shares it.
    let file = client.create_file(&root, "f", 0o644).await.unwrap();
    let f = getattr(&client, &file).await;
    assert_eq!(f.fsid, a.fsid);
    assert_ne!(f.fileid, a.fileid);
}

#[tokio::test]
async fn getattr_of_a_malformed_or_forged_handle_is_badhandle() {
    let (_server, client, root) = start(&[]).await;
    let mut flipped_mac = root.0.to_vec();
    *flipped_mac.last_mut().unwrap() ^= 1;
    let mut other_file = root.0.to_vec();
    other_file[19] ^= 0x40; // the file id, without re-signing
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("garbage", vec![0xab; 32]),
        ("truncated", root.0[..31].to_vec()),
        ("extended", [&root.0[..], &[0; 32]].concat()),
        ("bad MAC", flipped_mac),
        ("forged file id", other_file),
    ];
    for (what, raw) in cases {
        let fh = NfsFh3(Bytes::from(raw));
        assert_eq!(
            getattr_status(&client, &fh).await,
            Nfsstat3::BadHandle,
            "{what}"
        );
    }
    // The real handle still works.
    assert_eq!(getattr(&client, &root).await.ftype, Ftype3::Dir);
}

#[tokio::test]
async fn getattr_after_the_file_is_removed_is_stale() {
    let (_server, client, root) = start(&[]).await;
    let file = client.create_file(&root, "gone", 0o644).await.unwrap();
    let dir = client.mkdir_ok(&root, "gone-dir", 0o755).await.unwrap();
    assert_eq!(getattr_status(&client, &file).await, Nfsstat3::Ok);
    client.remove_file(&root, "gone").await.unwrap();
    client.rmdir_ok(&root, "gone-dir").await.unwrap();
    assert_eq!(getattr_status(&client, &file).await, Nfsstat3::Stale);
    assert_eq!(getattr_status(&client, &dir).await, Nfsstat3::Stale);
    // A name made again is a new file: the old handle stays stale.
    let again = client.create_file(&root, "gone", 0o644).await.unwrap();
    assert_ne!(again, file);
    assert_eq!(getattr_status(&client, &file).await, Nfsstat3::Stale);
    // Every procedure on a stale directory handle says so.
    let res = lookup(&client, &dir, "x").await;
    assert_eq!(res, Res3::Fail(Nfsstat3::Stale, LookupFail::default()));
}

// ---------------------------------------------------------------------------------------
// SETATTR (section 3.3.2)
// ---------------------------------------------------------------------------------------

/// Sends SETATTR `set` and checks the whole reply: `obj_wcc` holds the attributes from
/// before and after, and ctime moved. Returns the attributes after.
async fn setattr_checked(client: &Nfs3Client, fh: &NfsFh3, set: Sattr3) -> Fattr3 {
    let before = getattr(client, fh).await;
    let res = setattr(client, fh, set).await;
    let after = getattr(client, fh).await;
    assert_eq!(
        res,
        Res3::Ok(SetattrOk {
            obj_wcc: wcc(&before, &after)
        }),
        "SETATTR {set:?}"
    );
    assert!(
        later(after.ctime, before.ctime),
        "ctime moves on SETATTR {set:?}"
    );
    after
}

#[tokio::test]
async fn setattr_sets_mode_owner_size_and_times() {
    let (_server, client, root) = start(&["--squash", "none"]).await;
    let fh = client.create_file(&root, "f", 0o644).await.unwrap();

    let a = setattr_checked(&client, &fh, mode_only(0o4750)).await;
    assert_eq!(a.mode, 0o4750);
    let a2 = setattr_checked(
        &client,
        &fh,
        Sattr3 {
            uid: Some(1234),
            ..Sattr3::default()
        },
    )
    .await;
    assert_eq!((a2.uid, a2.gid), (1234, a.gid));
    assert_eq!(
        a2.mode, 0o750,
        "a file given away loses setuid, as on Linux"
    );
    let a = setattr_checked(
        &client,
        &fh,
        Sattr3 {
            gid: Some(5678),
            ..Sattr3::default()
        },
    )
    .await;
    assert_eq!((a.uid, a.gid), (1234, 5678));

    let a = setattr_checked(
        &client,
        &fh,
        Sattr3 {
            size: Some(4096),
            ..Sattr3::default()
        },
    )
    .await;
    assert_eq!(a.size, 4096);
    assert_eq!(
        a.mtime, a.ctime,
        "a size change is a data change: mtime moves with ctime"
    );

    let atime = Nfstime3 {
        seconds: 1_000_000_000,
        nseconds: 123,
    };
    let mtime = Nfstime3 {
        seconds: 1_100_000_000,
        nseconds: 456_789,
    };
    let set = Sattr3 {
        atime: SetTime::SetToClientTime(atime),
        mtime: SetTime::SetToClientTime(mtime),
        ..Sattr3::default()
    };
    let a = setattr_checked(&client, &fh, set).await;
    assert_eq!((a.atime, a.mtime), (atime, mtime));
    assert!(
        later(a.ctime, mtime),
        "ctime is the server's time, not the client's"
    );

    let set = Sattr3 {
        atime: SetTime::SetToServerTime,
        mtime: SetTime::SetToServerTime,
        ..Sattr3::default()
    };
    let a = setattr_checked(&client, &fh, set).await;
    assert_eq!(
        (a.atime, a.mtime),
        (a.ctime, a.ctime),
        "server time is the change's time"
    );
    assert!(later(a.mtime, mtime));

    // Everything at once, and an empty SETATTR changes nothing but is fine.
    let set = Sattr3 {
        mode: Some(0o600),
        uid: Some(7),
        gid: Some(8),
        size: Some(10),
        atime: SetTime::SetToClientTime(atime),
        mtime: SetTime::SetToClientTime(mtime),
    };
    let a = setattr_checked(&client, &fh, set).await;
    assert_eq!(
        (a.mode, a.uid, a.gid, a.size, a.atime, a.mtime),
        (0o600, 7, 8, 10, atime, mtime)
    );
    let res = setattr(&client, &fh, Sattr3::default()).await;
    assert_eq!(
        res,
        Res3::Ok(SetattrOk {
            obj_wcc: wcc(&a, &a)
        })
    );
}

#[tokio::test]
async fn setattr_guard_matches_ctime_or_changes_nothing() {
    let (_server, client, root) = start(&[]).await;
    let fh = client.create_file(&root, "f", 0o644).await.unwrap();
    let before = getattr(&client, &fh).await;

    let stale = Nfstime3 {
        seconds: before.ctime.seconds - 1,
        ..before.ctime
    };
    let args = SetattrArgs {
        object: fh.clone(),
        new_attributes: mode_only(0o600),
        guard: SattrGuard3(Some(stale)),
    };
    let res = client.setattr(&args).await.unwrap();
    let wcc_same = wcc(&before, &before);
    assert_eq!(
        res,
        Res3::Fail(Nfsstat3::NotSync, SetattrFail { obj_wcc: wcc_same })
    );
    assert_eq!(
        getattr(&client, &fh).await,
        before,
        "a refused SETATTR changes nothing"
    );

    let args = SetattrArgs {
        guard: SattrGuard3(Some(before.ctime)),
        ..args
    };
    let res = client.setattr(&args).await.unwrap();
    let after = getattr(&client, &fh).await;
    assert_eq!(
        res,
        Res3::Ok(SetattrOk {
            obj_wcc: wcc(&before, &after)
        })
    );
    assert_eq!(after.mode, 0o600);
    // The guard was the old ctime; it is stale now.
    let res = client.setattr(&args).await.unwrap();
    assert_eq!(res.status(), Nfsstat3::NotSync);
}

#[tokio::test]
async fn setattr_size_of_a_directory_or_past_the_limit_is_refused() {
    let (_server, client, root) = start(&["--squash", "none"]).await;
    let dir = client.mkdir_ok(&root, "d", 0o755).await.unwrap();
    let before = getattr(&client, &dir).await;
    let res = setattr(
        &client,
        &dir,
        Sattr3 {
            size: Some(0),
            ..Sattr3::default()
        },
    )
    .await;
    assert_eq!(
        res,
        Res3::Fail(
            Nfsstat3::IsDir,
            SetattrFail {
                obj_wcc: wcc(&before, &before)
            }
        )
    );

    let file = client.create_file(&root, "f", 0o644).await.unwrap();
    let before = getattr(&client, &file).await;
    let res = setattr(
        &client,
        &file,
        Sattr3 {
            size: Some(u64::MAX),
            ..Sattr3::default()
        },
    )
    .await;
    assert_eq!(
        res,
        Res3::Fail(
            Nfsstat3::FBig,
            SetattrFail {
                obj_wcc: wcc(&before, &before)
            }
        )
    );
    assert_eq!(getattr(&client, &file).await, before);
}

#[tokio::test]
async fn setattr_follows_posix_ownership_rules() {
    let (_server, client, root) = start(&[]).await;
    let owner = as_user(&client, 1000, 1000, &[50]);
    let other = as_user(&client, 1001, 1001, &[]);
    let fh = owner.create_file(&root, "f", 0o644).await.unwrap();
    let before = getattr(&client, &fh).await;
    assert_eq!((before.uid, before.gid), (1000, 1000));
    let refused = |status| {
        Res3::Fail(
            status,
            SetattrFail {
                obj_wcc: wcc(&before, &before),
            },
        )
    };

    // Only the owner changes the mode or sets times; squashed root is nobody's owner.
    assert_eq!(
        setattr(&other, &fh, mode_only(0o777)).await,
        refused(Nfsstat3::Perm)
    );
    assert_eq!(
        setattr(&client, &fh, mode_only(0o777)).await,
        refused(Nfsstat3::Perm)
    );
    let client_time = Sattr3 {
        mtime: SetTime::SetToClientTime(Nfstime3 {
            seconds: 5,
            nseconds: 0,
        }),
        ..Sattr3::default()
    };
    assert_eq!(
        setattr(&other, &fh, client_time).await,
        refused(Nfsstat3::Perm)
    );
    // Only root gives a file away, even its owner may not.
    let chown = Sattr3 {
        uid: Some(1001),
        ..Sattr3::default()
    };
    assert_eq!(setattr(&owner, &fh, chown).await, refused(Nfsstat3::Perm));
    // The owner may change the group only to one of its own groups.
    let chgrp_other = Sattr3 {
        gid: Some(60),
        ..Sattr3::default()
    };
    assert_eq!(
        setattr(&owner, &fh, chgrp_other).await,
        refused(Nfsstat3::Perm)
    );
    // Truncating needs write permission (0o644: others have none).
    let truncate = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    assert_eq!(
        setattr(&other, &fh, truncate).await,
        refused(Nfsstat3::Acces)
    );
    assert_eq!(
        getattr(&client, &fh).await,
        before,
        "no refused SETATTR changed anything"
    );

    let a = setattr_checked(
        &owner,
        &fh,
        Sattr3 {
            gid: Some(50),
            ..Sattr3::default()
        },
    )
    .await;
    assert_eq!((a.uid, a.gid), (1000, 50));
    let a = setattr_checked(&owner, &fh, mode_only(0o666)).await;
    assert_eq!(a.mode, 0o666);
    // With write permission anyone may truncate or touch to the server's time.
    let a = setattr_checked(
        &other,
        &fh,
        Sattr3 {
            size: Some(3),
            ..Sattr3::default()
        },
    )
    .await;
    assert_eq!(a.size, 3);
    let touch = Sattr3 {
        mtime: SetTime::SetToServerTime,
        ..Sattr3::default()
    };
    setattr_checked(&other, &fh, touch).await;
}

/// SERVER BUG (see the report): the owner of a file whose group it is not in sets the
/// setgid bit, making a program that runs with a group its owner does not have. POSIX
/// chmod: "if the group ID of the file does not match the effective group ID or one of
/// the supplementary group IDs ... S_ISGID shall be cleared"; Linux does so in
/// `setattr_copy`.
#[tokio::test]
async fn setattr_of_setgid_by_an_owner_outside_the_group_clears_it() {
    let (_server, client, root) = start(&[]).await;
    let dir_owner = as_user(&client, 1000, 100, &[]);
    let shared = dir_owner.mkdir_ok(&root, "shared", 0o2777).await.unwrap();
    let outsider = as_user(&client, 1001, 200, &[]);
    let fh = outsider.create_file(&shared, "prog", 0o755).await.unwrap();
    assert_eq!(
        getattr(&client, &fh).await.gid,
        100,
        "the directory's group"
    );
    let a = setattr_checked(&outsider, &fh, mode_only(0o2755)).await;
    assert_eq!(
        a.mode, 0o755,
        "setgid to a group the caller is not in: {:o}",
        a.mode
    );

    let member = as_user(&client, 1002, 100, &[]);
    let fh = member.create_file(&shared, "ok", 0o755).await.unwrap();
    let a = setattr_checked(&member, &fh, mode_only(0o2755)).await;
    assert_eq!(a.mode, 0o2755, "a member may");
}

#[tokio::test]
async fn setattr_size_grows_with_zeros_and_shrinking_drops_data() {
    let (_server, client, root) = start(&[]).await;
    let fh = client.create_file(&root, "f", 0o644).await.unwrap();
    client
        .write_all(&fh, 0, b"hello world", StableHow::FileSync)
        .await
        .unwrap();

    setattr_checked(
        &client,
        &fh,
        Sattr3 {
            size: Some(100),
            ..Sattr3::default()
        },
    )
    .await;
    let mut want = b"hello world".to_vec();
    want.resize(100, 0);
    assert_eq!(client.read_all(&fh).await.unwrap(), want);

    setattr_checked(
        &client,
        &fh,
        Sattr3 {
            size: Some(5),
            ..Sattr3::default()
        },
    )
    .await;
    assert_eq!(client.read_all(&fh).await.unwrap(), b"hello");
    // Growing again exposes zeros, not the bytes cut off before.
    setattr_checked(
        &client,
        &fh,
        Sattr3 {
            size: Some(11),
            ..Sattr3::default()
        },
    )
    .await;
    assert_eq!(
        read_bytes(&client, &fh, 0, 64).await,
        &b"hello\0\0\0\0\0\0"[..]
    );
}

// ---------------------------------------------------------------------------------------
// LOOKUP (section 3.3.3)
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn lookup_returns_the_handle_and_both_attributes() {
    let (_server, client, root) = start(&[]).await;
    let dir = client.mkdir_ok(&root, "d", 0o755).await.unwrap();
    let file = client.create_file(&dir, "f", 0o640).await.unwrap();
    let res = lookup(&client, &dir, "f").await;
    let want = LookupOk {
        object: file.clone(),
        obj_attributes: PostOpAttr(Some(getattr(&client, &file).await)),
        dir_attributes: PostOpAttr(Some(getattr(&client, &dir).await)),
    };
    assert_eq!(res, Res3::Ok(want));
    // Names are case-sensitive bytes.
    let res = lookup(&client, &dir, "F").await;
    assert_eq!(res.status(), Nfsstat3::NoEnt);
}

#[tokio::test]
async fn lookup_of_a_missing_name_is_noent_with_directory_attributes() {
    let (_server, client, root) = start(&[]).await;
    let res = lookup(&client, &root, "nothing").await;
    let dir_attributes = PostOpAttr(Some(getattr(&client, &root).await));
    assert_eq!(
        res,
        Res3::Fail(Nfsstat3::NoEnt, LookupFail { dir_attributes })
    );
}

#[tokio::test]
async fn lookup_of_dot_and_dotdot_never_leaves_the_export() {
    let (_server, client, root) = start(&[]).await;
    let a = client.mkdir_ok(&root, "a", 0o755).await.unwrap();
    let b = client.mkdir_ok(&a, "b", 0o755).await.unwrap();
    let handle = |res: Res3<LookupOk, LookupFail>| expect_ok(res, "LOOKUP").object;
    assert_eq!(handle(lookup(&client, &b, ".").await), b);
    assert_eq!(handle(lookup(&client, &b, "..").await), a);
    assert_eq!(handle(lookup(&client, &a, "..").await), root);
    assert_eq!(handle(lookup(&client, &root, ".").await), root);
    // The export root is its own parent.
    let res = lookup(&client, &root, "..").await;
    let root_attrs = PostOpAttr(Some(getattr(&client, &root).await));
    let want = LookupOk {
        object: root.clone(),
        obj_attributes: root_attrs,
        dir_attributes: root_attrs,
    };
    assert_eq!(res, Res3::Ok(want));
    // A subdirectory mounted directly is no new root: its `..` is its parent.
    let mounted = client.mount("/a/b").await.unwrap();
    assert_eq!(mounted, b);
    assert_eq!(handle(lookup(&client, &mounted, "..").await), a);
    assert_eq!(handle(lookup(&client, &a, "..").await), root);
}

#[tokio::test]
async fn lookup_refuses_bad_names_without_resolving_them() {
    let (_server, client, root) = start(&[]).await;
    let dir = client.mkdir_ok(&root, "d", 0o755).await.unwrap();
    client.create_file(&dir, "f", 0o644).await.unwrap();
    let dir_attributes = PostOpAttr(Some(getattr(&client, &root).await));
    let fail = |status| Res3::Fail(status, LookupFail { dir_attributes });

    assert_eq!(
        lookup(&client, &root, vec![b'n'; 255]).await,
        fail(Nfsstat3::NoEnt)
    );
    assert_eq!(
        lookup(&client, &root, vec![b'n'; 256]).await,
        fail(Nfsstat3::NameTooLong)
    );
    assert_eq!(
        lookup(&client, &root, vec![b'n'; 1024]).await,
        fail(Nfsstat3::NameTooLong)
    );
    // A name is one component: "d/f" exists as a path but is no name. granary says INVAL
    // (Linux nfsd says ACCES); what matters is that it never resolves through the slash.
    for bad in [&b"d/f"[..], b"/d", b"d/", b"", b"d\0f"] {
        assert_eq!(
            lookup(&client, &root, bad).await,
            fail(Nfsstat3::Inval),
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn lookup_in_a_file_is_notdir_and_needs_search_permission() {
    let (_server, client, root) = start(&[]).await;
    let file = client.create_file(&root, "f", 0o644).await.unwrap();
    let res = lookup(&client, &file, "x").await;
    assert_eq!(res.status(), Nfsstat3::NotDir);

    let owner = as_user(&client, 1000, 1000, &[]);
    let private = owner.mkdir_ok(&root, "private", 0o700).await.unwrap();
    owner.create_file(&private, "secret", 0o644).await.unwrap();
    assert_eq!(
        lookup(&owner, &private, "secret").await.status(),
        Nfsstat3::Ok
    );
    let other = as_user(&client, 1001, 1001, &[]);
    let dir_attributes = PostOpAttr(Some(getattr(&client, &private).await));
    let res = lookup(&other, &private, "secret").await;
    assert_eq!(
        res,
        Res3::Fail(Nfsstat3::Acces, LookupFail { dir_attributes })
    );
}

// ---------------------------------------------------------------------------------------
// ACCESS (section 3.3.4)
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn access_grants_owner_group_and_other_bits_of_a_file() {
    let (_server, client, root) = start(&[]).await;
    let owner = as_user(&client, 1000, 100, &[]);
    let rw = owner.create_file(&root, "rw-r-----", 0o640).await.unwrap();
    let rwx = owner.create_file(&root, "rwxr-x--x", 0o751).await.unwrap();
    let (r, m, e, x) = (
        ACCESS3_READ,
        ACCESS3_MODIFY,
        ACCESS3_EXTEND,
        ACCESS3_EXECUTE,
    );
    let group_member = as_user(&client, 1001, 100, &[]);
    let in_group_list = as_user(&client, 1002, 7, &[100]);
    let other = as_user(&client, 1003, 7, &[]);
    let cases: [(&str, &Nfs3Client, u32, u32); 5] = [
        ("owner", &owner, r | m | e, r | m | e | x),
        ("group", &group_member, r, r | x),
        ("supplementary group", &in_group_list, r, r | x),
        ("other", &other, 0, x),
        ("squashed root", &client, 0, x),
    ];
    for (who, caller, on_rw, on_rwx) in cases {
        // DELETE and LOOKUP mean nothing on a file: never granted.
        assert_eq!(
            access(caller, &rw, ACCESS_ALL).await,
            on_rw,
            "{who} on 0640"
        );
        assert_eq!(
            access(caller, &rwx, ACCESS_ALL).await,
            on_rwx,
            "{who} on 0751"
        );
    }
    // Only what was asked is answered.
    assert_eq!(
        access(&owner, &rwx, ACCESS3_READ | ACCESS3_DELETE).await,
        ACCESS3_READ
    );
    assert_eq!(access(&owner, &rwx, 0).await, 0);
}

#[tokio::test]
async fn access_grants_lookup_and_delete_on_directories() {
    let (_server, client, root) = start(&[]).await;
    let owner = as_user(&client, 1000, 100, &[]);
    let dir = owner.mkdir_ok(&root, "d", 0o750).await.unwrap();
    let (r, l) = (ACCESS3_READ, ACCESS3_LOOKUP);
    let all_but_execute = ACCESS_ALL & !ACCESS3_EXECUTE;
    assert_eq!(access(&owner, &dir, ACCESS_ALL).await, all_but_execute);
    assert_eq!(
        access(&as_user(&client, 1001, 100, &[]), &dir, ACCESS_ALL).await,
        r | l
    );
    assert_eq!(
        access(&as_user(&client, 1003, 7, &[]), &dir, ACCESS_ALL).await,
        0
    );
    assert_eq!(
        access(&client, &dir, ACCESS_ALL).await,
        0,
        "root is squashed to other"
    );
    // The root directory is 0777: everyone may change it.
    assert_eq!(access(&client, &root, ACCESS_ALL).await, all_but_execute);
}

#[tokio::test]
async fn access_for_unsquashed_root_needs_an_execute_bit_only() {
    let (_server, client, root) = start(&["--squash", "none"]).await;
    let user = as_user(&client, 1000, 1000, &[]);
    let dir = user.mkdir_ok(&root, "d", 0o700).await.unwrap();
    let file = user.create_file(&root, "f", 0o600).await.unwrap();
    let exe = user.create_file(&root, "x", 0o700).await.unwrap();
    let (r, m, e, x) = (
        ACCESS3_READ,
        ACCESS3_MODIFY,
        ACCESS3_EXTEND,
        ACCESS3_EXECUTE,
    );
    assert_eq!(access(&client, &dir, ACCESS_ALL).await, ACCESS_ALL & !x);
    assert_eq!(access(&client, &file, ACCESS_ALL).await, r | m | e);
    assert_eq!(access(&client, &exe, ACCESS_ALL).await, r | m | e | x);
}

#[tokio::test]
async fn read_only_export_grants_no_modify_extend_or_delete() {
    let (_server, client, root) = start(&["--read-only", "--squash", "none"]).await;
    let read_lookup = ACCESS3_READ | ACCESS3_LOOKUP;
    assert_eq!(access(&client, &root, ACCESS_ALL).await, read_lookup);
    assert_eq!(
        access(&as_user(&client, 5, 5, &[]), &root, ACCESS_ALL).await,
        read_lookup
    );
    // And the procedures that would change it say ROFS.
    let root_attrs = getattr(&client, &root).await;
    let res = setattr(&client, &root, mode_only(0o700)).await;
    let same = wcc(&root_attrs, &root_attrs);
    assert_eq!(
        res,
        Res3::Fail(Nfsstat3::RoFs, SetattrFail { obj_wcc: same })
    );
    let err = client.create_file(&root, "f", 0o644).await.unwrap_err();
    assert_eq!(err.nfs_status(), Some(Nfsstat3::RoFs));
    let err = client.mkdir_ok(&root, "d", 0o755).await.unwrap_err();
    assert_eq!(err.nfs_status(), Some(Nfsstat3::RoFs));
    let res = symlink(&client, &root, "l", b"target").await;
    assert_eq!(res.status(), Nfsstat3::RoFs);
    for err in [
        client.remove_file(&root, "x").await.unwrap_err(),
        client.rmdir_ok(&root, "x").await.unwrap_err(),
        client.rename_ok(&root, "x", &root, "y").await.unwrap_err(),
    ] {
        assert_eq!(err.nfs_status(), Some(Nfsstat3::RoFs), "{err:?}");
    }
    assert_eq!(getattr(&client, &root).await, root_attrs);
    // Reading is fine.
    assert_eq!(client.list_dir(&root).await.unwrap().len(), 2);
}

// ---------------------------------------------------------------------------------------
// SYMLINK and READLINK (sections 3.3.10 and 3.3.5)
// ---------------------------------------------------------------------------------------

async fn symlink(
    client: &Nfs3Client,
    dir: &NfsFh3,
    name: &str,
    target: &[u8],
) -> Res3<CreateOk, nfs3::nfs::CreateFail> {
    let args = SymlinkArgs {
        where_: dirop(dir, name),
        symlink: SymlinkData3 {
            symlink_attributes: Sattr3::default(),
            symlink_data: NfsPath3(Bytes::copy_from_slice(target)),
        },
    };
    client.symlink(&args).await.expect("SYMLINK call")
}

#[tokio::test]
async fn symlink_stores_the_target_and_readlink_returns_it() {
    let (_server, client, root) = start(&[]).await;
    let target = b"../some/where else";
    let dir_before = getattr(&client, &root).await;
    let res = symlink(&client, &root, "l", target).await;
    let ok = expect_ok(res.clone(), "SYMLINK");
    let fh = ok.obj.0.clone().expect("SYMLINK returns the handle");
    let attrs = getattr(&client, &fh).await;
    let dir_after = getattr(&client, &root).await;
    let want = CreateOk {
        obj: PostOpFh3(Some(fh.clone())),
        obj_attributes: PostOpAttr(Some(attrs)),
        dir_wcc: wcc(&dir_before, &dir_after),
    };
    assert_eq!(res, Res3::Ok(want));
    assert_eq!(
        (attrs.ftype, attrs.size, attrs.nlink),
        (Ftype3::Lnk, target.len() as u64, 1)
    );
    assert_eq!((attrs.uid, attrs.gid), (NOBODY, NOBODY));
    assert!(later(dir_after.mtime, dir_before.mtime));

    let res = client
        .readlink(&ReadlinkArgs {
            symlink: fh.clone(),
        })
        .await
        .unwrap();
    let want = ReadlinkOk {
        symlink_attributes: PostOpAttr(Some(attrs)),
        data: NfsPath3(Bytes::from_static(target)),
    };
    assert_eq!(res, Res3::Ok(want));
    // LOOKUP does not follow it.
    let (found, found_attrs) = client.lookup_ok(&root, "l").await.unwrap();
    assert_eq!((found, found_attrs), (fh, attrs));

    let longest = vec![b'x'; 4096];
    let res = symlink(&client, &root, "long", &longest).await;
    let fh = expect_ok(res, "SYMLINK of a 4096-byte target")
        .obj
        .0
        .unwrap();
    let res = client
        .readlink(&ReadlinkArgs { symlink: fh })
        .await
        .unwrap();
    assert_eq!(expect_ok(res, "READLINK").data.0, longest);
}

#[tokio::test]
async fn symlink_errors_and_readlink_of_other_types_is_inval() {
    let (_server, client, root) = start(&[]).await;
    symlink(&client, &root, "l", b"t").await;
    assert_eq!(
        symlink(&client, &root, "l", b"u").await.status(),
        Nfsstat3::Exist
    );
    assert_eq!(
        symlink(&client, &root, "empty", b"").await.status(),
        Nfsstat3::Inval
    );
    assert_eq!(
        client
            .lookup_ok(&root, "empty")
            .await
            .unwrap_err()
            .nfs_status(),
        Some(Nfsstat3::NoEnt)
    );

    let file = client.create_file(&root, "f", 0o644).await.unwrap();
    for fh in [file, root] {
        let res = client
            .readlink(&ReadlinkArgs {
                symlink: fh.clone(),
            })
            .await
            .unwrap();
        let symlink_attributes = PostOpAttr(Some(getattr(&client, &fh).await));
        assert_eq!(
            res,
            Res3::Fail(Nfsstat3::Inval, ReadlinkFail { symlink_attributes })
        );
    }
}

// ---------------------------------------------------------------------------------------
// FSSTAT, FSINFO, PATHCONF (sections 3.3.18 to 3.3.20)
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn fsstat_reports_the_cap_and_what_files_use() {
    let (_server, client, root) = start(&["--mem-capacity-bytes", "1048576"]).await;
    let fsstat = || async {
        let res = client
            .fsstat(&FsstatArgs {
                fsroot: root.clone(),
            })
            .await
            .unwrap();
        let ok = expect_ok(res, "FSSTAT");
        assert_eq!(
            ok.obj_attributes,
            PostOpAttr(Some(getattr(&client, &root).await))
        );
        assert_eq!(
            (ok.abytes, ok.afiles, ok.invarsec),
            (ok.fbytes, ok.ffiles, 0)
        );
        ok
    };
    // The cap counts metadata as well as data: 512 bytes per inode (the root's here), 192
    // plus the name per directory entry.
    let empty = fsstat().await;
    assert_eq!((empty.tbytes, empty.fbytes), (1 << 20, (1 << 20) - 512));
    assert!(empty.ffiles < empty.tfiles, "the root takes a file slot");

    let fh = client.create_file(&root, "f", 0o644).await.unwrap();
    let created = fsstat().await;
    assert_eq!(
        (created.fbytes, created.ffiles),
        (empty.fbytes - 512 - 193, empty.ffiles - 1)
    );
    // Data is held in 64 KiB chunks; a hole costs nothing. 100 bytes take one chunk, 64 KiB
    // not aligned to a chunk take two.
    client
        .write_all(&fh, 0, &[7; 100], StableHow::FileSync)
        .await
        .unwrap();
    client
        .write_all(&fh, (512 << 10) + 1000, &[7; 65536], StableHow::FileSync)
        .await
        .unwrap();
    let written = fsstat().await;
    assert_eq!(written.fbytes, created.fbytes - 3 * 65536);
    assert_eq!(getattr(&client, &fh).await.used, 3 * 65536);

    client.remove_file(&root, "f").await.unwrap();
    let removed = fsstat().await;
    assert_eq!(
        (removed.fbytes, removed.ffiles),
        (empty.fbytes, empty.ffiles)
    );
}

#[tokio::test]
async fn fsinfo_announces_transfer_sizes_and_properties() {
    let (_server, client, root) = start(&[]).await;
    let res = client
        .fsinfo(&FsinfoArgs {
            fsroot: root.clone(),
        })
        .await
        .unwrap();
    let want = FsinfoOk {
        obj_attributes: PostOpAttr(Some(getattr(&client, &root).await)),
        rtmax: 1 << 20,
        rtpref: 1 << 20,
        rtmult: 4096,
        wtmax: 1 << 20,
        wtpref: 1 << 20,
        wtmult: 4096,
        dtpref: 1 << 20,
        maxfilesize: i64::MAX as u64,
        time_delta: Nfstime3 {
            seconds: 0,
            nseconds: 1,
        },
        properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
    };
    assert_eq!(res, Res3::Ok(want));
}

#[tokio::test]
async fn pathconf_announces_name_limits() {
    let (_server, client, root) = start(&[]).await;
    let file = client.create_file(&root, "f", 0o644).await.unwrap();
    for fh in [root, file] {
        let res = client
            .pathconf(&PathconfArgs { object: fh.clone() })
            .await
            .unwrap();
        let want = PathconfOk {
            obj_attributes: PostOpAttr(Some(getattr(&client, &fh).await)),
            linkmax: 65_000,
            name_max: 255,
            no_trunc: true,
            chown_restricted: true,
            case_insensitive: false,
            case_preserving: true,
        };
        assert_eq!(res, Res3::Ok(want));
    }
}

// ---------------------------------------------------------------------------------------
// Who the caller is: squashing and AUTH_NONE
// ---------------------------------------------------------------------------------------

/// The owner of a file and a directory `caller` creates in the root.
async fn owner_of_new_files(caller: &Nfs3Client, root: &NfsFh3) -> [(u32, u32); 2] {
    let file = caller.create_file(root, "f", 0o644).await.expect("CREATE");
    let dir = caller.mkdir_ok(root, "d", 0o755).await.expect("MKDIR");
    let f = caller.getattr_ok(&file).await.unwrap();
    let d = caller.getattr_ok(&dir).await.unwrap();
    [(f.uid, f.gid), (d.uid, d.gid)]
}

#[tokio::test]
async fn root_is_squashed_to_nobody_by_default() {
    let (_server, client, root) = start(&[]).await;
    assert_eq!(
        owner_of_new_files(&client, &root).await,
        [(NOBODY, NOBODY); 2]
    );
    // Group 0 of an ordinary user is squashed too.
    let user = as_user(&client, 1000, 0, &[]);
    let fh = user.create_file(&root, "g", 0o644).await.unwrap();
    let a = getattr(&client, &fh).await;
    assert_eq!((a.uid, a.gid), (1000, NOBODY));
}

#[tokio::test]
async fn squash_none_keeps_root() {
    let (_server, client, root) = start(&["--squash", "none"]).await;
    assert_eq!(owner_of_new_files(&client, &root).await, [(0, 0); 2]);
}

#[tokio::test]
async fn squash_all_maps_every_user_to_nobody() {
    let (_server, client, root) = start(&["--squash", "all"]).await;
    let user = as_user(&client, 1000, 1000, &[]);
    assert_eq!(
        owner_of_new_files(&user, &root).await,
        [(NOBODY, NOBODY); 2]
    );
}

#[tokio::test]
async fn auth_none_callers_are_anonymous() {
    let (_server, client, root) = start(&["--squash", "none"]).await;
    let anonymous = client.clone().with_auth(&Auth::None);
    assert_eq!(
        owner_of_new_files(&anonymous, &root).await,
        [(NOBODY, NOBODY); 2]
    );
    // And get only what `other` gets.
    let private = as_user(&client, 1000, 1000, &[])
        .mkdir_ok(&root, "p", 0o700)
        .await
        .unwrap();
    assert_eq!(access(&anonymous, &private, ACCESS_ALL).await, 0);
    let args = MkdirArgs {
        where_: dirop(&private, "x"),
        attributes: mode_only(0o755),
    };
    let res = anonymous.mkdir(&args).await.unwrap();
    assert_eq!(res.status(), Nfsstat3::Acces);
    let args = MkdirArgs {
        where_: dirop(&private, "sub"),
        ..args
    };
    assert_eq!(
        client.mkdir(&args).await.unwrap().status(),
        Nfsstat3::Ok,
        "unsquashed root may"
    );
    // AUTH_NONE is anonymous on MOUNT too: the walk to "/p/sub" needs search permission
    // on "/p", which `other` lacks.
    assert_eq!(anonymous.mount("/").await.unwrap(), root);
    let err = anonymous.mount("/p/sub").await.unwrap_err();
    assert!(
        matches!(
            err,
            client::ClientError::Mount(nfs3::mount::Mountstat3::Acces)
        ),
        "{err:?}"
    );
    client.mount("/p/sub").await.expect("root may mount it");
}
