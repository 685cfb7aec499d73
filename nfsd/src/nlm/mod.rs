//! NLM v4 and NSM v1 for NFSv3 clients (XNFS chapters 10 and 11): programs 100021
//! version 4 and 100024 version 1 on the same port as NFS, over the one lock manager
//! ([`locks::LockManager`]) that NFSv4 LOCK uses too, so a lock taken over either protocol
//! is in the way of the other.
//!
//! - [`proc`]: the NLM procedure table (TEST, LOCK, CANCEL, UNLOCK, the `_MSG`/`_RES`
//!   asynchronous variants, SHARE/UNSHARE, NM_LOCK, FREE_ALL);
//! - [`nsm`]: the NSM procedure table: granary is the status monitor of its own locks;
//! - [`monitor`]: the hosts that hold locks, kept in the state directory so that after a
//!   restart they are sent SM_NOTIFY and may reclaim during a grace period;
//! - [`share`]: DOS share reservations (SHARE/UNSHARE), in the table NFSv4 OPEN uses.
//!
//! Calls granary makes itself (NLM GRANTED to a blocked client, the `_RES` answer to a
//! `_MSG` call, SM_NOTIFY after a restart, the status callback of SM_MON) go through an
//! [`Outbox`] the server provides (`serve`: a bounded queue, the client's portmapper, a
//! new TCP connection, bounded retries and timeouts). Nothing here does network I/O or
//! blocks on an event loop: a handler answers at once, or, when it must write the state
//! directory or its backend must wait to find the file (the object backend asks its
//! database), answers `WouldBlock` before it changed anything and runs again on the
//! worker's blocking pool.
//!
//! Owners are the caller's address, `caller_name`, `svid` and `oh`: a client that names
//! another's host from its own address names a different owner and cannot unlock or free
//! that host's locks.

pub mod monitor;
pub mod nsm;
pub mod proc;
pub mod share;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;
use locks::{Client, FileKey, Kind, LockManager, Owner, Range, Wake};
use nlm::limits::{NLM_PROGRAM, NLM_V4};
use nlm::nlm4::{self, Stats};
use rpc::Dispatcher;
use xdr::{Decode, Encode};

use crate::limits::{MAX_NLM_BLOCKED, MAX_NLM_PENDING_GRANTS};
use crate::NfsState;

pub use monitor::Monitor;

/// A call granary makes to a service on another host: NLM GRANTED and the `_RES`
/// answers on the client's NLM, SM_NOTIFY on its statd, SM_MON status callbacks.
pub struct Callback {
    /// The host; the port is found through its portmapper (program, version, TCP).
    pub host: IpAddr,
    pub program: u32,
    pub version: u32,
    pub procedure: u32,
    /// The encoded arguments.
    pub args: Bytes,
    /// Put the XDR string of the local address the connection to `host` leaves from in
    /// front of `args` (SM_NOTIFY's `mon_name`: the name the client reached us by).
    pub local_name_first: bool,
    /// Told the results (the bytes after an accepted reply header) or why there are none,
    /// once, after the outbox gave up retrying.
    pub done: Option<Done>,
}

/// What a [`Callback`]'s caller is told when it is over: the results, or why none came.
pub type Done = Box<dyn FnOnce(Result<Bytes, String>) + Send>;

impl std::fmt::Debug for Callback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callback")
            .field("host", &self.host)
            .field("program", &self.program)
            .field("procedure", &self.procedure)
            .finish_non_exhaustive()
    }
}

/// Where [`Callback`]s go. `send` never blocks: an outbox that is full drops the call
/// and tells its `done` so.
pub trait Outbox: Send + Sync {
    fn send(&self, call: Callback);
}

/// A blocked LOCK, kept to build the GRANTED call when the lock manager grants it.
#[derive(Debug, Clone)]
struct BlockedLock {
    host: IpAddr,
    exclusive: bool,
    alock: nlm4::Lock,
}

/// A lock granted to a waiter whose GRANTED call is not answered yet.
#[derive(Debug, Clone)]
struct PendingGrant {
    file: FileKey,
    owner: Owner,
    range: Range,
}

#[derive(Default)]
struct Waiting {
    blocked: HashMap<(FileKey, Owner), BlockedLock>,
    /// By the cookie of the GRANTED call.
    pending: HashMap<Bytes, PendingGrant>,
    next_cookie: u64,
}

/// Everything NLM and NSM share between calls.
pub struct NlmState {
    /// The core shared with NFSv3: exports, handles, credentials.
    pub core: Arc<NfsState>,
    /// The server's one lock manager (the core's).
    pub locks: Arc<LockManager>,
    pub monitor: Monitor,
    clock: Arc<dyn gtime::Clock>,
    outbox: Arc<dyn Outbox>,
    waiting: Mutex<Waiting>,
    me: Weak<NlmState>,
}

impl NlmState {
    #[must_use]
    pub fn new(
        core: Arc<NfsState>,
        monitor: Monitor,
        clock: Arc<dyn gtime::Clock>,
        outbox: Arc<dyn Outbox>,
    ) -> Arc<Self> {
        let nlm = Arc::new_cyclic(|me| Self {
            locks: Arc::clone(&core.locks),
            core,
            monitor,
            clock,
            outbox,
            waiting: Mutex::new(Waiting::default()),
            me: me.clone(),
        });
        let waker = NlmWaker(Arc::downgrade(&nlm));
        nlm.locks.set_waker(locks::Protocol::Nlm, Arc::new(waker));
        crate::heads::start_waiting(&nlm.core, Arc::clone(&nlm.clock));
        nlm
    }

    /// Monotonic time for the lock manager and the grace period.
    #[must_use]
    pub fn now(&self) -> Duration {
        self.clock.monotonic()
    }

    /// Refuses new locks (`NLM4_DENIED_GRACE_PERIOD`, and NFSv4's `NFS4ERR_GRACE`) and
    /// grants NLM reclaims for `grace` from now: after a restart, while the clients told
    /// by SM_NOTIFY take back theirs.
    pub fn start_grace(&self, grace: Duration) {
        let ends = self.now() + grace;
        self.core.lock_grace.start(locks::Protocol::Nlm, ends);
        tracing::info!(
            grace_secs = grace.as_secs(),
            "NLM grace period: clients reclaim their locks, new locks wait"
        );
    }

    /// Whether NLM's own grace period runs now: reclaims are granted.
    #[must_use]
    pub fn in_grace(&self) -> bool {
        self.core.lock_grace.own(locks::Protocol::Nlm, self.now())
    }

    /// Whether NLM's or NFSv4's grace period runs now: no new lock is granted.
    #[must_use]
    pub fn locks_in_grace(&self) -> bool {
        self.core.lock_grace.any(self.now())
    }

    /// The grace rule of LOCK and SHARE (as knfsd): a reclaim only in NLM's grace
    /// period, a new lock only when no grace period runs (NLM's or NFSv4's).
    #[must_use]
    pub fn grace_refuses(&self, reclaim: bool) -> bool {
        if reclaim {
            !self.in_grace()
        } else {
            self.locks_in_grace()
        }
    }

    /// Sends GRANTED for a waiter the lock manager gave its lock. A waiter we have no
    /// record of (bounds) cannot be told: its lock is given back.
    fn grant_waiter(&self, w: Wake) {
        debug_assert!(w.granted, "NLM waiters wait with Wait::Grant");
        let mut g = lock(&self.waiting);
        let Some(b) = g.blocked.remove(&(w.file, w.owner.clone())) else {
            drop(g);
            tracing::warn!(owner = ?w.owner, "granted an NLM waiter with no record; releasing");
            self.locks.unlock(w.file, &w.owner, w.range, self.now());
            return;
        };
        g.next_cookie += 1;
        let cookie = Bytes::copy_from_slice(&g.next_cookie.to_be_bytes());
        if g.pending.len() >= MAX_NLM_PENDING_GRANTS {
            drop(g);
            rpc::warn_limited!(rpc::ratelog::Kind::Refused, host = %b.host, "too many unanswered GRANTED calls; releasing a granted lock");
            self.locks.unlock(w.file, &w.owner, w.range, self.now());
            return;
        }
        let grant = PendingGrant {
            file: w.file,
            owner: w.owner,
            range: w.range,
        };
        g.pending.insert(cookie.clone(), grant);
        drop(g);
        let args = nlm4::TestArgs {
            cookie: nlm4::Netobj(cookie.clone()),
            exclusive: b.exclusive,
            alock: b.alock,
        };
        let me = self.me.clone();
        tracing::debug!(host = %b.host, "sending NLM GRANTED");
        self.outbox.send(Callback {
            host: b.host,
            program: NLM_PROGRAM,
            version: NLM_V4,
            procedure: nlm4::Proc::Granted as u32,
            args: args.to_xdr(),
            local_name_first: false,
            done: Some(Box::new(move |r| {
                if let Some(me) = me.upgrade() {
                    me.granted_answered(&cookie, r);
                }
            })),
        });
    }

    /// The client's answer to GRANTED (the reply, or GRANTED_RES): a client that no
    /// longer waits, or never answers, gives the lock back.
    fn granted_answered(&self, cookie: &Bytes, r: Result<Bytes, String>) {
        let Some(p) = lock(&self.waiting).pending.remove(cookie) else {
            return;
        };
        let stat = r.and_then(|b| {
            nlm4::Res::from_xdr(b)
                .map(|res| res.stat)
                .map_err(|e| e.to_string())
        });
        match stat {
            Ok(Stats::Granted) => tracing::debug!(owner = ?p.owner, "GRANTED accepted"),
            other => {
                tracing::info!(owner = ?p.owner, answer = ?other, "client did not take a granted NLM lock; releasing it");
                self.locks.unlock(p.file, &p.owner, p.range, self.now());
            }
        }
    }

    /// Remembers a blocked LOCK for its GRANTED call. False at the bound.
    fn remember_blocked(&self, file: FileKey, owner: Owner, b: BlockedLock) -> bool {
        let mut g = lock(&self.waiting);
        if g.blocked.len() >= MAX_NLM_BLOCKED && !g.blocked.contains_key(&(file, owner.clone())) {
            return false;
        }
        g.blocked.insert((file, owner), b);
        true
    }

    /// Forgets a blocked LOCK (cancelled, or the client's locks were freed); and a
    /// granted lock of `owner` on `file` whose GRANTED is unanswered. Returns that one.
    fn forget_waiting(&self, file: FileKey, owner: &Owner) -> Option<PendingGrant> {
        let mut g = lock(&self.waiting);
        g.blocked.remove(&(file, owner.clone()));
        let cookie = g
            .pending
            .iter()
            .find(|(_, p)| p.file == file && p.owner == *owner)
            .map(|(c, _)| c.clone())?;
        g.pending.remove(&cookie)
    }

    /// Forgets an unanswered GRANTED of `owner` on `file` (it unlocked meanwhile).
    fn drop_pending(&self, file: FileKey, owner: &Owner) {
        lock(&self.waiting)
            .pending
            .retain(|_, p| p.file != file || p.owner != *owner);
    }

    /// Frees every lock, waiter and share of the NLM client at `host` named `name`
    /// (FREE_ALL, SM_NOTIFY). Returns the locks freed.
    pub fn free_client(&self, host: IpAddr, name: &[u8]) -> usize {
        let client = nlm_client(host, name);
        let released = self.locks.release_client(&client, self.now());
        crate::heads::stop_waiting_client(&self.core, &client);
        {
            let mut g = lock(&self.waiting);
            g.blocked.retain(|(_, o), _| o.client != client);
            g.pending.retain(|_, p| p.owner.client != client);
        }
        self.core.shares.release_client(&client);
        self.monitor.forget(host, name);
        tracing::info!(%host, name = %String::from_utf8_lossy(name), locks = released.locks, waiters = released.waiters, "NLM client's locks freed");
        released.locks
    }

    /// Records `host` for SM_NOTIFY after a restart; false when it cannot be (the bound,
    /// or the state directory refused the write: the lock is refused, since a lock whose
    /// holder would not be told of a restart could be taken by another after it).
    ///
    /// # Errors
    /// [`ProcError::WouldBlock`] when the write must wait for a thread that may block.
    fn watch(&self, host: IpAddr, name: &[u8]) -> Result<bool, rpc::ProcError> {
        let idle = |(h, n): &monitor::Host| self.locks.client_locks(&nlm_client(*h, n)) == 0;
        match self.monitor.watch(host, name, idle) {
            Ok(()) => Ok(true),
            Err(monitor::WatchError::WouldBlock) => Err(rpc::ProcError::WouldBlock),
            Err(monitor::WatchError::Full) => {
                rpc::warn_limited!(rpc::ratelog::Kind::Refused, %host, "NSM records its most hosts (MAX_NSM_HOSTS); NLM lock refused");
                Ok(false)
            }
            Err(monitor::WatchError::Io(e)) => {
                tracing::error!(%host, error = %e, "NSM host not recorded; NLM lock refused");
                Ok(false)
            }
        }
    }

    /// Sends `call` through the outbox.
    fn send(&self, call: Callback) {
        self.outbox.send(call);
    }
}

/// Hands NLM waiters the lock manager granted to [`NlmState`]'s GRANTED sender, whoever
/// freed their range (an NLM UNLOCK, an NFSv4 LOCKU, a lease expiry).
struct NlmWaker(Weak<NlmState>);

impl locks::Waker for NlmWaker {
    fn wake(&self, wakes: &[Wake]) {
        let Some(nlm) = self.0.upgrade() else {
            return;
        };
        for w in wakes {
            nlm.grant_waiter(w.clone());
        }
    }
}

/// The lock manager's client for the NLM caller `name` at `host`: the address is part of
/// it, so a caller cannot act for a host name it does not call from.
#[must_use]
pub fn nlm_client(host: IpAddr, name: &[u8]) -> Client {
    let mut id = host.to_canonical().to_string().into_bytes();
    id.push(b' ');
    id.extend_from_slice(name);
    Client::nlm(Bytes::from(id))
}

/// The owner of an NLM lock: the client, the process (`svid`) and the owner handle.
#[must_use]
pub fn nlm_owner(host: IpAddr, alock_name: &[u8], svid: i32, oh: &[u8]) -> Owner {
    let mut id = Vec::with_capacity(4 + oh.len());
    id.extend_from_slice(&svid.to_be_bytes());
    id.extend_from_slice(oh);
    Owner {
        client: nlm_client(host, alock_name),
        id: Bytes::from(id),
    }
}

/// The lock kind of NLM's `exclusive` flag.
#[must_use]
pub fn kind(exclusive: bool) -> Kind {
    if exclusive {
        Kind::Write
    } else {
        Kind::Read
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Registers NLM v4 and NSM v1 on `dispatcher`, served from `state`.
pub fn register(dispatcher: &mut Dispatcher, state: &Arc<NlmState>) {
    dispatcher.register(Box::new(proc::NlmProgram(Arc::clone(state))));
    dispatcher.register(Box::new(rpc::Service {
        program: nsm::PROGRAM,
        version: nsm::VERSION,
        procedures: &nsm::PROCEDURES,
        state: Arc::clone(state),
    }));
}
