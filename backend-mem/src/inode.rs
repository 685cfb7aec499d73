//! One file of the mem backend: its attributes and contents, and the locks around them.
//!
//! An inode is `live` from creation until its last name goes (or, for a directory, until
//! it is removed); both flips happen under the namespace mutex and the inode's write lock.
//! Every operation that takes the inode's lock checks `live` after taking it, so a caller
//! that fetched the inode just before it died gets `Stale`, never a write into freed
//! storage.
//!
//! # Where things live
//!
//! - `state` (`RwLock<InodeState>`): mode, owner, link count, atime, an explicit mtime,
//!   and the body (directory entries, symlink target, device, a file's create verifier);
//! - `ctime` ([`Ctime`]): the ctime, its `QUERIED` bit and, as its tag, whether mtime
//!   equals ctime (true after every data change), in one atomic word, stamped by the
//!   multigrain clock without the state lock;
//! - `file` ([`FileData`], regular files only): the range lock and the data. READ and
//!   WRITE take only the range lock over their bytes (never the state lock), so reads and
//!   writes of disjoint ranges of one file do not serialize; SETATTR of the size locks from
//!   the new (or old, if lower) size to the end of the file, a guarded SETATTR the whole
//!   file, and the last unlink the whole file before it frees the data.
//!
//! Lock order: the state lock before the range lock; I/O holds only the range lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;
use gtime::{Ctime, CtimeValue, MultigrainClock, Stamp, Timestamp};
use sync::{RangeGuard, RangeLock, RangeLockMode};
use vfs::{Attr, DeviceNumber, FileId, FileType, FsError, FsResult, SetAttr, SetTime, SpecialFile};

use crate::dir::Dir;
use crate::space::Space;
use crate::sparse::SparseData;

/// Attributes shared by every kind of file, behind the state lock.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    /// Permission bits only (`0o7777`).
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Names of a non-directory; directories compute theirs from their subdirectories.
    pub(crate) nlink: u32,
    pub(crate) atime: Timestamp,
    /// The mtime while the ctime's tag is clear; when it is set, mtime is the ctime.
    pub(crate) mtime: Timestamp,
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
        }
    }

    /// After a stamp that moved ctime alone (tag clear): if mtime followed the old ctime,
    /// pin it to that value.
    pub(crate) fn keep_mtime(&mut self, stamp: &Stamp) {
        if stamp.installed && stamp.previous.tag {
            self.mtime = stamp.previous.time;
        }
    }
}

/// A regular file's create verifier (its data is in [`FileData`]).
#[derive(Debug, Default)]
pub(crate) struct Regular {
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

    /// Bytes charged to `Space` for the body itself (a regular file's data is charged by
    /// its [`FileData`]).
    pub(crate) fn charged_bytes(&self) -> u64 {
        match self {
            Self::Symlink(target) => target.len() as u64,
            Self::Regular(_) | Self::Directory(_) | Self::Special(_) => 0,
        }
    }
}

/// Everything behind an inode's state lock.
#[derive(Debug)]
pub(crate) struct InodeState {
    pub(crate) live: bool,
    pub(crate) meta: Meta,
    pub(crate) body: Body,
    /// NFSv4 opens holding the file ([`vfs::Backend::hold`]): while any remain, a regular
    /// file whose last name goes lives on with no name, and dies at the last release.
    pub(crate) holds: u32,
}

impl InodeState {
    pub(crate) fn new(meta: Meta, body: Body) -> Self {
        Self {
            live: true,
            meta,
            body,
            holds: 0,
        }
    }

    /// Checks that `set` can be applied as a whole (so applying it cannot fail half way).
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
}

/// A regular file's data and the range lock over it.
#[derive(Debug)]
pub(crate) struct FileData {
    pub(crate) lock: RangeLock,
    pub(crate) data: SparseData,
    /// Set, under the whole-file write lock, when the file died and its data was freed.
    gone: AtomicBool,
}

impl FileData {
    pub(crate) fn new(mode: RangeLockMode) -> Self {
        Self {
            lock: RangeLock::new(mode),
            data: SparseData::default(),
            gone: AtomicBool::new(false),
        }
    }

    /// `Stale` once the file died. Call with a range of the file locked: the flag only
    /// flips under the whole-file lock, so it cannot flip while the caller holds its range.
    pub(crate) fn check_live(&self) -> FsResult<()> {
        if self.gone.load(Ordering::Acquire) {
            Err(FsError::Stale)
        } else {
            Ok(())
        }
    }

    /// Locks the range a size change to `size_bytes` touches: from the lower of the new
    /// and current size to the end of the file. The caller holds the inode's write lock,
    /// so the size can only grow meanwhile, and the range still covers the change.
    pub(crate) fn lock_resize(&self, size_bytes: u64) -> RangeGuard<'_> {
        let from = size_bytes.min(self.data.size_bytes());
        self.lock.write(from..u64::MAX)
    }
}

pub(crate) type ReadGuard<'a> = RwLockReadGuard<'a, InodeState>;
pub(crate) type WriteGuard<'a> = RwLockWriteGuard<'a, InodeState>;

/// A file and its locks.
#[derive(Debug)]
pub(crate) struct Inode {
    pub(crate) id: FileId,
    kind: FileType,
    pub(crate) ctime: Ctime,
    pub(crate) file: Option<FileData>,
    state: RwLock<InodeState>,
}

impl Inode {
    /// A new inode stamped `ctime` (tag: mtime follows ctime); regular files get their
    /// data and range lock.
    pub(crate) fn new(id: FileId, state: InodeState, ctime: Ctime, mode: RangeLockMode) -> Self {
        let kind = state.body.file_type();
        let file = (kind == FileType::Regular).then(|| FileData::new(mode));
        Self {
            id,
            kind,
            ctime,
            file,
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

    /// The data of a regular file: `IsDir` for a directory, `Inval` for other types.
    pub(crate) fn regular_file(&self) -> FsResult<&FileData> {
        match (&self.file, self.kind) {
            (Some(file), _) => Ok(file),
            (None, FileType::Directory) => Err(FsError::IsDir),
            (None, _) => Err(FsError::Inval),
        }
    }

    /// Attributes for a client: marks the ctime observed.
    pub(crate) fn observed_attr(&self, state: &InodeState) -> Attr {
        self.attr(state, self.ctime.observe())
    }

    /// Attributes for a check inside the backend, not sent to a client as current: the
    /// ctime is not marked observed, so the change that follows may take a coarse stamp.
    pub(crate) fn unobserved_attr(&self, state: &InodeState) -> Attr {
        self.attr(state, self.ctime.load())
    }

    fn attr(&self, state: &InodeState, ctime: CtimeValue) -> Attr {
        let meta = &state.meta;
        let (size_bytes, used_bytes, nlink, rdev) = match (&state.body, &self.file) {
            (Body::Regular(_), Some(file)) => (
                file.data.size_bytes(),
                file.data.allocated_bytes(),
                meta.nlink,
                no_device(),
            ),
            (Body::Directory(dir), _) => (dir.size_bytes(), 0, dir.nlink(), no_device()),
            (Body::Symlink(target), _) => {
                let len = target.len() as u64;
                (len, len, meta.nlink, no_device())
            }
            (Body::Special(special), _) => (0, 0, meta.nlink, device(*special)),
            (Body::Regular(_), None) => unreachable!("regular files have data"),
        };
        Attr {
            file_type: self.kind,
            mode: meta.mode,
            nlink,
            uid: meta.uid,
            gid: meta.gid,
            size_bytes,
            used_bytes,
            rdev,
            fsid: 0,
            fileid: self.id,
            generation: 0,
            atime: meta.atime,
            mtime: if ctime.tag { ctime.time } else { meta.mtime },
            ctime: ctime.time,
        }
    }

    /// Applies a checked `set` to this inode, whose write lock `state` is. Any non-empty
    /// change moves ctime; a size that differs from the current one moves mtime too (POSIX
    /// `truncate`), unless the client sets mtime. A size change locks its range unless
    /// the caller holds the whole file (`whole_file_locked`).
    pub(crate) fn apply_setattr(
        &self,
        state: &mut InodeState,
        set: &SetAttr,
        clock: &MultigrainClock,
        space: &Space,
        whole_file_locked: bool,
    ) {
        if set.is_empty() {
            return;
        }
        let mut resized = false;
        if let (Some(size_bytes), Some(file)) = (set.size_bytes, &self.file) {
            let _range = (!whole_file_locked).then(|| file.lock_resize(size_bytes));
            if size_bytes != file.data.size_bytes() {
                file.data.set_size(size_bytes, space);
                resized = true;
            }
        }
        let meta = &mut state.meta;
        if let Some(mode) = set.mode {
            meta.mode = mode & 0o7777;
        }
        if let Some(uid) = set.uid {
            meta.uid = uid;
        }
        if let Some(gid) = set.gid {
            meta.gid = gid;
        }
        let mtime_follows = match set.mtime {
            SetTime::ServerTime => true,
            SetTime::Client(time) => {
                meta.mtime = time;
                false
            }
            SetTime::DontChange => resized,
        };
        let stamp = clock.stamp(&self.ctime, mtime_follows);
        if set.mtime == SetTime::DontChange && !mtime_follows {
            meta.keep_mtime(&stamp);
        }
        set_time(&mut meta.atime, set.atime, stamp.time);
    }

    /// Drops one name of a non-directory (or the only one of a directory); when none is
    /// left and no NFSv4 open holds it, the file dies and its storage goes back to
    /// `space`. True if it died. The caller stamped the ctime and holds `state`, this
    /// inode's write lock.
    pub(crate) fn unlink(&self, state: &mut InodeState, space: &Space) -> bool {
        assert!(state.live, "unlinking a dead inode");
        if !matches!(state.body, Body::Directory(_)) {
            state.meta.nlink -= 1;
            if state.meta.nlink > 0 || state.holds > 0 {
                return false;
            }
        }
        self.die(state, space);
        true
    }

    /// Ends one hold; true if that was the last hold of a file with no name left, which
    /// then died (the caller removes it from the table). Called with the write lock.
    pub(crate) fn release(&self, state: &mut InodeState, space: &Space) -> bool {
        state.holds = state.holds.saturating_sub(1);
        if state.holds > 0 || state.meta.nlink > 0 || matches!(state.body, Body::Directory(_)) {
            return false;
        }
        self.die(state, space);
        true
    }

    /// Frees the file's storage; later calls find it `Stale`.
    fn die(&self, state: &mut InodeState, space: &Space) {
        state.live = false;
        if let Some(file) = &self.file {
            // Waits for I/O in progress; later I/O finds `gone` and fails `Stale`.
            let _whole = file.lock.write(0..u64::MAX);
            file.gone.store(true, Ordering::Release);
            file.data.clear(space);
        }
        match &state.body {
            Body::Symlink(target) => space.release_bytes(target.len() as u64),
            Body::Directory(dir) => assert!(dir.is_empty(), "removing a non-empty directory"),
            Body::Regular(_) | Body::Special(_) => {}
        }
        space.release_file();
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
