//! Multigrain timestamps (seed 000): file change times from the cheap coarse clock unless
//! someone looked at the old one.
//!
//! NFSv3 clients notice a change by a new ctime (and mtime). A coarse clock (one tick is a
//! few milliseconds) gives two changes within a tick the same stamp, so a client that
//! fetched the attributes in between never sees the second change. A fine-grained clock
//! read on every change fixes that but costs every change. Multigrain does both: a change
//! takes the coarse time, unless the inode's current ctime was *observed* (a getattr or a
//! reply with post-op attributes set its `QUERIED` bit) and the coarse time is not later
//! than it; only then does it read the fine clock.
//!
//! # What it owns and promises
//!
//! - [`Ctime`]: one inode's ctime, its `QUERIED` bit and one owner-defined tag bit, in a
//!   single atomic word: nanoseconds since 1970 in the low 62 bits (through year 2116), the
//!   tag in bit 62, `QUERIED` in bit 63. Observing sets `QUERIED`; stamping clears it.
//! - [`MultigrainClock`]: stamps ctimes in one of three [`TimestampMode`]s, fixed at
//!   construction, over an injected [`Clock`] (coarse and fine reads).
//!
//! In `multigrain` mode, for every inode and every interleaving of changes and observations:
//! 1. its ctime never goes backwards;
//! 2. a change that starts after a ctime was observed gets a strictly later ctime;
//! 3. if a change of file 1 finishes before a change of file 2 starts, ctime(2) ≥ ctime(1);
//! 4. observing changes nothing but the `QUERIED` bit.
//!
//! # How
//!
//! A global *floor* (one per clock; a server shares one clock among its exports) holds the
//! latest fine-grained stamp handed out. Every change reads the coarse clock and the floor
//! together and uses the later of the two (the floor is kept in wall-clock nanoseconds so
//! this is one clock read plus one load: the seed's "combined" read; the lab's
//! [`FloorRead::Separate`] reads the clock twice, as the first kernel series did). If the
//! ctime was observed and that value is not later than it, the change reads the fine clock
//! (bumped to at least one nanosecond past everything it has seen, so a clock that stands
//! still, like a test's, still yields a later stamp) and publishes it as the new floor with
//! one compare-and-swap. A lost race adopts the winner's floor, which is later than the old
//! floor, instead of retrying. One case needs more: when the winner's value is not later
//! than the coarse time this change started from (the winner read its fine time before the
//! last tick and published after it), adopting it would not move the ctime forward, so the
//! change publishes its own value with `fetch_max` (one more atomic, never a loop in this
//! code). Loading the inode's word before reading the clock is what makes the floor cover
//! every earlier stamp, which gives properties 1 to 3.
//!
//! The inode's word is then replaced with a CAS. If that fails because an observer set
//! `QUERIED` meanwhile and saw a time not before this change's, the change computes again
//! (the fine path; only a stamp clears the bit, so this happens once per stamp). If it
//! fails because a concurrent change stamped the inode with a later or equal time, that
//! stamp stands. If the concurrent stamp is *earlier* (its change read the clock before
//! this one did), this change's stamp goes on top of it: letting the older one stand, as
//! Linux does (it serializes changes of one inode with the inode lock, granary's data path
//! does not), would let a change that began after another change finished end with an
//! earlier ctime. Each retry means another thread's CAS succeeded, so the loop is
//! lock-free; `previous` is the word finally replaced.
//!
//! A stepped-back wall clock holds stamps at the floor (and at each inode's ctime) until
//! it catches up, rather than letting ctimes go backwards: Linux keeps its floor in
//! monotonic time to let file times follow such a step, which a userspace server cannot
//! do with one clock read.
#![forbid(unsafe_code)]

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::prim::{AtomicU64, Ordering};
use crate::{Clock, Timestamp};

const QUERIED: u64 = 1 << 63;
const TAG: u64 = 1 << 62;
const NANOS: u64 = TAG - 1;

/// The latest time a [`Ctime`] can hold: 2^62 − 1 ns after 1970 (February 2116).
pub const MAX_CTIME_NANOS: u64 = NANOS;

fn nanos_of(t: Timestamp) -> u64 {
    t.as_nanos().min(NANOS)
}

/// How a [`MultigrainClock`] stamps changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TimestampMode {
    /// The coarse clock only: changes within one tick share a stamp (the design multigrain
    /// replaced in Linux 6.13).
    Coarse,
    /// A fine-grained clock read for every change.
    Fine,
    /// Coarse unless the old ctime was observed.
    #[default]
    Multigrain,
}

impl TimestampMode {
    pub const ALL: [Self; 3] = [Self::Coarse, Self::Fine, Self::Multigrain];

    /// The name used on the command line and in configuration files.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Coarse => "coarse",
            Self::Fine => "fine",
            Self::Multigrain => "multigrain",
        }
    }
}

impl fmt::Display for TimestampMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown timestamp mode name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownTimestampMode(pub String);

impl fmt::Display for UnknownTimestampMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown timestamp mode {:?}; use \"coarse\", \"fine\" or \"multigrain\"",
            self.0
        )
    }
}

impl std::error::Error for UnknownTimestampMode {}

impl FromStr for TimestampMode {
    type Err = UnknownTimestampMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownTimestampMode(s.to_string()))
    }
}

/// How multigrain mode reads the coarse time and the floor (the lab compares both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FloorRead {
    /// One clock read and one load of the floor (the seed's patch).
    #[default]
    Combined,
    /// A clock read to compare against the floor and another for the value, as the
    /// series did before the patch (two trips through the timekeeper's seqcount).
    Separate,
}

/// One inode's ctime as read from its [`Ctime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtimeValue {
    pub time: Timestamp,
    /// Someone observed this ctime since it was stamped.
    pub queried: bool,
    /// The owner's bit, stored and replaced with the time.
    pub tag: bool,
}

fn decode(word: u64) -> CtimeValue {
    CtimeValue {
        time: Timestamp::from_nanos(word & NANOS),
        queried: word & QUERIED != 0,
        tag: word & TAG != 0,
    }
}

fn encode(nanos: u64, tag: bool) -> u64 {
    debug_assert!(nanos <= NANOS);
    nanos | if tag { TAG } else { 0 }
}

/// One inode's ctime with its `QUERIED` bit and an owner's tag, in one atomic word.
#[derive(Debug)]
pub struct Ctime {
    word: AtomicU64,
}

impl Ctime {
    /// A ctime of `time` (clamped to [`MAX_CTIME_NANOS`]), not yet observed.
    #[must_use]
    pub fn new(time: Timestamp, tag: bool) -> Self {
        Self {
            word: AtomicU64::new(encode(nanos_of(time), tag)),
        }
    }

    /// Reads the ctime without marking it observed (for the server's own checks).
    pub fn load(&self) -> CtimeValue {
        decode(self.word.load(Ordering::Acquire))
    }

    /// Reads the ctime for someone who will see it (a client): marks it `QUERIED`, so the
    /// next change gets a later stamp. Writes the word only the first time.
    pub fn observe(&self) -> CtimeValue {
        let word = self.word.load(Ordering::Acquire);
        if word & QUERIED != 0 {
            return decode(word);
        }
        decode(self.word.fetch_or(QUERIED, Ordering::AcqRel))
    }
}

/// The result of stamping one inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The inode's ctime now.
    pub time: Timestamp,
    /// The word this stamp replaced (meaningful when `installed`).
    pub previous: CtimeValue,
    /// False if a concurrent change's stamp stood instead of this one.
    pub installed: bool,
}

/// Counters of the fine-grained path (relaxed; for the lab and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MultigrainStats {
    /// Changes that read the fine clock.
    pub fine_stamps: u64,
    /// Of those, the ones whose CAS published a new floor.
    pub floor_swaps: u64,
    /// Of those, the ones that adopted a racing winner's floor.
    pub floor_adopted: u64,
    /// Of those, the ones that found a stale winner and used `fetch_max`.
    pub floor_max: u64,
}

/// The fine-path counters, sharded per thread so that counting adds no contended atomic
/// to the path it counts (the lab compares that path with designs that count nothing).
/// A thread owns one shard and bumps it with a plain load and store: exact as long as no
/// two running threads share a shard (up to [`SHARDS`] threads), a slight undercount
/// beyond that. Counting is for the lab and tests, never for decisions.
#[derive(Debug)]
struct Counters {
    shards: Box<[Shard]>,
}

/// Shards of [`Counters`]: more than the server's workers and the lab's threads.
const SHARDS: usize = if cfg!(loom) { 1 } else { 64 };

#[derive(Debug, Default)]
#[repr(align(64))]
struct Shard {
    fine_stamps: AtomicU64,
    floor_swaps: AtomicU64,
    floor_adopted: AtomicU64,
    floor_max: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }
}

/// Adds one to a counter only this thread's shard writes.
fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

impl Counters {
    #[cfg(not(loom))]
    fn mine(&self) -> &Shard {
        use std::sync::atomic::AtomicUsize;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        std::thread_local! {
            static SHARD: usize = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % SHARDS;
        }
        &self.shards[SHARD.try_with(|s| *s).unwrap_or(0)]
    }

    // Under loom every thread would get shard 0 (loom runs each model many times); the
    // models do not look at counters.
    #[cfg(loom)]
    fn mine(&self) -> &Shard {
        &self.shards[0]
    }

    fn total(&self, field: impl Fn(&Shard) -> &AtomicU64) -> u64 {
        self.shards
            .iter()
            .map(|s| field(s).load(Ordering::Relaxed))
            .sum()
    }
}

/// Keeps the floor on its own cache line: every change reads it, fine stamps write it.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Floor(AtomicU64);

/// Stamps ctimes for every file of a server; see the module docs.
pub struct MultigrainClock {
    source: Arc<dyn Clock>,
    mode: TimestampMode,
    floor_read: FloorRead,
    /// Latest fine-grained stamp handed out, in wall-clock nanoseconds (0: none yet).
    floor: Floor,
    counters: Counters,
}

impl fmt::Debug for MultigrainClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultigrainClock")
            .field("mode", &self.mode)
            .field("floor_read", &self.floor_read)
            .field("floor", &self.floor.0.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl MultigrainClock {
    #[must_use]
    pub fn new(source: Arc<dyn Clock>, mode: TimestampMode) -> Self {
        Self::with_floor_read(source, mode, FloorRead::Combined)
    }

    /// A clock whose multigrain mode reads coarse time and floor as `floor_read` says.
    #[must_use]
    pub fn with_floor_read(
        source: Arc<dyn Clock>,
        mode: TimestampMode,
        floor_read: FloorRead,
    ) -> Self {
        Self {
            source,
            mode,
            floor_read,
            floor: Floor::default(),
            counters: Counters::default(),
        }
    }

    #[must_use]
    pub fn mode(&self) -> TimestampMode {
        self.mode
    }

    /// The clock this one reads.
    #[must_use]
    pub fn source(&self) -> &Arc<dyn Clock> {
        &self.source
    }

    /// The time a change would get if nobody had observed anything: for times that are
    /// not an inode's ctime (a new file system's root, for instance).
    pub fn now(&self) -> Timestamp {
        let nanos = match self.mode {
            TimestampMode::Coarse => self.coarse_nanos(),
            TimestampMode::Fine => self.fine_nanos(),
            TimestampMode::Multigrain => self.coarse_and_floor().0,
        };
        Timestamp::from_nanos(nanos)
    }

    /// Gives `cell` a new ctime for a change, with `tag` as its owner's bit.
    pub fn stamp(&self, cell: &Ctime, tag: bool) -> Stamp {
        let current = cell.word.load(Ordering::Acquire);
        let nanos = self.next_nanos(&[current]);
        self.install(cell, current, nanos, tag)
    }

    /// Gives every cell one new ctime for one change that touches several inodes (a
    /// directory and the file it gains, say); later than each observed one. Returns the
    /// stamp of each cell, in order.
    pub fn stamp_all(&self, cells: &[(&Ctime, bool)]) -> Vec<Stamp> {
        let current: Vec<u64> = cells
            .iter()
            .map(|(cell, _)| cell.word.load(Ordering::Acquire))
            .collect();
        let nanos = self.next_nanos(&current);
        cells
            .iter()
            .zip(current)
            .map(|(&(cell, tag), word)| self.install(cell, word, nanos, tag))
            .collect()
    }

    /// Counters of the fine-grained path so far.
    pub fn stats(&self) -> MultigrainStats {
        let c = &self.counters;
        MultigrainStats {
            fine_stamps: c.total(|s| &s.fine_stamps),
            floor_swaps: c.total(|s| &s.floor_swaps),
            floor_adopted: c.total(|s| &s.floor_adopted),
            floor_max: c.total(|s| &s.floor_max),
        }
    }

    fn coarse_nanos(&self) -> u64 {
        nanos_of(self.source.coarse_now())
    }

    fn fine_nanos(&self) -> u64 {
        nanos_of(self.source.now())
    }

    /// The later of coarse time and floor, and the floor seen.
    fn coarse_and_floor(&self) -> (u64, u64) {
        match self.floor_read {
            FloorRead::Combined => {
                let coarse = self.coarse_nanos();
                let floor = self.floor.0.load(Ordering::Acquire);
                (coarse.max(floor), floor)
            }
            FloorRead::Separate => {
                let compared = self.coarse_nanos();
                let floor = self.floor.0.load(Ordering::Acquire);
                if floor > compared {
                    return (floor, floor);
                }
                (self.coarse_nanos().max(floor), floor)
            }
        }
    }

    /// The ctime for a change of inodes whose words are `current` (loaded before this).
    fn next_nanos(&self, current: &[u64]) -> u64 {
        match self.mode {
            TimestampMode::Coarse => self.coarse_nanos(),
            TimestampMode::Fine => self.fine_nanos(),
            TimestampMode::Multigrain => {
                let (candidate, floor) = self.coarse_and_floor();
                let newest = current.iter().map(|w| w & NANOS).max().unwrap_or(0);
                let observed = current
                    .iter()
                    .any(|w| w & QUERIED != 0 && candidate <= w & NANOS);
                let base = candidate.max(newest);
                if observed {
                    self.fine_after(base, floor)
                } else {
                    base
                }
            }
        }
    }

    /// A fine-grained stamp later than `base`, published as the floor (see module docs).
    fn fine_after(&self, base: u64, floor: u64) -> u64 {
        let counters = self.counters.mine();
        bump(&counters.fine_stamps);
        let fine = self.fine_nanos().max(base.saturating_add(1)).min(NANOS);
        match self
            .floor
            .0
            .compare_exchange(floor, fine, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                bump(&counters.floor_swaps);
                fine
            }
            Err(winner) if winner > base => {
                bump(&counters.floor_adopted);
                winner
            }
            Err(_) => {
                bump(&counters.floor_max);
                self.floor.0.fetch_max(fine, Ordering::AcqRel).max(fine)
            }
        }
    }

    /// Replaces `cell`'s word `current` with `nanos` and `tag` (see module docs).
    fn install(&self, cell: &Ctime, mut current: u64, mut nanos: u64, tag: bool) -> Stamp {
        loop {
            let wanted = encode(nanos, tag);
            let swapped = if wanted == current {
                Ok(current)
            } else {
                cell.word
                    .compare_exchange(current, wanted, Ordering::AcqRel, Ordering::Acquire)
            };
            let actual = match swapped {
                Ok(_) => {
                    return Stamp {
                        time: Timestamp::from_nanos(nanos),
                        previous: decode(current),
                        installed: true,
                    }
                }
                Err(actual) => actual,
            };
            let theirs = actual & NANOS;
            if theirs < nanos {
                // An older stamp (or an observer of the old one) got in: ours still goes
                // on top, or a change that started after another finished could end with
                // the earlier time.
                current = actual;
            } else if actual == current | QUERIED && current & QUERIED == 0 {
                // Only an observer got in, and it saw a time not before ours: pass it.
                nanos = self.next_nanos(&[actual]);
                current = actual;
            } else {
                // A concurrent change stamped the inode no earlier than we would have.
                return Stamp {
                    time: Timestamp::from_nanos(theirs),
                    previous: decode(current),
                    installed: false,
                };
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ManualClock;

    const START: Timestamp = Timestamp {
        seconds: 1_700_000_000,
        nanos: 0,
    };

    fn clock(mode: TimestampMode) -> (Arc<ManualClock>, MultigrainClock) {
        let manual = Arc::new(ManualClock::new(START));
        let clock = MultigrainClock::new(manual.clone(), mode);
        (manual, clock)
    }

    #[test]
    fn mode_names_round_trip() {
        for mode in TimestampMode::ALL {
            assert_eq!(mode.name().parse::<TimestampMode>(), Ok(mode));
        }
        assert!("exact".parse::<TimestampMode>().is_err());
        assert_eq!(TimestampMode::default(), TimestampMode::Multigrain);
    }

    #[test]
    fn words_keep_time_tag_and_queried_apart() {
        let cell = Ctime::new(START, true);
        assert_eq!(
            cell.load(),
            CtimeValue {
                time: START,
                queried: false,
                tag: true
            }
        );
        assert!(
            !cell.observe().queried,
            "observe returns the value it marked"
        );
        assert!(cell.load().queried);
        assert_eq!(cell.load().time, START);
        let far = Timestamp {
            seconds: i64::MAX,
            nanos: 0,
        };
        assert_eq!(
            Ctime::new(far, false).load().time.as_nanos(),
            MAX_CTIME_NANOS
        );
    }

    #[test]
    fn unobserved_changes_within_a_tick_share_the_coarse_stamp() {
        let (_, clock) = clock(TimestampMode::Multigrain);
        let cell = Ctime::new(START, false);
        let a = clock.stamp(&cell, true);
        let b = clock.stamp(&cell, true);
        assert_eq!((a.time, b.time), (START, START));
        assert_eq!(clock.stats().fine_stamps, 0);
        assert!(cell.load().tag);
    }

    #[test]
    fn an_observed_stamp_is_followed_by_a_later_one_even_on_a_still_clock() {
        let (manual, clock) = clock(TimestampMode::Multigrain);
        let cell = Ctime::new(START, false);
        let seen = cell.observe().time;
        let next = clock.stamp(&cell, false).time;
        assert!(next > seen);
        assert!(!cell.load().queried, "a stamp clears QUERIED");
        // The floor now covers `next`: an unobserved file changed later is not earlier.
        let other = Ctime::new(START, false);
        assert!(clock.stamp(&other, false).time >= next);
        assert_eq!(clock.stats().floor_swaps, 1);
        // Once the coarse clock passes the floor, stamps are coarse again.
        manual.advance(Duration::from_millis(4));
        cell.observe();
        let later = clock.stamp(&cell, false).time;
        assert_eq!(later, crate::Clock::now(&*manual));
        assert_eq!(clock.stats().fine_stamps, 1);
    }

    #[test]
    fn coarse_mode_repeats_and_fine_mode_reads_every_time() {
        let (_, coarse) = clock(TimestampMode::Coarse);
        let cell = Ctime::new(START, false);
        cell.observe();
        assert_eq!(coarse.stamp(&cell, false).time, START, "the seed's problem");
        let (manual, fine) = clock(TimestampMode::Fine);
        manual.advance(Duration::from_nanos(3));
        assert_eq!(
            fine.stamp(&cell, false).time.as_nanos(),
            START.as_nanos() + 3
        );
        assert_eq!(fine.stats().fine_stamps, 0, "no floor in fine mode");
    }

    #[test]
    fn stamp_all_passes_every_observed_cell() {
        let (_, clock) = clock(TimestampMode::Multigrain);
        let dir = Ctime::new(START, true);
        let file = Ctime::new(START, false);
        file.observe();
        let stamps = clock.stamp_all(&[(&dir, true), (&file, false)]);
        assert_eq!(stamps[0].time, stamps[1].time);
        assert!(stamps[1].time > START);
        assert!(stamps[1].previous.queried && !stamps[1].previous.tag);
        assert!(stamps[0].previous.tag);
        assert!(dir.load().tag && !file.load().tag);
    }

    #[test]
    fn separate_floor_read_gives_the_same_stamps() {
        let manual = Arc::new(ManualClock::new(START));
        let clock = MultigrainClock::with_floor_read(
            manual.clone(),
            TimestampMode::Multigrain,
            FloorRead::Separate,
        );
        let cell = Ctime::new(START, false);
        cell.observe();
        let fine = clock.stamp(&cell, false).time;
        assert!(fine > START);
        assert_eq!(
            clock.now(),
            fine,
            "the floor is ahead of the still coarse clock"
        );
    }
}
