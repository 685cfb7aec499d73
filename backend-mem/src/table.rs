//! The inode table: `FileId` → inode, sharded so that looking up different files does not
//! contend on one lock. Shard locks are leaves of the lock order: nothing else is ever
//! locked while one is held.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use vfs::{FileId, FsError, FsResult};

use crate::inode::Inode;

/// Number of table shards: a few per core of a large server is enough to make the (short)
/// shard critical sections rare to collide; a power of two keeps the shard pick cheap.
const SHARDS: usize = 32;

const _: () = assert!(SHARDS.is_power_of_two());

/// The root directory's id; later ids count up from it and are never reused.
pub(crate) const ROOT: FileId = FileId(1);

type Shard = RwLock<HashMap<FileId, Arc<Inode>>>;

#[derive(Debug)]
pub(crate) struct Table {
    shards: Vec<Shard>,
    next_id: AtomicU64,
}

impl Table {
    pub(crate) fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            next_id: AtomicU64::new(ROOT.0),
        }
    }

    fn shard(&self, id: FileId) -> &Shard {
        // The modulo keeps the index below SHARDS, so the cast cannot truncate.
        &self.shards[(id.0 % SHARDS as u64) as usize]
    }

    /// A fresh id, never handed out before.
    pub(crate) fn allocate_id(&self) -> FileId {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        assert!(id < u64::MAX, "file ids exhausted");
        FileId(id)
    }

    /// The inode named `id`, or `Stale` if there is none (any more).
    pub(crate) fn get(&self, id: FileId) -> FsResult<Arc<Inode>> {
        let shard = self
            .shard(id)
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        shard.get(&id).cloned().ok_or(FsError::Stale)
    }

    pub(crate) fn insert(&self, inode: Arc<Inode>) {
        let mut shard = self
            .shard(inode.id)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let previous = shard.insert(inode.id, inode);
        assert!(previous.is_none(), "file ids are never reused");
    }

    pub(crate) fn remove(&self, id: FileId) {
        let mut shard = self
            .shard(id)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let removed = shard.remove(&id);
        assert!(
            removed.is_some(),
            "removing an inode that is not in the table"
        );
    }
}
