//! Each network worker's blocking pool: a few threads of its own where calls that must
//! sleep (a sync, a read from the disk, a wait for a decode job) run, so the worker's
//! event loop keeps serving its other connections.
//!
//! The promises:
//!
//! - bounded: [`limits::BLOCKING_THREADS_PER_WORKER`] threads per worker, named
//!   `granary-blk-<worker>-<n>`, and at most [`limits::BLOCKING_QUEUE_PER_WORKER`] jobs
//!   waiting for one of them. [`BlockingHandle::run`] first awaits room (FIFO among the
//!   callers), so a full pool makes its callers wait instead of growing a queue: the
//!   back-pressure reaches the client through the connection's in-flight limit;
//! - a job that panics is caught and its caller told ([`BlockingHandle::run`] gives
//!   `None`); the thread keeps serving;
//! - shutdown: the worker drains its tasks first (those waiting on the pool included),
//!   then closes its pool, which drops jobs not started, lets running ones finish and
//!   joins its threads.
//!
//! A thread of worker `w`'s pool answers [`crate::home_worker`] with `w`, so work it hands
//! on (seed 001's decode jobs) is fed as from that worker's core.

use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::Semaphore;

use crate::limits;
use crate::queue::Queue;

struct Shared {
    queue: Arc<Queue>,
    /// One permit per job running or waiting: threads + queue depth.
    room: Arc<Semaphore>,
    running: AtomicUsize,
    /// Most jobs that ever waited for a thread at once (tests and metrics).
    peak_waiting: AtomicUsize,
    /// Jobs run since start.
    ran: AtomicU64,
}

/// Where a worker's calls that must block run. Dropping it closes the pool and joins its
/// threads.
pub struct BlockingPool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// A cheap, cloneable way to submit to one [`BlockingPool`].
#[derive(Clone)]
pub struct BlockingHandle {
    shared: Arc<Shared>,
}

/// What a pool holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolLoad {
    /// Jobs running on a thread.
    pub running: usize,
    /// Jobs queued for a thread.
    pub waiting: usize,
    /// Most jobs ever queued at once.
    pub peak_waiting: usize,
    /// Jobs run since start.
    pub ran: u64,
}

thread_local! {
    /// The blocking pool of the worker running this thread (set on worker threads).
    static CURRENT: RefCell<Option<BlockingHandle>> = const { RefCell::new(None) };
    /// On a pool thread: the worker whose pool it serves.
    pub(crate) static POOL_OF: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// The blocking pool of the worker running the calling thread; `None` off the workers.
#[must_use]
pub fn current() -> Option<BlockingHandle> {
    CURRENT.with(|c| c.borrow().clone())
}

pub(crate) fn set_current(handle: Option<BlockingHandle>) {
    CURRENT.with(|c| *c.borrow_mut() = handle);
}

impl BlockingPool {
    /// Starts `threads` threads for worker `worker`, with room for `queue_depth` more jobs
    /// waiting.
    ///
    /// # Errors
    /// If a thread cannot be spawned.
    ///
    /// # Panics
    /// If `threads` is 0.
    pub fn start(worker: usize, threads: usize, queue_depth: usize) -> std::io::Result<Self> {
        assert!(threads >= 1, "a blocking pool needs a thread");
        let shared = Arc::new(Shared {
            queue: Queue::new(),
            room: Arc::new(Semaphore::new(threads + queue_depth)),
            running: AtomicUsize::new(0),
            peak_waiting: AtomicUsize::new(0),
            ran: AtomicU64::new(0),
        });
        let mut pool = Self {
            shared,
            threads: Vec::with_capacity(threads),
        };
        for n in 0..threads {
            let queue = Arc::clone(&pool.shared.queue);
            let thread = std::thread::Builder::new()
                .name(format!("granary-blk-{worker}-{n}"))
                .spawn(move || {
                    POOL_OF.with(|p| p.set(Some(worker)));
                    queue.serve();
                })?;
            pool.threads.push(thread);
        }
        Ok(pool)
    }

    /// The default pool of worker `worker` (sizes from [`crate::limits`]).
    ///
    /// # Errors
    /// If a thread cannot be spawned.
    pub fn for_worker(worker: usize) -> std::io::Result<Self> {
        Self::start(
            worker,
            limits::BLOCKING_THREADS_PER_WORKER,
            limits::BLOCKING_QUEUE_PER_WORKER,
        )
    }

    #[must_use]
    pub fn handle(&self) -> BlockingHandle {
        BlockingHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    #[must_use]
    pub fn load(&self) -> PoolLoad {
        self.handle().load()
    }
}

impl Drop for BlockingPool {
    fn drop(&mut self) {
        self.shared.room.close();
        self.shared.queue.close_discarding();
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                tracing::error!("a blocking-pool thread panicked");
            }
        }
    }
}

impl BlockingHandle {
    /// Runs `job` on a pool thread once there is room, and returns its result; `None` if
    /// the pool closed before it ran or the job panicked.
    pub async fn run<R: Send + 'static>(
        &self,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> Option<R> {
        let permit = Arc::clone(&self.shared.room).acquire_owned().await.ok()?;
        let (done, result) = tokio::sync::oneshot::channel();
        let shared = Arc::clone(&self.shared);
        self.shared.queue.push(Box::new(move || {
            shared.running.fetch_add(1, Ordering::Relaxed);
            let r = std::panic::catch_unwind(AssertUnwindSafe(job));
            // Counted before the result is handed back: once the call is answered, a
            // scrape of the metrics already shows it ran and is no longer running.
            shared.running.fetch_sub(1, Ordering::Relaxed);
            shared.ran.fetch_add(1, Ordering::Relaxed);
            drop(permit);
            match r {
                Ok(r) => {
                    let _ = done.send(r);
                }
                Err(_) => tracing::error!("a call on the blocking pool panicked"),
            }
        }));
        let waiting = self.shared.queue.len();
        self.shared
            .peak_waiting
            .fetch_max(waiting, Ordering::Relaxed);
        result.await.ok()
    }

    #[must_use]
    pub fn load(&self) -> PoolLoad {
        PoolLoad {
            running: self.shared.running.load(Ordering::Relaxed),
            waiting: self.shared.queue.len(),
            peak_waiting: self.shared.peak_waiting.load(Ordering::Relaxed),
            ran: self.shared.ran.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn jobs_run_on_named_threads_that_know_their_worker() {
        let pool = BlockingPool::start(3, 2, 4).unwrap();
        let h = pool.handle();
        let (name, home) = rt()
            .block_on(h.run(|| {
                let name = std::thread::current().name().map(str::to_owned);
                (name, crate::home_worker())
            }))
            .unwrap();
        assert!(name.unwrap().starts_with("granary-blk-3-"));
        assert_eq!(home, Some(3));
    }

    #[test]
    fn a_panicking_job_answers_none_and_the_thread_serves_on() {
        let pool = BlockingPool::start(0, 1, 1).unwrap();
        let h = pool.handle();
        let rt = rt();
        assert_eq!(rt.block_on(h.run(|| -> u32 { panic!("boom") })), None);
        assert_eq!(rt.block_on(h.run(|| 7)), Some(7));
    }

    /// A full pool makes callers wait for room: never more than `queue_depth` jobs queued
    /// however many callers there are, and every caller is served once room comes.
    #[test]
    fn a_full_pool_pushes_back_instead_of_queueing() {
        let (threads, depth, callers) = (2, 3, 40);
        let pool = BlockingPool::start(0, threads, depth).unwrap();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(std::sync::Mutex::new(release_rx));
        let rt = rt();
        let local = tokio::task::LocalSet::new();
        let finished = Arc::new(AtomicUsize::new(0));
        for _ in 0..callers {
            let (h, rx, finished) = (
                pool.handle(),
                Arc::clone(&release_rx),
                Arc::clone(&finished),
            );
            local.spawn_local(async move {
                h.run(move || {
                    let _ = rx.lock().unwrap().recv();
                })
                .await
                .unwrap();
                finished.fetch_add(1, Ordering::Relaxed);
            });
        }
        local.block_on(&rt, async {
            tokio::time::sleep(Duration::from_millis(100)).await;
        });
        let load = pool.load();
        assert_eq!(load.running, threads, "{load:?}");
        assert_eq!(load.waiting, depth, "{load:?}");
        assert_eq!(
            pool.shared.room.available_permits(),
            0,
            "the rest wait for room"
        );
        for _ in 0..callers {
            release_tx.send(()).unwrap();
        }
        local.block_on(&rt, async {
            while finished.load(Ordering::Relaxed) < callers {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        // Room is taken before a job is queued, so even before a thread picks its job
        // up no more than threads + depth were ever queued.
        assert!(
            pool.load().peak_waiting <= threads + depth,
            "{:?}",
            pool.load()
        );
        assert_eq!(pool.shared.room.available_permits(), threads + depth);
    }

    #[test]
    fn dropping_the_pool_joins_its_threads_and_refuses_new_jobs() {
        let pool = BlockingPool::start(5, 2, 2).unwrap();
        let h = pool.handle();
        drop(pool);
        assert_eq!(rt().block_on(h.run(|| 1)), None);
        let alive: Vec<_> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|c| c.starts_with("granary-blk-5-"))
            .collect();
        assert!(alive.is_empty(), "{alive:?}");
    }
}
