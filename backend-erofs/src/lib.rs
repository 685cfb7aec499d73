//! The `erofs` backend: serves a read-only EROFS image (`mkfs.erofs` output) through the
//! [`vfs::Backend`] seam.
//!
//! File ids are inode nids, so handles stay valid across restarts for the same image
//! (generation 0: an image never reuses an nid). Every change is `RoFs`. A compressed
//! extent is kept, once decoded, in a bounded cache of decoded extents; a READ that
//! misses it reads the compressed bytes and hands their decoding to the [`DecodeRunner`]
//! it was given (the server gives seed 001's decode workers, `runtime::decode`: the worker
//! pinned to the caller's core, or the pool, or inline). Both the read and the wait for
//! the decode job may sleep, so on a thread that may not block (`sync::blocking`: a
//! network worker's event loop) such a READ answers `WouldBlock` before either, and the
//! server runs it again on the worker's blocking pool; a READ the cache answers stays on
//! the loop. A corrupt or unsupported part of the image fails only the request that
//! touches it: `FsError::Io` and one log line.
#![forbid(unsafe_code)]

pub mod cache;
mod read;

use std::path::Path;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use erofs::{ErofsError, Image, Inode};
use gtime::Timestamp;
use vfs::{
    Attr, Backend, Change, Checks, Cookie, CreateMode, Created, DeviceNumber, DirEntry, DirPage,
    FileId, FileType, Found, FsError, FsProperties, FsResult, FsStat, Linked, Name, ReadDone,
    Renamed, SetAttr, SpecialFile, Stability, Written,
};

pub use cache::ExtentCache;

/// A job for a [`DecodeRunner`].
pub type DecodeJob = Box<dyn FnOnce() + Send + 'static>;

/// Where decode jobs run. The server injects seed 001's decode workers; this crate does
/// not know how they are scheduled.
pub trait DecodeRunner: Send + Sync {
    /// Runs `job` and returns once it has run (on this thread or another).
    fn run(&self, job: DecodeJob);
}

/// Decodes on the calling thread (tools, tests).
#[derive(Debug, Default, Clone, Copy)]
pub struct InlineDecode;

impl DecodeRunner for InlineDecode {
    fn run(&self, job: DecodeJob) {
        job();
    }
}

/// Smallest default size of the decoded-extent cache.
pub const MIN_DEFAULT_CACHE_BYTES: u64 = 64 << 20;
/// Largest default size of the decoded-extent cache: 256 MiB. It was 1 GiB, which a
/// server on a 16 GiB machine held for good after one pass over a large image (unlike the
/// kernel's page cache, this memory is never given back under pressure); the image's
/// compressed blocks stay in the page cache anyway, so a miss costs a decompression, not
/// a disk read.
pub const MAX_DEFAULT_CACHE_BYTES: u64 = 256 << 20;

/// What each cached extent is charged besides its data: its map slot (key, buffer handle
/// and mark, with the table's slack), its queue slot and the buffer's allocation header.
pub const EXTENT_ENTRY_BYTES: u64 = 192;

/// Default size of the decoded-extent cache: a sixteenth of the memory the server may
/// use (the machine's, or its cgroup's `memory.max` when lower: a container limited to
/// 512 MiB on a 64 GiB host must not default to a cache of a gigabyte), between
/// [`MIN_DEFAULT_CACHE_BYTES`] and [`MAX_DEFAULT_CACHE_BYTES`]. The kernel would keep a
/// mounted image's decompressed pages in its page cache, sized by free memory; a fixed
/// 64 MiB made a second sequential pass over a 64 MiB file miss on every extent.
#[must_use]
pub fn default_cache_bytes() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| mem_total_bytes(&m))
        .unwrap_or(0);
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|m| m.trim().parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    (total.min(cgroup) / 16).clamp(MIN_DEFAULT_CACHE_BYTES, MAX_DEFAULT_CACHE_BYTES)
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Bits of a readdir cookie that hold the entry index within a directory block (a 4 KiB
/// block holds at most 341 entries).
const COOKIE_INDEX_BITS: u32 = 16;

/// A read-only EROFS image served as a backend.
pub struct ErofsBackend {
    image: Arc<Image>,
    decode: Arc<dyn DecodeRunner>,
    cache: ExtentCache,
}

impl ErofsBackend {
    /// Opens the image at `path`.
    ///
    /// # Errors
    /// If the file cannot be read, is not EROFS, or uses a feature this reader refuses
    /// (the message names it).
    pub fn open(
        path: &Path,
        decode: Arc<dyn DecodeRunner>,
        cache_bytes: u64,
    ) -> Result<Self, ErofsError> {
        let image = Image::open_path(path)?;
        Ok(Self::new(image, decode, cache_bytes))
    }

    #[must_use]
    pub fn new(image: Image, decode: Arc<dyn DecodeRunner>, cache_bytes: u64) -> Self {
        Self {
            image: Arc::new(image),
            decode,
            cache: ExtentCache::new(cache_bytes),
        }
    }

    /// [`Image::identity`] of the image served (reads all of it).
    ///
    /// # Errors
    /// `Io` if the image cannot be read.
    pub fn identity(&self) -> Result<u64, ErofsError> {
        self.image.identity()
    }

    /// The export incarnation (part of every handle, see `vfs::handle`) for an image of
    /// `identity`: a restart serving the same image (or a copy) accepts the handles of the
    /// last run, and one serving another image answers them STALE. File ids are nids,
    /// fixed for an image. The server keeps identities in its state directory, so it need
    /// not read the image again to get this.
    #[must_use]
    pub fn incarnation_of(identity: u64) -> u32 {
        (identity ^ (identity >> 32)) as u32
    }

    /// True if the file at `path` starts with an EROFS superblock (for `granary serve PATH`).
    #[must_use]
    pub fn is_image(path: &Path) -> bool {
        let Ok(src) = erofs::FileSource::open(path) else {
            return false;
        };
        !matches!(erofs::Superblock::read(&src), Err(ErofsError::NotErofs(_)))
    }

    fn inode(&self, id: FileId) -> FsResult<Inode> {
        self.image
            .inode(id.0)
            .map_err(|e| io_error(id.0, "inode", &e))
    }
}

/// Maps a reader error to `Io` with one log line.
pub(crate) fn io_error(nid: u64, what: &str, e: &ErofsError) -> FsError {
    tracing::warn!(nid, error = %e, "erofs: {what} failed");
    FsError::Io
}

fn file_type(mode: u32) -> FileType {
    match mode & 0o170_000 {
        0o040_000 => FileType::Directory,
        0o120_000 => FileType::Symlink,
        0o020_000 => FileType::CharDevice,
        0o060_000 => FileType::BlockDevice,
        0o010_000 => FileType::Fifo,
        0o140_000 => FileType::Socket,
        _ => FileType::Regular,
    }
}

fn attr_of(inode: &Inode) -> Attr {
    let ft = file_type(inode.mode);
    let rdev = match ft {
        FileType::CharDevice | FileType::BlockDevice => {
            let (major, minor) = inode.rdev();
            DeviceNumber { major, minor }
        }
        _ => DeviceNumber::default(),
    };
    let used_bytes = if inode.is_compressed() {
        u64::from(inode.union_u32) << erofs::limits::BLOCK_BITS
    } else {
        inode
            .size_bytes
            .next_multiple_of(1 << erofs::limits::BLOCK_BITS)
    };
    let time = Timestamp {
        seconds: i64::try_from(inode.mtime_s).unwrap_or(i64::MAX),
        nanos: inode.mtime_ns,
    };
    Attr {
        file_type: ft,
        mode: inode.mode & 0o7777,
        nlink: inode.nlink,
        uid: inode.uid,
        gid: inode.gid,
        size_bytes: inode.size_bytes,
        used_bytes,
        rdev,
        fsid: 0,
        fileid: FileId(inode.nid),
        generation: 0,
        atime: time,
        mtime: time,
        ctime: time,
    }
}

impl Backend for ErofsBackend {
    fn kind(&self) -> &'static str {
        "erofs"
    }

    fn root(&self) -> FileId {
        FileId(self.image.root_nid())
    }

    fn properties(&self) -> FsProperties {
        FsProperties {
            // An image never changes: a nid names one inode for the export's life.
            stable_ids: true,
            max_file_size: vfs::limits::MAX_FILE_SIZE,
            time_granularity_ns: 1,
            supports_hard_links: true,
            supports_symlinks: true,
            max_links: u32::MAX,
            max_name_bytes: erofs::limits::MAX_NAME_BYTES as u32,
            case_insensitive: false,
            case_preserving: true,
            read_only: true,
        }
    }

    fn fsstat(&self) -> FsResult<FsStat> {
        let sb = self.image.superblock();
        Ok(FsStat {
            total_bytes: u64::from(sb.blocks) << sb.block_bits,
            total_files: sb.inodes,
            ..FsStat::default()
        })
    }

    fn getattr(&self, id: FileId) -> FsResult<Attr> {
        Ok(attr_of(&self.inode(id)?))
    }

    fn setattr(
        &self,
        _: FileId,
        _: &SetAttr,
        _: Option<Timestamp>,
        _: &dyn Checks,
    ) -> FsResult<Change> {
        Err(FsError::RoFs)
    }

    fn lookup(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Found> {
        let inode = self.inode(dir)?;
        if !inode.is_dir() {
            return Err(FsError::NotDir);
        }
        let dir_attr = attr_of(&inode);
        checks.may_search(&dir_attr)?;
        match self.image.lookup(&inode, name.as_bytes()) {
            Ok(Some(e)) => Ok(Found {
                attr: self.getattr(FileId(e.nid))?,
                dir: dir_attr,
            }),
            Ok(None) => Err(FsError::NoEnt),
            Err(e) => Err(io_error(dir.0, "lookup", &e)),
        }
    }

    fn parent(&self, dir: FileId, checks: &dyn Checks) -> FsResult<Found> {
        let inode = self.inode(dir)?;
        if !inode.is_dir() {
            return Err(FsError::NotDir);
        }
        let dir_attr = attr_of(&inode);
        checks.may_search(&dir_attr)?;
        match self.image.lookup(&inode, b"..") {
            Ok(Some(e)) => Ok(Found {
                attr: self.getattr(FileId(e.nid))?,
                dir: dir_attr,
            }),
            Ok(None) => Err(io_error(
                dir.0,
                "parent",
                &ErofsError::Corrupt {
                    what: "no '..'",
                    offset: inode.pos,
                },
            )),
            Err(e) => Err(io_error(dir.0, "parent", &e)),
        }
    }

    fn read_into(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        out: &mut BytesMut,
        checks: &dyn Checks,
    ) -> FsResult<ReadDone> {
        let inode = self.inode(id)?;
        if inode.is_dir() {
            return Err(FsError::IsDir);
        }
        if !inode.is_reg() {
            return Err(FsError::Inval);
        }
        let attr = attr_of(&inode);
        checks.may_read(&attr)?;
        let eof = self.read_file(&inode, offset_bytes, count, out)?;
        Ok(ReadDone { attr, eof })
    }

    fn write(
        &self,
        _: FileId,
        _: u64,
        _: &[u8],
        _: Stability,
        _: &dyn Checks,
    ) -> FsResult<Written> {
        Err(FsError::RoFs)
    }

    fn commit(&self, _: FileId, _: u64, _: u32) -> FsResult<Change> {
        Err(FsError::RoFs)
    }

    fn create(&self, _: FileId, _: &Name, _: &CreateMode, _: &dyn Checks) -> FsResult<Created> {
        Err(FsError::RoFs)
    }

    fn mkdir(&self, _: FileId, _: &Name, _: &SetAttr, _: &dyn Checks) -> FsResult<Created> {
        Err(FsError::RoFs)
    }

    fn symlink(
        &self,
        _: FileId,
        _: &Name,
        _: &[u8],
        _: &SetAttr,
        _: &dyn Checks,
    ) -> FsResult<Created> {
        Err(FsError::RoFs)
    }

    fn mknod(
        &self,
        _: FileId,
        _: &Name,
        _: SpecialFile,
        _: &SetAttr,
        _: &dyn Checks,
    ) -> FsResult<Created> {
        Err(FsError::RoFs)
    }

    fn readlink(&self, id: FileId) -> FsResult<(Bytes, Attr)> {
        let inode = self.inode(id)?;
        if !inode.is_symlink() {
            return Err(FsError::Inval);
        }
        self.image
            .read_link(&inode)
            .map(|target| (Bytes::from(target), attr_of(&inode)))
            .map_err(|e| io_error(id.0, "readlink", &e))
    }

    fn remove(&self, _: FileId, _: &Name, _: &dyn Checks) -> FsResult<Change> {
        Err(FsError::RoFs)
    }

    fn rmdir(&self, _: FileId, _: &Name, _: &dyn Checks) -> FsResult<Change> {
        Err(FsError::RoFs)
    }

    fn rename(
        &self,
        _: FileId,
        _: &Name,
        _: FileId,
        _: &Name,
        _: &dyn Checks,
    ) -> FsResult<Renamed> {
        Err(FsError::RoFs)
    }

    fn link(&self, _: FileId, _: FileId, _: &Name, _: &dyn Checks) -> FsResult<Linked> {
        Err(FsError::RoFs)
    }

    fn readdir(
        &self,
        dir: FileId,
        cookie: Cookie,
        max_entries: usize,
        checks: &dyn Checks,
    ) -> FsResult<(DirPage, Attr)> {
        let inode = self.inode(dir)?;
        if !inode.is_dir() {
            return Err(FsError::NotDir);
        }
        let dir_attr = attr_of(&inode);
        checks.may_list(&dir_attr)?;
        let blocks = self
            .image
            .dir_blocks(&inode)
            .map_err(|e| io_error(dir.0, "readdir", &e))?;
        let mut block = cookie.0 >> COOKIE_INDEX_BITS;
        let mut skip = (cookie.0 & ((1 << COOKIE_INDEX_BITS) - 1)) as usize;
        if block > blocks {
            return Err(FsError::BadCookie);
        }
        let mut entries = Vec::new();
        while block < blocks {
            let list = self
                .image
                .dir_block(&inode, block)
                .map_err(|e| io_error(dir.0, "readdir", &e))?;
            for (i, e) in list.into_iter().enumerate().skip(skip) {
                if entries.len() == max_entries {
                    let page = DirPage {
                        entries,
                        eof: false,
                        verifier: 0,
                    };
                    return Ok((page, dir_attr));
                }
                entries.push(DirEntry {
                    name: Bytes::from(e.name),
                    fileid: FileId(e.nid),
                    cookie: Cookie((block << COOKIE_INDEX_BITS) | (i as u64 + 1)),
                    attr: None,
                });
            }
            block += 1;
            skip = 0;
        }
        let page = DirPage {
            entries,
            eof: true,
            verifier: 0,
        };
        Ok((page, dir_attr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cache_follows_the_machine_memory_within_bounds() {
        let meminfo = "MemTotal:       24576000 kB\nMemFree:         1000 kB\n";
        assert_eq!(mem_total_bytes(meminfo), Some(24_576_000 * 1024));
        assert_eq!(mem_total_bytes("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total_bytes("MemTotal: lots kB\n"), None);
        let d = default_cache_bytes();
        assert!(
            (MIN_DEFAULT_CACHE_BYTES..=MAX_DEFAULT_CACHE_BYTES).contains(&d),
            "{d}"
        );
    }
}
