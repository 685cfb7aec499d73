//! Directory operations other than rename: adding entries (create, mkdir, symlink, mknod,
//! link) and removing them (remove, rmdir). Each runs under the namespace mutex, checks
//! everything before changing anything, and write-locks the directory and the file it
//! changes together (ascending `FileId` order), so no reader sees an entry without its link
//! count or the reverse.

use std::sync::Arc;

use gtime::Timestamp;
use vfs::{CreateMode, FileId, FsError, FsResult, Name, Owner, SetAttr};

use crate::inode::{write_pair, Body, Inode, InodeState, Meta, Regular};
use crate::space::Space;
use crate::sparse::SparseData;
use crate::MemFs;

/// A file about to be created.
pub(crate) struct NewNode<'a> {
    pub(crate) body: Body,
    /// Mode when `attrs` gives none.
    pub(crate) default_mode: u32,
    pub(crate) owner: Owner,
    /// Mode, size (regular files only) and times apply; uid and gid come from `owner`.
    pub(crate) attrs: &'a SetAttr,
}

impl NewNode<'_> {
    /// The new inode's state at time `now` (`FBig` for a size past the limit).
    fn build(self, now: Timestamp, space: &Space) -> FsResult<InodeState> {
        let mode = self.attrs.mode.unwrap_or(self.default_mode);
        let is_regular = matches!(self.body, Body::Regular(_));
        let meta = Meta::new(mode, self.owner.uid, self.owner.gid, now);
        let mut state = InodeState::new(meta, self.body);
        let rest = SetAttr {
            size_bytes: self.attrs.size_bytes.filter(|_| is_regular),
            atime: self.attrs.atime,
            mtime: self.attrs.mtime,
            ..SetAttr::default()
        };
        state.check_setattr(&rest)?;
        // Growing a new, empty file allocates nothing, so this cannot run out of space.
        state.apply_setattr(&rest, now, space);
        Ok(state)
    }
}

impl MemFs {
    /// Adds a new file named `name` to `dir`.
    pub(crate) fn add_entry(
        &self,
        dir: FileId,
        name: &Name,
        node: NewNode<'_>,
    ) -> FsResult<FileId> {
        let _namespace = self.lock_namespace();
        self.add_entry_locked(dir, name, node)
    }

    /// `add_entry` for a caller that holds the namespace mutex.
    fn add_entry_locked(&self, dir: FileId, name: &Name, node: NewNode<'_>) -> FsResult<FileId> {
        let dir_inode = self.inode(dir)?;
        let mut dir_state = dir_inode.write()?;
        let InodeState { meta, body, .. } = &mut *dir_state;
        let entries = body.dir_mut()?;
        if entries.get(name).is_some() {
            return Err(FsError::Exist);
        }
        let is_dir = matches!(node.body, Body::Directory(_));
        if is_dir && entries.nlink() >= vfs::limits::MAX_LINKS {
            return Err(FsError::MLink);
        }
        let now = self.now();
        let state = node.build(now, &self.space)?;
        self.space.reserve_file()?;
        if let Err(err) = self.space.reserve_bytes(state.body.charged_bytes()) {
            self.space.release_file();
            return Err(err);
        }
        let id = self.table.allocate_id();
        // In the table before it has a name, so a looked-up id always resolves.
        self.table.insert(Arc::new(Inode::new(id, state)));
        entries.insert(name, id, is_dir);
        meta.touch_modified(now);
        Ok(id)
    }

    /// CREATE: a new regular file, or per `mode` the existing one.
    pub(crate) fn create_file(
        &self,
        dir: FileId,
        name: &Name,
        mode: &CreateMode,
        owner: Owner,
    ) -> FsResult<FileId> {
        let _namespace = self.lock_namespace();
        let existing = self.inode(dir)?.read()?.body.dir()?.get(name);
        if let Some(entry) = existing {
            return self.reuse_existing(entry.id, mode);
        }
        let empty = SetAttr::default();
        let (attrs, verifier) = match mode {
            CreateMode::Unchecked(attrs) | CreateMode::Guarded(attrs) => (attrs, None),
            CreateMode::Exclusive(verifier) => (&empty, Some(*verifier)),
        };
        let node = NewNode {
            body: Body::Regular(Regular {
                data: SparseData::default(),
                verifier,
            }),
            default_mode: 0o644,
            owner,
            attrs,
        };
        self.add_entry_locked(dir, name, node)
    }

    /// CREATE over an existing name. Only the size of `Unchecked` attributes applies (as
    /// Linux nfsd does): mode and owner of someone else's file are not CREATE's to change.
    fn reuse_existing(&self, id: FileId, mode: &CreateMode) -> FsResult<FileId> {
        let inode = self.inode(id)?;
        let mut state = inode.write()?;
        let Ok(file) = state.body.regular() else {
            return Err(FsError::Exist);
        };
        match mode {
            CreateMode::Guarded(_) => Err(FsError::Exist),
            CreateMode::Exclusive(verifier) if file.verifier == Some(*verifier) => Ok(id),
            CreateMode::Exclusive(_) => Err(FsError::Exist),
            CreateMode::Unchecked(attrs) => {
                let size_only = SetAttr {
                    size_bytes: attrs.size_bytes,
                    ..SetAttr::default()
                };
                state.check_setattr(&size_only)?;
                state.apply_setattr(&size_only, self.now(), &self.space);
                Ok(id)
            }
        }
    }

    /// REMOVE (`rmdir` false) or RMDIR (`rmdir` true) of `name` in `dir`.
    pub(crate) fn remove_entry(&self, dir: FileId, name: &Name, rmdir: bool) -> FsResult<()> {
        let _namespace = self.lock_namespace();
        let dir_inode = self.inode(dir)?;
        let entry = dir_inode
            .read()?
            .body
            .dir()?
            .get(name)
            .ok_or(FsError::NoEnt)?;
        match (entry.is_dir, rmdir) {
            (true, false) => return Err(FsError::IsDir),
            (false, true) => return Err(FsError::NotDir),
            _ => {}
        }
        let victim = self.inode(entry.id)?;
        let now = self.now();
        let (mut dir_state, mut victim_state) = write_pair(&dir_inode, &victim)?;
        if rmdir && !victim_state.body.dir()?.is_empty() {
            return Err(FsError::NotEmpty);
        }
        dir_state.body.dir_mut()?.remove(name);
        dir_state.meta.touch_modified(now);
        let died = victim_state.unlink(now, &self.space);
        drop((dir_state, victim_state));
        if died {
            self.table.remove(entry.id);
        }
        Ok(())
    }

    /// LINK: a new name for non-directory `id`.
    pub(crate) fn link_entry(&self, id: FileId, dir: FileId, name: &Name) -> FsResult<()> {
        let _namespace = self.lock_namespace();
        let dir_inode = self.inode(dir)?;
        let exists = dir_inode.read()?.body.dir()?.get(name).is_some();
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
        let now = self.now();
        let (mut dir_state, mut target_state) = write_pair(&dir_inode, &target)?;
        dir_state.body.dir_mut()?.insert(name, id, false);
        dir_state.meta.touch_modified(now);
        target_state.meta.nlink += 1;
        target_state.meta.ctime = now;
        Ok(())
    }
}
