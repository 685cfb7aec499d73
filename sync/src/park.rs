//! Where a lock's waiters sleep: one mutex and condition variable per lock.
//!
//! Who sleeps is recorded in the very word a waiter waits on (a `WAITED` tag on the
//! blocking node of the list, a `SLEEPERS` bit in the cheat word), never in a separate
//! flag, so no wake-up can be lost and none needs a store-load fence:
//!
//! - a waiter calls [`Parking::prepare`] (takes the mutex), then sets the sleeper bit
//!   with one read-modify-write on the word it waits on; if that RMW shows the condition
//!   already met, it gives up the ticket, else it calls [`Ticket::sleep`], which releases
//!   the mutex atomically with falling asleep;
//! - a releaser changes that word with one RMW; if the value it replaced carried the
//!   sleeper bit, it calls [`Parking::wake_all`], which takes the mutex and wakes everyone.
//!
//! The two RMWs are ordered on one location: either the releaser's comes first and the
//! waiter sees the condition met, or the waiter's comes first and the releaser sees the
//! bit; the releaser then cannot notify before the waiter sleeps, because the waiter holds
//! the mutex until it does. Wake-ups are broadcast; every sleeper re-checks its condition
//! and sleeps again if it must.
#![forbid(unsafe_code)]

use std::sync::PoisonError;

use crate::prim::{Condvar, Mutex, MutexGuard};

#[derive(Debug)]
pub(crate) struct Parking {
    mutex: Mutex<()>,
    cond: Condvar,
}

/// A waiter holding the parking mutex; sleeping consumes it, dropping it gives up.
pub(crate) struct Ticket<'a> {
    parking: &'a Parking,
    guard: MutexGuard<'a, ()>,
}

impl Parking {
    pub(crate) fn new() -> Self {
        Self {
            mutex: Mutex::new(()),
            cond: Condvar::new(),
        }
    }

    /// Starts waiting: the caller must then set its sleeper bit and check its condition
    /// before [`Ticket::sleep`].
    pub(crate) fn prepare(&self) -> Ticket<'_> {
        // A panic while holding this mutex leaves `()` behind: nothing to be poisoned.
        let guard = self.mutex.lock().unwrap_or_else(PoisonError::into_inner);
        Ticket {
            parking: self,
            guard,
        }
    }

    /// Wakes every sleeper. Call after a release whose RMW replaced a sleeper bit.
    pub(crate) fn wake_all(&self) {
        let _guard = self.mutex.lock().unwrap_or_else(PoisonError::into_inner);
        self.cond.notify_all();
    }
}

impl Ticket<'_> {
    /// Sleeps until a releaser wakes this lock's sleepers (or spuriously).
    pub(crate) fn sleep(self) {
        let Self { parking, guard } = self;
        drop(
            parking
                .cond
                .wait(guard)
                .unwrap_or_else(PoisonError::into_inner),
        );
    }
}
