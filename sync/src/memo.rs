//! A bounded, concurrent memo table: the value a pure function gives for a key, computed
//! once and shared as an `Arc` (seed 004's credential cache: the mapped credential per
//! export and client credential, so no request clones a group list).
//!
//! Promises: `get` returns what `compute(&key)` returns (the function must be pure: the
//! same key always gives an equal value), computes it at most once per key while the key
//! is held, and never holds more than the capacity: a key that finds the table full gets
//! its value computed and returned uncached. A lookup takes one shard's read lock; a miss
//! computes outside every lock, and when two race, the first insert wins and both return
//! it. Nothing is ever evicted (the keys are few: exports × distinct client identities);
//! [`Memo::clear`] drops everything, for a configuration change.
#![forbid(unsafe_code)]

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use crate::limits::FILECACHE_SHARDS as SHARDS;
use crate::prim::{AtomicU64, AtomicUsize, Ordering};

#[cfg(not(loom))]
type KeyHasher = std::collections::hash_map::RandomState;
#[cfg(loom)]
type KeyHasher = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

#[cfg(loom)]
use loom::sync::RwLock;
#[cfg(not(loom))]
use std::sync::RwLock;

type Shard<K, V> = RwLock<HashMap<K, Arc<V>, KeyHasher>>;

/// See the module documentation.
pub struct Memo<K, V> {
    shards: Box<[Shard<K, V>]>,
    hasher: KeyHasher,
    len: AtomicUsize,
    capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl<K: Hash + Eq, V> Memo<K, V> {
    pub fn new(capacity: usize) -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| RwLock::new(HashMap::with_hasher(KeyHasher::default())))
                .collect(),
            hasher: KeyHasher::default(),
            len: AtomicUsize::new(0),
            capacity,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> &Shard<K, V> {
        #[allow(clippy::cast_possible_truncation)] // the shard count is small
        &self.shards[(self.hasher.hash_one(key) as usize) & (SHARDS - 1)]
    }

    /// The memoised `compute(key)`. The key is borrowed: a hit allocates nothing, and only
    /// a miss that is kept makes the owned key (`Q::to_owned`).
    pub fn get<Q>(&self, key: &Q, compute: impl FnOnce(&Q) -> V) -> Arc<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let shard = self.shard(key);
        {
            let map = shard
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(value) = map.get(key) {
                bump(&self.hits);
                return Arc::clone(value);
            }
        }
        bump(&self.misses);
        let value = Arc::new(compute(key));
        let mut map = shard
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(first) = map.get(key) {
            return Arc::clone(first);
        }
        if self.len.load(Ordering::Acquire) >= self.capacity {
            return value;
        }
        // Inserts happen under a shard's write lock but the bound is global: count first.
        if self.len.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.len.fetch_sub(1, Ordering::AcqRel);
            return value;
        }
        map.insert(key.to_owned(), Arc::clone(&value));
        value
    }

    /// Lookups answered from the table, and lookups that computed.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// Drops every entry.
    pub fn clear(&self) {
        for shard in self.shards.iter() {
            let mut map = shard
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.len.fetch_sub(map.len(), Ordering::AcqRel);
            map.clear();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::AtomicUsize as Count;

    use proptest::prelude::*;

    use super::*;

    /// A stand-in for credential mapping: squash uid 0, keep groups.
    fn map(key: &(u32, u32, Vec<u32>)) -> (u32, Vec<u32>) {
        let (export, uid, groups) = key;
        let uid = if *uid == 0 && export % 2 == 0 {
            65534
        } else {
            *uid
        };
        (uid, groups.clone())
    }

    proptest! {
        #[test]
        fn equals_the_function_it_memoises(
            keys in proptest::collection::vec((0u32..3, 0u32..4, proptest::collection::vec(0u32..3, 0..3)), 1..100),
            cap in 0usize..6,
        ) {
            let memo = Memo::new(cap);
            let mut reference = std::collections::HashMap::new();
            for key in keys {
                let got = memo.get(&key, map);
                prop_assert_eq!(&*got, &map(&key));
                if reference.len() < cap || reference.contains_key(&key) {
                    reference.insert(key.clone(), ());
                }
                prop_assert_eq!(memo.len(), reference.len());
            }
        }
    }

    #[test]
    fn slice_keys_are_looked_up_borrowed() {
        let memo: Memo<Vec<u32>, u32> = Memo::new(4);
        let key = [1u32, 2, 3];
        let first = memo.get(&key[..], |k| k.iter().sum());
        let again = memo.get(&key[..], |_| unreachable!("a hit computes nothing"));
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!((*again, memo.len(), memo.hits_and_misses()), (6, 1, (1, 1)));
    }

    #[test]
    fn concurrent_gets_agree_and_compute_once_per_key() {
        let memo: Arc<Memo<u32, u64>> = Arc::new(Memo::new(1000));
        let computed = Arc::new(Count::new(0));
        let reference: Arc<std::sync::Mutex<HashMap<u32, usize>>> = Arc::default();
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let (memo, computed, reference) = (
                    Arc::clone(&memo),
                    Arc::clone(&computed),
                    Arc::clone(&reference),
                );
                std::thread::spawn(move || {
                    for k in 0..200u32 {
                        let v = memo.get(&k, |k| {
                            computed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            u64::from(*k) * 3
                        });
                        assert_eq!(*v, u64::from(k) * 3);
                        let ptr = Arc::as_ptr(&v) as usize;
                        let first = *reference.lock().unwrap().entry(k).or_insert(ptr);
                        assert_eq!(ptr, first, "two cached values for one key");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(memo.len(), 200);
        // Racing misses may compute twice; only the first insert is kept and returned.
        assert!(computed.load(std::sync::atomic::Ordering::SeqCst) >= 200);
        memo.clear();
        assert!(memo.is_empty());
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use loom::thread;

    use super::*;

    #[test]
    fn racing_misses_return_one_value() {
        loom::model(|| {
            let memo: Arc<Memo<u8, u8>> = Arc::new(Memo::new(1));
            let other = Arc::clone(&memo);
            let t = thread::spawn(move || Arc::as_ptr(&other.get(&1, |_| 5)) as usize);
            let mine = memo.get(&1, |_| 5);
            let theirs = t.join().unwrap();
            assert_eq!(Arc::as_ptr(&mine) as usize, theirs);
            assert_eq!(memo.len(), 1);
        });
    }

    #[test]
    fn two_keys_and_one_slot() {
        loom::model(|| {
            let memo: Arc<Memo<u8, u8>> = Arc::new(Memo::new(1));
            let other = Arc::clone(&memo);
            let t = thread::spawn(move || *other.get(&1, |_| 1));
            assert_eq!(*memo.get(&2, |_| 2), 2);
            assert_eq!(t.join().unwrap(), 1);
            assert_eq!(memo.len(), 1);
        });
    }
}
