//! The few host calls rustix does not wrap: kernel file handles (`name_to_handle_at`,
//! `open_by_handle_at`) and filling a buffer's spare capacity.
//! Every `unsafe` block of the crate is here, each with its `SAFETY` argument.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use rustix::fs::OFlags;
use rustix::io::Errno;

/// Largest kernel file handle we keep (`MAX_HANDLE_SZ`).
pub const MAX_KERNEL_HANDLE_BYTES: usize = 128;

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct HandleBuf {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; MAX_KERNEL_HANDLE_BYTES],
}

/// A kernel file handle: what `open_by_handle_at` needs to find a file again without a
/// path, whatever it was renamed to. It carries the file system's own generation number,
/// so a reused inode number does not open the new file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelHandle {
    pub handle_type: i32,
    pub bytes: Vec<u8>,
}

/// The kernel handle of the file `fd` refers to (an `O_PATH` fd is fine).
pub fn name_to_handle(fd: impl AsFd) -> Result<KernelHandle, Errno> {
    let mut buf = HandleBuf {
        handle_bytes: MAX_KERNEL_HANDLE_BYTES as u32,
        handle_type: 0,
        f_handle: [0; MAX_KERNEL_HANDLE_BYTES],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: the path is a valid NUL-terminated empty string, `buf` is a `file_handle`
    // header followed by `handle_bytes` writable bytes, `mount_id` is a valid out-pointer,
    // and all of them outlive the call.
    let rc = unsafe {
        libc::name_to_handle_at(
            fd.as_fd().as_raw_fd(),
            c"".as_ptr(),
            std::ptr::addr_of_mut!(buf).cast::<libc::file_handle>(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO));
    }
    let len = (buf.handle_bytes as usize).min(MAX_KERNEL_HANDLE_BYTES);
    Ok(KernelHandle {
        handle_type: buf.handle_type,
        bytes: buf.f_handle[..len].to_vec(),
    })
}

/// Opens the file a kernel handle names, on the file system of `mount_fd`. Needs
/// `CAP_DAC_READ_SEARCH`; `ESTALE` when the file is gone (or its inode reused).
pub fn open_by_handle(
    mount_fd: impl AsFd,
    handle: &KernelHandle,
    flags: OFlags,
) -> Result<OwnedFd, Errno> {
    if handle.bytes.len() > MAX_KERNEL_HANDLE_BYTES {
        return Err(Errno::INVAL);
    }
    let mut buf = HandleBuf {
        handle_bytes: handle.bytes.len() as u32,
        handle_type: handle.handle_type,
        f_handle: [0; MAX_KERNEL_HANDLE_BYTES],
    };
    buf.f_handle[..handle.bytes.len()].copy_from_slice(&handle.bytes);
    let flags = (flags | OFlags::CLOEXEC).bits() as libc::c_int;
    // SAFETY: `buf` is a valid `file_handle` with `handle_bytes` initialised bytes and
    // lives across the call; the kernel only reads it.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount_fd.as_fd().as_raw_fd(),
            std::ptr::addr_of_mut!(buf).cast::<libc::file_handle>(),
            flags,
        )
    };
    if fd < 0 {
        return Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO));
    }
    // SAFETY: the kernel just returned this descriptor to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Appends to `out` what `fill` writes into `count` bytes of its spare capacity, without
/// zeroing them first. `fill` returns how many bytes it initialised.
pub fn fill_spare<E>(
    out: &mut bytes::BytesMut,
    count: usize,
    fill: impl FnOnce(&mut [std::mem::MaybeUninit<u8>]) -> Result<usize, E>,
) -> Result<usize, E> {
    out.reserve(count);
    let spare = &mut out.spare_capacity_mut()[..count];
    let n = fill(spare)?;
    assert!(n <= count, "filled more than the space given");
    // SAFETY: `fill` initialised the first `n` bytes of the spare capacity (pread
    // reports exactly how many it wrote), and `n <= count <= capacity - len`.
    unsafe { out.set_len(out.len() + n) };
    Ok(n)
}

/// `statfs` `f_type` of tmpfs (Linux `TMPFS_MAGIC`, also `/dev/shm`).
const TMPFS_MAGIC: i64 = 0x0102_1994;
/// `statfs` `f_type` of ramfs (Linux `RAMFS_MAGIC`).
const RAMFS_MAGIC: i64 = 0x8584_58f6;

/// Whether the file system of `fd` keeps its files in memory (tmpfs, ramfs). A failed
/// `statfs` answers false: the export is then treated as on a disk, whose calls that may
/// sleep run on the blocking pool.
pub fn memory_backed(fd: impl AsFd) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|st| {
        #[allow(clippy::unnecessary_cast)] // `f_type`'s type differs between targets
        let kind = st.f_type as i64;
        kind == TMPFS_MAGIC || kind == RAMFS_MAGIC
    })
}

/// `preadv2(RWF_NOWAIT)` into `spare`: reads only what the page cache holds now and never
/// sleeps on the disk. `EAGAIN` when the first page is not cached; a short count when a
/// later one is not (or at the end of the file).
pub fn pread_nowait(
    fd: impl AsFd,
    spare: &mut [std::mem::MaybeUninit<u8>],
    offset: u64,
) -> Result<usize, Errno> {
    let offset = libc::off_t::try_from(offset).map_err(|_| Errno::INVAL)?;
    let iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast::<libc::c_void>(),
        iov_len: spare.len(),
    };
    // SAFETY: `iov` describes `spare`, writable memory we borrow mutably for the whole
    // call (the kernel only writes into it, and uninitialised bytes may be written); the
    // iovec itself lives across the call and is only read.
    let n = unsafe { libc::preadv2(fd.as_fd().as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
    usize::try_from(n)
        .map_err(|_| Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO))
}
