//! COMPOUND (RFC 8881 section 16.2) and CB_COMPOUND (section 20.2): the one procedure of
//! each program, a tag, a minor version and a list of operations.
//!
//! Decoding a request reads operations front to back and stops at the first one that
//! cannot be read, recording why in [`Compound4Args::stopped`]: the server executes the
//! operations before it and answers that one with `NFS4ERR_BADXDR` (bad arguments),
//! `NFS4ERR_NOTSUPP` (a defined operation granary does not implement) or
//! `NFS4ERR_OP_ILLEGAL` (an undefined number), which ends the COMPOUND as any failed
//! operation does. A header that cannot be read is a [`DecodeError`]: `GARBAGE_ARGS`.

use xdr::{decode_array, encode_array, xdr_struct, Decode, DecodeError, Decoder, Encode, Encoder};

use crate::limits::{MAX_OPS_WIRE, MAX_REFERRING_CALLS};
use crate::ops::ArgOp;
use crate::results::ResOp;
use crate::types::{
    NfsFh4, Nfsstat4, Sequenceid4, Sessionid4, Slotid4, StateOwner4, Stateid4, Tag4,
};

/// Why decoding a COMPOUND stopped before its last operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// The operation at this index could not be decoded.
    BadXdr {
        index: usize,
        opnum: u32,
        error: DecodeError,
    },
    /// More operations than [`MAX_OPS_WIRE`]: the count as sent.
    TooMany(u32),
}

/// COMPOUND4args as decoded by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compound4Args {
    pub tag: Tag4,
    pub minorversion: u32,
    /// The operations decoded, in order. The last one may be
    /// [`ArgOp::NotSupported`] or [`ArgOp::Illegal`], after which nothing was read.
    pub ops: Vec<ArgOp>,
    /// Set when decoding stopped early for a reason other than an unreadable operation
    /// number.
    pub stopped: Option<Stopped>,
}

impl Compound4Args {
    /// A request of these operations (for clients and tests).
    #[must_use]
    pub fn new(minorversion: u32, ops: Vec<ArgOp>) -> Self {
        Self {
            tag: Tag4::default(),
            minorversion,
            ops,
            stopped: None,
        }
    }
}

impl Encode for Compound4Args {
    fn encode(&self, e: &mut Encoder) {
        self.tag.encode(e);
        e.u32(self.minorversion);
        encode_array(&self.ops, e);
    }
}

impl Decode for Compound4Args {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let tag = Tag4::decode(d)?;
        let minorversion = d.u32()?;
        let count = d.u32()?;
        let mut args = Self {
            tag,
            minorversion,
            ops: Vec::new(),
            stopped: None,
        };
        if count > MAX_OPS_WIRE {
            args.stopped = Some(Stopped::TooMany(count));
            return Ok(args);
        }
        args.ops
            .reserve(count.min(d.remaining() as u32 / 4) as usize);
        for index in 0..count as usize {
            let opnum = d.clone().u32()?;
            match ArgOp::decode(d) {
                Ok(op) => {
                    let last = op.ends_decoding();
                    args.ops.push(op);
                    if last {
                        break;
                    }
                }
                Err(error) => {
                    args.stopped = Some(Stopped::BadXdr {
                        index,
                        opnum,
                        error,
                    });
                    break;
                }
            }
        }
        Ok(args)
    }
}

/// COMPOUND4res.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compound4Res {
    /// The status of the last operation executed (`NFS4_OK` when all succeeded).
    pub status: Nfsstat4,
    pub tag: Tag4,
    pub results: Vec<ResOp>,
}

impl Encode for Compound4Res {
    fn encode(&self, e: &mut Encoder) {
        self.status.encode(e);
        self.tag.encode(e);
        encode_array(&self.results, e);
    }
}

impl Decode for Compound4Res {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            status: Nfsstat4::decode(d)?,
            tag: Tag4::decode(d)?,
            results: decode_array(d, "nfs_resop4", MAX_OPS_WIRE)?,
        })
    }
}

// ---------------------------------------------------------------------------------------
// The callback program: what the server sends on the back channel.
// ---------------------------------------------------------------------------------------

/// Callback operation numbers (`nfs_cb_opnum4`).
pub mod cb_opnum {
    pub const CB_GETATTR: u32 = 3;
    pub const CB_RECALL: u32 = 4;
    pub const CB_LAYOUTRECALL: u32 = 5;
    pub const CB_NOTIFY: u32 = 6;
    pub const CB_PUSH_DELEG: u32 = 7;
    pub const CB_RECALL_ANY: u32 = 8;
    pub const CB_RECALLABLE_OBJ_AVAIL: u32 = 9;
    pub const CB_RECALL_SLOT: u32 = 10;
    pub const CB_SEQUENCE: u32 = 11;
    pub const CB_WANTS_CANCELLED: u32 = 12;
    pub const CB_NOTIFY_LOCK: u32 = 13;
    pub const CB_NOTIFY_DEVICEID: u32 = 14;
    pub const CB_OFFLOAD: u32 = 15;
    pub const CB_ILLEGAL: u32 = 10044;
}

xdr_struct! {
    /// `referring_call4`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct ReferringCall4 {
        pub rc_sequenceid: Sequenceid4,
        pub rc_slotid: Slotid4,
    }
}

/// `referring_call_list4`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferringCallList4 {
    pub rcl_sessionid: Sessionid4,
    pub rcl_referring_calls: Vec<ReferringCall4>,
}

impl Encode for ReferringCallList4 {
    fn encode(&self, e: &mut Encoder) {
        self.rcl_sessionid.encode(e);
        encode_array(&self.rcl_referring_calls, e);
    }
}

impl Decode for ReferringCallList4 {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            rcl_sessionid: Sessionid4::decode(d)?,
            rcl_referring_calls: decode_array(d, "referring_call4", MAX_REFERRING_CALLS)?,
        })
    }
}

/// CB_SEQUENCE4args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbSequenceArgs {
    pub csa_sessionid: Sessionid4,
    pub csa_sequenceid: Sequenceid4,
    pub csa_slotid: Slotid4,
    pub csa_highest_slotid: Slotid4,
    pub csa_cachethis: bool,
    pub csa_referring_call_lists: Vec<ReferringCallList4>,
}

impl Encode for CbSequenceArgs {
    fn encode(&self, e: &mut Encoder) {
        self.csa_sessionid.encode(e);
        e.u32(self.csa_sequenceid);
        e.u32(self.csa_slotid);
        e.u32(self.csa_highest_slotid);
        e.bool(self.csa_cachethis);
        encode_array(&self.csa_referring_call_lists, e);
    }
}

impl Decode for CbSequenceArgs {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            csa_sessionid: Sessionid4::decode(d)?,
            csa_sequenceid: d.u32()?,
            csa_slotid: d.u32()?,
            csa_highest_slotid: d.u32()?,
            csa_cachethis: d.bool()?,
            csa_referring_call_lists: decode_array(d, "referring_call_list4", MAX_REFERRING_CALLS)?,
        })
    }
}

xdr_struct! {
    /// CB_SEQUENCE4resok.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CbSequenceOk {
        pub csr_sessionid: Sessionid4,
        pub csr_sequenceid: Sequenceid4,
        pub csr_slotid: Slotid4,
        pub csr_highest_slotid: Slotid4,
        pub csr_target_highest_slotid: Slotid4,
    }
}

xdr_struct! {
    /// CB_RECALL4args.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CbRecallArgs {
        pub stateid: Stateid4,
        pub truncate: bool,
        pub fh: NfsFh4,
    }
}

xdr_struct! {
    /// CB_NOTIFY_LOCK4args: a lock the client waited for may now be free.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CbNotifyLockArgs {
        pub cnla_fh: NfsFh4,
        pub cnla_lock_owner: StateOwner4,
    }
}

/// One callback operation granary sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CbArgOp {
    Sequence(CbSequenceArgs),
    Recall(CbRecallArgs),
    NotifyLock(CbNotifyLockArgs),
}

impl Encode for CbArgOp {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::Sequence(a) => {
                e.u32(cb_opnum::CB_SEQUENCE);
                a.encode(e);
            }
            Self::Recall(a) => {
                e.u32(cb_opnum::CB_RECALL);
                a.encode(e);
            }
            Self::NotifyLock(a) => {
                e.u32(cb_opnum::CB_NOTIFY_LOCK);
                a.encode(e);
            }
        }
    }
}

impl Decode for CbArgOp {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.u32()? {
            cb_opnum::CB_SEQUENCE => Ok(Self::Sequence(CbSequenceArgs::decode(d)?)),
            cb_opnum::CB_RECALL => Ok(Self::Recall(CbRecallArgs::decode(d)?)),
            cb_opnum::CB_NOTIFY_LOCK => Ok(Self::NotifyLock(CbNotifyLockArgs::decode(d)?)),
            v => Err(xdr::bad_discriminant(
                "nfs_cb_opnum4 (granary sends three)",
                v,
            )),
        }
    }
}

/// CB_COMPOUND4args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbCompound4Args {
    pub tag: Tag4,
    pub minorversion: u32,
    pub callback_ident: u32,
    pub ops: Vec<CbArgOp>,
}

impl Encode for CbCompound4Args {
    fn encode(&self, e: &mut Encoder) {
        self.tag.encode(e);
        e.u32(self.minorversion);
        e.u32(self.callback_ident);
        encode_array(&self.ops, e);
    }
}

impl Decode for CbCompound4Args {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            tag: Tag4::decode(d)?,
            minorversion: d.u32()?,
            callback_ident: d.u32()?,
            ops: decode_array(d, "nfs_cb_argop4", MAX_OPS_WIRE)?,
        })
    }
}

/// The result of one callback operation, as the server reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CbResOp {
    Sequence(crate::results::Res4<CbSequenceOk>),
    /// CB_RECALL, CB_NOTIFY_LOCK and any other: a status only.
    Status {
        op: u32,
        status: Nfsstat4,
    },
}

impl CbResOp {
    #[must_use]
    pub fn status(&self) -> Nfsstat4 {
        match self {
            Self::Sequence(r) => r.status(),
            Self::Status { status, .. } => *status,
        }
    }
}

impl Encode for CbResOp {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::Sequence(r) => {
                e.u32(cb_opnum::CB_SEQUENCE);
                r.encode(e);
            }
            Self::Status { op, status } => {
                e.u32(*op);
                status.encode(e);
            }
        }
    }
}

impl Decode for CbResOp {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.u32()? {
            cb_opnum::CB_SEQUENCE => Ok(Self::Sequence(crate::results::Res4::decode(d)?)),
            op => Ok(Self::Status {
                op,
                status: Nfsstat4::decode(d)?,
            }),
        }
    }
}

/// CB_COMPOUND4res.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbCompound4Res {
    pub status: Nfsstat4,
    pub tag: Tag4,
    pub results: Vec<CbResOp>,
}

impl Encode for CbCompound4Res {
    fn encode(&self, e: &mut Encoder) {
        self.status.encode(e);
        self.tag.encode(e);
        encode_array(&self.results, e);
    }
}

impl Decode for CbCompound4Res {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            status: Nfsstat4::decode(d)?,
            tag: Tag4::decode(d)?,
            results: decode_array(d, "nfs_cb_resop4", MAX_OPS_WIRE)?,
        })
    }
}
