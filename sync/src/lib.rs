//! Synchronization for granary. It owns byte-range locks (seed 003): the lock a backend
//! takes on the bytes a READ, WRITE or truncation touches, so that operations on disjoint
//! ranges of one file run in parallel and operations on overlapping ranges are atomic with
//! respect to each other.
//!
//! [`RangeLock`] is one type whose design is picked at run time by [`RangeLockMode`]:
//!
//! - `lockfree` ([`RangeLockMode::LockFree`]): the scalable lock, granted ranges in a
//!   sorted lock-free list (`list`), logically deleted on release and unlinked lazily,
//!   memory reclaimed with epochs (crossbeam-epoch);
//! - `cheat` ([`RangeLockMode::Cheat`]): the same lock starting in "cheat" mode (`cheat`):
//!   one reader/writer word until the first conflict, then precise ranges for good;
//! - `mutex` ([`RangeLockMode::Mutex`]): the design it replaced, a per-lock mutex around a
//!   FIFO of requests (`fifo`);
//! - `none` ([`RangeLockMode::None`]): no locking at all, the lab's baseline (a backend
//!   using it loses atomicity of overlapping operations).
//!
//! Every mode promises the same thing to a caller: readers of overlapping ranges share,
//! a writer excludes every overlapping range, a waiter sleeps until a conflicting holder
//! leaves and is then woken (no lost wake-ups), and an empty range conflicts with nothing.
//! A thread must not request a range of a lock it already holds a conflicting range of
//! (that would wait for itself), nor take two ranges of one lock at once in cheat mode.
//!
//! [`blocking`] says whether the calling thread may block (false on a network worker's
//! event loop while it runs a request).
//!
//! It also holds [`groups`], the idle/active tree of workers of seed 002's timer
//! hierarchy (used by `granary-runtime`), here so that loom checks it with the locks, and
//! seed 004's caches: [`filecache`], the bounded open-file cache of host exports, and
//! [`memo`], the server-wide memo behind nfsd's credential cache.
//!
//! `unsafe` lives only in `list`, for the pointers of the lock-free list; every other module
//! forbids it.
#![deny(unsafe_code)]

pub mod blocking;
mod cheat;
mod fifo;
pub mod filecache;
pub mod groups;
pub mod limits;
mod list;
pub mod memo;
mod park;
mod prim;

#[cfg(all(test, loom))]
mod loom_tests;

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use crate::cheat::{Cheat, CheatWord};
use crate::fifo::Fifo;
use crate::list::{Held as ListHeld, List};
use crate::park::Parking;

/// Which range-lock design a [`RangeLock`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RangeLockMode {
    /// No lock: every request is granted at once (lab baseline only).
    None,
    /// A mutex-protected FIFO of requests per lock (the old design).
    Mutex,
    /// The scalable lock-free list, precise from the start.
    LockFree,
    /// The scalable lock in cheat mode until its first conflict (the default, as on
    /// FreeBSD: docs/LAB.md has the measurements behind it).
    #[default]
    Cheat,
}

impl RangeLockMode {
    /// Every mode, in the order the lab reports them.
    pub const ALL: [Self; 4] = [Self::None, Self::Mutex, Self::LockFree, Self::Cheat];

    /// The name used on the command line and in configuration files.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Mutex => "mutex",
            Self::LockFree => "lockfree",
            Self::Cheat => "cheat",
        }
    }
}

impl fmt::Display for RangeLockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown range-lock mode name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownMode(pub String);

impl fmt::Display for UnknownMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown range-lock mode {:?}; use \"mutex\", \"lockfree\" or \"cheat\"",
            self.0
        )
    }
}

impl std::error::Error for UnknownMode {}

impl FromStr for RangeLockMode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownMode(s.to_string()))
    }
}

#[derive(Debug)]
enum Kind {
    None,
    Fifo(Fifo),
    /// Lock-free list, with the cheat word in front (cheating only in `Cheat` mode).
    List(List),
}

/// A byte-range reader/writer lock over offsets `0..u64::MAX`.
#[derive(Debug)]
pub struct RangeLock {
    mode: RangeLockMode,
    kind: Kind,
    cheat: CheatWord,
    parking: Parking,
}

/// What a guard holds.
#[derive(Debug)]
enum Held {
    Nothing,
    Fifo(u64),
    CheatRead,
    CheatWrite,
    List(ListHeld),
}

/// A granted range; dropping it releases the range.
#[must_use = "the range is released as soon as the guard is dropped"]
#[derive(Debug)]
pub struct RangeGuard<'a> {
    lock: &'a RangeLock,
    held: Held,
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let held = std::mem::replace(&mut self.held, Held::Nothing);
        self.lock.release(held);
    }
}

impl RangeLock {
    #[must_use]
    pub fn new(mode: RangeLockMode) -> Self {
        let kind = match mode {
            RangeLockMode::None => Kind::None,
            RangeLockMode::Mutex => Kind::Fifo(Fifo::new()),
            RangeLockMode::LockFree | RangeLockMode::Cheat => Kind::List(List::new()),
        };
        Self {
            mode,
            kind,
            cheat: CheatWord::new(mode == RangeLockMode::Cheat),
            parking: Parking::new(),
        }
    }

    #[must_use]
    pub fn mode(&self) -> RangeLockMode {
        self.mode
    }

    /// True while a `cheat` lock has not yet met a conflict.
    #[must_use]
    pub fn is_cheating(&self) -> bool {
        matches!(self.kind, Kind::List(_)) && self.cheat.is_cheating()
    }

    /// Shares `range` with other readers, waiting while a writer holds an overlapping one.
    pub fn read(&self, range: Range<u64>) -> RangeGuard<'_> {
        self.lock(range, false)
    }

    /// Takes `range` alone, waiting while anyone holds an overlapping one.
    pub fn write(&self, range: Range<u64>) -> RangeGuard<'_> {
        self.lock(range, true)
    }

    /// [`RangeLock::read`] without waiting: `None` if a conflicting range is held.
    #[must_use]
    pub fn try_read(&self, range: Range<u64>) -> Option<RangeGuard<'_>> {
        self.try_lock(range, false)
    }

    /// [`RangeLock::write`] without waiting: `None` if an overlapping range is held.
    ///
    /// In cheat mode the lock judges conflicts as if every range covered the whole file,
    /// and a refused try does not switch it to precise mode.
    #[must_use]
    pub fn try_write(&self, range: Range<u64>) -> Option<RangeGuard<'_>> {
        self.try_lock(range, true)
    }

    fn guard(&self, held: Held) -> RangeGuard<'_> {
        RangeGuard { lock: self, held }
    }

    fn lock(&self, range: Range<u64>, write: bool) -> RangeGuard<'_> {
        if range.is_empty() {
            return self.guard(Held::Nothing);
        }
        let held = match &self.kind {
            Kind::None => Held::Nothing,
            Kind::Fifo(fifo) => Held::Fifo(fifo.lock(range.start, range.end, write)),
            Kind::List(list) if self.mode == RangeLockMode::LockFree => {
                Held::List(list.lock(range.start, range.end, write, &self.parking))
            }
            Kind::List(list) => match self.cheat.lock(write, &self.parking) {
                Cheat::Granted if write => Held::CheatWrite,
                Cheat::Granted => Held::CheatRead,
                Cheat::Precise | Cheat::Busy => {
                    Held::List(list.lock(range.start, range.end, write, &self.parking))
                }
            },
        };
        self.guard(held)
    }

    fn try_lock(&self, range: Range<u64>, write: bool) -> Option<RangeGuard<'_>> {
        if range.is_empty() {
            return Some(self.guard(Held::Nothing));
        }
        let held = match &self.kind {
            Kind::None => Held::Nothing,
            Kind::Fifo(fifo) => Held::Fifo(fifo.try_lock(range.start, range.end, write)?),
            Kind::List(list) => match self.cheat.try_lock(write) {
                Cheat::Granted if write => Held::CheatWrite,
                Cheat::Granted => Held::CheatRead,
                Cheat::Busy => return None,
                Cheat::Precise => {
                    Held::List(list.try_lock(range.start, range.end, write, &self.parking)?)
                }
            },
        };
        Some(self.guard(held))
    }

    fn release(&self, held: Held) {
        match (held, &self.kind) {
            (Held::Nothing, _) => {}
            (Held::Fifo(id), Kind::Fifo(fifo)) => fifo.unlock(id),
            (Held::CheatRead, _) => self.cheat.unlock(false, &self.parking),
            (Held::CheatWrite, _) => self.cheat.unlock(true, &self.parking),
            (Held::List(node), Kind::List(list)) => list.unlock(node, &self.parking),
            (held, _) => unreachable!("{held:?} released on a {} lock", self.mode),
        }
    }

    /// The ranges the precise list holds: `(start, end, write, deleted)`, head first.
    #[cfg(test)]
    fn list_snapshot(&self) -> Vec<(u64, u64, bool, bool)> {
        match &self.kind {
            Kind::List(list) => list.snapshot(),
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names_round_trip() {
        for mode in RangeLockMode::ALL {
            assert_eq!(mode.name().parse::<RangeLockMode>(), Ok(mode));
        }
        let err = "fast".parse::<RangeLockMode>().unwrap_err();
        assert!(err.to_string().contains("\"mutex\", \"lockfree\""));
        assert_eq!(RangeLockMode::default(), RangeLockMode::Cheat);
    }

    #[test]
    fn released_ranges_are_unlinked_by_later_walkers() {
        let lock = RangeLock::new(RangeLockMode::LockFree);
        let a = lock.write(0..10);
        let b = lock.read(20..30);
        drop(a);
        assert_eq!(
            lock.list_snapshot(),
            [(0, 10, true, true), (20, 30, false, false)],
            "a release only marks"
        );
        let c = lock.write(5..15);
        assert_eq!(
            lock.list_snapshot(),
            [(5, 15, true, false), (20, 30, false, false)],
            "the next insert unlinked the deleted node it walked past"
        );
        drop((b, c));
    }

    #[test]
    fn empty_ranges_conflict_with_nothing() {
        for mode in RangeLockMode::ALL {
            let lock = RangeLock::new(mode);
            let _all = lock.write(0..u64::MAX);
            assert!(lock.try_write(7..7).is_some(), "{mode}");
            assert!(lock.try_read(0..0).is_some(), "{mode}");
        }
    }

    #[test]
    fn cheat_mode_sees_the_whole_file() {
        let lock = RangeLock::new(RangeLockMode::Cheat);
        assert!(lock.is_cheating());
        let r1 = lock.read(0..10);
        let r2 = lock.read(100..110);
        assert!(
            lock.try_write(50..60).is_none(),
            "cheat mode cannot see ranges"
        );
        assert!(lock.is_cheating(), "a refused try does not switch");
        drop((r1, r2));
        let w = lock.try_write(50..60).expect("free");
        assert!(lock.try_read(0..10).is_none());
        drop(w);
        assert!(lock.is_cheating());
        assert!(lock.list_snapshot().is_empty());
    }
}
