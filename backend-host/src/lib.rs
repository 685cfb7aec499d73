//! `host`: serves a directory of the host (`granary serve /srv/data`).
//!
//! # What it promises
//!
//! - **Escape-proof.** Every name is resolved one component at a time beneath a directory
//!   fd that was itself resolved beneath the export root: `openat2` with
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`, or,
//!   where `openat2` is missing (Linux < 5.6), `openat` with `O_NOFOLLOW` of a single
//!   component plus a device check. A symlink on the server is never followed, `..` is
//!   never resolved by name (the export layer keeps `..` of the root at the root), and a
//!   symlink or directory swapped in by a local process can only make an operation fail.
//!   Another file system mounted below the root is refused (`Access` on LOOKUP; there is
//!   no option to cross yet, because file ids are inode numbers of one device).
//! - **Handles that survive restarts and renames** ([`index`]): a file id is its inode
//!   number; the handle index maps it to the kernel file handle (used with
//!   `open_by_handle_at` when the server has `CAP_DAC_READ_SEARCH`, e.g. runs as root) and
//!   to its last parent and name (re-walked otherwise). Both check the generation, so a
//!   file removed and recreated under the same name gives the old handle `Stale`. A
//!   directory found by kernel handle is checked to be still beneath the root (`..` walk).
//!   Limit: a non-directory that a local process moved out of the export tree (same file
//!   system) stays reachable through a handle issued before the move, as with Linux nfsd's
//!   default `no_subtree_check`; export a whole file system if that matters. Without the
//!   capability (containers usually lack it), a file whose recorded path a local process
//!   changed is found again by one breadth-first scan of the export ([`search`]), bounded
//!   by `limits::MAX_SEARCH_ENTRIES`.
//! - **A bounded index.** A file's record goes when its last name is removed through
//!   granary or when a handle of it finds it removed, and the index's log is compacted as
//!   files come and go, so neither memory, nor the state directory, nor the time to start
//!   grows with the number of files ever created. The index holds at most
//!   [`HostConfig::index`] records and bytes; past them it evicts records (unused files
//!   first, see [`index`]), and an evicted file's handle is resolved by the same search,
//!   which records it again.
//! - **Durable.** `FileSync` writes are `fsync`ed and `DataSync` writes `fdatasync`ed before
//!   the call returns; `commit` runs `fdatasync` (and syncs the handle index); on a
//!   memory-backed export, whose syncs are the kernel's `noop_fsync`, neither system call
//!   is made. A failed sync is reported to the client as an error and counted in
//!   [`HostFs::writeback_errors`], which the NFS server folds into the write verifier of
//!   later WRITE and COMMIT replies (`vfs::Backend::writeback_errors`), so clients resend
//!   the UNSTABLE data they could have lost.
//! - **Never sleeps on a network worker.** Where blocking is forbidden (`sync::blocking`),
//!   a call that would wait on the disk (a sync, a size change, a READ of uncached data)
//!   answers `WouldBlock` before it changes anything and runs again on the blocking pool;
//!   on a memory-backed export (tmpfs, ramfs: [`HostFs::memory_backed`]) none of them
//!   waits on a disk, and all run where they are.
//! - **NFSv4.2's space and copy calls** map to `lseek` `SEEK_DATA`/`SEEK_HOLE`,
//!   `fallocate`, `copy_file_range` (at most `vfs::limits::MAX_COPY_BYTES` a call) and
//!   `FICLONERANGE` (`NotSupp` on file systems without shared extents), as the caller
//!   (`ranges`).
//! - **Fast syscalls.** `statx` for attributes, `pread` straight into the reply buffer,
//!   `pwrite` straight from the request, `getdents64` for listings, whose `d_off` values are
//!   the READDIR cookies (ext4, xfs and btrfs keep them valid while the directory changes;
//!   tmpfs does since Linux 6.6).
//!
//! - **Owners and permissions: the kernel decides, as the caller.** Run as root, each
//!   request's host syscalls run with the calling thread's fsuid, fsgid and groups set to
//!   the client's squashed credential and, for a non-root caller, knfsd's `CAP_NFSD_SET`
//!   out of its effective set (see [`identity`]); the thread switches only when the
//!   next request's identity differs. So the kernel applies mode bits, POSIX ACLs,
//!   default ACLs on CREATE/MKDIR, set-gid and sticky directories, SETATTR's ownership
//!   rules, quotas (`EDQUOT` → `DQuot`) and LSMs, and makes new files the caller's (no
//!   `chown` after; the thread's umask is 0). The `vfs::Checks` a call is given only
//!   name the caller ([`vfs::Checks::cred`]); their mode-bit rules decide nothing here
//!   (they are the fallback of a kernel without `faccessat2`). `vfs::Trusted` (the
//!   server's own calls, tests) acts as the server. Run unprivileged, there is no
//!   switching: the server's config forces `squash = "all"` to the server's uid/gid, and
//!   the kernel decides as the server's user.
//!
//!   Which syscalls are **resolution** (run as the server: with `CAP_DAC_READ_SEARCH` and
//!   `CAP_DAC_OVERRIDE` raised for the span of the function if the thread acts for a
//!   non-root caller, [`identity::raise_for_resolution`]) and which are **the operation**
//!   (run as the caller, after [`HostFs::act`]):
//!
//!   | resolution (the server's) | the operation (the caller's) |
//!   |---|---|
//!   | the handle index, `open_by_handle_at` (needs `CAP_DAC_READ_SEARCH`), the re-walk of a recorded path and the search of a lost file ([`HostFs::open`]); the "still beneath the root" climb of a directory (tried as the thread is first, privileged only if refused); opening a file for READ, WRITE, truncation or READDIR by handle | LOOKUP's `openat2` of the name and `..` (search permission), CREATE's `openat2(O_CREAT)`, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK (`linkat` through `/proc/self/fd`), SETATTR's `fchownat`/`chmod`/`utimensat`/`ftruncate`, WRITE's `pwrite` (set-id bits cleared, quotas charged without exemption), READDIR's listing |
//!   | `statx` of a descriptor (GETATTR needs no permission, as in knfsd), `name_to_handle_at` | the permission to use a descriptor resolution opened or the cache holds: `faccessat2(fd, "", R_OK/W_OK, AT_EMPTY_PATH \| AT_EACCESS)` on every READ, WRITE, truncation and READDIR (the owner may always read and write: knfsd's owner override; READ passes with execute permission too); ACCESS and LOOKUP of `.`, one `faccessat2` per asked bit |
//!
//!   So a descriptor opened for one user is never what lets another read or write: each
//!   call is asked again, as its own caller, and a `chmod` or `setfacl` on the server
//!   applies to the very next call. READLINK and COMMIT ask no permission (knfsd's
//!   `NFSD_MAY_NOP` for READLINK; the write was checked). The exception, as in knfsd:
//!   NFSv4 READ and WRITE through an open whose access was checked at OPEN
//!   (`vfs::Backend::read_opened`, `write_opened`) ask nothing more, as a local process
//!   with the file open; such a READ makes one `pread` (a byte more than asked says
//!   whether it ended the file, instead of a `statx` for the size), and such a WRITE that
//!   ends its COMPOUND a `pwrite` (and the sync it asks for), no `statx` around it.
//! - **Weak cache consistency.** A change's attributes before and after are taken under
//!   granary's lock of the directory or file (see `lock`), around the one syscall, with
//!   the checks in between: no other granary request lies between them. A local process
//!   outside granary can still change the same directory or file in between (Linux nfsd
//!   has the same limit for local processes that do not take the inode lock); the client
//!   then sees attributes that do not match its cache and revalidates.
//!
//! # Open files
//!
//! [`HostFs::open`] is the one place a file id becomes a file descriptor, for an
//! [`Access`] mode: READ opens [`Access::Read`], WRITE, COMMIT and truncation
//! [`Access::Write`], READDIR [`Access::List`], everything else [`Access::Path`]; the
//! descriptor is closed when the caller drops it. READ, WRITE and COMMIT get theirs from
//! [`HostFs::io_file`] instead, which keeps them in seed 004's open-file cache (see
//! `files`) unless it is off (`--fhcache off`: open and close on every call).

mod attr;
mod backend;
mod closer;
mod entries;
pub mod errno;
mod files;
mod held;
pub mod identity;
pub mod index;
pub mod limits;
mod lock;
mod ops;
mod ranges;
mod search;
mod sys;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{Mode, OFlags, ResolveFlags, Statx};
use rustix::io::Errno;
use vfs::{Checks, Cred, FileId, FsError, FsResult};

use crate::attr::{device, generation, kind_bits, stat_at, stat_fd};
use crate::errno::fs_err;
pub use crate::files::{IoFile, OpenFile};
use crate::index::{Index, Record};
pub use crate::sys::KernelHandle;

/// How a host export is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// The directory to export.
    pub root: PathBuf,
    /// Where the handle index lives; `None` keeps it in memory (handles die with the
    /// process).
    pub index_path: Option<PathBuf>,
    /// Use `open_by_handle_at` when the process may (`CAP_DAC_READ_SEARCH`).
    pub kernel_handles: bool,
    /// Bound of the open-file cache (seed 004; see `files`); 0 turns it off, so READ,
    /// WRITE and COMMIT open and close the file on every call (`--fhcache off`).
    pub open_files: usize,
    /// Bound of the handle index (`--index-entries`, `--index-bytes`; see [`index`]).
    pub index: index::IndexLimits,
    /// Whether the export's file system keeps its files in memory (see
    /// [`HostFs::memory_backed`]); `None` asks `statfs` of the root, as the server does.
    /// Tests set it to see the other path on the file system they have.
    pub memory_backed: Option<bool>,
}

impl HostConfig {
    #[must_use]
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            index_path: None,
            kernel_handles: true,
            open_files: sync::limits::FILECACHE_DEFAULT_ENTRIES,
            index: index::IndexLimits::default(),
            memory_backed: None,
        }
    }
}

/// Why a host export cannot start; each message says what to fix.
#[derive(Debug)]
pub struct HostError(pub String);

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HostError {}

/// What a descriptor from [`HostFs::open`] is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// `O_PATH`: attributes, names beneath a directory, links. Any file type.
    Path,
    /// Read a regular file.
    Read,
    /// Write a regular file.
    Write,
    /// List a directory.
    List,
}

impl Access {
    fn flags(self) -> OFlags {
        let base = OFlags::CLOEXEC | OFlags::NOFOLLOW;
        base | match self {
            Self::Path => OFlags::PATH,
            Self::Read => OFlags::RDONLY | OFlags::NOCTTY,
            Self::Write => OFlags::WRONLY | OFlags::NOCTTY,
            Self::List => OFlags::RDONLY | OFlags::DIRECTORY,
        }
    }

    /// Refuses, before opening anything, a mode the file type does not allow: a device
    /// or FIFO is never opened for I/O.
    fn check(self, kind: u16) -> FsResult<()> {
        let k = u32::from(kind);
        match self {
            Self::Path => Ok(()),
            Self::Read | Self::Write if k == libc::S_IFREG => Ok(()),
            Self::Read | Self::Write if k == libc::S_IFDIR => Err(FsError::IsDir),
            Self::Read | Self::Write => Err(FsError::Inval),
            Self::List if k == libc::S_IFDIR => Ok(()),
            Self::List => Err(FsError::NotDir),
        }
    }
}

/// An open file and its attributes, taken when it was opened.
#[derive(Debug)]
pub struct Opened {
    pub fd: OwnedFd,
    pub st: Statx,
}

/// A directory a call works in (`O_PATH`, possibly shared from the open-file cache) and
/// its attributes, taken after the call locked it where it changes entries.
#[derive(Debug)]
pub(crate) struct OpenDir {
    pub fd: files::Fd,
    pub st: Statx,
}

/// A host directory served as a backend.
#[derive(Debug)]
pub struct HostFs {
    root: OwnedFd,
    /// The root opened for reading: `open_by_handle_at` takes its mount from it (an
    /// `O_PATH` descriptor is refused there with `EBADF`).
    mount: OwnedFd,
    root_ino: u64,
    root_generation: u32,
    dev: (u32, u32),
    index: Index,
    openat2: bool,
    kernel_handles: bool,
    /// The server runs as root: each call acts as its caller (see `identity`).
    privileged: bool,
    /// Who the server's own calls act as (`vfs::Trusted`): its euid, egid and groups.
    server: Cred,
    /// The process umask, for threads that cannot have their own (`identity::clear_umask`).
    umask: u32,
    writeback_errors: AtomicU64,
    /// Entry changes of one directory (see `lock`).
    dirs: lock::Locks,
    /// Attribute and data changes of one file (see `lock`).
    files: lock::Locks,
    /// Held by the one search that runs at a time (see `search`).
    searching: std::sync::Mutex<()>,
    /// Seed 004's open-file cache (`None` when `open_files` is 0; see `files`).
    open_files: Option<files::Cache>,
    /// Counters of the data path's descriptors.
    io: std::sync::Arc<files::IoCounters>,
    /// Whether the file system answers `preadv2(RWF_NOWAIT)`; cleared at the first
    /// `EOPNOTSUPP` (tmpfs does not, up to Linux 6.18 at least; it is memory-backed, and
    /// never asked).
    nowait_reads: std::sync::atomic::AtomicBool,
    /// The export's file system keeps its files in memory (tmpfs, ramfs): its data calls
    /// never wait on a disk (see [`HostFs::memory_backed`]).
    memory_backed: bool,
    /// Files NFSv4 OPENs hold (see `held`).
    held: held::Held,
}

impl HostFs {
    /// Opens the export root and the handle index.
    ///
    /// # Errors
    /// A missing, unreadable or non-directory root, or an index that cannot be opened.
    pub fn new(config: &HostConfig) -> Result<Self, HostError> {
        let (root, mount) = open_root(&config.root)?;
        let st = stat_fd(&root)
            .map_err(|e| HostError(format!("cannot stat {}: {e}", config.root.display())))?;
        let index = match &config.index_path {
            Some(p) => Index::open(p, config.index).map_err(|e| {
                HostError(format!(
                    "cannot open the handle index {}: {e}; check that the state directory is writable (--state-dir)",
                    p.display()
                ))
            })?,
            None => Index::in_memory(config.index),
        };
        let memory_backed = config
            .memory_backed
            .unwrap_or_else(|| sys::memory_backed(&root));
        let openat2 = probe_openat2(&root);
        let kernel_handles = config.kernel_handles && probe_kernel_handles(&root, &mount);
        let umask = current_umask();
        let privileged = rustix::process::geteuid().is_root();
        let server = server_cred()?;
        if privileged {
            probe_switching(&server)?;
            identity::record_server(server.uid, server.gid, &server.groups);
        }
        tracing::info!(
            root = %config.root.display(), openat2, kernel_handles, privileged, memory_backed,
            indexed = index.len(), "host export"
        );
        Ok(Self {
            root,
            mount,
            root_ino: st.stx_ino,
            root_generation: generation(&st),
            dev: device(&st),
            index,
            openat2,
            kernel_handles,
            privileged,
            server,
            umask,
            writeback_errors: AtomicU64::new(0),
            nowait_reads: std::sync::atomic::AtomicBool::new(true),
            memory_backed,
            held: held::Held::default(),
            dirs: lock::Locks::new(),
            files: lock::Locks::new(),
            searching: std::sync::Mutex::new(()),
            open_files: (config.open_files > 0)
                .then(|| sync::filecache::FileCache::new(config.open_files)),
            io: std::sync::Arc::default(),
        })
    }

    /// How many syncs failed since start. The server changes its write verifier whenever
    /// this changes, so clients resend data they wrote unstable.
    #[must_use]
    pub fn writeback_errors(&self) -> u64 {
        self.writeback_errors.load(Ordering::Acquire)
    }

    /// True if the export's file system keeps its files in memory: tmpfs or ramfs, by
    /// `statfs`'s `f_type` of the root (a mount below the root is never crossed). Its
    /// READ, WRITE (any stability) and COMMIT, and SETATTR of a size, never wait on a
    /// disk: a sync has nothing to write back (`noop_fsync`), a read copies pages that are
    /// in memory, a write or a truncation allocates or frees memory. So they run on the
    /// network worker where they arrive instead of on the blocking pool. The one disk I/O
    /// they can meet is swap (a tmpfs page swapped out, or reclaim while allocating),
    /// which the mem backend's own pages and every allocation of the server meet alike:
    /// a tmpfs export runs its data calls where a mem export does.
    #[must_use]
    pub fn memory_backed(&self) -> bool {
        self.memory_backed
    }

    /// Whether this thread may run a data call that could sleep on the disk (a sync, a
    /// truncation): where blocking is allowed, or always on a memory-backed export.
    pub(crate) fn may_sync_here(&self) -> bool {
        self.memory_backed || sync::blocking::allowed()
    }

    /// True if handles are resolved by `open_by_handle_at`.
    #[must_use]
    pub fn uses_kernel_handles(&self) -> bool {
        self.kernel_handles
    }

    pub(crate) fn root_id(&self) -> FileId {
        FileId(self.root_ino)
    }

    /// Makes the calling thread act as the caller of `checks` for the host calls that
    /// follow (the server itself for `vfs::Trusted`); nothing when the server is not root.
    /// See `identity`.
    pub(crate) fn act(&self, checks: &dyn Checks) -> FsResult<()> {
        if !self.privileged {
            return Ok(());
        }
        let cred = checks.cred().unwrap_or(&self.server);
        let who = identity::Who {
            uid: cred.uid,
            gid: cred.gid,
            groups: &cred.groups,
        };
        identity::act_as(&who).map_err(|_| FsError::ServerFault)
    }

    /// What handle resolution needs, for as long as the guard lives (see
    /// `identity::raise_for_resolution`); nothing when the server is not root.
    pub(crate) fn resolving(&self) -> FsResult<Option<identity::Raised>> {
        if !self.privileged {
            return Ok(None);
        }
        identity::raise_for_resolution()
            .map(Some)
            .map_err(|_| FsError::ServerFault)
    }

    /// Runs a resolution step as the thread is, and once more with resolution's
    /// capabilities if the thread's identity was refused: a directory's climb to the root
    /// usually passes as the caller, with no `capset` at all.
    pub(crate) fn resolve_retry<T>(&self, step: impl Fn() -> FsResult<T>) -> FsResult<T> {
        match step() {
            Err(FsError::Access | FsError::Perm) if self.privileged => {
                let _raised = self.resolving()?;
                step()
            }
            r => r,
        }
    }

    /// Makes the calling thread the server again (its own fsuid, fsgid, groups and
    /// capabilities). A thread that served calls keeps the last caller's identity (see
    /// `identity`); code that then touches files of its own on that thread (a test
    /// writing its scratch files, say) calls this first.
    ///
    /// # Errors
    /// `ServerFault` if a switch is refused.
    pub fn act_as_server(&self) -> FsResult<()> {
        self.act(&vfs::Trusted::ROOT)
    }

    /// True if the server runs as root and each call acts as its caller.
    #[must_use]
    pub fn acts_as_caller(&self) -> bool {
        self.privileged
    }

    /// The one place a file id becomes a descriptor (seed 004's open-file cache goes
    /// here). Verifies the file is the one the id names (inode, generation, device).
    ///
    /// # Errors
    /// `Stale` if the file is gone or replaced; `IsDir`/`Inval`/`NotDir` for an access
    /// mode its type does not allow.
    pub fn open(&self, id: FileId, access: Access) -> FsResult<Opened> {
        match self.open_named(id, access) {
            Err(FsError::Stale) => self.open_held(id, access).unwrap_or(Err(FsError::Stale)),
            r => r,
        }
    }

    /// [`Self::open`] of a file that has a name.
    fn open_named(&self, id: FileId, access: Access) -> FsResult<Opened> {
        let _raised = self.resolving()?;
        if id == self.root_id() {
            access.check(libc::S_IFDIR as u16)?;
            let fd = self.beneath(self.root.as_fd(), b".", access.flags(), Mode::empty());
            return self.verified(fd.map_err(fs_err)?, id, None);
        }
        let rec = self.record(id)?;
        access.check(rec.kind)?;
        if let (true, Some(kh)) = (self.kernel_handles, &rec.kernel) {
            match sys::open_by_handle(&self.mount, kh, access.flags()) {
                Ok(fd) => {
                    let opened = self.verified(fd, id, Some(rec.generation))?;
                    if u32::from(rec.kind) == libc::S_IFDIR {
                        self.check_beneath(opened.fd.as_fd(), opened.st.stx_ino)?;
                    }
                    return Ok(opened);
                }
                Err(Errno::STALE | Errno::NOENT) => {
                    // Removed by a local process: the record goes.
                    self.index.forget_record(id.0, &rec);
                    return Err(FsError::Stale);
                }
                Err(e) => tracing::debug!(errno = %e, "open_by_handle_at failed; re-walking"),
            }
        }
        match self.walk(id, &rec, access.flags(), 0) {
            Err(FsError::Stale) if self.search(id, Some(rec.generation)) => {
                let rec = self.index.get(id.0).ok_or(FsError::Stale)?;
                self.walk(id, &rec, access.flags(), 0)
            }
            Err(FsError::Stale) => {
                // Neither where it was recorded nor anywhere a search reaches: gone.
                self.index.forget_record(id.0, &rec);
                Err(FsError::Stale)
            }
            r => r,
        }
    }

    /// What the handle index knows of `id`, or, for a file it does not hold (evicted at
    /// its bound, or never seen since the index was lost), what one search of the export
    /// finds (see `search`); `Stale` if neither knows it.
    pub(crate) fn record(&self, id: FileId) -> FsResult<Record> {
        if let Some(rec) = self.index.get(id.0) {
            return Ok(rec);
        }
        if self.search(id, None) {
            return self.index.get(id.0).ok_or(FsError::Stale);
        }
        Err(FsError::Stale)
    }

    /// The handle index's size now (entries, charged bytes, log bytes).
    #[must_use]
    pub fn index_stats(&self) -> index::IndexStats {
        self.index.stats()
    }

    /// Re-walks the recorded parent chain down from the root.
    fn walk(&self, id: FileId, rec: &Record, flags: OFlags, depth: usize) -> FsResult<Opened> {
        if depth > limits::MAX_WALK_DEPTH || rec.name.is_empty() {
            return Err(FsError::Stale);
        }
        let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let parent = if rec.parent == self.root_ino {
            None
        } else {
            let prec = self.index.get(rec.parent).ok_or(FsError::Stale)?;
            Some(self.walk(FileId(rec.parent), &prec, dir_flags, depth + 1)?)
        };
        let dir = parent.as_ref().map_or(self.root.as_fd(), |p| p.fd.as_fd());
        let fd = self
            .beneath(dir, &rec.name, flags, Mode::empty())
            .map_err(|_| FsError::Stale)?;
        self.verified(fd, id, Some(rec.generation))
    }

    fn verified(&self, fd: OwnedFd, id: FileId, gen: Option<u32>) -> FsResult<Opened> {
        let st = stat_fd(&fd)?;
        let same = st.stx_ino == id.0
            && device(&st) == self.dev
            && gen.is_none_or(|g| g == generation(&st));
        if !same {
            return Err(FsError::Stale);
        }
        Ok(Opened { fd, st })
    }

    /// A directory found by kernel handle must still be beneath the export root: a local
    /// process may have moved it elsewhere on the same file system.
    ///
    /// Climbs with one `statx` per level, of `..`, `../..`, … relative to the directory
    /// (an `openat` + `statx` + `close` per level cost three times the system calls on
    /// every directory operation), and continues from a descriptor of the ancestor every
    /// [`limits::CLIMB_HOP_LEVELS`] levels so the path stays short. Each `statx` sees one
    /// instant: the answer "beneath" means the root was that ancestor when it was asked,
    /// as with a walk of descriptors.
    pub(crate) fn check_beneath(&self, dir: BorrowedFd<'_>, ino: u64) -> FsResult<()> {
        self.resolve_retry(|| self.climb(dir, ino))
    }

    /// [`Self::check_beneath`] as the thread is.
    fn climb(&self, dir: BorrowedFd<'_>, ino: u64) -> FsResult<()> {
        let mut below_ino = ino;
        let mut base: Option<OwnedFd> = None;
        let mut up = Vec::with_capacity(3 * limits::CLIMB_HOP_LEVELS);
        for _ in 0..limits::MAX_WALK_DEPTH {
            if below_ino == self.root_ino {
                return Ok(());
            }
            let from = base.as_ref().map_or(dir, AsFd::as_fd);
            if up.len() >= 3 * limits::CLIMB_HOP_LEVELS - 1 {
                let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
                base =
                    Some(rustix::fs::openat(from, os(&up), flags, Mode::empty()).map_err(fs_err)?);
                up.clear();
                continue;
            }
            if !up.is_empty() {
                up.push(b'/');
            }
            up.extend_from_slice(b"..");
            let st = stat_at(from, os(&up))?;
            if st.stx_ino == below_ino || device(&st) != self.dev {
                break;
            }
            below_ino = st.stx_ino;
        }
        tracing::warn!(
            ino,
            "a directory handle names a directory moved out of the export; refused as stale"
        );
        Err(FsError::Stale)
    }

    /// Opens one name beneath `dir`, never following a symlink nor leaving the device.
    fn beneath(
        &self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        flags: OFlags,
        mode: Mode,
    ) -> Result<OwnedFd, Errno> {
        let name = os(name);
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        if self.openat2 {
            let how = ResolveFlags::BENEATH
                | ResolveFlags::NO_SYMLINKS
                | ResolveFlags::NO_MAGICLINKS
                | ResolveFlags::NO_XDEV;
            return rustix::fs::openat2(dir, name, flags, mode, how);
        }
        // A single component with O_NOFOLLOW: nothing to follow; a mount point is found by
        // its device.
        let fd = rustix::fs::openat(dir, name, flags, mode)?;
        let st = stat_fd(&fd).map_err(|_| Errno::IO)?;
        if device(&st) != self.dev {
            return Err(Errno::XDEV);
        }
        Ok(fd)
    }

    /// Remembers how to find `st`'s file again: as `name` in `parent`, and by kernel
    /// handle (computed once per file, from `fd` when one is given).
    fn note(&self, parent: FileId, name: &[u8], fd: Option<&OwnedFd>, st: &Statx) {
        let generation = generation(st);
        let known = self.index.get(st.stx_ino);
        let need_kernel = self.kernel_handles
            && !known
                .as_ref()
                .is_some_and(|r| r.generation == generation && r.kernel.is_some());
        let kernel = match fd {
            Some(fd) if need_kernel => sys::name_to_handle(fd).ok().map(std::sync::Arc::new),
            _ => None,
        };
        self.index.note(
            st.stx_ino,
            Record {
                generation,
                kind: kind_bits(st),
                parent: parent.0,
                name: bytes::Bytes::copy_from_slice(name),
                kernel,
            },
        );
    }
}

/// Who the server runs as: (is root, euid, egid). An unprivileged server cannot give files
/// to other owners, so its host exports act as the server's own user (`squash = "all"`
/// with the server's ids as the anonymous identity).
#[must_use]
pub fn server_identity() -> (bool, u32, u32) {
    let uid = rustix::process::geteuid();
    (
        uid.is_root(),
        uid.as_raw(),
        rustix::process::getegid().as_raw(),
    )
}

/// The server's own identity: euid, egid and supplementary groups.
fn server_cred() -> Result<Cred, HostError> {
    let groups = rustix::process::getgroups()
        .map_err(|e| HostError(format!("cannot read the server's groups: {e}")))?;
    Ok(Cred {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
        groups: groups
            .into_iter()
            .map(rustix::process::Gid::as_raw)
            .collect(),
    })
}

/// As root, each call acts as its caller: refuse to start where the thread's identity
/// cannot be switched (no `CAP_SETUID`/`CAP_SETGID`, or a seccomp filter), rather than
/// serve every client as root.
fn probe_switching(server: &Cred) -> Result<(), HostError> {
    fn who(c: &Cred) -> identity::Who<'_> {
        identity::Who {
            uid: c.uid,
            gid: c.gid,
            groups: &c.groups,
        }
    }
    let nobody = Cred {
        uid: vfs::export::NOBODY,
        gid: vfs::export::NOBODY,
        groups: vec![vfs::export::NOBODY],
    };
    identity::act_as(&who(&nobody))
        .and_then(|()| identity::act_as(&who(server)))
        .map_err(|e| {
            HostError(format!(
                "running as root, granary acts as each client's user, but a thread's identity cannot be switched here ({e}); give granary CAP_SETUID and CAP_SETGID and allow setfsuid, setfsgid, setgroups and capset (no seccomp filter on them), or run it as an ordinary user (every client then acts as that user)"
            ))
        })
}

/// Raw bytes as a path argument (names are validated by `vfs::Name`: no `/`, no NUL).
fn os(b: &[u8]) -> &std::ffi::OsStr {
    std::os::unix::ffi::OsStrExt::from_bytes(b)
}

/// The export root as an `O_PATH` descriptor (names are resolved beneath it) and as a
/// readable one (the mount of `open_by_handle_at`; opening it proves read and search
/// permission now rather than at the first READDIR).
fn open_root(path: &Path) -> Result<(OwnedFd, OwnedFd), HostError> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| {
        let fix = match e {
            Errno::NOENT => "it does not exist; create it or give another path",
            Errno::NOTDIR => "it is not a directory; give a directory to export",
            Errno::ACCESS => "permission denied; run granary as a user who may read it",
            _ => "check the path",
        };
        HostError(format!("cannot export {}: {e}: {fix}", path.display()))
    })?;
    let readable = rustix::fs::openat(
        &fd,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        HostError(format!(
            "cannot export {}: cannot list it ({e}); give the granary user read and search permission on it",
            path.display()
        ))
    })?;
    Ok((fd, readable))
}

fn probe_openat2(root: &OwnedFd) -> bool {
    let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
    let flags = OFlags::PATH | OFlags::CLOEXEC;
    rustix::fs::openat2(root, ".", flags, Mode::empty(), how).is_ok()
}

/// Whether `open_by_handle_at` works here: the file system gives handles and the process
/// has `CAP_DAC_READ_SEARCH`. Says why not at debug level.
fn probe_kernel_handles(root: &OwnedFd, mount: &OwnedFd) -> bool {
    let probe =
        sys::name_to_handle(root).and_then(|kh| sys::open_by_handle(mount, &kh, OFlags::PATH));
    if let Err(e) = &probe {
        tracing::debug!(errno = %e, "kernel file handles unavailable; handles are resolved by path");
    }
    probe.is_ok()
}

fn current_umask() -> u32 {
    let old = rustix::process::umask(Mode::from_raw_mode(0o022));
    rustix::process::umask(old);
    old.bits()
}
