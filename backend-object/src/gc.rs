//! Garbage collection of dead objects and compaction of files of many slices.
//!
//! **Dead objects.** An object becomes dead when the last `slices` row naming it goes: a
//! truncation, a removed file, a compaction, or never having had one (an *orphan*: its
//! head died between its upload and its commit). A trigger (schema version 2) records each
//! object a deleted row named in `dead_objects` with the database's time (`since`, the
//! latest time a row let go of it); the orphan sweep lists the store and records objects
//! no row names. A round deletes from the store the recorded objects that no row names
//! and whose `since` is older than the grace, then their records.
//!
//! **Why a read in flight on another head never finds its object gone.** A reader (a
//! READ on any head, a compaction) reads the rows naming an object, then fetches it, all
//! within one [`OPERATION_TIMEOUT`] (its future is dropped at the timeout, GETs with it).
//! The rows it read were still there when its statement began, so the transaction that
//! deleted them committed after that; it stamped `since` before its commit and committed
//! within one [`OPERATION_TIMEOUT`] of stamping. So the reader's last GET comes before
//! `since + 2 × OPERATION_TIMEOUT` ([`GC_MIN_GRACE`]), and the object stays at least
//! a grace past `since`. An orphan candidate is recorded when the listing sees it; a
//! publish that uploaded it and is still running commits its rows within one
//! [`OPERATION_TIMEOUT`] of its upload, so after the grace either a row names the object
//! (its record is dropped, the object kept) or none ever will. Every time is the
//! database's, so the heads' clocks do not matter; ids are never reused, so an object no
//! row names is never named again.
//!
//! **Compaction.** A file with at least `compact_slices` slices is read in one snapshot
//! (its `version` and its rows, REPEATABLE READ); its slices, in offset order, are cut
//! into groups spanning at most [`OBJECT_MAX_BYTES`]; each group of two or more becomes
//! one new object (or inline rows, within [`INLINE_MAX_BYTES`]) holding what a read
//! shows over the group's ranges now (past the size too: what a truncation's zero slice
//! hides there must stay hidden). One transaction then
//! locks the inode (the lock every change of its slices takes), checks that `version`
//! has not moved and the group's rows are all still there, deletes them and inserts the
//! new rows with new sequence numbers. The new rows are newer than every row left, and
//! hold exactly what a read showed over those bytes, so every read after the commit
//! shows the same bytes as before; a write that came meanwhile moved `version`, and the
//! compaction is dropped (its objects are recorded dead at once). The old objects are
//! dead from the commit on and kept for the grace, so reads that found the old rows
//! finish. `version` is left alone: the data did not change.
//!
//! One round at a time across all heads: the round holds a transaction-scoped advisory
//! lock on a connection of its own, freed with the transaction however the round ends.

use futures::StreamExt;
use object_store::path::Path;
use tokio_postgres::IsolationLevel;
use vfs::FsError;

use crate::config::GcConfig;
use crate::data;
use crate::engine::{transaction, Fail, Sql};
#[cfg(doc)]
use crate::limits::GC_MIN_GRACE;
use crate::limits::{
    COMPACT_FILES_PER_ROUND, GC_DELETES_PER_ROUND, GC_LIST_PER_ROUND, INLINE_MAX_BYTES,
    OBJECT_MAX_BYTES, OPERATION_TIMEOUT,
};
use crate::meta;
use crate::Inner;

/// Key of the advisory lock a round holds ("granarGC").
const GC_LOCK: i64 = 0x6772_616e_6172_4743;

/// Deletes one round sends the store at once.
const PARALLEL_DELETES: usize = 16;

/// What one round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GcReport {
    /// Another head's round was running: this one did nothing.
    pub skipped: bool,
    /// Files compacted, and their slices before and after.
    pub compacted_files: u64,
    pub slices_before: u64,
    pub slices_after: u64,
    /// Compactions dropped because the file changed meanwhile.
    pub compactions_dropped: u64,
    /// Objects the listing found that no row names (orphans, or uploads whose commit was
    /// still coming), recorded for deletion after the grace.
    pub unnamed_found: u64,
    /// Dead objects deleted from the store.
    pub objects_deleted: u64,
}

/// One round: compaction, the orphan sweep, then deletion of dead objects past the grace.
pub(crate) async fn round(inner: &Inner, gc: &GcConfig) -> Result<GcReport, Fail> {
    let mut report = GcReport::default();
    let mut client = inner.engines.pool.get().await?;
    let lock = client.transaction().await?;
    let mine: bool = lock
        .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&GC_LOCK])
        .await?
        .get(0);
    if !mine {
        report.skipped = true;
        return Ok(report);
    }
    compact_some(inner, gc, &mut report).await?;
    find_unnamed(inner, &mut report).await?;
    delete_dead(inner, gc, &mut report).await?;
    lock.commit().await?;
    Ok(report)
}

/// Compacts the files with the most slices, at least `compact_slices` each.
async fn compact_some(inner: &Inner, gc: &GcConfig, report: &mut GcReport) -> Result<(), Fail> {
    let files: Vec<i64> = inner
        .engines
        .pool
        .get()
        .await?
        .query(
            "SELECT file FROM slices GROUP BY file HAVING count(*) >= $1 \
             ORDER BY count(*) DESC LIMIT $2",
            &[
                &i64::from(gc.compact_slices.max(2)),
                &COMPACT_FILES_PER_ROUND,
            ],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for file in files {
        // Bounded like any reader, which the grace's argument counts on.
        match tokio::time::timeout(OPERATION_TIMEOUT, compact_file(inner, file)).await {
            Ok(Ok(Compacted::Done { before, after })) => {
                report.compacted_files += 1;
                report.slices_before += before;
                report.slices_after += after;
            }
            Ok(Ok(Compacted::Dropped)) => report.compactions_dropped += 1,
            Ok(Ok(Compacted::Nothing)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(Fail::Timeout),
        }
    }
    Ok(())
}

/// One slice as compaction sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SliceAt {
    pub seq: i64,
    pub offset: i64,
    pub length: i64,
}

impl SliceAt {
    fn end(&self) -> i64 {
        self.offset + self.length
    }
}

/// Slices replaced by one new object: their sequence numbers, and the ranges the new rows
/// cover (the union of theirs), in offset order. Not clipped to the file's size: bytes
/// past it are what a truncation's zero slice hides, and a new row must go on hiding
/// them from an older slice that stays (a later extension reads zeros there).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Group {
    pub seqs: Vec<i64>,
    pub ranges: Vec<(i64, i64)>,
}

impl Group {
    fn span(&self) -> Option<(i64, i64)> {
        Some((self.ranges.first()?.0, self.ranges.last()?.1))
    }
}

/// Cuts `slices` (in offset order) into runs spanning at most `max` bytes and keeps runs
/// of two or more. Any choice would be correct (the new rows hold what a read shows);
/// runs of neighbours give few, full objects.
pub(crate) fn plan(slices: &[SliceAt], max: i64) -> Vec<Group> {
    let mut groups = Vec::new();
    let mut i = 0;
    while i < slices.len() {
        let lo = slices[i].offset;
        let mut hi = slices[i].end();
        let mut j = i + 1;
        while j < slices.len() && slices[j].end().max(hi) - lo <= max {
            hi = hi.max(slices[j].end());
            j += 1;
        }
        if j - i >= 2 {
            let run = &slices[i..j];
            let mut ranges: Vec<(i64, i64)> = Vec::new();
            for s in run {
                let (from, to) = (s.offset, s.end());
                match ranges.last_mut() {
                    Some(last) if from <= last.1 => last.1 = last.1.max(to),
                    _ => ranges.push((from, to)),
                }
            }
            groups.push(Group {
                seqs: run.iter().map(|s| s.seq).collect(),
                ranges,
            });
        }
        i = j;
    }
    groups
}

enum Compacted {
    Done {
        before: u64,
        after: u64,
    },
    /// The file changed (or went) between the snapshot and the replacement.
    Dropped,
    /// No group worth compacting.
    Nothing,
}

/// A group's new rows: inline bytes per range, or one object holding the ranges in order.
struct Built {
    group: Group,
    object: Option<i64>,
    bytes: Vec<u8>,
}

async fn compact_file(inner: &Inner, file: i64) -> Result<Compacted, Fail> {
    let mut client = inner.engines.pool.get().await?;
    let snap = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let Some(row) = snap
        .query_opt(
            "SELECT version FROM inodes WHERE id = $1 AND kind = $2",
            &[&file, &meta::KIND_FILE],
        )
        .await?
    else {
        return Ok(Compacted::Nothing);
    };
    let version: i64 = row.get(0);
    let slices: Vec<SliceAt> = snap
        .query(
            "SELECT seq, offset_bytes, length_bytes FROM slices WHERE file = $1 \
             ORDER BY offset_bytes, seq",
            &[&file],
        )
        .await?
        .iter()
        .map(|r| SliceAt {
            seq: r.get(0),
            offset: r.get(1),
            length: r.get(2),
        })
        .collect();
    let before = slices.len() as u64;
    let max = i64::try_from(OBJECT_MAX_BYTES).unwrap_or(i64::MAX);
    let groups = plan(&slices, max);
    if groups.is_empty() {
        return Ok(Compacted::Nothing);
    }
    let mut built = Vec::with_capacity(groups.len());
    for group in groups {
        let mut bytes = Vec::new();
        if let Some((lo, hi)) = group.span() {
            let lo_u = u64::try_from(lo).unwrap_or(0);
            let whole = usize::try_from(hi - lo).unwrap_or(0);
            let read = data::read_published(inner, &snap, file, lo_u, whole).await?;
            for &(from, to) in &group.ranges {
                let at = usize::try_from(from - lo).unwrap_or(0);
                let n = usize::try_from(to - from).unwrap_or(0);
                bytes.extend_from_slice(&read[at..at + n]);
            }
        }
        built.push(Built {
            group,
            object: None,
            bytes,
        });
    }
    snap.commit().await?;
    drop(client);
    for b in &mut built {
        let inline = b
            .group
            .span()
            .is_none_or(|(_, hi)| hi <= INLINE_MAX_BYTES as i64);
        if !inline {
            b.object = Some(data::upload(inner, std::mem::take(&mut b.bytes)).await?);
        }
    }
    let replaced = transaction!(inner.engines.pool, |tx| {
        replace(&tx, file, version, &built).await
    });
    let uploaded: Vec<i64> = built.iter().filter_map(|b| b.object).collect();
    match replaced {
        Ok(Some(after)) => Ok(Compacted::Done {
            before,
            after: u64::try_from(after).unwrap_or(0),
        }),
        Ok(None) | Err(Fail::Fs(FsError::Stale)) => {
            record_unnamed(inner, &uploaded).await?;
            Ok(Compacted::Dropped)
        }
        Err(e) => {
            // Whether the commit happened is unknown: leave the objects to the sweep.
            Err(e)
        }
    }
}

/// The replacement transaction: `None` (nothing changed) if the file moved on since the
/// snapshot; else the file's slice count after.
async fn replace(
    tx: &deadpool_postgres::Transaction<'_>,
    file: i64,
    version: i64,
    built: &[Built],
) -> Result<Option<i64>, Fail> {
    meta::lock(tx, &[file]).await?;
    let now: i64 = tx
        .query_one("SELECT version FROM inodes WHERE id = $1", &[&file])
        .await?
        .get(0);
    let seqs: Vec<i64> = built
        .iter()
        .flat_map(|b| b.group.seqs.iter().copied())
        .collect();
    let still: i64 = tx
        .query_one(
            "SELECT count(*) FROM slices WHERE file = $1 AND seq = ANY($2)",
            &[&file, &seqs],
        )
        .await?
        .get(0);
    if now != version || usize::try_from(still).ok() != Some(seqs.len()) {
        return Ok(None);
    }
    tx.execute(
        "DELETE FROM slices WHERE file = $1 AND seq = ANY($2)",
        &[&file, &seqs],
    )
    .await?;
    for b in built {
        let mut object_offset = 0i64;
        let mut inline_at = 0usize;
        for &(from, to) in &b.group.ranges {
            let length = to - from;
            let data = match b.object {
                Some(_) => None,
                None => {
                    let n = usize::try_from(length).unwrap_or(0);
                    let piece = &b.bytes[inline_at..inline_at + n];
                    inline_at += n;
                    Some(piece)
                }
            };
            tx.execute(
                "INSERT INTO slices (file, seq, offset_bytes, length_bytes, object, \
                 object_offset, data) VALUES ($1, nextval('granary_slice_seq'), $2, $3, $4, $5, $6)",
                &[&file, &from, &length, &b.object, &object_offset, &data],
            )
            .await?;
            object_offset += length;
        }
    }
    let after: i64 = tx
        .query_one("SELECT count(*) FROM slices WHERE file = $1", &[&file])
        .await?
        .get(0);
    Ok(Some(after))
}

/// Records as dead from now (the database's clock) those of `objects` no row names and
/// no record holds yet: a dropped compaction's new objects, or keys the orphan sweep
/// listed. Returns how many it recorded.
async fn record_unnamed(inner: &Inner, objects: &[i64]) -> Result<u64, Fail> {
    if objects.is_empty() {
        return Ok(0);
    }
    let recorded = inner
        .engines
        .pool
        .get()
        .await?
        .execute(
            "INSERT INTO dead_objects (object, since) SELECT o, clock_timestamp() \
             FROM unnest($1::bigint[]) o \
             WHERE NOT EXISTS (SELECT 1 FROM slices s WHERE s.object = o) \
             ON CONFLICT (object) DO NOTHING",
            &[&objects],
        )
        .await?;
    Ok(recorded)
}

/// The directory of this file system's objects in the bucket.
fn objects_dir(inner: &Inner) -> Path {
    Path::from(format!("{}objects", inner.engines.prefix))
}

/// The object id of a key under [`objects_dir`] (16 hex digits), if it is one.
fn object_id(location: &Path) -> Option<i64> {
    let name = location.filename()?;
    if name.len() != 16 {
        return None;
    }
    i64::from_str_radix(name, 16).ok()
}

/// Lists up to [`GC_LIST_PER_ROUND`] keys from where the last round stopped and records
/// those no row names (and no record holds yet) as dead from now.
async fn find_unnamed(inner: &Inner, report: &mut GcReport) -> Result<(), Fail> {
    let dir = objects_dir(inner);
    let cursor = inner.gc_cursor();
    let store = &inner.engines.store;
    let mut listing = match &cursor {
        Some(after) => store.list_with_offset(Some(&dir), after),
        None => store.list(Some(&dir)),
    }
    .take(GC_LIST_PER_ROUND);
    let mut ids = Vec::new();
    let mut seen = 0usize;
    let mut last = None;
    while let Some(meta) = listing.next().await {
        let meta = meta?;
        seen += 1;
        ids.extend(object_id(&meta.location));
        last = Some(meta.location);
    }
    inner.set_gc_cursor(if seen < GC_LIST_PER_ROUND { None } else { last });
    report.unnamed_found += record_unnamed(inner, &ids).await?;
    Ok(())
}

/// Deletes the dead objects past the grace that no row names, then their records; drops
/// the records of objects a row names after all (an upload whose commit came late).
async fn delete_dead(inner: &Inner, gc: &GcConfig, report: &mut GcReport) -> Result<(), Fail> {
    let c = inner.engines.pool.get().await?;
    let grace = gc.grace.as_secs_f64();
    c.execute(
        "DELETE FROM dead_objects d WHERE since < now() - $1::float8 * interval '1 second' \
         AND EXISTS (SELECT 1 FROM slices s WHERE s.object = d.object)",
        &[&grace],
    )
    .await?;
    let dead: Vec<i64> = c
        .query(
            "SELECT object FROM dead_objects d WHERE since < now() - $1::float8 * interval '1 second' \
             AND NOT EXISTS (SELECT 1 FROM slices s WHERE s.object = d.object) \
             ORDER BY since LIMIT $2",
            &[&grace, &GC_DELETES_PER_ROUND],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if dead.is_empty() {
        return Ok(());
    }
    let store = std::sync::Arc::clone(&inner.engines.store);
    let keys: Vec<(i64, Path)> = dead
        .iter()
        .map(|&id| (id, inner.engines.object_path(id)))
        .collect();
    let results: Vec<(i64, Result<(), object_store::Error>)> = futures::stream::iter(keys)
        .map(move |(id, path)| {
            let store = std::sync::Arc::clone(&store);
            async move { (id, store.delete(&path).await) }
        })
        .buffer_unordered(PARALLEL_DELETES)
        .collect()
        .await;
    let mut gone = Vec::with_capacity(results.len());
    for (id, r) in results {
        match r {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => gone.push(id),
            Err(e) => return Err(Fail::Store(e)),
        }
    }
    c.execute("DELETE FROM dead_objects WHERE object = ANY($1)", &[&gone])
        .await?;
    report.objects_deleted += gone.len() as u64;
    Ok(())
}

/// What the store and the rows say of each other (tests and operators).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Audit {
    /// Objects rows name that the store lacks: damage (must always be empty).
    pub missing: Vec<i64>,
    /// Objects in the store no row names (dead ones within their grace, orphans not yet
    /// swept, or uploads whose commit is coming).
    pub unnamed: Vec<i64>,
    /// Objects the rows name.
    pub named: u64,
}

/// Lists the whole store prefix and every object the rows name.
pub(crate) async fn audit(inner: &Inner) -> Result<Audit, Fail> {
    let named: Vec<i64> = inner
        .engines
        .pool
        .get()
        .await?
        .query(
            "SELECT DISTINCT object FROM slices WHERE object IS NOT NULL ORDER BY object",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let dir = objects_dir(inner);
    let mut listing = inner.engines.store.list(Some(&dir));
    let mut stored = std::collections::BTreeSet::new();
    while let Some(meta) = listing.next().await {
        stored.extend(object_id(&meta?.location));
    }
    let named_set: std::collections::BTreeSet<i64> = named.iter().copied().collect();
    Ok(Audit {
        missing: named_set.difference(&stored).copied().collect(),
        unnamed: stored.difference(&named_set).copied().collect(),
        named: named.len() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(seq: i64, offset: i64, length: i64) -> SliceAt {
        SliceAt {
            seq,
            offset,
            length,
        }
    }

    #[test]
    fn plan_groups_neighbours_within_the_object_bound() {
        // Four 4 KiB writes side by side, one far away, one alone too big to group.
        let slices = [
            s(1, 0, 4096),
            s(5, 4096, 4096),
            s(2, 8192, 4096),
            s(9, 100_000, 10),
            s(3, 1 << 20, 1 << 20),
        ];
        let groups = plan(&slices, 1 << 20);
        assert_eq!(
            groups,
            [Group {
                seqs: vec![1, 5, 2, 9],
                ranges: vec![(0, 12288), (100_000, 100_010)],
            }]
        );
    }

    #[test]
    fn plan_merges_overlaps_and_keeps_what_lies_past_the_size() {
        let slices = [s(1, 0, 100), s(2, 50, 100), s(3, 400, 100)];
        let groups = plan(&slices, 1 << 20);
        assert_eq!(groups[0].ranges, [(0, 150), (400, 500)]);
    }

    #[test]
    fn a_lone_slice_or_a_run_wider_than_the_bound_is_left() {
        assert!(plan(&[s(1, 0, 10)], 64).is_empty());
        assert!(plan(&[s(1, 0, 60), s(2, 60, 60)], 64).is_empty());
    }
}
