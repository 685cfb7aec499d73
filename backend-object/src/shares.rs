//! Share reservations across heads (NFSv4 OPEN's deny modes, NLM SHARE): what each
//! head's share table holds on a file, kept in the database where the other heads check
//! it (the [`vfs::HeadShares`] seam), at no database cost for an OPEN that denies
//! nothing on a file nobody denies anything on (what Linux clients always send).
//!
//! A conflict needs a deny: one holder's deny against another's access. So a head
//! records its holders' access only on files where some head denies, or is about to:
//! *watched* files (`share_watches`).
//!
//! - **A deny** (an OPEN or SHARE with a deny mode) watches the file first (one
//!   statement, [`watch`]), then waits until every other live head has *acked* the
//!   watch (`lock_heads.share_acked` at or past its id): each head, at its next
//!   heartbeat, reads the watches, marks the new ones as watched in memory, records what
//!   its holders have on each ([`beat`]) and then acks. Then one transaction (the file's
//!   per-inode lock, the other live heads' rows in the way, this head's share table, this
//!   head's row with the COMMIT) grants it. A head that cannot ack for
//!   [`limits::SHARE_WATCH_WAIT`] makes the deny NFS4ERR_DELAY, until its lease ends.
//! - **An OPEN that denies nothing** on a file this head knows as watched runs that one
//!   transaction too (another head may deny its access); on any other file it asks the
//!   share table alone ([`Gate`]'s read side), as long as this head's lease is fresh: a
//!   watch it has not seen yet cannot have been granted a deny, since that waits for
//!   this head's ack, and the ack comes after the head marked the file (the write side)
//!   and recorded every access its holders had then.
//! - **Releases** (CLOSE, OPEN_DOWNGRADE, UNSHARE) of a file with a row are recorded
//!   before the reply ([`settle`]); bulk ones (a lease expiry, FREE_ALL) by the keeper.
//!   A release of a file's last deny drops its watch (and every head's rows of it) once
//!   the watch is older than [`limits::SHARE_WATCH_KEEP`], so a file goes back to the
//!   free path.
//!
//! Heads and leases are the byte-range locks' (`heads.rs`, `lock_heads`): a head takes
//! its number at its first OPEN, LOCK or SHARE and renews it every heartbeat; the rows
//! of a head whose lease ended are ignored, and its acks are not waited for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};

use vfs::{FileId, FsError, FsResult, HeadShare, ShareMode, ShareSource};

use crate::book::Book;
use crate::engine::{Fail, Sql, Tx, COUNTERS};
use crate::meta::to_db;
use crate::{heads, limits, Inner};

/// This head's part in the share reservations across heads.
pub(crate) struct Shares {
    source: OnceLock<ShareSource>,
    /// What this head knows of the watches. An OPEN's free path holds the read side
    /// while it asks the share table; the keeper marks new watches under the write side,
    /// so every OPEN that took the free path on a file is in the table before the
    /// keeper reads the table to record the file.
    gate: RwLock<Gate>,
    files: Mutex<Files>,
}

#[derive(Default)]
struct Gate {
    /// Watched files, by the id of their watch.
    watched: HashMap<i64, Watch>,
    /// When this head sent the heartbeat that last renewed its lease (`None`: not
    /// registered yet): its lease runs at least a lease from then.
    renewed: Option<tokio::time::Instant>,
    /// More watches than a heartbeat reads: every file counts as watched.
    overflow: bool,
}

#[derive(Clone, Copy)]
struct Watch {
    id: i64,
    /// This head recorded its holders' access on the file since it marked it.
    recorded: bool,
}

#[derive(Default)]
struct Files {
    /// What this head wrote of each file's modes; the files an OPEN or a release of this
    /// head runs on.
    book: Book<ShareMode>,
    /// The largest watch id up to which this head recorded every watched file.
    acked: i64,
}

impl Shares {
    pub(crate) fn new() -> Self {
        Self {
            source: OnceLock::new(),
            gate: RwLock::new(Gate::default()),
            files: Mutex::new(Files::default()),
        }
    }

    fn files(&self) -> MutexGuard<'_, Files> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn gate(&self) -> std::sync::RwLockReadGuard<'_, Gate> {
        self.gate.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn gate_mut(&self) -> std::sync::RwLockWriteGuard<'_, Gate> {
        self.gate.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn attach(&self, source: ShareSource) {
        if self.source.set(source).is_err() {
            tracing::warn!("object backend: a second share source attached; the first is kept");
        }
    }

    /// What this head's share table holds on `inode` now.
    fn mode(&self, inode: i64) -> ShareMode {
        self.source.get().map_or(ShareMode::default(), |s| {
            s(FileId(u64::try_from(inode).unwrap_or(0)))
        })
    }

    pub(crate) fn acked(&self) -> i64 {
        self.files().acked
    }

    /// The head registered: the watches of the database then (it holds nothing yet, so
    /// each is recorded as far as this head goes, and it acks them all).
    pub(crate) fn registered(
        &self,
        watches: &[(i64, i64)],
        overflow: bool,
        sent: tokio::time::Instant,
    ) {
        let mut g = self.gate_mut();
        g.watched = watches
            .iter()
            .map(|&(inode, id)| (inode, Watch { id, recorded: true }))
            .collect();
        g.overflow = overflow;
        g.renewed = Some(sent);
        self.files().acked = watches.iter().map(|w| w.1).max().unwrap_or(0);
    }

    /// Whether an OPEN that denies nothing may skip the database on `inode`.
    fn free(g: &Gate, inode: i64, lease: std::time::Duration) -> bool {
        // The other heads wait for this head's acks while its lease runs (a lease from
        // the heartbeat's sending, at least); a heartbeat short of its end, the head
        // stops trusting what it knows of the watches.
        let fresh = g
            .renewed
            .is_some_and(|at| at.elapsed() + limits::HEAD_HEARTBEAT < lease);
        fresh && !g.overflow && !g.watched.contains_key(&inode)
    }

    fn watched(&self, inode: i64) -> bool {
        let g = self.gate();
        g.overflow || g.watched.contains_key(&inode)
    }

    /// This head watched `inode` itself (or found it watched): its free path stops now.
    fn mark(&self, inode: i64, id: i64) {
        self.gate_mut().watched.entry(inode).or_insert(Watch {
            id,
            recorded: false,
        });
    }

    fn is_recorded(&self, inode: i64, mode: ShareMode) -> bool {
        self.files().book.is_recorded(inode, &mode)
    }

    fn has_row(&self, inode: i64) -> bool {
        self.files().book.has_row(inode)
    }

    fn failed(&self, inode: i64) {
        self.files().book.failed(inode);
    }

    pub(crate) fn changed(&self, inner: &Inner, file: Option<FileId>) {
        let inode = file.map(to_db);
        {
            let mut f = self.files();
            // This head has no row there: nothing to bring in step.
            if inode.is_some_and(|i| !f.book.has_row(i)) || !f.book.changed(inode) {
                return;
            }
        }
        inner.heads.wake.notify_one();
    }

    fn begin(&self, inode: i64) {
        self.files().book.begin(inode);
    }

    fn end(&self, inner: &Inner, inode: i64) {
        self.files().book.end(inode);
        let mode = self.mode(inode);
        // The files mutex is never held while the gate is taken (the keeper takes the
        // gate, then the files).
        let watched = self.watched(inode);
        if self.files().book.behind(inode, &mode, watched) {
            inner.heads.wake.notify_one();
        }
    }
}

/// The other head's reservation a `granary_share_check` row names, if any.
fn other(row: &tokio_postgres::Row) -> Option<HeadShare> {
    let head: Option<i64> = row.get(0);
    let access: Option<i32> = row.get(1);
    let deny: Option<i32> = row.get(2);
    Some(HeadShare {
        head: u64::try_from(head?).unwrap_or(0),
        mode: ShareMode {
            access: u32::try_from(access?).unwrap_or(0),
            deny: u32::try_from(deny?).unwrap_or(0),
        },
    })
}

fn to_int(bits: u32) -> i32 {
    i32::try_from(bits & 3).unwrap_or(0)
}

/// Writes this head's row of `inode` (the per-inode lock held by `tx`) and commits;
/// true when a row was written (the file is watched and the head holds something).
async fn put(tx: Tx, inode: i64, head: i64, mode: ShareMode) -> Result<bool, Fail> {
    let keep = limits::SHARE_WATCH_KEEP.as_secs_f64();
    let row = tx
        .query_and_commit(
            "SELECT granary_share_put($1, $2, $3, $4, $5)",
            &[
                &inode,
                &head,
                &to_int(mode.access),
                &to_int(mode.deny),
                &keep,
            ],
        )
        .await?;
    Ok(row.first().is_some_and(|r| r.get::<_, bool>(0)))
}

/// Watches `inode` (or finds its watch): the watch's id.
async fn watch(inner: &Inner, inode: i64) -> Result<i64, Fail> {
    let c = inner.engines.pool.get().await?;
    COUNTERS.transactions(1);
    let row = c
        .query_one("SELECT granary_share_watch($1)", &[&inode])
        .await?;
    Ok(row.get(0))
}

/// [`vfs::HeadShares::share`].
pub(crate) fn share(
    inner: &Arc<Inner>,
    id: FileId,
    want: ShareMode,
    grant: &mut dyn FnMut(),
) -> FsResult<Option<HeadShare>> {
    let inode = to_db(id);
    let s = &inner.shares;
    let lease = inner.heads.lease();
    if want.deny == 0 && inner.heads.registered().is_some() {
        let g = s.gate();
        if Shares::free(&g, inode, lease) {
            grant();
            return Ok(None);
        }
    }
    if !sync::blocking::allowed() {
        return Err(FsError::WouldBlock);
    }
    let head = heads::head_id(inner)?;
    if want.deny == 0 {
        let g = s.gate();
        if Shares::free(&g, inode, lease) {
            grant();
            return Ok(None);
        }
    }
    s.begin(inode);
    let done = share_in(inner, head, inode, want, grant);
    s.end(inner, inode);
    done
}

/// [`share`] through the database: waits for the acks of a deny's watch, then checks,
/// grants and records in one transaction.
fn share_in(
    inner: &Arc<Inner>,
    head: i64,
    inode: i64,
    want: ShareMode,
    grant: &mut dyn FnMut(),
) -> FsResult<Option<HeadShare>> {
    let s = &inner.shares;
    let waited = tokio::time::Instant::now();
    loop {
        let (tx, row) = inner.engines.run(async {
            let tx = Tx::new(inner.engines.pool.get().await?);
            COUNTERS.transactions(1);
            let row = tx
                .query_one(
                    "SELECT head, access, deny, watch, acked \
                     FROM granary_share_check($1, $2, $3, $4)",
                    &[&inode, &head, &to_int(want.access), &to_int(want.deny)],
                )
                .await?;
            Ok((tx, row))
        })?;
        if let Some(o) = other(&row) {
            return Ok(Some(o));
        }
        let (watch_id, acked): (Option<i64>, bool) = (row.get(3), row.get(4));
        if want.deny != 0 && !acked {
            drop(tx);
            let id = match watch_id {
                Some(id) => id,
                None => inner.engines.run(watch(inner, inode))?,
            };
            s.mark(inode, id);
            if waited.elapsed() >= limits::SHARE_WATCH_WAIT {
                tracing::debug!(
                    inode,
                    "object backend: a deny waited too long for the other heads"
                );
                return Err(FsError::Jukebox);
            }
            inner.engines.run(async {
                tokio::time::sleep(limits::SHARE_ACK_POLL).await;
                Ok::<(), Fail>(())
            })?;
            continue;
        }
        grant();
        let mode = s.mode(inode);
        if s.is_recorded(inode, mode) {
            return Ok(None);
        }
        return match inner.engines.run(put(tx, inode, head, mode)) {
            Ok(written) => {
                s.files().book.set(inode, mode, written);
                Ok(None)
            }
            Err(e) => {
                s.failed(inode);
                Err(e)
            }
        };
    }
}

/// [`vfs::HeadShares::settle`].
pub(crate) fn settle(inner: &Arc<Inner>, id: FileId, release: &mut dyn FnMut()) -> FsResult<()> {
    let Some(head) = inner.heads.registered() else {
        release();
        return Ok(());
    };
    let inode = to_db(id);
    let s = &inner.shares;
    s.begin(inode);
    release();
    let needed = s.has_row(inode) || s.watched(inode);
    let done = if !needed {
        Ok(())
    } else if sync::blocking::allowed() {
        inner.engines.run(record(inner, head, inode, false))
    } else {
        Err(FsError::WouldBlock)
    };
    s.end(inner, inode);
    done
}

/// Brings this head's row of `inode` in step with its share table under the file's
/// per-inode lock (`force`: whatever this head believes it wrote).
async fn record(inner: &Inner, head: i64, inode: i64, force: bool) -> Result<(), Fail> {
    let s = &inner.shares;
    if !force && s.is_recorded(inode, s.mode(inode)) {
        return Ok(());
    }
    let done = async {
        let tx = heads::file_taken(inner, inode).await?;
        // Read under the lock: a change after this read records itself after us.
        let mode = s.mode(inode);
        if !force && s.is_recorded(inode, mode) {
            return Ok(());
        }
        let written = put(tx, inode, head, mode).await?;
        s.files().book.set(inode, mode, written);
        Ok(())
    }
    .await;
    if done.is_err() {
        s.failed(inode);
    }
    done
}

/// After a heartbeat sent at `sent` that read `watches` (`fresh`: this head's row was
/// new, its rows and acks swept): marks the new watches, records this head's holders on
/// each, then acks.
pub(crate) async fn beat(
    inner: &Inner,
    head: i64,
    beat: &heads::Beat,
    sent: tokio::time::Instant,
) -> Result<(), Fail> {
    let (fresh, overflow) = (beat.fresh, beat.overflow);
    let watches = &beat.watches;
    let s = &inner.shares;
    let seen = watches.iter().map(|w| w.1).max().unwrap_or(0);
    let todo: Vec<i64> = {
        let mut g = s.gate_mut();
        g.renewed = Some(sent);
        g.overflow = overflow;
        if fresh {
            for w in g.watched.values_mut() {
                w.recorded = false;
            }
            // Its rows were swept: every file it had one for is written again (a deny on
            // a file whose watch went since watches it again).
            let mut f = s.files();
            f.book.all_unknown();
            f.acked = 0;
        }
        let mut next: HashMap<i64, Watch> = HashMap::with_capacity(watches.len());
        for &(inode, id) in watches {
            let recorded = g
                .watched
                .get(&inode)
                .is_some_and(|w| w.id == id && w.recorded);
            next.insert(inode, Watch { id, recorded });
        }
        // A watch this head took after the heartbeat's read stays marked.
        for (inode, w) in &g.watched {
            if w.id > seen && !next.contains_key(inode) {
                next.insert(*inode, *w);
            }
        }
        let dropped: Vec<i64> = g
            .watched
            .keys()
            .filter(|i| !next.contains_key(i))
            .copied()
            .collect();
        if !dropped.is_empty() {
            // Their watch went with every head's rows of them.
            let mut f = s.files();
            for i in &dropped {
                f.book.forget(*i);
            }
        }
        g.watched = next;
        g.watched
            .iter()
            .filter(|(_, w)| !w.recorded && w.id <= seen)
            .map(|(i, _)| *i)
            .collect()
    };
    for inode in &todo {
        tokio::time::timeout(limits::OPERATION_TIMEOUT, record(inner, head, *inode, true))
            .await
            .unwrap_or(Err(Fail::Timeout))?;
        if let Some(w) = s.gate_mut().watched.get_mut(inode) {
            w.recorded = true;
        }
    }
    if seen > s.acked() || fresh {
        let c = inner.engines.pool.get().await?;
        COUNTERS.transactions(1);
        c.execute(
            "UPDATE lock_heads SET share_acked = GREATEST(share_acked, $2) WHERE head = $1",
            &[&head, &seen],
        )
        .await?;
        let mut f = s.files();
        f.acked = f.acked.max(seen);
    }
    Ok(())
}

/// The keeper's part: records the files whose rows fell behind.
pub(crate) async fn keep(inner: &Inner, head: i64) {
    let dirty = inner.shares.files().book.take_dirty();
    for inode in dirty {
        let r = tokio::time::timeout(limits::OPERATION_TIMEOUT, record(inner, head, inode, false))
            .await
            .unwrap_or_else(|_| {
                inner.shares.failed(inode);
                Err(Fail::Timeout)
            });
        if let Err(e) = r {
            inner.engines.failed(e);
        }
    }
}
