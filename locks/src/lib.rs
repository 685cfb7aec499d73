//! The byte-range lock manager every protocol shares: NFSv4's LOCK/LOCKT/LOCKU and NLM
//! v4 (for NFSv3 clients) take their locks here, so a lock taken over one protocol is
//! in the way of a conflicting lock over the other.
//!
//! # What it promises
//!
//! - **POSIX semantics per file** ([`FileKey`]: the export and file id a handle names):
//!   shared ([`Kind::Read`]) and exclusive ([`Kind::Write`]) locks on byte [`Range`]s of
//!   64-bit offsets; an owner's locks never conflict with each other and are kept as
//!   merged ranges, so a lock over part of an owner's range splits it, an unlock of its
//!   middle leaves two, and a lock of another kind over its own range upgrades or
//!   downgrades that part (atomically: an upgrade that conflicts changes nothing).
//! - **Owners are opaque per protocol** ([`Owner`]: a [`Client`] tagged with its
//!   [`Protocol`], and the protocol's owner bytes), so metrics and limits say who.
//! - **A conflict names the lock in the way** ([`Conflict`]: its owner, kind and whole
//!   merged range), as NFS4ERR_DENIED and NLM4_DENIED report it.
//! - **Fair waiting.** A blocking request that is refused joins its file's queue (one
//!   waiting request per owner and file; asking again keeps the place). Requests are
//!   served in arrival order: a newcomer that would conflict with an earlier waiter's
//!   request is refused while that waiter waits, unless the newcomer holds a lock the
//!   waiter waits for (holding it back would deadlock both). When a lock is released,
//!   waiters whose ranges are free are woken in order ([`Wake`]) and handed to the
//!   [`Waker`] their protocol registered; how the client learns of it is the front end's: [`Wait::Poll`] waiters are told once and keep their place
//!   until they ask again before their deadline (NFSv4 polls, and CB_NOTIFY_LOCK says
//!   when), [`Wait::Grant`] waiters are given the lock at once (NLM sends GRANTED).
//! - **No waiting into a deadlock**: a waiting request that would close a cycle of owners
//!   each waiting for the next (over both protocols) is refused with
//!   [`LockError::Deadlock`], after a search bounded by
//!   [`limits::MAX_DEADLOCK_SEARCH_STEPS`] (`deadlock.rs`).
//! - **Share reservations** of both protocols (NFSv4 OPEN's access and deny, NLM SHARE)
//!   are kept in one [`ShareTable`] beside the lock manager (`share.rs`).
//! - **Release in bulk**: all locks and waiters of an owner ([`LockManager::release_owner`]),
//!   of an owner on one file, or of a client ([`LockManager::release_client`]: an NFSv4
//!   lease expiry, an NSM reboot notice, NLM FREE_ALL).
//! - **Bounded**: locks and waiters in total and per client, and each file's segment map,
//!   in [`Limits`] (defaults in [`limits`]); a refused request names its [`LimitReason`].
//! - **Counted**: locks held, waiters, grants, denials per protocol ([`Metrics`]).
//!
//! Time is a monotonic `Duration` the caller passes in (tests drive it by hand); nothing
//! here does I/O or arms a timer. The front end calls [`LockManager::expire_waiters`] from
//! a timer it already has (the NFSv4 lease timer).
//!
//! # Structure and cost
//!
//! Per file, a map of disjoint segments to their holders (a `BTreeMap` keyed by offset)
//! and, per owner, a map of its merged ranges. A request costs O(log n + k) for n
//! segments of the file and k segments within the request's range: thousands of locks
//! on one file cost what a few do (`cargo test -p granary-locks --release -- --ignored
//! many_locks` prints the numbers; docs/LOCKS.md has them). One mutex guards the whole
//! manager: lock requests are a small part of a server's traffic, and every call is
//! short (no I/O, no callbacks under it).
//!
//! The mutex and the wakers' lock are std's, or loom's under `--cfg loom` (`prim`), so
//! the loom model (`loom_tests.rs`) checks the wait queue against every order of racing
//! calls and deliveries: no waiter lost, none granted twice, arrival order kept.
#![forbid(unsafe_code)]

mod deadlock;
mod file;
pub mod limits;
#[cfg(all(test, loom))]
mod loom_tests;
mod prim;
mod range;
mod segments;
pub mod share;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use rustc_hash::{FxHashMap, FxHashSet};

use file::{Delivery, FileLocks, OwnerId, Waiter};
use prim::{Mutex, MutexGuard, RwLock};
pub use range::{Range, RangeError};
pub use share::{ShareDenied, ShareTable};

/// A file as its locks are keyed: the export id and the file id its handles carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileKey {
    pub export: u32,
    pub file: u64,
}

impl From<(u32, u64)> for FileKey {
    fn from((export, file): (u32, u64)) -> Self {
        Self { export, file }
    }
}

/// The protocol a lock was taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// NFSv4.1/4.2 LOCK.
    Nfs4,
    /// NLM v4 (NFSv3 clients).
    Nlm,
}

impl Protocol {
    pub const ALL: [Self; 2] = [Self::Nfs4, Self::Nlm];

    /// The name used in metrics and logs.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Nfs4 => "nfs4",
            Self::Nlm => "nlm",
        }
    }
}

/// A lock's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Shared (`F_RDLCK`, NFSv4 READ_LT, NLM non-exclusive).
    Read,
    /// Exclusive (`F_WRLCK`, NFSv4 WRITE_LT, NLM exclusive).
    Write,
}

/// A client machine as a protocol names it: everything of a client is released at once
/// when its NFSv4 lease expires or NSM says it rebooted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client {
    pub protocol: Protocol,
    pub name: Bytes,
}

impl Client {
    /// An NFSv4 client id (its 8 bytes, big-endian).
    #[must_use]
    pub fn nfs4(clientid: u64) -> Self {
        Self {
            protocol: Protocol::Nfs4,
            name: Bytes::copy_from_slice(&clientid.to_be_bytes()),
        }
    }

    /// An NLM client by its `caller_name`.
    #[must_use]
    pub fn nlm(caller_name: Bytes) -> Self {
        Self {
            protocol: Protocol::Nlm,
            name: caller_name,
        }
    }

    /// The NFSv4 client id, for an NFSv4 client.
    #[must_use]
    pub fn nfs4_clientid(&self) -> Option<u64> {
        let b: [u8; 8] = self.name.as_ref().try_into().ok()?;
        (self.protocol == Protocol::Nfs4).then(|| u64::from_be_bytes(b))
    }
}

/// Who holds a lock: a client and the protocol's owner identity within it. Two requests
/// are of the same owner exactly when their `Owner`s are equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    pub client: Client,
    pub id: Bytes,
}

impl Owner {
    /// An NFSv4 lock-owner (`lock_owner4`: client id and owner bytes).
    #[must_use]
    pub fn nfs4(clientid: u64, owner: Bytes) -> Self {
        Self {
            client: Client::nfs4(clientid),
            id: owner,
        }
    }

    /// An NLM owner: the caller, the process (`svid`) and the owner handle (`oh`).
    #[must_use]
    pub fn nlm(caller_name: Bytes, svid: u32, oh: &[u8]) -> Self {
        let mut id = Vec::with_capacity(4 + oh.len());
        id.extend_from_slice(&svid.to_be_bytes());
        id.extend_from_slice(oh);
        Self {
            client: Client::nlm(caller_name),
            id: Bytes::from(id),
        }
    }

    #[must_use]
    pub fn protocol(&self) -> Protocol {
        self.client.protocol
    }
}

/// A lock in the way of a request: its owner, kind and the owner's whole merged range
/// that holds the conflicting byte (or, when an earlier waiter is in the way, that
/// waiter's request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub owner: Owner,
    pub kind: Kind,
    pub range: Range,
}

/// Whether a refused request waits, and how it is given its lock later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Refuse at once and do not queue (`F_SETLK`, NFSv4 READ_LT/WRITE_LT, NLM block
    /// false).
    No,
    /// Queue the request; the client asks again (NFSv4 READW_LT/WRITEW_LT). The waiter
    /// keeps its place until `deadline` (asking again moves it on), then is dropped.
    Poll { deadline: Duration },
    /// Queue the request and take the lock for the owner as soon as it is free (NLM
    /// block true; the front end sends GRANTED). It waits until cancelled or released.
    Grant,
}

/// A lock request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub file: FileKey,
    pub owner: Owner,
    pub kind: Kind,
    pub range: Range,
    pub wait: Wait,
}

/// A waiting request's number, unique for the manager's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaiterId(pub u64);

impl WaiterId {
    /// The waiter of a [`Wake`] that did not wait in this manager: it waited for another
    /// server's lock (the object backend's heads) and is handed to
    /// [`LockManager::wake`] when that lock went.
    pub const ELSEWHERE: Self = Self(u64::MAX);
}

/// A waiter whose range came free, in queue order. The front end delivers it: for a
/// [`Wait::Grant`] waiter the lock is already held (`granted`: send NLM GRANTED, and
/// unlock if the client refuses it); a [`Wait::Poll`] waiter is told once (`granted`
/// false: send CB_NOTIFY_LOCK if the client asked for it) and takes the lock when it
/// asks again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wake {
    pub waiter: WaiterId,
    pub file: FileKey,
    pub owner: Owner,
    pub kind: Kind,
    pub range: Range,
    pub granted: bool,
}

/// Delivers woken waiters to the clients of one protocol (NLM: GRANTED callbacks;
/// NFSv4: CB_NOTIFY_LOCK). Registered with [`LockManager::set_waker`].
///
/// The manager calls it after its own mutex is released, on the thread whose call
/// freed the range: that may be another protocol's front end (an NFSv4 LOCKU that frees
/// an NLM waiter) or a timer. It must not block: queue the work and return.
pub trait Waker: Send + Sync {
    /// `wakes` are of this waker's protocol, in queue order.
    fn wake(&self, wakes: &[Wake]);
}

/// Told which file's locks changed, after the manager's mutex is released, on the
/// thread whose call changed them (registered with [`LockManager::set_observer`]).
/// The object backend's heads use it to keep their locks in the database in step with
/// this manager ([`LockManager::mirror`]). It must not block, and it may be called
/// while its caller holds other locks of its own: queue the work and return.
pub trait Observer: Send + Sync {
    /// `Some(file)`: that file's locks or waiters may have changed; `None`: any file's
    /// may have (a release of an owner or a client, expired waiters).
    fn changed(&self, file: Option<FileKey>);
}

/// A granted lock request, and the waiters it woke (a downgrade frees readers).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Granted {
    pub wakes: Vec<Wake>,
}

/// Which bound refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitReason {
    /// [`Limits::max_locks`] in total.
    TotalLocks,
    /// [`Limits::max_locks_per_client`] for this client.
    ClientLocks,
    /// [`Limits::max_entries_per_file`]: too many overlapping shared locks on the file.
    FileEntries,
    /// The owner or client name is longer than the protocols allow.
    OwnerTooLong,
}

impl fmt::Display for LimitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::TotalLocks => "the server holds its most locks (locks::limits::MAX_LOCKS)",
            Self::ClientLocks => {
                "the client holds its most locks (locks::limits::MAX_LOCKS_PER_CLIENT)"
            }
            Self::FileEntries => {
                "too many overlapping locks on the file (locks::limits::MAX_ENTRIES_PER_FILE)"
            }
            Self::OwnerTooLong => "an owner or client name longer than the protocol allows",
        })
    }
}

/// Why a lock request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockError {
    /// A lock (or an earlier waiter) is in the way. `queued` names the waiting request
    /// when the request waits ([`Wait::Poll`], [`Wait::Grant`]); `None` when it does not,
    /// or when the waiter bounds were reached (the client may still ask again).
    Denied {
        conflict: Conflict,
        queued: Option<WaiterId>,
    },
    /// Waiting would close a cycle of owners each waiting for the next, across files
    /// and protocols (NLM4_DEADLCK, NFS4ERR_DEADLOCK; `EDEADLK` of a local `fcntl`).
    /// Only a waiting request ([`Wait::Poll`], [`Wait::Grant`]) is refused so; it does
    /// not wait, and a request the owner already had waiting on the file leaves the
    /// queue. `conflict` is a lock (or earlier waiter) in its way. Permanent until one
    /// of the owners in the cycle lets go.
    Deadlock { conflict: Conflict },
    /// A bound was reached; the client may try again once locks are released.
    Limit(LimitReason),
}

/// What a bulk release freed, and the waiters it woke.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Released {
    /// Locks (merged ranges) released.
    pub locks: usize,
    /// Waiting requests removed.
    pub waiters: usize,
    pub wakes: Vec<Wake>,
}

/// The manager's bounds (see [`limits`] for the defaults and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_locks: usize,
    pub max_locks_per_client: usize,
    pub max_waiters: usize,
    pub max_waiters_per_client: usize,
    pub max_entries_per_file: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_locks: limits::MAX_LOCKS,
            max_locks_per_client: limits::MAX_LOCKS_PER_CLIENT,
            max_waiters: limits::MAX_WAITERS,
            max_waiters_per_client: limits::MAX_WAITERS_PER_CLIENT,
            max_entries_per_file: limits::MAX_ENTRIES_PER_FILE,
        }
    }
}

/// Counts of one protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProtocolMetrics {
    /// Locks (merged ranges) held now.
    pub held: u64,
    /// Requests waiting now.
    pub waiters: u64,
    /// Lock requests granted, waiters granted by [`Wait::Grant`] included.
    pub grants: u64,
    /// Lock requests refused because a lock or an earlier waiter was in the way.
    pub denials: u64,
    /// Lock requests refused by a bound.
    pub limited: u64,
    /// Waiting requests refused because they would have closed a cycle of waiters
    /// ([`LockError::Deadlock`]).
    pub deadlocks: u64,
    /// Waiters woken (granted or told).
    pub wakes: u64,
}

/// Counts per protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Metrics {
    pub nfs4: ProtocolMetrics,
    pub nlm: ProtocolMetrics,
}

impl Metrics {
    #[must_use]
    pub fn get(&self, p: Protocol) -> &ProtocolMetrics {
        match p {
            Protocol::Nfs4 => &self.nfs4,
            Protocol::Nlm => &self.nlm,
        }
    }

    fn get_mut(&mut self, p: Protocol) -> &mut ProtocolMetrics {
        match p {
            Protocol::Nfs4 => &mut self.nfs4,
            Protocol::Nlm => &mut self.nlm,
        }
    }
}

/// A client as the manager numbers it while one of its owners holds or waits.
type ClientId = u64;

#[derive(Debug)]
struct OwnerEntry {
    owner: Owner,
    client: ClientId,
    /// Files where the owner holds locks or waits.
    files: FxHashSet<FileKey>,
    /// Files where the owner waits (one request on each): the wait-for graph's edges
    /// leave from these (`deadlock`).
    waiting: FxHashSet<FileKey>,
    locks: usize,
    waiters: usize,
}

#[derive(Debug)]
struct ClientEntry {
    owners: FxHashSet<OwnerId>,
    locks: usize,
    waiters: usize,
}

/// Who is who, and the counts the bounds and metrics read.
///
/// Owners and clients are named by the protocols' bytes, which a client chooses: those
/// two maps (`ids`, `client_ids`) hash with std's keyed SipHash, so no client can aim
/// names at one bucket. Everything after them is keyed by the manager's own numbers
/// (owner and client ids) or by a [`FileKey`] (the server's export and file ids), and
/// hashed with FxHash, which costs a multiply per key (the keyed hashing of every map
/// was a quarter of a lock call's time).
#[derive(Debug, Default)]
struct Books {
    ids: HashMap<Owner, OwnerId>,
    client_ids: HashMap<Client, ClientId>,
    owners: FxHashMap<OwnerId, OwnerEntry>,
    clients: FxHashMap<ClientId, ClientEntry>,
    next_owner: OwnerId,
    next_client: ClientId,
    next_waiter: u64,
    locks: usize,
    waiters: usize,
    metrics: Metrics,
}

impl Books {
    fn intern(&mut self, owner: &Owner) -> OwnerId {
        if let Some(&id) = self.ids.get(owner) {
            return id;
        }
        let id = self.next_owner;
        self.next_owner += 1;
        let client = match self.client_ids.get(&owner.client) {
            Some(&c) => c,
            None => {
                let c = self.next_client;
                self.next_client += 1;
                self.client_ids.insert(owner.client.clone(), c);
                self.clients.insert(
                    c,
                    ClientEntry {
                        owners: FxHashSet::default(),
                        locks: 0,
                        waiters: 0,
                    },
                );
                c
            }
        };
        self.ids.insert(owner.clone(), id);
        self.owners.insert(
            id,
            OwnerEntry {
                owner: owner.clone(),
                client,
                files: FxHashSet::default(),
                waiting: FxHashSet::default(),
                locks: 0,
                waiters: 0,
            },
        );
        if let Some(c) = self.clients.get_mut(&client) {
            c.owners.insert(id);
        }
        id
    }

    fn owner(&self, id: OwnerId) -> &Owner {
        // Every id in a file's maps was interned and stays until it holds nothing.
        &self.owners[&id].owner
    }

    fn client_of(&self, id: OwnerId) -> Option<&ClientEntry> {
        self.clients.get(&self.owners.get(&id)?.client)
    }

    /// Adds `locks` and `waiters` (either may be negative) to `id`'s counts on `file`.
    fn account(&mut self, id: OwnerId, file: FileKey, locks: isize, waiters: isize) {
        let Some(o) = self.owners.get_mut(&id) else {
            debug_assert!(false, "accounting for an owner that is not interned");
            return;
        };
        o.files.insert(file);
        match waiters.signum() {
            1 => {
                o.waiting.insert(file);
            }
            -1 => {
                o.waiting.remove(&file);
            }
            _ => {}
        }
        o.locks = o.locks.saturating_add_signed(locks);
        o.waiters = o.waiters.saturating_add_signed(waiters);
        let p = o.owner.protocol();
        if let Some(c) = self.clients.get_mut(&o.client) {
            c.locks = c.locks.saturating_add_signed(locks);
            c.waiters = c.waiters.saturating_add_signed(waiters);
        }
        self.locks = self.locks.saturating_add_signed(locks);
        self.waiters = self.waiters.saturating_add_signed(waiters);
        let m = self.metrics.get_mut(p);
        m.held = m.held.saturating_add_signed(locks as i64);
        m.waiters = m.waiters.saturating_add_signed(waiters as i64);
    }

    /// Forgets `id` on `file` when it holds and waits for nothing there, and forgets the
    /// owner (and its client) when it holds and waits for nothing at all.
    fn tidy(&mut self, id: OwnerId, file: FileKey, f: &FileLocks) {
        let Some(o) = self.owners.get_mut(&id) else {
            return;
        };
        if !f.owners.contains_key(&id) && f.waiter_pos(id).is_none() {
            o.files.remove(&file);
        }
        if !o.files.is_empty() {
            return;
        }
        debug_assert_eq!((o.locks, o.waiters), (0, 0));
        let Some(o) = self.owners.remove(&id) else {
            return;
        };
        self.ids.remove(&o.owner);
        if let Some(c) = self.clients.get_mut(&o.client) {
            c.owners.remove(&id);
            if c.owners.is_empty() {
                self.clients.remove(&o.client);
                self.client_ids.remove(&o.owner.client);
            }
        }
    }

    fn new_waiter(&mut self) -> WaiterId {
        self.next_waiter += 1;
        WaiterId(self.next_waiter)
    }
}

#[derive(Debug, Default)]
struct Inner {
    files: FxHashMap<FileKey, FileLocks>,
    books: Books,
}

/// The lock manager of one server (share it with an `Arc` between front ends).
///
/// Every call that frees a range returns the [`Wake`]s it caused and hands each to the
/// [`Waker`] registered for its protocol, after the manager's mutex is released. The
/// returned list is for the caller's logs and tests: a front end with a registered
/// waker must not deliver it a second time.
pub struct LockManager {
    limits: Limits,
    inner: Mutex<Inner>,
    wakers: RwLock<[Option<Arc<dyn Waker>>; 2]>,
    observer: RwLock<Option<Arc<dyn Observer>>>,
}

impl fmt::Debug for LockManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockManager")
            .field("limits", &self.limits)
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Default for LockManager {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl LockManager {
    #[must_use]
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            inner: Mutex::new(Inner::default()),
            wakers: RwLock::new([None, None]),
            observer: RwLock::new(None),
        }
    }

    /// Registers the waker of `protocol`'s woken waiters (replacing an earlier one).
    pub fn set_waker(&self, protocol: Protocol, waker: Arc<dyn Waker>) {
        let mut w = self.wakers.write().unwrap_or_else(PoisonError::into_inner);
        w[protocol_index(protocol)] = Some(waker);
    }

    /// Registers the observer told of every change ([`Observer`]), replacing an
    /// earlier one.
    pub fn set_observer(&self, observer: Arc<dyn Observer>) {
        *self
            .observer
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(observer);
    }

    /// Tells the observer, if one is registered, that `file` (or any file) changed.
    fn observe(&self, file: Option<FileKey>) {
        let o = self
            .observer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(o) = o {
            o.changed(file);
        }
    }

    /// Hands `wakes` to their protocols' wakers; returns them.
    fn deliver(&self, wakes: Vec<Wake>) -> Vec<Wake> {
        if wakes.is_empty() {
            return wakes;
        }
        let wakers = self
            .wakers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for p in Protocol::ALL {
            let Some(w) = &wakers[protocol_index(p)] else {
                continue;
            };
            let mine: Vec<Wake> = wakes
                .iter()
                .filter(|x| x.owner.protocol() == p)
                .cloned()
                .collect();
            if !mine.is_empty() {
                w.wake(&mine);
            }
        }
        wakes
    }

    #[must_use]
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`Self::lock`] before its wakes are delivered: the answer, and the waiters it
    /// woke (a granted downgrade frees readers; a request refused as a deadlock leaves
    /// the queue and may free those behind it).
    fn lock_now(&self, req: &Request, now: Duration) -> (Result<(), LockError>, Vec<Wake>) {
        if req.owner.id.len() > limits::MAX_OWNER_BYTES
            || req.owner.client.name.len() > limits::MAX_CLIENT_BYTES
        {
            return (Err(LockError::Limit(LimitReason::OwnerTooLong)), Vec::new());
        }
        let mut g = self.inner();
        let Inner { files, books } = &mut *g;
        let id = books.intern(&req.owner);
        let (r, wakes) = match deadlock_check(files, books, id, req, now) {
            Some(conflict) => {
                let wakes = files.get_mut(&req.file).map_or_else(Vec::new, |f| {
                    leave_queue(f, books, id, req.file, now, &self.limits)
                });
                (Err(LockError::Deadlock { conflict }), wakes)
            }
            None => {
                let f = files.entry(req.file).or_default();
                match try_lock(f, books, id, req, now, &self.limits) {
                    Ok(g) => (Ok(()), g.wakes),
                    Err(e) => (Err(e), Vec::new()),
                }
            }
        };
        let m = books.metrics.get_mut(req.owner.protocol());
        match &r {
            Ok(()) => m.grants += 1,
            Err(LockError::Denied { .. }) => m.denials += 1,
            Err(LockError::Deadlock { .. }) => m.deadlocks += 1,
            Err(LockError::Limit(_)) => m.limited += 1,
        }
        if let Some(f) = files.get(&req.file) {
            books.tidy(id, req.file, f);
            if f.is_empty() {
                files.remove(&req.file);
            }
        } else {
            books.tidy(id, req.file, &FileLocks::default());
        }
        (r, wakes)
    }

    /// The first lock of another owner in the way of `owner` locking `range` as `kind`
    /// (F_GETLK, NFSv4 LOCKT, NLM TEST). Waiting requests are not locks: they are not
    /// reported.
    #[must_use]
    pub fn test(&self, file: FileKey, owner: &Owner, kind: Kind, range: Range) -> Option<Conflict> {
        let g = self.inner();
        let f = g.files.get(&file)?;
        // An owner that holds nothing has no id: no lock is its own.
        let id = g.books.ids.get(owner).copied().unwrap_or(OwnerId::MAX);
        let (other, at) = f.held_conflict(id, kind, range)?;
        conflict_at(f, &g.books, other, at)
    }

    /// [`Self::unlock`] before its wakes are delivered.
    fn unlock_now(&self, file: FileKey, owner: &Owner, range: Range, now: Duration) -> Vec<Wake> {
        let mut g = self.inner();
        let Inner { files, books } = &mut *g;
        let (Some(&id), Some(f)) = (books.ids.get(owner), files.get_mut(&file)) else {
            return Vec::new();
        };
        let d = f.set(id, range, None);
        books.account(id, file, d, 0);
        let wakes = wake(f, books, file, now, &self.limits);
        books.tidy(id, file, f);
        if f.is_empty() {
            files.remove(&file);
        }
        wakes
    }

    /// [`Self::cancel`] before its wakes are delivered.
    fn cancel_now(&self, file: FileKey, owner: &Owner, now: Duration) -> Released {
        let mut g = self.inner();
        let Inner { files, books } = &mut *g;
        let (Some(&id), Some(f)) = (books.ids.get(owner), files.get_mut(&file)) else {
            return Released::default();
        };
        let mut out = Released::default();
        if let Some(pos) = f.waiter_pos(id) {
            f.waiters.remove(pos);
            books.account(id, file, 0, -1);
            out.waiters = 1;
            out.wakes = wake(f, books, file, now, &self.limits);
        }
        books.tidy(id, file, f);
        if f.is_empty() {
            files.remove(&file);
        }
        out
    }

    /// [`Self::release_owner_file`] before its wakes are delivered.
    fn release_owner_file_now(&self, file: FileKey, owner: &Owner, now: Duration) -> Released {
        let mut g = self.inner();
        let Inner { files, books } = &mut *g;
        let Some(&id) = books.ids.get(owner) else {
            return Released::default();
        };
        release_on(files, books, id, file, now, &self.limits)
    }

    /// [`Self::release_owner`] before its wakes are delivered.
    fn release_owner_now(&self, owner: &Owner, now: Duration) -> Released {
        let mut g = self.inner();
        let Inner { files, books } = &mut *g;
        let Some(&id) = books.ids.get(owner) else {
            return Released::default();
        };
        release_all(files, books, id, now, &self.limits)
    }

    /// [`Self::release_client`] before its wakes are delivered.
    fn release_client_now(&self, client: &Client, now: Duration) -> Released {
        let mut g = self.inner();
        let Inner { files, books } = &mut *g;
        let owners: Vec<OwnerId> = books
            .client_ids
            .get(client)
            .and_then(|c| books.clients.get(c))
            .map(|c| c.owners.iter().copied().collect())
            .unwrap_or_default();
        let mut out = Released::default();
        for id in owners {
            let r = release_all(files, books, id, now, &self.limits);
            out.locks += r.locks;
            out.waiters += r.waiters;
            out.wakes.extend(r.wakes);
        }
        // Another owner's wake may have been an owner of this client.
        out.wakes.retain(|w| w.owner.client != *client);
        out
    }

    /// [`Self::expire_waiters`] before its wakes are delivered.
    fn expire_waiters_now(&self, now: Duration) -> Vec<Wake> {
        let mut g = self.inner();
        let Inner { files, books } = &mut *g;
        let keys: Vec<FileKey> = files
            .iter()
            .filter(|(_, f)| f.waiters.iter().any(|w| w.expired(now)))
            .map(|(k, _)| *k)
            .collect();
        let mut wakes = Vec::new();
        for k in keys {
            let Some(f) = files.get_mut(&k) else { continue };
            let gone: Vec<OwnerId> = f
                .waiters
                .iter()
                .filter(|w| w.expired(now))
                .map(|w| w.owner)
                .collect();
            wakes.extend(wake(f, books, k, now, &self.limits));
            for id in gone {
                books.tidy(id, k, f);
            }
            if f.is_empty() {
                files.remove(&k);
            }
        }
        wakes
    }

    /// Takes (or changes: upgrade, downgrade, extend, shrink by re-locking) a lock.
    ///
    /// A granted request replaces the owner's locks on its range with one of its kind,
    /// merged with the owner's adjacent locks of that kind; it ends the owner's waiting
    /// request on the file, if any. A refused request changes no lock; a waiting one is
    /// queued or keeps its place ([`LockError::Denied`] `queued`).
    ///
    /// A request that waits is first checked for a deadlock: when an owner it would
    /// wait for waits, directly or through others, for this owner, it is refused with
    /// [`LockError::Deadlock`] (bounded by [`limits::MAX_DEADLOCK_SEARCH_STEPS`]).
    ///
    /// # Errors
    /// [`LockError::Denied`] with the lock in the way; [`LockError::Deadlock`] when
    /// waiting would deadlock; [`LockError::Limit`] when a bound would be passed.
    pub fn lock(&self, req: &Request, now: Duration) -> Result<Granted, LockError> {
        let (r, wakes) = self.lock_now(req, now);
        self.observe(Some(req.file));
        let wakes = self.deliver(wakes);
        r.map(|()| Granted { wakes })
    }

    /// Unlocks `range` of `owner`'s locks on `file` (nothing held there is not an
    /// error). Never refused: an unlock of a range's middle may leave the owner one lock
    /// over its client's bound.
    pub fn unlock(&self, file: FileKey, owner: &Owner, range: Range, now: Duration) -> Vec<Wake> {
        let w = self.unlock_now(file, owner, range, now);
        self.observe(Some(file));
        self.deliver(w)
    }

    /// Removes `owner`'s waiting request on `file` (NLM CANCEL; an NFSv4 client that
    /// gave up). `Released::waiters` is 1 when there was one.
    pub fn cancel(&self, file: FileKey, owner: &Owner, now: Duration) -> Released {
        let mut r = self.cancel_now(file, owner, now);
        self.observe(Some(file));
        r.wakes = self.deliver(r.wakes);
        r
    }

    /// Releases every lock and waiting request of `owner` on `file` (an NFSv4 lock-owner
    /// whose open is gone; a process that closed the file).
    pub fn release_owner_file(&self, file: FileKey, owner: &Owner, now: Duration) -> Released {
        let mut r = self.release_owner_file_now(file, owner, now);
        self.observe(Some(file));
        r.wakes = self.deliver(r.wakes);
        r
    }

    /// Releases every lock and waiting request of `owner`.
    pub fn release_owner(&self, owner: &Owner, now: Duration) -> Released {
        let mut r = self.release_owner_now(owner, now);
        if r != Released::default() {
            self.observe(None);
        }
        r.wakes = self.deliver(r.wakes);
        r
    }

    /// Releases every lock and waiting request of every owner of `client` (an NFSv4
    /// lease expiry, an NSM reboot notice, NLM FREE_ALL).
    pub fn release_client(&self, client: &Client, now: Duration) -> Released {
        let mut r = self.release_client_now(client, now);
        if r != Released::default() {
            self.observe(None);
        }
        r.wakes = self.deliver(r.wakes);
        r
    }

    /// Drops the [`Wait::Poll`] waiters whose deadline passed and wakes those behind
    /// them. Call it from a timer (the NFSv4 lease timer); between calls an expired
    /// waiter holds nobody back.
    pub fn expire_waiters(&self, now: Duration) -> Vec<Wake> {
        let w = self.expire_waiters_now(now);
        if !w.is_empty() {
            self.observe(None);
        }
        self.deliver(w)
    }

    /// Hands `wakes` of requests that waited outside this manager (for another server's
    /// lock, [`WaiterId::ELSEWHERE`]) to their protocols' wakers, as the waiters it
    /// wakes itself, and counts them with those. For a `granted` wake the caller has
    /// taken the lock for the owner here first.
    pub fn wake(&self, wakes: Vec<Wake>) -> Vec<Wake> {
        {
            let mut g = self.inner();
            for w in &wakes {
                g.books.metrics.get_mut(w.owner.protocol()).wakes += 1;
            }
        }
        self.deliver(wakes)
    }

    /// `owner`'s locks on `file`, in order of offset.
    #[must_use]
    pub fn locks_of(&self, file: FileKey, owner: &Owner) -> Vec<(Range, Kind)> {
        let g = self.inner();
        let (Some(id), Some(f)) = (g.books.ids.get(owner), g.files.get(&file)) else {
            return Vec::new();
        };
        f.pieces(*id, Range::WHOLE)
    }

    /// What another server must not be granted on `file` while this one holds what it
    /// holds: every byte held, exclusive where any holder writes, and every byte a
    /// [`Wait::Grant`] waiter waits for, of its kind (this manager grants it without
    /// asking anyone when its range frees here), merged into maximal ranges in order of
    /// offset. [`Wait::Poll`] waiters are left out: they ask again to take their lock.
    #[must_use]
    pub fn mirror(&self, file: FileKey) -> Vec<(Range, Kind)> {
        let g = self.inner();
        let Some(f) = g.files.get(&file) else {
            return Vec::new();
        };
        let mut m: segments::Segments<Kind> = segments::Segments::default();
        for (piece, hs) in f.holders.overlapping(Range::WHOLE) {
            let k = if hs.iter().any(|(_, k)| *k == Kind::Write) {
                Kind::Write
            } else {
                Kind::Read
            };
            m.update(piece, |_| Some(k));
        }
        for w in f.waiters.iter().filter(|w| w.delivery == Delivery::Grant) {
            m.update(w.range, |old| {
                Some(old.copied().map_or(w.kind, |o| o.max(w.kind)))
            });
        }
        m.overlapping(Range::WHOLE).map(|(r, k)| (r, *k)).collect()
    }

    /// Whether `owner` holds any lock on `file` (NFSv4 FREE_STATEID and CLOSE ask).
    #[must_use]
    pub fn holds_locks(&self, file: FileKey, owner: &Owner) -> bool {
        let g = self.inner();
        let (Some(id), Some(f)) = (g.books.ids.get(owner), g.files.get(&file)) else {
            return false;
        };
        f.owners.contains_key(id)
    }

    /// `owner`'s waiting request on `file`, if it has one.
    #[must_use]
    pub fn waiting(&self, file: FileKey, owner: &Owner) -> Option<WaiterId> {
        let g = self.inner();
        let (Some(id), Some(f)) = (g.books.ids.get(owner), g.files.get(&file)) else {
            return None;
        };
        f.waiter_pos(*id).map(|p| f.waiters[p].id)
    }

    /// The requests waiting on `file`, in queue order: owner, kind, range (expired
    /// [`Wait::Poll`] waiters the timer has not dropped yet included).
    #[must_use]
    pub fn waiters(&self, file: FileKey) -> Vec<(Owner, Kind, Range)> {
        let g = self.inner();
        g.files.get(&file).map_or_else(Vec::new, |f| {
            f.waiters
                .iter()
                .map(|w| (g.books.owner(w.owner).clone(), w.kind, w.range))
                .collect()
        })
    }

    /// Locks held by `client`.
    #[must_use]
    pub fn client_locks(&self, client: &Client) -> usize {
        let g = self.inner();
        g.books
            .client_ids
            .get(client)
            .and_then(|c| g.books.clients.get(c))
            .map_or(0, |c| c.locks)
    }

    /// Counts per protocol.
    #[must_use]
    pub fn metrics(&self) -> Metrics {
        self.inner().books.metrics
    }

    /// (locks, waiters, files with either) in total, for the memory bound.
    #[must_use]
    pub fn counts(&self) -> (usize, usize, usize) {
        let g = self.inner();
        (g.books.locks, g.books.waiters, g.files.len())
    }
}

const fn protocol_index(p: Protocol) -> usize {
    match p {
        Protocol::Nfs4 => 0,
        Protocol::Nlm => 1,
    }
}

/// The lock (or earlier waiter) in the way of `req` when it would wait and waiting
/// would close a cycle of waiters (`deadlock`); `None` otherwise.
fn deadlock_check(
    files: &FxHashMap<FileKey, FileLocks>,
    books: &Books,
    id: OwnerId,
    req: &Request,
    now: Duration,
) -> Option<Conflict> {
    if req.wait == Wait::No {
        return None;
    }
    let f = files.get(&req.file)?;
    let before = f.waiter_pos(id).unwrap_or(f.waiters.len());
    let asking = deadlock::Asking {
        me: id,
        file: f,
        kind: req.kind,
        range: req.range,
        before,
    };
    if !deadlock::closes_cycle(
        files,
        books,
        &asking,
        now,
        limits::MAX_DEADLOCK_SEARCH_STEPS,
    ) {
        return None;
    }
    if let Some((other, at)) = f.held_conflict(id, req.kind, req.range) {
        return conflict_at(f, books, other, at);
    }
    let w = f.waiting_conflict(id, req.kind, req.range, before, now)?;
    Some(Conflict {
        owner: books.owner(w.owner).clone(),
        kind: w.kind,
        range: w.range,
    })
}

/// Takes `id`'s waiting request on `file` out of the queue, if it has one; returns the
/// waiters that frees.
fn leave_queue(
    f: &mut FileLocks,
    books: &mut Books,
    id: OwnerId,
    file: FileKey,
    now: Duration,
    limits: &Limits,
) -> Vec<Wake> {
    let Some(pos) = f.waiter_pos(id) else {
        return Vec::new();
    };
    f.waiters.remove(pos);
    books.account(id, file, 0, -1);
    wake(f, books, file, now, limits)
}

fn conflict_at(f: &FileLocks, books: &Books, other: OwnerId, at: u64) -> Option<Conflict> {
    let (range, kind) = f.lock_at(other, at)?;
    Some(Conflict {
        owner: books.owner(other).clone(),
        kind,
        range,
    })
}

fn try_lock(
    f: &mut FileLocks,
    books: &mut Books,
    id: OwnerId,
    req: &Request,
    now: Duration,
    limits: &Limits,
) -> Result<Granted, LockError> {
    if let Some((other, at)) = f.held_conflict(id, req.kind, req.range) {
        let conflict = conflict_at(f, books, other, at).ok_or(LockError::Limit(
            // The holder's own map must hold the byte the holders map says it holds.
            LimitReason::FileEntries,
        ))?;
        return Err(deny(f, books, id, req, conflict, limits));
    }
    let mine = f.waiter_pos(id);
    let ahead = mine.unwrap_or(f.waiters.len());
    if let Some(w) = f.waiting_conflict(id, req.kind, req.range, ahead, now) {
        let conflict = Conflict {
            owner: books.owner(w.owner).clone(),
            kind: w.kind,
            range: w.range,
        };
        return Err(deny(f, books, id, req, conflict, limits));
    }
    take(f, books, id, req.file, req.kind, req.range, limits).map_err(LockError::Limit)?;
    if let Some(pos) = mine {
        f.waiters.remove(pos);
        books.account(id, req.file, 0, -1);
    }
    Ok(Granted {
        wakes: wake(f, books, req.file, now, limits),
    })
}

/// Sets the lock, or leaves everything as it was when a bound would be passed.
fn take(
    f: &mut FileLocks,
    books: &mut Books,
    id: OwnerId,
    file: FileKey,
    kind: Kind,
    range: Range,
    limits: &Limits,
) -> Result<(), LimitReason> {
    let around = Range::new(
        range.start().saturating_sub(1),
        range.end().saturating_add(1),
    )
    .unwrap_or(range);
    let before = f.pieces(id, around);
    let d = f.set(id, range, Some(kind));
    let grows = usize::try_from(d).unwrap_or(0);
    let client = books.client_of(id).map_or(0, |c| c.locks);
    let over = if books.locks + grows > limits.max_locks {
        Some(LimitReason::TotalLocks)
    } else if client + grows > limits.max_locks_per_client {
        Some(LimitReason::ClientLocks)
    } else if f.entries > limits.max_entries_per_file {
        Some(LimitReason::FileEntries)
    } else {
        None
    };
    if let Some(reason) = over {
        f.set(id, around, None);
        for (r, k) in before {
            f.set(id, r, Some(k));
        }
        return Err(reason);
    }
    books.account(id, file, d, 0);
    Ok(())
}

/// Refuses `req`; queues it (or keeps its place) when it waits.
fn deny(
    f: &mut FileLocks,
    books: &mut Books,
    id: OwnerId,
    req: &Request,
    conflict: Conflict,
    limits: &Limits,
) -> LockError {
    let delivery = match req.wait {
        Wait::No => {
            return LockError::Denied {
                conflict,
                queued: None,
            }
        }
        Wait::Poll { deadline } => Delivery::Poll { deadline },
        Wait::Grant => Delivery::Grant,
    };
    if let Some(pos) = f.waiter_pos(id) {
        let w = &mut f.waiters[pos];
        w.kind = req.kind;
        w.range = req.range;
        w.delivery = delivery;
        w.notified = false;
        return LockError::Denied {
            conflict,
            queued: Some(w.id),
        };
    }
    let client = books.client_of(id).map_or(0, |c| c.waiters);
    if books.waiters >= limits.max_waiters || client >= limits.max_waiters_per_client {
        return LockError::Denied {
            conflict,
            queued: None,
        };
    }
    let wid = books.new_waiter();
    f.waiters.push_back(Waiter {
        id: wid,
        owner: id,
        kind: req.kind,
        range: req.range,
        delivery,
        notified: false,
    });
    books.account(id, req.file, 0, 1);
    LockError::Denied {
        conflict,
        queued: Some(wid),
    }
}

/// Walks `file`'s queue in order: drops expired waiters, grants [`Wait::Grant`] waiters
/// nothing is in the way of, tells [`Wait::Poll`] waiters once. A waiter is in the way of
/// the later ones that conflict with it until it leaves the queue.
fn wake(
    f: &mut FileLocks,
    books: &mut Books,
    file: FileKey,
    now: Duration,
    limits: &Limits,
) -> Vec<Wake> {
    let mut wakes = Vec::new();
    let mut i = 0;
    while i < f.waiters.len() {
        let w = f.waiters[i].clone();
        if w.expired(now) {
            f.waiters.remove(i);
            books.account(w.owner, file, 0, -1);
            continue;
        }
        let blocked = f.held_conflict(w.owner, w.kind, w.range).is_some()
            || f.waiting_conflict(w.owner, w.kind, w.range, i, now)
                .is_some();
        if blocked {
            i += 1;
            continue;
        }
        let owner = books.owner(w.owner).clone();
        let wake = |granted| Wake {
            waiter: w.id,
            file,
            owner: owner.clone(),
            kind: w.kind,
            range: w.range,
            granted,
        };
        match w.delivery {
            Delivery::Grant => {
                if take(f, books, w.owner, file, w.kind, w.range, limits).is_err() {
                    // A bound: it stays queued until locks are released.
                    i += 1;
                    continue;
                }
                let done = wake(true);
                f.waiters.remove(i);
                books.account(w.owner, file, 0, -1);
                let m = books.metrics.get_mut(done.owner.protocol());
                m.grants += 1;
                m.wakes += 1;
                wakes.push(done);
            }
            Delivery::Poll { .. } => {
                if !w.notified {
                    f.waiters[i].notified = true;
                    let told = wake(false);
                    books.metrics.get_mut(told.owner.protocol()).wakes += 1;
                    wakes.push(told);
                }
                i += 1;
            }
        }
    }
    wakes
}

fn release_on(
    files: &mut FxHashMap<FileKey, FileLocks>,
    books: &mut Books,
    id: OwnerId,
    file: FileKey,
    now: Duration,
    limits: &Limits,
) -> Released {
    let Some(f) = files.get_mut(&file) else {
        return Released::default();
    };
    let mut out = Released::default();
    let held = f.owners.get(&id).map_or(0, segments::Segments::len);
    if held > 0 {
        let d = f.set(id, Range::WHOLE, None);
        debug_assert_eq!(d, -isize::try_from(held).unwrap_or(0));
        books.account(id, file, d, 0);
        out.locks = held;
    }
    if let Some(pos) = f.waiter_pos(id) {
        f.waiters.remove(pos);
        books.account(id, file, 0, -1);
        out.waiters = 1;
    }
    out.wakes = wake(f, books, file, now, limits);
    books.tidy(id, file, f);
    if f.is_empty() {
        files.remove(&file);
    }
    out
}

fn release_all(
    files: &mut FxHashMap<FileKey, FileLocks>,
    books: &mut Books,
    id: OwnerId,
    now: Duration,
    limits: &Limits,
) -> Released {
    let keys: Vec<FileKey> = books
        .owners
        .get(&id)
        .map(|o| o.files.iter().copied().collect())
        .unwrap_or_default();
    let mut out = Released::default();
    for k in keys {
        let r = release_on(files, books, id, k, now, limits);
        out.locks += r.locks;
        out.waiters += r.waiters;
        out.wakes.extend(r.wakes);
    }
    out
}
