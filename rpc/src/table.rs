//! Every open connection of a server: admission at accept (per client address and
//! global limits, reclaiming idle connections at the global limit), and the one periodic
//! scan that closes idle and stalled connections.
//!
//! Promises: at most `max_per_client` connections per client address and, past
//! `max_connections`, a new connection gets in only by displacing one that has been idle
//! for `reclaim_idle` (the idlest of the address holding the most connections), so a
//! client on another address gets in while one address holds its whole cap. The scan is
//! one timer for the whole table (not one per connection) and never blocks.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use crate::record::{Activity, ConnTimeouts, RecordError};

/// Admission limits, from CLI/config with defaults in [`crate::limits`].
#[derive(Debug, Clone, Copy)]
pub struct AdmitLimits {
    pub max_connections: usize,
    pub max_per_client: usize,
    pub reclaim_idle: Duration,
}

impl Default for AdmitLimits {
    fn default() -> Self {
        Self {
            max_connections: crate::limits::DEFAULT_MAX_CONNECTIONS,
            max_per_client: crate::limits::DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            reclaim_idle: crate::limits::DEFAULT_RECLAIM_IDLE,
        }
    }
}

/// Why a connection was closed by the server rather than by its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Idle,
    Stalled,
    WriteStalled,
    Reclaimed,
}

impl Verdict {
    fn of(e: &RecordError) -> Option<Self> {
        match e {
            RecordError::Idle(_) => Some(Self::Idle),
            RecordError::Stalled(_) => Some(Self::Stalled),
            RecordError::WriteStalled(_) => Some(Self::WriteStalled),
            RecordError::Reclaimed => Some(Self::Reclaimed),
            _ => None,
        }
    }
}

/// Why a new connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{open} connections from this address (limit {limit}, --max-connections-per-client)")]
    PerClient { open: usize, limit: usize },
    #[error("{open} open connections and none idle to reclaim (limit {limit}, --max-connections)")]
    Global { open: usize, limit: usize },
}

/// Counts of connection events, read by the metrics endpoint.
#[derive(Debug, Default)]
pub struct ConnCounters {
    pub accepted: AtomicU64,
    pub refused_per_client: AtomicU64,
    pub refused_global: AtomicU64,
    pub closed_idle: AtomicU64,
    pub closed_stalled: AtomicU64,
    pub closed_write_stalled: AtomicU64,
    pub reclaimed: AtomicU64,
}

impl ConnCounters {
    fn closed(&self, v: Verdict) {
        let c = match v {
            Verdict::Idle => &self.closed_idle,
            Verdict::Stalled => &self.closed_stalled,
            Verdict::WriteStalled => &self.closed_write_stalled,
            Verdict::Reclaimed => &self.reclaimed,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// One open connection as the table sees it.
pub struct ConnState {
    pub peer: SocketAddr,
    pub activity: Activity,
    verdict: watch::Sender<Option<RecordErrorKind>>,
}

/// A copyable stand-in for the [`RecordError`] a watchdog or reclaim ends a connection with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RecordErrorKind(Verdict, Duration);

impl ConnState {
    /// Ends the connection with `e` (the first verdict wins). Returns whether it was the first.
    fn kill(&self, e: &RecordError) -> bool {
        let Some(v) = Verdict::of(e) else {
            return false;
        };
        let after = match e {
            RecordError::Idle(d) | RecordError::Stalled(d) | RecordError::WriteStalled(d) => *d,
            _ => Duration::ZERO,
        };
        self.verdict.send_if_modified(|slot| {
            if slot.is_some() {
                return false;
            }
            *slot = Some(RecordErrorKind(v, after));
            true
        })
    }

    /// Resolves with the error the connection was ended with, once it is.
    pub async fn killed(&self) -> RecordError {
        let mut rx = self.verdict.subscribe();
        let Ok(v) = rx.wait_for(Option::is_some).await else {
            return std::future::pending().await;
        };
        match *v {
            Some(RecordErrorKind(Verdict::Idle, d)) => RecordError::Idle(d),
            Some(RecordErrorKind(Verdict::Stalled, d)) => RecordError::Stalled(d),
            Some(RecordErrorKind(Verdict::WriteStalled, d)) => RecordError::WriteStalled(d),
            _ => RecordError::Reclaimed,
        }
    }
}

struct Inner {
    next_id: u64,
    conns: HashMap<u64, Arc<ConnState>>,
    per_client: HashMap<IpAddr, usize>,
}

/// The server's connections.
pub struct ConnTable {
    clock: Arc<dyn gtime::Clock>,
    limits: AdmitLimits,
    inner: Mutex<Inner>,
    pub counters: ConnCounters,
}

/// A connection's place in the table; dropping it frees the place.
pub struct Ticket {
    table: Arc<ConnTable>,
    id: u64,
    state: Arc<ConnState>,
}

impl Ticket {
    #[must_use]
    pub fn state(&self) -> &Arc<ConnState> {
        &self.state
    }

    /// The connection's number, unique for the table's life.
    #[must_use]
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut inner = self.table.lock();
        inner.conns.remove(&self.id);
        let ip = self.state.peer.ip();
        if let Some(n) = inner.per_client.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                inner.per_client.remove(&ip);
            }
        }
    }
}

impl ConnTable {
    #[must_use]
    pub fn new(limits: AdmitLimits, clock: Arc<dyn gtime::Clock>) -> Arc<Self> {
        Arc::new(Self {
            clock,
            limits,
            inner: Mutex::new(Inner {
                next_id: 0,
                conns: HashMap::new(),
                per_client: HashMap::new(),
            }),
            counters: ConnCounters::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Open connections.
    #[must_use]
    pub fn open(&self) -> usize {
        self.lock().conns.len()
    }

    /// Admits a connection from `peer`, reclaiming an idle one if the table is full.
    ///
    /// # Errors
    /// The limit that refused it; the caller closes the socket.
    pub fn admit(self: &Arc<Self>, peer: SocketAddr) -> Result<Ticket, Refused> {
        let mut inner = self.lock();
        let from_peer = inner.per_client.get(&peer.ip()).copied().unwrap_or(0);
        if from_peer >= self.limits.max_per_client {
            self.counters
                .refused_per_client
                .fetch_add(1, Ordering::Relaxed);
            return Err(Refused::PerClient {
                open: from_peer,
                limit: self.limits.max_per_client,
            });
        }
        let open = inner.conns.len();
        if open >= self.limits.max_connections && !self.reclaim_one(&inner) {
            self.counters.refused_global.fetch_add(1, Ordering::Relaxed);
            return Err(Refused::Global {
                open,
                limit: self.limits.max_connections,
            });
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let state = Arc::new(ConnState {
            peer,
            activity: Activity::new(Arc::clone(&self.clock)),
            verdict: watch::channel(None).0,
        });
        inner.conns.insert(id, Arc::clone(&state));
        *inner.per_client.entry(peer.ip()).or_default() += 1;
        self.counters.accepted.fetch_add(1, Ordering::Relaxed);
        Ok(Ticket {
            table: Arc::clone(self),
            id,
            state,
        })
    }

    /// Ends the idlest connection idle for at least `reclaim_idle` of the address holding
    /// the most connections. The ended connection leaves the table when its task notices
    /// (within one scheduling round), so the table may briefly hold one more than the limit.
    fn reclaim_one(&self, inner: &Inner) -> bool {
        let min_ns = u64::try_from(self.limits.reclaim_idle.as_nanos()).unwrap_or(u64::MAX);
        let victim = inner
            .conns
            .values()
            .filter_map(|c| {
                let idle = c.activity.idle_for_ns().filter(|&ns| ns >= min_ns)?;
                let crowd = inner.per_client.get(&c.peer.ip()).copied().unwrap_or(0);
                (c.verdict.borrow().is_none()).then_some(((crowd, idle), c))
            })
            .max_by_key(|(key, _)| *key);
        let Some((_, conn)) = victim else {
            return false;
        };
        tracing::info!(peer = %conn.peer, "reclaiming an idle connection for a new client at the connection limit");
        if conn.kill(&RecordError::Reclaimed) {
            self.counters.closed(Verdict::Reclaimed);
        }
        true
    }

    /// Closes every connection that has broken a time limit. Cheap (atomics only, under
    /// the table's lock); run it periodically from one timer.
    pub fn scan(&self, timeouts: ConnTimeouts) -> usize {
        let inner = self.lock();
        let mut closed = 0;
        for c in inner.conns.values() {
            let Some(e) = c.activity.overdue(timeouts) else {
                continue;
            };
            if c.kill(&e) {
                if let Some(v) = Verdict::of(&e) {
                    self.counters.closed(v);
                }
                closed += 1;
            }
        }
        closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(ip: [u8; 4], port: u16) -> SocketAddr {
        SocketAddr::from((ip, port))
    }

    #[test]
    fn per_client_cap_then_reclaim_from_the_crowded_address() {
        let clock = Arc::new(gtime::ManualClock::new(gtime::Timestamp::default()));
        let limits = AdmitLimits {
            max_connections: 4,
            max_per_client: 3,
            reclaim_idle: Duration::from_secs(5),
        };
        let t = ConnTable::new(limits, clock.clone());
        let hog: Vec<_> = (0..3)
            .map(|p| t.admit(addr([127, 0, 0, 2], p)).unwrap())
            .collect();
        assert!(matches!(
            t.admit(addr([127, 0, 0, 2], 9)),
            Err(Refused::PerClient { open: 3, limit: 3 })
        ));
        let other = t.admit(addr([127, 0, 0, 3], 1)).unwrap();
        // Full, and nobody idle long enough: refused.
        assert!(matches!(
            t.admit(addr([127, 0, 0, 4], 1)),
            Err(Refused::Global { .. })
        ));
        clock.advance(Duration::from_secs(6));
        other.state().activity.request_started();
        let newcomer = t.admit(addr([127, 0, 0, 4], 1)).unwrap();
        let killed: Vec<_> = hog
            .iter()
            .filter(|h| h.state().verdict.borrow().is_some())
            .collect();
        assert_eq!(
            killed.len(),
            1,
            "exactly one of the crowded address's is reclaimed"
        );
        assert!(other.state().verdict.borrow().is_none());
        assert_eq!(t.counters.reclaimed.load(Ordering::Relaxed), 1);
        drop((hog, newcomer));
        assert_eq!(t.open(), 1);
    }

    #[test]
    fn scan_closes_overdue_connections_once() {
        let clock = Arc::new(gtime::ManualClock::new(gtime::Timestamp::default()));
        let t = ConnTable::new(AdmitLimits::default(), clock.clone());
        let a = t.admit(addr([127, 0, 0, 1], 1)).unwrap();
        let timeouts = ConnTimeouts {
            idle: Duration::from_secs(10),
            record: Duration::from_secs(10),
            write: Duration::from_secs(10),
        };
        assert_eq!(t.scan(timeouts), 0);
        clock.advance(Duration::from_secs(11));
        assert_eq!(t.scan(timeouts), 1);
        assert_eq!(t.scan(timeouts), 0, "a verdict is given once");
        assert_eq!(t.counters.closed_idle.load(Ordering::Relaxed), 1);
        drop(a);
    }
}
