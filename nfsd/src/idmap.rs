//! Owners and groups as NFSv4 names (RFC 8881 section 5.9): `owner` and `owner_group`
//! are strings, `user@domain` in general.
//!
//! By default granary sends numbers (`"1000"`), as knfsd does for AUTH_SYS clients with
//! `nfs4_disable_idmapping` (its default): the Linux client maps them back to ids without
//! idmapd. With an idmap domain (`--idmap-domain`, config `idmap_domain`), it sends
//! `name@domain` for ids the host's user and group databases name (through the C
//! library, so NSS sources count), and the number for the others, as knfsd with
//! idmapping on falls back. It accepts both forms whatever it sends: a number, a number
//! followed by `@anything`, and `name@domain` when the domain is the server's and the
//! host knows the name; anything else is `NFS4ERR_BADOWNER`.
//!
//! Names of ids are looked up once per id and kept in a bounded table
//! ([`crate::limits::IDMAP_CACHE_ENTRIES`] per kind, emptied when full): a GETATTR does
//! not read the user database each time. A user renamed on the host is seen under its
//! new name after a restart, or when the table was emptied. A lookup that sleeps (NSS
//! over the network) holds the thread that asked; with no domain nothing is looked up.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use nfs4::types::Utf8Str;
use nfs4::Nfsstat4;

use crate::limits::IDMAP_CACHE_ENTRIES;

/// Users or groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    User,
    Group,
}

/// How owners are named on the wire (see the module documentation).
#[derive(Debug, Default)]
pub struct Idmap {
    /// `None`: numbers only.
    domain: Option<String>,
    users: Mutex<HashMap<u32, Bytes>>,
    groups: Mutex<HashMap<u32, Bytes>>,
}

impl Idmap {
    /// Numbers both ways (the default).
    #[must_use]
    pub fn numeric() -> Self {
        Self::default()
    }

    /// Names `name@domain` where the host knows the id.
    #[must_use]
    pub fn with_domain(domain: &str) -> Self {
        Self {
            domain: Some(domain.to_string()),
            ..Self::default()
        }
    }

    /// The domain names are sent in, if any.
    #[must_use]
    pub fn domain(&self) -> Option<&str> {
        self.domain.as_deref()
    }

    /// The `owner` attribute of `uid`.
    #[must_use]
    pub fn user_name(&self, uid: u32) -> Utf8Str {
        self.name(Kind::User, uid)
    }

    /// The `owner_group` attribute of `gid`.
    #[must_use]
    pub fn group_name(&self, gid: u32) -> Utf8Str {
        self.name(Kind::Group, gid)
    }

    /// The uid an `owner` names.
    ///
    /// # Errors
    /// `NFS4ERR_BADOWNER` for a name that is neither a number nor a known user of the
    /// server's domain.
    pub fn user_id(&self, name: &Utf8Str) -> Result<u32, Nfsstat4> {
        self.id(Kind::User, name)
    }

    /// The gid an `owner_group` names.
    ///
    /// # Errors
    /// As [`Idmap::user_id`], for groups.
    pub fn group_id(&self, name: &Utf8Str) -> Result<u32, Nfsstat4> {
        self.id(Kind::Group, name)
    }

    fn name(&self, kind: Kind, id: u32) -> Utf8Str {
        let Some(domain) = &self.domain else {
            return numeric(id);
        };
        let table = match kind {
            Kind::User => &self.users,
            Kind::Group => &self.groups,
        };
        // Poisoning: a panic elsewhere cannot leave a map of finished strings half
        // written, so the table is used as it is.
        if let Some(known) = table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
        {
            return Utf8Str(known.clone());
        }
        let named = host_name(kind, id)
            .map_or_else(|| numeric(id).0, |n| Bytes::from(format!("{n}@{domain}")));
        let mut table = table.lock().unwrap_or_else(PoisonError::into_inner);
        if table.len() >= IDMAP_CACHE_ENTRIES {
            table.clear();
        }
        table.insert(id, named.clone());
        Utf8Str(named)
    }

    fn id(&self, kind: Kind, name: &Utf8Str) -> Result<u32, Nfsstat4> {
        let s = std::str::from_utf8(name.as_bytes()).map_err(|_| Nfsstat4::Badowner)?;
        let (who, at) = match s.split_once('@') {
            Some((who, domain)) => (who, Some(domain)),
            None => (s, None),
        };
        if !who.is_empty() && who.bytes().all(|b| b.is_ascii_digit()) {
            // A number, with any domain: what granary and knfsd send without names.
            return who.parse().map_err(|_| Nfsstat4::Badowner);
        }
        match (&self.domain, at) {
            (Some(ours), Some(theirs)) if ours.eq_ignore_ascii_case(theirs) && !who.is_empty() => {
                host_id(kind, who).ok_or(Nfsstat4::Badowner)
            }
            _ => Err(Nfsstat4::Badowner),
        }
    }
}

fn numeric(id: u32) -> Utf8Str {
    Utf8Str(Bytes::from(id.to_string()))
}

/// The host's name of a uid or gid (`getpwuid_r` / `getgrgid_r`), if it has one in UTF-8.
fn host_name(kind: Kind, id: u32) -> Option<String> {
    let name = match kind {
        Kind::User => uzers::get_user_by_uid(id)?.name().to_os_string(),
        Kind::Group => uzers::get_group_by_gid(id)?.name().to_os_string(),
    };
    name.into_string().ok()
}

/// The host's id of a user or group name (`getpwnam_r` / `getgrnam_r`).
fn host_id(kind: Kind, name: &str) -> Option<u32> {
    match kind {
        Kind::User => uzers::get_user_by_name(name).map(|u| u.uid()),
        Kind::Group => uzers::get_group_by_name(name).map(|g| g.gid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Utf8Str {
        Utf8Str(Bytes::from(v.to_string()))
    }

    #[test]
    fn numbers_both_ways_without_a_domain() {
        let m = Idmap::numeric();
        assert_eq!(m.user_name(0), s("0"));
        assert_eq!(m.group_name(1000), s("1000"));
        assert_eq!(m.user_id(&s("1000")), Ok(1000));
        assert_eq!(m.user_id(&s("1000@any.where")), Ok(1000));
        assert_eq!(m.group_id(&s("4294967295")), Ok(u32::MAX));
        for bad in [
            "",
            "root",
            "root@localdomain",
            "-1",
            "4294967296",
            "12a",
            "@x",
            "1 ",
        ] {
            assert_eq!(m.user_id(&s(bad)), Err(Nfsstat4::Badowner), "{bad:?}");
        }
    }

    #[test]
    fn names_from_the_host_with_a_domain_and_numbers_for_the_rest() {
        let m = Idmap::with_domain("example.test");
        // uid and gid 0 are named root on every Linux host.
        assert_eq!(m.user_name(0), s("root@example.test"));
        assert_eq!(m.group_name(0), s("root@example.test"));
        // Asked again: from the table, the same.
        assert_eq!(m.user_name(0), s("root@example.test"));
        assert_eq!(m.user_id(&s("root@example.test")), Ok(0));
        assert_eq!(m.user_id(&s("root@EXAMPLE.test")), Ok(0));
        assert_eq!(m.group_id(&s("root@example.test")), Ok(0));
        // An id the host does not name: its number.
        let unnamed = 3_999_999_999;
        assert!(uzers::get_user_by_uid(unnamed).is_none());
        assert_eq!(m.user_name(unnamed), s("3999999999"));
        assert_eq!(m.user_id(&s("3999999999")), Ok(unnamed));
        // Another domain, an unknown name, no domain at all.
        for bad in [
            "root@other.test",
            "no-such-user-here@example.test",
            "root",
            "@example.test",
        ] {
            assert_eq!(m.user_id(&s(bad)), Err(Nfsstat4::Badowner), "{bad:?}");
        }
    }

    #[test]
    fn the_table_stays_bounded() {
        let m = Idmap::with_domain("example.test");
        for id in 4_000_000_000..4_000_000_000 + IDMAP_CACHE_ENTRIES as u32 + 10 {
            let _ = m.user_name(id);
        }
        let held = m.users.lock().unwrap().len();
        assert!(held <= IDMAP_CACHE_ENTRIES, "{held}");
    }
}
