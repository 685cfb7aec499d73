//! The object backend: metadata in PostgreSQL, file data in an S3 store, so several
//! granary heads serve one namespace (issue 29; docs/OBJECT.md).
//!
//! - [`config`]: where the engines are and their secrets (never logged);
//! - `engine`: the database pool, the S3 client, and how a synchronous call waits for
//!   them on the blocking pool (never on a network worker) within a timeout, an outage
//!   answering `Jukebox`;
//! - `schema`: tables keyed by inode id, the migration and [`format`];
//! - `meta`: one transaction per metadata operation, row locks in one order;
//! - `cache`: slice maps (checked against `inodes.version`) and object bytes a head keeps;
//! - `data`, `pending`: slices, reads, UNSTABLE writes buffered per head and the publish
//!   protocol (objects first, then rows, reply after the commit);
//! - `rope`: object bytes held as shared pieces, so a WRITE's bytes are copied once on
//!   their way to S3 and a GET's once on their way into a READ's reply;
//! - `gc`: garbage collection of dead objects and compaction, safe against reads in
//!   flight on other heads (a grace in the database's time);
//! - `heads`: byte-range locks across heads (the [`vfs::HeadLocks`] seam): what each
//!   head's lock manager holds, kept per file in the database and checked by every head
//!   before it grants;
//! - `shares`: share reservations across heads (the [`vfs::HeadShares`] seam): what each
//!   head's holders have and deny, kept per file only while some head denies there, so
//!   an OPEN that denies nothing costs the database nothing more;
//! - [`probe`]: the engines' own limits (transactions/s of CREATE's statements, S3
//!   PUT/GET throughput), for `granary bench --suite object`;
//! - [`limits`]: every bound, with why.
//!
//! [`engine_counters`] says what this process asked of the engines (database
//! transactions, S3 requests and bytes): the `granary_object_*` metrics.
//!
//! What this backend promises beyond the [`vfs::Backend`] contract: a handle (inode id and
//! the export's incarnation, which lives in the database) resolves on every head that
//! shares the handle key; a change of names or attributes committed on one head is seen
//! by the next call on any head; data follows once published (COMMIT, a FILE_SYNC write,
//! or the publish timer).
#![forbid(unsafe_code)]

mod book;
mod cache;
pub mod config;
mod data;
mod engine;
mod gc;
mod heads;
pub mod limits;
mod meta;
mod pending;
pub mod probe;
mod rope;
mod schema;
mod shares;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use gtime::{Clock, Timestamp};
use vfs::{
    Attr, Change, Checks, Cookie, CreateMode, Created, DirPage, FileId, FileType, Found, FsError,
    FsProperties, FsResult, FsStat, Linked, Name, PreAttr, ReadDone, ReadParts, Renamed, SetAttr,
    SpecialFile, Stability, Written,
};

pub use cache::CacheHits;
pub use config::{Credentials, GcConfig, ObjectConfig, StoreUrl, TestEngines};
use engine::{transaction, Engines, Fail, Sql, COUNTERS};
pub use gc::{Audit, GcReport};
use meta::{to_db, Make};
use pending::{Full, Pending};

/// What this process (one head) asked of its engines since it started, over all its
/// object exports. Served as the `granary_object_*` metrics; `granary bench --suite
/// object` reads them before and after each phase and divides by the NFS operations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineCounters {
    /// Database transactions begun: each try of a metadata operation's or a publish's
    /// transaction, and each statement sent outside one (a read: PostgreSQL runs it as a
    /// transaction of its own).
    pub db_transactions: u64,
    /// Transactions run again after a serialization failure, a deadlock or a race.
    pub db_retries: u64,
    /// Statements prepared (a round trip each): once per pool connection and statement
    /// text, so a steady load prepares none.
    pub db_prepares: u64,
    /// Statements sent, BEGIN, COMMIT and ROLLBACK included (prepares not).
    pub db_statements: u64,
    /// Round trips to the database: the times a request waited for its answer
    /// (statements sent together count once; a prepare once).
    pub db_round_trips: u64,
    /// The head's background writes: its ctime floor and, once it took a byte-range
    /// lock, its lock lease's heartbeat (each a transaction, a statement and a round
    /// trip, counted in the fields above too): what tests subtract.
    pub db_floor_writes: u64,
    /// S3 PUT requests and the bytes they carried.
    pub s3_puts: u64,
    pub s3_put_bytes: u64,
    /// S3 GET requests (ranged) and the bytes they returned.
    pub s3_gets: u64,
    pub s3_get_bytes: u64,
    /// NFS operations answered `Jukebox` (NFS3ERR_JUKEBOX, NFS4ERR_DELAY): an engine out
    /// or past the timeout, or a file whose last publish failed a moment ago.
    pub jukebox: u64,
}

/// This process's [`EngineCounters`] now.
#[must_use]
pub fn engine_counters() -> EngineCounters {
    COUNTERS.snapshot()
}

/// What one head shares with its background tasks.
pub(crate) struct Inner {
    engines: Engines,
    pending: Pending,
    /// Slice maps and object bytes (`cache`): validated, never stale.
    caches: cache::Caches,
    clock: Arc<dyn Clock>,
    /// The highest `now` this head handed to a change, and the floor read at start: no
    /// stamp this head gives is below it (seed 000's floor, kept in the database).
    floor_ns: AtomicI64,
    gc: GcConfig,
    /// A round of [`gc`] runs on this head now.
    gc_running: AtomicBool,
    /// Where the orphan sweep's listing goes on from.
    gc_cursor: Mutex<Option<object_store::path::Path>>,
    /// Where compaction's candidates go on from: the last file a round took, as
    /// (`slice_count`, `id`), most slices first.
    compact_cursor: Mutex<Option<(i64, i64)>>,
    /// Byte-range locks across heads (`heads`).
    heads: heads::Heads,
    /// Share reservations across heads (`shares`).
    shares: shares::Shares,
}

impl Inner {
    fn gc_cursor(&self) -> Option<object_store::path::Path> {
        self.gc_cursor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set_gc_cursor(&self, at: Option<object_store::path::Path>) {
        *self
            .gc_cursor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = at;
    }

    fn compact_cursor(&self) -> Option<(i64, i64)> {
        *self
            .compact_cursor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set_compact_cursor(&self, at: Option<(i64, i64)>) {
        *self
            .compact_cursor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = at;
    }

    /// The time a change is stamped with: the clock, never below the floor.
    fn now_ns(&self) -> i64 {
        let clock = meta::ns(self.clock.now());
        self.floor_ns.fetch_max(clock, Ordering::AcqRel).max(clock)
    }

    /// `attr`, a row as the database holds it, as this head's clients see it: the
    /// published size and times, moved by the writes this head still holds (whose stamp
    /// a change committed by another head moves: [`pending::Pending::observe`]).
    fn overlay(&self, attr: Attr) -> Attr {
        let file = to_db(attr.fileid);
        let held = self.pending.observe(file, meta::ns(attr.ctime));
        lay(attr, held)
    }

    /// `attr`, already as this head's clients saw it (its ctime may be a stamp), with the
    /// writes this head holds now.
    fn lay_over(&self, attr: Attr) -> Attr {
        let held = self.pending.overlay(to_db(attr.fileid));
        lay(attr, held)
    }
}

/// `attr` with the end and the stamp of a file's buffered writes, if it has any.
fn lay(mut attr: Attr, held: Option<(u64, i64)>) -> Attr {
    if let Some((end, stamp)) = held {
        attr.size_bytes = attr.size_bytes.max(end);
        attr.used_bytes = attr.size_bytes;
        let stamp = meta::ts(stamp);
        if stamp > attr.ctime {
            attr.ctime = stamp;
            attr.mtime = stamp;
        }
    }
    attr
}

/// An object file system served by this head.
pub struct ObjectFs {
    inner: Arc<Inner>,
    root: FileId,
    incarnation: u32,
    /// Shut down (in the background) when the backend is dropped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for ObjectFs {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Creates the schema and the root directory in the database `config` names, if it has
/// none (`granary format`). Returns true if it created them.
///
/// # Errors
/// The engines cannot be reached, or the database holds a schema of another version.
pub fn format(config: &ObjectConfig, clock: Arc<dyn Clock>) -> Result<bool, String> {
    let (runtime, engines) = Engines::new(config)?;
    let now = meta::ns(clock.now());
    let made = runtime.block_on(async {
        let mut client = engines.pool.get().await.map_err(Fail::from)?;
        schema::format(&mut client, now).await
    });
    runtime.shutdown_background();
    made.map_err(|e| format!("cannot format the object file system: {}", describe(&e)))
}

fn describe(e: &Fail) -> String {
    match e {
        Fail::Fs(e) => e.to_string(),
        Fail::Db(e) => format!("database: {}", engine::describe_db(e)),
        Fail::Pool(e) => format!("database: {e}"),
        Fail::Store(e) => format!("S3 store: {e}"),
        Fail::Raced => "a concurrent change".to_string(),
        Fail::DirMove => "a directory move without the rename lock".to_string(),
        Fail::Timeout => "no answer in time".to_string(),
        Fail::Resting => "its last publish failed a moment ago".to_string(),
        Fail::Refused(why) => why.clone(),
    }
}

impl ObjectFs {
    /// Connects to the engines, creating the schema and root on first start, and starts
    /// the publish timer and the floor writer.
    ///
    /// # Errors
    /// The engines cannot be reached or the database's schema is of another version, said
    /// for a person (no secret in it).
    pub fn open(config: &ObjectConfig, clock: Arc<dyn Clock>) -> Result<Self, String> {
        let (runtime, engines) = Engines::new(config)?;
        let now = meta::ns(clock.now());
        let started = runtime.block_on(async {
            let mut client = engines.pool.get().await.map_err(Fail::from)?;
            schema::format(&mut client, now).await?;
            schema::read_meta(&client).await
        });
        let m = started.map_err(|e| format!("object backend: {}", describe(&e)))?;
        let inner = Arc::new(Inner {
            engines,
            pending: Pending::default(),
            caches: cache::Caches::default(),
            clock,
            floor_ns: AtomicI64::new(m.ctime_floor_ns),
            gc: config.gc,
            gc_running: AtomicBool::new(false),
            gc_cursor: Mutex::new(None),
            compact_cursor: Mutex::new(None),
            heads: heads::Heads::new(config.lock_lease),
            shares: shares::Shares::new(),
        });
        runtime.spawn(publisher(Arc::clone(&inner)));
        runtime.spawn(floor_writer(Arc::clone(&inner), m.ctime_floor_ns));
        Ok(Self {
            inner,
            root: FileId(u64::try_from(m.root).unwrap_or(0)),
            incarnation: m.incarnation,
            runtime: Some(runtime),
        })
    }

    /// How often this head's caches answered instead of the engines.
    #[must_use]
    pub fn cache_hits(&self) -> CacheHits {
        self.inner.caches.hits()
    }

    /// The export's incarnation, shared by every head (kept in the database): a handle of
    /// another file system (a database formatted anew) is STALE.
    #[must_use]
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// Publishes every file's buffered writes now (tests, and a clean shutdown).
    ///
    /// # Errors
    /// As a COMMIT.
    pub fn publish_all(&self) -> FsResult<()> {
        let inner = &self.inner;
        let files = inner
            .pending
            .older_than(inner.clock.monotonic(), std::time::Duration::ZERO);
        self.run(async move {
            for f in files {
                data::publish(inner, f).await?;
            }
            Ok(())
        })
    }

    fn run<T: Send>(
        &self,
        fut: impl std::future::Future<Output = Result<T, Fail>> + Send,
    ) -> FsResult<T> {
        self.inner.engines.run(fut)
    }

    /// Runs one round of garbage collection and compaction now and waits for it (tests,
    /// and an operator's command). A round of another head in progress makes this one
    /// a no-op (`skipped`).
    ///
    /// # Errors
    /// An engine outage (`Jukebox`) or a refused statement.
    pub fn gc_round(&self) -> FsResult<GcReport> {
        let inner = &self.inner;
        self.inner
            .engines
            .run_within(limits::GC_ROUND_TIMEOUT, gc::round(inner, &inner.gc))
    }

    /// Time between this head's rounds (`None`: it runs none).
    #[must_use]
    pub fn gc_interval(&self) -> Option<std::time::Duration> {
        Some(self.inner.gc.interval).filter(|d| !d.is_zero())
    }

    /// Starts a round in the background unless one of this head's is still running, and
    /// returns at once: what the server's timer (seed 002) calls every
    /// [`ObjectFs::gc_interval`], from a worker that must not wait on the network.
    pub fn gc_tick(&self) {
        let inner = Arc::clone(&self.inner);
        if inner.gc_running.swap(true, Ordering::AcqRel) {
            return;
        }
        self.inner.engines.spawn(async move {
            let done =
                tokio::time::timeout(limits::GC_ROUND_TIMEOUT, gc::round(&inner, &inner.gc)).await;
            match done {
                Ok(Ok(r)) if r == GcReport::default() => {}
                Ok(Ok(r)) => tracing::info!(
                    skipped = r.skipped,
                    compacted_files = r.compacted_files,
                    slices_before = r.slices_before,
                    slices_after = r.slices_after,
                    passes = r.compaction_passes,
                    largest_pass_bytes = r.largest_pass_bytes,
                    dropped = r.compactions_dropped,
                    unnamed_found = r.unnamed_found,
                    objects_deleted = r.objects_deleted,
                    "object backend: garbage collection round"
                ),
                Ok(Err(e)) => {
                    // An outage is said once (`failed`); anything else, per round.
                    if !matches!(inner.engines.failed(e), vfs::FsError::Jukebox) {
                        tracing::warn!("object backend: garbage collection round failed; the next one tries again");
                    }
                }
                Err(_) => tracing::warn!("object backend: garbage collection round ran out of time; the next one goes on"),
            }
            inner.gc_running.store(false, Ordering::Release);
        });
    }

    /// Lists the store and the rows and says what each lacks (tests and operators; a
    /// whole listing of the bucket prefix).
    ///
    /// # Errors
    /// An engine outage.
    pub fn audit(&self) -> FsResult<Audit> {
        let inner = &self.inner;
        self.inner
            .engines
            .run_within(limits::GC_ROUND_TIMEOUT, gc::audit(inner))
    }

    /// Rows of `file` in the `slices` table and objects they name (tests and docs).
    ///
    /// # Errors
    /// As GETATTR.
    pub fn slice_counts(&self, file: FileId) -> FsResult<(u64, u64)> {
        let inner = &self.inner;
        self.run(async move {
            let c = inner.engines.pool.get().await?;
            let row = c
                .query_one(
                    "SELECT count(*), count(DISTINCT object) FROM slices WHERE file = $1",
                    &[&to_db(file)],
                )
                .await?;
            let n = |i| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
            Ok((n(0), n(1)))
        })
    }
}

/// The publish timer: buffered writes older than [`limits::PUBLISH_AGE`] are published
/// without a COMMIT. A failure keeps them buffered for the next round.
async fn publisher(inner: Arc<Inner>) {
    loop {
        tokio::time::sleep(limits::PUBLISH_INTERVAL).await;
        let now = inner.clock.monotonic();
        for file in inner.pending.older_than(now, limits::PUBLISH_AGE) {
            // Bounded like an operation: the collector's grace counts on every upload
            // being committed or abandoned within one timeout.
            let bounded =
                tokio::time::timeout(limits::OPERATION_TIMEOUT, data::publish(&inner, file));
            let done = bounded.await.unwrap_or(Err(Fail::Timeout));
            if let Err(e) = done {
                // An outage is said once, not once per file and try; the data stays
                // buffered for the next try.
                inner.engines.failed(e);
            }
        }
    }
}

/// Writes the floor this head handed out to the database now and then, so a head that
/// starts later never stamps below it.
async fn floor_writer(inner: Arc<Inner>, mut written: i64) {
    loop {
        tokio::time::sleep(limits::FLOOR_PERSIST_INTERVAL).await;
        let floor = inner.floor_ns.load(Ordering::Acquire);
        if floor <= written {
            continue;
        }
        let Ok(c) = inner.engines.pool.get().await else {
            continue;
        };
        COUNTERS.transactions(1);
        COUNTERS.floor_written();
        let r = c
            .execute(
                "UPDATE granary_meta SET ctime_floor_ns = GREATEST(ctime_floor_ns, $1)",
                &[&floor],
            )
            .await;
        if r.is_ok() {
            written = floor;
        }
    }
}

/// A pooled connection as a plain client, for `$statements` statements sent outside a
/// transaction (each one a transaction of its own, counted as such).
macro_rules! client {
    ($inner:expr, $statements:expr) => {{
        let c = $inner.engines.pool.get().await?;
        COUNTERS.transactions($statements);
        c
    }};
}

impl vfs::HeadLocks for ObjectFs {
    fn attach(&self, source: vfs::LockSource) {
        self.inner.heads.attach(source);
    }

    fn lock(
        &self,
        id: FileId,
        want: vfs::LockSpan,
        grant: &mut dyn FnMut(),
    ) -> FsResult<Option<vfs::HeadLock>> {
        heads::lock(&self.inner, id, want, grant)
    }

    fn test(&self, id: FileId, want: vfs::LockSpan) -> FsResult<Option<vfs::HeadLock>> {
        heads::test(&self.inner, id, want)
    }

    fn changed(&self, id: Option<FileId>) {
        self.inner.heads.changed(id);
    }

    fn settle(&self, id: FileId, release: &mut dyn FnMut()) -> FsResult<()> {
        heads::settle(&self.inner, id, release)
    }

    fn on_freed(&self, freed: vfs::LockFreed) {
        self.inner.heads.on_freed(freed);
    }

    fn notices(&self) -> u64 {
        self.inner.heads.notices()
    }

    fn watch(&self, id: FileId, since: u64) {
        self.inner.heads.watch(id, since);
    }

    fn unwatch(&self, id: FileId) {
        self.inner.heads.unwatch(id);
    }
}

impl vfs::HeadShares for ObjectFs {
    fn attach(&self, source: vfs::ShareSource) {
        self.inner.shares.attach(source);
    }

    fn share(
        &self,
        id: FileId,
        want: vfs::ShareMode,
        grant: &mut dyn FnMut(),
    ) -> FsResult<Option<vfs::HeadShare>> {
        shares::share(&self.inner, id, want, grant)
    }

    fn changed(&self, id: Option<FileId>) {
        self.inner.shares.changed(&self.inner, id);
    }

    fn settle(&self, id: FileId, release: &mut dyn FnMut()) -> FsResult<()> {
        shares::settle(&self.inner, id, release)
    }
}

impl vfs::Backend for ObjectFs {
    fn kind(&self) -> &'static str {
        "object"
    }

    fn head_locks(&self) -> Option<&dyn vfs::HeadLocks> {
        Some(self)
    }

    fn head_shares(&self) -> Option<&dyn vfs::HeadShares> {
        Some(self)
    }

    fn root(&self) -> FileId {
        self.root
    }

    fn remote(&self) -> bool {
        true
    }

    fn properties(&self) -> FsProperties {
        FsProperties {
            stable_ids: true,
            max_file_size: vfs::limits::MAX_FILE_SIZE,
            time_granularity_ns: 1,
            supports_hard_links: true,
            supports_symlinks: true,
            max_links: vfs::limits::MAX_LINKS,
            max_name_bytes: u32::try_from(vfs::limits::MAX_NAME_BYTES).unwrap_or(255),
            case_insensitive: false,
            case_preserving: true,
            read_only: false,
        }
    }

    fn fsstat(&self) -> FsResult<FsStat> {
        let inner = &self.inner;
        let files = self.run(async move {
            let c = client!(inner, 1);
            let row = c
                .query_one(
                    "SELECT GREATEST(reltuples, 0)::bigint FROM pg_class WHERE relname = 'inodes'",
                    &[],
                )
                .await?;
            Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
        })?;
        // An S3 store has no fixed size: report a large one (1 PiB, 2^40 files).
        let total_bytes = 1u64 << 50;
        let total_files = 1u64 << 40;
        Ok(FsStat {
            total_bytes,
            free_bytes: total_bytes,
            avail_bytes: total_bytes,
            total_files,
            free_files: total_files - files.min(total_files),
            avail_files: total_files - files.min(total_files),
        })
    }

    fn getattr(&self, id: FileId) -> FsResult<Attr> {
        let inner = &self.inner;
        self.run(async move {
            let c = client!(inner, 1);
            let attr = meta::get(&c, to_db(id)).await?.attr;
            Ok(inner.overlay(attr))
        })
    }

    fn setattr(
        &self,
        id: FileId,
        set: &SetAttr,
        guard: Option<Timestamp>,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        let inner = &self.inner;
        let file = to_db(id);
        let now = inner.now_ns();
        self.run(async move {
            // A guard is the ctime this head's clients were told: with its buffered writes.
            let told = inner.pending.overlay(file).map(|(_, stamp)| stamp);
            // Under the row's lock, its checks passed, before the commit (see `truncated`).
            let cut = |size| truncated(inner, file, size);
            let (mut change, _) = transaction!(inner.engines.pool, |tx| {
                meta::setattr(&tx, file, set, guard, told, checks, now, &cut).await
            })?;
            // This head's clients see the size its buffered writes make.
            change.after = inner.overlay(change.after);
            Ok(change)
        })
    }

    fn lookup(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Found> {
        let inner = &self.inner;
        self.run(async move {
            let c = client!(inner, 1);
            let (child, d) = meta::lookup(&c, to_db(dir), name, checks).await?;
            Ok(Found {
                attr: inner.overlay(child.attr),
                dir: d.attr,
            })
        })
    }

    fn parent(&self, dir: FileId, checks: &dyn Checks) -> FsResult<Found> {
        let inner = &self.inner;
        self.run(async move {
            let c = client!(inner, 1);
            let (p, d) = meta::parent(&c, to_db(dir), checks).await?;
            Ok(Found {
                attr: p.attr,
                dir: d.attr,
            })
        })
    }

    fn read_into(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        out: &mut BytesMut,
        checks: &dyn Checks,
    ) -> FsResult<ReadDone> {
        let (done, bytes) = self.read_rope(id, offset_bytes, count, checks)?;
        bytes.extend_into(out);
        Ok(done)
    }

    /// The bytes as the head holds them (pieces of cached objects, see `rope`): the
    /// reply carries them uncopied.
    fn read_shared(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        checks: &dyn Checks,
    ) -> FsResult<Option<ReadParts>> {
        let (done, bytes) = self.read_rope(id, offset_bytes, count, checks)?;
        Ok(Some(ReadParts {
            parts: bytes.into_parts(),
            done,
        }))
    }

    fn write(
        &self,
        id: FileId,
        offset_bytes: u64,
        data: &[u8],
        stable: Stability,
        checks: &dyn Checks,
    ) -> FsResult<Written> {
        // Copied only where the call goes on (on a network worker it answers WouldBlock).
        if !sync::blocking::allowed() {
            return Err(FsError::WouldBlock);
        }
        let data = Bytes::copy_from_slice(data);
        self.write_shared(id, offset_bytes, &data, stable, checks)
    }

    /// A WRITE's bytes are buffered as the request holds them: no copy (see `rope`).
    fn write_shared(
        &self,
        id: FileId,
        offset_bytes: u64,
        data: &Bytes,
        stable: Stability,
        checks: &dyn Checks,
    ) -> FsResult<Written> {
        let inner = &self.inner;
        let file = to_db(id);
        offset_bytes
            .checked_add(data.len() as u64)
            .filter(|&end| end <= vfs::limits::MAX_FILE_SIZE)
            .ok_or(FsError::FBig)?;
        let now = inner.now_ns();
        self.run(async move {
            let before = check_write(inner, file, checks, now).await?;
            // The ctime as the checks read it (the row's, for a file with no buffered
            // writes yet): the write's stamp comes after it.
            let row = meta::ns(before.ctime);
            let stamp = now.max(row.saturating_add(1));
            let mono = inner.clock.monotonic();
            let mut tries = 0;
            while let Err(full) = inner
                .pending
                .add(file, offset_bytes, data, mono, stamp, row)
            {
                tries += 1;
                if full == Full::Head || tries > limits::WRITE_PUBLISH_TRIES {
                    // Other files fill the head's buffer (the publisher drains it), or
                    // other writers of this file kept refilling it.
                    return Err(Fail::Fs(FsError::Jukebox));
                }
                // This file's open data is full: publish it (the writer waits for the
                // upload: back-pressure). Others may write while it uploads, and may have
                // filled it again by the time this one is back: publish again.
                data::make_room(inner, file, data.len()).await?;
            }
            if stable == Stability::Unstable {
                let after = inner.lay_over(before.clone());
                return Ok(Written {
                    count: u32::try_from(data.len()).unwrap_or(u32::MAX),
                    committed: Stability::Unstable,
                    file: Change {
                        before: Some(PreAttr::of(&before)),
                        after,
                    },
                });
            }
            let after = match data::publish(inner, file).await? {
                Some(row) => inner.overlay(row.attr),
                None => inner.overlay(meta::get(&client!(inner, 1), file).await?.attr),
            };
            Ok(Written {
                count: u32::try_from(data.len()).unwrap_or(u32::MAX),
                committed: Stability::FileSync,
                file: Change {
                    before: Some(PreAttr::of(&before)),
                    after,
                },
            })
        })
    }

    fn commit(&self, id: FileId, _offset_bytes: u64, _count: u32) -> FsResult<Change> {
        let inner = &self.inner;
        let file = to_db(id);
        self.run(async move {
            let before = inner.overlay(meta::get(&client!(inner, 1), file).await?.attr);
            match before.file_type {
                FileType::Regular => {}
                FileType::Directory => return Err(Fail::Fs(FsError::IsDir)),
                _ => return Err(Fail::Fs(FsError::Inval)),
            }
            let after = match data::publish(inner, file).await? {
                Some(row) => inner.overlay(row.attr),
                None => before.clone(),
            };
            Ok(Change {
                before: Some(PreAttr::of(&before)),
                after,
            })
        })
    }

    fn create(
        &self,
        dir: FileId,
        name: &Name,
        mode: &CreateMode,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        self.make(dir, name, &Make::File(mode), checks)
    }

    fn mkdir(
        &self,
        dir: FileId,
        name: &Name,
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        self.make(dir, name, &Make::Dir(attrs), checks)
    }

    fn symlink(
        &self,
        dir: FileId,
        name: &Name,
        target: &[u8],
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        if target.len() > vfs::limits::MAX_PATH_BYTES {
            return Err(FsError::NameTooLong);
        }
        self.make(dir, name, &Make::Symlink(target, attrs), checks)
    }

    fn mknod(
        &self,
        dir: FileId,
        name: &Name,
        kind: SpecialFile,
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        self.make(dir, name, &Make::Special(kind, attrs), checks)
    }

    fn readlink(&self, id: FileId) -> FsResult<(Bytes, Attr)> {
        let inner = &self.inner;
        self.run(async move { meta::readlink(&client!(inner, 1), to_db(id)).await })
    }

    fn remove(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Change> {
        self.remove_entry(dir, name, false, checks)
    }

    fn rmdir(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Change> {
        self.remove_entry(dir, name, true, checks)
    }

    fn rename(
        &self,
        from_dir: FileId,
        from: &Name,
        to_dir: FileId,
        to: &Name,
        checks: &dyn Checks,
    ) -> FsResult<Renamed> {
        let inner = &self.inner;
        let now = inner.now_ns();
        let (from_dir, to_dir) = (to_db(from_dir), to_db(to_dir));
        let moved = self.run(async move {
            // A directory moved to another parent is found out under the row locks, and
            // run again taking the rename lock first (`meta::rename`).
            let mut dir_move = false;
            loop {
                let tried = transaction!(inner.engines.pool, |tx| {
                    meta::rename(&tx, from_dir, from, to_dir, to, checks, now, dir_move).await
                });
                match tried {
                    Err(Fail::DirMove) if !dir_move => dir_move = true,
                    done => break done,
                }
            }
        })?;
        if let Some(gone) = moved.gone {
            inner.pending.drop_file(gone);
        }
        Ok(moved.renamed)
    }

    fn link(&self, id: FileId, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Linked> {
        let inner = &self.inner;
        let now = inner.now_ns();
        let mut linked = self.run(async move {
            transaction!(inner.engines.pool, |tx| {
                meta::link(&tx, to_db(id), to_db(dir), name, checks, now).await
            })
        })?;
        linked.attr = inner.overlay(linked.attr);
        Ok(linked)
    }

    fn readdir(
        &self,
        dir: FileId,
        cookie: Cookie,
        max_entries: usize,
        checks: &dyn Checks,
    ) -> FsResult<(DirPage, Attr)> {
        let inner = &self.inner;
        let (mut page, attr) = self.run(async move {
            meta::readdir(&client!(inner, 1), to_db(dir), cookie, max_entries, checks).await
        })?;
        // As GETATTR would answer on this head: with its buffered writes.
        for e in &mut page.entries {
            e.attr = e.attr.take().map(|a| inner.overlay(a));
        }
        Ok((page, attr))
    }
}

impl ObjectFs {
    /// READ: the file's row and slices in one statement (`cache::row_and_slices`), the
    /// checks, then the bytes from the caches or S3 with this head's buffered writes over
    /// them. A long READ, or one of a sequential stream, reads whole objects and starts
    /// the read-ahead.
    fn read_rope(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        checks: &dyn Checks,
    ) -> FsResult<(ReadDone, rope::Rope)> {
        let inner = &self.inner;
        let file = to_db(id);
        self.run(async move {
            let c = client!(inner, 1);
            // Past any file's end when it is past i64 (the READ then answers eof).
            let start = i64::try_from(offset_bytes).unwrap_or(i64::MAX);
            let range = (start, start.saturating_add(i64::from(count)));
            let found = cache::row_and_slices(inner, &c, file, range).await?;
            let attr = inner.overlay(found.row.attr.clone());
            match attr.file_type {
                FileType::Regular => {}
                FileType::Directory => return Err(Fail::Fs(FsError::IsDir)),
                _ => return Err(Fail::Fs(FsError::Inval)),
            }
            checks.may_read(&attr)?;
            let size = attr.size_bytes;
            if offset_bytes >= size {
                return Ok((ReadDone { attr, eof: true }, rope::Rope::default()));
            }
            let len = usize::try_from((size - offset_bytes).min(u64::from(count))).unwrap_or(0);
            let end = offset_bytes + len as u64;
            let streaming = inner.caches.sequential(file, offset_bytes, end);
            let long = streaming || len >= limits::WHOLE_SLICE_READ_MIN_BYTES;
            let eof = end >= size;
            if !eof && long {
                // Started first, so the next objects come while this READ waits for its
                // own (which the read-ahead may share).
                let map = found.map.as_deref().map(Vec::as_slice);
                cache::read_ahead(inner, map, i64::try_from(end).unwrap_or(i64::MAX));
            }
            let bytes = cache::read(inner, &c, file, &found, long, (offset_bytes, len)).await?;
            let bytes = inner.pending.read_over_rope(file, offset_bytes, bytes);
            Ok((ReadDone { attr, eof }, bytes))
        })
    }

    fn make(
        &self,
        dir: FileId,
        name: &Name,
        what: &Make<'_>,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        let inner = &self.inner;
        let now = inner.now_ns();
        let made = self.run(async move {
            transaction!(inner.engines.pool, |tx| {
                let made = meta::make(&tx, to_db(dir), name, what, checks, now).await?;
                if let Some(size) = made.truncated_to {
                    truncated(inner, to_db(made.created.attr.fileid), size);
                }
                Ok(made)
            })
        })?;
        let mut created = made.created;
        created.attr = inner.overlay(created.attr);
        Ok(created)
    }

    fn remove_entry(
        &self,
        dir: FileId,
        name: &Name,
        rmdir: bool,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        let inner = &self.inner;
        let now = inner.now_ns();
        let removed = self.run(async move {
            transaction!(inner.engines.pool, |tx| {
                meta::remove(&tx, to_db(dir), name, rmdir, checks, now).await
            })
        })?;
        if let Some(gone) = removed.gone {
            inner.pending.drop_file(gone);
        }
        Ok(removed.dir)
    }
}

/// A truncation of `file` to `size` is about to commit: the buffered writes it cuts go,
/// and so do the bytes a publish in progress took there (`Pending::cut`). Called in the
/// truncating transaction, once it holds the file's row and its checks passed, before its
/// commit: a refused truncation drops nothing, and a publish of this head, whose
/// transaction reads the cut once it holds the row, commits after the truncation and
/// none of the bytes it removed. (Should that commit then fail, the client is told
/// JUKEBOX and sends the truncation again; the bytes past the size are gone already.)
fn truncated(inner: &Inner, file: i64, size: u64) {
    inner.pending.truncate(file, size);
}

/// WRITE's checks on file `id`: a regular file the caller may write. Clears set-id bits
/// in one transaction when the checks say so. Returns the attributes checked.
async fn check_write(
    inner: &Inner,
    file: i64,
    checks: &dyn Checks,
    now: i64,
) -> Result<Attr, Fail> {
    let attr = inner.overlay(meta::get(&client!(inner, 1), file).await?.attr);
    match attr.file_type {
        FileType::Regular => {}
        FileType::Directory => return Err(Fail::Fs(FsError::IsDir)),
        _ => return Err(Fail::Fs(FsError::Inval)),
    }
    let Some(mode) = checks.may_write(&attr)? else {
        return Ok(attr);
    };
    let set = SetAttr {
        mode: Some(mode),
        ..SetAttr::default()
    };
    let (change, _) = transaction!(inner.engines.pool, |tx| {
        meta::setattr(
            &tx,
            file,
            &set,
            None,
            None,
            &vfs::Trusted::ROOT,
            now,
            &|_| {},
        )
        .await
    })?;
    Ok(inner.overlay(change.after))
}
