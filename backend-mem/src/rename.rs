//! RENAME: the one directory operation that touches up to four inodes (source and target
//! directories, the file moved, the file replaced).
//!
//! Under the namespace mutex it first checks, in this order: both directories exist and
//! are directories (`Stale`, `NotDir`) the caller may change (`Checks::may_change_entries`);
//! the source exists (`NoEnt`); the sticky bit allows moving it and replacing the target
//! (`Checks::may_unlink`), and a directory changing parent is writable
//! (`Checks::may_move_dir`); source and target
//! are the same file (success, nothing changes, as POSIX says); a directory is not moved
//! into its own subtree (`Inval`); a replaced target is compatible (`IsDir`, `NotDir`,
//! `NotEmpty`); the new parent can take another subdirectory (`MLink`). Then it write-locks
//! every inode involved in ascending `FileId` order, runs the `Checks` again on the
//! attributes under those locks (attributes can change outside the namespace mutex, so
//! these decide), and applies all changes, with one multigrain stamp for all of them,
//! before releasing any lock.

use std::sync::Arc;

use gtime::{Ctime, Stamp};
use vfs::{Attr, Change, Checks, FileId, FsError, FsResult, Name, PreAttr, Renamed};

use crate::dir::{Dir, Entry};
use crate::inode::{Body, Inode, InodeState, WriteGuard};
use crate::space::entry_charge;
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
        checks: &dyn Checks,
    ) -> FsResult<Renamed> {
        let _namespace = self.lock_namespace();
        match self.plan_rename(from_dir, from, to_dir, to, checks)? {
            Some(plan) => self.apply_rename(&plan, from, to, checks),
            None => {
                // Source and target are one file: nothing changes.
                let unchanged = |dir: FileId| -> FsResult<Change> {
                    let attr = self.getattr_inner(dir)?;
                    Ok(Change {
                        before: Some(PreAttr::of(&attr)),
                        after: attr,
                    })
                };
                Ok(Renamed {
                    from_dir: unchanged(from_dir)?,
                    to_dir: unchanged(to_dir)?,
                })
            }
        }
    }

    fn getattr_inner(&self, id: FileId) -> FsResult<Attr> {
        let inode = self.inode(id)?;
        let state = inode.read()?;
        Ok(inode.observed_attr(&state))
    }

    /// The checks that need attributes, on attributes read now (`plan_rename`) or under
    /// the write locks (`apply_rename`).
    fn rename_checks(
        plan_dirs: (&Attr, &Attr),
        moving: &Attr,
        replaced: Option<&Attr>,
        checks: &dyn Checks,
    ) -> FsResult<()> {
        let (from, to) = plan_dirs;
        checks.may_unlink(from, moving)?;
        if let Some(replaced) = replaced {
            checks.may_unlink(to, replaced)?;
        }
        if moving.is_dir() && from.fileid != to.fileid {
            checks.may_move_dir(moving)?;
        }
        Ok(())
    }

    /// Checks a rename; `None` if there is nothing to do.
    fn plan_rename(
        &self,
        from_dir: FileId,
        from: &Name,
        to_dir: FileId,
        to: &Name,
        checks: &dyn Checks,
    ) -> FsResult<Option<Plan>> {
        let from_inode = self.inode(from_dir)?;
        let to_inode = self.inode(to_dir)?;
        let (from_attr, moving) = {
            let state = from_inode.read()?;
            let dir = state.body.dir()?;
            (from_inode.observed_attr(&state), dir.get(from))
        };
        let (to_attr, replaced, to_nlink) = {
            let state = to_inode.read()?;
            let dir = state.body.dir()?;
            (to_inode.observed_attr(&state), dir.get(to), dir.nlink())
        };
        checks.may_change_entries(&from_attr)?;
        checks.may_change_entries(&to_attr)?;
        let moving = moving.ok_or(FsError::NoEnt)?;
        if replaced.is_some_and(|r| r.id == moving.id) {
            return Ok(None);
        }
        let moving_attr = self.getattr_inner(moving.id)?;
        let replaced_attr = replaced.map(|r| self.getattr_inner(r.id)).transpose()?;
        Self::rename_checks(
            (&from_attr, &to_attr),
            &moving_attr,
            replaced_attr.as_ref(),
            checks,
        )?;
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

    fn apply_rename(
        &self,
        plan: &Plan,
        from: &Name,
        to: &Name,
        checks: &dyn Checks,
    ) -> FsResult<Renamed> {
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
        let attr_of = |id: FileId, guards: &[WriteGuard<'_>]| -> Attr {
            let at = inodes.iter().position(|inode| inode.id == id);
            let at = at.expect("every inode of the plan is locked");
            inodes[at].observed_attr(&guards[at])
        };
        let from_before = attr_of(plan.from_dir.id, &guards);
        let to_before = attr_of(plan.to_dir.id, &guards);
        checks.may_change_entries(&from_before)?;
        checks.may_change_entries(&to_before)?;
        Self::rename_checks(
            (&from_before, &to_before),
            &attr_of(plan.moving.id, &guards),
            plan.replaced.map(|r| attr_of(r.id, &guards)).as_ref(),
            checks,
        )?;
        // The names' charge moves from `from` (and a replaced `to`) to the new `to`;
        // taken before anything changes, so a full file system refuses with nothing done.
        let replaced_name = if plan.replaced.is_some() {
            entry_charge(to)
        } else {
            0
        };
        self.space
            .recharge_bytes(entry_charge(from) + replaced_name, entry_charge(to))?;
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
        let done = Renamed {
            from_dir: Change {
                before: Some(PreAttr::of(&from_before)),
                after: attr_of(plan.from_dir.id, &guards),
            },
            to_dir: Change {
                before: Some(PreAttr::of(&to_before)),
                after: attr_of(plan.to_dir.id, &guards),
            },
        };
        drop(guards);
        if died {
            if let Some(replaced) = plan.replaced {
                self.table.remove(replaced.id);
            }
        }
        Ok(done)
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
