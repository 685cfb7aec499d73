//! Rate-limited warnings: what a client can trigger at will (malformed calls, refused
//! credentials, closed connections) is logged at most
//! [`crate::limits::LOG_LINES_PER_SECOND`] times a second per kind; the rest are counted
//! and reported as one "N similar messages suppressed" line with the next message of that
//! kind after the second ends, or by [`flush`] (the server's periodic connection scan
//! calls it) if no message follows. A flood of bad calls thus costs a few lines a second.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::limits::LOG_LINES_PER_SECOND;

/// What a warning is about; each kind has its own allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// A call header or arguments that do not decode (GARBAGE_ARGS).
    Garbage,
    /// A credential refused (AUTH_ERROR) or an RPC version mismatch.
    Auth,
    /// A record that gets no reply at all.
    Unanswerable,
    /// A connection closed by the server for breaking a limit.
    ConnectionClosed,
    /// A connection refused at accept.
    Refused,
    /// A malformed or forged file handle, or a client an export does not allow.
    Handle,
    /// Anything else a client can cause.
    Other,
}

const KINDS: usize = 7;

/// Every kind, in index order.
const ALL_KINDS: [Kind; KINDS] = [
    Kind::Garbage,
    Kind::Auth,
    Kind::Unanswerable,
    Kind::ConnectionClosed,
    Kind::Refused,
    Kind::Handle,
    Kind::Other,
];

impl Kind {
    fn index(self) -> usize {
        self as usize
    }
}

struct Allowance {
    second: AtomicU64,
    lines: AtomicU64,
    suppressed: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)] // a template copied into the static array
const FRESH: Allowance = Allowance {
    second: AtomicU64::new(0),
    lines: AtomicU64::new(0),
    suppressed: AtomicU64::new(0),
};

static ALLOWANCES: [Allowance; KINDS] = [FRESH; KINDS];

fn now_s() -> u64 {
    static CLOCK: OnceLock<std::sync::Arc<dyn gtime::Clock>> = OnceLock::new();
    CLOCK
        .get_or_init(gtime::SystemClock::shared)
        .monotonic()
        .as_secs()
}

/// Whether a warning of `kind` may be logged now. Logs the summary of the previous
/// second's suppressed ones first, if any.
#[must_use]
pub fn allow(kind: Kind) -> bool {
    allow_at(kind, now_s())
}

fn allow_at(kind: Kind, second: u64) -> bool {
    let a = &ALLOWANCES[kind.index()];
    let seen = a.second.load(Ordering::Relaxed);
    if seen != second
        && a.second
            .compare_exchange(seen, second, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        a.lines.store(0, Ordering::Relaxed);
        report_suppressed(a, kind);
    }
    if a.lines.fetch_add(1, Ordering::Relaxed) < LOG_LINES_PER_SECOND {
        return true;
    }
    a.suppressed.fetch_add(1, Ordering::Relaxed);
    false
}

/// Logs the summary of every kind whose suppressed warnings belong to a second that has
/// ended, so that a flood which stops is still reported.
pub fn flush() {
    flush_at(now_s());
}

fn flush_at(second: u64) {
    for (a, kind) in ALLOWANCES.iter().zip(ALL_KINDS) {
        if a.second.load(Ordering::Relaxed) < second {
            report_suppressed(a, kind);
        }
    }
}

/// Logs one summary line for what `a` suppressed, if anything, and resets the count.
fn report_suppressed(a: &Allowance, kind: Kind) {
    let n = a.suppressed.swap(0, Ordering::Relaxed);
    if n > 0 {
        tracing::warn!(?kind, suppressed = n, "{n} similar messages suppressed");
    }
}

/// `tracing::warn!` for something a client can cause at will, rate-limited per kind.
#[macro_export]
macro_rules! warn_limited {
    ($kind:expr, $($arg:tt)+) => {
        if $crate::ratelog::allow($kind) {
            ::tracing::warn!($($arg)+);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_listed_in_index_order() {
        for (i, kind) in ALL_KINDS.into_iter().enumerate() {
            assert_eq!(kind.index(), i);
        }
    }

    #[test]
    fn flush_reports_a_flood_that_stopped_once_its_second_ended() {
        let suppressed = || {
            ALLOWANCES[Kind::Refused.index()]
                .suppressed
                .load(Ordering::Relaxed)
        };
        let allowed = (0..100).filter(|_| allow_at(Kind::Refused, 7)).count();
        assert_eq!(allowed as u64, LOG_LINES_PER_SECOND);
        flush_at(7);
        assert_eq!(
            suppressed(),
            100 - LOG_LINES_PER_SECOND,
            "the second is not over"
        );
        flush_at(8);
        assert_eq!(suppressed(), 0, "reported and reset");
    }

    #[test]
    fn at_most_the_allowance_per_second_then_a_new_second_resets() {
        let allowed = (0..1000).filter(|_| allow_at(Kind::Other, 5)).count();
        assert_eq!(allowed as u64, LOG_LINES_PER_SECOND);
        assert_eq!(
            ALLOWANCES[Kind::Other.index()]
                .suppressed
                .load(Ordering::Relaxed),
            990
        );
        assert!(allow_at(Kind::Other, 6));
        assert_eq!(
            ALLOWANCES[Kind::Other.index()]
                .suppressed
                .load(Ordering::Relaxed),
            0
        );
    }
}
