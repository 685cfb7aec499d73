//! Limits the NFSv3 server announces (FSINFO) and enforces.

/// Largest READ and WRITE (FSINFO rtmax/wtmax) with the default record limit, as Linux
/// nfsd offers on 64-bit hosts. A smaller `--max-record-bytes` lowers what the server
/// announces and serves ([`max_io_bytes_for_record`]); rtpref/wtpref are the same
/// figure, since larger transfers cost fewer round trips and the server has no smaller
/// sweet spot.
pub const MAX_IO_BYTES: u32 = vfs::limits::MAX_IO_BYTES;

/// Bytes of a WRITE request record that are not data: the RPC call header (24), the
/// largest credential and verifier (2 × (8 + 400)), and WRITE's arguments around the data
/// (a 64-byte handle with its length, offset, count, stable, the data's length, padding).
pub const WRITE_OVERHEAD_BYTES: u32 =
    24 + 2 * (8 + rpc::limits::MAX_AUTH_BYTES) + (4 + 64) + 8 + 4 + 4 + 4 + 3;

/// The largest READ/WRITE a record limit of `max_record_bytes` allows: what a WRITE's
/// record can carry after its headers, rounded down to a page, at most [`MAX_IO_BYTES`].
/// READ replies are not bound by the record limit (it bounds requests), but rtmax and
/// wtmax stay one figure so clients see one transfer size.
///
/// # Errors
/// A record limit too small for even one page of data, with the smallest that works.
pub const fn max_io_bytes_for_record(max_record_bytes: u32) -> Result<u32, u32> {
    let smallest = WRITE_OVERHEAD_BYTES + IO_MULTIPLE_BYTES;
    if max_record_bytes < smallest {
        return Err(smallest);
    }
    let data = (max_record_bytes - WRITE_OVERHEAD_BYTES) / IO_MULTIPLE_BYTES * IO_MULTIPLE_BYTES;
    Ok(if data < MAX_IO_BYTES {
        data
    } else {
        MAX_IO_BYTES
    })
}

/// Suggested multiple of READ/WRITE sizes (FSINFO rtmult/wtmult): a page.
pub const IO_MULTIPLE_BYTES: u32 = 4096;

/// Preferred READDIR reply size (FSINFO dtpref): the maximum, as Linux nfsd announces.
/// The Linux client never asks for more than dtpref per READDIR(PLUS) and grows its
/// request from 64 KiB towards it while a listing goes on; with a 64 KiB dtpref a listing
/// of 10,000 entries took twice the calls, and the 6.1 client's later `getdents` fell back
/// to plain READDIR plus a LOOKUP per entry.
pub const PREF_READDIR_BYTES: u32 = MAX_READDIR_BYTES;

/// Initial capacity of a READDIR/READDIRPLUS reply buffer; it grows up to the client's
/// `count`/`maxcount` (at most [`MAX_READDIR_BYTES`]) as entries are added.
pub const READDIR_REPLY_CAPACITY: usize = 64 << 10;

/// Largest READDIR/READDIRPLUS reply the server builds, whatever the client asks.
pub const MAX_READDIR_BYTES: u32 = 1 << 20;

/// Directory entries fetched from the backend per batch while filling a READDIR reply.
pub const READDIR_BATCH: usize = 256;

/// Mount-list (MOUNT DUMP) entries kept; the oldest are forgotten past this. The list is
/// informational only (RFC 1813 says so), so forgetting costs nothing but a stale DUMP.
pub const MAX_MOUNT_ENTRIES: usize = 1024;

/// Mount-list entries kept per client address (distinct canonical directories); past it
/// the client's oldest is forgotten. Every spelling of one directory (`/`, `//`, `/./`)
/// is one entry.
pub const MAX_MOUNTS_PER_CLIENT: usize = 16;

/// Largest MOUNT DUMP or EXPORT reply body: the list is cut (at an entry boundary) to fit.
pub const MAX_MOUNT_LIST_REPLY_BYTES: usize = 64 << 10;

/// Mapped credentials kept by the credential cache (seed 004), one per export and client
/// identity (uid, gid, groups) seen. Real clients use a few identities each; past the
/// bound a new identity is mapped per call, uncached (nothing is evicted, so a client
/// cycling through uids cannot push out the others). About 100 bytes each.
pub const CRED_CACHE_ENTRIES: usize = 4096;

/// Memory one credential-cache entry may take, for docs/LIMITS.md's formula: its key (up
/// to `CRED_KEY_WORDS` words), the mapped credential with up to 16 groups, the `Arc`
/// and map slot around them, with the table's slack (about 300 bytes), rounded up.
pub const CRED_ENTRY_BYTES: usize = 512;

/// Memory the mount list may take at most (`MAX_MOUNT_ENTRIES` entries of a client
/// address and a path of up to 1,024 bytes, with their map slots), for the formula.
pub const MOUNT_LIST_BYTES: usize = 1_228_800;

/// Credentials each worker thread keeps in front of the shared credential cache (seed
/// 004): a hit there compares key words only. A client machine sends one or a few
/// identities; more than this many alternating on one worker fall through to the shared
/// table.
pub const RECENT_CREDS: usize = 4;

/// Words of a credential-cache key: export id, flavor, uid, gid and the groups.
pub const CRED_KEY_WORDS: usize = 4 + rpc::limits::MAX_AUTH_GROUPS as usize;

/// Seconds for which FSSTAT figures stay valid (`invarsec`): 0, they change any time.
pub const FSSTAT_INVARSEC: u32 = 0;

/// Seconds an NFSv4 blocking LOCK (READW_LT/WRITEW_LT) that was refused keeps its place
/// in the file's queue without asking again. Linux asks again after 1, 2, 4, 8, 16 and
/// then every 30 s (NFS4_LOCK_MAXTIMEOUT); a waiter that misses a whole period gave up
/// (its process was killed: NFSv4 has no way to cancel) and must not hold others back
/// for longer than this.
pub const LOCK_POLL_KEEPS_PLACE_SECS: u64 = 45;

/// Handles kept for CB_NOTIFY_LOCK, one per waiting NFSv4 (client, lock-owner, file):
/// as many as the lock manager lets wait (`locks::limits::MAX_WAITERS`), about 200 bytes
/// each. A waiter whose client stopped asking leaves its entry until it is woken; past
/// the bound a waiter is not told and polls.
pub const MAX_LOCK_NOTIFY_HANDLES: usize = locks::limits::MAX_WAITERS;

/// Requests one server lets wait for other heads' ranges at once (object exports,
/// `crate::heads`): blocking NLM LOCKs and NFSv4 READW_LT/WRITEW_LT refused because
/// another head holds the bytes. Each is asked again (one database transaction) at
/// every release another head records on its file and every
/// `backend_object::limits::HEAD_WAIT_RECHECK`, so this bounds that work too: 1,024
/// waiters each asking every 10 s are ~100 transactions a second. Past it a request is
/// answered as before waiting existed (NLM4_BLOCKED / NFS4ERR_DENIED, the client polls).
pub const MAX_HEAD_WAITERS: usize = 1024;

/// How often the thread that asks again for waiters across heads wakes when no release
/// was heard of, to let go of the waiters whose clients stopped asking (their
/// [`LOCK_POLL_KEEPS_PLACE_SECS`] ran out).
pub const HEAD_WAIT_TICK: std::time::Duration = std::time::Duration::from_secs(1);

const _: () = assert!(MAX_IO_BYTES <= nfs3::limits::MAX_DATA);
const _: () = assert!(MAX_HEAD_WAITERS <= locks::limits::MAX_WAITERS);
const _: () = assert!(LOCK_POLL_KEEPS_PLACE_SECS > 30);
const _: () = assert!(MAX_MOUNTS_PER_CLIENT <= MAX_MOUNT_ENTRIES);
const _: () = assert!(CRED_CACHE_ENTRIES > 0);
const _: () = assert!(RECENT_CREDS > 0);
// Every credential the RPC layer accepts has a key: none is mapped uncached for its size.
const _: () = assert!(CRED_KEY_WORDS >= 4 + vfs::limits::MAX_GROUPS);
const _: () = assert!(PREF_READDIR_BYTES <= MAX_READDIR_BYTES);
const _: () = assert!(IO_MULTIPLE_BYTES <= MAX_IO_BYTES);
// The default record limit carries the largest WRITE with its headers, so by default the
// server announces and serves the full MAX_IO_BYTES.
const _: () = assert!(
    rpc::limits::DEFAULT_MAX_RECORD_BYTES >= MAX_IO_BYTES + WRITE_OVERHEAD_BYTES,
    "the default record limit must hold the largest WRITE"
);
const _: () = assert!(matches!(
    max_io_bytes_for_record(rpc::limits::DEFAULT_MAX_RECORD_BYTES),
    Ok(MAX_IO_BYTES)
));

/// Most NLM LOCK requests blocked at once whose GRANTED call is owed: one per process
/// blocked in `fcntl(F_SETLKW)` on some client; the lock manager bounds its waiters
/// (`locks::limits::MAX_WAITERS`) and this record is what NLM adds to each.
pub const MAX_NLM_BLOCKED: usize = 65_536;

/// Most granted locks whose GRANTED call is unanswered. Each costs one queued callback;
/// past this a granted waiter's lock is given back rather than a callback queued.
pub const MAX_NLM_PENDING_GRANTS: usize = 4096;

/// Most NLM DOS share reservations (SHARE): only DOS and OS/2 clients send them.
pub const MAX_NLM_SHARES: usize = 65_536;

/// Most hosts NSM records as holding locks (written to the state directory, told with
/// SM_NOTIFY after a restart): client machines, not processes. No more than callbacks
/// may wait, so a restart can queue an SM_NOTIFY for every one.
pub const MAX_NSM_HOSTS: usize = 1024;

/// Most SM_MON registrations (local callers watching hosts).
pub const MAX_NSM_WATCHES: usize = 1024;

/// How long one attempt of a call granary makes to a client (NLM GRANTED, a `_RES`,
/// SM_NOTIFY) may take: the client's portmapper, the connection and the reply together.
/// A client on a LAN answers in milliseconds; 5 s covers a loaded one.
pub const CALLBACK_ATTEMPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Attempts of one callback before it is given up (a GRANTED given up releases the
/// lock): a client that never answers costs at most this many timeouts and the pauses
/// between them, about 20 s, and one of [`MAX_CALLBACKS_IN_FLIGHT`].
pub const CALLBACK_ATTEMPTS: u32 = 3;

/// Pause before the second attempt; it doubles for each later one.
pub const CALLBACK_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// Callbacks waiting to be sent; past it a new one is dropped at once (and a GRANTED
/// dropped releases its lock). Bounds memory when many clients stop answering.
pub const MAX_CALLBACKS_QUEUED: usize = 1024;

/// Callbacks being sent at once (each holds a connection to a client): clients that never
/// answer hold at most this many sockets, never the server's workers.
pub const MAX_CALLBACKS_IN_FLIGHT: usize = 64;

/// The NLM grace period after a restart when none is configured (`--grace-secs`): the
/// NFSv4 lease, as knfsd uses one grace period for both.
pub const DEFAULT_GRACE: std::time::Duration =
    std::time::Duration::from_secs(state4::limits::DEFAULT_LEASE_SECS as u64);

const _: () = assert!(MAX_CALLBACKS_IN_FLIGHT <= MAX_CALLBACKS_QUEUED);
const _: () = assert!(MAX_NSM_HOSTS <= MAX_CALLBACKS_QUEUED);
const _: () = assert!(MAX_NLM_PENDING_GRANTS <= MAX_NLM_BLOCKED);

/// How long the server waits for a client's answer to a callback (CB_NULL, CB_COMPOUND)
/// before it marks the back channel down: a tenth of the default lease, as knfsd
/// waits, so a dead back channel is reported well within one lease.
pub const NFS4_CB_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(9);

/// How long a callback waits before it tries again after the client answered its
/// CB_SEQUENCE `NFS4ERR_DELAY`, and how many times it tries again (Linux answers DELAY
/// while a session it just created is being set up; knfsd waits 2 s between tries).
pub const NFS4_CB_DELAY_RETRY: std::time::Duration = std::time::Duration::from_millis(500);
pub const NFS4_CB_DELAY_RETRIES: u32 = 8;

/// Callbacks of one session that may be in progress or waiting for a back-channel slot
/// at once. Past it a caller is refused at once (`CallbackError::Busy`) instead of
/// queueing without bound; lock notifications for one client rarely come in bursts.
pub const MAX_NFS4_CB_PER_SESSION: usize = 16;

/// Connections one session keeps bound for its back channel (BIND_CONN_TO_SESSION may
/// bind one per connection the client opens; the newest open one is used). Past it the
/// oldest is forgotten.
pub const MAX_BACK_CONNS_PER_SESSION: usize = 4;

const _: () = assert!(MAX_NFS4_CB_PER_SESSION <= rpc::limits::MAX_BACK_CALLS);
const _: () = assert!(
    NFS4_CB_DELAY_RETRY.as_millis() * NFS4_CB_DELAY_RETRIES as u128 <= NFS4_CB_TIMEOUT.as_millis(),
    "a callback the client keeps delaying gives up within one callback timeout"
);

/// Names of uids (and, apart, of gids) the NFSv4 owner mapping keeps (`idmap`, with an
/// idmap domain only). A few thousand covers the users of any one server's files; one
/// entry is an id and a short string (under 100 bytes), so a full table is under 1 MiB,
/// and when it fills it is emptied rather than grown.
pub const IDMAP_CACHE_ENTRIES: usize = 4096;

/// The largest result of an NFSv4 operation that changes something, other than LOCK: what
/// must still fit a session's reply before it runs (OPEN's, the largest, is a stateid,
/// change info, flags, an attribute bitmap and a delegation answer: about 100 bytes; a
/// bitmap of every word granary defines keeps it under this).
pub const MAX_CHANGE_RESULT_BYTES: usize = 256;

/// The largest LOCK result: a denial names the lock in the way (offset, length, type) and
/// its owner (client id and an owner of up to `NFS4_OPAQUE_LIMIT` bytes).
pub const MAX_LOCK_RESULT_BYTES: usize =
    4 + 4 + 8 + 8 + 4 + 8 + 4 + nfs4::limits::NFS4_OPAQUE_LIMIT as usize;
