//! On a thread that may not block (`sync::blocking::forbidden`: a network worker's event
//! loop), the host backend gives up with `WouldBlock` before it changes anything when a
//! call would sleep on the disk — COMMIT, FILE_SYNC and DATA_SYNC WRITEs, SETATTR with a
//! size, a READ of data not in the page cache — and serves everything else there: an
//! UNSTABLE WRITE, a READ of cached data. On a memory-backed export (tmpfs) none of these
//! sleeps on a disk, and all of them run there.

use std::os::fd::AsFd;
use std::path::PathBuf;

use bytes::BytesMut;
use granary_backend_host::{HostConfig, HostFs};
use sync::blocking::forbidden;
use vfs::{Backend, CreateMode, FileId, FsError, Name, Owner, SetAttr, Stability, Trusted};

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("granary-blocking-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn t() -> Trusted {
    Trusted {
        owner: Owner {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
        },
    }
}

fn setup(name: &str, open_files: usize) -> (Scratch, HostFs, FileId) {
    let dir = Scratch::new(name);
    let mut c = HostConfig::new(&dir.0);
    c.open_files = open_files;
    let fs = HostFs::new(&c).unwrap();
    assert!(
        !fs.memory_backed(),
        "these tests need a temporary directory on a disk's file system, not {}",
        dir.0.display()
    );
    let mode = CreateMode::Guarded(SetAttr::default());
    let name = Name::new(b"f".to_vec()).unwrap();
    let id = fs
        .create(fs.root(), &name, &mode, &t())
        .unwrap()
        .attr
        .fileid;
    (dir, fs, id)
}

fn read(fs: &HostFs, id: FileId, count: u32) -> Result<Vec<u8>, FsError> {
    let mut out = BytesMut::from(&b"head"[..]);
    let r = fs.read_into(id, 0, count, &mut out, &t());
    if r.is_err() {
        assert_eq!(
            &out[..],
            b"head",
            "a failed READ leaves the reply as it was"
        );
    }
    r.map(|_| out[4..].to_vec())
}

/// Drops the file's clean pages from the page cache (no privilege needed).
fn evict(dir: &Scratch) {
    let f = std::fs::File::open(dir.0.join("f")).unwrap();
    f.sync_all().unwrap();
    rustix::fs::fadvise(f.as_fd(), 0, None, rustix::fs::Advice::DontNeed).unwrap();
}

#[test]
fn calls_that_sleep_give_up_before_changing_anything() {
    for open_files in [0, 16] {
        let (dir, fs, id) = setup(&format!("sleep{open_files}"), open_files);
        let data = vec![7u8; 64 << 10];
        let before = fs.getattr(id).unwrap();
        for stable in [Stability::DataSync, Stability::FileSync] {
            let r = forbidden(|| fs.write(id, 0, &data, stable, &t()));
            assert_eq!(r.err(), Some(FsError::WouldBlock), "{stable:?}");
        }
        assert_eq!(
            forbidden(|| fs.commit(id, 0, 0)).err(),
            Some(FsError::WouldBlock)
        );
        let grow = SetAttr {
            size_bytes: Some(1 << 20),
            ..SetAttr::default()
        };
        let r = forbidden(|| fs.setattr(id, &grow, None, &t()));
        assert_eq!(r.err(), Some(FsError::WouldBlock));
        let after = fs.getattr(id).unwrap();
        assert_eq!(
            (after.size_bytes, after.ctime),
            (before.size_bytes, before.ctime),
            "nothing changed"
        );
        // An UNSTABLE WRITE and a mode change do not sleep: they run where they are.
        let w = forbidden(|| fs.write(id, 0, &data, Stability::Unstable, &t())).unwrap();
        assert_eq!(w.count as usize, data.len());
        let mode = SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        };
        forbidden(|| fs.setattr(id, &mode, None, &t())).unwrap();
        // Where blocking is allowed, the same calls run.
        fs.write(id, 0, &data, Stability::FileSync, &t()).unwrap();
        fs.commit(id, 0, 0).unwrap();
        fs.setattr(id, &grow, None, &t()).unwrap();
        assert_eq!(fs.getattr(id).unwrap().size_bytes, 1 << 20);
        drop(dir);
    }
}

#[test]
fn a_read_runs_where_it_is_only_if_the_page_cache_holds_its_range() {
    for open_files in [0, 16] {
        let (dir, fs, id) = setup(&format!("read{open_files}"), open_files);
        let data: Vec<u8> = (0..256u32 << 10).map(|i| (i % 251) as u8).collect();
        fs.write(id, 0, &data, Stability::FileSync, &t()).unwrap();
        // A read of evicted data gives up (`RWF_NOWAIT`). The kernel starts readahead for
        // it first, and on a fast disk that I/O can finish before it checks: then the read
        // is answered in place (seen half the time on this VM's virtio disk). So: evict and
        // try 20 times; some try must give up, and every read that ran must be right.
        let mut gave_up = 0;
        for _ in 0..20 {
            evict(&dir);
            match forbidden(|| read(&fs, id, 256 << 10)) {
                Err(FsError::WouldBlock) => gave_up += 1,
                got => assert_eq!(got.unwrap(), data, "a read that ran where it was"),
            }
        }
        assert!(gave_up > 0, "a read of evicted data never gave up");
        // Allowed to block, it reads from the disk (and leaves the pages cached).
        assert_eq!(read(&fs, id, 256 << 10).unwrap(), data);
        assert_eq!(forbidden(|| read(&fs, id, 256 << 10)).unwrap(), data);
        // Past the end and at the end: what there is, no hand-off.
        assert_eq!(forbidden(|| read(&fs, id, 1 << 20)).unwrap(), data);
        drop(dir);
    }
}

/// A scratch directory on the tmpfs at /dev/shm.
fn shm(name: &str) -> Scratch {
    let shm = std::path::Path::new("/dev/shm");
    assert!(shm.is_dir(), "the test needs a tmpfs at /dev/shm");
    let dir = Scratch(shm.join(format!("granary-blocking-{}-{name}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    dir
}

fn create_f(fs: &HostFs) -> FileId {
    let mode = CreateMode::Guarded(SetAttr::default());
    let name = Name::new(b"f".to_vec()).unwrap();
    fs.create(fs.root(), &name, &mode, &t())
        .unwrap()
        .attr
        .fileid
}

/// tmpfs keeps its files in memory: its READs (tmpfs answers `RWF_NOWAIT` with
/// `EOPNOTSUPP`, Linux 6.1 to 6.18), syncing WRITEs, COMMITs and size changes run where
/// the call is, and what they wrote reads back.
#[test]
fn a_memory_backed_export_runs_its_data_calls_where_the_call_is() {
    for open_files in [0, 16] {
        let dir = shm(&format!("tmpfs{open_files}"));
        let mut c = HostConfig::new(&dir.0);
        c.open_files = open_files;
        let fs = HostFs::new(&c).unwrap();
        assert!(fs.memory_backed(), "/dev/shm is a tmpfs");
        let id = create_f(&fs);
        forbidden(|| fs.write(id, 0, b"in memory", Stability::Unstable, &t())).unwrap();
        for _ in 0..2 {
            assert_eq!(forbidden(|| read(&fs, id, 4096)).unwrap(), b"in memory");
        }
        for (at, stable) in [(3, Stability::FileSync), (6, Stability::DataSync)] {
            let w = forbidden(|| fs.write(id, at, b"MEM", stable, &t())).unwrap();
            assert_eq!((w.count, w.committed), (3, stable));
        }
        assert_eq!(forbidden(|| read(&fs, id, 4096)).unwrap(), b"in MEMMEM");
        forbidden(|| fs.commit(id, 0, 0)).unwrap();
        let shrink = SetAttr {
            size_bytes: Some(5),
            ..SetAttr::default()
        };
        forbidden(|| fs.setattr(id, &shrink, None, &t())).unwrap();
        assert_eq!(forbidden(|| read(&fs, id, 4096)).unwrap(), b"in ME");
        assert_eq!(std::fs::read(dir.0.join("f")).unwrap(), b"in ME");
        drop(dir);
    }
}

/// The same calls on the same tmpfs, taken for a disk (as a FUSE or network file system
/// without `RWF_NOWAIT` would be): every one that could sleep gives up where blocking is
/// forbidden, READs included (`EOPNOTSUPP` is not a read that ran), and runs elsewhere.
#[test]
fn a_file_system_without_nowait_reads_sends_reads_to_the_pool() {
    let dir = shm("nowait");
    let mut c = HostConfig::new(&dir.0);
    c.memory_backed = Some(false);
    let fs = HostFs::new(&c).unwrap();
    assert!(!fs.memory_backed());
    let id = create_f(&fs);
    fs.write(id, 0, b"on a disk", Stability::Unstable, &t())
        .unwrap();
    for _ in 0..2 {
        assert_eq!(
            forbidden(|| read(&fs, id, 4096)).err(),
            Some(FsError::WouldBlock)
        );
    }
    for stable in [Stability::DataSync, Stability::FileSync] {
        let r = forbidden(|| fs.write(id, 0, b"X", stable, &t()));
        assert_eq!(r.err(), Some(FsError::WouldBlock), "{stable:?}");
    }
    assert_eq!(
        forbidden(|| fs.commit(id, 0, 0)).err(),
        Some(FsError::WouldBlock)
    );
    assert_eq!(
        read(&fs, id, 4096).unwrap(),
        b"on a disk",
        "nothing changed"
    );
    fs.write(id, 0, b"ON", Stability::FileSync, &t()).unwrap();
    assert_eq!(read(&fs, id, 4096).unwrap(), b"ON a disk");
    drop(dir);
}

/// Descriptors of this process that name `path` (a removed file's shows as "PATH (deleted)").
fn fds_naming(path: &std::path::Path) -> usize {
    let want = path.display().to_string();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.display().to_string().starts_with(&want))
        .count()
}

/// Waits up to 5 s for the last descriptor naming `path` to close.
fn closed_soon(path: &std::path::Path) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while fds_naming(path) > 0 {
        if std::time::Instant::now() > until {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    true
}

/// The last close of a file with no name left frees its blocks: on a worker (a REMOVE
/// while the open-file cache holds the file, an NFSv4 CLOSE of a held file removed
/// meanwhile) it is handed to the closing thread, which closes it; elsewhere it happens
/// where it is.
#[test]
fn a_removed_files_last_close_leaves_the_worker() {
    let (dir, fs, id) = setup("unlinked-close", 16);
    let path = dir.0.join("f");
    let f = Name::new(b"f".to_vec()).unwrap();
    let data = vec![1u8; 1 << 20];
    fs.write(id, 0, &data, Stability::Unstable, &t()).unwrap();
    assert!(fds_naming(&path) > 0, "the cache holds the written file");
    forbidden(|| fs.remove(fs.root(), &f, &t())).unwrap();
    assert_eq!(
        fs.deferred_closes(),
        1,
        "REMOVE on a worker: cache entries handed off"
    );
    assert!(closed_soon(&path), "the closing thread closes them");

    // An open (hold) outlives the name; its CLOSE on a worker hands off the last close.
    let mode = CreateMode::Guarded(SetAttr::default());
    let g = Name::new(b"g".to_vec()).unwrap();
    let held = fs.create(fs.root(), &g, &mode, &t()).unwrap().attr.fileid;
    let gpath = dir.0.join("g");
    fs.hold(held).unwrap();
    fs.write(held, 0, &data, Stability::Unstable, &t()).unwrap();
    fs.remove(fs.root(), &g, &t()).unwrap();
    assert_eq!(
        fs.deferred_closes(),
        1,
        "a REMOVE where blocking is allowed closes there"
    );
    assert_eq!(
        read(&fs, held, 4).unwrap(),
        vec![1u8; 4],
        "held: still readable"
    );
    assert!(fds_naming(&gpath) > 0);
    forbidden(|| fs.release(held));
    let handed = fs.deferred_closes();
    assert!(handed >= 2, "the last release on a worker: handed off");
    assert!(closed_soon(&gpath));

    // Elsewhere (a blocking pool's thread) the same release closes where it is.
    let h = Name::new(b"h".to_vec()).unwrap();
    let other = fs.create(fs.root(), &h, &mode, &t()).unwrap().attr.fileid;
    fs.hold(other).unwrap();
    fs.remove(fs.root(), &h, &t()).unwrap();
    fs.release(other);
    assert_eq!(fs.deferred_closes(), handed);
    assert_eq!(
        fds_naming(&dir.0.join("h")),
        0,
        "closed by the release itself"
    );
    drop(dir);
}
