//! Open stateids and share reservations (RFC 8881 sections 8.2, 9.7, 18.16, 18.18,
//! 18.2): one open stateid per (client, open-owner, file), its share access and deny,
//! and the checks of every stateid a READ, WRITE, SETATTR or CLOSE carries.
//!
//! A stateid's `other` is the server's boot epoch (4 bytes) and a counter (8 bytes), so
//! stateids are never reused within a boot and never mistaken for another boot's.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use bytes::Bytes;
use locks::{Owner, ShareTable};
use nfs4::ops::share;
use nfs4::{Nfsstat4, Stateid4};

use crate::{ClientId, LockKey};

/// The `other` part of a stateid.
pub type Other = [u8; 12];

/// One open stateid.
#[derive(Debug, Clone)]
pub struct Open<K> {
    pub other: Other,
    pub seqid: u32,
    pub client: ClientId,
    pub owner: Bytes,
    pub file: K,
    /// OPEN4_SHARE_ACCESS_* currently held (1, 2 or 3).
    pub access: u32,
    /// OPEN4_SHARE_DENY_* currently held (0..=3).
    pub deny: u32,
    /// Bit `a` set when access value `a` was granted by an OPEN (what OPEN_DOWNGRADE may
    /// go back to).
    access_bmap: u8,
    deny_bmap: u8,
}

impl<K> Open<K> {
    #[must_use]
    pub fn stateid(&self) -> Stateid4 {
        Stateid4 {
            seqid: self.seqid,
            other: self.other,
        }
    }

    fn bump(&mut self) {
        // Seqid 0 is reserved for "any version" (RFC 8881 section 8.2.2).
        self.seqid = self.seqid.checked_add(1).unwrap_or(1);
    }
}

/// What OPEN did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    pub stateid: Stateid4,
    /// The owner already had this file open: the access and deny were added to it.
    pub upgraded: bool,
}

/// What CLOSE released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed<K> {
    pub file: K,
    /// No open of any client is left on the file.
    pub last: bool,
}

/// What an I/O stateid authorises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoStateid {
    /// The anonymous or bypass stateid: I/O outside any open.
    Special,
    /// An open stateid of the caller on this file (its current version), with the share
    /// access the open holds (`share::ACCESS_*`): a READ through an open without read
    /// access checks the caller's permission, as knfsd does.
    Open { stateid: Stateid4, access: u32 },
}

impl IoStateid {
    /// Whether an open of the caller grants reading the file: its access was checked when
    /// it was opened, as a local process's open file is.
    #[must_use]
    pub fn open_reads(&self) -> bool {
        matches!(self, Self::Open { access, .. } if access & share::ACCESS_READ != 0)
    }

    /// Whether an open of the caller grants writing the file.
    #[must_use]
    pub fn open_writes(&self) -> bool {
        matches!(self, Self::Open { access, .. } if access & share::ACCESS_WRITE != 0)
    }
}

/// Every open stateid of a server.
#[derive(Debug)]
pub struct Opens<K> {
    epoch: u32,
    next: u64,
    /// The server's one share table (shared with NLM SHARE): each open's access and deny
    /// are set there, and its answer decides `NFS4ERR_SHARE_DENIED`.
    shares: Arc<ShareTable>,
    by_other: HashMap<Other, Open<K>>,
    by_owner: HashMap<(ClientId, Bytes, K), Other>,
    by_file: HashMap<K, Vec<Other>>,
    /// How many opens each client holds (no entry: none), so that the per-client bound
    /// each OPEN checks costs one lookup, not a scan of every open.
    per_client: HashMap<ClientId, usize>,
}

/// The 4.1 seqid rule: 0 matches any version; an older one is `OLD_STATEID`; a newer one
/// was never given out (`BAD_STATEID`).
pub fn check_seqid(asked: u32, current: u32) -> Result<(), Nfsstat4> {
    if asked == 0 || asked == current {
        Ok(())
    } else if asked < current {
        Err(Nfsstat4::OldStateid)
    } else {
        Err(Nfsstat4::BadStateid)
    }
}

fn valid_share(access: u32, deny: u32) -> Result<(), Nfsstat4> {
    if (share::ACCESS_READ..=share::ACCESS_BOTH).contains(&access) && deny <= share::DENY_BOTH {
        Ok(())
    } else {
        Err(Nfsstat4::Inval)
    }
}

/// One stateid fewer for `client` in a per-client count; the entry goes with the last.
pub(crate) fn uncount(counts: &mut HashMap<ClientId, usize>, client: ClientId) {
    if let std::collections::hash_map::Entry::Occupied(mut n) = counts.entry(client) {
        *n.get_mut() -= 1;
        if *n.get() == 0 {
            n.remove();
        }
    }
}

/// An open's holder in the share table: its client and stateid.
fn holder(client: ClientId, other: &Other) -> Owner {
    Owner::nfs4(client, Bytes::copy_from_slice(other))
}

impl<K: Clone + Eq + Hash + LockKey> Opens<K> {
    #[must_use]
    pub fn new(epoch: u32, shares: Arc<ShareTable>) -> Self {
        Self {
            epoch,
            next: 1,
            shares,
            by_other: HashMap::new(),
            by_owner: HashMap::new(),
            by_file: HashMap::new(),
            per_client: HashMap::new(),
        }
    }

    /// Open stateids in total.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_other.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_other.is_empty()
    }

    fn new_other(&mut self) -> Other {
        let mut o = [0u8; 12];
        o[..4].copy_from_slice(&self.epoch.to_be_bytes());
        o[4..].copy_from_slice(&self.next.to_be_bytes());
        self.next += 1;
        o
    }

    /// OPEN: a new open stateid for (client, owner, file), or the owner's existing one
    /// with `access` and `deny` added (an upgrade, seqid + 1).
    ///
    /// # Errors
    /// `NFS4ERR_INVAL` (share values), `NFS4ERR_SHARE_DENIED` (another open's deny or
    /// access conflicts), `NFS4ERR_RESOURCE` at `max_total` opens.
    pub fn open(
        &mut self,
        client: ClientId,
        owner: &Bytes,
        file: &K,
        access: u32,
        deny: u32,
        max_total: usize,
    ) -> Result<Granted, Nfsstat4> {
        valid_share(access, deny)?;
        let key = (client, owner.clone(), file.clone());
        if let Some(other) = self.by_owner.get(&key).copied() {
            let e = self.by_other.get(&other).ok_or(Nfsstat4::Serverfault)?;
            let (na, nd) = (e.access | access, e.deny | deny);
            self.shares
                .set(file.lock_key(), &holder(client, &other), na, nd)
                .map_err(|_| Nfsstat4::ShareDenied)?;
            let e = self.by_other.get_mut(&other).ok_or(Nfsstat4::Serverfault)?;
            e.access = na;
            e.deny = nd;
            e.access_bmap |= 1 << access;
            e.deny_bmap |= 1 << deny;
            e.bump();
            return Ok(Granted {
                stateid: e.stateid(),
                upgraded: true,
            });
        }
        // Stateid numbers that are never handed out (a refusal) are simply skipped.
        let other = self.new_other();
        let h = holder(client, &other);
        self.shares
            .set(file.lock_key(), &h, access, deny)
            .map_err(|_| Nfsstat4::ShareDenied)?;
        if self.by_other.len() >= max_total {
            self.shares.remove(file.lock_key(), &h);
            return Err(Nfsstat4::Resource);
        }
        let e = Open {
            other,
            seqid: 1,
            client,
            owner: owner.clone(),
            file: file.clone(),
            access,
            deny,
            access_bmap: 1 << access,
            deny_bmap: 1 << deny,
        };
        let stateid = e.stateid();
        self.by_other.insert(other, e);
        self.by_owner.insert(key, other);
        self.by_file.entry(file.clone()).or_default().push(other);
        *self.per_client.entry(client).or_default() += 1;
        Ok(Granted {
            stateid,
            upgraded: false,
        })
    }

    /// Finds the caller's open stateid, checking its seqid.
    fn find_mut(&mut self, client: ClientId, sid: &Stateid4) -> Result<&mut Open<K>, Nfsstat4> {
        let e = self
            .by_other
            .get_mut(&sid.other)
            .ok_or(Nfsstat4::BadStateid)?;
        if e.client != client {
            return Err(Nfsstat4::BadStateid);
        }
        check_seqid(sid.seqid, e.seqid)?;
        Ok(e)
    }

    /// The open a stateid names, if it is the caller's and current.
    ///
    /// # Errors
    /// `NFS4ERR_BAD_STATEID`, `NFS4ERR_OLD_STATEID`.
    pub fn get(&self, client: ClientId, sid: &Stateid4) -> Result<&Open<K>, Nfsstat4> {
        let e = self.by_other.get(&sid.other).ok_or(Nfsstat4::BadStateid)?;
        if e.client != client {
            return Err(Nfsstat4::BadStateid);
        }
        check_seqid(sid.seqid, e.seqid)?;
        Ok(e)
    }

    /// The share access an open holds now, by its `other` (any client, any seqid).
    #[must_use]
    pub fn access_of(&self, other: &Other) -> Option<u32> {
        self.by_other.get(other).map(|e| e.access)
    }

    /// OPEN_DOWNGRADE: back to an access and deny the owner was granted before.
    ///
    /// # Errors
    /// Stateid errors; `NFS4ERR_INVAL` when the new values are not a subset of the
    /// current ones or were never granted by an OPEN.
    pub fn downgrade(
        &mut self,
        client: ClientId,
        sid: &Stateid4,
        access: u32,
        deny: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        valid_share(access, deny)?;
        let e = self.find_mut(client, sid)?;
        let subset = access & !e.access == 0 && deny & !e.deny == 0;
        if !subset || e.access_bmap & (1 << access) == 0 || e.deny_bmap & (1 << deny) == 0 {
            return Err(Nfsstat4::Inval);
        }
        e.access = access;
        e.deny = deny;
        let (file, other) = (e.file.lock_key(), e.other);
        // A subset of what the open holds is never in another's way.
        let set = self.shares.set(file, &holder(client, &other), access, deny);
        debug_assert!(set.is_ok(), "a downgrade was refused by the share table");
        let e = self.find_mut(client, sid)?;
        // Only values within the new ones stay reachable by a later downgrade.
        e.access_bmap &= (0..4u32)
            .filter(|a| a & !access == 0)
            .fold(0, |m, a| m | 1 << a);
        e.deny_bmap &= (0..4u32)
            .filter(|d| d & !deny == 0)
            .fold(0, |m, d| m | 1 << d);
        e.bump();
        Ok(e.stateid())
    }

    /// CLOSE: removes the open.
    ///
    /// # Errors
    /// Stateid errors.
    pub fn close(&mut self, client: ClientId, sid: &Stateid4) -> Result<Closed<K>, Nfsstat4> {
        let other = self.find_mut(client, sid)?.other;
        self.remove(&other).ok_or(Nfsstat4::Serverfault)
    }

    fn remove(&mut self, other: &Other) -> Option<Closed<K>> {
        let e = self.by_other.remove(other)?;
        uncount(&mut self.per_client, e.client);
        self.shares
            .remove(e.file.lock_key(), &holder(e.client, other));
        self.by_owner
            .remove(&(e.client, e.owner.clone(), e.file.clone()));
        let mut last = true;
        if let Some(list) = self.by_file.get_mut(&e.file) {
            list.retain(|o| o != other);
            last = list.is_empty();
            if last {
                self.by_file.remove(&e.file);
            }
        }
        Some(Closed { file: e.file, last })
    }

    /// Removes every open of `client` (lease expiry, DESTROY_CLIENTID, a confirmed
    /// reboot of the client); returns what was released.
    pub fn remove_client(&mut self, client: ClientId) -> Vec<Closed<K>> {
        let others: Vec<Other> = self
            .by_other
            .values()
            .filter(|e| e.client == client)
            .map(|e| e.other)
            .collect();
        others.iter().filter_map(|o| self.remove(o)).collect()
    }

    /// How many opens `client` holds.
    #[must_use]
    pub fn count_client(&self, client: ClientId) -> usize {
        self.per_client.get(&client).copied().unwrap_or(0)
    }

    /// Checks the stateid of a READ (`write == false`) or WRITE/SETATTR-size on `file`.
    ///
    /// The anonymous stateid (and the bypass stateid for WRITE) does I/O outside any open
    /// and is refused `NFS4ERR_LOCKED` when another open denies that access; the bypass
    /// stateid reads past deny reservations. An open stateid must be the caller's, on
    /// this file, current, and for WRITE opened with write access (`NFS4ERR_OPENMODE`);
    /// a READ is allowed through a write-only open, as knfsd and most servers do.
    ///
    /// # Errors
    /// As above, and stateid errors.
    pub fn check_io(
        &self,
        client: ClientId,
        sid: &Stateid4,
        file: &K,
        write: bool,
    ) -> Result<IoStateid, Nfsstat4> {
        let bypass = *sid == Stateid4::BYPASS;
        if *sid == Stateid4::ANONYMOUS || bypass {
            let deny = if write {
                share::DENY_WRITE
            } else {
                share::DENY_READ
            };
            let denied = (write || !bypass)
                && self.by_file.get(file).is_some_and(|l| {
                    l.iter()
                        .any(|o| self.by_other.get(o).is_some_and(|e| e.deny & deny != 0))
                });
            return if denied {
                Err(Nfsstat4::Locked)
            } else {
                Ok(IoStateid::Special)
            };
        }
        let e = self.get(client, sid)?;
        if e.file != *file {
            return Err(Nfsstat4::BadStateid);
        }
        if write && e.access & share::ACCESS_WRITE == 0 {
            return Err(Nfsstat4::Openmode);
        }
        Ok(IoStateid::Open {
            stateid: e.stateid(),
            access: e.access,
        })
    }

    /// TEST_STATEID's answer for one stateid of `client`.
    #[must_use]
    pub fn test(&self, client: ClientId, sid: &Stateid4) -> Nfsstat4 {
        match self.get(client, sid) {
            Ok(_) => Nfsstat4::Ok,
            Err(s) => s,
        }
    }

    /// Whether any open exists on `file` (an unlinked file stays until the last close).
    #[must_use]
    pub fn is_open(&self, file: &K) -> bool {
        self.by_file.contains_key(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-client counts follow OPEN, a second OPEN of the same owner and file (the
    /// same stateid), CLOSE and the removal of a client, as a scan of every open would.
    #[test]
    fn count_client_follows_opens_and_closes() {
        let mut opens: Opens<(u32, u64)> = Opens::new(7, Arc::new(ShareTable::default()));
        let scan = |o: &Opens<(u32, u64)>, c: ClientId| {
            o.by_other.values().filter(|e| e.client == c).count()
        };
        let owner = Bytes::from_static(b"owner");
        let mut sids = Vec::new();
        for file in 0..5u64 {
            let client = 1 + file % 2;
            let both = share::ACCESS_BOTH;
            sids.push((
                client,
                opens
                    .open(client, &owner, &(1, file), both, 0, 100)
                    .unwrap(),
            ));
        }
        opens
            .open(1, &owner, &(1, 0), share::ACCESS_READ, 0, 100)
            .unwrap();
        for c in [1, 2, 3] {
            assert_eq!(opens.count_client(c), scan(&opens, c), "client {c}");
        }
        assert_eq!((opens.count_client(1), opens.count_client(2)), (3, 2));
        let (client, first) = &sids[1];
        opens.close(*client, &first.stateid).unwrap();
        assert_eq!(opens.count_client(2), 1);
        assert_eq!(
            opens.close(*client, &first.stateid).err(),
            Some(Nfsstat4::BadStateid)
        );
        assert_eq!(opens.count_client(2), 1, "a failed CLOSE counts nothing");
        opens.remove_client(1);
        assert_eq!((opens.count_client(1), opens.count_client(2)), (0, 1));
        assert!(
            !opens.per_client.contains_key(&1),
            "no entry for a client with none"
        );
    }
}
