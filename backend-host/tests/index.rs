//! The handle index of a host export stays as small as the files it holds: records of
//! removed files go (and stay gone after a restart), the log is compacted while files come
//! and go, and at its bound the index evicts records whose handles still resolve, through
//! a search of the export.

use std::path::{Path, PathBuf};
use std::time::Instant;

use granary_backend_host::index::IndexLimits;
use granary_backend_host::{HostConfig, HostFs};
use vfs::{Backend, CreateMode, FileId, FsError, Name, Owner, SetAttr, Trusted};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("granary-index-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("root")).unwrap();
    dir
}

fn fs_with(dir: &Path, index: IndexLimits) -> HostFs {
    let mut c = HostConfig::new(dir.join("root"));
    c.index_path = Some(dir.join("index"));
    c.index = index;
    HostFs::new(&c).unwrap()
}

fn fs_at(dir: &Path) -> HostFs {
    fs_with(dir, IndexLimits::default())
}

fn n(s: &str) -> Name {
    Name::new(s.as_bytes().to_vec()).unwrap()
}

fn t() -> Trusted {
    Trusted {
        owner: Owner {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
        },
    }
}

fn create(fs: &HostFs, dir: FileId, name: &str) -> FileId {
    let how = CreateMode::Guarded(SetAttr::default());
    fs.create(dir, &n(name), &how, &t()).unwrap().attr.fileid
}

fn mkdir(fs: &HostFs, dir: FileId, name: &str) -> FileId {
    let made = fs.mkdir(dir, &n(name), &SetAttr::default(), &t());
    made.unwrap().attr.fileid
}

fn entries(fs: &HostFs) -> usize {
    fs.index_stats().entries
}

fn index_len(dir: &Path) -> u64 {
    std::fs::metadata(dir.join("index")).unwrap().len()
}

#[test]
fn records_go_with_remove_rmdir_and_rename_over_and_stay_gone_after_a_restart() {
    let dir = scratch("remove");
    let fs = fs_at(&dir);
    let root = fs.root();
    let d = mkdir(&fs, root, "d");
    let a = create(&fs, d, "a");
    let b = create(&fs, d, "b");
    let c = create(&fs, root, "c");
    let e = mkdir(&fs, root, "e");
    assert_eq!(entries(&fs), 5);
    fs.remove(d, &n("a"), &t()).unwrap();
    assert_eq!(entries(&fs), 4, "REMOVE drops the record");
    fs.rename(root, &n("c"), d, &n("b"), &t()).unwrap();
    assert_eq!(
        entries(&fs),
        3,
        "RENAME over a file drops the replaced file's record"
    );
    fs.rmdir(root, &n("e"), &t()).unwrap();
    assert_eq!(entries(&fs), 2, "RMDIR drops the record");
    for gone in [a, b, e] {
        assert_eq!(fs.getattr(gone), Err(FsError::Stale));
        assert_eq!(fs.generation(gone), Err(FsError::Stale));
    }
    assert_eq!(fs.getattr(c).unwrap().fileid, c);
    drop(fs);
    let fs = fs_at(&dir);
    assert_eq!(entries(&fs), 2, "the removals were in the log");
    assert_eq!(
        fs.getattr(c).unwrap().fileid,
        c,
        "renamed file kept its handle"
    );
    assert_eq!(fs.getattr(d).unwrap().fileid, d);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_file_a_local_process_removed_loses_its_record_when_its_handle_is_used() {
    let dir = scratch("local");
    let fs = fs_at(&dir);
    let root = fs.root();
    let f = create(&fs, root, "f");
    let g = create(&fs, root, "g");
    std::fs::remove_file(dir.join("root/f")).unwrap();
    assert_eq!(entries(&fs), 2);
    assert_eq!(fs.getattr(f), Err(FsError::Stale));
    assert_eq!(entries(&fs), 1, "found gone: the record went");
    assert_eq!(fs.getattr(f), Err(FsError::Stale), "and stays stale");
    assert_eq!(fs.getattr(g).unwrap().fileid, g);
    drop(fs);
    assert_eq!(entries(&fs_at(&dir)), 1);
    let _ = std::fs::remove_dir_all(dir);
}

/// Files made and removed through granary leave neither records nor log behind: the log
/// stays under its compaction threshold and a restart reads a few records.
#[test]
fn many_create_and_remove_cycles_leave_a_small_index() {
    let dir = scratch("cycles");
    let fs = fs_at(&dir);
    let root = fs.root();
    let d = mkdir(&fs, root, "d");
    let mut peak = 0;
    for i in 0..60_000 {
        let name = format!("file-{i}");
        create(&fs, d, &name);
        fs.remove(d, &n(&name), &t()).unwrap();
        peak = peak.max(fs.index_stats().log_bytes);
    }
    assert_eq!(entries(&fs), 1);
    let limit = 2 * granary_backend_host::limits::COMPACT_MIN_LOG_BYTES;
    assert!(peak <= limit, "the log grew to {peak} bytes");
    drop(fs);
    let start = Instant::now();
    let fs = fs_at(&dir);
    let took = start.elapsed();
    assert_eq!(entries(&fs), 1);
    assert!(index_len(&dir) < 200, "{} bytes on disk", index_len(&dir));
    eprintln!(
        "restart after 60,000 create/remove cycles: {took:?}, {} bytes",
        index_len(&dir)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// At its bound the index evicts; every handle still resolves (the evicted ones by a
/// search that records them again), the index never holds more than its bound, and a
/// file removed and recreated by a local process still gives its old handle another
/// generation.
#[test]
fn evicted_handles_resolve_through_a_search() {
    let dir = scratch("evict");
    let bound = IndexLimits {
        max_entries: 200,
        max_bytes: usize::MAX,
    };
    let fs = fs_with(&dir, bound);
    let root = fs.root();
    let mut files = Vec::new();
    for d in 0..10 {
        let sub = mkdir(&fs, root, &format!("d{d}"));
        let subsub = mkdir(&fs, sub, "deeper");
        for f in 0..100 {
            let id = create(&fs, subsub, &format!("f{f}"));
            let gen = fs.generation(id).unwrap();
            files.push((id, gen, format!("d{d}/deeper/f{f}")));
        }
        assert!(entries(&fs) <= 200);
    }
    assert!(entries(&fs) <= 200, "most of the 1,020 files were evicted");
    for (id, gen, path) in &files {
        assert_eq!(fs.generation(*id), Ok(*gen), "{path}");
        assert_eq!(fs.getattr(*id).unwrap().fileid, *id, "{path}");
        assert!(entries(&fs) <= 200);
    }
    // A restart keeps the bound and the handles.
    drop(fs);
    let fs = fs_with(&dir, bound);
    assert!(entries(&fs) <= 200);
    for (id, gen, path) in files.iter().step_by(37) {
        assert_eq!(fs.generation(*id), Ok(*gen), "{path} after a restart");
    }
    // Removed and recreated by a local process while its record is evicted: the old
    // handle's generation no longer matches (or the number is gone).
    let (old, old_gen, path) = &files[0];
    for (id, _, _) in &files[1..400] {
        fs.getattr(*id).unwrap();
    }
    std::fs::remove_file(dir.join("root").join(path)).unwrap();
    std::fs::write(dir.join("root").join(path), b"new").unwrap();
    let _ = fs.getattr(*old);
    assert_ne!(
        fs.generation(*old),
        Ok(*old_gen),
        "a new file under the old handle"
    );
    let _ = std::fs::remove_dir_all(dir);
}
