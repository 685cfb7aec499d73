//! Results of the operations [`crate::ops`] types: one [`ResOp`] per operation, each a
//! union on its `nfsstat4` as RFC 8881 section 18 and RFC 7862 section 15 define it.

use bytes::Bytes;
use xdr::{
    bad_discriminant, decode_array, decode_list, encode_array, xdr_struct, Decode, DecodeError,
    Decoder, Encode, Encoder,
};

use crate::limits::{MAX_DATA, MAX_DIR_ENTRIES, MAX_SEC_ENTRIES, MAX_TEST_STATEIDS};
use crate::ops::{opnum, ChannelDirFromServer4, LockDenied4, StableHow4};
use crate::types::{
    AtMostOne, Bitmap4, ChangeInfo4, ChannelAttrs4, Clientid4, Component4, Fattr4, Linktext4,
    NfsCookie4, NfsFh4, NfsImplId4, Nfsstat4, Opaque4, SecOid4, Sequenceid4, ServerOwner4,
    Sessionid4, Slotid4, StateProtect4R, Stateid4, Verifier4,
};

/// A result that carries `T` on success and nothing otherwise (`union switch
/// (nfsstat4 status) { case NFS4_OK: T; default: void; }`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Res4<T> {
    Ok(T),
    Err(Nfsstat4),
}

impl<T> Res4<T> {
    /// The status on the wire.
    #[must_use]
    pub fn status(&self) -> Nfsstat4 {
        match self {
            Self::Ok(_) => Nfsstat4::Ok,
            Self::Err(s) => *s,
        }
    }
}

impl<T> From<Result<T, Nfsstat4>> for Res4<T> {
    fn from(r: Result<T, Nfsstat4>) -> Self {
        match r {
            Ok(v) => Self::Ok(v),
            Err(s) => Self::Err(s),
        }
    }
}

impl<T: Encode> Encode for Res4<T> {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::Ok(v) => {
                e.u32(Nfsstat4::Ok as u32);
                v.encode(e);
            }
            Self::Err(s) => {
                debug_assert!(!s.is_ok(), "a failed result with NFS4_OK");
                s.encode(e);
            }
        }
    }
}

impl<T: Decode> Decode for Res4<T> {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match Nfsstat4::decode(d)? {
            Nfsstat4::Ok => Ok(Self::Ok(T::decode(d)?)),
            s => Ok(Self::Err(s)),
        }
    }
}

xdr_struct! {
    /// ACCESS4resok.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct AccessOk {
        pub supported: u32,
        pub access: u32,
    }
}

xdr_struct! {
    /// CREATE4resok.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CreateOk {
        pub cinfo: ChangeInfo4,
        pub attrset: Bitmap4,
    }
}

/// LOCK4res and LOCKT4res: success (a lock stateid for LOCK, nothing for LOCKT), the lock
/// in the way, or another error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockRes<T> {
    Ok(T),
    Denied(LockDenied4),
    Err(Nfsstat4),
}

impl<T> LockRes<T> {
    #[must_use]
    pub fn status(&self) -> Nfsstat4 {
        match self {
            Self::Ok(_) => Nfsstat4::Ok,
            Self::Denied(_) => Nfsstat4::Denied,
            Self::Err(s) => *s,
        }
    }
}

impl<T: Encode> Encode for LockRes<T> {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::Ok(v) => {
                e.u32(Nfsstat4::Ok as u32);
                v.encode(e);
            }
            Self::Denied(d) => {
                e.u32(Nfsstat4::Denied as u32);
                d.encode(e);
            }
            Self::Err(s) => s.encode(e),
        }
    }
}

impl<T: Decode> Decode for LockRes<T> {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match Nfsstat4::decode(d)? {
            Nfsstat4::Ok => Ok(Self::Ok(T::decode(d)?)),
            Nfsstat4::Denied => Ok(Self::Denied(LockDenied4::decode(d)?)),
            s => Ok(Self::Err(s)),
        }
    }
}

/// The void body of LOCKT's success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Nothing;

impl Encode for Nothing {
    fn encode(&self, _e: &mut Encoder) {}
}

impl Decode for Nothing {
    fn decode(_d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self)
    }
}

/// `open_delegation4` as granary sends it: it grants no delegations, so the answer is
/// NONE, or NONE_EXT with the reason when a 4.1 client asked for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenDelegation4 {
    None,
    /// `why_no_delegation4` and, for CONTENTION/RESOURCE, the "will push/signal" flag.
    NoneExt {
        why: u32,
        will_signal: Option<bool>,
    },
}

/// `why_no_delegation4` values.
pub mod why_no_delegation {
    pub const NOT_WANTED: u32 = 0;
    pub const CONTENTION: u32 = 1;
    pub const RESOURCE: u32 = 2;
    pub const NOT_SUPP_FTYPE: u32 = 3;
    pub const WRITE_DELEG_NOT_SUPP_FTYPE: u32 = 4;
    pub const NOT_SUPP_UPGRADE: u32 = 5;
    pub const NOT_SUPP_DOWNGRADE: u32 = 6;
    pub const CANCELLED: u32 = 7;
    pub const IS_DIR: u32 = 8;
}

impl Encode for OpenDelegation4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::None => e.u32(0),
            Self::NoneExt { why, will_signal } => {
                e.u32(3);
                e.u32(*why);
                if let Some(b) = will_signal {
                    e.bool(*b);
                }
            }
        }
    }
}

impl Decode for OpenDelegation4 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.u32()? {
            0 => Ok(Self::None),
            3 => {
                let why = d.u32()?;
                let will_signal = match why {
                    why_no_delegation::CONTENTION | why_no_delegation::RESOURCE => Some(d.bool()?),
                    _ => None,
                };
                Ok(Self::NoneExt { why, will_signal })
            }
            v => Err(bad_discriminant(
                "open_delegation_type4 (granary grants none)",
                v,
            )),
        }
    }
}

xdr_struct! {
    /// OPEN4resok.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct OpenOk {
        pub stateid: Stateid4,
        pub cinfo: ChangeInfo4,
        pub rflags: u32,
        pub attrset: Bitmap4,
        pub delegation: OpenDelegation4,
    }
}

/// READ4resok. The server may encode the data straight from a file instead (see
/// `nfsd`); this type is what the client decodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOk {
    pub eof: bool,
    pub data: Bytes,
}

impl Encode for ReadOk {
    fn encode(&self, e: &mut Encoder) {
        e.bool(self.eof);
        e.opaque(&self.data);
    }
}

impl Decode for ReadOk {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            eof: d.bool()?,
            data: d.opaque("READ data", MAX_DATA)?,
        })
    }
}

xdr_struct! {
    /// `entry4` without its `nextentry` link (the list is flattened).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Entry4 {
        pub cookie: NfsCookie4,
        pub name: Component4,
        pub attrs: Fattr4,
    }
}

/// READDIR4resok with `dirlist4` flattened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaddirOk {
    pub cookieverf: Verifier4,
    pub entries: Vec<Entry4>,
    pub eof: bool,
}

impl Encode for ReaddirOk {
    fn encode(&self, e: &mut Encoder) {
        self.cookieverf.encode(e);
        xdr::encode_list(&self.entries, e);
        e.bool(self.eof);
    }
}

impl Decode for ReaddirOk {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            cookieverf: Verifier4::decode(d)?,
            entries: decode_list(d, "entry4", MAX_DIR_ENTRIES)?,
            eof: d.bool()?,
        })
    }
}

xdr_struct! {
    /// RENAME4resok.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct RenameOk {
        pub source_cinfo: ChangeInfo4,
        pub target_cinfo: ChangeInfo4,
    }
}

/// One `secinfo4`: a flavor, with the GSS triple for RPCSEC_GSS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Secinfo4 {
    Flavor(u32),
    Gss {
        oid: SecOid4,
        qop: u32,
        service: u32,
    },
}

const RPCSEC_GSS: u32 = 6;

impl Encode for Secinfo4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::Flavor(f) => e.u32(*f),
            Self::Gss { oid, qop, service } => {
                e.u32(RPCSEC_GSS);
                oid.encode(e);
                e.u32(*qop);
                e.u32(*service);
            }
        }
    }
}

impl Decode for Secinfo4 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.u32()? {
            RPCSEC_GSS => Ok(Self::Gss {
                oid: SecOid4::decode(d)?,
                qop: d.u32()?,
                service: d.u32()?,
            }),
            f => Ok(Self::Flavor(f)),
        }
    }
}

/// SECINFO4resok (also SECINFO_NO_NAME's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecinfoOk(pub Vec<Secinfo4>);

impl Encode for SecinfoOk {
    fn encode(&self, e: &mut Encoder) {
        encode_array(&self.0, e);
    }
}

impl Decode for SecinfoOk {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self(decode_array(d, "secinfo4", MAX_SEC_ENTRIES)?))
    }
}

xdr_struct! {
    /// WRITE4resok.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct WriteOk {
        pub count: u32,
        pub committed: StableHow4,
        pub writeverf: Verifier4,
    }
}

xdr_struct! {
    /// BIND_CONN_TO_SESSION4resok.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct BindConnToSessionOk {
        pub bctsr_sessid: Sessionid4,
        pub bctsr_dir: ChannelDirFromServer4,
        pub bctsr_use_conn_in_rdma_mode: bool,
    }
}

xdr_struct! {
    /// EXCHANGE_ID4resok.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ExchangeIdOk {
        pub eir_clientid: Clientid4,
        pub eir_sequenceid: Sequenceid4,
        pub eir_flags: u32,
        pub eir_state_protect: StateProtect4R,
        pub eir_server_owner: ServerOwner4,
        pub eir_server_scope: Opaque4,
        pub eir_server_impl_id: AtMostOne<NfsImplId4>,
    }
}

xdr_struct! {
    /// CREATE_SESSION4resok.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CreateSessionOk {
        pub csr_sessionid: Sessionid4,
        pub csr_sequence: Sequenceid4,
        pub csr_flags: u32,
        pub csr_fore_chan_attrs: ChannelAttrs4,
        pub csr_back_chan_attrs: ChannelAttrs4,
    }
}

xdr_struct! {
    /// SEQUENCE4resok.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SequenceOk {
        pub sr_sessionid: Sessionid4,
        pub sr_sequenceid: Sequenceid4,
        pub sr_slotid: Slotid4,
        pub sr_highest_slotid: Slotid4,
        pub sr_target_highest_slotid: Slotid4,
        pub sr_status_flags: u32,
    }
}

/// TEST_STATEID4resok: one status per stateid asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestStateidOk(pub Vec<Nfsstat4>);

impl Encode for TestStateidOk {
    fn encode(&self, e: &mut Encoder) {
        encode_array(&self.0, e);
    }
}

impl Decode for TestStateidOk {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self(decode_array(
            d,
            "tsr_status_codes",
            MAX_TEST_STATEIDS,
        )?))
    }
}

xdr_struct! {
    /// `write_response4` of COPY (and WRITE_SAME). `wr_callback_id` is empty for a
    /// synchronous copy.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct WriteResponse4 {
        pub wr_callback_id: AtMostOne<Stateid4>,
        pub wr_count: u64,
        pub wr_committed: StableHow4,
        pub wr_writeverf: Verifier4,
    }
}

xdr_struct! {
    /// COPY4resok.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CopyOk {
        pub cr_response: WriteResponse4,
        pub cr_consecutive: bool,
        pub cr_synchronous: bool,
    }
}

xdr_struct! {
    /// `seek_res4`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct SeekOk {
        pub sr_eof: bool,
        pub sr_offset: u64,
    }
}

/// The result of one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResOp {
    Access(Res4<AccessOk>),
    Close(Res4<Stateid4>),
    Commit(Res4<Verifier4>),
    Create(Res4<CreateOk>),
    Getattr(Res4<Fattr4>),
    Getfh(Res4<NfsFh4>),
    Link(Res4<ChangeInfo4>),
    Lock(LockRes<Stateid4>),
    Lockt(LockRes<Nothing>),
    Locku(Res4<Stateid4>),
    Lookup(Nfsstat4),
    Lookupp(Nfsstat4),
    Nverify(Nfsstat4),
    Open(Res4<OpenOk>),
    OpenDowngrade(Res4<Stateid4>),
    Putfh(Nfsstat4),
    Putpubfh(Nfsstat4),
    Putrootfh(Nfsstat4),
    Read(Res4<ReadOk>),
    Readdir(Res4<ReaddirOk>),
    Readlink(Res4<Linktext4>),
    Remove(Res4<ChangeInfo4>),
    Rename(Res4<RenameOk>),
    Restorefh(Nfsstat4),
    Savefh(Nfsstat4),
    Secinfo(Res4<SecinfoOk>),
    /// SETATTR4res: a status and the attributes set (also on failure).
    Setattr(Nfsstat4, Bitmap4),
    Verify(Nfsstat4),
    Write(Res4<WriteOk>),
    BackchannelCtl(Nfsstat4),
    BindConnToSession(Res4<BindConnToSessionOk>),
    ExchangeId(Res4<ExchangeIdOk>),
    CreateSession(Res4<CreateSessionOk>),
    DestroySession(Nfsstat4),
    FreeStateid(Nfsstat4),
    SecinfoNoName(Res4<SecinfoOk>),
    Sequence(Res4<SequenceOk>),
    TestStateid(Res4<TestStateidOk>),
    DestroyClientid(Nfsstat4),
    ReclaimComplete(Nfsstat4),
    Allocate(Nfsstat4),
    Copy(Res4<CopyOk>),
    Deallocate(Nfsstat4),
    Seek(Res4<SeekOk>),
    Clone(Nfsstat4),
    /// The result of an operation whose only possible answer here is an error with a
    /// void body: a defined operation granary does not implement (`NFS4ERR_NOTSUPP`),
    /// or OP_ILLEGAL (`op` is then [`opnum::ILLEGAL`]).
    Refused {
        op: u32,
        status: Nfsstat4,
    },
}

impl ResOp {
    /// The result of operation `op` that failed with `status` before it ran (its arguments
    /// did not decode, or the COMPOUND's rules refused it), with the body the RFC gives
    /// that failure: void for every operation but SETATTR, whose result always carries the
    /// attributes set (none here). LOCK and LOCKT carry a body only for `NFS4ERR_DENIED`,
    /// which no caller of this passes.
    #[must_use]
    pub fn failed(op: u32, status: Nfsstat4) -> Self {
        debug_assert!(!status.is_ok(), "a failed result with NFS4_OK");
        match op {
            opnum::SETATTR => Self::Setattr(status, Bitmap4::default()),
            op => Self::Refused { op, status },
        }
    }

    /// The status of the operation.
    #[must_use]
    pub fn status(&self) -> Nfsstat4 {
        match self {
            Self::Access(r) => r.status(),
            Self::Close(r) | Self::Locku(r) | Self::OpenDowngrade(r) => r.status(),
            Self::Commit(r) => r.status(),
            Self::Create(r) => r.status(),
            Self::Getattr(r) => r.status(),
            Self::Getfh(r) => r.status(),
            Self::Link(r) | Self::Remove(r) => r.status(),
            Self::Lock(r) => r.status(),
            Self::Lockt(r) => r.status(),
            Self::Open(r) => r.status(),
            Self::Read(r) => r.status(),
            Self::Readdir(r) => r.status(),
            Self::Readlink(r) => r.status(),
            Self::Rename(r) => r.status(),
            Self::Secinfo(r) | Self::SecinfoNoName(r) => r.status(),
            Self::Write(r) => r.status(),
            Self::BindConnToSession(r) => r.status(),
            Self::ExchangeId(r) => r.status(),
            Self::CreateSession(r) => r.status(),
            Self::Sequence(r) => r.status(),
            Self::TestStateid(r) => r.status(),
            Self::Copy(r) => r.status(),
            Self::Seek(r) => r.status(),
            Self::Setattr(s, _)
            | Self::Lookup(s)
            | Self::Lookupp(s)
            | Self::Nverify(s)
            | Self::Putfh(s)
            | Self::Putpubfh(s)
            | Self::Putrootfh(s)
            | Self::Restorefh(s)
            | Self::Savefh(s)
            | Self::Verify(s)
            | Self::BackchannelCtl(s)
            | Self::DestroySession(s)
            | Self::FreeStateid(s)
            | Self::DestroyClientid(s)
            | Self::ReclaimComplete(s)
            | Self::Allocate(s)
            | Self::Deallocate(s)
            | Self::Clone(s) => *s,
            Self::Refused { status, .. } => *status,
        }
    }

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
            Self::Getfh(_) => o::GETFH,
            Self::Link(_) => o::LINK,
            Self::Lock(_) => o::LOCK,
            Self::Lockt(_) => o::LOCKT,
            Self::Locku(_) => o::LOCKU,
            Self::Lookup(_) => o::LOOKUP,
            Self::Lookupp(_) => o::LOOKUPP,
            Self::Nverify(_) => o::NVERIFY,
            Self::Open(_) => o::OPEN,
            Self::OpenDowngrade(_) => o::OPEN_DOWNGRADE,
            Self::Putfh(_) => o::PUTFH,
            Self::Putpubfh(_) => o::PUTPUBFH,
            Self::Putrootfh(_) => o::PUTROOTFH,
            Self::Read(_) => o::READ,
            Self::Readdir(_) => o::READDIR,
            Self::Readlink(_) => o::READLINK,
            Self::Remove(_) => o::REMOVE,
            Self::Rename(_) => o::RENAME,
            Self::Restorefh(_) => o::RESTOREFH,
            Self::Savefh(_) => o::SAVEFH,
            Self::Secinfo(_) => o::SECINFO,
            Self::Setattr(..) => o::SETATTR,
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
            Self::Refused { op, .. } => *op,
        }
    }
}

impl Encode for ResOp {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.opnum());
        match self {
            Self::Access(r) => r.encode(e),
            Self::Close(r) | Self::Locku(r) | Self::OpenDowngrade(r) => r.encode(e),
            Self::Commit(r) => r.encode(e),
            Self::Create(r) => r.encode(e),
            Self::Getattr(r) => r.encode(e),
            Self::Getfh(r) => r.encode(e),
            Self::Link(r) | Self::Remove(r) => r.encode(e),
            Self::Lock(r) => r.encode(e),
            Self::Lockt(r) => r.encode(e),
            Self::Open(r) => r.encode(e),
            Self::Read(r) => r.encode(e),
            Self::Readdir(r) => r.encode(e),
            Self::Readlink(r) => r.encode(e),
            Self::Rename(r) => r.encode(e),
            Self::Secinfo(r) | Self::SecinfoNoName(r) => r.encode(e),
            Self::Setattr(s, set) => {
                s.encode(e);
                set.encode(e);
            }
            Self::Write(r) => r.encode(e),
            Self::BindConnToSession(r) => r.encode(e),
            Self::ExchangeId(r) => r.encode(e),
            Self::CreateSession(r) => r.encode(e),
            Self::Sequence(r) => r.encode(e),
            Self::TestStateid(r) => r.encode(e),
            Self::Copy(r) => r.encode(e),
            Self::Seek(r) => r.encode(e),
            Self::Lookup(s)
            | Self::Lookupp(s)
            | Self::Nverify(s)
            | Self::Putfh(s)
            | Self::Putpubfh(s)
            | Self::Putrootfh(s)
            | Self::Restorefh(s)
            | Self::Savefh(s)
            | Self::Verify(s)
            | Self::BackchannelCtl(s)
            | Self::DestroySession(s)
            | Self::FreeStateid(s)
            | Self::DestroyClientid(s)
            | Self::ReclaimComplete(s)
            | Self::Allocate(s)
            | Self::Deallocate(s)
            | Self::Clone(s)
            | Self::Refused { status: s, .. } => s.encode(e),
        }
    }
}

impl Decode for ResOp {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        use opnum as o;
        let op = d.u32()?;
        let status = |d: &mut Decoder| Nfsstat4::decode(d);
        Ok(match op {
            o::ACCESS => Self::Access(Res4::decode(d)?),
            o::CLOSE => Self::Close(Res4::decode(d)?),
            o::COMMIT => Self::Commit(Res4::decode(d)?),
            o::CREATE => Self::Create(Res4::decode(d)?),
            o::GETATTR => Self::Getattr(Res4::decode(d)?),
            o::GETFH => Self::Getfh(Res4::decode(d)?),
            o::LINK => Self::Link(Res4::decode(d)?),
            o::LOCK => Self::Lock(LockRes::decode(d)?),
            o::LOCKT => Self::Lockt(LockRes::decode(d)?),
            o::LOCKU => Self::Locku(Res4::decode(d)?),
            o::LOOKUP => Self::Lookup(status(d)?),
            o::LOOKUPP => Self::Lookupp(status(d)?),
            o::NVERIFY => Self::Nverify(status(d)?),
            o::OPEN => Self::Open(Res4::decode(d)?),
            o::OPEN_DOWNGRADE => Self::OpenDowngrade(Res4::decode(d)?),
            o::PUTFH => Self::Putfh(status(d)?),
            o::PUTPUBFH => Self::Putpubfh(status(d)?),
            o::PUTROOTFH => Self::Putrootfh(status(d)?),
            o::READ => Self::Read(Res4::decode(d)?),
            o::READDIR => Self::Readdir(Res4::decode(d)?),
            o::READLINK => Self::Readlink(Res4::decode(d)?),
            o::REMOVE => Self::Remove(Res4::decode(d)?),
            o::RENAME => Self::Rename(Res4::decode(d)?),
            o::RESTOREFH => Self::Restorefh(status(d)?),
            o::SAVEFH => Self::Savefh(status(d)?),
            o::SECINFO => Self::Secinfo(Res4::decode(d)?),
            o::SETATTR => Self::Setattr(status(d)?, Bitmap4::decode(d)?),
            o::VERIFY => Self::Verify(status(d)?),
            o::WRITE => Self::Write(Res4::decode(d)?),
            o::BACKCHANNEL_CTL => Self::BackchannelCtl(status(d)?),
            o::BIND_CONN_TO_SESSION => Self::BindConnToSession(Res4::decode(d)?),
            o::EXCHANGE_ID => Self::ExchangeId(Res4::decode(d)?),
            o::CREATE_SESSION => Self::CreateSession(Res4::decode(d)?),
            o::DESTROY_SESSION => Self::DestroySession(status(d)?),
            o::FREE_STATEID => Self::FreeStateid(status(d)?),
            o::SECINFO_NO_NAME => Self::SecinfoNoName(Res4::decode(d)?),
            o::SEQUENCE => Self::Sequence(Res4::decode(d)?),
            o::TEST_STATEID => Self::TestStateid(Res4::decode(d)?),
            o::DESTROY_CLIENTID => Self::DestroyClientid(status(d)?),
            o::RECLAIM_COMPLETE => Self::ReclaimComplete(status(d)?),
            o::ALLOCATE => Self::Allocate(status(d)?),
            o::COPY => Self::Copy(Res4::decode(d)?),
            o::DEALLOCATE => Self::Deallocate(status(d)?),
            o::SEEK => Self::Seek(Res4::decode(d)?),
            o::CLONE => Self::Clone(status(d)?),
            op => {
                let status = status(d)?;
                if status.is_ok() {
                    // An untyped operation's success body cannot be skipped.
                    return Err(bad_discriminant("result of an untyped operation", op));
                }
                Self::Refused { op, status }
            }
        })
    }
}
