//! What a listing, READs and a streamed write cost the engines, counted by
//! [`engine_counters`] (this process's): one test in a binary of its own, so no other
//! test's requests are counted.
//! Needs the engines as `engines.rs` does (`scripts/object-env.sh start DIR`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use granary_backend_object::{engine_counters, EngineCounters, ObjectFs, TestEngines};
use vfs::{Backend, Cookie, CreateMode, FileId, SetAttr, Stability};

mod common;

use common::{create, head, name, read, ROOT};

/// What happened between two readings: (transactions, GETs, GET bytes).
fn spent(before: EngineCounters, after: EngineCounters) -> (u64, u64, u64) {
    (
        after.db_transactions - before.db_transactions,
        after.s3_gets - before.s3_gets,
        after.s3_get_bytes - before.s3_get_bytes,
    )
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ seed.wrapping_mul(31))
        .collect()
}

/// A READDIR page is one statement, and the attributes it carries, `..`'s too, are what
/// GETATTR answers on the same head (buffered writes included).
fn listing(fs: &ObjectFs) {
    let d = fs
        .mkdir(fs.root(), &name("d"), &SetAttr::default(), &ROOT)
        .unwrap()
        .attr
        .fileid;
    let mut files = Vec::new();
    for i in 0..300u32 {
        let f = create(fs, d, &format!("f{i:03}"));
        if i % 3 == 0 {
            let data = pattern(10 + i as usize, 1);
            fs.write(f, 0, &data, Stability::FileSync, &ROOT).unwrap();
        }
        if i % 5 == 0 {
            let mode = SetAttr {
                mode: Some(0o600),
                ..SetAttr::default()
            };
            fs.setattr(f, &mode, None, &ROOT).unwrap();
        }
        files.push(f);
    }
    // Buffered on this head only: the listing shows the size as GETATTR does.
    fs.write(files[1], 0, &[7; 5000], Stability::Unstable, &ROOT)
        .unwrap();
    let before = engine_counters();
    let (page, dir) = fs.readdir(d, Cookie::START, 1000, &ROOT).unwrap();
    let (tx, gets, _) = spent(before, engine_counters());
    // The head's ctime-floor write (once a second, after changes) may fall in between.
    assert!(
        (1..=2).contains(&tx),
        "one listing page cost {tx} transactions"
    );
    assert_eq!(gets, 0);
    assert!(page.eof);
    assert_eq!(page.entries.len(), 302);
    assert_eq!(dir.fileid, d);
    assert_eq!(page.entries[1].name.as_ref(), b"..");
    assert_eq!(page.entries[1].fileid, fs.root());
    for e in &page.entries {
        let attr = e
            .attr
            .as_ref()
            .expect("every other entry has its attributes");
        assert_eq!(*attr, fs.getattr(e.fileid).unwrap(), "{:?}", e.name);
    }
    assert_eq!(
        page.entries[3].attr.as_ref().map(|a| a.size_bytes),
        Some(5000)
    );
    // Pages of 100: one statement each, and the same entries.
    let before = engine_counters();
    let mut paged = Vec::new();
    let mut cookie = Cookie::START;
    let mut pages = 0;
    loop {
        let (p, _) = fs.readdir(d, cookie, 100, &ROOT).unwrap();
        pages += 1;
        cookie = p.entries.last().map_or(cookie, |e| e.cookie);
        paged.extend(p.entries);
        if p.eof {
            break;
        }
    }
    let (tx, _, _) = spent(before, engine_counters());
    assert_eq!(pages, 4);
    assert!(
        (pages..=pages + 1).contains(&tx),
        "{pages} pages cost {tx} transactions"
    );
    assert_eq!(paged, page.entries);
    // Published now, so no publish timer runs during the READs measured next.
    fs.commit(files[1], 0, 0).unwrap();
}

/// 4 KiB READs of a file of more slices than a map holds: one statement and one GET of
/// 4 KiB each (the slices newer ones hide cost none), the right bytes.
fn random_reads(fs: &ObjectFs) {
    let f = create(fs, fs.root(), "rand");
    let size = 8 << 20;
    let mut expect = pattern(size, 2);
    for (i, chunk) in expect.chunks(1 << 20).enumerate() {
        fs.write(f, (i << 20) as u64, chunk, Stability::Unstable, &ROOT)
            .unwrap();
    }
    fs.commit(f, 0, 0).unwrap();
    // 300 pages overwritten, each its own slice: more than a map keeps (256).
    for i in 0..300usize {
        let at = (i * 7 % 2048) * 4096;
        let page = vec![i as u8; 4096];
        fs.write(f, at as u64, &page, Stability::Unstable, &ROOT)
            .unwrap();
        expect[at..at + 4096].copy_from_slice(&page);
    }
    fs.commit(f, 0, 0).unwrap();
    assert!(fs.slice_counts(f).unwrap().0 > 256);
    // The first READ finds the file too big for a map (a second statement, once).
    assert!(read(fs, f, 0, 4096).unwrap() == expect[..4096]);
    let reads = 64;
    let mut tx = 0;
    for i in 1..=reads {
        // Pages not read before (none cached): each one's own GET.
        let at = (i * 389 % 2048) * 4096;
        let before = engine_counters();
        let got = read(fs, f, at as u64, 4096).unwrap();
        let (t, gets, bytes) = spent(before, engine_counters());
        assert!(got == expect[at..at + 4096], "bytes at {at}");
        assert_eq!((gets, bytes), (1, 4096), "a 4 KiB READ at {at}");
        tx += t;
    }
    // One each, and the ctime-floor write after the commit at most.
    assert!(
        tx <= reads as u64 + 1,
        "{reads} READs cost {tx} transactions"
    );
}

/// 1 MiB READs of a file of two 4 MiB objects, eight at once on a head with cold
/// caches: one GET per object (the READs on one object share it), the right bytes; and
/// one at a time: the second object is fetched ahead of its READs.
fn sequential_reads(config: &granary_backend_object::ObjectConfig, fs: &ObjectFs) {
    let f = create(fs, fs.root(), "seq");
    let expect = pattern(8 << 20, 3);
    for (i, chunk) in expect.chunks(1 << 20).enumerate() {
        fs.write(f, (i << 20) as u64, chunk, Stability::Unstable, &ROOT)
            .unwrap();
    }
    fs.commit(f, 0, 0).unwrap();
    assert_eq!(fs.slice_counts(f).unwrap().1, 2, "two objects");
    let cold = Arc::new(head(config));
    let before = engine_counters();
    let got: Vec<Vec<u8>> = std::thread::scope(|s| {
        let readers: Vec<_> = (0..8u64)
            .map(|i| {
                let cold = Arc::clone(&cold);
                s.spawn(move || read(&cold, f, i << 20, 1 << 20).unwrap())
            })
            .collect();
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let (tx, gets, bytes) = spent(before, engine_counters());
    for (i, g) in got.iter().enumerate() {
        assert!(*g == expect[i << 20..(i + 1) << 20], "MiB {i}");
    }
    assert_eq!((gets, bytes), (2, 8 << 20), "one GET per object");
    assert!((8..=9).contains(&tx), "8 READs cost {tx} transactions");

    // One reader, one READ at a time, on another cold head: the READ of the first
    // object's last MiB fetches the second object ahead, so its READs send no GET.
    let reader = head(config);
    let before = engine_counters();
    for i in 0..4usize {
        let got = read(&reader, f, (i << 20) as u64, 1 << 20).unwrap();
        assert!(got == expect[i << 20..(i + 1) << 20], "MiB {i}");
    }
    let started = Instant::now();
    while spent(before, engine_counters()).1 < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no GET of the second object after reading the first"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for i in 4..8usize {
        let got = read(&reader, f, (i << 20) as u64, 1 << 20).unwrap();
        assert!(got == expect[i << 20..(i + 1) << 20], "MiB {i}");
    }
    let (_, gets, bytes) = spent(before, engine_counters());
    assert_eq!(
        (gets, bytes),
        (2, 8 << 20),
        "the second object was read ahead"
    );
}

/// READs of `len` bytes covering `f` (of `size` bytes), `threads` at once, taken in
/// `order` (indices of the READs): each checked against `expect`.
fn read_in_order(
    fs: &ObjectFs,
    f: FileId,
    expect: &[u8],
    len: usize,
    order: &[usize],
    threads: usize,
) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let at = i * len;
                    let got = read(fs, f, at as u64, len as u32).unwrap();
                    assert!(got == expect[at..at + len], "READ {i} of {len} bytes");
                }
            });
        }
    });
}

/// `0..n` shuffled within windows of `window` (a fixed shuffle: each window reversed in
/// halves and interleaved), as READs in flight complete and are sent out of order.
fn out_of_order(n: usize, window: usize) -> Vec<usize> {
    let mut order = Vec::with_capacity(n);
    for w in (0..n).step_by(window) {
        let end = (w + window).min(n);
        let mid = w + (end - w) / 2;
        let (back, front): (Vec<usize>, Vec<usize>) =
            ((mid..end).collect(), (w..mid).rev().collect());
        for k in 0..back.len().max(front.len()) {
            order.extend(back.get(k));
            order.extend(front.get(k));
        }
    }
    order
}

/// A file written as a client's writeback writes it (1 MiB UNSTABLE WRITEs out of order
/// within each object, so each object holds four slices), read back on cold heads:
/// 1 MiB READs sixteen at once, out of order, cost one GET per object; 64 KiB READs of a
/// stream, eight at once, out of order, one GET per object and the few ranged GETs of
/// its first READs; random 4 KiB READs one small GET each.
fn out_of_order_reads(config: &granary_backend_object::ObjectConfig, fs: &ObjectFs) {
    let f = create(fs, fs.root(), "ooo");
    let objects = 4;
    let size = objects << 22;
    let expect = pattern(size, 4);
    for o in 0..objects {
        for m in [0, 2, 1, 3] {
            let at = (o * 4 + m) << 20;
            let chunk = &expect[at..at + (1 << 20)];
            fs.write(f, at as u64, chunk, Stability::Unstable, &ROOT)
                .unwrap();
        }
    }
    fs.commit(f, 0, 0).unwrap();
    let (slices, objs) = fs.slice_counts(f).unwrap();
    assert_eq!(objs, objects as u64);
    assert_eq!(slices, 4 * objects as u64, "four slices per object");

    let cold = head(config);
    let before = engine_counters();
    read_in_order(&cold, f, &expect, 1 << 20, &out_of_order(16, 16), 16);
    let (tx, gets, bytes) = spent(before, engine_counters());
    eprintln!("16 READs of 1 MiB out of order: {tx} transactions, {gets} GETs of {bytes} bytes");
    assert_eq!(
        (gets, bytes),
        (objects as u64, size as u64),
        "one GET per object"
    );
    drop(cold);

    let cold = head(config);
    let before = engine_counters();
    let reads = size >> 16;
    read_in_order(&cold, f, &expect, 1 << 16, &out_of_order(reads, 16), 8);
    let (_, gets, bytes) = spent(before, engine_counters());
    eprintln!("{reads} READs of 64 KiB out of order: {gets} GETs of {bytes} bytes");
    assert!(
        gets <= objects as u64 + 8 && bytes <= (size + (8 << 16)) as u64,
        "a stream of 64 KiB READs cost {gets} GETs of {bytes} bytes"
    );
    drop(cold);

    let cold = head(config);
    let before = engine_counters();
    for i in 1..=64usize {
        let at = (i * 389 % (size / 4096)) * 4096;
        let got = read(&cold, f, at as u64, 4096).unwrap();
        assert!(got == expect[at..at + 4096], "bytes at {at}");
    }
    let (_, gets, bytes) = spent(before, engine_counters());
    assert_eq!((gets, bytes), (64, 64 * 4096), "random 4 KiB READs");
}

/// 16 MiB of 1 MiB UNSTABLE WRITEs in order: each object the file fills starts its
/// upload at once, before any COMMIT, and no row is committed until the COMMIT (another
/// head sees an empty file); the COMMIT uploads only the last object and commits the
/// rows; each byte is uploaded once, one PUT per object.
fn streamed_write(config: &granary_backend_object::ObjectConfig, fs: &ObjectFs) {
    let f = create(fs, fs.root(), "stream");
    let objects = 4u64;
    let size = (objects as usize) << 22;
    let expect = pattern(size, 5);
    let other = head(config);
    let before = engine_counters();
    let started = Instant::now();
    for (i, chunk) in expect.chunks(1 << 20).enumerate() {
        fs.write(f, (i << 20) as u64, chunk, Stability::Unstable, &ROOT)
            .unwrap();
    }
    // Well before the publish timer would publish the file on its own.
    assert!(
        started.elapsed() < granary_backend_object::limits::PUBLISH_AGE / 2,
        "16 buffered WRITEs took {:?}",
        started.elapsed()
    );
    assert_eq!(
        other.getattr(f).unwrap().size_bytes,
        0,
        "no row before COMMIT"
    );
    while engine_counters().s3_puts - before.s3_puts < objects - 1 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the full objects did not upload before the COMMIT"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let uploaded = engine_counters();
    fs.commit(f, 0, 0).unwrap();
    let after = engine_counters();
    // Each WRITE reads the file's row (its checks and attributes; names and attributes
    // are never cached), so do the other head's GETATTR and the COMMIT; each object's
    // rows commit in one transaction; the four objects' ids come from at most one
    // statement (OBJECT_IDS_PER_FETCH at a time, none if the head holds enough from
    // its earlier uploads; before, one each: 26).
    let tx = (after.db_transactions - after.db_floor_writes)
        - (before.db_transactions - before.db_floor_writes);
    let least = 16 + 1 + 1 + objects;
    assert!(
        (least..=least + 1).contains(&tx),
        "16 WRITEs of 1 MiB and their COMMIT cost {tx} transactions"
    );
    eprintln!(
        "16 MiB streamed: {} PUTs before the COMMIT, {} in all, {} bytes",
        uploaded.s3_puts - before.s3_puts,
        after.s3_puts - before.s3_puts,
        after.s3_put_bytes - before.s3_put_bytes
    );
    assert_eq!(
        (
            after.s3_puts - before.s3_puts,
            after.s3_put_bytes - before.s3_put_bytes
        ),
        (objects, size as u64),
        "one PUT per object, each byte once"
    );
    assert_eq!(fs.slice_counts(f).unwrap().1, objects);
    assert!(read(&other, f, 0, 1 << 20).unwrap() == expect[..1 << 20]);
    let last = size - (1 << 20);
    assert!(read(&other, f, last as u64, 1 << 20).unwrap() == expect[last..]);
}

/// A statement is prepared once per connection and SQL text, not on every call (each
/// prepare is a round trip of its own before the one that runs the statement): 40
/// rounds of CREATE, SETATTR, LOOKUP, GETATTR and REMOVE send about 300 statements and
/// may prepare only the few texts each pool connection had not seen yet.
fn statements_prepared_once(fs: &ObjectFs) {
    let d = fs
        .mkdir(fs.root(), &name("prepared"), &SetAttr::default(), &ROOT)
        .unwrap()
        .attr
        .fileid;
    let before = engine_counters();
    for i in 0..40u32 {
        let n = format!("f{i}");
        let f = create(fs, d, &n);
        let mode = SetAttr {
            mode: Some(0o640),
            ..SetAttr::default()
        };
        fs.setattr(f, &mode, None, &ROOT).unwrap();
        assert_eq!(fs.lookup(d, &name(&n), &ROOT).unwrap().attr.fileid, f);
        assert_eq!(fs.getattr(f).unwrap().mode, 0o640);
        fs.remove(d, &name(&n), &ROOT).unwrap();
    }
    let after = engine_counters();
    let (tx, prepared) = (
        after.db_transactions - before.db_transactions,
        after.db_prepares - before.db_prepares,
    );
    assert!(tx >= 160, "{tx} transactions for 200 operations");
    assert!(
        prepared < 40,
        "{prepared} statements prepared for {tx} transactions: the statement cache is not used"
    );
}

/// Measurements [`db_cost`] may take of one operation: one it cannot use (a ctime-floor
/// write or a prepare fell into it) is taken again.
const TRIES: u32 = 12;

/// What one operation cost the database: (transactions, statements with BEGIN and
/// COMMIT, round trips). `op(i)` runs the operation on its `i`th set of names; a
/// measurement the head's ctime-floor write (once a second) or a prepare (a pool
/// connection that had not run the statement yet) fell into is taken again on the next.
fn db_cost(what: &str, mut op: impl FnMut(u32)) -> (u64, u64, u64) {
    for i in 0..TRIES {
        let before = engine_counters();
        op(i);
        let after = engine_counters();
        if after.db_floor_writes != before.db_floor_writes
            || after.db_prepares != before.db_prepares
        {
            continue;
        }
        assert_eq!(after.db_retries, before.db_retries, "{what} ran again");
        return (
            after.db_transactions - before.db_transactions,
            after.db_statements - before.db_statements,
            after.db_round_trips - before.db_round_trips,
        );
    }
    panic!("{what}: a ctime-floor write or a prepare fell into every measurement");
}

/// Each metadata operation's transactions, statements and round trips to PostgreSQL,
/// pinned: the table of docs/OBJECT.md ("What one operation costs the database"). Each
/// is measured on a warm head (its statements prepared), one call at a time, as a client
/// that waits for each reply sends them.
fn per_operation(fs: &ObjectFs) {
    let root = fs.root();
    let top = fs
        .mkdir(root, &name("per-op"), &SetAttr::default(), &ROOT)
        .unwrap()
        .attr
        .fileid;
    let mkdir = |d: FileId, n: &str| {
        fs.mkdir(d, &name(n), &SetAttr::default(), &ROOT)
            .unwrap()
            .attr
            .fileid
    };
    let (a, b) = (mkdir(top, "a"), mkdir(top, "b"));
    let mode = |m: u32| SetAttr {
        mode: Some(m),
        ..SetAttr::default()
    };
    let size = |s: u64| SetAttr {
        size_bytes: Some(s),
        ..SetAttr::default()
    };
    let n = |p: &str, i: u32| name(&format!("{p}{i}"));
    // Every operation once on each thread, sixteen at once (the pool's connections),
    // until a round prepares nothing: each connection has each statement.
    for round in 0..5 {
        let before = engine_counters().db_prepares;
        std::thread::scope(|s| {
            for t in 0..16u32 {
                s.spawn(move || {
                    let w = format!("warm{round}.{t}");
                    let f = create(fs, a, &w);
                    fs.setattr(f, &mode(0o600), None, &ROOT).unwrap();
                    fs.setattr(f, &size(10), None, &ROOT).unwrap();
                    fs.setattr(f, &size(0), None, &ROOT).unwrap();
                    fs.write(f, 0, b"warm", Stability::FileSync, &ROOT).unwrap();
                    fs.write(f, 0, b"warm", Stability::Unstable, &ROOT).unwrap();
                    fs.commit(f, 0, 0).unwrap();
                    fs.lookup(a, &name(&w), &ROOT).unwrap();
                    fs.lookup(a, &name("none"), &ROOT).unwrap_err();
                    fs.getattr(f).unwrap();
                    fs.parent(a, &ROOT).unwrap();
                    fs.readdir(a, Cookie::START, 10, &ROOT).unwrap();
                    fs.link(f, b, &name(&w), &ROOT).unwrap();
                    fs.remove(b, &name(&w), &ROOT).unwrap();
                    let m = format!("{w}.moved");
                    fs.rename(a, &name(&w), a, &name(&m), &ROOT).unwrap();
                    fs.rename(a, &name(&m), b, &name(&m), &ROOT).unwrap();
                    fs.remove(b, &name(&m), &ROOT).unwrap();
                    let d = format!("{w}.d");
                    mkdir(a, &d);
                    fs.rename(a, &name(&d), b, &name(&d), &ROOT).unwrap();
                    fs.rmdir(b, &name(&d), &ROOT).unwrap();
                    let guarded = CreateMode::Guarded(SetAttr::default());
                    let e = format!("{w}.exist");
                    fs.create(a, &name(&e), &guarded, &ROOT).unwrap();
                    fs.create(a, &name(&e), &guarded, &ROOT).unwrap_err();
                    fs.remove(a, &name(&e), &ROOT).unwrap();
                    fs.remove(a, &name(&e), &ROOT).unwrap_err();
                });
            }
        });
        if engine_counters().db_prepares == before {
            break;
        }
    }
    let f = create(fs, a, "f");
    // The names the measurements take, made first.
    let (mut small, mut long) = (Vec::new(), Vec::new());
    for i in 0..TRIES {
        small.push(create(fs, a, &format!("w{i}")));
        let t = create(fs, a, &format!("t{i}"));
        fs.write(t, 0, &[7; 100], Stability::FileSync, &ROOT)
            .unwrap();
        long.push(t);
        create(fs, a, &format!("x{i}"));
        mkdir(a, &format!("m{i}"));
        mkdir(b, &format!("rd{i}"));
        fs.link(f, b, &n("rm", i), &ROOT).unwrap();
    }
    let costs = [
        (
            "CREATE",
            db_cost("CREATE", |i| {
                create(fs, a, &format!("c{i}"));
            }),
        ),
        (
            "CREATE of an existing name (GUARDED: EXIST)",
            db_cost("CREATE EXIST", |_| {
                let guarded = CreateMode::Guarded(SetAttr::default());
                fs.create(a, &name("f"), &guarded, &ROOT).unwrap_err();
            }),
        ),
        (
            "MKDIR",
            db_cost("MKDIR", |i| {
                mkdir(a, &format!("d{i}"));
            }),
        ),
        (
            "LOOKUP",
            db_cost("LOOKUP", |_| {
                fs.lookup(a, &name("f"), &ROOT).unwrap();
            }),
        ),
        (
            "LOOKUP of a missing name",
            db_cost("LOOKUP NOENT", |_| {
                fs.lookup(a, &name("none"), &ROOT).unwrap_err();
            }),
        ),
        (
            "LOOKUP of ..",
            db_cost("LOOKUP ..", |_| {
                fs.parent(a, &ROOT).unwrap();
            }),
        ),
        (
            "GETATTR",
            db_cost("GETATTR", |_| {
                fs.getattr(f).unwrap();
            }),
        ),
        (
            "SETATTR mode",
            db_cost("SETATTR", |i| {
                fs.setattr(f, &mode(0o600 + i), None, &ROOT).unwrap();
            }),
        ),
        (
            "SETATTR size (100 B cut to 10)",
            db_cost("SETATTR size", |i| {
                fs.setattr(long[i as usize], &size(10), None, &ROOT)
                    .unwrap();
            }),
        ),
        (
            "READDIRPLUS page (50 entries)",
            db_cost("READDIR", |_| {
                fs.readdir(a, Cookie::START, 50, &ROOT).unwrap();
            }),
        ),
        (
            "WRITE FILE_SYNC of 100 B (inline)",
            db_cost("WRITE FILE_SYNC", |i| {
                let g = small[i as usize];
                fs.write(g, 0, &[7; 100], Stability::FileSync, &ROOT)
                    .unwrap();
            }),
        ),
        (
            "WRITE UNSTABLE of 100 B + COMMIT",
            db_cost("WRITE+COMMIT", |i| {
                fs.write(f, 0, &[i as u8; 100], Stability::Unstable, &ROOT)
                    .unwrap();
                fs.commit(f, 0, 0).unwrap();
            }),
        ),
        (
            "LINK",
            db_cost("LINK", |i| {
                fs.link(f, b, &n("l", i), &ROOT).unwrap();
            }),
        ),
        (
            "RENAME in one directory",
            db_cost("RENAME", |i| {
                let from = if i == 0 { name("f") } else { n("r", i - 1) };
                fs.rename(a, &from, a, &n("r", i), &ROOT).unwrap();
            }),
        ),
        (
            "RENAME of a file to another directory",
            db_cost("RENAME file", |i| {
                fs.rename(a, &n("x", i), b, &n("x", i), &ROOT).unwrap();
            }),
        ),
        (
            "RENAME of a directory to another directory",
            db_cost("RENAME dir", |i| {
                fs.rename(a, &n("m", i), b, &n("m", i), &ROOT).unwrap();
            }),
        ),
        (
            "REMOVE",
            db_cost("REMOVE", |i| {
                fs.remove(b, &n("rm", i), &ROOT).unwrap();
            }),
        ),
        (
            "REMOVE of a missing name",
            db_cost("REMOVE NOENT", |_| {
                fs.remove(b, &name("none"), &ROOT).unwrap_err();
            }),
        ),
        (
            "RMDIR",
            db_cost("RMDIR", |i| {
                fs.rmdir(b, &n("rd", i), &ROOT).unwrap();
            }),
        ),
    ];
    eprintln!("| operation | transactions | statements | round trips |");
    eprintln!("|---|---|---|---|");
    for (op, (tx, statements, trips)) in &costs {
        eprintln!("| {op} | {tx} | {statements} | {trips} |");
    }
    // (transactions, statements with BEGIN and COMMIT, round trips), in `costs`' order.
    // Before the statements were folded (BEGIN and COMMIT each a round trip, every
    // read its own statement): CREATE 9 round trips, LOOKUP 2, SETATTR 4, REMOVE 9,
    // RENAME 11 (docs/OBJECT.md has the whole table).
    let pinned: [(u64, u64, u64); 19] = [
        (1, 4, 2), // CREATE: BEGIN + lock and entry; the inserts + COMMIT
        (1, 3, 1), // CREATE of an existing name: BEGIN + lock and entry; ROLLBACK queued
        (1, 4, 2), // MKDIR
        (1, 1, 1), // LOOKUP
        (1, 1, 1), // LOOKUP of a missing name
        (1, 1, 1), // LOOKUP of ..
        (1, 1, 1), // GETATTR
        (1, 4, 2), // SETATTR mode: BEGIN + lock; UPDATE + COMMIT
        (1, 4, 2), // SETATTR size: the same, the slices in the UPDATE's statement
        (1, 1, 1), // READDIRPLUS page
        (2, 5, 3), // WRITE FILE_SYNC: GETATTR's read; BEGIN + lock; rows + COMMIT
        (3, 6, 4), // WRITE UNSTABLE + COMMIT: a read each; BEGIN + lock; rows + COMMIT
        (1, 4, 2), // LINK
        (1, 4, 2), // RENAME in one directory
        (1, 4, 2), // RENAME of a file to another directory
        (2, 9, 5), // RENAME of a directory: a try that finds it (ROLLBACK queued), then
        //            BEGIN + the rename lock; the row locks; the cycle walk; the change
        (1, 4, 2), // REMOVE
        (1, 3, 1), // REMOVE of a missing name
        (1, 4, 2), // RMDIR
    ];
    for ((op, cost), want) in costs.iter().zip(pinned) {
        assert_eq!(
            *cost, want,
            "{op}: (transactions, statements, round trips) to PostgreSQL"
        );
    }
}

#[test]
fn a_listing_page_is_one_statement_and_a_read_one_statement_and_the_gets_it_needs() {
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let config = env.fresh("costs");
    let fs = head(&config);
    listing(&fs);
    random_reads(&fs);
    sequential_reads(&config, &fs);
    out_of_order_reads(&config, &fs);
    streamed_write(&config, &fs);
    statements_prepared_once(&fs);
    per_operation(&fs);
}
