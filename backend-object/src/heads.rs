//! Byte-range locks across heads: what each head's lock manager holds, kept in the
//! database where every head checks it before it grants (the [`vfs::HeadLocks`] seam).
//!
//! The lock manager of each head (`granary-locks`) stays the authority among that head's
//! clients, owners, queues and all. What the other heads need is less: which bytes of
//! which file this head holds, and how. So a head records per file its locks merged into
//! maximal ranges of one kind (`lock_ranges`, one row per range; past
//! [`limits::HEAD_LOCK_SPANS_PER_FILE`] two hulls), plus the ranges its NLM waiters wait
//! for (its manager grants those without asking anyone when they free locally).
//!
//! - **A LOCK** ([`lock`]): one transaction takes the file's lock every head takes
//!   (`granary_lock_take`, an advisory lock per inode), reads the first live range of
//!   another head in the way, and, if there is none, runs the head's lock manager and
//!   writes this head's rows of the file with the COMMIT. The reply leaves after the
//!   commit, so a lock a client was told it holds is in the database.
//! - **Everything else** that changes what a head holds (an unlock, a CLOSE, a lease
//!   expiry, FREE_ALL, a reboot notice, a waiter granted) is reported through
//!   [`vfs::HeadLocks::changed`] and recorded by this head's keeper task in the
//!   background, each file under the same per-inode lock, reading the manager's state
//!   after it holds that lock (so the last write of a file is its newest state). An
//!   unlock records its own change and waits for it ([`settle`]) where it may. A record that fails (an
//!   outage) is tried again every heartbeat: a release is never lost, and until it is
//!   recorded the other heads are refused more than they need, never granted too much.
//! - **Heads and leases**: a head takes a number (`lock_heads`) at its first LOCK, and
//!   its keeper renews its lease every [`limits::HEAD_HEARTBEAT`]; the rows of a head
//!   whose lease ended are ignored by every check, and swept one lease later. A head
//!   that finds its own row swept (it could not reach the database for two leases)
//!   records all its files again.
//!
//! - **Waiting across heads**: a write that frees anything of what the head recorded
//!   (an unlock, a downgrade) sends `NOTIFY granary_lock_free` in its transaction (the
//!   payload: the file and the head), so the heads listening hear of it once it commits.
//!   A head listens ([`listener`], a connection of its own) while requests of it wait for
//!   other heads' ranges ([`vfs::HeadLocks::watch`]): a notice about a watched file calls
//!   the server's [`vfs::LockFreed`], which asks again. Each heartbeat it also looks for
//!   heads whose lease ran out with rows on a watched file (their rows stop counting
//!   then, without a write to notify), and every [`limits::HEAD_WAIT_RECHECK`] it asks
//!   again for every watched file anyway. Without its connection (the database away) it
//!   asks again for every watched file every [`limits::HEAD_WAIT_POLL`], and once more
//!   when it listens again: nothing waits on a notice that was lost.
//!
//! What this head recorded per file is kept in memory (a [`Book`] of its spans), so a
//! change that leaves the record as it was costs no statement.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use futures::StreamExt;
use vfs::{FileId, FsError, FsResult, HeadLock, LockFreed, LockSource, LockSpan};

use crate::book::Book;
use crate::engine::{Fail, Sql, Tx, COUNTERS};
use crate::meta::to_db;
use crate::{limits, Inner};

/// This head's part in the locks across heads.
pub(crate) struct Heads {
    /// How long this head's rows count after its last heartbeat.
    lease: std::time::Duration,
    /// This head's number in `lock_heads`, from its first LOCK on.
    id: OnceLock<i64>,
    /// Held while the head registers (once), so two first LOCKs take one number.
    registering: Mutex<()>,
    /// What the head's lock manager holds on a file (set by the server at start).
    source: OnceLock<LockSource>,
    /// What this head wrote of each file's spans; the files a LOCK or an unlock of this
    /// head runs on.
    files: Mutex<Book<Vec<LockSpan>>>,
    /// Wakes the keeper: a file to record (locks, or shares: `shares.rs`).
    pub(crate) wake: tokio::sync::Notify,
    /// Where this head's server is told that ranges of a watched file may have freed.
    freed: OnceLock<LockFreed>,
    /// The files requests of this head wait on (ranges of other heads in their way).
    watched: Mutex<HashSet<i64>>,
    /// Releases of other heads heard of so far ([`vfs::HeadLocks::notices`]).
    notices: AtomicU64,
    /// Wakes the listener: a first file to watch.
    watch_wake: tokio::sync::Notify,
}

impl Heads {
    pub(crate) fn new(lease: std::time::Duration) -> Self {
        Self {
            lease,
            id: OnceLock::new(),
            registering: Mutex::new(()),
            source: OnceLock::new(),
            files: Mutex::new(Book::default()),
            wake: tokio::sync::Notify::new(),
            freed: OnceLock::new(),
            watched: Mutex::new(HashSet::new()),
            notices: AtomicU64::new(0),
            watch_wake: tokio::sync::Notify::new(),
        }
    }

    fn watched(&self) -> std::sync::MutexGuard<'_, HashSet<i64>> {
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn on_freed(&self, freed: LockFreed) {
        if self.freed.set(freed).is_err() {
            tracing::warn!("object backend: a second lock-freed callback; the first is kept");
        }
    }

    pub(crate) fn notices(&self) -> u64 {
        self.notices.load(Ordering::SeqCst)
    }

    pub(crate) fn watch(&self, id: FileId, since: u64) {
        let first = {
            let mut w = self.watched();
            let first = w.is_empty();
            w.insert(to_db(id));
            first
        };
        if first {
            self.watch_wake.notify_one();
        }
        // After the insert: a notice counted after this read finds the file watched.
        if self.notices() != since {
            self.tell(id);
        }
    }

    pub(crate) fn unwatch(&self, id: FileId) {
        self.watched().remove(&to_db(id));
    }

    fn tell(&self, id: FileId) {
        if let Some(f) = self.freed.get() {
            f(id);
        }
    }

    /// Every watched file may have freed (a notice may have been missed).
    fn tell_all(&self) {
        let all: Vec<i64> = self.watched().iter().copied().collect();
        for inode in all {
            self.tell(from_db(inode));
        }
    }

    /// A `granary_lock_free` notice, "inode head": another head freed ranges of inode.
    fn notice(&self, payload: &str, me: i64) {
        let mut words = payload.split(' ').map(str::parse::<i64>);
        let (Some(Ok(inode)), Some(Ok(head))) = (words.next(), words.next()) else {
            tracing::debug!(payload, "object backend: a lock notice not understood");
            return;
        };
        if head == me {
            return;
        }
        self.notices.fetch_add(1, Ordering::SeqCst);
        // After the count: a watch that began before it is seen here.
        if self.watched().contains(&inode) {
            self.tell(from_db(inode));
        }
    }

    /// Whether writing `new` as this head's rows of `file` frees anything the rows hold
    /// now (a byte, or a byte's exclusivity), which the other heads must hear of.
    fn frees(&self, file: i64, new: &[LockSpan]) -> bool {
        let f = self.files();
        let old = match f.row(file) {
            None => return false,
            Some(None) => return true,
            Some(Some(old)) => old,
        };
        let mut sorted = new.to_vec();
        sorted.sort_by_key(|s| s.first);
        old.iter().any(|o| !covered(o, &sorted))
    }

    fn files(&self) -> std::sync::MutexGuard<'_, Book<Vec<LockSpan>>> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn registered(&self) -> Option<i64> {
        self.id.get().copied()
    }

    /// How long this head's rows count after its last heartbeat.
    pub(crate) fn lease(&self) -> std::time::Duration {
        self.lease
    }

    pub(crate) fn attach(&self, source: LockSource) {
        if self.source.set(source).is_err() {
            tracing::warn!("object backend: a second lock source attached; the first is kept");
        }
    }

    /// What the head holds on `file` now, as it is recorded: at most
    /// [`limits::HEAD_LOCK_SPANS_PER_FILE`] spans.
    fn spans(&self, file: i64) -> Vec<LockSpan> {
        let Some(source) = self.source.get() else {
            return Vec::new();
        };
        bounded(source(FileId(u64::try_from(file).unwrap_or(0))))
    }

    /// Notes what is about to be committed for `file` (under its per-inode lock).
    fn set_recorded(&self, file: i64, spans: Vec<LockSpan>) {
        let row = !spans.is_empty();
        self.files().set(file, spans, row);
    }

    /// A write of `file` failed: its rows are unknown until written again.
    fn failed(&self, file: i64) {
        self.files().failed(file);
    }

    /// Whether a LOCK of `file` may make it one more file with rows.
    fn room_for(&self, file: i64) -> bool {
        let f = self.files();
        f.has_row(file) || f.rows() < limits::HEAD_LOCK_FILES_MAX
    }

    pub(crate) fn changed(&self, file: Option<FileId>) {
        if self.registered().is_none() {
            // No LOCK went through this head yet: it has no rows to bring in step.
            return;
        }
        if self.files().changed(file.map(to_db)) {
            self.wake.notify_one();
        }
    }

    /// A LOCK on `file` begins: the changes its grant reports are its own to write.
    fn begin_lock(&self, file: i64) {
        self.files().begin(file);
    }

    /// The LOCK on `file` ended: anything else that changed meanwhile is recorded by
    /// the keeper.
    fn end_lock(&self, file: i64) {
        self.files().end(file);
        // Read after the end: a change from now on marks the file itself.
        let spans = self.spans(file);
        if self.files().behind(file, &spans, true) {
            self.wake.notify_one();
        }
    }
}

/// Whether the spans `by_offset` (sorted by their first byte) hold every byte of `o` at
/// least as strongly as `o` does.
fn covered(o: &LockSpan, by_offset: &[LockSpan]) -> bool {
    let mut next = o.first;
    for n in by_offset.iter().filter(|n| n.exclusive || !o.exclusive) {
        if n.last < next {
            continue;
        }
        if n.first > next {
            return false;
        }
        if n.last >= o.last {
            return true;
        }
        next = n.last + 1;
    }
    false
}

fn from_db(inode: i64) -> FileId {
    FileId(u64::try_from(inode).unwrap_or(0))
}

/// At most [`limits::HEAD_LOCK_SPANS_PER_FILE`] spans: past that, one span over the
/// exclusive ones and one over the shared ones (more than the head holds, never less).
fn bounded(spans: Vec<LockSpan>) -> Vec<LockSpan> {
    if spans.len() <= limits::HEAD_LOCK_SPANS_PER_FILE {
        return spans;
    }
    let hull = |exclusive: bool| {
        let mut of = spans.iter().filter(|s| s.exclusive == exclusive);
        let first = of.next()?;
        Some(of.fold(*first, |h, s| LockSpan {
            exclusive,
            first: h.first.min(s.first),
            last: h.last.max(s.last),
        }))
    };
    [hull(true), hull(false)].into_iter().flatten().collect()
}

/// An unsigned offset as a `bigint` that sorts the same: its top bit flipped.
fn offset_to_db(v: u64) -> i64 {
    i64::from_ne_bytes((v ^ (1 << 63)).to_ne_bytes())
}

fn offset_from_db(v: i64) -> u64 {
    u64::from_ne_bytes(v.to_ne_bytes()) ^ (1 << 63)
}

/// The other head's range a `granary_lock_check` / `granary_lock_others` row names.
fn other(row: &tokio_postgres::Row) -> HeadLock {
    HeadLock {
        head: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
        span: LockSpan {
            exclusive: row.get(1),
            first: offset_from_db(row.get(2)),
            last: offset_from_db(row.get(3)),
        },
    }
}

/// Replaces this head's rows of a file (the per-inode lock held).
const PUT: &str = "WITH gone AS (DELETE FROM lock_ranges WHERE inode = $1 AND head = $2) \
                   INSERT INTO lock_ranges (inode, head, exclusive, first_byte, last_byte) \
                   SELECT $1, $2, e, f, l FROM unnest($3::boolean[], $4::bigint[], $5::bigint[]) \
                   AS u(e, f, l)";

/// [`PUT`] that frees something: the other heads hear of it when it commits.
const PUT_FREEING: &str = "WITH gone AS (DELETE FROM lock_ranges WHERE inode = $1 AND head = $2), \
                   put AS (INSERT INTO lock_ranges (inode, head, exclusive, first_byte, last_byte) \
                   SELECT $1, $2, e, f, l FROM unnest($3::boolean[], $4::bigint[], $5::bigint[]) \
                   AS u(e, f, l)) \
                   SELECT pg_notify('granary_lock_free', $1::text || ' ' || $2::text)";

/// Writes `spans` as this head's rows of `inode` and commits, in `tx` (which holds the
/// per-inode lock); `frees`: with a `granary_lock_free` notice.
async fn put(tx: Tx, inode: i64, head: i64, spans: &[LockSpan], frees: bool) -> Result<(), Fail> {
    let exclusive: Vec<bool> = spans.iter().map(|s| s.exclusive).collect();
    let first: Vec<i64> = spans.iter().map(|s| offset_to_db(s.first)).collect();
    let last: Vec<i64> = spans.iter().map(|s| offset_to_db(s.last)).collect();
    let sql = if frees { PUT_FREEING } else { PUT };
    tx.query_and_commit(sql, &[&inode, &head, &exclusive, &first, &last])
        .await?;
    Ok(())
}

/// Registers this head: its number, with its share acks set to the newest watch it
/// read in the same snapshot (it holds nothing yet), and those watches (`shares.rs`).
const REGISTER: &str = "WITH w AS (SELECT inode, id FROM share_watches ORDER BY id LIMIT $2), \
                        me AS (INSERT INTO lock_heads (lease_until, share_acked) \
                               VALUES (now() + make_interval(secs => $1), \
                                       (SELECT coalesce(max(id), 0) FROM w)) \
                               RETURNING head) \
                        SELECT me.head, w.inode, w.id FROM me LEFT JOIN w ON true";

/// The watches a [`REGISTER`] or [`BEAT`] row names (columns 1 and 2), and whether there
/// were more than a heartbeat reads.
fn watches_of(rows: &[tokio_postgres::Row]) -> (Vec<(i64, i64)>, bool) {
    let mut w: Vec<(i64, i64)> = rows
        .iter()
        .filter_map(|r| Some((r.get::<_, Option<i64>>(1)?, r.get::<_, Option<i64>>(2)?)))
        .collect();
    let overflow = w.len() > usize::try_from(limits::SHARE_WATCHES_READ_MAX).unwrap_or(0);
    if overflow {
        w.sort_unstable_by_key(|x| x.1);
        w.truncate(usize::try_from(limits::SHARE_WATCHES_READ_MAX).unwrap_or(0));
    }
    (w, overflow)
}

/// This head's number, registering it (and starting its keeper) at its first LOCK,
/// OPEN or SHARE.
pub(crate) fn head_id(inner: &Arc<Inner>) -> FsResult<i64> {
    if let Some(h) = inner.heads.registered() {
        return Ok(h);
    }
    let _one = inner
        .heads
        .registering
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(h) = inner.heads.registered() {
        return Ok(h);
    }
    let lease = inner.heads.lease.as_secs_f64();
    let sent = tokio::time::Instant::now();
    let (h, watches, overflow) = inner.engines.run(async {
        let c = inner.engines.pool.get().await?;
        COUNTERS.transactions(1);
        let rows = c
            .query(REGISTER, &[&lease, &(limits::SHARE_WATCHES_READ_MAX + 1)])
            .await?;
        let head = rows
            .first()
            .map(|r| r.get::<_, i64>(0))
            .ok_or(Fail::Fs(FsError::ServerFault))?;
        let (w, overflow) = watches_of(&rows);
        Ok((head, w, overflow))
    })?;
    inner.shares.registered(&watches, overflow, sent);
    let _ = inner.heads.id.set(h);
    tracing::info!(
        head = h,
        "object backend: this head takes byte-range locks as head {h}"
    );
    inner.engines.spawn(keeper(Arc::clone(inner), h));
    inner.engines.spawn(listener(Arc::clone(inner), h));
    Ok(h)
}

/// [`vfs::HeadLocks::lock`].
pub(crate) fn lock(
    inner: &Arc<Inner>,
    id: FileId,
    want: LockSpan,
    grant: &mut dyn FnMut(),
) -> FsResult<Option<HeadLock>> {
    if !sync::blocking::allowed() {
        return Err(FsError::WouldBlock);
    }
    let head = head_id(inner)?;
    let inode = to_db(id);
    if !inner.heads.room_for(inode) {
        tracing::debug!(
            inode,
            "object backend: this head keeps lock rows for its most files"
        );
        return Err(FsError::NoSpc);
    }
    inner.heads.begin_lock(inode);
    let done = lock_in(inner, head, inode, want, grant);
    inner.heads.end_lock(inode);
    done
}

/// [`lock`] once the head has its number and room for the file.
fn lock_in(
    inner: &Arc<Inner>,
    head: i64,
    inode: i64,
    want: LockSpan,
    grant: &mut dyn FnMut(),
) -> FsResult<Option<HeadLock>> {
    let (exclusive, first, last) = (
        want.exclusive,
        offset_to_db(want.first),
        offset_to_db(want.last),
    );
    let (tx, in_way) = inner.engines.run(async {
        let tx = Tx::new(inner.engines.pool.get().await?);
        COUNTERS.transactions(1);
        let row = tx
            .query_opt(
                "SELECT head, exclusive, first_byte, last_byte \
                 FROM granary_lock_check($1, $2, $3, $4, $5)",
                &[&inode, &head, &exclusive, &first, &last],
            )
            .await?;
        Ok((tx, row.as_ref().map(other)))
    })?;
    if in_way.is_some() {
        return Ok(in_way);
    }
    grant();
    let spans = inner.heads.spans(inode);
    if inner.heads.files().is_recorded(inode, &spans) {
        // Refused here, or asked again for what it holds: the rows stand (the dropped
        // transaction rolls back and lets go of the file's lock).
        return Ok(None);
    }
    let frees = inner.heads.frees(inode, &spans);
    inner.heads.set_recorded(inode, spans.clone());
    let done = inner.engines.run(put(tx, inode, head, &spans, frees));
    if let Err(e) = done {
        inner.heads.failed(inode);
        return Err(e);
    }
    Ok(None)
}

/// [`vfs::HeadLocks::test`].
pub(crate) fn test(inner: &Arc<Inner>, id: FileId, want: LockSpan) -> FsResult<Option<HeadLock>> {
    // A head that never took a lock has no rows: none is its own.
    let head = inner.heads.registered().unwrap_or(0);
    let inode = to_db(id);
    let (exclusive, first, last) = (
        want.exclusive,
        offset_to_db(want.first),
        offset_to_db(want.last),
    );
    inner.engines.run(async {
        let c = inner.engines.pool.get().await?;
        COUNTERS.transactions(1);
        let row = c
            .query_opt(
                "SELECT head, exclusive, first_byte, last_byte \
                 FROM granary_lock_others($1, $2, $3, $4, $5)",
                &[&inode, &head, &exclusive, &first, &last],
            )
            .await?;
        Ok(row.as_ref().map(other))
    })
}

/// [`vfs::HeadLocks::settle`]: the change `release` makes is this call's to record (the
/// keeper is not woken for it, as for a LOCK's grant), so one transaction records it.
pub(crate) fn settle(inner: &Arc<Inner>, id: FileId, release: &mut dyn FnMut()) -> FsResult<()> {
    let Some(head) = inner.heads.registered() else {
        release();
        return Ok(());
    };
    let inode = to_db(id);
    inner.heads.begin_lock(inode);
    release();
    let done = if sync::blocking::allowed() {
        inner.engines.run(record(inner, head, inode))
    } else {
        Err(FsError::WouldBlock)
    };
    // Left to the keeper when not recorded here.
    inner.heads.end_lock(inode);
    done
}

/// A transaction that holds the per-inode lock of `inode`, which every head takes to
/// write its rows of the file (locks and shares alike).
pub(crate) async fn file_taken(inner: &Inner, inode: i64) -> Result<Tx, Fail> {
    let tx = Tx::new(inner.engines.pool.get().await?);
    COUNTERS.transactions(1);
    tx.execute("SELECT granary_lock_take($1)", &[&inode])
        .await?;
    Ok(tx)
}

/// Brings this head's rows of `inode` in step with its lock manager, under the file's
/// per-inode lock. A failure leaves the file to the next heartbeat.
async fn record(inner: &Inner, head: i64, inode: i64) -> Result<(), Fail> {
    let h = &inner.heads;
    let spans = h.spans(inode);
    if h.files().is_recorded(inode, &spans) {
        return Ok(());
    }
    let done = async {
        let tx = file_taken(inner, inode).await?;
        // Read under the lock: a change after this read records itself after us.
        let spans = h.spans(inode);
        if h.files().is_recorded(inode, &spans) {
            return Ok(());
        }
        let frees = h.frees(inode, &spans);
        h.set_recorded(inode, spans.clone());
        put(tx, inode, head, &spans, frees).await
    }
    .await;
    if done.is_err() {
        h.failed(inode);
    }
    done
}

/// Renews a head's lease (`$1`, for `$2` seconds) with its share acks (`$3`; a row
/// made anew acks nothing), sweeps the rows of heads whose lease ended a lease ago, and
/// reads the watches (at most `$4`).
const BEAT: &str = "WITH gone AS (DELETE FROM lock_heads \
                        WHERE lease_until < now() - make_interval(secs => $2) AND head <> $1 \
                        RETURNING head), \
                    swept AS (DELETE FROM lock_ranges WHERE head IN (SELECT head FROM gone)), \
                    swept_shares AS (DELETE FROM share_holds \
                                     WHERE head IN (SELECT head FROM gone)), \
                    me AS (INSERT INTO lock_heads (head, lease_until) \
                           VALUES ($1, now() + make_interval(secs => $2)) \
                           ON CONFLICT (head) DO UPDATE \
                           SET lease_until = EXCLUDED.lease_until, share_acked = $3 \
                           RETURNING xmax = 0 AS fresh), \
                    w AS (SELECT inode, id FROM share_watches ORDER BY id LIMIT $4) \
                    SELECT me.fresh, w.inode, w.id FROM me LEFT JOIN w ON true";

/// What a heartbeat found: whether this head's own row had been swept (its rows with
/// it), the watches, and whether there were more than it reads.
pub(crate) struct Beat {
    pub(crate) fresh: bool,
    pub(crate) watches: Vec<(i64, i64)>,
    pub(crate) overflow: bool,
}

/// Renews this head's lease and sweeps the rows of heads whose lease ended a lease ago.
async fn heartbeat(inner: &Inner, head: i64) -> Result<Beat, Fail> {
    let lease = inner.heads.lease.as_secs_f64();
    let acked = inner.shares.acked();
    let c = inner.engines.pool.get().await?;
    COUNTERS.transactions(1);
    COUNTERS.floor_written();
    let rows = c
        .query(
            BEAT,
            &[&head, &lease, &acked, &(limits::SHARE_WATCHES_READ_MAX + 1)],
        )
        .await?;
    let fresh = rows
        .first()
        .map(|r| r.get::<_, bool>(0))
        .ok_or(Fail::Fs(FsError::ServerFault))?;
    let (watches, overflow) = watches_of(&rows);
    Ok(Beat {
        fresh,
        watches,
        overflow,
    })
}

/// The head's keeper: its heartbeat, and the records of the files that changed.
async fn keeper(inner: Arc<Inner>, head: i64) {
    let mut beat = tokio::time::interval(limits::HEAD_HEARTBEAT);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let ticked = tokio::select! {
            _ = beat.tick() => true,
            () = inner.heads.wake.notified() => false,
        };
        if ticked {
            let sent = tokio::time::Instant::now();
            let r = tokio::time::timeout(limits::OPERATION_TIMEOUT, heartbeat(&inner, head))
                .await
                .unwrap_or(Err(Fail::Timeout));
            match r {
                Ok(beat) => {
                    if beat.fresh {
                        tracing::warn!(head, "object backend: this head's lock lease had ended and its rows were swept; recording its locks and shares again");
                        inner.heads.files().all_unknown();
                    }
                    let shares = crate::shares::beat(&inner, head, &beat, sent).await;
                    if let Err(e) = shares {
                        inner.engines.failed(e);
                    }
                }
                Err(e) => {
                    inner.engines.failed(e);
                }
            }
        }
        crate::shares::keep(&inner, head).await;
        let dirty = inner.heads.files().take_dirty();
        for inode in dirty {
            let r = tokio::time::timeout(limits::OPERATION_TIMEOUT, record(&inner, head, inode))
                .await
                .unwrap_or_else(|_| {
                    inner.heads.failed(inode);
                    Err(Fail::Timeout)
                });
            if let Err(e) = r {
                // Said once per outage; the file waits for the next heartbeat.
                inner.engines.failed(e);
            }
        }
    }
}

/// Heads whose lease ran out after `$3` (and by now) with rows on the watched files
/// `$1`: the files they held, and the database's time now (the next `$3`).
const EXPIRED: &str = "SELECT now(), ARRAY(SELECT DISTINCT r.inode FROM lock_ranges r \
                       JOIN lock_heads h ON h.head = r.head \
                       WHERE r.inode = ANY($1) AND r.head <> $2 \
                       AND h.lease_until > $3 AND h.lease_until <= now())";

/// The head's listener: while requests of this head wait for other heads' ranges,
/// hears the other heads' releases on a connection of its own, and asks again at the
/// bounded intervals of [`limits::HEAD_WAIT_POLL`] and [`limits::HEAD_WAIT_RECHECK`].
async fn listener(inner: Arc<Inner>, head: i64) {
    loop {
        // Nothing watched: nothing to hear.
        while inner.heads.watched().is_empty() {
            inner.heads.watch_wake.notified().await;
        }
        let at = tokio::time::Instant::now();
        if let Err(e) = listen(&inner, head).await {
            tracing::debug!(error = ?e, "object backend: not listening for lock releases; polling");
        }
        // Whatever it missed meanwhile: ask again, and at most once a poll interval.
        inner.heads.tell_all();
        tokio::time::sleep_until(at + limits::HEAD_WAIT_POLL).await;
    }
}

/// Why the LISTEN connection's driver ended.
fn driver_ended(r: Result<Option<tokio_postgres::Error>, tokio::task::JoinError>) -> Fail {
    match r {
        Ok(Some(e)) => Fail::Db(e),
        Ok(None) => Fail::Pool("the LISTEN connection closed".into()),
        Err(e) => Fail::Pool(format!("the LISTEN connection's driver ended: {e}")),
    }
}

/// Listens until the connection fails, or until nothing is watched for a recheck
/// interval (the connection is closed then).
async fn listen(inner: &Arc<Inner>, head: i64) -> Result<(), Fail> {
    let (client, mut conn) = tokio::time::timeout(
        limits::CONNECT_TIMEOUT,
        inner.engines.pg.connect(tokio_postgres::NoTls),
    )
    .await
    .map_err(|_| Fail::Timeout)??;
    let heard = Arc::clone(inner);
    let mut driver = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(m) = messages.next().await {
            match m {
                Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                    heard.heads.notice(n.payload(), head);
                }
                Ok(_) => {}
                Err(e) => return Some(e),
            }
        }
        None
    });
    let listening = async {
        COUNTERS.transactions(1);
        client.batch_execute("LISTEN granary_lock_free").await?;
        client.prepare(EXPIRED).await
    };
    let expired = tokio::select! {
        r = tokio::time::timeout(limits::OPERATION_TIMEOUT, listening) => r.map_err(|_| Fail::Timeout)??,
        e = &mut driver => return Err(driver_ended(e)),
    };
    tracing::debug!(
        head,
        "object backend: listening for other heads' lock releases"
    );
    // Releases before the LISTEN went unheard.
    inner.heads.tell_all();
    let mut beat = tokio::time::interval(limits::HEAD_HEARTBEAT);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut since = std::time::SystemTime::UNIX_EPOCH;
    let mut last_recheck = tokio::time::Instant::now();
    let mut idle_since = None;
    loop {
        tokio::select! {
            e = &mut driver => return Err(driver_ended(e)),
            _ = beat.tick() => {}
        }
        let watched: Vec<i64> = inner.heads.watched().iter().copied().collect();
        if watched.is_empty() {
            let idle = *idle_since.get_or_insert_with(tokio::time::Instant::now);
            if idle.elapsed() >= limits::HEAD_WAIT_RECHECK {
                driver.abort();
                return Ok(());
            }
            continue;
        }
        idle_since = None;
        if last_recheck.elapsed() >= limits::HEAD_WAIT_RECHECK {
            last_recheck = tokio::time::Instant::now();
            inner.heads.tell_all();
            continue;
        }
        COUNTERS.transactions(1);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&watched, &head, &since];
        let query = client.query_one(&expired, &params);
        let row = tokio::select! {
            r = tokio::time::timeout(limits::OPERATION_TIMEOUT, query) => r.map_err(|_| Fail::Timeout)??,
            e = &mut driver => return Err(driver_ended(e)),
        };
        since = row.get(0);
        for inode in row.get::<_, Vec<i64>>(1) {
            tracing::debug!(
                inode,
                "object backend: a head's lease ran out with ranges a request here waits for"
            );
            inner.heads.tell(from_db(inode));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(exclusive: bool, first: u64, last: u64) -> LockSpan {
        LockSpan {
            exclusive,
            first,
            last,
        }
    }

    #[test]
    fn offsets_keep_their_order_in_the_database() {
        let vs = [
            0,
            1,
            1 << 31,
            (1 << 63) - 1,
            1 << 63,
            u64::MAX - 1,
            u64::MAX,
        ];
        for w in vs.windows(2) {
            assert!(offset_to_db(w[0]) < offset_to_db(w[1]), "{w:?}");
            assert_eq!(offset_from_db(offset_to_db(w[0])), w[0]);
        }
    }

    #[test]
    fn too_many_spans_become_two_hulls_that_cover_them() {
        let few: Vec<LockSpan> = (0..4)
            .map(|i| span(i % 2 == 0, i * 10, i * 10 + 5))
            .collect();
        assert_eq!(bounded(few.clone()), few);
        let n = limits::HEAD_LOCK_SPANS_PER_FILE as u64 + 1;
        let many: Vec<LockSpan> = (0..n)
            .map(|i| span(i % 2 == 0, i * 10, i * 10 + 5))
            .collect();
        let b = bounded(many.clone());
        assert_eq!(b.len(), 2);
        for s in &many {
            assert!(
                b.iter()
                    .any(|h| h.exclusive == s.exclusive && h.first <= s.first && s.last <= h.last),
                "{s:?} not covered by {b:?}"
            );
        }
    }
}
