//! The handle index: for files granary has handed a handle for, what finds them again
//! after a rename or a restart. Bounded in entries and bytes; what it drops is found again
//! by the slower path of `search`.
//!
//! A record, keyed by inode number, holds the file's generation (see `attr::generation`),
//! its type, the kernel file handle when the server may use `open_by_handle_at`, and the
//! last known parent and name (for the path re-walk used without that capability).
//!
//! # What it holds, and for how long
//!
//! - A file's record goes when the file goes: its last name removed through granary
//!   (REMOVE, RMDIR, RENAME over it), or found gone when a handle of it is used (a local
//!   process removed it). Such inode numbers are remembered as *gone* (the last
//!   [`NEGATIVE_ENTRIES`] of them, in the same lock as the records), so a handle of a
//!   removed file is `Stale` without a search; recording the inode number again (a new
//!   file that reuses it) takes it off that list.
//! - **Bound.** At most [`IndexLimits::max_entries`] records and
//!   [`IndexLimits::max_bytes`] bytes of memory, each record charged
//!   [`RECORD_CHARGE_BYTES`] plus its name and kernel handle (a test with a counting
//!   allocator checks that the charge covers what a record really takes, the map's slack
//!   included). A record that would go over either bound first *evicts* records down to
//!   7/8 of both, in one pass over the map (second chance, as CLOCK): files not used since
//!   the last pass first, then such directories (a directory's children are re-walked
//!   through it), then files used since, then directories. Evicting is not forgetting:
//!   an evicted file's handle is still good, and the next call that uses it finds the file
//!   by one bounded scan of the export (`search`, up to `limits::MAX_SEARCH_ENTRIES`
//!   entries), which records it again. The pass costs O(records) under the write lock,
//!   once per `max_entries / 8` new records.
//!
//! # On disk
//!
//! An append-only log in the state directory, one record per change, each
//! `[magic][len: u16 LE][body][SipHash-1-3 of body: u64 LE]`: magic `0xA5` a record (body:
//! ino u64, generation u32, kind u16, parent u64, kernel handle type i32, kernel handle
//! length u8 and bytes, name length u8 and bytes), magic `0xA6` a removal (body: ino u64).
//! A torn tail (kill -9 in the middle of an append) fails its checksum and ends the
//! replay. At start the log is replayed (the last record of an inode wins; a removal
//! deletes it), cut to the bound, and rewritten compacted (write to a temporary file,
//! fsync, rename). While the server runs, the log is compacted again in a background
//! thread whenever it is more than [`COMPACT_FACTOR`] times what the records it holds
//! take (and at least [`COMPACT_MIN_LOG_BYTES`]): so the file never grows with the number
//! of files ever created, only with those indexed now. Appends are plain `write`s (they
//! survive a crash of granary); `sync` (run before a COMMIT or a stable WRITE is
//! answered) makes them survive a crash of the host too.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::hash::Hasher;
use std::io::{BufReader, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use bytes::Bytes;
use siphasher::sip::SipHasher13;

pub use crate::limits::{
    COMPACT_FACTOR, COMPACT_MIN_LOG_BYTES, DEFAULT_INDEX_BYTES, DEFAULT_INDEX_ENTRIES,
    NEGATIVE_ENTRIES, RECORD_CHARGE_BYTES,
};
use crate::sys::{KernelHandle, MAX_KERNEL_HANDLE_BYTES};

const MAGIC: u8 = 0xA5;
const MAGIC_GONE: u8 = 0xA6;

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

impl Record {
    /// Memory a record is charged against [`IndexLimits::max_bytes`].
    #[must_use]
    pub fn charge_bytes(&self) -> usize {
        RECORD_CHARGE_BYTES + self.name.len() + self.kernel.as_ref().map_or(0, |k| k.bytes.len())
    }

    fn is_dir(&self) -> bool {
        u32::from(self.kind) == libc::S_IFDIR
    }
}

/// The index's bound (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexLimits {
    pub max_entries: usize,
    pub max_bytes: usize,
}

impl Default for IndexLimits {
    fn default() -> Self {
        Self {
            max_entries: DEFAULT_INDEX_ENTRIES,
            max_bytes: DEFAULT_INDEX_BYTES,
        }
    }
}

impl IndexLimits {
    /// The most the index may charge: `max_bytes`, or fewer if `max_entries` records of
    /// the largest size take less.
    #[must_use]
    pub fn worst_bytes(&self) -> usize {
        let largest = RECORD_CHARGE_BYTES + vfs::limits::MAX_NAME_BYTES + MAX_KERNEL_HANDLE_BYTES;
        self.max_bytes.min(self.max_entries.saturating_mul(largest))
    }
}

/// A record and whether it was used since the last eviction pass.
#[derive(Debug)]
struct Slot {
    rec: Record,
    used: AtomicBool,
}

#[derive(Debug, Default)]
struct Map {
    records: HashMap<u64, Slot>,
    /// Sum of the records' [`Record::charge_bytes`].
    charged: usize,
    /// Sum of the records' encoded sizes: what a compacted log takes.
    encoded: u64,
    /// Inode numbers known to name no file (see the module documentation); never one of
    /// `records`' keys.
    gone: HashSet<u64>,
    gone_order: VecDeque<u64>,
}

impl Map {
    fn insert(&mut self, ino: u64, rec: Record) {
        self.charged += rec.charge_bytes();
        self.encoded += encoded_len(&rec) as u64;
        if let Some(old) = self.records.insert(
            ino,
            Slot {
                rec,
                used: AtomicBool::new(true),
            },
        ) {
            self.charged -= old.rec.charge_bytes();
            self.encoded -= encoded_len(&old.rec) as u64;
        }
        self.gone.remove(&ino);
    }

    fn remove(&mut self, ino: u64) -> Option<Record> {
        let old = self.records.remove(&ino)?;
        self.charged -= old.rec.charge_bytes();
        self.encoded -= encoded_len(&old.rec) as u64;
        Some(old.rec)
    }

    fn mark_gone(&mut self, ino: u64) {
        debug_assert!(!self.records.contains_key(&ino));
        if !self.gone.insert(ino) {
            return;
        }
        self.gone_order.push_back(ino);
        while self.gone_order.len() > NEGATIVE_ENTRIES {
            if let Some(old) = self.gone_order.pop_front() {
                self.gone.remove(&old);
            }
        }
    }

    fn over(&self, limits: &IndexLimits) -> bool {
        self.records.len() > limits.max_entries || self.charged > limits.max_bytes
    }

    /// One second-chance pass that evicts records until both bounds are at 7/8 (see the
    /// module documentation), never `keep` (the record just made). Returns the evicted
    /// inode numbers.
    fn evict(&mut self, limits: &IndexLimits, keep: Option<u64>) -> Vec<u64> {
        let low_entries = limits.max_entries - limits.max_entries / 8;
        let low_bytes = limits.max_bytes - limits.max_bytes / 8;
        let need = self.records.len().saturating_sub(low_entries).max(1);
        // Candidates in the order they go: unused files, unused directories, used files,
        // used directories. Each list needs at most `need` entries when the count is the
        // bound; when the bytes are, any number may have to go.
        let mut lists: [Vec<u64>; 4] = Default::default();
        let cap = if self.charged > low_bytes {
            usize::MAX
        } else {
            need
        };
        for (ino, slot) in &self.records {
            let used = slot.used.swap(false, Ordering::Relaxed);
            if Some(*ino) == keep {
                continue;
            }
            let which = usize::from(used) * 2 + usize::from(slot.rec.is_dir());
            if lists[which].len() < cap {
                lists[which].push(*ino);
            }
        }
        let mut evicted = Vec::new();
        for ino in lists.into_iter().flatten() {
            if self.records.len() <= low_entries && self.charged <= low_bytes {
                break;
            }
            if self.remove(ino).is_some() {
                evicted.push(ino);
            }
        }
        evicted
    }
}

/// The log file and how long it is.
#[derive(Debug)]
struct LogFile {
    file: File,
    bytes: u64,
}

#[derive(Debug)]
struct Log {
    path: PathBuf,
    file: Mutex<LogFile>,
    dirty: AtomicBool,
    compacting: AtomicBool,
}

#[derive(Debug)]
struct Shared {
    map: RwLock<Map>,
    log: Option<Log>,
    limits: IndexLimits,
}

/// The in-memory index and its log.
#[derive(Debug)]
pub struct Index {
    shared: Arc<Shared>,
}

/// Counters of an index (tests and logs read them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexStats {
    pub entries: usize,
    pub charged_bytes: usize,
    pub log_bytes: u64,
}

impl Index {
    /// An index that lives only in memory (handles die with the process).
    #[must_use]
    pub fn in_memory(limits: IndexLimits) -> Self {
        Self {
            shared: Arc::new(Shared {
                map: RwLock::new(Map::default()),
                log: None,
                limits,
            }),
        }
    }

    /// Loads (cut to `limits` and compacted) the index at `path`, creating it (mode 0600)
    /// if absent.
    ///
    /// # Errors
    /// The file cannot be read, rewritten or opened for appending.
    pub fn open(path: &Path, limits: IndexLimits) -> std::io::Result<Self> {
        let mut map = match File::open(path) {
            Ok(f) => replay(BufReader::with_capacity(64 << 10, f))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::default(),
            Err(e) => return Err(e),
        };
        while map.over(&limits) {
            let evicted = map.evict(&limits, None);
            tracing::info!(
                evicted = evicted.len(),
                "the handle index holds more than its bound; records dropped at start"
            );
        }
        let bytes = write_compacted(path, &map, &[])?;
        let file = create_private(path, false)?;
        Ok(Self {
            shared: Arc::new(Shared {
                map: RwLock::new(map),
                log: Some(Log {
                    path: path.to_path_buf(),
                    file: Mutex::new(LogFile { file, bytes }),
                    dirty: AtomicBool::new(true),
                    compacting: AtomicBool::new(false),
                }),
                limits,
            }),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Map> {
        self.shared
            .map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Map> {
        self.shared
            .map
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The record of `ino`, marked used (it survives the next eviction pass).
    #[must_use]
    pub fn get(&self, ino: u64) -> Option<Record> {
        let map = self.read();
        let slot = map.records.get(&ino)?;
        if !slot.used.load(Ordering::Relaxed) {
            slot.used.store(true, Ordering::Relaxed);
        }
        Some(slot.rec.clone())
    }

    /// The generation of `ino`'s record, marked used, without copying the record (every
    /// handle resolved asks for it).
    #[must_use]
    pub fn generation(&self, ino: u64) -> Option<u32> {
        let map = self.read();
        let slot = map.records.get(&ino)?;
        if !slot.used.load(Ordering::Relaxed) {
            slot.used.store(true, Ordering::Relaxed);
        }
        Some(slot.rec.generation)
    }

    /// True if `ino` is known to name no file (removed through granary, or not found by a
    /// search): a handle of it is `Stale` without a search.
    #[must_use]
    pub fn is_gone(&self, ino: u64) -> bool {
        self.read().gone.contains(&ino)
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.read().records.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[must_use]
    pub fn limits(&self) -> IndexLimits {
        self.shared.limits
    }

    #[must_use]
    pub fn stats(&self) -> IndexStats {
        let map = self.read();
        let log_bytes = self.shared.log.as_ref().map_or(0, |log| {
            log.file
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .bytes
        });
        IndexStats {
            entries: map.records.len(),
            charged_bytes: map.charged,
            log_bytes,
        }
    }

    /// Records `rec` for `ino` unless the index already says exactly that. A kernel
    /// handle already known is kept when `rec` brings none. May evict other records (see
    /// the module documentation).
    pub fn note(&self, ino: u64, mut rec: Record) {
        {
            let map = self.read();
            if let Some(old) = map.records.get(&ino) {
                if rec.kernel.is_none() && old.rec.generation == rec.generation {
                    rec.kernel.clone_from(&old.rec.kernel);
                }
                if old.rec == rec {
                    old.used.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }
        let mut buf = Vec::with_capacity(encoded_len(&rec));
        encode(ino, &rec, &mut buf);
        let mut map = self.write();
        map.insert(ino, rec);
        if map.over(&self.shared.limits) {
            let evicted = map.evict(&self.shared.limits, Some(ino));
            tracing::debug!(
                evicted = evicted.len(),
                "handle index at its bound; evicted records are found again by search"
            );
            for ino in evicted {
                encode_gone(ino, &mut buf);
            }
        }
        // Appended under the map's write lock, so the log's order is the map's.
        self.append(&buf, map.encoded);
    }

    /// Drops the record of `ino` if it still has generation `generation` (a new file that
    /// reused the number meanwhile keeps its own), and remembers `ino` as gone.
    pub fn forget(&self, ino: u64, generation: u32) {
        let mut map = self.write();
        if map
            .records
            .get(&ino)
            .is_none_or(|s| s.rec.generation != generation)
        {
            return;
        }
        map.remove(ino);
        map.mark_gone(ino);
        let mut buf = Vec::with_capacity(19);
        encode_gone(ino, &mut buf);
        self.append(&buf, map.encoded);
    }

    /// Drops the record of `ino` if it is still `rec` (same generation, parent and name:
    /// a rename or a new file meanwhile keeps its own), and remembers `ino` as gone: the
    /// file was not found where `rec` says nor by a search.
    pub fn forget_record(&self, ino: u64, rec: &Record) {
        let mut map = self.write();
        let same = map.records.get(&ino).is_some_and(|s| {
            (s.rec.generation, s.rec.parent, &s.rec.name) == (rec.generation, rec.parent, &rec.name)
        });
        if !same {
            return;
        }
        map.remove(ino);
        map.mark_gone(ino);
        let mut buf = Vec::with_capacity(19);
        encode_gone(ino, &mut buf);
        self.append(&buf, map.encoded);
    }

    /// Remembers `ino` as gone unless it has a record (a search did not find it).
    pub fn mark_gone(&self, ino: u64) {
        let mut map = self.write();
        if !map.records.contains_key(&ino) {
            map.mark_gone(ino);
        }
    }

    /// Appends `buf` to the log (the caller holds the map's write lock) and starts a
    /// compaction if the log has grown past [`COMPACT_FACTOR`] times `live` bytes.
    fn append(&self, buf: &[u8], live: u64) {
        let Some(log) = &self.shared.log else { return };
        let due = {
            let mut f = log.file.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(e) = f.file.write_all(buf) {
                tracing::warn!(error = %e, "cannot append to the handle index; handles of this file may not survive a restart");
            } else {
                f.bytes += buf.len() as u64;
            }
            log.dirty.store(true, Ordering::Release);
            f.bytes > COMPACT_MIN_LOG_BYTES.max(live.saturating_mul(COMPACT_FACTOR))
        };
        if due && !log.compacting.swap(true, Ordering::AcqRel) {
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("granary-index-compact".into())
                .spawn(move || {
                    // Spawned by a thread that may act for a client: the state
                    // directory is the server's.
                    if let Err(e) = crate::identity::act_as_server() {
                        tracing::warn!(errno = %e, "the index compaction cannot act as the server");
                    }
                    compact_logged(&shared);
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start the handle index compaction; retried later");
                log.compacting.store(false, Ordering::Release);
            }
        }
    }

    /// True while a background compaction runs.
    #[must_use]
    pub fn compacting(&self) -> bool {
        self.shared
            .log
            .as_ref()
            .is_some_and(|l| l.compacting.load(Ordering::Acquire))
    }

    /// Rewrites the log with only the records held now (what the background compaction
    /// does), unless one is running.
    ///
    /// # Errors
    /// The new log cannot be written or renamed into place (the old one is kept).
    pub fn compact(&self) -> std::io::Result<()> {
        let Some(log) = &self.shared.log else {
            return Ok(());
        };
        if log.compacting.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let r = compact(&self.shared);
        log.compacting.store(false, Ordering::Release);
        r.map(|_| ())
    }

    /// Makes every appended record durable.
    ///
    /// # Errors
    /// The fdatasync failed.
    pub fn sync(&self) -> std::io::Result<()> {
        let Some(log) = &self.shared.log else {
            return Ok(());
        };
        if !log.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let f = log.file.lock().unwrap_or_else(PoisonError::into_inner);
        f.file
            .sync_data()
            .inspect_err(|_| log.dirty.store(true, Ordering::Release))
    }
}

fn compact_logged(shared: &Shared) {
    let before = shared.log.as_ref().map_or(0, |l| {
        l.file.lock().unwrap_or_else(PoisonError::into_inner).bytes
    });
    match compact(shared) {
        Ok(after) => tracing::debug!(before, after, "handle index compacted"),
        Err(e) => tracing::warn!(error = %e, "cannot compact the handle index; retried later"),
    }
    if let Some(log) = &shared.log {
        log.compacting.store(false, Ordering::Release);
    }
}

/// Snapshot of the records (under the map's read lock and the log's lock, so it matches
/// the log up to a known length), written and synced to a temporary file with no lock
/// held, then, under the log's lock, the records appended since, and the rename. Returns
/// the new log's length.
fn compact(shared: &Shared) -> std::io::Result<u64> {
    let Some(log) = &shared.log else { return Ok(0) };
    let (snapshot, mark) = {
        let map = shared.map.read().unwrap_or_else(PoisonError::into_inner);
        let f = log.file.lock().unwrap_or_else(PoisonError::into_inner);
        (encode_all(&map), f.bytes)
    };
    let tmp = tmp_path(&log.path);
    {
        let mut out = create_private(&tmp, true)?;
        out.write_all(&snapshot)?;
        out.sync_all()?;
    }
    drop(snapshot);
    let mut f = log.file.lock().unwrap_or_else(PoisonError::into_inner);
    let mut tail = vec![0u8; usize::try_from(f.bytes - mark).unwrap_or(0)];
    f.file.read_exact_at(&mut tail, mark)?;
    let mut out = create_private(&tmp, false)?;
    out.write_all(&tail)?;
    let bytes = out.metadata()?.len();
    std::fs::rename(&tmp, &log.path)?;
    *f = LogFile { file: out, bytes };
    log.dirty.store(true, Ordering::Release);
    Ok(bytes)
}

fn tmp_path(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}.tmp", path.display()))
}

fn encode_all(map: &Map) -> Vec<u8> {
    let mut buf = Vec::with_capacity(usize::try_from(map.encoded).unwrap_or(0));
    for (ino, slot) in &map.records {
        encode(*ino, &slot.rec, &mut buf);
    }
    buf
}

/// Writes `map` (then `tail`) to `path` through a synced temporary file; returns its
/// length.
fn write_compacted(path: &Path, map: &Map, tail: &[u8]) -> std::io::Result<u64> {
    let tmp = tmp_path(path);
    let buf = encode_all(map);
    {
        let mut out = create_private(&tmp, true)?;
        out.write_all(&buf)?;
        out.write_all(tail)?;
        out.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok((buf.len() + tail.len()) as u64)
}

fn create_private(path: &Path, truncate: bool) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .write(true)
        .read(!truncate)
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

/// Bytes [`encode`] appends for `rec`.
fn encoded_len(rec: &Record) -> usize {
    let kernel = rec.kernel.as_ref().map_or(0, |k| k.bytes.len());
    3 + (8 + 4 + 2 + 8 + 4 + 1 + kernel + 1 + rec.name.len()) + 8
}

fn frame(magic: u8, body: &[u8], out: &mut Vec<u8>) {
    out.push(magic);
    out.extend_from_slice(&(body.len() as u16).to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&checksum(body).to_le_bytes());
}

fn encode(ino: u64, rec: &Record, out: &mut Vec<u8>) {
    let mut body = Vec::with_capacity(encoded_len(rec));
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
    frame(MAGIC, &body, out);
}

fn encode_gone(ino: u64, out: &mut Vec<u8>) {
    frame(MAGIC_GONE, &ino.to_le_bytes(), out);
}

/// One entry of the log.
enum Entry {
    Record(u64, Record),
    Gone(u64),
}

/// Reads entries until the end or the first damaged one.
fn replay(mut input: impl Read) -> std::io::Result<Map> {
    let mut map = Map::default();
    let mut kept = 0u64;
    let mut frame = Vec::new();
    let damaged = loop {
        let mut head = [0u8; 3];
        match read_full(&mut input, &mut head)? {
            0 => break false,
            3 => {}
            _ => break true,
        }
        let len = usize::from(u16::from_le_bytes([head[1], head[2]]));
        frame.resize(len + 8, 0);
        if read_full(&mut input, &mut frame)? != frame.len() {
            break true;
        }
        match decode_one(head[0], &frame) {
            Some(Entry::Record(ino, rec)) => map.insert(ino, rec),
            Some(Entry::Gone(ino)) => {
                map.remove(ino);
            }
            None => break true,
        }
        kept += (3 + frame.len()) as u64;
    };
    if damaged {
        tracing::warn!(
            kept_bytes = kept,
            "handle index ends in a damaged record (an interrupted append); the rest is dropped"
        );
    }
    Ok(map)
}

/// Reads until `buf` is full or the input ends; returns how many bytes it read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Decodes one frame's body and checksum (`frame` = body followed by 8 checksum bytes).
fn decode_one(magic: u8, frame: &[u8]) -> Option<Entry> {
    let (body, sum) = frame.split_at(frame.len().checked_sub(8)?);
    if u64::from_le_bytes(sum.try_into().ok()?) != checksum(body) {
        return None;
    }
    let mut r = Reader(body);
    let ino = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
    match magic {
        MAGIC_GONE if r.0.is_empty() => return Some(Entry::Gone(ino)),
        MAGIC => {}
        _ => return None,
    }
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
    Some(Entry::Record(ino, rec))
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

    fn dir_rec(parent: u64, name: &str) -> Record {
        Record {
            kind: 0o040_000,
            ..rec(parent, name, None)
        }
    }

    fn temp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("granary-index-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    fn open(path: &Path) -> Index {
        Index::open(path, IndexLimits::default()).unwrap()
    }

    fn file_len(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    #[test]
    fn survives_reopen_and_keeps_the_last_record() {
        let path = temp("reopen");
        {
            let idx = open(&path);
            idx.note(10, rec(2, "a", Some(b"12345678")));
            idx.note(10, rec(3, "b", None));
            idx.note(11, rec(2, "c", None));
            idx.sync().unwrap();
        }
        let idx = open(&path);
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
            let idx = open(&path);
            idx.note(1, rec(1, "x", None));
            idx.note(2, rec(1, "y", None));
        }
        let full = std::fs::read(&path).unwrap();
        for cut in 1..full.len() {
            std::fs::write(&path, &full[..cut]).unwrap();
            let idx = open(&path);
            assert!(idx.len() <= 2);
            if idx.len() == 2 {
                assert_eq!(cut, full.len());
            }
        }
        let mut flipped = full.clone();
        let last = flipped.len() - 12;
        flipped[last] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        assert_eq!(open(&path).len(), 1, "bad checksum ends replay");
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_forgotten_record_stays_forgotten_after_a_restart() {
        let path = temp("forget");
        {
            let idx = open(&path);
            idx.note(1, rec(1, "x", None));
            idx.note(2, rec(1, "y", None));
            idx.forget(1, 6);
            assert!(idx.get(1).is_some(), "another generation is not forgotten");
            idx.forget(1, 7);
            assert!(idx.get(1).is_none());
            assert!(idx.is_gone(1));
            idx.note(1, rec(1, "x2", None));
            assert!(!idx.is_gone(1), "a new file with that number is not gone");
            idx.forget(1, 7);
        }
        let idx = open(&path);
        assert_eq!(idx.len(), 1);
        assert!(idx.get(1).is_none(), "the removal was replayed");
        assert!(idx.get(2).is_some());
        let _ = std::fs::remove_file(path);
    }

    /// A million files made and removed leave a log the size of what is indexed now.
    #[test]
    fn the_log_is_compacted_while_files_come_and_go() {
        let path = temp("compact");
        let idx = open(&path);
        idx.note(1, rec(1, "kept", None));
        let mut peak = 0;
        for ino in 2..300_000u64 {
            idx.note(ino, rec(1, "a-file-name-of-some-length", Some(b"12345678")));
            idx.forget(ino, 7);
            peak = peak.max(idx.stats().log_bytes);
        }
        while idx.compacting() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            peak <= 2 * COMPACT_MIN_LOG_BYTES,
            "the log grew to {peak} bytes"
        );
        idx.compact().unwrap();
        assert_eq!(file_len(&path), idx.stats().log_bytes);
        assert!(file_len(&path) < 100, "{} bytes", file_len(&path));
        idx.note(3, rec(1, "after", None));
        drop(idx);
        let idx = open(&path);
        assert_eq!(idx.len(), 2, "records appended after a compaction are kept");
        assert!(idx.get(3).is_some() && idx.get(1).is_some());
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn records_appended_during_a_compaction_are_kept() {
        let path = temp("concurrent");
        let idx = Arc::new(open(&path));
        let writer = {
            let idx = Arc::clone(&idx);
            std::thread::spawn(move || {
                for ino in 1..50_000u64 {
                    idx.note(ino, rec(1, "n", None));
                    if ino % 2 == 0 {
                        idx.forget(ino, 7);
                    }
                }
            })
        };
        for _ in 0..20 {
            idx.compact().unwrap();
        }
        writer.join().unwrap();
        while idx.compacting() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        drop(idx);
        let idx = open(&path);
        assert_eq!(idx.len(), 25_000);
        assert!(idx.get(49_999).is_some() && idx.get(2).is_none());
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn the_bound_evicts_unused_files_then_directories_then_used_files() {
        let limits = IndexLimits {
            max_entries: 64,
            max_bytes: usize::MAX,
        };
        let idx = Index::in_memory(limits);
        for ino in 1..=8 {
            idx.note(ino, dir_rec(1, "d"));
        }
        for ino in 9..=65 {
            idx.note(ino, rec(1, "f", None));
        }
        // The 65th record started the first pass: every record was new (used), the pass
        // cleared their marks and evicted files down to 7/8 of the bound.
        assert_eq!(idx.len(), 56);
        let dirs: Vec<u64> = (1..=8).collect();
        let files: Vec<u64> = (9..=65)
            .filter(|&i| idx.read().records.contains_key(&i))
            .collect();
        assert_eq!(files.len(), 48, "directories kept while files can go");
        // Half the files used since the first pass, and 9 new ones: the next pass evicts
        // only unused files.
        let (used, unused) = files.split_at(24);
        for &ino in used {
            assert!(idx.get(ino).is_some());
        }
        for ino in 100..109 {
            idx.note(ino, rec(1, "f", None));
        }
        assert_eq!(idx.len(), 56);
        let kept = |inos: &[u64]| {
            inos.iter()
                .filter(|&&i| idx.read().records.contains_key(&i))
                .count()
        };
        assert_eq!(kept(used), 24, "used files survive");
        assert_eq!(
            kept(&(100..109).collect::<Vec<_>>()),
            9,
            "new files survive"
        );
        assert_eq!(kept(&dirs), 8, "directories survive");
        assert_eq!(kept(unused), 15, "9 unused files went");
        // Every file used, none of the directories: the directories go before them.
        let files: Vec<u64> = (9..300)
            .filter(|&i| idx.read().records.contains_key(&i))
            .collect();
        for &ino in &files {
            assert!(idx.get(ino).is_some());
        }
        for ino in 300..309 {
            idx.note(ino, rec(1, "f", None));
        }
        assert_eq!(kept(&dirs), 0, "unused directories went before used files");
        assert_eq!(idx.len(), 56);
        assert!(
            idx.get(308).is_some(),
            "the record that started the pass stays"
        );
    }

    #[test]
    fn the_byte_bound_counts_names_and_kernel_handles() {
        let one = rec(1, &"n".repeat(200), Some(&[1; 64])).charge_bytes();
        let limits = IndexLimits {
            max_entries: usize::MAX,
            max_bytes: 100 * one,
        };
        let idx = Index::in_memory(limits);
        for ino in 1..=1000 {
            idx.note(ino, rec(1, &"n".repeat(200), Some(&[1; 64])));
            let s = idx.stats();
            assert!(s.charged_bytes <= limits.max_bytes, "{s:?}");
        }
        assert!(idx.len() > 80 && idx.len() <= 100, "{}", idx.len());
    }

    #[test]
    fn a_smaller_bound_at_start_cuts_the_index() {
        let path = temp("cut");
        {
            let idx = open(&path);
            for ino in 1..=1000 {
                idx.note(ino, rec(1, "f", None));
            }
        }
        let limits = IndexLimits {
            max_entries: 100,
            max_bytes: usize::MAX,
        };
        let idx = Index::open(&path, limits).unwrap();
        assert!(idx.len() <= 100);
        assert!(file_len(&path) < 100 * 60, "{}", file_len(&path));
        let _ = std::fs::remove_file(path);
    }
}
