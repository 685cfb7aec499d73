//! RPC message headers (RFC 5531 section 9): calls, replies, authentication.

use bytes::Bytes;
use xdr::{Decode, DecodeError, Decoder, Encode, Encoder};

use crate::limits::{MAX_AUTH_BYTES, MAX_AUTH_GROUPS, MAX_MACHINE_NAME_BYTES};

pub const RPC_VERSION: u32 = 2;
pub const MSG_CALL: u32 = 0;
pub const MSG_REPLY: u32 = 1;
pub const REPLY_ACCEPTED: u32 = 0;
pub const REPLY_DENIED: u32 = 1;

/// Authentication flavors granary knows by number.
pub const AUTH_NONE: u32 = 0;
pub const AUTH_SYS: u32 = 1;

/// Why a call was accepted but not executed (`accept_stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptStat {
    Success,
    ProgUnavail,
    ProgMismatch { low: u32, high: u32 },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
}

impl AcceptStat {
    #[must_use]
    pub fn code(self) -> u32 {
        match self {
            Self::Success => 0,
            Self::ProgUnavail => 1,
            Self::ProgMismatch { .. } => 2,
            Self::ProcUnavail => 3,
            Self::GarbageArgs => 4,
            Self::SystemErr => 5,
        }
    }
}

/// Why authentication failed (`auth_stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum AuthStat {
    Ok = 0,
    BadCred = 1,
    RejectedCred = 2,
    BadVerf = 3,
    RejectedVerf = 4,
    TooWeak = 5,
}

impl AuthStat {
    #[must_use]
    pub fn from_u32(v: u32) -> Option<Self> {
        [
            Self::Ok,
            Self::BadCred,
            Self::RejectedCred,
            Self::BadVerf,
            Self::RejectedVerf,
            Self::TooWeak,
        ]
        .into_iter()
        .find(|s| *s as u32 == v)
    }
}

/// `opaque_auth`: a flavor and up to 400 bytes of body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OpaqueAuth {
    pub flavor: u32,
    pub body: Bytes,
}

impl Encode for OpaqueAuth {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.flavor);
        e.opaque(&self.body);
    }
}

impl Decode for OpaqueAuth {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            flavor: d.u32()?,
            body: d.opaque("opaque_auth", MAX_AUTH_BYTES)?,
        })
    }
}

/// The AUTH_SYS credential body (RFC 5531 appendix A).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthSys {
    pub stamp: u32,
    pub machine_name: Bytes,
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

impl Encode for AuthSys {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.stamp);
        e.opaque(&self.machine_name);
        e.u32(self.uid);
        e.u32(self.gid);
        e.u32(u32::try_from(self.gids.len()).unwrap_or(u32::MAX));
        for g in &self.gids {
            e.u32(*g);
        }
    }
}

impl Decode for AuthSys {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let stamp = d.u32()?;
        let machine_name = d.opaque("machinename", MAX_MACHINE_NAME_BYTES)?;
        let uid = d.u32()?;
        let gid = d.u32()?;
        let n = d.length("gids", MAX_AUTH_GROUPS)?;
        let gids = (0..n).map(|_| d.u32()).collect::<Result<_, _>>()?;
        Ok(Self {
            stamp,
            machine_name,
            uid,
            gid,
            gids,
        })
    }
}

/// Who sent a call, as far as the server believes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    None,
    Sys(AuthSys),
}

impl Auth {
    /// Parses a credential. Flavors other than AUTH_NONE and AUTH_SYS, and AUTH_SYS
    /// bodies that do not decode, are refused with the `AuthStat` to send.
    ///
    /// # Errors
    /// `AuthStat::BadCred` for a malformed body, `AuthStat::TooWeak` for other flavors
    /// (RPCSEC_GSS and friends are not supported).
    pub fn from_cred(cred: &OpaqueAuth) -> Result<Self, AuthStat> {
        match cred.flavor {
            AUTH_NONE => Ok(Self::None),
            AUTH_SYS => {
                let mut d = Decoder::new(cred.body.clone());
                let sys = AuthSys::decode(&mut d).map_err(|_| AuthStat::BadCred)?;
                if d.remaining() != 0 {
                    return Err(AuthStat::BadCred);
                }
                Ok(Self::Sys(sys))
            }
            _ => Err(AuthStat::TooWeak),
        }
    }
}

/// The header of a call, up to the procedure arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallHeader {
    pub xid: u32,
    pub program: u32,
    pub version: u32,
    pub procedure: u32,
    pub cred: OpaqueAuth,
    pub verf: OpaqueAuth,
}

impl CallHeader {
    /// Encodes the whole call header (message type and RPC version included).
    pub fn encode(&self, e: &mut Encoder) {
        e.u32(self.xid);
        e.u32(MSG_CALL);
        e.u32(RPC_VERSION);
        e.u32(self.program);
        e.u32(self.version);
        e.u32(self.procedure);
        self.cred.encode(e);
        self.verf.encode(e);
    }
}

/// Word `i` of a message's header (0 xid, 1 message type; for a call 2 RPC version,
/// 3 program, 4 version, 5 procedure), read without decoding the message: `None` past
/// its end.
#[must_use]
pub fn header_word(message: &[u8], i: usize) -> Option<u32> {
    message
        .get(i * 4..i * 4 + 4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// Encodes the start of an accepted reply (verifier AUTH_NONE) and its accept status.
pub fn encode_accepted(e: &mut Encoder, xid: u32, stat: AcceptStat) {
    e.u32(xid);
    e.u32(MSG_REPLY);
    e.u32(REPLY_ACCEPTED);
    OpaqueAuth::default().encode(e);
    e.u32(stat.code());
    if let AcceptStat::ProgMismatch { low, high } = stat {
        e.u32(low);
        e.u32(high);
    }
}

/// Encodes a whole denied reply.
pub fn encode_denied(e: &mut Encoder, xid: u32, denial: Denial) {
    e.u32(xid);
    e.u32(MSG_REPLY);
    e.u32(REPLY_DENIED);
    match denial {
        Denial::RpcMismatch { low, high } => {
            e.u32(0);
            e.u32(low);
            e.u32(high);
        }
        Denial::Auth(stat) => {
            e.u32(1);
            e.u32(stat as u32);
        }
    }
}

/// Why a call was rejected outright (`rejected_reply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    RpcMismatch { low: u32, high: u32 },
    Auth(AuthStat),
}

/// A decoded reply header, as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyStatus {
    Accepted(AcceptStat),
    Denied(Denial),
}

/// Decodes a reply header up to the procedure results. Returns the xid and status.
///
/// # Errors
/// Any malformed header.
pub fn decode_reply_header(d: &mut Decoder) -> Result<(u32, ReplyStatus), DecodeError> {
    let xid = d.u32()?;
    let mtype = d.u32()?;
    if mtype != MSG_REPLY {
        return Err(DecodeError::BadDiscriminant {
            what: "msg_type",
            value: mtype,
        });
    }
    match d.u32()? {
        REPLY_ACCEPTED => {
            let _verf = OpaqueAuth::decode(d)?;
            let stat = match d.u32()? {
                0 => AcceptStat::Success,
                1 => AcceptStat::ProgUnavail,
                2 => AcceptStat::ProgMismatch {
                    low: d.u32()?,
                    high: d.u32()?,
                },
                3 => AcceptStat::ProcUnavail,
                4 => AcceptStat::GarbageArgs,
                5 => AcceptStat::SystemErr,
                value => {
                    return Err(DecodeError::BadDiscriminant {
                        what: "accept_stat",
                        value,
                    })
                }
            };
            Ok((xid, ReplyStatus::Accepted(stat)))
        }
        REPLY_DENIED => {
            let denial = match d.u32()? {
                0 => Denial::RpcMismatch {
                    low: d.u32()?,
                    high: d.u32()?,
                },
                1 => {
                    let v = d.u32()?;
                    let stat = AuthStat::from_u32(v).ok_or(DecodeError::BadDiscriminant {
                        what: "auth_stat",
                        value: v,
                    })?;
                    Denial::Auth(stat)
                }
                value => {
                    return Err(DecodeError::BadDiscriminant {
                        what: "reject_stat",
                        value,
                    })
                }
            };
            Ok((xid, ReplyStatus::Denied(denial)))
        }
        value => Err(DecodeError::BadDiscriminant {
            what: "reply_stat",
            value,
        }),
    }
}
