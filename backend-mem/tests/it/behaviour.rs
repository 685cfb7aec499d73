//! One test per promised behaviour of the mem backend, each through `vfs::Backend`.

use granary_backend_mem::{MemConfig, CHUNK_BYTES, ENTRY_CHARGE_BYTES, INODE_CHARGE_BYTES};
use gtime::Timestamp;
use vfs::limits::{MAX_FILE_SIZE, MAX_IO_BYTES, MAX_LINKS};
use vfs::{
    Cookie, CreateMode, DeviceNumber, FileId, FileType, FsError, SetAttr, SetTime, SpecialFile,
    Stability,
};

use crate::fixture::{n, Fx, Plain, OWNER, START};

const C: u64 = CHUNK_BYTES;

#[test]
fn root_and_properties() {
    let fx = Fx::with(MemConfig {
        root_mode: 0o1755,
        root_uid: 7,
        root_gid: 8,
        ..MemConfig::default()
    });
    let root = fx.root();
    assert_eq!(root, FileId(1));
    let attr = fx.fs.getattr(root).unwrap();
    assert_eq!(attr.file_type, FileType::Directory);
    assert_eq!(
        (attr.mode, attr.uid, attr.gid, attr.nlink),
        (0o1755, 7, 8, 2)
    );
    assert_eq!((attr.fsid, attr.generation, attr.fileid), (0, 0, root));
    assert_eq!((attr.atime, attr.mtime, attr.ctime), (START, START, START));
    assert_eq!(fx.fs.parent(root), Ok(root));
    assert_eq!(vfs::Backend::kind(&fx.fs), "mem");
    let props = fx.fs.properties();
    assert_eq!(props.max_file_size, MAX_FILE_SIZE);
    assert_eq!(props.time_granularity_ns, 1);
    assert!(props.supports_hard_links && props.supports_symlinks);
    assert_eq!((props.max_links, props.max_name_bytes), (MAX_LINKS, 255));
    assert!(!props.case_insensitive && props.case_preserving && !props.read_only);
    let default = MemConfig::default();
    assert_eq!(default.capacity_bytes, 1 << 30);
    assert_eq!((default.max_files, default.root_mode), (1_000_000, 0o777));
    assert_eq!((default.root_uid, default.root_gid), (0, 0));
}

#[test]
fn sparse_holes_read_as_zeros() {
    let fx = Fx::new();
    let f = fx.create(fx.root(), "f");
    let free = fx.fs.fsstat().unwrap().free_bytes;
    fx.write(f, 5 * C + 3, b"xyz");
    let attr = fx.fs.getattr(f).unwrap();
    assert_eq!((attr.size_bytes, attr.used_bytes), (5 * C + 6, C));
    let contents = fx.contents(f);
    assert_eq!(contents.len() as u64, 5 * C + 6);
    assert!(contents[..(5 * C + 3) as usize].iter().all(|&b| b == 0));
    assert_eq!(&contents[(5 * C + 3) as usize..], b"xyz");
    // Zeros into a hole allocate nothing.
    fx.write(f, 0, &vec![0; 2 * C as usize]);
    assert_eq!(fx.fs.getattr(f).unwrap().used_bytes, C);
    assert_eq!(fx.fs.fsstat().unwrap().free_bytes, free - C);
}

#[test]
fn truncate_shrink_then_grow_reads_zeros() {
    let fx = Fx::new();
    let f = fx.create(fx.root(), "f");
    let free = fx.fs.fsstat().unwrap().free_bytes;
    fx.write(f, 0, &vec![0xee; 3 * C as usize]);
    let attr = fx.fs.setattr(f, &fx.size(C + 10), None).unwrap();
    assert_eq!((attr.size_bytes, attr.used_bytes), (C + 10, 2 * C));
    let attr = fx.fs.setattr(f, &fx.size(4 * C), None).unwrap();
    assert_eq!((attr.size_bytes, attr.used_bytes), (4 * C, 2 * C));
    let contents = fx.contents(f);
    assert!(contents[..(C + 10) as usize].iter().all(|&b| b == 0xee));
    assert!(contents[(C + 10) as usize..].iter().all(|&b| b == 0));
    assert_eq!(contents.len() as u64, 4 * C);
    fx.fs.setattr(f, &fx.size(0), None).unwrap();
    assert_eq!(fx.fs.getattr(f).unwrap().used_bytes, 0);
    assert_eq!(fx.fs.fsstat().unwrap().free_bytes, free);
}

#[test]
fn no_space_at_the_cap_leaves_the_file_unchanged() {
    // The root's and f's inodes and f's name, then two chunks of data.
    let meta = 2 * INODE_CHARGE_BYTES + ENTRY_CHARGE_BYTES + 1;
    let fx = Fx::with(MemConfig {
        capacity_bytes: 2 * C + meta,
        ..MemConfig::default()
    });
    let f = fx.create(fx.root(), "f");
    fx.write(f, 0, b"keep");
    let before = fx.fs.getattr(f).unwrap();
    fx.tick();
    let big = vec![1; 2 * C as usize];
    let result = fx.fs.write(f, 2, &big, Stability::FileSync);
    assert_eq!(result, Err(FsError::NoSpc));
    assert_eq!(fx.fs.getattr(f).unwrap(), before);
    assert_eq!(fx.contents(f), b"keep");
    let stat = fx.fs.fsstat().unwrap();
    assert_eq!(
        (stat.total_bytes, stat.free_bytes, stat.avail_bytes),
        (2 * C + meta, C, C)
    );
    // What fits still goes in, and removing the file gives everything back.
    fx.write(f, C, &[2; 10]);
    assert_eq!(fx.fs.fsstat().unwrap().free_bytes, 0);
    assert_eq!(
        fx.fs.write(f, 3 * C, &[3], Stability::Unstable),
        Err(FsError::NoSpc)
    );
    fx.fs.remove(fx.root(), &n("f")).unwrap();
    assert_eq!(
        fx.fs.fsstat().unwrap().free_bytes,
        2 * C + meta - INODE_CHARGE_BYTES
    );
}

#[test]
fn symlink_targets_count_against_the_cap() {
    // The root's and s's inodes and s's name, then 10 bytes of targets.
    let meta = 2 * INODE_CHARGE_BYTES + ENTRY_CHARGE_BYTES + 1;
    let fx = Fx::with(MemConfig {
        capacity_bytes: 10 + meta,
        ..MemConfig::default()
    });
    let root = fx.root();
    let none = SetAttr::default();
    let s = fx
        .fs
        .symlink(root, &n("s"), b"123456", &none, OWNER)
        .unwrap();
    assert_eq!(fx.fs.getattr(s).unwrap().used_bytes, 6);
    let full = fx.fs.symlink(root, &n("t"), b"12345", &none, OWNER);
    assert_eq!(full, Err(FsError::NoSpc));
    assert_eq!(fx.fs.lookup(root, &n("t")), Err(FsError::NoEnt));
    assert_eq!(fx.fs.fsstat().unwrap().free_files, 1_000_000 - 2);
    fx.fs.remove(root, &n("s")).unwrap();
    assert_eq!(
        fx.fs.fsstat().unwrap().free_bytes,
        10 + meta - INODE_CHARGE_BYTES
    );
}

#[test]
fn names_and_inodes_count_against_the_cap() {
    // Empty files with long names: each costs an inode and an entry, so a small cap
    // fills up by metadata alone, and removing them gives every byte back.
    let name_of = |i: usize| format!("{i:0>255}");
    let each = INODE_CHARGE_BYTES + ENTRY_CHARGE_BYTES + 255;
    let capacity = 64 << 10;
    let fx = Fx::with(MemConfig {
        capacity_bytes: capacity,
        ..MemConfig::default()
    });
    let root = fx.root();
    let none = SetAttr::default();
    let mut made = 0;
    let refused = loop {
        let how = CreateMode::Unchecked(none.clone());
        match fx.fs.create(root, &n(&name_of(made)), &how, OWNER) {
            Ok(_) => made += 1,
            Err(err) => break err,
        }
    };
    assert_eq!(refused, FsError::NoSpc);
    assert_eq!(made as u64, (capacity - INODE_CHARGE_BYTES) / each);
    let stat = fx.fs.fsstat().unwrap();
    assert!(stat.free_bytes < each, "{} bytes left", stat.free_bytes);
    for i in 0..made {
        fx.fs.remove(root, &n(&name_of(i))).unwrap();
    }
    let stat = fx.fs.fsstat().unwrap();
    assert_eq!(stat.free_bytes, capacity - INODE_CHARGE_BYTES);
}

#[test]
fn file_count_cap() {
    let fx = Fx::with(MemConfig {
        max_files: 3,
        ..MemConfig::default()
    });
    let root = fx.root();
    fx.create(root, "a");
    fx.mkdir(root, "d");
    let stat = fx.fs.fsstat().unwrap();
    assert_eq!(
        (stat.total_files, stat.free_files, stat.avail_files),
        (3, 0, 0)
    );
    let mode = CreateMode::Guarded(SetAttr::default());
    assert_eq!(
        fx.fs.create(root, &n("b"), &mode, OWNER),
        Err(FsError::NoSpc)
    );
    let none = SetAttr::default();
    assert_eq!(
        fx.fs.mkdir(root, &n("e"), &none, OWNER),
        Err(FsError::NoSpc)
    );
    let fifo = fx.fs.mknod(root, &n("p"), SpecialFile::Fifo, &none, OWNER);
    assert_eq!(fifo, Err(FsError::NoSpc));
    // A link is a name, not a file.
    let a = fx.fs.lookup(root, &n("a")).unwrap();
    fx.fs.link(a, root, &n("a2")).unwrap();
    fx.fs.remove(root, &n("a")).unwrap();
    assert_eq!(fx.fs.fsstat().unwrap().free_files, 0);
    fx.fs.remove(root, &n("a2")).unwrap();
    assert_eq!(fx.fs.fsstat().unwrap().free_files, 1);
    fx.create(root, "b");
}

#[test]
fn hard_links_count_names_and_the_last_one_frees_the_file() {
    let fx = Fx::new();
    let root = fx.root();
    let d = fx.mkdir(root, "d");
    let free = fx.fs.fsstat().unwrap().free_bytes;
    let f = fx.create(root, "f");
    fx.write(f, 0, b"data");
    fx.fs.link(f, d, &n("g")).unwrap();
    fx.fs.link(f, root, &n("h")).unwrap();
    assert_eq!(fx.fs.getattr(f).unwrap().nlink, 3);
    assert_eq!(fx.fs.lookup(d, &n("g")), Ok(f));
    fx.fs.remove(root, &n("f")).unwrap();
    fx.fs.remove(root, &n("h")).unwrap();
    assert_eq!(fx.fs.getattr(f).unwrap().nlink, 1);
    assert_eq!(fx.contents(f), b"data");
    fx.fs.remove(d, &n("g")).unwrap();
    assert_eq!(fx.fs.getattr(f), Err(FsError::Stale));
    assert_eq!(fx.fs.read(f, 0, 4), Err(FsError::Stale));
    let write = fx.fs.write(f, 0, b"x", Stability::Unstable);
    assert_eq!(write, Err(FsError::Stale));
    assert_eq!(fx.fs.link(f, root, &n("back")), Err(FsError::Stale));
    assert_eq!(fx.fs.fsstat().unwrap().free_bytes, free);
}

#[test]
fn link_errors() {
    let fx = Fx::new();
    let root = fx.root();
    let d = fx.mkdir(root, "d");
    let f = fx.create(root, "f");
    assert_eq!(fx.fs.link(d, root, &n("d2")), Err(FsError::IsDir));
    assert_eq!(fx.fs.link(f, root, &n("d")), Err(FsError::Exist));
    assert_eq!(fx.fs.link(f, f, &n("x")), Err(FsError::NotDir));
    assert_eq!(fx.fs.link(FileId(999), root, &n("x")), Err(FsError::Stale));
    assert_eq!(fx.fs.link(f, FileId(999), &n("x")), Err(FsError::Stale));
}

#[test]
fn link_limit() {
    let fx = Fx::new();
    let root = fx.root();
    let f = fx.create(root, "f");
    for i in 1..MAX_LINKS {
        fx.fs.link(f, root, &n(&format!("l{i}"))).unwrap();
    }
    assert_eq!(fx.fs.getattr(f).unwrap().nlink, MAX_LINKS);
    assert_eq!(fx.fs.link(f, root, &n("one-more")), Err(FsError::MLink));
}

#[test]
fn subdirectory_limit() {
    let fx = Fx::new();
    let root = fx.root();
    let none = SetAttr::default();
    for i in 2..MAX_LINKS {
        fx.mkdir(root, &format!("d{i}"));
    }
    assert_eq!(fx.fs.getattr(root).unwrap().nlink, MAX_LINKS);
    assert_eq!(
        fx.fs.mkdir(root, &n("x"), &none, OWNER),
        Err(FsError::MLink)
    );
    let other = fx.fs.lookup(root, &n("d2")).unwrap();
    fx.mkdir(other, "moving");
    let moved = fx.fs.rename(other, &n("moving"), root, &n("x"));
    assert_eq!(moved, Err(FsError::MLink));
    // Replacing a directory does not add a link.
    fx.fs.rename(other, &n("moving"), root, &n("d3")).unwrap();
}

#[test]
fn directory_nlink_counts_subdirectories() {
    let fx = Fx::new();
    let root = fx.root();
    let nlink = |id| fx.fs.getattr(id).unwrap().nlink;
    let a = fx.mkdir(root, "a");
    let b = fx.mkdir(root, "b");
    fx.create(root, "f");
    assert_eq!((nlink(root), nlink(a)), (4, 2));
    let c = fx.mkdir(a, "c");
    assert_eq!((nlink(a), nlink(c)), (3, 2));
    fx.fs.rename(a, &n("c"), b, &n("c")).unwrap();
    assert_eq!((nlink(a), nlink(b)), (2, 3));
    assert_eq!(fx.fs.parent(c), Ok(b));
    fx.fs.rmdir(b, &n("c")).unwrap();
    assert_eq!(nlink(b), 2);
    assert_eq!(fx.fs.getattr(c), Err(FsError::Stale));
    fx.fs.rmdir(root, &n("b")).unwrap();
    assert_eq!(nlink(root), 3);
}

#[test]
fn remove_and_rmdir_errors() {
    let fx = Fx::new();
    let root = fx.root();
    let d = fx.mkdir(root, "d");
    let f = fx.create(d, "f");
    assert_eq!(fx.fs.remove(root, &n("d")), Err(FsError::IsDir));
    assert_eq!(fx.fs.rmdir(d, &n("f")), Err(FsError::NotDir));
    assert_eq!(fx.fs.rmdir(root, &n("d")), Err(FsError::NotEmpty));
    assert_eq!(fx.fs.remove(root, &n("nope")), Err(FsError::NoEnt));
    assert_eq!(fx.fs.rmdir(root, &n("nope")), Err(FsError::NoEnt));
    assert_eq!(fx.fs.remove(f, &n("x")), Err(FsError::NotDir));
    fx.fs.remove(d, &n("f")).unwrap();
    fx.fs.rmdir(root, &n("d")).unwrap();
    assert_eq!(fx.fs.lookup(d, &n("f")), Err(FsError::Stale));
    assert_eq!(fx.fs.readdir(d, Cookie::START, 10), Err(FsError::Stale));
    let none = SetAttr::default();
    assert_eq!(fx.fs.mkdir(d, &n("x"), &none, OWNER), Err(FsError::Stale));
    assert_eq!(fx.fs.fsstat().unwrap().free_files, 1_000_000 - 1);
}

#[test]
fn rename_replaces_compatible_targets() {
    let fx = Fx::new();
    let root = fx.root();
    let f = fx.create(root, "f");
    let g = fx.create(root, "g");
    fx.write(f, 0, b"from f");
    fx.write(g, 0, b"old g");
    fx.fs.rename(root, &n("f"), root, &n("g")).unwrap();
    assert_eq!(fx.fs.lookup(root, &n("g")), Ok(f));
    assert_eq!(fx.fs.lookup(root, &n("f")), Err(FsError::NoEnt));
    assert_eq!(fx.fs.getattr(g), Err(FsError::Stale));
    assert_eq!(fx.contents(f), b"from f");
    // A replaced file with another name lives on.
    let h = fx.create(root, "h");
    fx.fs.link(h, root, &n("h2")).unwrap();
    fx.fs.rename(root, &n("g"), root, &n("h")).unwrap();
    assert_eq!(fx.fs.getattr(h).unwrap().nlink, 1);
    // An empty directory may be replaced by a directory.
    let d = fx.mkdir(root, "d");
    let e = fx.mkdir(root, "e");
    fx.fs.rename(root, &n("d"), root, &n("e")).unwrap();
    assert_eq!(fx.fs.lookup(root, &n("e")), Ok(d));
    assert_eq!(fx.fs.getattr(e), Err(FsError::Stale));
    assert_eq!(fx.fs.getattr(root).unwrap().nlink, 3);
    assert_eq!(fx.names(root), ["h2", "h", "e"]);
}

#[test]
fn rename_of_the_same_file_does_nothing() {
    let fx = Fx::new();
    let root = fx.root();
    let f = fx.create(root, "f");
    fx.fs.link(f, root, &n("g")).unwrap();
    let before = fx.fs.getattr(root).unwrap();
    fx.tick();
    fx.fs.rename(root, &n("f"), root, &n("g")).unwrap();
    fx.fs.rename(root, &n("f"), root, &n("f")).unwrap();
    assert_eq!(fx.fs.getattr(root).unwrap(), before);
    assert_eq!(fx.fs.lookup(root, &n("f")), Ok(f));
    assert_eq!(fx.fs.lookup(root, &n("g")), Ok(f));
    assert_eq!(fx.fs.getattr(f).unwrap().nlink, 2);
}

#[test]
fn rename_refusals() {
    let fx = Fx::new();
    let root = fx.root();
    let a = fx.mkdir(root, "a");
    let b = fx.mkdir(a, "b");
    fx.create(b, "x");
    fx.create(root, "f");
    fx.mkdir(root, "empty");
    let rename = |fd, f: &str, td, t: &str| fx.fs.rename(fd, &n(f), td, &n(t));
    assert_eq!(rename(root, "f", root, "a"), Err(FsError::IsDir));
    assert_eq!(rename(root, "empty", root, "f"), Err(FsError::NotDir));
    assert_eq!(rename(root, "empty", a, "b"), Err(FsError::NotEmpty));
    assert_eq!(rename(root, "a", a, "z"), Err(FsError::Inval));
    assert_eq!(rename(root, "a", b, "z"), Err(FsError::Inval));
    assert_eq!(rename(root, "nope", root, "z"), Err(FsError::NoEnt));
    assert_eq!(rename(b, "x", a, "b"), Err(FsError::IsDir));
    // The target is an ancestor of the source: it is not empty.
    assert_eq!(rename(a, "b", root, "a"), Err(FsError::NotEmpty));
    let file = fx.fs.lookup(root, &n("f")).unwrap();
    assert_eq!(rename(file, "x", root, "z"), Err(FsError::NotDir));
    assert_eq!(rename(root, "f", file, "z"), Err(FsError::NotDir));
    assert_eq!(rename(FileId(99), "x", root, "z"), Err(FsError::Stale));
    // Nothing moved.
    assert_eq!(fx.names(root), ["a", "f", "empty"]);
    assert_eq!(fx.names(a), ["b"]);
    assert_eq!(fx.names(b), ["x"]);
}

#[test]
fn readdir_lists_dots_then_entries() {
    let fx = Fx::new();
    let root = fx.root();
    let d = fx.mkdir(root, "d");
    let f = fx.create(d, "f");
    let page = fx.fs.readdir(d, Cookie::START, 10).unwrap();
    let got: Vec<(&[u8], FileId, u64)> = page
        .entries
        .iter()
        .map(|e| (&e.name[..], e.fileid, e.cookie.0))
        .collect();
    assert_eq!(got, [(&b"."[..], d, 1), (b"..", root, 2), (b"f", f, 3)]);
    assert!(page.eof);
    assert_eq!(page.verifier, 0);
    assert_eq!(fx.fs.readdir(f, Cookie::START, 10), Err(FsError::NotDir));
    assert_eq!(fx.fs.readdir(d, Cookie::START, 0), Err(FsError::TooSmall));
    let beyond = fx.fs.readdir(d, Cookie(1 << 40), 10).unwrap();
    assert!(beyond.entries.is_empty() && beyond.eof);
    let rest = fx.fs.readdir(d, Cookie(2), 10).unwrap();
    assert_eq!(rest.entries.len(), 1);
}

#[test]
fn readdir_cookies_survive_inserts_and_removes() {
    let fx = Fx::new();
    let root = fx.root();
    let d = fx.mkdir(root, "d");
    for i in 0..10 {
        fx.create(d, &format!("f{i}"));
    }
    // First half: ., .., f0..f3.
    let first = fx.fs.readdir(d, Cookie::START, 6).unwrap();
    assert!(!first.eof);
    let mut seen: Vec<String> = first
        .entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    // Meanwhile: remove listed and unlisted entries (including the one the cookie names),
    // add new ones, rename one that was not listed yet.
    for gone in ["f3", "f1", "f5", "f8"] {
        fx.fs.remove(d, &n(gone)).unwrap();
    }
    fx.create(d, "new1");
    fx.fs.rename(d, &n("f9"), d, &n("f9-renamed")).unwrap();
    fx.create(d, "new2");
    let mut cookie = first.entries.last().unwrap().cookie;
    loop {
        let page = fx.fs.readdir(d, cookie, 2).unwrap();
        for entry in &page.entries {
            seen.push(String::from_utf8_lossy(&entry.name).into_owned());
            cookie = entry.cookie;
        }
        if page.eof {
            break;
        }
    }
    let unique: std::collections::BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "listed twice: {seen:?}");
    for survivor in fx.names(d) {
        assert!(seen.contains(&survivor), "{survivor} skipped in {seen:?}");
    }
    let expected = [
        ".",
        "..",
        "f0",
        "f1",
        "f2",
        "f3",
        "f4",
        "f6",
        "f7",
        "new1",
        "f9-renamed",
        "new2",
    ];
    assert_eq!(seen, expected);
}

#[test]
fn exclusive_create_accepts_its_retransmission() {
    let fx = Fx::new();
    let root = fx.root();
    let excl = |v: u8| {
        fx.fs
            .create(root, &n("f"), &CreateMode::Exclusive([v; 8]), OWNER)
    };
    let f = excl(1).unwrap();
    assert_eq!(excl(1), Ok(f));
    assert_eq!(excl(2), Err(FsError::Exist));
    let guarded = CreateMode::Guarded(SetAttr::default());
    assert_eq!(
        fx.fs.create(root, &n("f"), &guarded, OWNER),
        Err(FsError::Exist)
    );
    let attr = fx.fs.getattr(f).unwrap();
    assert_eq!(
        (attr.mode, attr.uid, attr.gid),
        (0o644, OWNER.uid, OWNER.gid)
    );
    // A file created otherwise carries no verifier.
    fx.create(root, "g");
    let again = fx
        .fs
        .create(root, &n("g"), &CreateMode::Exclusive([0; 8]), OWNER);
    assert_eq!(again, Err(FsError::Exist));
}

#[test]
fn unchecked_create_reuses_regular_files_only() {
    let fx = Fx::new();
    let root = fx.root();
    let f = fx.create(root, "f");
    fx.write(f, 0, &vec![9; C as usize + 1]);
    fx.mkdir(root, "d");
    fx.fs
        .symlink(root, &n("s"), b"f", &SetAttr::default(), OWNER)
        .unwrap();
    let truncate = CreateMode::Unchecked(SetAttr {
        size_bytes: Some(0),
        mode: Some(0o600),
        uid: Some(0),
        ..SetAttr::default()
    });
    assert_eq!(fx.fs.create(root, &n("f"), &truncate, OWNER), Ok(f));
    let attr = fx.fs.getattr(f).unwrap();
    // Only the size applies to an existing file.
    assert_eq!((attr.size_bytes, attr.used_bytes), (0, 0));
    assert_eq!((attr.mode, attr.uid), (0o644, OWNER.uid));
    assert_eq!(
        fx.fs.create(root, &n("d"), &truncate, OWNER),
        Err(FsError::Exist)
    );
    assert_eq!(
        fx.fs.create(root, &n("s"), &truncate, OWNER),
        Err(FsError::Exist)
    );
    let keep = CreateMode::Unchecked(SetAttr::default());
    fx.write(f, 0, b"abc");
    assert_eq!(fx.fs.create(root, &n("f"), &keep, OWNER), Ok(f));
    assert_eq!(fx.contents(f), b"abc");
}

#[test]
fn create_applies_mode_size_and_times_but_not_owner() {
    let fx = Fx::new();
    let root = fx.root();
    let t = Timestamp {
        seconds: 5,
        nanos: 6,
    };
    let attrs = SetAttr {
        mode: Some(0o4640 | 0o100_000),
        uid: Some(0),
        gid: Some(0),
        size_bytes: Some(3 * C),
        atime: SetTime::Client(t),
        mtime: SetTime::Client(t),
    };
    let f = fx
        .fs
        .create(root, &n("f"), &CreateMode::Guarded(attrs.clone()), OWNER)
        .unwrap();
    let attr = fx.fs.getattr(f).unwrap();
    assert_eq!(
        (attr.mode, attr.uid, attr.gid),
        (0o4640, OWNER.uid, OWNER.gid)
    );
    assert_eq!(
        (attr.size_bytes, attr.used_bytes, attr.nlink),
        (3 * C, 0, 1)
    );
    // ctime is the creation's stamp, the one the directory got too: the directory's
    // attributes before the change went to the caller (observed), so in multigrain mode
    // that stamp is a fine-grained tick past START.
    let dir_ctime = fx.fs.getattr(root).unwrap().ctime;
    assert!(dir_ctime > START && dir_ctime.seconds == START.seconds);
    assert_eq!((attr.atime, attr.mtime, attr.ctime), (t, t, dir_ctime));
    let d = fx.fs.mkdir(root, &n("d"), &attrs, OWNER).unwrap();
    let dattr = fx.fs.getattr(d).unwrap();
    assert_eq!((dattr.mode, dattr.uid, dattr.mtime), (0o4640, OWNER.uid, t));
    let none = SetAttr::default();
    let d2 = fx.mkdir(root, "d2");
    assert_eq!(fx.fs.getattr(d2).unwrap().mode, 0o755);
    let s = fx
        .fs
        .symlink(root, &n("s"), b"target", &none, OWNER)
        .unwrap();
    let sattr = fx.fs.getattr(s).unwrap();
    assert_eq!(
        (sattr.file_type, sattr.mode, sattr.size_bytes),
        (FileType::Symlink, 0o777, 6)
    );
    assert_eq!(fx.fs.readlink(s).unwrap(), &b"target"[..]);
    let too_big = CreateMode::Guarded(fx.size(MAX_FILE_SIZE + 1));
    assert_eq!(
        fx.fs.create(root, &n("big"), &too_big, OWNER),
        Err(FsError::FBig)
    );
    assert_eq!(fx.fs.lookup(root, &n("big")), Err(FsError::NoEnt));
    let empty = fx.fs.symlink(root, &n("e"), b"", &none, OWNER);
    assert_eq!(empty, Err(FsError::Inval));
    let long = vec![b'x'; vfs::limits::MAX_PATH_BYTES + 1];
    let long = fx.fs.symlink(root, &n("e"), &long, &none, OWNER);
    assert_eq!(long, Err(FsError::NameTooLong));
    assert_eq!(
        fx.fs.mkdir(root, &n("f"), &none, OWNER),
        Err(FsError::Exist)
    );
}

#[test]
fn special_files_keep_their_kind_and_device() {
    let fx = Fx::new();
    let root = fx.root();
    let none = SetAttr::default();
    let dev = DeviceNumber { major: 8, minor: 1 };
    let kinds = [
        (
            "blk",
            SpecialFile::BlockDevice(dev),
            FileType::BlockDevice,
            dev,
        ),
        (
            "chr",
            SpecialFile::CharDevice(dev),
            FileType::CharDevice,
            dev,
        ),
        (
            "sock",
            SpecialFile::Socket,
            FileType::Socket,
            DeviceNumber::default(),
        ),
        (
            "fifo",
            SpecialFile::Fifo,
            FileType::Fifo,
            DeviceNumber::default(),
        ),
    ];
    for (name, kind, file_type, rdev) in kinds {
        let id = fx.fs.mknod(root, &n(name), kind, &none, OWNER).unwrap();
        let attr = fx.fs.getattr(id).unwrap();
        assert_eq!(
            (attr.file_type, attr.rdev, attr.mode),
            (file_type, rdev, 0o644)
        );
        assert_eq!(fx.fs.read(id, 0, 1), Err(FsError::Inval));
        assert_eq!(
            fx.fs.write(id, 0, b"x", Stability::Unstable),
            Err(FsError::Inval)
        );
        assert_eq!(fx.fs.setattr(id, &fx.size(0), None), Err(FsError::Inval));
        assert_eq!(fx.fs.readlink(id), Err(FsError::Inval));
        assert_eq!(fx.fs.commit(id, 0, 0), Err(FsError::Inval));
    }
}

#[test]
fn io_on_directories_and_symlinks() {
    let fx = Fx::new();
    let root = fx.root();
    let s = fx
        .fs
        .symlink(root, &n("s"), b"t", &SetAttr::default(), OWNER)
        .unwrap();
    assert_eq!(fx.fs.read(root, 0, 1), Err(FsError::IsDir));
    assert_eq!(
        fx.fs.write(root, 0, b"x", Stability::Unstable),
        Err(FsError::IsDir)
    );
    assert_eq!(fx.fs.commit(root, 0, 0), Err(FsError::IsDir));
    assert_eq!(fx.fs.setattr(root, &fx.size(0), None), Err(FsError::IsDir));
    assert_eq!(fx.fs.readlink(root), Err(FsError::Inval));
    assert_eq!(fx.fs.read(s, 0, 1), Err(FsError::Inval));
    assert_eq!(fx.fs.setattr(s, &fx.size(0), None), Err(FsError::Inval));
    assert_eq!(fx.fs.lookup(s, &n("x")), Err(FsError::NotDir));
    assert_eq!(fx.fs.parent(s), Err(FsError::NotDir));
    assert_eq!(fx.fs.lookup(root, &n("x")), Err(FsError::NoEnt));
    assert_eq!(fx.fs.getattr(FileId(0)), Err(FsError::Stale));
}

#[test]
fn reads_writes_and_limits() {
    let fx = Fx::new();
    let f = fx.create(fx.root(), "f");
    for stable in [
        Stability::Unstable,
        Stability::DataSync,
        Stability::FileSync,
    ] {
        let reply = fx.fs.write(f, 0, b"hello world", stable).unwrap();
        assert_eq!((reply.count, reply.committed), (11, stable));
    }
    let read = |offset, count| fx.fs.read(f, offset, count).unwrap();
    assert_eq!(
        (&read(0, 5).data[..], read(0, 5).eof),
        (&b"hello"[..], false)
    );
    assert_eq!(
        (&read(6, 5).data[..], read(6, 5).eof),
        (&b"world"[..], true)
    );
    assert_eq!(
        (&read(6, 50).data[..], read(6, 50).eof),
        (&b"world"[..], true)
    );
    assert!(read(11, 5).data.is_empty() && read(11, 5).eof);
    assert!(read(u64::MAX, 5).data.is_empty() && read(u64::MAX, 5).eof);
    assert_eq!(fx.fs.commit(f, 0, 0), Ok(()));
    let last = MAX_FILE_SIZE - 1;
    assert_eq!(
        fx.fs.write(f, last, b"ab", Stability::Unstable),
        Err(FsError::FBig)
    );
    assert_eq!(
        fx.fs.write(f, u64::MAX, b"a", Stability::Unstable),
        Err(FsError::FBig)
    );
    fx.write(f, last, b"z");
    assert_eq!(fx.fs.getattr(f).unwrap().size_bytes, MAX_FILE_SIZE);
    assert_eq!(&read(last, 10).data[..], b"z");
    assert_eq!(
        fx.fs.setattr(f, &fx.size(MAX_FILE_SIZE + 1), None),
        Err(FsError::FBig)
    );
    // One read never returns more than MAX_IO_BYTES, and says so without eof.
    let big = read(0, u32::MAX);
    assert_eq!((big.data.len(), big.eof), (MAX_IO_BYTES as usize, false));
    assert_eq!(fx.fs.getattr(f).unwrap().used_bytes, 2 * C);
}

#[test]
fn setattr_guard_must_match_ctime() {
    let fx = Fx::new();
    let f = fx.create(fx.root(), "f");
    let ctime = fx.fs.getattr(f).unwrap().ctime;
    let later = fx.tick();
    let chmod = SetAttr {
        mode: Some(0o600),
        ..SetAttr::default()
    };
    assert_eq!(fx.fs.setattr(f, &chmod, Some(later)), Err(FsError::NotSync));
    assert_eq!(fx.fs.getattr(f).unwrap().mode, 0o644);
    let attr = fx.fs.setattr(f, &chmod, Some(ctime)).unwrap();
    assert_eq!((attr.mode, attr.ctime), (0o600, later));
    // The old guard no longer matches.
    assert_eq!(fx.fs.setattr(f, &chmod, Some(ctime)), Err(FsError::NotSync));
    assert_eq!(fx.fs.setattr(FileId(77), &chmod, None), Err(FsError::Stale));
}

#[test]
fn setattr_changes_what_is_asked() {
    let fx = Fx::new();
    let f = fx.create(fx.root(), "f");
    let now = fx.tick();
    let client = Timestamp {
        seconds: 42,
        nanos: 1,
    };
    let set = SetAttr {
        mode: Some(0o7777),
        uid: Some(5),
        gid: Some(6),
        size_bytes: None,
        atime: SetTime::ServerTime,
        mtime: SetTime::Client(client),
    };
    let attr = fx.fs.setattr(f, &set, None).unwrap();
    assert_eq!((attr.mode, attr.uid, attr.gid), (0o7777, 5, 6));
    assert_eq!((attr.atime, attr.mtime, attr.ctime), (now, client, now));
    // An empty change changes nothing, not even ctime.
    fx.tick();
    assert_eq!(
        fx.fs.setattr(f, &SetAttr::default(), None),
        Ok(attr.clone())
    );
    assert_eq!(fx.fs.getattr(f), Ok(attr));
}

#[test]
fn timestamps_move_with_changes() {
    let fx = Fx::new();
    let root = fx.root();
    let times = |id| {
        let a = fx.fs.getattr(id).unwrap();
        (a.atime, a.mtime, a.ctime)
    };
    let t1 = fx.tick();
    let d = fx.mkdir(root, "d");
    assert_eq!(times(d), (t1, t1, t1));
    assert_eq!(times(root), (START, t1, t1));
    let t2 = fx.tick();
    let f = fx.create(d, "f");
    assert_eq!(times(d), (t1, t2, t2));
    let t3 = fx.tick();
    fx.write(f, 0, b"data");
    assert_eq!(times(f), (t2, t3, t3));
    fx.tick();
    fx.fs.read(f, 0, 4).unwrap();
    assert_eq!(times(f), (t2, t3, t3), "reads leave atime alone (noatime)");
    let t5 = fx.tick();
    fx.fs.setattr(f, &fx.size(4), None).unwrap();
    assert_eq!(times(f), (t2, t3, t5), "same size: ctime only");
    let t6 = fx.tick();
    fx.fs.setattr(f, &fx.size(2), None).unwrap();
    assert_eq!(times(f), (t2, t6, t6));
    let t7 = fx.tick();
    fx.fs.link(f, root, &n("g")).unwrap();
    assert_eq!((times(f).2, times(root).1, times(root).2), (t7, t7, t7));
    let t8 = fx.tick();
    fx.fs.rename(d, &n("f"), root, &n("h")).unwrap();
    assert_eq!((times(f).1, times(f).2), (t6, t8));
    assert_eq!((times(d).1, times(d).2, times(root).1), (t8, t8, t8));
    let t9 = fx.tick();
    fx.fs.remove(root, &n("g")).unwrap();
    assert_eq!((times(f).2, times(root).2), (t9, t9));
    let t10 = fx.tick();
    fx.fs.rmdir(root, &n("d")).unwrap();
    assert_eq!(times(root), (START, t10, t10));
}

#[test]
fn ids_are_never_reused() {
    let fx = Fx::new();
    let root = fx.root();
    let a = fx.create(root, "a");
    fx.fs.remove(root, &n("a")).unwrap();
    let b = fx.create(root, "a");
    assert!(b > a);
    assert_eq!(fx.fs.getattr(a), Err(FsError::Stale));
    assert_eq!(fx.fs.lookup(root, &n("a")), Ok(b));
}
