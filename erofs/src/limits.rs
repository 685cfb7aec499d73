//! Limits of the EROFS reader. Each bounds memory or work that an image could otherwise
//! make unbounded.

/// The only block size accepted: `mkfs.erofs` 1.5 writes 4 KiB blocks (it has no `-b`).
pub const BLOCK_BITS: u8 = 12;

/// Largest compressed physical cluster read into memory. The Linux reader's limit
/// (`Z_EROFS_PCLUSTER_MAX_SIZE`).
pub const MAX_PCLUSTER_BYTES: u64 = 1 << 20;

/// Largest decompressed extent. mkfs.erofs 1.5 compresses at most about 900 KiB of input
/// into one physical cluster (LZ4 cannot expand data more than 255x, so a 4 KiB cluster
/// decodes to at most ~1 MiB); 8 MiB leaves room for any setting of `-C` and
/// `--max-extent-bytes` while bounding what one corrupt index can make us allocate.
pub const MAX_EXTENT_BYTES: u64 = 8 << 20;

/// Longest symlink target (Linux `PATH_MAX`).
pub const MAX_SYMLINK_BYTES: u64 = 4096;

/// Longest directory entry name.
pub const MAX_NAME_BYTES: usize = 255;

/// Size of one directory entry record on disk.
pub const DIRENT_BYTES: usize = 12;

const _: () = assert!(MAX_PCLUSTER_BYTES <= MAX_EXTENT_BYTES);
const _: () = assert!(1u64 << BLOCK_BITS <= MAX_PCLUSTER_BYTES);
