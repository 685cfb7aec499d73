//! Seed 004's open-file cache in the host backend: hits make no open, concurrent misses
//! open once, aging closes idle descriptors, removing a file's last name releases its
//! descriptor, UNSTABLE data is synced before a close, and the bound holds. The cache also
//! keeps the `O_PATH` descriptors of directories that calls work in; the file tests leave
//! the root directory's out of their counts ([`held_files`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

use bytes::BytesMut;
use granary_backend_host::{HostConfig, HostFs};
use vfs::{Backend, CreateMode, FileId, FsError, Name, Owner, SetAttr, Stability, Trusted};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("granary-openfiles-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn fs_with(dir: &Path, open_files: usize) -> HostFs {
    let mut c = HostConfig::new(dir);
    c.open_files = open_files;
    HostFs::new(&c).unwrap()
}

fn t() -> Trusted {
    Trusted {
        owner: Owner {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
        },
    }
}

fn n(s: &str) -> Name {
    Name::new(s.as_bytes().to_vec()).unwrap()
}

fn create(fs: &HostFs, name: &str) -> FileId {
    let mode = CreateMode::Guarded(SetAttr::default());
    let id = fs
        .create(fs.root(), &n(name), &mode, &t())
        .unwrap()
        .attr
        .fileid;
    // CREATE cached the root directory's descriptor: these tests count the files' own.
    fs.forget_open(fs.root());
    id
}

/// Cached descriptors of files: the root directory's (which CREATE, LINK, REMOVE and
/// RENAME cache) is dropped first.
fn held_files(fs: &HostFs) -> usize {
    fs.forget_open(fs.root());
    fs.open_files_held()
}

fn write(fs: &HostFs, id: FileId, stable: Stability) {
    fs.write(id, 0, b"0123456789", stable, &t()).unwrap();
}

fn read(fs: &HostFs, id: FileId) -> Result<Vec<u8>, FsError> {
    let mut out = BytesMut::new();
    fs.read_into(id, 0, 4096, &mut out, &t())
        .map(|_| out.to_vec())
}

/// Descriptors of this process that name `path` (a removed file shows as "PATH (deleted)").
fn fds_naming(path: &Path) -> usize {
    let want = path.display().to_string();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.display().to_string().starts_with(&want))
        .count()
}

#[test]
fn hits_make_no_open_and_off_opens_every_call() {
    for (open_files, expected_opens) in [(16, 2), (0, 20)] {
        let dir = scratch(&format!("hits-{open_files}"));
        let fs = fs_with(&dir, open_files);
        let id = create(&fs, "f");
        for _ in 0..10 {
            write(&fs, id, Stability::Unstable);
            assert_eq!(read(&fs, id).unwrap(), b"0123456789");
        }
        let (opens, _, _) = fs.io_counts();
        assert_eq!(opens, expected_opens, "open_files {open_files}");
        if open_files > 0 {
            let stats = fs.open_file_stats().unwrap();
            // Two files' misses and the root directory's, which the CREATE opened.
            assert_eq!((stats.misses, stats.hits), (2 + 1, 18));
            // Both descriptors are held between calls: no close happened either.
            assert_eq!(fds_naming(&dir.join("f")), 2);
        } else {
            assert_eq!(fs.open_file_stats(), None);
            assert_eq!(fds_naming(&dir.join("f")), 0, "off closes after every call");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn concurrent_misses_open_once() {
    let dir = scratch("single-flight");
    let fs = Arc::new(fs_with(&dir, 16));
    let id = create(&fs, "f");
    write(&fs, id, Stability::FileSync);
    let (before, _, _) = fs.io_counts();
    let start = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (fs, start) = (Arc::clone(&fs), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                read(&fs, id).unwrap()
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), b"0123456789");
    }
    let (after, _, _) = fs.io_counts();
    assert_eq!(after - before, 1, "eight racing READs opened the file once");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_deferred_pass_evicts_at_once_and_closes_when_its_bundle_is_dropped() {
    let dir = scratch("deferred");
    let fs = fs_with(&dir, 16);
    let id = create(&fs, "f");
    write(&fs, id, Stability::Unstable);
    for _ in 0..2 {
        assert!(fs.age_open_files_deferred().is_empty());
    }
    let evicted = fs.age_open_files_deferred();
    assert_eq!(
        (evicted.len(), fs.open_files_held()),
        (1, 0),
        "out of the cache at once"
    );
    assert_eq!(
        fds_naming(&dir.join("f")),
        1,
        "but not closed by the pass itself"
    );
    // The server drops the bundle on its closing thread: the UNSTABLE data is synced there.
    std::thread::spawn(move || drop(evicted)).join().unwrap();
    assert_eq!(fds_naming(&dir.join("f")), 0);
    assert_eq!(fs.io_counts().1, 1, "synced before its close");
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"0123456789");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn aging_closes_a_descriptor_unused_for_two_passes() {
    let dir = scratch("aging");
    let fs = fs_with(&dir, 16);
    let id = create(&fs, "f");
    read(&fs, id).unwrap();
    assert_eq!(fs.age_open_files(), 0);
    read(&fs, id).unwrap(); // used again: referenced
    assert_eq!(fs.age_open_files(), 0);
    assert_eq!(fs.age_open_files(), 0);
    assert_eq!(fs.open_files_held(), 1);
    assert_eq!(fds_naming(&dir.join("f")), 1);
    assert_eq!(fs.age_open_files(), 1, "two passes unused: closed");
    assert_eq!((fs.open_files_held(), fds_naming(&dir.join("f"))), (0, 0));
    read(&fs, id).unwrap();
    assert_eq!(fs.io_counts().0, 2, "opened again after aging out");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn removing_the_last_name_releases_the_descriptor() {
    let dir = scratch("unlink");
    let fs = fs_with(&dir, 16);
    let id = create(&fs, "f");
    let other = create(&fs, "g");
    write(&fs, id, Stability::Unstable);
    read(&fs, id).unwrap();
    // A second name keeps the file: its descriptors stay (WRITE's, READ's, and the
    // `O_PATH` one LINK found it by).
    fs.link(id, fs.root(), &n("f2"), &t()).unwrap();
    fs.remove(fs.root(), &n("f"), &t()).unwrap();
    assert_eq!(held_files(&fs), 3);
    fs.remove(fs.root(), &n("f2"), &t()).unwrap();
    assert_eq!(held_files(&fs), 0, "last name gone: dropped at once");
    assert_eq!(
        fds_naming(&dir.join("f")),
        0,
        "no descriptor keeps the space"
    );
    // A RENAME over a file removes the target's last name too.
    read(&fs, other).unwrap();
    let third = create(&fs, "h");
    fs.rename(fs.root(), &n("h"), fs.root(), &n("g"), &t())
        .unwrap();
    assert_eq!(held_files(&fs), 0);
    assert_eq!(read(&fs, other), Err(FsError::Stale));
    assert!(read(&fs, third).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_unlinked_by_a_local_process_is_stale_on_a_hit() {
    let dir = scratch("local-unlink");
    let fs = fs_with(&dir, 16);
    let id = create(&fs, "f");
    read(&fs, id).unwrap();
    std::fs::remove_file(dir.join("f")).unwrap();
    assert_eq!(read(&fs, id), Err(FsError::Stale));
    assert_eq!(fs.open_files_held(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unstable_writes_are_synced_before_the_descriptor_closes() {
    let dir = scratch("flush");
    let fs = fs_with(&dir, 16);
    let (a, b, c) = (create(&fs, "a"), create(&fs, "b"), create(&fs, "c"));
    write(&fs, a, Stability::Unstable);
    write(&fs, b, Stability::FileSync);
    write(&fs, c, Stability::Unstable);
    fs.commit(c, 0, 0).unwrap();
    for _ in 0..3 {
        fs.age_open_files();
    }
    assert_eq!(fs.open_files_held(), 0);
    let (_, flushes, errors) = fs.io_counts();
    assert_eq!(
        (flushes, errors),
        (1, 0),
        "only the file with uncommitted data"
    );
    // Shutdown syncs too.
    write(&fs, a, Stability::Unstable);
    fs.close_open_files();
    assert_eq!(fs.io_counts().1, 2);
    // Removing the last name does not: the data can never be read again, and the sync
    // would run in the REMOVE, on a network worker's event loop.
    write(&fs, b, Stability::Unstable);
    fs.remove(fs.root(), &n("b"), &t()).unwrap();
    assert_eq!(
        fs.io_counts().1,
        2,
        "a removed file's descriptor closed unsynced"
    );
    fs.close_open_files();
    assert_eq!(fs.io_counts().1, 2, "and it was closed, not kept");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_bound_holds_and_overflow_opens_per_call() {
    let dir = scratch("bound");
    let fs = fs_with(&dir, 2);
    let ids: Vec<FileId> = ["a", "b", "c"].iter().map(|f| create(&fs, f)).collect();
    for &id in &ids {
        read(&fs, id).unwrap();
    }
    assert_eq!(fs.open_files_held(), 2);
    assert_eq!(
        fds_naming(&dir.join("c")),
        0,
        "the overflow open was closed"
    );
    assert_eq!(fs.open_file_stats().unwrap().overflows, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Directories: LOOKUP and entry changes in one directory open it once and then hit; the
/// descriptor is `O_PATH` (it reads nothing), checked on every hit, and dropped when the
/// directory goes, through granary or a local process.
#[test]
fn directory_descriptors_are_cached_and_dropped_when_the_directory_goes() {
    let dir = scratch("dirs");
    let fs = fs_with(&dir, 16);
    let sub = fs
        .mkdir(fs.root(), &n("d"), &SetAttr::default(), &t())
        .unwrap()
        .attr
        .fileid;
    let mode = CreateMode::Guarded(SetAttr::default());
    fs.create(sub, &n("f"), &mode, &t()).unwrap();
    let before = fs.open_file_stats().unwrap();
    for _ in 0..10 {
        assert!(fs.lookup(sub, &n("f"), &t()).is_ok());
    }
    let after = fs.open_file_stats().unwrap();
    assert_eq!(
        (after.misses - before.misses, after.hits - before.hits),
        (0, 10),
        "ten LOOKUPs in a directory the CREATE opened: all hits"
    );
    assert_eq!(
        fds_naming(&dir.join("d")),
        1,
        "one descriptor, held between calls"
    );
    // Removed through granary: the entry goes with it.
    fs.remove(sub, &n("f"), &t()).unwrap();
    fs.rmdir(fs.root(), &n("d"), &t()).unwrap();
    assert_eq!(
        fds_naming(&dir.join("d")),
        0,
        "RMDIR dropped the descriptor"
    );
    // Removed by a local process: the next call finds it gone, and drops it.
    let again = fs
        .mkdir(fs.root(), &n("e"), &SetAttr::default(), &t())
        .unwrap()
        .attr
        .fileid;
    fs.create(again, &n("f"), &mode, &t()).unwrap();
    assert_eq!(fds_naming(&dir.join("e")), 1);
    std::fs::remove_dir_all(dir.join("e")).unwrap();
    assert_eq!(
        fs.lookup(again, &n("f"), &t()).map(|_| ()),
        Err(FsError::Stale)
    );
    assert_eq!(
        fds_naming(&dir.join("e")),
        0,
        "the stale directory's descriptor closed"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
