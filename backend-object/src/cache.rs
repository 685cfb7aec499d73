//! Per-head caches in front of the engines (seed 004's idea: keep what one call paid to
//! fetch for the next), validated so that no head ever serves what another head changed.
//!
//! - **Slice maps**, by file: the `slices` rows of a file as of one `inodes.version`. A
//!   READ reads the file's row anyway (its attributes, for the permission check and the
//!   size), with its `version`, in the same statement as the slices it needs
//!   ([`row_and_slices`]); the map is used only if it was read at that very version, so a
//!   publish, a truncation or any change committed on any head (each moves `version` in
//!   the same transaction) makes the next READ on every head read the rows again. A file
//!   with more slices than a map holds (the row's `slice_count`, which the database keeps)
//!   is read by range, and mapped again once a compaction brought the count down. Names
//!   and attributes are not cached at all: checking a version costs the same round trip
//!   as reading the row, so every call reads them (a READDIR page reads its entries'
//!   with their names), and a change committed on head A is seen by the next call on
//!   head B.
//! - **Object bytes**, by object id and range. Objects are immutable and their ids never
//!   reused, so bytes once fetched are that object's bytes for ever: a hit needs no
//!   validation. A GET in flight is shared by every READ of the head that wants the
//!   same range. A long READ, or one of a sequential stream ([`Caches::sequential`]:
//!   READs that touch one another, in whatever order they arrive), fetches the whole
//!   object it reads from (the part of it the file's map names, see
//!   [`crate::limits::WHOLE_SLICE_READ_MIN_BYTES`]) and reads the objects of the next
//!   [`READ_AHEAD_BYTES`] ahead, so a sequential reader costs about one GET per object.
//!   The bytes are kept as the HTTP client received them (pieces, see `rope`), and a
//!   READ's answer is pieces of them: the NFS reply carries them uncopied
//!   (`vfs::Backend::read_shared`).
//!
//! Compaction replaces a file's rows and moves `version` with them, so every head reads
//! the new map (and the new objects) at its next READ. A READ that began before the
//! compaction committed may still use the old map; garbage collection keeps the old
//! objects a grace past that, which such a READ never outlives. Should a READ find an
//! object missing through a cached map all the same, it drops the map and reads the rows
//! again (whose objects are there, by GC's own argument): a retry, never wrong data or an
//! error.
//!
//! Both are bounded ([`SLICE_MAPS_MAX`], [`OBJECT_CACHE_MAX_BYTES`]) and evict first in,
//! first out: a file read again soon after is what they are for.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use futures::future::{BoxFuture, FutureExt, Shared};
use futures::StreamExt;
use object_store::{GetOptions, GetRange, ObjectStore};
use vfs::FsError;

use crate::data::READ_PARALLEL_GETS;
use crate::engine::{Fail, Sql, COUNTERS};
use crate::limits::{
    OBJECT_CACHE_MAX_BYTES, OPERATION_TIMEOUT, READ_AHEAD_BYTES, READ_AHEAD_MAX, SLICE_MAPS_MAX,
    STREAM_FILES_MAX, STREAM_MIN_TOUCHING, STREAM_WINDOW_READS, WHOLE_SLICE_MAX,
};
use crate::meta::{self, Inode};
use crate::rope::Rope;
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
    /// GETs in flight, by (object, start, end): a READ that wants a range being fetched
    /// waits for that GET instead of sending another.
    in_flight: Mutex<HashMap<(i64, u64, u64), SharedGet>>,
    map_hits: AtomicU64,
    byte_hits: AtomicU64,
    /// Read-ahead GETs in flight ([`READ_AHEAD_MAX`] at most).
    reading_ahead: AtomicUsize,
    /// Each file's last READs, to tell a sequential stream from random access.
    streams: Mutex<Streams>,
}

/// The last READs of files (at most [`STREAM_FILES_MAX`], first in first out).
#[derive(Default)]
struct Streams {
    by_file: HashMap<i64, Stream>,
    order: VecDeque<i64>,
}

/// One file's last [`STREAM_WINDOW_READS`] READs, a ring: `[start, end)` and whether it
/// touches another READ of the ring (one started where it ended or ended where it
/// started, whichever came first).
#[derive(Default)]
struct Stream {
    recent: [(u64, u64, bool); STREAM_WINDOW_READS],
    next: usize,
}

/// How often this head's caches answered instead of an engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheHits {
    /// READs that used a cached slice map (one query saved each).
    pub maps: u64,
    /// Object ranges served from memory (one GET saved each).
    pub bytes: u64,
}

/// One GET that several READs wait for: its bytes, or `None` if it failed.
type SharedGet = Shared<BoxFuture<'static, Option<Rope>>>;

#[derive(Default)]
struct Maps {
    by_file: HashMap<i64, (i64, Arc<Vec<Slice>>)>,
    order: VecDeque<i64>,
}

#[derive(Default)]
struct ObjectBytes {
    /// As the GET received them (see `rope`): no copy into one buffer.
    by_range: HashMap<(i64, u64, u64), Rope>,
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

    /// Notes a READ of `[start, end)` of `file` and says whether it belongs to a
    /// sequential stream: at least [`STREAM_MIN_TOUCHING`] of the file's last
    /// [`STREAM_WINDOW_READS`] READs (this one included) touch another of them (start
    /// where it ended or end where it started). The READs of a stream nearly all do, in
    /// whatever order a client's window of them arrives; random READs almost never do.
    pub(crate) fn sequential(&self, file: i64, start: u64, end: u64) -> bool {
        let mut st = locked(&self.streams);
        let Streams { by_file, order } = &mut *st;
        let s = by_file.entry(file).or_insert_with(|| {
            order.push_back(file);
            Stream::default()
        });
        let mut touches = false;
        for r in &mut s.recent {
            if r.0 < r.1 && (r.1 == start || r.0 == end) {
                r.2 = true;
                touches = true;
            }
        }
        s.recent[s.next] = (start, end, touches);
        s.next = (s.next + 1) % STREAM_WINDOW_READS;
        let streaming = s.recent.iter().filter(|r| r.2).count() >= STREAM_MIN_TOUCHING;
        while by_file.len() > STREAM_FILES_MAX {
            let Some(old) = order.pop_front() else {
                break;
            };
            by_file.remove(&old);
        }
        streaming
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

    /// `file`'s slice map, of whatever version, with that version.
    pub(crate) fn any_map(&self, file: i64) -> Option<(i64, Arc<Vec<Slice>>)> {
        locked(&self.maps)
            .by_file
            .get(&file)
            .map(|(v, map)| (*v, Arc::clone(map)))
    }

    /// The GET of `range` of `object` in flight, or its bytes if one landed meanwhile
    /// (`Err`), or a new GET `start` makes. A GET keeps its bytes before it leaves the
    /// in-flight map, so under that map's lock one or the other is found: two READs never
    /// send the same GET.
    fn in_flight(
        &self,
        object: i64,
        range: &Range<u64>,
        start: impl FnOnce() -> BoxFuture<'static, Option<Rope>>,
    ) -> Result<SharedGet, Rope> {
        let mut flying = locked(&self.in_flight);
        let key = (object, range.start, range.end);
        if let Some(get) = flying.get(&key) {
            return Ok(get.clone());
        }
        if let Some(hit) = self.bytes(object, range) {
            return Err(hit);
        }
        Ok(flying
            .entry(key)
            .or_insert_with(|| start().shared())
            .clone())
    }

    /// The GET of `range` of `object` is over (its bytes, if any, are kept).
    fn landed(&self, object: i64, range: &Range<u64>) {
        locked(&self.in_flight).remove(&(object, range.start, range.end));
    }

    /// Forgets `file`'s slice map (an object it named was missing).
    pub(crate) fn drop_map(&self, file: i64) {
        let mut m = locked(&self.maps);
        if m.by_file.remove(&file).is_some() {
            m.order.retain(|&f| f != file);
        }
    }

    /// The bytes of `range` of `object`, if fetched before.
    pub(crate) fn bytes(&self, object: i64, range: &Range<u64>) -> Option<Rope> {
        locked(&self.bytes)
            .by_range
            .get(&(object, range.start, range.end))
            .cloned()
    }

    /// Keeps the bytes of `range` of `object`.
    pub(crate) fn keep_bytes(&self, object: i64, range: &Range<u64>, bytes: Rope) {
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

/// Columns of a `slices` row as [`slice_at`] reads them.
const SLICE_COLS: &str = "offset_bytes, length_bytes, object, object_offset, data";

fn slice_at(row: &tokio_postgres::Row, at: usize) -> Slice {
    Slice {
        offset: row.get(at),
        length: row.get(at + 1),
        object: row.get(at + 2),
        object_offset: row.get(at + 3),
        data: row.get::<_, Option<Vec<u8>>>(at + 4).map(Bytes::from),
    }
}

/// What a READ of `[start, end)` of `file` needs from the database, in one statement:
/// the file's row (attributes for the checks and the size, its `version` and its
/// `slice_count`) and its slices overlapping the range, newest last. The slices come
/// from the map this head cached at that very `version` when it has one (the statement
/// then returns the row alone), else from the rows: the whole map when the row's
/// `slice_count` is at most [`MAP_MAX_ROWS`] (kept for the next READ), only the range's
/// when it is more. The count is the database's, read with the row, so a file
/// compaction shrank is mapped again at its next READ on every head.
pub(crate) async fn row_and_slices<C: Sql + Sync>(
    inner: &Inner,
    c: &C,
    file: i64,
    (start, end): (i64, i64),
) -> Result<Found, Fail> {
    let overlapping = |s: &&Slice| s.offset < end && s.offset + s.length > start;
    let cached = inner.caches.any_map(file);
    let cached_version = cached.as_ref().map_or(-1, |(v, _)| *v);
    // The slices join only when the cached map is not of the row's version; all of them
    // for a map (a file of at most MAP_MAX_ROWS slices), else those of the range.
    let sql = format!(
        "SELECT {}, i.version, i.slice_count, s.{} FROM inodes i LEFT JOIN LATERAL (\
         SELECT seq, {SLICE_COLS} FROM slices WHERE file = i.id AND i.version <> $2 \
         AND (i.slice_count <= $5 OR (offset_bytes < $4 AND offset_bytes + length_bytes > $3)) \
         ORDER BY seq) s ON true WHERE i.id = $1 ORDER BY s.seq",
        meta::cols_of("i"),
        SLICE_COLS.replace(", ", ", s."),
    );
    let rows = c
        .query(&sql, &[&file, &cached_version, &start, &end, &MAP_MAX_ROWS])
        .await?;
    let Some(first) = rows.first() else {
        return Err(Fail::Fs(FsError::Stale));
    };
    let row = meta::inode(first)?;
    let version: i64 = first.get(meta::NCOLS);
    let count: i64 = first.get(meta::NCOLS + 1);
    if let Some((_, map)) = cached.filter(|(v, _)| *v == version) {
        inner.caches.hit_map();
        return Ok(Found {
            row,
            slices: map.iter().filter(overlapping).cloned().collect(),
            map: Some(map),
        });
    }
    let at = meta::NCOLS + 2;
    let got: Vec<Slice> = rows
        .iter()
        .filter(|r| r.get::<_, Option<i64>>(at).is_some())
        .map(|r| slice_at(r, at))
        .collect();
    if count > MAP_MAX_ROWS {
        // More slices than a map holds: the range's, read by range until a compaction
        // brings the count down.
        inner.caches.drop_map(file);
        return Ok(Found {
            row,
            slices: got,
            map: None,
        });
    }
    let slices = got.iter().filter(overlapping).cloned().collect();
    let map = Arc::new(got);
    inner.caches.keep_map(file, version, Arc::clone(&map));
    Ok(Found {
        row,
        slices,
        map: Some(map),
    })
}

/// What [`row_and_slices`] found.
pub(crate) struct Found {
    /// The file's row.
    pub row: Inode,
    /// Its slices overlapping the range, newest last.
    pub slices: Vec<Slice>,
    /// All its slices (the map of the row's `version`), when the file has no more than
    /// a map holds: what tells a READ which part of an object the file uses, and which
    /// objects come next.
    pub map: Option<Arc<Vec<Slice>>>,
}

/// The part of `object` that the rows of `map` name (an object holds the extents of one
/// publish or one compaction of one file, so a file's whole map names every part of it
/// still used), if it is no larger than [`WHOLE_SLICE_MAX`].
fn object_span(map: &[Slice], object: i64) -> Option<Range<u64>> {
    let (from, to) = map
        .iter()
        .filter(|s| s.object == Some(object))
        .map(|s| (s.object_offset, s.object_offset + s.length))
        .fold(None, |acc: Option<(i64, i64)>, (a, b)| {
            Some(acc.map_or((a, b), |(x, y)| (x.min(a), y.max(b))))
        })?;
    let span = u64::try_from(from).ok()?..u64::try_from(to).ok()?;
    (span.end - span.start <= WHOLE_SLICE_MAX).then_some(span)
}

/// The whole-object (or, without a map, whole-slice) range a long READ of slice `s`
/// fetches, if not larger than [`WHOLE_SLICE_MAX`].
fn whole_range(map: Option<&[Slice]>, s: &Slice) -> Option<Range<u64>> {
    let obj = s.object?;
    if let Some(span) = map.and_then(|m| object_span(m, obj)) {
        return Some(span);
    }
    let o_off = u64::try_from(s.object_offset).ok()?;
    let span = o_off..o_off + u64::try_from(s.length).ok()?;
    (span.end - span.start <= WHOLE_SLICE_MAX).then_some(span)
}

/// After a long or streaming READ that ended at `end`, inside the file: fetches the
/// objects holding the file's next [`READ_AHEAD_BYTES`] (the ranges the file's `map`
/// names) whole into the byte cache in the background, in offset order, so that a
/// sequential reader's next READs find them there or in flight, whatever order its READs
/// arrive in. At most [`READ_AHEAD_MAX`] GETs at once per head; none for an object cached
/// or being fetched already. Without a map (a file of more slices than a map holds)
/// nothing is read ahead. Each is bounded by half an operation timeout, so it ends within
/// the collector's grace like a READ (see `gc`); a failure only means the next READ
/// fetches.
pub(crate) fn read_ahead(inner: &Arc<Inner>, map: Option<&[Slice]>, end: i64) {
    let Some(map) = map else { return };
    let until = end.saturating_add(READ_AHEAD_BYTES);
    let mut ahead: Vec<&Slice> = map
        .iter()
        .filter(|s| s.object.is_some() && s.offset + s.length > end && s.offset < until)
        .collect();
    ahead.sort_by_key(|s| s.offset.max(end));
    let mut seen = Vec::new();
    for s in ahead {
        let Some(obj) = s.object else { continue };
        if seen.contains(&obj) {
            continue;
        }
        seen.push(obj);
        let Some(span) = object_span(map, obj) else {
            continue;
        };
        let caches = &inner.caches;
        if caches.bytes(obj, &span).is_some()
            || locked(&caches.in_flight).contains_key(&(obj, span.start, span.end))
        {
            continue;
        }
        if caches.reading_ahead.fetch_add(1, Ordering::AcqRel) >= READ_AHEAD_MAX {
            caches.reading_ahead.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let task = Arc::clone(inner);
        inner.engines.spawn(async move {
            let bounded = tokio::time::timeout(OPERATION_TIMEOUT / 2, fetch(&task, obj, span));
            drop(bounded.await);
            task.caches.reading_ahead.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// The slices a read of `[start, end)` must lay, oldest first: one that newer slices
/// hide over the whole range is left out (its bytes would cost a GET and be covered).
fn visible(slices: Vec<Slice>, (start, end): (i64, i64)) -> Vec<Slice> {
    // Ranges the newer slices cover, disjoint and in order.
    let mut covered: Vec<(i64, i64)> = Vec::new();
    let mut keep = Vec::with_capacity(slices.len());
    for s in slices.into_iter().rev() {
        let from = s.offset.max(start);
        let to = (s.offset + s.length).min(end);
        if from >= to || covered.iter().any(|&(a, b)| a <= from && to <= b) {
            continue;
        }
        covered.push((from, to));
        covered.sort_unstable();
        let mut merged: Vec<(i64, i64)> = Vec::with_capacity(covered.len());
        for (a, b) in covered.drain(..) {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        covered = merged;
        keep.push(s);
    }
    keep.reverse();
    keep
}

/// One GET's answer: where it lands (an index into the laid slices) and the part of it
/// the read wants.
type Fetched = (usize, Range<usize>, Result<Rope, object_store::Error>);

/// The `len` bytes at `offset` of `file`: its published slices (`found`, from
/// [`row_and_slices`]) laid over zeros through the caches (see the module), as pieces of
/// the cached objects where they follow one another ([`lay`]). A `long` READ (a long
/// one, or one of a sequential stream, [`Caches::sequential`]) fetches whole objects.
/// GETs run [`READ_PARALLEL_GETS`] at once.
pub(crate) async fn read<C: Sql + Sync>(
    inner: &Inner,
    c: &C,
    file: i64,
    found: &Found,
    long: bool,
    (offset, len): (u64, usize),
) -> Result<Rope, Fail> {
    let whole = long.then(|| found.map.as_deref().map(Vec::as_slice));
    match read_once(inner, found.slices.clone(), whole, (offset, len)).await {
        Err(Fail::Store(object_store::Error::NotFound { .. })) => {
            // A map cached before a compaction named an object GC has since deleted: read
            // the rows as they are now, past the caches.
            inner.caches.drop_map(file);
            COUNTERS.transactions(1);
            let bytes = crate::data::read_published(inner, c, file, offset, len).await?;
            Ok(Rope::from(Bytes::from(bytes)))
        }
        done => done,
    }
}

/// [`read`] once. `whole`: fetch whole objects (`Some`), as the file's map (if any) names
/// them, else only what the READ wants.
async fn read_once(
    inner: &Inner,
    slices: Vec<Slice>,
    whole: Option<Option<&[Slice]>>,
    (offset, len): (u64, usize),
) -> Result<Rope, Fail> {
    if len == 0 {
        return Ok(Rope::default());
    }
    let start = i64::try_from(offset).map_err(|_| Fail::Fs(FsError::Inval))?;
    let end = start + i64::try_from(len).unwrap_or(0);
    let slices = visible(slices, (start, end));
    // A long READ fetches the whole object it reads from (one GET shared by the READs in
    // flight on it, kept in the byte cache): a sequential reader's next READs of it are
    // then served from memory, in whatever order they come.
    // Where each slice lands in `out`, and the object range to fetch for it.
    let mut laid: Vec<(usize, usize, Option<Rope>)> = Vec::with_capacity(slices.len());
    let mut fetches = Vec::new();
    for s in &slices {
        let from = s.offset.max(start);
        let to = (s.offset + s.length).min(end);
        let at = usize::try_from(from - start).unwrap_or(0);
        let n = usize::try_from(to - from).unwrap_or(0);
        let skip = usize::try_from(from - s.offset).unwrap_or(0);
        let bytes = match (s.object, &s.data) {
            (Some(obj), _) => {
                let o_off = u64::try_from(s.object_offset).unwrap_or(0);
                let wanted = o_off + skip as u64..o_off + (skip + n) as u64;
                let (range, part) = match whole.and_then(|map| whole_range(map, s)) {
                    Some(span) => {
                        let first = usize::try_from(wanted.start - span.start).unwrap_or(0);
                        (span, first..first + n)
                    }
                    None => (wanted, 0..n),
                };
                if let Some(hit) = inner.caches.bytes(obj, &range) {
                    inner.caches.hit_bytes();
                    Some(hit.slice(part))
                } else {
                    fetches.push((laid.len(), obj, range, part));
                    None
                }
            }
            (None, Some(d)) => Some(Rope::from(
                d.slice(skip.min(d.len())..(skip + n).min(d.len())),
            )),
            (None, None) => Some(Rope::default()),
        };
        laid.push((at, n, bytes));
    }
    let got: Vec<Fetched> = futures::stream::iter(fetches)
        .map(|(i, obj, range, part)| async move { (i, part, fetch(inner, obj, range).await) })
        .buffered(READ_PARALLEL_GETS)
        .collect()
        .await;
    for (i, part, bytes) in got {
        laid[i].2 = Some(bytes?.slice(part));
    }
    Ok(lay(laid, len))
}

/// The `len` bytes the `laid` slices make (each `(at, n, bytes)`, in seq order, newest
/// last). Slices that follow one another from the start to the end (the usual READ: one
/// object's range, or a few in order) are joined as they are, uncopied; anything else
/// (holes, overlaps, a truncation's zeros, which come as empty bytes) is laid over zeros
/// in a buffer of its own.
fn lay(laid: Vec<(usize, usize, Option<Rope>)>, len: usize) -> Rope {
    let end = laid.iter().try_fold(0, |at, (from, n, b)| match b {
        Some(b) if *from == at && *n > 0 && b.len() >= *n => Some(at + n),
        _ => None,
    });
    if end == Some(len) {
        let mut out = Rope::default();
        for (_, n, b) in laid {
            if let Some(b) = b {
                out.append(b.slice(0..n));
            }
        }
        return out;
    }
    let mut out = BytesMut::zeroed(len);
    let buf = &mut out[..];
    for (at, n, bytes) in laid {
        let Some(b) = bytes else { continue };
        let n = n.min(len - at);
        if b.is_empty() {
            buf[at..at + n].fill(0);
        } else {
            let k = b.len().min(n);
            b.copy_to(&mut buf[at..at + k]);
        }
    }
    Rope::from(out.freeze())
}

/// `range` of object `obj`, as the HTTP client received it (no copy into one buffer).
async fn get(
    store: &dyn ObjectStore,
    path: &object_store::path::Path,
    range: Range<u64>,
) -> Result<Rope, object_store::Error> {
    let options = GetOptions {
        range: Some(GetRange::Bounded(range)),
        ..GetOptions::default()
    };
    let mut body = store.get_opts(path, options).await?.into_stream();
    let mut rope = Rope::default();
    while let Some(piece) = body.next().await {
        rope.push(piece?);
    }
    Ok(rope)
}

/// `range` of object `obj`: one GET, shared with every READ of this head that wants the
/// same range while it is in flight. A shared GET that failed is tried again by each
/// waiter on its own, so each gets its own error.
async fn fetch(inner: &Inner, obj: i64, range: Range<u64>) -> Result<Rope, object_store::Error> {
    let path = inner.engines.object_path(obj);
    let store = Arc::clone(&inner.engines.store);
    let flying = inner.caches.in_flight(obj, &range, || {
        let (store, path, range) = (Arc::clone(&store), path.clone(), range.clone());
        async move {
            let got = get(&*store, &path, range).await;
            COUNTERS.get(got.as_ref().map_or(0, Rope::len));
            got.ok()
        }
        .boxed()
    });
    let shared = match flying {
        Ok(get) => get,
        Err(hit) => {
            // Another READ's fetch (or the read-ahead) landed since this one looked.
            inner.caches.hit_bytes();
            return Ok(hit);
        }
    };
    let got = shared.await;
    if let Some(b) = &got {
        inner.engines.store_answered();
        // Kept before the in-flight entry goes, so a READ that comes now finds one.
        inner.caches.keep_bytes(obj, &range, b.clone());
    }
    inner.caches.landed(obj, &range);
    match got {
        Some(b) => Ok(b),
        None => {
            let got = get(&*store, &path, range).await;
            COUNTERS.get(got.as_ref().map_or(0, Rope::len));
            if got.is_ok() {
                inner.engines.store_answered();
            }
            got
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_serves_only_its_version_and_both_stay_bounded() {
        let c = Caches::default();
        c.keep_map(1, 7, Arc::new(Vec::new()));
        assert!(c.any_map(1).map(|(v, _)| v) == Some(7));
        assert_ne!(
            c.any_map(1).map(|(v, _)| v),
            Some(8),
            "another version is another map"
        );
        c.drop_map(1);
        assert!(c.any_map(1).is_none());
        for f in 0..=SLICE_MAPS_MAX as i64 {
            c.keep_map(f, 1, Arc::new(Vec::new()));
        }
        assert!(c.any_map(0).is_none(), "the oldest map went");
        assert!(c.any_map(SLICE_MAPS_MAX as i64).is_some());
        let piece = Rope::from(Bytes::from(vec![1u8; OBJECT_CACHE_MAX_BYTES / 8]));
        for o in 0..16 {
            c.keep_bytes(o, &(0..piece.len() as u64), piece.clone());
        }
        assert!(c.bytes(0, &(0..piece.len() as u64)).is_none());
        assert!(c.bytes(15, &(0..piece.len() as u64)).is_some());
        assert!(locked(&c.bytes).total <= OBJECT_CACHE_MAX_BYTES);
    }
}
