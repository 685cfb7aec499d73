//! Limits the NFSv3 server announces (FSINFO) and enforces.

/// Largest READ and WRITE (FSINFO rtmax/wtmax), as Linux nfsd offers on 64-bit hosts.
pub const MAX_IO_BYTES: u32 = vfs::limits::MAX_IO_BYTES;

/// Preferred READ/WRITE size (FSINFO rtpref/wtpref): the maximum, since larger transfers
/// cost fewer round trips and the server has no smaller sweet spot.
pub const PREF_IO_BYTES: u32 = MAX_IO_BYTES;

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

/// Seconds for which FSSTAT figures stay valid (`invarsec`): 0, they change any time.
pub const FSSTAT_INVARSEC: u32 = 0;

const _: () = assert!(MAX_IO_BYTES <= nfs3::limits::MAX_DATA);
const _: () = assert!(MAX_MOUNTS_PER_CLIENT <= MAX_MOUNT_ENTRIES);
const _: () = assert!(PREF_READDIR_BYTES <= MAX_READDIR_BYTES);
const _: () = assert!(PREF_IO_BYTES <= MAX_IO_BYTES && IO_MULTIPLE_BYTES <= PREF_IO_BYTES);
