//! The NFSv4.1 and 4.2 server (RFC 8881, RFC 7862): program 100003 version 4 on the same
//! port as NFSv3 and MOUNT, over the same core ([`crate::NfsState`]: exports, signed
//! handles, credentials and their cache, the write verifier).
//!
//! - [`compound`]: the COMPOUND loop — session rules, SEQUENCE and the slot reply cache
//!   (exactly once), the current and saved filehandles and stateids;
//! - `ops_*`: one file per family of operations (filehandles and names, attributes,
//!   directories, opens and I/O, byte-range locks, clients and sessions, NFSv4.2's
//!   space and copy operations);
//! - [`convert`]: the one `FsError` → `nfsstat4` mapping and the attribute set of a file;
//! - [`pseudo`]: the pseudo file system that joins the exports' paths;
//! - [`reach`]: on a server with a remote (object) export, which COMPOUNDs may reach it
//!   and so run on the blocking pool, judged from their operations before any runs;
//! - [`recovery`]: client records in the state directory, for reclaims after a restart;
//! - [`callback`]: the back channel — CB_NULL probes, CB_SEQUENCE-led CB_COMPOUNDs on the
//!   client's connection, and the truth SEQUENCE's status flags tell about it.
//!
//! State (clients, sessions, opens, leases, grace) is `state4`'s; this module maps
//! operations onto it and onto the vfs seam. What is not implemented answers
//! `NFS4ERR_NOTSUPP`, as README's NFSv4 section lists.

pub mod callback;
pub mod compound;
pub mod convert;
mod ops_attr;
mod ops_dir;
mod ops_fh;
mod ops_io;
pub mod ops_lock;
mod ops_session;
mod ops_v42;
pub mod pseudo;
pub mod reach;
pub mod recovery;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rpc::dispatch::{CacheClass, Procedure};
use rpc::{Dispatcher, Service};
use state4::{Config, State};

use crate::NfsState;

/// ONC RPC program and version.
pub const PROGRAM: u32 = nfs4::limits::NFS_PROGRAM;
pub const VERSION: u32 = nfs4::limits::NFS_V4;

/// A file as NFSv4 state knows it: export id and file id.
pub type FileKey = (u32, u64);

/// Everything the NFSv4 server shares between calls.
pub struct Nfs4State {
    /// The core shared with NFSv3: exports, handles, credentials, write verifier.
    pub core: Arc<NfsState>,
    pub state: State<FileKey>,
    clock: Arc<dyn gtime::Clock>,
    /// `eir_server_owner.so_major_id` and `eir_server_scope`: one server, one scope.
    pub server_owner: Bytes,
    pub pseudo: pseudo::Pseudo,
    /// Some export's backend may block on a disk (host, erofs). A server without one
    /// (mem exports, and remote ones, whose COMPOUNDs are judged apart: `remote`) never
    /// sends a COMPOUND that reaches no remote export to the blocking pool: its calls do
    /// not sleep.
    pub may_block: bool,
    /// Every session's back channel: what later parts call clients back with.
    pub callbacks: Arc<callback::Callbacks>,
    /// Some export's backend is remote (object): every call on it waits on the network,
    /// so a COMPOUND of such a server that may reach it (judged from its operations
    /// before any runs, [`reach`]) runs on the blocking pool; the others run as on a
    /// server without a remote export.
    pub remote: bool,
    /// Client records in the state directory (none without one): who may reclaim after
    /// a restart.
    pub records: Option<recovery::ClientRecords>,
    /// CB_NOTIFY_LOCK for NFSv4 lock waiters (the lock manager's NFSv4 waker).
    pub notify_lock: Arc<ops_lock::NotifyLock>,
    /// Operations run and failed, by operation (metrics).
    pub ops: OpStats,
}

/// Slots of [`OpStats`]: one per defined operation number, and one for OP_ILLEGAL.
const OP_SLOTS: usize = (nfs4::ops::opnum::REMOVEXATTR - nfs4::ops::opnum::ACCESS + 2) as usize;

/// How many times each operation ran and how many of those failed, counted once per
/// result in a fresh COMPOUND reply (a replay from a slot's cache runs nothing and counts
/// nothing). Relaxed atomic adds: two per operation, no lock.
pub struct OpStats {
    calls: [AtomicU64; OP_SLOTS],
    errors: [AtomicU64; OP_SLOTS],
    /// COMPOUNDs tried on a network worker (`compound::worker_try`), by kind (READ;
    /// WRITE or COMMIT): answered there, and sent to the blocking pool because their call
    /// would have slept (the page cache did not hold the READ's range; a sync on a disk).
    worker_tries: [[AtomicU64; 2]; 2],
}

/// One operation's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpCount {
    pub name: &'static str,
    pub calls: u64,
    pub errors: u64,
}

impl Default for OpStats {
    fn default() -> Self {
        Self {
            calls: std::array::from_fn(|_| AtomicU64::new(0)),
            errors: std::array::from_fn(|_| AtomicU64::new(0)),
            worker_tries: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }
}

impl OpStats {
    fn slot(op: u32) -> usize {
        use nfs4::ops::opnum;
        if opnum::is_defined(op) {
            (op - opnum::ACCESS) as usize
        } else {
            OP_SLOTS - 1
        }
    }

    /// Counts a failure of a result already counted as a success (a final READ whose read
    /// failed as its bytes went into the reply).
    pub fn record_failure(&self, op: u32) {
        self.errors[Self::slot(op)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a COMPOUND tried on a network worker: answered there, or sent to the
    /// blocking pool.
    pub fn record_worker_try(&self, kind: compound::WorkerTry, answered: bool) {
        self.worker_tries[kind as usize][usize::from(!answered)].fetch_add(1, Ordering::Relaxed);
    }

    /// READ COMPOUNDs tried on a network worker: (answered there, sent to the pool).
    #[must_use]
    pub fn worker_reads(&self) -> (u64, u64) {
        self.worker_tries(compound::WorkerTry::Read)
    }

    /// COMPOUNDs of a WRITE that syncs or a COMMIT tried on a network worker: (answered
    /// there, sent to the pool).
    #[must_use]
    pub fn worker_writes(&self) -> (u64, u64) {
        self.worker_tries(compound::WorkerTry::Write)
    }

    fn worker_tries(&self, kind: compound::WorkerTry) -> (u64, u64) {
        let [here, pool] = &self.worker_tries[kind as usize];
        (here.load(Ordering::Relaxed), pool.load(Ordering::Relaxed))
    }

    /// Counts one result of operation `op`, a success or not.
    pub fn record(&self, op: u32, ok: bool) {
        let i = Self::slot(op);
        self.calls[i].fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.errors[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The operations that ran at least once.
    #[must_use]
    pub fn snapshot(&self) -> Vec<OpCount> {
        (0..OP_SLOTS)
            .filter_map(|i| {
                let calls = self.calls[i].load(Ordering::Relaxed);
                let op = if i == OP_SLOTS - 1 {
                    nfs4::ops::opnum::ILLEGAL
                } else {
                    nfs4::ops::opnum::ACCESS + i as u32
                };
                (calls > 0).then(|| OpCount {
                    name: nfs4::ops::opnum::name(op),
                    calls,
                    errors: self.errors[i].load(Ordering::Relaxed),
                })
            })
            .collect()
    }
}

impl Nfs4State {
    /// `epoch` distinguishes this boot's client ids and stateids from any earlier
    /// boot's (random per start, or from the state directory).
    #[must_use]
    pub fn new(core: Arc<NfsState>, clock: Arc<dyn gtime::Clock>, mut config: Config) -> Self {
        // One lock manager for NFSv4 and NLM; its NFSv4 waiters are told on the back
        // channel.
        config.locks = Arc::clone(&core.locks);
        // One share table for NFSv4 OPEN and NLM SHARE.
        config.shares = Arc::clone(&core.shares);
        let callbacks = Arc::new(callback::Callbacks::default());
        let notify_lock = Arc::new(ops_lock::NotifyLock::new(Arc::clone(&callbacks)));
        core.locks.set_waker(
            locks::Protocol::Nfs4,
            Arc::clone(&notify_lock) as Arc<dyn locks::Waker>,
        );
        crate::heads::start_waiting(&core, Arc::clone(&clock));
        let pseudo = pseudo::Pseudo::new(&core.exports);
        let now = clock.monotonic();
        let server_owner = Bytes::from(format!("granary-{:08x}", config.epoch));
        let may_block = core
            .exports
            .iter()
            .any(|e| e.backend().kind() != "mem" && !e.backend().remote());
        let remote = core.exports.iter().any(|e| e.backend().remote());
        let state = State::new(config, now);
        if let Some(ends) = state.grace_deadline() {
            core.lock_grace.start(locks::Protocol::Nfs4, ends);
        }
        Self {
            remote,
            state,
            core,
            clock,
            server_owner,
            pseudo,
            may_block,
            callbacks,
            notify_lock,
            records: None,
            ops: OpStats::default(),
        }
    }

    /// A server with the default lease (90 s) and no clients from an earlier boot.
    #[must_use]
    pub fn with_defaults(core: Arc<NfsState>, clock: Arc<dyn gtime::Clock>, epoch: u32) -> Self {
        Self::new(core, clock, Config::new(epoch))
    }

    /// Keeps client records in `records` (see [`recovery`]). The previous boot's records
    /// must already be in `config.previous_owners` when the state was made.
    #[must_use]
    pub fn with_records(mut self, records: recovery::ClientRecords) -> Self {
        self.records = Some(records);
        self
    }

    /// The server owner and scope kept in the state directory, so they are the same after
    /// a restart: a Linux client that sees another scope takes the server for a new one
    /// and recovers without reclaiming its opens and locks (RFC 8881 section 2.10.4).
    #[must_use]
    pub fn with_server_owner(mut self, id: [u8; 8]) -> Self {
        self.server_owner = Bytes::from(format!("granary-{}", u64::from_be_bytes(id)));
        self
    }

    /// Ends the grace period if its time is up (its timer calls this). Returns how many
    /// clients of the previous boot never reclaimed, or `None` if grace is not over.
    pub fn end_grace(&self) -> Option<usize> {
        let unclaimed = self.state.end_grace(self.now())?;
        self.core.lock_grace.end(locks::Protocol::Nfs4);
        if let Some(r) = &self.records {
            r.drop_unclaimed();
        }
        Some(unclaimed)
    }

    /// Releases the state of clients whose lease ran out by `now` (their sessions' back
    /// channels, and the backend holds of their opens); returns what was released.
    pub fn expire(&self, now: Duration) -> Vec<state4::Released<FileKey>> {
        let gone = self.state.expire(now);
        for g in &gone {
            self.release_opens(&g.closed);
        }
        // Sessions also go when a rebooted client's record is replaced or a courteous
        // OPEN purges an expired client: one sweep here catches every way.
        self.callbacks.retain(|id| self.state.session(id).is_ok());
        if let Some(r) = &self.records {
            r.retain(|c| self.state.client(c).is_some());
        }
        self.notify_lock
            .retain(|client| self.state.client(client).is_some());
        gone
    }

    /// Ends the backend holds of opens that are gone (CLOSE, an expired or rebooted
    /// client): each open stateid held its file once (see [`vfs::Backend::hold`]).
    pub fn release_opens<'a>(&self, closed: impl IntoIterator<Item = &'a state4::Closed<FileKey>>) {
        for c in closed {
            let (export, id) = c.file;
            if let Some(e) = self.core.exports.by_id(vfs::ExportId(export)) {
                e.release(vfs::FileId(id));
            }
        }
    }

    /// Monotonic time for leases.
    #[must_use]
    pub fn now(&self) -> Duration {
        self.clock.monotonic()
    }
}

/// The largest COMPOUND reply: a READ of the largest I/O size plus the operations
/// around it.
const MAX_REPLY_BYTES: usize = crate::limits::MAX_IO_BYTES as usize + 16 * 1024;

fn null(
    _: &Nfs4State,
    _: &rpc::CallContext,
    _: &mut xdr::Decoder,
    _: &mut xdr::Encoder,
) -> Result<(), rpc::dispatch::ProcError> {
    Ok(())
}

/// NULL and COMPOUND. COMPOUND bypasses the RPC reply cache (`Idempotent`): sessions
/// give NFSv4.1 its own exactly-once semantics, per slot.
pub static PROCEDURES: [Procedure<Nfs4State>; 2] = [
    Procedure {
        name: "null",
        run: null,
        max_reply_bytes: 0,
        cache: CacheClass::Idempotent,
    },
    Procedure {
        name: "compound",
        run: compound::run,
        max_reply_bytes: MAX_REPLY_BYTES,
        cache: CacheClass::Idempotent,
    },
];

/// Registers NFSv4 on `dispatcher`, served from `state`.
pub fn register(dispatcher: &mut Dispatcher, state: &Arc<Nfs4State>) {
    dispatcher.register(Box::new(Service {
        program: PROGRAM,
        version: VERSION,
        procedures: &PROCEDURES,
        state: Arc::clone(state),
    }));
}
