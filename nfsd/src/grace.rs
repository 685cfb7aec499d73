//! The grace periods of the two lock protocols after a restart, seen by both. While the
//! NFSv4 clients or the NLM hosts of the previous run take back their locks, neither
//! protocol grants a new lock: otherwise a lock not yet reclaimed over one protocol could
//! be taken over the other, and its reclaim would then be refused (knfsd joins lockd's
//! and nfsd's periods the same way in `locks_in_grace`).
//!
//! Each front end says when its own period ends ([`LockGrace::start`]) and, for NFSv4,
//! when it ended early ([`LockGrace::end`]: every client of the previous run sent
//! RECLAIM_COMPLETE). A reclaim is allowed only in its own protocol's period
//! ([`LockGrace::own`]); a new lock is refused while any period runs
//! ([`LockGrace::any`]). Time is the server's monotonic clock; nothing here arms a timer.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use locks::Protocol;

/// When each protocol's grace period ends, if it runs. See the module docs.
#[derive(Debug, Default)]
pub struct LockGrace {
    ends: Mutex<[Option<Duration>; 2]>,
}

fn slot(p: Protocol) -> usize {
    match p {
        Protocol::Nfs4 => 0,
        Protocol::Nlm => 1,
    }
}

impl LockGrace {
    fn lock(&self) -> MutexGuard<'_, [Option<Duration>; 2]> {
        self.ends.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `p`'s grace period runs until `ends`.
    pub fn start(&self, p: Protocol, ends: Duration) {
        self.lock()[slot(p)] = Some(ends);
    }

    /// `p`'s grace period is over before its time.
    pub fn end(&self, p: Protocol) {
        self.lock()[slot(p)] = None;
    }

    /// Whether `p`'s own grace period runs at `now` (its clients may reclaim).
    #[must_use]
    pub fn own(&self, p: Protocol, now: Duration) -> bool {
        let mut g = self.lock();
        match g[slot(p)] {
            Some(ends) if now < ends => true,
            Some(_) => {
                g[slot(p)] = None;
                tracing::info!(protocol = p.name(), "grace period over");
                false
            }
            None => false,
        }
    }

    /// Whether any protocol's grace period runs at `now` (no new lock is granted).
    #[must_use]
    pub fn any(&self, now: Duration) -> bool {
        Protocol::ALL.into_iter().any(|p| self.own(p, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_period_holds_back_new_locks_and_each_allows_only_its_own_reclaims() {
        let g = LockGrace::default();
        let s = Duration::from_secs;
        assert!(!g.any(s(0)));
        g.start(Protocol::Nlm, s(20));
        g.start(Protocol::Nfs4, s(10));
        assert!(g.any(s(5)) && g.own(Protocol::Nfs4, s(5)) && g.own(Protocol::Nlm, s(5)));
        g.end(Protocol::Nfs4);
        assert!(!g.own(Protocol::Nfs4, s(6)));
        assert!(g.any(s(6)), "NLM's period still runs");
        assert!(g.own(Protocol::Nlm, s(19)));
        assert!(!g.any(s(20)) && !g.own(Protocol::Nlm, s(20)));
    }
}
