//! Limits of the vfs layer. Protocol crates check their own wire limits against these.

/// Longest file name component, in bytes. POSIX `NAME_MAX` on Linux; longer names get
/// `FsError::NameTooLong` (`NFS3ERR_NAMETOOLONG`).
pub const MAX_NAME_BYTES: usize = 255;

/// Longest symlink target, in bytes. Linux `PATH_MAX`.
pub const MAX_PATH_BYTES: usize = 4096;

/// Largest single READ or WRITE the vfs accepts. 1 MiB is what Linux nfsd offers as
/// rtmax/wtmax on 64-bit hosts; larger transfers only grow per-request memory.
pub const MAX_IO_BYTES: u32 = 1 << 20;

/// READs at least this large are sent from the file itself where the backend can
/// (`sendfile`; see `Backend::read_slice`). Below it one copy into the reply costs less
/// than a system call of its own per reply, and small replies batch into one write.
pub const ZERO_COPY_READ_MIN_BYTES: u32 = 64 << 10;

/// Most bytes one copy between files moves per call (`Backend::copy_range`); a longer
/// copy answers a short count and the client asks again for the rest (RFC 7862 section
/// 15.2.3 allows it). A copy runs on a blocking-pool thread and holds the client's slot
/// while it runs: 4 MiB takes well under a second on any disk, so one COPY cannot hold a
/// thread for minutes. knfsd bounds its synchronous copies by the same 4 MiB, for the
/// same reason.
pub const MAX_COPY_BYTES: u64 = 4 << 20;

/// Largest file offset + 1 that any backend will accept (2^63 - 1, the POSIX off_t limit).
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// Supplementary groups carried by a credential. AUTH_SYS allows 16.
pub const MAX_GROUPS: usize = 16;

/// Hard links per inode (Linux ext4's limit; enough for every real tree).
pub const MAX_LINKS: u32 = 65_000;

const _: () = assert!(MAX_NAME_BYTES < MAX_PATH_BYTES);
const _: () = assert!((MAX_IO_BYTES as u64) < MAX_FILE_SIZE);
const _: () = assert!(MAX_COPY_BYTES >= MAX_IO_BYTES as u64);
const _: () = assert!(ZERO_COPY_READ_MIN_BYTES <= MAX_IO_BYTES);
