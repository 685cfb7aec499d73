//! One file's locks: who holds each piece of it (the segment map a conflict test walks),
//! each owner's merged ranges (POSIX split and merge), and the queue of waiting requests
//! in arrival order.

use std::collections::VecDeque;
use std::time::Duration;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use crate::segments::Segments;
use crate::{Kind, Range, WaiterId};

/// An owner as the manager numbers it while the owner holds or waits for something.
pub type OwnerId = u64;

/// The holders of one piece of a file, sorted by owner: any number of readers, or one
/// writer. Most pieces have one or two, kept inline (no allocation per piece).
pub type Holders = SmallVec<[(OwnerId, Kind); 2]>;

/// How a waiting request is given its lock once nothing is in its way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The client asks again (NFSv4's polling): the waiter is told once
    /// ([`crate::Wake::granted`] false) and keeps its place until it asks or its deadline
    /// passes.
    Poll { deadline: Duration },
    /// The manager takes the lock for the waiter at once ([`crate::Wake::granted`] true)
    /// and the front end tells the client (NLM's GRANTED callback).
    Grant,
}

#[derive(Debug, Clone)]
pub struct Waiter {
    pub id: WaiterId,
    pub owner: OwnerId,
    pub kind: Kind,
    pub range: Range,
    pub delivery: Delivery,
    /// A poll-mode waiter was told that its range is free.
    pub notified: bool,
}

impl Waiter {
    pub fn expired(&self, now: Duration) -> bool {
        matches!(self.delivery, Delivery::Poll { deadline } if deadline <= now)
    }
}

/// Whether a lock of `a` and one of `b` on overlapping bytes of two owners conflict.
pub fn incompatible(a: Kind, b: Kind) -> bool {
    a == Kind::Write || b == Kind::Write
}

/// Whether waiter `w`, ahead in the queue, holds back `owner`'s request of `kind` on
/// `range` (unless `owner` is in its way: [`FileLocks::waiting_conflict`]).
pub fn holds_back(w: &Waiter, owner: OwnerId, kind: Kind, range: Range, now: Duration) -> bool {
    w.owner != owner && !w.expired(now) && w.range.overlaps(range) && incompatible(w.kind, kind)
}

#[derive(Debug, Default)]
pub struct FileLocks {
    pub holders: Segments<Holders>,
    /// (segment, holder) entries of `holders`, bounded per file.
    pub entries: usize,
    pub owners: FxHashMap<OwnerId, Segments<Kind>>,
    pub waiters: VecDeque<Waiter>,
}

impl FileLocks {
    pub fn is_empty(&self) -> bool {
        self.owners.is_empty() && self.waiters.is_empty()
    }

    /// Sets `owner`'s lock on `range` to `kind` (`None`: unlocks it); returns the change
    /// in the owner's number of locks (merged ranges) on this file.
    pub fn set(&mut self, owner: OwnerId, range: Range, kind: Option<Kind>) -> isize {
        let mine = self.owners.entry(owner).or_default();
        let before = mine.len();
        mine.update(range, |_| kind);
        let after = mine.len();
        if mine.is_empty() {
            self.owners.remove(&owner);
        }
        // Splits and merges change the entries of the pieces next to `range` too.
        let around = Range::new(
            range.start().saturating_sub(1),
            range.end().saturating_add(1),
        )
        .unwrap_or(range);
        let count = |h: &Segments<Holders>| -> usize {
            h.overlapping(around).map(|(_, hs)| hs.len()).sum()
        };
        let old = count(&self.holders);
        self.holders.update(range, |old| {
            let mut hs = old.cloned().unwrap_or_default();
            if let Ok(i) = hs.binary_search_by_key(&owner, |h| h.0) {
                hs.remove(i);
            }
            if let Some(k) = kind {
                let i = hs.partition_point(|h| h.0 < owner);
                hs.insert(i, (owner, k));
            }
            (!hs.is_empty()).then_some(hs)
        });
        self.entries = self.entries + count(&self.holders) - old;
        signed(after) - signed(before)
    }

    /// The first held lock of another owner in the way of `owner` locking `range` as
    /// `kind`: its owner and a byte of it within `range`.
    pub fn held_conflict(
        &self,
        owner: OwnerId,
        kind: Kind,
        range: Range,
    ) -> Option<(OwnerId, u64)> {
        self.holders.overlapping(range).find_map(|(piece, hs)| {
            hs.iter()
                .find(|(o, k)| *o != owner && incompatible(kind, *k))
                .map(|(o, _)| (*o, piece.start().max(range.start())))
        })
    }

    /// `owner`'s lock holding byte `at`.
    pub fn lock_at(&self, owner: OwnerId, at: u64) -> Option<(Range, Kind)> {
        self.owners.get(&owner)?.at(at).map(|(r, k)| (r, *k))
    }

    /// Whether `owner` holds a lock in the way of a request of `kind` on `range`.
    pub fn in_way_of(&self, owner: OwnerId, kind: Kind, range: Range) -> bool {
        self.owners
            .get(&owner)
            .is_some_and(|mine| mine.overlapping(range).any(|(_, k)| incompatible(*k, kind)))
    }

    /// The first live waiter before position `before` that `owner`'s request of `kind` on
    /// `range` must let go first. A request is held back only by waiters it is not itself
    /// in the way of: holding back an owner that a waiter waits for would deadlock both.
    pub fn waiting_conflict(
        &self,
        owner: OwnerId,
        kind: Kind,
        range: Range,
        before: usize,
        now: Duration,
    ) -> Option<&Waiter> {
        self.waiters.iter().take(before).find(|w| {
            holds_back(w, owner, kind, range, now) && !self.in_way_of(owner, w.kind, w.range)
        })
    }

    /// Position of `owner`'s waiting request, if it has one.
    pub fn waiter_pos(&self, owner: OwnerId) -> Option<usize> {
        self.waiters.iter().position(|w| w.owner == owner)
    }

    /// The pieces of `owner`'s locks that overlap `range`.
    pub fn pieces(&self, owner: OwnerId, range: Range) -> Vec<(Range, Kind)> {
        self.owners.get(&owner).map_or_else(Vec::new, |m| {
            m.overlapping(range).map(|(r, k)| (r, *k)).collect()
        })
    }
}

fn signed(n: usize) -> isize {
    isize::try_from(n).unwrap_or(isize::MAX)
}
