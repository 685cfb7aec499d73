//! DOS share reservations of NLM SHARE/UNSHARE (XNFS 10.14): an owner opens a file for
//! some access and denies others some access; a SHARE whose access another owner denies,
//! or whose deny mode covers another owner's access, is `NLM4_DENIED`.
//!
//! Kept apart from byte-range locks and from NFSv4 OPEN share reservations (they are not
//! checked against each other; docs/LIMITS.md says so): only DOS and OS/2 clients send
//! SHARE, and never to the same files as NFSv4 clients in practice.

use std::collections::HashMap;

use bytes::Bytes;
use locks::{Client, FileKey};
use nlm::nlm4::{FshAccess, FshMode, Stats};

use crate::limits::MAX_NLM_SHARES;

#[derive(Debug, Clone)]
struct Reservation {
    client: Client,
    oh: Bytes,
    access: u32,
    deny: u32,
}

/// Every share reservation, by file.
#[derive(Debug, Default)]
pub struct Shares {
    files: HashMap<FileKey, Vec<Reservation>>,
    count: usize,
}

impl Shares {
    /// Adds (or replaces) the reservation of (`client`, `oh`) on `file`.
    pub fn share(
        &mut self,
        file: FileKey,
        client: Client,
        oh: Bytes,
        access: FshAccess,
        mode: FshMode,
    ) -> Stats {
        let (access, deny) = (access as u32, mode as u32);
        let list = self.files.entry(file).or_default();
        let mine = |r: &Reservation| r.client == client && r.oh == oh;
        let conflict = list
            .iter()
            .filter(|r| !mine(r))
            .any(|r| r.deny & access != 0 || deny & r.access != 0);
        if conflict {
            return Stats::Denied;
        }
        if let Some(r) = list.iter_mut().find(|r| mine(r)) {
            (r.access, r.deny) = (access, deny);
            return Stats::Granted;
        }
        if self.count >= MAX_NLM_SHARES {
            return Stats::DeniedNolocks;
        }
        list.push(Reservation {
            client,
            oh,
            access,
            deny,
        });
        self.count += 1;
        Stats::Granted
    }

    /// Removes the reservation of (`client`, `oh`) on `file`, if any.
    pub fn unshare(&mut self, file: FileKey, client: &Client, oh: &[u8]) {
        let Some(list) = self.files.get_mut(&file) else {
            return;
        };
        let before = list.len();
        list.retain(|r| r.client != *client || r.oh != oh);
        self.count -= before - list.len();
        if list.is_empty() {
            self.files.remove(&file);
        }
    }

    /// Removes every reservation of `client`.
    pub fn release_client(&mut self, client: &Client) {
        let mut removed = 0;
        self.files.retain(|_, list| {
            let before = list.len();
            list.retain(|r| r.client != *client);
            removed += before - list.len();
            !list.is_empty()
        });
        self.count -= removed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_modes_exclude_other_owners_only() {
        let mut s = Shares::default();
        let f = FileKey { export: 1, file: 2 };
        let a = Client::nlm(Bytes::from_static(b"10.0.0.1 a"));
        let b = Client::nlm(Bytes::from_static(b"10.0.0.2 b"));
        let oh = Bytes::from_static(b"o");
        assert_eq!(
            s.share(
                f,
                a.clone(),
                oh.clone(),
                FshAccess::Write,
                FshMode::DenyWrite
            ),
            Stats::Granted
        );
        // Another owner may read (not denied) but not write.
        assert_eq!(
            s.share(
                f,
                b.clone(),
                oh.clone(),
                FshAccess::Write,
                FshMode::DenyNone
            ),
            Stats::Denied
        );
        assert_eq!(
            s.share(f, b.clone(), oh.clone(), FshAccess::Read, FshMode::DenyNone),
            Stats::Granted
        );
        // The first owner may change its own reservation; denying reads now conflicts.
        assert_eq!(
            s.share(
                f,
                a.clone(),
                oh.clone(),
                FshAccess::Write,
                FshMode::DenyReadWrite
            ),
            Stats::Denied
        );
        s.unshare(f, &b, &oh);
        assert_eq!(
            s.share(
                f,
                a.clone(),
                oh.clone(),
                FshAccess::Write,
                FshMode::DenyReadWrite
            ),
            Stats::Granted
        );
        s.release_client(&a);
        assert_eq!(s.count, 0);
        assert!(s.files.is_empty());
    }
}
