//! What a listing, READs and a streamed write cost the engines, counted by
//! [`engine_counters`] (this process's): one test in a binary of its own, so no other
//! test's requests are counted.
//! Needs the engines as `engines.rs` does (`scripts/object-env.sh start DIR`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use granary_backend_object::{engine_counters, EngineCounters, ObjectFs, TestEngines};
use vfs::{Backend, Cookie, FileId, SetAttr, Stability};

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
}
