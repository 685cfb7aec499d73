//! The closed, errno-like error family every backend returns.

/// Why a file-system operation failed. Protocol crates map each variant to their status
/// code in exactly one function (`nfsd::nfs3::status_of`).
///
/// The enum is closed (not `#[non_exhaustive]`): every protocol maps each variant in an
/// exhaustive `match` with no wildcard arm, so adding a variant is a compile error at every
/// mapping until each protocol decides its status, rather than a silent `SERVERFAULT`.
///
/// "Permanent" means retrying the same operation fails the same way until something else
/// changes the file system; "transient" means a retry may succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum FsError {
    /// Not the owner, or not privileged (EPERM). Permanent.
    #[error("operation not permitted")]
    Perm,
    /// No such file or directory (ENOENT). Permanent.
    #[error("no such file or directory")]
    NoEnt,
    /// Hard I/O error in the backend (EIO). May be transient; the client sees it as fatal.
    #[error("I/O error")]
    Io,
    /// No such device or address (ENXIO). Permanent.
    #[error("no such device or address")]
    NxIo,
    /// Permission denied by mode bits or export options (EACCES). Permanent.
    #[error("permission denied")]
    Access,
    /// The name already exists (EEXIST). Permanent.
    #[error("file exists")]
    Exist,
    /// Cross-device link or rename (EXDEV). Permanent.
    #[error("cross-device link")]
    XDev,
    /// No such device (ENODEV). Permanent.
    #[error("no such device")]
    NoDev,
    /// A directory was required (ENOTDIR). Permanent.
    #[error("not a directory")]
    NotDir,
    /// A non-directory was required (EISDIR). Permanent.
    #[error("is a directory")]
    IsDir,
    /// An argument is invalid: bad name, bad type, bad offset (EINVAL). Permanent.
    #[error("invalid argument")]
    Inval,
    /// The file would exceed the largest size the backend supports (EFBIG). Permanent.
    #[error("file too large")]
    FBig,
    /// The backend is out of space, e.g. the mem size cap (ENOSPC). Transient.
    #[error("no space left on device")]
    NoSpc,
    /// The export or backend is read-only (EROFS). Permanent.
    #[error("read-only file system")]
    RoFs,
    /// Too many hard links (EMLINK). Permanent.
    #[error("too many links")]
    MLink,
    /// A name component is longer than `limits::MAX_NAME_BYTES` (ENAMETOOLONG). Permanent.
    #[error("file name too long")]
    NameTooLong,
    /// Directory not empty (ENOTEMPTY). Permanent.
    #[error("directory not empty")]
    NotEmpty,
    /// Quota exceeded (EDQUOT). Transient.
    #[error("quota exceeded")]
    DQuot,
    /// The file a handle names no longer exists (ESTALE). Permanent for that handle.
    #[error("stale file handle")]
    Stale,
    /// The handle is malformed or forged. Permanent.
    #[error("bad file handle")]
    BadHandle,
    /// A readdir cookie or cookie verifier is no longer valid. Permanent.
    #[error("bad readdir cookie")]
    BadCookie,
    /// The operation is not supported by this backend. Permanent.
    #[error("operation not supported")]
    NotSupp,
    /// A reply buffer is too small for even one entry. Permanent for that size.
    #[error("buffer too small")]
    TooSmall,
    /// A SETATTR guard (ctime) did not match. Permanent for that guard.
    #[error("guard mismatch")]
    NotSync,
    /// The backend failed in a way that is its own bug. Permanent.
    #[error("server fault")]
    ServerFault,
    /// The backend is temporarily unable to serve; retry later. Transient.
    #[error("try again later")]
    Jukebox,
    /// The call would block (sleep on the disk or on a decode job) and the calling thread
    /// may not (`sync::blocking::allowed` is false: a network worker's event loop).
    /// Nothing was changed; the server runs the same call again on a thread that may
    /// block, so a client never sees it. Only `read_into`, `write`, `commit`,
    /// `setattr` and the NFSv4.2 calls (`seek`, `allocate`, `deallocate`, `copy_range`,
    /// `clone_range`) return it, except on a backend whose `remote()` is true (every
    /// call of the object backend may). Transient.
    #[error("would block")]
    WouldBlock,
}

/// Result alias used across the vfs seam.
pub type FsResult<T> = Result<T, FsError>;
