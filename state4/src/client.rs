//! Client records and the two operations that make them (RFC 8881 sections 18.35 and
//! 18.36): EXCHANGE_ID, which finds or creates a record for a client owner, and
//! CREATE_SESSION, which confirms it.
//!
//! A client id is the server's boot epoch (high 32 bits) and a counter, so an id from an
//! earlier boot is never mistaken for a live one (`NFS4ERR_STALE_CLIENTID`).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use nfs4::ops::exchgid;
use nfs4::results::CreateSessionOk;
use nfs4::types::{Sessionid4, Verifier4};
use nfs4::Nfsstat4;

use crate::ClientId;

/// Who sent an EXCHANGE_ID or CREATE_SESSION: the RPC credential's flavor and uid
/// (AUTH_SYS) — what RFC 8881 calls the principal. A record made by one principal may
/// not be taken over by another while it holds state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Principal {
    pub flavor: u32,
    pub uid: u32,
}

/// One client record.
#[derive(Debug, Clone)]
pub struct Client {
    pub id: ClientId,
    pub owner: Bytes,
    pub verifier: Verifier4,
    pub principal: Principal,
    pub confirmed: bool,
    /// The `csa_sequence` the next CREATE_SESSION must carry.
    pub next_cs_sequence: u32,
    /// The last CREATE_SESSION's reply, for its retransmission.
    pub last_cs: Option<CreateSessionOk>,
    pub sessions: Vec<Sessionid4>,
    /// When the client last renewed its lease (SEQUENCE), on the monotonic clock.
    pub renewed: Duration,
    pub reclaim_complete: bool,
}

/// What EXCHANGE_ID answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchanged {
    pub clientid: ClientId,
    pub sequenceid: u32,
    /// `EXCHGID4_FLAG_CONFIRMED_R` when the record is confirmed.
    pub confirmed: bool,
    /// A confirmed record of the same owner that this EXCHANGE_ID removed (another
    /// principal's, with no state): its stable-storage record goes too.
    pub removed: Option<ClientId>,
}

/// Every client record.
#[derive(Debug, Default)]
pub struct Clients {
    epoch: u32,
    next: u32,
    pub(crate) by_id: HashMap<ClientId, Client>,
}

impl Clients {
    #[must_use]
    pub fn new(epoch: u32) -> Self {
        Self {
            epoch,
            next: 1,
            by_id: HashMap::new(),
        }
    }

    fn new_id(&mut self) -> ClientId {
        let id = (u64::from(self.epoch) << 32) | u64::from(self.next);
        self.next = self.next.wrapping_add(1).max(1);
        id
    }

    /// Whether `id` was issued by this boot of the server.
    #[must_use]
    pub fn is_ours(&self, id: ClientId) -> bool {
        (id >> 32) as u32 == self.epoch
    }

    fn find(&self, owner: &[u8], confirmed: bool) -> Option<ClientId> {
        self.by_id
            .values()
            .find(|c| c.confirmed == confirmed && c.owner == owner)
            .map(|c| c.id)
    }

    /// EXCHANGE_ID (RFC 8881 section 18.35.5). `has_state` says whether a record still
    /// holds state (sessions or opens) that another principal must not take over.
    ///
    /// # Errors
    /// `NFS4ERR_NOENT`, `NFS4ERR_NOT_SAME`, `NFS4ERR_PERM` for updates of a record that
    /// is missing, from another boot of the client or another principal;
    /// `NFS4ERR_CLID_INUSE` when another principal's record holds state;
    /// `NFS4ERR_RESOURCE` at `max_clients`.
    #[allow(clippy::too_many_arguments)]
    pub fn exchange_id(
        &mut self,
        owner: &Bytes,
        verifier: Verifier4,
        flags: u32,
        principal: Principal,
        now: Duration,
        max_clients: usize,
        has_state: impl Fn(ClientId) -> bool,
    ) -> Result<Exchanged, Nfsstat4> {
        let confirmed = self.find(owner, true);
        if flags & exchgid::UPD_CONFIRMED_REC_A != 0 {
            let c = confirmed
                .and_then(|id| self.by_id.get(&id))
                .ok_or(Nfsstat4::Noent)?;
            if c.principal != principal {
                return Err(Nfsstat4::Perm);
            }
            if c.verifier != verifier {
                return Err(Nfsstat4::NotSame);
            }
            return Ok(Exchanged {
                clientid: c.id,
                sequenceid: c.next_cs_sequence,
                confirmed: true,
                removed: None,
            });
        }
        let mut removed = None;
        if let Some(c) = confirmed.and_then(|id| self.by_id.get(&id)) {
            if c.principal != principal && has_state(c.id) {
                return Err(Nfsstat4::ClidInuse);
            }
            if c.principal == principal && c.verifier == verifier {
                return Ok(Exchanged {
                    clientid: c.id,
                    sequenceid: c.next_cs_sequence,
                    confirmed: true,
                    removed: None,
                });
            }
            if c.principal != principal {
                // Case 3, a client collision, on a record without state: there is nothing
                // to protect, so the record goes now (its client id is stale from here).
                removed = Some(c.id);
            }
            // A rebooted client (new verifier, same principal): a new unconfirmed record;
            // the confirmed one and its state stay until CREATE_SESSION confirms the new
            // one.
        }
        if let Some(id) = removed {
            self.by_id.remove(&id);
        }
        if let Some(old) = self.find(owner, false) {
            self.by_id.remove(&old);
        }
        if self.by_id.len() >= max_clients {
            return Err(Nfsstat4::Resource);
        }
        let id = self.new_id();
        self.by_id.insert(
            id,
            Client {
                id,
                owner: owner.clone(),
                verifier,
                principal,
                confirmed: false,
                next_cs_sequence: 1,
                last_cs: None,
                sessions: Vec::new(),
                renewed: now,
                reclaim_complete: false,
            },
        );
        Ok(Exchanged {
            clientid: id,
            sequenceid: 1,
            confirmed: false,
            removed,
        })
    }

    /// The checks of CREATE_SESSION before a session is made (RFC 8881 section
    /// 18.36.4). `Ok(Some(reply))` is a retransmission to answer with the cached reply.
    ///
    /// # Errors
    /// `NFS4ERR_STALE_CLIENTID`, `NFS4ERR_SEQ_MISORDERED`, `NFS4ERR_CLID_INUSE`.
    pub fn check_create_session(
        &self,
        id: ClientId,
        sequence: u32,
        principal: Principal,
    ) -> Result<Option<CreateSessionOk>, Nfsstat4> {
        let c = self.by_id.get(&id).ok_or(Nfsstat4::StaleClientid)?;
        if sequence == c.next_cs_sequence.wrapping_sub(1) {
            if let Some(reply) = &c.last_cs {
                return Ok(Some(reply.clone()));
            }
        }
        if sequence != c.next_cs_sequence {
            return Err(Nfsstat4::SeqMisordered);
        }
        if c.principal != principal {
            return Err(Nfsstat4::ClidInuse);
        }
        Ok(None)
    }

    /// Confirms `id` if it is not yet: returns the id of the confirmed record of the
    /// same owner it replaces (the caller purges that one's state).
    pub fn confirm(&mut self, id: ClientId) -> Option<ClientId> {
        let c = self.by_id.get(&id)?;
        if c.confirmed {
            return None;
        }
        let old = self.find(&c.owner.clone(), true);
        if let Some(c) = self.by_id.get_mut(&id) {
            c.confirmed = true;
        }
        old
    }

    #[must_use]
    pub fn get(&self, id: ClientId) -> Option<&Client> {
        self.by_id.get(&id)
    }

    pub fn get_mut(&mut self, id: ClientId) -> Option<&mut Client> {
        self.by_id.get_mut(&id)
    }

    pub fn remove(&mut self, id: ClientId) -> Option<Client> {
        self.by_id.remove(&id)
    }

    /// Every record.
    pub fn iter(&self) -> impl Iterator<Item = &Client> {
        self.by_id.values()
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}
