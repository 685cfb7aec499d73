//! NFSv4.1/4.2 basic data types (RFC 8881 section 3, RFC 7862 section 11): status codes,
//! stateids, times, handles, names, attribute bitmaps and the shared structures of the
//! session and state operations. RFC field names are kept in snake case.

use bytes::Bytes;
use xdr::{
    bad_discriminant, bounded_opaque, decode_array, encode_array, xdr_enum, xdr_struct, Decode,
    DecodeError, Decoder, Encode, Encoder,
};

use crate::limits::{
    MAX_ATTR_BYTES, MAX_AUTHSYS_GIDS, MAX_BITMAP_WORDS, MAX_MACHINE_NAME, MAX_NAME_WIRE,
    MAX_PATH_WIRE, MAX_SEC_ENTRIES, NFS4_FHSIZE, NFS4_OPAQUE_LIMIT, NFS4_OTHER_SIZE,
    NFS4_SESSIONID_SIZE, NFS4_VERIFIER_SIZE,
};

xdr_enum! {
    /// `nfsstat4`: the status of one operation and of a whole COMPOUND.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Nfsstat4 {
        /// `NFS4_OK`
        Ok = 0,
        /// `NFS4ERR_PERM`
        Perm = 1,
        /// `NFS4ERR_NOENT`
        Noent = 2,
        /// `NFS4ERR_IO`
        Io = 5,
        /// `NFS4ERR_NXIO`
        Nxio = 6,
        /// `NFS4ERR_ACCESS`
        Access = 13,
        /// `NFS4ERR_EXIST`
        Exist = 17,
        /// `NFS4ERR_XDEV`
        Xdev = 18,
        /// `NFS4ERR_NOTDIR`
        Notdir = 20,
        /// `NFS4ERR_ISDIR`
        Isdir = 21,
        /// `NFS4ERR_INVAL`
        Inval = 22,
        /// `NFS4ERR_FBIG`
        Fbig = 27,
        /// `NFS4ERR_NOSPC`
        Nospc = 28,
        /// `NFS4ERR_ROFS`
        Rofs = 30,
        /// `NFS4ERR_MLINK`
        Mlink = 31,
        /// `NFS4ERR_NAMETOOLONG`
        Nametoolong = 63,
        /// `NFS4ERR_NOTEMPTY`
        Notempty = 66,
        /// `NFS4ERR_DQUOT`
        Dquot = 69,
        /// `NFS4ERR_STALE`
        Stale = 70,
        /// `NFS4ERR_BADHANDLE`
        Badhandle = 10001,
        /// `NFS4ERR_BAD_COOKIE`
        BadCookie = 10003,
        /// `NFS4ERR_NOTSUPP`
        Notsupp = 10004,
        /// `NFS4ERR_TOOSMALL`
        Toosmall = 10005,
        /// `NFS4ERR_SERVERFAULT`
        Serverfault = 10006,
        /// `NFS4ERR_BADTYPE`
        Badtype = 10007,
        /// `NFS4ERR_DELAY`
        Delay = 10008,
        /// `NFS4ERR_SAME`
        Same = 10009,
        /// `NFS4ERR_DENIED`
        Denied = 10010,
        /// `NFS4ERR_EXPIRED`
        Expired = 10011,
        /// `NFS4ERR_LOCKED`
        Locked = 10012,
        /// `NFS4ERR_GRACE`
        Grace = 10013,
        /// `NFS4ERR_FHEXPIRED`
        Fhexpired = 10014,
        /// `NFS4ERR_SHARE_DENIED`
        ShareDenied = 10015,
        /// `NFS4ERR_WRONGSEC`
        Wrongsec = 10016,
        /// `NFS4ERR_CLID_INUSE`
        ClidInuse = 10017,
        /// `NFS4ERR_RESOURCE`
        Resource = 10018,
        /// `NFS4ERR_MOVED`
        Moved = 10019,
        /// `NFS4ERR_NOFILEHANDLE`
        Nofilehandle = 10020,
        /// `NFS4ERR_MINOR_VERS_MISMATCH`
        MinorVersMismatch = 10021,
        /// `NFS4ERR_STALE_CLIENTID`
        StaleClientid = 10022,
        /// `NFS4ERR_STALE_STATEID`
        StaleStateid = 10023,
        /// `NFS4ERR_OLD_STATEID`
        OldStateid = 10024,
        /// `NFS4ERR_BAD_STATEID`
        BadStateid = 10025,
        /// `NFS4ERR_BAD_SEQID`
        BadSeqid = 10026,
        /// `NFS4ERR_NOT_SAME`
        NotSame = 10027,
        /// `NFS4ERR_LOCK_RANGE`
        LockRange = 10028,
        /// `NFS4ERR_SYMLINK`
        Symlink = 10029,
        /// `NFS4ERR_RESTOREFH`
        Restorefh = 10030,
        /// `NFS4ERR_LEASE_MOVED`
        LeaseMoved = 10031,
        /// `NFS4ERR_ATTRNOTSUPP`
        Attrnotsupp = 10032,
        /// `NFS4ERR_NO_GRACE`
        NoGrace = 10033,
        /// `NFS4ERR_RECLAIM_BAD`
        ReclaimBad = 10034,
        /// `NFS4ERR_RECLAIM_CONFLICT`
        ReclaimConflict = 10035,
        /// `NFS4ERR_BADXDR`
        Badxdr = 10036,
        /// `NFS4ERR_LOCKS_HELD`
        LocksHeld = 10037,
        /// `NFS4ERR_OPENMODE`
        Openmode = 10038,
        /// `NFS4ERR_BADOWNER`
        Badowner = 10039,
        /// `NFS4ERR_BADCHAR`
        Badchar = 10040,
        /// `NFS4ERR_BADNAME`
        Badname = 10041,
        /// `NFS4ERR_BAD_RANGE`
        BadRange = 10042,
        /// `NFS4ERR_LOCK_NOTSUPP`
        LockNotsupp = 10043,
        /// `NFS4ERR_OP_ILLEGAL`
        OpIllegal = 10044,
        /// `NFS4ERR_DEADLOCK`
        Deadlock = 10045,
        /// `NFS4ERR_FILE_OPEN`
        FileOpen = 10046,
        /// `NFS4ERR_ADMIN_REVOKED`
        AdminRevoked = 10047,
        /// `NFS4ERR_CB_PATH_DOWN`
        CbPathDown = 10048,
        /// `NFS4ERR_BADIOMODE`
        Badiomode = 10049,
        /// `NFS4ERR_BADLAYOUT`
        Badlayout = 10050,
        /// `NFS4ERR_BAD_SESSION_DIGEST`
        BadSessionDigest = 10051,
        /// `NFS4ERR_BADSESSION`
        Badsession = 10052,
        /// `NFS4ERR_BADSLOT`
        Badslot = 10053,
        /// `NFS4ERR_COMPLETE_ALREADY`
        CompleteAlready = 10054,
        /// `NFS4ERR_CONN_NOT_BOUND_TO_SESSION`
        ConnNotBoundToSession = 10055,
        /// `NFS4ERR_DELEG_ALREADY_WANTED`
        DelegAlreadyWanted = 10056,
        /// `NFS4ERR_BACK_CHAN_BUSY`
        BackChanBusy = 10057,
        /// `NFS4ERR_LAYOUTTRYLATER`
        Layouttrylater = 10058,
        /// `NFS4ERR_LAYOUTUNAVAILABLE`
        Layoutunavailable = 10059,
        /// `NFS4ERR_NOMATCHING_LAYOUT`
        NomatchingLayout = 10060,
        /// `NFS4ERR_RECALLCONFLICT`
        Recallconflict = 10061,
        /// `NFS4ERR_UNKNOWN_LAYOUTTYPE`
        UnknownLayouttype = 10062,
        /// `NFS4ERR_SEQ_MISORDERED`
        SeqMisordered = 10063,
        /// `NFS4ERR_SEQUENCE_POS`
        SequencePos = 10064,
        /// `NFS4ERR_REQ_TOO_BIG`
        ReqTooBig = 10065,
        /// `NFS4ERR_REP_TOO_BIG`
        RepTooBig = 10066,
        /// `NFS4ERR_REP_TOO_BIG_TO_CACHE`
        RepTooBigToCache = 10067,
        /// `NFS4ERR_RETRY_UNCACHED_REP`
        RetryUncachedRep = 10068,
        /// `NFS4ERR_UNSAFE_COMPOUND`
        UnsafeCompound = 10069,
        /// `NFS4ERR_TOO_MANY_OPS`
        TooManyOps = 10070,
        /// `NFS4ERR_OP_NOT_IN_SESSION`
        OpNotInSession = 10071,
        /// `NFS4ERR_HASH_ALG_UNSUPP`
        HashAlgUnsupp = 10072,
        /// `NFS4ERR_CLIENTID_BUSY`
        ClientidBusy = 10074,
        /// `NFS4ERR_PNFS_IO_HOLE`
        PnfsIoHole = 10075,
        /// `NFS4ERR_SEQ_FALSE_RETRY`
        SeqFalseRetry = 10076,
        /// `NFS4ERR_BAD_HIGH_SLOT`
        BadHighSlot = 10077,
        /// `NFS4ERR_DEADSESSION`
        Deadsession = 10078,
        /// `NFS4ERR_ENCR_ALG_UNSUPP`
        EncrAlgUnsupp = 10079,
        /// `NFS4ERR_PNFS_NO_LAYOUT`
        PnfsNoLayout = 10080,
        /// `NFS4ERR_NOT_ONLY_OP`
        NotOnlyOp = 10081,
        /// `NFS4ERR_WRONG_CRED`
        WrongCred = 10082,
        /// `NFS4ERR_WRONG_TYPE`
        WrongType = 10083,
        /// `NFS4ERR_DIRDELEG_UNAVAIL`
        DirdelegUnavail = 10084,
        /// `NFS4ERR_REJECT_DELEG`
        RejectDeleg = 10085,
        /// `NFS4ERR_RETURNCONFLICT`
        Returnconflict = 10086,
        /// `NFS4ERR_DELEG_REVOKED`
        DelegRevoked = 10087,
        /// `NFS4ERR_PARTNER_NOTSUPP`
        PartnerNotsupp = 10088,
        /// `NFS4ERR_PARTNER_NO_AUTH`
        PartnerNoAuth = 10089,
        /// `NFS4ERR_UNION_NOTSUPP`
        UnionNotsupp = 10090,
        /// `NFS4ERR_OFFLOAD_DENIED`
        OffloadDenied = 10091,
        /// `NFS4ERR_WRONG_LFS`
        WrongLfs = 10092,
        /// `NFS4ERR_BADLABEL`
        Badlabel = 10093,
        /// `NFS4ERR_OFFLOAD_NO_REQS`
        OffloadNoReqs = 10094,
        /// `NFS4ERR_NOXATTR`
        Noxattr = 10095,
        /// `NFS4ERR_XATTR2BIG`
        Xattr2big = 10096,
    }
}

impl Nfsstat4 {
    /// Whether this is `NFS4_OK`.
    #[must_use]
    pub fn is_ok(self) -> bool {
        self == Self::Ok
    }
}

/// A 64-bit client id (`clientid4`).
pub type Clientid4 = u64;
/// A sequence id of a session slot (`sequenceid4`).
pub type Sequenceid4 = u32;
/// A seqid of a stateid or an owner (`seqid4`); unused by 4.1 owners (always 0).
pub type Seqid4 = u32;
/// A slot number (`slotid4`).
pub type Slotid4 = u32;
/// A file's change attribute (`changeid4`).
pub type Changeid4 = u64;
/// `verifier4`.
pub type Verifier4 = [u8; NFS4_VERIFIER_SIZE];
/// `sessionid4`.
pub type Sessionid4 = [u8; NFS4_SESSIONID_SIZE];
/// `nfs_cookie4`: a directory position.
pub type NfsCookie4 = u64;

bounded_opaque!(
    /// `nfs_fh4`: a file handle, at most 128 bytes. Kept as a slice of the request: a
    /// handle is checked and resolved, never stored.
    NfsFh4, "nfs_fh4", NFS4_FHSIZE, borrowed
);
bounded_opaque!(
    /// `component4`: one name in a directory (UTF-8 expected; checked by the server).
    Component4, "component4", MAX_NAME_WIRE
);
bounded_opaque!(
    /// `linktext4`: a symlink's target.
    Linktext4, "linktext4", MAX_PATH_WIRE
);
bounded_opaque!(
    /// `utf8str_cs` of a COMPOUND tag, echoed in the reply.
    Tag4, "tag", crate::limits::MAX_TAG
);
bounded_opaque!(
    /// An opaque of at most `NFS4_OPAQUE_LIMIT` bytes: owners, client ids, server scopes.
    Opaque4, "opaque<NFS4_OPAQUE_LIMIT>", NFS4_OPAQUE_LIMIT
);
bounded_opaque!(
    /// `utf8str_cs` / `utf8str_cis` / `utf8str_mixed`: names such as `owner` and the
    /// implementation id's strings.
    Utf8Str, "utf8string", NFS4_OPAQUE_LIMIT
);
bounded_opaque!(
    /// `attrlist4`: the packed values of the attributes an `fattr4`'s mask names.
    AttrList4, "attrlist4", MAX_ATTR_BYTES
);
bounded_opaque!(
    /// A security mechanism's object id (`sec_oid4`) or any small opaque of the GSS
    /// structures.
    SecOid4, "sec_oid4", NFS4_OPAQUE_LIMIT
);

/// `bitmap4`: a set of attribute (or operation) numbers, bit `n % 32` of word `n / 32`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Bitmap4(pub Vec<u32>);

impl Bitmap4 {
    /// The set holding `bits`.
    #[must_use]
    pub fn from_bits(bits: &[u32]) -> Self {
        let mut b = Self::default();
        for &bit in bits {
            b.set(bit);
        }
        b
    }

    /// Whether `bit` is in the set.
    #[must_use]
    pub fn contains(&self, bit: u32) -> bool {
        self.0
            .get((bit / 32) as usize)
            .is_some_and(|w| w & (1 << (bit % 32)) != 0)
    }

    /// Adds `bit`, growing the words as needed.
    pub fn set(&mut self, bit: u32) {
        let word = (bit / 32) as usize;
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (bit % 32);
    }

    /// The members in increasing order (the order attribute values are packed in).
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &word)| {
            (0..32u32)
                .filter(move |b| word & (1 << b) != 0)
                .map(move |b| w as u32 * 32 + b)
        })
    }

    /// The members that are also in `other`.
    #[must_use]
    pub fn intersect(&self, other: &Self) -> Self {
        let mut words: Vec<u32> = self.0.iter().zip(&other.0).map(|(a, b)| a & b).collect();
        while words.last() == Some(&0) {
            words.pop();
        }
        Self(words)
    }

    /// Whether the set is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
}

impl Encode for Bitmap4 {
    fn encode(&self, e: &mut Encoder) {
        encode_array(&self.0, e);
    }
}

impl Decode for Bitmap4 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self(decode_array(d, "bitmap4", MAX_BITMAP_WORDS)?))
    }
}

xdr_struct! {
    /// `stateid4`: a state's version (`seqid`) and identity (`other`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Stateid4 {
        pub seqid: u32,
        pub other: [u8; NFS4_OTHER_SIZE],
    }
}

impl Stateid4 {
    /// The anonymous stateid (all zeros): I/O outside any open.
    pub const ANONYMOUS: Self = Self {
        seqid: 0,
        other: [0; NFS4_OTHER_SIZE],
    };
    /// The READ bypass stateid (all ones).
    pub const BYPASS: Self = Self {
        seqid: u32::MAX,
        other: [0xff; NFS4_OTHER_SIZE],
    };
    /// The current stateid (seqid 1, other zero): the stateid the previous operation of
    /// the COMPOUND produced (RFC 8881 section 16.2.3.1.2).
    pub const CURRENT: Self = Self {
        seqid: 1,
        other: [0; NFS4_OTHER_SIZE],
    };
    /// The invalid stateid (seqid u32::MAX, other zero).
    pub const INVALID: Self = Self {
        seqid: u32::MAX,
        other: [0; NFS4_OTHER_SIZE],
    };
}

xdr_struct! {
    /// `nfstime4`: seconds and nanoseconds since the epoch.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
    pub struct Nfstime4 {
        pub seconds: i64,
        pub nseconds: u32,
    }
}

/// `settime4`: SETATTR of a time, to the server's clock or to a given value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Settime4 {
    ServerTime,
    ClientTime(Nfstime4),
}

impl Encode for Settime4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::ServerTime => e.u32(0),
            Self::ClientTime(t) => {
                e.u32(1);
                t.encode(e);
            }
        }
    }
}

impl Decode for Settime4 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.u32()? {
            0 => Ok(Self::ServerTime),
            1 => Ok(Self::ClientTime(Nfstime4::decode(d)?)),
            v => Err(bad_discriminant("time_how4", v)),
        }
    }
}

xdr_struct! {
    /// `fsid4`: which file system a file is on.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Fsid4 {
        pub major: u64,
        pub minor: u64,
    }
}

xdr_struct! {
    /// `specdata4`: a device's major and minor numbers.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Specdata4 {
        pub specdata1: u32,
        pub specdata2: u32,
    }
}

xdr_struct! {
    /// `fattr4`: a set of attributes and their packed values (see [`crate::attr`]).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct Fattr4 {
        pub attrmask: Bitmap4,
        pub attr_vals: AttrList4,
    }
}

xdr_struct! {
    /// `change_info4`: a directory's change attribute before and after an operation.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct ChangeInfo4 {
        pub atomic: bool,
        pub before: Changeid4,
        pub after: Changeid4,
    }
}

xdr_struct! {
    /// `state_owner4` (`open_owner4`, `lock_owner4`): a client's name for an owner.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct StateOwner4 {
        pub clientid: Clientid4,
        pub owner: Opaque4,
    }
}

xdr_struct! {
    /// `client_owner4`: the client's long-lived identity and its boot verifier.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct ClientOwner4 {
        pub co_verifier: Verifier4,
        pub co_ownerid: Opaque4,
    }
}

xdr_struct! {
    /// `server_owner4`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ServerOwner4 {
        pub so_minor_id: u64,
        pub so_major_id: Opaque4,
    }
}

xdr_struct! {
    /// `nfs_impl_id4`: an implementation's domain, name and build date.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct NfsImplId4 {
        pub nii_domain: Utf8Str,
        pub nii_name: Utf8Str,
        pub nii_date: Nfstime4,
    }
}

xdr_struct! {
    /// `netaddr4`: a universal address (`h1.h2.h3.h4.p1.p2`) and its netid.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct Netaddr4 {
        pub na_r_netid: Utf8Str,
        pub na_r_addr: Utf8Str,
    }
}

bounded_opaque!(
    /// `authsys_parms.machinename`.
    MachineName, "machinename", MAX_MACHINE_NAME
);

/// `authsys_parms` (RFC 5531), as a callback credential.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthsysParms {
    pub stamp: u32,
    pub machinename: MachineName,
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

impl Encode for AuthsysParms {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.stamp);
        self.machinename.encode(e);
        e.u32(self.uid);
        e.u32(self.gid);
        encode_array(&self.gids, e);
    }
}

impl Decode for AuthsysParms {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            stamp: d.u32()?,
            machinename: MachineName::decode(d)?,
            uid: d.u32()?,
            gid: d.u32()?,
            gids: decode_array(d, "gids", MAX_AUTHSYS_GIDS)?,
        })
    }
}

/// `callback_sec_parms4`: how the server authenticates its callbacks. RPCSEC_GSS handles
/// are decoded (so the COMPOUND stays readable) and refused by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallbackSecParms4 {
    None,
    Sys(AuthsysParms),
    Gss {
        service: u32,
        handle_from_server: SecOid4,
        handle_from_client: SecOid4,
    },
}

const AUTH_NONE: u32 = 0;
const AUTH_SYS: u32 = 1;
const RPCSEC_GSS: u32 = 6;

impl Encode for CallbackSecParms4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::None => e.u32(AUTH_NONE),
            Self::Sys(p) => {
                e.u32(AUTH_SYS);
                p.encode(e);
            }
            Self::Gss {
                service,
                handle_from_server,
                handle_from_client,
            } => {
                e.u32(RPCSEC_GSS);
                e.u32(*service);
                handle_from_server.encode(e);
                handle_from_client.encode(e);
            }
        }
    }
}

impl Decode for CallbackSecParms4 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.u32()? {
            AUTH_NONE => Ok(Self::None),
            AUTH_SYS => Ok(Self::Sys(AuthsysParms::decode(d)?)),
            RPCSEC_GSS => Ok(Self::Gss {
                service: d.u32()?,
                handle_from_server: SecOid4::decode(d)?,
                handle_from_client: SecOid4::decode(d)?,
            }),
            v => Err(bad_discriminant("callback_sec_parms4", v)),
        }
    }
}

/// A list of callback security parameters (`callback_sec_parms4 <>`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallbackSecList(pub Vec<CallbackSecParms4>);

impl Encode for CallbackSecList {
    fn encode(&self, e: &mut Encoder) {
        encode_array(&self.0, e);
    }
}

impl Decode for CallbackSecList {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self(decode_array(
            d,
            "callback_sec_parms4",
            MAX_SEC_ENTRIES,
        )?))
    }
}

/// `channel_attrs4`: a session channel's sizes. `ca_rdma_ird<1>` is an optional word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChannelAttrs4 {
    pub ca_headerpadsize: u32,
    pub ca_maxrequestsize: u32,
    pub ca_maxresponsesize: u32,
    pub ca_maxresponsesize_cached: u32,
    pub ca_maxoperations: u32,
    pub ca_maxrequests: u32,
    pub ca_rdma_ird: Option<u32>,
}

impl Encode for ChannelAttrs4 {
    fn encode(&self, e: &mut Encoder) {
        for v in [
            self.ca_headerpadsize,
            self.ca_maxrequestsize,
            self.ca_maxresponsesize,
            self.ca_maxresponsesize_cached,
            self.ca_maxoperations,
            self.ca_maxrequests,
        ] {
            e.u32(v);
        }
        encode_array(self.ca_rdma_ird.as_slice(), e);
    }
}

impl Decode for ChannelAttrs4 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let mut a = Self {
            ca_headerpadsize: d.u32()?,
            ca_maxrequestsize: d.u32()?,
            ca_maxresponsesize: d.u32()?,
            ca_maxresponsesize_cached: d.u32()?,
            ca_maxoperations: d.u32()?,
            ca_maxrequests: d.u32()?,
            ca_rdma_ird: None,
        };
        a.ca_rdma_ird = decode_array::<u32>(d, "ca_rdma_ird", 1)?.first().copied();
        Ok(a)
    }
}

xdr_struct! {
    /// `state_protect_ops4`: operations that must (or may) use the machine credential.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct StateProtectOps4 {
        pub spo_must_enforce: Bitmap4,
        pub spo_must_allow: Bitmap4,
    }
}

/// `ssv_sp_parms4`, decoded only so that an EXCHANGE_ID asking for SP4_SSV can be
/// answered (the server refuses SSV with `NFS4ERR_ENCR_ALG_UNSUPP`... or NOTSUPP).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SsvSpParms4 {
    pub ssp_ops: StateProtectOps4,
    pub ssp_hash_algs: Vec<SecOid4>,
    pub ssp_encr_algs: Vec<SecOid4>,
    pub ssp_window: u32,
    pub ssp_num_gss_handles: u32,
}

impl Encode for SsvSpParms4 {
    fn encode(&self, e: &mut Encoder) {
        self.ssp_ops.encode(e);
        encode_array(&self.ssp_hash_algs, e);
        encode_array(&self.ssp_encr_algs, e);
        e.u32(self.ssp_window);
        e.u32(self.ssp_num_gss_handles);
    }
}

impl Decode for SsvSpParms4 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            ssp_ops: StateProtectOps4::decode(d)?,
            ssp_hash_algs: decode_array(d, "ssp_hash_algs", MAX_SEC_ENTRIES)?,
            ssp_encr_algs: decode_array(d, "ssp_encr_algs", MAX_SEC_ENTRIES)?,
            ssp_window: d.u32()?,
            ssp_num_gss_handles: d.u32()?,
        })
    }
}

/// `state_protect4_a`: the state protection a client asks for in EXCHANGE_ID.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StateProtect4A {
    #[default]
    None,
    MachCred(StateProtectOps4),
    Ssv(SsvSpParms4),
}

impl Encode for StateProtect4A {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::None => e.u32(0),
            Self::MachCred(ops) => {
                e.u32(1);
                ops.encode(e);
            }
            Self::Ssv(p) => {
                e.u32(2);
                p.encode(e);
            }
        }
    }
}

impl Decode for StateProtect4A {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.u32()? {
            0 => Ok(Self::None),
            1 => Ok(Self::MachCred(StateProtectOps4::decode(d)?)),
            2 => Ok(Self::Ssv(SsvSpParms4::decode(d)?)),
            v => Err(bad_discriminant("state_protect_how4", v)),
        }
    }
}

/// `state_protect4_r`: the state protection the server grants. granary grants SP4_NONE
/// or SP4_MACH_CRED; an SSV reply is never sent, so it is not representable here.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StateProtect4R {
    #[default]
    None,
    MachCred(StateProtectOps4),
}

impl Encode for StateProtect4R {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::None => e.u32(0),
            Self::MachCred(ops) => {
                e.u32(1);
                ops.encode(e);
            }
        }
    }
}

impl Decode for StateProtect4R {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.u32()? {
            0 => Ok(Self::None),
            1 => Ok(Self::MachCred(StateProtectOps4::decode(d)?)),
            v => Err(bad_discriminant("state_protect_how4 (reply)", v)),
        }
    }
}

/// An XDR `T x<1>`: zero or one item.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AtMostOne<T>(pub Option<T>);

impl<T: Encode> Encode for AtMostOne<T> {
    fn encode(&self, e: &mut Encoder) {
        match &self.0 {
            None => e.u32(0),
            Some(v) => {
                e.u32(1);
                v.encode(e);
            }
        }
    }
}

impl<T: Decode> Decode for AtMostOne<T> {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.length("<1> array", 1)? {
            0 => Ok(Self(None)),
            _ => Ok(Self(Some(T::decode(d)?))),
        }
    }
}

/// Bytes of a raw opaque payload kept as a slice of the request (WRITE data).
pub type Payload = Bytes;
