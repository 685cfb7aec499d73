//! Descriptors for READ, WRITE and COMMIT, and of directories that calls work in (seed
//! 004's open-file cache; directories: [`HostFs::find_dir`]).
//!
//! [`HostFs::io_file`] is the one way the data path gets a descriptor. With the cache off
//! (`--fhcache off`, `HostConfig::open_files == 0`) it opens the file by id
//! ([`HostFs::open`]: handle index, `open_by_handle_at` or a walk, a `statx` to verify it)
//! and the descriptor is closed when the call drops it: open, I/O, close on every call.
//! With the cache on, descriptors are kept in a [`sync::filecache::FileCache`] keyed by
//! inode number and access mode, shared by every call and client:
//!
//! - a hit makes no open or close system call; concurrent misses open once;
//! - entries age by two bits (referenced, recent) in [`HostFs::age_open_files`], which the
//!   server runs from a global timer, never from a request; an entry unused for two passes
//!   is closed;
//! - the cache holds at most `open_files` descriptors (the server derives the bound from
//!   RLIMIT_NOFILE at start); a miss that finds it full opens for that call only;
//! - when a file's last name is removed through granary, its entries are dropped at once
//!   ([`HostFs::forget_open`]), so the space is released as soon as the last call using
//!   the descriptor ends, as with the cache off;
//! - a descriptor that took UNSTABLE writes is `fdatasync`ed before it is closed (aging,
//!   shutdown), so what the client was told to COMMIT later is never lost by a close;
//!   COMMIT, DATA_SYNC and FILE_SYNC clear the mark, and so does the removal of the
//!   file's last name (its data can never be read again). Aging closes on the server's
//!   closing thread, never on a network worker.
//!
//! A cached descriptor keeps naming its inode after a local process renames or unlinks
//! the file: renames are harmless (handles follow the inode), and a hit whose `statx`
//! shows no link left is refused `Stale` and dropped, as the uncached open would have.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rustix::fs::Statx;
use sync::filecache::{Access as CacheAccess, Entry, Evicted, FileCache, FileCacheStats};
use vfs::{Attr, Checks, FileId, FsError, FsResult};

use crate::attr::{stat_fd, to_attr};
use crate::{Access, HostFs};

/// Counters of the data path's descriptors (tests and the lab read them).
#[derive(Debug, Default)]
pub(crate) struct IoCounters {
    /// Descriptors opened for READ/WRITE/COMMIT (cached or not).
    opens: AtomicU64,
    /// Cached descriptors synced before their close because they held UNSTABLE writes.
    flushes: AtomicU64,
    /// Such syncs that failed (the data may not be on disk; logged).
    flush_errors: AtomicU64,
}

/// A cached descriptor and whether it took UNSTABLE writes not yet synced.
#[derive(Debug)]
pub struct OpenFile {
    fd: OwnedFd,
    unstable: AtomicBool,
    counters: Arc<IoCounters>,
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        if !self.unstable.load(Ordering::Acquire) {
            return;
        }
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = rustix::fs::fdatasync(&self.fd) {
            self.counters.flush_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "sync before closing a cached file failed");
        }
    }
}

/// The cache itself (present when `open_files > 0`).
pub(crate) type Cache = FileCache<u64, OpenFile>;

/// A descriptor for one call's I/O, with the attributes its open took (`None` on a cache
/// hit: the caller takes them when it needs them).
#[derive(Debug)]
pub struct IoFile {
    held: Fd,
    pub(crate) st: Option<Statx>,
}

/// A descriptor one call holds: its own (closed when the call drops it) or one shared
/// from the open-file cache.
#[derive(Debug)]
pub enum Fd {
    Cached(Arc<Entry<OpenFile>>),
    Own(OwnedFd),
}

impl AsFd for Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Self::Cached(entry) => entry.fd.as_fd(),
            Self::Own(fd) => fd.as_fd(),
        }
    }
}

impl From<OwnedFd> for Fd {
    fn from(fd: OwnedFd) -> Self {
        Self::Own(fd)
    }
}

impl AsFd for IoFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.held.as_fd()
    }
}

impl IoFile {
    /// After an UNSTABLE write: the data must be synced before the descriptor closes.
    pub(crate) fn mark_unstable(&self) {
        if let Fd::Cached(entry) = &self.held {
            if !entry.unstable.load(Ordering::Relaxed) {
                entry.unstable.store(true, Ordering::Release);
            }
        }
    }

    /// Before a sync of the whole file: clears the mark (a write racing the sync sets it
    /// again after its own `pwrite`). Returns whether it was set, for [`Self::restore`].
    pub(crate) fn take_unstable(&self) -> bool {
        match &self.held {
            Fd::Cached(entry) => entry.unstable.swap(false, Ordering::AcqRel),
            Fd::Own(_) => false,
        }
    }

    /// The sync failed: the data is still unstable.
    pub(crate) fn restore(&self, was: bool) {
        if was {
            self.mark_unstable();
        }
    }
}

fn cache_access(write: bool) -> (CacheAccess, Access) {
    if write {
        (CacheAccess::Write, Access::Write)
    } else {
        (CacheAccess::Read, Access::Read)
    }
}

impl HostFs {
    /// A descriptor of `id` to read (`write == false`) or write, from the open-file cache
    /// when it is on. See the module documentation.
    ///
    /// # Errors
    /// Those of [`HostFs::open`]; `Stale` for a cached file a local process unlinked.
    pub fn io_file(&self, id: FileId, write: bool) -> FsResult<IoFile> {
        let (key_access, access) = cache_access(write);
        let Some(cache) = &self.open_files else {
            let opened = self.open(id, access)?;
            self.io.opens.fetch_add(1, Ordering::Relaxed);
            return Ok(IoFile {
                held: Fd::Own(opened.fd),
                st: Some(opened.st),
            });
        };
        let mut st = None;
        let entry = cache.get_or_open(&id.0, key_access, || {
            let opened = self.open(id, access)?;
            self.io.opens.fetch_add(1, Ordering::Relaxed);
            st = Some(opened.st);
            Ok::<_, FsError>(self.cached(opened.fd))
        })?;
        Ok(IoFile {
            held: Fd::Cached(entry),
            st,
        })
    }

    /// A descriptor as the cache keeps it, with no UNSTABLE writes yet.
    fn cached(&self, fd: OwnedFd) -> OpenFile {
        OpenFile {
            fd,
            unstable: AtomicBool::new(false),
            counters: Arc::clone(&self.io),
        }
    }

    /// A directory's `O_PATH` descriptor, with the attributes its open took (`None` when
    /// it came from the cache). With the cache on (key: inode, `Path`), a miss opens it as
    /// [`HostFs::open`] does (handle, verification, the "still beneath the root" check); a
    /// hit skips `open_by_handle_at` and `close` but checks again that the directory is
    /// beneath the root, since a local process may have moved it out since it was opened.
    /// A hit on a directory a local process removed fails that check; it is then `Stale`
    /// and its entry is dropped. The caller takes the attributes ([`Self::linked_attrs`]).
    pub(crate) fn find_dir(&self, dir: FileId) -> FsResult<(Fd, Option<Statx>)> {
        let Some(cache) = &self.open_files else {
            let d = self.open_dir_uncached(dir)?;
            return Ok((d.fd.into(), Some(d.st)));
        };
        let mut st = None;
        let entry = cache.get_or_open(&dir.0, CacheAccess::Path, || {
            let d = self.open_dir_uncached(dir)?;
            st = Some(d.st);
            Ok::<_, FsError>(self.cached(d.fd))
        })?;
        let fd = Fd::Cached(entry);
        if st.is_none() && dir != self.root_id() {
            if let Err(e) = self.check_beneath(fd.as_fd(), dir.0) {
                self.linked_attrs(dir, &fd)?;
                return Err(e);
            }
        }
        Ok((fd, st))
    }

    /// A fresh `statx` of a descriptor of `id`; a file with no link left (removed, by a
    /// local process or another call) is `Stale`, and its cached descriptors are dropped.
    pub(crate) fn linked_attrs(&self, id: FileId, fd: &impl AsFd) -> FsResult<Statx> {
        let st = stat_fd(fd)?;
        if st.stx_nlink == 0 {
            self.forget_open(id);
            return Err(FsError::Stale);
        }
        Ok(st)
    }

    /// The attributes of an I/O descriptor: those its open took, or a fresh `statx` on a
    /// cache hit, refusing a file that no longer has a name (`Stale`, and its entries are
    /// dropped).
    pub(crate) fn io_attr(&self, id: FileId, file: &IoFile) -> FsResult<Statx> {
        match file.st {
            Some(st) => Ok(st),
            None => self.io_attr_fresh(id, file),
        }
    }

    /// A descriptor to read `id` through, with the attributes `checks.may_read` passed.
    pub(crate) fn readable(
        &self,
        id: FileId,
        checks: &dyn Checks,
    ) -> FsResult<(IoFile, Statx, Attr)> {
        let f = self.io_file(id, false)?;
        let st = self.io_attr(id, &f)?;
        let attr = to_attr(&st);
        checks.may_read(&attr)?;
        Ok((f, st, attr))
    }

    /// A fresh `statx` of an I/O descriptor (WRITE and COMMIT take it under the file's
    /// lock); a cached descriptor whose file lost its last name is `Stale`.
    pub(crate) fn io_attr_fresh(&self, id: FileId, file: &IoFile) -> FsResult<Statx> {
        match file.st {
            Some(_) => stat_fd(file),
            None => self.linked_attrs(id, file),
        }
    }

    /// Syncs an I/O descriptor with `sync` (`fsync` or `fdatasync`): the UNSTABLE mark is
    /// cleared first and set again if the sync fails.
    pub(crate) fn sync_io(
        &self,
        file: &IoFile,
        sync: impl FnOnce(BorrowedFd<'_>) -> rustix::io::Result<()>,
    ) -> FsResult<()> {
        let was = file.take_unstable();
        let r = sync(file.as_fd());
        if r.is_err() {
            file.restore(was);
        }
        self.synced(r)
    }

    /// Drops the cached descriptors of `id` (its last name was removed): each closes when
    /// the last call using it ends. With no name left nothing can read its data again, so
    /// UNSTABLE writes it holds are not synced first: that `fdatasync` would run in the
    /// REMOVE itself, on a network worker's event loop, for data about to be freed.
    pub fn forget_open(&self, id: FileId) {
        if let Some(cache) = &self.open_files {
            cache.forget_with(&id.0, |f| f.unstable.store(false, Ordering::Release));
        }
    }

    /// One aging pass of the open-file cache (the server's global timer runs it). Returns
    /// how many descriptors it closed.
    pub fn age_open_files(&self) -> usize {
        self.age_open_files_deferred().len()
    }

    /// One aging pass that returns the evicted descriptors instead of closing them: the
    /// server's timer callback hands them to a closing thread, since a descriptor holding
    /// UNSTABLE writes is `fdatasync`ed before its close and must not stall a worker.
    pub fn age_open_files_deferred(&self) -> Evicted<OpenFile> {
        self.open_files
            .as_ref()
            .map_or_else(Evicted::default, |c| c.age_deferred())
    }

    /// Closes every cached descriptor (syncing those with UNSTABLE writes); for shutdown.
    pub fn close_open_files(&self) -> usize {
        self.open_files.as_ref().map_or(0, |c| c.clear())
    }

    /// The open-file cache's counters; `None` when it is off.
    #[must_use]
    pub fn open_file_stats(&self) -> Option<FileCacheStats> {
        self.open_files.as_ref().map(|c| c.stats())
    }

    /// Descriptors in the open-file cache now (0 when it is off).
    #[must_use]
    pub fn open_files_held(&self) -> usize {
        self.open_files.as_ref().map_or(0, |c| c.len())
    }

    /// Descriptors opened for READ/WRITE/COMMIT since start, and cached descriptors synced
    /// before closing (with how many of those syncs failed).
    #[must_use]
    pub fn io_counts(&self) -> (u64, u64, u64) {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        (
            get(&self.io.opens),
            get(&self.io.flushes),
            get(&self.io.flush_errors),
        )
    }
}
