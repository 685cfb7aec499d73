//! The one place host errnos become [`FsError`]s.

use rustix::io::Errno;
use vfs::FsError;

/// Maps an errno from a host syscall to the vfs error family, faithfully where a variant
/// exists. `EXDEV` is kept (callers that resolve names turn an escape attempt into
/// `Access` themselves); an errno with no counterpart is `Io` and logged once per call.
#[must_use]
pub fn fs_err(e: Errno) -> FsError {
    match e {
        Errno::PERM => FsError::Perm,
        Errno::NOENT => FsError::NoEnt,
        Errno::IO => FsError::Io,
        Errno::NXIO => FsError::NxIo,
        Errno::ACCESS => FsError::Access,
        Errno::EXIST => FsError::Exist,
        Errno::XDEV => FsError::XDev,
        Errno::NODEV => FsError::NoDev,
        Errno::NOTDIR => FsError::NotDir,
        Errno::ISDIR => FsError::IsDir,
        Errno::INVAL => FsError::Inval,
        Errno::FBIG => FsError::FBig,
        Errno::NOSPC => FsError::NoSpc,
        Errno::ROFS => FsError::RoFs,
        Errno::MLINK => FsError::MLink,
        Errno::NAMETOOLONG => FsError::NameTooLong,
        Errno::NOTEMPTY => FsError::NotEmpty,
        Errno::DQUOT => FsError::DQuot,
        Errno::STALE => FsError::Stale,
        Errno::NOTSUP => FsError::NotSupp,
        Errno::AGAIN | Errno::BUSY | Errno::INTR | Errno::NOMEM | Errno::NFILE | Errno::MFILE => {
            FsError::Jukebox
        }
        // A symlink where the resolver refuses one, or a magic link: never followed.
        Errno::LOOP => FsError::Access,
        Errno::BADF | Errno::FAULT => {
            tracing::error!(errno = %e, "host backend misused a file descriptor");
            FsError::ServerFault
        }
        other => {
            tracing::warn!(errno = %other, "host errno without a vfs counterpart; reported as EIO");
            FsError::Io
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_clients_must_tell_apart_keep_their_meaning() {
        for (e, want) in [
            (Errno::NOSPC, FsError::NoSpc),
            (Errno::DQUOT, FsError::DQuot),
            (Errno::ROFS, FsError::RoFs),
            (Errno::IO, FsError::Io),
            (Errno::NAMETOOLONG, FsError::NameTooLong),
            (Errno::NOTEMPTY, FsError::NotEmpty),
            (Errno::STALE, FsError::Stale),
            (Errno::LOOP, FsError::Access),
        ] {
            assert_eq!(fs_err(e), want, "{e}");
        }
    }
}
