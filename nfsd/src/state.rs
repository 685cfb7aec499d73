//! State shared by every NFS and MOUNT call of one server, and handle resolution.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use nfs3::nfs::{NfsFh3, Nfsstat3};
use rpc::{Auth, CallContext};
use vfs::{Attr, Cred, Export, ExportTable, FileId, FsError};

use crate::convert::status_of;
use crate::credcache::CredCache;
use crate::idmap::Idmap;
use crate::limits::{CRED_KEY_WORDS, MAX_MOUNTS_PER_CLIENT, MAX_MOUNT_ENTRIES};

/// One server's exports, write verifier and mount list.
pub struct NfsState {
    pub exports: ExportTable,
    /// Sent with every WRITE and COMMIT reply. It is random per server start, so a client
    /// that wrote UNSTABLE data before a restart sees a new verifier and writes again.
    pub write_verifier: [u8; 8],
    /// Largest READ and WRITE (FSINFO rtmax/wtmax), from the record limit: see
    /// [`crate::limits::max_io_bytes_for_record`].
    pub max_io_bytes: u32,
    mounts: Mutex<VecDeque<MountEntry>>,
    /// Seed 004's credential cache: the mapped credential per (export, sent credential),
    /// `None` with `--fhcache off` (then every call maps its credential afresh).
    creds: Option<CredCache>,
    /// When a large READ is sent from the file with `sendfile` (`--sendfile`).
    pub sendfile: SendfileMode,
    /// How NFSv4 names owners and groups (`--idmap-domain`).
    pub idmap: Idmap,
    /// The one byte-range lock manager of the server: NFSv4 LOCK and NLM (NFSv3) take
    /// their locks here, so each protocol's locks are in the other's way
    /// (docs/LOCKS.md). Keyed by [`locks::FileKey`] = (export id, file id).
    pub locks: Arc<locks::LockManager>,
    /// The one table of share reservations: NFSv4 OPEN's access and deny and NLM
    /// SHARE's, so each protocol's are in the other's way.
    pub shares: Arc<locks::ShareTable>,
    /// The grace periods of NFSv4 and NLM after a restart, which both front ends honour
    /// (no new lock while either runs).
    pub lock_grace: crate::grace::LockGrace,
    /// Requests waiting for other heads' locks (object exports; [`crate::heads`]).
    pub head_waits: Arc<crate::heads::HeadWaits>,
}

/// When a READ of at least [`vfs::limits::ZERO_COPY_READ_MIN_BYTES`] from a backend that
/// can hand over the file (host) is sent with `sendfile` instead of being copied into
/// the reply.
///
/// `sendfile` saves the server a copy, but over loopback no network card reads the
/// pages: the client's own copy out of its socket does, and pages of the page cache are
/// cold in the CPU's caches where a server's copy would have left them warm. The client
/// then does the work of both copies on its one core. So `auto` copies for peers on a
/// loopback address and uses `sendfile` for every other peer (measured in
/// `bench/results/2026-11-25-sendfile-loopback/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SendfileMode {
    /// `sendfile` for peers that are not on a loopback address (the default).
    #[default]
    Auto,
    /// `sendfile` for every peer.
    Always,
    /// Every READ is copied into the reply.
    Never,
}

impl SendfileMode {
    /// Whether a large READ for `peer` is sent from the file.
    #[must_use]
    pub fn applies_to(self, peer: std::net::IpAddr) -> bool {
        match self {
            Self::Auto => !peer.to_canonical().is_loopback(),
            Self::Always => true,
            Self::Never => false,
        }
    }
}

impl std::str::FromStr for SendfileMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "always" => Ok(Self::Always),
            "never" => Ok(Self::Never),
            _ => Err(format!(
                "unknown sendfile setting {s:?}; use \"auto\" (the default: not for \
                 loopback clients), \"always\" or \"never\""
            )),
        }
    }
}

/// One MNT, remembered for MOUNT DUMP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub host: String,
    pub path: String,
}

/// A resolved handle: the export, the file, and who the caller is on that export.
pub struct Target<'s> {
    pub export: &'s Arc<Export>,
    pub id: FileId,
    /// Shared with every call of the same client identity on this export while the
    /// credential cache is on: an identity, never a permission result, so a permission
    /// changed on the server is checked by the very next call.
    pub cred: Arc<Cred>,
}

impl NfsState {
    /// `max_io_bytes` is what [`crate::limits::max_io_bytes_for_record`] allows for the
    /// server's record limit.
    ///
    /// # Panics
    /// If `max_io_bytes` is 0 or above [`crate::limits::MAX_IO_BYTES`].
    #[must_use]
    pub fn new(exports: ExportTable, write_verifier: [u8; 8], max_io_bytes: u32) -> Self {
        assert!(
            (1..=crate::limits::MAX_IO_BYTES).contains(&max_io_bytes),
            "max_io_bytes {max_io_bytes} out of range"
        );
        let locks = Arc::new(locks::LockManager::default());
        let head_waits = Arc::new(crate::heads::HeadWaits::default());
        crate::heads::attach(&exports, &locks, &head_waits);
        let shares = Arc::new(locks::ShareTable::default());
        crate::heads::attach_shares(&exports, &shares);
        Self {
            exports,
            write_verifier,
            max_io_bytes,
            mounts: Mutex::new(VecDeque::new()),
            creds: Some(CredCache::new()),
            sendfile: SendfileMode::default(),
            locks,
            shares,
            lock_grace: crate::grace::LockGrace::default(),
            head_waits,
            idmap: Idmap::numeric(),
        }
    }

    /// Sends NFSv4 owners as `name@domain` (`--idmap-domain`); numbers without it.
    #[must_use]
    pub fn with_idmap_domain(mut self, domain: Option<&str>) -> Self {
        self.idmap = domain.map_or_else(Idmap::numeric, Idmap::with_domain);
        self
    }

    /// Sets when large READs are sent with `sendfile` (`--sendfile`).
    #[must_use]
    pub fn with_sendfile(mut self, mode: SendfileMode) -> Self {
        self.sendfile = mode;
        self
    }

    /// Turns the credential cache on (the default) or off (`--fhcache off`: every call
    /// maps its credential afresh, as before seed 004).
    #[must_use]
    pub fn with_cred_cache(mut self, on: bool) -> Self {
        self.creds = on.then(CredCache::new);
        self
    }

    /// Credential-cache lookups answered from the cache and lookups that mapped, since
    /// start; `None` when the cache is off.
    #[must_use]
    pub fn cred_cache_stats(&self) -> Option<(u64, u64)> {
        self.creds.as_ref().map(CredCache::hits_and_misses)
    }

    /// Who a call with `auth` is on `export`: its credential mapped by the export's squash
    /// rules. With the cache on, a call whose identity was seen before takes the shared
    /// mapped credential (no group list is copied); otherwise it is mapped now.
    #[must_use]
    pub fn cred(&self, export: &Export, auth: &Auth) -> Arc<Cred> {
        let map = || export.options.map_cred(sent_cred(auth).as_ref());
        let Some(cache) = &self.creds else {
            return Arc::new(map());
        };
        let mut words = [0u32; CRED_KEY_WORDS];
        match cred_key(export, auth, &mut words) {
            Some(key) => cache.get(key, map),
            None => Arc::new(map()),
        }
    }

    /// The write verifier of WRITE and COMMIT replies on `export`: the server's, changed
    /// for every writeback error the export's backend has seen, so that a client whose
    /// UNSTABLE data may be lost sees a new verifier and sends it again.
    #[must_use]
    pub fn write_verifier_for(&self, export: &vfs::Export) -> [u8; 8] {
        let errors = export.backend().writeback_errors();
        if errors == 0 {
            return self.write_verifier;
        }
        let base = u64::from_be_bytes(self.write_verifier);
        (base ^ errors.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes()
    }

    /// Verifies a client's handle: export, incarnation, MAC (and the generation, for a
    /// backend that reuses ids), client address allowed by the export. Then maps the
    /// caller's credential by the export's squash rules. Asks a mem backend nothing: a
    /// handle of a removed file is found `STALE` by the call that uses it.
    ///
    /// # Errors
    /// `BADHANDLE` for a malformed or forged handle, `STALE` for one that names nothing
    /// now, `ACCES` for a client the export does not allow.
    pub fn resolve(&self, ctx: &CallContext, fh: &NfsFh3) -> Result<Target<'_>, Nfsstat3> {
        let (export, id) = self.exports.resolve(fh.as_bytes()).map_err(|e| {
            match e {
                FsError::BadHandle => rpc::warn_limited!(
                    rpc::ratelog::Kind::Handle,
                    peer = %ctx.peer, xid = ctx.xid, len = fh.0.len(),
                    "refusing a malformed or forged file handle"
                ),
                _ => tracing::debug!(peer = %ctx.peer, xid = ctx.xid, error = %e, "handle does not resolve"),
            }
            status_of(e)
        })?;
        if !export.options.allows(ctx.peer.ip()) {
            rpc::warn_limited!(rpc::ratelog::Kind::Handle, peer = %ctx.peer, export = %export.path, "client not allowed by the export's clients list");
            return Err(Nfsstat3::Acces);
        }
        let cred = self.cred(export, &ctx.auth);
        Ok(Target { export, id, cred })
    }

    /// The handle of a file of `export`.
    #[must_use]
    pub fn handle(&self, export: &Export, attr: &Attr) -> NfsFh3 {
        NfsFh3(bytes::Bytes::copy_from_slice(
            &self.exports.handle(export, attr),
        ))
    }

    /// Records a successful MNT of `entry.path` (already canonical). A client keeps at
    /// most [`MAX_MOUNTS_PER_CLIENT`] entries and the list [`MAX_MOUNT_ENTRIES`]; past
    /// either, the oldest is forgotten.
    pub fn add_mount(&self, entry: MountEntry) {
        let mut mounts = self
            .mounts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if mounts.contains(&entry) {
            return;
        }
        let of_host = mounts.iter().filter(|m| m.host == entry.host).count();
        if of_host >= MAX_MOUNTS_PER_CLIENT {
            if let Some(i) = mounts.iter().position(|m| m.host == entry.host) {
                mounts.remove(i);
            }
        }
        if mounts.len() >= MAX_MOUNT_ENTRIES {
            mounts.pop_front();
        }
        mounts.push_back(entry);
    }

    /// Forgets mounts of `host` (all of them, or those of `path`).
    pub fn remove_mounts(&self, host: &str, path: Option<&str>) {
        let mut mounts = self
            .mounts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        mounts.retain(|m| m.host != host || path.is_some_and(|p| p != m.path));
    }

    #[must_use]
    pub fn mounts(&self) -> Vec<MountEntry> {
        let mounts = self
            .mounts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        mounts.iter().cloned().collect()
    }
}

/// The credential cache's key for `auth` on `export`, written into `words`: the export id,
/// the flavor, and for AUTH_SYS the uid, gid and groups in the order sent (the mapping
/// keeps that order). `None` if it does not fit (more groups than AUTH_SYS allows).
fn cred_key<'w>(export: &Export, auth: &Auth, words: &'w mut [u32]) -> Option<&'w [u32]> {
    words[0] = export.id.0;
    let Auth::Sys(sys) = auth else {
        words[1] = 0;
        return Some(&words[..2]);
    };
    let len = 4 + sys.gids.len();
    let key = words.get_mut(..len)?;
    key[1] = 1;
    key[2] = sys.uid;
    key[3] = sys.gid;
    key[4..].copy_from_slice(&sys.gids);
    Some(key)
}

/// The credential a call carries: AUTH_SYS ids, or none for AUTH_NONE.
#[must_use]
pub fn sent_cred(auth: &Auth) -> Option<Cred> {
    match auth {
        Auth::None => None,
        Auth::Sys(sys) => Some(Cred {
            uid: sys.uid,
            gid: sys.gid,
            groups: sys.gids.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::SendfileMode;

    #[test]
    fn sendfile_auto_copies_only_for_loopback_peers() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        for local in ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"] {
            assert!(!SendfileMode::Auto.applies_to(ip(local)), "{local}");
            assert!(SendfileMode::Always.applies_to(ip(local)), "{local}");
        }
        for remote in ["10.0.0.7", "192.168.1.2", "2001:db8::1", "::ffff:10.0.0.7"] {
            assert!(SendfileMode::Auto.applies_to(ip(remote)), "{remote}");
            assert!(!SendfileMode::Never.applies_to(ip(remote)), "{remote}");
        }
        assert_eq!("always".parse(), Ok(SendfileMode::Always));
        let e = "on".parse::<SendfileMode>().unwrap_err();
        assert!(e.contains("\"auto\""), "{e}");
    }
}
