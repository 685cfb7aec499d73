//! File data: reading slices, and publishing buffered writes.
//!
//! A file's data is its `slices` rows in `seq` order, newest last: each covers
//! `[offset_bytes, offset_bytes + length_bytes)` with inline bytes (`data`), a range of an
//! object (`object`, `object_offset`), or zeros (neither: a truncation's mask). A read
//! starts from zeros and lays the slices it overlaps over them in order, then the head's
//! own buffered writes.
//!
//! **Publish protocol** (one file): take a snapshot of its buffered extents; if they all
//! end within [`INLINE_MAX_BYTES`] they become inline rows, else one object (named by a
//! fresh id from the database's sequence, so no two heads ever write the same key and no
//! conditional PUT is needed) is uploaded *first*; then one transaction locks the inode,
//! inserts one slice row per extent and moves size, mtime and ctime; the write or COMMIT
//! is answered after that commit. A crash between the upload and the commit leaves an
//! object no row names (an orphan, swept later); never a row naming a missing object.

use bytes::Bytes;
use futures::StreamExt;
use object_store::PutPayload;
use tokio_postgres::GenericClient;
use vfs::FsError;

use crate::engine::{transaction, Fail, COUNTERS};
use crate::limits::{INLINE_MAX_BYTES, OBJECT_MAX_BYTES};
use crate::meta::{self, Inode};
use crate::pending::Snapshot;
use crate::Inner;

/// GETs one read runs at once.
pub(crate) const READ_PARALLEL_GETS: usize = 16;

/// Reads `len` bytes at `offset` of file `id` from its published slices.
pub(crate) async fn read_published<C: GenericClient + Sync>(
    inner: &Inner,
    c: &C,
    id: i64,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>, Fail> {
    let mut buf = vec![0u8; len];
    if len == 0 {
        return Ok(buf);
    }
    let start = i64::try_from(offset).map_err(|_| Fail::Fs(FsError::Inval))?;
    let end = start + i64::try_from(len).unwrap_or(0);
    let rows = c
        .query(
            "SELECT offset_bytes, length_bytes, object, object_offset, data FROM slices \
             WHERE file = $1 AND offset_bytes < $3 AND offset_bytes + length_bytes > $2 \
             ORDER BY seq",
            &[&id, &start, &end],
        )
        .await?;
    // Fetch every object range first (in parallel), then lay all slices in order.
    struct Piece {
        at: usize,
        bytes: Option<Bytes>,
        zeros: usize,
    }
    let mut fetches = Vec::new();
    let mut pieces = Vec::with_capacity(rows.len());
    for row in &rows {
        let s_off: i64 = row.get(0);
        let s_len: i64 = row.get(1);
        let object: Option<i64> = row.get(2);
        let o_off: i64 = row.get(3);
        let data: Option<Vec<u8>> = row.get(4);
        let from = s_off.max(start);
        let to = (s_off + s_len).min(end);
        let at = usize::try_from(from - start).unwrap_or(0);
        let n = usize::try_from(to - from).unwrap_or(0);
        let skip = usize::try_from(from - s_off).unwrap_or(0);
        match (object, data) {
            (Some(obj), _) => {
                let first = u64::try_from(o_off).unwrap_or(0) + skip as u64;
                fetches.push((pieces.len(), obj, first..first + n as u64));
                pieces.push(Piece {
                    at,
                    bytes: None,
                    zeros: 0,
                });
            }
            (None, Some(d)) => {
                let d = Bytes::from(d);
                let piece = d.slice(skip.min(d.len())..(skip + n).min(d.len()));
                pieces.push(Piece {
                    at,
                    bytes: Some(piece),
                    zeros: 0,
                });
            }
            (None, None) => pieces.push(Piece {
                at,
                bytes: None,
                zeros: n,
            }),
        }
    }
    let store = std::sync::Arc::clone(&inner.engines.store);
    let fetches: Vec<_> = fetches
        .into_iter()
        .map(|(i, obj, range)| (i, inner.engines.object_path(obj), range))
        .collect();
    let got: Vec<(usize, Result<Bytes, object_store::Error>)> = futures::stream::iter(fetches)
        .map(move |(i, path, range)| {
            let store = std::sync::Arc::clone(&store);
            async move {
                let got = store.get_range(&path, range).await;
                COUNTERS.get(got.as_ref().map_or(0, Bytes::len));
                (i, got)
            }
        })
        .buffered(READ_PARALLEL_GETS)
        .collect()
        .await;
    for (i, bytes) in got {
        pieces[i].bytes = Some(bytes?);
    }
    for p in pieces {
        if let Some(b) = p.bytes {
            let n = b.len().min(len - p.at);
            buf[p.at..p.at + n].copy_from_slice(&b[..n]);
        } else if p.zeros > 0 {
            let n = p.zeros.min(len - p.at);
            buf[p.at..p.at + n].fill(0);
        }
    }
    Ok(buf)
}

/// Publishes `file`'s buffered writes (see the module's protocol): everything buffered
/// when it gets the file's publish lock, one object at a time. Returns the file's row
/// after the last commit, or `None` when nothing was buffered (or the file went).
pub(crate) async fn publish(inner: &Inner, file: i64) -> Result<Option<Inode>, Fail> {
    let lock = inner.pending.publish_lock(file);
    let _one_at_a_time = lock.lock().await;
    publish_locked(inner, file).await
}

/// Makes room for a write of `len` bytes to `file`, whose open data was full: waits for
/// the publish in progress, then publishes only if the file is still full. (Every writer
/// that found it full waits here; publishing whatever the others wrote meanwhile would
/// upload objects smaller than one object's worth.)
pub(crate) async fn make_room(inner: &Inner, file: i64, len: usize) -> Result<(), Fail> {
    let lock = inner.pending.publish_lock(file);
    let _one_at_a_time = lock.lock().await;
    if !inner.pending.fits(file, len) {
        publish_locked(inner, file).await?;
    }
    Ok(())
}

/// [`publish`] with the file's publish lock held. A file whose last publish failed a
/// moment ago is not tried again before its rest is over ([`Pending::may_publish`]):
/// `Fail::Resting`, which the client hears as `Jukebox`.
///
/// [`Pending::may_publish`]: crate::pending::Pending::may_publish
async fn publish_locked(inner: &Inner, file: i64) -> Result<Option<Inode>, Fail> {
    let Some(newest) = inner.pending.newest(file) else {
        return Ok(None);
    };
    let mut after = None;
    while let Some(snap) = inner.pending.snapshot(file) {
        if !inner.pending.may_publish(file, inner.clock.monotonic()) {
            return Err(Fail::Resting);
        }
        let upto = snap.upto;
        after = match publish_one(inner, file, snap).await {
            Ok(after) => after,
            Err(e) => {
                inner.pending.failed(file, inner.clock.monotonic());
                return Err(e);
            }
        };
        if after.is_none() || upto >= newest {
            break;
        }
    }
    Ok(after)
}

/// Uploads one snapshot (unless inline) and commits its rows; `None` if the file went.
///
/// A truncation on this head that committed while the object uploaded cut the file
/// ([`Pending::cut`], read once the row is locked, so after that truncation's commit):
/// bytes of the snapshot at or past the cut are not committed, since they were written
/// before the truncation and it removed them. (The object keeps them, unnamed past the
/// rows' ends; one no row names at all is swept as an orphan.)
///
/// [`Pending::cut`]: crate::pending::Pending::cut
async fn publish_one(inner: &Inner, file: i64, snap: Snapshot) -> Result<Option<Inode>, Fail> {
    let end = snap.extents.iter().map(|e| e.end()).max().unwrap_or(0);
    let inline = end <= INLINE_MAX_BYTES;
    let object = if inline {
        None
    } else {
        Some(upload(inner, concatenate(&snap.extents)).await?)
    };
    let done = transaction!(inner.engines.pool, |tx| {
        let c: &tokio_postgres::Transaction<'_> = &tx;
        let locked = meta::lock(c, &[file]).await?;
        let cut = inner.pending.cut(file).unwrap_or(u64::MAX);
        let mut object_offset = 0i64;
        let mut kept_end = None;
        for e in &snap.extents {
            let offset = i64::try_from(e.offset).map_err(|_| Fail::Fs(FsError::FBig))?;
            let whole = i64::try_from(e.data.len()).unwrap_or(0);
            let kept = e.end().min(cut).saturating_sub(e.offset);
            let length = i64::try_from(kept).unwrap_or(0);
            if length > 0 {
                let kept = usize::try_from(kept)
                    .unwrap_or(usize::MAX)
                    .min(e.data.len());
                let data = inline.then(|| &e.data[..kept]);
                c.execute(
                    "INSERT INTO slices (file, seq, offset_bytes, length_bytes, object, \
                     object_offset, data) VALUES ($1, nextval('granary_slice_seq'), $2, $3, $4, $5, $6)",
                    &[&file, &offset, &length, &object, &object_offset, &data],
                )
                .await?;
                kept_end = kept_end.max(Some(offset + length));
            }
            if !inline {
                object_offset += whole;
            }
        }
        let Some(end) = kept_end else {
            // Everything it took was truncated away: nothing changes.
            return Ok(locked.of(file)?.clone());
        };
        let sql = format!(
            "UPDATE inodes SET size_bytes = GREATEST(size_bytes, $2), \
             mtime_ns = GREATEST($3, ctime_ns + 1), ctime_ns = GREATEST($3, ctime_ns + 1), \
             version = version + 1 WHERE id = $1 RETURNING {}",
            meta::COLS
        );
        let row = c.query_one(&sql, &[&file, &end, &snap.stamp_ns]).await?;
        meta::inode(&row)
    });
    match done {
        Ok(after) => {
            inner.pending.release(file, snap.upto);
            Ok(Some(after))
        }
        Err(Fail::Fs(FsError::Stale)) => {
            // Removed meanwhile (on another head): its data has nowhere to go.
            inner.pending.drop_file(file);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Uploads `body` as one object under a fresh id; returns the id.
pub(crate) async fn upload(inner: &Inner, body: Vec<u8>) -> Result<i64, Fail> {
    debug_assert!(body.len() <= OBJECT_MAX_BYTES);
    let client = inner.engines.pool.get().await?;
    COUNTERS.transactions(1);
    let id: i64 = client
        .query_one("SELECT nextval('granary_object_ids')", &[])
        .await?
        .get(0);
    drop(client);
    let path = inner.engines.object_path(id);
    COUNTERS.put(body.len());
    inner
        .engines
        .store
        .put(&path, PutPayload::from(body))
        .await?;
    Ok(id)
}

/// The extents' bytes end to end, as one object holds them.
fn concatenate(extents: &[crate::pending::Extent]) -> Vec<u8> {
    let size: usize = extents.iter().map(|e| e.data.len()).sum();
    let mut body = Vec::with_capacity(size);
    for e in extents {
        body.extend_from_slice(&e.data);
    }
    body
}
