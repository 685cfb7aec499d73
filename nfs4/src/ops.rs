//! The operations of an NFSv4.1/4.2 COMPOUND (RFC 8881 section 18, RFC 7862 section 15):
//! one argument type and one result type per operation this crate types, and the
//! operation numbers of all of them.
//!
//! Operations granary does not implement (pNFS layouts, delegations, SSV, named
//! attributes, xattrs, asynchronous copies, WRITE_SAME, READ_PLUS, IO_ADVISE, and the
//! 4.0-only operations a 4.1 server must refuse) are not typed: [`crate::compound`]
//! stops decoding at the first one and the server answers it `NFS4ERR_NOTSUPP`, which
//! ends the COMPOUND there (RFC 8881 section 15.2), so its arguments never need reading.

use bytes::Bytes;
use xdr::{
    bad_discriminant, decode_array, encode_array, xdr_enum, xdr_struct, Decode, DecodeError,
    Decoder, Encode, Encoder,
};

use crate::limits::{MAX_DATA, MAX_SEC_ENTRIES, MAX_TEST_STATEIDS};
use crate::types::{
    AtMostOne, Bitmap4, CallbackSecList, ChannelAttrs4, ClientOwner4, Clientid4, Component4,
    Fattr4, Linktext4, NfsCookie4, NfsFh4, NfsImplId4, Seqid4, Sequenceid4, Sessionid4, Slotid4,
    Specdata4, StateOwner4, StateProtect4A, Stateid4, Verifier4,
};

/// Operation numbers (`nfs_opnum4`).
pub mod opnum {
    pub const ACCESS: u32 = 3;
    pub const CLOSE: u32 = 4;
    pub const COMMIT: u32 = 5;
    pub const CREATE: u32 = 6;
    pub const DELEGPURGE: u32 = 7;
    pub const DELEGRETURN: u32 = 8;
    pub const GETATTR: u32 = 9;
    pub const GETFH: u32 = 10;
    pub const LINK: u32 = 11;
    pub const LOCK: u32 = 12;
    pub const LOCKT: u32 = 13;
    pub const LOCKU: u32 = 14;
    pub const LOOKUP: u32 = 15;
    pub const LOOKUPP: u32 = 16;
    pub const NVERIFY: u32 = 17;
    pub const OPEN: u32 = 18;
    pub const OPENATTR: u32 = 19;
    pub const OPEN_CONFIRM: u32 = 20;
    pub const OPEN_DOWNGRADE: u32 = 21;
    pub const PUTFH: u32 = 22;
    pub const PUTPUBFH: u32 = 23;
    pub const PUTROOTFH: u32 = 24;
    pub const READ: u32 = 25;
    pub const READDIR: u32 = 26;
    pub const READLINK: u32 = 27;
    pub const REMOVE: u32 = 28;
    pub const RENAME: u32 = 29;
    pub const RENEW: u32 = 30;
    pub const RESTOREFH: u32 = 31;
    pub const SAVEFH: u32 = 32;
    pub const SECINFO: u32 = 33;
    pub const SETATTR: u32 = 34;
    pub const SETCLIENTID: u32 = 35;
    pub const SETCLIENTID_CONFIRM: u32 = 36;
    pub const VERIFY: u32 = 37;
    pub const WRITE: u32 = 38;
    pub const RELEASE_LOCKOWNER: u32 = 39;
    pub const BACKCHANNEL_CTL: u32 = 40;
    pub const BIND_CONN_TO_SESSION: u32 = 41;
    pub const EXCHANGE_ID: u32 = 42;
    pub const CREATE_SESSION: u32 = 43;
    pub const DESTROY_SESSION: u32 = 44;
    pub const FREE_STATEID: u32 = 45;
    pub const GET_DIR_DELEGATION: u32 = 46;
    pub const GETDEVICEINFO: u32 = 47;
    pub const GETDEVICELIST: u32 = 48;
    pub const LAYOUTCOMMIT: u32 = 49;
    pub const LAYOUTGET: u32 = 50;
    pub const LAYOUTRETURN: u32 = 51;
    pub const SECINFO_NO_NAME: u32 = 52;
    pub const SEQUENCE: u32 = 53;
    pub const SET_SSV: u32 = 54;
    pub const TEST_STATEID: u32 = 55;
    pub const WANT_DELEGATION: u32 = 56;
    pub const DESTROY_CLIENTID: u32 = 57;
    pub const RECLAIM_COMPLETE: u32 = 58;
    pub const ALLOCATE: u32 = 59;
    pub const COPY: u32 = 60;
    pub const COPY_NOTIFY: u32 = 61;
    pub const DEALLOCATE: u32 = 62;
    pub const IO_ADVISE: u32 = 63;
    pub const LAYOUTERROR: u32 = 64;
    pub const LAYOUTSTATS: u32 = 65;
    pub const OFFLOAD_CANCEL: u32 = 66;
    pub const OFFLOAD_STATUS: u32 = 67;
    pub const READ_PLUS: u32 = 68;
    pub const SEEK: u32 = 69;
    pub const WRITE_SAME: u32 = 70;
    pub const CLONE: u32 = 71;
    pub const GETXATTR: u32 = 72;
    pub const SETXATTR: u32 = 73;
    pub const LISTXATTRS: u32 = 74;
    pub const REMOVEXATTR: u32 = 75;
    pub const ILLEGAL: u32 = 10044;

    /// Whether `op` is an operation number RFC 8881 or 7862 (or 8276) defines.
    #[must_use]
    pub fn is_defined(op: u32) -> bool {
        (ACCESS..=REMOVEXATTR).contains(&op)
    }

    /// Every defined operation's name in lower case, indexed by `op - ACCESS`.
    const NAMES: [&str; (REMOVEXATTR - ACCESS + 1) as usize] = [
        "access",
        "close",
        "commit",
        "create",
        "delegpurge",
        "delegreturn",
        "getattr",
        "getfh",
        "link",
        "lock",
        "lockt",
        "locku",
        "lookup",
        "lookupp",
        "nverify",
        "open",
        "openattr",
        "open_confirm",
        "open_downgrade",
        "putfh",
        "putpubfh",
        "putrootfh",
        "read",
        "readdir",
        "readlink",
        "remove",
        "rename",
        "renew",
        "restorefh",
        "savefh",
        "secinfo",
        "setattr",
        "setclientid",
        "setclientid_confirm",
        "verify",
        "write",
        "release_lockowner",
        "backchannel_ctl",
        "bind_conn_to_session",
        "exchange_id",
        "create_session",
        "destroy_session",
        "free_stateid",
        "get_dir_delegation",
        "getdeviceinfo",
        "getdevicelist",
        "layoutcommit",
        "layoutget",
        "layoutreturn",
        "secinfo_no_name",
        "sequence",
        "set_ssv",
        "test_stateid",
        "want_delegation",
        "destroy_clientid",
        "reclaim_complete",
        "allocate",
        "copy",
        "copy_notify",
        "deallocate",
        "io_advise",
        "layouterror",
        "layoutstats",
        "offload_cancel",
        "offload_status",
        "read_plus",
        "seek",
        "write_same",
        "clone",
        "getxattr",
        "setxattr",
        "listxattrs",
        "removexattr",
    ];

    /// The lower-case name of operation `op` (`"illegal"` for any undefined number), for
    /// logs and metrics.
    #[must_use]
    pub fn name(op: u32) -> &'static str {
        if is_defined(op) {
            NAMES[(op - ACCESS) as usize]
        } else {
            "illegal"
        }
    }
}

/// ACCESS4 bits (RFC 8881 section 18.1).
pub mod access {
    pub const READ: u32 = 0x01;
    pub const LOOKUP: u32 = 0x02;
    pub const MODIFY: u32 = 0x04;
    pub const EXTEND: u32 = 0x08;
    pub const DELETE: u32 = 0x10;
    pub const EXECUTE: u32 = 0x20;
}

/// OPEN share access and deny bits, and the delegation "want" bits a 4.1 client may add.
pub mod share {
    pub const ACCESS_READ: u32 = 0x1;
    pub const ACCESS_WRITE: u32 = 0x2;
    pub const ACCESS_BOTH: u32 = 0x3;
    pub const DENY_NONE: u32 = 0x0;
    pub const DENY_READ: u32 = 0x1;
    pub const DENY_WRITE: u32 = 0x2;
    pub const DENY_BOTH: u32 = 0x3;
    pub const WANT_DELEG_MASK: u32 = 0xFF00;
    pub const WANT_NO_DELEG: u32 = 0x0400;
    pub const WANT_CANCEL: u32 = 0x0500;
    pub const WANT_SIGNAL_DELEG_WHEN_RESRC_AVAIL: u32 = 0x10000;
    pub const WANT_PUSH_DELEG_WHEN_UNCONTENDED: u32 = 0x20000;
}

/// OPEN4resok `rflags`.
pub mod open_result {
    pub const CONFIRM: u32 = 0x2;
    pub const LOCKTYPE_POSIX: u32 = 0x4;
    pub const PRESERVE_UNLINKED: u32 = 0x8;
    pub const MAY_NOTIFY_LOCK: u32 = 0x20;
}

/// EXCHANGE_ID flags.
pub mod exchgid {
    pub const SUPP_MOVED_REFER: u32 = 0x1;
    pub const SUPP_MOVED_MIGR: u32 = 0x2;
    pub const SUPP_FENCE_OPS: u32 = 0x4;
    pub const BIND_PRINC_STATEID: u32 = 0x100;
    pub const USE_NON_PNFS: u32 = 0x1_0000;
    pub const USE_PNFS_MDS: u32 = 0x2_0000;
    pub const USE_PNFS_DS: u32 = 0x4_0000;
    pub const MASK_PNFS: u32 = 0x7_0000;
    pub const UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
    pub const CONFIRMED_R: u32 = 0x8000_0000;
}

/// CREATE_SESSION flags.
pub mod session_flags {
    pub const PERSIST: u32 = 0x1;
    pub const CONN_BACK_CHAN: u32 = 0x2;
    pub const CONN_RDMA: u32 = 0x4;
}

/// SEQUENCE status flags.
pub mod seq_status {
    pub const CB_PATH_DOWN: u32 = 0x1;
    pub const CB_GSS_CONTEXTS_EXPIRING: u32 = 0x2;
    pub const CB_GSS_CONTEXTS_EXPIRED: u32 = 0x4;
    pub const EXPIRED_ALL_STATE_REVOKED: u32 = 0x8;
    pub const EXPIRED_SOME_STATE_REVOKED: u32 = 0x10;
    pub const ADMIN_STATE_REVOKED: u32 = 0x20;
    pub const RECALLABLE_STATE_REVOKED: u32 = 0x40;
    pub const LEASE_MOVED: u32 = 0x80;
    pub const RESTART_RECLAIM_NEEDED: u32 = 0x100;
    pub const CB_PATH_DOWN_SESSION: u32 = 0x200;
    pub const BACKCHANNEL_FAULT: u32 = 0x400;
}

// ---------------------------------------------------------------------------------------
// Enums shared by several operations
// ---------------------------------------------------------------------------------------

xdr_enum! {
    /// `nfs_ftype4`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum NfsFtype4 {
        Reg = 1,
        Dir = 2,
        Blk = 3,
        Chr = 4,
        Lnk = 5,
        Sock = 6,
        Fifo = 7,
        AttrDir = 8,
        NamedAttr = 9,
    }
}

xdr_enum! {
    /// `stable_how4`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum StableHow4 {
        Unstable = 0,
        DataSync = 1,
        FileSync = 2,
    }
}

xdr_enum! {
    /// `nfs_lock_type4`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum NfsLockType4 {
        Read = 1,
        Write = 2,
        ReadW = 3,
        WriteW = 4,
    }
}

xdr_enum! {
    /// `open_delegation_type4`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum OpenDelegationType4 {
        None = 0,
        Read = 1,
        Write = 2,
        NoneExt = 3,
        ReadAttrsDeleg = 4,
        WriteAttrsDeleg = 5,
    }
}

xdr_enum! {
    /// `data_content4` (SEEK's `sa_what`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum DataContent4 {
        Data = 0,
        Hole = 1,
    }
}

xdr_enum! {
    /// `secinfo_style4`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum SecinfoStyle4 {
        CurrentFh = 0,
        Parent = 1,
    }
}

xdr_enum! {
    /// `channel_dir_from_client4`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ChannelDirFromClient4 {
        Fore = 1,
        Back = 2,
        ForeOrBoth = 3,
        BackOrBoth = 7,
    }
}

xdr_enum! {
    /// `channel_dir_from_server4`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ChannelDirFromServer4 {
        Fore = 1,
        Back = 2,
        Both = 3,
    }
}

// ---------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------

xdr_struct! {
    /// CLOSE4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CloseArgs {
        pub seqid: Seqid4,
        pub open_stateid: Stateid4,
    }
}

xdr_struct! {
    /// COMMIT4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CommitArgs {
        pub offset: u64,
        pub count: u32,
    }
}

/// `createtype4`: what CREATE makes (regular files are made by OPEN).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Createtype4 {
    Link(Linktext4),
    Blk(Specdata4),
    Chr(Specdata4),
    Sock,
    Fifo,
    Dir,
    /// Any other type (regular files, named attributes): the server answers
    /// `NFS4ERR_BADTYPE`.
    Other(u32),
}

impl Encode for Createtype4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::Link(l) => {
                e.u32(NfsFtype4::Lnk as u32);
                l.encode(e);
            }
            Self::Blk(s) => {
                e.u32(NfsFtype4::Blk as u32);
                s.encode(e);
            }
            Self::Chr(s) => {
                e.u32(NfsFtype4::Chr as u32);
                s.encode(e);
            }
            Self::Sock => e.u32(NfsFtype4::Sock as u32),
            Self::Fifo => e.u32(NfsFtype4::Fifo as u32),
            Self::Dir => e.u32(NfsFtype4::Dir as u32),
            Self::Other(t) => e.u32(*t),
        }
    }
}

impl Decode for Createtype4 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let t = d.u32()?;
        Ok(match NfsFtype4::from_u32(t) {
            Some(NfsFtype4::Lnk) => Self::Link(Linktext4::decode(d)?),
            Some(NfsFtype4::Blk) => Self::Blk(Specdata4::decode(d)?),
            Some(NfsFtype4::Chr) => Self::Chr(Specdata4::decode(d)?),
            Some(NfsFtype4::Sock) => Self::Sock,
            Some(NfsFtype4::Fifo) => Self::Fifo,
            Some(NfsFtype4::Dir) => Self::Dir,
            _ => Self::Other(t),
        })
    }
}

xdr_struct! {
    /// CREATE4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CreateArgs {
        pub objtype: Createtype4,
        pub objname: Component4,
        pub createattrs: Fattr4,
    }
}

xdr_struct! {
    /// `open_to_lock_owner4`: the first LOCK of a lock-owner, from an open.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct OpenToLockOwner4 {
        pub open_seqid: Seqid4,
        pub open_stateid: Stateid4,
        pub lock_seqid: Seqid4,
        pub lock_owner: StateOwner4,
    }
}

xdr_struct! {
    /// `exist_lock_owner4`: a later LOCK of a lock-owner.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ExistLockOwner4 {
        pub lock_stateid: Stateid4,
        pub lock_seqid: Seqid4,
    }
}

/// `locker4`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locker4 {
    New(OpenToLockOwner4),
    Existing(ExistLockOwner4),
}

impl Encode for Locker4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::New(o) => {
                e.bool(true);
                o.encode(e);
            }
            Self::Existing(o) => {
                e.bool(false);
                o.encode(e);
            }
        }
    }
}

impl Decode for Locker4 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        if d.bool()? {
            Ok(Self::New(OpenToLockOwner4::decode(d)?))
        } else {
            Ok(Self::Existing(ExistLockOwner4::decode(d)?))
        }
    }
}

xdr_struct! {
    /// LOCK4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct LockArgs {
        pub locktype: NfsLockType4,
        pub reclaim: bool,
        pub offset: u64,
        pub length: u64,
        pub locker: Locker4,
    }
}

xdr_struct! {
    /// LOCK4denied: the lock in the way.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct LockDenied4 {
        pub offset: u64,
        pub length: u64,
        pub locktype: NfsLockType4,
        pub owner: StateOwner4,
    }
}

xdr_struct! {
    /// LOCKT4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct LocktArgs {
        pub locktype: NfsLockType4,
        pub offset: u64,
        pub length: u64,
        pub owner: StateOwner4,
    }
}

xdr_struct! {
    /// LOCKU4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct LockuArgs {
        pub locktype: NfsLockType4,
        pub seqid: Seqid4,
        pub lock_stateid: Stateid4,
        pub offset: u64,
        pub length: u64,
    }
}

xdr_struct! {
    /// `creatverfattr`: EXCLUSIVE4_1's verifier and attributes.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CreatVerfAttr {
        pub cva_verf: Verifier4,
        pub cva_attrs: Fattr4,
    }
}

/// `createhow4`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Createhow4 {
    Unchecked(Fattr4),
    Guarded(Fattr4),
    /// EXCLUSIVE4 (4.0 style; a 4.1 server may still accept it).
    Exclusive(Verifier4),
    Exclusive41(CreatVerfAttr),
}

impl Encode for Createhow4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::Unchecked(a) => {
                e.u32(0);
                a.encode(e);
            }
            Self::Guarded(a) => {
                e.u32(1);
                a.encode(e);
            }
            Self::Exclusive(v) => {
                e.u32(2);
                v.encode(e);
            }
            Self::Exclusive41(c) => {
                e.u32(3);
                c.encode(e);
            }
        }
    }
}

impl Decode for Createhow4 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.u32()? {
            0 => Ok(Self::Unchecked(Fattr4::decode(d)?)),
            1 => Ok(Self::Guarded(Fattr4::decode(d)?)),
            2 => Ok(Self::Exclusive(Verifier4::decode(d)?)),
            3 => Ok(Self::Exclusive41(CreatVerfAttr::decode(d)?)),
            v => Err(bad_discriminant("createmode4", v)),
        }
    }
}

/// `openflag4`: open an existing file, or create one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Openflag4 {
    NoCreate,
    Create(Createhow4),
}

impl Encode for Openflag4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::NoCreate => e.u32(0),
            Self::Create(how) => {
                e.u32(1);
                how.encode(e);
            }
        }
    }
}

impl Decode for Openflag4 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.u32()? {
            0 => Ok(Self::NoCreate),
            1 => Ok(Self::Create(Createhow4::decode(d)?)),
            v => Err(bad_discriminant("opentype4", v)),
        }
    }
}

/// `open_claim4`: what an OPEN names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenClaim4 {
    /// CLAIM_NULL: a name in the current directory.
    Null(Component4),
    /// CLAIM_PREVIOUS: the current file, reclaimed after a server restart.
    Previous(OpenDelegationType4),
    /// CLAIM_DELEGATE_CUR.
    DelegateCur {
        delegate_stateid: Stateid4,
        file: Component4,
    },
    /// CLAIM_DELEGATE_PREV.
    DelegatePrev(Component4),
    /// CLAIM_FH: the current file.
    Fh,
    /// CLAIM_DELEG_PREV_FH.
    DelegPrevFh,
    /// CLAIM_DELEG_CUR_FH.
    DelegCurFh(Stateid4),
}

impl Encode for OpenClaim4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::Null(name) => {
                e.u32(0);
                name.encode(e);
            }
            Self::Previous(t) => {
                e.u32(1);
                t.encode(e);
            }
            Self::DelegateCur {
                delegate_stateid,
                file,
            } => {
                e.u32(2);
                delegate_stateid.encode(e);
                file.encode(e);
            }
            Self::DelegatePrev(name) => {
                e.u32(3);
                name.encode(e);
            }
            Self::Fh => e.u32(4),
            Self::DelegPrevFh => e.u32(6),
            Self::DelegCurFh(s) => {
                e.u32(5);
                s.encode(e);
            }
        }
    }
}

impl Decode for OpenClaim4 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.u32()? {
            0 => Ok(Self::Null(Component4::decode(d)?)),
            1 => Ok(Self::Previous(OpenDelegationType4::decode(d)?)),
            2 => Ok(Self::DelegateCur {
                delegate_stateid: Stateid4::decode(d)?,
                file: Component4::decode(d)?,
            }),
            3 => Ok(Self::DelegatePrev(Component4::decode(d)?)),
            4 => Ok(Self::Fh),
            5 => Ok(Self::DelegCurFh(Stateid4::decode(d)?)),
            6 => Ok(Self::DelegPrevFh),
            v => Err(bad_discriminant("open_claim_type4", v)),
        }
    }
}

xdr_struct! {
    /// OPEN4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct OpenArgs {
        pub seqid: Seqid4,
        pub share_access: u32,
        pub share_deny: u32,
        pub owner: StateOwner4,
        pub openhow: Openflag4,
        pub claim: OpenClaim4,
    }
}

xdr_struct! {
    /// OPEN_DOWNGRADE4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct OpenDowngradeArgs {
        pub open_stateid: Stateid4,
        pub seqid: Seqid4,
        pub share_access: u32,
        pub share_deny: u32,
    }
}

xdr_struct! {
    /// READ4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ReadArgs {
        pub stateid: Stateid4,
        pub offset: u64,
        pub count: u32,
    }
}

xdr_struct! {
    /// READDIR4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ReaddirArgs {
        pub cookie: NfsCookie4,
        pub cookieverf: Verifier4,
        pub dircount: u32,
        pub maxcount: u32,
        pub attr_request: Bitmap4,
    }
}

xdr_struct! {
    /// RENAME4args (from the saved directory to the current one).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct RenameArgs {
        pub oldname: Component4,
        pub newname: Component4,
    }
}

xdr_struct! {
    /// SETATTR4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SetattrArgs {
        pub stateid: Stateid4,
        pub obj_attributes: Fattr4,
    }
}

/// WRITE4args. `data` is a slice of the request record (no copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteArgs {
    pub stateid: Stateid4,
    pub offset: u64,
    pub stable: StableHow4,
    pub data: Bytes,
}

impl Encode for WriteArgs {
    fn encode(&self, e: &mut Encoder) {
        self.stateid.encode(e);
        e.u64(self.offset);
        self.stable.encode(e);
        e.opaque(&self.data);
    }
}

impl Decode for WriteArgs {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            stateid: Stateid4::decode(d)?,
            offset: d.u64()?,
            stable: StableHow4::decode(d)?,
            data: d.opaque("WRITE data", MAX_DATA)?,
        })
    }
}

xdr_struct! {
    /// BACKCHANNEL_CTL4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct BackchannelCtlArgs {
        pub bca_cb_program: u32,
        pub bca_sec_parms: CallbackSecList,
    }
}

xdr_struct! {
    /// BIND_CONN_TO_SESSION4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct BindConnToSessionArgs {
        pub bctsa_sessid: Sessionid4,
        pub bctsa_dir: ChannelDirFromClient4,
        pub bctsa_use_conn_in_rdma_mode: bool,
    }
}

xdr_struct! {
    /// EXCHANGE_ID4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ExchangeIdArgs {
        pub eia_clientowner: ClientOwner4,
        pub eia_flags: u32,
        pub eia_state_protect: StateProtect4A,
        pub eia_client_impl_id: AtMostOne<NfsImplId4>,
    }
}

xdr_struct! {
    /// CREATE_SESSION4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CreateSessionArgs {
        pub csa_clientid: Clientid4,
        pub csa_sequence: Sequenceid4,
        pub csa_flags: u32,
        pub csa_fore_chan_attrs: ChannelAttrs4,
        pub csa_back_chan_attrs: ChannelAttrs4,
        pub csa_cb_program: u32,
        pub csa_sec_parms: CallbackSecList,
    }
}

xdr_struct! {
    /// SEQUENCE4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SequenceArgs {
        pub sa_sessionid: Sessionid4,
        pub sa_sequenceid: Sequenceid4,
        pub sa_slotid: Slotid4,
        pub sa_highest_slotid: Slotid4,
        pub sa_cachethis: bool,
    }
}

/// TEST_STATEID4args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestStateidArgs {
    pub ts_stateids: Vec<Stateid4>,
}

impl Encode for TestStateidArgs {
    fn encode(&self, e: &mut Encoder) {
        encode_array(&self.ts_stateids, e);
    }
}

impl Decode for TestStateidArgs {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            ts_stateids: decode_array(d, "ts_stateids", MAX_TEST_STATEIDS)?,
        })
    }
}

xdr_struct! {
    /// ALLOCATE4args and DEALLOCATE4args (the same layout).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct RangeArgs {
        pub stateid: Stateid4,
        pub offset: u64,
        pub length: u64,
    }
}

/// COPY4args. Only intra-server copies are served: a non-empty `ca_source_server` is
/// answered `NFS4ERR_NOTSUPP`, so its entries are counted and skipped, not typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyArgs {
    pub ca_src_stateid: Stateid4,
    pub ca_dst_stateid: Stateid4,
    pub ca_src_offset: u64,
    pub ca_dst_offset: u64,
    pub ca_count: u64,
    pub ca_consecutive: bool,
    pub ca_synchronous: bool,
    /// How many source servers the client named (inter-server copy when > 0).
    pub ca_source_servers: u32,
}

impl Encode for CopyArgs {
    fn encode(&self, e: &mut Encoder) {
        self.ca_src_stateid.encode(e);
        self.ca_dst_stateid.encode(e);
        e.u64(self.ca_src_offset);
        e.u64(self.ca_dst_offset);
        e.u64(self.ca_count);
        e.bool(self.ca_consecutive);
        e.bool(self.ca_synchronous);
        // Only the empty list can be encoded: granary never sends inter-server copies.
        e.u32(0);
    }
}

impl Decode for CopyArgs {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let mut a = Self {
            ca_src_stateid: Stateid4::decode(d)?,
            ca_dst_stateid: Stateid4::decode(d)?,
            ca_src_offset: d.u64()?,
            ca_dst_offset: d.u64()?,
            ca_count: d.u64()?,
            ca_consecutive: d.bool()?,
            ca_synchronous: d.bool()?,
            ca_source_servers: 0,
        };
        a.ca_source_servers = d.length("ca_source_server", MAX_SEC_ENTRIES)?;
        for _ in 0..a.ca_source_servers {
            skip_netloc4(d)?;
        }
        Ok(a)
    }
}

/// Skips one `netloc4` (a name, a URL or a `netaddr4`).
fn skip_netloc4(d: &mut Decoder) -> Result<(), DecodeError> {
    let bound = crate::limits::NFS4_OPAQUE_LIMIT;
    match d.u32()? {
        1 | 2 => {
            d.opaque("netloc4", bound)?;
        }
        3 => {
            d.opaque("na_r_netid", bound)?;
            d.opaque("na_r_addr", bound)?;
        }
        v => return Err(bad_discriminant("netloc_type4", v)),
    }
    Ok(())
}

xdr_struct! {
    /// CLONE4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CloneArgs {
        pub cl_src_stateid: Stateid4,
        pub cl_dst_stateid: Stateid4,
        pub cl_src_offset: u64,
        pub cl_dst_offset: u64,
        pub cl_count: u64,
    }
}

xdr_struct! {
    /// SEEK4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SeekArgs {
        pub sa_stateid: Stateid4,
        pub sa_offset: u64,
        pub sa_what: DataContent4,
    }
}

/// One decoded operation of a COMPOUND.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgOp {
    Access(u32),
    Close(CloseArgs),
    Commit(CommitArgs),
    Create(CreateArgs),
    Getattr(Bitmap4),
    Getfh,
    Link(Component4),
    Lock(LockArgs),
    Lockt(LocktArgs),
    Locku(LockuArgs),
    Lookup(Component4),
    Lookupp,
    Nverify(Fattr4),
    Open(OpenArgs),
    OpenDowngrade(OpenDowngradeArgs),
    Putfh(NfsFh4),
    Putpubfh,
    Putrootfh,
    Read(ReadArgs),
    Readdir(ReaddirArgs),
    Readlink,
    Remove(Component4),
    Rename(RenameArgs),
    Restorefh,
    Savefh,
    Secinfo(Component4),
    Setattr(SetattrArgs),
    Verify(Fattr4),
    Write(WriteArgs),
    BackchannelCtl(BackchannelCtlArgs),
    BindConnToSession(BindConnToSessionArgs),
    ExchangeId(ExchangeIdArgs),
    CreateSession(CreateSessionArgs),
    DestroySession(Sessionid4),
    FreeStateid(Stateid4),
    SecinfoNoName(SecinfoStyle4),
    Sequence(SequenceArgs),
    TestStateid(TestStateidArgs),
    DestroyClientid(Clientid4),
    ReclaimComplete(bool),
    Allocate(RangeArgs),
    Copy(CopyArgs),
    Deallocate(RangeArgs),
    Seek(SeekArgs),
    Clone(CloneArgs),
    /// A defined operation granary does not implement; its arguments are not read.
    NotSupported(u32),
    /// An undefined operation number (answered `NFS4ERR_OP_ILLEGAL` as OP_ILLEGAL).
    Illegal(u32),
}

impl ArgOp {
    /// The operation number on the wire.
    #[must_use]
    pub fn opnum(&self) -> u32 {
        use opnum as o;
        match self {
            Self::Access(_) => o::ACCESS,
            Self::Close(_) => o::CLOSE,
            Self::Commit(_) => o::COMMIT,
            Self::Create(_) => o::CREATE,
            Self::Getattr(_) => o::GETATTR,
            Self::Getfh => o::GETFH,
            Self::Link(_) => o::LINK,
            Self::Lock(_) => o::LOCK,
            Self::Lockt(_) => o::LOCKT,
            Self::Locku(_) => o::LOCKU,
            Self::Lookup(_) => o::LOOKUP,
            Self::Lookupp => o::LOOKUPP,
            Self::Nverify(_) => o::NVERIFY,
            Self::Open(_) => o::OPEN,
            Self::OpenDowngrade(_) => o::OPEN_DOWNGRADE,
            Self::Putfh(_) => o::PUTFH,
            Self::Putpubfh => o::PUTPUBFH,
            Self::Putrootfh => o::PUTROOTFH,
            Self::Read(_) => o::READ,
            Self::Readdir(_) => o::READDIR,
            Self::Readlink => o::READLINK,
            Self::Remove(_) => o::REMOVE,
            Self::Rename(_) => o::RENAME,
            Self::Restorefh => o::RESTOREFH,
            Self::Savefh => o::SAVEFH,
            Self::Secinfo(_) => o::SECINFO,
            Self::Setattr(_) => o::SETATTR,
            Self::Verify(_) => o::VERIFY,
            Self::Write(_) => o::WRITE,
            Self::BackchannelCtl(_) => o::BACKCHANNEL_CTL,
            Self::BindConnToSession(_) => o::BIND_CONN_TO_SESSION,
            Self::ExchangeId(_) => o::EXCHANGE_ID,
            Self::CreateSession(_) => o::CREATE_SESSION,
            Self::DestroySession(_) => o::DESTROY_SESSION,
            Self::FreeStateid(_) => o::FREE_STATEID,
            Self::SecinfoNoName(_) => o::SECINFO_NO_NAME,
            Self::Sequence(_) => o::SEQUENCE,
            Self::TestStateid(_) => o::TEST_STATEID,
            Self::DestroyClientid(_) => o::DESTROY_CLIENTID,
            Self::ReclaimComplete(_) => o::RECLAIM_COMPLETE,
            Self::Allocate(_) => o::ALLOCATE,
            Self::Copy(_) => o::COPY,
            Self::Deallocate(_) => o::DEALLOCATE,
            Self::Seek(_) => o::SEEK,
            Self::Clone(_) => o::CLONE,
            Self::NotSupported(op) | Self::Illegal(op) => *op,
        }
    }

    /// Whether the operations after this one in the COMPOUND can be decoded: not after
    /// one whose arguments were not read.
    #[must_use]
    pub fn ends_decoding(&self) -> bool {
        matches!(self, Self::NotSupported(_) | Self::Illegal(_))
    }
}

impl Encode for ArgOp {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.opnum());
        match self {
            Self::Access(bits) => e.u32(*bits),
            Self::Close(a) => a.encode(e),
            Self::Commit(a) => a.encode(e),
            Self::Create(a) => a.encode(e),
            Self::Getattr(b) => b.encode(e),
            Self::Link(n) | Self::Lookup(n) | Self::Remove(n) | Self::Secinfo(n) => n.encode(e),
            Self::Lock(a) => a.encode(e),
            Self::Lockt(a) => a.encode(e),
            Self::Locku(a) => a.encode(e),
            Self::Nverify(f) | Self::Verify(f) => f.encode(e),
            Self::Open(a) => a.encode(e),
            Self::OpenDowngrade(a) => a.encode(e),
            Self::Putfh(fh) => fh.encode(e),
            Self::Read(a) => a.encode(e),
            Self::Readdir(a) => a.encode(e),
            Self::Rename(a) => a.encode(e),
            Self::Setattr(a) => a.encode(e),
            Self::Write(a) => a.encode(e),
            Self::BackchannelCtl(a) => a.encode(e),
            Self::BindConnToSession(a) => a.encode(e),
            Self::ExchangeId(a) => a.encode(e),
            Self::CreateSession(a) => a.encode(e),
            Self::DestroySession(s) => s.encode(e),
            Self::FreeStateid(s) => s.encode(e),
            Self::SecinfoNoName(s) => s.encode(e),
            Self::Sequence(a) => a.encode(e),
            Self::TestStateid(a) => a.encode(e),
            Self::DestroyClientid(c) => e.u64(*c),
            Self::ReclaimComplete(one_fs) => e.bool(*one_fs),
            Self::Allocate(a) | Self::Deallocate(a) => a.encode(e),
            Self::Copy(a) => a.encode(e),
            Self::Seek(a) => a.encode(e),
            Self::Clone(a) => a.encode(e),
            Self::Getfh
            | Self::Lookupp
            | Self::Putpubfh
            | Self::Putrootfh
            | Self::Readlink
            | Self::Restorefh
            | Self::Savefh
            | Self::NotSupported(_)
            | Self::Illegal(_) => {}
        }
    }
}

impl Decode for ArgOp {
    /// Decodes one operation. A defined but unimplemented operation, or an undefined
    /// number, decodes to [`ArgOp::NotSupported`] / [`ArgOp::Illegal`] without reading
    /// its arguments (see [`ArgOp::ends_decoding`]).
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        use opnum as o;
        let op = d.u32()?;
        Ok(match op {
            o::ACCESS => Self::Access(d.u32()?),
            o::CLOSE => Self::Close(CloseArgs::decode(d)?),
            o::COMMIT => Self::Commit(CommitArgs::decode(d)?),
            o::CREATE => Self::Create(CreateArgs::decode(d)?),
            o::GETATTR => Self::Getattr(Bitmap4::decode(d)?),
            o::GETFH => Self::Getfh,
            o::LINK => Self::Link(Component4::decode(d)?),
            o::LOCK => Self::Lock(LockArgs::decode(d)?),
            o::LOCKT => Self::Lockt(LocktArgs::decode(d)?),
            o::LOCKU => Self::Locku(LockuArgs::decode(d)?),
            o::LOOKUP => Self::Lookup(Component4::decode(d)?),
            o::LOOKUPP => Self::Lookupp,
            o::NVERIFY => Self::Nverify(Fattr4::decode(d)?),
            o::OPEN => Self::Open(OpenArgs::decode(d)?),
            o::OPEN_DOWNGRADE => Self::OpenDowngrade(OpenDowngradeArgs::decode(d)?),
            o::PUTFH => Self::Putfh(NfsFh4::decode(d)?),
            o::PUTPUBFH => Self::Putpubfh,
            o::PUTROOTFH => Self::Putrootfh,
            o::READ => Self::Read(ReadArgs::decode(d)?),
            o::READDIR => Self::Readdir(ReaddirArgs::decode(d)?),
            o::READLINK => Self::Readlink,
            o::REMOVE => Self::Remove(Component4::decode(d)?),
            o::RENAME => Self::Rename(RenameArgs::decode(d)?),
            o::RESTOREFH => Self::Restorefh,
            o::SAVEFH => Self::Savefh,
            o::SECINFO => Self::Secinfo(Component4::decode(d)?),
            o::SETATTR => Self::Setattr(SetattrArgs::decode(d)?),
            o::VERIFY => Self::Verify(Fattr4::decode(d)?),
            o::WRITE => Self::Write(WriteArgs::decode(d)?),
            o::BACKCHANNEL_CTL => Self::BackchannelCtl(BackchannelCtlArgs::decode(d)?),
            o::BIND_CONN_TO_SESSION => Self::BindConnToSession(BindConnToSessionArgs::decode(d)?),
            o::EXCHANGE_ID => Self::ExchangeId(ExchangeIdArgs::decode(d)?),
            o::CREATE_SESSION => Self::CreateSession(CreateSessionArgs::decode(d)?),
            o::DESTROY_SESSION => Self::DestroySession(Sessionid4::decode(d)?),
            o::FREE_STATEID => Self::FreeStateid(Stateid4::decode(d)?),
            o::SECINFO_NO_NAME => Self::SecinfoNoName(SecinfoStyle4::decode(d)?),
            o::SEQUENCE => Self::Sequence(SequenceArgs::decode(d)?),
            o::TEST_STATEID => Self::TestStateid(TestStateidArgs::decode(d)?),
            o::DESTROY_CLIENTID => Self::DestroyClientid(d.u64()?),
            o::RECLAIM_COMPLETE => Self::ReclaimComplete(d.bool()?),
            o::ALLOCATE => Self::Allocate(RangeArgs::decode(d)?),
            o::COPY => Self::Copy(CopyArgs::decode(d)?),
            o::DEALLOCATE => Self::Deallocate(RangeArgs::decode(d)?),
            o::SEEK => Self::Seek(SeekArgs::decode(d)?),
            o::CLONE => Self::Clone(CloneArgs::decode(d)?),
            op if opnum::is_defined(op) => Self::NotSupported(op),
            op => Self::Illegal(op),
        })
    }
}
