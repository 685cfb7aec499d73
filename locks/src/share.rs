//! Share reservations every protocol shares: NFSv4 OPEN's share access and deny (RFC
//! 8881 section 9.7) and NLM SHARE's DOS modes (XNFS 10.14) in one table, so an NLM
//! SHARE that denies writing refuses an NFSv4 OPEN for writing and the other way round.
//!
//! A reservation is a holder's access (what it opened the file for) and deny (what it
//! forbids others). A new or changed reservation is refused when another holder denies
//! an access it asks for, or when it denies an access another holder has. Both
//! protocols use the same bits: read is 1, write is 2 (`OPEN4_SHARE_ACCESS_READ` and
//! `_WRITE`, `OPEN4_SHARE_DENY_READ` and `_WRITE`; NLM's `fsa_R`, `fsa_W`, `fsm_DR`,
//! `fsm_DW`).
//!
//! Holders are [`Owner`]s: an NFSv4 open is `Owner::nfs4(clientid, stateid other)`,
//! an NLM share `Owner { client: Client::nlm(..), id: oh }`. A holder has at most one
//! reservation per file; setting it again replaces it (NFSv4's upgrade and downgrade
//! pass the new union or subset). The table is bounded by its callers' bounds: NFSv4
//! opens (`state4::limits::MAX_OPENS`) and NLM shares (`nfsd::limits::MAX_NLM_SHARES`).
//!
//! Across the heads of an object export, each head's table stays the authority among its
//! holders: an [`Observer`] (set with [`ShareTable::set_observer`]) hears of every change
//! and [`ShareTable::summary`] tells the backend what the head holds on a file
//! (`nfsd::heads`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use crate::{protocol_index, Client, FileKey, Observer, Owner, Protocol};

/// Share access and deny bits (the same for both protocols).
pub mod bits {
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    pub const BOTH: u32 = READ | WRITE;
}

/// A reservation refused because another holder's is in the way (NFS4ERR_SHARE_DENIED,
/// NLM4_DENIED). Transient: it goes when that holder closes or unshares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareDenied;

#[derive(Debug, Clone)]
struct Reservation {
    holder: Owner,
    access: u32,
    deny: u32,
}

#[derive(Debug, Default)]
struct Table {
    files: HashMap<FileKey, Vec<Reservation>>,
    /// Reservations per protocol (`protocol_index`).
    count: [usize; 2],
}

/// The server's one table of share reservations (share it with an `Arc`).
#[derive(Default)]
pub struct ShareTable {
    inner: Mutex<Table>,
    observer: OnceLock<Arc<dyn Observer>>,
}

impl std::fmt::Debug for ShareTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareTable")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

fn conflicts(r: &Reservation, access: u32, deny: u32) -> bool {
    r.deny & access != 0 || deny & r.access != 0
}

impl ShareTable {
    fn inner(&self) -> MutexGuard<'_, Table> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers the one observer told of every change (after the table's mutex is
    /// released, on the changing thread). A second is ignored.
    pub fn set_observer(&self, observer: Arc<dyn Observer>) {
        let _ = self.observer.set(observer);
    }

    fn observe(&self, file: Option<FileKey>) {
        if let Some(o) = self.observer.get() {
            o.changed(file);
        }
    }

    /// The union of every holder's access and of every holder's deny on `file`: what
    /// this server holds there, as the other heads of an object export must see it.
    #[must_use]
    pub fn summary(&self, file: FileKey) -> (u32, u32) {
        self.inner().files.get(&file).map_or((0, 0), |l| {
            l.iter()
                .fold((0, 0), |(a, d), r| (a | r.access, d | r.deny))
        })
    }

    /// Sets `holder`'s reservation on `file` to `access` and `deny` (adds it, or
    /// replaces the holder's own), unless another holder's is in the way.
    ///
    /// # Errors
    /// [`ShareDenied`]; nothing changes then.
    pub fn set(
        &self,
        file: FileKey,
        holder: &Owner,
        access: u32,
        deny: u32,
    ) -> Result<(), ShareDenied> {
        let mut t = self.inner();
        let list = t.files.entry(file).or_default();
        let in_way = list
            .iter()
            .any(|r| r.holder != *holder && conflicts(r, access, deny));
        if in_way {
            return Err(ShareDenied);
        }
        match list.iter_mut().find(|r| r.holder == *holder) {
            Some(r) => (r.access, r.deny) = (access, deny),
            None => {
                list.push(Reservation {
                    holder: holder.clone(),
                    access,
                    deny,
                });
                t.count[protocol_index(holder.protocol())] += 1;
            }
        }
        drop(t);
        self.observe(Some(file));
        Ok(())
    }

    /// Whether a reservation of `access` and `deny` by someone other than `holder` would
    /// be refused now.
    #[must_use]
    pub fn in_way(&self, file: FileKey, holder: &Owner, access: u32, deny: u32) -> bool {
        self.inner().files.get(&file).is_some_and(|l| {
            l.iter()
                .any(|r| r.holder != *holder && conflicts(r, access, deny))
        })
    }

    /// Whether `holder` has a reservation on `file`.
    #[must_use]
    pub fn holds(&self, file: FileKey, holder: &Owner) -> bool {
        self.inner()
            .files
            .get(&file)
            .is_some_and(|l| l.iter().any(|r| r.holder == *holder))
    }

    /// Removes `holder`'s reservation on `file`, if any.
    pub fn remove(&self, file: FileKey, holder: &Owner) {
        let mut t = self.inner();
        let Some(list) = t.files.get_mut(&file) else {
            return;
        };
        let before = list.len();
        list.retain(|r| r.holder != *holder);
        let gone = before - list.len();
        if list.is_empty() {
            t.files.remove(&file);
        }
        t.count[protocol_index(holder.protocol())] -= gone;
        drop(t);
        if gone > 0 {
            self.observe(Some(file));
        }
    }

    /// Removes every reservation of `client`'s holders.
    pub fn release_client(&self, client: &Client) {
        let mut t = self.inner();
        let mut gone = 0;
        t.files.retain(|_, list| {
            let before = list.len();
            list.retain(|r| r.holder.client != *client);
            gone += before - list.len();
            !list.is_empty()
        });
        t.count[protocol_index(client.protocol)] -= gone;
        drop(t);
        if gone > 0 {
            self.observe(None);
        }
    }

    /// Reservations held over `protocol`.
    #[must_use]
    pub fn count(&self, protocol: Protocol) -> usize {
        self.inner().count[protocol_index(protocol)]
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::bits::{BOTH, READ, WRITE};
    use super::*;

    const F: FileKey = FileKey { export: 1, file: 2 };

    fn nlm(host: &'static str) -> Owner {
        Owner {
            client: Client::nlm(Bytes::from_static(host.as_bytes())),
            id: Bytes::from_static(b"oh"),
        }
    }

    #[test]
    fn deny_modes_exclude_other_holders_of_either_protocol() {
        let t = ShareTable::default();
        let (a, b) = (nlm("a"), nlm("b"));
        let open = Owner::nfs4(7, Bytes::from_static(b"stateid-other"));
        t.set(F, &a, WRITE, WRITE).expect("the first reservation");
        assert_eq!(
            t.set(F, &open, WRITE, 0),
            Err(ShareDenied),
            "a denies writing"
        );
        assert_eq!(t.set(F, &b, BOTH, 0), Err(ShareDenied));
        t.set(F, &open, READ, 0).expect("reading is not denied");
        assert_eq!(
            t.set(F, &a, WRITE, BOTH),
            Err(ShareDenied),
            "a may not deny reading while the open reads"
        );
        assert!(
            t.in_way(F, &b, READ, WRITE),
            "b may not deny the writing a does"
        );
        assert_eq!(t.count(Protocol::Nlm), 1);
        assert_eq!(t.count(Protocol::Nfs4), 1);
        t.remove(F, &open);
        t.set(F, &a, WRITE, BOTH).expect("nobody reads now");
        t.set(F, &a, READ, 0).expect("a holder replaces its own");
        t.release_client(&a.client);
        assert_eq!(t.count(Protocol::Nlm), 0);
        t.set(F, &b, BOTH, BOTH).expect("all gone");
    }

    #[test]
    fn the_summary_is_the_union_and_the_observer_hears_every_change() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Count(AtomicUsize, AtomicUsize);
        impl Observer for Count {
            fn changed(&self, file: Option<FileKey>) {
                match file {
                    Some(f) => assert_eq!(f, F),
                    None => {
                        self.1.fetch_add(1, Ordering::Relaxed);
                    }
                }
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let t = ShareTable::default();
        let seen = Arc::new(Count(AtomicUsize::new(0), AtomicUsize::new(0)));
        t.set_observer(Arc::clone(&seen) as Arc<dyn Observer>);
        let (a, b) = (nlm("a"), nlm("b"));
        assert_eq!(t.summary(F), (0, 0));
        t.set(F, &a, READ, WRITE).unwrap();
        t.set(F, &b, READ, 0).unwrap();
        assert_eq!(t.summary(F), (READ, WRITE));
        assert_eq!(t.set(F, &b, WRITE, 0), Err(ShareDenied));
        assert_eq!(
            seen.0.load(Ordering::Relaxed),
            2,
            "a refusal changes nothing"
        );
        t.remove(F, &a);
        assert_eq!(t.summary(F), (READ, 0));
        t.remove(F, &a);
        assert_eq!(
            seen.0.load(Ordering::Relaxed),
            3,
            "nothing to remove: no change"
        );
        t.release_client(&b.client);
        assert_eq!(seen.1.load(Ordering::Relaxed), 1);
        assert_eq!(t.summary(F), (0, 0));
    }
}
