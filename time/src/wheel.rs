//! A hierarchical timing wheel: O(1) insert and cancel, expiry in deadline order.
//!
//! A pure data structure: it never reads a clock. Deadlines and "now" are tick numbers
//! the owner chooses (granary's workers use 1 ms ticks), and [`TimerWheel::advance`] is
//! told how far time has moved. That makes every behaviour testable by hand.
//!
//! Layout: `LEVELS` levels of 64 slots. Level `L` slot `s` holds timers whose deadline
//! agrees with `now` on every bit above `6(L+1)` and has `s` as its level-`L` digit, so
//! level 0 holds the next 64 ticks exactly and each level above covers 64× more. When
//! time reaches a higher-level slot, its timers move down ("cascade") to the level their
//! remaining time selects, and eventually fire from level 0 at their exact tick.
//! Each level keeps a 64-bit occupancy word, so finding the next slot is one
//! `trailing_zeros`. Timers live in a slab and link into their slot's doubly linked list,
//! so cancel is O(1) given the [`TimerKey`]; keys carry a generation so a stale key never
//! cancels a newer timer.

/// Slots per level (a power of two; one occupancy bit each).
const SLOTS: usize = 64;
const SLOT_BITS: u32 = 6;
/// Levels: with 1 ms ticks, 64^6 ticks ≈ 2.2 years of horizon. Later deadlines are
/// clamped into the top level and cascade as time approaches.
pub const LEVELS: usize = 6;
const NIL: u32 = u32::MAX;

const _: () = assert!(SLOTS == 1 << SLOT_BITS);
const _: () = assert!((LEVELS as u32) * SLOT_BITS < 64);

/// Names one inserted timer, for [`TimerWheel::cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerKey {
    index: u32,
    generation: u32,
}

struct Entry<T> {
    deadline: u64,
    value: Option<T>,
    prev: u32,
    next: u32,
    level: u8,
    slot: u8,
    generation: u32,
}

struct Level {
    occupied: u64,
    heads: [u32; SLOTS],
}

/// The wheel. `T` is what a timer carries (a callback, an id).
pub struct TimerWheel<T> {
    now: u64,
    levels: [Level; LEVELS],
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> std::fmt::Debug for TimerWheel<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerWheel")
            .field("now", &self.now)
            .field("len", &self.len)
            .finish()
    }
}

impl<T> Default for TimerWheel<T> {
    fn default() -> Self {
        Self::new(0)
    }
}

impl<T> TimerWheel<T> {
    /// An empty wheel whose current tick is `now`.
    #[must_use]
    pub fn new(now: u64) -> Self {
        Self {
            now,
            levels: std::array::from_fn(|_| Level {
                occupied: 0,
                heads: [NIL; SLOTS],
            }),
            entries: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    /// The tick the wheel has advanced to.
    #[must_use]
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Timers pending.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a timer firing at `deadline` (a past deadline fires at the next advance).
    pub fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let deadline = deadline.max(self.now);
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = u32::try_from(self.entries.len()).expect("fewer than 2^32 timers");
                self.entries.push(Entry {
                    deadline: 0,
                    value: None,
                    prev: NIL,
                    next: NIL,
                    level: 0,
                    slot: 0,
                    generation: 0,
                });
                i
            }
        };
        let entry = &mut self.entries[index as usize];
        entry.deadline = deadline;
        entry.value = Some(value);
        let generation = entry.generation;
        self.link(index);
        self.len += 1;
        TimerKey { index, generation }
    }

    /// Removes a pending timer and returns its value; `None` if it already fired or was
    /// cancelled.
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        let entry = self.entries.get(key.index as usize)?;
        if entry.generation != key.generation || entry.value.is_none() {
            return None;
        }
        self.unlink(key.index);
        Some(self.release(key.index))
    }

    /// The deadline of the earliest pending timer; exact within the horizon
    /// (64^`LEVELS` ticks). For timers clamped from beyond it, an earlier tick at which
    /// [`TimerWheel::advance`] must run to cascade them (so a sleeper never oversleeps).
    #[must_use]
    pub fn next_deadline(&self) -> Option<u64> {
        let (level, slot, start) = self.next_slot()?;
        let mut min = if level == LEVELS - 1 { start } else { u64::MAX };
        let mut i = self.levels[level].heads[slot];
        while i != NIL {
            let e = &self.entries[i as usize];
            min = min.min(e.deadline);
            i = e.next;
        }
        Some(min)
    }

    /// Moves time to `now` and hands every timer whose deadline is at or before it to
    /// `fire`, in deadline order. Time never moves back: an earlier `now` is ignored.
    pub fn advance(&mut self, now: u64, mut fire: impl FnMut(TimerKey, T)) {
        while let Some((level, slot, start)) = self.next_slot() {
            if start > now {
                break;
            }
            self.now = self.now.max(start);
            let mut i = std::mem::replace(&mut self.levels[level].heads[slot], NIL);
            self.levels[level].occupied &= !(1u64 << slot);
            while i != NIL {
                let next = self.entries[i as usize].next;
                if self.entries[i as usize].deadline <= self.now {
                    let key = TimerKey {
                        index: i,
                        generation: self.entries[i as usize].generation,
                    };
                    let value = self.release(i);
                    fire(key, value);
                } else {
                    self.link(i);
                }
                i = next;
            }
        }
        self.now = self.now.max(now);
    }

    /// The first occupied slot, its level, and the tick at which it must be processed.
    /// Lower levels always hold earlier timers than higher ones.
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        for (level, lvl) in self.levels.iter().enumerate() {
            if lvl.occupied == 0 {
                continue;
            }
            let shift = level as u32 * SLOT_BITS;
            let pos = ((self.now >> shift) & (SLOTS as u64 - 1)) as u32;
            let slot = (pos + lvl.occupied.rotate_right(pos).trailing_zeros()) as usize % SLOTS;
            let level_range = 1u64 << (shift + SLOT_BITS);
            let base = self.now & !(level_range - 1);
            let mut start = base + ((slot as u64) << shift);
            if start < self.now || (level == LEVELS - 1 && slot as u32 == pos) {
                // Only top-level timers clamped from beyond the horizon sit in a slot of
                // a later round; process that slot when the later round begins (they
                // cascade or go round again, and time always moves forward).
                start = start.saturating_add(level_range);
            }
            return Some((level, slot, start.max(self.now)));
        }
        None
    }

    fn level_for(&self, deadline: u64) -> usize {
        let differing = (deadline ^ self.now) | (SLOTS as u64 - 1);
        let top_bit = 63 - differing.leading_zeros();
        ((top_bit / SLOT_BITS) as usize).min(LEVELS - 1)
    }

    fn link(&mut self, index: u32) {
        let deadline = self.entries[index as usize].deadline;
        let level = self.level_for(deadline);
        let shift = level as u32 * SLOT_BITS;
        let slot = ((deadline >> shift) & (SLOTS as u64 - 1)) as usize;
        let head = self.levels[level].heads[slot];
        {
            let e = &mut self.entries[index as usize];
            e.level = level as u8;
            e.slot = slot as u8;
            e.prev = NIL;
            e.next = head;
        }
        if head != NIL {
            self.entries[head as usize].prev = index;
        }
        self.levels[level].heads[slot] = index;
        self.levels[level].occupied |= 1u64 << slot;
    }

    fn unlink(&mut self, index: u32) {
        let (prev, next, level, slot) = {
            let e = &self.entries[index as usize];
            (e.prev, e.next, e.level as usize, e.slot as usize)
        };
        if prev == NIL {
            self.levels[level].heads[slot] = next;
            if next == NIL {
                self.levels[level].occupied &= !(1u64 << slot);
            }
        } else {
            self.entries[prev as usize].next = next;
        }
        if next != NIL {
            self.entries[next as usize].prev = prev;
        }
    }

    /// Frees a slab entry (already unlinked) and returns its value.
    fn release(&mut self, index: u32) -> T {
        let e = &mut self.entries[index as usize];
        e.generation = e.generation.wrapping_add(1);
        e.prev = NIL;
        e.next = NIL;
        let value = e.value.take().expect("released timer holds a value");
        self.free.push(index);
        self.len -= 1;
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn fires_at_exact_ticks_in_order() {
        let mut w = TimerWheel::new(0);
        for d in [5u64, 1, 64, 63, 4096, 4095, 100_000, 0] {
            w.insert(d, d);
        }
        let mut fired = Vec::new();
        for tick in 0..=100_000 {
            w.advance(tick, |_, v| fired.push((v, tick)));
        }
        assert!(
            fired.iter().all(|(deadline, tick)| deadline == tick),
            "{fired:?}"
        );
        let got: Vec<u64> = fired.iter().map(|(v, _)| *v).collect();
        assert_eq!(got, vec![0, 1, 5, 63, 64, 4095, 4096, 100_000]);
        assert!(w.is_empty());
    }

    #[test]
    fn never_fires_early() {
        let mut w = TimerWheel::new(10);
        w.insert(5000, ());
        let mut n = 0;
        w.advance(4999, |_, ()| n += 1);
        assert_eq!(n, 0);
        assert_eq!(w.next_deadline(), Some(5000));
        w.advance(5000, |_, ()| n += 1);
        assert_eq!(n, 1);
    }

    #[test]
    fn cancel_is_exact_and_stale_keys_do_nothing() {
        let mut w = TimerWheel::new(0);
        let a = w.insert(10, "a");
        let b = w.insert(10, "b");
        assert_eq!(w.cancel(a), Some("a"));
        assert_eq!(w.cancel(a), None);
        let c = w.insert(20, "c"); // reuses a's slot with a new generation
        assert_eq!(w.cancel(a), None);
        let mut fired = Vec::new();
        w.advance(30, |_, v| fired.push(v));
        assert_eq!(fired, vec!["b", "c"]);
        assert_eq!(w.cancel(b), None);
        assert_eq!(w.cancel(c), None);
    }

    #[test]
    fn deadlines_beyond_the_horizon_still_fire_on_time() {
        let horizon = 1u64 << (LEVELS as u32 * SLOT_BITS);
        let mut w = TimerWheel::new(0);
        w.insert(horizon * 3 + 7, ());
        let mut fired_at = None;
        let mut wakeups = 0;
        while fired_at.is_none() {
            let t = w.next_deadline().unwrap();
            assert!(t <= horizon * 3 + 7, "oversleeps to {t}");
            w.advance(t, |_, ()| fired_at = Some(t));
            wakeups += 1;
            assert!(wakeups < 1000, "no progress");
        }
        assert_eq!(fired_at, Some(horizon * 3 + 7));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        Cancel(usize),
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..300_000).prop_map(Op::Insert),
            (0usize..64).prop_map(Op::Cancel),
            prop_oneof![0u64..70, 0u64..5000, 0u64..300_000].prop_map(Op::Advance),
        ]
    }

    proptest! {
        /// The wheel against a sorted map: same timers fire, at the same ticks, in order;
        /// none early, none twice, cancelled ones never.
        #[test]
        fn matches_a_sorted_reference(ops in prop::collection::vec(op(), 1..200)) {
            let mut w = TimerWheel::new(0);
            let mut model: BTreeMap<(u64, u64), ()> = BTreeMap::new();
            let mut keys: Vec<(TimerKey, u64, u64)> = Vec::new();
            let mut now = 0u64;
            for (id, op) in ops.into_iter().enumerate() {
                let id = id as u64;
                match op {
                    Op::Insert(delta) => {
                        let d = now + delta;
                        keys.push((w.insert(d, (d, id)), d, id));
                        model.insert((d, id), ());
                    }
                    Op::Cancel(i) if !keys.is_empty() => {
                        let (k, d, id) = keys[i % keys.len()];
                        let got = w.cancel(k).is_some();
                        prop_assert_eq!(got, model.remove(&(d, id)).is_some());
                    }
                    Op::Cancel(_) => {}
                    Op::Advance(by) => {
                        now += by;
                        let mut fired = Vec::new();
                        w.advance(now, |_, v| fired.push(v));
                        let due: Vec<(u64, u64)> =
                            model.range(..(now + 1, 0)).map(|(k, ())| *k).collect();
                        for k in &due {
                            model.remove(k);
                        }
                        let mut fired_sorted = fired.clone();
                        fired_sorted.sort_unstable();
                        prop_assert_eq!(&fired_sorted, &due);
                        let deadlines: Vec<u64> = fired.iter().map(|f| f.0).collect();
                        prop_assert!(deadlines.windows(2).all(|p| p[0] <= p[1]), "out of order");
                    }
                }
                prop_assert_eq!(w.len(), model.len());
                prop_assert_eq!(w.next_deadline(), model.keys().next().map(|k| k.0.max(now)));
            }
        }
    }
}
