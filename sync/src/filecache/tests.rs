//! The open-file cache against a reference `Mutex<HashMap>` under random operation
//! sequences (sequential and concurrent), and its single-flight, overflow, aging and
//! forget rules one at a time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use proptest::prelude::*;

use super::{Access, FileCache};

/// A stand-in for an open descriptor: an id, and a shared count of closes.
#[derive(Debug)]
struct Fd {
    id: u64,
    closes: Arc<AtomicUsize>,
}

impl Drop for Fd {
    fn drop(&mut self) {
        self.closes.fetch_add(1, Ordering::SeqCst);
    }
}

struct Opener {
    next: AtomicU64,
    opens: AtomicUsize,
    closes: Arc<AtomicUsize>,
}

impl Opener {
    fn new() -> Self {
        Self {
            next: AtomicU64::new(1),
            opens: AtomicUsize::new(0),
            closes: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn open(&self) -> Result<Fd, &'static str> {
        self.opens.fetch_add(1, Ordering::SeqCst);
        Ok(Fd {
            id: self.next.fetch_add(1, Ordering::SeqCst),
            closes: Arc::clone(&self.closes),
        })
    }

    fn open_count(&self) -> usize {
        self.opens.load(Ordering::SeqCst)
    }

    fn live(&self) -> usize {
        self.open_count() - self.closes.load(Ordering::SeqCst)
    }
}

#[derive(Debug, Clone)]
enum Op {
    Get(u8, u8),
    Fail(u8, u8),
    Forget(u8),
    Age,
}

/// Every access mode, picked by a number.
fn access(pick: u8) -> Access {
    [Access::Read, Access::Write, Access::Path][usize::from(pick) % 3]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..6, 0u8..3).prop_map(|(k, a)| Op::Get(k, a)),
        1 => (0u8..6, 0u8..3).prop_map(|(k, a)| Op::Fail(k, a)),
        1 => (0u8..6).prop_map(Op::Forget),
        2 => Just(Op::Age),
    ]
}

/// The specification, written the simplest way: one map behind one mutex, every operation
/// a few lines. Values are ids; ages are the two bits.
struct Reference {
    map: Mutex<HashMap<(u8, Access), (u64, u8)>>,
    capacity: usize,
}

impl Reference {
    /// `Some(id)` of a hit, `None` of a miss (the caller opens next id; `cached` says
    /// whether it is kept).
    fn get(&self, key: (u8, Access), next_id: u64) -> (Option<u64>, bool) {
        let mut map = self.map.lock().unwrap();
        if let Some((id, age)) = map.get_mut(&key) {
            *age |= 1;
            return (Some(*id), true);
        }
        let cached = map.len() < self.capacity;
        if cached {
            map.insert(key, (next_id, 1));
        }
        (None, cached)
    }

    fn forget(&self, key: u8) {
        let mut map = self.map.lock().unwrap();
        for pick in 0..3 {
            map.remove(&(key, access(pick)));
        }
    }

    fn age(&self) {
        self.map.lock().unwrap().retain(|_, (_, age)| {
            let keep = *age != 0;
            *age = if *age & 1 != 0 { 2 } else { 0 };
            keep
        });
    }
}

fn run_sequence(ops: &[Op], capacity: usize) -> Result<(), TestCaseError> {
    let cache: FileCache<u8, Fd> = FileCache::new(capacity);
    let reference = Reference {
        map: Mutex::new(HashMap::new()),
        capacity,
    };
    let opener = Opener::new();
    for op in ops {
        match *op {
            Op::Get(k, w) => {
                let next = opener.next.load(Ordering::SeqCst);
                let before = opener.open_count();
                let got = cache.get_or_open(&k, access(w), || opener.open()).unwrap();
                let (want, cached) = reference.get((k, access(w)), next);
                let hit = opener.open_count() == before;
                prop_assert_eq!(hit, want.is_some(), "hit/miss differs at {:?}", op);
                prop_assert_eq!(got.id, want.unwrap_or(next));
                prop_assert_eq!(got.is_cached(), cached);
            }
            Op::Fail(k, w) => {
                let got = cache.get_or_open(&k, access(w), || Err::<Fd, _>("EIO"));
                let hit = reference.map.lock().unwrap().contains_key(&(k, access(w)));
                prop_assert_eq!(got.is_ok(), hit);
                if hit {
                    reference.get((k, access(w)), 0);
                }
            }
            Op::Forget(k) => {
                cache.forget(&k);
                reference.forget(k);
            }
            Op::Age => {
                cache.age();
                reference.age();
            }
        }
        prop_assert_eq!(cache.len(), reference.map.lock().unwrap().len());
        prop_assert_eq!(
            opener.live(),
            cache.len(),
            "an evicted value was not closed"
        );
    }
    cache.clear();
    prop_assert_eq!(opener.live(), 0);
    Ok(())
}

proptest! {
    #[test]
    fn matches_the_reference(ops in proptest::collection::vec(op(), 1..200), cap in 1usize..8) {
        run_sequence(&ops, cap)?;
    }
}

/// Many threads miss on the same keys at once: each key is opened once, and every thread
/// sees the id the reference recorded for the first return (first wins).
#[test]
fn concurrent_misses_open_once_and_agree_with_the_reference() {
    const THREADS: usize = 8;
    const KEYS: u8 = 32;
    let cache: Arc<FileCache<u8, Fd>> = Arc::new(FileCache::new(1024));
    let opener = Arc::new(Opener::new());
    let reference: Arc<Mutex<HashMap<u8, u64>>> = Arc::default();
    let barrier = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (cache, opener, reference, barrier) = (
                Arc::clone(&cache),
                Arc::clone(&opener),
                Arc::clone(&reference),
                Arc::clone(&barrier),
            );
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..KEYS {
                    let k = (i + t as u8 * 5) % KEYS;
                    let fd = cache
                        .get_or_open(&k, Access::Write, || opener.open())
                        .unwrap();
                    let first = *reference.lock().unwrap().entry(k).or_insert(fd.id);
                    assert_eq!(fd.id, first, "two values for one key");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(opener.open_count(), usize::from(KEYS));
    assert_eq!(cache.len(), usize::from(KEYS));
    assert_eq!(cache.clear(), usize::from(KEYS));
    assert_eq!(opener.live(), 0);
}

/// Random concurrent gets, failures, forgets and aging: the bound holds at every moment a
/// watcher looks, a cached key never has two live cached values, and nothing leaks.
#[test]
fn concurrent_random_operations_keep_the_bound_and_leak_nothing() {
    const THREADS: usize = 6;
    const CAPACITY: usize = 5;
    let cache: Arc<FileCache<u8, Fd>> = Arc::new(FileCache::new(CAPACITY));
    let opener = Arc::new(Opener::new());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (cache, stop) = (Arc::clone(&cache), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                assert!(cache.len() <= CAPACITY);
            }
        })
    };
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (cache, opener) = (Arc::clone(&cache), Arc::clone(&opener));
            std::thread::spawn(move || {
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ t as u64;
                for _ in 0..20_000 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let k = (rng % 8) as u8;
                    match (rng >> 8) % 20 {
                        0 => drop(cache.forget(&k)),
                        1 => drop(cache.age()),
                        2 => drop(cache.get_or_open(&k, Access::Read, || Err::<Fd, _>("EIO"))),
                        _ => {
                            let fd =
                                cache.get_or_open(&k, access((rng % 3) as u8), || opener.open());
                            assert!(fd.unwrap().id > 0);
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    watcher.join().unwrap();
    assert_eq!(
        opener.live(),
        cache.len(),
        "values alive beyond the cached ones"
    );
    cache.clear();
    assert_eq!(opener.live(), 0);
    assert!(cache.is_empty());
}

#[test]
fn an_open_racing_forget_is_not_cached() {
    let cache: FileCache<u8, Fd> = FileCache::new(4);
    let opener = Opener::new();
    let fd = cache
        .get_or_open(&1, Access::Write, || {
            assert_eq!(cache.forget(&1), 1, "the opening marker is forgotten");
            opener.open()
        })
        .unwrap();
    assert!(!fd.is_cached());
    assert!(cache.is_empty());
    drop(fd);
    assert_eq!(opener.live(), 0, "the raced value closes with its holder");
}

#[test]
fn full_cache_opens_uncached_and_aging_frees_room() {
    let cache: FileCache<u8, Fd> = FileCache::new(1);
    let opener = Opener::new();
    let a = cache
        .get_or_open(&1, Access::Read, || opener.open())
        .unwrap();
    let b = cache
        .get_or_open(&2, Access::Read, || opener.open())
        .unwrap();
    assert!(a.is_cached() && !b.is_cached());
    drop(b);
    assert_eq!(opener.live(), 1);
    // Held beyond the cache (as an NFSv4 OPEN holds it): never aged out.
    for _ in 0..4 {
        assert_eq!(cache.age(), 0, "a held entry was aged out");
    }
    drop(a);
    // Let go of: recent -> gone, the second pass closes it.
    assert_eq!(cache.age(), 0);
    assert_eq!(cache.age(), 1);
    assert_eq!(opener.live(), 0);
    let c = cache
        .get_or_open(&2, Access::Read, || opener.open())
        .unwrap();
    assert!(c.is_cached());
    assert_eq!(cache.stats().overflows, 1);
    assert_eq!(cache.stats().aged_out, 1);
}

#[test]
fn a_hit_between_passes_keeps_the_entry() {
    let cache: FileCache<u8, Fd> = FileCache::new(4);
    let opener = Opener::new();
    for _ in 0..10 {
        drop(
            cache
                .get_or_open(&7, Access::Write, || opener.open())
                .unwrap(),
        );
        cache.age();
    }
    assert_eq!(opener.open_count(), 1);
    assert_eq!(cache.stats().hits, 9);
}

#[test]
fn waiters_retry_after_a_failed_open() {
    let cache: Arc<FileCache<u8, Fd>> = Arc::new(FileCache::new(4));
    let opener = Arc::new(Opener::new());
    let gate = Arc::new(Barrier::new(2));
    let failing = {
        let (cache, gate) = (Arc::clone(&cache), Arc::clone(&gate));
        std::thread::spawn(move || {
            cache.get_or_open(&3, Access::Read, || {
                gate.wait();
                std::thread::sleep(std::time::Duration::from_millis(20));
                Err::<Fd, _>("EACCES")
            })
        })
    };
    gate.wait();
    let fd = cache
        .get_or_open(&3, Access::Read, || opener.open())
        .unwrap();
    assert!(failing.join().unwrap().is_err());
    assert!(fd.is_cached());
    assert_eq!(cache.len(), 1);
}
