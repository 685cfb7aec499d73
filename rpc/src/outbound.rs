//! A connection's way out. A record (a reply, or a call to the client) either goes into
//! the socket at once, written by the task that has it, or is queued for the connection's
//! writer task, which gathers what is ready into one socket write (see `conn`).
//!
//! Writing at once is for the reply to a request answered where it was read when nothing
//! else waits to be written: one call at a time, as most clients send their small calls,
//! then costs one `write` and no hand-over to another task. A reply whose data a backend
//! handed over in memory (a large READ from the mem or object backend) goes the same way,
//! its head, pieces and padding in one `writev`.
//!
//! The promise: records never interleave, and none is lost. One lock orders the two ways:
//! a record goes straight into the socket only while the writer holds nothing (its queue
//! empty and its buffer flushed: `busy` false), and whatever of it the socket did not take
//! is queued before the lock is let go, so it goes out before anything queued later. Any
//! record queued sets `busy`, which only the writer clears, once it has flushed every
//! record and found its queue empty under the same lock.

use std::io::IoSlice;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::conn::{Held, Queued};
use crate::limits;
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
    Busy(Reply, Held),
}

/// Drops from the front of `pieces` the `n` bytes a write took: the pieces it took whole,
/// and the start of the next.
pub(crate) fn consume(pieces: &mut Vec<Bytes>, mut n: usize) {
    let whole = pieces
        .iter()
        .take_while(|p| {
            let took = p.len() <= n;
            if took {
                n -= p.len();
            }
            took
        })
        .count();
    pieces.drain(..whole);
    if n > 0 {
        pieces[0] = pieces[0].slice(n..);
    }
}

/// The first pieces of `pieces`, as many as one `writev` takes.
pub(crate) fn io_slices(pieces: &[Bytes]) -> Vec<IoSlice<'_>> {
    pieces
        .iter()
        .take(limits::MAX_IOVECS)
        .map(|p| IoSlice::new(p))
        .collect()
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

    /// Writes `reply`, a whole record held by `held` with its body (if any) in memory,
    /// into `sock` now if nothing waits to be written; what the socket does not take is
    /// queued behind nothing.
    pub(crate) fn write_now(&self, sock: &TcpStream, reply: Reply, held: Held) -> Now {
        if reply.body.is_none() {
            return self.write_head_now(sock, reply.head, held);
        }
        let Some(mut pieces) = reply.memory_pieces() else {
            return Now::Busy(reply, held);
        };
        let Some(mut busy) = self.idle() else {
            return Now::Busy(reply, held);
        };
        let Some(written) = try_put(sock, &pieces) else {
            return Now::Done;
        };
        consume(&mut pieces, written);
        if !pieces.is_empty() {
            self.queue_rest(&mut busy, pieces, held);
        }
        Now::Done
    }

    /// [`Outbound::write_now`] for a reply that is all head (every small reply): one
    /// `write` of it, with no list of pieces to build.
    fn write_head_now(&self, sock: &TcpStream, head: Bytes, held: Held) -> Now {
        let Some(mut busy) = self.idle() else {
            return Now::Busy(Reply::from(head), held);
        };
        let Some(written) = try_put(sock, std::slice::from_ref(&head)) else {
            return Now::Done;
        };
        if written < head.len() {
            self.queue_rest(&mut busy, [head.slice(written..)], held);
        }
        Now::Done
    }

    /// The lock, if nothing waits to be written (a record may go into the socket while
    /// it is held).
    fn idle(&self) -> Option<MutexGuard<'_, bool>> {
        let busy = lock(&self.busy);
        (!*busy).then_some(busy)
    }

    /// Queues what the socket did not take of a record written at once, in order, under
    /// the lock that found the writer idle (so it goes out before anything queued
    /// later); the last piece holds the request's budget until it is written.
    fn queue_rest(&self, busy: &mut bool, pieces: impl IntoIterator<Item = Bytes>, held: Held) {
        *busy = true;
        let mut held = Some(held);
        let mut pieces = pieces.into_iter().peekable();
        while let Some(piece) = pieces.next() {
            let hold = if pieces.peek().is_none() {
                held.take()
            } else {
                None
            };
            if self.queue.send((Reply::from(piece), hold)).is_err() {
                tracing::debug!("reply dropped: the connection's writer is gone");
                return;
            }
        }
    }
}

/// One write of `pieces` into `sock` without waiting (`write` for one piece, `writev`
/// for more): how many bytes it took (none when the socket is full), or `None` when the
/// socket is broken (the reader and the writer find out on their next call).
fn try_put(sock: &TcpStream, pieces: &[Bytes]) -> Option<usize> {
    let done = match pieces {
        [one] => sock.try_write(one),
        _ => sock.try_write_vectored(&io_slices(pieces)),
    };
    match done {
        Ok(n) => Some(n),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Some(0),
        Err(e) => {
            tracing::debug!(error = %e, "reply write failed");
            None
        }
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

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::reply::Body;

    /// A request's hold, as a connection's reader makes one.
    fn held() -> Held {
        let clock = Arc::new(gtime::ManualClock::new(gtime::Timestamp::default()));
        let table = crate::table::ConnTable::new(crate::table::AdmitLimits::default(), clock);
        let ticket = table.admit(([127, 0, 0, 1], 1).into()).unwrap();
        let server = crate::budget::ServerBudget::new(1 << 20);
        let budget = crate::budget::ConnBudget::new(1 << 20, server);
        let slot = Arc::new(tokio::sync::Semaphore::new(1))
            .try_acquire_owned()
            .unwrap();
        Held::new(slot, budget.reservation(), Arc::clone(ticket.state()))
    }

    /// What becomes of `reply` written at once into a socket its peer does not read
    /// (loopback TCP takes a few MiB at most): the record as the peer gets it, the
    /// socket's part followed by the writer's queue, and which queued records hold the
    /// request.
    async fn written_at_once(reply: Reply) -> (Vec<u8>, Vec<bool>, Outbound) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let sock = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let mut peer = listener.accept().unwrap().0;
        // A close lost fails the read below instead of hanging it.
        peer.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let (out, mut drain) = outbound();
        let len = reply.clone().into_bytes().unwrap().len();
        assert!(matches!(out.write_now(&sock, reply, held()), Now::Done));
        let mut queued = Vec::new();
        let mut holds = Vec::new();
        while let Ok((r, h)) = drain.queue.try_recv() {
            queued.extend_from_slice(&r.into_bytes().unwrap());
            holds.push(h.is_some());
        }
        // Closed: the peer reads what the socket took, and then its end.
        drop(sock);
        let mut got = Vec::with_capacity(len);
        peer.read_to_end(&mut got).unwrap();
        got.extend(queued);
        (got, holds, out)
    }

    #[tokio::test]
    async fn what_the_socket_does_not_take_is_queued_in_order_the_last_holding() {
        let small = Reply::from(Bytes::from_static(b"a small reply"));
        let (got, holds, out) = written_at_once(small).await;
        assert_eq!(got, b"a small reply");
        assert!(holds.is_empty());
        assert!(
            out.idle().is_some(),
            "nothing queued: the next reply may go at once"
        );

        let head: Bytes = (0..16 << 20)
            .map(|i: u32| u8::try_from(i % 251).unwrap())
            .collect();
        let (got, holds, out) = written_at_once(Reply::from(head.clone())).await;
        assert_eq!(got, head);
        assert_eq!(holds, [true]);
        assert!(
            out.idle().is_none(),
            "queued: the next reply waits its turn"
        );

        let mut parts = pieces(&[80 << 10; 200]);
        parts.push(Bytes::from_static(b"odd"));
        let memory = Reply {
            head: Bytes::from_static(b"head"),
            body: Some(Body::Memory(parts)),
        };
        let whole = memory.clone().into_bytes().unwrap();
        let (got, holds, out) = written_at_once(memory).await;
        assert_eq!(got, whole);
        assert!(
            holds.len() > 1,
            "the socket took all but {} pieces",
            holds.len()
        );
        assert_eq!(holds.iter().filter(|h| **h).count(), 1);
        assert_eq!(holds.last(), Some(&true));
        assert!(out.idle().is_none());
    }

    fn pieces(lens: &[usize]) -> Vec<Bytes> {
        lens.iter()
            .enumerate()
            .map(|(i, &n)| Bytes::from(vec![u8::try_from(i).unwrap(); n]))
            .collect()
    }

    #[test]
    fn consume_drops_what_a_write_took() {
        let mut p = pieces(&[3, 5, 2]);
        consume(&mut p, 0);
        assert_eq!(p.iter().map(Bytes::len).collect::<Vec<_>>(), [3, 5, 2]);
        consume(&mut p, 4);
        assert_eq!(p.len(), 2);
        assert_eq!(&p[0][..], &[1; 4]);
        consume(&mut p, 4);
        assert_eq!(p, vec![Bytes::from(vec![2u8; 2])]);
        consume(&mut p, 2);
        assert!(p.is_empty());
    }

    #[test]
    fn a_reply_in_memory_is_its_head_pieces_and_padding() {
        let reply = Reply {
            head: Bytes::from_static(b"head"),
            body: Some(Body::Memory(pieces(&[5, 0, 2]))),
        };
        let all = reply.memory_pieces().unwrap();
        // The empty piece is left out; 7 bytes of data take 1 byte of padding.
        assert_eq!(all.iter().map(Bytes::len).collect::<Vec<_>>(), [4, 5, 2, 1]);
        assert_eq!(all.concat(), reply.clone().into_bytes().unwrap().to_vec());
        assert!(io_slices(&pieces(&[1; 100])).len() == limits::MAX_IOVECS);
    }
}
