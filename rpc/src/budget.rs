//! Memory budgets in bytes: what one connection, and the whole server, may hold in request
//! records being read or run and in replies waiting to be sent.
//!
//! A connection charges a request's record fragment by fragment *before* reading it, then
//! the largest reply its procedure may produce; when the reply exists the charge shrinks
//! to its real size, and it is given back once the reply is written. A charge that does
//! not fit waits (FIFO), so a connection over its budget stops reading and TCP pushes back
//! on its client; the server budget bounds the sum over every connection.
//!
//! Promises: bytes held by a connection ≤ its budget; bytes held by all ≤ the server
//! budget; a single charge is capped at the connection budget, so nothing waits forever
//! for room that cannot exist.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes every connection of one server draws from.
#[derive(Debug)]
pub struct ServerBudget {
    bytes: Arc<Semaphore>,
    total_bytes: usize,
}

impl ServerBudget {
    /// A budget of `total_bytes` (at least 1).
    #[must_use]
    pub fn new(total_bytes: usize) -> Arc<Self> {
        let total_bytes = total_bytes.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Self {
            bytes: Arc::new(Semaphore::new(total_bytes)),
            total_bytes,
        })
    }

    /// Bytes currently charged by all connections.
    #[must_use]
    pub fn in_use_bytes(&self) -> usize {
        self.total_bytes - self.bytes.available_permits()
    }

    #[must_use]
    pub fn total_bytes(&self) -> usize {
        self.total_bytes
    }
}

/// One connection's budget, drawing on the server's.
#[derive(Debug)]
pub struct ConnBudget {
    bytes: Arc<Semaphore>,
    total_bytes: usize,
    server: Arc<ServerBudget>,
}

impl ConnBudget {
    #[must_use]
    pub fn new(total_bytes: usize, server: Arc<ServerBudget>) -> Arc<Self> {
        let total_bytes = total_bytes.clamp(1, server.total_bytes);
        Arc::new(Self {
            bytes: Arc::new(Semaphore::new(total_bytes)),
            total_bytes,
            server,
        })
    }

    /// Bytes currently charged by this connection.
    #[must_use]
    pub fn in_use_bytes(&self) -> usize {
        self.total_bytes - self.bytes.available_permits()
    }

    /// An empty reservation against this budget.
    #[must_use]
    pub fn reservation(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: Arc::clone(self),
            conn: None,
            server: None,
        }
    }
}

/// Bytes held against a connection's and the server's budget; given back on drop.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<ConnBudget>,
    conn: Option<OwnedSemaphorePermit>,
    server: Option<OwnedSemaphorePermit>,
}

impl Reservation {
    /// Bytes held.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.conn
            .as_ref()
            .map_or(0, OwnedSemaphorePermit::num_permits)
    }

    /// Waits until `more` bytes fit (capped so the whole reservation stays within the
    /// connection budget), then holds them.
    pub async fn grow(&mut self, more: usize) {
        let more = more.min(self.budget.total_bytes - self.bytes());
        if more == 0 {
            return;
        }
        let n = u32::try_from(more).unwrap_or(u32::MAX);
        // Connection first, then server: every connection takes them in this order.
        let Ok(conn) = Arc::clone(&self.budget.bytes).acquire_many_owned(n).await else {
            return;
        };
        let Ok(server) = Arc::clone(&self.budget.server.bytes)
            .acquire_many_owned(n)
            .await
        else {
            return;
        };
        merge(&mut self.conn, conn);
        merge(&mut self.server, server);
    }

    /// Holds exactly `bytes` (capped at the connection budget), giving back any excess
    /// at once and waiting for room to grow.
    pub async fn resize(&mut self, bytes: usize) {
        let held = self.bytes();
        if !self.shrink_to(bytes) {
            self.grow(bytes - held).await;
        }
    }

    /// Holds exactly `bytes` when that is no more than it holds, giving back the excess at
    /// once; returns false, holding what it held, when it would have to grow.
    pub fn shrink_to(&mut self, bytes: usize) -> bool {
        let held = self.bytes();
        if bytes > held {
            return false;
        }
        let excess = held - bytes;
        if excess > 0 {
            for permit in [&mut self.conn, &mut self.server] {
                if let Some(p) = permit.as_mut() {
                    drop(p.split(excess));
                }
            }
        }
        true
    }
}

fn merge(slot: &mut Option<OwnedSemaphorePermit>, more: OwnedSemaphorePermit) {
    match slot {
        Some(p) => p.merge(more),
        None => *slot = Some(more),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn charges_are_bounded_and_given_back() {
        let server = ServerBudget::new(100);
        let conn = ConnBudget::new(60, Arc::clone(&server));
        let mut a = conn.reservation();
        a.grow(1000).await;
        assert_eq!(a.bytes(), 60, "capped at the connection budget");
        assert_eq!(server.in_use_bytes(), 60);
        a.resize(10).await;
        assert_eq!(
            (a.bytes(), conn.in_use_bytes(), server.in_use_bytes()),
            (10, 10, 10)
        );
        let other = ConnBudget::new(60, Arc::clone(&server));
        let mut b = other.reservation();
        b.grow(60).await;
        assert_eq!(server.in_use_bytes(), 70);
        // A third charge must wait for the server budget.
        let third = ConnBudget::new(60, Arc::clone(&server));
        let mut c = third.reservation();
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(20), c.grow(40));
        assert!(waiting.await.is_err(), "over the server budget must wait");
        drop(b);
        c.grow(40).await;
        assert_eq!(server.in_use_bytes(), 50);
        drop((a, c));
        assert_eq!(server.in_use_bytes(), 0);
    }
}
