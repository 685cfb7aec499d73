//! Conversions between vfs types and NFSv3 wire types, and the one place that maps
//! `FsError` to `nfsstat3`.

use gtime::Timestamp;
use nfs3::nfs::{
    Fattr3, Ftype3, Nfsstat3, Nfstime3, PostOpAttr, PreOpAttr, Sattr3, SetTime as WireSetTime,
    Specdata3, StableHow, WccAttr, WccData,
};
use vfs::{Attr, DeviceNumber, Export, FileId, FileType, FsError, SetAttr, SetTime, Stability};

/// The NFSv3 status for a vfs error. Every `FsError` maps here and nowhere else.
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
        _ => Nfsstat3::ServerFault,
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

/// Attributes after an operation, or none if the file is gone.
#[must_use]
pub fn post_op(export: &Export, id: FileId) -> PostOpAttr {
    PostOpAttr(export.getattr(id).ok().map(|a| fattr(&a)))
}

/// Attributes before an operation, as weak cache consistency wants them.
#[must_use]
pub fn pre_op(export: &Export, id: FileId) -> PreOpAttr {
    PreOpAttr(export.getattr(id).ok().map(|a| wcc_attr(&a)))
}

/// Before attributes and the current after attributes of `id`.
#[must_use]
pub fn wcc(export: &Export, id: FileId, before: PreOpAttr) -> WccData {
    WccData {
        before,
        after: post_op(export, id),
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
