//! Directory operations other than rename: adding entries (create, mkdir, symlink, mknod,
//! link) and removing them (remove, rmdir). Each runs under the namespace mutex, checks
//! everything before changing anything, and write-locks the directory and the file it
//! changes together (ascending `FileId` order), so no reader sees an entry without its link
//! count or the reverse. One multigrain stamp covers every inode an operation changes.

use std::sync::Arc;

use gtime::{Ctime, Timestamp};
use sync::RangeLockMode;
use vfs::{
    Attr, Change, Checks, CreateMode, Created, FileId, FsError, FsResult, Linked, Name, Owner,
    PreAttr, SetAttr, SetTime,
};

use crate::dir::Entry;
use crate::inode::{write_pair, Body, Inode, InodeState, Meta, Regular};
use crate::space::{entry_charge, Space};
use crate::MemFs;

/// A file about to be created.
pub(crate) struct NewNode<'a> {
    pub(crate) body: Body,
    /// Mode when `attrs` gives none.
    pub(crate) default_mode: u32,
    /// Mode, size (regular files only) and times apply (after `Checks::new_file`); uid and
    /// gid come from the checks' owner.
    pub(crate) attrs: &'a SetAttr,
}

/// A checked new node: the owner and attributes `Checks::new_file` chose.
struct Ready {
    body: Body,
    default_mode: u32,
    owner: Owner,
    attrs: SetAttr,
}

impl Ready {
    /// The size a new regular file starts with, if `attrs` gives one.
    fn size_bytes(&self) -> Option<u64> {
        self.attrs
            .size_bytes
            .filter(|_| matches!(self.body, Body::Regular(_)))
    }

    /// `FBig` for a size past the limit: everything that can refuse a new node.
    fn check(&self) -> FsResult<()> {
        match self.size_bytes() {
            Some(size_bytes) if size_bytes > vfs::limits::MAX_FILE_SIZE => Err(FsError::FBig),
            _ => Ok(()),
        }
    }

    /// The new, checked inode, created at `now`: mode, size (regular files) and times of
    /// `attrs` apply.
    fn build(self, id: FileId, now: Timestamp, space: &Space, locks: RangeLockMode) -> Inode {
        let size_bytes = self.size_bytes();
        let mode = self.attrs.mode.unwrap_or(self.default_mode);
        let mut meta = Meta::new(mode, self.owner.uid, self.owner.gid, now);
        if let SetTime::Client(atime) = self.attrs.atime {
            meta.atime = atime;
        }
        let mtime_follows = match self.attrs.mtime {
            SetTime::Client(mtime) => {
                meta.mtime = mtime;
                false
            }
            SetTime::ServerTime | SetTime::DontChange => true,
        };
        let state = InodeState::new(meta, self.body);
        let inode = Inode::new(id, state, Ctime::new(now, mtime_follows), locks);
        if let (Some(size_bytes), Some(file)) = (size_bytes, &inode.file) {
            // Nobody else can reach the file yet, and growing an empty file allocates
            // nothing, so this needs no lock and cannot run out of space.
            file.data.set_size(size_bytes, space);
        }
        inode
    }
}

/// The attributes of a directory, checked for entry changes, and the entry `name` in it.
fn check_dir(dir: &Inode, name: &Name, checks: &dyn Checks) -> FsResult<(Attr, Option<Entry>)> {
    let state = dir.read()?;
    let entries = state.body.dir()?;
    let attr = dir.observed_attr(&state);
    checks.may_change_entries(&attr)?;
    Ok((attr, entries.get(name)))
}

impl MemFs {
    /// Adds a new file named `name` to `dir`.
    pub(crate) fn add_entry(
        &self,
        dir: FileId,
        name: &Name,
        node: NewNode<'_>,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        let _namespace = self.lock_namespace();
        self.add_entry_locked(dir, name, node, checks)
    }

    /// `add_entry` for a caller that holds the namespace mutex.
    fn add_entry_locked(
        &self,
        dir: FileId,
        name: &Name,
        node: NewNode<'_>,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        let dir_inode = self.inode(dir)?;
        let mut dir_state = dir_inode.write()?;
        let before = dir_inode.observed_attr(&dir_state);
        let entries = dir_state.body.dir_mut()?;
        checks.may_change_entries(&before)?;
        if entries.get(name).is_some() {
            return Err(FsError::Exist);
        }
        let is_dir = matches!(node.body, Body::Directory(_));
        if is_dir && entries.nlink() >= vfs::limits::MAX_LINKS {
            return Err(FsError::MLink);
        }
        let (owner, attrs) = checks.new_file(&before, node.body.file_type(), node.attrs);
        let ready = Ready {
            body: node.body,
            default_mode: node.default_mode,
            owner,
            attrs,
        };
        ready.check()?;
        self.space.reserve_file()?;
        let bytes = ready.body.charged_bytes() + entry_charge(name);
        if let Err(err) = self.space.reserve_bytes(bytes) {
            self.space.release_file();
            return Err(err);
        }
        let now = self.clock.stamp(&dir_inode.ctime, true).time;
        let id = self.table.allocate_id();
        let inode = Arc::new(ready.build(id, now, &self.space, self.rangelock));
        let attr = inode.observed_attr(&*inode.read()?);
        // In the table before it has a name, so a looked-up id always resolves.
        self.table.insert(inode);
        entries.insert(name, id, is_dir);
        let after = dir_inode.observed_attr(&dir_state);
        Ok(Created {
            attr,
            dir: Change {
                before: Some(PreAttr::of(&before)),
                after,
            },
        })
    }

    /// CREATE: a new regular file, or per `mode` the existing one.
    pub(crate) fn create_file(
        &self,
        dir: FileId,
        name: &Name,
        mode: &CreateMode,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        let _namespace = self.lock_namespace();
        let (dir_attr, existing) = check_dir(&*self.inode(dir)?, name, checks)?;
        if let Some(entry) = existing {
            // The directory does not change: its attributes before are its attributes
            // after (the namespace mutex keeps its entries as they are).
            let attr = self.reuse_existing(entry.id, mode, checks)?;
            return Ok(Created {
                attr,
                dir: Change {
                    before: Some(PreAttr::of(&dir_attr)),
                    after: dir_attr,
                },
            });
        }
        let empty = SetAttr::default();
        let (attrs, verifier) = match mode {
            CreateMode::Unchecked(attrs) | CreateMode::Guarded(attrs) => (attrs, None),
            CreateMode::Exclusive(verifier) => (&empty, Some(*verifier)),
        };
        let node = NewNode {
            body: Body::Regular(Regular { verifier }),
            default_mode: 0o644,
            attrs,
        };
        self.add_entry_locked(dir, name, node, checks)
    }

    /// CREATE over an existing name. Only the size of `Unchecked` attributes applies (as
    /// Linux nfsd does): mode and owner of someone else's file are not CREATE's to change.
    /// Truncation is checked (`may_truncate`) under the file's write lock, with the
    /// attributes it truncates.
    fn reuse_existing(&self, id: FileId, mode: &CreateMode, checks: &dyn Checks) -> FsResult<Attr> {
        let inode = self.inode(id)?;
        let mut state = inode.write()?;
        let Ok(file) = state.body.regular() else {
            return Err(FsError::Exist);
        };
        match mode {
            CreateMode::Guarded(_) => Err(FsError::Exist),
            CreateMode::Exclusive(verifier) if file.verifier == Some(*verifier) => {
                Ok(inode.observed_attr(&state))
            }
            CreateMode::Exclusive(_) => Err(FsError::Exist),
            CreateMode::Unchecked(attrs) => {
                let size_only = SetAttr {
                    size_bytes: attrs.size_bytes,
                    ..SetAttr::default()
                };
                if size_only.size_bytes.is_some() {
                    checks.may_truncate(&inode.observed_attr(&state))?;
                }
                state.check_setattr(&size_only)?;
                inode.apply_setattr(&mut state, &size_only, &self.clock, &self.space, false);
                Ok(inode.observed_attr(&state))
            }
        }
    }

    /// REMOVE (`rmdir` false) or RMDIR (`rmdir` true) of `name` in `dir`. The checks run
    /// first under the directory's read lock (so a caller without write permission learns
    /// that before whether the name exists, as from Linux nfsd), then again under the
    /// write locks of the change, where they decide.
    pub(crate) fn remove_entry(
        &self,
        dir: FileId,
        name: &Name,
        rmdir: bool,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        let _namespace = self.lock_namespace();
        let dir_inode = self.inode(dir)?;
        let entry = check_dir(&dir_inode, name, checks)?
            .1
            .ok_or(FsError::NoEnt)?;
        let victim = self.inode(entry.id)?;
        let (mut dir_state, mut victim_state) = write_pair(&dir_inode, &victim)?;
        let before = dir_inode.observed_attr(&dir_state);
        checks.may_change_entries(&before)?;
        checks.may_unlink(&before, &victim.observed_attr(&victim_state))?;
        match (entry.is_dir, rmdir) {
            (true, false) => return Err(FsError::IsDir),
            (false, true) => return Err(FsError::NotDir),
            _ => {}
        }
        if rmdir && !victim_state.body.dir()?.is_empty() {
            return Err(FsError::NotEmpty);
        }
        dir_state.body.dir_mut()?.remove(name);
        self.space.release_bytes(entry_charge(name));
        let stamps = self
            .clock
            .stamp_all(&[(&dir_inode.ctime, true), (&victim.ctime, false)]);
        victim_state.meta.keep_mtime(&stamps[1]);
        let died = victim.unlink(&mut victim_state, &self.space);
        let after = dir_inode.observed_attr(&dir_state);
        drop((dir_state, victim_state));
        if died {
            self.table.remove(entry.id);
        }
        Ok(Change {
            before: Some(PreAttr::of(&before)),
            after,
        })
    }

    /// LINK: a new name for non-directory `id`.
    pub(crate) fn link_entry(
        &self,
        id: FileId,
        dir: FileId,
        name: &Name,
        checks: &dyn Checks,
    ) -> FsResult<Linked> {
        let _namespace = self.lock_namespace();
        let dir_inode = self.inode(dir)?;
        let exists = check_dir(&dir_inode, name, checks)?.1.is_some();
        let target = self.inode(id)?;
        let nlink = {
            let state = target.read()?;
            if state.body.dir().is_ok() {
                return Err(FsError::IsDir);
            }
            state.meta.nlink
        };
        if exists {
            return Err(FsError::Exist);
        }
        if nlink >= vfs::limits::MAX_LINKS {
            return Err(FsError::MLink);
        }
        let (mut dir_state, mut target_state) = write_pair(&dir_inode, &target)?;
        if target_state.meta.nlink == 0 {
            // Removed while an NFSv4 open holds it: a file with no name gets none back
            // (Linux's link(2) of an unlinked file answers ENOENT too).
            return Err(FsError::NoEnt);
        }
        let before = dir_inode.observed_attr(&dir_state);
        checks.may_change_entries(&before)?;
        let entries = dir_state.body.dir_mut()?;
        self.space.reserve_bytes(entry_charge(name))?;
        entries.insert(name, id, false);
        target_state.meta.nlink += 1;
        let stamps = self
            .clock
            .stamp_all(&[(&dir_inode.ctime, true), (&target.ctime, false)]);
        target_state.meta.keep_mtime(&stamps[1]);
        Ok(Linked {
            attr: target.observed_attr(&target_state),
            dir: Change {
                before: Some(PreAttr::of(&before)),
                after: dir_inode.observed_attr(&dir_state),
            },
        })
    }
}
