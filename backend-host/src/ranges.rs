//! NFSv4.2's space and copy calls on host files: SEEK (`lseek` `SEEK_DATA` /
//! `SEEK_HOLE`), ALLOCATE and DEALLOCATE (`fallocate`, mode 0 and `PUNCH_HOLE |
//! KEEP_SIZE`), COPY (`copy_file_range` between the two open files: the kernel copies,
//! or shares blocks where the file system can) and CLONE (`FICLONERANGE`, which only
//! file systems with shared extents accept: elsewhere `NotSupp`).
//!
//! Each runs as the caller ([`HostFs::act`]) after the permission check on the
//! descriptor ([`HostFs::may_use`]), so the kernel charges quotas to the caller and
//! refuses what it would refuse a local process. Every one of them may sleep on the
//! disk: on a thread that may not block it answers `WouldBlock` before doing anything.
//! Data they write is not synced: the descriptor is marked as holding unstable data,
//! so a COMMIT (or the cache's close) syncs it, as after an UNSTABLE WRITE.

use std::os::fd::AsFd;

use rustix::fs::{FallocateFlags, SeekFrom};
use rustix::io::Errno;
use vfs::limits::MAX_COPY_BYTES;
use vfs::{Change, Checks, Content, Copied, FileId, FsError, FsResult, PreAttr, Sought, Stability};

use crate::attr::{stat_fd, to_attr};
use crate::errno::fs_err;
use crate::HostFs;

/// `struct file_clone_range` of `<linux/fs.h>`, FICLONERANGE's argument.
#[repr(C)]
#[derive(Debug)]
struct FileCloneRange {
    src_fd: i64,
    src_offset: u64,
    src_length: u64,
    dest_offset: u64,
}

/// `FICLONERANGE`: `_IOW(0x94, 13, struct file_clone_range)`.
const FICLONERANGE: rustix::ioctl::Opcode =
    rustix::ioctl::opcode::write::<FileCloneRange>(0x94, 13);

/// `WouldBlock` on a thread that may not sleep (see `vfs::Backend`).
fn may_sleep() -> FsResult<()> {
    if sync::blocking::allowed() {
        Ok(())
    } else {
        Err(FsError::WouldBlock)
    }
}

impl HostFs {
    /// `lseek` on the read descriptor. The descriptor may be shared through the
    /// open-file cache: its file position moves, which nothing reads (all I/O is
    /// `pread`/`pwrite` at an offset).
    pub(crate) fn seek_in(
        &self,
        id: FileId,
        offset_bytes: u64,
        what: Content,
        checks: &dyn Checks,
    ) -> FsResult<Sought> {
        may_sleep()?;
        let (f, st, attr) = self.readable(id, checks)?;
        if offset_bytes >= st.stx_size {
            return Err(FsError::NxIo);
        }
        let whence = match what {
            Content::Data => SeekFrom::Data(offset_bytes),
            Content::Hole => SeekFrom::Hole(offset_bytes),
        };
        let offset_bytes = match rustix::fs::seek(&f, whence) {
            Ok(at) => Some(at),
            // No data after the offset (or the file shrank meanwhile).
            Err(Errno::NXIO) if what == Content::Data => None,
            Err(e) => return Err(fs_err(e)),
        };
        Ok(Sought { offset_bytes, attr })
    }

    /// `fallocate` of the range on the write descriptor, under the file's lock.
    pub(crate) fn space_range(
        &self,
        id: FileId,
        offset_bytes: u64,
        len_bytes: u64,
        punch: bool,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        may_sleep()?;
        let f = self.io_file(id, true)?;
        let _file = self.files.one(id.0);
        let before = to_attr(&self.io_attr_fresh(id, &f)?);
        self.act(checks)?;
        self.may_use(&f, &before, checks, true)?;
        let mode = if punch {
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE
        } else {
            FallocateFlags::empty()
        };
        rustix::fs::fallocate(&f, mode, offset_bytes, len_bytes).map_err(fs_err)?;
        f.mark_unstable();
        let after = to_attr(&stat_fd(&f)?);
        Ok(Change {
            before: Some(PreAttr::of(&before)),
            after,
        })
    }

    /// `copy_file_range` from the source's read descriptor to the destination's write
    /// descriptor, at most `MAX_COPY_BYTES`, under the destination's lock.
    pub(crate) fn copy_in(
        &self,
        src: FileId,
        src_offset_bytes: u64,
        dst: FileId,
        dst_offset_bytes: u64,
        len_bytes: u64,
        checks: &dyn Checks,
    ) -> FsResult<Copied> {
        may_sleep()?;
        let (from, _, _) = self.readable(src, checks)?;
        let to = self.io_file(dst, true)?;
        let _file = self.files.one(dst.0);
        let before = to_attr(&self.io_attr_fresh(dst, &to)?);
        self.may_use(&to, &before, checks, true)?;
        let want = len_bytes.min(MAX_COPY_BYTES);
        let (mut off_in, mut off_out) = (src_offset_bytes, dst_offset_bytes);
        let mut done = 0_u64;
        while done < want {
            let chunk = usize::try_from(want - done).unwrap_or(usize::MAX);
            let n = rustix::fs::copy_file_range(
                &from,
                Some(&mut off_in),
                &to,
                Some(&mut off_out),
                chunk,
            )
            .map_err(fs_err)?;
            if n == 0 {
                break;
            }
            done += n as u64;
        }
        if done > 0 {
            to.mark_unstable();
        }
        let after = to_attr(&stat_fd(&to)?);
        Ok(Copied {
            count_bytes: done,
            committed: Stability::Unstable,
            file: Change {
                before: Some(PreAttr::of(&before)),
                after,
            },
        })
    }

    /// `FICLONERANGE` on the destination's write descriptor, under its lock.
    pub(crate) fn clone_in(
        &self,
        src: FileId,
        src_offset_bytes: u64,
        dst: FileId,
        dst_offset_bytes: u64,
        len_bytes: u64,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        may_sleep()?;
        let (from, _, _) = self.readable(src, checks)?;
        let to = self.io_file(dst, true)?;
        let _file = self.files.one(dst.0);
        let before = to_attr(&self.io_attr_fresh(dst, &to)?);
        self.may_use(&to, &before, checks, true)?;
        let range = FileCloneRange {
            src_fd: i64::from(std::os::fd::AsRawFd::as_raw_fd(&from.as_fd())),
            src_offset: src_offset_bytes,
            src_length: len_bytes,
            dest_offset: dst_offset_bytes,
        };
        // SAFETY: FICLONERANGE's argument is a `struct file_clone_range`, which
        // `FileCloneRange` lays out field for field (`repr(C)`); the kernel only reads it,
        // and `from` keeps the source descriptor open for the call.
        let r = unsafe {
            rustix::ioctl::ioctl(
                &to,
                rustix::ioctl::Setter::<FICLONERANGE, FileCloneRange>::new(range),
            )
        };
        r.map_err(|e| match e {
            // A file system without shared extents (ext4, tmpfs): the ioctl is unknown.
            Errno::NOTTY => FsError::NotSupp,
            e => fs_err(e),
        })?;
        let after = to_attr(&stat_fd(&to)?);
        Ok(Change {
            before: Some(PreAttr::of(&before)),
            after,
        })
    }
}
