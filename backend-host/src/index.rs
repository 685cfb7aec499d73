//! The handle index: for every file granary has handed a handle for, what finds it again
//! after a rename or a restart.
//!
//! A record, keyed by inode number, holds the file's generation (see `attr::generation`),
//! its type, the kernel file handle when the server may use `open_by_handle_at`, and the
//! last known parent and name (for the path re-walk used without that capability).
//!
//! Persistence: an append-only log in the state directory, one record per change, each
//! `[0xA5][len: u16 LE][body][SipHash-1-3 of body: u64 LE]`. A torn tail (kill -9 in the
//! middle of an append) fails its checksum and ends the replay. At start the log is
//! replayed (last record of an inode wins) and rewritten compacted (write to a temporary
//! file, fsync, rename). Appends are plain `write`s (they survive a crash of granary);
//! `sync` (run before a COMMIT or a stable WRITE is answered) makes them survive a crash of
//! the host too. Cost: one record (~40 bytes + name + kernel handle) per file ever handed
//! out; records of deleted files linger until they fail verification.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::hash::Hasher;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use bytes::Bytes;
use siphasher::sip::SipHasher13;

use crate::sys::{KernelHandle, MAX_KERNEL_HANDLE_BYTES};

const MAGIC: u8 = 0xA5;

/// What the index knows of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub generation: u32,
    /// `S_IFMT` bits of the file's mode.
    pub kind: u16,
    pub parent: u64,
    pub name: Bytes,
    pub kernel: Option<Arc<KernelHandle>>,
}

/// The in-memory index and its log.
#[derive(Debug)]
pub struct Index {
    map: RwLock<HashMap<u64, Record>>,
    log: Option<Mutex<File>>,
    dirty: AtomicBool,
}

impl Index {
    /// An index that lives only in memory (handles die with the process).
    #[must_use]
    pub fn in_memory() -> Self {
        Self {
            map: RwLock::new(HashMap::new()),
            log: None,
            dirty: AtomicBool::new(false),
        }
    }

    /// Loads (and compacts) the index at `path`, creating it (mode 0600) if absent.
    ///
    /// # Errors
    /// The file cannot be read, rewritten or opened for appending.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let mut raw = Vec::new();
        match File::open(path) {
            Ok(mut f) => {
                f.read_to_end(&mut raw)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let map = replay(&raw);
        let tmp = PathBuf::from(format!("{}.tmp", path.display()));
        {
            let mut out = create_private(&tmp, true)?;
            let mut buf = Vec::new();
            for (ino, rec) in &map {
                encode(*ino, rec, &mut buf);
            }
            out.write_all(&buf)?;
            out.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        let log = create_private(path, false)?;
        Ok(Self {
            map: RwLock::new(map),
            log: Some(Mutex::new(log)),
            dirty: AtomicBool::new(true),
        })
    }

    #[must_use]
    pub fn get(&self, ino: u64) -> Option<Record> {
        self.map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&ino)
            .cloned()
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records `rec` for `ino` unless the index already says exactly that. A kernel
    /// handle already known is kept when `rec` brings none.
    pub fn note(&self, ino: u64, mut rec: Record) {
        {
            let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(old) = map.get(&ino) {
                if rec.kernel.is_none() && old.generation == rec.generation {
                    rec.kernel.clone_from(&old.kernel);
                }
                if *old == rec {
                    return;
                }
            }
        }
        let mut buf = Vec::new();
        encode(ino, &rec, &mut buf);
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        map.insert(ino, rec);
        if let Some(log) = &self.log {
            // Appended under the map's write lock, so the log's order is the map's.
            let mut f = log.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(e) = f.write_all(&buf) {
                tracing::warn!(error = %e, "cannot append to the handle index; handles of this file may not survive a restart");
            }
            self.dirty.store(true, Ordering::Release);
        }
    }

    /// Drops what the index knows of `ino` (in memory; the log keeps the record, which
    /// then fails verification).
    pub fn forget(&self, ino: u64) {
        self.map
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&ino);
    }

    /// Makes every appended record durable.
    ///
    /// # Errors
    /// The fdatasync failed.
    pub fn sync(&self) -> std::io::Result<()> {
        let Some(log) = &self.log else { return Ok(()) };
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let f = log.lock().unwrap_or_else(PoisonError::into_inner);
        f.sync_data()
            .inspect_err(|_| self.dirty.store(true, Ordering::Release))
    }
}

fn create_private(path: &Path, truncate: bool) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(truncate)
        .append(!truncate)
        .mode(0o600)
        .open(path)
}

fn checksum(body: &[u8]) -> u64 {
    let mut h = SipHasher13::new_with_keys(0x6772_616e_6172_7921, 0x696e_6465_7820_7631);
    h.write(body);
    h.finish()
}

fn encode(ino: u64, rec: &Record, out: &mut Vec<u8>) {
    let mut body = Vec::with_capacity(32 + rec.name.len());
    body.extend_from_slice(&ino.to_le_bytes());
    body.extend_from_slice(&rec.generation.to_le_bytes());
    body.extend_from_slice(&rec.kind.to_le_bytes());
    body.extend_from_slice(&rec.parent.to_le_bytes());
    match &rec.kernel {
        Some(k) => {
            body.extend_from_slice(&k.handle_type.to_le_bytes());
            body.push(k.bytes.len() as u8);
            body.extend_from_slice(&k.bytes);
        }
        None => {
            body.extend_from_slice(&0i32.to_le_bytes());
            body.push(0);
        }
    }
    body.push(rec.name.len() as u8);
    body.extend_from_slice(&rec.name);
    out.push(MAGIC);
    out.extend_from_slice(&(body.len() as u16).to_le_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&checksum(&body).to_le_bytes());
}

/// Reads records until the end or the first damaged one.
fn replay(raw: &[u8]) -> HashMap<u64, Record> {
    let mut map = HashMap::new();
    let mut at = 0;
    while let Some((ino, rec, next)) = decode_one(raw, at) {
        map.insert(ino, rec);
        at = next;
    }
    if at != raw.len() {
        tracing::warn!(
            kept_bytes = at,
            dropped_bytes = raw.len() - at,
            "handle index ends in a damaged record (an interrupted append); the rest is dropped"
        );
    }
    map
}

fn decode_one(raw: &[u8], at: usize) -> Option<(u64, Record, usize)> {
    let head = raw.get(at..at + 3)?;
    if head[0] != MAGIC {
        return None;
    }
    let len = usize::from(u16::from_le_bytes([head[1], head[2]]));
    let body = raw.get(at + 3..at + 3 + len)?;
    let sum = raw.get(at + 3 + len..at + 3 + len + 8)?;
    if u64::from_le_bytes(sum.try_into().ok()?) != checksum(body) {
        return None;
    }
    let mut r = Reader(body);
    let ino = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
    let generation = u32::from_le_bytes(r.take(4)?.try_into().ok()?);
    let kind = u16::from_le_bytes(r.take(2)?.try_into().ok()?);
    let parent = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
    let handle_type = i32::from_le_bytes(r.take(4)?.try_into().ok()?);
    let klen = usize::from(r.take(1)?[0]);
    if klen > MAX_KERNEL_HANDLE_BYTES {
        return None;
    }
    let kbytes = r.take(klen)?.to_vec();
    let nlen = usize::from(r.take(1)?[0]);
    let name = Bytes::copy_from_slice(r.take(nlen)?);
    let kernel = (klen > 0).then(|| {
        Arc::new(KernelHandle {
            handle_type,
            bytes: kbytes,
        })
    });
    let rec = Record {
        generation,
        kind,
        parent,
        name,
        kernel,
    };
    Some((ino, rec, at + 3 + len + 8))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(parent: u64, name: &str, kernel: Option<&[u8]>) -> Record {
        Record {
            generation: 7,
            kind: 0o100_000,
            parent,
            name: Bytes::copy_from_slice(name.as_bytes()),
            kernel: kernel.map(|b| {
                Arc::new(KernelHandle {
                    handle_type: 1,
                    bytes: b.to_vec(),
                })
            }),
        }
    }

    fn temp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("granary-index-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn survives_reopen_and_keeps_the_last_record() {
        let path = temp("reopen");
        {
            let idx = Index::open(&path).unwrap();
            idx.note(10, rec(2, "a", Some(b"12345678")));
            idx.note(10, rec(3, "b", None));
            idx.note(11, rec(2, "c", None));
            idx.sync().unwrap();
        }
        let idx = Index::open(&path).unwrap();
        assert_eq!(idx.len(), 2);
        let r = idx.get(10).unwrap();
        assert_eq!((r.parent, &r.name[..]), (3, &b"b"[..]));
        assert_eq!(r.kernel.unwrap().bytes, b"12345678", "kernel handle kept");
        let mode = std::fs::metadata(&path).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_torn_tail_is_dropped_and_the_rest_kept() {
        let path = temp("torn");
        {
            let idx = Index::open(&path).unwrap();
            idx.note(1, rec(1, "x", None));
            idx.note(2, rec(1, "y", None));
        }
        let full = std::fs::read(&path).unwrap();
        for cut in 1..full.len() {
            std::fs::write(&path, &full[..cut]).unwrap();
            let idx = Index::open(&path).unwrap();
            assert!(idx.len() <= 2);
            if idx.len() == 2 {
                assert_eq!(cut, full.len());
            }
        }
        let mut flipped = full.clone();
        let last = flipped.len() - 12;
        flipped[last] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        assert_eq!(
            Index::open(&path).unwrap().len(),
            1,
            "bad checksum ends replay"
        );
        let _ = std::fs::remove_file(path);
    }
}
