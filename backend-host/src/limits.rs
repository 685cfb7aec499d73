//! Limits of the host backend.

/// Deepest directory chain the path re-walk (and the "still beneath the root" check of a
/// directory found by kernel handle) follows before giving up with `Stale`. Linux's
/// `PATH_MAX` of 4096 bytes allows at most 2048 components; real trees are far shallower.
pub const MAX_WALK_DEPTH: usize = 2048;

/// Levels the "still beneath the root" check climbs with one path (`../../…`) before it
/// continues from a descriptor of the ancestor reached: 64 levels are 191 bytes of path.
pub const CLIMB_HOP_LEVELS: usize = 64;

/// getdents64 buffer of one READDIR page: 32 KiB holds about 1000 typical entries, more
/// than one NFS READDIR reply (`nfsd` caps replies at 1 MiB / ~24 bytes per entry, but
/// pages are refilled as needed).
pub const DIRENT_BUFFER_BYTES: usize = 32 << 10;

const _: () = assert!(DIRENT_BUFFER_BYTES >= 4096);
const _: () = assert!(MIN_INDEX_ENTRIES <= DEFAULT_INDEX_ENTRIES);
const _: () = assert!(MIN_INDEX_BYTES <= DEFAULT_INDEX_BYTES);
const _: () = assert!(COMPACT_FACTOR >= 2);
const _: () = assert!(MAX_WALK_DEPTH >= vfs::limits::MAX_PATH_BYTES / 2);

/// Entries one search for a lost file reads at most (see `search`): a tree of a million
/// entries takes well under a second to list on a local disk.
pub const MAX_SEARCH_ENTRIES: usize = 1_000_000;

/// Inode numbers the handle index remembers as gone (removed through granary, or not
/// found by a search), so a handle of a removed file is `Stale` at once instead of costing
/// a search of the export: about 50 bytes each (set and queue), 3 MiB in all; a few
/// seconds of the fastest REMOVE load measured here (~30,000/s), and handles of files
/// removed longer ago cost one search each.
pub const NEGATIVE_ENTRIES: usize = 65_536;

/// Memory one gone-list entry may take (its set slot and queue slot, with the set's
/// slack), for docs/LIMITS.md's formula.
pub const NEGATIVE_ENTRY_BYTES: usize = 48;

/// Default bound of the handle index's records (`--index-entries`): half a million files
/// is a large working set for one export (nfs-ganesha's metadata cache keeps 100,000
/// entries by default, `Entries_HWMark`), and a file beyond it costs one bounded search
/// when its handle is used again. At [`RECORD_CHARGE_BYTES`] plus a typical 20-byte name
/// and 8-byte kernel handle, that many records are charged about 214 MiB, under
/// [`DEFAULT_INDEX_BYTES`].
pub const DEFAULT_INDEX_ENTRIES: usize = 1 << 19;

/// Default bound of the memory the handle index's records are charged (`--index-bytes`):
/// 256 MiB, so long names and kernel handles cannot take the index much past what the
/// default number of typical records takes.
pub const DEFAULT_INDEX_BYTES: usize = 256 << 20;

/// Smallest bounds the configuration accepts: below a few hundred records, directories
/// that every walk needs would be evicted and searched for again and again.
pub const MIN_INDEX_ENTRIES: usize = 256;
pub const MIN_INDEX_BYTES: usize = MIN_INDEX_ENTRIES * RECORD_CHARGE_BYTES;

/// What one handle-index record is charged besides its name and kernel handle: its map
/// slot (a 72-byte key and value, at the hash table's lowest load of 7/16 right after it
/// grows, with its control byte: up to 167 bytes), the old table still held while it
/// grows (83 bytes at 7/8 load), and the smallest blocks of the name, the kernel handle's
/// `Arc` and its bytes (about 120 bytes with glibc's allocator), rounded up.
/// `tests/index_memory.rs` counts the allocator's bytes while an index fills and checks
/// them against this charge.
pub const RECORD_CHARGE_BYTES: usize = 400;

/// The handle index's log is compacted when it is this many times what its records take
/// (amortized: the rewrite costs what the appends since the last one cost).
pub const COMPACT_FACTOR: u64 = 2;

/// ... and at least this long: compacting a log of a few records after every few appends
/// would cost a file rewrite and an fsync per handful of CREATEs.
pub const COMPACT_MIN_LOG_BYTES: u64 = 4 << 20;

/// Shards of each lock table (`lock`): enough that unrelated files rarely share one on a
/// few cores with hundreds of requests in flight, small enough to allocate at start.
pub const LOCK_SHARDS: usize = 256;

const _: () = assert!(LOCK_SHARDS.is_power_of_two() && LOCK_SHARDS >= 16);

/// A worker that finds one of `lock`'s locks taken spins before it sleeps: the holder is
/// another worker inside a handful of system calls (a CREATE holds its directory across
/// the directory's `statx`, `openat2`, the new file's `statx` and kernel handle, and the
/// directory's `statx` again), and a worker put to sleep on the futex costs the holder a
/// wake-up of an idle CPU at unlock (`try_to_wake_up` was 16% of the workers' time in a
/// CREATE load). Up to `SPIN_ROUNDS` × `SPINS_PER_ROUND` = 1,024 pause instructions (not
/// timed: roughly 5 to 50 µs, as a pause takes tens to about 140 cycles depending on the
/// CPU), then `YIELD_ROUNDS` yields of the CPU (the holder may have been preempted), then
/// it sleeps.
pub const SPIN_ROUNDS: u32 = 64;
pub const SPINS_PER_ROUND: u32 = 16;
pub const YIELD_ROUNDS: u32 = 4;

/// How often the server ages the open-file cache (seed 004; one global timer). A
/// descriptor unused for two passes is closed, so an idle file stays open 4 to 6 seconds,
/// about what Linux nfsd's filecache laundrette (every 2 s) keeps one.
pub const OPEN_FILE_AGE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);
