//! The job queue shared by the decode workers and the blocking pools: a FIFO behind one
//! mutex that threads sleep on until a job or the close arrives. Unbounded by itself:
//! each user bounds what it pushes (the blocking pool with a semaphore, the decode
//! workers by their callers waiting for every job they queue).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

pub(crate) type Job = Box<dyn FnOnce() + Send>;

pub(crate) struct Queue {
    jobs: Mutex<(VecDeque<Job>, bool)>,
    ready: Condvar,
}

impl Queue {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            jobs: Mutex::new((VecDeque::new(), false)),
            ready: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, (VecDeque<Job>, bool)> {
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn push(&self, job: Job) {
        self.lock().0.push_back(job);
        self.ready.notify_one();
    }

    /// Jobs waiting for a thread.
    pub(crate) fn len(&self) -> usize {
        self.lock().0.len()
    }

    /// Serving threads finish the jobs queued so far, then return.
    pub(crate) fn close(&self) {
        self.lock().1 = true;
        self.ready.notify_all();
    }

    /// Like [`Queue::close`], dropping the jobs not started yet instead.
    pub(crate) fn close_discarding(&self) {
        let dropped = {
            let mut q = self.lock();
            q.1 = true;
            std::mem::take(&mut q.0)
        };
        self.ready.notify_all();
        drop(dropped);
    }

    /// Runs jobs until the queue is closed and empty.
    pub(crate) fn serve(&self) {
        loop {
            let mut q = self.lock();
            let job = loop {
                if let Some(job) = q.0.pop_front() {
                    break job;
                }
                if q.1 {
                    return;
                }
                q = self
                    .ready
                    .wait(q)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            };
            drop(q);
            job();
        }
    }
}
