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

/// Largest file offset + 1 that any backend will accept (2^63 - 1, the POSIX off_t limit).
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// Supplementary groups carried by a credential. AUTH_SYS allows 16.
pub const MAX_GROUPS: usize = 16;

/// Hard links per inode (Linux ext4's limit; enough for every real tree).
pub const MAX_LINKS: u32 = 65_000;

const _: () = assert!(MAX_NAME_BYTES < MAX_PATH_BYTES);
const _: () = assert!((MAX_IO_BYTES as u64) < MAX_FILE_SIZE);
const _: () = assert!(ZERO_COPY_READ_MIN_BYTES <= MAX_IO_BYTES);
