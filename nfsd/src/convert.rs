//! Conversions between vfs types and NFSv3 wire types, and the one place that maps
//! `FsError` to `nfsstat3`.

use gtime::Timestamp;
use nfs3::nfs::{
    Fattr3, Ftype3, Nfsstat3, Nfstime3, PostOpAttr, PreOpAttr, Sattr3, SetTime as WireSetTime,
    Specdata3, StableHow, WccAttr, WccData,
};
use vfs::{Attr, Change, DeviceNumber, FileType, FsError, SetAttr, SetTime, Stability};

use crate::state::Target;

/// The NFSv3 status for a vfs error. Every `FsError` maps here and nowhere else; the
/// match has no wildcard arm, so a new `FsError` variant does not compile until it is
/// mapped here.
#[must_use]
pub fn status_of(e: FsError) -> Nfsstat3 {
    match e {
        FsError::Perm => Nfsstat3::Perm,
        FsError::NoEnt => Nfsstat3::NoEnt,
        FsError::Io => Nfsstat3::Io,
        FsError::NxIo => Nfsstat3::NxIo,
        FsError::Access => Nfsstat3::Acces,
        FsError::Exist => Nfsstat3::Exist,
        FsError::XDev => Nfsstat3::XDev,
        FsError::NoDev => Nfsstat3::NoDev,
        FsError::NotDir => Nfsstat3::NotDir,
        FsError::IsDir => Nfsstat3::IsDir,
        FsError::Inval => Nfsstat3::Inval,
        FsError::FBig => Nfsstat3::FBig,
        FsError::NoSpc => Nfsstat3::NoSpc,
        FsError::RoFs => Nfsstat3::RoFs,
        FsError::MLink => Nfsstat3::MLink,
        FsError::NameTooLong => Nfsstat3::NameTooLong,
        FsError::NotEmpty => Nfsstat3::NotEmpty,
        FsError::DQuot => Nfsstat3::DQuot,
        FsError::Stale => Nfsstat3::Stale,
        FsError::BadHandle => Nfsstat3::BadHandle,
        FsError::BadCookie => Nfsstat3::BadCookie,
        FsError::NotSupp => Nfsstat3::NotSupp,
        FsError::TooSmall => Nfsstat3::TooSmall,
        FsError::NotSync => Nfsstat3::NotSync,
        FsError::ServerFault => Nfsstat3::ServerFault,
        FsError::Jukebox => Nfsstat3::Jukebox,
        // Lifted out by `deferred` before a reply is built; if one ever slipped through,
        // "try again later" is what it means.
        FsError::WouldBlock => Nfsstat3::Jukebox,
    }
}

/// Lifts [`FsError::WouldBlock`] out of a backend result: the procedure returns
/// `ProcError::WouldBlock` (nothing was done on this event-loop thread; the connection
/// runs the call again on its worker's blocking pool), and any other result is the reply's.
///
/// # Errors
/// `ProcError::WouldBlock` for `Err(FsError::WouldBlock)`.
pub fn deferred<T>(r: vfs::FsResult<T>) -> Result<vfs::FsResult<T>, rpc::ProcError> {
    match r {
        Err(FsError::WouldBlock) => Err(rpc::ProcError::WouldBlock),
        other => Ok(other),
    }
}

/// NFSv3 times are unsigned 32-bit seconds: times before 1970 clamp to 0, after 2106 to
/// the maximum.
#[must_use]
pub fn nfstime(t: Timestamp) -> Nfstime3 {
    Nfstime3 {
        seconds: u32::try_from(t.seconds.max(0)).unwrap_or(u32::MAX),
        nseconds: t.nanos,
    }
}

/// A client time; nanoseconds past a second are clamped (the RFC does not allow them).
#[must_use]
pub fn timestamp(t: Nfstime3) -> Timestamp {
    Timestamp {
        seconds: i64::from(t.seconds),
        nanos: t.nseconds.min(999_999_999),
    }
}

#[must_use]
pub fn ftype(t: FileType) -> Ftype3 {
    match t {
        FileType::Regular => Ftype3::Reg,
        FileType::Directory => Ftype3::Dir,
        FileType::BlockDevice => Ftype3::Blk,
        FileType::CharDevice => Ftype3::Chr,
        FileType::Symlink => Ftype3::Lnk,
        FileType::Socket => Ftype3::Sock,
        FileType::Fifo => Ftype3::Fifo,
    }
}

#[must_use]
pub fn fattr(a: &Attr) -> Fattr3 {
    Fattr3 {
        ftype: ftype(a.file_type),
        mode: a.mode & 0o7777,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        size: a.size_bytes,
        used: a.used_bytes,
        rdev: Specdata3 {
            specdata1: a.rdev.major,
            specdata2: a.rdev.minor,
        },
        fsid: a.fsid,
        fileid: a.fileid.0,
        atime: nfstime(a.atime),
        mtime: nfstime(a.mtime),
        ctime: nfstime(a.ctime),
    }
}

#[must_use]
pub fn wcc_attr(a: &Attr) -> WccAttr {
    WccAttr {
        size: a.size_bytes,
        mtime: nfstime(a.mtime),
        ctime: nfstime(a.ctime),
    }
}

/// Attributes after an operation, or none if the file is gone: for replies of failed
/// calls (one more backend call) and of calls whose results carry none.
#[must_use]
pub fn post_op(t: &Target<'_>) -> PostOpAttr {
    PostOpAttr(t.export.getattr(t.id).ok().map(|a| fattr(&a)))
}

/// The weak cache consistency data of a change, as the backend took it.
#[must_use]
pub fn wcc(change: &Change) -> WccData {
    WccData {
        before: PreOpAttr(change.before.map(|b| WccAttr {
            size: b.size_bytes,
            mtime: nfstime(b.mtime),
            ctime: nfstime(b.ctime),
        })),
        after: PostOpAttr(Some(fattr(&change.after))),
    }
}

/// The weak cache consistency data of a failed call, from one getattr after it: the
/// attributes as both "before" and "after". A failed call changed nothing, so this pair
/// brackets an instant with no change of its own, which is true whatever other clients
/// did: a client whose cache matches "before" is current, one whose cache does not
/// revalidates.
#[must_use]
pub fn failed_wcc(t: &Target<'_>) -> WccData {
    let after = t.export.getattr(t.id).ok();
    WccData {
        before: PreOpAttr(after.as_ref().map(wcc_attr)),
        after: PostOpAttr(after.as_ref().map(fattr)),
    }
}

#[must_use]
pub fn set_attr(s: &Sattr3) -> SetAttr {
    let time = |t: WireSetTime| match t {
        WireSetTime::DontChange => SetTime::DontChange,
        WireSetTime::SetToServerTime => SetTime::ServerTime,
        WireSetTime::SetToClientTime(t) => SetTime::Client(timestamp(t)),
    };
    SetAttr {
        mode: s.mode.map(|m| m & 0o7777),
        uid: s.uid,
        gid: s.gid,
        size_bytes: s.size,
        atime: time(s.atime),
        mtime: time(s.mtime),
    }
}

#[must_use]
pub fn stability(s: StableHow) -> Stability {
    match s {
        StableHow::Unstable => Stability::Unstable,
        StableHow::DataSync => Stability::DataSync,
        StableHow::FileSync => Stability::FileSync,
    }
}

#[must_use]
pub fn stable_how(s: Stability) -> StableHow {
    match s {
        Stability::Unstable => StableHow::Unstable,
        Stability::DataSync => StableHow::DataSync,
        Stability::FileSync => StableHow::FileSync,
    }
}

#[must_use]
pub fn device(spec: Specdata3) -> DeviceNumber {
    DeviceNumber {
        major: spec.specdata1,
        minor: spec.specdata2,
    }
}
