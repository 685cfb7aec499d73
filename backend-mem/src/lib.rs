//! `mem`: granary's in-memory backend, the default export and the test oracle of the
//! others. Nothing survives a restart; the server's write verifier announces that.
//!
//! It owns the whole file system in memory:
//! - `inode`: one file (attributes and contents) behind its own `RwLock`;
//! - `sparse`: regular-file data as 64 KiB chunks, holes unallocated;
//! - `dir`: directory entries with insertion-order cookies that never expire;
//! - `table`: the sharded `FileId` → inode map (ids are never reused);
//! - `space`: the byte and file caps (`NoSpc`, reserved before anything changes);
//! - `namespace` and `rename`: the directory operations.
//!
//! # Locks
//!
//! Three kinds, always taken in this order:
//! 1. the **namespace mutex**, held by every operation that adds, removes or moves a
//!    directory entry (create, mkdir, symlink, mknod, remove, rmdir, rename, link). Entries,
//!    link counts, parents and liveness change only under it, so those operations see
//!    a frozen tree: they check everything first, then change it, and none of them can be
//!    seen half done by another;
//! 2. **inode locks**: outside the namespace mutex a thread holds at most one at a time;
//!    under it, a directory operation write-locks every inode it changes (at most four) in
//!    ascending `FileId` order and releases them together, so lookups, getattrs and
//!    listings see either the old or the new tree, never a mix;
//! 3. **table shard locks**: leaves, held only to clone or insert an `Arc<Inode>`.
//!
//! Data I/O, getattr, setattr, lookup and readdir never take the namespace mutex: reads of
//! one file share its read lock, and I/O on different files shares nothing but the atomic
//! space counters.
//!
//! # Times
//!
//! Every timestamp comes from the injected [`gtime::Clock`]. A write moves mtime and ctime;
//! an attribute change moves ctime; an entry change moves the directory's mtime and ctime
//! and the ctime of the file linked, unlinked or renamed. Reads do not move atime (as if
//! mounted `noatime`): it would turn every read into a write of the inode's lock and buys
//! clients nothing they rely on.
#![forbid(unsafe_code)]

mod backend;
mod dir;
mod inode;
mod namespace;
mod rename;
mod space;
mod sparse;
mod table;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use gtime::{Clock, Timestamp};
use vfs::{FileId, Owner};

use crate::dir::Dir;
use crate::inode::{Body, Inode, InodeState, Meta};
use crate::space::Space;
use crate::table::{Table, ROOT};

pub use crate::sparse::CHUNK_BYTES;

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
        }
    }
}

/// The in-memory file system; implements [`vfs::Backend`].
pub struct MemFs {
    clock: Arc<dyn Clock>,
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
    /// An empty file system whose root has the configured attributes and the clock's time.
    #[must_use]
    pub fn new(config: MemConfig, clock: Arc<dyn Clock>) -> Self {
        let fs = Self {
            clock,
            table: Table::new(),
            space: Space::new(config.capacity_bytes, config.max_files),
            namespace: Mutex::new(()),
        };
        let owner = Owner {
            uid: config.root_uid,
            gid: config.root_gid,
        };
        let meta = Meta::new(config.root_mode, owner.uid, owner.gid, fs.now());
        let root_id = fs.table.allocate_id();
        assert_eq!(root_id, ROOT, "the root is the first file");
        let root = InodeState::new(meta, Body::Directory(Dir::new(ROOT)));
        fs.table.insert(Arc::new(Inode::new(ROOT, root)));
        fs.space.force_file();
        fs
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
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
