//! NFSv4.1 on one connection, as much as `granary bench`'s lock rows need: a confirmed
//! client id and a session (EXCHANGE_ID, CREATE_SESSION, RECLAIM_COMPLETE), COMPOUNDs on
//! the session's slots (the caller picks the slot: one slot per task in flight), OPEN of a
//! new file, LOCK with a new lock-owner and with an existing lock stateid, LOCKU,
//! FREE_STATEID.
//!
//! Replies are decoded with the bounded `nfs4` decoders. A COMPOUND whose SEQUENCE fails
//! is [`ClientError::Nfs4`]; an operation's own status is the caller's to read (a refused
//! LOCK is not an error of the connection: [`Nfs4Session::lock`] returns it as `Err`
//! inside `Ok`).

use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use nfs4::attr::Fattr;
use nfs4::ops::{
    exchgid, share, ArgOp, CreateSessionArgs, Createhow4, ExchangeIdArgs, ExistLockOwner4,
    LockArgs, LockDenied4, Locker4, LockuArgs, NfsLockType4, OpenArgs, OpenClaim4,
    OpenToLockOwner4, Openflag4, SequenceArgs,
};
use nfs4::results::{LockRes, Res4, ResOp};
use nfs4::types::{
    AtMostOne, CallbackSecList, CallbackSecParms4, ChannelAttrs4, ClientOwner4, Component4, NfsFh4,
    Opaque4, Sessionid4, StateOwner4, StateProtect4A,
};
use nfs4::{Compound4Args, Compound4Res, Nfsstat4, Stateid4};

use crate::error::ClientError;
use crate::limits::{V4_CHANNEL_BYTES, V4_MAX_SLOTS};
use crate::RpcConnection;

/// NFS's program number; NFSv4 is version 4, whose one procedure besides NULL is
/// COMPOUND (1).
pub const PROGRAM: u32 = 100_003;
const VERSION: u32 = 4;
const COMPOUND: u32 = 1;

/// A client id and a session of NFSv4.1 on one connection.
#[derive(Debug)]
pub struct Nfs4Session {
    conn: RpcConnection,
    pub clientid: u64,
    pub session: Sessionid4,
    /// The last sequence id sent on each slot.
    seqids: Mutex<Vec<u32>>,
}

fn channel(slots: u32) -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: V4_CHANNEL_BYTES,
        ca_maxresponsesize: V4_CHANNEL_BYTES,
        ca_maxresponsesize_cached: 4096,
        ca_maxoperations: 16,
        ca_maxrequests: slots,
        ca_rdma_ird: None,
    }
}

fn first_status(res: &Compound4Res) -> Nfsstat4 {
    res.results.first().map_or(res.status, ResOp::status)
}

impl Nfs4Session {
    /// EXCHANGE_ID as `owner` (a fresh verifier), CREATE_SESSION with `slots` slots (at
    /// most [`V4_MAX_SLOTS`]) and RECLAIM_COMPLETE on `conn`. Connecting again as the same
    /// `owner` from the same process gives a new session of the same client id.
    ///
    /// # Errors
    /// The connection's errors; [`ClientError::Nfs4`] when an operation fails;
    /// [`ClientError::Protocol`] when the server grants fewer slots than asked for.
    pub async fn connect(
        conn: RpcConnection,
        owner: &[u8],
        slots: u32,
    ) -> Result<Self, ClientError> {
        let slots = slots.clamp(1, V4_MAX_SLOTS);
        let verifier = std::process::id().to_be_bytes();
        let eid = ArgOp::ExchangeId(ExchangeIdArgs {
            eia_clientowner: ClientOwner4 {
                co_verifier: [
                    verifier[0],
                    verifier[1],
                    verifier[2],
                    verifier[3],
                    0,
                    0,
                    0,
                    1,
                ],
                co_ownerid: Opaque4(Bytes::copy_from_slice(owner)),
            },
            eia_flags: exchgid::SUPP_MOVED_REFER,
            eia_state_protect: StateProtect4A::None,
            eia_client_impl_id: AtMostOne(None),
        });
        let res = compound(&conn, 1, vec![eid]).await?;
        let Some(ResOp::ExchangeId(Res4::Ok(e))) = res.results.first() else {
            return Err(ClientError::Nfs4(first_status(&res)));
        };
        let cs = ArgOp::CreateSession(CreateSessionArgs {
            csa_clientid: e.eir_clientid,
            csa_sequence: e.eir_sequenceid,
            csa_flags: 0,
            csa_fore_chan_attrs: channel(slots),
            csa_back_chan_attrs: channel(1),
            csa_cb_program: 0x4000_0000,
            csa_sec_parms: CallbackSecList(vec![CallbackSecParms4::None]),
        });
        let clientid = e.eir_clientid;
        let res = compound(&conn, 1, vec![cs]).await?;
        let Some(ResOp::CreateSession(Res4::Ok(s))) = res.results.first() else {
            return Err(ClientError::Nfs4(first_status(&res)));
        };
        if s.csr_fore_chan_attrs.ca_maxrequests < slots {
            return Err(ClientError::Protocol(format!(
                "asked for {slots} session slots, granted {}",
                s.csr_fore_chan_attrs.ca_maxrequests
            )));
        }
        let me = Self {
            conn,
            clientid,
            session: s.csr_sessionid,
            seqids: Mutex::new(vec![0; slots as usize]),
        };
        // A client id this process confirmed before (the same owner and verifier) has
        // already said it is done reclaiming: NFS4ERR_COMPLETE_ALREADY is harmless
        // (RFC 8881 18.51.4).
        let (status, _) = me.compound(0, vec![ArgOp::ReclaimComplete(false)]).await?;
        if !matches!(status, Nfsstat4::Ok | Nfsstat4::CompleteAlready) {
            return Err(ClientError::Nfs4(status));
        }
        Ok(me)
    }

    /// SEQUENCE on `slot` and `ops` (minor version 1): the COMPOUND's status and the
    /// results after SEQUENCE's.
    ///
    /// # Errors
    /// The connection's errors; [`ClientError::Nfs4`] when SEQUENCE fails;
    /// [`ClientError::Protocol`] for a slot the session does not have.
    pub async fn compound(
        &self,
        slot: u32,
        ops: Vec<ArgOp>,
    ) -> Result<(Nfsstat4, Vec<ResOp>), ClientError> {
        let seqid = {
            let mut s = self.seqids.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(n) = s.get_mut(slot as usize) else {
                return Err(ClientError::Protocol(format!("no session slot {slot}")));
            };
            *n = n.wrapping_add(1);
            *n
        };
        let highest = u32::try_from(self.slots() - 1).unwrap_or(0);
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(ArgOp::Sequence(SequenceArgs {
            sa_sessionid: self.session,
            sa_sequenceid: seqid,
            sa_slotid: slot,
            sa_highest_slotid: highest,
            sa_cachethis: false,
        }));
        all.extend(ops);
        let res = compound(&self.conn, 1, all).await?;
        let mut results = res.results.into_iter();
        match results.next().map(|r| r.status()) {
            Some(Nfsstat4::Ok) => Ok((res.status, results.collect())),
            Some(s) => Err(ClientError::Nfs4(s)),
            None => Err(ClientError::Nfs4(res.status)),
        }
    }

    /// Slots of the session.
    #[must_use]
    pub fn slots(&self) -> usize {
        self.seqids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// PUTROOTFH, LOOKUP of each of `dir`'s components, OPEN of `name` for reading and
    /// writing as `open_owner` (created if missing), GETFH: the file's handle and open
    /// stateid.
    ///
    /// # Errors
    /// As [`Self::compound`]; [`ClientError::Nfs4`] when an operation fails.
    pub async fn open(
        &self,
        slot: u32,
        dir: &[&[u8]],
        name: &[u8],
        open_owner: &[u8],
    ) -> Result<(NfsFh4, Stateid4), ClientError> {
        let mut ops = vec![ArgOp::Putrootfh];
        ops.extend(
            dir.iter()
                .map(|c| ArgOp::Lookup(Component4(Bytes::copy_from_slice(c)))),
        );
        ops.push(ArgOp::Open(OpenArgs {
            seqid: 0,
            share_access: share::ACCESS_BOTH,
            share_deny: share::DENY_NONE,
            owner: StateOwner4 {
                clientid: self.clientid,
                owner: Opaque4(Bytes::copy_from_slice(open_owner)),
            },
            openhow: Openflag4::Create(Createhow4::Unchecked(
                Fattr {
                    mode: Some(0o644),
                    ..Fattr::default()
                }
                .to_fattr4(),
            )),
            claim: OpenClaim4::Null(Component4(Bytes::copy_from_slice(name))),
        }));
        ops.push(ArgOp::Getfh);
        let (status, results) = self.compound(slot, ops).await?;
        match results.as_slice() {
            [.., ResOp::Open(Res4::Ok(o)), ResOp::Getfh(Res4::Ok(fh))] => {
                Ok((fh.clone(), o.stateid))
            }
            _ => Err(ClientError::Nfs4(status)),
        }
    }

    /// PUTFH `fh`, LOCK of `locktype` on `offset` and `length` (all ones: to the end) by
    /// `locker`: the lock stateid, or the lock in the way (`Err(denied)`).
    ///
    /// # Errors
    /// As [`Self::compound`]; [`ClientError::Nfs4`] for a status other than OK and
    /// NFS4ERR_DENIED.
    pub async fn lock(
        &self,
        slot: u32,
        fh: &NfsFh4,
        locktype: NfsLockType4,
        offset: u64,
        length: u64,
        locker: Locker4,
    ) -> Result<Result<Stateid4, LockDenied4>, ClientError> {
        let ops = vec![
            ArgOp::Putfh(fh.clone()),
            ArgOp::Lock(LockArgs {
                locktype,
                reclaim: false,
                offset,
                length,
                locker,
            }),
        ];
        let (status, results) = self.compound(slot, ops).await?;
        match results.last() {
            Some(ResOp::Lock(LockRes::Ok(sid))) => Ok(Ok(*sid)),
            Some(ResOp::Lock(LockRes::Denied(d))) => Ok(Err(d.clone())),
            _ => Err(ClientError::Nfs4(status)),
        }
    }

    /// PUTFH `fh`, LOCKU of `offset` and `length` of `lock_stateid`'s locks: the lock
    /// stateid's next seqid.
    ///
    /// # Errors
    /// As [`Self::compound`]; [`ClientError::Nfs4`] when LOCKU fails.
    pub async fn locku(
        &self,
        slot: u32,
        fh: &NfsFh4,
        lock_stateid: Stateid4,
        offset: u64,
        length: u64,
    ) -> Result<Stateid4, ClientError> {
        let ops = vec![
            ArgOp::Putfh(fh.clone()),
            ArgOp::Locku(LockuArgs {
                locktype: NfsLockType4::Write,
                seqid: 0,
                lock_stateid,
                offset,
                length,
            }),
        ];
        let (status, results) = self.compound(slot, ops).await?;
        match results.last() {
            Some(ResOp::Locku(Res4::Ok(sid))) => Ok(*sid),
            _ => Err(ClientError::Nfs4(status)),
        }
    }
}

impl Nfs4Session {
    /// FREE_STATEID of a lock stateid whose locks are all unlocked (the lock-owner's state
    /// goes with it).
    ///
    /// # Errors
    /// As [`Self::compound`]; [`ClientError::Nfs4`] when FREE_STATEID fails.
    pub async fn free_stateid(&self, slot: u32, stateid: Stateid4) -> Result<(), ClientError> {
        let (status, _) = self
            .compound(slot, vec![ArgOp::FreeStateid(stateid)])
            .await?;
        if status == Nfsstat4::Ok {
            Ok(())
        } else {
            Err(ClientError::Nfs4(status))
        }
    }
}

/// A lock-owner's first LOCK: from the open stateid `open`, as the new lock-owner `owner`
/// of client `clientid`.
#[must_use]
pub fn new_lock_owner(clientid: u64, open: Stateid4, owner: &[u8]) -> Locker4 {
    Locker4::New(OpenToLockOwner4 {
        open_seqid: 0,
        open_stateid: open,
        lock_seqid: 0,
        lock_owner: StateOwner4 {
            clientid,
            owner: Opaque4(Bytes::copy_from_slice(owner)),
        },
    })
}

/// A later LOCK of the lock-owner of `lock_stateid`.
#[must_use]
pub fn existing_lock_owner(lock_stateid: Stateid4) -> Locker4 {
    Locker4::Existing(ExistLockOwner4 {
        lock_stateid,
        lock_seqid: 0,
    })
}

async fn compound(
    conn: &RpcConnection,
    minor: u32,
    ops: Vec<ArgOp>,
) -> Result<Compound4Res, ClientError> {
    conn.call_decode(PROGRAM, VERSION, COMPOUND, &Compound4Args::new(minor, ops))
        .await
}
