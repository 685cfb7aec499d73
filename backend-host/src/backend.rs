//! `vfs::Backend` for [`HostFs`]: each method finds what it needs (the open-file cache,
//! or [`HostFs::open`]: handle resolution, as the server), then acts as the caller
//! ([`HostFs::act`]) for the host syscalls of the operation itself, which the kernel
//! allows or refuses (mode bits, ACLs, sticky directories, ownership rules, quotas,
//! LSMs), and records new names in the handle index. The [`Checks`] it is given supply
//! the caller's credential; their mode-bit rules are not consulted (except as the
//! fallback of a kernel without `faccessat2`).
//!
//! A change's attributes before and after are taken under granary's lock of the directory
//! or file it changes (see `lock`), so no other granary request lies between them; a local
//! process outside granary still can.

use std::os::fd::AsFd;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use gtime::Timestamp;
use rustix::fs::{AtFlags, Mode, OFlags};
use vfs::limits::{MAX_FILE_SIZE, MAX_IO_BYTES, MAX_LINKS, MAX_NAME_BYTES};
use vfs::{
    AccessMask, Attr, Backend, Change, Checks, Content, Cookie, Copied, CreateMode, Created,
    DeviceNumber, DirPage, FileId, FileType, Found, FsError, FsProperties, FsResult, FsStat,
    Linked, Name, PreAttr, ReadDone, ReadSlice, Renamed, SetAttr, Sought, SpecialFile, Stability,
    Written,
};

use crate::attr::{stat_fd, to_attr};
use crate::entries::New;
use crate::errno::fs_err;
use crate::{identity, lock, os, Access, HostFs, OpenDir, Opened};

/// The kernel's answer, as the caller the thread acts as, to `mode` (`R_OK`, `X_OK`, ...)
/// on `fd`; the server's own calls pass. Before Linux 5.8 (no `faccessat2`): the mode
/// bits, through `checks`.
fn kernel_check(fd: &impl AsFd, mode: i32, checks: &dyn Checks, attr: &Attr) -> FsResult<()> {
    if checks.cred().is_none() {
        return Ok(());
    }
    match identity::kernel_allows(fd.as_fd(), mode) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::NOSYS) => {
            crate::files::no_faccessat2();
            let want = match mode {
                libc::R_OK => AccessMask::READ,
                libc::X_OK if attr.is_dir() => AccessMask::LOOKUP,
                libc::X_OK => AccessMask::EXECUTE,
                _ => AccessMask::MODIFY,
            };
            if checks.access(attr, AccessMask(want)).0 == want {
                Ok(())
            } else {
                Err(FsError::Access)
            }
        }
        Err(e) => Err(fs_err(e)),
    }
}

impl Backend for HostFs {
    fn kind(&self) -> &'static str {
        "host"
    }

    fn root(&self) -> FileId {
        self.root_id()
    }

    fn properties(&self) -> FsProperties {
        let read_only = rustix::fs::fstatvfs(&self.root)
            .is_ok_and(|s| s.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY));
        FsProperties {
            // Inode numbers are reused by the host: handles carry a generation.
            stable_ids: false,
            max_file_size: MAX_FILE_SIZE,
            time_granularity_ns: 1,
            supports_hard_links: true,
            supports_symlinks: true,
            max_links: MAX_LINKS,
            // MAX_NAME_BYTES is 255, well inside a u32.
            max_name_bytes: MAX_NAME_BYTES as u32,
            case_insensitive: false,
            case_preserving: true,
            read_only,
        }
    }

    fn fsstat(&self) -> FsResult<FsStat> {
        let s = rustix::fs::fstatvfs(&self.root).map_err(fs_err)?;
        let unit = s.f_frsize.max(1);
        Ok(FsStat {
            total_bytes: s.f_blocks.saturating_mul(unit),
            free_bytes: s.f_bfree.saturating_mul(unit),
            avail_bytes: s.f_bavail.saturating_mul(unit),
            total_files: s.f_files,
            free_files: s.f_ffree,
            avail_files: s.f_favail,
        })
    }

    /// From the handle index, without a syscall: the file itself is checked against the
    /// same generation when the call that uses the handle opens it. A file the index does
    /// not hold (evicted at its bound) costs one search of the export (see `search`).
    fn generation(&self, id: FileId) -> FsResult<u32> {
        if id == self.root_id() {
            return Ok(self.root_generation);
        }
        match self.index.generation(id.0) {
            Some(generation) => Ok(generation),
            None => match self.record(id) {
                Ok(r) => Ok(r.generation),
                // Removed while an NFSv4 open holds it: still this file.
                Err(FsError::Stale) => self.held_generation(id).ok_or(FsError::Stale),
                Err(e) => Err(e),
            },
        }
    }

    /// See `held`: the file's `O_PATH` descriptor (the open-file cache's entry) is kept
    /// until the last release, and reaches the file after its last name is gone.
    fn hold(&self, id: FileId) -> FsResult<bool> {
        self.hold_file(id)?;
        Ok(true)
    }

    fn release(&self, id: FileId) {
        self.release_file(id);
    }

    /// Failed syncs since start (see [`HostFs::writeback_errors`]).
    fn writeback_errors(&self) -> u64 {
        self.writeback_errors
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The open-file cache's `O_PATH` descriptor (or an open), one `statx`; resolution
    /// only: nothing here acts as the caller (knfsd asks no permission for GETATTR).
    fn getattr(&self, id: FileId) -> FsResult<Attr> {
        let (fd, st) = self.find(id, false)?;
        let st = match st {
            Some(st) => st,
            None => self.linked_attrs(id, &fd)?,
        };
        Ok(to_attr(&st))
    }

    /// The kernel's answer for each bit, as the caller (`faccessat2` with `AT_EACCESS`, see
    /// `identity::kernel_allows`): ACLs, read-only mounts, immutable files and LSMs count.
    /// As knfsd maps them: READ is read; LOOKUP (a directory) and EXECUTE (anything else)
    /// are execute; MODIFY and EXTEND are write, and on a directory write and search, as is
    /// DELETE (granted for directories only). One call asks for all the bits wanted; only
    /// if it is refused is each asked alone.
    fn access(
        &self,
        id: FileId,
        want: AccessMask,
        checks: &dyn Checks,
    ) -> FsResult<(AccessMask, Attr)> {
        let (fd, st) = self.find(id, false)?;
        let st = match st {
            Some(st) => st,
            None => self.linked_attrs(id, &fd)?,
        };
        let attr = to_attr(&st);
        if checks.cred().is_none() {
            return Ok((want, attr));
        }
        self.act(checks)?;
        let dir = attr.is_dir();
        let w = if dir {
            libc::W_OK | libc::X_OK
        } else {
            libc::W_OK
        };
        let x = if dir {
            AccessMask::LOOKUP
        } else {
            AccessMask::EXECUTE
        };
        let mut writes = AccessMask::MODIFY | AccessMask::EXTEND;
        if dir {
            writes |= AccessMask::DELETE;
        }
        let bits = [(libc::R_OK, AccessMask::READ), (libc::X_OK, x), (w, writes)];
        let asked: Vec<_> = bits.iter().filter(|(_, b)| want.0 & b != 0).collect();
        let all = asked.iter().fold(0, |m, (mode, _)| m | mode);
        let granted = match identity::kernel_allows(fd.as_fd(), all) {
            Ok(()) => asked.iter().fold(0, |g, (_, b)| g | b),
            Err(rustix::io::Errno::NOSYS) => {
                crate::files::no_faccessat2();
                checks.access(&attr, want).0
            }
            Err(_) => asked
                .iter()
                .filter(|(mode, _)| identity::kernel_allows(fd.as_fd(), *mode).is_ok())
                .fold(0, |g, (_, b)| g | b),
        };
        Ok((AccessMask(granted & want.0), attr))
    }

    /// Under the file's lock: the guard and the change see the same ctime (unless a local
    /// process changes the file in between, which nothing on the host can prevent). The
    /// kernel applies the ownership rules (chown, chgrp, chmod, times) to the caller;
    /// granary only sanitises the mode as knfsd does (`vfs::checks::sanitize_setattr`).
    fn setattr(
        &self,
        id: FileId,
        set: &SetAttr,
        guard: Option<Timestamp>,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        if set.size_bytes.is_some() && !self.may_sync_here() {
            // A truncation frees (or an extension may allocate) the file's blocks: it
            // runs on the blocking pool, before anything is changed here (a memory-backed
            // export's frees memory, and runs here).
            return Err(FsError::WouldBlock);
        }
        let (fd, _) = self.find(id, false)?;
        let _file = self.files.one(id.0);
        let st = self.linked_attrs(id, &fd)?;
        let before = to_attr(&st);
        let set = vfs::checks::sanitize_setattr(&before, set);
        if guard.is_some_and(|ctime| ctime != before.ctime) {
            return Err(FsError::NotSync);
        }
        if set.size_bytes.is_some() && before.file_type != FileType::Regular {
            return Err(if before.is_dir() {
                FsError::IsDir
            } else {
                FsError::Inval
            });
        }
        self.act(checks)?;
        let after = self.apply_setattr(id, &fd, &before, &set, checks)?;
        Ok(Change {
            before: Some(PreAttr::of(&before)),
            after,
        })
    }

    fn lookup(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Found> {
        let d = self.open_dir(dir)?;
        let dir_attr = to_attr(&d.st);
        self.act(checks)?;
        let fd = self
            .beneath(d.fd.as_fd(), name.as_bytes(), OFlags::PATH, Mode::empty())
            .map_err(|e| match e {
                rustix::io::Errno::XDEV => {
                    tracing::debug!(%name, "lookup refused: another file system is mounted there");
                    FsError::Access
                }
                e => fs_err(e),
            })?;
        let st = stat_fd(&fd)?;
        self.note(dir, name.as_bytes(), Some(&fd), &st);
        Ok(Found {
            attr: to_attr(&st),
            dir: dir_attr,
        })
    }

    fn parent(&self, dir: FileId, checks: &dyn Checks) -> FsResult<Found> {
        let d = self.open_dir(dir)?;
        let dir_attr = to_attr(&d.st);
        self.act(checks)?;
        if dir == self.root_id() {
            kernel_check(&d.fd, libc::X_OK, checks, &dir_attr)?;
            return Ok(Found {
                attr: dir_attr.clone(),
                dir: dir_attr,
            });
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let up = rustix::fs::openat(&d.fd, "..", flags, Mode::empty()).map_err(fs_err)?;
        let st = stat_fd(&up)?;
        if st.stx_ino != self.root_ino && self.index.get(st.stx_ino).is_none() {
            // Found by kernel handle after a move: its name is unknown, the kernel handle
            // finds it.
            self.note(FileId(0), b"", Some(&up), &st);
        }
        Ok(Found {
            attr: to_attr(&st),
            dir: dir_attr,
        })
    }

    /// One `pread` straight into the reply buffer, after the permission check on the
    /// descriptor ([`HostFs::may_use`]). Where blocking is forbidden (a network worker's
    /// event loop, `sync::blocking`), only what the page cache holds is read
    /// (`RWF_NOWAIT`): a range that is not all cached is `WouldBlock`, and the READ runs
    /// again on the blocking pool. A warm READ costs no hand-off. A memory-backed export
    /// (tmpfs, [`HostFs::memory_backed`]) is read where the call is: its pages are in
    /// memory (tmpfs answers `RWF_NOWAIT` with `EOPNOTSUPP` anyway). Any other file system
    /// that cannot tell (`EOPNOTSUPP`: a FUSE or network file system) sends every READ
    /// made where blocking is forbidden to the pool.
    fn read_into(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        out: &mut BytesMut,
        checks: &dyn Checks,
    ) -> FsResult<ReadDone> {
        use std::sync::atomic::Ordering::Relaxed;
        let forbidden = !sync::blocking::allowed() && !self.memory_backed;
        if forbidden && !self.nowait_reads.load(Relaxed) {
            return Err(FsError::WouldBlock);
        }
        let (f, st, attr) = self.readable(id, checks)?;
        let count = count.min(MAX_IO_BYTES) as usize;
        let start = out.len();
        let n = self.pread_into(&f, out, count, offset_bytes, forbidden)?;
        let end = offset_bytes.saturating_add(n as u64);
        if forbidden && n < count && end < st.stx_size {
            // Short before the end of the file: the rest is not cached.
            out.truncate(start);
            return Err(FsError::WouldBlock);
        }
        let eof = n < count || end >= st.stx_size;
        Ok(ReadDone { attr, eof })
    }

    /// Through an NFSv4 open that grants reading ([`Backend::read_opened`]): the open
    /// checked the caller's access and holds the file (so it cannot go stale), as knfsd
    /// reads through the open's `nfsd_file`. No `statx` and no permission check: one
    /// `pread` of a byte more than asked, whose coming back or not says whether the read
    /// ended the file (what the size told `read_into`). Where blocking is forbidden a read
    /// short of the count is told apart from the end of the file by a `statx`, as there.
    fn read_opened(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        out: &mut BytesMut,
        _checks: &dyn Checks,
    ) -> FsResult<bool> {
        use std::sync::atomic::Ordering::Relaxed;
        let forbidden = !sync::blocking::allowed() && !self.memory_backed;
        if forbidden && !self.nowait_reads.load(Relaxed) {
            return Err(FsError::WouldBlock);
        }
        let f = self.io_file(id, false)?;
        let count = count.min(MAX_IO_BYTES) as usize;
        let start = out.len();
        let n = self.pread_into(&f, out, count + 1, offset_bytes, forbidden)?;
        if n > count {
            out.truncate(start + count);
            return Ok(false);
        }
        if !forbidden {
            return Ok(true);
        }
        let size = self.io_attr_fresh(id, &f)?.stx_size;
        let end = offset_bytes.saturating_add(n as u64);
        if n < count && end < size {
            // Short before the end of the file: the rest is not cached.
            out.truncate(start);
            return Err(FsError::WouldBlock);
        }
        Ok(end >= size)
    }

    /// As [`Backend::write`] through an NFSv4 open for writing, no attributes wanted
    /// ([`Backend::write_opened`]): the open checked the caller's access and holds the
    /// file, so neither `statx` nor the permission check is made; the `pwrite` is still
    /// made as the caller (the kernel clears set-id bits and charges quotas as for
    /// `write`), under the file's lock, with the sync the stability asks for.
    fn write_opened(
        &self,
        id: FileId,
        offset_bytes: u64,
        data: &Bytes,
        stable: Stability,
        checks: &dyn Checks,
    ) -> FsResult<(u32, Stability)> {
        let count = self.write_may_start(offset_bytes, data.len(), stable)?;
        let f = self.io_file(id, true)?;
        let _file = self.files.one(id.0);
        self.act(checks)?;
        self.pwrite_all(&f, offset_bytes, data)?;
        self.write_settle(&f, stable)?;
        Ok((count, stable))
    }

    /// The descriptor and the checked attributes, as `read_into`; the transport sends the
    /// range with `sendfile` (the page cache's pages, not a copy).
    fn read_slice(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        checks: &dyn Checks,
    ) -> FsResult<Option<ReadSlice>> {
        let (f, st, attr) = self.readable(id, checks)?;
        let len = st
            .stx_size
            .saturating_sub(offset_bytes)
            .min(u64::from(count.min(MAX_IO_BYTES)));
        let eof = offset_bytes.saturating_add(len) >= st.stx_size;
        Ok(Some(ReadSlice {
            file: Arc::new(f),
            offset: offset_bytes,
            len: u32::try_from(len).unwrap_or(MAX_IO_BYTES),
            done: ReadDone { attr, eof },
        }))
    }

    /// Under the file's lock: `statx`, the permission check on the descriptor
    /// ([`HostFs::may_use`]), `pwrite` of every byte as the caller, the sync the stability
    /// asks for, `statx`.
    fn write(
        &self,
        id: FileId,
        offset_bytes: u64,
        data: &[u8],
        stable: Stability,
        checks: &dyn Checks,
    ) -> FsResult<Written> {
        // A sync that would sleep on the disk is refused before anything is written.
        let count = self.write_may_start(offset_bytes, data.len(), stable)?;
        let f = self.io_file(id, true)?;
        let _file = self.files.one(id.0);
        let before = to_attr(&self.io_attr_fresh(id, &f)?);
        self.act(checks)?;
        self.may_use(&f, &before, checks, true)?;
        // As the caller: the kernel clears set-id bits of a file written by a caller
        // without CAP_FSETID, and charges the blocks against quotas without
        // CAP_SYS_RESOURCE's exemption.
        self.pwrite_all(&f, offset_bytes, data)?;
        self.write_settle(&f, stable)?;
        let after = to_attr(&stat_fd(&f)?);
        Ok(Written {
            count,
            committed: stable,
            file: Change {
                before: Some(PreAttr::of(&before)),
                after,
            },
        })
    }

    /// `fdatasync` of the whole file (a range would need `sync_file_range`, which does not
    /// flush metadata such as the size), and the handle index.
    /// Forbidden to block (an event loop), `WouldBlock` before anything: the call runs
    /// again on the blocking pool; a memory-backed export's runs where it is.
    fn commit(&self, id: FileId, _offset_bytes: u64, _count: u32) -> FsResult<Change> {
        if !self.may_sync_here() {
            return Err(FsError::WouldBlock);
        }
        let f = self.io_file(id, true)?;
        let _file = self.files.one(id.0);
        let before = to_attr(&self.io_attr_fresh(id, &f)?);
        self.sync_io(&f, |fd| rustix::fs::fdatasync(fd))?;
        let after = to_attr(&stat_fd(&f)?);
        Ok(Change {
            before: Some(PreAttr::of(&before)),
            after,
        })
    }

    fn create(
        &self,
        dir: FileId,
        name: &Name,
        mode: &CreateMode,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        self.create_file(dir, name, mode, checks)
    }

    fn mkdir(
        &self,
        dir: FileId,
        name: &Name,
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        let new = New {
            default_mode: 0o755,
            attrs,
        };
        self.add_entry(dir, name, &new, checks, |dirfd, name, mode| {
            rustix::fs::mkdirat(dirfd, name, mode)
        })
    }

    fn symlink(
        &self,
        dir: FileId,
        name: &Name,
        target: &[u8],
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        if target.is_empty() {
            return Err(FsError::Inval);
        }
        // A symlink's mode is always 0777 on Linux: a requested one cannot apply.
        let attrs = SetAttr {
            mode: None,
            ..attrs.clone()
        };
        let new = New {
            default_mode: 0o777,
            attrs: &attrs,
        };
        self.add_entry(dir, name, &new, checks, |dirfd, name, _| {
            rustix::fs::symlinkat(os(target), dirfd, name)
        })
    }

    fn mknod(
        &self,
        dir: FileId,
        name: &Name,
        kind: SpecialFile,
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        use rustix::fs::FileType as T;
        let (ty, dev) = match kind {
            SpecialFile::BlockDevice(n) => (T::BlockDevice, n),
            SpecialFile::CharDevice(n) => (T::CharacterDevice, n),
            SpecialFile::Socket => (T::Socket, DeviceNumber::default()),
            SpecialFile::Fifo => (T::Fifo, DeviceNumber::default()),
        };
        let raw = rustix::fs::makedev(dev.major, dev.minor);
        let new = New {
            default_mode: 0o644,
            attrs,
        };
        self.add_entry(dir, name, &new, checks, |dirfd, name, mode| {
            rustix::fs::mknodat(dirfd, name, ty, mode, raw)
        })
    }

    fn readlink(&self, id: FileId) -> FsResult<(Bytes, Attr)> {
        let f = self.open(id, Access::Path)?;
        let attr = to_attr(&f.st);
        if attr.file_type != FileType::Symlink {
            return Err(FsError::Inval);
        }
        let target = rustix::fs::readlinkat(&f.fd, "", Vec::new()).map_err(fs_err)?;
        Ok((Bytes::from(target.into_bytes()), attr))
    }

    fn remove(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Change> {
        self.remove_entry(dir, name, false, checks)
    }

    fn rmdir(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Change> {
        self.remove_entry(dir, name, true, checks)
    }

    fn rename(
        &self,
        from_dir: FileId,
        from: &Name,
        to_dir: FileId,
        to: &Name,
        checks: &dyn Checks,
    ) -> FsResult<Renamed> {
        self.rename_entry(from_dir, from, to_dir, to, checks)
    }

    /// Under the directory's lock: `linkat` as the caller, the attributes after.
    fn link(&self, id: FileId, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Linked> {
        let (fd, _) = self.find(id, false)?;
        let (_dir, d) = self.lock_dir(dir)?;
        let before = to_attr(&d.st);
        if u32::from(self.linked_attrs(id, &fd)?.stx_mode) & libc::S_IFMT == libc::S_IFDIR {
            return Err(FsError::IsDir);
        }
        self.act(checks)?;
        Self::link_fd(&fd, &d.fd, name.as_bytes())?;
        Ok(Linked {
            attr: to_attr(&stat_fd(&fd)?),
            dir: Change {
                before: Some(PreAttr::of(&before)),
                after: to_attr(&stat_fd(&d.fd)?),
            },
        })
    }

    fn seek(
        &self,
        id: FileId,
        offset_bytes: u64,
        what: Content,
        checks: &dyn Checks,
    ) -> FsResult<Sought> {
        self.seek_in(id, offset_bytes, what, checks)
    }

    fn allocate(
        &self,
        id: FileId,
        offset_bytes: u64,
        len_bytes: u64,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        self.space_range(id, offset_bytes, len_bytes, false, checks)
    }

    fn deallocate(
        &self,
        id: FileId,
        offset_bytes: u64,
        len_bytes: u64,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        self.space_range(id, offset_bytes, len_bytes, true, checks)
    }

    fn copy_range(
        &self,
        src: FileId,
        src_offset_bytes: u64,
        dst: FileId,
        dst_offset_bytes: u64,
        len_bytes: u64,
        checks: &dyn Checks,
    ) -> FsResult<Copied> {
        self.copy_in(
            src,
            src_offset_bytes,
            dst,
            dst_offset_bytes,
            len_bytes,
            checks,
        )
    }

    fn clone_range(
        &self,
        src: FileId,
        src_offset_bytes: u64,
        dst: FileId,
        dst_offset_bytes: u64,
        len_bytes: u64,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        self.clone_in(
            src,
            src_offset_bytes,
            dst,
            dst_offset_bytes,
            len_bytes,
            checks,
        )
    }

    fn readdir(
        &self,
        dir: FileId,
        cookie: Cookie,
        max_entries: usize,
        checks: &dyn Checks,
    ) -> FsResult<(DirPage, Attr)> {
        if max_entries == 0 {
            return Err(FsError::TooSmall);
        }
        let d = self.open(dir, Access::List)?;
        let attr = to_attr(&d.st);
        self.act(checks)?;
        kernel_check(&d.fd, libc::R_OK, checks, &attr)?;
        let page = self.list(dir, &d, cookie, max_entries)?;
        Ok((page, attr))
    }
}

impl HostFs {
    /// A directory, opened `O_PATH` (`NotDir` for anything else), with attributes taken
    /// now. With the open-file cache on, the descriptor comes from it (see
    /// [`HostFs::find_dir`]).
    pub(crate) fn open_dir(&self, dir: FileId) -> FsResult<OpenDir> {
        let (fd, st) = self.find_dir(dir)?;
        let st = match st {
            Some(st) => st,
            None => self.linked_attrs(dir, &fd)?,
        };
        Ok(OpenDir { fd, st })
    }

    /// A directory a call changes the entries of: found first (the cache or an open, and
    /// the check that it is beneath the root, outside the lock), then locked, then its
    /// attributes taken under the lock: the before-attributes of the change.
    pub(crate) fn lock_dir(&self, dir: FileId) -> FsResult<(lock::Guard<'_>, OpenDir)> {
        let (fd, _) = self.find_dir(dir)?;
        let guard = self.dirs.one(dir.0);
        let st = self.linked_attrs(dir, &fd)?;
        Ok((guard, OpenDir { fd, st }))
    }

    /// RENAME's two directories, as [`Self::lock_dir`] does for one.
    pub(crate) fn lock_dirs(
        &self,
        a: FileId,
        b: FileId,
    ) -> FsResult<((lock::Guard<'_>, Option<lock::Guard<'_>>), OpenDir, OpenDir)> {
        let ((fa, _), (fb, _)) = (self.find_dir(a)?, self.find_dir(b)?);
        let guards = self.dirs.two(a.0, b.0);
        let sa = self.linked_attrs(a, &fa)?;
        let sb = self.linked_attrs(b, &fb)?;
        Ok((
            guards,
            OpenDir { fd: fa, st: sa },
            OpenDir { fd: fb, st: sb },
        ))
    }

    pub(crate) fn open_dir_uncached(&self, dir: FileId) -> FsResult<Opened> {
        let d = self.open(dir, Access::Path)?;
        if u32::from(d.st.stx_mode) & libc::S_IFMT != libc::S_IFDIR {
            return Err(FsError::NotDir);
        }
        Ok(d)
    }

    /// Writes every byte of `data` at `offset_bytes`.
    fn pwrite_all(
        &self,
        fd: impl std::os::fd::AsFd,
        offset_bytes: u64,
        data: &[u8],
    ) -> FsResult<()> {
        let mut done = 0;
        while done < data.len() {
            let n = rustix::io::pwrite(&fd, &data[done..], offset_bytes + done as u64)
                .map_err(fs_err)?;
            if n == 0 {
                return Err(FsError::Io);
            }
            done += n;
        }
        Ok(())
    }

    /// A sync's outcome; a failure is a writeback error (the verifier must change).
    pub(crate) fn synced(&self, r: rustix::io::Result<()>) -> FsResult<()> {
        if let Err(e) = r {
            self.writeback_errors
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            tracing::error!(errno = %e, "writeback error: the write verifier changes so clients resend unstable data");
            return Err(fs_err(e));
        }
        // The index's log is on the state directory's disk. Where blocking is forbidden
        // (only a memory-backed export's sync gets here, see `HostFs::may_sync_here`) it
        // is left for the next sync made where blocking is allowed: its records guard
        // against a crash of the host, which takes a memory-backed export's files with it
        // anyway (a crash of the server keeps them, and the log's appended records, in
        // the host's memory).
        if sync::blocking::allowed() {
            if let Err(e) = self.index.sync() {
                tracing::warn!(error = %e, "cannot sync the handle index");
            }
        }
        Ok(())
    }

    /// The attributes of `name` in the directory open as `dirfd`, without following a
    /// symlink; `None` if there is no such entry.
    pub(crate) fn entry_attr(&self, dirfd: &impl AsFd, name: &Name) -> FsResult<Option<Attr>> {
        match rustix::fs::statx(
            dirfd,
            os(name.as_bytes()),
            AtFlags::SYMLINK_NOFOLLOW,
            crate::attr::WANT,
        ) {
            Ok(st) => Ok(Some(to_attr(&st))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(fs_err(e)),
        }
    }

    /// Keeps the handle index from growing with files that are gone: `attr` was the last
    /// name of its file.
    pub(crate) fn forget_if_last(&self, attr: &Attr) {
        if attr.is_dir() || attr.nlink <= 1 {
            self.index.forget(attr.fileid.0, attr.generation);
            // The open-file cache must not keep the removed file's space (seed 004).
            self.forget_open(attr.fileid);
        }
    }
}
