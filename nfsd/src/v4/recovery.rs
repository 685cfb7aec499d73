//! NFSv4 client records in the state directory (RFC 8881 section 8.4.2): what lets a
//! restarted server know which clients may reclaim their opens during its grace period.
//!
//! Layout: `<state dir>/nfs4-clients/`, mode 0700, one file per confirmed client, named by
//! 16 hex digits of a SipHash of the client's owner string (the id that stays the same
//! when the client reboots and changes its verifier). A file is text:
//!
//! ```text
//! granary-nfs4-client 1
//! principal <flavor> <uid>
//! owner <the owner string in hex>
//! ```
//!
//! Promises:
//! - a client is recorded when CREATE_SESSION confirms it, before the reply is sent,
//!   crash-safely: the file is written under a temporary name, synced, renamed into
//!   place, and the directory synced, so a crash leaves the old record or the new one;
//! - the record goes when the client is destroyed (DESTROY_CLIENTID) or its lease runs
//!   out, and, at the end of a grace period, for every client of the previous boot that
//!   did not come back; a removal lost in a crash only makes the next boot wait for that
//!   client until its grace period ends;
//! - loading reads at most `state4::limits::MAX_CLIENTS` files of at most
//!   [`MAX_RECORD_BYTES`] each; a damaged one is skipped with one log line.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::Hasher;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use siphasher::sip::SipHasher13;
use state4::{ClientId, Principal};

/// The records' directory under the state directory.
pub const DIR: &str = "nfs4-clients";

/// Largest record file: the header lines and an owner of at most 1 KiB in hex.
pub const MAX_RECORD_BYTES: u64 = 4096;

const MAGIC: &str = "granary-nfs4-client 1";

/// One client of an earlier boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub owner: Bytes,
    pub principal: Principal,
}

/// The client records of one server. See the module docs.
pub struct ClientRecords {
    dir: PathBuf,
    /// Clients recorded by this boot: id → file name.
    written: Mutex<HashMap<ClientId, String>>,
}

impl std::fmt::Debug for ClientRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientRecords")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// The file name of `owner`'s record.
#[must_use]
pub fn file_name(owner: &[u8]) -> String {
    let mut h = SipHasher13::new_with_keys(0x6772_616e_6172_7934, 0x636c_6965_6e74_7300);
    h.write(owner);
    format!("{:016x}", h.finish())
}

impl ClientRecords {
    /// Opens (creating, 0700) the records' directory under `state_dir` and loads the
    /// records an earlier boot left there.
    ///
    /// # Errors
    /// The directory cannot be created or listed; the message names it and the fix.
    pub fn open(state_dir: &Path) -> Result<(Self, Vec<Record>), String> {
        let dir = state_dir.join(DIR);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| {
                format!(
                    "cannot create {}: {e}; choose a writable state directory with --state-dir",
                    dir.display()
                )
            })?;
        let records = load(&dir)?;
        let me = Self {
            dir,
            written: Mutex::new(HashMap::new()),
        };
        Ok((me, records))
    }

    fn written(&self) -> MutexGuard<'_, HashMap<ClientId, String>> {
        self.written.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the records are.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Records confirmed client `client` (write, fsync, rename, fsync the directory).
    /// A client already recorded by this boot is not written again.
    ///
    /// # Errors
    /// The file could not be written; the client then cannot reclaim after a restart.
    pub fn record(
        &self,
        client: ClientId,
        owner: &[u8],
        principal: Principal,
    ) -> std::io::Result<()> {
        let name = file_name(owner);
        if self.written().get(&client) == Some(&name) {
            return Ok(());
        }
        let mut text = format!(
            "{MAGIC}\nprincipal {} {}\nowner ",
            principal.flavor, principal.uid
        );
        for b in owner {
            let _ = write!(text, "{b:02x}");
        }
        text.push('\n');
        let tmp = self.dir.join(format!("{name}.tmp"));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, self.dir.join(&name))?;
        std::fs::File::open(&self.dir)?.sync_all()?;
        let mut w = self.written();
        // A rebooted client's new id takes over its owner's record.
        w.retain(|_, n| *n != name);
        w.insert(client, name);
        Ok(())
    }

    /// Removes the record of `client`, if this boot wrote one.
    pub fn forget(&self, client: ClientId) {
        let Some(name) = self.written().remove(&client) else {
            return;
        };
        self.unlink(&name);
    }

    /// Forgets the records of clients `live` says are gone.
    pub fn retain(&self, live: impl Fn(ClientId) -> bool) {
        let gone: Vec<ClientId> = self
            .written()
            .keys()
            .copied()
            .filter(|c| !live(*c))
            .collect();
        for c in gone {
            self.forget(c);
        }
    }

    /// At the end of a grace period: removes every record this boot did not write (the
    /// clients of an earlier boot that did not come back). Returns how many.
    pub fn drop_unclaimed(&self) -> usize {
        let keep: Vec<String> = self.written().values().cloned().collect();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut dropped = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !keep.contains(&name) {
                self.unlink(&name);
                dropped += 1;
            }
        }
        dropped
    }

    fn unlink(&self, name: &str) {
        if let Err(e) = std::fs::remove_file(self.dir.join(name)) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %self.dir.display(), name, error = %e, "cannot remove an NFSv4 client record");
            }
        }
    }
}

/// Reads the records in `dir` (at most `MAX_CLIENTS`), skipping damaged ones and removing
/// temporary files a crash left.
fn load(dir: &Path) -> Result<Vec<Record>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut records = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|x| x == "tmp") {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        if records.len() >= state4::limits::MAX_CLIENTS {
            tracing::warn!(dir = %dir.display(), max = state4::limits::MAX_CLIENTS, "more NFSv4 client records than clients allowed: the rest are ignored");
            break;
        }
        match read_record(&path) {
            Ok(r) => records.push(r),
            Err(why) => {
                tracing::warn!(file = %path.display(), why, "skipping a damaged NFSv4 client record");
            }
        }
    }
    Ok(records)
}

fn read_record(path: &Path) -> Result<Record, String> {
    let len = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if len > MAX_RECORD_BYTES {
        return Err(format!("{len} bytes, more than a record holds"));
    }
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    parse(&text).ok_or_else(|| "not a granary NFSv4 client record".to_owned())
}

fn parse(text: &str) -> Option<Record> {
    let mut lines = text.lines();
    if lines.next()? != MAGIC {
        return None;
    }
    let mut p = lines.next()?.strip_prefix("principal ")?.split(' ');
    let principal = Principal {
        flavor: p.next()?.parse().ok()?,
        uid: p.next()?.parse().ok()?,
    };
    let hex = lines.next()?.strip_prefix("owner ")?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let owner = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    Some(Record {
        owner: Bytes::from(owner),
        principal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("granary-rec-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn records_survive_a_reopen_and_go_when_forgotten() {
        let d = tmpdir("a");
        let p = Principal { flavor: 1, uid: 0 };
        let (r, old) = ClientRecords::open(&d).unwrap();
        assert!(old.is_empty());
        r.record(1, b"linux client \x00\xff", p).unwrap();
        r.record(2, b"other", p).unwrap();
        // A rebooted client (new id, same owner) takes over the record.
        r.record(3, b"other", p).unwrap();
        r.forget(2);
        drop(r);
        let (r, mut old) = ClientRecords::open(&d).unwrap();
        old.sort_by(|a, b| a.owner.cmp(&b.owner));
        let owners: Vec<&[u8]> = old.iter().map(|r| &r.owner[..]).collect();
        assert_eq!(owners, vec![&b"linux client \x00\xff"[..], &b"other"[..]]);
        assert_eq!(old[0].principal, p);
        // Nobody of this boot claimed them: grace's end removes both.
        std::fs::write(r.dir().join("junk"), "not a record").unwrap();
        assert_eq!(r.drop_unclaimed(), 3);
        let (_, old) = ClientRecords::open(&d).unwrap();
        assert!(old.is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn damaged_and_temporary_files_are_skipped() {
        let d = tmpdir("b");
        let (r, _) = ClientRecords::open(&d).unwrap();
        r.record(1, b"good", Principal { flavor: 0, uid: 7 })
            .unwrap();
        std::fs::write(r.dir().join("bad"), format!("{MAGIC}\nprincipal x\n")).unwrap();
        std::fs::write(
            r.dir().join("odd"),
            format!("{MAGIC}\nprincipal 1 0\nowner abc\n"),
        )
        .unwrap();
        std::fs::write(r.dir().join("big"), vec![b'a'; 5000]).unwrap();
        std::fs::write(r.dir().join("x.tmp"), "half").unwrap();
        let (_, old) = ClientRecords::open(&d).unwrap();
        assert_eq!(old.len(), 1);
        assert_eq!(&old[0].owner[..], b"good");
        assert!(!d.join(DIR).join("x.tmp").exists());
        let _ = std::fs::remove_dir_all(&d);
    }
}
