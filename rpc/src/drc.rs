//! The duplicate request cache (DRC): a retransmitted non-idempotent call gets the reply
//! of its first execution instead of running again.
//!
//! NFS over TCP still sees retransmissions: a client whose connection breaks resends every
//! call it had in flight on a new connection, and a REMOVE or exclusive CREATE that ran
//! twice would answer NOENT or EXIST to a call that succeeded. The cache remembers each
//! non-idempotent call by (client address and port, xid, program, version, procedure,
//! length and checksum of the first arguments bytes), as Linux nfsd does, with one of two
//! states. The port is part of the key because two connections from one host number their
//! xids independently; a Linux client reconnects from the same source port, so its
//! retransmissions still match.
//!
//! - *in progress*: a retransmission arriving while the original runs is dropped (the
//!   original's reply answers it);
//! - *done*: a retransmission gets the cached reply record, byte for byte.
//!
//! Entries expire after `ttl` (pruned by a periodic global timer, never in a request's
//! path beyond the O(1) eviction of the oldest entry when a shard is full) and the cache
//! holds at most `capacity` entries. Idempotent calls bypass it.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;

/// Shards of the cache, each behind its own mutex, so workers rarely contend.
const SHARDS: usize = 16;

/// Bytes of arguments that go into the checksum (Linux nfsd sums the first 256 too):
/// enough to tell two calls with a reused xid apart, cheap for 1 MiB WRITEs.
pub const CHECKSUM_BYTES: usize = 256;

/// Default entries kept. A client keeps at most a few hundred calls in flight, and a
/// retransmission comes within seconds to minutes; 8192 covers dozens of busy clients.
pub const DEFAULT_CAPACITY: usize = 8192;

/// Default time an entry is kept: Linux clients retransmit after at most 60 s (timeo=600)
/// and reconnect within that; twice that is safe.
pub const DEFAULT_TTL: Duration = Duration::from_secs(120);

const _: () = assert!(DEFAULT_CAPACITY >= SHARDS);

/// Identifies one call of one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallKey {
    pub client: SocketAddr,
    pub xid: u32,
    pub program: u32,
    pub version: u32,
    pub procedure: u32,
    pub args_len: u32,
    pub args_sum: u64,
}

impl CallKey {
    /// Builds the key of a call from its arguments bytes.
    #[must_use]
    pub fn new(client: SocketAddr, xid: u32, prog: (u32, u32, u32), args: &[u8]) -> Self {
        Self {
            client,
            xid,
            program: prog.0,
            version: prog.1,
            procedure: prog.2,
            args_len: u32::try_from(args.len()).unwrap_or(u32::MAX),
            args_sum: checksum(&args[..args.len().min(CHECKSUM_BYTES)]),
        }
    }

    /// The shard: from the xid and the client's port, which differ between the calls of
    /// one client and between its connections. Not a defence against a client choosing
    /// its xids: such a client can crowd one shard and push other clients' entries out of
    /// it early, as any client can by filling the whole cache (the shard hash was unkeyed
    /// before too); the map inside each shard keeps std's keyed hash.
    fn shard(&self) -> usize {
        let mixed = (u64::from(self.xid) | u64::from(self.client.port()) << 32)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (mixed >> 32) as usize % SHARDS
    }
}

/// A checksum of the first arguments bytes that tells two calls with one xid apart (Linux
/// nfsd uses the IP checksum): a multiply-rotate mix a word at a time, a few ns for 256
/// bytes where SipHash took about a hundred. It guards against a client's own xid reuse,
/// not against an adversary, who can only confuse its own calls: the client's address
/// and port are part of the key.
fn checksum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x517C_C1B7_2722_0A95;
    let step = |h: u64, word: u64| (h.rotate_left(5) ^ word).wrapping_mul(K);
    let mut chunks = bytes.chunks_exact(8);
    let mut h = bytes.len() as u64;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        h = step(h, u64::from_le_bytes(word));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        h = step(h, u64::from_le_bytes(word));
    }
    h
}

/// What the cache says about a call about to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// First time: run it, then call [`ReplyCache::complete`].
    New,
    /// Running now: drop this retransmission.
    InProgress,
    /// Ran before: send this reply record again.
    Done(Bytes),
}

#[derive(Debug)]
enum State {
    InProgress,
    Done(Bytes),
}

#[derive(Debug)]
struct Entry {
    state: State,
    inserted_ns: u64,
    seq: u64,
}

#[derive(Debug, Default)]
struct Shard {
    entries: HashMap<CallKey, Entry>,
    /// Insertion order, for eviction and expiry; stale (replaced) items are skipped.
    order: VecDeque<(CallKey, u64)>,
}

/// Counters, for logs and tests.
#[derive(Debug, Default)]
pub struct Stats {
    pub hits: AtomicU64,
    pub dropped_in_progress: AtomicU64,
    pub inserted: AtomicU64,
    pub evicted: AtomicU64,
    pub expired: AtomicU64,
}

/// The duplicate request cache.
#[derive(Debug)]
pub struct ReplyCache {
    shards: Vec<Mutex<Shard>>,
    per_shard: usize,
    ttl_ns: u64,
    seq: AtomicU64,
    pub stats: Stats,
}

impl ReplyCache {
    /// A cache of at most `capacity` entries kept for `ttl`.
    #[must_use]
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard,
            ttl_ns: u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX),
            seq: AtomicU64::new(0),
            stats: Stats::default(),
        }
    }

    fn shard(&self, key: &CallKey) -> std::sync::MutexGuard<'_, Shard> {
        self.shards[key.shard()]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Looks a call up at monotonic time `now_ns`, inserting it as in progress if new.
    pub fn begin(&self, key: CallKey, now_ns: u64) -> Lookup {
        let mut shard = self.shard(&key);
        if let Some(entry) = shard.entries.get(&key) {
            if now_ns.saturating_sub(entry.inserted_ns) < self.ttl_ns {
                return match &entry.state {
                    State::InProgress => {
                        self.stats
                            .dropped_in_progress
                            .fetch_add(1, Ordering::Relaxed);
                        Lookup::InProgress
                    }
                    State::Done(reply) => {
                        self.stats.hits.fetch_add(1, Ordering::Relaxed);
                        Lookup::Done(reply.clone())
                    }
                };
            }
        }
        while shard.entries.len() >= self.per_shard {
            if !self.evict_oldest(&mut shard) {
                break;
            }
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        shard.entries.insert(
            key,
            Entry {
                state: State::InProgress,
                inserted_ns: now_ns,
                seq,
            },
        );
        shard.order.push_back((key, seq));
        self.stats.inserted.fetch_add(1, Ordering::Relaxed);
        Lookup::New
    }

    /// Stores the reply of a call begun with [`ReplyCache::begin`].
    pub fn complete(&self, key: &CallKey, reply: Bytes) {
        if let Some(entry) = self.shard(key).entries.get_mut(key) {
            entry.state = State::Done(reply);
        }
    }

    /// Forgets a call that produced no reply (so a retransmission runs it).
    pub fn abandon(&self, key: &CallKey) {
        self.shard(key).entries.remove(key);
    }

    fn evict_oldest(&self, shard: &mut Shard) -> bool {
        while let Some((key, seq)) = shard.order.pop_front() {
            if shard.entries.get(&key).is_some_and(|e| e.seq == seq) {
                shard.entries.remove(&key);
                self.stats.evicted.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// Drops entries older than the ttl. Run from a periodic global timer.
    pub fn prune(&self, now_ns: u64) -> usize {
        let mut removed = 0;
        for shard in &self.shards {
            let mut shard = shard
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            while let Some(&(key, seq)) = shard.order.front() {
                let live = shard.entries.get(&key).filter(|e| e.seq == seq);
                match live {
                    Some(e) if now_ns.saturating_sub(e.inserted_ns) < self.ttl_ns => break,
                    Some(_) => {
                        shard.entries.remove(&key);
                        removed += 1;
                    }
                    None => {}
                }
                shard.order.pop_front();
            }
        }
        self.stats
            .expired
            .fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }

    /// Entries currently held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .entries
                    .len()
            })
            .sum()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(xid: u32, args: &[u8]) -> CallKey {
        CallKey::new("10.0.0.1:700".parse().unwrap(), xid, (100_003, 3, 12), args)
    }

    #[test]
    fn retransmission_gets_the_first_reply() {
        let c = ReplyCache::new(64, Duration::from_secs(10));
        let k = key(1, b"remove a");
        assert_eq!(c.begin(k, 0), Lookup::New);
        assert_eq!(c.begin(k, 1), Lookup::InProgress);
        c.complete(&k, Bytes::from_static(b"reply"));
        assert_eq!(c.begin(k, 2), Lookup::Done(Bytes::from_static(b"reply")));
        // Same xid, other arguments: a different call.
        assert_eq!(c.begin(key(1, b"remove b"), 3), Lookup::New);
    }

    #[test]
    fn entries_expire_and_are_pruned() {
        let c = ReplyCache::new(64, Duration::from_nanos(100));
        let k = key(2, b"x");
        assert_eq!(c.begin(k, 0), Lookup::New);
        c.complete(&k, Bytes::from_static(b"r"));
        assert_eq!(c.prune(50), 0);
        assert_eq!(c.prune(100), 1);
        assert!(c.is_empty());
        assert_eq!(c.begin(k, 101), Lookup::New);
    }

    #[test]
    fn capacity_is_a_hard_bound() {
        let c = ReplyCache::new(SHARDS * 2, Duration::from_secs(10));
        for xid in 0..1000 {
            let k = key(xid, b"y");
            assert_eq!(c.begin(k, u64::from(xid)), Lookup::New);
            c.complete(&k, Bytes::new());
        }
        assert!(c.len() <= SHARDS * 2, "{} entries", c.len());
        assert!(c.stats.evicted.load(Ordering::Relaxed) >= 1000 - (SHARDS as u64) * 2);
    }

    #[test]
    fn the_checksum_sees_every_byte_of_the_first_256() {
        let base: Vec<u8> = (0..300u16).map(|i| (i % 251) as u8).collect();
        let sum = |b: &[u8]| key(9, b).args_sum;
        for at in 0..CHECKSUM_BYTES {
            let mut other = base.clone();
            other[at] ^= 1;
            assert_ne!(sum(&base), sum(&other), "a change at byte {at} went unseen");
        }
        // Bytes past the first 256 are not summed, but the length is in the key.
        let mut tail = base.clone();
        tail[299] ^= 1;
        assert_eq!(sum(&base), sum(&tail));
        assert_ne!(key(9, &base[..299]), key(9, &base));
        // A shorter argument that is a prefix padded with zeros differs by its length.
        assert_ne!(sum(b"ab"), sum(b"ab\0"));
    }

    #[test]
    fn abandoned_calls_run_again() {
        let c = ReplyCache::new(64, Duration::from_secs(10));
        let k = key(3, b"z");
        assert_eq!(c.begin(k, 0), Lookup::New);
        c.abandon(&k);
        assert_eq!(c.begin(k, 1), Lookup::New);
    }
}
