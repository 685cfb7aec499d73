//! Helpers of the Backend methods: attribute changes on an open file, new entries, and
//! directory listing.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use bytes::Bytes;
use rustix::fs::{AtFlags, Gid, Mode, OFlags, RawDir, Timespec, Timestamps, Uid};
use rustix::io::Errno;
use vfs::{
    Attr, Checks, Cookie, DirEntry, DirPage, FileId, FsError, FsResult, Name, SetAttr, SetTime,
};

use crate::attr::{stat_fd, to_attr};
use crate::errno::fs_err;
use crate::{limits, os, Access, HostFs, OpenDir, Opened};

/// An exclusive create stores its verifier in the new file's times (as Linux nfsd does):
/// mtime seconds = first half, atime seconds = second half. The client's SETATTR that
/// follows replaces them.
pub(crate) fn exclusive_times(v: [u8; 8]) -> SetAttr {
    let half = |b: &[u8]| i64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    SetAttr {
        mtime: SetTime::Client(gtime::Timestamp {
            seconds: half(&v[..4]),
            nanos: 0,
        }),
        atime: SetTime::Client(gtime::Timestamp {
            seconds: half(&v[4..]),
            nanos: 0,
        }),
        ..SetAttr::default()
    }
}

fn timespec(t: SetTime) -> Timespec {
    match t {
        SetTime::DontChange => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        SetTime::ServerTime => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        SetTime::Client(ts) => Timespec {
            tv_sec: ts.seconds,
            tv_nsec: i64::from(ts.nanos),
        },
    }
}

/// `/proc/self/fd/N`: reaches the very inode an fd refers to, for the calls that take no
/// `O_PATH` descriptor (`chmod` before Linux 6.6's `fchmodat2`, unprivileged `link`).
fn proc_path(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// A name just made in a directory, with the descriptor its making returned (`O_CREAT`
/// gives one; `mkdir`, `symlink` and `mknod` do not).
pub(crate) struct Made<'a> {
    pub name: &'a Name,
    pub fd: Option<OwnedFd>,
}

impl HostFs {
    /// Applies `set` to the file open as `fd` (an `O_PATH` fd; `before` its attributes):
    /// owner, mode, size, times, in that order (as Linux's `notify_change` does), and
    /// returns the new attributes. The thread acts as the caller: the kernel decides
    /// (`chown_ok`, `chgrp_ok`, `inode_owner_or_capable`, the set-id bits a chown or a
    /// chmod by a caller outside the group clears). A size change opens the file for
    /// writing (resolution) and may the caller write it ([`HostFs::may_use`]: the owner
    /// may, as knfsd's owner override lets it), then `ftruncate` as the caller.
    pub(crate) fn apply_setattr(
        &self,
        id: FileId,
        fd: &impl AsFd,
        before: &Attr,
        set: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Attr> {
        let empty = AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW;
        if set.uid.is_some() || set.gid.is_some() {
            let uid = set.uid.map(Uid::from_raw);
            let gid = set.gid.map(Gid::from_raw);
            rustix::fs::chownat(fd, "", uid, gid, empty).map_err(fs_err)?;
        }
        let is_link = before.file_type == vfs::FileType::Symlink;
        if let Some(mode) = set.mode.filter(|_| !is_link) {
            let mode = Mode::from_raw_mode(mode & 0o7777);
            rustix::fs::chmodat(
                rustix::fs::CWD,
                proc_path(fd.as_fd()),
                mode,
                AtFlags::empty(),
            )
            .map_err(fs_err)?;
        }
        if let Some(size) = set.size_bytes {
            if size > vfs::limits::MAX_FILE_SIZE {
                return Err(FsError::FBig);
            }
            let w = self.open(id, Access::Write)?;
            self.may_use(&w.fd, &to_attr(&w.st), checks, true)?;
            rustix::fs::ftruncate(&w.fd, size).map_err(fs_err)?;
        }
        if set.atime != SetTime::DontChange || set.mtime != SetTime::DontChange {
            let times = Timestamps {
                last_access: timespec(set.atime),
                last_modification: timespec(set.mtime),
            };
            rustix::fs::utimensat(fd, "", &times, empty).map_err(fs_err)?;
        }
        Ok(to_attr(&stat_fd(fd)?))
    }

    /// After a new file was made in `dir` (open as `d`) by the caller: opens it (unless
    /// its making gave a descriptor), records it, and applies the other `attrs` (times,
    /// size) as the caller, who owns it. Nothing is `chown`ed: the kernel made it the
    /// caller's (its group the directory's in a set-gid directory) with the mode asked
    /// for, less what a default ACL of the directory takes away (the thread's umask is 0,
    /// see `identity::clear_umask`; where it cannot be, the bits the process umask took
    /// are put back with a `chmod`). If that fails, the new file is removed again, so a
    /// failed call leaves nothing behind.
    pub(crate) fn finish_new(
        &self,
        dir: FileId,
        d: &OpenDir,
        made: Made<'_>,
        attrs: &SetAttr,
        mode: u32,
        checks: &dyn Checks,
    ) -> FsResult<Attr> {
        let name = made.name;
        let fd = match made.fd {
            Some(fd) => fd,
            None => self
                .beneath(d.fd.as_fd(), name.as_bytes(), OFlags::PATH, Mode::empty())
                .map_err(fs_err)?,
        };
        let st = stat_fd(&fd)?;
        let id = FileId(st.stx_ino);
        self.note(dir, name.as_bytes(), Some(&fd), &st);
        let regular = u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFREG;
        let mut set = SetAttr {
            atime: attrs.atime,
            mtime: attrs.mtime,
            size_bytes: attrs.size_bytes.filter(|_| regular),
            ..SetAttr::default()
        };
        set.mode = self.umask_taken(u32::from(st.stx_mode), mode);
        if set.is_empty() {
            return Ok(to_attr(&st));
        }
        let is_dir = u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR;
        let generation = crate::attr::generation(&st);
        self.apply_setattr(id, &fd, &to_attr(&st), &set, checks)
            .inspect_err(|e| {
                tracing::warn!(%name, error = %e, "could not finish a new file; removing it");
                let flags = if is_dir {
                    AtFlags::REMOVEDIR
                } else {
                    AtFlags::empty()
                };
                let _ = rustix::fs::unlinkat(&d.fd, os(name.as_bytes()), flags);
                self.index.forget(id.0, generation);
            })
    }

    /// Where this thread could not get a umask of its own: the mode that puts back the
    /// permission bits the process umask took from `asked` (`None` if it took none, or if
    /// the new file's bits are not what the umask alone leaves, e.g. a default ACL
    /// decided them).
    fn umask_taken(&self, made: u32, asked: u32) -> Option<u32> {
        if crate::identity::clear_umask() {
            return None;
        }
        let umasked = asked & 0o777 & !self.umask;
        let took = asked & 0o777 != umasked;
        (took && made & 0o777 == umasked).then_some((made & 0o7000) | (asked & 0o777))
    }

    /// The mode to create with: the one asked for. The calling thread's umask is made 0
    /// first (`identity::clear_umask`), so only a default ACL of the directory takes
    /// bits away.
    pub(crate) fn create_mode(mode: u32) -> Mode {
        crate::identity::clear_umask();
        Mode::from_raw_mode(mode & 0o7777)
    }

    /// Lists up to `max_entries` entries after `cookie`. Cookies are getdents64 `d_off`
    /// values, handed back to `lseek`.
    pub(crate) fn list(
        &self,
        dir: FileId,
        d: &Opened,
        cookie: Cookie,
        max: usize,
    ) -> FsResult<DirPage> {
        if cookie != Cookie::START {
            rustix::fs::seek(&d.fd, rustix::fs::SeekFrom::Start(cookie.0)).map_err(|e| {
                if e == Errno::INVAL {
                    FsError::BadCookie
                } else {
                    fs_err(e)
                }
            })?;
        }
        let parent = self.parent_ino(dir, &d.fd)?;
        let mut buf = Vec::with_capacity(limits::DIRENT_BUFFER_BYTES);
        let mut iter = RawDir::new(&d.fd, buf.spare_capacity_mut());
        let mut entries = Vec::new();
        let mut eof = true;
        while let Some(entry) = iter.next() {
            let entry = entry.map_err(fs_err)?;
            if entries.len() == max {
                eof = false;
                break;
            }
            let name = entry.file_name().to_bytes();
            let fileid = match name {
                b".." => parent,
                _ => entry.ino(),
            };
            entries.push(DirEntry {
                name: Bytes::copy_from_slice(name),
                fileid: FileId(fileid),
                cookie: Cookie(entry.next_entry_cookie()),
                attr: None,
            });
        }
        self.remember(dir, &d.fd, &entries);
        Ok(DirPage {
            entries,
            eof,
            verifier: 0,
        })
    }

    /// Records where the listed files are, so that READDIRPLUS (which asks for each
    /// entry's attributes by file id) and the handles it hands out find them: one `statx`
    /// per entry the index does not know under this name. A mount point (whose `statx`
    /// names another file than its directory entry) is not recorded, so it is not listed
    /// with attributes.
    fn remember(&self, dir: FileId, fd: &OwnedFd, entries: &[DirEntry]) {
        for e in entries {
            if e.name[..] == b"."[..] || e.name[..] == b".."[..] {
                continue;
            }
            let known = self
                .index
                .get(e.fileid.0)
                .is_some_and(|r| r.parent == dir.0 && r.name == e.name);
            if known {
                continue;
            }
            let flags = AtFlags::SYMLINK_NOFOLLOW;
            if let Ok(st) = rustix::fs::statx(fd, os(&e.name), flags, crate::attr::WANT) {
                if st.stx_ino == e.fileid.0 && crate::attr::device(&st) == self.dev {
                    self.note(dir, &e.name, None, &st);
                }
            }
        }
    }

    /// The inode of `..` as clients may see it: the root is its own parent.
    fn parent_ino(&self, dir: FileId, fd: &OwnedFd) -> FsResult<u64> {
        if dir.0 == self.root_ino {
            return Ok(self.root_ino);
        }
        Ok(crate::attr::stat_at(fd, "..".as_ref())?.stx_ino)
    }

    /// `link(2)` of the file open as `src` to `name` in `dirfd`, through `/proc/self/fd`
    /// (`AT_EMPTY_PATH` would need `CAP_DAC_READ_SEARCH`, which a thread acting for a
    /// non-root caller does not have): the kernel applies the caller's rights, including
    /// `fs.protected_hardlinks`.
    pub(crate) fn link_fd(src: &impl AsFd, dirfd: &impl AsFd, name: &[u8]) -> FsResult<()> {
        rustix::fs::linkat(
            rustix::fs::CWD,
            proc_path(src.as_fd()),
            dirfd,
            os(name),
            AtFlags::SYMLINK_FOLLOW,
        )
        .map_err(fs_err)
    }
}
