//! The object backend against a real PostgreSQL and a real S3 server
//! (`scripts/object-env.sh start DIR`, then `. DIR/env`): these tests fail when the
//! engines are absent, unless GRANARY_OBJECT_TESTS=skip says to skip them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use granary_backend_object::{ObjectFs, TestEngines};
use gtime::{Clock, ManualClock, SystemClock, Timestamp};
use vfs::{
    Backend, Cookie, CreateMode, FileId, FileType, FsError, SetAttr, SpecialFile, Stability,
};

mod common;

use common::{create, head, name, query_i64, read, sql, ROOT};

fn engines() -> Option<TestEngines> {
    TestEngines::from_env()
}

fn read_all(fs: &ObjectFs, id: FileId, offset: u64, count: u32) -> Vec<u8> {
    read(fs, id, offset, count).unwrap()
}

fn names(fs: &ObjectFs, dir: FileId) -> Vec<String> {
    let (page, _) = fs.readdir(dir, Cookie::START, 1000, &ROOT).unwrap();
    assert!(page.eof);
    page.entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect()
}

#[test]
fn namespace_operations() {
    let Some(env) = engines() else { return };
    let fs = head(&env.fresh("namespace"));
    let root = fs.root();
    let f = create(&fs, root, "f");
    assert_eq!(
        fs.create(
            root,
            &name("f"),
            &CreateMode::Guarded(SetAttr::default()),
            &ROOT
        ),
        Err(FsError::Exist)
    );
    let d = fs
        .mkdir(root, &name("d"), &SetAttr::default(), &ROOT)
        .unwrap();
    assert_eq!(d.attr.file_type, FileType::Directory);
    assert_eq!(d.attr.nlink, 2);
    assert_eq!(fs.getattr(root).unwrap().nlink, 3);
    let found = fs.lookup(root, &name("f"), &ROOT).unwrap();
    assert_eq!(found.attr.fileid, f);
    assert_eq!(fs.lookup(root, &name("nope"), &ROOT), Err(FsError::NoEnt));
    assert_eq!(names(&fs, root), [".", "..", "f", "d"]);

    let s = fs
        .symlink(root, &name("s"), b"f", &SetAttr::default(), &ROOT)
        .unwrap();
    assert_eq!(&fs.readlink(s.attr.fileid).unwrap().0[..], b"f");
    let fifo = fs
        .mknod(
            root,
            &name("p"),
            SpecialFile::Fifo,
            &SetAttr::default(),
            &ROOT,
        )
        .unwrap();
    assert_eq!(fifo.attr.file_type, FileType::Fifo);

    let linked = fs.link(f, d.attr.fileid, &name("g"), &ROOT).unwrap();
    assert_eq!(linked.attr.nlink, 2);
    fs.rename(root, &name("f"), d.attr.fileid, &name("h"), &ROOT)
        .unwrap();
    assert_eq!(names(&fs, d.attr.fileid), [".", "..", "g", "h"]);
    assert_eq!(fs.parent(d.attr.fileid, &ROOT).unwrap().attr.fileid, root);
    assert_eq!(
        fs.rmdir(root, &name("d"), &ROOT),
        Err(FsError::NotEmpty),
        "a directory with entries stays"
    );
    fs.remove(d.attr.fileid, &name("g"), &ROOT).unwrap();
    assert_eq!(fs.getattr(f).unwrap().nlink, 1);
    fs.remove(d.attr.fileid, &name("h"), &ROOT).unwrap();
    assert_eq!(
        fs.getattr(f),
        Err(FsError::Stale),
        "the last link took the inode"
    );
    fs.rmdir(root, &name("d"), &ROOT).unwrap();
    assert_eq!(fs.getattr(root).unwrap().nlink, 2);
    assert_eq!(names(&fs, root), [".", "..", "s", "p"]);

    // Exclusive create: the same verifier is a retransmission, another is EXIST.
    let v = CreateMode::Exclusive(*b"verifier");
    let a = fs.create(root, &name("x"), &v, &ROOT).unwrap().attr.fileid;
    assert_eq!(
        fs.create(root, &name("x"), &v, &ROOT).unwrap().attr.fileid,
        a
    );
    assert_eq!(
        fs.create(
            root,
            &name("x"),
            &CreateMode::Exclusive(*b"another!"),
            &ROOT
        ),
        Err(FsError::Exist)
    );
}

#[test]
fn readdir_pages_resume_after_their_cookie() {
    let Some(env) = engines() else { return };
    let fs = head(&env.fresh("readdir"));
    let root = fs.root();
    for i in 0..25 {
        create(&fs, root, &format!("f{i:02}"));
    }
    let mut seen = Vec::new();
    let mut cookie = Cookie::START;
    loop {
        let (page, _) = fs.readdir(root, cookie, 7, &ROOT).unwrap();
        assert!(page.entries.len() <= 7);
        seen.extend(
            page.entries
                .iter()
                .map(|e| String::from_utf8_lossy(&e.name).into_owned()),
        );
        if page.eof {
            break;
        }
        cookie = page.entries.last().unwrap().cookie;
    }
    assert_eq!(seen.len(), 27);
    assert_eq!(&seen[..3], [".", "..", "f00"]);
}

#[test]
fn small_files_stay_in_the_database() {
    let Some(env) = engines() else { return };
    let fs = head(&env.fresh("inline"));
    let f = create(&fs, fs.root(), "small");
    let w = fs
        .write(f, 0, b"hello, object", Stability::Unstable, &ROOT)
        .unwrap();
    assert_eq!(w.committed, Stability::Unstable);
    assert_eq!(w.file.after.size_bytes, 13);
    assert_eq!(
        read_all(&fs, f, 0, 100),
        b"hello, object",
        "read your own unstable write"
    );
    fs.commit(f, 0, 0).unwrap();
    assert_eq!(
        fs.slice_counts(f).unwrap(),
        (1, 0),
        "one inline slice, no object"
    );
    assert_eq!(read_all(&fs, f, 7, 100), b"object");
}

#[test]
fn large_files_go_to_objects_and_a_small_write_adds_one_slice_and_one_object() {
    let Some(env) = engines() else { return };
    let fs = head(&env.fresh("large"));
    let f = create(&fs, fs.root(), "big");
    let mut expect: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    for (i, chunk) in expect.chunks(64 << 10).enumerate() {
        fs.write(
            f,
            (i * (64 << 10)) as u64,
            chunk,
            Stability::Unstable,
            &ROOT,
        )
        .unwrap();
    }
    fs.commit(f, 0, 0).unwrap();
    let (slices, objects) = fs.slice_counts(f).unwrap();
    assert!(objects >= 1, "3 MiB took {objects} objects");
    assert_eq!(read_all(&fs, f, 0, 1 << 20), expect[..1 << 20]);
    assert_eq!(read_all(&fs, f, 2 << 20, 1 << 20), expect[2 << 20..]);

    let patch = vec![0xAB; 4096];
    let at = (3 << 20) / 2 + 100;
    let w = fs
        .write(f, at as u64, &patch, Stability::FileSync, &ROOT)
        .unwrap();
    assert_eq!(w.committed, Stability::FileSync);
    assert_eq!(fs.slice_counts(f).unwrap(), (slices + 1, objects + 1));
    expect[at..at + 4096].copy_from_slice(&patch);
    assert_eq!(
        read_all(&fs, f, (at - 10) as u64, 5000),
        expect[at - 10..at + 4990]
    );

    // Truncate, then extend: the bytes past the cut read as zeros.
    let set = |size| SetAttr {
        size_bytes: Some(size),
        ..SetAttr::default()
    };
    fs.setattr(f, &set(1000), None, &ROOT).unwrap();
    fs.setattr(f, &set(3000), None, &ROOT).unwrap();
    let back = read_all(&fs, f, 0, 4000);
    assert_eq!(back.len(), 3000);
    assert_eq!(back[..1000], expect[..1000]);
    assert!(back[1000..].iter().all(|&b| b == 0));
}

#[test]
fn ctime_never_goes_back_whatever_the_clock_says() {
    let Some(env) = engines() else { return };
    let config = env.fresh("ctime");
    let clock = Arc::new(ManualClock::new(Timestamp::from_nanos(
        2_000_000_000_000_000_000,
    )));
    let fs = ObjectFs::open(&config, clock.clone() as Arc<dyn Clock>).unwrap();
    let f = create(&fs, fs.root(), "f");
    let first = fs.getattr(f).unwrap().ctime;
    clock.step_back(Duration::from_secs(1_000_000_000));
    let mode = SetAttr {
        mode: Some(0o600),
        ..SetAttr::default()
    };
    let after = fs.setattr(f, &mode, None, &ROOT).unwrap().after.ctime;
    assert!(after > first, "ctime went from {first:?} to {after:?}");
    let again = fs.setattr(f, &mode, None, &ROOT).unwrap().after.ctime;
    assert!(again > after, "two changes in one tick share no ctime");
    // The floor this head handed out reaches the database within a second; a head
    // started later with a clock further back still stamps above it.
    std::thread::sleep(Duration::from_millis(1500));
    drop(fs);
    let late = Arc::new(ManualClock::new(Timestamp::from_nanos(5)));
    let fs = ObjectFs::open(&config, late as Arc<dyn Clock>).unwrap();
    let g = create(&fs, fs.root(), "g");
    assert!(
        fs.getattr(g).unwrap().ctime >= first,
        "a new file is stamped above the floor"
    );
}

#[test]
fn rename_into_own_subtree_is_refused_even_when_two_heads_race() {
    let Some(env) = engines() else { return };
    let config = env.fresh("cycle");
    let (a, b) = (head(&config), head(&config));
    let root = a.root();
    let x = a
        .mkdir(root, &name("x"), &SetAttr::default(), &ROOT)
        .unwrap()
        .attr
        .fileid;
    let y = a
        .mkdir(root, &name("y"), &SetAttr::default(), &ROOT)
        .unwrap()
        .attr
        .fileid;
    let sub = a
        .mkdir(x, &name("sub"), &SetAttr::default(), &ROOT)
        .unwrap()
        .attr
        .fileid;
    assert_eq!(
        a.rename(root, &name("x"), sub, &name("x"), &ROOT),
        Err(FsError::Inval)
    );
    // Head A moves x into y while head B moves y into x, many times over: at most one of
    // each pair wins, and the tree never holds a cycle.
    for _ in 0..20 {
        let (ra, rb) = std::thread::scope(|s| {
            let ta = s.spawn(|| a.rename(root, &name("x"), y, &name("x"), &ROOT));
            let tb = s.spawn(|| b.rename(root, &name("y"), x, &name("y"), &ROOT));
            (ta.join().unwrap(), tb.join().unwrap())
        });
        assert!(ra.is_err() || rb.is_err(), "both moves succeeded: a cycle");
        for id in [x, y] {
            let mut at = id;
            for _ in 0..10 {
                at = a.parent(at, &ROOT).unwrap().attr.fileid;
            }
            assert_eq!(at, root, "{id:?} is not beneath the root");
        }
        // Put both back under the root for the next round.
        for (dir, n) in [(y, "x"), (x, "y")] {
            let _ = a.rename(dir, &name(n), root, &name(n), &ROOT);
        }
        assert_eq!(a.lookup(root, &name("x"), &ROOT).unwrap().attr.fileid, x);
        assert_eq!(a.lookup(root, &name("y"), &ROOT).unwrap().attr.fileid, y);
    }
}

#[test]
fn two_heads_share_names_and_committed_data() {
    let Some(env) = engines() else { return };
    let config = env.fresh("heads");
    let (a, b) = (head(&config), head(&config));
    let f = create(&a, a.root(), "shared");
    assert_eq!(
        b.lookup(b.root(), &name("shared"), &ROOT)
            .unwrap()
            .attr
            .fileid,
        f
    );
    let data = vec![7u8; 100_000];
    a.write(f, 0, &data, Stability::Unstable, &ROOT).unwrap();
    assert_eq!(
        b.getattr(f).unwrap().size_bytes,
        0,
        "unstable data stays on its head"
    );
    a.commit(f, 0, 0).unwrap();
    assert_eq!(b.getattr(f).unwrap().size_bytes, 100_000);
    assert_eq!(read_all(&b, f, 0, 200_000), data);
    b.remove(b.root(), &name("shared"), &ROOT).unwrap();
    assert_eq!(a.getattr(f), Err(FsError::Stale));
}

#[test]
fn racing_exclusive_creates_on_two_heads_make_one_file() {
    let Some(env) = engines() else { return };
    let config = env.fresh("excl");
    let (a, b) = (head(&config), head(&config));
    let root = a.root();
    for i in 0..20 {
        let n = name(&format!("e{i}"));
        let (ra, rb) = std::thread::scope(|s| {
            let ta = s.spawn(|| a.create(root, &n, &CreateMode::Exclusive(*b"head-a!!"), &ROOT));
            let tb = s.spawn(|| b.create(root, &n, &CreateMode::Exclusive(*b"head-b!!"), &ROOT));
            (ta.join().unwrap(), tb.join().unwrap())
        });
        assert!(
            ra.is_ok() != rb.is_ok(),
            "exactly one exclusive create wins: {ra:?} {rb:?}"
        );
        assert_eq!(ra.err().or(rb.err()), Some(FsError::Exist));
    }
}

#[test]
fn an_s3_outage_answers_jukebox_within_the_timeout() {
    let Some(env) = engines() else { return };
    let good = env.fresh("outage");
    let mut config = good.clone();
    let ok = head(&good);
    let f = create(&ok, ok.root(), "f");
    // The same database, an S3 endpoint where nothing listens.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    config.store.endpoint = Some(format!("http://127.0.0.1:{port}"));
    let fs = head(&config);
    let started = Instant::now();
    let big = vec![1u8; 64 << 10];
    let r = fs.write(f, 0, &big, Stability::FileSync, &ROOT);
    assert_eq!(r.map(|_| ()), Err(FsError::Jukebox));
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    // No row names an object that is not there: another head sees nothing published.
    assert_eq!(
        ok.getattr(f).unwrap().size_bytes,
        0,
        "nothing was published"
    );
    assert_eq!(ok.slice_counts(f).unwrap(), (0, 0));
    // Metadata does not need the store: the head keeps serving it.
    create(&fs, fs.root(), "still-served");
    assert!(ok.lookup(ok.root(), &name("still-served"), &ROOT).is_ok());
}

#[test]
fn a_database_outage_answers_jukebox_and_never_runs_on_an_event_loop() {
    let Some(env) = engines() else { return };
    let config = env.fresh("dbdown");
    let fs = head(&config);
    let f = create(&fs, fs.root(), "f");
    // On a thread that may not block, every call defers before it touches anything.
    assert_eq!(
        sync::blocking::forbidden(|| fs.getattr(f)),
        Err(FsError::WouldBlock)
    );
    // A database URL where nothing listens: a head cannot start (said for a person).
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let mut down = config.clone();
    down.postgres = format!("postgres://nobody@127.0.0.1:{port}/none");
    let started = Instant::now();
    let err = ObjectFs::open(&down, Arc::new(SystemClock::new()))
        .err()
        .unwrap();
    assert!(err.contains("database"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn a_cache_on_one_head_never_serves_what_another_head_changed() {
    let Some(env) = engines() else { return };
    let config = env.fresh("caches");
    let (a, b) = (head(&config), head(&config));
    let root = a.root();
    let f = create(&a, root, "f");
    let len = (1 << 20) + 8192;
    let v1: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    a.write(f, 0, &v1, Stability::FileSync, &ROOT).unwrap();
    let count = u32::try_from(len).unwrap();
    assert!(read_all(&b, f, 0, count) == v1);
    let cold = b.cache_hits();
    assert!(read_all(&b, f, 0, count) == v1);
    let warm = b.cache_hits();
    assert!(
        warm.maps > cold.maps && warm.bytes > cold.bytes,
        "B's second read was served from its caches: {cold:?} -> {warm:?}"
    );
    // A overwrites 4 KiB in the middle (UNSTABLE, then COMMIT): B's next read sees it.
    let page = vec![0xeeu8; 4096];
    a.write(f, 65536, &page, Stability::Unstable, &ROOT)
        .unwrap();
    a.commit(f, 0, 0).unwrap();
    let mut v2 = v1.clone();
    v2[65536..65536 + 4096].copy_from_slice(&page);
    assert!(
        read_all(&b, f, 0, count) == v2,
        "B served a stale map or stale bytes"
    );
    // A truncates and extends: B reads zeros where the old bytes were.
    a.setattr(
        f,
        &SetAttr {
            size_bytes: Some(100),
            ..SetAttr::default()
        },
        None,
        &ROOT,
    )
    .unwrap();
    a.setattr(
        f,
        &SetAttr {
            size_bytes: Some(8192),
            ..SetAttr::default()
        },
        None,
        &ROOT,
    )
    .unwrap();
    let mut v3 = v2[..100].to_vec();
    v3.resize(8192, 0);
    assert_eq!(b.getattr(f).unwrap().size_bytes, 8192);
    assert!(
        read_all(&b, f, 0, 8192) == v3,
        "B served bytes past a truncation"
    );
    // Attributes and names changed on A are seen on B at once.
    a.setattr(
        f,
        &SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        },
        None,
        &ROOT,
    )
    .unwrap();
    assert_eq!(b.getattr(f).unwrap().mode, 0o600);
    a.rename(root, &name("f"), root, &name("g"), &ROOT).unwrap();
    assert_eq!(b.lookup(root, &name("g"), &ROOT).unwrap().attr.fileid, f);
    assert_eq!(
        b.lookup(root, &name("f"), &ROOT).map(|_| ()),
        Err(FsError::NoEnt)
    );
    a.remove(root, &name("g"), &ROOT).unwrap();
    let mut out = BytesMut::new();
    assert_eq!(
        b.read_into(f, 0, 10, &mut out, &ROOT).map(|_| ()),
        Err(FsError::Stale),
        "B read a removed file from its caches"
    );
}

/// A database a version-1 build made (no `dead_objects`, no trigger, no slice counts) is
/// brought to the current version by the first head that opens it, keeping its files,
/// handles and data, with each file's slice count filled in; a database of a newer
/// version is refused and left alone.
#[test]
fn a_version_1_database_is_migrated_and_a_newer_one_refused() {
    let Some(env) = engines() else { return };
    let config = env.fresh("migrate");
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let (f, incarnation) = {
        let fs = head(&config);
        let f = create(&fs, fs.root(), "big");
        fs.write(f, 0, &data, Stability::FileSync, &ROOT).unwrap();
        fs.write(f, 50_000, &data[..8192], Stability::FileSync, &ROOT)
            .unwrap();
        (f, fs.incarnation())
    };
    // What versions 2 to 5 added, taken away again: the database as version 1 left it.
    sql(
        &config,
        "DROP FUNCTION granary_share_put(bigint, bigint, integer, integer, double precision); \
         DROP FUNCTION granary_share_check(bigint, bigint, integer, integer); \
         DROP FUNCTION granary_share_watch(bigint); DROP TABLE share_holds; \
         DROP TABLE share_watches; DROP SEQUENCE granary_share_watch_ids; \
         DROP FUNCTION granary_lock_check(bigint, bigint, boolean, bigint, bigint); \
         DROP FUNCTION granary_lock_others(bigint, bigint, boolean, bigint, bigint); \
         DROP FUNCTION granary_lock_take(bigint); DROP TABLE lock_ranges; DROP TABLE lock_heads; \
         DROP TRIGGER slices_added ON slices; DROP TRIGGER slices_removed ON slices; \
         DROP FUNCTION granary_slices_added(); DROP FUNCTION granary_slices_removed(); \
         DROP INDEX inodes_by_slice_count; DROP INDEX slices_by_offset; \
         ALTER TABLE inodes DROP COLUMN slice_count; \
         DROP TRIGGER slices_gone ON slices; DROP FUNCTION granary_slice_gone(); \
         DROP INDEX slices_by_object; DROP TABLE dead_objects; \
         UPDATE granary_meta SET schema_version = 1",
    );
    let version = "SELECT schema_version::bigint FROM granary_meta";
    assert_eq!(query_i64(&config, version), 1);
    let fs = head(&config);
    assert_eq!(query_i64(&config, version), 5);
    // Version 4's and 5's tables are there (empty: no head took a lock or a deny).
    assert_eq!(query_i64(&config, "SELECT count(*) FROM lock_ranges"), 0);
    assert_eq!(query_i64(&config, "SELECT count(*) FROM share_holds"), 0);
    assert_eq!(query_i64(&config, "SELECT count(*) FROM share_watches"), 0);
    assert_eq!(
        query_i64(&config, "SELECT count(share_acked) FROM lock_heads"),
        0
    );
    assert_eq!(fs.incarnation(), incarnation, "handles stay valid");
    assert!(
        read_all(&fs, f, 0, 200_000)
            == data[..50_000]
                .iter()
                .chain(&data[..8192])
                .chain(&data[58_192..])
                .copied()
                .collect::<Vec<u8>>()
    );
    // Version 3's column holds the file's two slices, and its triggers keep it.
    let count = format!("SELECT slice_count FROM inodes WHERE id = {}", f.0);
    assert_eq!(query_i64(&config, &count), 2);
    fs.write(f, 0, b"one more", Stability::FileSync, &ROOT)
        .unwrap();
    assert_eq!(query_i64(&config, &count), 3);
    // Version 2's trigger records the file's objects when the file goes.
    fs.remove(fs.root(), &name("big"), &ROOT).unwrap();
    let dead = "SELECT count(*) FROM dead_objects";
    assert_eq!(query_i64(&config, dead), 2);
    drop(head(&config));
    assert_eq!(
        query_i64(&config, version),
        5,
        "a second start changes nothing"
    );
    drop(fs);

    // A version-4 database (the locks across heads, no shares) is brought to 5 too.
    sql(
        &config,
        "DROP FUNCTION granary_share_put(bigint, bigint, integer, integer, double precision); \
         DROP FUNCTION granary_share_check(bigint, bigint, integer, integer); \
         DROP FUNCTION granary_share_watch(bigint); DROP TABLE share_holds; \
         DROP TABLE share_watches; DROP SEQUENCE granary_share_watch_ids; \
         ALTER TABLE lock_heads DROP COLUMN share_acked; \
         UPDATE granary_meta SET schema_version = 4",
    );
    drop(head(&config));
    assert_eq!(query_i64(&config, version), 5, "version 4 migrated");
    assert_eq!(query_i64(&config, "SELECT count(*) FROM share_watches"), 0);

    sql(&config, "UPDATE granary_meta SET schema_version = 6");
    let refused = ObjectFs::open(&config, Arc::new(SystemClock::new()));
    // Said for a person (not "server fault"): which version, and what to do.
    let why = refused.err().expect("a newer schema is refused");
    assert!(
        why.contains("version 6") && why.contains("newer than this granary knows"),
        "{why}"
    );
    let why = granary_backend_object::format(&config, Arc::new(SystemClock::new()))
        .expect_err("granary format refuses it too");
    assert!(why.contains("version 6"), "{why}");
    assert_eq!(query_i64(&config, version), 6, "and left alone");
}
