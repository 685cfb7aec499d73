//! The open-file cache (seed 004): open files kept across RPCs, keyed by file identity and
//! access mode, shared by every request and client.
//!
//! Promises:
//!
//! - a hit takes one shard's read lock for a hash lookup and an `Arc` clone (hits never
//!   wait for each other, even on one file), and makes no
//!   open/close call; the caller's `open` runs only on a miss;
//! - concurrent misses on one key run `open` once: the first inserts an `Opening` marker and
//!   opens outside the lock, the others wait for it (on a condition variable; opens are
//!   short system calls) and share its result; if it fails they retry, each its own open;
//! - aging is two-bit (referenced / recent) and runs only in [`FileCache::age`], which the
//!   server calls from a global timer, never from a request: a hit sets `referenced`; a pass
//!   turns `referenced` into `recent`, drops `recent`, and evicts an entry that had neither,
//!   so an entry unused for two full passes is closed; an entry someone holds beyond the
//!   cache (a call in flight, an NFSv4 OPEN until its CLOSE) is never aged out;
//! - the number of entries never exceeds the capacity: a miss that finds the cache full
//!   opens uncached (the value lives as long as the caller holds it) instead of evicting
//!   in the request path;
//! - [`FileCache::forget`] removes every access mode of an identity at once (the backend
//!   calls it when the file's last name goes, so its space is released as soon as the last
//!   request holding it finishes); an open racing with it is not inserted;
//! - values are dropped (closed) outside every lock, by whoever drops the last `Arc`.
//!   Flushing unstable writes before close is the value's `Drop` (the host backend's open
//!   file syncs there), so a value evicted while a request still uses it is flushed and
//!   closed when that request lets go.
//!
//! It is generic over the key (a host file identity today; an NFSv4.1 open state later) and
//! the value (an open descriptor), and knows nothing about files.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::ops::Deref;
use std::sync::Arc;

use crate::limits::FILECACHE_SHARDS;
use crate::prim::{
    AtomicU64, AtomicU8, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering, RwLock,
    RwLockWriteGuard,
};

/// How a cached file was opened. A `Write` entry is opened read-write and may serve reads
/// too, but the cache keeps the modes apart: the caller picks the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    Read,
    Write,
    /// A descriptor that names the file without reading or writing it (`O_PATH`): a
    /// directory that calls look names up in and change entries of.
    Path,
}

impl Access {
    const ALL: [Self; 3] = [Self::Read, Self::Write, Self::Path];
}

const REFERENCED: u8 = 1;
const RECENT: u8 = 2;

/// One cached value and its age bits. Dereferences to the value.
#[derive(Debug)]
pub struct Entry<V> {
    value: V,
    age: AtomicU8,
    cached: bool,
}

impl<V> Entry<V> {
    fn new(value: V, cached: bool) -> Self {
        Self {
            value,
            age: AtomicU8::new(REFERENCED),
            cached,
        }
    }

    /// Marks the entry used. A load first, so a hot entry's cache line is not written by
    /// every hit.
    fn touch(&self) {
        if self.age.load(Ordering::Relaxed) & REFERENCED == 0 {
            self.age.fetch_or(REFERENCED, Ordering::Relaxed);
        }
    }

    /// Whether the cache holds this value (false for an overflow or raced open, which is
    /// closed when its holder drops it).
    pub fn is_cached(&self) -> bool {
        self.cached
    }
}

impl<V> Deref for Entry<V> {
    type Target = V;
    fn deref(&self) -> &V {
        &self.value
    }
}

/// Entries an aging pass evicted. They are no longer in the cache; each value is dropped
/// (closed) when this bundle is dropped, unless a request still holds it, in which case it
/// is dropped when that request lets go.
#[must_use = "dropping the bundle closes the evicted values"]
pub struct Evicted<V>(Vec<Arc<Entry<V>>>);

impl<V> Evicted<V> {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<V> Default for Evicted<V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<V> std::fmt::Debug for Evicted<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evicted")
            .field("len", &self.0.len())
            .finish()
    }
}

/// The result of an open that others wait for: `Some(entry)` or `None` (failed or forgotten;
/// the waiter retries).
struct Pending<V> {
    done: Mutex<Option<Option<Arc<Entry<V>>>>>,
    ready: Condvar,
}

impl<V> Pending<V> {
    fn new() -> Self {
        Self {
            done: Mutex::new(None),
            ready: Condvar::new(),
        }
    }

    fn finish(&self, result: Option<Arc<Entry<V>>>) {
        *lock(&self.done) = Some(result);
        self.ready.notify_all();
    }

    fn wait(&self) -> Option<Arc<Entry<V>>> {
        let mut done = lock(&self.done);
        loop {
            if let Some(result) = done.as_ref() {
                return result.clone();
            }
            done = match self.ready.wait(done) {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            };
        }
    }
}

enum Slot<V> {
    Opening(Arc<Pending<V>>),
    Ready(Arc<Entry<V>>),
}

/// Hashing of keys: random per cache (no client can aim keys at one shard), fixed under
/// loom so that every explored execution takes the same locks.
#[cfg(not(loom))]
type KeyHasher = std::collections::hash_map::RandomState;
#[cfg(loom)]
type KeyHasher = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

type Map<K, V> = HashMap<(K, Access), Slot<V>, KeyHasher>;
type Shard<K, V> = RwLock<Map<K, V>>;

/// Counters of a cache, for the lab and `tracing`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FileCacheStats {
    pub hits: u64,
    pub misses: u64,
    /// Lookups that waited for another request's open of the same key.
    pub waits: u64,
    /// Opens not kept because the cache was full.
    pub overflows: u64,
    /// Entries closed by aging.
    pub aged_out: u64,
    /// Entries removed by `forget`.
    pub forgotten: u64,
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    waits: AtomicU64,
    overflows: AtomicU64,
    aged_out: AtomicU64,
    forgotten: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a shard leaves the map consistent (every change is one insert
    // or remove), so a poisoned lock is still usable.
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A shard for a change (insert, remove, aging); lookups take it shared.
fn write<T>(shard: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    // As for `lock`: every change is one insert or remove, so a poisoned shard is usable.
    shard
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The open-file cache. See the module documentation for what it promises.
pub struct FileCache<K, V> {
    shards: Box<[Shard<K, V>]>,
    hasher: KeyHasher,
    /// Slots taken (opening + ready); never above `capacity`.
    len: AtomicUsize,
    capacity: usize,
    counters: Counters,
}

impl<K, V> std::fmt::Debug for FileCache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileCache")
            .field("len", &self.len.load(Ordering::Relaxed))
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone, V> FileCache<K, V> {
    /// A cache holding at most `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> Self {
        let shards = (0..FILECACHE_SHARDS)
            .map(|_| RwLock::new(HashMap::with_hasher(KeyHasher::default())))
            .collect();
        Self {
            shards,
            hasher: KeyHasher::default(),
            len: AtomicUsize::new(0),
            capacity: capacity.max(1),
            counters: Counters::default(),
        }
    }

    /// Entries held now (opening or open).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound given at construction.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn stats(&self) -> FileCacheStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FileCacheStats {
            hits: get(&c.hits),
            misses: get(&c.misses),
            waits: get(&c.waits),
            overflows: get(&c.overflows),
            aged_out: get(&c.aged_out),
            forgotten: get(&c.forgotten),
        }
    }

    fn shard(&self, key: &K) -> &Shard<K, V> {
        // Both access modes of one identity share a shard, so `forget` takes one lock.
        let hash = self.hasher.hash_one(key);
        #[allow(clippy::cast_possible_truncation)] // the shard count is small
        &self.shards[(hash as usize) & (FILECACHE_SHARDS - 1)]
    }

    fn reserve(&self) -> bool {
        let mut len = self.len.load(Ordering::Relaxed);
        loop {
            if len >= self.capacity {
                return false;
            }
            match self
                .len
                .compare_exchange_weak(len, len + 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => len = seen,
            }
        }
    }

    fn release(&self, count: usize) {
        if count > 0 {
            let before = self.len.fetch_sub(count, Ordering::AcqRel);
            debug_assert!(before >= count, "released more slots than were taken");
        }
    }

    /// The open value for `(key, access)`, opening it with `open` on a miss.
    ///
    /// # Errors
    /// Whatever `open` returned; nothing is cached then.
    pub fn get_or_open<E>(
        &self,
        key: &K,
        access: Access,
        open: impl FnOnce() -> Result<V, E>,
    ) -> Result<Arc<Entry<V>>, E> {
        let shard = self.shard(key);
        let slot_key = (key.clone(), access);
        loop {
            // A hit takes the shard shared: hits on one file never wait for each other,
            // and a worker preempted inside one holds no other worker up.
            let found = {
                let map = shard
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match map.get(&slot_key) {
                    Some(Slot::Ready(entry)) => return Ok(self.hit(entry)),
                    Some(Slot::Opening(pending)) => Some(Arc::clone(pending)),
                    None => None,
                }
            };
            let pending = match found {
                Some(pending) => pending,
                None => {
                    // Not there a moment ago: look again under the exclusive lock, since
                    // another miss may have inserted it meanwhile.
                    let map = write(shard);
                    match map.get(&slot_key) {
                        Some(Slot::Ready(entry)) => return Ok(self.hit(entry)),
                        Some(Slot::Opening(pending)) => Arc::clone(pending),
                        None => return self.open_miss(map, shard, slot_key, open),
                    }
                }
            };
            bump(&self.counters.waits, 1);
            if let Some(entry) = pending.wait() {
                entry.touch();
                return Ok(entry);
            }
            // The open failed or its key was forgotten meanwhile: look again.
        }
    }

    /// A lookup that found its entry open: marks it used and counts the hit.
    fn hit(&self, entry: &Arc<Entry<V>>) -> Arc<Entry<V>> {
        entry.touch();
        bump(&self.counters.hits, 1);
        Arc::clone(entry)
    }

    fn open_miss<E>(
        &self,
        mut map: RwLockWriteGuard<'_, Map<K, V>>,
        shard: &Shard<K, V>,
        slot_key: (K, Access),
        open: impl FnOnce() -> Result<V, E>,
    ) -> Result<Arc<Entry<V>>, E> {
        if !self.reserve() {
            drop(map);
            bump(&self.counters.overflows, 1);
            return open().map(|value| Arc::new(Entry::new(value, false)));
        }
        bump(&self.counters.misses, 1);
        let pending = Arc::new(Pending::new());
        map.insert(slot_key.clone(), Slot::Opening(Arc::clone(&pending)));
        drop(map);
        let mut guard = OpeningGuard {
            cache: self,
            shard,
            slot_key,
            pending,
            entry: None,
        };
        let value = open()?;
        Ok(guard.install(value))
    }

    /// Removes every access mode of `key`. Returns how many entries it removed. Their
    /// values close when the last request holding them lets go.
    pub fn forget(&self, key: &K) -> usize {
        let removed = self.remove_key(key);
        removed.len()
        // `removed` drops here, outside the lock: closes happen without blocking lookups.
    }

    /// [`FileCache::forget`] that calls `last` on each removed value and hands the
    /// entries back instead of dropping them (e.g. to say a value of a deleted file needs
    /// no flush on close, and to leave the close itself to another thread).
    pub fn forget_deferred(&self, key: &K, mut last: impl FnMut(&V)) -> Evicted<V> {
        let ready = self
            .remove_key(key)
            .into_iter()
            .filter_map(|slot| match slot {
                Slot::Ready(entry) => Some(entry),
                Slot::Opening(_) => None,
            })
            .collect::<Vec<_>>();
        for entry in &ready {
            last(entry);
        }
        Evicted(ready)
    }

    /// Takes every access mode of `key` out of the map (under its shard's lock only).
    fn remove_key(&self, key: &K) -> Vec<Slot<V>> {
        let mut removed = Vec::new();
        {
            let mut map = write(self.shard(key));
            for access in Access::ALL {
                if let Some(slot) = map.remove(&(key.clone(), access)) {
                    removed.push(slot);
                }
            }
        }
        self.release(removed.len());
        bump(&self.counters.forgotten, removed.len() as u64);
        removed
    }

    /// One aging pass (the global timer's job). Returns how many entries it closed; their
    /// values are dropped (closed) here, by the caller.
    pub fn age(&self) -> usize {
        self.age_deferred().len()
    }

    /// One aging pass that hands the evicted entries back instead of dropping them, so a
    /// timer callback can leave the closing (and any flush a value's `Drop` makes) to
    /// another thread: the pass itself only takes each shard's lock for a scan.
    pub fn age_deferred(&self) -> Evicted<V> {
        let mut closing = Vec::new();
        for shard in self.shards.iter() {
            let before = closing.len();
            write(shard).retain(|_, slot| keep_after_aging(slot, &mut closing));
            self.release(closing.len() - before);
        }
        bump(&self.counters.aged_out, closing.len() as u64);
        Evicted(closing)
    }

    /// Removes every entry (shutdown, or the lab switching designs).
    pub fn clear(&self) -> usize {
        let mut total = 0;
        for shard in self.shards.iter() {
            let drained: Vec<Slot<V>> = write(shard).drain().map(|(_, slot)| slot).collect();
            total += drained.len();
            self.release(drained.len());
        }
        total
    }
}

fn keep_after_aging<V>(slot: &Slot<V>, closing: &mut Vec<Arc<Entry<V>>>) -> bool {
    let Slot::Ready(entry) = slot else {
        return true; // an open in progress is not aged
    };
    if Arc::strong_count(entry) > 1 {
        // Held beyond the cache: a call in flight, or an NFSv4 OPEN keeping it until its
        // CLOSE (knfsd's file cache skips referenced files the same way). Evicting it
        // would close nothing now and make the holder's next call open the file again.
        entry.age.store(RECENT, Ordering::Relaxed);
        return true;
    }
    let age = entry.age.load(Ordering::Relaxed);
    if age & REFERENCED != 0 {
        entry.age.store(RECENT, Ordering::Relaxed);
        true
    } else if age & RECENT != 0 {
        // A hit racing this store sets REFERENCED again with fetch_or; losing that bit at
        // worst ages the entry one pass early.
        entry.age.fetch_and(!RECENT, Ordering::Relaxed);
        true
    } else {
        closing.push(Arc::clone(entry));
        false
    }
}

/// Owns an `Opening` slot while `open` runs: installs the value, or (on error or panic)
/// removes the marker and wakes the waiters so they retry.
struct OpeningGuard<'a, K: Hash + Eq + Clone, V> {
    cache: &'a FileCache<K, V>,
    shard: &'a Shard<K, V>,
    slot_key: (K, Access),
    pending: Arc<Pending<V>>,
    entry: Option<Arc<Entry<V>>>,
}

impl<K: Hash + Eq + Clone, V> OpeningGuard<'_, K, V> {
    fn ours(&self, map: &Map<K, V>) -> bool {
        matches!(map.get(&self.slot_key), Some(Slot::Opening(p)) if Arc::ptr_eq(p, &self.pending))
    }

    fn install(&mut self, value: V) -> Arc<Entry<V>> {
        let mut map = write(self.shard);
        let ours = self.ours(&map);
        let entry = Arc::new(Entry::new(value, ours));
        if ours {
            map.insert(self.slot_key.clone(), Slot::Ready(Arc::clone(&entry)));
            self.entry = Some(Arc::clone(&entry));
        }
        // If not ours, `forget` took the slot (and its reservation) while we opened: the
        // value serves this caller only and closes when it is dropped.
        entry
    }
}

impl<K: Hash + Eq + Clone, V> Drop for OpeningGuard<'_, K, V> {
    fn drop(&mut self) {
        if self.entry.is_none() {
            let mut map = write(self.shard);
            if self.ours(&map) {
                map.remove(&self.slot_key);
                drop(map);
                self.cache.release(1);
            }
        }
        self.pending.finish(self.entry.take());
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_models;
