//! vfs ⇄ NFSv4 wire types: the one `FsError` → `nfsstat4` mapping, and a file's
//! attributes as an NFSv4 attribute set.

use gtime::Timestamp;
use nfs4::attr::{change_type, Fattr, FsLocations, FH4_PERSISTENT};
use nfs4::ops::NfsFtype4;
use nfs4::types::{Bitmap4, Fsid4, NfsFh4, Nfstime4, Specdata4};
use nfs4::Nfsstat4;
use vfs::{Attr, FileType, FsError, FsProperties, FsStat};

/// The status of a failed vfs call. Every variant maps; `NotSync` (an NFSv3 SETATTR
/// guard) has no v4 meaning and is `NFS4ERR_NOT_SAME`, `Jukebox` is `NFS4ERR_DELAY`.
#[must_use]
pub fn status_of(e: FsError) -> Nfsstat4 {
    match e {
        FsError::Perm => Nfsstat4::Perm,
        FsError::NoEnt => Nfsstat4::Noent,
        FsError::Io => Nfsstat4::Io,
        FsError::NxIo => Nfsstat4::Nxio,
        FsError::Access => Nfsstat4::Access,
        FsError::Exist => Nfsstat4::Exist,
        FsError::XDev => Nfsstat4::Xdev,
        FsError::NoDev => Nfsstat4::Nxio,
        FsError::NotDir => Nfsstat4::Notdir,
        FsError::IsDir => Nfsstat4::Isdir,
        FsError::Inval => Nfsstat4::Inval,
        FsError::FBig => Nfsstat4::Fbig,
        FsError::NoSpc => Nfsstat4::Nospc,
        FsError::RoFs => Nfsstat4::Rofs,
        FsError::MLink => Nfsstat4::Mlink,
        FsError::NameTooLong => Nfsstat4::Nametoolong,
        FsError::NotEmpty => Nfsstat4::Notempty,
        FsError::DQuot => Nfsstat4::Dquot,
        FsError::Stale => Nfsstat4::Stale,
        FsError::BadHandle => Nfsstat4::Badhandle,
        FsError::BadCookie => Nfsstat4::BadCookie,
        FsError::NotSupp => Nfsstat4::Notsupp,
        FsError::TooSmall => Nfsstat4::Toosmall,
        FsError::NotSync => Nfsstat4::NotSame,
        FsError::ServerFault => Nfsstat4::Serverfault,
        // A COMPOUND runs where it may block (see `compound::run`), so its calls never
        // answer this; if one did, "try again later" is what it means.
        FsError::WouldBlock => Nfsstat4::Delay,
        FsError::Jukebox => Nfsstat4::Delay,
    }
}

#[must_use]
pub fn ftype(t: FileType) -> NfsFtype4 {
    match t {
        FileType::Regular => NfsFtype4::Reg,
        FileType::Directory => NfsFtype4::Dir,
        FileType::BlockDevice => NfsFtype4::Blk,
        FileType::CharDevice => NfsFtype4::Chr,
        FileType::Symlink => NfsFtype4::Lnk,
        FileType::Socket => NfsFtype4::Sock,
        FileType::Fifo => NfsFtype4::Fifo,
    }
}

#[must_use]
pub fn nfstime(t: Timestamp) -> Nfstime4 {
    Nfstime4 {
        seconds: t.seconds,
        nseconds: t.nanos,
    }
}

/// The change attribute: the ctime as seed 000's multigrain clock stamped it, in
/// nanoseconds. An observed file gets a fine-grained stamp on its next change, so two
/// changes a client could tell apart never share a value.
#[must_use]
pub fn change_of(attr: &Attr) -> u64 {
    attr.ctime.as_nanos()
}

/// The attributes granary reports for a file system whose backend clones (`clone`
/// true: `clone_blksize` too) or not. `supported_attrs` lists exactly these.
#[must_use]
pub fn supported(clone: bool) -> Bitmap4 {
    let clone_bit = nfs4::attr::num::CLONE_BLKSIZE;
    let mut all = Bitmap4::default();
    for bit in Fattr::known().iter().filter(|&b| clone || b != clone_bit) {
        all.set(bit);
    }
    // Settable-only attributes are supported (SETATTR takes them) but never reported.
    all.set(nfs4::attr::num::TIME_ACCESS_SET);
    all.set(nfs4::attr::num::TIME_MODIFY_SET);
    all
}

/// The attributes SETATTR and OPEN/CREATE accept.
#[must_use]
pub fn settable() -> Bitmap4 {
    use nfs4::attr::num;
    Bitmap4::from_bits(&[
        num::SIZE,
        num::MODE,
        num::OWNER,
        num::OWNER_GROUP,
        num::TIME_ACCESS_SET,
        num::TIME_MODIFY_SET,
    ])
}

/// What GETATTR and READDIR need besides the file's own attributes.
pub struct Context<'a> {
    pub fh: &'a NfsFh4,
    pub props: FsProperties,
    pub stat: Option<FsStat>,
    pub lease_secs: u32,
    pub max_io_bytes: u32,
    /// How owners and groups are named (`crate::idmap`).
    pub idmap: &'a crate::idmap::Idmap,
    /// The alignment of CLONE on this file system, when its backend clones.
    pub clone_blksize: Option<u32>,
    /// The fileid this file is mounted on (differs from `attr.fileid` only at an export
    /// root seen from the pseudo file system).
    pub mounted_on_fileid: u64,
}

/// Every attribute of `attr` (and `cx`) in `want` that granary reports. The values that
/// cost an allocation (bitmaps, names, the handle) are made only when `want` asks for
/// them: every GETATTR of a Linux client comes here, and few ask for those.
#[must_use]
pub fn fattr(attr: &Attr, want: &Bitmap4, cx: &Context<'_>) -> Fattr {
    use nfs4::attr::num;
    let io = u64::from(cx.max_io_bytes);
    let stat = cx.stat.unwrap_or_default();
    let wants = |bit: u32| want.contains(bit);
    let mut f = Fattr {
        supported_attrs: wants(num::SUPPORTED_ATTRS).then(|| supported(cx.clone_blksize.is_some())),
        ftype: Some(ftype(attr.file_type)),
        fh_expire_type: Some(FH4_PERSISTENT),
        change: Some(change_of(attr)),
        size: Some(attr.size_bytes),
        link_support: Some(cx.props.supports_hard_links),
        symlink_support: Some(cx.props.supports_symlinks),
        named_attr: Some(false),
        fsid: Some(Fsid4 {
            major: attr.fsid,
            minor: 0,
        }),
        unique_handles: Some(true),
        lease_time: Some(cx.lease_secs),
        rdattr_error: Some(Nfsstat4::Ok),
        aclsupport: Some(0),
        cansettime: Some(true),
        case_insensitive: Some(cx.props.case_insensitive),
        case_preserving: Some(true),
        chown_restricted: Some(true),
        filehandle: wants(num::FILEHANDLE).then(|| cx.fh.clone()),
        fileid: Some(attr.fileid.0),
        files_avail: Some(stat.avail_files),
        files_free: Some(stat.free_files),
        files_total: Some(stat.total_files),
        fs_locations: wants(num::FS_LOCATIONS).then(FsLocations::default),
        homogeneous: Some(true),
        maxfilesize: Some(cx.props.max_file_size),
        maxlink: Some(cx.props.max_links),
        maxname: Some(cx.props.max_name_bytes),
        maxread: Some(io),
        maxwrite: Some(io),
        mode: Some(attr.mode & 0o7777),
        no_trunc: Some(true),
        numlinks: Some(attr.nlink),
        owner: wants(num::OWNER).then(|| cx.idmap.user_name(attr.uid)),
        owner_group: wants(num::OWNER_GROUP).then(|| cx.idmap.group_name(attr.gid)),
        rawdev: Some(Specdata4 {
            specdata1: attr.rdev.major,
            specdata2: attr.rdev.minor,
        }),
        space_avail: Some(stat.avail_bytes),
        space_free: Some(stat.free_bytes),
        space_total: Some(stat.total_bytes),
        space_used: Some(attr.used_bytes),
        time_access: Some(nfstime(attr.atime)),
        time_access_set: None,
        time_create: None,
        time_delta: Some(Nfstime4 {
            seconds: 0,
            nseconds: cx.props.time_granularity_ns.max(1),
        }),
        time_metadata: Some(nfstime(attr.ctime)),
        time_modify: Some(nfstime(attr.mtime)),
        time_modify_set: None,
        mounted_on_fileid: Some(cx.mounted_on_fileid),
        suppattr_exclcreat: wants(num::SUPPATTR_EXCLCREAT).then(settable),
        clone_blksize: cx.clone_blksize,
        change_attr_type: Some(change_type::TIME_METADATA),
        xattr_support: Some(false),
    };
    f.retain(want);
    f
}
