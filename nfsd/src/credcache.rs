//! Seed 004's credential cache: the credential a call runs as on an export (the client's
//! AUTH_SYS identity mapped by the export's squash rules), computed once per identity.
//!
//! Two levels:
//!
//! - a few recently used credentials per worker thread ([`RECENT_CREDS`]), each the
//!   thread's own `Arc`: a hit compares the key words and clones an `Arc` no other core
//!   touches, so nothing is hashed, locked or shared on the way;
//! - behind them, one [`Memo`] for the server (a sharded table keyed by the same words),
//!   so a thread meeting an identity for the first time copies the mapped credential the
//!   server already holds instead of mapping it again.
//!
//! Both hold identities, never permission results: a permission changed on the server is
//! checked by the very next call. The mapping is a pure function of the key (export id,
//! flavor, uid, gid, groups), so a stale entry cannot exist; nothing is ever invalidated.
//! A per-thread entry of a cache that was dropped is never matched again (each cache has
//! its own number) and is replaced as the thread meets other identities.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sync::memo::Memo;
use vfs::Cred;

use crate::limits::{CRED_CACHE_ENTRIES, CRED_KEY_WORDS, RECENT_CREDS};

/// See the module documentation.
pub struct CredCache {
    shared: Memo<Vec<u32>, Cred>,
    /// Distinguishes this cache's per-thread entries from those of another server in the
    /// same process (tests, the lab).
    id: u64,
    recent_hits: AtomicU64,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

struct Recent {
    cache: u64,
    len: usize,
    key: [u32; CRED_KEY_WORDS],
    cred: Arc<Cred>,
    /// Hits not yet added to the cache's counter.
    hits: u32,
}

/// Per-thread hits are reported in batches of this many: the figures may lag by that much
/// per thread and identity.
const HIT_BATCH: u32 = 64;

#[derive(Default)]
struct Thread {
    slots: [Option<Recent>; RECENT_CREDS],
    /// The slot the next miss replaces (round robin).
    next: usize,
}

thread_local! {
    static RECENT: RefCell<Thread> = RefCell::new(Thread::default());
}

impl Default for CredCache {
    fn default() -> Self {
        Self::new()
    }
}

impl CredCache {
    #[must_use]
    pub fn new() -> Self {
        Self {
            shared: Memo::new(CRED_CACHE_ENTRIES),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            recent_hits: AtomicU64::new(0),
        }
    }

    /// The credential for `key` (at most [`CRED_KEY_WORDS`] words), `map()` on a miss of
    /// both levels. `map` must give the same credential for the same key.
    pub fn get(&self, key: &[u32], map: impl FnOnce() -> Cred) -> Arc<Cred> {
        debug_assert!(key.len() <= CRED_KEY_WORDS);
        let hit = RECENT.try_with(|t| t.borrow_mut().find(self, key));
        if let Ok(Some(cred)) = hit {
            return cred;
        }
        let shared = self.shared.get(key, |_| map());
        // The thread's own copy: its reference count is touched by this thread only.
        let own = Arc::new(Cred::clone(&shared));
        // Fails only while the thread exits; the call is answered all the same.
        let _ = RECENT.try_with(|t| t.borrow_mut().remember(self.id, key, Arc::clone(&own)));
        own
    }

    /// Lookups answered by either level, and lookups that mapped, since the start (hits of
    /// the per-thread level are added in batches of 64).
    #[must_use]
    pub fn hits_and_misses(&self) -> (u64, u64) {
        let (hits, misses) = self.shared.hits_and_misses();
        (hits + self.recent_hits.load(Ordering::Relaxed), misses)
    }

    /// Identities held by the shared level.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.shared.is_empty()
    }
}

impl Thread {
    fn find(&mut self, cache: &CredCache, key: &[u32]) -> Option<Arc<Cred>> {
        let r = self
            .slots
            .iter_mut()
            .flatten()
            .find(|r| r.cache == cache.id && r.key[..r.len] == *key)?;
        // Hits are counted per slot and added to the shared counter in batches, so a hit
        // writes no cache line another core reads.
        r.hits += 1;
        if r.hits == HIT_BATCH {
            cache
                .recent_hits
                .fetch_add(u64::from(HIT_BATCH), Ordering::Relaxed);
            r.hits = 0;
        }
        Some(Arc::clone(&r.cred))
    }

    fn remember(&mut self, cache: u64, key: &[u32], cred: Arc<Cred>) {
        let mut words = [0u32; CRED_KEY_WORDS];
        words[..key.len()].copy_from_slice(key);
        self.slots[self.next] = Some(Recent {
            cache,
            len: key.len(),
            key: words,
            cred,
            hits: 0,
        });
        self.next = (self.next + 1) % RECENT_CREDS;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A stand-in for the squash mapping: uid 0 becomes 65534 on even exports.
    fn map(key: &[u32]) -> Cred {
        let uid = if key[2] == 0 && key[0].is_multiple_of(2) {
            65534
        } else {
            key[2]
        };
        Cred {
            uid,
            gid: key[3],
            groups: key[4..].to_vec(),
        }
    }

    fn key_of((export, uid, gid, groups): &(u32, u32, u32, Vec<u32>)) -> Vec<u32> {
        let mut key = vec![*export, 1, *uid, *gid];
        key.extend_from_slice(groups);
        key
    }

    type Identity = (u32, u32, u32, Vec<u32>);

    fn identities() -> impl Strategy<Value = Vec<Identity>> {
        // More identities than a thread keeps, so both levels and the replacement run.
        let one = (
            0u32..3,
            0u32..4,
            0u32..2,
            proptest::collection::vec(0u32..3, 0..3),
        );
        proptest::collection::vec(one, 1..200)
    }

    proptest! {
        /// Against the reference (the function itself, which a `Mutex<HashMap>` memo would
        /// return): every answer equals it, on several threads at once.
        #[test]
        fn equals_the_mapping_on_every_thread(calls in identities()) {
            let cache = Arc::new(CredCache::new());
            let threads: Vec<_> = (0..3).map(|t| {
                let (cache, calls) = (Arc::clone(&cache), calls.clone());
                std::thread::spawn(move || {
                    for (i, id) in calls.iter().enumerate().skip(t) {
                        let key = key_of(id);
                        let got = cache.get(&key, || map(&key));
                        assert_eq!(*got, map(&key), "call {i} of thread {t}");
                    }
                })
            }).collect();
            for t in threads {
                prop_assert!(t.join().is_ok());
            }
            let distinct: std::collections::HashSet<_> = calls.iter().map(key_of).collect();
            prop_assert_eq!(cache.len(), distinct.len());
        }
    }

    #[test]
    fn a_thread_hit_maps_nothing_and_shares_no_count_with_other_threads() {
        let cache = CredCache::new();
        let key = [0, 1, 1000, 100, 4, 5];
        let first = cache.get(&key, || map(&key));
        let again = cache.get(&key, || unreachable!("a hit maps nothing"));
        assert!(Arc::ptr_eq(&first, &again));
        let other = std::thread::scope(|s| {
            s.spawn(|| cache.get(&key, || unreachable!("the shared level has it")))
                .join()
                .unwrap()
        });
        assert_eq!(*other, *first);
        assert!(
            !Arc::ptr_eq(&other, &first),
            "each thread holds its own copy"
        );
        assert_eq!(
            cache.hits_and_misses(),
            (1, 1),
            "per-thread hits report in batches"
        );
        for _ in 0..HIT_BATCH {
            drop(cache.get(&key, || unreachable!()));
        }
        assert_eq!(cache.hits_and_misses(), (1 + u64::from(HIT_BATCH), 1));
    }

    #[test]
    fn two_caches_never_answer_for_each_other() {
        // Same key words, different mappings (two servers whose exports squash differently).
        let (a, b) = (CredCache::new(), CredCache::new());
        let key = [0, 1, 0, 0];
        let root = |uid| Cred {
            uid,
            gid: 0,
            groups: Vec::new(),
        };
        assert_eq!(a.get(&key, || root(0)).uid, 0);
        assert_eq!(b.get(&key, || root(65534)).uid, 65534);
        assert_eq!(a.get(&key, || unreachable!()).uid, 0);
    }

    #[test]
    fn more_identities_than_slots_fall_through_to_the_shared_level() {
        let cache = CredCache::new();
        let keys: Vec<[u32; 4]> = (0..=RECENT_CREDS as u32).map(|u| [1, 1, u, 0]).collect();
        for key in &keys {
            drop(cache.get(key, || map(key)));
        }
        // The first key's slot was replaced: it comes from the shared level, unmapped.
        let got = cache.get(&keys[0], || unreachable!("the shared level has it"));
        assert_eq!(*got, map(&keys[0]));
        assert_eq!(cache.hits_and_misses().1, keys.len() as u64);
    }
}
