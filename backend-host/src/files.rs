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
//!   the descriptor ends, as with the cache off (a close that frees a removed file's
//!   blocks never runs on a network worker: see `closer`);
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

use bytes::BytesMut;
use rustix::fs::Statx;
use rustix::io::Errno;
use sync::filecache::{Access as CacheAccess, Entry, Evicted, FileCache, FileCacheStats};
use vfs::limits::MAX_FILE_SIZE;
use vfs::{Attr, Checks, FileId, FsError, FsResult, Stability};

use crate::attr::{stat_fd, to_attr};
use crate::errno::fs_err;
use crate::{identity, sys, Access, HostFs};

/// Before Linux 5.8 there is no `faccessat2`: permission on a descriptor falls back to
/// granary's mode-bit checks (ACLs are then not consulted there). Said once.
pub(crate) fn no_faccessat2() {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        tracing::warn!("this kernel has no faccessat2 (Linux < 5.8): permissions on open files and ACCESS replies come from the mode bits, not ACLs");
    });
}

/// Counters of the data path's descriptors (tests and the lab read them).
#[derive(Debug, Default)]
pub(crate) struct IoCounters {
    /// Descriptors opened for READ/WRITE/COMMIT (cached or not).
    opens: AtomicU64,
    /// Cached descriptors synced before their close because they held UNSTABLE writes.
    flushes: AtomicU64,
    /// Such syncs that failed (the data may not be on disk; logged).
    flush_errors: AtomicU64,
    /// Descriptors of files with no name left whose close a worker handed to the closing
    /// thread (see `closer`).
    pub(crate) deferred_closes: AtomicU64,
}

/// A cached descriptor and whether it took UNSTABLE writes not yet synced.
#[derive(Debug)]
pub struct OpenFile {
    fd: OwnedFd,
    /// A directory (its hits are checked to be still beneath the root).
    dir: bool,
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
            Ok::<_, FsError>(self.cached(opened.fd, false))
        })?;
        Ok(IoFile {
            held: Fd::Cached(entry),
            st,
        })
    }

    /// A descriptor as the cache keeps it, with no UNSTABLE writes yet.
    fn cached(&self, fd: OwnedFd, dir: bool) -> OpenFile {
        OpenFile {
            fd,
            dir,
            unstable: AtomicBool::new(false),
            counters: Arc::clone(&self.io),
        }
    }

    /// A directory's `O_PATH` descriptor (see [`Self::find`]).
    pub(crate) fn find_dir(&self, dir: FileId) -> FsResult<(Fd, Option<Statx>)> {
        self.find(dir, true)
    }

    /// An `O_PATH` descriptor of any file (`dir_only`: a directory, `NotDir` otherwise on
    /// an open), with the attributes its open took (`None` when it came from the cache).
    /// With the cache on (key: inode, `Path`), a miss opens it as [`HostFs::open`] does
    /// (handle, verification, the "still beneath the root" check of a directory); a hit
    /// skips `open_by_handle_at` and `close`, and for a directory checks again that it is
    /// beneath the root, since a local process may have moved it out since it was opened.
    /// A hit on a directory a local process removed fails that check; it is then `Stale`
    /// and its entry is dropped. The caller takes the attributes ([`Self::linked_attrs`]).
    /// GETATTR, SETATTR, LINK and ACCESS find their file here, so a steady client's calls
    /// make no `open_by_handle_at` (nor the `capset` pair resolution costs a thread acting
    /// for a non-root caller).
    pub(crate) fn find(&self, id: FileId, dir_only: bool) -> FsResult<(Fd, Option<Statx>)> {
        let open = || {
            if dir_only {
                self.open_dir_uncached(id)
            } else {
                self.open(id, Access::Path)
            }
        };
        let Some(cache) = &self.open_files else {
            let d = open()?;
            return Ok((d.fd.into(), Some(d.st)));
        };
        let mut st = None;
        let entry = cache.get_or_open(&id.0, CacheAccess::Path, || {
            let d = open()?;
            st = Some(d.st);
            let dir = u32::from(d.st.stx_mode) & libc::S_IFMT == libc::S_IFDIR;
            Ok::<_, FsError>(self.cached(d.fd, dir))
        })?;
        let dir = entry.dir;
        let fd = Fd::Cached(entry);
        if st.is_some() {
            return Ok((fd, st));
        }
        if dir_only && !dir {
            return Err(FsError::NotDir);
        }
        if dir && id != self.root_id() {
            if let Err(e) = self.check_beneath(fd.as_fd(), id.0) {
                self.linked_attrs(id, &fd)?;
                return Err(e);
            }
        }
        Ok((fd, None))
    }

    /// A fresh `statx` of a descriptor of `id`; a file with no link left (removed, by a
    /// local process or another call) is `Stale`, and its cached descriptors are dropped.
    pub(crate) fn linked_attrs(&self, id: FileId, fd: &impl AsFd) -> FsResult<Statx> {
        let st = stat_fd(fd)?;
        if st.stx_nlink == 0 && !self.is_held(id) {
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

    /// A descriptor to read `id` through, with the attributes the permission check saw
    /// ([`Self::may_use`]); the thread acts as the caller after.
    pub(crate) fn readable(
        &self,
        id: FileId,
        checks: &dyn Checks,
    ) -> FsResult<(IoFile, Statx, Attr)> {
        let f = self.io_file(id, false)?;
        let st = self.io_attr(id, &f)?;
        let attr = to_attr(&st);
        self.act(checks)?;
        self.may_use(&f, &attr, checks, false)?;
        Ok((f, st, attr))
    }

    /// `pread` of up to `count` bytes at `offset_bytes` into the end of `out`. With
    /// `forbidden` (blocking is not allowed here) only what the page cache holds
    /// (`RWF_NOWAIT`): `WouldBlock` when nothing of it is cached, or when the file system
    /// cannot tell (`EOPNOTSUPP`: every later such read goes to the pool at once).
    pub(crate) fn pread_into(
        &self,
        f: &IoFile,
        out: &mut BytesMut,
        count: usize,
        offset_bytes: u64,
        forbidden: bool,
    ) -> FsResult<usize> {
        if !forbidden {
            return sys::fill_spare(out, count, |spare| {
                rustix::io::pread(f, spare, offset_bytes).map(|(init, _)| init.len())
            })
            .map_err(fs_err);
        }
        match sys::fill_spare(out, count, |spare| {
            sys::pread_nowait(f, spare, offset_bytes)
        }) {
            Err(Errno::OPNOTSUPP) => {
                tracing::debug!(
                    "the export's file system has no RWF_NOWAIT reads: READs run on the \
                     blocking pool"
                );
                self.nowait_reads
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                Err(FsError::WouldBlock)
            }
            // Not cached: read where it may block.
            Err(Errno::AGAIN) => Err(FsError::WouldBlock),
            r => r.map_err(fs_err),
        }
    }

    /// Whether the caller of `checks` may read (`write` false) or write the file open as
    /// `fd` (a descriptor resolution opened, or one from the cache that another caller's
    /// call opened): the owner always may (knfsd's owner override, so a file created
    /// read-only, or chmod-ed after its open, stays usable by its owner, as on a local
    /// file system with the file already open); anyone else is asked of the kernel on
    /// every call, as the caller (`faccessat2`, see `identity::kernel_allows`), so a
    /// chmod or an ACL changed on the server applies to the very next call. READ passes
    /// with execute permission too (knfsd: clients read binaries they may only run). The
    /// thread must already act as the caller ([`HostFs::act`]).
    pub(crate) fn may_use(
        &self,
        fd: &impl AsFd,
        attr: &Attr,
        checks: &dyn Checks,
        write: bool,
    ) -> FsResult<()> {
        let Some(cred) = checks.cred() else {
            return Ok(());
        };
        if cred.uid == attr.uid || checks.opened() {
            return Ok(());
        }
        let fd = fd.as_fd();
        let asked = if write {
            identity::kernel_allows(fd, libc::W_OK)
        } else {
            identity::kernel_allows(fd, libc::R_OK)
                .or_else(|_| identity::kernel_allows(fd, libc::X_OK))
        };
        match asked {
            Ok(()) => Ok(()),
            Err(Errno::NOSYS) => {
                no_faccessat2();
                if write {
                    checks.may_write(attr).map(|_| ())
                } else {
                    checks.may_read(attr)
                }
            }
            Err(e) => Err(fs_err(e)),
        }
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
    /// cleared first and set again if the sync fails. On a memory-backed export (tmpfs,
    /// ramfs: [`HostFs::memory_backed`]) both are the kernel's `noop_fsync`, which writes
    /// nothing and reports no error, so the system call is left out: one fewer per
    /// FILE_SYNC or DATA_SYNC WRITE and COMMIT (a costly kernel entry in a guest).
    pub(crate) fn sync_io(
        &self,
        file: &IoFile,
        sync: impl FnOnce(BorrowedFd<'_>) -> rustix::io::Result<()>,
    ) -> FsResult<()> {
        let was = file.take_unstable();
        let r = if self.memory_backed {
            Ok(())
        } else {
            sync(file.as_fd())
        };
        if r.is_err() {
            file.restore(was);
        }
        self.synced(r)
    }

    /// A WRITE's checks before it touches anything: a sync it asks for may run on this
    /// thread (else `WouldBlock`: the call runs again on the blocking pool; a memory-backed
    /// export's runs here), and its range ends within the largest file. Its byte count.
    pub(crate) fn write_may_start(
        &self,
        offset_bytes: u64,
        len: usize,
        stable: Stability,
    ) -> FsResult<u32> {
        if stable != Stability::Unstable && !self.may_sync_here() {
            return Err(FsError::WouldBlock);
        }
        let count = u32::try_from(len).map_err(|_| FsError::Inval)?;
        offset_bytes
            .checked_add(u64::from(count))
            .filter(|&end| end <= MAX_FILE_SIZE)
            .ok_or(FsError::FBig)?;
        Ok(count)
    }

    /// After a WRITE's bytes are in: the sync its stability asks for, or the UNSTABLE mark
    /// a COMMIT clears.
    pub(crate) fn write_settle(&self, file: &IoFile, stable: Stability) -> FsResult<()> {
        match stable {
            Stability::Unstable => {
                file.mark_unstable();
                Ok(())
            }
            Stability::DataSync => self.sync_io(file, |fd| rustix::fs::fdatasync(fd)),
            Stability::FileSync => self.sync_io(file, |fd| rustix::fs::fsync(fd)),
        }
    }

    /// Drops the cached descriptors of `id` (its last name was removed): each closes when
    /// the last call using it ends. With no name left nothing can read its data again, so
    /// UNSTABLE writes it holds are not synced first: that `fdatasync` would run in the
    /// REMOVE itself, on a network worker's event loop, for data about to be freed.
    /// On a network worker the close itself (which frees the file's blocks) runs on the
    /// closing thread (see `closer`).
    pub fn forget_open(&self, id: FileId) {
        if let Some(cache) = &self.open_files {
            let gone = cache.forget_deferred(&id.0, |f| f.unstable.store(false, Ordering::Release));
            if !gone.is_empty() {
                crate::closer::close_unlinked(gone, &self.io.deferred_closes);
            }
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

    /// Drops of a removed file's descriptors that a thread which may not block handed to
    /// the closing thread since start (see `closer`).
    #[must_use]
    pub fn deferred_closes(&self) -> u64 {
        self.io.deferred_closes.load(Ordering::Relaxed)
    }
}
