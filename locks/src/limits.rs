//! Bounds of the lock manager. A client that reaches one is refused the lock with the
//! [`LimitReason`](crate::LimitReason) that names it (NFSv4 answers `NFS4ERR_RESOURCE`,
//! NLM `NLM4_DENIED_NOLOCKS`); unlocking is never refused, so an unlock that splits a
//! range may go one lock past a bound.

/// Most locks held in total, across files and protocols. A lock (one merged range of one
/// owner) costs about 200 bytes with its share of the file's segment map, so 1 Mi locks
/// is about 200 MiB at worst (docs/LIMITS.md).
pub const MAX_LOCKS: usize = 1 << 20;

/// Most locks of one client (an NFSv4 client id, or an NLM caller name). A database on a
/// client machine may hold a lock per record it works on; 64 Ki leaves room for that and
/// keeps one client from taking more than a sixteenth of [`MAX_LOCKS`].
pub const MAX_LOCKS_PER_CLIENT: usize = 65_536;

/// Most requests waiting in the queues, in total. A waiter is a process blocked in
/// `fcntl(F_SETLKW)` on a client machine; each costs about 150 bytes.
pub const MAX_WAITERS: usize = 65_536;

/// Most waiting requests of one client: one per blocked process of that machine.
pub const MAX_WAITERS_PER_CLIENT: usize = 4096;

/// Most (segment, holder) entries of one file's segment map. Locks that do not overlap
/// cost one entry each; shared locks of many owners that overlap with staggered ends
/// cost one entry per owner for each piece they cover, which grows with the square of
/// their number: this bound stops a client that overlaps thousands of shared locks on
/// purpose before the file's map reaches about 16 MiB.
pub const MAX_ENTRIES_PER_FILE: usize = 1 << 20;

/// Longest owner identity in bytes: NFSv4's `lock_owner4.owner` and NLM's `oh` are
/// opaque strings of at most 1024 bytes (NFS4_OPAQUE_LIMIT, LM_MAXSTRLEN), plus a
/// protocol's prefix (an NLM svid).
pub const MAX_OWNER_BYTES: usize = 1024 + 16;

/// Longest client name in bytes: an NLM `caller_name` (LM_MAXSTRLEN) or an NFSv4 client
/// id (8 bytes).
pub const MAX_CLIENT_BYTES: usize = 1024;

/// Most steps of one deadlock search (`deadlock.rs`): pieces of a file's segment map and
/// queue entries looked at while following owners that wait for each other. The search
/// runs under the manager's mutex for every waiting request, so it must stay short: a
/// step costs tens of nanoseconds, 1,024 of them some tens of microseconds. A real
/// deadlock is a short chain of processes (Linux follows at most 10 owners,
/// `MAX_DEADLK_ITERATIONS`); 1,024 steps follow a chain of hundreds of owners that each
/// wait behind a few locks. Past it no cycle is reported and the request waits.
pub const MAX_DEADLOCK_SEARCH_STEPS: usize = 1024;

const _: () = assert!(MAX_LOCKS_PER_CLIENT <= MAX_LOCKS);
const _: () = assert!(MAX_WAITERS_PER_CLIENT <= MAX_WAITERS);
const _: () = assert!(MAX_LOCKS <= MAX_ENTRIES_PER_FILE);
