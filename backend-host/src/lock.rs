//! granary's own locks around host syscalls, so that the attributes a reply carries
//! bracket exactly one change (RFC 1813 weak cache consistency) and a permission check and
//! the change it allows are not separated by another granary request.
//!
//! Two tables of sharded mutexes, keyed by inode number: `dirs` serialises entry changes
//! of one directory (create, remove, rename, link), `files` serialises attribute and data
//! changes of one file (setattr, write, commit, the truncation of an UNCHECKED CREATE).
//! Lock order, which rules out deadlock: directory locks before file locks; at most two
//! directory locks, taken in shard order; at most one file lock. A worker that finds a
//! lock taken spins, then yields, before it sleeps (`limits::SPIN_ROUNDS`): the holder is
//! another worker a few system calls from unlocking, and waking a sleeper costs it more.
//!
//! What they cannot do: a local process outside granary changing the same files is not
//! stopped, and may interleave between the attributes before and after (as with Linux
//! nfsd, whose pre/post attributes are taken under the inode lock that local processes
//! also take, granary cannot take the kernel's inode lock). A client then sees attributes
//! that do not match its cache and revalidates.

use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use crate::limits::{LOCK_SHARDS, SPINS_PER_ROUND, SPIN_ROUNDS, YIELD_ROUNDS};

/// One table of sharded mutexes.
#[derive(Debug)]
pub(crate) struct Locks {
    shards: Box<[Mutex<()>]>,
}

pub(crate) type Guard<'a> = MutexGuard<'a, ()>;

impl Locks {
    pub(crate) fn new() -> Self {
        Self {
            shards: (0..LOCK_SHARDS).map(|_| Mutex::new(())).collect(),
        }
    }

    fn shard(ino: u64) -> usize {
        // Fibonacci hashing: neighbouring inode numbers land on different shards.
        (ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % LOCK_SHARDS
    }

    fn take(&self, shard: usize) -> Guard<'_> {
        let lock = &self.shards[shard];
        for round in 0..SPIN_ROUNDS + YIELD_ROUNDS {
            match lock.try_lock() {
                Ok(g) => return g,
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) if round < SPIN_ROUNDS => {
                    for _ in 0..SPINS_PER_ROUND {
                        std::hint::spin_loop();
                    }
                }
                Err(TryLockError::WouldBlock) => std::thread::yield_now(),
            }
        }
        lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lock of `ino`.
    pub(crate) fn one(&self, ino: u64) -> Guard<'_> {
        self.take(Self::shard(ino))
    }

    /// The locks of `a` and `b` (one lock when they share a shard), in shard order.
    pub(crate) fn two(&self, a: u64, b: u64) -> (Guard<'_>, Option<Guard<'_>>) {
        let (x, y) = (Self::shard(a), Self::shard(b));
        if x == y {
            return (self.take(x), None);
        }
        let first = self.take(x.min(y));
        let second = self.take(x.max(y));
        (first, Some(second))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_locks_of_one_shard_are_one_lock() {
        let locks = Locks::new();
        let (_a, b) = locks.two(7, 7);
        assert!(b.is_none());
        drop(_a);
        let (_a, b) = locks.two(1, 2);
        assert!(b.is_some() || Locks::shard(1) == Locks::shard(2));
    }

    /// Spinning, yielding and sleeping waiters all exclude each other: a counter bumped by
    /// a separate read and write under the lock (sometimes with a sleep between them)
    /// loses no increment.
    #[test]
    fn waiters_exclude_each_other() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let locks = Locks::new();
        let counter = AtomicU64::new(0);
        let (threads, rounds) = (4, 2_000);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for i in 0..rounds {
                        let _g = locks.one(42);
                        let v = counter.load(Ordering::Relaxed);
                        if i % 64 == 0 {
                            // Sometimes held long enough that waiters yield and sleep.
                            std::thread::sleep(std::time::Duration::from_micros(50));
                        }
                        counter.store(v + 1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(counter.load(Ordering::Relaxed), threads * rounds);
    }
}
