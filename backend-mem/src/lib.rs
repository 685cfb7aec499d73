//! `mem`: granary's in-memory backend, the default export and the test oracle of the
//! others. Nothing survives a restart; the server's write verifier announces that.
//!
//! It owns the whole file system in memory:
//! - `inode`: one file: attributes behind its own `RwLock`, the ctime in one atomic word,
//!   and a regular file's data behind its range lock ([`sync::RangeLock`]);
//! - `sparse`: regular-file data as 64 KiB chunks, holes unallocated;
//! - `dir`: directory entries with insertion-order cookies that never expire;
//! - `table`: the sharded `FileId` → inode map (ids are never reused);
//! - `space`: the byte and file caps (`NoSpc`, reserved before anything changes);
//! - `namespace` and `rename`: the directory operations;
//! - `ranges`: NFSv4.2's SEEK, ALLOCATE and DEALLOCATE over the chunk map.
//!
//! # Locks
//!
//! Four kinds, always taken in this order:
//! 1. the **namespace mutex**, held by every operation that adds, removes or moves a
//!    directory entry (create, mkdir, symlink, mknod, remove, rmdir, rename, link). Entries,
//!    link counts, parents and liveness change only under it, so those operations see
//!    a frozen tree: they check everything first, then change it, and none of them can be
//!    seen half done by another;
//! 2. **inode locks**: outside the namespace mutex a thread holds at most one at a time;
//!    under it, a directory operation write-locks every inode it changes (at most four) in
//!    ascending `FileId` order and releases them together, so lookups, getattrs and
//!    listings see either the old or the new tree, never a mix;
//! 3. a regular file's **range lock** (seed 003, `MemConfig::rangelock`): READ and WRITE
//!    take only this one, over their bytes, and never an inode lock, so disjoint I/O on one
//!    file runs in parallel; a size change takes it (to the end of the file) under the
//!    inode's write lock, the last unlink takes the whole file;
//! 4. **table shard locks** and a file's **chunk locks** (`sparse`): leaves, held only to
//!    clone or insert an `Arc<Inode>`, or for the copy into or out of one chunk.
//!
//! Data I/O, getattr, setattr, lookup and readdir never take the namespace mutex, and I/O
//! on different files shares nothing but the atomic space counters and the clock's floor.
//!
//! # Times
//!
//! Every timestamp comes from one [`gtime::MultigrainClock`] (seed 000,
//! `MemConfig::timestamps`) over the injected [`gtime::Clock`]. A write moves mtime and
//! ctime (mtime = ctime); an attribute change moves ctime; an entry change moves the
//! directory's mtime and ctime and the ctime of the file linked, unlinked or renamed, all
//! with one stamp. Every getattr (so every reply that carries attributes) marks the ctime
//! observed, so in multigrain mode the next change gets a strictly later one. Reads do not
//! move atime (as if mounted `noatime`): it would turn every read into a write and buys
//! clients nothing they rely on.
#![forbid(unsafe_code)]

mod backend;
mod dir;
mod inode;
mod namespace;
mod ranges;
mod rename;
mod space;
mod sparse;
mod table;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use gtime::{Clock, Ctime, MultigrainClock};
use vfs::{FileId, Owner};

use crate::dir::Dir;
use crate::inode::{Body, Inode, InodeState, Meta};
use crate::space::Space;
use crate::table::{Table, ROOT};

pub use crate::space::{entry_charge, ENTRY_CHARGE_BYTES, INODE_CHARGE_BYTES};
pub use crate::sparse::CHUNK_BYTES;
pub use gtime::TimestampMode;
pub use sync::RangeLockMode;

/// Sizes and the root directory's attributes of a [`MemFs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemConfig {
    /// Cap on allocated data chunks plus symlink targets; `NoSpc` beyond it.
    pub capacity_bytes: u64,
    /// Cap on live files, the root included; `NoSpc` beyond it.
    pub max_files: u64,
    pub root_mode: u32,
    pub root_uid: u32,
    pub root_gid: u32,
    /// How changes are stamped (ignored by [`MemFs::with_clock`], which brings its own).
    pub timestamps: TimestampMode,
    /// Which range lock regular files use.
    pub rangelock: RangeLockMode,
}

impl Default for MemConfig {
    /// 1 GiB and a million files: enough for tests and a scratch export, small enough that
    /// a runaway client cannot exhaust a server's memory.
    fn default() -> Self {
        Self {
            capacity_bytes: 1 << 30,
            max_files: 1_000_000,
            root_mode: 0o777,
            root_uid: 0,
            root_gid: 0,
            timestamps: TimestampMode::default(),
            rangelock: RangeLockMode::default(),
        }
    }
}

/// The in-memory file system; implements [`vfs::Backend`].
pub struct MemFs {
    clock: Arc<MultigrainClock>,
    rangelock: RangeLockMode,
    table: Table,
    space: Space,
    /// Serializes directory-entry changes; see the module comment for the lock order.
    namespace: Mutex<()>,
}

impl std::fmt::Debug for MemFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemFs")
            .field("space", &self.space.stat())
            .finish_non_exhaustive()
    }
}

impl MemFs {
    /// An empty file system whose root has the configured attributes and the clock's time,
    /// stamping changes with its own [`MultigrainClock`] in `config.timestamps` mode.
    #[must_use]
    pub fn new(config: MemConfig, clock: Arc<dyn Clock>) -> Self {
        let clock = Arc::new(MultigrainClock::new(clock, config.timestamps));
        Self::with_clock(config, clock)
    }

    /// As [`MemFs::new`] but stamping with a shared clock, so that the clock's floor, and
    /// with it the ordering of change times, spans every file system that shares it.
    #[must_use]
    pub fn with_clock(config: MemConfig, clock: Arc<MultigrainClock>) -> Self {
        let fs = Self {
            clock,
            rangelock: config.rangelock,
            table: Table::new(),
            space: Space::new(config.capacity_bytes, config.max_files),
            namespace: Mutex::new(()),
        };
        let owner = Owner {
            uid: config.root_uid,
            gid: config.root_gid,
        };
        let now = fs.clock.now();
        let meta = Meta::new(config.root_mode, owner.uid, owner.gid, now);
        let root_id = fs.table.allocate_id();
        assert_eq!(root_id, ROOT, "the root is the first file");
        let root = InodeState::new(meta, Body::Directory(Dir::new(ROOT)));
        let ctime = Ctime::new(now, true);
        fs.table
            .insert(Arc::new(Inode::new(ROOT, root, ctime, fs.rangelock)));
        fs.space.force_file();
        fs
    }

    /// The clock that stamps this file system's changes.
    #[must_use]
    pub fn clock(&self) -> &Arc<MultigrainClock> {
        &self.clock
    }

    /// Runs `body` while holding bytes `range` of regular file `id` the way a READ
    /// (`write` false) or WRITE holds them: for tests and the lab, which show that I/O on
    /// other ranges goes on meanwhile and I/O on overlapping ones waits.
    ///
    /// # Errors
    /// `Stale`, `IsDir` or `Inval` as a READ of `id` would fail.
    pub fn with_range_held<R>(
        &self,
        id: FileId,
        range: std::ops::Range<u64>,
        write: bool,
        body: impl FnOnce() -> R,
    ) -> vfs::FsResult<R> {
        let inode = self.inode(id)?;
        let file = inode.regular_file()?;
        let _held = if write {
            file.lock.write(range)
        } else {
            file.lock.read(range)
        };
        file.check_live()?;
        Ok(body())
    }

    fn inode(&self, id: FileId) -> vfs::FsResult<Arc<Inode>> {
        self.table.get(id)
    }

    /// Takes the namespace mutex (poisoning ignored, as for inode locks).
    fn lock_namespace(&self) -> MutexGuard<'_, ()> {
        self.namespace
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
