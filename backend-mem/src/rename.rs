//! RENAME: the one directory operation that touches up to four inodes (source and target
//! directories, the file moved, the file replaced).
//!
//! Under the namespace mutex it first checks, in this order: both directories exist and
//! are directories (`Stale`, `NotDir`); the source exists (`NoEnt`); source and target
//! are the same file (success, nothing changes, as POSIX says); a directory is not moved
//! into its own subtree (`Inval`); a replaced target is compatible (`IsDir`, `NotDir`,
//! `NotEmpty`); the new parent can take another subdirectory (`MLink`). Then it write-locks
//! every inode involved in ascending `FileId` order and applies all changes, with one
//! multigrain stamp for all of them, before releasing any lock.

use std::sync::Arc;

use gtime::{Ctime, Stamp};
use vfs::{FileId, FsError, FsResult, Name};

use crate::dir::{Dir, Entry};
use crate::inode::{Body, Inode, InodeState, WriteGuard};
use crate::table::ROOT;
use crate::MemFs;

/// A checked rename.
struct Plan {
    from_dir: Arc<Inode>,
    to_dir: Arc<Inode>,
    moving: Entry,
    replaced: Option<Entry>,
}

impl MemFs {
    pub(crate) fn rename_entry(
        &self,
        from_dir: FileId,
        from: &Name,
        to_dir: FileId,
        to: &Name,
    ) -> FsResult<()> {
        let _namespace = self.lock_namespace();
        match self.plan_rename(from_dir, from, to_dir, to)? {
            Some(plan) => self.apply_rename(&plan, from, to),
            None => Ok(()),
        }
    }

    /// Checks a rename; `None` if there is nothing to do.
    fn plan_rename(
        &self,
        from_dir: FileId,
        from: &Name,
        to_dir: FileId,
        to: &Name,
    ) -> FsResult<Option<Plan>> {
        let from_inode = self.inode(from_dir)?;
        let to_inode = self.inode(to_dir)?;
        let moving = from_inode.read()?.body.dir()?.get(from);
        let (replaced, to_nlink) = {
            let state = to_inode.read()?;
            let dir = state.body.dir()?;
            (dir.get(to), dir.nlink())
        };
        let moving = moving.ok_or(FsError::NoEnt)?;
        if replaced.is_some_and(|r| r.id == moving.id) {
            return Ok(None);
        }
        if moving.is_dir {
            self.check_outside_subtree(moving.id, to_dir)?;
        }
        if let Some(replaced) = replaced {
            self.check_replaceable(moving, replaced)?;
        }
        let adds_subdir =
            moving.is_dir && from_dir != to_dir && !replaced.is_some_and(|r| r.is_dir);
        if adds_subdir && to_nlink >= vfs::limits::MAX_LINKS {
            return Err(FsError::MLink);
        }
        Ok(Some(Plan {
            from_dir: from_inode,
            to_dir: to_inode,
            moving,
            replaced,
        }))
    }

    /// `Inval` if `dir` is `moving` or lies below it.
    fn check_outside_subtree(&self, moving: FileId, dir: FileId) -> FsResult<()> {
        let mut current = dir;
        loop {
            if current == moving {
                return Err(FsError::Inval);
            }
            if current == ROOT {
                return Ok(());
            }
            current = self.inode(current)?.read()?.body.dir()?.parent;
        }
    }

    /// Whether `moving` may replace `replaced`: same kind, and an empty directory.
    fn check_replaceable(&self, moving: Entry, replaced: Entry) -> FsResult<()> {
        match (moving.is_dir, replaced.is_dir) {
            (false, true) => Err(FsError::IsDir),
            (true, false) => Err(FsError::NotDir),
            (false, false) => Ok(()),
            (true, true) => {
                if self.inode(replaced.id)?.read()?.body.dir()?.is_empty() {
                    Ok(())
                } else {
                    Err(FsError::NotEmpty)
                }
            }
        }
    }

    fn apply_rename(&self, plan: &Plan, from: &Name, to: &Name) -> FsResult<()> {
        let moving_inode = self.inode(plan.moving.id)?;
        let replaced_inode = plan.replaced.map(|r| self.inode(r.id)).transpose()?;
        let mut inodes: Vec<&Inode> = vec![&plan.from_dir, &plan.to_dir, &moving_inode];
        inodes.extend(replaced_inode.as_deref());
        inodes.sort_by_key(|inode| inode.id);
        inodes.dedup_by_key(|inode| inode.id);
        let mut guards = inodes
            .iter()
            .map(|inode| inode.write())
            .collect::<FsResult<Vec<WriteGuard<'_>>>>()?;
        // A directory's entries change (mtime follows ctime); anything else: ctime only.
        let cells: Vec<(&Ctime, bool)> = inodes
            .iter()
            .map(|inode| {
                let is_dir = inode.id == plan.from_dir.id || inode.id == plan.to_dir.id;
                (&inode.ctime, is_dir)
            })
            .collect();
        let stamps = self.clock.stamp_all(&cells);
        let mut died = false;
        for ((inode, state), stamp) in inodes.iter().zip(&mut guards).zip(&stamps) {
            died |= self.rename_edit(plan, inode, state, from, to, stamp);
        }
        drop(guards);
        if died {
            if let Some(replaced) = plan.replaced {
                self.table.remove(replaced.id);
            }
        }
        Ok(())
    }

    /// Applies every role `inode` plays in the rename, `stamp` being its new ctime; true
    /// if it died.
    fn rename_edit(
        &self,
        plan: &Plan,
        inode: &Inode,
        state: &mut InodeState,
        from: &Name,
        to: &Name,
        stamp: &Stamp,
    ) -> bool {
        let id = inode.id;
        let is_dir = id == plan.from_dir.id || id == plan.to_dir.id;
        if !is_dir {
            state.meta.keep_mtime(stamp);
        }
        if id == plan.from_dir.id {
            checked_dir(state).remove(from);
        }
        if id == plan.to_dir.id {
            let dir = checked_dir(state);
            if plan.replaced.is_some() {
                dir.remove(to);
            }
            dir.insert(to, plan.moving.id, plan.moving.is_dir);
        }
        if id == plan.moving.id && plan.moving.is_dir {
            checked_dir(state).parent = plan.to_dir.id;
        }
        if plan.replaced.is_some_and(|r| r.id == id) {
            return inode.unlink(state, &self.space);
        }
        false
    }
}

/// The directory of an inode that `plan_rename` saw as one (a file's type never changes).
fn checked_dir(state: &mut InodeState) -> &mut Dir {
    match &mut state.body {
        Body::Directory(dir) => dir,
        _ => unreachable!("rename planned this inode as a directory"),
    }
}
