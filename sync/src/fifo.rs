//! The design the scalable lock replaced: one mutex per file guarding a FIFO of every
//! request, granted or waiting (FreeBSD's range lock from 2009 until 2023, which queued
//! requests under the vnode interlock).
//!
//! A request is granted when no request queued before it conflicts with it, whether that
//! earlier one holds its range yet or still waits: nobody overtakes a conflicting request,
//! so writers do not starve, and every lock and unlock of every range of the file takes the
//! same mutex, which is what made readers of disjoint ranges serialize.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::sync::PoisonError;

use crate::prim::{Condvar, Mutex, MutexGuard};

#[derive(Debug, Clone, Copy)]
struct Request {
    id: u64,
    start: u64,
    end: u64,
    write: bool,
}

impl Request {
    fn conflicts(&self, other: &Request) -> bool {
        (self.write || other.write) && self.start < other.end && other.start < self.end
    }
}

#[derive(Debug, Default)]
struct Queue {
    /// In arrival order, so ids ascend.
    requests: VecDeque<Request>,
    next_id: u64,
    /// Threads inside `Condvar::wait`; a release notifies only if there are any.
    waiters: usize,
}

impl Queue {
    fn position(&self, id: u64) -> usize {
        let found = self.requests.binary_search_by_key(&id, |r| r.id);
        found.unwrap_or_else(|_| unreachable!("request {id} is queued until released"))
    }

    /// True if a request queued before `id` conflicts with it.
    fn blocked(&self, id: u64) -> bool {
        let at = self.position(id);
        let me = self.requests[at];
        self.requests.range(..at).any(|r| r.conflicts(&me))
    }

    fn push(&mut self, start: u64, end: u64, write: bool) -> Request {
        let request = Request {
            id: self.next_id,
            start,
            end,
            write,
        };
        self.next_id += 1;
        self.requests.push_back(request);
        request
    }
}

/// A per-file mutex-protected FIFO of ranges.
#[derive(Debug)]
pub(crate) struct Fifo {
    queue: Mutex<Queue>,
    cond: Condvar,
}

impl Fifo {
    pub(crate) fn new() -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
            cond: Condvar::new(),
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        // The queue is only changed by infallible code, so a poisoned mutex still guards
        // a consistent queue.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a request and waits until no earlier one conflicts; returns its id.
    pub(crate) fn lock(&self, start: u64, end: u64, write: bool) -> u64 {
        let mut queue = self.queue();
        let id = queue.push(start, end, write).id;
        while queue.blocked(id) {
            queue.waiters += 1;
            queue = self
                .cond
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner);
            queue.waiters -= 1;
        }
        id
    }

    /// Grants the request only if nothing queued conflicts with it.
    pub(crate) fn try_lock(&self, start: u64, end: u64, write: bool) -> Option<u64> {
        let mut queue = self.queue();
        let probe = Request {
            id: u64::MAX,
            start,
            end,
            write,
        };
        if queue.requests.iter().any(|r| r.conflicts(&probe)) {
            return None;
        }
        Some(queue.push(start, end, write).id)
    }

    pub(crate) fn unlock(&self, id: u64) {
        let mut queue = self.queue();
        let at = queue.position(id);
        queue.requests.remove(at);
        if queue.waiters > 0 {
            self.cond.notify_all();
        }
    }
}
