//! Deadlock detection: whether a blocking request would close a cycle of owners, each
//! waiting for the next (Linux's local POSIX locks answer `EDEADLK` for the same, and
//! NLM and NFSv4 have `NLM4_DEADLCK` and `NFS4ERR_DEADLOCK` for it).
//!
//! The wait-for graph has an edge from a waiting owner to every owner it waits for on
//! the file it waits on: each holder of a lock in the way of its request, and each
//! earlier waiter the queue makes it let go first ([`FileLocks::waiting_conflict`]).
//! Owners of every protocol are nodes of the one graph, so a cycle through an NLM owner
//! and an NFSv4 owner is found like any other. Edges are derived from the files' maps
//! and queues when a search runs, never stored.
//!
//! The search is bounded by [`crate::limits::MAX_DEADLOCK_SEARCH_STEPS`] (pieces of
//! segment maps and queue entries looked at): past it, no cycle is reported and the
//! request waits as it did before the search existed (Linux, too, gives up after
//! `MAX_DEADLK_ITERATIONS` owners).

use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::file::{holds_back, incompatible, Delivery, FileLocks, OwnerId, Waiter};
use crate::{Books, FileKey, Kind, Range, WaiterId};

/// What one search may still look at.
struct Budget(usize);

impl Budget {
    /// Takes one step; false once the budget is spent.
    fn step(&mut self) -> bool {
        self.0 = self.0.saturating_sub(1);
        self.0 > 0
    }
}

/// Pushes onto `out` the owners `owner`'s request of `kind` on `range` waits for on `f`:
/// holders of conflicting locks, then the waiters before position `before` the queue
/// makes it let go first (as [`FileLocks::waiting_conflict`] decides, with the asking
/// owner's waiter on `f` taken as its new request). False when the budget ran out.
fn blockers(
    f: &FileLocks,
    asking: &Asking<'_>,
    w: &Waiter,
    before: usize,
    now: Duration,
    budget: &mut Budget,
    out: &mut Vec<OwnerId>,
) -> bool {
    for (_, hs) in f.holders.overlapping(w.range) {
        if !budget.step() {
            return false;
        }
        out.extend(
            hs.iter()
                .filter(|(o, k)| *o != w.owner && incompatible(w.kind, *k))
                .map(|(o, _)| *o),
        );
    }
    let here = std::ptr::eq(f, asking.file);
    for ahead in f.waiters.iter().take(before) {
        if !budget.step() {
            return false;
        }
        let (kind, range) = if here && ahead.owner == asking.me {
            (asking.kind, asking.range)
        } else {
            (ahead.kind, ahead.range)
        };
        let ahead = Waiter {
            kind,
            range,
            ..ahead.clone()
        };
        if holds_back(&ahead, w.owner, w.kind, w.range, now)
            && !f.in_way_of(w.owner, ahead.kind, ahead.range)
        {
            out.push(ahead.owner);
        }
    }
    true
}

/// The request `me` is about to wait with: its file, kind and range, and its place in
/// that file's queue (its own waiter's position when it waits already, else the end).
pub(crate) struct Asking<'a> {
    pub me: OwnerId,
    pub file: &'a FileLocks,
    pub kind: Kind,
    pub range: Range,
    pub before: usize,
}

/// Whether `req` waiting would close a cycle: whether `req.me` is reachable from an
/// owner it would wait for, through the owners those wait for on any file. False when
/// nothing is in the request's way, and when no cycle was found within `steps`.
pub(crate) fn closes_cycle(
    files: &FxHashMap<FileKey, FileLocks>,
    books: &Books,
    req: &Asking<'_>,
    now: Duration,
    steps: usize,
) -> bool {
    let mut budget = Budget(steps.saturating_add(1));
    let mut stack = Vec::new();
    let mine = Waiter {
        id: WaiterId(0),
        owner: req.me,
        kind: req.kind,
        range: req.range,
        delivery: Delivery::Grant,
        notified: false,
    };
    if !blockers(
        req.file,
        req,
        &mine,
        req.before,
        now,
        &mut budget,
        &mut stack,
    ) {
        return false;
    }
    if stack.is_empty() {
        // Nothing in its way: it will not wait.
        return false;
    }
    // The new request also changes which waiters behind it on its file wait for it, so
    // a new cycle may leave through the asking owner's waits on other files.
    if !waits_for(files, books, req, req.me, now, &mut budget, &mut stack) {
        return false;
    }
    let mut seen = FxHashSet::default();
    seen.insert(req.me);
    while let Some(o) = stack.pop() {
        if o == req.me {
            return true;
        }
        if !seen.insert(o) {
            continue;
        }
        if !waits_for(files, books, req, o, now, &mut budget, &mut stack) {
            return stack.contains(&req.me);
        }
    }
    false
}

/// Pushes onto `out` the owners `o` waits for on every file it waits on (but the asking
/// owner's on the asking request's file: that request is new). False when the budget
/// ran out.
fn waits_for(
    files: &FxHashMap<FileKey, FileLocks>,
    books: &Books,
    req: &Asking<'_>,
    o: OwnerId,
    now: Duration,
    budget: &mut Budget,
    out: &mut Vec<OwnerId>,
) -> bool {
    let Some(entry) = books.owners.get(&o) else {
        return true;
    };
    for key in &entry.waiting {
        let Some(f) = files.get(key) else { continue };
        if o == req.me && std::ptr::eq(f, req.file) {
            continue;
        }
        let Some(pos) = f.waiter_pos(o) else { continue };
        let w = &f.waiters[pos];
        if w.expired(now) {
            continue;
        }
        if !blockers(f, req, w, pos, now, budget, out) {
            return false;
        }
    }
    true
}
