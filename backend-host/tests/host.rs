//! The host backend against a real directory: operations, handles across restarts and
//! renames, stale handles, and escape attempts.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use granary_backend_host::{HostConfig, HostFs};
use vfs::{
    Backend, Cookie, CreateMode, FileId, FileType, FsError, Name, Owner, SetAttr, Stability,
    Trusted,
};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("granary-host-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("root")).unwrap();
    dir
}

fn fs_at(dir: &Path) -> HostFs {
    let mut c = HostConfig::new(dir.join("root"));
    c.index_path = Some(dir.join("index"));
    HostFs::new(&c).unwrap()
}

/// Whether this process has `CAP_DAC_READ_SEARCH` (capability 2), which
/// `open_by_handle_at` needs (the scratch directories' file systems give handles).
fn may_open_by_handle() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    eff & (1 << 2) != 0
}

fn n(s: &str) -> Name {
    Name::new(s.as_bytes().to_vec()).unwrap()
}

fn me() -> Owner {
    Owner {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
    }
}

/// The server's own checks (allow everything, new files owned by the test's user).
fn t() -> Trusted {
    Trusted { owner: me() }
}

fn create(fs: &HostFs, dir: FileId, name: &str) -> FileId {
    fs.create(
        dir,
        &n(name),
        &CreateMode::Guarded(SetAttr::default()),
        &t(),
    )
    .unwrap()
    .attr
    .fileid
}

fn mkdir(fs: &HostFs, dir: FileId, name: &str) -> FileId {
    fs.mkdir(dir, &n(name), &SetAttr::default(), &t())
        .unwrap()
        .attr
        .fileid
}

fn lookup(fs: &HostFs, dir: FileId, name: &str) -> Result<FileId, FsError> {
    fs.lookup(dir, &n(name), &t()).map(|f| f.attr.fileid)
}

fn read(fs: &HostFs, id: FileId) -> Result<Vec<u8>, FsError> {
    let mut out = BytesMut::new();
    fs.read_into(id, 0, 1 << 20, &mut out, &t())
        .map(|_| out.to_vec())
}

fn read_all(fs: &HostFs, id: FileId) -> Vec<u8> {
    let mut out = BytesMut::new();
    let done = fs.read_into(id, 0, 1 << 20, &mut out, &t()).unwrap();
    assert!(done.eof);
    out.to_vec()
}

#[test]
fn files_directories_links_and_listing() {
    let dir = scratch("ops");
    let fs = fs_at(&dir);
    let root = fs.root();
    let d = mkdir(&fs, root, "d");
    let f = create(&fs, d, "f");
    let w = fs.write(f, 3, b"abc", Stability::FileSync, &t()).unwrap();
    assert_eq!(w.count, 3);
    assert_eq!(read_all(&fs, f), b"\0\0\0abc");
    assert_eq!(std::fs::read(dir.join("root/d/f")).unwrap(), b"\0\0\0abc");
    let attr = fs.getattr(f).unwrap();
    assert_eq!(
        (attr.file_type, attr.size_bytes, attr.mode),
        (FileType::Regular, 6, 0o644)
    );
    fs.link(f, root, &n("hard"), &t()).unwrap();
    assert_eq!(fs.getattr(f).unwrap().nlink, 2);
    let s = fs
        .symlink(root, &n("s"), b"/etc/passwd", &SetAttr::default(), &t())
        .unwrap()
        .attr
        .fileid;
    assert_eq!(&fs.readlink(s).unwrap().0[..], b"/etc/passwd");
    assert_eq!(
        fs.read_into(s, 0, 10, &mut BytesMut::new(), &t()),
        Err(FsError::Inval)
    );
    assert_eq!(
        fs.read_into(d, 0, 10, &mut BytesMut::new(), &t()),
        Err(FsError::IsDir)
    );
    let page = fs.readdir(root, Cookie::START, 100, &t()).unwrap().0;
    let mut names: Vec<_> = page.entries.iter().map(|e| e.name.to_vec()).collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            b".".to_vec(),
            b"..".to_vec(),
            b"d".to_vec(),
            b"hard".to_vec(),
            b"s".to_vec()
        ]
    );
    assert!(page.eof);
    // Paging by cookies sees every entry once.
    let mut seen = Vec::new();
    let mut cookie = Cookie::START;
    loop {
        let p = fs.readdir(root, cookie, 2, &t()).unwrap().0;
        seen.extend(p.entries.iter().map(|e| e.name.to_vec()));
        if p.eof {
            break;
        }
        cookie = p.entries.last().unwrap().cookie;
    }
    seen.sort();
    assert_eq!(seen, names);
    assert_eq!(fs.rmdir(root, &n("d"), &t()), Err(FsError::NotEmpty));
    assert_eq!(fs.remove(root, &n("d"), &t()), Err(FsError::IsDir));
    fs.rename(d, &n("f"), root, &n("g"), &t()).unwrap();
    assert_eq!(lookup(&fs, root, "g").unwrap(), f);
    fs.rmdir(root, &n("d"), &t()).unwrap();
    assert_eq!(fs.getattr(d), Err(FsError::Stale));
    let set = SetAttr {
        size_bytes: Some(1),
        mode: Some(0o600),
        ..SetAttr::default()
    };
    let a = fs.setattr(f, &set, None, &t()).unwrap().after;
    assert_eq!((a.size_bytes, a.mode), (1, 0o600));
    assert!(fs.fsstat().unwrap().total_bytes > 0);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn handles_survive_a_restart_and_a_rename() {
    let dir = scratch("restart");
    let (f, sub, g, h) = {
        let fs = fs_at(&dir);
        let sub = mkdir(&fs, fs.root(), "sub");
        let f = create(&fs, sub, "f");
        fs.write(f, 0, b"kept", Stability::FileSync, &t()).unwrap();
        let g = create(&fs, sub, "g");
        let h = create(&fs, fs.root(), "h");
        // Renamed through granary: the index follows.
        fs.rename(fs.root(), &n("h"), sub, &n("h2"), &t()).unwrap();
        (f, sub, g, h)
    };
    let fs = fs_at(&dir);
    assert_eq!(read_all(&fs, f), b"kept");
    assert_eq!(
        fs.getattr(h).unwrap().fileid,
        h,
        "renamed through granary before the restart"
    );
    drop(fs);
    // Renamed by a local process while granary is down: found again by kernel handle
    // where the server has CAP_DAC_READ_SEARCH; without it, stale until looked up again
    // (documented).
    std::fs::rename(dir.join("root/sub"), dir.join("root/moved")).unwrap();
    std::fs::rename(dir.join("root/moved/g"), dir.join("root/g2")).unwrap();
    let fs = fs_at(&dir);
    assert_eq!(
        fs.uses_kernel_handles(),
        may_open_by_handle(),
        "kernel handles are used exactly when the process has CAP_DAC_READ_SEARCH"
    );
    if fs.uses_kernel_handles() {
        assert_eq!(read_all(&fs, f), b"kept", "file below a renamed directory");
        assert_eq!(fs.getattr(sub).unwrap().file_type, FileType::Directory);
        assert_eq!(
            fs.getattr(g).unwrap().fileid,
            g,
            "file renamed by a local process"
        );
    } else {
        eprintln!("no CAP_DAC_READ_SEARCH: found again by searching the export");
    }
    assert_eq!(read_all(&fs, f), b"kept", "file below a renamed directory");
    assert_eq!(fs.getattr(sub).unwrap().file_type, FileType::Directory);
    assert_eq!(
        fs.getattr(g).unwrap().fileid,
        g,
        "file renamed by a local process"
    );
    // A file that is really gone costs one search, then is remembered as stale.
    std::fs::remove_file(dir.join("root/g2")).unwrap();
    assert_eq!(fs.getattr(g), Err(FsError::Stale));
    assert_eq!(fs.getattr(g), Err(FsError::Stale));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_file_removed_and_recreated_under_the_same_name_is_stale() {
    let dir = scratch("stale");
    let fs = fs_at(&dir);
    let root = fs.root();
    let old = create(&fs, root, "x");
    let old_gen = fs.getattr(old).unwrap().generation;
    for _ in 0..50 {
        std::fs::remove_file(dir.join("root/x")).unwrap();
        std::fs::write(dir.join("root/x"), b"new").unwrap();
        let new = lookup(&fs, root, "x").unwrap();
        let a = fs.getattr(new).unwrap();
        // The old handle (id + generation) must never name the new file.
        assert!(
            new != old || a.generation != old_gen,
            "inode and generation reused"
        );
        if new != old {
            assert_eq!(fs.getattr(old), Err(FsError::Stale));
        }
    }
    assert_eq!(
        fs.getattr(FileId(u64::MAX - 3)),
        Err(FsError::Stale),
        "never issued"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A directory a local process moves out of the export (same file system) stops being
/// usable through its handle: nothing is made, listed or looked up outside the root. At
/// depths 2 and 150, so the "still beneath" check climbs in one and in several hops, with
/// the open-file cache (which keeps the directory's descriptor: a hit) and without.
#[test]
fn directories_moved_out_of_the_export_are_stale() {
    let cache_on = HostConfig::new("/").open_files;
    for (depth, open_files) in [(2, cache_on), (150, cache_on), (2, 0), (150, 0)] {
        let dir = scratch(&format!("moved-out-{depth}-{open_files}"));
        let mut c = HostConfig::new(dir.join("root"));
        c.index_path = Some(dir.join("index"));
        c.open_files = open_files;
        let fs = HostFs::new(&c).unwrap();
        let mut id = fs.root();
        let mut path = dir.join("root");
        for _ in 0..depth {
            id = mkdir(&fs, id, "d");
            path.push("d");
        }
        create(&fs, id, "inside");
        assert_eq!(
            lookup(&fs, id, "inside").map(|_| ()),
            Ok(()),
            "depth {depth}"
        );
        // Move the top of the chain out of the root, beside it.
        std::fs::rename(dir.join("root/d"), dir.join("outside")).unwrap();
        let made = fs.create(
            id,
            &n("escaped"),
            &CreateMode::Guarded(SetAttr::default()),
            &t(),
        );
        let found = lookup(&fs, id, "inside");
        let listed = fs.readdir(id, Cookie::START, 16, &t()).map(|_| ());
        if fs.uses_kernel_handles() {
            assert_eq!(
                made.map(|_| ()),
                Err(FsError::Stale),
                "depth {depth}: create"
            );
            assert_eq!(found, Err(FsError::Stale), "depth {depth}: lookup");
            assert_eq!(listed, Err(FsError::Stale), "depth {depth}: readdir");
        } else {
            // The path re-walk cannot find it beneath the root at all.
            assert!(
                made.is_err() && found.is_err() && listed.is_err(),
                "depth {depth}"
            );
        }
        let moved = dir
            .join("outside")
            .join(path.strip_prefix(dir.join("root/d")).unwrap());
        assert!(
            moved.join("inside").exists(),
            "depth {depth}: the tree moved whole"
        );
        assert!(
            !moved.join("escaped").exists(),
            "depth {depth}: created outside the root"
        );
        // Moved back, it is usable again: the handle named the same directory all along.
        std::fs::rename(dir.join("outside"), dir.join("root/d")).unwrap();
        if fs.uses_kernel_handles() {
            assert_eq!(
                lookup(&fs, id, "inside").map(|_| ()),
                Ok(()),
                "depth {depth}"
            );
        }
        drop(fs);
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn symlinks_are_never_followed_and_names_never_leave_the_root() {
    let dir = scratch("links");
    std::fs::write(dir.join("secret"), b"outside").unwrap();
    std::os::unix::fs::symlink(dir.join("secret"), dir.join("root/abs")).unwrap();
    std::os::unix::fs::symlink("../secret", dir.join("root/rel")).unwrap();
    std::os::unix::fs::symlink(&dir, dir.join("root/updir")).unwrap();
    let fs = fs_at(&dir);
    let root = fs.root();
    for name in ["abs", "rel"] {
        let id = lookup(&fs, root, name).unwrap();
        assert_eq!(fs.getattr(id).unwrap().file_type, FileType::Symlink);
        assert_eq!(
            fs.read_into(id, 0, 100, &mut BytesMut::new(), &t()),
            Err(FsError::Inval)
        );
        assert!(fs.write(id, 0, b"x", Stability::FileSync, &t()).is_err());
        assert!(fs
            .setattr(
                id,
                &SetAttr {
                    size_bytes: Some(0),
                    ..SetAttr::default()
                },
                None,
                &t()
            )
            .is_err());
    }
    let up = lookup(&fs, root, "updir").unwrap();
    assert_eq!(lookup(&fs, up, "secret"), Err(FsError::NotDir));
    assert!(fs
        .create(
            up,
            &n("planted"),
            &CreateMode::Guarded(SetAttr::default()),
            &t()
        )
        .is_err());
    assert!(fs.remove(up, &n("secret"), &t()).is_err());
    assert_eq!(std::fs::read(dir.join("secret")).unwrap(), b"outside");
    assert!(!dir.join("planted").exists());
    let _ = std::fs::remove_dir_all(dir);
}

/// A local process swaps `root/d` between a real directory and a symlink to the outside,
/// as fast as it can, while granary creates, writes, renames and removes names in it.
/// Nothing outside the root may be created, changed or removed.
#[test]
fn racing_symlink_and_directory_swaps_never_escape() {
    let dir = scratch("race");
    let outside = dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("victim"), b"untouched").unwrap();
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("real")).unwrap();
    std::fs::write(root.join("real/victim"), b"inside").unwrap();
    let fs = Arc::new(fs_at(&dir));
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (root, outside, stop) = (root.clone(), outside.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = std::fs::remove_file(root.join("d"));
                let _ = std::fs::rename(root.join("real"), root.join("d"));
                let _ = std::fs::rename(root.join("d"), root.join("real"));
                let _ = std::os::unix::fs::symlink(&outside, root.join("d"));
                swaps += 1;
            }
            swaps
        })
    };
    let start = Instant::now();
    let mut attempts = 0u32;
    while attempts < 5000 && start.elapsed() < Duration::from_secs(20) {
        attempts += 1;
        let Ok(d) = lookup(&fs, fs.root(), "d") else {
            continue;
        };
        let _ = fs.create(
            d,
            &n("planted"),
            &CreateMode::Unchecked(SetAttr::default()),
            &t(),
        );
        if let Ok(v) = lookup(&fs, d, "victim") {
            let _ = fs.write(v, 0, b"XXXXXXXXX", Stability::Unstable, &t());
            let _ = fs.setattr(
                v,
                &SetAttr {
                    size_bytes: Some(1),
                    ..SetAttr::default()
                },
                None,
                &t(),
            );
        }
        let _ = fs.rename(d, &n("victim"), d, &n("victim2"), &t());
        let _ = fs.rename(d, &n("victim2"), d, &n("victim"), &t());
        let _ = fs.remove(d, &n("planted"), &t());
        let _ = fs.mkdir(d, &n("m"), &SetAttr::default(), &t());
        let _ = fs.rmdir(d, &n("m"), &t());
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(attempts >= 1000, "only {attempts} attempts");
    let names: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("victim")],
        "outside changed"
    );
    assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"untouched");
    eprintln!("{attempts} attempts against {swaps} swaps");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn startup_refuses_missing_and_non_directory_roots() {
    let dir = scratch("refuse");
    let e = HostFs::new(&HostConfig::new(dir.join("nope"))).unwrap_err();
    assert!(e.0.contains("does not exist"), "{e}");
    std::fs::write(dir.join("file"), b"").unwrap();
    let e = HostFs::new(&HostConfig::new(dir.join("file"))).unwrap_err();
    assert!(e.0.contains("not a directory"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

/// As root, a client's (squashed) credential owns what it creates and `vfs::Caller`
/// decides from the host's attributes what it may do, inside the backend's lock.
#[test]
fn callers_own_what_they_create_and_the_checks_use_host_attributes() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !rustix::process::geteuid().is_root() {
        eprintln!("not root: a host export acts as the server's user; nothing to check");
        return;
    }
    let dir = scratch("owners");
    let root_path = dir.join("root");
    std::fs::set_permissions(&root_path, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::write(root_path.join("theirs"), b"root's").unwrap();
    let fs = fs_at(&dir);
    let root = fs.root();
    let alice = vfs::Cred {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    let caller = vfs::Caller::new(&alice);
    let made = fs
        .create(
            root,
            &n("mine"),
            &CreateMode::Guarded(SetAttr {
                mode: Some(0o640),
                ..SetAttr::default()
            }),
            &caller,
        )
        .unwrap();
    let meta = std::fs::symlink_metadata(root_path.join("mine")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (1000, 1000, 0o640)
    );
    assert_eq!((made.attr.uid, made.attr.mode), (1000, 0o640));
    let sub = fs
        .mkdir(root, &n("sub"), &SetAttr::default(), &caller)
        .unwrap();
    assert_eq!(
        std::fs::metadata(root_path.join("sub")).unwrap().uid(),
        1000
    );
    assert_eq!(sub.attr.uid, 1000);
    let theirs = lookup(&fs, root, "theirs").unwrap();
    assert_eq!(
        fs.write(theirs, 0, b"x", Stability::FileSync, &caller)
            .unwrap_err(),
        FsError::Access
    );
    assert_eq!(read(&fs, theirs).unwrap(), b"root's");
    let chmod = SetAttr {
        mode: Some(0o777),
        ..SetAttr::default()
    };
    assert_eq!(
        fs.setattr(theirs, &chmod, None, &caller).unwrap_err(),
        FsError::Perm
    );
    // The sticky root: alice may not remove root's file, only her own.
    assert_eq!(
        fs.remove(root, &n("theirs"), &caller).unwrap_err(),
        FsError::Perm
    );
    fs.remove(root, &n("mine"), &caller).unwrap();
    assert_eq!(std::fs::read(root_path.join("theirs")).unwrap(), b"root's");
    let _ = std::fs::remove_dir_all(dir);
}

/// The attributes around a change bracket exactly that change: before = the directory
/// (or file) as it was, after = as the change left it.
#[test]
fn changes_carry_the_attributes_before_and_after() {
    let dir = scratch("wcc");
    let fs = fs_at(&dir);
    let root = fs.root();
    let was = fs.getattr(root).unwrap();
    let made = fs
        .create(
            root,
            &n("f"),
            &CreateMode::Guarded(SetAttr::default()),
            &t(),
        )
        .unwrap();
    let before = made.dir.before.unwrap();
    assert_eq!((before.mtime, before.ctime), (was.mtime, was.ctime));
    assert_eq!(made.dir.after, fs.getattr(root).unwrap());
    let f = made.attr.fileid;
    let w = fs.write(f, 0, b"hello", Stability::Unstable, &t()).unwrap();
    assert_eq!(w.file.before.unwrap().size_bytes, 0);
    assert_eq!(w.file.after.size_bytes, 5);
    let c = fs.commit(f, 0, 0).unwrap();
    assert_eq!(c.after, fs.getattr(f).unwrap());
    let guard = Some(c.after.ctime);
    let trunc = SetAttr {
        size_bytes: Some(2),
        ..SetAttr::default()
    };
    let s = fs.setattr(f, &trunc, guard, &t()).unwrap();
    assert_eq!((s.before.unwrap().size_bytes, s.after.size_bytes), (5, 2));
    assert_eq!(
        fs.setattr(f, &trunc, guard, &t()).unwrap_err(),
        FsError::NotSync,
        "the guard is the ctime before the change"
    );
    let _ = std::fs::remove_dir_all(dir);
}
