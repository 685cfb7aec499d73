//! The back channel (RFC 8881 sections 2.10.3.1, 18.33, 18.34, 18.36, 20.9): calls the
//! server sends to a client on a connection the client bound for them.
//!
//! A session gets its back channel from CREATE_SESSION (`CREATE_SESSION4_FLAG_CONN_BACK_CHAN`:
//! the creating connection) or BIND_CONN_TO_SESSION (`CDFC4_BACK`, `CDFC4_BACK_OR_BOTH`,
//! `CDFC4_FORE_OR_BOTH`), with the callback program and security of CREATE_SESSION or
//! BACKCHANNEL_CTL (AUTH_NONE or AUTH_SYS; RPCSEC_GSS alone is
//! `NFS4ERR_ENCR_ALG_UNSUPP`, as knfsd answers). Each binding is probed with CB_NULL,
//! then a CB_COMPOUND of CB_SEQUENCE alone (which proves the client took the connection
//! as this session's back channel, not only that it answers).
//!
//! Promises:
//! - **SEQUENCE tells the truth** ([`Callbacks::status_flags`]): `SEQ4_STATUS_CB_PATH_DOWN_SESSION`
//!   when the session has no open back-channel connection, no usable security, or its
//!   last probe or callback failed; `SEQ4_STATUS_CB_PATH_DOWN` when no session of the
//!   client has a working one. While a probe is in flight nothing is reported (as knfsd),
//!   so a client is not told to rebind a channel that is about to work.
//! - **CB_COMPOUND** ([`Callbacks::cb_compound`]) leads with CB_SEQUENCE on a slot of
//!   the session's own back-channel slot table (its size negotiated in CREATE_SESSION,
//!   at most `state4::limits::MAX_BACK_SLOTS`), checks the client's channel limits
//!   (`ca_maxrequestsize`, `ca_maxoperations`) before sending, waits at most
//!   [`crate::limits::NFS4_CB_TIMEOUT`], and at most
//!   [`crate::limits::MAX_NFS4_CB_PER_SESSION`] callbacks of a session wait at once.
//!   A callback that times out or finds the connection closed marks the path down.
//! - **Nothing blocks a thread**: callbacks are futures; [`Callbacks::spawn`] runs one on
//!   the back channel's own event loop from any thread.
//!
//! granary sends no recalls yet (it grants no delegations); the lock manager's
//! CB_NOTIFY_LOCK is the first user of [`Callbacks::cb_compound`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use nfs4::compound::{CbArgOp, CbCompound4Args, CbCompound4Res, CbResOp, CbSequenceArgs};
use nfs4::ops::seq_status;
use nfs4::results::Res4;
use nfs4::types::{CallbackSecList, CallbackSecParms4, ChannelAttrs4, Sessionid4, Tag4};
use nfs4::Nfsstat4;
use rpc::backchannel::{BackChannel, CallError, CallTo};
use rpc::msg::OpaqueAuth;
use state4::ClientId;
use xdr::{Decode, Decoder, Encode, Encoder};

use crate::limits::{
    MAX_BACK_CONNS_PER_SESSION, MAX_NFS4_CB_PER_SESSION, NFS4_CB_DELAY_RETRIES,
    NFS4_CB_DELAY_RETRY, NFS4_CB_TIMEOUT,
};

/// The callback program's version (RFC 8881 section 20: `NFS_CB` is version 1).
const CB_VERSION: u32 = 1;

/// Why a callback did not get the client's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallbackError {
    /// The client has no session with an open back-channel connection and usable
    /// security. Permanent until the client binds one (SEQUENCE tells it so).
    NoBackChannel,
    /// [`crate::limits::MAX_NFS4_CB_PER_SESSION`] callbacks already wait. Transient.
    Busy,
    /// The CB_COMPOUND exceeds the client's back-channel `ca_maxrequestsize` or
    /// `ca_maxoperations`. Permanent for this request.
    TooBig,
    /// The RPC failed: closed, timed out, refused, malformed.
    Rpc(CallError),
    /// The reply did not decode as a CB_COMPOUND reply.
    Malformed(String),
    /// The client refused the CB_SEQUENCE (the request was not run).
    Sequence(Nfsstat4),
}

impl std::fmt::Display for CallbackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoBackChannel => f.write_str("the client has no working back channel"),
            Self::Busy => f.write_str("too many callbacks waiting on the session"),
            Self::TooBig => f.write_str("larger than the client's back channel allows"),
            Self::Rpc(e) => write!(f, "{e}"),
            Self::Malformed(e) => write!(f, "malformed CB_COMPOUND reply: {e}"),
            Self::Sequence(s) => write!(f, "CB_SEQUENCE refused: {s:?}"),
        }
    }
}

impl std::error::Error for CallbackError {}

/// What the server knows of one session's back channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// A probe is in flight (or none was needed yet).
    Unknown,
    /// The last probe or callback was answered.
    Up,
    /// The last probe or callback failed.
    Down,
}

/// Counts for metrics and tests.
#[derive(Debug, Default)]
pub struct CallbackCounters {
    pub probes_answered: AtomicU64,
    pub probes_failed: AtomicU64,
    pub compounds_answered: AtomicU64,
    pub compounds_failed: AtomicU64,
}

/// One session's back channel.
pub struct SessionBack {
    session: Sessionid4,
    minor: u32,
    attrs: ChannelAttrs4,
    slots: Arc<tokio::sync::Semaphore>,
    /// Callbacks of this session in progress or waiting for a slot.
    queued: AtomicUsize,
    inner: Mutex<BackInner>,
}

struct BackInner {
    program: u32,
    /// The credential callbacks carry; `None` when the client offered none we can use.
    cred: Option<OpaqueAuth>,
    /// Connections bound for the back channel, newest last.
    conns: Vec<Arc<BackChannel>>,
    path: Path,
    /// Per slot: the sequence id of the last CB_SEQUENCE sent on it, and whether a call
    /// holds it.
    seqids: Vec<u32>,
    busy: Vec<bool>,
}

impl SessionBack {
    fn lock(&self) -> MutexGuard<'_, BackInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether callbacks can be sent and are expected to be answered.
    fn works(&self) -> bool {
        let g = self.lock();
        g.cred.is_some() && g.path != Path::Down && g.conns.iter().any(|c| c.is_open())
    }

    fn channel(&self) -> Option<(Arc<BackChannel>, CallTo)> {
        let g = self.lock();
        let conn = g.conns.iter().rev().find(|c| c.is_open())?;
        let to = CallTo {
            program: g.program,
            version: CB_VERSION,
            procedure: 0,
            cred: g.cred.clone()?,
        };
        Some((Arc::clone(conn), to))
    }

    fn set_path(&self, path: Path) {
        self.lock().path = path;
    }
}

/// The credential callbacks carry: the first AUTH_NONE or AUTH_SYS entry, as knfsd
/// chooses. `None` when there is none (RPCSEC_GSS only, or an empty list).
pub fn callback_cred(sec: &CallbackSecList) -> Option<OpaqueAuth> {
    sec.0.iter().find_map(|p| match p {
        CallbackSecParms4::None => Some(OpaqueAuth::default()),
        CallbackSecParms4::Sys(sys) => {
            let mut e = Encoder::new();
            sys.encode(&mut e);
            Some(OpaqueAuth {
                flavor: rpc::msg::AUTH_SYS,
                body: e.into_inner().freeze(),
            })
        }
        CallbackSecParms4::Gss { .. } => None,
    })
}

/// Every session's back channel, by client.
pub struct Callbacks {
    clients: RwLock<HashMap<ClientId, Vec<Arc<SessionBack>>>>,
    timeout: Duration,
    pub counters: CallbackCounters,
}

impl Default for Callbacks {
    fn default() -> Self {
        Self::new(NFS4_CB_TIMEOUT)
    }
}

impl Callbacks {
    /// Callbacks that wait at most `timeout` for an answer.
    #[must_use]
    pub fn new(timeout: Duration) -> Self {
        Self {
            clients: RwLock::new(HashMap::new()),
            timeout,
            counters: CallbackCounters::default(),
        }
    }

    /// A new session's back channel (from CREATE_SESSION), with no connection yet.
    pub fn add_session(
        &self,
        client: ClientId,
        session: Sessionid4,
        (minor, attrs): (u32, ChannelAttrs4),
        program: u32,
        cred: Option<OpaqueAuth>,
    ) -> Arc<SessionBack> {
        let slots = attrs.ca_maxrequests.max(1) as usize;
        let back = Arc::new(SessionBack {
            session,
            minor,
            attrs,
            slots: Arc::new(tokio::sync::Semaphore::new(slots)),
            queued: AtomicUsize::new(0),
            inner: Mutex::new(BackInner {
                program,
                cred,
                conns: Vec::new(),
                path: Path::Unknown,
                seqids: vec![0; slots],
                busy: vec![false; slots],
            }),
        });
        let mut clients = self.clients.write().unwrap_or_else(PoisonError::into_inner);
        let list = clients.entry(client).or_default();
        // A retransmitted CREATE_SESSION names the same session: one entry each.
        list.retain(|b| b.session != session);
        list.push(Arc::clone(&back));
        back
    }

    fn find(&self, client: ClientId, session: &Sessionid4) -> Option<Arc<SessionBack>> {
        let clients = self.clients.read().unwrap_or_else(PoisonError::into_inner);
        clients
            .get(&client)?
            .iter()
            .find(|b| b.session == *session)
            .cloned()
    }

    /// Forgets a destroyed session.
    pub fn remove_session(&self, client: ClientId, session: &Sessionid4) {
        let mut clients = self.clients.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(list) = clients.get_mut(&client) {
            list.retain(|b| b.session != *session);
            if list.is_empty() {
                clients.remove(&client);
            }
        }
    }

    /// Forgets every session but those `live` says still exist (after lease expiry,
    /// DESTROY_CLIENTID, or a rebooted client's record replaced).
    pub fn retain(&self, live: impl Fn(&Sessionid4) -> bool) {
        let mut clients = self.clients.write().unwrap_or_else(PoisonError::into_inner);
        clients.retain(|_, list| {
            list.retain(|b| live(&b.session));
            !list.is_empty()
        });
    }

    /// Binds `conn` as a back channel of `session` and probes it with CB_NULL. Returns
    /// false when the session is unknown here.
    pub fn bind(
        self: &Arc<Self>,
        client: ClientId,
        session: &Sessionid4,
        conn: &Arc<BackChannel>,
    ) -> bool {
        let Some(back) = self.find(client, session) else {
            return false;
        };
        {
            let mut g = back.lock();
            g.conns.retain(|c| c.is_open() && c.id() != conn.id());
            if g.conns.len() >= MAX_BACK_CONNS_PER_SESSION {
                g.conns.remove(0);
            }
            g.conns.push(Arc::clone(conn));
        }
        self.probe(&back);
        true
    }

    /// BACKCHANNEL_CTL: a new program and security for `session`'s callbacks, probed.
    pub fn set_program(
        self: &Arc<Self>,
        client: ClientId,
        session: &Sessionid4,
        program: u32,
        cred: OpaqueAuth,
    ) {
        let Some(back) = self.find(client, session) else {
            return;
        };
        {
            let mut g = back.lock();
            g.program = program;
            g.cred = Some(cred);
        }
        self.probe(&back);
    }

    /// Sends CB_NULL on the session's newest connection; the answer sets the path.
    fn probe(self: &Arc<Self>, back: &Arc<SessionBack>) {
        let Some((conn, to)) = back.channel() else {
            back.set_path(Path::Down);
            return;
        };
        back.set_path(Path::Unknown);
        let (me, back, chan) = (Arc::clone(self), Arc::clone(back), Arc::clone(&conn));
        conn.spawn(async move {
            let answered = chan.call(&to, &[], me.timeout).await;
            let peer = chan.peer();
            if let Err(e) = answered {
                me.counters.probes_failed.fetch_add(1, Ordering::Relaxed);
                back.set_path(Path::Down);
                tracing::info!(%peer, error = %e, "NFSv4 back channel down: CB_NULL failed");
                return;
            }
            me.counters.probes_answered.fetch_add(1, Ordering::Relaxed);
            // CB_NULL proves the connection answers; a CB_COMPOUND of CB_SEQUENCE alone
            // proves the client took it as this session's back channel.
            match me.on_session(&back, Vec::new()).await {
                Ok(_) => {
                    tracing::info!(%peer, program = to.program, "NFSv4 back channel up: CB_NULL and CB_SEQUENCE answered");
                }
                Err(e) => {
                    back.set_path(Path::Down);
                    tracing::info!(%peer, error = %e, "NFSv4 back channel down: CB_SEQUENCE failed");
                }
            }
        });
    }

    /// SEQUENCE's `sr_status_flags` bits about the back channel of `session`.
    #[must_use]
    pub fn status_flags(&self, client: ClientId, session: &Sessionid4) -> u32 {
        let clients = self.clients.read().unwrap_or_else(PoisonError::into_inner);
        let Some(list) = clients.get(&client) else {
            return seq_status::CB_PATH_DOWN | seq_status::CB_PATH_DOWN_SESSION;
        };
        let mut flags = 0;
        let mut any = false;
        for b in list {
            let works = b.works();
            any |= works;
            if b.session == *session && !works {
                flags |= seq_status::CB_PATH_DOWN_SESSION;
            }
        }
        if !any {
            flags |= seq_status::CB_PATH_DOWN;
        }
        flags
    }

    /// Runs `fut` on the event loop of one of `client`'s back channels (any thread may
    /// call it; a handler must not wait for a callback where it runs). Returns false when
    /// the client has none open.
    pub fn spawn<F>(&self, client: ClientId, fut: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let Some(back) = self.pick(client) else {
            return false;
        };
        match back.channel() {
            Some((conn, _)) => {
                conn.spawn(fut);
                true
            }
            None => false,
        }
    }

    /// The session to call `client` on: one whose back channel works, the newest first.
    fn pick(&self, client: ClientId) -> Option<Arc<SessionBack>> {
        let clients = self.clients.read().unwrap_or_else(PoisonError::into_inner);
        clients
            .get(&client)?
            .iter()
            .rev()
            .find(|b| b.works())
            .cloned()
    }

    /// Sends `ops` to `client` in one CB_COMPOUND, after a CB_SEQUENCE on a slot of the
    /// back channel of one of its sessions, and returns the client's results (CB_SEQUENCE's
    /// first). The future waits without blocking its thread.
    ///
    /// # Errors
    /// See [`CallbackError`].
    pub fn cb_compound(
        self: &Arc<Self>,
        client: ClientId,
        ops: Vec<CbArgOp>,
    ) -> impl Future<Output = Result<CbCompound4Res, CallbackError>> + Send + 'static {
        let me = Arc::clone(self);
        let back = self.pick(client);
        async move {
            let back = back.ok_or(CallbackError::NoBackChannel)?;
            me.on_session(&back, ops).await
        }
    }

    /// [`Callbacks::cb_compound`] on one session's back channel.
    async fn on_session(
        &self,
        back: &SessionBack,
        ops: Vec<CbArgOp>,
    ) -> Result<CbCompound4Res, CallbackError> {
        if back.queued.fetch_add(1, Ordering::AcqRel) >= MAX_NFS4_CB_PER_SESSION {
            back.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(CallbackError::Busy);
        }
        let r = self.cb_compound_on(back, ops).await;
        back.queued.fetch_sub(1, Ordering::AcqRel);
        let counter = match &r {
            Ok(_) => &self.counters.compounds_answered,
            Err(_) => &self.counters.compounds_failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        r
    }

    async fn cb_compound_on(
        &self,
        back: &SessionBack,
        ops: Vec<CbArgOp>,
    ) -> Result<CbCompound4Res, CallbackError> {
        if ops.len() + 1 > back.attrs.ca_maxoperations as usize {
            return Err(CallbackError::TooBig);
        }
        let permit = tokio::time::timeout(self.timeout, Arc::clone(&back.slots).acquire_owned())
            .await
            .map_err(|_| CallbackError::Rpc(CallError::Timeout(self.timeout)))?
            .map_err(|_| CallbackError::NoBackChannel)?;
        let mut tries = 0;
        loop {
            let (slot, seqid) = take_slot(back);
            let r = self.send_on_slot(back, slot, seqid, ops.clone()).await;
            give_slot(back, slot, &r);
            // NFS4ERR_DELAY: the client is not ready for this session yet (Linux answers
            // it while the session it just created is still being set up).
            if r == Err(CallbackError::Sequence(Nfsstat4::Delay)) && tries < NFS4_CB_DELAY_RETRIES {
                tries += 1;
                tokio::time::sleep(NFS4_CB_DELAY_RETRY).await;
                continue;
            }
            drop(permit);
            return r;
        }
    }

    async fn send_on_slot(
        &self,
        back: &SessionBack,
        slot: u32,
        seqid: u32,
        ops: Vec<CbArgOp>,
    ) -> Result<CbCompound4Res, CallbackError> {
        let (conn, mut to) = back.channel().ok_or(CallbackError::NoBackChannel)?;
        to.procedure = nfs4::limits::CB_COMPOUND;
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(CbArgOp::Sequence(CbSequenceArgs {
            csa_sessionid: back.session,
            csa_sequenceid: seqid,
            csa_slotid: slot,
            csa_highest_slotid: back.attrs.ca_maxrequests.saturating_sub(1),
            csa_cachethis: false,
            csa_referring_call_lists: Vec::new(),
        }));
        all.extend(ops);
        let args = CbCompound4Args {
            tag: Tag4::default(),
            minorversion: back.minor,
            callback_ident: 0,
            ops: all,
        };
        let mut e = Encoder::new();
        args.encode(&mut e);
        let body = e.into_inner();
        // The client's limit counts the whole RPC call; the header is under 500 bytes.
        if body.len() + 500 > back.attrs.ca_maxrequestsize as usize {
            return Err(CallbackError::TooBig);
        }
        let reply = match conn.call(&to, &body, self.timeout).await {
            Ok(reply) => reply,
            Err(e) => {
                back.set_path(Path::Down);
                tracing::info!(peer = %conn.peer(), error = %e, "NFSv4 back channel down: CB_COMPOUND got no answer");
                return Err(CallbackError::Rpc(e));
            }
        };
        let res = decode_res(reply)?;
        match res.results.first() {
            Some(CbResOp::Sequence(Res4::Ok(_))) => {
                back.set_path(Path::Up);
                Ok(res)
            }
            Some(CbResOp::Sequence(Res4::Err(s))) => {
                if *s != Nfsstat4::Delay {
                    back.set_path(Path::Down);
                }
                Err(CallbackError::Sequence(*s))
            }
            _ => {
                back.set_path(Path::Down);
                Err(CallbackError::Sequence(res.status))
            }
        }
    }
}

fn decode_res(reply: Bytes) -> Result<CbCompound4Res, CallbackError> {
    let mut d = Decoder::new(reply);
    CbCompound4Res::decode(&mut d).map_err(|e| CallbackError::Malformed(e.to_string()))
}

/// A free slot of the session's table (the caller holds a permit, so one is free) and
/// the sequence id to send on it.
fn take_slot(back: &SessionBack) -> (u32, u32) {
    let mut g = back.lock();
    let slot = g.busy.iter().position(|b| !b).unwrap_or(0);
    g.busy[slot] = true;
    let seqid = g.seqids[slot].wrapping_add(1);
    (u32::try_from(slot).unwrap_or(0), seqid)
}

/// Gives the slot back. Its sequence id moves on when the client took the request: it
/// accepted CB_SEQUENCE (or answered `NFS4ERR_RETRY_UNCACHED_REP`: it had seen it), or
/// gave no answer in time (it may have run it; if it had not, its
/// `NFS4ERR_SEQ_MISORDERED` to the next call moves the id back). Any other CB_SEQUENCE
/// error means the request was not run on the slot.
fn give_slot(back: &SessionBack, slot: u32, r: &Result<CbCompound4Res, CallbackError>) {
    let mut g = back.lock();
    let i = slot as usize;
    g.busy[i] = false;
    match r {
        Ok(_)
        | Err(CallbackError::Sequence(Nfsstat4::RetryUncachedRep))
        | Err(CallbackError::Rpc(CallError::Timeout(_))) => {
            g.seqids[i] = g.seqids[i].wrapping_add(1);
        }
        Err(CallbackError::Sequence(Nfsstat4::SeqMisordered)) if g.seqids[i] > 0 => {
            g.seqids[i] -= 1;
        }
        Err(_) => {}
    }
}
