//! The idle/active state of workers, as a tree of groups (seed 002's timer migration
//! hierarchy), separate from the timers so it can be model-checked with loom.
//!
//! Each group has at most [`GROUP_FANOUT`] members (workers at level 0, groups above) and
//! one `AtomicU64` of state `{active mask: 8 bits, migrator: 8 bits, sequence: 48 bits}`,
//! changed only by compare-and-swap. The sequence makes every update distinct, so a CAS
//! computed from a stale snapshot fails and is recomputed instead of overwriting a newer
//! state. Invariant (checked under loom): a group's migrator is one of its active members,
//! or none exactly when no member is active; a group is an active member of its parent
//! exactly when one of its own members is active.

use std::ops::Range;

use crate::prim::{AtomicU64, Ordering};

/// Members per group, as in the kernel's timer migration hierarchy (one byte of mask).
pub const GROUP_FANOUT: usize = 8;

/// "No migrator" in the state word.
pub const NONE: u64 = 0xff;

const SEQ_MASK: u64 = (1 << 48) - 1;

/// A decoded group state word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupState {
    pub active: u64,
    pub migrator: u64,
    pub seq: u64,
}

impl GroupState {
    #[must_use]
    pub fn decode(v: u64) -> Self {
        Self {
            active: v & 0xff,
            migrator: (v >> 8) & 0xff,
            seq: v >> 16,
        }
    }

    #[must_use]
    pub fn encode(self) -> u64 {
        debug_assert!(self.active <= 0xff && self.migrator <= 0xff);
        self.active | (self.migrator << 8) | ((self.seq & SEQ_MASK) << 16)
    }
}

/// `s` with member `slot` marked active or idle, and the migrator role moved if needed.
fn with_member(mut s: GroupState, slot: u64, active: bool) -> GroupState {
    if active {
        s.active |= 1 << slot;
        if s.migrator == NONE {
            s.migrator = slot;
        }
    } else {
        s.active &= !(1 << slot);
        if s.migrator == slot {
            s.migrator = lowest_bit(s.active);
        }
    }
    s
}

fn lowest_bit(mask: u64) -> u64 {
    if mask == 0 {
        NONE
    } else {
        u64::from(mask.trailing_zeros())
    }
}

struct Group {
    state: AtomicU64,
    /// Parent group and this group's slot in it.
    parent: Option<(usize, usize)>,
    /// Members: worker indices (level 0) or group indices (above).
    members: Vec<usize>,
    /// Every worker below this group.
    workers: Range<usize>,
    level: usize,
}

/// The group tree of one server's workers.
pub struct Groups {
    groups: Vec<Group>,
}

impl Groups {
    /// Groups of at most 8 workers, then groups of groups up to one root; every worker
    /// starts active and slot 0 is every group's migrator. Leaf group `i` holds workers
    /// `8i..8i+8`, so a worker's leaf is `w / 8`.
    ///
    /// # Panics
    /// If `workers` is 0.
    #[must_use]
    pub fn new(workers: usize) -> Self {
        assert!(workers > 0, "at least one worker");
        let mut groups: Vec<Group> = (0..workers.div_ceil(GROUP_FANOUT))
            .map(|i| {
                let members: Vec<usize> =
                    (i * GROUP_FANOUT..((i + 1) * GROUP_FANOUT).min(workers)).collect();
                let range = members[0]..members[members.len() - 1] + 1;
                Group {
                    state: AtomicU64::new(0),
                    parent: None,
                    members,
                    workers: range,
                    level: 0,
                }
            })
            .collect();
        let (mut level_start, mut level) = (0, 0);
        while groups.len() - level_start > 1 {
            let level_end = groups.len();
            for start in (level_start..level_end).step_by(GROUP_FANOUT) {
                let members: Vec<usize> = (start..(start + GROUP_FANOUT).min(level_end)).collect();
                let parent = groups.len();
                for (slot, &child) in members.iter().enumerate() {
                    groups[child].parent = Some((parent, slot));
                }
                let range = groups[members[0]].workers.start
                    ..groups[members[members.len() - 1]].workers.end;
                groups.push(Group {
                    state: AtomicU64::new(0),
                    parent: None,
                    members,
                    workers: range,
                    level: level + 1,
                });
            }
            level_start = level_end;
            level += 1;
        }
        for g in &groups {
            let active = (1u64 << g.members.len()) - 1;
            g.state.store(
                GroupState {
                    active,
                    migrator: 0,
                    seq: 0,
                }
                .encode(),
                Ordering::Release,
            );
        }
        Self { groups }
    }

    /// Number of groups in the tree.
    #[must_use]
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Level of the root (0 when one group holds every worker).
    #[must_use]
    pub fn depth(&self) -> usize {
        self.groups.last().map_or(0, |g| g.level)
    }

    /// The state of group `g` now.
    #[must_use]
    pub fn state(&self, g: usize) -> GroupState {
        GroupState::decode(self.groups[g].state.load(Ordering::Acquire))
    }

    /// True while worker `w` is not idle.
    #[must_use]
    pub fn is_active(&self, w: usize) -> bool {
        self.state(w / GROUP_FANOUT).active & (1 << (w % GROUP_FANOUT)) != 0
    }

    fn update(&self, g: usize, f: impl Fn(GroupState) -> GroupState) -> (GroupState, GroupState) {
        let state = &self.groups[g].state;
        let mut cur = state.load(Ordering::Acquire);
        loop {
            let old = GroupState::decode(cur);
            let mut new = f(old);
            new.seq = old.seq.wrapping_add(1) & SEQ_MASK;
            match state.compare_exchange(cur, new.encode(), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return (old, new),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Worker `w` goes idle: it leaves its group, handing the migrator role to the lowest
    /// active member; a group left with no active member leaves its parent the same way.
    pub fn leave(&self, w: usize) {
        self.set_member(w / GROUP_FANOUT, w % GROUP_FANOUT, false);
    }

    /// Worker `w` becomes active: it rejoins its group (becoming migrator if there was
    /// none), and a group that was idle rejoins its parent. Returns true if `w` became
    /// the migrator of its own group.
    pub fn join(&self, w: usize) -> bool {
        self.set_member(w / GROUP_FANOUT, w % GROUP_FANOUT, true)
    }

    fn set_member(&self, g: usize, slot: usize, active: bool) -> bool {
        let (old, new) = self.update(g, |s| with_member(s, slot as u64, active));
        if (old.active == 0) != (new.active == 0) {
            self.propagate(g);
        }
        active && old.migrator != slot as u64 && new.migrator == slot as u64
    }

    /// Makes each ancestor's bit for `child` match whether `child` has an active member,
    /// reading the child's state inside the CAS, so a leave and a join racing across
    /// levels cannot leave a parent disagreeing with its child: whoever writes the parent
    /// last read the child's latest state (an earlier snapshot makes its CAS fail).
    fn propagate(&self, mut child: usize) {
        while let Some((parent, slot)) = self.groups[child].parent {
            let (old, new) = self.update(parent, |s| {
                with_member(s, slot as u64, self.state(child).active != 0)
            });
            if (old.active == 0) == (new.active == 0) {
                return;
            }
            child = parent;
        }
    }

    /// The worker at the end of the migrator chain from the root, if any is active.
    #[must_use]
    pub fn effective_migrator(&self) -> Option<usize> {
        let mut g = self.groups.len() - 1;
        loop {
            let s = self.state(g);
            if s.migrator == NONE {
                return None;
            }
            let member = *self.groups[g]
                .members
                .get(usize::try_from(s.migrator).ok()?)?;
            if self.groups[g].level == 0 {
                return Some(member);
            }
            g = member;
        }
    }

    /// The workers whose global timers `w` answers for: the subtree of the highest group
    /// on its path of which it is (transitively) the migrator.
    #[must_use]
    pub fn responsibility(&self, w: usize) -> Option<Range<usize>> {
        let (mut g, mut slot) = (w / GROUP_FANOUT, (w % GROUP_FANOUT) as u64);
        let mut covered = None;
        loop {
            if self.state(g).migrator != slot {
                return covered;
            }
            covered = Some(self.groups[g].workers.clone());
            match self.groups[g].parent {
                Some((p, ps)) => (g, slot) = (p, ps as u64),
                None => return covered,
            }
        }
    }

    /// Checks the invariant of every group (for tests and debug assertions).
    ///
    /// # Errors
    /// A description of the first broken group.
    pub fn check(&self) -> Result<(), String> {
        for (i, g) in self.groups.iter().enumerate() {
            let s = self.state(i);
            let ok = if s.active == 0 {
                s.migrator == NONE
            } else {
                s.migrator < 8 && s.active & (1 << s.migrator) != 0
            };
            if !ok {
                return Err(format!("group {i}: {s:?}"));
            }
            if g.level > 0 {
                for (slot, &child) in g.members.iter().enumerate() {
                    let child_active = self.state(child).active != 0;
                    if child_active != (s.active & (1 << slot) != 0) {
                        return Err(format!(
                            "group {i} slot {slot} disagrees with child {child}"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn groups_form_a_tree_of_eights() {
        let g = Groups::new(70);
        assert_eq!(g.len(), 9 + 2 + 1);
        assert_eq!(g.depth(), 2);
        assert_eq!(Groups::new(2).len(), 1);
        g.check().unwrap();
    }

    #[test]
    fn migrator_moves_and_groups_propagate() {
        let g = Groups::new(16);
        for w in 0..8 {
            g.leave(w);
        }
        g.check().unwrap();
        assert_eq!(g.state(2).active, 0b10, "leaf 0 left the root");
        assert_eq!(g.effective_migrator(), Some(8));
        assert_eq!(g.responsibility(8), Some(0..16));
        assert!(g.join(3));
        g.check().unwrap();
        assert_eq!(g.responsibility(3), Some(0..8));
    }

    #[test]
    fn concurrent_leave_and_join_keep_the_invariant() {
        let g = Groups::new(20);
        std::thread::scope(|s| {
            for w in 0..20 {
                let g = &g;
                s.spawn(move || {
                    for i in 0..2000 {
                        if (i + w) % 2 == 0 {
                            g.leave(w);
                        } else {
                            g.join(w);
                        }
                    }
                    g.join(w);
                });
            }
        });
        g.check().unwrap();
        assert_eq!(g.effective_migrator().map(|m| m < 20), Some(true));
    }
}

/// Model checks of the activation/idle races:
/// `RUSTFLAGS="--cfg loom --cfg crossbeam_loom" cargo test --release -p granary-sync --lib --target-dir target/loom-sync groups::loom_models`
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use ::loom::sync::Arc;

    /// Two workers of one group leave and rejoin concurrently; whatever the interleaving,
    /// the migrator is an active member (or none when both are idle).
    #[test]
    fn leave_and_join_race_in_one_group() {
        ::loom::model(|| {
            let g = Arc::new(Groups::new(2));
            let a = {
                let g = Arc::clone(&g);
                ::loom::thread::spawn(move || {
                    g.leave(0);
                    g.join(0);
                })
            };
            g.leave(1);
            a.join().unwrap();
            g.check().unwrap();
            assert_eq!(g.effective_migrator(), Some(0));
        });
    }

    /// Nine workers (two groups under a root) with 1..8 idle: worker 0, the last active
    /// one of the first group, leaves on another thread while `here` runs on this one.
    /// Returns the tree once both are done, checked.
    fn worker_0_leaves_while(here: impl FnOnce(&Groups)) -> Arc<Groups> {
        let g = Arc::new(Groups::new(9));
        for w in 1..8 {
            g.leave(w);
        }
        let a = {
            let g = Arc::clone(&g);
            ::loom::thread::spawn(move || g.leave(0))
        };
        here(&g);
        a.join().unwrap();
        g.check().unwrap();
        g
    }

    /// A group's last worker leaves while another member rejoins: the parent must end
    /// up agreeing with the group (the cross-level race).
    #[test]
    fn leave_and_join_race_across_levels() {
        ::loom::model(|| {
            let g = worker_0_leaves_while(|g| {
                g.join(1);
            });
            assert!(g.state(2).active & 1 != 0, "root lost the active group");
        });
    }

    /// The last two workers of two groups go idle at once: the root ends with no
    /// migrator, and nobody is left believing it is responsible.
    #[test]
    fn last_workers_of_two_groups_go_idle_together() {
        ::loom::model(|| {
            let g = worker_0_leaves_while(|g| {
                g.leave(8);
            });
            assert_eq!(g.effective_migrator(), None);
        });
    }
}
