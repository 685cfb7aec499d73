//! File attributes (RFC 8881 section 5, RFC 7862 section 12): the attribute numbers and
//! [`Fattr`], a typed set of attribute values that packs into and unpacks from the
//! `attrlist4` of an [`Fattr4`] in attribute-number order.
//!
//! [`Fattr`] holds the attributes granary can report or set; every other attribute is
//! unknown to it: packing never emits one, and unpacking a mask that names one fails with
//! [`AttrError::NotSupported`] (the server's `NFS4ERR_ATTRNOTSUPP`).

use bytes::Bytes;
use xdr::{Decode, DecodeError, Decoder, Encode, Encoder};

use crate::ops::NfsFtype4;
use crate::types::{
    AttrList4, Bitmap4, Fattr4, Fsid4, NfsFh4, Nfsstat4, Nfstime4, Settime4, Specdata4, Utf8Str,
};

/// Attribute numbers (`FATTR4_*`).
pub mod num {
    pub const SUPPORTED_ATTRS: u32 = 0;
    pub const TYPE: u32 = 1;
    pub const FH_EXPIRE_TYPE: u32 = 2;
    pub const CHANGE: u32 = 3;
    pub const SIZE: u32 = 4;
    pub const LINK_SUPPORT: u32 = 5;
    pub const SYMLINK_SUPPORT: u32 = 6;
    pub const NAMED_ATTR: u32 = 7;
    pub const FSID: u32 = 8;
    pub const UNIQUE_HANDLES: u32 = 9;
    pub const LEASE_TIME: u32 = 10;
    pub const RDATTR_ERROR: u32 = 11;
    pub const ACL: u32 = 12;
    pub const ACLSUPPORT: u32 = 13;
    pub const ARCHIVE: u32 = 14;
    pub const CANSETTIME: u32 = 15;
    pub const CASE_INSENSITIVE: u32 = 16;
    pub const CASE_PRESERVING: u32 = 17;
    pub const CHOWN_RESTRICTED: u32 = 18;
    pub const FILEHANDLE: u32 = 19;
    pub const FILEID: u32 = 20;
    pub const FILES_AVAIL: u32 = 21;
    pub const FILES_FREE: u32 = 22;
    pub const FILES_TOTAL: u32 = 23;
    pub const FS_LOCATIONS: u32 = 24;
    pub const HIDDEN: u32 = 25;
    pub const HOMOGENEOUS: u32 = 26;
    pub const MAXFILESIZE: u32 = 27;
    pub const MAXLINK: u32 = 28;
    pub const MAXNAME: u32 = 29;
    pub const MAXREAD: u32 = 30;
    pub const MAXWRITE: u32 = 31;
    pub const MIMETYPE: u32 = 32;
    pub const MODE: u32 = 33;
    pub const NO_TRUNC: u32 = 34;
    pub const NUMLINKS: u32 = 35;
    pub const OWNER: u32 = 36;
    pub const OWNER_GROUP: u32 = 37;
    pub const QUOTA_AVAIL_HARD: u32 = 38;
    pub const QUOTA_AVAIL_SOFT: u32 = 39;
    pub const QUOTA_USED: u32 = 40;
    pub const RAWDEV: u32 = 41;
    pub const SPACE_AVAIL: u32 = 42;
    pub const SPACE_FREE: u32 = 43;
    pub const SPACE_TOTAL: u32 = 44;
    pub const SPACE_USED: u32 = 45;
    pub const SYSTEM: u32 = 46;
    pub const TIME_ACCESS: u32 = 47;
    pub const TIME_ACCESS_SET: u32 = 48;
    pub const TIME_BACKUP: u32 = 49;
    pub const TIME_CREATE: u32 = 50;
    pub const TIME_DELTA: u32 = 51;
    pub const TIME_METADATA: u32 = 52;
    pub const TIME_MODIFY: u32 = 53;
    pub const TIME_MODIFY_SET: u32 = 54;
    pub const MOUNTED_ON_FILEID: u32 = 55;
    pub const DIR_NOTIF_DELAY: u32 = 56;
    pub const DIRENT_NOTIF_DELAY: u32 = 57;
    pub const DACL: u32 = 58;
    pub const SACL: u32 = 59;
    pub const CHANGE_POLICY: u32 = 60;
    pub const FS_STATUS: u32 = 61;
    pub const FS_LAYOUT_TYPES: u32 = 62;
    pub const LAYOUT_HINT: u32 = 63;
    pub const LAYOUT_TYPES: u32 = 64;
    pub const LAYOUT_BLKSIZE: u32 = 65;
    pub const LAYOUT_ALIGNMENT: u32 = 66;
    pub const FS_LOCATIONS_INFO: u32 = 67;
    pub const MDSTHRESHOLD: u32 = 68;
    pub const RETENTION_GET: u32 = 69;
    pub const RETENTION_SET: u32 = 70;
    pub const RETENTEVT_GET: u32 = 71;
    pub const RETENTEVT_SET: u32 = 72;
    pub const RETENTION_HOLD: u32 = 73;
    pub const MODE_SET_MASKED: u32 = 74;
    pub const SUPPATTR_EXCLCREAT: u32 = 75;
    pub const FS_CHARSET_CAP: u32 = 76;
    pub const CLONE_BLKSIZE: u32 = 77;
    pub const SPACE_FREED: u32 = 78;
    pub const CHANGE_ATTR_TYPE: u32 = 79;
    pub const SEC_LABEL: u32 = 80;
    pub const XATTR_SUPPORT: u32 = 82;
}

/// `fh_expire_type` value: handles persist (granary's are signed and survive restarts).
pub const FH4_PERSISTENT: u32 = 0;

/// `change_attr_type` values.
pub mod change_type {
    pub const MONOTONIC_INCR: u32 = 0;
    pub const VERSION_COUNTER: u32 = 1;
    pub const VERSION_COUNTER_NOPNFS: u32 = 2;
    pub const TIME_METADATA: u32 = 3;
    pub const UNDEFINED: u32 = 4;
}

/// Why an `fattr4` could not be unpacked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttrError {
    /// The mask names an attribute [`Fattr`] does not hold (`NFS4ERR_ATTRNOTSUPP`).
    NotSupported(u32),
    /// The values do not match the mask (`NFS4ERR_BADXDR`).
    Xdr(DecodeError),
    /// Bytes were left after the last value (`NFS4ERR_BADXDR`).
    Trailing(usize),
}

impl AttrError {
    /// The status a server answers.
    #[must_use]
    pub fn status(&self) -> Nfsstat4 {
        match self {
            Self::NotSupported(_) => Nfsstat4::Attrnotsupp,
            Self::Xdr(_) | Self::Trailing(_) => Nfsstat4::Badxdr,
        }
    }
}

impl From<DecodeError> for AttrError {
    fn from(e: DecodeError) -> Self {
        Self::Xdr(e)
    }
}

/// Declares [`Fattr`]: one optional field per attribute, with its number and XDR type,
/// in increasing attribute-number order (the order values are packed in).
macro_rules! fattr {
    ($( $(#[$m:meta])* $field:ident : $ty:ty = $num:path ),* $(,)?) => {
        /// A set of attribute values; `None` is "not in the set".
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct Fattr {
            $( $(#[$m])* pub $field: Option<$ty>, )*
        }

        impl Fattr {
            /// The attribute numbers this type can hold.
            #[must_use]
            pub fn known() -> Bitmap4 {
                Bitmap4::from_bits(&[$($num),*])
            }

            /// The mask of the attributes present.
            #[must_use]
            pub fn mask(&self) -> Bitmap4 {
                let mut b = Bitmap4::default();
                $( if self.$field.is_some() { b.set($num); } )*
                b
            }

            /// Removes every attribute not in `keep`.
            pub fn retain(&mut self, keep: &Bitmap4) {
                $( if !keep.contains($num) { self.$field = None; } )*
            }

            /// Packs the values present, in attribute-number order.
            #[must_use]
            pub fn to_fattr4(&self) -> Fattr4 {
                let mut e = Encoder::new();
                $( if let Some(v) = &self.$field { Encode::encode(v, &mut e); } )*
                Fattr4 { attrmask: self.mask(), attr_vals: AttrList4(e.into_bytes()) }
            }

            /// Unpacks `f`'s values. Fails on an attribute this type does not hold, on
            /// values that do not match the mask, and on trailing bytes.
            ///
            /// # Errors
            /// [`AttrError`], whose [`AttrError::status`] is the server's answer.
            pub fn from_fattr4(f: &Fattr4) -> Result<Self, AttrError> {
                let known = Self::known();
                if let Some(bit) = f.attrmask.iter().find(|b| !known.contains(*b)) {
                    return Err(AttrError::NotSupported(bit));
                }
                let mut d = Decoder::new(f.attr_vals.0.clone());
                let mut out = Self::default();
                $( if f.attrmask.contains($num) { out.$field = Some(<$ty>::decode(&mut d)?); } )*
                if d.remaining() != 0 {
                    return Err(AttrError::Trailing(d.remaining()));
                }
                Ok(out)
            }
        }
    };
}

fattr! {
    supported_attrs: Bitmap4 = num::SUPPORTED_ATTRS,
    ftype: NfsFtype4 = num::TYPE,
    fh_expire_type: u32 = num::FH_EXPIRE_TYPE,
    /// The change attribute: granary's is the ctime as seed 000's multigrain clock
    /// stamps it, as nanoseconds.
    change: u64 = num::CHANGE,
    size: u64 = num::SIZE,
    link_support: bool = num::LINK_SUPPORT,
    symlink_support: bool = num::SYMLINK_SUPPORT,
    named_attr: bool = num::NAMED_ATTR,
    fsid: Fsid4 = num::FSID,
    unique_handles: bool = num::UNIQUE_HANDLES,
    lease_time: u32 = num::LEASE_TIME,
    rdattr_error: Nfsstat4 = num::RDATTR_ERROR,
    aclsupport: u32 = num::ACLSUPPORT,
    cansettime: bool = num::CANSETTIME,
    case_insensitive: bool = num::CASE_INSENSITIVE,
    case_preserving: bool = num::CASE_PRESERVING,
    chown_restricted: bool = num::CHOWN_RESTRICTED,
    filehandle: NfsFh4 = num::FILEHANDLE,
    fileid: u64 = num::FILEID,
    files_avail: u64 = num::FILES_AVAIL,
    files_free: u64 = num::FILES_FREE,
    files_total: u64 = num::FILES_TOTAL,
    /// `fs_locations4` of a file system that has not moved: an empty root path and no
    /// locations. Held as its raw encoding.
    fs_locations: FsLocations = num::FS_LOCATIONS,
    homogeneous: bool = num::HOMOGENEOUS,
    maxfilesize: u64 = num::MAXFILESIZE,
    maxlink: u32 = num::MAXLINK,
    maxname: u32 = num::MAXNAME,
    maxread: u64 = num::MAXREAD,
    maxwrite: u64 = num::MAXWRITE,
    mode: u32 = num::MODE,
    no_trunc: bool = num::NO_TRUNC,
    numlinks: u32 = num::NUMLINKS,
    owner: Utf8Str = num::OWNER,
    owner_group: Utf8Str = num::OWNER_GROUP,
    rawdev: Specdata4 = num::RAWDEV,
    space_avail: u64 = num::SPACE_AVAIL,
    space_free: u64 = num::SPACE_FREE,
    space_total: u64 = num::SPACE_TOTAL,
    space_used: u64 = num::SPACE_USED,
    time_access: Nfstime4 = num::TIME_ACCESS,
    time_access_set: Settime4 = num::TIME_ACCESS_SET,
    time_create: Nfstime4 = num::TIME_CREATE,
    time_delta: Nfstime4 = num::TIME_DELTA,
    time_metadata: Nfstime4 = num::TIME_METADATA,
    time_modify: Nfstime4 = num::TIME_MODIFY,
    time_modify_set: Settime4 = num::TIME_MODIFY_SET,
    mounted_on_fileid: u64 = num::MOUNTED_ON_FILEID,
    suppattr_exclcreat: Bitmap4 = num::SUPPATTR_EXCLCREAT,
    clone_blksize: u32 = num::CLONE_BLKSIZE,
    change_attr_type: u32 = num::CHANGE_ATTR_TYPE,
    xattr_support: bool = num::XATTR_SUPPORT,
}

/// `fs_locations4` for a file system that lives here: `fs_root` and the location list
/// as given (granary sends both empty; clients only read it after NFS4ERR_MOVED).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FsLocations {
    /// The components of `fs_root`.
    pub fs_root: Vec<Utf8Str>,
    /// How many `fs_location4` entries follow; granary sends none and refuses to decode
    /// any (a client never sets this attribute).
    pub locations: u32,
}

impl Encode for FsLocations {
    fn encode(&self, e: &mut Encoder) {
        xdr::encode_array(&self.fs_root, e);
        e.u32(0);
    }
}

impl Decode for FsLocations {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let fs_root = xdr::decode_array(d, "pathname4", 256)?;
        let locations = d.length("fs_locations4.locations (granary reads none)", 0)?;
        Ok(Self { fs_root, locations })
    }
}

/// Packs a list of raw attribute values already encoded by the caller (used by servers
/// that encode values straight into the reply).
#[must_use]
pub fn fattr4_from_parts(attrmask: Bitmap4, vals: Bytes) -> Fattr4 {
    Fattr4 {
        attrmask,
        attr_vals: AttrList4(vals),
    }
}
