//! NFSv4.1 server state (RFC 8881 sections 2.4, 2.10, 8, 9): client records, sessions
//! and their reply slots, open stateids with share reservations, leases and the grace
//! period after a restart. Protocol-level and storage-neutral: files are a key `K` the
//! server chooses (export and file id), time is a monotonic `Duration` the caller passes
//! in (tests drive it by hand), and nothing here does I/O or arms timers — the server
//! asks [`State::lease_deadline`] and [`State::expire`] from its timers.
//!
//! # What it promises
//!
//! - **Exactly once.** A request admitted on a slot runs once; its retransmission gets the
//!   kept reply or `NFS4ERR_RETRY_UNCACHED_REP`, never a second run ([`session`]).
//! - **The RFC's record rules.** EXCHANGE_ID and CREATE_SESSION follow RFC 8881 sections
//!   18.35.5 and 18.36.4 case by case ([`client`]): a rebooted client gets a new record
//!   that replaces the old one (and drops its state) only when confirmed; another
//!   principal cannot take over a record with state.
//! - **Share reservations** are enforced between every open of every client ([`open`]);
//!   stateids are checked for owner, file, version (`OLD_STATEID`) and mode.
//! - **Leases.** A client that stops renewing (SEQUENCE) for a lease loses its sessions,
//!   opens and record at the next [`State::expire`]; nothing else removes state behind a
//!   live client's back.
//! - **Grace.** After a restart with clients recorded by the previous boot, new opens get
//!   `NFS4ERR_GRACE` until those clients reclaimed (RECLAIM_COMPLETE) or the grace period
//!   ended; reclaims are refused outside it and from clients the previous boot did not
//!   record (`NFS4ERR_NO_GRACE`).
//! - **Lock stateids** ([`lock`]) are derived from an open, one per lock-owner and file,
//!   and checked like open stateids; the locks are the shared lock manager's
//!   ([`Config::locks`]), so they die with the client's lease, its reboot or its
//!   DESTROY_CLIENTID, and a CLOSE or FREE_STATEID that would strand them is refused
//!   (`NFS4ERR_LOCKS_HELD`).
//! - **Bounded**: every table has a limit in [`limits`].
//!
//! Locking: one mutex over clients, opens and grace (operations that change state are a
//! small part of the traffic), a read-mostly map of sessions, and one mutex per session's
//! slot table, so SEQUENCE of different sessions does not contend.
#![forbid(unsafe_code)]

pub mod client;
pub mod limits;
pub mod lock;
pub mod open;
pub mod session;

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use nfs4::ops::{session_flags, CreateSessionArgs, SequenceArgs};
use nfs4::results::CreateSessionOk;
use nfs4::types::{ChannelAttrs4, Sessionid4, Verifier4};
use nfs4::{Nfsstat4, Stateid4};

pub use client::{Client, Clients, Exchanged, Principal};
pub use lock::{LockKey, LockStateid, LockStateids};
pub use open::{Closed, Granted, IoStateid, Open, Opens};
pub use session::{Admission, Session, Ticket};

/// A client id (`clientid4`).
pub type ClientId = u64;

/// How a server's NFSv4 state is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// The lease clients must renew within.
    pub lease: Duration,
    /// This boot of the server: the high half of client ids and the first word of stateids.
    pub epoch: u32,
    /// Owners of the clients the previous boot had confirmed (from the state directory):
    /// they may reclaim during the grace period.
    pub previous_owners: Vec<Bytes>,
    /// How long the grace period lasts at most (normally one lease).
    pub grace: Duration,
    /// Most client records.
    pub max_clients: usize,
    /// The server's lock manager (shared with NLM): the locks of lock stateids.
    pub locks: Arc<locks::LockManager>,
    /// The server's share reservations (shared with NLM SHARE): every open's access and
    /// deny are kept there too, so each protocol's are in the other's way.
    pub shares: Arc<locks::ShareTable>,
}

impl Config {
    /// Defaults from [`limits`] for a server of boot `epoch` with no previous clients.
    #[must_use]
    pub fn new(epoch: u32) -> Self {
        let lease = Duration::from_secs(u64::from(limits::DEFAULT_LEASE_SECS));
        Self {
            lease,
            epoch,
            previous_owners: Vec::new(),
            grace: lease,
            max_clients: limits::MAX_CLIENTS,
            locks: Arc::new(locks::LockManager::default()),
            shares: Arc::new(locks::ShareTable::default()),
        }
    }
}

/// What an OPEN asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRequest<K> {
    /// The open-owner (`open_owner4.owner`).
    pub owner: Bytes,
    pub file: K,
    /// OPEN4_SHARE_ACCESS_* (1..=3).
    pub access: u32,
    /// OPEN4_SHARE_DENY_* (0..=3).
    pub deny: u32,
    /// CLAIM_PREVIOUS: a reclaim after a server restart.
    pub reclaim: bool,
}

/// State released when a client went away: the files whose opens it held, and how many
/// locks it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released<K> {
    pub client: ClientId,
    pub closed: Vec<Closed<K>>,
    pub locks: usize,
}

#[derive(Debug)]
struct Grace {
    ends: Duration,
    /// Previous-boot owners that have not sent RECLAIM_COMPLETE yet.
    pending: HashSet<Bytes>,
}

impl Grace {
    fn active(&self, now: Duration) -> bool {
        now < self.ends && !self.pending.is_empty()
    }
}

#[derive(Debug)]
struct Inner<K> {
    clients: Clients,
    opens: Opens<K>,
    locks: LockStateids<K>,
    grace: Grace,
    /// State of expired clients an OPEN purged because it was in the way (see
    /// [`State::take_courtesy_releases`]).
    courtesy: Vec<Released<K>>,
}

/// The NFSv4 state of one server.
#[derive(Debug)]
pub struct State<K> {
    config: Config,
    inner: Mutex<Inner<K>>,
    sessions: RwLock<HashMap<Sessionid4, Arc<Session>>>,
}

/// The server's grant for a channel: the client's ask, capped by the server's limits.
fn fore_channel(ask: &ChannelAttrs4) -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: ask.ca_maxrequestsize.min(limits::MAX_REQUEST_BYTES),
        ca_maxresponsesize: ask.ca_maxresponsesize.min(limits::MAX_RESPONSE_BYTES),
        ca_maxresponsesize_cached: ask
            .ca_maxresponsesize_cached
            .min(limits::MAX_CACHED_REPLY_BYTES),
        ca_maxoperations: ask.ca_maxoperations.min(limits::MAX_OPERATIONS),
        ca_maxrequests: ask.ca_maxrequests.clamp(1, limits::MAX_SLOTS),
        ca_rdma_ird: None,
    }
}

/// The server's grant for the back channel, or `NFS4ERR_TOOSMALL` when the server could
/// not call the client on it (RFC 8881 section 18.36.3): its calls must fit the client's
/// sizes, and a CB_COMPOUND holds CB_SEQUENCE and one more operation.
fn back_channel(ask: &ChannelAttrs4) -> Result<ChannelAttrs4, Nfsstat4> {
    if ask.ca_maxrequestsize < MIN_BACK_CALL_BYTES
        || ask.ca_maxresponsesize < MIN_BACK_REPLY_BYTES
        || ask.ca_maxoperations < 2
    {
        return Err(Nfsstat4::Toosmall);
    }
    Ok(ChannelAttrs4 {
        ca_maxrequests: ask.ca_maxrequests.clamp(1, limits::MAX_BACK_SLOTS),
        ca_rdma_ird: None,
        ..*ask
    })
}

/// The smallest fore-channel request a session can carry (`ca_maxrequestsize`): a
/// COMPOUND of SEQUENCE alone with an empty tag (tag, minor version, count, operation
/// number, 32 bytes of arguments with the session id) behind an RPC call header with
/// AUTH_NONE (six words and two empty credentials). Asks below it are `NFS4ERR_TOOSMALL`.
const MIN_REQUEST_BYTES: u32 = (6 + 2 + 2) * 4 + (4 * 4 + 16 + 4 * 4);

/// The smallest fore-channel reply (`ca_maxresponsesize`): SEQUENCE's result alone (status,
/// empty tag, count, operation number and status, session id, five words) behind the RPC
/// reply header with an AUTH_NONE verifier (six words).
const MIN_RESPONSE_BYTES: u32 = 6 * 4 + (5 * 4 + 16 + 5 * 4);

/// The smallest back channel granary can call on: the CB_COMPOUND of CB_SEQUENCE and a
/// recall (a stateid, a flag and a handle of at most 128 bytes) behind an RPC call header
/// with an AUTH_SYS credential of a short machine name; a reply of CB_SEQUENCE's result
/// and one status.
const MIN_BACK_CALL_BYTES: u32 = 512;
const MIN_BACK_REPLY_BYTES: u32 = 128;

impl<K: Clone + Eq + Hash + LockKey> State<K> {
    #[must_use]
    pub fn new(config: Config, now: Duration) -> Self {
        let grace = Grace {
            ends: now + config.grace,
            pending: config.previous_owners.iter().cloned().collect(),
        };
        Self {
            inner: Mutex::new(Inner {
                clients: Clients::new(config.epoch),
                opens: Opens::new(config.epoch, Arc::clone(&config.shares)),
                locks: LockStateids::new(config.epoch),
                grace,
                courtesy: Vec::new(),
            }),
            sessions: RwLock::new(HashMap::new()),
            config,
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner<K>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lease time clients are told (`lease_time` attribute).
    #[must_use]
    pub fn lease(&self) -> Duration {
        self.config.lease
    }

    /// EXCHANGE_ID.
    ///
    /// # Errors
    /// See [`Clients::exchange_id`].
    pub fn exchange_id(
        &self,
        owner: &Bytes,
        verifier: Verifier4,
        flags: u32,
        principal: Principal,
        now: Duration,
    ) -> Result<Exchanged, Nfsstat4> {
        let mut g = self.inner();
        // Records that hold state another principal must not take over.
        let busy: HashSet<ClientId> = g
            .clients
            .iter()
            .filter(|c| !c.sessions.is_empty() || g.opens.count_client(c.id) > 0)
            .map(|c| c.id)
            .collect();
        let max = self.config.max_clients;
        g.clients
            .exchange_id(owner, verifier, flags, principal, now, max, |id| {
                busy.contains(&id)
            })
    }

    /// CREATE_SESSION: confirms the record if needed (dropping the state of the record it
    /// replaces, returned) and makes a session. A retransmission gets the first reply.
    ///
    /// # Errors
    /// `NFS4ERR_STALE_CLIENTID`, `NFS4ERR_SEQ_MISORDERED`, `NFS4ERR_CLID_INUSE`,
    /// `NFS4ERR_TOOSMALL`, `NFS4ERR_INVAL` (RDMA), `NFS4ERR_RESOURCE`.
    pub fn create_session(
        &self,
        args: &CreateSessionArgs,
        principal: Principal,
        now: Duration,
    ) -> Result<(CreateSessionOk, Option<Released<K>>), Nfsstat4> {
        let mut g = self.inner();
        // A record not confirmed within a lease is gone (RFC 8881 section 18.35.4), whether
        // or not the lease sweep has come by yet.
        let unconfirmed_since = g
            .clients
            .get(args.csa_clientid)
            .filter(|c| !c.confirmed)
            .map(|c| c.renewed);
        if unconfirmed_since.is_some_and(|since| now.saturating_sub(since) > self.config.lease) {
            g.clients.remove(args.csa_clientid);
            return Err(Nfsstat4::StaleClientid);
        }
        if let Some(replay) =
            g.clients
                .check_create_session(args.csa_clientid, args.csa_sequence, principal)?
        {
            return Ok((replay, None));
        }
        if args.csa_flags & session_flags::CONN_RDMA != 0 {
            return Err(Nfsstat4::Inval);
        }
        let fore = fore_channel(&args.csa_fore_chan_attrs);
        if fore.ca_maxrequestsize < MIN_REQUEST_BYTES
            || fore.ca_maxresponsesize < MIN_RESPONSE_BYTES
        {
            return Err(Nfsstat4::Toosmall);
        }
        let back = back_channel(&args.csa_back_chan_attrs)?;
        let sessions_now = g
            .clients
            .get(args.csa_clientid)
            .map_or(0, |c| c.sessions.len());
        if sessions_now >= limits::MAX_SESSIONS_PER_CLIENT {
            return Err(Nfsstat4::Resource);
        }
        let replaced = g
            .clients
            .confirm(args.csa_clientid)
            .map(|old| self.purge(&mut g, old));
        let id = new_session_id(args.csa_clientid);
        let flags = args.csa_flags & session_flags::CONN_BACK_CHAN;
        let session = Arc::new(Session::new(
            id,
            args.csa_clientid,
            fore,
            back,
            args.csa_cb_program,
            flags,
        ));
        let ok = CreateSessionOk {
            csr_sessionid: id,
            csr_sequence: args.csa_sequence,
            csr_flags: flags,
            csr_fore_chan_attrs: fore,
            csr_back_chan_attrs: back,
        };
        let c = g
            .clients
            .get_mut(args.csa_clientid)
            .ok_or(Nfsstat4::Serverfault)?;
        c.sessions.push(id);
        c.next_cs_sequence = c.next_cs_sequence.wrapping_add(1);
        c.last_cs = Some(ok.clone());
        c.renewed = now;
        self.sessions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, session);
        drop(g);
        let replaced = replaced.map(|r| self.release_locks(r, now));
        Ok((ok, replaced))
    }

    /// The session a SEQUENCE (or BIND_CONN_TO_SESSION) names.
    ///
    /// # Errors
    /// `NFS4ERR_BADSESSION`.
    pub fn session(&self, id: &Sessionid4) -> Result<Arc<Session>, Nfsstat4> {
        self.sessions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
            .ok_or(Nfsstat4::Badsession)
    }

    /// SEQUENCE: admits the request on its slot and renews the client's lease.
    ///
    /// # Errors
    /// `NFS4ERR_BADSESSION` and the slot errors of [`Session::admit`].
    pub fn sequence(
        &self,
        args: &SequenceArgs,
        now: Duration,
    ) -> Result<(Arc<Session>, Admission), Nfsstat4> {
        let session = self.session(&args.sa_sessionid)?;
        let admission = self.admit(&session, args, now)?;
        Ok((session, admission))
    }

    /// [`Self::sequence`] on a session the caller already looked up (the COMPOUND loop
    /// checks the channel sizes on it first): one lookup per SEQUENCE, not two.
    ///
    /// # Errors
    /// The slot errors of [`Session::admit`].
    pub fn admit(
        &self,
        session: &Arc<Session>,
        args: &SequenceArgs,
        now: Duration,
    ) -> Result<Admission, Nfsstat4> {
        debug_assert_eq!(session.id, args.sa_sessionid);
        let admission = session.admit(args.sa_slotid, args.sa_sequenceid)?;
        if let Some(c) = self.inner().clients.get_mut(session.client) {
            c.renewed = now;
        }
        Ok(admission)
    }

    /// DESTROY_SESSION.
    ///
    /// # Errors
    /// `NFS4ERR_BADSESSION`.
    pub fn destroy_session(&self, id: &Sessionid4) -> Result<(), Nfsstat4> {
        let removed = self
            .sessions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        let session = removed.ok_or(Nfsstat4::Badsession)?;
        if let Some(c) = self.inner().clients.get_mut(session.client) {
            c.sessions.retain(|s| s != id);
        }
        Ok(())
    }

    /// DESTROY_CLIENTID: only a client with no sessions and no opens.
    ///
    /// # Errors
    /// `NFS4ERR_STALE_CLIENTID`, `NFS4ERR_CLIENTID_BUSY`.
    pub fn destroy_clientid(&self, id: ClientId) -> Result<(), Nfsstat4> {
        let mut g = self.inner();
        let c = g.clients.get(id).ok_or(Nfsstat4::StaleClientid)?;
        if !c.sessions.is_empty() || g.opens.count_client(id) > 0 {
            return Err(Nfsstat4::ClientidBusy);
        }
        g.clients.remove(id);
        Ok(())
    }

    /// RECLAIM_COMPLETE of `client` (once).
    ///
    /// # Errors
    /// `NFS4ERR_COMPLETE_ALREADY`, `NFS4ERR_STALE_CLIENTID`.
    pub fn reclaim_complete(&self, client: ClientId) -> Result<(), Nfsstat4> {
        let mut g = self.inner();
        let c = g.clients.get_mut(client).ok_or(Nfsstat4::StaleClientid)?;
        if c.reclaim_complete {
            return Err(Nfsstat4::CompleteAlready);
        }
        c.reclaim_complete = true;
        let owner = c.owner.clone();
        g.grace.pending.remove(&owner);
        Ok(())
    }

    /// When the grace period ends at the latest, if there is one (for the server's
    /// timer; it may end earlier, when every previous client sent RECLAIM_COMPLETE).
    #[must_use]
    pub fn grace_deadline(&self) -> Option<Duration> {
        let g = self.inner();
        (!g.grace.pending.is_empty()).then_some(g.grace.ends)
    }

    /// Ends the grace period if its time is up by `now`, forgetting the previous boot's
    /// owners that never reclaimed. Returns how many there were, or `None` when the grace
    /// period still runs.
    pub fn end_grace(&self, now: Duration) -> Option<usize> {
        let mut g = self.inner();
        if now < g.grace.ends && !g.grace.pending.is_empty() {
            return None;
        }
        let unclaimed = g.grace.pending.len();
        g.grace.pending.clear();
        Some(unclaimed)
    }

    /// Whether the grace period is on.
    #[must_use]
    pub fn in_grace(&self, now: Duration) -> bool {
        self.inner().grace.active(now)
    }

    /// OPEN of `req.file` by an open-owner of `client`.
    ///
    /// # Errors
    /// `NFS4ERR_GRACE` (a new open during grace), `NFS4ERR_NO_GRACE` (a reclaim after
    /// it, from a client the previous boot did not record, or after the client's
    /// RECLAIM_COMPLETE), and those of [`Opens::open`].
    pub fn open(
        &self,
        client: ClientId,
        req: &OpenRequest<K>,
        now: Duration,
    ) -> Result<Granted, Nfsstat4> {
        let mut g = self.inner();
        grace_rules(&g, client, req.reclaim, now)?;
        if g.opens.count_client(client) >= limits::MAX_OPENS_PER_CLIENT {
            return Err(Nfsstat4::Resource);
        }
        let first = g.opens.open(
            client,
            &req.owner,
            &req.file,
            req.access,
            req.deny,
            limits::MAX_OPENS,
        );
        if first != Err(Nfsstat4::ShareDenied) {
            return first;
        }
        // A courteous server: a client whose lease ran out keeps its state only until it
        // is in another client's way.
        let lease = self.config.lease;
        let dead: Vec<ClientId> = g
            .clients
            .iter()
            .filter(|c| c.renewed + lease <= now && c.id != client)
            .map(|c| c.id)
            .collect();
        if dead.is_empty() {
            return first;
        }
        let gone: Vec<Released<K>> = dead.into_iter().map(|id| self.purge(&mut g, id)).collect();
        let again = g.opens.open(
            client,
            &req.owner,
            &req.file,
            req.access,
            req.deny,
            limits::MAX_OPENS,
        );
        drop(g);
        let released: Vec<Released<K>> = gone
            .into_iter()
            .map(|r| self.release_locks(r, now))
            .collect();
        self.inner().courtesy.extend(released);
        again
    }

    /// The state an [`State::open`] released from expired clients that were in its way
    /// (a courteous server keeps an expired client's opens only until they conflict): the
    /// caller lets go of their files as for [`State::expire`]. Empty unless an OPEN did so.
    pub fn take_courtesy_releases(&self) -> Vec<Released<K>> {
        std::mem::take(&mut self.inner().courtesy)
    }

    /// OPEN_DOWNGRADE.
    ///
    /// # Errors
    /// See [`Opens::downgrade`].
    pub fn open_downgrade(
        &self,
        client: ClientId,
        sid: &Stateid4,
        access: u32,
        deny: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        self.inner().opens.downgrade(client, sid, access, deny)
    }

    /// CLOSE.
    ///
    /// # Errors
    /// Stateid errors.
    /// CLOSE: refused with `NFS4ERR_LOCKS_HELD` while a lock-owner of the open holds a
    /// lock on the file (RFC 8881 section 18.2.4); otherwise the open's lock stateids go
    /// with it.
    pub fn close(&self, client: ClientId, sid: &Stateid4) -> Result<Closed<K>, Nfsstat4> {
        let mut g = self.inner();
        let open = g.opens.get(client, sid)?.other;
        let derived = g.locks.of_open(&open);
        let held = derived.iter().any(|l| {
            self.config
                .locks
                .holds_locks(l.file.lock_key(), &l.lock_owner())
        });
        if held {
            return Err(Nfsstat4::LocksHeld);
        }
        for l in &derived {
            g.locks.remove(&l.other);
        }
        g.opens.close(client, sid)
    }

    /// The file an open stateid of `client` is for.
    ///
    /// # Errors
    /// Stateid errors.
    pub fn open_file(&self, client: ClientId, sid: &Stateid4) -> Result<K, Nfsstat4> {
        self.inner().opens.get(client, sid).map(|o| o.file.clone())
    }

    /// Checks an I/O stateid (see [`Opens::check_io`]).
    ///
    /// # Errors
    /// See [`Opens::check_io`].
    pub fn check_io(
        &self,
        client: ClientId,
        sid: &Stateid4,
        file: &K,
        write: bool,
    ) -> Result<IoStateid, Nfsstat4> {
        let g = self.inner();
        if !g.locks.is_lock(&sid.other) {
            return g.opens.check_io(client, sid, file, write);
        }
        // A lock stateid does I/O as the open it came from (Linux sends it while it holds
        // a lock).
        let l = g.locks.get(client, sid)?;
        if l.file != *file {
            return Err(Nfsstat4::BadStateid);
        }
        let open = Stateid4 {
            seqid: 0,
            other: l.open,
        };
        g.opens.check_io(client, &open, file, write)
    }

    /// TEST_STATEID.
    #[must_use]
    pub fn test_stateids(&self, client: ClientId, sids: &[Stateid4]) -> Vec<Nfsstat4> {
        let g = self.inner();
        sids.iter()
            .map(|s| {
                if g.locks.is_lock(&s.other) {
                    g.locks.get(client, s).err().unwrap_or(Nfsstat4::Ok)
                } else {
                    g.opens.test(client, s)
                }
            })
            .collect()
    }

    /// FREE_STATEID: a lock stateid whose lock-owner holds no lock on its file is freed;
    /// one that does, and an open stateid (freed by CLOSE), get `NFS4ERR_LOCKS_HELD`, as
    /// knfsd answers; an unknown one is `NFS4ERR_BAD_STATEID`.
    ///
    /// # Errors
    /// As above.
    pub fn free_stateid(&self, client: ClientId, sid: &Stateid4) -> Result<(), Nfsstat4> {
        let mut g = self.inner();
        if g.locks.is_lock(&sid.other) {
            let l = g.locks.get(client, sid)?;
            if self
                .config
                .locks
                .holds_locks(l.file.lock_key(), &l.lock_owner())
            {
                return Err(Nfsstat4::LocksHeld);
            }
            let other = l.other;
            g.locks.remove(&other);
            return Ok(());
        }
        match g.opens.get(client, sid) {
            Ok(_) => Err(Nfsstat4::LocksHeld),
            Err(e) => Err(e),
        }
    }

    /// The lock manager the lock stateids' locks live in.
    #[must_use]
    pub fn lock_manager(&self) -> &Arc<locks::LockManager> {
        &self.config.locks
    }

    /// The grace rules of LOCK (`reclaim` as it asks) and LOCKT (no reclaim): see
    /// [`Self::open`].
    ///
    /// # Errors
    /// `NFS4ERR_GRACE`, `NFS4ERR_NO_GRACE`,
    /// `NFS4ERR_STALE_CLIENTID`.
    pub fn check_lock_grace(
        &self,
        client: ClientId,
        reclaim: bool,
        now: Duration,
    ) -> Result<(), Nfsstat4> {
        grace_rules(&self.inner(), client, reclaim, now)
    }

    /// The open a first LOCK of lock-owner `owner` names (`open_to_lock_owner4`): the
    /// caller's, current, on `file`, opened for reading (a read lock) or writing (a write
    /// lock, `NFS4ERR_OPENMODE` otherwise, as knfsd). Returns the open's `other`.
    ///
    /// # Errors
    /// Stateid errors, `NFS4ERR_OPENMODE`, `NFS4ERR_RESOURCE` at the lock stateid bounds.
    pub fn lock_open(
        &self,
        client: ClientId,
        open_sid: &Stateid4,
        owner: &Bytes,
        file: &K,
        write: bool,
    ) -> Result<open::Other, Nfsstat4> {
        let g = self.inner();
        let o = g.opens.get(client, open_sid)?;
        if o.file != *file {
            return Err(Nfsstat4::BadStateid);
        }
        check_lock_mode(o.access, write)?;
        let other = o.other;
        if g.locks.find(client, owner, file).is_none()
            && (g.locks.len() >= limits::MAX_LOCK_STATEIDS
                || g.locks.count_client(client) >= limits::MAX_LOCK_STATEIDS_PER_CLIENT)
        {
            return Err(Nfsstat4::Resource);
        }
        Ok(other)
    }

    /// The lock stateid a LOCK (`exist_lock_owner4`) or LOCKU names: the caller's,
    /// current, on `file`; for a LOCK (`write` given) its open must allow the lock's kind.
    ///
    /// # Errors
    /// Stateid errors, `NFS4ERR_OPENMODE`.
    pub fn lock_stateid(
        &self,
        client: ClientId,
        sid: &Stateid4,
        file: &K,
        write: Option<bool>,
    ) -> Result<LockStateid<K>, Nfsstat4> {
        let g = self.inner();
        let l = g.locks.get(client, sid)?;
        if l.file != *file {
            return Err(Nfsstat4::BadStateid);
        }
        if let Some(write) = write {
            let access = g.opens.access_of(&l.open).ok_or(Nfsstat4::BadStateid)?;
            check_lock_mode(access, write)?;
        }
        Ok(l.clone())
    }

    /// A LOCK was granted to lock-owner `owner` of `client` on `file`: its lock stateid,
    /// one seqid up, or a new one derived from the open `open`.
    ///
    /// # Errors
    /// `NFS4ERR_BAD_STATEID` when the open was closed meanwhile.
    pub fn lock_granted(
        &self,
        client: ClientId,
        owner: &Bytes,
        file: &K,
        open: open::Other,
    ) -> Result<Stateid4, Nfsstat4> {
        let mut g = self.inner();
        if g.opens.access_of(&open).is_none() {
            return Err(Nfsstat4::BadStateid);
        }
        Ok(g.locks.granted(client, owner, file, open))
    }

    /// A LOCKU changed the locks of `sid`: the stateid one seqid up.
    ///
    /// # Errors
    /// Stateid errors.
    pub fn lock_changed(&self, client: ClientId, sid: &Stateid4) -> Result<Stateid4, Nfsstat4> {
        self.inner().locks.changed(client, sid)
    }

    /// A courteous server's last step: releases the state of `client` if its lease ran
    /// out (its lock is in another client's way). Returns whether it did.
    pub fn expire_client(&self, client: ClientId, now: Duration) -> bool {
        let mut g = self.inner();
        let lease = self.config.lease;
        let expired = g
            .clients
            .get(client)
            .is_some_and(|c| c.renewed + lease <= now);
        if !expired {
            return false;
        }
        let r = self.purge(&mut g, client);
        drop(g);
        self.release_locks(r, now);
        true
    }

    /// Whether any client has `file` open (a removed file's data stays until then).
    #[must_use]
    pub fn is_open(&self, file: &K) -> bool {
        self.inner().opens.is_open(file)
    }

    /// When `client`'s lease runs out, if it has a record.
    #[must_use]
    pub fn lease_deadline(&self, client: ClientId) -> Option<Duration> {
        self.inner()
            .clients
            .get(client)
            .map(|c| c.renewed + self.config.lease)
    }

    /// Removes every client whose lease ran out by `now`, with its sessions and opens.
    pub fn expire(&self, now: Duration) -> Vec<Released<K>> {
        let mut g = self.inner();
        let lease = self.config.lease;
        let dead: Vec<ClientId> = g
            .clients
            .iter()
            .filter(|c| c.renewed + lease <= now)
            .map(|c| c.id)
            .collect();
        let gone: Vec<Released<K>> = dead.into_iter().map(|id| self.purge(&mut g, id)).collect();
        drop(g);
        gone.into_iter()
            .map(|r| self.release_locks(r, now))
            .collect()
    }

    /// Removes a client's record, sessions, opens and lock stateids. Its locks are
    /// released by [`Self::release_locks`] once the caller let go of `g`: the lock
    /// manager's wakers may call back into this state.
    fn purge(&self, g: &mut Inner<K>, id: ClientId) -> Released<K> {
        g.locks.remove_client(id);
        let closed = g.opens.remove_client(id);
        if let Some(c) = g.clients.remove(id) {
            let mut sessions = self
                .sessions
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            for s in &c.sessions {
                sessions.remove(s);
            }
        }
        Released {
            client: id,
            closed,
            locks: 0,
        }
    }

    /// Releases the locks of a client [`Self::purge`] removed (not under `inner`).
    fn release_locks(&self, mut r: Released<K>, now: Duration) -> Released<K> {
        let client = locks::Client::nfs4(r.client);
        r.locks = self.config.locks.release_client(&client, now).locks;
        r
    }

    /// Owners of the confirmed clients, for the state directory (they may reclaim after
    /// the next restart).
    #[must_use]
    pub fn confirmed_owners(&self) -> Vec<Bytes> {
        self.inner()
            .clients
            .iter()
            .filter(|c| c.confirmed)
            .map(|c| c.owner.clone())
            .collect()
    }

    /// Lock stateids in total.
    #[must_use]
    pub fn lock_stateids(&self) -> usize {
        self.inner().locks.len()
    }

    /// Counts for metrics and the memory bound: (clients, sessions, opens).
    #[must_use]
    pub fn counts(&self) -> (usize, usize, usize) {
        let g = self.inner();
        let sessions = self
            .sessions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        (g.clients.len(), sessions, g.opens.len())
    }

    /// The record of `client`, if any (a copy).
    #[must_use]
    pub fn client(&self, client: ClientId) -> Option<Client> {
        self.inner().clients.get(client).cloned()
    }
}

/// Whether `client` may open or lock now: a reclaim only during grace and only by a
/// client of the previous boot that has not finished reclaiming; anything new only
/// after grace and after the client's RECLAIM_COMPLETE.
/// A read lock needs an open for reading, a write lock one for writing.
fn check_lock_mode(access: u32, write: bool) -> Result<(), Nfsstat4> {
    let need = if write {
        nfs4::ops::share::ACCESS_WRITE
    } else {
        nfs4::ops::share::ACCESS_READ
    };
    if access & need == 0 {
        return Err(Nfsstat4::Openmode);
    }
    Ok(())
}

fn grace_rules<K>(
    g: &Inner<K>,
    client: ClientId,
    reclaim: bool,
    now: Duration,
) -> Result<(), Nfsstat4> {
    let c = g.clients.get(client).ok_or(Nfsstat4::StaleClientid)?;
    let grace = g.grace.active(now);
    if reclaim {
        // Outside grace, from a client the previous boot did not record, or from one
        // that already said it reclaimed everything (RFC 8881 section 8.4.2.1).
        if !grace || c.reclaim_complete || !g.grace.pending.contains(&c.owner) {
            return Err(Nfsstat4::NoGrace);
        }
    } else if grace || !c.reclaim_complete {
        // A client opens anew only after RECLAIM_COMPLETE says it reclaimed what it
        // had (RFC 8881 section 18.51.3; knfsd answers the same).
        return Err(Nfsstat4::Grace);
    }
    Ok(())
}

/// A session id: the client id (so a session is traced to its client in a packet
/// capture) and 8 random bytes (so one cannot be guessed from another).
fn new_session_id(client: ClientId) -> Sessionid4 {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&client.to_be_bytes());
    id[8..].copy_from_slice(&rand::random::<u64>().to_ne_bytes());
    id
}
