//! NFS version 3 (RFC 1813 sections 2 and 3): the data types and, for each of the 22
//! procedures, its arguments and results.
//!
//! Pattern (the same for every procedure `FOO`):
//!
//! - `FooArgs`: RFC `FOO3args`;
//! - `FooOk`: RFC `FOO3resok`; `FooFail`: RFC `FOO3resfail` ([`Void`] for GETATTR);
//! - `FooRes = Res3<FooOk, FooFail>`: RFC `FOO3res`, the union on [`Nfsstat3`].
//!
//! NULL is `NullArgs = Void`, `NullRes = Void`. RFC field names are kept, except that the
//! keyword `where` is spelled `where_` and `fattr3.type` is `ftype`. Structures whose XDR is
//! their fields in order use [`xdr_struct!`]; unions and bodies with zero-copy [`Bytes`]
//! are written by hand below them.
//!
//! READDIR and READDIRPLUS flatten `dirlist3` into their `Ok` body (`entries`, `eof`); the
//! entry lists travel as XDR linked lists. [`entry3_size`], [`entryplus3_size`] and the
//! `*_RESOK_FIXED_SIZE` constants give exact encoded sizes so the server can fill a reply
//! up to the client's `count` / `maxcount` without encoding twice.

use bytes::Bytes;
use xdr::{padded, xdr_enum, xdr_struct, Decode, DecodeError, Decoder, Encode, Encoder};

use crate::limits::{FHSIZE3, MAX_DATA, MAX_DIR_ENTRIES, MAX_NAME_WIRE, MAX_PATH_WIRE};
use xdr::{bad_discriminant, bounded_opaque, decode_list, encode_list, option_newtype};

// ---------------------------------------------------------------------------------------
// Basic data types (RFC 1813 section 2.5)
// ---------------------------------------------------------------------------------------

/// `cookie3`: a directory position, opaque to the client.
pub type Cookie3 = u64;
/// `cookieverf3`: validates cookies across READDIR calls.
pub type Cookieverf3 = [u8; 8];
/// `createverf3`: the client's token for an EXCLUSIVE CREATE.
pub type Createverf3 = [u8; 8];
/// `writeverf3`: changes when the server may have lost unstable writes (a reboot).
pub type Writeverf3 = [u8; 8];
/// `set_mode3`: `Some(mode)` sets the permission bits.
pub type SetMode3 = Option<u32>;
/// `set_uid3`.
pub type SetUid3 = Option<u32>;
/// `set_gid3`.
pub type SetGid3 = Option<u32>;
/// `set_size3`: `Some(size)` truncates or extends.
pub type SetSize3 = Option<u64>;

/// ACCESS3 bit: read data or list a directory.
pub const ACCESS3_READ: u32 = 0x0001;
/// ACCESS3 bit: look up a name in a directory.
pub const ACCESS3_LOOKUP: u32 = 0x0002;
/// ACCESS3 bit: rewrite existing data or directory entries.
pub const ACCESS3_MODIFY: u32 = 0x0004;
/// ACCESS3 bit: write new data or add directory entries.
pub const ACCESS3_EXTEND: u32 = 0x0008;
/// ACCESS3 bit: delete a directory entry.
pub const ACCESS3_DELETE: u32 = 0x0010;
/// ACCESS3 bit: execute a file (no meaning for directories).
pub const ACCESS3_EXECUTE: u32 = 0x0020;

/// FSINFO property: the file system supports hard links.
pub const FSF3_LINK: u32 = 0x0001;
/// FSINFO property: the file system supports symbolic links.
pub const FSF3_SYMLINK: u32 = 0x0002;
/// FSINFO property: PATHCONF is the same for every file.
pub const FSF3_HOMOGENEOUS: u32 = 0x0008;
/// FSINFO property: SETATTR can set times to a client-chosen value.
pub const FSF3_CANSETTIME: u32 = 0x0010;

/// An empty XDR body: the arguments and result of NULL, the failure body of GETATTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Void;

impl Encode for Void {
    fn encode(&self, _e: &mut Encoder) {}
}

impl Decode for Void {
    fn decode(_d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self)
    }
}

xdr_enum! {
    /// `nfsstat3`: the status that opens every result.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Nfsstat3 {
        /// `NFS3_OK`: success; the `resok` arm follows.
        Ok = 0,
        /// Not owner: the caller may not do this even with the right permissions.
        Perm = 1,
        /// No such file or directory.
        NoEnt = 2,
        /// A hard I/O error.
        Io = 5,
        /// No such device or address.
        NxIo = 6,
        /// Permission denied.
        Acces = 13,
        /// The file already exists.
        Exist = 17,
        /// A hard link across file systems.
        XDev = 18,
        /// No such device.
        NoDev = 19,
        /// Not a directory.
        NotDir = 20,
        /// Is a directory.
        IsDir = 21,
        /// Invalid argument or unsupported operation.
        Inval = 22,
        /// File too large.
        FBig = 27,
        /// No space left on device.
        NoSpc = 28,
        /// Read-only file system.
        RoFs = 30,
        /// Too many hard links.
        MLink = 31,
        /// A name is too long.
        NameTooLong = 63,
        /// Directory not empty.
        NotEmpty = 66,
        /// Quota exceeded.
        DQuot = 69,
        /// The handle no longer refers to a file.
        Stale = 70,
        /// Too many levels of remote in path.
        Remote = 71,
        /// The handle failed internal consistency checks.
        BadHandle = 10001,
        /// SETATTR guard mismatch.
        NotSync = 10002,
        /// READDIR cookie is stale.
        BadCookie = 10003,
        /// Operation not supported.
        NotSupp = 10004,
        /// Buffer or request is too small.
        TooSmall = 10005,
        /// A server error that maps to no other status.
        ServerFault = 10006,
        /// An object type the server does not support (MKNOD).
        BadType = 10007,
        /// The request was not finished in time; retry later (transient).
        Jukebox = 10008,
    }
}

xdr_enum! {
    /// `ftype3`: the type of a file.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Ftype3 {
        Reg = 1,
        Dir = 2,
        Blk = 3,
        Chr = 4,
        Lnk = 5,
        Sock = 6,
        Fifo = 7,
    }
}

bounded_opaque! {
    /// `nfs_fh3`: a file handle of at most [`FHSIZE3`] bytes. Zero bytes decode; the server
    /// rejects them as `NFS3ERR_BADHANDLE`.
    NfsFh3, "nfs_fh3", FHSIZE3, borrowed
}

bounded_opaque! {
    /// `filename3`: one path component, decoded up to [`MAX_NAME_WIRE`] bytes so that the
    /// server can answer overlong names with `NFS3ERR_NAMETOOLONG`.
    Filename3, "filename3", MAX_NAME_WIRE
}

bounded_opaque! {
    /// `nfspath3`: a symbolic link's target, at most [`MAX_PATH_WIRE`] bytes.
    NfsPath3, "nfspath3", MAX_PATH_WIRE
}

xdr_struct! {
    /// `nfstime3`: seconds and nanoseconds since the epoch.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Nfstime3 {
        pub seconds: u32,
        pub nseconds: u32,
    }
}

xdr_struct! {
    /// `specdata3`: major and minor device numbers.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Specdata3 {
        pub specdata1: u32,
        pub specdata2: u32,
    }
}

xdr_struct! {
    /// `fattr3`: a file's attributes ([`FATTR3_SIZE`] bytes on the wire).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Fattr3 {
        /// RFC `type`.
        pub ftype: Ftype3,
        pub mode: u32,
        pub nlink: u32,
        pub uid: u32,
        pub gid: u32,
        pub size: u64,
        pub used: u64,
        pub rdev: Specdata3,
        pub fsid: u64,
        pub fileid: u64,
        pub atime: Nfstime3,
        pub mtime: Nfstime3,
        pub ctime: Nfstime3,
    }
}

/// `post_op_attr`: attributes after the operation, if the server has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PostOpAttr(pub Option<Fattr3>);
option_newtype!(PostOpAttr, Fattr3);

xdr_struct! {
    /// `wcc_attr`: the attributes weak cache consistency compares.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct WccAttr {
        pub size: u64,
        pub mtime: Nfstime3,
        pub ctime: Nfstime3,
    }
}

/// `pre_op_attr`: attributes before the operation, if the server has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PreOpAttr(pub Option<WccAttr>);
option_newtype!(PreOpAttr, WccAttr);

xdr_struct! {
    /// `wcc_data`: before and after attributes of a modified object.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct WccData {
        pub before: PreOpAttr,
        pub after: PostOpAttr,
    }
}

/// `post_op_fh3`: the handle of a created object, if the server returns it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PostOpFh3(pub Option<NfsFh3>);
option_newtype!(PostOpFh3, NfsFh3);

/// `set_atime` / `set_mtime`: how SETATTR changes one timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SetTime {
    /// `DONT_CHANGE` (0).
    #[default]
    DontChange,
    /// `SET_TO_SERVER_TIME` (1).
    SetToServerTime,
    /// `SET_TO_CLIENT_TIME` (2), with the time.
    SetToClientTime(Nfstime3),
}

/// `set_atime`.
pub type SetAtime = SetTime;
/// `set_mtime`.
pub type SetMtime = SetTime;

impl Encode for SetTime {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::DontChange => e.u32(0),
            Self::SetToServerTime => e.u32(1),
            Self::SetToClientTime(t) => {
                e.u32(2);
                t.encode(e);
            }
        }
    }
}

impl Decode for SetTime {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.u32()? {
            0 => Ok(Self::DontChange),
            1 => Ok(Self::SetToServerTime),
            2 => Ok(Self::SetToClientTime(Nfstime3::decode(d)?)),
            other => Err(bad_discriminant("time_how", other)),
        }
    }
}

xdr_struct! {
    /// `sattr3`: attributes to set; the default changes nothing.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Sattr3 {
        pub mode: SetMode3,
        pub uid: SetUid3,
        pub gid: SetGid3,
        pub size: SetSize3,
        pub atime: SetAtime,
        pub mtime: SetMtime,
    }
}

xdr_struct! {
    /// `diropargs3`: a name in a directory.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct DirOpArgs3 {
        pub dir: NfsFh3,
        pub name: Filename3,
    }
}

xdr_enum! {
    /// `stable_how`: how durable a WRITE must be before the reply.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum StableHow {
        Unstable = 0,
        DataSync = 1,
        FileSync = 2,
    }
}

/// `createhow3`: the CREATE mode and its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CreateHow3 {
    /// `UNCHECKED` (0): create or truncate.
    Unchecked(Sattr3),
    /// `GUARDED` (1): fail with `NFS3ERR_EXIST` if the name exists.
    Guarded(Sattr3),
    /// `EXCLUSIVE` (2): idempotent creation keyed by the verifier.
    Exclusive(Createverf3),
}

impl Encode for CreateHow3 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::Unchecked(attrs) => {
                e.u32(0);
                attrs.encode(e);
            }
            Self::Guarded(attrs) => {
                e.u32(1);
                attrs.encode(e);
            }
            Self::Exclusive(verf) => {
                e.u32(2);
                verf.encode(e);
            }
        }
    }
}

impl Decode for CreateHow3 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.u32()? {
            0 => Ok(Self::Unchecked(Sattr3::decode(d)?)),
            1 => Ok(Self::Guarded(Sattr3::decode(d)?)),
            2 => Ok(Self::Exclusive(Createverf3::decode(d)?)),
            other => Err(bad_discriminant("createmode3", other)),
        }
    }
}

xdr_struct! {
    /// `devicedata3`: attributes and device numbers of a new device node.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct DeviceData3 {
        pub dev_attributes: Sattr3,
        pub spec: Specdata3,
    }
}

/// `mknoddata3`: the union on `ftype3` that MKNOD takes. The arms for regular files,
/// directories and symlinks are void; the server answers them with `NFS3ERR_BADTYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MknodData3 {
    Chr(DeviceData3),
    Blk(DeviceData3),
    Sock(Sattr3),
    Fifo(Sattr3),
    Reg,
    Dir,
    Lnk,
}

impl MknodData3 {
    /// The union's discriminant.
    #[must_use]
    pub fn ftype(&self) -> Ftype3 {
        match self {
            Self::Chr(_) => Ftype3::Chr,
            Self::Blk(_) => Ftype3::Blk,
            Self::Sock(_) => Ftype3::Sock,
            Self::Fifo(_) => Ftype3::Fifo,
            Self::Reg => Ftype3::Reg,
            Self::Dir => Ftype3::Dir,
            Self::Lnk => Ftype3::Lnk,
        }
    }
}

impl Encode for MknodData3 {
    fn encode(&self, e: &mut Encoder) {
        self.ftype().encode(e);
        match self {
            Self::Chr(dev) | Self::Blk(dev) => dev.encode(e),
            Self::Sock(attrs) | Self::Fifo(attrs) => attrs.encode(e),
            Self::Reg | Self::Dir | Self::Lnk => {}
        }
    }
}

impl Decode for MknodData3 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(match Ftype3::decode(d)? {
            Ftype3::Chr => Self::Chr(DeviceData3::decode(d)?),
            Ftype3::Blk => Self::Blk(DeviceData3::decode(d)?),
            Ftype3::Sock => Self::Sock(Sattr3::decode(d)?),
            Ftype3::Fifo => Self::Fifo(Sattr3::decode(d)?),
            Ftype3::Reg => Self::Reg,
            Ftype3::Dir => Self::Dir,
            Ftype3::Lnk => Self::Lnk,
        })
    }
}

/// `sattrguard3`: SETATTR proceeds only if the object's ctime equals this time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SattrGuard3(pub Option<Nfstime3>);
option_newtype!(SattrGuard3, Nfstime3);

// ---------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------

/// Every NFSv3 result: a union on [`Nfsstat3`] with a body for `NFS3_OK` and one for every
/// other status.
///
/// Encoding writes the status, then the body. `Fail` must never carry [`Nfsstat3::Ok`]
/// (the peer would decode the fail body as the ok body); decoding never produces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Res3<T, F> {
    Ok(T),
    Fail(Nfsstat3, F),
}

impl<T, F> Res3<T, F> {
    /// The status on the wire.
    #[must_use]
    pub fn status(&self) -> Nfsstat3 {
        match self {
            Self::Ok(_) => Nfsstat3::Ok,
            Self::Fail(status, _) => *status,
        }
    }
}

impl<T: Encode, F: Encode> Encode for Res3<T, F> {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::Ok(ok) => {
                Nfsstat3::Ok.encode(e);
                ok.encode(e);
            }
            Self::Fail(status, fail) => {
                debug_assert_ne!(*status, Nfsstat3::Ok, "a failed result with NFS3_OK");
                status.encode(e);
                fail.encode(e);
            }
        }
    }
}

impl<T: Decode, F: Decode> Decode for Res3<T, F> {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match Nfsstat3::decode(d)? {
            Nfsstat3::Ok => Ok(Self::Ok(T::decode(d)?)),
            status => Ok(Self::Fail(status, F::decode(d)?)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Procedure 0: NULL
// ---------------------------------------------------------------------------------------

pub type NullArgs = Void;
pub type NullRes = Void;

// ---------------------------------------------------------------------------------------
// Procedure 1: GETATTR
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct GetattrArgs {
        pub object: NfsFh3,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GetattrOk {
        pub obj_attributes: Fattr3,
    }
}

pub type GetattrFail = Void;
pub type GetattrRes = Res3<GetattrOk, GetattrFail>;

// ---------------------------------------------------------------------------------------
// Procedure 2: SETATTR
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct SetattrArgs {
        pub object: NfsFh3,
        pub new_attributes: Sattr3,
        pub guard: SattrGuard3,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct SetattrOk {
        pub obj_wcc: WccData,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct SetattrFail {
        pub obj_wcc: WccData,
    }
}

pub type SetattrRes = Res3<SetattrOk, SetattrFail>;

// ---------------------------------------------------------------------------------------
// Procedure 3: LOOKUP
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct LookupArgs {
        pub what: DirOpArgs3,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct LookupOk {
        pub object: NfsFh3,
        pub obj_attributes: PostOpAttr,
        pub dir_attributes: PostOpAttr,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct LookupFail {
        pub dir_attributes: PostOpAttr,
    }
}

pub type LookupRes = Res3<LookupOk, LookupFail>;

// ---------------------------------------------------------------------------------------
// Procedure 4: ACCESS
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct AccessArgs {
        pub object: NfsFh3,
        /// `ACCESS3_*` bits the client asks about.
        pub access: u32,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct AccessOk {
        pub obj_attributes: PostOpAttr,
        /// The subset of the requested `ACCESS3_*` bits that are granted.
        pub access: u32,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct AccessFail {
        pub obj_attributes: PostOpAttr,
    }
}

pub type AccessRes = Res3<AccessOk, AccessFail>;

// ---------------------------------------------------------------------------------------
// Procedure 5: READLINK
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ReadlinkArgs {
        pub symlink: NfsFh3,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ReadlinkOk {
        pub symlink_attributes: PostOpAttr,
        pub data: NfsPath3,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ReadlinkFail {
        pub symlink_attributes: PostOpAttr,
    }
}

pub type ReadlinkRes = Res3<ReadlinkOk, ReadlinkFail>;

// ---------------------------------------------------------------------------------------
// Procedure 6: READ
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ReadArgs {
        pub file: NfsFh3,
        pub offset: u64,
        pub count: u32,
    }
}

/// `READ3resok`. `data` is at most [`MAX_DATA`] bytes when decoded; `count` is sent as
/// given (it should equal `data.len()`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadOk {
    pub file_attributes: PostOpAttr,
    pub count: u32,
    pub eof: bool,
    pub data: Bytes,
}

impl Encode for ReadOk {
    fn encode(&self, e: &mut Encoder) {
        self.file_attributes.encode(e);
        e.u32(self.count);
        e.bool(self.eof);
        e.opaque(&self.data);
    }
}

impl Decode for ReadOk {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            file_attributes: PostOpAttr::decode(d)?,
            count: d.u32()?,
            eof: d.bool()?,
            data: d.opaque("READ3resok.data", MAX_DATA)?,
        })
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ReadFail {
        pub file_attributes: PostOpAttr,
    }
}

pub type ReadRes = Res3<ReadOk, ReadFail>;

// ---------------------------------------------------------------------------------------
// Procedure 7: WRITE
// ---------------------------------------------------------------------------------------

/// `WRITE3args`. `data` is at most [`MAX_DATA`] bytes when decoded, a slice of the request
/// buffer; `count` is decoded as sent (the server checks it against `data.len()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteArgs {
    pub file: NfsFh3,
    pub offset: u64,
    pub count: u32,
    pub stable: StableHow,
    pub data: Bytes,
}

impl Encode for WriteArgs {
    fn encode(&self, e: &mut Encoder) {
        self.file.encode(e);
        e.u64(self.offset);
        e.u32(self.count);
        self.stable.encode(e);
        e.opaque(&self.data);
    }
}

impl Decode for WriteArgs {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            file: NfsFh3::decode(d)?,
            offset: d.u64()?,
            count: d.u32()?,
            stable: StableHow::decode(d)?,
            data: d.opaque("WRITE3args.data", MAX_DATA)?,
        })
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct WriteOk {
        pub file_wcc: WccData,
        pub count: u32,
        pub committed: StableHow,
        pub verf: Writeverf3,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct WriteFail {
        pub file_wcc: WccData,
    }
}

pub type WriteRes = Res3<WriteOk, WriteFail>;

// ---------------------------------------------------------------------------------------
// Procedures 8-11: CREATE, MKDIR, SYMLINK, MKNOD (same result layout)
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CreateArgs {
        /// RFC `where`.
        pub where_: DirOpArgs3,
        pub how: CreateHow3,
    }
}

xdr_struct! {
    /// The body of CREATE, MKDIR, SYMLINK and MKNOD on success.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct CreateOk {
        pub obj: PostOpFh3,
        pub obj_attributes: PostOpAttr,
        pub dir_wcc: WccData,
    }
}

xdr_struct! {
    /// The body of CREATE, MKDIR, SYMLINK and MKNOD on failure.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct CreateFail {
        pub dir_wcc: WccData,
    }
}

pub type CreateRes = Res3<CreateOk, CreateFail>;

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct MkdirArgs {
        /// RFC `where`.
        pub where_: DirOpArgs3,
        pub attributes: Sattr3,
    }
}

/// `MKDIR3resok` has the layout of `CREATE3resok`.
pub type MkdirOk = CreateOk;
pub type MkdirFail = CreateFail;
pub type MkdirRes = Res3<MkdirOk, MkdirFail>;

xdr_struct! {
    /// `symlinkdata3`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct SymlinkData3 {
        pub symlink_attributes: Sattr3,
        pub symlink_data: NfsPath3,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct SymlinkArgs {
        /// RFC `where`.
        pub where_: DirOpArgs3,
        pub symlink: SymlinkData3,
    }
}

/// `SYMLINK3resok` has the layout of `CREATE3resok`.
pub type SymlinkOk = CreateOk;
pub type SymlinkFail = CreateFail;
pub type SymlinkRes = Res3<SymlinkOk, SymlinkFail>;

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct MknodArgs {
        /// RFC `where`.
        pub where_: DirOpArgs3,
        pub what: MknodData3,
    }
}

/// `MKNOD3resok` has the layout of `CREATE3resok`.
pub type MknodOk = CreateOk;
pub type MknodFail = CreateFail;
pub type MknodRes = Res3<MknodOk, MknodFail>;

// ---------------------------------------------------------------------------------------
// Procedures 12-13: REMOVE, RMDIR (same layout)
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct RemoveArgs {
        pub object: DirOpArgs3,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct RemoveOk {
        pub dir_wcc: WccData,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct RemoveFail {
        pub dir_wcc: WccData,
    }
}

pub type RemoveRes = Res3<RemoveOk, RemoveFail>;

/// `RMDIR3args` has the layout of `REMOVE3args`.
pub type RmdirArgs = RemoveArgs;
pub type RmdirOk = RemoveOk;
pub type RmdirFail = RemoveFail;
pub type RmdirRes = Res3<RmdirOk, RmdirFail>;

// ---------------------------------------------------------------------------------------
// Procedure 14: RENAME
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct RenameArgs {
        pub from: DirOpArgs3,
        pub to: DirOpArgs3,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct RenameOk {
        pub fromdir_wcc: WccData,
        pub todir_wcc: WccData,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct RenameFail {
        pub fromdir_wcc: WccData,
        pub todir_wcc: WccData,
    }
}

pub type RenameRes = Res3<RenameOk, RenameFail>;

// ---------------------------------------------------------------------------------------
// Procedure 15: LINK
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct LinkArgs {
        pub file: NfsFh3,
        pub link: DirOpArgs3,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct LinkOk {
        pub file_attributes: PostOpAttr,
        pub linkdir_wcc: WccData,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct LinkFail {
        pub file_attributes: PostOpAttr,
        pub linkdir_wcc: WccData,
    }
}

pub type LinkRes = Res3<LinkOk, LinkFail>;

// ---------------------------------------------------------------------------------------
// Procedure 16: READDIR
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ReaddirArgs {
        pub dir: NfsFh3,
        pub cookie: Cookie3,
        pub cookieverf: Cookieverf3,
        /// Most bytes of `READDIR3resok` the client accepts, XDR overhead included.
        pub count: u32,
    }
}

xdr_struct! {
    /// `entry3`, without its `nextentry` link ([`entry3_size`] bytes on the wire).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct Entry3 {
        pub fileid: u64,
        pub name: Filename3,
        pub cookie: Cookie3,
    }
}

/// `READDIR3resok` with `dirlist3` flattened in: the entries travel as an XDR linked list
/// of at most [`MAX_DIR_ENTRIES`]. Encoded size: [`READDIR3_RESOK_FIXED_SIZE`] (with
/// attributes) plus [`entry3_size`] per entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReaddirOk {
    pub dir_attributes: PostOpAttr,
    pub cookieverf: Cookieverf3,
    pub entries: Vec<Entry3>,
    pub eof: bool,
}

impl Encode for ReaddirOk {
    fn encode(&self, e: &mut Encoder) {
        self.dir_attributes.encode(e);
        self.cookieverf.encode(e);
        encode_list(&self.entries, e);
        e.bool(self.eof);
    }
}

impl Decode for ReaddirOk {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            dir_attributes: PostOpAttr::decode(d)?,
            cookieverf: Cookieverf3::decode(d)?,
            entries: decode_list(d, "dirlist3.entries", MAX_DIR_ENTRIES)?,
            eof: d.bool()?,
        })
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ReaddirFail {
        pub dir_attributes: PostOpAttr,
    }
}

pub type ReaddirRes = Res3<ReaddirOk, ReaddirFail>;

// ---------------------------------------------------------------------------------------
// Procedure 17: READDIRPLUS
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ReaddirplusArgs {
        pub dir: NfsFh3,
        pub cookie: Cookie3,
        pub cookieverf: Cookieverf3,
        /// Most bytes of directory information (fileid, name, cookie) the client wants.
        pub dircount: u32,
        /// Most bytes of `READDIRPLUS3resok`, XDR overhead included.
        pub maxcount: u32,
    }
}

xdr_struct! {
    /// `entryplus3`, without its `nextentry` link ([`entryplus3_size`] bytes on the wire).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct Entryplus3 {
        pub fileid: u64,
        pub name: Filename3,
        pub cookie: Cookie3,
        pub name_attributes: PostOpAttr,
        pub name_handle: PostOpFh3,
    }
}

/// `READDIRPLUS3resok` with `dirlistplus3` flattened in, as [`ReaddirOk`]. Encoded size:
/// [`READDIRPLUS3_RESOK_FIXED_SIZE`] (with attributes) plus [`entryplus3_size`] per entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReaddirplusOk {
    pub dir_attributes: PostOpAttr,
    pub cookieverf: Cookieverf3,
    pub entries: Vec<Entryplus3>,
    pub eof: bool,
}

impl Encode for ReaddirplusOk {
    fn encode(&self, e: &mut Encoder) {
        self.dir_attributes.encode(e);
        self.cookieverf.encode(e);
        encode_list(&self.entries, e);
        e.bool(self.eof);
    }
}

impl Decode for ReaddirplusOk {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            dir_attributes: PostOpAttr::decode(d)?,
            cookieverf: Cookieverf3::decode(d)?,
            entries: decode_list(d, "dirlistplus3.entries", MAX_DIR_ENTRIES)?,
            eof: d.bool()?,
        })
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ReaddirplusFail {
        pub dir_attributes: PostOpAttr,
    }
}

pub type ReaddirplusRes = Res3<ReaddirplusOk, ReaddirplusFail>;

// ---------------------------------------------------------------------------------------
// Procedure 18: FSSTAT
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FsstatArgs {
        pub fsroot: NfsFh3,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FsstatOk {
        pub obj_attributes: PostOpAttr,
        /// Total size of the file system, in bytes.
        pub tbytes: u64,
        /// Free bytes.
        pub fbytes: u64,
        /// Free bytes available to the caller.
        pub abytes: u64,
        /// Total file slots.
        pub tfiles: u64,
        /// Free file slots.
        pub ffiles: u64,
        /// Free file slots available to the caller.
        pub afiles: u64,
        /// Seconds for which this information stays valid (0: volatile).
        pub invarsec: u32,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FsstatFail {
        pub obj_attributes: PostOpAttr,
    }
}

pub type FsstatRes = Res3<FsstatOk, FsstatFail>;

// ---------------------------------------------------------------------------------------
// Procedure 19: FSINFO
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FsinfoArgs {
        pub fsroot: NfsFh3,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FsinfoOk {
        pub obj_attributes: PostOpAttr,
        /// Largest READ, in bytes.
        pub rtmax: u32,
        /// Preferred READ size, in bytes.
        pub rtpref: u32,
        /// Suggested READ size multiple, in bytes.
        pub rtmult: u32,
        /// Largest WRITE, in bytes.
        pub wtmax: u32,
        /// Preferred WRITE size, in bytes.
        pub wtpref: u32,
        /// Suggested WRITE size multiple, in bytes.
        pub wtmult: u32,
        /// Preferred READDIR `count`, in bytes.
        pub dtpref: u32,
        /// Largest file size, in bytes.
        pub maxfilesize: u64,
        /// Granularity of server timestamps.
        pub time_delta: Nfstime3,
        /// `FSF3_*` bits.
        pub properties: u32,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FsinfoFail {
        pub obj_attributes: PostOpAttr,
    }
}

pub type FsinfoRes = Res3<FsinfoOk, FsinfoFail>;

// ---------------------------------------------------------------------------------------
// Procedure 20: PATHCONF
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct PathconfArgs {
        pub object: NfsFh3,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct PathconfOk {
        pub obj_attributes: PostOpAttr,
        pub linkmax: u32,
        pub name_max: u32,
        pub no_trunc: bool,
        pub chown_restricted: bool,
        pub case_insensitive: bool,
        pub case_preserving: bool,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct PathconfFail {
        pub obj_attributes: PostOpAttr,
    }
}

pub type PathconfRes = Res3<PathconfOk, PathconfFail>;

// ---------------------------------------------------------------------------------------
// Procedure 21: COMMIT
// ---------------------------------------------------------------------------------------

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct CommitArgs {
        pub file: NfsFh3,
        pub offset: u64,
        /// Bytes to commit from `offset`; 0 means to the end of the file.
        pub count: u32,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct CommitOk {
        pub file_wcc: WccData,
        pub verf: Writeverf3,
    }
}

xdr_struct! {
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct CommitFail {
        pub file_wcc: WccData,
    }
}

pub type CommitRes = Res3<CommitOk, CommitFail>;

// ---------------------------------------------------------------------------------------
// Encoded sizes
// ---------------------------------------------------------------------------------------

/// Bytes of one `fattr3`: type, mode, nlink, uid, gid (5 x 4); size, used, rdev, fsid,
/// fileid (5 x 8); atime, mtime, ctime (3 x 8).
pub const FATTR3_SIZE: usize = 5 * 4 + 5 * 8 + 3 * 8;

/// Bytes of a `post_op_attr` that carries attributes.
pub const POST_OP_ATTR_MAX_SIZE: usize = 4 + FATTR3_SIZE;

/// Bytes of a `wcc_data` with both halves present: (4 + `wcc_attr`) + `post_op_attr`.
pub const WCC_DATA_MAX_SIZE: usize = 4 + 8 + 8 + 8 + POST_OP_ATTR_MAX_SIZE;

/// Bytes of a `post_op_fh3` carrying a handle of [`FHSIZE3`] bytes.
pub const POST_OP_FH3_MAX_SIZE: usize = 4 + 4 + FHSIZE3 as usize;

/// Bytes of `READDIR3resok` besides its entries, with directory attributes present:
/// `post_op_attr` + `cookieverf3` + the final `value_follows = FALSE` + `eof`. The status
/// word before it is not part of it (RFC 1813's `count` covers `READDIR3resok` only).
pub const READDIR3_RESOK_FIXED_SIZE: usize = POST_OP_ATTR_MAX_SIZE + 8 + 4 + 4;

/// Bytes of `READDIRPLUS3resok` besides its entries; same layout as
/// [`READDIR3_RESOK_FIXED_SIZE`].
pub const READDIRPLUS3_RESOK_FIXED_SIZE: usize = POST_OP_ATTR_MAX_SIZE + 8 + 4 + 4;

/// Exact encoded bytes of one `entry3` in a READDIR reply, including the `value_follows`
/// word before it: 4 + fileid 8 + name (4 + padded) + cookie 8.
///
/// For READDIRPLUS `dircount` accounting (fileid, name and cookie only) this is also the
/// "directory information" size of an `entryplus3`.
#[must_use]
pub const fn entry3_size(name_len: usize) -> usize {
    4 + 8 + 4 + padded(name_len) + 8
}

/// Exact encoded bytes of one `entryplus3` in a READDIRPLUS reply, including the
/// `value_follows` word before it: the [`entry3_size`] part, then `name_attributes`
/// (4, plus [`FATTR3_SIZE`] if `has_attr`) and `name_handle` (4, plus the length word and
/// the padded handle if `handle_len` is `Some`).
#[must_use]
pub const fn entryplus3_size(name_len: usize, has_attr: bool, handle_len: Option<usize>) -> usize {
    let attr = if has_attr { 4 + FATTR3_SIZE } else { 4 };
    let handle = match handle_len {
        Some(len) => 4 + 4 + padded(len),
        None => 4,
    };
    entry3_size(name_len) + attr + handle
}

// ---------------------------------------------------------------------------------------
// Procedure numbers
// ---------------------------------------------------------------------------------------

xdr_enum! {
    /// NFSv3 procedure numbers (RFC 1813 section 3).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum NfsProc {
        Null = 0,
        Getattr = 1,
        Setattr = 2,
        Lookup = 3,
        Access = 4,
        Readlink = 5,
        Read = 6,
        Write = 7,
        Create = 8,
        Mkdir = 9,
        Symlink = 10,
        Mknod = 11,
        Remove = 12,
        Rmdir = 13,
        Rename = 14,
        Link = 15,
        Readdir = 16,
        Readdirplus = 17,
        Fsstat = 18,
        Fsinfo = 19,
        Pathconf = 20,
        Commit = 21,
    }
}

/// Lower-case procedure names for logs and metrics, indexed by procedure number.
pub const PROCEDURE_NAMES: [&str; 22] = [
    "null",
    "getattr",
    "setattr",
    "lookup",
    "access",
    "readlink",
    "read",
    "write",
    "create",
    "mkdir",
    "symlink",
    "mknod",
    "remove",
    "rmdir",
    "rename",
    "link",
    "readdir",
    "readdirplus",
    "fsstat",
    "fsinfo",
    "pathconf",
    "commit",
];

const _: () = assert!(PROCEDURE_NAMES.len() == NfsProc::Commit as usize + 1);

impl NfsProc {
    /// The procedure's name for logs.
    #[must_use]
    pub fn name(self) -> &'static str {
        PROCEDURE_NAMES[self as usize]
    }
}
