//! "Cheat" mode of the scalable lock (FreeBSD's `rangelock_cheat`): until the first
//! conflict, the lock is one reader/writer word, as if every request covered the whole
//! file. Readers add themselves to a count, a writer sets a bit: one atomic operation to
//! lock and one to unlock, no allocation, no list.
//!
//! The first request that conflicts under that whole-file view (a writer while anyone
//! holds the lock, a reader while a writer does) sets `DRAINING` and waits; so does every
//! request after it. Holders granted in cheat mode keep their grant; the last one to leave
//! clears the word to zero, which means "precise", wakes the waiters, and from then on
//! every request goes to the precise list. The lock never goes back to cheating.
//!
//! That suits the common pattern the mode was made for: a file written by one writer, then
//! read by many, pays for precise ranges only once there is real contention.
#![forbid(unsafe_code)]

use crate::park::Parking;
use crate::prim::{AtomicU64, Ordering};

const CHEATING: u64 = 1;
const WRITER: u64 = 2;
const DRAINING: u64 = 4;
/// Someone sleeps until the drain ends (see `park`).
const SLEEPERS: u64 = 8;
/// Readers are counted from this bit up.
const READER: u64 = 16;
const FLAGS: u64 = CHEATING | WRITER | DRAINING | SLEEPERS;

/// What a cheat-mode request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cheat {
    /// Granted in cheat mode: release with [`CheatWord::unlock`].
    Granted,
    /// The lock is (now) precise: take the range in the list.
    Precise,
    /// `try` only: the whole-file view conflicts; nothing changed.
    Busy,
}

#[derive(Debug)]
pub(crate) struct CheatWord {
    word: AtomicU64,
}

fn conflicts(word: u64, write: bool) -> bool {
    let writer = word & WRITER != 0;
    if write {
        writer || word >= READER
    } else {
        writer
    }
}

impl CheatWord {
    /// Starts cheating if `enabled`, else precise for good.
    pub(crate) fn new(enabled: bool) -> Self {
        Self {
            word: AtomicU64::new(if enabled { CHEATING } else { 0 }),
        }
    }

    /// True while the lock is still in cheat mode.
    pub(crate) fn is_cheating(&self) -> bool {
        self.word.load(Ordering::Acquire) & CHEATING != 0
    }

    /// Takes the whole-file lock in cheat mode, or, on a conflict, starts the switch to
    /// precise mode and waits until the cheat-mode holders have left.
    pub(crate) fn lock(&self, write: bool, parking: &Parking) -> Cheat {
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if word & CHEATING == 0 {
                return Cheat::Precise;
            }
            if word & DRAINING != 0 {
                self.drain(parking);
                return Cheat::Precise;
            }
            let conflict = conflicts(word, write);
            let wanted = match (conflict, write) {
                (true, _) => word | DRAINING,
                (false, true) => CHEATING | WRITER,
                (false, false) => word + READER,
            };
            match self
                .word
                .compare_exchange_weak(word, wanted, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) if conflict => {
                    self.drain(parking);
                    return Cheat::Precise;
                }
                Ok(_) => return Cheat::Granted,
                Err(actual) => word = actual,
            }
        }
    }

    /// As [`CheatWord::lock`] but never waits: a conflict is `Busy` and leaves the lock
    /// cheating (as FreeBSD's trylocks do); a drain in progress is `Busy` too.
    pub(crate) fn try_lock(&self, write: bool) -> Cheat {
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if word & CHEATING == 0 {
                return Cheat::Precise;
            }
            if word & DRAINING != 0 || conflicts(word, write) {
                return Cheat::Busy;
            }
            let wanted = if write {
                CHEATING | WRITER
            } else {
                word + READER
            };
            match self
                .word
                .compare_exchange_weak(word, wanted, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Cheat::Granted,
                Err(actual) => word = actual,
            }
        }
    }

    /// Waits until the drain finished (the word went to zero).
    fn drain(&self, parking: &Parking) {
        'sleep: loop {
            let ticket = parking.prepare();
            let mut word = self.word.load(Ordering::Acquire);
            loop {
                if word & DRAINING == 0 {
                    return;
                }
                match self.word.compare_exchange_weak(
                    word,
                    word | SLEEPERS,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        ticket.sleep();
                        continue 'sleep;
                    }
                    Err(actual) => word = actual,
                }
            }
        }
    }

    /// Releases a cheat-mode grant. The last holder of a draining lock switches it to
    /// precise mode and wakes the waiters.
    pub(crate) fn unlock(&self, write: bool, parking: &Parking) {
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            debug_assert!(
                word & CHEATING != 0,
                "cheat grant released on a precise lock"
            );
            let rest = if write {
                debug_assert!(word & WRITER != 0);
                word & !WRITER
            } else {
                debug_assert!(word >= READER);
                word - READER
            };
            let holders_left = rest & !FLAGS != 0 || rest & WRITER != 0;
            let wanted = if rest & DRAINING != 0 && !holders_left {
                0
            } else {
                rest
            };
            match self
                .word
                .compare_exchange_weak(word, wanted, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if wanted == 0 && word & SLEEPERS != 0 {
                        parking.wake_all();
                    }
                    return;
                }
                Err(actual) => word = actual,
            }
        }
    }
}
