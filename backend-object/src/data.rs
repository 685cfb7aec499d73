//! File data: reading slices, and publishing buffered writes.
//!
//! A file's data is its `slices` rows in `seq` order, newest last: each covers
//! `[offset_bytes, offset_bytes + length_bytes)` with inline bytes (`data`), a range of an
//! object (`object`, `object_offset`), or zeros (neither: a truncation's mask). A read
//! starts from zeros and lays the slices it overlaps over them in order, then the head's
//! own buffered writes.
//!
//! **Publish protocol** (one file): the buffered extents are sealed in groups of one
//! object's worth, oldest first; a group whose extents all end within
//! [`crate::limits::INLINE_MAX_BYTES`] becomes inline rows, any other one object (named by
//! a fresh id from the database's sequence, so no two heads ever write the same key and
//! no conditional PUT is needed) that is uploaded *first*: as soon as the file's open
//! data fills it (several at once, in the background), or by the publish itself. Then,
//! group by group in the order sealed, one transaction locks the inode, inserts one slice
//! row per extent and moves size, mtime and ctime; the write or COMMIT is answered after
//! the last commit. A crash between an upload and its commit leaves an object no row
//! names (an orphan, swept later); never a row naming a missing object. An upload older
//! than [`UPLOAD_FRESH`] when its group commits is done again, so the sweep can never have
//! taken it.

use std::sync::Arc;

use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use object_store::PutPayload;
use vfs::FsError;

use crate::engine::{transaction, Fail, Sql, COUNTERS};
use crate::limits::{OBJECT_MAX_BYTES, OPERATION_TIMEOUT, UPLOAD_FRESH};
use crate::meta::{self, Inode};
use crate::pending::Group;
use crate::Inner;

/// GETs one read runs at once.
pub(crate) const READ_PARALLEL_GETS: usize = 16;

/// Reads `len` bytes at `offset` of file `id` from its published slices.
pub(crate) async fn read_published<C: Sql + Sync>(
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
                if got.is_ok() {
                    inner.engines.store_answered();
                }
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
/// when it gets the file's publish lock, one object at a time, in the order sealed. The
/// open data's uploads start first, beside those started before, so the last objects of
/// a COMMIT upload together. Returns the file's row after the last commit, or `None`
/// when nothing was buffered (or the file went).
pub(crate) async fn publish(inner: &Arc<Inner>, file: i64) -> Result<Option<Inode>, Fail> {
    let lock = inner.pending.publish_lock(file);
    let _one_at_a_time = lock.lock().await;
    while start_upload(inner, file, None) {}
    publish_locked(inner, file, Commit::All).await
}

/// Makes room for a write of `len` bytes to `file`, whose open data was full: seals the
/// open data and starts its upload if the file and the head have room for one more
/// (the writer goes on at once); else, holding the file's publish lock, waits for the
/// first of the file's uploads in flight to end (back-pressure), commits the groups
/// stored by then in order, and starts the next upload; if that still leaves no room
/// (no upload of the file in flight: the head's uploads are other files', or its
/// groups wait for an older one), commits its oldest sealed object, waiting for its
/// upload. (Every writer that found it full comes here; sealing or publishing whatever
/// the others wrote meanwhile would make objects smaller than one object's worth, so
/// each checks again.)
pub(crate) async fn make_room(inner: &Arc<Inner>, file: i64, len: usize) -> Result<(), Fail> {
    if start_upload(inner, file, Some(len)) {
        return Ok(());
    }
    let lock = inner.pending.publish_lock(file);
    let _one_at_a_time = lock.lock().await;
    if inner.pending.fits(file, len) || start_upload(inner, file, Some(len)) {
        return Ok(());
    }
    let flying = inner.pending.uploads_in_flight(file);
    if !flying.is_empty() {
        futures::future::select_all(flying).await;
        publish_locked(inner, file, Commit::Stored).await?;
        if inner.pending.fits(file, len) || start_upload(inner, file, Some(len)) {
            return Ok(());
        }
    }
    publish_locked(inner, file, Commit::Oldest).await?;
    Ok(())
}

/// Which of a file's sealed groups [`publish_locked`] commits.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// Everything buffered when it began (COMMIT, FILE_SYNC, the timer).
    All,
    /// The oldest group, waiting for its upload (a writer that needs the room).
    Oldest,
    /// The oldest groups whose uploads have stored their objects, none that would wait.
    Stored,
}

/// Seals `file`'s oldest open object's worth and starts its upload in the background (see
/// [`Pending::seal_for_upload`] for when it does); true if it did. The upload is bounded
/// by [`OPERATION_TIMEOUT`] like a publish; a failure rests the file, and the group's
/// publish uploads it again.
///
/// [`Pending::seal_for_upload`]: crate::pending::Pending::seal_for_upload
fn start_upload(inner: &Arc<Inner>, file: i64, full: Option<usize>) -> bool {
    let task = Arc::clone(inner);
    let started = inner.pending.seal_for_upload(file, full, move |snap| {
        async move {
            let body = payload(&snap.extents);
            let done = tokio::time::timeout(OPERATION_TIMEOUT, upload(&task, body)).await;
            task.pending.upload_over(file);
            match done.unwrap_or(Err(Fail::Timeout)) {
                Ok(id) => Some((id, task.clock.monotonic())),
                Err(e) => {
                    // Its data stays buffered; an outage is said once (`failed`).
                    task.engines.failed(e);
                    task.pending.upload_failed(file, task.clock.monotonic());
                    None
                }
            }
        }
        .boxed()
        .shared()
    });
    let Some(upload) = started else {
        return false;
    };
    inner.engines.spawn(async move {
        upload.await;
    });
    true
}

/// Commits `file`'s sealed groups in order (sealing its open data one object at a time
/// once they are done), each after its object is stored: all that was buffered when it
/// began, only the oldest, or those stored already (see [`Commit`]). Holds the file's
/// publish lock. A file
/// whose last publish failed a moment ago is not tried again before its rest is over
/// ([`Pending::may_publish`]): `Fail::Resting`, which the client hears as `Jukebox`.
///
/// [`Pending::may_publish`]: crate::pending::Pending::may_publish
async fn publish_locked(inner: &Inner, file: i64, which: Commit) -> Result<Option<Inode>, Fail> {
    let Some(newest) = inner.pending.newest(file) else {
        return Ok(None);
    };
    let mut after = None;
    loop {
        if which == Commit::Stored && !inner.pending.oldest_stored(file) {
            break;
        }
        let Some(group) = inner.pending.oldest(file) else {
            break;
        };
        if !inner.pending.may_publish(file, inner.clock.monotonic()) {
            return Err(Fail::Resting);
        }
        let upto = group.snap.upto;
        after = match publish_one(inner, file, group).await {
            Ok(after) => after,
            Err(e) => {
                inner.pending.failed(file, inner.clock.monotonic());
                return Err(e);
            }
        };
        if after.is_none() || upto >= newest || which == Commit::Oldest {
            break;
        }
    }
    Ok(after)
}

/// The object holding `group`: the one its upload stored, if that upload succeeded
/// within [`UPLOAD_FRESH`] (an older one may be swept as an orphan before the rows
/// commit), else one uploaded now.
async fn stored(inner: &Inner, group: &Group) -> Result<i64, Fail> {
    if let Some(started) = group.upload.clone() {
        if let Some((id, at)) = started.await {
            if inner.clock.monotonic().saturating_sub(at) < UPLOAD_FRESH {
                return Ok(id);
            }
        }
    }
    upload(inner, payload(&group.snap.extents)).await
}

/// Commits one group's rows, after its object is stored (unless inline); `None` if the
/// file went.
///
/// A truncation on this head that committed since the group was sealed cut the file
/// ([`Pending::cut`], read once the row is locked, so after that truncation's commit):
/// bytes of the group at or past the cut are not committed, since they were written
/// before the truncation and it removed them. (The object keeps them, unnamed past the
/// rows' ends; one no row names at all is swept as an orphan.)
///
/// [`Pending::cut`]: crate::pending::Pending::cut
async fn publish_one(inner: &Inner, file: i64, group: Group) -> Result<Option<Inode>, Fail> {
    let snap = &group.snap;
    let inline = snap.inline();
    let object = if inline {
        None
    } else {
        Some(stored(inner, &group).await?)
    };
    let done = transaction!(inner.engines.pool, |tx| {
        let c = &tx;
        let locked = meta::lock(c, &[file]).await?;
        let cut = inner.pending.cut(file, snap.upto).unwrap_or(u64::MAX);
        // One row per extent (what a truncation since left of it), in one statement with
        // the inode's change, sent with the COMMIT.
        let (mut offsets, mut lengths, mut object_offsets, mut inline_data) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
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
                offsets.push(offset);
                lengths.push(length);
                object_offsets.push(object_offset);
                inline_data.push(inline.then(|| e.data.slice(0..kept).to_vec()));
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
        // At least the stamp this head's clients were told; 1 ns more if the row changed
        // since the head last laid the stamp over it (a change by another head that a
        // GETATTR racing this commit may be moving the stamp past: `Pending::observe`).
        let (stamp, seen) = inner.pending.publish_stamp(file, snap);
        let sql = format!(
            "WITH s AS (INSERT INTO slices (file, seq, offset_bytes, length_bytes, object, \
             object_offset, data) SELECT $1::bigint, nextval('granary_slice_seq'), x.o, x.l, $4::bigint, x.oo, x.d \
             FROM unnest($5::bigint[], $6::bigint[], $7::bigint[], $8::bytea[]) \
             WITH ORDINALITY AS x(o, l, oo, d, n) ORDER BY x.n) \
             UPDATE inodes SET size_bytes = GREATEST(size_bytes, $2), \
             mtime_ns = GREATEST($3, ctime_ns + 1) + (ctime_ns > $9)::int, \
             ctime_ns = GREATEST($3, ctime_ns + 1) + (ctime_ns > $9)::int, \
             version = version + 1 WHERE id = $1 RETURNING {}",
            meta::COLS
        );
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 9] = [
            &file,
            &end,
            &stamp,
            &object,
            &offsets,
            &lengths,
            &object_offsets,
            &inline_data,
            &seen,
        ];
        let rows = c.query_and_commit(&sql, &params).await?;
        let row = rows.first().ok_or(Fail::Fs(FsError::Stale))?;
        meta::inode(row)
    });
    match done {
        Ok(after) => {
            inner
                .pending
                .release(file, snap.upto, meta::ns(after.attr.ctime));
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
pub(crate) async fn upload(inner: &Inner, body: PutPayload) -> Result<i64, Fail> {
    debug_assert!(body.content_length() <= OBJECT_MAX_BYTES);
    let id = inner.engines.object_id().await?;
    let path = inner.engines.object_path(id);
    COUNTERS.put(body.content_length());
    inner.engines.store.put(&path, body).await?;
    inner.engines.store_answered();
    Ok(id)
}

/// The extents' bytes end to end, as one object holds them: their pieces, not a copy
/// (see `rope`).
fn payload(extents: &[crate::pending::Extent]) -> PutPayload {
    extents
        .iter()
        .flat_map(|e| e.data.parts().iter().cloned())
        .collect()
}
