//! Where a call that must block runs: the seam between a connection (on its worker's
//! event loop) and the blocking pool the server gives it (`runtime::blocking` in the
//! server, a plain thread in tests).
//!
//! A connection runs each request on its event loop with blocking forbidden
//! (`sync::blocking::forbidden`). A backend that is about to sleep (a sync, a read that
//! misses the page cache, a wait for a decode job) answers `WouldBlock` before it changes
//! anything, the dispatcher answers [`crate::dispatch::Unanswerable::Deferred`], and the
//! connection hands the same record to an [`Offload`]. The request keeps its in-flight
//! slot and its memory reservation meanwhile, so a full pool pushes back on the client
//! through the connection's own limits: its reader stops once every slot waits.

use std::future::Future;
use std::pin::Pin;

/// A job for a thread that may block.
pub type BlockingJob = Box<dyn FnOnce() + Send + 'static>;

/// A bounded place to run jobs that block.
pub trait Offload: Send + Sync {
    /// Runs `job` on a thread that may block. The future first waits for room (the
    /// bound is the back-pressure: nothing queues beyond it), then resolves once the job
    /// has run. `false` if the pool has stopped: the job was dropped without running.
    fn run(&self, job: BlockingJob) -> Pin<Box<dyn Future<Output = bool> + Send + 'static>>;
}
