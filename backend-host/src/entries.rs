//! Entry changes: CREATE (and its reuse of an existing file), MKDIR/SYMLINK/MKNOD,
//! REMOVE/RMDIR and RENAME. Each runs under granary's lock of the directories it changes
//! (`lock`), takes their attributes before, makes one host syscall as the caller (the
//! kernel checks write and search permission on the directories, the sticky bit, a moved
//! directory's write permission, and makes a new file the caller's), and takes the
//! attributes after.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use vfs::limits::MAX_FILE_SIZE;
use vfs::{
    Attr, Change, Checks, CreateMode, Created, FileId, FileType, FsError, FsResult, Name, PreAttr,
    Renamed, SetAttr, SetTime,
};

use crate::attr::{stat_fd, to_attr};
use crate::errno::fs_err;
use crate::ops::{exclusive_times, Made};
use crate::{os, HostFs, OpenDir};

/// A file about to be made by MKDIR, SYMLINK or MKNOD.
pub(crate) struct New<'a> {
    /// Mode when `attrs` gives none.
    pub(crate) default_mode: u32,
    pub(crate) attrs: &'a SetAttr,
}

fn change(before: &Attr, after: Attr) -> Change {
    Change {
        before: Some(PreAttr::of(before)),
        after,
    }
}

/// A rename or remove reports a directory that was not empty as `EEXIST` or `ENOTEMPTY`.
fn not_empty(e: Errno) -> FsError {
    match e {
        Errno::EXIST => FsError::NotEmpty,
        e => fs_err(e),
    }
}

impl HostFs {
    /// MKDIR, SYMLINK, MKNOD: `make` creates `name` in the directory with the mode given.
    pub(crate) fn add_entry(
        &self,
        dir: FileId,
        name: &Name,
        new: &New<'_>,
        checks: &dyn Checks,
        make: impl FnOnce(BorrowedFd<'_>, &OsStr, Mode) -> Result<(), Errno>,
    ) -> FsResult<Created> {
        let (_dir, d) = self.lock_dir(dir)?;
        let before = to_attr(&d.st);
        let mode = new.attrs.mode.unwrap_or(new.default_mode);
        self.act(checks)?;
        make(d.fd.as_fd(), os(name.as_bytes()), Self::create_mode(mode)).map_err(fs_err)?;
        let made = Made { name, fd: None };
        let attr = self.finish_new(dir, &d, made, new.attrs, mode, checks)?;
        Ok(Created {
            attr,
            dir: change(&before, to_attr(&stat_fd(&d.fd)?)),
        })
    }

    /// CREATE: a new regular file, or per `mode` the existing one (the directory then does
    /// not change: its attributes after are the ones before).
    pub(crate) fn create_file(
        &self,
        dir: FileId,
        name: &Name,
        mode: &CreateMode,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        let (_dir, d) = self.lock_dir(dir)?;
        let before = to_attr(&d.st);
        let unchanged = |attr| Created {
            attr,
            dir: change(&before, before.clone()),
        };
        let empty = SetAttr::default();
        let (requested, verifier) = match mode {
            CreateMode::Unchecked(a) | CreateMode::Guarded(a) => (a, None),
            CreateMode::Exclusive(v) => (&empty, Some(*v)),
        };
        let mut attrs = requested.clone();
        if attrs.size_bytes.is_some_and(|s| s > MAX_FILE_SIZE) {
            return Err(FsError::FBig);
        }
        if let Some(v) = verifier {
            let times = exclusive_times(v);
            (attrs.atime, attrs.mtime) = (times.atime, times.mtime);
        }
        let perm = attrs.mode.unwrap_or(0o644);
        let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY;
        // O_EXCL: the name is new, or it exists (whatever it is, a symlink included) and
        // the rules of `reuse_existing` apply. The descriptor finishes the new file.
        self.act(checks)?;
        let made = match self.beneath(
            d.fd.as_fd(),
            name.as_bytes(),
            flags,
            Self::create_mode(perm),
        ) {
            Ok(fd) => fd,
            Err(Errno::EXIST) => {
                return self
                    .reuse_existing(dir, &d, name, mode, checks)
                    .map(unchanged);
            }
            Err(e) => return Err(fs_err(e)),
        };
        let made = Made {
            name,
            fd: Some(made),
        };
        let attr = self.finish_new(dir, &d, made, &attrs, perm, checks)?;
        Ok(Created {
            attr,
            dir: change(&before, to_attr(&stat_fd(&d.fd)?)),
        })
    }

    /// CREATE over an existing name (the mem backend's rules): not a regular file or
    /// Guarded: `Exist`; Exclusive: the same verifier (kept in the times) is a
    /// retransmission; Unchecked: only the size applies, under the file's lock, if the
    /// caller may write the file (its owner may: [`HostFs::may_use`]).
    fn reuse_existing(
        &self,
        dir: FileId,
        d: &OpenDir,
        name: &Name,
        mode: &CreateMode,
        checks: &dyn Checks,
    ) -> FsResult<Attr> {
        let fd = self
            .beneath(d.fd.as_fd(), name.as_bytes(), OFlags::PATH, Mode::empty())
            .map_err(fs_err)?;
        let st = stat_fd(&fd)?;
        let attr = to_attr(&st);
        if attr.file_type != FileType::Regular {
            return Err(FsError::Exist);
        }
        let size = match mode {
            CreateMode::Guarded(_) => return Err(FsError::Exist),
            CreateMode::Exclusive(v) => {
                let want = exclusive_times(*v);
                let same = want.mtime == SetTime::Client(attr.mtime)
                    && want.atime == SetTime::Client(attr.atime);
                if !same {
                    return Err(FsError::Exist);
                }
                None
            }
            CreateMode::Unchecked(attrs) => attrs.size_bytes,
        };
        self.note(dir, name.as_bytes(), Some(&fd), &st);
        let Some(size) = size else { return Ok(attr) };
        let _file = self.files.one(attr.fileid.0);
        let now = to_attr(&stat_fd(&fd)?);
        if size > MAX_FILE_SIZE {
            return Err(FsError::FBig);
        }
        let set = SetAttr {
            size_bytes: Some(size),
            ..SetAttr::default()
        };
        self.apply_setattr(attr.fileid, &fd, &now, &set, checks)
    }

    /// REMOVE (`rmdir` false) or RMDIR (`rmdir` true) of `name` in `dir`.
    pub(crate) fn remove_entry(
        &self,
        dir: FileId,
        name: &Name,
        rmdir: bool,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        let (_dir, d) = self.lock_dir(dir)?;
        let before = to_attr(&d.st);
        self.act(checks)?;
        let victim = self.entry_attr(&d.fd, name)?.ok_or(FsError::NoEnt)?;
        match (victim.is_dir(), rmdir) {
            (true, false) => return Err(FsError::IsDir),
            (false, true) => return Err(FsError::NotDir),
            _ => {}
        }
        let flags = if rmdir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        rustix::fs::unlinkat(&d.fd, os(name.as_bytes()), flags).map_err(not_empty)?;
        self.forget_if_last(&victim);
        Ok(change(&before, to_attr(&stat_fd(&d.fd)?)))
    }

    /// RENAME, under the locks of both directories.
    pub(crate) fn rename_entry(
        &self,
        from_dir: FileId,
        from: &Name,
        to_dir: FileId,
        to: &Name,
        checks: &dyn Checks,
    ) -> FsResult<Renamed> {
        let (_dirs, a, b) = self.lock_dirs(from_dir, to_dir)?;
        let one_dir = from_dir == to_dir;
        let from_before = to_attr(&a.st);
        let to_before = to_attr(&b.st);
        self.act(checks)?;
        let moving = self.entry_attr(&a.fd, from)?.ok_or(FsError::NoEnt)?;
        let replaced = self.entry_attr(&b.fd, to)?;
        if replaced.as_ref().is_some_and(|r| r.fileid == moving.fileid) {
            // Source and target are one file: nothing changes (POSIX).
            return Ok(Renamed {
                from_dir: change(&from_before, from_before.clone()),
                to_dir: change(&to_before, to_before.clone()),
            });
        }
        rustix::fs::renameat(&a.fd, os(from.as_bytes()), &b.fd, os(to.as_bytes()))
            .map_err(not_empty)?;
        // The moved file's new name, for the re-walk (the kernel handle did not change).
        if let Ok(fd) = self.beneath(b.fd.as_fd(), to.as_bytes(), OFlags::PATH, Mode::empty()) {
            if let Ok(st) = stat_fd(&fd) {
                self.note(to_dir, to.as_bytes(), Some(&fd), &st);
            }
        }
        if let Some(r) = &replaced {
            self.forget_if_last(r);
        }
        let from_after = to_attr(&stat_fd(&a.fd)?);
        let to_after = if one_dir {
            from_after.clone()
        } else {
            to_attr(&stat_fd(&b.fd)?)
        };
        Ok(Renamed {
            from_dir: change(&from_before, from_after),
            to_dir: change(&to_before, to_after),
        })
    }
}
