//! Garbage collection and compaction against the real engines
//! (`scripts/object-env.sh start DIR`, then `. DIR/env`), with a second head reading all
//! along. The grace is shortened to two seconds here (a configuration may not go below
//! `GC_MIN_GRACE`); the argument for it is in `src/gc.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use granary_backend_object::{GcConfig, ObjectConfig, ObjectFs, TestEngines};
use object_store::ObjectStore;
use rand::{Rng, SeedableRng};
use vfs::{Backend, FileId, SetAttr, Stability};

mod common;

use common::{head, name, query_i64, read, ROOT};

const GRACE: Duration = Duration::from_secs(2);

fn config(env: &TestEngines, tag: &str) -> ObjectConfig {
    let mut c = env.fresh(tag);
    c.gc = GcConfig {
        interval: Duration::ZERO,
        grace: GRACE,
        compact_slices: 4,
    };
    c
}

fn create(fs: &ObjectFs, n: &str) -> FileId {
    common::create(fs, fs.root(), n)
}

fn stable(fs: &ObjectFs, id: FileId, offset: usize, data: &[u8]) {
    let w = fs
        .write(id, offset as u64, data, Stability::FileSync, &ROOT)
        .unwrap();
    assert_eq!(w.committed, Stability::FileSync);
}

#[test]
fn compaction_keeps_every_byte_while_another_head_reads_and_old_objects_outlive_the_grace() {
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let config = config(&env, "compact");
    let (a, b) = (head(&config), head(&config));
    let f = create(&a, "patched");
    let mut rng = rand::rngs::StdRng::seed_from_u64(29);
    let mut expect: Vec<u8> = (0..1u32 << 20).map(|i| (i % 249) as u8).collect();
    stable(&a, f, 0, &expect);
    for _ in 0..40 {
        let at = rng.gen_range(0..expect.len() - 4096);
        let patch: Vec<u8> = (0..4096).map(|_| rng.gen()).collect();
        stable(&a, f, at, &patch);
        expect[at..at + 4096].copy_from_slice(&patch);
    }
    assert_eq!(
        a.slice_counts(f).unwrap(),
        (41, 41),
        "one slice and object per write"
    );
    let expect = Arc::new(expect);

    // Head B reads random ranges the whole time and checks every byte.
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let reader = {
        let (stop, reads, expect) = (stop.clone(), reads.clone(), expect.clone());
        std::thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(7);
            while !stop.load(Ordering::Relaxed) {
                let at = rng.gen_range(0..expect.len() - 1);
                let n = rng.gen_range(1..=256 << 10).min(expect.len() - at);
                let got = read(&b, f, at as u64, n as u32)
                    .unwrap_or_else(|e| panic!("head B's READ at {at}+{n}: {e:?}"));
                assert!(
                    got == expect[at..at + n],
                    "head B read other bytes at {at}+{n}"
                );
                reads.fetch_add(1, Ordering::Relaxed);
            }
            b
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let r = a.gc_round().unwrap();
    assert!(!r.skipped);
    assert_eq!(
        (r.compacted_files, r.slices_before, r.slices_after),
        (1, 41, 1),
        "{r:?}"
    );
    assert_eq!(a.slice_counts(f).unwrap(), (1, 1), "1 MiB in one object");
    // Within the grace the old objects stay, for reads that found the old rows.
    let audit = a.audit().unwrap();
    assert!(
        audit.missing.is_empty(),
        "rows name missing objects: {audit:?}"
    );
    assert_eq!(audit.unnamed.len(), 41, "{audit:?}");
    assert_eq!(
        a.gc_round().unwrap().objects_deleted,
        0,
        "still within the grace"
    );
    std::thread::sleep(GRACE + Duration::from_millis(500));
    let r = a.gc_round().unwrap();
    assert_eq!(r.objects_deleted, 41, "{r:?}");
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let b = reader.join().expect("head B's reads all matched");
    let audit = a.audit().unwrap();
    assert!(
        audit.missing.is_empty() && audit.unnamed.is_empty(),
        "{audit:?}"
    );
    assert!(
        reads.load(Ordering::Relaxed) >= 5,
        "head B read {reads:?} times"
    );
    assert!(read(&b, f, 0, 1 << 20).unwrap() == *expect);
}

#[test]
fn removed_truncated_overwritten_and_orphaned_objects_are_deleted_after_the_grace() {
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let mut config = config(&env, "dead");
    config.gc.compact_slices = 2;
    let a = head(&config);
    let mib: Vec<u8> = (0..2u32 << 20).map(|i| (i % 241) as u8).collect();
    let removed = create(&a, "removed");
    stable(&a, removed, 0, &mib);
    let truncated = create(&a, "truncated");
    stable(&a, truncated, 0, &mib);
    let overwritten = create(&a, "overwritten");
    stable(&a, overwritten, 0, &mib);
    let again = vec![9u8; mib.len()];
    stable(&a, overwritten, 0, &again);
    a.remove(a.root(), &name("removed"), &ROOT).unwrap();
    let to_zero = SetAttr {
        size_bytes: Some(0),
        ..SetAttr::default()
    };
    a.setattr(truncated, &to_zero, None, &ROOT).unwrap();
    // An orphan: an object uploaded under an id from the database that no row names,
    // what a head leaves when it dies between its upload and its commit.
    let orphan = orphan(&config);

    let r = a.gc_round().unwrap();
    assert_eq!(r.compacted_files, 1, "the overwritten file: {r:?}");
    assert_eq!(r.unnamed_found, 1, "the orphan: {r:?}");
    assert_eq!(r.objects_deleted, 0);
    let audit = a.audit().unwrap();
    assert!(audit.missing.is_empty(), "{audit:?}");
    // Removed, truncated, the overwritten file's two and the orphan.
    assert_eq!(audit.unnamed.len(), 5, "{audit:?}");
    assert!(audit.unnamed.contains(&orphan));
    std::thread::sleep(GRACE + Duration::from_millis(500));
    let r = a.gc_round().unwrap();
    assert_eq!(r.objects_deleted, 5, "{r:?}");
    let audit = a.audit().unwrap();
    assert!(
        audit.missing.is_empty() && audit.unnamed.is_empty(),
        "{audit:?}"
    );
    assert_eq!(
        audit.named, 1,
        "the overwritten file's one compacted object"
    );
    assert!(read(&a, overwritten, 0, 3 << 20).unwrap() == again);
    assert_eq!(read(&a, truncated, 0, 10).unwrap(), b"");
}

/// Puts an object no row names under a fresh id of `config`'s sequence.
fn orphan(config: &ObjectConfig) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let id = query_i64(config, "SELECT nextval('granary_object_ids')");
    rt.block_on(async {
        let s = &config.store;
        let store = object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(&s.bucket)
            .with_region(&s.region)
            .with_endpoint(s.endpoint.as_deref().unwrap())
            .with_allow_http(true)
            .with_access_key_id(&config.credentials.access_key_id)
            .with_secret_access_key(&config.credentials.secret_access_key)
            .build()
            .unwrap();
        let path = object_store::path::Path::from(format!("{}/objects/{id:016x}", s.prefix));
        store.put(&path, vec![1u8; 70_000].into()).await.unwrap();
        id
    })
}

#[test]
fn compaction_makes_few_objects_of_many_small_publishes_and_one_round_runs_at_a_time() {
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let config = config(&env, "many");
    let (a, b) = (head(&config), head(&config));
    let f = create(&a, "appended");
    // 6 MiB appended in 64 KiB FILE_SYNC writes: 96 objects, and a sparse tail.
    let chunk = 64 << 10;
    let mut expect = Vec::new();
    for i in 0..96u32 {
        let data = vec![(i % 200) as u8 + 1; chunk];
        stable(&a, f, expect.len(), &data);
        expect.extend_from_slice(&data);
    }
    stable(&a, f, 10 << 20, b"tail");
    expect.resize(10 << 20, 0);
    expect.extend_from_slice(b"tail");
    let started = Instant::now();
    let (ra, rb) = std::thread::scope(|s| {
        let ta = s.spawn(|| a.gc_round().unwrap());
        let tb = s.spawn(|| b.gc_round().unwrap());
        (ta.join().unwrap(), tb.join().unwrap())
    });
    let took = started.elapsed();
    // One round compacts; the other skips (the advisory lock) or, run after it, finds
    // nothing to do. Two at once would leave one compaction dropped.
    assert_eq!(ra.compacted_files + rb.compacted_files, 1, "{ra:?} {rb:?}");
    assert_eq!(
        ra.compactions_dropped + rb.compactions_dropped,
        0,
        "{ra:?} {rb:?}"
    );
    // 0-4 MiB and 4-6 MiB in one object each; the tail, 4 MiB further on, alone.
    let (slices, objects) = a.slice_counts(f).unwrap();
    assert_eq!((slices, objects), (3, 3));
    assert!(read(&b, f, 0, 11 << 20).unwrap() == expect);
    eprintln!("compacted 97 slices of 6 MiB into {slices} ({objects} objects) in {took:?}");
}

/// A file of more slices than one pass takes, over more bytes than one pass may hold, is
/// compacted in several passes, each within `COMPACT_PASS_MAX_BYTES`, keeping every
/// byte (inline bytes, a truncation's zeros, patches over patches) while head B reads
/// all along; the database's slice count follows every change.
#[test]
fn a_file_of_many_slices_is_compacted_in_bounded_passes() {
    use granary_backend_object::limits::{COMPACT_PAGE_ROWS, COMPACT_PASS_MAX_BYTES};
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let config = config(&env, "passes");
    let (a, b) = (head(&config), head(&config));
    let f = create(&a, "many");
    let size = 10usize << 20;
    let mut expect: Vec<u8> = (0..size).map(|i| (i % 239) as u8).collect();
    for at in (0..size).step_by(1 << 20) {
        stable(&a, f, at, &expect[at..at + (1 << 20)]);
    }
    // A truncation's zero slice inside the file, then the file extended past it again.
    let cut = size - (1 << 20) + 1000;
    a.setattr(
        f,
        &SetAttr {
            size_bytes: Some(cut as u64),
            ..SetAttr::default()
        },
        None,
        &ROOT,
    )
    .unwrap();
    expect[cut..].fill(0);
    stable(&a, f, size - 10, b"0123456789");
    expect[size - 10..].copy_from_slice(b"0123456789");
    // Inline bytes at the start, and 600 patches of 4 KiB (some over others) in the
    // first 8 MiB: about 300 slices in each 4 MiB, more than a page of rows.
    stable(&a, f, 100, b"inline");
    expect[100..106].copy_from_slice(b"inline");
    let mut rng = rand::rngs::StdRng::seed_from_u64(2911);
    for _ in 0..600 {
        let at = rng.gen_range(0..(8 << 20) - 4096);
        let patch: Vec<u8> = (0..4096).map(|_| rng.gen()).collect();
        stable(&a, f, at, &patch);
        expect[at..at + 4096].copy_from_slice(&patch);
    }
    let count = format!("SELECT slice_count FROM inodes WHERE id = {}", f.0);
    let (slices, _) = a.slice_counts(f).unwrap();
    assert!(slices > 2 * COMPACT_PAGE_ROWS as u64, "{slices} slices");
    assert_eq!(query_i64(&config, &count) as u64, slices);
    let expect = Arc::new(expect);

    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (stop, expect) = (stop.clone(), expect.clone());
        std::thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(8);
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let at = rng.gen_range(0..expect.len() - 1);
                let n = rng.gen_range(1..=512 << 10).min(expect.len() - at);
                let got = read(&b, f, at as u64, n as u32)
                    .unwrap_or_else(|e| panic!("head B's READ at {at}+{n}: {e:?}"));
                assert!(
                    got == expect[at..at + n],
                    "head B read other bytes at {at}+{n}"
                );
                reads += 1;
            }
            (b, reads)
        })
    };
    // Rounds until one finds nothing more to merge.
    let mut rounds = Vec::new();
    loop {
        let r = a.gc_round().unwrap();
        assert!(!r.skipped && r.compactions_dropped == 0, "{r:?}");
        assert!(
            r.largest_pass_bytes <= COMPACT_PASS_MAX_BYTES as u64,
            "a pass held {} bytes: {r:?}",
            r.largest_pass_bytes
        );
        if r.compaction_passes == 0 {
            break;
        }
        rounds.push(r);
        assert!(
            rounds.len() <= 4,
            "still merging after 4 rounds: {rounds:?}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let (b, reads) = reader.join().expect("head B's reads all matched");
    let first = &rounds[0];
    assert!(first.compaction_passes >= 3, "{first:?}");
    assert!(
        first.compacted_bytes > COMPACT_PASS_MAX_BYTES as u64,
        "more bytes rewritten than one pass may hold: {first:?}"
    );
    assert!(first.largest_pass_bytes > 0, "{first:?}");
    let (after, objects) = a.slice_counts(f).unwrap();
    assert_eq!(query_i64(&config, &count) as u64, after);
    // 10 MiB in objects of at most 4 MiB: at least 3; merged runs of neighbours make few
    // more than that.
    assert!(
        after <= 8 && objects <= 8,
        "{after} slices, {objects} objects"
    );
    assert!(read(&a, f, 0, size as u32).unwrap() == *expect);
    assert!(read(&b, f, 0, size as u32).unwrap() == *expect);
    assert!(reads >= 3, "head B read {reads} times");
    let audit = a.audit().unwrap();
    assert!(audit.missing.is_empty(), "{audit:?}");
    eprintln!(
        "{slices} slices of 10 MiB compacted into {after} ({objects} objects) in {} rounds: \
         {rounds:?}",
        rounds.len()
    );
}

/// A head that read a file of more slices than a slice map holds (so by range, without
/// whole-object fetches through a map or read-ahead) maps it again once compaction
/// brought the count down: the database's count comes with the row each READ reads,
/// and compaction moves the file's `version`, so no head keeps reading it by range.
#[test]
fn a_file_compaction_shrank_is_mapped_again_on_every_head() {
    use granary_backend_object::limits::SLICE_MAP_MAX_ROWS;
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let config = config(&env, "remap");
    let (a, b) = (head(&config), head(&config));
    let f = create(&a, "patched");
    let mut expect: Vec<u8> = (0..1u32 << 20).map(|i| (i % 233) as u8).collect();
    stable(&a, f, 0, &expect);
    let mut rng = rand::rngs::StdRng::seed_from_u64(2912);
    for _ in 0..SLICE_MAP_MAX_ROWS + 20 {
        let at = rng.gen_range(0..expect.len() - 512);
        let patch: Vec<u8> = (0..512).map(|_| rng.gen()).collect();
        stable(&a, f, at, &patch);
        expect[at..at + 512].copy_from_slice(&patch);
    }
    let (slices, _) = a.slice_counts(f).unwrap();
    assert!(slices > SLICE_MAP_MAX_ROWS as u64, "{slices} slices");
    // Head B reads it by range: no map, so none of its READs hits one.
    let maps = b.cache_hits().maps;
    for _ in 0..3 {
        assert!(read(&b, f, 0, 1 << 20).unwrap() == expect);
    }
    assert_eq!(
        b.cache_hits().maps,
        maps,
        "a file of {slices} slices was mapped"
    );

    let r = a.gc_round().unwrap();
    assert_eq!((r.compacted_files, r.slices_after), (1, 1), "{r:?}");
    // The next READ maps the one slice left; the ones after it use the map, and a READ
    // of the whole object is served from the bytes the first fetched whole.
    assert!(read(&b, f, 0, 1 << 20).unwrap() == expect);
    let hits = b.cache_hits();
    for _ in 0..3 {
        assert!(read(&b, f, 0, 1 << 20).unwrap() == expect);
    }
    let after = b.cache_hits();
    assert_eq!(after.maps - hits.maps, 3, "{hits:?} {after:?}");
    assert!(after.bytes - hits.bytes >= 3, "{hits:?} {after:?}");
}

/// Environment of the child head [`crash_child_publishes_until_killed`]: its file
/// system's database URL and key prefix.
const CHILD_DB: &str = "GRANARY_CRASH_CHILD_DB";
const CHILD_PREFIX: &str = "GRANARY_CRASH_CHILD_PREFIX";

/// A head in a process of its own, killed with SIGKILL between its upload and its commit
/// (the parent holds the file's row, so the child's publish, having stored its object,
/// waits for the lock): the object it leaves is an orphan no row names, nothing it wrote
/// reaches the file, and the sweep deletes the orphan after the grace.
#[test]
fn a_head_killed_between_its_upload_and_its_commit_leaves_an_orphan_the_sweep_deletes() {
    use std::os::unix::process::ExitStatusExt as _;
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let config = config(&env, "sigkill");
    let a = head(&config);
    let f = create(&a, "victim");
    stable(&a, f, 0, b"before");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let locker = rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&config.postgres, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let hold = format!("BEGIN; SELECT id FROM inodes WHERE id = {} FOR UPDATE", f.0);
        client.batch_execute(&hold).await.unwrap();
        client
    });
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child_publishes_until_killed", "--ignored"])
        .args(["--nocapture", "--test-threads", "1"])
        .env(CHILD_DB, &config.postgres)
        .env(CHILD_PREFIX, &config.store.prefix)
        .spawn()
        .expect("the child head starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    let orphan = loop {
        if let Some(&o) = a.audit().unwrap().unnamed.first() {
            break o;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child head exited before it uploaded"
        );
        assert!(
            Instant::now() < deadline,
            "the child head uploaded nothing in 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "{status}");
    rt.block_on(locker.batch_execute("ROLLBACK")).unwrap();

    // Nothing it wrote was acknowledged, and nothing reached the file.
    assert_eq!(read(&a, f, 0, 100).unwrap(), b"before");
    let audit = a.audit().unwrap();
    assert!(audit.missing.is_empty(), "{audit:?}");
    assert_eq!(audit.unnamed, vec![orphan], "{audit:?}");
    let r = a.gc_round().unwrap();
    assert_eq!((r.unnamed_found, r.objects_deleted), (1, 0), "{r:?}");
    std::thread::sleep(GRACE + Duration::from_millis(500));
    let r = a.gc_round().unwrap();
    assert_eq!(r.objects_deleted, 1, "{r:?}");
    let audit = a.audit().unwrap();
    assert!(
        audit.missing.is_empty() && audit.unnamed.is_empty() && audit.named == 0,
        "{audit:?}"
    );
}

/// The head the test above kills: a FILE_SYNC write of 1 MiB to `victim` (one object),
/// which uploads and then waits for the row the parent holds.
#[test]
#[ignore = "a child process of the SIGKILL test above, which runs it with --ignored"]
fn crash_child_publishes_until_killed() {
    let env = TestEngines::from_env().expect("the parent's engines");
    let mut config = env.config.clone();
    config.postgres = std::env::var(CHILD_DB).expect("run by the SIGKILL test, which sets it");
    config.store.prefix = std::env::var(CHILD_PREFIX).expect("set by the SIGKILL test");
    config.gc.interval = Duration::ZERO;
    let fs = head(&config);
    let f = fs
        .lookup(fs.root(), &name("victim"), &ROOT)
        .unwrap()
        .attr
        .fileid;
    let done = fs.write(f, 0, &vec![0xc4; 1 << 20], Stability::FileSync, &ROOT);
    panic!("the write returned ({done:?}) before the parent killed this head");
}
