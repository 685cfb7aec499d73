//! Precise mode of the scalable lock: the granted ranges of one file in a sorted,
//! lock-free, singly linked list, after Kogan, Dice and Issa, "Scalable Range Locks for
//! Scalable Address Spaces and Beyond" (EuroSys 2020), the algorithm FreeBSD's
//! `kern_rangelock.c` adopted in 2023. Written here from the paper's description.
//!
//! # The list
//!
//! Nodes are sorted by start. Writers' ranges never overlap a neighbour's; readers'
//! ranges may overlap each other and are ordered by start among themselves. A node's
//! `next` pointer carries the node's two flags in its tag bits: [`DELETED`], which
//! releasing the range sets (logical delete; that is all a release does), and [`WAITED`],
//! which a thread about to sleep until the node is deleted sets (see `park`). Every CAS
//! on a `next` keeps its owner's `WAITED` bit. Every thread that walks the list unlinks the
//! deleted nodes it meets with one CAS on the predecessor's `next` (lazy unlink) and hands
//! them to crossbeam-epoch, which frees them once no thread that could still see them is
//! pinned; an insert that meets a deleted node right where its own node goes replaces it
//! instead, unlinking and linking in one CAS (so an uncontended lock's whole list work is
//! that CAS and the release). A deleted node's `next` never changes again, so every CAS that expects an
//! untagged value there fails, which is what keeps inserts and unlinks from racing.
//!
//! # Taking a range
//!
//! 1. **Insert**: walk from the head, passing nodes that end before the new range starts
//!    (and, for a reader, readers that start no later); a conflicting node on the way
//!    means wait until it is deleted and walk again; otherwise CAS the new node in front
//!    of the first node that comes after it.
//! 2. **Validate**, because other nodes were inserted concurrently: a **reader** checks
//!    the nodes after it that start before its end; an overlapping writer there makes the
//!    reader back off (delete its own node), wait for that writer and start over. A
//!    **writer** checks every node before it; an overlapping one makes it wait, keeping its
//!    place, and check again. Writers wait only for nodes before them and readers never
//!    wait while inserted, so the waits-for relation follows list order and cannot cycle.
//!
//! Waiting is [`Parking`]: under the parking mutex, set `WAITED` on the blocking node;
//! if that shows it deleted already, go on, else sleep unpinned. A release that finds
//! `WAITED` on its node wakes the sleepers.
#![allow(unsafe_code)]

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};

use crate::park::Parking;
use crate::prim::Ordering;

/// Ordering of a successful insert (see [`List::validate`]).
const LINK: Ordering = Ordering::SeqCst;
/// Ordering of the loads of validation (see [`List::validate`]).
const SEEN: Ordering = Ordering::SeqCst;

/// Tag bit on a node's `next`: the node's range was released.
const DELETED: usize = 1;
/// Tag bit on a node's `next`: a thread sleeps (or is about to) until it is deleted.
const WAITED: usize = 2;

#[derive(Debug)]
pub(crate) struct Node {
    start: u64,
    end: u64,
    write: bool,
    next: Atomic<Node>,
}

impl Node {
    fn new(start: u64, end: u64, write: bool) -> Self {
        debug_assert!(start < end, "empty ranges never reach the list");
        Self {
            start,
            end,
            write,
            next: Atomic::null(),
        }
    }
}

/// A range granted in the list; only its holder releases it (through [`List::unlock`]).
#[derive(Debug)]
pub(crate) struct Held(*const Node);

/// Where `cur` stands relative to a range being inserted.
enum Order {
    /// `cur` comes first: walk past it.
    Before,
    /// The new range goes in front of `cur`.
    After,
    /// They overlap and one of them writes.
    Conflict,
}

fn order(cur: &Node, new: &Node) -> Order {
    let readers = !cur.write && !new.write;
    if new.start >= cur.end || (readers && new.start >= cur.start) {
        Order::Before
    } else if cur.start >= new.end || readers {
        Order::After
    } else {
        Order::Conflict
    }
}

/// What to do after waiting.
enum Then {
    /// Insert this node, which never was in the list.
    Insert(Owned<Node>),
    /// Start over with a new node: this reader backed off and its node is deleted
    /// (`waited`: someone waits for that node, wake them).
    Fresh { waited: bool },
    /// This writer stays inserted; validate it again.
    Revalidate(*const Node),
}

enum Step<'g> {
    Granted(Shared<'g, Node>),
    /// Wait until `on` is deleted, then go on as `then` says.
    Wait {
        on: Shared<'g, Node>,
        then: Then,
    },
}

/// Dereferences a node pointer.
fn node<'g>(ptr: Shared<'g, Node>) -> Option<&'g Node> {
    // SAFETY: every pointer given here is either loaded from the list under the guard that
    // `'g` borrows, or the caller's own granted (so undeleted) node. Nodes are handed to
    // `defer_destroy` only after they were deleted and unlinked, and the collector frees
    // them only once every guard pinned before that is gone, so the node is alive for `'g`.
    unsafe { ptr.as_ref() }
}

/// Marks `ptr` as waited for; true if it was deleted already (then do not sleep).
fn wait_on(ptr: Shared<'_, Node>, guard: &Guard) -> bool {
    let Some(n) = node(ptr) else {
        return true;
    };
    n.next.fetch_or(WAITED, Ordering::AcqRel, guard).tag() & DELETED != 0
}

/// Deletes `me`; true if someone waits for it.
fn delete(me: &Node, guard: &Guard) -> bool {
    let before = me.next.fetch_or(DELETED, Ordering::AcqRel, guard);
    debug_assert_eq!(before.tag() & DELETED, 0, "a range is released once");
    before.tag() & WAITED != 0
}

/// Hands `cur`, just unlinked by this thread's CAS on its predecessor, to the collector.
fn retire(cur: Shared<'_, Node>, guard: &Guard) {
    cache::retire(cur.with_tag(0).as_raw().cast_mut(), guard);
}

/// Gives unlinked nodes to crossbeam-epoch, to be recycled once no thread can see them.
///
/// # Safety
///
/// Each node was unlinked by a CAS of this thread that removed the only untagged link to
/// it (a node is linked from one predecessor, and predecessors unlinked earlier were
/// deleted, so their `next` is tagged and no CAS can follow or change it), and is given
/// here once. Threads that loaded it before are pinned, and the deferred function (which
/// takes the nodes back as owned, to reuse them) runs only once every thread pinned now
/// has unpinned, so it is their last user. Handing a node over later than its unlink only
/// waits longer: no new thread can reach it after the unlink.
unsafe fn defer_recycle(nodes: Vec<*mut Node>, guard: &Guard) {
    // SAFETY: see the function's contract.
    unsafe {
        guard.defer_unchecked(move || {
            for node in nodes {
                cache::recycle(Owned::from_raw(node));
            }
        });
    }
}

/// True if `new` goes in front of `next` (or at the end of the list, `next` being null):
/// then a deleted node just before `next` can be replaced by `new` in one CAS.
fn goes_before(next: Shared<'_, Node>, new: &Node) -> bool {
    match node(next.with_tag(0)) {
        None => true,
        Some(n) => matches!(order(n, new), Order::After),
    }
}

/// Nodes waiting for reuse: a bounded per-thread cache in front of the allocator (the
/// role UMA's per-CPU caches play for FreeBSD's lock). Every lock operation needs a node
/// and every unlink retires one; without the cache, the retired nodes reach the allocator
/// in batches as the collector frees them, which cost more than the rest of the lock.
mod cache {
    #[cfg(not(loom))]
    use std::cell::RefCell;

    use crossbeam_epoch::{Guard, Owned};

    use super::{defer_recycle, Node};

    /// Nodes kept per thread: a few dozen bytes each, enough to absorb a collector batch.
    #[cfg(not(loom))]
    const NODES_PER_THREAD: usize = 1024;

    /// Unlinked nodes handed to the collector together, in one deferred function. Every
    /// lock retires a node; one deferral per node made crossbeam seal and queue a bag (2 KiB
    /// moved, one allocation) every 64 locks, a fifth of an uncontended lock+unlock.
    #[cfg(not(loom))]
    const RETIRE_BATCH: usize = 8;

    /// This thread's unlinked nodes not yet handed over; a thread that exits hands over
    /// what is left.
    #[cfg(not(loom))]
    struct Retired(Vec<*mut Node>);

    #[cfg(not(loom))]
    impl Drop for Retired {
        fn drop(&mut self) {
            if self.0.is_empty() {
                return;
            }
            let guard = crossbeam_epoch::pin();
            // SAFETY: the nodes were unlinked by this thread and never handed over.
            unsafe { defer_recycle(std::mem::take(&mut self.0), &guard) };
        }
    }

    #[cfg(not(loom))]
    std::thread_local! {
        static FREE: RefCell<Vec<Owned<Node>>> = const { RefCell::new(Vec::new()) };
        static RETIRED: RefCell<Retired> = const { RefCell::new(Retired(Vec::new())) };
    }

    /// A node for `[start, end)`, reused if this thread has one.
    #[cfg(not(loom))]
    pub(super) fn node(start: u64, end: u64, write: bool) -> Owned<Node> {
        let fresh = Node::new(start, end, write);
        match FREE.try_with(|free| free.borrow_mut().pop()) {
            Ok(Some(mut node)) => {
                *node = fresh;
                node
            }
            _ => Owned::new(fresh),
        }
    }

    /// Keeps a node no thread can reach any more for reuse on this thread.
    #[cfg(not(loom))]
    pub(super) fn recycle(node: Owned<Node>) {
        let mut spare = Some(node);
        let _ = FREE.try_with(|free| {
            let mut free = free.borrow_mut();
            if free.len() < NODES_PER_THREAD {
                free.extend(spare.take());
            }
        });
        drop(spare);
    }

    /// Takes a node this thread just unlinked (see [`defer_recycle`] for what that means),
    /// handing it to the collector with the batch it completes.
    #[cfg(not(loom))]
    pub(super) fn retire(node: *mut Node, guard: &Guard) {
        let mut single = Some(node);
        let _ = RETIRED.try_with(|retired| {
            let mut retired = retired.borrow_mut();
            retired.0.extend(single.take());
            if retired.0.len() >= RETIRE_BATCH {
                let batch = std::mem::replace(&mut retired.0, Vec::with_capacity(RETIRE_BATCH));
                // SAFETY: unlinked by this thread (the caller's promise), handed over once.
                unsafe { defer_recycle(batch, guard) };
            }
        });
        if let Some(node) = single {
            // SAFETY: as above; the batch was unavailable (thread exiting).
            unsafe { defer_recycle(vec![node], guard) };
        }
    }

    // Under loom, plain allocation and one deferral per node: the cache and the batch are
    // thread-local plumbing the model need not explore.
    #[cfg(loom)]
    pub(super) fn node(start: u64, end: u64, write: bool) -> Owned<Node> {
        Owned::new(Node::new(start, end, write))
    }

    #[cfg(loom)]
    pub(super) fn recycle(node: Owned<Node>) {
        drop(node);
    }

    #[cfg(loom)]
    pub(super) fn retire(node: *mut Node, guard: &Guard) {
        // SAFETY: unlinked by this thread (the caller's promise), handed over once.
        unsafe { defer_recycle(vec![node], guard) };
    }
}

/// The granted ranges of one lock.
#[derive(Debug)]
pub(crate) struct List {
    head: Atomic<Node>,
}

impl List {
    pub(crate) fn new() -> Self {
        Self {
            head: Atomic::null(),
        }
    }

    /// Takes `[start, end)`, waiting as long as a conflicting range is held.
    pub(crate) fn lock(&self, start: u64, end: u64, write: bool, parking: &Parking) -> Held {
        let mut then = Then::Fresh { waited: false };
        loop {
            let guard = epoch::pin();
            let step = self.resume(then, start, end, write, &guard);
            match step {
                Step::Granted(me) => return Held(me.as_raw()),
                Step::Wait { on, then: next } => {
                    if let Then::Fresh { waited: true } = next {
                        parking.wake_all();
                    }
                    then = next;
                    let ticket = parking.prepare();
                    if wait_on(on, &guard) {
                        continue;
                    }
                    drop(guard);
                    ticket.sleep();
                }
            }
        }
    }

    /// Takes `[start, end)` only if no conflicting range is in the list.
    pub(crate) fn try_lock(
        &self,
        start: u64,
        end: u64,
        write: bool,
        parking: &Parking,
    ) -> Option<Held> {
        let guard = epoch::pin();
        match self.resume(Then::Fresh { waited: false }, start, end, write, &guard) {
            Step::Granted(me) => Some(Held(me.as_raw())),
            Step::Wait { then, .. } => {
                drop(guard);
                match then {
                    Then::Revalidate(me) => self.unlock(Held(me), parking),
                    Then::Fresh { waited: true } => parking.wake_all(),
                    Then::Fresh { waited: false } | Then::Insert(_) => {}
                }
                None
            }
        }
    }

    fn resume<'g>(
        &'g self,
        then: Then,
        start: u64,
        end: u64,
        write: bool,
        guard: &'g Guard,
    ) -> Step<'g> {
        match then {
            Then::Fresh { .. } => self.insert(cache::node(start, end, write), guard),
            Then::Insert(new) => self.insert(new, guard),
            Then::Revalidate(me) => self.validate_write(Shared::from(me), guard),
        }
    }

    /// Deletes a granted range and wakes waiters.
    pub(crate) fn unlock(&self, held: Held, parking: &Parking) {
        // SAFETY: no pin needed: the node is ours and undeleted, so no thread unlinks or
        // retires it before the `fetch_or` in `delete` lands, and after that we do not
        // touch it again. The unprotected guard only lends the atomics API a lifetime.
        let guard = unsafe { epoch::unprotected() };
        let me = node(Shared::from(held.0)).expect("a held node is never null");
        if delete(me, guard) {
            parking.wake_all();
        }
    }

    /// Unlinks deleted `cur` (loaded from `prev`, tagged with `prev`'s flags) given its
    /// `next`; returns its successor as `prev` now holds it, or `None` if `prev` changed
    /// under us (walk again from the head).
    fn unlink<'g>(
        &self,
        prev: &Atomic<Node>,
        cur: Shared<'g, Node>,
        next: Shared<'g, Node>,
        guard: &'g Guard,
    ) -> Option<Shared<'g, Node>> {
        let next = next.with_tag(cur.tag());
        prev.compare_exchange(cur, next, Ordering::AcqRel, Ordering::Acquire, guard)
            .ok()?;
        retire(cur, guard);
        Some(next)
    }

    fn insert<'g>(&'g self, mut new: Owned<Node>, guard: &'g Guard) -> Step<'g> {
        'walk: loop {
            let mut prev = &self.head;
            let mut cur = prev.load(Ordering::Acquire, guard);
            loop {
                if cur.tag() & DELETED != 0 {
                    // `prev` belongs to a node deleted meanwhile.
                    continue 'walk;
                }
                // Where `new` goes in front of `at`, replacing `cur` if that is not `at`.
                let mut at = cur.with_tag(0);
                if let Some(c) = node(cur) {
                    let next = c.next.load(Ordering::Acquire, guard);
                    if next.tag() & DELETED != 0 {
                        if goes_before(next, &new) {
                            // Take the deleted node's place: one CAS unlinks it and links
                            // `new`, the whole of an uncontended lock's list work.
                            at = next.with_tag(0);
                        } else {
                            match self.unlink(prev, cur, next, guard) {
                                Some(after) => cur = after,
                                None => continue 'walk,
                            }
                            continue;
                        }
                    } else {
                        match order(c, &new) {
                            Order::Before => {
                                prev = &c.next;
                                cur = next;
                                continue;
                            }
                            Order::Conflict => {
                                return Step::Wait {
                                    on: cur,
                                    then: Then::Insert(new),
                                }
                            }
                            Order::After => {}
                        }
                    }
                }
                new.next.store(at, Ordering::Relaxed);
                let linked = new.with_tag(cur.tag());
                match prev.compare_exchange(cur, linked, LINK, Ordering::Acquire, guard) {
                    Ok(me) => {
                        if at != cur.with_tag(0) {
                            retire(cur, guard);
                        }
                        return self.validate(me.with_tag(0), guard);
                    }
                    Err(failed) => {
                        new = failed.new.with_tag(0);
                        cur = failed.current;
                    }
                }
            }
        }
    }

    /// Checks a just-inserted node against the nodes inserted concurrently.
    ///
    /// The insert is a store and validation then loads other links: a reader inserting at
    /// the head while a writer inserts further on is the store-buffering pattern, where each
    /// could miss the other's node. Sequentially consistent inserts ([`LINK`]) and
    /// validation loads ([`SEEN`]) forbid it: of two such inserts, the later one's
    /// validation sees the earlier one. On x86 that costs nothing (a locked CAS is a full
    /// barrier, a SeqCst load a plain load), where a separate SeqCst fence was one more
    /// locked instruction per lock. loom models SeqCst accesses only as acquire/release,
    /// so under loom the fence stays, and the model
    /// `loom_lockfree_validation_catches_concurrent_inserts` (which fails without it) checks
    /// the algorithm with the guarantee the SeqCst accesses give real code.
    fn validate<'g>(&'g self, me: Shared<'g, Node>, guard: &'g Guard) -> Step<'g> {
        #[cfg(loom)]
        crate::prim::fence(Ordering::SeqCst);
        let write = node(me).is_some_and(|n| n.write);
        if write {
            self.validate_write(me, guard)
        } else {
            self.validate_read(me, guard)
        }
    }

    /// A reader just inserted: no overlapping writer may follow it.
    fn validate_read<'g>(&'g self, me: Shared<'g, Node>, guard: &'g Guard) -> Step<'g> {
        let mine = node(me).expect("inserted node");
        'walk: loop {
            let mut prev = &mine.next;
            let mut cur = prev.load(SEEN, guard);
            debug_assert_eq!(cur.tag() & DELETED, 0, "only its holder deletes a node");
            loop {
                let Some(c) = node(cur) else {
                    return Step::Granted(me);
                };
                if c.start >= mine.end {
                    return Step::Granted(me);
                }
                let next = c.next.load(SEEN, guard);
                if next.tag() & DELETED != 0 {
                    match self.unlink(prev, cur, next, guard) {
                        Some(after) => cur = after,
                        None => continue 'walk,
                    }
                    continue;
                }
                if !c.write {
                    prev = &c.next;
                    cur = next;
                    continue;
                }
                // An overlapping writer came in after us: it may already hold its range,
                // so back off (waking a writer that waits for us) and wait for it.
                let waited = delete(mine, guard);
                return Step::Wait {
                    on: cur,
                    then: Then::Fresh { waited },
                };
            }
        }
    }

    /// A writer inserted: no overlapping node may precede it.
    fn validate_write<'g>(&'g self, me: Shared<'g, Node>, guard: &'g Guard) -> Step<'g> {
        let mine = node(me).expect("inserted node");
        'walk: loop {
            let mut prev = &self.head;
            let mut cur = prev.load(SEEN, guard);
            loop {
                if cur.with_tag(0) == me {
                    return Step::Granted(me);
                }
                if cur.tag() & DELETED != 0 {
                    continue 'walk;
                }
                let Some(c) = node(cur) else {
                    // Unreachable while `me` is undeleted; walk again rather than trust it.
                    debug_assert!(false, "an inserted writer is reachable from the head");
                    continue 'walk;
                };
                let next = c.next.load(SEEN, guard);
                if next.tag() & DELETED != 0 {
                    match self.unlink(prev, cur, next, guard) {
                        Some(after) => cur = after,
                        None => continue 'walk,
                    }
                    continue;
                }
                if c.end <= mine.start {
                    prev = &c.next;
                    cur = next;
                    continue;
                }
                return Step::Wait {
                    on: cur,
                    then: Then::Revalidate(me.as_raw()),
                };
            }
        }
    }

    /// Ranges in the list and whether each is deleted, head first (tests and debugging).
    #[cfg(test)]
    pub(crate) fn snapshot(&self) -> Vec<(u64, u64, bool, bool)> {
        let guard = epoch::pin();
        let mut out = Vec::new();
        let mut cur = self.head.load(Ordering::Acquire, &guard);
        while let Some(c) = node(cur.with_tag(0)) {
            let next = c.next.load(Ordering::Acquire, &guard);
            out.push((c.start, c.end, c.write, next.tag() & DELETED != 0));
            cur = next;
        }
        out
    }
}

impl Drop for List {
    fn drop(&mut self) {
        // SAFETY: `&mut self` means no guard and no walker can reach the list any more, so
        // every node still linked (deleted or not) belongs to it alone; nodes unlinked
        // earlier were handed to the collector and are not reachable from here.
        unsafe {
            let guard = epoch::unprotected();
            let mut cur = self.head.load(Ordering::Relaxed, guard);
            while !cur.is_null() {
                let next = cur.deref().next.load(Ordering::Relaxed, guard);
                drop(cur.into_owned());
                cur = next.with_tag(0);
            }
        }
    }
}
