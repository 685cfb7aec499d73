//! One file of the mem backend: its attributes and contents behind its own lock.
//!
//! An inode is `live` from creation until its last name goes (or, for a directory, until
//! it is removed); both flips happen under the namespace mutex and the inode's write lock.
//! Every operation checks `live` after taking the inode's lock, so a caller that fetched
//! the inode just before it died gets `Stale`, never a write into freed storage.

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;
use gtime::Timestamp;
use vfs::{Attr, DeviceNumber, FileId, FileType, FsError, FsResult, SetAttr, SetTime, SpecialFile};

use crate::dir::Dir;
use crate::space::Space;
use crate::sparse::SparseData;

/// Attributes shared by every kind of file.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    /// Permission bits only (`0o7777`).
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Names of a non-directory; directories compute theirs from their subdirectories.
    pub(crate) nlink: u32,
    pub(crate) atime: Timestamp,
    pub(crate) mtime: Timestamp,
    pub(crate) ctime: Timestamp,
}

impl Meta {
    pub(crate) fn new(mode: u32, uid: u32, gid: u32, now: Timestamp) -> Self {
        Self {
            mode: mode & 0o7777,
            uid,
            gid,
            nlink: 1,
            atime: now,
            mtime: now,
            ctime: now,
        }
    }

    /// Data or entries changed.
    pub(crate) fn touch_modified(&mut self, now: Timestamp) {
        self.mtime = now;
        self.ctime = now;
    }
}

/// A regular file: data plus the verifier of an exclusive create.
#[derive(Debug, Default)]
pub(crate) struct Regular {
    pub(crate) data: SparseData,
    pub(crate) verifier: Option<[u8; 8]>,
}

/// What kind of file, with its contents.
#[derive(Debug)]
pub(crate) enum Body {
    Regular(Regular),
    Directory(Dir),
    Symlink(Bytes),
    Special(SpecialFile),
}

impl Body {
    pub(crate) fn file_type(&self) -> FileType {
        match self {
            Self::Regular(_) => FileType::Regular,
            Self::Directory(_) => FileType::Directory,
            Self::Symlink(_) => FileType::Symlink,
            Self::Special(special) => special.file_type(),
        }
    }

    /// The directory, or `NotDir`.
    pub(crate) fn dir(&self) -> FsResult<&Dir> {
        match self {
            Self::Directory(dir) => Ok(dir),
            _ => Err(FsError::NotDir),
        }
    }

    pub(crate) fn dir_mut(&mut self) -> FsResult<&mut Dir> {
        match self {
            Self::Directory(dir) => Ok(dir),
            _ => Err(FsError::NotDir),
        }
    }

    /// The regular file, or `IsDir` for a directory and `Inval` for anything else.
    pub(crate) fn regular(&self) -> FsResult<&Regular> {
        match self {
            Self::Regular(file) => Ok(file),
            Self::Directory(_) => Err(FsError::IsDir),
            _ => Err(FsError::Inval),
        }
    }

    pub(crate) fn regular_mut(&mut self) -> FsResult<&mut Regular> {
        match self {
            Self::Regular(file) => Ok(file),
            Self::Directory(_) => Err(FsError::IsDir),
            _ => Err(FsError::Inval),
        }
    }

    /// Bytes charged to `Space` for this file.
    pub(crate) fn charged_bytes(&self) -> u64 {
        match self {
            Self::Regular(file) => file.data.allocated_bytes(),
            Self::Symlink(target) => target.len() as u64,
            Self::Directory(_) | Self::Special(_) => 0,
        }
    }
}

/// Everything behind an inode's lock.
#[derive(Debug)]
pub(crate) struct InodeState {
    pub(crate) live: bool,
    pub(crate) meta: Meta,
    pub(crate) body: Body,
}

impl InodeState {
    pub(crate) fn new(meta: Meta, body: Body) -> Self {
        Self {
            live: true,
            meta,
            body,
        }
    }

    pub(crate) fn attr(&self, id: FileId) -> Attr {
        let (size_bytes, nlink, rdev) = match &self.body {
            Body::Regular(file) => (file.data.size_bytes(), self.meta.nlink, no_device()),
            Body::Directory(dir) => (dir.size_bytes(), dir.nlink(), no_device()),
            Body::Symlink(target) => (target.len() as u64, self.meta.nlink, no_device()),
            Body::Special(special) => (0, self.meta.nlink, device(*special)),
        };
        Attr {
            file_type: self.body.file_type(),
            mode: self.meta.mode,
            nlink,
            uid: self.meta.uid,
            gid: self.meta.gid,
            size_bytes,
            used_bytes: self.body.charged_bytes(),
            rdev,
            fsid: 0,
            fileid: id,
            generation: 0,
            atime: self.meta.atime,
            mtime: self.meta.mtime,
            ctime: self.meta.ctime,
        }
    }

    /// Checks that `set` can be applied as a whole (so `apply` cannot fail half way).
    pub(crate) fn check_setattr(&self, set: &SetAttr) -> FsResult<()> {
        let Some(size_bytes) = set.size_bytes else {
            return Ok(());
        };
        self.body.regular()?;
        if size_bytes > vfs::limits::MAX_FILE_SIZE {
            return Err(FsError::FBig);
        }
        Ok(())
    }

    /// Applies a checked `set`. Any non-empty change moves ctime; a size that differs from
    /// the current one moves mtime too (POSIX `truncate`), unless the client sets mtime.
    pub(crate) fn apply_setattr(&mut self, set: &SetAttr, now: Timestamp, space: &Space) {
        if set.is_empty() {
            return;
        }
        let meta = &mut self.meta;
        if let (Some(size_bytes), Body::Regular(file)) = (set.size_bytes, &mut self.body) {
            if size_bytes != file.data.size_bytes() {
                file.data.set_size(size_bytes, space);
                meta.mtime = now;
            }
        }
        if let Some(mode) = set.mode {
            meta.mode = mode & 0o7777;
        }
        if let Some(uid) = set.uid {
            meta.uid = uid;
        }
        if let Some(gid) = set.gid {
            meta.gid = gid;
        }
        set_time(&mut meta.atime, set.atime, now);
        set_time(&mut meta.mtime, set.mtime, now);
        meta.ctime = now;
    }

    /// Drops one name of a non-directory (or the only one of a directory); when none is
    /// left the file dies and its storage goes back to `space`. True if it died.
    pub(crate) fn unlink(&mut self, now: Timestamp, space: &Space) -> bool {
        assert!(self.live, "unlinking a dead inode");
        self.meta.ctime = now;
        if !matches!(self.body, Body::Directory(_)) {
            self.meta.nlink -= 1;
            if self.meta.nlink > 0 {
                return false;
            }
        }
        self.live = false;
        match &mut self.body {
            Body::Regular(file) => file.data.clear(space),
            Body::Symlink(target) => space.release_bytes(target.len() as u64),
            Body::Directory(dir) => assert!(dir.is_empty(), "removing a non-empty directory"),
            Body::Special(_) => {}
        }
        space.release_file();
        true
    }
}

fn set_time(slot: &mut Timestamp, how: SetTime, now: Timestamp) {
    match how {
        SetTime::DontChange => {}
        SetTime::ServerTime => *slot = now,
        SetTime::Client(time) => *slot = time,
    }
}

fn no_device() -> DeviceNumber {
    DeviceNumber::default()
}

fn device(special: SpecialFile) -> DeviceNumber {
    match special {
        SpecialFile::BlockDevice(dev) | SpecialFile::CharDevice(dev) => dev,
        SpecialFile::Socket | SpecialFile::Fifo => no_device(),
    }
}

pub(crate) type ReadGuard<'a> = RwLockReadGuard<'a, InodeState>;
pub(crate) type WriteGuard<'a> = RwLockWriteGuard<'a, InodeState>;

/// A file and its lock.
#[derive(Debug)]
pub(crate) struct Inode {
    pub(crate) id: FileId,
    state: RwLock<InodeState>,
}

impl Inode {
    pub(crate) fn new(id: FileId, state: InodeState) -> Self {
        Self {
            id,
            state: RwLock::new(state),
        }
    }

    /// Read-locks a live inode (`Stale` once it died).
    ///
    /// A poisoned lock means a thread panicked while holding it, which is already a bug
    /// reported by that panic; the state is still used rather than failing every later call.
    pub(crate) fn read(&self) -> FsResult<ReadGuard<'_>> {
        let guard = self.state.read().unwrap_or_else(PoisonError::into_inner);
        if guard.live {
            Ok(guard)
        } else {
            Err(FsError::Stale)
        }
    }

    /// Write-locks a live inode (`Stale` once it died).
    pub(crate) fn write(&self) -> FsResult<WriteGuard<'_>> {
        let guard = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if guard.live {
            Ok(guard)
        } else {
            Err(FsError::Stale)
        }
    }
}

/// Write-locks two distinct inodes in ascending `FileId` order (the crate's lock order),
/// returning the guards in argument order.
pub(crate) fn write_pair<'a>(
    first: &'a Inode,
    second: &'a Inode,
) -> FsResult<(WriteGuard<'a>, WriteGuard<'a>)> {
    assert_ne!(
        first.id, second.id,
        "locking one inode twice would deadlock"
    );
    if first.id < second.id {
        let a = first.write()?;
        Ok((a, second.write()?))
    } else {
        let b = second.write()?;
        Ok((first.write()?, b))
    }
}
