//! DOS share reservations of NLM SHARE/UNSHARE (XNFS 10.14): an owner opens a file for
//! some access and denies others some access; a SHARE whose access another holder
//! denies, or whose deny mode covers another holder's access, is `NLM4_DENIED`.
//!
//! They live in the server's one share table ([`locks::ShareTable`], `NfsState::shares`)
//! beside NFSv4 OPEN's reservations: an NLM SHARE that denies writing refuses an NFSv4
//! OPEN for writing (`NFS4ERR_SHARE_DENIED`), and an NFSv4 OPEN that denies writing
//! refuses an NLM SHARE for writing. A holder is the caller's client (address and
//! `caller_name`) and the share's `oh`; the two modes use the same bits.

use bytes::Bytes;
use locks::{Client, FileKey, Owner, Protocol, ShareTable};
use nlm::nlm4::{FshAccess, FshMode, Stats};

use crate::limits::MAX_NLM_SHARES;

/// The holder of an NLM share: the client and the share's owner handle.
pub fn holder(client: Client, oh: Bytes) -> Owner {
    Owner { client, id: oh }
}

/// SHARE: sets `holder`'s reservation on `file` (replacing its own).
pub fn share(
    table: &ShareTable,
    file: FileKey,
    holder: &Owner,
    access: FshAccess,
    mode: FshMode,
) -> Stats {
    let (access, deny) = (access as u32, mode as u32);
    if !table.holds(file, holder) && table.count(Protocol::Nlm) >= MAX_NLM_SHARES {
        return Stats::DeniedNolocks;
    }
    match table.set(file, holder, access, deny) {
        Ok(()) => Stats::Granted,
        Err(locks::ShareDenied) => Stats::Denied,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_modes_exclude_other_owners_only() {
        let t = ShareTable::default();
        let f = FileKey { export: 1, file: 2 };
        let a = holder(
            Client::nlm(Bytes::from_static(b"10.0.0.1 a")),
            Bytes::from_static(b"o"),
        );
        let b = holder(
            Client::nlm(Bytes::from_static(b"10.0.0.2 b")),
            Bytes::from_static(b"o"),
        );
        let w = FshAccess::Write;
        assert_eq!(share(&t, f, &a, w, FshMode::DenyWrite), Stats::Granted);
        // Another owner may read (not denied) but not write.
        assert_eq!(share(&t, f, &b, w, FshMode::DenyNone), Stats::Denied);
        assert_eq!(
            share(&t, f, &b, FshAccess::Read, FshMode::DenyNone),
            Stats::Granted
        );
        // The first owner may change its own reservation; denying reads now conflicts.
        assert_eq!(share(&t, f, &a, w, FshMode::DenyReadWrite), Stats::Denied);
        t.remove(f, &b);
        assert_eq!(share(&t, f, &a, w, FshMode::DenyReadWrite), Stats::Granted);
        t.release_client(&a.client);
        assert_eq!(t.count(Protocol::Nlm), 0);
    }
}
