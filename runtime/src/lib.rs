//! Per-core workers: one thread per core, each running its own single-threaded event loop
//! (a tokio current-thread runtime). Workers are not pinned unless asked ([`Pinning`]): a
//! pinned worker cannot leave a core the kernel also wakes a local client onto, and a
//! large reply then waits for that client's copy on the same core (see [`Pinning`]).
//!
//! A connection is handed to one worker and stays there for its whole life, so its
//! state, buffers and (later) timers and caches stay in one core's cache and are never
//! contended. Work that can sleep for long (`fsync`, reads from the disk, waits for a
//! decode job) must not run on a worker's loop: each worker has its own bounded
//! [`blocking`] pool, and a connection runs a request there when the backend answers that
//! it would block (see `rpc::offload`).
//!
//! The runtime promises: [`Workers::submit`] runs the future on the chosen worker;
//! [`Workers::least_loaded`] picks the worker with the fewest live jobs; on a worker,
//! [`blocking::current`] is that worker's pool; shutdown waits for every submitted job to
//! finish (the jobs themselves watch the server's shutdown signal) up to a deadline, then
//! closes each worker's blocking pool and joins its threads.
#![deny(unsafe_code)]

pub mod blocking;
pub mod decode;
pub use sync::groups;
pub mod limits;
mod queue;
pub mod sched;
pub mod timers;

pub use limits::MAX_WORKERS;

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

type Job = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>> + Send>;

struct Worker {
    jobs: mpsc::UnboundedSender<Job>,
    live: Arc<AtomicUsize>,
    pool: blocking::BlockingHandle,
    thread: JoinHandle<()>,
}

/// Whether each worker thread is bound to one core.
///
/// `Free` is the default. Measured on the 2-core bench machine (2026-11-28, load 9-10,
/// one-call-at-a-time 1 MiB NFSv3 READs from the mem backend, 2,000 per pass, the bench
/// client bound to one core with `taskset`): pinned workers made 1,121-1,536 READs/s
/// while the client sat on the other core and 215-243/s when it sat on the connection's
/// worker's core (64 KiB READs: 21,519 against 656/s); unpinned, 1,031-1,350/s wherever
/// the client sat. A client on the same host is woken onto its server's core (the
/// scheduler's wake-affine choice), which is where a pinned worker cannot leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pinning {
    /// The kernel places the worker threads.
    #[default]
    Free,
    /// Worker `i` is bound to core `i` modulo the core count.
    PerCore,
}

/// The set of workers of one server.
pub struct Workers {
    workers: Vec<Worker>,
}

thread_local! {
    static CURRENT_WORKER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The index of the worker running the calling thread, if it is a worker.
#[must_use]
pub fn current_worker() -> Option<usize> {
    CURRENT_WORKER.with(Cell::get)
}

/// The worker the calling thread works for: the worker itself, or, on a thread of a
/// worker's blocking pool, that worker.
#[must_use]
pub fn home_worker() -> Option<usize> {
    current_worker().or_else(|| blocking::POOL_OF.with(Cell::get))
}

/// Told when a worker's event loop parks (no runnable task: the worker is idle) and
/// unparks. The timer hierarchy uses it to hand idle workers' timers to a busy one.
pub trait WorkerHooks: Send + Sync + 'static {
    fn parked(&self, worker: usize);
    fn unparked(&self, worker: usize);
}

impl WorkerHooks for timers::Timers {
    fn parked(&self, worker: usize) {
        self.worker_idle(worker);
    }
    fn unparked(&self, worker: usize) {
        self.worker_active(worker);
    }
}

impl Workers {
    /// Starts `count` workers named `{name}-{i}`, not pinned.
    /// `drain` bounds how long a worker waits for its jobs to finish at shutdown.
    ///
    /// # Errors
    /// If a thread or an event loop cannot be created.
    pub fn start(count: usize, name: &str, drain: Duration) -> std::io::Result<Self> {
        Self::start_with_hooks(count, name, drain, None, Pinning::Free)
    }

    /// Like [`Workers::start`], calling `hooks` when a worker parks and unparks, and
    /// binding worker `i` to core `i` (round-robin) with [`Pinning::PerCore`].
    ///
    /// # Errors
    /// If a thread or an event loop cannot be created.
    pub fn start_with_hooks(
        count: usize,
        name: &str,
        drain: Duration,
        hooks: Option<Arc<dyn WorkerHooks>>,
        pinning: Pinning,
    ) -> std::io::Result<Self> {
        assert!(
            (1..=MAX_WORKERS).contains(&count),
            "worker count {count} out of range"
        );
        let cores = match pinning {
            Pinning::PerCore => core_affinity::get_core_ids().unwrap_or_default(),
            Pinning::Free => Vec::new(),
        };
        let mut workers = Vec::with_capacity(count);
        for i in 0..count {
            let (tx, rx) = mpsc::unbounded_channel();
            let live = Arc::new(AtomicUsize::new(0));
            let core = (!cores.is_empty()).then(|| cores[i % cores.len()]);
            let mut builder = tokio::runtime::Builder::new_current_thread();
            builder.enable_all();
            if let Some(h) = &hooks {
                let (park, unpark) = (Arc::clone(h), Arc::clone(h));
                builder.on_thread_park(move || park.parked(i));
                builder.on_thread_unpark(move || unpark.unparked(i));
            }
            let rt = builder.build()?;
            let pool = blocking::BlockingPool::for_worker(i)?;
            let pool_handle = pool.handle();
            let thread = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    CURRENT_WORKER.with(|c| c.set(Some(i)));
                    blocking::set_current(Some(pool.handle()));
                    if let Some(core) = core {
                        if !core_affinity::set_for_current(core) {
                            tracing::debug!(worker = i, "could not pin worker to its core");
                        }
                    }
                    let local = tokio::task::LocalSet::new();
                    local.block_on(&rt, run_worker(rx, drain));
                    // Every job has ended (or been abandoned at the deadline): close the
                    // pool and join its threads.
                    blocking::set_current(None);
                    drop(local);
                    drop(pool);
                })?;
            workers.push(Worker {
                jobs: tx,
                live,
                pool: pool_handle,
                thread,
            });
        }
        Ok(Self { workers })
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// The worker with the fewest live jobs (lowest index on ties).
    #[must_use]
    pub fn least_loaded(&self) -> usize {
        (0..self.workers.len())
            .min_by_key(|&i| self.workers[i].live.load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    /// Live jobs per worker (for logs and tests).
    #[must_use]
    pub fn load(&self) -> Vec<usize> {
        self.workers
            .iter()
            .map(|w| w.live.load(Ordering::Relaxed))
            .collect()
    }

    /// Each worker's blocking pool, in worker order (for metrics and tests).
    #[must_use]
    pub fn pools(&self) -> Vec<blocking::BlockingHandle> {
        self.workers.iter().map(|w| w.pool.clone()).collect()
    }

    /// Runs the future made by `make` on worker `index`. `make` runs on that worker, so
    /// the future may use worker-local resources (e.g. register a socket with its loop).
    ///
    /// # Panics
    /// If `index` is out of range.
    pub fn submit<F, Fut>(&self, index: usize, make: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let worker = &self.workers[index];
        let live = Arc::clone(&worker.live);
        live.fetch_add(1, Ordering::Relaxed);
        let job: Job = Box::new(move || {
            Box::pin(async move {
                make().await;
                live.fetch_sub(1, Ordering::Relaxed);
            })
        });
        if worker.jobs.send(job).is_err() {
            tracing::error!(worker = index, "worker has stopped; job dropped");
        }
    }

    /// Stops taking jobs and waits for every worker to finish its jobs (up to the drain
    /// deadline given at start).
    pub fn join(self) {
        let threads: Vec<_> = self
            .workers
            .into_iter()
            .map(|w| {
                drop(w.jobs);
                w.thread
            })
            .collect();
        for t in threads {
            if t.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
    }
}

async fn run_worker(mut rx: mpsc::UnboundedReceiver<Job>, drain: Duration) {
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            job = rx.recv() => match job {
                Some(job) => { tasks.spawn_local(job()); }
                None => break,
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    let drained =
        tokio::time::timeout(drain, async { while tasks.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(
            left = tasks.len(),
            "shutdown deadline passed; abandoning jobs"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn jobs_run_on_their_worker_thread_and_join_waits() {
        let workers = Workers::start(2, "test", Duration::from_secs(5)).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        for i in 0..4 {
            let seen = Arc::clone(&seen);
            workers.submit(i % 2, move || async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let name = std::thread::current().name().unwrap().to_string();
                seen.lock().unwrap().push((i, name));
            });
        }
        workers.join();
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        let expect: Vec<_> = (0..4).map(|i| (i, format!("test-{}", i % 2))).collect();
        assert_eq!(seen, expect);
    }

    /// The cores a worker thread may run on, from its `Cpus_allowed_list`.
    fn allowed_on(workers: &Workers, w: usize) -> String {
        let seen = Arc::new(Mutex::new(String::new()));
        let out = Arc::clone(&seen);
        workers.submit(w, move || async move {
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            let line = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .unwrap();
            *out.lock().unwrap() = line.trim().to_owned();
        });
        while seen.lock().unwrap().is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let s = seen.lock().unwrap().clone();
        s
    }

    #[test]
    fn workers_are_left_to_the_scheduler_unless_pinned() {
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let mine = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let mine = mine
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_owned();
        let free = Workers::start(2, "free", Duration::from_secs(5)).unwrap();
        for w in 0..2 {
            assert_eq!(allowed_on(&free, w), mine, "worker {w} is not pinned");
        }
        free.join();
        if cores.len() < 2 {
            return;
        }
        let pinned =
            Workers::start_with_hooks(2, "pinned", Duration::from_secs(5), None, Pinning::PerCore)
                .unwrap();
        for (w, core) in cores.iter().take(2).enumerate() {
            assert_eq!(allowed_on(&pinned, w), core.id.to_string());
        }
        pinned.join();
    }

    #[test]
    fn each_worker_has_its_own_blocking_pool_joined_at_shutdown() {
        let workers = Workers::start(2, "pooled", Duration::from_secs(5)).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        for w in 0..2 {
            let seen = Arc::clone(&seen);
            workers.submit(w, move || async move {
                let pool = blocking::current().expect("a worker has a pool");
                let on = pool
                    .run(|| {
                        let name = std::thread::current().name().map(str::to_owned);
                        // "<pid>/task/<tid>": this thread's own directory in /proc.
                        let me = std::fs::read_link("/proc/thread-self").unwrap();
                        (name, me)
                    })
                    .await;
                seen.lock().unwrap().push((w, on));
            });
        }
        workers.join();
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        assert_eq!(seen.len(), 2);
        for (w, on) in seen {
            let (name, me) = on.expect("the pool ran the job");
            let name = name.unwrap();
            assert!(name.starts_with(&format!("granary-blk-{w}-")), "{name}");
            assert!(
                !std::path::Path::new("/proc").join(me).exists(),
                "join closed the pools and joined their threads ({name} lives on)"
            );
        }
        assert!(blocking::current().is_none(), "no pool off the workers");
    }

    #[test]
    fn least_loaded_prefers_idle_workers() {
        let workers = Workers::start(2, "load", Duration::from_secs(5)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = Arc::new(Mutex::new(rx));
        let hold = Arc::clone(&rx);
        workers.submit(0, move || async move {
            while hold.lock().unwrap().try_recv().is_err() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        assert_eq!(workers.load(), vec![1, 0]);
        assert_eq!(workers.least_loaded(), 1);
        tx.send(()).unwrap();
        workers.join();
    }
}
