//! A session's fore-channel slot table and its reply cache (RFC 8881 section 2.10.6):
//! the exactly-once part of NFSv4.1.
//!
//! Each slot remembers the sequence id of the last request it ran and, when the client
//! asked (`sa_cachethis`) and the reply fits, the whole encoded reply. A request with the
//! next sequence id runs; a retransmission (the same sequence id) gets the cached reply
//! back, byte for byte, or `NFS4ERR_RETRY_UNCACHED_REP` when none was kept, and is never
//! run again; a retransmission that arrives while the original still runs gets
//! `NFS4ERR_DELAY`; anything else is `NFS4ERR_SEQ_MISORDERED`.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use nfs4::types::{ChannelAttrs4, Sessionid4};
use nfs4::Nfsstat4;

use crate::ClientId;

/// What a slot holds from its last request.
#[derive(Debug, Clone, Default)]
enum Kept {
    /// The slot has not run a request yet.
    #[default]
    Fresh,
    /// The request ran; its reply was not kept.
    Uncached,
    /// The request ran; this is its whole encoded COMPOUND reply.
    Reply(Bytes),
}

#[derive(Debug, Default)]
struct Slot {
    seqid: u32,
    running: bool,
    kept: Kept,
}

/// One session of a client.
#[derive(Debug)]
pub struct Session {
    pub id: Sessionid4,
    pub client: ClientId,
    /// The fore channel's attributes as granted.
    pub fore: ChannelAttrs4,
    /// The back channel's attributes as granted.
    pub back: ChannelAttrs4,
    /// The program number of the client's callback service.
    pub cb_program: u32,
    /// CREATE_SESSION flags granted (CONN_BACK_CHAN when the creating connection is also
    /// the back channel).
    pub flags: u32,
    slots: Mutex<Vec<Slot>>,
}

/// What SEQUENCE decided for a request.
#[derive(Debug)]
pub enum Admission {
    /// A new request: run it, then [`Ticket::finish`] with its reply.
    Run(Ticket),
    /// A retransmission of a request that ran: send this reply again.
    Replay(Bytes),
}

/// The right to run one request on one slot. Finishing it records the reply; dropping
/// it unfinished (the request failed before it could encode a reply) records that the
/// request ran with no reply kept, so a retransmission is answered
/// `NFS4ERR_RETRY_UNCACHED_REP` rather than run twice.
#[derive(Debug)]
pub struct Ticket {
    session: Arc<Session>,
    slot: u32,
    done: bool,
    /// The slot's sequence id and reply before this request, for [`Ticket::withdraw`].
    before: Option<(u32, Kept)>,
}

impl Session {
    pub(crate) fn new(
        id: Sessionid4,
        client: ClientId,
        fore: ChannelAttrs4,
        back: ChannelAttrs4,
        cb_program: u32,
        flags: u32,
    ) -> Self {
        let slots = (0..fore.ca_maxrequests).map(|_| Slot::default()).collect();
        Self {
            id,
            client,
            fore,
            back,
            cb_program,
            flags,
            slots: Mutex::new(slots),
        }
    }

    fn slots(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The highest slot id of the table (`sr_highest_slotid` and the target).
    #[must_use]
    pub fn highest_slot(&self) -> u32 {
        self.fore.ca_maxrequests.saturating_sub(1)
    }

    /// Admits request `seqid` on `slot` (RFC 8881 section 2.10.6.1).
    ///
    /// # Errors
    /// `NFS4ERR_BADSLOT`, `NFS4ERR_DELAY` (the original still runs),
    /// `NFS4ERR_RETRY_UNCACHED_REP`, `NFS4ERR_SEQ_MISORDERED`.
    pub fn admit(self: &Arc<Self>, slot: u32, seqid: u32) -> Result<Admission, Nfsstat4> {
        let mut slots = self.slots();
        let s = slots.get_mut(slot as usize).ok_or(Nfsstat4::Badslot)?;
        if seqid == s.seqid.wrapping_add(1) {
            if s.running {
                // The client reused a slot before its reply came back.
                return Err(Nfsstat4::SeqMisordered);
            }
            let before = (s.seqid, std::mem::replace(&mut s.kept, Kept::Uncached));
            s.seqid = seqid;
            s.running = true;
            return Ok(Admission::Run(Ticket {
                session: Arc::clone(self),
                slot,
                done: false,
                before: Some(before),
            }));
        }
        if seqid != s.seqid {
            return Err(Nfsstat4::SeqMisordered);
        }
        if s.running {
            return Err(Nfsstat4::Delay);
        }
        match &s.kept {
            Kept::Reply(b) => Ok(Admission::Replay(b.clone())),
            Kept::Uncached => Err(Nfsstat4::RetryUncachedRep),
            Kept::Fresh => Err(Nfsstat4::SeqMisordered),
        }
    }

    /// Bytes of replies kept in the slots (for the memory bound's accounting).
    #[must_use]
    pub fn cached_bytes(&self) -> usize {
        self.slots()
            .iter()
            .map(|s| match &s.kept {
                Kept::Reply(b) => b.len(),
                _ => 0,
            })
            .sum()
    }
}

impl Ticket {
    /// The slot this request runs on.
    #[must_use]
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The session.
    #[must_use]
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Records the request's reply: kept for replay when `reply` is `Some` (the caller
    /// keeps it only when the client asked and it fits `ca_maxresponsesize_cached`).
    pub fn finish(mut self, reply: Option<Bytes>) {
        if let Some(b) = &reply {
            debug_assert!(b.len() <= self.session.fore.ca_maxresponsesize_cached as usize);
        }
        self.record(reply.map_or(Kept::Uncached, Kept::Reply));
    }

    /// Takes the request back before it changed anything but its slot: the slot is as it
    /// was before [`Session::admit`] (its sequence id and kept reply), so the same request
    /// is admitted again when it is run somewhere else (a COMPOUND that tried a read on a
    /// network worker and must read where it may block).
    pub fn withdraw(mut self) {
        let mut slots = self.session.slots();
        if let (Some(s), Some((seqid, kept))) =
            (slots.get_mut(self.slot as usize), self.before.take())
        {
            s.seqid = seqid;
            s.kept = kept;
            s.running = false;
        }
        drop(slots);
        self.done = true;
    }

    fn record(&mut self, kept: Kept) {
        let mut slots = self.session.slots();
        if let Some(s) = slots.get_mut(self.slot as usize) {
            s.running = false;
            s.kept = kept;
        }
        self.done = true;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            self.record(Kept::Uncached);
        }
    }
}
