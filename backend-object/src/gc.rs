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
//! **Compaction.** A round finds files of at least `compact_slices` slices, most first,
//! through an index of `inodes.slice_count` (kept by triggers on `slices`, schema version
//! 3), a page at a time from where the last round stopped: no scan of `slices`. Each
//! file is compacted in *passes* of one new object each, so what a pass holds is bounded
//! ([`COMPACT_PASS_MAX_BYTES`]) whatever the file's size or slice count. A pass reads, in
//! one REPEATABLE READ snapshot, the file's `version` and a page of its slices in offset
//! order from where the last pass ended (keyset, `slices_by_offset`); the first run of
//! them spanning at most [`OBJECT_MAX_BYTES`] (two or more slices) becomes one new object
//! (or inline rows, within [`INLINE_MAX_BYTES`]) holding what a read shows over the run's
//! ranges now (past the size too: what a truncation's zero slice hides there must stay
//! hidden): the rows over the run are laid newest first, a page at a time, each byte
//! fetched at most once, in batches of at most [`COMPACT_FETCH_BYTES`]. One transaction
//! then locks the inode (the lock every change of its slices takes), checks that
//! `version` has not moved and the run's rows are all still there, deletes them and
//! inserts the new rows with new sequence numbers. The new rows are newer than every row
//! left, and hold exactly what a read showed over those bytes, so every read after the
//! commit shows the same bytes as before; a write that came meanwhile moved `version`,
//! and the pass is dropped (its object is recorded dead at once) and the file left for a
//! later round. The old objects are dead from the commit on and kept for the grace, so
//! reads that found the old rows finish: each pass is a reader bounded by
//! [`OPERATION_TIMEOUT`] like a READ. The replacement moves `version` (the bytes did not
//! change, but the rows did): every head's cached slice map of the file is of the old
//! rows, and its next READ reads the new ones.
//!
//! One round at a time across all heads: the round holds a transaction-scoped advisory
//! lock on a connection of its own, freed with the transaction however the round ends.

use futures::StreamExt;
use object_store::path::Path;
use tokio_postgres::IsolationLevel;
use vfs::FsError;

use crate::config::GcConfig;
use crate::data;
use crate::engine::{transaction, Fail, Sql, COUNTERS};
use crate::limits::{
    COMPACT_FETCH_BYTES, COMPACT_FILES_PER_ROUND, COMPACT_PAGE_ROWS, COMPACT_PASSES_PER_ROUND,
    COMPACT_PLAN_ROWS, COMPACT_ROUND_TIME, GC_DELETES_PER_ROUND, GC_LIST_PER_ROUND,
    INLINE_MAX_BYTES, OBJECT_MAX_BYTES, OPERATION_TIMEOUT,
};
#[cfg(doc)]
use crate::limits::{COMPACT_PASS_MAX_BYTES, GC_MIN_GRACE};
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
    /// Compaction passes (one new object each) that committed.
    pub compaction_passes: u64,
    /// Bytes the committed passes wrote (new objects and inline rows).
    pub compacted_bytes: u64,
    /// The most bytes one compaction pass held at once (never above
    /// [`COMPACT_PASS_MAX_BYTES`]).
    pub largest_pass_bytes: u64,
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

/// What a round may still spend on compaction.
struct Budget {
    passes_left: u64,
    until: tokio::time::Instant,
}

impl Budget {
    fn spent(&self) -> bool {
        self.passes_left == 0 || tokio::time::Instant::now() >= self.until
    }
}

/// Compacts files of at least `compact_slices` slices, most first, a page of candidates
/// from where the last round stopped (the `inodes_by_slice_count` index: no scan of
/// `slices`), pass by pass, within the round's budget ([`COMPACT_FILES_PER_ROUND`],
/// [`COMPACT_PASSES_PER_ROUND`], [`COMPACT_ROUND_TIME`]).
async fn compact_some(inner: &Inner, gc: &GcConfig, report: &mut GcReport) -> Result<(), Fail> {
    let least = i64::from(gc.compact_slices.max(2));
    let (count, id) = inner.compact_cursor().unwrap_or((i64::MAX, i64::MAX));
    // `slice_count >= 2` (a constant) lets the planner use the partial index for any
    // `$1`, generic plan or not.
    let files: Vec<(i64, i64)> = inner
        .engines
        .pool
        .get()
        .await?
        .query(
            "SELECT id, slice_count FROM inodes WHERE slice_count >= 2 AND slice_count >= $1 \
             AND (slice_count, id) < ($2, $3) ORDER BY slice_count DESC, id DESC LIMIT $4",
            &[&least, &count, &id, &COMPACT_FILES_PER_ROUND],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let full = files.len() as i64 == COMPACT_FILES_PER_ROUND;
    inner.set_compact_cursor(if full {
        files.last().map(|&(id, count)| (count, id))
    } else {
        None
    });
    let mut budget = Budget {
        passes_left: COMPACT_PASSES_PER_ROUND,
        until: tokio::time::Instant::now() + COMPACT_ROUND_TIME,
    };
    for (file, _) in files {
        if budget.spent() {
            break;
        }
        compact_file(inner, file, &mut budget, report).await?;
    }
    Ok(())
}

/// A position in a file's slices in offset order: (`offset_bytes`, `seq`).
type Key = (i64, i64);

/// Compacts `file` pass by pass, each pass one new object (see [`pass`]), going on in
/// offset order from where the last pass ended, until no run is left to merge, the file
/// changes under a pass, or the round's budget is spent.
async fn compact_file(
    inner: &Inner,
    file: i64,
    budget: &mut Budget,
    report: &mut GcReport,
) -> Result<(), Fail> {
    let mut after: Key = (i64::MIN, i64::MIN);
    // The file's slice count before its first pass and after its last.
    let mut counts: Option<(u64, u64)> = None;
    while !budget.spent() {
        // Bounded like any reader, which the grace's argument counts on.
        let done = tokio::time::timeout(OPERATION_TIMEOUT, pass(inner, file, after))
            .await
            .map_err(|_| Fail::Timeout)??;
        match done {
            Pass::End => break,
            Pass::Skip { next } => after = next,
            Pass::Dropped => {
                report.compactions_dropped += 1;
                break;
            }
            Pass::Done {
                before,
                left,
                held,
                written,
                next,
            } => {
                report.compacted_bytes += written;
                budget.passes_left = budget.passes_left.saturating_sub(1);
                report.compaction_passes += 1;
                report.largest_pass_bytes = report.largest_pass_bytes.max(held as u64);
                counts = Some((counts.map_or(before, |(first, _)| first), left));
                after = next;
            }
        }
    }
    if let Some((before, after)) = counts {
        report.compacted_files += 1;
        report.slices_before += before;
        report.slices_after += after;
    }
    Ok(())
}

/// What one pass did.
enum Pass {
    /// Merged one run of slices into one new object (or inline rows): the file's slice
    /// count before and after, the most bytes the pass held at once, and where the next
    /// pass goes on from.
    Done {
        before: u64,
        left: u64,
        held: usize,
        written: u64,
        next: Key,
    },
    /// A page of slices with no run to merge: the next pass reads from `next`.
    Skip { next: Key },
    /// The file changed (or went) between the snapshot and the replacement.
    Dropped,
    /// Nothing left to merge past the position (or the file is gone).
    End,
}

/// One slice as compaction plans it.
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

    fn key(&self) -> Key {
        (self.offset, self.seq)
    }
}

/// Slices replaced by one new object: their sequence numbers, the ranges the new rows
/// cover (the union of theirs), in offset order, and the last slice's position in
/// offset order. Not clipped to the file's size: bytes past it are what a truncation's
/// zero slice hides, and a new row must go on hiding them from an older slice that
/// stays (a later extension reads zeros there).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Group {
    pub seqs: Vec<i64>,
    pub ranges: Vec<(i64, i64)>,
    pub last: Key,
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
                last: slices[j - 1].key(),
            });
        }
        i = j;
    }
    groups
}

/// What a pass does with a page of slices in offset order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Choice {
    /// Merges this run.
    Merge(Group),
    /// No run to merge before the page's last slice: the next page starts after this.
    Skip(Key),
    /// Nothing to merge, and the file has no slices past the page.
    End,
}

/// The run a pass merges from `page` ([`plan`]'s first, spanning at most one object);
/// `full`: more slices may follow the page. A run the page's end may have cut (it holds
/// the page's last slice) waits for the next page, which starts at it, unless it is the
/// page's first run.
pub(crate) fn choose(page: &[SliceAt], full: bool) -> Choice {
    let max = i64::try_from(OBJECT_MAX_BYTES).unwrap_or(i64::MAX);
    let last = page.last().map(SliceAt::key);
    let Some(group) = plan(page, max).into_iter().next() else {
        // The last slice may begin a run with the next page's first.
        return match page.len().checked_sub(2) {
            Some(i) if full => Choice::Skip(page[i].key()),
            _ => Choice::End,
        };
    };
    let starts = page.iter().position(|s| Some(&s.seq) == group.seqs.first());
    match starts {
        Some(i) if i > 0 && full && Some(group.last) == last => Choice::Skip(page[i - 1].key()),
        _ => Choice::Merge(group),
    }
}

/// One pass over `file`: in one REPEATABLE READ snapshot, its `version` and a page of
/// [`COMPACT_PLAN_ROWS`] slices in offset order past `after`; the first run of them
/// worth merging ([`plan`]) becomes one new object (inline rows if it ends within
/// [`INLINE_MAX_BYTES`]) holding what a READ shows over the run's ranges ([`build`]).
/// Then one transaction replaces the run's rows ([`replace`]) if the file has not moved
/// meanwhile. At most [`COMPACT_PASS_MAX_BYTES`] held at once, whatever the file's size
/// or slice count.
async fn pass(inner: &Inner, file: i64, after: Key) -> Result<Pass, Fail> {
    let mut client = inner.engines.pool.get().await?;
    let snap = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let Some(row) = snap
        .query_opt(
            "SELECT version, slice_count FROM inodes WHERE id = $1 AND kind = $2",
            &[&file, &meta::KIND_FILE],
        )
        .await?
    else {
        return Ok(Pass::End);
    };
    let version: i64 = row.get(0);
    let before = u64::try_from(row.get::<_, i64>(1)).unwrap_or(0);
    let page: Vec<SliceAt> = snap
        .query(
            "SELECT seq, offset_bytes, length_bytes FROM slices WHERE file = $1 \
             AND (offset_bytes, seq) > ($2, $3) ORDER BY offset_bytes, seq LIMIT $4",
            &[&file, &after.0, &after.1, &COMPACT_PLAN_ROWS],
        )
        .await?
        .iter()
        .map(|r| SliceAt {
            seq: r.get(0),
            offset: r.get(1),
            length: r.get(2),
        })
        .collect();
    let full = page.len() as i64 == COMPACT_PLAN_ROWS;
    let group = match choose(&page, full) {
        Choice::Merge(group) => group,
        Choice::Skip(next) => {
            snap.commit().await?;
            return Ok(Pass::Skip { next });
        }
        Choice::End => {
            snap.commit().await?;
            return Ok(Pass::End);
        }
    };
    let (bytes, held) = build(inner, &snap, file, &group).await?;
    let written = bytes.len() as u64;
    snap.commit().await?;
    drop(client);
    let inline = group
        .span()
        .is_none_or(|(_, hi)| hi <= INLINE_MAX_BYTES as i64);
    // The upload takes the bytes: nothing is held twice.
    let (object, bytes) = if inline {
        (None, bytes)
    } else {
        (Some(data::upload(inner, bytes.into()).await?), Vec::new())
    };
    let built = Built {
        group,
        object,
        bytes,
    };
    let replaced = transaction!(inner.engines.pool, |tx| {
        replace(&tx, file, version, &built).await
    });
    match replaced {
        Ok(Some(left)) => Ok(Pass::Done {
            before,
            left: u64::try_from(left).unwrap_or(0),
            held,
            written,
            next: built.group.last,
        }),
        Ok(None) | Err(Fail::Fs(FsError::Stale)) => {
            record_unnamed(inner, &built.object.into_iter().collect::<Vec<_>>()).await?;
            Ok(Pass::Dropped)
        }
        // Whether the commit happened is unknown: leave the object to the sweep.
        Err(e) => Err(e),
    }
}

/// A run's new rows: one object holding its ranges end to end, or inline bytes.
struct Built {
    group: Group,
    object: Option<i64>,
    /// The ranges' bytes end to end, when inline.
    bytes: Vec<u8>,
}

/// The parts of `uncovered` (disjoint ranges) within `[from, to)`, taken out of it.
fn take_uncovered(uncovered: &mut Vec<(i64, i64)>, from: i64, to: i64) -> Vec<(i64, i64)> {
    let mut taken = Vec::new();
    let mut left = Vec::with_capacity(uncovered.len() + 1);
    for &(a, b) in uncovered.iter() {
        let (x, y) = (a.max(from), b.min(to));
        if x >= y {
            left.push((a, b));
            continue;
        }
        taken.push((x, y));
        if a < x {
            left.push((a, x));
        }
        if y < b {
            left.push((y, b));
        }
    }
    *uncovered = left;
    taken
}

/// What a READ shows over `group`'s ranges, end to end, read in the pass's snapshot `c`,
/// and the most bytes held at once while reading it. The rows overlapping the run's
/// span are read newest first, a page of [`COMPACT_PAGE_ROWS`] at a time, and each lays
/// only the bytes no newer row covered, until every byte is covered (bytes no row covers
/// read as zeros, as in a READ); so each byte is fetched at most once, and the object
/// ranges to fetch go out in batches of at most [`COMPACT_FETCH_BYTES`].
async fn build<C: Sql + Sync>(
    inner: &Inner,
    c: &C,
    file: i64,
    group: &Group,
) -> Result<(Vec<u8>, usize), Fail> {
    let Some((lo, hi)) = group.span() else {
        return Ok((Vec::new(), 0));
    };
    // Where each range starts in the new object.
    let mut bases = Vec::with_capacity(group.ranges.len());
    let mut total = 0usize;
    for &(from, to) in &group.ranges {
        bases.push((from, to, total));
        total += usize::try_from(to - from).unwrap_or(0);
    }
    let at = |pos: i64| {
        bases
            .iter()
            .find(|&&(from, to, _)| from <= pos && pos < to)
            .map_or(0, |&(from, _, base)| {
                base + usize::try_from(pos - from).unwrap_or(0)
            })
    };
    let mut out = vec![0u8; total];
    let mut held = total;
    let mut uncovered = group.ranges.clone();
    let mut below = i64::MAX;
    while !uncovered.is_empty() {
        let rows = c
            .query(
                "SELECT seq, offset_bytes, length_bytes, object, object_offset, data \
                 FROM slices WHERE file = $1 AND seq < $2 AND offset_bytes < $4 \
                 AND offset_bytes + length_bytes > $3 ORDER BY seq DESC LIMIT $5",
                &[&file, &below, &lo, &hi, &COMPACT_PAGE_ROWS],
            )
            .await?;
        let inline_bytes: usize = rows
            .iter()
            .map(|r| r.get::<_, Option<&[u8]>>(5).map_or(0, <[u8]>::len))
            .sum();
        // (where in `out`, object, object range), each at most COMPACT_FETCH_BYTES.
        let mut fetches: Vec<(usize, i64, std::ops::Range<u64>)> = Vec::new();
        for row in &rows {
            below = row.get(0);
            let s_off: i64 = row.get(1);
            let s_len: i64 = row.get(2);
            let object: Option<i64> = row.get(3);
            let o_off: i64 = row.get(4);
            let data: Option<&[u8]> = row.get(5);
            for (from, to) in take_uncovered(&mut uncovered, s_off, s_off + s_len) {
                let dst = at(from);
                let skip = usize::try_from(from - s_off).unwrap_or(0);
                let n = usize::try_from(to - from).unwrap_or(0);
                match (object, data) {
                    (Some(obj), _) => {
                        let first = u64::try_from(o_off).unwrap_or(0) + skip as u64;
                        let mut done = 0;
                        while done < n {
                            let k = (n - done).min(COMPACT_FETCH_BYTES);
                            let r = first + done as u64..first + (done + k) as u64;
                            fetches.push((dst + done, obj, r));
                            done += k;
                        }
                    }
                    (None, Some(d)) => {
                        let piece = d.get(skip.min(d.len())..(skip + n).min(d.len()));
                        let piece = piece.unwrap_or_default();
                        out[dst..dst + piece.len()].copy_from_slice(piece);
                    }
                    // A truncation's mask: zeros, as `out` holds already.
                    (None, None) => {}
                }
            }
            if uncovered.is_empty() {
                break;
            }
        }
        let mut batch = Vec::new();
        let mut batch_bytes = 0usize;
        let mut fetches = fetches.into_iter().peekable();
        while let Some(f) = fetches.next() {
            batch_bytes += usize::try_from(f.2.end - f.2.start).unwrap_or(0);
            batch.push(f);
            let room = fetches.peek().is_some_and(|next| {
                batch_bytes + usize::try_from(next.2.end - next.2.start).unwrap_or(0)
                    <= COMPACT_FETCH_BYTES
            });
            if !room {
                held = held.max(total + inline_bytes + batch_bytes);
                fetch_into(inner, std::mem::take(&mut batch), &mut out).await?;
                batch_bytes = 0;
            }
        }
        held = held.max(total + inline_bytes);
        if (rows.len() as i64) < COMPACT_PAGE_ROWS {
            break;
        }
    }
    Ok((out, held))
}

/// Fetches each (where in `out`, object, range) with [`data::READ_PARALLEL_GETS`] GETs in
/// flight and copies the bytes into `out`.
async fn fetch_into(
    inner: &Inner,
    batch: Vec<(usize, i64, std::ops::Range<u64>)>,
    out: &mut [u8],
) -> Result<(), Fail> {
    let store = &inner.engines.store;
    let mut got = futures::stream::iter(batch)
        .map(|(dst, obj, range)| {
            let path = inner.engines.object_path(obj);
            async move {
                let got = store.get_range(&path, range).await;
                COUNTERS.get(got.as_ref().map_or(0, bytes::Bytes::len));
                (dst, got)
            }
        })
        .buffer_unordered(data::READ_PARALLEL_GETS);
    while let Some((dst, bytes)) = got.next().await {
        let bytes = bytes?;
        inner.engines.store_answered();
        let n = bytes.len().min(out.len().saturating_sub(dst));
        out[dst..dst + n].copy_from_slice(&bytes[..n]);
    }
    Ok(())
}

/// The replacement transaction: `None` (nothing changed) if the file moved on since the
/// snapshot; else the file's slice count after.
async fn replace(
    tx: &crate::engine::Tx,
    file: i64,
    version: i64,
    built: &Built,
) -> Result<Option<i64>, Fail> {
    meta::lock(tx, &[file]).await?;
    let now: i64 = tx
        .query_one("SELECT version FROM inodes WHERE id = $1", &[&file])
        .await?
        .get(0);
    let seqs = &built.group.seqs;
    let still: i64 = tx
        .query_one(
            "SELECT count(*) FROM slices WHERE file = $1 AND seq = ANY($2)",
            &[&file, seqs],
        )
        .await?
        .get(0);
    if now != version || usize::try_from(still).ok() != Some(seqs.len()) {
        return Ok(None);
    }
    tx.execute(
        "DELETE FROM slices WHERE file = $1 AND seq = ANY($2)",
        &[&file, seqs],
    )
    .await?;
    let mut object_offset = 0i64;
    let mut inline_at = 0usize;
    for &(from, to) in &built.group.ranges {
        let length = to - from;
        let data = match built.object {
            Some(_) => None,
            None => {
                let n = usize::try_from(length).unwrap_or(0);
                let piece = built.bytes.get(inline_at..inline_at + n);
                inline_at += n;
                Some(piece.ok_or(Fail::Fs(FsError::ServerFault))?)
            }
        };
        tx.execute(
            "INSERT INTO slices (file, seq, offset_bytes, length_bytes, object, \
             object_offset, data) VALUES ($1, nextval('granary_slice_seq'), $2, $3, $4, $5, $6)",
            &[&file, &from, &length, &built.object, &object_offset, &data],
        )
        .await?;
        object_offset += length;
    }
    // A new version: every head's map of the file names the old rows, and its next READ
    // reads the new ones (and maps a file whose count came down past a map's bound).
    let after: i64 = tx
        .query_one(
            "UPDATE inodes SET version = version + 1 WHERE id = $1 RETURNING slice_count",
            &[&file],
        )
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
                last: (100_000, 9),
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
    fn a_pass_leaves_a_run_the_page_may_have_cut_to_the_next_page() {
        let m = 1i64 << 20;
        // Five 1 MiB slices: 0-4 MiB is one run, 4 MiB starts another.
        let page: Vec<SliceAt> = (0..5).map(|i| s(10 + i, i * m, m)).collect();
        let Choice::Merge(g) = choose(&page, true) else {
            panic!("the first run is merged")
        };
        assert_eq!((g.seqs.len(), g.last), (4, (3 * m, 13)));
        // A lone big slice, then a run the page's end cuts: the next page starts at it.
        let page = [s(1, 0, 4 * m), s(2, 4 * m, 10), s(3, 4 * m + 10, 10)];
        assert_eq!(choose(&page, true), Choice::Skip((0, 1)));
        let Choice::Merge(g) = choose(&page, false) else {
            panic!("the last page's run is merged")
        };
        assert_eq!(g.seqs, [2, 3]);
        // A run that fills the page is merged as it is.
        let page = [s(1, 0, 10), s(2, 10, 10)];
        assert!(matches!(choose(&page, true), Choice::Merge(_)));
        // No run: the next page starts at the last slice, or the file is done.
        let page = [s(1, 0, 4 * m), s(2, 4 * m, 4 * m), s(3, 8 * m, 4 * m)];
        assert_eq!(choose(&page, true), Choice::Skip((4 * m, 2)));
        assert_eq!(choose(&page, false), Choice::End);
    }

    #[test]
    fn a_lone_slice_or_a_run_wider_than_the_bound_is_left() {
        assert!(plan(&[s(1, 0, 10)], 64).is_empty());
        assert!(plan(&[s(1, 0, 60), s(2, 60, 60)], 64).is_empty());
    }
}
