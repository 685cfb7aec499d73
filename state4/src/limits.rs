//! Bounds of NFSv4 state. Every table a client can grow has one; a client that reaches a
//! bound gets `NFS4ERR_RESOURCE` (or, for slots and sizes, a smaller grant at
//! CREATE_SESSION), never an unbounded allocation.

/// Most client records (confirmed and unconfirmed). Each costs about 200 bytes plus its
/// owner string (at most 1 KiB). A site with more NFSv4 clients than this raises it.
pub const MAX_CLIENTS: usize = 4096;

/// Most sessions of one client. Linux opens one per mount of a server (plus one while
/// it recovers); a handful leaves room for trunking.
pub const MAX_SESSIONS_PER_CLIENT: usize = 8;

/// Most fore-channel slots granted to a session, i.e. requests a client may have in
/// flight on it. Linux asks for 64; knfsd grants up to 2,048 when memory allows.
pub const MAX_SLOTS: u32 = 64;

/// Largest reply kept in a slot for replay (`ca_maxresponsesize_cached`), in bytes.
/// Replies of the operations clients ask to be cached (non-idempotent ones: CREATE,
/// REMOVE, RENAME, OPEN, LOCK, WRITE) are small; READ and READDIR replies are not
/// cached. Slots × this bounds a session's cache: 64 × 4 KiB = 256 KiB.
pub const MAX_CACHED_REPLY_BYTES: u32 = 4096;

/// Largest request a session accepts (`ca_maxrequestsize`): a 1 MiB WRITE plus the
/// COMPOUND around it.
pub const MAX_REQUEST_BYTES: u32 = (1 << 20) + 8192;

/// Largest reply a session sends (`ca_maxresponsesize`): a 1 MiB READ plus the COMPOUND
/// around it.
pub const MAX_RESPONSE_BYTES: u32 = (1 << 20) + 8192;

/// Most operations in one COMPOUND of a session (`ca_maxoperations`). Linux sends at
/// most about 20; pynfs tests go to 50.
pub const MAX_OPERATIONS: u32 = 64;

/// Most back-channel slots the server uses. One is what Linux offers and enough for
/// recalls and lock notifications sent one at a time.
pub const MAX_BACK_SLOTS: u32 = 1;

/// Most open stateids of one client. Each open file of each process of a client machine
/// can hold one (per open-owner and file); 64 Ki covers a busy build host.
pub const MAX_OPENS_PER_CLIENT: usize = 65_536;

/// Most open stateids in total, across clients: about 200 bytes each, so 1 Mi is about
/// 200 MiB at worst (docs/LIMITS.md).
pub const MAX_OPENS: usize = 1 << 20;

/// Most lock stateids of one client: one per lock-owner (a process, for Linux) and file
/// it locked, like opens.
pub const MAX_LOCK_STATEIDS_PER_CLIENT: usize = 65_536;

/// Most lock stateids in total: about 150 bytes each (the locks themselves are bounded
/// by the lock manager's own limits).
pub const MAX_LOCK_STATEIDS: usize = 1 << 20;

/// Default lease time, in seconds (the RFC's suggestion and knfsd's default).
pub const DEFAULT_LEASE_SECS: u32 = 90;

/// Shortest and longest lease an operator may configure, in seconds: below 10 s a busy
/// client misses renewals, above an hour dead clients hold state for too long.
pub const MIN_LEASE_SECS: u32 = 10;
pub const MAX_LEASE_SECS: u32 = 3600;

const _: () = assert!(MAX_CACHED_REPLY_BYTES < MAX_RESPONSE_BYTES);
const _: () = assert!(MIN_LEASE_SECS <= DEFAULT_LEASE_SECS && DEFAULT_LEASE_SECS <= MAX_LEASE_SECS);
const _: () = assert!(MAX_OPENS_PER_CLIENT <= MAX_OPENS);
const _: () = assert!(MAX_LOCK_STATEIDS_PER_CLIENT <= MAX_LOCK_STATEIDS);
