//! NLM version 4 (XNFS chapter 10 "Protocol specification for NLM version 4", the same
//! layout as RFC 1813 appendix II): the arguments and results of its procedures.
//!
//! Offsets and lengths are 64-bit and unsigned on the wire; a length of 0 means "to the
//! end of the file". The file handle travels as a `netobj` holding an NFSv3 handle.

use xdr::{bounded_opaque, xdr_enum, xdr_struct, Decode, DecodeError, Decoder, Encode, Encoder};

use crate::limits::{LM_MAXSTRLEN, MAXNAMELEN, MAXNETOBJ_SZ};

/// An empty XDR body: NULL, the `_MSG` and `_RES` results, FREE_ALL's result.
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

bounded_opaque! {
    /// `netobj`: opaque bytes of at most [`MAXNETOBJ_SZ`]: cookies, owner handles (`oh`)
    /// and file handles (`fh`, an NFSv3 handle of at most 64 bytes inside).
    Netobj, "netobj", MAXNETOBJ_SZ
}

bounded_opaque! {
    /// `caller_name`: the client's host name as it names itself, at most
    /// [`LM_MAXSTRLEN`] bytes.
    CallerName, "caller_name", LM_MAXSTRLEN
}

bounded_opaque! {
    /// `nlm4_notify.name`: a host name, at most [`MAXNAMELEN`] bytes.
    HostName, "nlm4_notify.name", MAXNAMELEN
}

xdr_enum! {
    /// `nlm4_stats`: the status of every NLM result.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Stats {
        /// The lock was granted (or released, or tested free).
        Granted = 0,
        /// A conflicting lock is held: try again later.
        Denied = 1,
        /// The server is out of lock resources (a limit was reached).
        DeniedNolocks = 2,
        /// A blocking request was queued; the server calls `NLM4_GRANTED` when it is granted.
        Blocked = 3,
        /// The server restarted and is in its grace period: only reclaims are granted.
        DeniedGracePeriod = 4,
        /// Granting would deadlock.
        Deadlck = 5,
        /// An exclusive lock on a read-only file system.
        Rofs = 6,
        /// The file handle names no file.
        StaleFh = 7,
        /// The offset or length is beyond what the server supports.
        Fbig = 8,
        /// Any other failure.
        Failed = 9,
    }
}

xdr_struct! {
    /// `nlm4_holder`: the lock that conflicts with a TEST.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct Holder {
        pub exclusive: bool,
        pub svid: i32,
        pub oh: Netobj,
        pub l_offset: u64,
        pub l_len: u64,
    }
}

/// `nlm4_testrply`: TEST's answer, the holder of the conflicting lock when DENIED.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TestReply {
    /// `NLM4_DENIED` with the conflicting lock.
    Denied(Holder),
    /// Any other status, with no body. Never [`Stats::Denied`].
    Other(Stats),
}

impl TestReply {
    /// The status on the wire.
    #[must_use]
    pub fn stat(&self) -> Stats {
        match self {
            Self::Denied(_) => Stats::Denied,
            Self::Other(s) => *s,
        }
    }
}

impl Encode for TestReply {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::Denied(holder) => {
                Stats::Denied.encode(e);
                holder.encode(e);
            }
            Self::Other(stat) => {
                debug_assert_ne!(*stat, Stats::Denied, "a DENIED test reply without holder");
                stat.encode(e);
            }
        }
    }
}

impl Decode for TestReply {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match Stats::decode(d)? {
            Stats::Denied => Ok(Self::Denied(Holder::decode(d)?)),
            other => Ok(Self::Other(other)),
        }
    }
}

xdr_struct! {
    /// `nlm4_res`: the result of LOCK, CANCEL, UNLOCK, GRANTED and NM_LOCK, and the
    /// arguments of their `_RES` callbacks. `cookie` echoes the call's.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub struct Res {
        pub cookie: Netobj,
        pub stat: Stats,
    }
}

xdr_struct! {
    /// `nlm4_testres`: the result of TEST and the argument of TEST_RES.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub struct TestRes {
        pub cookie: Netobj,
        pub stat: TestReply,
    }
}

xdr_struct! {
    /// `nlm4_lock`: a byte range of a file, held by one process (`svid`) of one host
    /// (`caller_name`), whose owner handle is `oh`.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct Lock {
        pub caller_name: CallerName,
        pub fh: Netobj,
        pub oh: Netobj,
        pub svid: i32,
        pub l_offset: u64,
        pub l_len: u64,
    }
}

xdr_struct! {
    /// `nlm4_lockargs`: LOCK, LOCK_MSG and NM_LOCK. `reclaim` is set for a lock the
    /// client held before the server restarted; `state` is the client's NSM state.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct LockArgs {
        pub cookie: Netobj,
        pub block: bool,
        pub exclusive: bool,
        pub alock: Lock,
        pub reclaim: bool,
        pub state: i32,
    }
}

xdr_struct! {
    /// `nlm4_cancargs`: CANCEL and CANCEL_MSG, naming the blocked LOCK to cancel.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct CancArgs {
        pub cookie: Netobj,
        pub block: bool,
        pub exclusive: bool,
        pub alock: Lock,
    }
}

xdr_struct! {
    /// `nlm4_testargs`: TEST, TEST_MSG, and the server's GRANTED and GRANTED_MSG calls.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct TestArgs {
        pub cookie: Netobj,
        pub exclusive: bool,
        pub alock: Lock,
    }
}

xdr_struct! {
    /// `nlm4_unlockargs`: UNLOCK and UNLOCK_MSG.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct UnlockArgs {
        pub cookie: Netobj,
        pub alock: Lock,
    }
}

xdr_enum! {
    /// `fsh4_mode`: what a DOS share reservation denies others.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub enum FshMode {
        /// Deny none.
        #[default]
        DenyNone = 0,
        DenyRead = 1,
        DenyWrite = 2,
        DenyReadWrite = 3,
    }
}

xdr_enum! {
    /// `fsh4_access`: what a DOS share reservation opens the file for.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub enum FshAccess {
        #[default]
        None = 0,
        Read = 1,
        Write = 2,
        ReadWrite = 3,
    }
}

xdr_struct! {
    /// `nlm4_share`: a DOS share reservation of one owner on one file.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct Share {
        pub caller_name: CallerName,
        pub fh: Netobj,
        pub oh: Netobj,
        pub mode: FshMode,
        pub access: FshAccess,
    }
}

xdr_struct! {
    /// `nlm4_shareargs`: SHARE and UNSHARE.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct ShareArgs {
        pub cookie: Netobj,
        pub share: Share,
        pub reclaim: bool,
    }
}

xdr_struct! {
    /// `nlm4_shareres`: the result of SHARE and UNSHARE.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub struct ShareRes {
        pub cookie: Netobj,
        pub stat: Stats,
        pub sequence: i32,
    }
}

xdr_struct! {
    /// `nlm4_notify`: FREE_ALL's arguments, a host whose locks all go and its NSM state.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct Notify {
        pub name: HostName,
        pub state: i32,
    }
}

xdr_enum! {
    /// NLM v4 procedure numbers (16 to 19 are not defined for version 4).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Proc {
        Null = 0,
        Test = 1,
        Lock = 2,
        Cancel = 3,
        Unlock = 4,
        Granted = 5,
        TestMsg = 6,
        LockMsg = 7,
        CancelMsg = 8,
        UnlockMsg = 9,
        GrantedMsg = 10,
        TestRes = 11,
        LockRes = 12,
        CancelRes = 13,
        UnlockRes = 14,
        GrantedRes = 15,
        Share = 20,
        Unshare = 21,
        NmLock = 22,
        FreeAll = 23,
    }
}
