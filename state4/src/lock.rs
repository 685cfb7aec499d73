//! Lock stateids (RFC 8881 sections 8.2, 9.1, 18.10-18.12): one per (client, lock-owner,
//! file), made by the first LOCK of a lock-owner on a file (`open_to_lock_owner4`) and
//! derived from the open it named. The locks themselves are the lock manager's
//! (`granary-locks`); a lock stateid names whose locks they are and counts their
//! changes: its seqid goes up by one with each LOCK and LOCKU.
//!
//! The `other` of a lock stateid is the boot epoch and a counter with its top bit set,
//! so it is never an open stateid's.

use std::collections::HashMap;
use std::hash::Hash;

use bytes::Bytes;
use nfs4::{Nfsstat4, Stateid4};

use crate::open::{check_seqid, Other};
use crate::ClientId;

/// A file as the lock manager keys it.
pub trait LockKey {
    fn lock_key(&self) -> locks::FileKey;
}

impl LockKey for (u32, u64) {
    fn lock_key(&self) -> locks::FileKey {
        locks::FileKey::from(*self)
    }
}

/// Tests key files by a number alone (export 0).
impl LockKey for u64 {
    fn lock_key(&self) -> locks::FileKey {
        locks::FileKey {
            export: 0,
            file: *self,
        }
    }
}

/// One lock stateid.
#[derive(Debug, Clone)]
pub struct LockStateid<K> {
    pub other: Other,
    pub seqid: u32,
    pub client: ClientId,
    /// The lock-owner (`lock_owner4.owner`).
    pub owner: Bytes,
    pub file: K,
    /// The open stateid it was derived from.
    pub open: Other,
}

impl<K> LockStateid<K> {
    #[must_use]
    pub fn stateid(&self) -> Stateid4 {
        Stateid4 {
            seqid: self.seqid,
            other: self.other,
        }
    }

    /// The lock manager's name for the lock-owner.
    #[must_use]
    pub fn lock_owner(&self) -> locks::Owner {
        locks::Owner::nfs4(self.client, self.owner.clone())
    }
}

/// Every lock stateid of a server.
#[derive(Debug)]
pub struct LockStateids<K> {
    epoch: u32,
    next: u64,
    by_other: HashMap<Other, LockStateid<K>>,
    by_owner: HashMap<(ClientId, Bytes, K), Other>,
    /// How many lock stateids each client holds (no entry: none): the per-client bound
    /// each LOCK checks costs one lookup.
    per_client: HashMap<ClientId, usize>,
}

/// The top bit of a lock stateid's counter.
const LOCK_BIT: u64 = 1 << 63;

impl<K: Clone + Eq + Hash> LockStateids<K> {
    #[must_use]
    pub fn new(epoch: u32) -> Self {
        Self {
            epoch,
            next: LOCK_BIT | 1,
            by_other: HashMap::new(),
            by_owner: HashMap::new(),
            per_client: HashMap::new(),
        }
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.by_other.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_other.is_empty()
    }

    /// Whether `other` names a lock stateid (of any client, current or not).
    #[must_use]
    pub fn is_lock(&self, other: &Other) -> bool {
        self.by_other.contains_key(other)
    }

    /// The lock stateid `sid` names, if it is the caller's and current.
    ///
    /// # Errors
    /// `NFS4ERR_BAD_STATEID`, `NFS4ERR_OLD_STATEID`.
    pub fn get(&self, client: ClientId, sid: &Stateid4) -> Result<&LockStateid<K>, Nfsstat4> {
        let e = self.by_other.get(&sid.other).ok_or(Nfsstat4::BadStateid)?;
        if e.client != client {
            return Err(Nfsstat4::BadStateid);
        }
        check_seqid(sid.seqid, e.seqid)?;
        Ok(e)
    }

    /// The lock stateid of (client, owner, file), if there is one.
    #[must_use]
    pub fn find(&self, client: ClientId, owner: &Bytes, file: &K) -> Option<&LockStateid<K>> {
        let other = self.by_owner.get(&(client, owner.clone(), file.clone()))?;
        self.by_other.get(other)
    }

    /// A LOCK was granted: the owner's lock stateid on `file` with its seqid one up, or a
    /// new one (seqid 1) derived from `open`.
    pub fn granted(&mut self, client: ClientId, owner: &Bytes, file: &K, open: Other) -> Stateid4 {
        let key = (client, owner.clone(), file.clone());
        if let Some(e) = self
            .by_owner
            .get(&key)
            .and_then(|o| self.by_other.get_mut(o))
        {
            e.seqid = e.seqid.checked_add(1).unwrap_or(1);
            return e.stateid();
        }
        let mut other = [0u8; 12];
        other[..4].copy_from_slice(&self.epoch.to_be_bytes());
        other[4..].copy_from_slice(&self.next.to_be_bytes());
        self.next += 1;
        let e = LockStateid {
            other,
            seqid: 1,
            client,
            owner: owner.clone(),
            file: file.clone(),
            open,
        };
        let sid = e.stateid();
        self.by_other.insert(other, e);
        self.by_owner.insert(key, other);
        *self.per_client.entry(client).or_default() += 1;
        sid
    }

    /// A LOCKU changed the locks of `sid`: its seqid one up.
    ///
    /// # Errors
    /// Stateid errors.
    pub fn changed(&mut self, client: ClientId, sid: &Stateid4) -> Result<Stateid4, Nfsstat4> {
        self.get(client, sid)?;
        let e = self
            .by_other
            .get_mut(&sid.other)
            .ok_or(Nfsstat4::BadStateid)?;
        e.seqid = e.seqid.checked_add(1).unwrap_or(1);
        Ok(e.stateid())
    }

    /// The lock stateids derived from the open `open`.
    #[must_use]
    pub fn of_open(&self, open: &Other) -> Vec<LockStateid<K>> {
        self.by_other
            .values()
            .filter(|e| e.open == *open)
            .cloned()
            .collect()
    }

    pub fn remove(&mut self, other: &Other) -> Option<LockStateid<K>> {
        let e = self.by_other.remove(other)?;
        crate::open::uncount(&mut self.per_client, e.client);
        self.by_owner
            .remove(&(e.client, e.owner.clone(), e.file.clone()));
        Some(e)
    }

    /// Removes every lock stateid of `client`; returns how many there were.
    pub fn remove_client(&mut self, client: ClientId) -> usize {
        let others: Vec<Other> = self
            .by_other
            .values()
            .filter(|e| e.client == client)
            .map(|e| e.other)
            .collect();
        others.iter().filter_map(|o| self.remove(o)).count()
    }

    /// Lock stateids of `client`.
    #[must_use]
    pub fn count_client(&self, client: ClientId) -> usize {
        self.per_client.get(&client).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-client counts follow new lock stateids (not a LOCK on an existing one),
    /// their removal and the removal of a client.
    #[test]
    fn count_client_follows_lock_stateids() {
        let mut locks: LockStateids<u64> = LockStateids::new(7);
        let owner = Bytes::from_static(b"lock-owner");
        let mut sids = Vec::new();
        for file in 0..4u64 {
            sids.push(locks.granted(1 + file % 2, &owner, &file, [0; 12]));
        }
        locks.granted(1, &owner, &0, [0; 12]);
        assert_eq!((locks.count_client(1), locks.count_client(2)), (2, 2));
        locks.remove(&sids[1].other).unwrap();
        assert!(locks.remove(&sids[1].other).is_none());
        assert_eq!(locks.count_client(2), 1);
        assert_eq!(locks.remove_client(1), 2);
        assert_eq!((locks.count_client(1), locks.count_client(2)), (0, 1));
        assert!(!locks.per_client.contains_key(&1));
    }
}
