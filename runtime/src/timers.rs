//! Timers for the per-core workers, in three designs that `--timers` switches between:
//!
//! - **pull** (seed 002, the default): a timer is always inserted into the inserting
//!   worker's own wheel (an uncontended lock, a warm cache line). *Local* timers (per
//!   connection) fire only on their owner. *Global* timers (cache aging, reply-cache
//!   expiry, leases) may fire anywhere: when a worker goes idle it publishes its earliest
//!   global deadline and leaves its group; a busy member of the group, the *migrator*,
//!   expires idle members' global timers in its own timer pass, so an idle worker is not
//!   woken just for housekeeping. Groups have at most 8 members and form a tree (groups of
//!   groups) whose root migrator covers fully idle subtrees. The last worker to go idle
//!   keeps the earliest global deadline of everyone armed.
//! - **push** (the design pull replaced): a global timer is inserted into another, busy
//!   worker's wheel (a remote lock and a cache-line transfer per insert and cancel).
//! - **global**: one wheel behind one mutex for all global timers, driven by worker 0 (the
//!   common userspace design).
//!
//! Group state ([`crate::groups`]) is one `AtomicU64` per group — `{active mask: 8 bits, migrator: 8 bits,
//! sequence: 48 bits}` — changed only by compare-and-swap; the sequence makes every
//! update distinct, so a CAS computed from a stale snapshot fails instead of overwriting a
//! newer state.
//!
//! Time is the injected [`gtime::Clock`]'s monotonic time in ticks of [`TICK`]. The expiry
//! logic ([`Timers::run_expiry`]) is synchronous and testable with a manual clock; each
//! worker's async driver only sleeps until the next deadline and calls it.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use gtime::wheel::{TimerKey, TimerWheel};
use gtime::Clock;

use sync::groups::Groups;

/// Resolution of every worker timer. NFS timers (reply-cache expiry, idle connections,
/// leases) are seconds long; 1 ms keeps the wheel's lowest level at 64 ms.
pub const TICK: Duration = Duration::from_millis(1);

const NEVER: u64 = u64::MAX;

/// Which timer design is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimerMode {
    /// One wheel behind a mutex.
    Global,
    /// Insert into a chosen busy worker's wheel.
    Push,
    /// Insert locally; idle workers' global timers are pulled by a migrator.
    #[default]
    Pull,
}

impl std::str::FromStr for TimerMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "global" => Ok(Self::Global),
            "push" => Ok(Self::Push),
            "pull" => Ok(Self::Pull),
            _ => Err(format!(
                "invalid timer mode {s:?}; use \"global\", \"push\" or \"pull\" (the default)"
            )),
        }
    }
}

/// Where a timer may fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Only on the worker that inserted it.
    Local,
    /// On any worker.
    Global,
}

/// A timer's action. Runs on a worker thread; must not block.
pub type Callback = Box<dyn FnOnce() + Send + 'static>;

/// Names an inserted timer for [`Timers::cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerHandle {
    wheel: WheelId,
    key: TimerKey,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WheelId {
    Local(usize),
    Global(usize),
    Shared,
}

/// Counters for the lab and tests. They are counted in timer passes only, never on the
/// insert or cancel path, so no design pays for instrumentation the others do not.
#[derive(Debug, Default)]
pub struct TimerStats {
    pub fired: AtomicU64,
    /// Timers of idle workers expired by a migrator.
    pub migrated: AtomicU64,
}

struct WorkerTimers {
    local: Mutex<TimerWheel<Callback>>,
    global: Mutex<TimerWheel<Callback>>,
    wake: tokio::sync::Notify,
    /// Tick the driver sleeps until; `NEVER` when it has nothing to wait for.
    sleeping_until: AtomicU64,
    /// Earliest global deadline, published when going idle.
    published: AtomicU64,
    /// Timer passes this worker's driver ran (wake-ups), for the lab.
    passes: AtomicU64,
    /// Set when going idle woke the driver to re-plan: tokio then skips the park but
    /// still reports an unpark, which must not count as activity. Touched only by the
    /// worker's own thread.
    replanning: std::sync::atomic::AtomicBool,
}

/// All timers of one server.
pub struct Timers {
    mode: TimerMode,
    clock: Arc<dyn Clock>,
    workers: Vec<WorkerTimers>,
    shared: Mutex<TimerWheel<Callback>>,
    groups: Groups,
    pub stats: TimerStats,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Timers {
    /// Timers for `workers` workers, all initially active.
    ///
    /// # Panics
    /// If `workers` is 0.
    #[must_use]
    pub fn new(workers: usize, mode: TimerMode, clock: Arc<dyn Clock>) -> Self {
        assert!(workers > 0, "at least one worker");
        let now = tick_of(clock.monotonic());
        let per_worker = (0..workers)
            .map(|_| WorkerTimers {
                local: Mutex::new(TimerWheel::new(now)),
                global: Mutex::new(TimerWheel::new(now)),
                wake: tokio::sync::Notify::new(),
                sleeping_until: AtomicU64::new(NEVER),
                published: AtomicU64::new(NEVER),
                passes: AtomicU64::new(0),
                replanning: std::sync::atomic::AtomicBool::new(false),
            })
            .collect();
        Self {
            mode,
            clock,
            workers: per_worker,
            shared: Mutex::new(TimerWheel::new(now)),
            groups: Groups::new(workers),
            stats: TimerStats::default(),
        }
    }

    #[must_use]
    pub fn mode(&self) -> TimerMode {
        self.mode
    }

    /// The current tick.
    #[must_use]
    pub fn now(&self) -> u64 {
        tick_of(self.clock.monotonic())
    }

    /// Arms a timer from worker `from` to fire after `delay` (rounded up to a tick).
    ///
    /// # Panics
    /// If `from` is not a worker index.
    pub fn insert(&self, from: usize, delay: Duration, scope: Scope, cb: Callback) -> TimerHandle {
        let deadline = self.now() + tick_of(delay + TICK - Duration::from_nanos(1));
        let wheel = match (scope, self.mode) {
            (Scope::Local, _) => WheelId::Local(from),
            (Scope::Global, TimerMode::Pull) => WheelId::Global(from),
            (Scope::Global, TimerMode::Push) => WheelId::Global(self.push_target(from)),
            (Scope::Global, TimerMode::Global) => WheelId::Shared,
        };
        let key = self.wheel(wheel).insert(deadline, cb);
        let driver = match wheel {
            WheelId::Local(w) | WheelId::Global(w) => w,
            WheelId::Shared => 0,
        };
        if deadline < self.workers[driver].sleeping_until.load(Ordering::Acquire) {
            self.workers[driver].wake.notify_one();
        }
        TimerHandle { wheel, key }
    }

    /// Disarms a timer from any thread. False if it already fired or was cancelled.
    pub fn cancel(&self, handle: &TimerHandle) -> bool {
        self.wheel(handle.wheel).cancel(handle.key).is_some()
    }

    fn wheel(&self, id: WheelId) -> MutexGuard<'_, TimerWheel<Callback>> {
        match id {
            WheelId::Local(w) => lock(&self.workers[w].local),
            WheelId::Global(w) => lock(&self.workers[w].global),
            WheelId::Shared => lock(&self.shared),
        }
    }

    /// The old design's choice: the nearest busy worker after `from` (as Linux's
    /// `get_nohz_timer_target` took the first busy CPU of the domain). No shared cursor:
    /// the choice reads only the group state every design keeps.
    fn push_target(&self, from: usize) -> usize {
        let n = self.workers.len();
        (1..n)
            .map(|i| (from + i) % n)
            .find(|&w| self.is_active(w))
            .unwrap_or(from)
    }

    /// Timer passes worker `w`'s driver has run (each one a wake-up of that worker).
    #[must_use]
    pub fn driver_passes(&self, w: usize) -> u64 {
        self.workers[w].passes.load(Ordering::Relaxed)
    }

    /// True while worker `w` is not parked.
    #[must_use]
    pub fn is_active(&self, w: usize) -> bool {
        self.groups.is_active(w)
    }

    /// Worker `w` is about to park: publish its earliest global deadline, leave its
    /// groups (handing the migrator role on), and make sure someone will wake for it.
    pub fn worker_idle(&self, w: usize) {
        let mine = lock(&self.workers[w].global)
            .next_deadline()
            .unwrap_or(NEVER);
        self.workers[w].published.store(mine, Ordering::Release);
        self.groups.leave(w);
        self.arm_for_idle(w);
        // The driver planned its sleep while busy, counting its own global timers; idle,
        // it needs to wake only for its local timers (or for everyone's, if it was the
        // last to go idle). Let it re-plan before the worker parks.
        if self.mode == TimerMode::Pull
            && self.workers[w].sleeping_until.load(Ordering::Acquire) < self.idle_plan(w)
        {
            self.workers[w].replanning.store(true, Ordering::Relaxed);
            self.workers[w].wake.notify_one();
        }
    }

    /// When idle worker `w` must wake: for its local timers, and, while no worker is
    /// active, for the earliest global timer of all.
    fn idle_plan(&self, w: usize) -> u64 {
        let local = lock(&self.workers[w].local)
            .next_deadline()
            .unwrap_or(NEVER);
        if self.effective_migrator().is_some() {
            return local;
        }
        local.min(self.earliest_published(0..self.workers.len()))
    }

    /// After `w` went idle: whoever now answers for idle timers must wake in time.
    fn arm_for_idle(&self, w: usize) {
        let (target, due) = match self.effective_migrator() {
            Some(m) => (m, self.earliest_idle(m)),
            // Nobody is active: the last worker to go idle keeps everyone's earliest
            // global deadline armed.
            None => (w, self.earliest_published(0..self.workers.len())),
        };
        if due < self.workers[target].sleeping_until.load(Ordering::Acquire) {
            self.workers[target].wake.notify_one();
        }
    }

    /// Worker `w` woke up: rejoin its groups; if it became a migrator, its driver runs
    /// its next pass with the idle members' deadlines.
    pub fn worker_active(&self, w: usize) {
        if self.workers[w].replanning.load(Ordering::Relaxed) {
            // The "unpark" after a park skipped for our own re-plan: still idle.
            return;
        }
        let became_migrator = self.groups.join(w);
        self.workers[w].published.store(NEVER, Ordering::Release);
        // A new migrator must wake for its idle members' global timers and its own; its
        // driver need not re-plan when it already wakes in time for them. A worker that
        // was the last to go idle planned for everyone's earliest deadline, so a lone
        // busy worker (one connection's calls) does not run a timer pass per call.
        if became_migrator {
            let own = lock(&self.workers[w].global)
                .next_deadline()
                .unwrap_or(NEVER);
            let due = own.min(self.earliest_idle(w));
            if due < self.workers[w].sleeping_until.load(Ordering::Acquire) {
                self.workers[w].wake.notify_one();
            }
        }
    }

    fn effective_migrator(&self) -> Option<usize> {
        self.groups.effective_migrator()
    }

    /// The workers whose global timers `w` expires besides its own (pull mode only).
    fn responsibility(&self, w: usize) -> Option<Range<usize>> {
        if self.mode == TimerMode::Pull {
            self.groups.responsibility(w)
        } else {
            None
        }
    }

    fn earliest_published(&self, range: Range<usize>) -> u64 {
        range
            .filter(|&v| !self.is_active(v))
            .map(|v| self.workers[v].published.load(Ordering::Acquire))
            .min()
            .unwrap_or(NEVER)
    }

    fn earliest_idle(&self, m: usize) -> u64 {
        self.responsibility(m)
            .map_or(NEVER, |r| self.earliest_published(r))
    }

    /// One timer pass of worker `w` at tick `now`: fires its due local and global timers
    /// (and, as migrator, idle members' global timers; worker 0 also drives the shared
    /// wheel). Returns the tick at which the next pass is due.
    pub fn run_expiry(&self, w: usize, now: u64) -> u64 {
        let mut due: Vec<Callback> = Vec::new();
        let mut next = NEVER;
        for wheel in [&self.workers[w].local, &self.workers[w].global] {
            let mut wheel = lock(wheel);
            wheel.advance(now, |_, cb| due.push(cb));
            next = next.min(wheel.next_deadline().unwrap_or(NEVER));
        }
        if w == 0 {
            let mut shared = lock(&self.shared);
            shared.advance(now, |_, cb| due.push(cb));
            next = next.min(shared.next_deadline().unwrap_or(NEVER));
        }
        next = next.min(self.expire_idle(w, now, &mut due));
        if self.mode == TimerMode::Pull && !self.is_active(w) {
            // Running while marked idle (re-planning before a park): publish what is
            // left and sleep only as long as idleness allows.
            let mine = lock(&self.workers[w].global)
                .next_deadline()
                .unwrap_or(NEVER);
            self.workers[w].published.store(mine, Ordering::Release);
            next = self.idle_plan(w);
        }
        self.stats
            .fired
            .fetch_add(due.len() as u64, Ordering::Relaxed);
        for cb in due {
            cb();
        }
        next
    }

    /// As migrator: expire idle workers' global timers; as the last active worker (or
    /// while all are idle): also keep their earliest deadline in view.
    fn expire_idle(&self, w: usize, now: u64, due: &mut Vec<Callback>) -> u64 {
        let range = match self.responsibility(w) {
            Some(r) => r,
            None if self.mode == TimerMode::Pull && self.effective_migrator().is_none() => {
                0..self.workers.len()
            }
            None => return NEVER,
        };
        let mut next = NEVER;
        for v in range.filter(|&v| v != w && !self.is_active(v)) {
            let mut wheel = lock(&self.workers[v].global);
            let before = due.len();
            wheel.advance(now, |_, cb| due.push(cb));
            self.stats
                .migrated
                .fetch_add((due.len() - before) as u64, Ordering::Relaxed);
            let theirs = wheel.next_deadline().unwrap_or(NEVER);
            self.workers[v].published.store(theirs, Ordering::Release);
            next = next.min(theirs);
        }
        next
    }

    /// The driver of worker `w`: runs timer passes until `stop` turns true. Spawn it on
    /// the worker's own event loop.
    pub async fn drive(self: Arc<Self>, w: usize, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            let now = self.now();
            self.workers[w].passes.fetch_add(1, Ordering::Relaxed);
            let next = self.run_expiry(w, now);
            self.workers[w].replanning.store(false, Ordering::Relaxed);
            self.workers[w]
                .sleeping_until
                .store(next, Ordering::Release);
            let sleep = if next == NEVER {
                Duration::from_secs(3600)
            } else {
                TICK * u32::try_from(next.saturating_sub(self.now())).unwrap_or(u32::MAX)
            };
            tokio::select! {
                () = tokio::time::sleep(sleep) => {}
                () = self.workers[w].wake.notified() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}

fn tick_of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gtime::{ManualClock, Timestamp};
    use std::sync::atomic::AtomicU32;

    fn timers(n: usize, mode: TimerMode) -> (Arc<Timers>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(Timestamp::default()));
        (Arc::new(Timers::new(n, mode, clock.clone())), clock)
    }

    fn counter() -> (Arc<AtomicU32>, impl Fn() -> Callback) {
        let c = Arc::new(AtomicU32::new(0));
        let c2 = Arc::clone(&c);
        (c, move || {
            let c = Arc::clone(&c2);
            Box::new(move || {
                c.fetch_add(1, Ordering::SeqCst);
            })
        })
    }

    #[test]
    fn every_timer_fires_once_and_never_early() {
        let (t, clock) = timers(2, TimerMode::Pull);
        let (count, cb) = counter();
        for i in 0..100u64 {
            t.insert(
                (i % 2) as usize,
                Duration::from_millis(i),
                Scope::Global,
                cb(),
            );
        }
        let mut fired_by = vec![];
        for ms in 0..=100u64 {
            let before = count.load(Ordering::SeqCst);
            t.run_expiry(0, t.now());
            t.run_expiry(1, t.now());
            let after = count.load(Ordering::SeqCst);
            fired_by.push((ms, after - before));
            clock.advance(Duration::from_millis(1));
        }
        assert_eq!(count.load(Ordering::SeqCst), 100);
        // Timer i (delay i ms) fires at tick i exactly: one per tick.
        assert!(
            fired_by.iter().take(100).all(|&(_, n)| n == 1),
            "{fired_by:?}"
        );
    }

    #[test]
    fn cancelled_timers_never_fire_even_across_workers() {
        let (t, clock) = timers(2, TimerMode::Pull);
        let (count, cb) = counter();
        let h = t.insert(0, Duration::from_millis(5), Scope::Global, cb());
        assert!(t.cancel(&h));
        assert!(!t.cancel(&h));
        clock.advance(Duration::from_millis(10));
        t.run_expiry(0, t.now());
        assert_eq!(count.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn migrator_expires_an_idle_workers_global_timers_on_time() {
        let (t, clock) = timers(2, TimerMode::Pull);
        let (count, cb) = counter();
        t.insert(1, Duration::from_millis(10), Scope::Global, cb());
        t.worker_idle(1);
        assert!(!t.is_active(1));
        assert_eq!(t.responsibility(0), Some(0..2));
        clock.advance(Duration::from_millis(9));
        assert_eq!(
            t.run_expiry(0, t.now()),
            10,
            "the migrator must plan to wake at tick 10"
        );
        clock.advance(Duration::from_millis(1));
        t.run_expiry(0, t.now());
        assert_eq!(
            count.load(Ordering::SeqCst),
            1,
            "fired within one tick by the migrator"
        );
        assert_eq!(t.stats.migrated.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn local_timers_fire_only_on_their_owner() {
        let (t, clock) = timers(2, TimerMode::Pull);
        let (count, cb) = counter();
        t.insert(1, Duration::from_millis(1), Scope::Local, cb());
        t.worker_idle(1);
        clock.advance(Duration::from_millis(5));
        t.run_expiry(0, t.now());
        assert_eq!(count.load(Ordering::SeqCst), 0);
        t.worker_active(1);
        t.run_expiry(1, t.now());
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_last_worker_to_go_idle_arms_for_everyones_earliest_deadline() {
        let (t, _clock) = timers(2, TimerMode::Pull);
        let (_count, cb) = counter();
        t.insert(1, Duration::from_millis(30), Scope::Global, cb());
        t.insert(0, Duration::from_millis(50), Scope::Global, cb());
        t.worker_idle(1);
        t.worker_idle(0);
        assert_eq!(t.effective_migrator(), None);
        // Worker 0 went idle last: its next pass covers worker 1's timer at tick 30.
        assert_eq!(t.run_expiry(0, t.now()), 30);
    }

    #[test]
    fn migrator_role_moves_to_an_active_member() {
        let (t, _clock) = timers(3, TimerMode::Pull);
        assert_eq!(t.effective_migrator(), Some(0));
        t.worker_idle(0);
        assert_eq!(t.effective_migrator(), Some(1));
        t.worker_idle(1);
        assert_eq!(t.effective_migrator(), Some(2));
        t.worker_active(0);
        assert_eq!(t.effective_migrator(), Some(2));
        t.worker_idle(2);
        assert_eq!(t.effective_migrator(), Some(0));
    }

    #[test]
    fn hierarchy_covers_idle_groups() {
        let (t, clock) = timers(16, TimerMode::Pull);
        let (count, cb) = counter();
        t.insert(12, Duration::from_millis(3), Scope::Global, cb());
        for w in 1..16 {
            t.worker_idle(w);
        }
        assert_eq!(t.effective_migrator(), Some(0));
        assert_eq!(t.responsibility(0), Some(0..16));
        clock.advance(Duration::from_millis(3));
        t.run_expiry(0, t.now());
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn push_mode_inserts_into_another_busy_worker() {
        let (t, clock) = timers(2, TimerMode::Push);
        let (count, cb) = counter();
        t.insert(0, Duration::from_millis(1), Scope::Global, cb());
        clock.advance(Duration::from_millis(1));
        t.run_expiry(0, t.now());
        assert_eq!(
            count.load(Ordering::SeqCst),
            0,
            "worker 0 pushed it to worker 1"
        );
        t.run_expiry(1, t.now());
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn global_mode_uses_one_shared_wheel_driven_by_worker_zero() {
        let (t, clock) = timers(2, TimerMode::Global);
        let (count, cb) = counter();
        t.insert(1, Duration::from_millis(1), Scope::Global, cb());
        clock.advance(Duration::from_millis(1));
        t.run_expiry(1, t.now());
        assert_eq!(count.load(Ordering::SeqCst), 0);
        t.run_expiry(0, t.now());
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }
}
