//! File identity and attributes from one `statx`.
//!
//! Identity is (device, inode, generation). The device is fixed per export (crossing into
//! another mount is refused), so a file's [`FileId`] is its inode number. The generation
//! tells apart two files that had the same inode number at different times: it is taken
//! from the birth time `statx` returns with the other attributes (no extra syscall, and it
//! works on `O_PATH` descriptors, which `FS_IOC_GETVERSION` does not). File systems without
//! a birth time give generation 0 and rely on not reusing inode numbers quickly (tmpfs) or
//! on the kernel file handle, which carries the file system's own generation and is checked
//! by `open_by_handle_at` whenever the server has that capability.

use std::os::fd::AsFd;

use gtime::Timestamp;
use rustix::fs::{AtFlags, Statx, StatxFlags, StatxTimestamp};
use vfs::{Attr, DeviceNumber, FileId, FileType, FsResult};

use crate::errno::fs_err;

/// What every `statx` asks for.
pub const WANT: StatxFlags = StatxFlags::BASIC_STATS.union(StatxFlags::BTIME);

/// `statx` of the file an fd refers to (an `O_PATH` fd is fine; a symlink is not followed).
pub fn stat_fd(fd: impl AsFd) -> FsResult<Statx> {
    rustix::fs::statx(
        fd,
        "",
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        WANT,
    )
    .map_err(fs_err)
}

/// `statx` of `path` relative to `dir`, not following a final symlink.
pub fn stat_at(dir: impl AsFd, path: &std::ffi::OsStr) -> FsResult<Statx> {
    rustix::fs::statx(dir, path, AtFlags::SYMLINK_NOFOLLOW, WANT).map_err(fs_err)
}

/// The generation of a file: its birth time folded to 32 bits, 0 without one.
#[must_use]
pub fn generation(st: &Statx) -> u32 {
    if st.stx_mask & StatxFlags::BTIME.bits() == 0 {
        return 0;
    }
    let t = st.stx_btime;
    let mixed = (t.tv_sec as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(t.tv_nsec);
    let folded = (mixed ^ (mixed >> 32)) as u32;
    // 0 means "no generation"; keep it for file systems without birth times.
    folded.max(1)
}

/// `S_IFMT` bits of a statx mode.
#[must_use]
pub fn kind_bits(st: &Statx) -> u16 {
    st.stx_mode & 0o170_000
}

#[must_use]
pub fn file_type(kind: u16) -> FileType {
    match u32::from(kind) {
        k if k == libc::S_IFDIR => FileType::Directory,
        k if k == libc::S_IFLNK => FileType::Symlink,
        k if k == libc::S_IFBLK => FileType::BlockDevice,
        k if k == libc::S_IFCHR => FileType::CharDevice,
        k if k == libc::S_IFSOCK => FileType::Socket,
        k if k == libc::S_IFIFO => FileType::Fifo,
        _ => FileType::Regular,
    }
}

fn ts(t: StatxTimestamp) -> Timestamp {
    Timestamp {
        seconds: t.tv_sec,
        nanos: t.tv_nsec.min(999_999_999),
    }
}

/// The vfs attributes of a statx result. `fileid` of the export root is the root's inode.
#[must_use]
pub fn to_attr(st: &Statx) -> Attr {
    Attr {
        file_type: file_type(kind_bits(st)),
        mode: u32::from(st.stx_mode) & 0o7777,
        nlink: st.stx_nlink,
        uid: st.stx_uid,
        gid: st.stx_gid,
        size_bytes: st.stx_size,
        used_bytes: st.stx_blocks.saturating_mul(512),
        rdev: DeviceNumber {
            major: st.stx_rdev_major,
            minor: st.stx_rdev_minor,
        },
        fsid: 0,
        fileid: FileId(st.stx_ino),
        generation: generation(st),
        atime: ts(st.stx_atime),
        mtime: ts(st.stx_mtime),
        ctime: ts(st.stx_ctime),
    }
}

/// The device a statx result lives on.
#[must_use]
pub fn device(st: &Statx) -> (u32, u32) {
    (st.stx_dev_major, st.stx_dev_minor)
}
