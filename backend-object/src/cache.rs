//! Per-head caches in front of the engines (seed 004's idea: keep what one call paid to
//! fetch for the next), validated so that no head ever serves what another head changed.
//!
//! - **Slice maps**, by file: the `slices` rows of a file as of one `inodes.version`. A
//!   READ reads the file's row anyway (its attributes, for the permission check and the
//!   size), now with its `version`; the map is used only if it was read at that very
//!   version, so a publish, a truncation or any change committed on any head (each moves
//!   `version` in the same transaction) makes the next READ on every head read the rows
//!   again. Names and attributes are not cached at all: checking a version costs the same
//!   round trip as reading the row, so every call reads them, and a change committed on
//!   head A is seen by the next call on head B.
//! - **Object bytes**, by object id and range. Objects are immutable and their ids never
//!   reused, so bytes once fetched are that object's bytes for ever: a hit needs no
//!   validation.
//!
//! Compaction replaces a file's rows without moving `version` (the bytes it shows do not
//! change), and garbage collection deletes the old objects a grace later; a map cached
//! before the compaction may then name an object that is gone. A READ that finds an
//! object missing through a cached map drops the map and reads the rows again (whose
//! objects are there, by GC's own argument), so that costs a retry, never wrong data or
//! an error.
//!
//! Both are bounded ([`SLICE_MAPS_MAX`], [`OBJECT_CACHE_MAX_BYTES`]) and evict first in,
//! first out: a file read again soon after is what they are for.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use tokio_postgres::GenericClient;
use vfs::FsError;

use crate::data::READ_PARALLEL_GETS;
use crate::engine::{Fail, COUNTERS};
use crate::limits::{OBJECT_CACHE_MAX_BYTES, SLICE_MAPS_MAX};
use crate::meta::{self, Inode};
use crate::Inner;

/// One `slices` row, as a READ lays it.
#[derive(Debug, Clone)]
pub(crate) struct Slice {
    pub offset: i64,
    pub length: i64,
    pub object: Option<i64>,
    pub object_offset: i64,
    pub data: Option<Bytes>,
}

/// The caches of one head.
#[derive(Default)]
pub(crate) struct Caches {
    maps: Mutex<Maps>,
    bytes: Mutex<ObjectBytes>,
    map_hits: AtomicU64,
    byte_hits: AtomicU64,
}

/// How often this head's caches answered instead of an engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheHits {
    /// READs that used a cached slice map (one query saved each).
    pub maps: u64,
    /// Object ranges served from memory (one GET saved each).
    pub bytes: u64,
}

#[derive(Default)]
struct Maps {
    by_file: HashMap<i64, (i64, Arc<Vec<Slice>>)>,
    order: VecDeque<i64>,
}

#[derive(Default)]
struct ObjectBytes {
    by_range: HashMap<(i64, u64, u64), Bytes>,
    order: VecDeque<(i64, u64, u64)>,
    total: usize,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Caches {
    pub(crate) fn hit_map(&self) {
        self.map_hits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn hit_bytes(&self) {
        self.byte_hits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn hits(&self) -> CacheHits {
        CacheHits {
            maps: self.map_hits.load(Ordering::Relaxed),
            bytes: self.byte_hits.load(Ordering::Relaxed),
        }
    }

    /// `file`'s slice map if it was read at `version`.
    pub(crate) fn map(&self, file: i64, version: i64) -> Option<Arc<Vec<Slice>>> {
        let m = locked(&self.maps);
        match m.by_file.get(&file) {
            Some((v, map)) if *v == version => Some(Arc::clone(map)),
            _ => None,
        }
    }

    /// Keeps `file`'s slice map as read at `version`.
    pub(crate) fn keep_map(&self, file: i64, version: i64, map: Arc<Vec<Slice>>) {
        let mut m = locked(&self.maps);
        if m.by_file.insert(file, (version, map)).is_none() {
            m.order.push_back(file);
        }
        while m.by_file.len() > SLICE_MAPS_MAX {
            let Some(old) = m.order.pop_front() else {
                break;
            };
            m.by_file.remove(&old);
        }
    }

    /// Forgets `file`'s slice map (an object it named was missing).
    pub(crate) fn drop_map(&self, file: i64) {
        let mut m = locked(&self.maps);
        if m.by_file.remove(&file).is_some() {
            m.order.retain(|&f| f != file);
        }
    }

    /// The bytes of `range` of `object`, if fetched before.
    pub(crate) fn bytes(&self, object: i64, range: &Range<u64>) -> Option<Bytes> {
        locked(&self.bytes)
            .by_range
            .get(&(object, range.start, range.end))
            .cloned()
    }

    /// Keeps the bytes of `range` of `object`.
    pub(crate) fn keep_bytes(&self, object: i64, range: &Range<u64>, bytes: Bytes) {
        if bytes.len() > OBJECT_CACHE_MAX_BYTES / 4 {
            return;
        }
        let mut b = locked(&self.bytes);
        let key = (object, range.start, range.end);
        let n = bytes.len();
        if b.by_range.insert(key, bytes).is_some() {
            return;
        }
        b.order.push_back(key);
        b.total += n;
        while b.total > OBJECT_CACHE_MAX_BYTES {
            let Some(old) = b.order.pop_front() else {
                break;
            };
            if let Some(gone) = b.by_range.remove(&old) {
                b.total -= gone.len();
            }
        }
    }
}

/// Most rows of a slice map the cache keeps: a file written in more pieces (until
/// compaction merges them) is read by ranges, uncached.
const MAP_MAX_ROWS: i64 = crate::limits::SLICE_MAP_MAX_ROWS;

/// A file's row with its `version` (what a cached map is checked against).
pub(crate) async fn get_versioned<C: GenericClient + Sync>(
    c: &C,
    id: i64,
) -> Result<(Inode, i64), Fail> {
    let sql = format!("SELECT {}, version FROM inodes WHERE id = $1", meta::COLS);
    match c.query_opt(&sql, &[&id]).await? {
        Some(row) => Ok((meta::inode(&row)?, row.get(13))),
        None => Err(Fail::Fs(FsError::Stale)),
    }
}

fn slice_of(row: &tokio_postgres::Row) -> Slice {
    Slice {
        offset: row.get(0),
        length: row.get(1),
        object: row.get(2),
        object_offset: row.get(3),
        data: row.get::<_, Option<Vec<u8>>>(4).map(Bytes::from),
    }
}

/// The slices of `file` that overlap `[start, end)`, newest last: from the map cached at
/// `version`, else from the database (keeping the whole map when it is small enough).
async fn slices<C: GenericClient + Sync>(
    inner: &Inner,
    c: &C,
    file: i64,
    version: i64,
    (start, end): (i64, i64),
) -> Result<Vec<Slice>, Fail> {
    let overlapping = |s: &&Slice| s.offset < end && s.offset + s.length > start;
    if let Some(map) = inner.caches.map(file, version) {
        inner.caches.hit_map();
        return Ok(map.iter().filter(overlapping).cloned().collect());
    }
    COUNTERS.transactions(1);
    let rows = c
        .query(
            "SELECT offset_bytes, length_bytes, object, object_offset, data FROM slices \
             WHERE file = $1 ORDER BY seq LIMIT $2",
            &[&file, &(MAP_MAX_ROWS + 1)],
        )
        .await?;
    if rows.len() as i64 <= MAP_MAX_ROWS {
        let map: Vec<Slice> = rows.iter().map(slice_of).collect();
        let wanted = map.iter().filter(overlapping).cloned().collect();
        inner.caches.keep_map(file, version, Arc::new(map));
        return Ok(wanted);
    }
    COUNTERS.transactions(1);
    let rows = c
        .query(
            "SELECT offset_bytes, length_bytes, object, object_offset, data FROM slices \
             WHERE file = $1 AND offset_bytes < $3 AND offset_bytes + length_bytes > $2 \
             ORDER BY seq",
            &[&file, &start, &end],
        )
        .await?;
    Ok(rows.iter().map(slice_of).collect())
}

/// One GET's answer: where it lands (an index into the laid slices), the object and range.
type Fetched = (usize, i64, Range<u64>, Result<Bytes, object_store::Error>);

/// Reads `len` bytes at `offset` of `file`, whose row was read at `version`, from its
/// published slices through the caches (see the module). GETs run
/// [`READ_PARALLEL_GETS`] at once.
pub(crate) async fn read<C: GenericClient + Sync>(
    inner: &Inner,
    c: &C,
    file: i64,
    version: i64,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>, Fail> {
    match read_once(inner, c, file, version, offset, len).await {
        Err(Fail::Store(object_store::Error::NotFound { .. })) => {
            // A map cached before a compaction named an object GC has since deleted: read
            // the rows as they are now, past the caches.
            inner.caches.drop_map(file);
            COUNTERS.transactions(1);
            crate::data::read_published(inner, c, file, offset, len).await
        }
        other => other,
    }
}

async fn read_once<C: GenericClient + Sync>(
    inner: &Inner,
    c: &C,
    file: i64,
    version: i64,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>, Fail> {
    let mut buf = vec![0u8; len];
    if len == 0 {
        return Ok(buf);
    }
    let start = i64::try_from(offset).map_err(|_| Fail::Fs(FsError::Inval))?;
    let end = start + i64::try_from(len).unwrap_or(0);
    let slices = slices(inner, c, file, version, (start, end)).await?;
    // Where each slice lands in `buf`, and the object range to fetch for it.
    let mut laid: Vec<(usize, usize, Option<Bytes>)> = Vec::with_capacity(slices.len());
    let mut fetches = Vec::new();
    for s in &slices {
        let from = s.offset.max(start);
        let to = (s.offset + s.length).min(end);
        let at = usize::try_from(from - start).unwrap_or(0);
        let n = usize::try_from(to - from).unwrap_or(0);
        let skip = usize::try_from(from - s.offset).unwrap_or(0);
        let bytes = match (s.object, &s.data) {
            (Some(obj), _) => {
                let first = u64::try_from(s.object_offset).unwrap_or(0) + skip as u64;
                let range = first..first + n as u64;
                if let Some(hit) = inner.caches.bytes(obj, &range) {
                    inner.caches.hit_bytes();
                    Some(hit)
                } else {
                    fetches.push((laid.len(), obj, range));
                    None
                }
            }
            (None, Some(d)) => Some(d.slice(skip.min(d.len())..(skip + n).min(d.len()))),
            (None, None) => Some(Bytes::new()),
        };
        laid.push((at, n, bytes));
    }
    let store = &inner.engines.store;
    let got: Vec<Fetched> = futures::stream::iter(fetches)
        .map(|(i, obj, range)| {
            let path = inner.engines.object_path(obj);
            async move {
                let got = store.get_range(&path, range.clone()).await;
                COUNTERS.get(got.as_ref().map_or(0, Bytes::len));
                (i, obj, range, got)
            }
        })
        .buffered(READ_PARALLEL_GETS)
        .collect()
        .await;
    for (i, obj, range, bytes) in got {
        let bytes = bytes?;
        inner.caches.keep_bytes(obj, &range, bytes.clone());
        laid[i].2 = Some(bytes);
    }
    // In seq order, newest last: a zero slice (a truncation's mask) writes zeros.
    for (at, n, bytes) in laid {
        let Some(b) = bytes else { continue };
        let n = n.min(len - at);
        if b.is_empty() {
            buf[at..at + n].fill(0);
        } else {
            let k = b.len().min(n);
            buf[at..at + k].copy_from_slice(&b[..k]);
        }
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_serves_only_its_version_and_both_stay_bounded() {
        let c = Caches::default();
        c.keep_map(1, 7, Arc::new(Vec::new()));
        assert!(c.map(1, 7).is_some());
        assert!(c.map(1, 8).is_none(), "another version is another map");
        c.drop_map(1);
        assert!(c.map(1, 7).is_none());
        for f in 0..=SLICE_MAPS_MAX as i64 {
            c.keep_map(f, 1, Arc::new(Vec::new()));
        }
        assert!(c.map(0, 1).is_none(), "the oldest map went");
        assert!(c.map(SLICE_MAPS_MAX as i64, 1).is_some());
        let piece = Bytes::from(vec![1u8; OBJECT_CACHE_MAX_BYTES / 8]);
        for o in 0..16 {
            c.keep_bytes(o, &(0..piece.len() as u64), piece.clone());
        }
        assert!(c.bytes(0, &(0..piece.len() as u64)).is_none());
        assert!(c.bytes(15, &(0..piece.len() as u64)).is_some());
        assert!(locked(&c.bytes).total <= OBJECT_CACHE_MAX_BYTES);
    }
}
