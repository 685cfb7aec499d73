//! `vfs::Export` policy over the mem backend: what the export layer adds on top of storage
//! (permissions, sticky directories, set-id clearing, squashing, never leaving the root).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use granary_backend_mem::{MemConfig, MemFs};
use gtime::{ManualClock, Timestamp};
use vfs::{
    CreateMode, Cred, Export, ExportId, ExportOptions, FileId, FsError, Name, SetAttr, SpecialFile,
    Squash, Stability,
};

fn export(read_only: bool) -> Export {
    let clock = Arc::new(ManualClock::new(Timestamp {
        seconds: 1_700_000_000,
        nanos: 0,
    }));
    let fs = MemFs::new(MemConfig::default(), clock);
    let options = ExportOptions {
        read_only,
        squash: Squash::None,
        ..Default::default()
    };
    Export::new(ExportId(1), 1, "/".into(), options, Arc::new(fs))
}

fn user(uid: u32) -> Cred {
    Cred {
        uid,
        gid: uid,
        groups: vec![],
    }
}

fn name(s: &str) -> Name {
    Name::new(Bytes::copy_from_slice(s.as_bytes())).unwrap()
}

fn file(e: &Export, cred: &Cred, dir: FileId, n: &str, mode: u32) -> FileId {
    let attrs = SetAttr {
        mode: Some(mode),
        ..Default::default()
    };
    e.create(cred, dir, &name(n), &CreateMode::Guarded(attrs))
        .unwrap()
        .attr
        .fileid
}

fn chmod(e: &Export, cred: &Cred, id: FileId, mode: u32) {
    e.setattr(
        cred,
        id,
        &SetAttr {
            mode: Some(mode),
            ..Default::default()
        },
        None,
    )
    .unwrap();
}

#[test]
fn sticky_directory_protects_other_users_files() {
    let e = export(false);
    let root = Cred::root();
    let tmp = e
        .mkdir(
            &root,
            e.root(),
            &name("tmp"),
            &SetAttr {
                mode: Some(0o1777),
                ..Default::default()
            },
        )
        .unwrap()
        .attr
        .fileid;
    file(&e, &user(1), tmp, "mine", 0o644);
    assert_eq!(e.remove(&user(2), tmp, &name("mine")), Err(FsError::Perm));
    assert_eq!(
        e.rename(&user(2), tmp, &name("mine"), tmp, &name("stolen")),
        Err(FsError::Perm)
    );
    e.remove(&user(1), tmp, &name("mine")).unwrap();
}

#[test]
fn unchecked_create_cannot_truncate_a_file_the_caller_may_not_write() {
    let e = export(false);
    let root = e.root();
    chmod(&e, &Cred::root(), root, 0o777);
    let id = file(&e, &user(1), root, "f", 0o644);
    e.write(&user(1), id, 0, b"precious", Stability::FileSync)
        .unwrap();
    let truncate = CreateMode::Unchecked(SetAttr {
        size_bytes: Some(0),
        ..Default::default()
    });
    assert_eq!(
        e.create(&user(2), root, &name("f"), &truncate),
        Err(FsError::Access)
    );
    assert_eq!(e.getattr(id).unwrap().size_bytes, 8);
    assert_eq!(
        e.create(&user(1), root, &name("f"), &truncate)
            .map(|c| c.attr.fileid),
        Ok(id)
    );
    assert_eq!(e.getattr(id).unwrap().size_bytes, 0);
}

#[test]
fn writes_and_chown_clear_set_id_bits() {
    let e = export(false);
    let root = e.root();
    let id = file(&e, &Cred::root(), root, "prog", 0o6777);
    e.write(&user(5), id, 0, b"x", Stability::Unstable).unwrap();
    assert_eq!(e.getattr(id).unwrap().mode, 0o777);
    chmod(&e, &Cred::root(), id, 0o4755);
    e.setattr(
        &Cred::root(),
        id,
        &SetAttr {
            uid: Some(7),
            ..Default::default()
        },
        None,
    )
    .unwrap();
    let attr = e.getattr(id).unwrap();
    assert_eq!((attr.uid, attr.mode), (7, 0o755));
}

#[test]
fn ownership_rules_of_setattr() {
    let e = export(false);
    let root = e.root();
    chmod(&e, &Cred::root(), root, 0o777);
    let id = file(&e, &user(1), root, "f", 0o644);
    let set = |cred: &Cred, s: SetAttr| e.setattr(cred, id, &s, None).map(|_| ());
    assert_eq!(
        set(
            &user(2),
            SetAttr {
                mode: Some(0o777),
                ..Default::default()
            }
        ),
        Err(FsError::Perm)
    );
    assert_eq!(
        set(
            &user(1),
            SetAttr {
                uid: Some(2),
                ..Default::default()
            }
        ),
        Err(FsError::Perm)
    );
    let member = Cred {
        uid: 1,
        gid: 1,
        groups: vec![50],
    };
    assert_eq!(
        set(
            &member,
            SetAttr {
                gid: Some(50),
                ..Default::default()
            }
        ),
        Ok(())
    );
    assert_eq!(
        set(
            &member,
            SetAttr {
                gid: Some(51),
                ..Default::default()
            }
        ),
        Err(FsError::Perm)
    );
    assert_eq!(
        set(
            &user(2),
            SetAttr {
                size_bytes: Some(0),
                ..Default::default()
            }
        ),
        Err(FsError::Access)
    );
}

#[test]
fn owner_may_read_and_write_after_chmod_000() {
    let e = export(false);
    let root = e.root();
    chmod(&e, &Cred::root(), root, 0o777);
    let id = file(&e, &user(1), root, "f", 0o600);
    e.write(&user(1), id, 0, b"abc", Stability::FileSync)
        .unwrap();
    chmod(&e, &user(1), id, 0o000);
    let mut data = BytesMut::new();
    let eof = e.read_into(&user(1), id, 0, 10, &mut data).unwrap().eof;
    assert_eq!((&data[..], eof), (&b"abc"[..], true));
    data.clear();
    assert_eq!(
        e.read_into(&user(2), id, 0, 10, &mut data),
        Err(FsError::Access)
    );
    assert!(data.is_empty(), "a refused read appends nothing");
}

#[test]
fn setgid_directory_passes_its_group_on() {
    let e = export(false);
    let root = Cred::root();
    let dir = e
        .mkdir(
            &root,
            e.root(),
            &name("shared"),
            &SetAttr {
                mode: Some(0o2777),
                gid: Some(40),
                ..Default::default()
            },
        )
        .unwrap()
        .attr
        .fileid;
    e.setattr(
        &root,
        dir,
        &SetAttr {
            gid: Some(40),
            ..Default::default()
        },
        None,
    )
    .unwrap();
    let id = file(&e, &user(3), dir, "f", 0o644);
    let attr = e.getattr(id).unwrap();
    assert_eq!((attr.uid, attr.gid), (3, 40));
}

#[test]
fn device_nodes_need_root_and_fifos_do_not() {
    let e = export(false);
    let root = e.root();
    chmod(&e, &Cred::root(), root, 0o777);
    let dev = SpecialFile::CharDevice(vfs::DeviceNumber { major: 1, minor: 3 });
    assert_eq!(
        e.mknod(&user(1), root, &name("null"), dev, &SetAttr::default()),
        Err(FsError::Perm)
    );
    assert!(e
        .mknod(&Cred::root(), root, &name("null"), dev, &SetAttr::default())
        .is_ok());
    assert!(e
        .mknod(
            &user(1),
            root,
            &name("fifo"),
            SpecialFile::Fifo,
            &SetAttr::default()
        )
        .is_ok());
}

#[test]
fn lookup_never_leaves_the_export_and_search_permission_applies() {
    let e = export(false);
    let root = e.root();
    assert_eq!(
        e.lookup(&user(1), root, b"..").map(|f| f.attr.fileid),
        Ok(root)
    );
    assert_eq!(
        e.lookup(&user(1), root, b".").map(|f| f.attr.fileid),
        Ok(root)
    );
    let dir = e
        .mkdir(
            &Cred::root(),
            root,
            &name("d"),
            &SetAttr {
                mode: Some(0o700),
                ..Default::default()
            },
        )
        .unwrap()
        .attr
        .fileid;
    assert_eq!(e.lookup(&user(1), dir, b"."), Err(FsError::Access));
    assert_eq!(
        e.lookup(&Cred::root(), dir, b"..").map(|f| f.attr.fileid),
        Ok(root)
    );
    assert_eq!(e.lookup(&user(1), root, b"a/b"), Err(FsError::Inval));
    assert_eq!(
        e.lookup(&user(1), root, &[b'x'; 256]),
        Err(FsError::NameTooLong)
    );
}

#[test]
fn read_only_export_refuses_every_change() {
    let e = export(true);
    let root = e.root();
    let c = Cred::root();
    let attrs = SetAttr::default();
    assert_eq!(
        e.create(&c, root, &name("f"), &CreateMode::Guarded(attrs.clone())),
        Err(FsError::RoFs)
    );
    assert_eq!(e.mkdir(&c, root, &name("d"), &attrs), Err(FsError::RoFs));
    assert_eq!(
        e.setattr(
            &c,
            root,
            &SetAttr {
                mode: Some(0o700),
                ..Default::default()
            },
            None
        ),
        Err(FsError::RoFs)
    );
    assert_eq!(
        e.symlink(&c, root, &name("l"), b"t", &attrs),
        Err(FsError::RoFs)
    );
    assert!(e.properties().read_only);
}

#[test]
fn moving_a_directory_to_another_parent_needs_write_on_it() {
    let e = export(false);
    let root = e.root();
    chmod(&e, &Cred::root(), root, 0o777);
    let a = e
        .mkdir(
            &user(1),
            root,
            &name("a"),
            &SetAttr {
                mode: Some(0o777),
                ..Default::default()
            },
        )
        .unwrap()
        .attr
        .fileid;
    let b = e
        .mkdir(
            &user(1),
            root,
            &name("b"),
            &SetAttr {
                mode: Some(0o777),
                ..Default::default()
            },
        )
        .unwrap()
        .attr
        .fileid;
    e.mkdir(
        &user(1),
        a,
        &name("sub"),
        &SetAttr {
            mode: Some(0o755),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        e.rename(&user(2), a, &name("sub"), b, &name("sub")),
        Err(FsError::Access)
    );
    assert_eq!(
        e.rename(&user(2), a, &name("sub"), a, &name("renamed"))
            .map(|_| ()),
        Ok(())
    );
    assert_eq!(
        e.rename(&user(1), a, &name("renamed"), b, &name("sub"))
            .map(|_| ()),
        Ok(())
    );
}

/// An NFSv4 OPEN's hold keeps a removed file readable and writable through its id, with
/// no name and no way to give it one; the last release frees it and its space.
#[test]
fn a_held_file_outlives_its_last_name_until_released() {
    let e = export(false);
    let owner = user(1000);
    let root = e.root();
    let id = file(&e, &owner, root, "held", 0o644);
    e.write(&owner, id, 0, &[7u8; 5000], Stability::Unstable)
        .unwrap();
    let free_before = e.fsstat().unwrap().free_bytes;
    assert!(e.hold(id).unwrap(), "mem keeps removed files while held");
    assert!(e.hold(id).unwrap());
    e.remove(&owner, root, &name("held")).unwrap();
    assert_eq!(e.lookup(&owner, root, b"held").unwrap_err(), FsError::NoEnt);
    assert_eq!(e.getattr(id).unwrap().nlink, 0);
    e.write(&owner, id, 5000, &[8u8; 100], Stability::FileSync)
        .unwrap();
    let mut out = BytesMut::new();
    e.read_into(&owner, id, 4990, 200, &mut out).unwrap();
    assert_eq!(&out[..10], &[7u8; 10]);
    assert_eq!(&out[10..], &[8u8; 100]);
    assert_eq!(
        e.link(&owner, id, root, &name("back")).unwrap_err(),
        FsError::NoEnt,
        "a file with no name got one back"
    );
    e.release(id);
    assert_eq!(e.getattr(id).unwrap().size_bytes, 5100, "one hold is left");
    e.release(id);
    assert_eq!(e.getattr(id).unwrap_err(), FsError::Stale);
    assert!(
        e.fsstat().unwrap().free_bytes > free_before,
        "its space came back"
    );
    // A release of a file that is gone changes nothing.
    e.release(id);
}
