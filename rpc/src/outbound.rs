//! A connection's way out. A record (a reply, or a call to the client) either goes into
//! the socket at once, written by the task that has it, or is queued for the connection's
//! writer task, which gathers what is ready into one socket write (see `conn`).
//!
//! Writing at once is for the reply to a request answered where it was read when nothing
//! else waits to be written: one call at a time, as most clients send their small calls,
//! then costs one `write` and no hand-over to another task.
//!
//! The promise: records never interleave, and none is lost. One lock orders the two ways:
//! a record goes straight into the socket only while the writer holds nothing (its queue
//! empty and its buffer flushed: `busy` false), and whatever of it the socket did not take
//! is queued before the lock is let go, so it goes out before anything queued later. Any
//! record queued sets `busy`, which only the writer clears, once it has flushed every
//! record and found its queue empty under the same lock.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::conn::{Held, Queued};
use crate::reply::Reply;

/// The sending side, shared by the connection's reader, its request tasks and its back
/// channel. The writer's queue closes when every clone is gone.
pub(crate) struct Outbound {
    queue: mpsc::UnboundedSender<Queued>,
    busy: Arc<Mutex<bool>>,
}

/// The writer task's side: its queue, and the right to say it holds nothing.
pub(crate) struct Drain {
    pub(crate) queue: mpsc::UnboundedReceiver<Queued>,
    busy: Arc<Mutex<bool>>,
}

/// What [`Outbound::write_now`] did with a reply.
pub(crate) enum Now {
    /// Written whole, or what the socket did not take is queued, or the socket is broken
    /// (the reader and the writer find out on their next call).
    Done,
    /// Something waits to be written: the reply is given back, to be queued.
    Busy(Bytes, Held),
}

fn lock(busy: &Mutex<bool>) -> MutexGuard<'_, bool> {
    // Every change under the lock is one store of a bool.
    busy.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A new way out and its writer's side.
pub(crate) fn outbound() -> (Outbound, Drain) {
    let (tx, rx) = mpsc::unbounded_channel();
    let busy = Arc::new(Mutex::new(false));
    let drain = Drain {
        queue: rx,
        busy: Arc::clone(&busy),
    };
    (Outbound { queue: tx, busy }, drain)
}

impl Outbound {
    /// Queues a record for the writer.
    ///
    /// # Errors
    /// The record back when the writer is gone (the connection ended).
    pub(crate) fn queue(&self, item: Queued) -> Result<(), Box<Queued>> {
        let mut busy = lock(&self.busy);
        *busy = true;
        self.queue.send(item).map_err(|e| Box::new(e.0))
    }

    /// Writes `head`, a whole reply record held by `held`, into `sock` now if nothing
    /// waits to be written; what the socket does not take is queued behind nothing.
    pub(crate) fn write_now(&self, sock: &TcpStream, head: Bytes, held: Held) -> Now {
        let mut busy = lock(&self.busy);
        if *busy {
            return Now::Busy(head, held);
        }
        let written = match sock.try_write(&head) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(e) => {
                tracing::debug!(error = %e, "reply write failed");
                return Now::Done;
            }
        };
        if written == head.len() {
            return Now::Done;
        }
        debug_assert!(written < head.len());
        *busy = true;
        let rest = Reply::from(head.slice(written..));
        if self.queue.send((rest, Some(held))).is_err() {
            tracing::debug!("reply dropped: the connection's writer is gone");
        }
        Now::Done
    }
}

impl Drain {
    /// Called by the writer with its buffer flushed: if its queue is empty, it holds
    /// nothing from now until the next record is queued. Returns whether so.
    pub(crate) fn settle(&self) -> bool {
        let mut busy = lock(&self.busy);
        if !self.queue.is_empty() {
            return false;
        }
        *busy = false;
        true
    }
}
