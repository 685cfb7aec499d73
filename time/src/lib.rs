//! Time for granary. This crate is the only place that reads the system clock: everything
//! else is handed a [`Clock`], so tests (and later the simulator) drive time by hand.
//!
//! It owns:
//! - [`Timestamp`]: wall-clock seconds + nanoseconds since the Unix epoch, as file times
//!   are stored and sent on the wire;
//! - [`Clock`]: a source of wall-clock stamps and of monotonic instants;
//! - [`SystemClock`] (the real one) and [`ManualClock`] (tests);
//! - [`multigrain`]: file change times that are coarse unless observed (seed 000), and
//!   [`coarse_resolution`], the tick of the coarse clock it reads.
//!
//! - [`wheel`]: the timer wheels of seed 002, a pure structure driven by the time it is
//!   given (`runtime::timers` owns one per worker and drives them).
#![forbid(unsafe_code)]

#[cfg(all(test, loom))]
mod loom_tests;
pub mod multigrain;
mod prim;
pub mod wheel;

pub use multigrain::{Ctime, CtimeValue, FloorRead, MultigrainClock, Stamp, TimestampMode};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A wall-clock time: seconds and nanoseconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp {
    pub seconds: i64,
    /// Always `< 1_000_000_000`.
    pub nanos: u32,
}

impl Timestamp {
    pub const NANOS_PER_SEC: u64 = 1_000_000_000;

    /// Builds a timestamp from nanoseconds since the epoch.
    #[must_use]
    pub fn from_nanos(nanos_since_epoch: u64) -> Self {
        Self {
            seconds: i64::try_from(nanos_since_epoch / Self::NANOS_PER_SEC).unwrap_or(i64::MAX),
            nanos: u32::try_from(nanos_since_epoch % Self::NANOS_PER_SEC).unwrap_or(0),
        }
    }

    /// Nanoseconds since the epoch (saturating; times before 1970 map to 0).
    #[must_use]
    pub fn as_nanos(self) -> u64 {
        let secs = u64::try_from(self.seconds).unwrap_or(0);
        secs.saturating_mul(Self::NANOS_PER_SEC)
            .saturating_add(u64::from(self.nanos))
    }
}

/// A source of time. Implementations must be cheap to call from every request.
pub trait Clock: Send + Sync + 'static {
    /// The current wall-clock time, used for file timestamps.
    fn now(&self) -> Timestamp;

    /// The wall-clock time as of the last tick of a coarse clock: cheaper to read, at most
    /// one tick ([`coarse_resolution`]) behind [`Clock::now`], never ahead of it. Clocks
    /// with no cheaper source return [`Clock::now`].
    fn coarse_now(&self) -> Timestamp {
        self.now()
    }

    /// Monotonic time since an arbitrary fixed origin, used for timeouts and ages.
    fn monotonic(&self) -> Duration;

    /// [`Clock::monotonic`] as of the last tick of a coarse clock: cheaper to read (no
    /// hardware counter), at most one tick ([`coarse_resolution`]) behind it, never ahead
    /// of it. For stamps read on every request whose limits are seconds long (a
    /// connection's watchdog). Clocks with no cheaper source return [`Clock::monotonic`].
    fn monotonic_coarse(&self) -> Duration {
        self.monotonic()
    }
}

/// The operating system's clocks.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
    /// `CLOCK_MONOTONIC` read just after `origin` (the clock `Instant` reads), for
    /// [`Clock::monotonic_coarse`]: no later than `origin`'s own reading, so coarse time
    /// is never ahead of [`Clock::monotonic`].
    origin_ns: u64,
}

impl SystemClock {
    #[must_use]
    pub fn new() -> Self {
        let origin = Instant::now();
        let origin_ns = timespec_ns(rustix::time::clock_gettime(
            rustix::time::ClockId::Monotonic,
        ));
        Self { origin, origin_ns }
    }

    /// A shared handle, as most users want one.
    #[must_use]
    pub fn shared() -> Arc<dyn Clock> {
        Arc::new(Self::new())
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp {
            seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
            nanos: since.subsec_nanos(),
        }
    }

    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }

    /// `CLOCK_MONOTONIC_COARSE`: a vDSO read of the time of the last tick, no TSC read.
    fn monotonic_coarse(&self) -> Duration {
        let now = timespec_ns(rustix::time::clock_gettime(
            rustix::time::ClockId::MonotonicCoarse,
        ));
        Duration::from_nanos(now.saturating_sub(self.origin_ns))
    }

    /// `CLOCK_REALTIME_COARSE`: a vDSO read of the time of the last tick.
    fn coarse_now(&self) -> Timestamp {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
        Timestamp {
            seconds: t.tv_sec,
            nanos: u32::try_from(t.tv_nsec).unwrap_or(0),
        }
    }
}

fn timespec_ns(t: rustix::time::Timespec) -> u64 {
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec).unwrap_or(0);
    secs.saturating_mul(Timestamp::NANOS_PER_SEC)
        .saturating_add(nanos)
}

/// The resolution of the system's coarse wall clock (`clock_getres(CLOCK_REALTIME_COARSE)`):
/// how far [`SystemClock::coarse_now`] can lag, one kernel tick (1 to 10 ms).
#[must_use]
pub fn coarse_resolution() -> Duration {
    let t = rustix::time::clock_getres(rustix::time::ClockId::RealtimeCoarse);
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_nanos(u64::try_from(t.tv_nsec).unwrap_or(0))
}

/// A clock that moves only when told to. Wall time and monotonic time advance together;
/// the wall clock alone can be stepped back (as `settimeofday` does). Its coarse clock
/// ticks every `tick` (by default it is the fine clock itself).
#[derive(Debug, Default)]
pub struct ManualClock {
    wall_nanos: AtomicU64,
    mono_nanos: AtomicU64,
    /// The coarse clock's resolution in nanoseconds; 0: no coarse clock of its own.
    tick_nanos: u64,
}

impl ManualClock {
    /// Starts at `start` wall time and zero monotonic time.
    #[must_use]
    pub fn new(start: Timestamp) -> Self {
        Self::with_tick(start, Duration::ZERO)
    }

    /// As [`ManualClock::new`], with a coarse clock that shows the wall time rounded down
    /// to a multiple of `tick`, the way a kernel's coarse clock lags its fine one.
    #[must_use]
    pub fn with_tick(start: Timestamp, tick: Duration) -> Self {
        Self {
            wall_nanos: AtomicU64::new(start.as_nanos()),
            mono_nanos: AtomicU64::new(0),
            tick_nanos: u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// Moves both clocks forward.
    pub fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.wall_nanos.fetch_add(nanos, Ordering::SeqCst);
        self.mono_nanos.fetch_add(nanos, Ordering::SeqCst);
    }

    /// Steps the wall clock back (not below 1970); monotonic time stays where it is.
    pub fn step_back(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .wall_nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |wall| {
                Some(wall.saturating_sub(nanos))
            });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(self.wall_nanos.load(Ordering::SeqCst))
    }

    fn coarse_now(&self) -> Timestamp {
        let wall = self.wall_nanos.load(Ordering::SeqCst);
        match self.tick_nanos {
            0 => Timestamp::from_nanos(wall),
            tick => Timestamp::from_nanos(wall - wall % tick),
        }
    }

    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.mono_nanos.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nanos_round_trip() {
        let t = Timestamp {
            seconds: 1_700_000_000,
            nanos: 123_456_789,
        };
        assert_eq!(Timestamp::from_nanos(t.as_nanos()), t);
    }

    /// The coarse monotonic clock is never ahead of the fine one and lags it by at most
    /// a tick, with room for the two reads to be apart and a tick's update to be late on a
    /// busy machine (a VM's vCPU may not run for a while): an origin taken wrong would be
    /// off by far more.
    #[test]
    fn system_monotonic_coarse_trails_monotonic_by_at_most_a_tick() {
        let c = SystemClock::new();
        let tick = coarse_resolution();
        for _ in 0..1000 {
            let coarse = c.monotonic_coarse();
            let fine = c.monotonic();
            assert!(coarse <= fine, "coarse {coarse:?} ahead of fine {fine:?}");
            assert!(
                fine - coarse <= tick + Duration::from_millis(500),
                "coarse {coarse:?} more than a tick ({tick:?}) behind {fine:?}"
            );
        }
        // It moves at the next tick's timekeeping update, which a loaded host may hold
        // back past two ticks (the first pre-check of 9c7238c, at load 10): asked again
        // until a second has gone.
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        while c.monotonic_coarse() < tick {
            assert!(
                std::time::Instant::now() < deadline,
                "the coarse clock did not move in a second"
            );
            std::thread::sleep(tick);
        }
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(Timestamp {
            seconds: 10,
            nanos: 0,
        });
        assert_eq!(
            c.now(),
            Timestamp {
                seconds: 10,
                nanos: 0
            }
        );
        c.advance(Duration::from_millis(1500));
        assert_eq!(
            c.now(),
            Timestamp {
                seconds: 11,
                nanos: 500_000_000
            }
        );
        assert_eq!(c.monotonic(), Duration::from_millis(1500));
    }

    #[test]
    fn manual_clock_ticks_coarsely_and_steps_back() {
        let c = ManualClock::with_tick(
            Timestamp {
                seconds: 10,
                nanos: 0,
            },
            Duration::from_millis(4),
        );
        c.advance(Duration::from_micros(4_100));
        assert_eq!(c.now().as_nanos(), 10_004_100_000);
        assert_eq!(
            c.coarse_now().as_nanos(),
            10_004_000_000,
            "one tick, rounded down"
        );
        c.step_back(Duration::from_secs(1));
        assert_eq!(c.now().as_nanos(), 9_004_100_000);
        assert_eq!(c.coarse_now().as_nanos(), 9_004_000_000);
        assert_eq!(
            c.monotonic(),
            Duration::from_micros(4_100),
            "monotonic never steps"
        );
        c.step_back(Duration::from_secs(1_000));
        assert_eq!(c.now().as_nanos(), 0, "not before 1970");
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock::new().now().seconds > 1_577_836_800);
    }

    #[test]
    fn coarse_time_lags_by_at_most_a_tick() {
        let clock = SystemClock::new();
        let tick = coarse_resolution();
        assert!(tick >= Duration::from_nanos(1) && tick <= Duration::from_millis(100));
        let coarse = clock.coarse_now();
        let fine = clock.now();
        assert!(coarse <= fine, "{coarse:?} > {fine:?}");
        // Generous slack: the thread may be descheduled between the two reads.
        let lag = fine.as_nanos() - coarse.as_nanos();
        assert!(lag <= 2 * u64::try_from(tick.as_nanos()).unwrap() + 50_000_000);
    }
}
