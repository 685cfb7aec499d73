//! The head's connections to its two engines, and how a synchronous backend call waits
//! for them without stalling a network worker.
//!
//! The vfs seam is synchronous. Every call of this backend talks to the database (and
//! some to the S3 store), so none may run on a worker's event loop: on such a thread
//! (`sync::blocking::allowed` false) a call answers [`FsError::WouldBlock`] before it
//! does anything, and the server runs it again on the worker's blocking pool (the
//! deferral the host backend's syncs use; the NFS front ends send every call on an
//! object export there at once, see `nfsd`; a debug build asserts that no call comes
//! from where a front end judged none would, `sync::blocking::remote_allowed`). On the
//! pool thread the call drives its
//! future on a small multi-thread runtime the
//! backend owns ([`limits::DRIVER_THREADS`] threads drive the sockets), bounded by
//! [`limits::OPERATION_TIMEOUT`]. The blocking pool's bound is the back-pressure; the
//! database pool's [`limits::POOL_CONNECTIONS`] bounds the connections.
//!
//! Failures of an engine (refused connection, timeout, an S3 error) answer
//! [`FsError::Jukebox`] (NFS3ERR_JUKEBOX, NFS4ERR_DELAY): the client retries later and the
//! head keeps serving the others. One line is logged when an engine goes away and one
//! when it answers again, not one per call (nor per file the publish timer tries); the
//! `Jukebox` answers are counted (`granary_object_jukebox_total`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use object_store::ObjectStore;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use vfs::{FsError, FsResult};

use crate::config::ObjectConfig;
use crate::limits;

/// The statements of the backend's operations, each sent through its connection's cache
/// of prepared statements (deadpool's `prepare_cached`). A statement given as text to
/// tokio-postgres's own `query` is prepared again on every call, which is a round trip
/// of its own (Parse and Describe) before the one that runs it; the SQL texts here are
/// a few dozen constants, so each connection prepares each one once. Implemented for a
/// pool connection and for a transaction on one; the method names are tokio-postgres's,
/// so the operations read as before.
pub(crate) trait Sql {
    fn query<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'a;
    fn query_one<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Row, tokio_postgres::Error>> + Send + 'a;
    fn query_opt<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Option<Row>, tokio_postgres::Error>> + Send + 'a;
    fn execute<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64, tokio_postgres::Error>> + Send + 'a;
    /// The last statement of a transaction, sent together with its COMMIT (one round trip
    /// for both, [`Tx`]); nothing may follow it. Where the statement fails, PostgreSQL
    /// takes the COMMIT for a ROLLBACK, and the statement's error is the answer. Outside a
    /// [`Tx`] it is [`Sql::query`] (the caller's transaction, if any, commits later).
    fn query_and_commit<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'a {
        self.query(sql, params)
    }
}

/// The statement `prepare` makes, counting it in [`COUNTERS`] (a prepare and a round
/// trip) when `cache` did not hold it yet (a connection uses one operation at a time, so
/// the size tells).
async fn cached(
    cache: &deadpool_postgres::StatementCache,
    prepare: impl Future<Output = Result<tokio_postgres::Statement, tokio_postgres::Error>>,
) -> Result<tokio_postgres::Statement, tokio_postgres::Error> {
    let before = cache.size();
    let statement = prepare.await?;
    if cache.size() > before {
        COUNTERS.db_prepares.fetch_add(1, Ordering::Relaxed);
        COUNTERS.db_round_trips.fetch_add(1, Ordering::Relaxed);
    }
    Ok(statement)
}

/// [`Sql`] for a type with `prepare_cached` that derefs to tokio-postgres's `$inner`.
macro_rules! cached_sql {
    ($ty:ty, $inner:ty) => {
        impl Sql for $ty {
            async fn query<'a>(
                &'a self,
                sql: &'a str,
                params: &'a [&'a (dyn ToSql + Sync)],
            ) -> Result<Vec<Row>, tokio_postgres::Error> {
                let statement = cached(&self.statement_cache, self.prepare_cached(sql)).await?;
                COUNTERS.sent(1, 1);
                <$inner>::query(self, &statement, params).await
            }
            async fn query_one<'a>(
                &'a self,
                sql: &'a str,
                params: &'a [&'a (dyn ToSql + Sync)],
            ) -> Result<Row, tokio_postgres::Error> {
                let statement = cached(&self.statement_cache, self.prepare_cached(sql)).await?;
                COUNTERS.sent(1, 1);
                <$inner>::query_one(self, &statement, params).await
            }
            async fn query_opt<'a>(
                &'a self,
                sql: &'a str,
                params: &'a [&'a (dyn ToSql + Sync)],
            ) -> Result<Option<Row>, tokio_postgres::Error> {
                let statement = cached(&self.statement_cache, self.prepare_cached(sql)).await?;
                COUNTERS.sent(1, 1);
                <$inner>::query_opt(self, &statement, params).await
            }
            async fn execute<'a>(
                &'a self,
                sql: &'a str,
                params: &'a [&'a (dyn ToSql + Sync)],
            ) -> Result<u64, tokio_postgres::Error> {
                let statement = cached(&self.statement_cache, self.prepare_cached(sql)).await?;
                COUNTERS.sent(1, 1);
                <$inner>::execute(self, &statement, params).await
            }
        }
    };
}
cached_sql!(deadpool_postgres::Client, tokio_postgres::Client);
cached_sql!(
    deadpool_postgres::Transaction<'_>,
    tokio_postgres::Transaction<'_>
);

/// An operation's transaction on one pool connection, sent with as few round trips as
/// its statements allow: BEGIN goes with the first statement (tokio-postgres pipelines
/// requests whose futures are polled together, so the two cost one round trip), and the
/// COMMIT may go with the last one ([`Sql::query_and_commit`]). A transaction that sent
/// no statement sends neither. Dropped unfinished (a failure, or the operation's timeout),
/// it queues a ROLLBACK on its connection without waiting for the answer (as
/// tokio-postgres's own `Transaction` does): the connection goes back to the pool, and its
/// next user's first request travels behind the ROLLBACK.
pub(crate) struct Tx {
    client: deadpool_postgres::Client,
    /// BEGIN was sent.
    begun: AtomicBool,
    /// COMMIT was sent: the transaction is over.
    ended: AtomicBool,
}

impl Tx {
    pub(crate) fn new(client: deadpool_postgres::Client) -> Self {
        Self {
            client,
            begun: AtomicBool::new(false),
            ended: AtomicBool::new(false),
        }
    }

    /// The prepared statement of `sql` (from the connection's cache: no round trip once
    /// it is there). Prepared before anything is sent with it, so the statement itself
    /// never travels behind a COMMIT sent with it.
    async fn prepared(
        &self,
        sql: &str,
    ) -> Result<tokio_postgres::Statement, tokio_postgres::Error> {
        debug_assert!(
            !self.ended.load(Ordering::Relaxed),
            "a statement after COMMIT"
        );
        cached(
            &self.client.statement_cache,
            self.client.prepare_cached(sql),
        )
        .await
    }

    /// Sends `statement` (a future that sends its request when first polled), preceded
    /// by BEGIN if this is the transaction's first statement, and followed by COMMIT if
    /// `commit`: all in one round trip.
    async fn send<T>(
        &self,
        statement: impl Future<Output = Result<T, tokio_postgres::Error>>,
        commit: bool,
    ) -> Result<T, tokio_postgres::Error> {
        let begin = !self.begun.swap(true, Ordering::Relaxed);
        if commit {
            self.ended.store(true, Ordering::Relaxed);
        }
        COUNTERS.sent(1 + u64::from(begin) + u64::from(commit), 1);
        let client: &tokio_postgres::Client = &self.client;
        let control = |run: bool, sql: &'static str| async move {
            if run {
                client.batch_execute(sql).await
            } else {
                Ok(())
            }
        };
        // `join3` polls in order, so the requests go out as BEGIN, statement, COMMIT.
        let (begun, done, committed) = futures::future::join3(
            control(begin, "BEGIN"),
            statement,
            control(commit, "COMMIT"),
        )
        .await;
        begun?;
        let v = done?;
        committed?;
        Ok(v)
    }

    /// Commits (a round trip of its own) unless the last statement carried the COMMIT,
    /// or nothing was sent.
    pub(crate) async fn commit(self) -> Result<(), tokio_postgres::Error> {
        if !self.begun.load(Ordering::Relaxed) || self.ended.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        COUNTERS.sent(1, 1);
        self.client.batch_execute("COMMIT").await
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        if !self.begun.load(Ordering::Relaxed) || self.ended.load(Ordering::Relaxed) {
            return;
        }
        // tokio-postgres sends a request when its future is first polled; polled once
        // here and dropped, the ROLLBACK is queued on the connection and its answer
        // discarded.
        COUNTERS.sent(1, 0);
        use futures::FutureExt as _;
        drop(self.client.batch_execute("ROLLBACK").now_or_never());
    }
}

/// The [`Sql`] methods of [`Tx`] that send one statement without COMMIT: each prepares
/// (from the cache) and sends through [`Tx::send`], named after the
/// `tokio_postgres::Client` method that makes the request.
macro_rules! tx_statements {
    ($($method:ident -> $out:ty),* $(,)?) => {$(
        async fn $method<'a>(
            &'a self,
            sql: &'a str,
            params: &'a [&'a (dyn ToSql + Sync)],
        ) -> Result<$out, tokio_postgres::Error> {
            let s = self.prepared(sql).await?;
            self.send(tokio_postgres::Client::$method(&self.client, &s, params), false)
                .await
        }
    )*};
}

impl Sql for Tx {
    tx_statements!(
        query -> Vec<Row>,
        query_one -> Row,
        query_opt -> Option<Row>,
        execute -> u64,
    );
    async fn query_and_commit<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let s = self.prepared(sql).await?;
        self.send(
            tokio_postgres::Client::query(&self.client, &s, params),
            true,
        )
        .await
    }
}

/// Why an operation failed inside the backend, before it is told to the client as an
/// [`FsError`].
#[derive(Debug)]
pub(crate) enum Fail {
    /// A file-system answer (`NoEnt`, `Exist` …): the client's.
    Fs(FsError),
    /// The database said no, or could not be reached.
    Db(tokio_postgres::Error),
    /// No connection could be had from the pool in time.
    Pool(String),
    /// The S3 store failed.
    Store(object_store::Error),
    /// Rows read without a lock changed before they were locked: run the operation
    /// again (counted with the serialization failures).
    Raced,
    /// A rename found, under its row locks, that it moves a directory to another parent,
    /// which takes the rename lock before any row lock: run it again, taking that lock
    /// first (`meta::rename`).
    DirMove,
    /// The operation did not finish within [`limits::OPERATION_TIMEOUT`].
    Timeout,
    /// The file's last publish failed a moment ago: not tried again before its rest is
    /// over (`limits::PUBLISH_RETRY_MIN`).
    Resting,
    /// The engines hold what this head must not serve (a schema of a version it does not
    /// know), said for a person.
    Refused(String),
}

impl From<FsError> for Fail {
    fn from(e: FsError) -> Self {
        Self::Fs(e)
    }
}

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Db(e)
    }
}

impl From<deadpool_postgres::PoolError> for Fail {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => Self::Db(e),
            other => Self::Pool(other.to_string()),
        }
    }
}

impl From<object_store::Error> for Fail {
    fn from(e: object_store::Error) -> Self {
        Self::Store(e)
    }
}

impl Fail {
    /// A failure the same transaction may succeed at when run again: a serialization
    /// failure or a deadlock the database broke (SQLSTATE class 40), or a race seen
    /// between an unlocked read and the lock.
    pub(crate) fn retryable(&self) -> bool {
        match self {
            Self::Raced => true,
            Self::Db(e) => e
                .code()
                .is_some_and(|c| c.code().starts_with("40") || c.code() == "23505"),
            _ => false,
        }
    }
}

/// Runs `$body` (which uses `$tx`, a [`Tx`]) until it commits, again after a retryable
/// failure, at most [`limits::MAX_TRANSACTION_TRIES`] times. The connection is taken
/// from `$pool` anew for each try; a try that fails drops its `Tx`, which rolls it back.
macro_rules! transaction {
    ($pool:expr, |$tx:ident| $body:expr) => {{
        let mut tries = 0u32;
        loop {
            tries += 1;
            let client = $pool.get().await.map_err($crate::engine::Fail::from)?;
            $crate::engine::COUNTERS.transactions(1);
            let $tx = $crate::engine::Tx::new(client);
            let done: Result<_, $crate::engine::Fail> = async { $body }.await;
            let done = match done {
                Ok(v) => $tx.commit().await.map(|()| v).map_err($crate::engine::Fail::from),
                Err(e) => Err(e),
            };
            match done {
                Err(e) if e.retryable() && tries < $crate::limits::MAX_TRANSACTION_TRIES => {
                    $crate::engine::COUNTERS.retried();
                    tracing::debug!(tries, error = ?e, "transaction runs again");
                }
                other => break other,
            }
        }
    }};
}
pub(crate) use transaction;

/// What this process asked of its engines since it started: the `granary_object_*`
/// metrics, and what `granary bench --suite object` divides by the NFS operations of a
/// phase. One head is one process, so these are the head's (summed over its object
/// exports, if it has several).
pub(crate) static COUNTERS: Counters = Counters::new();

/// See [`COUNTERS`].
pub(crate) struct Counters {
    /// Database transactions: each try of an explicit one (`transaction!`), plus each
    /// statement sent outside one (PostgreSQL runs it as a transaction of its own).
    db_transactions: AtomicU64,
    /// Explicit transactions run again after a serialization failure, a deadlock or a race.
    db_retries: AtomicU64,
    /// Statements prepared: one per connection and SQL text ([`Sql`]).
    db_prepares: AtomicU64,
    /// Statements sent (BEGIN, COMMIT and ROLLBACK included; prepares not).
    db_statements: AtomicU64,
    /// Times a request waited for the database's answer: statements sent together
    /// ([`Tx`]: BEGIN with the first, COMMIT with the last) count once, a prepare once.
    db_round_trips: AtomicU64,
    /// The ctime-floor writes among the statements (one a second at most, after changes):
    /// tests subtract them from what an operation cost.
    db_floor_writes: AtomicU64,
    s3_puts: AtomicU64,
    s3_put_bytes: AtomicU64,
    s3_gets: AtomicU64,
    s3_get_bytes: AtomicU64,
    /// Operations answered `Jukebox` (an engine out or slow, a publish resting).
    jukebox: AtomicU64,
}

impl Counters {
    const fn new() -> Self {
        Self {
            db_transactions: AtomicU64::new(0),
            db_retries: AtomicU64::new(0),
            db_prepares: AtomicU64::new(0),
            db_statements: AtomicU64::new(0),
            db_round_trips: AtomicU64::new(0),
            db_floor_writes: AtomicU64::new(0),
            s3_puts: AtomicU64::new(0),
            s3_put_bytes: AtomicU64::new(0),
            s3_gets: AtomicU64::new(0),
            s3_get_bytes: AtomicU64::new(0),
            jukebox: AtomicU64::new(0),
        }
    }

    /// One operation answered `Jukebox`.
    pub(crate) fn jukebox(&self) {
        self.jukebox.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` transactions begun (or statements sent outside a transaction).
    pub(crate) fn transactions(&self, n: u64) {
        self.db_transactions.fetch_add(n, Ordering::Relaxed);
    }

    /// `statements` sent in `round_trips` waits for the database.
    pub(crate) fn sent(&self, statements: u64, round_trips: u64) {
        self.db_statements.fetch_add(statements, Ordering::Relaxed);
        self.db_round_trips
            .fetch_add(round_trips, Ordering::Relaxed);
    }

    /// One write of the ctime floor (a transaction, a statement, a round trip).
    pub(crate) fn floor_written(&self) {
        self.db_floor_writes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn retried(&self) {
        self.db_retries.fetch_add(1, Ordering::Relaxed);
    }

    /// One PUT of `bytes` sent.
    pub(crate) fn put(&self, bytes: usize) {
        self.s3_puts.fetch_add(1, Ordering::Relaxed);
        self.s3_put_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// One GET sent (`bytes` once it answered).
    pub(crate) fn get(&self, bytes: usize) {
        self.s3_gets.fetch_add(1, Ordering::Relaxed);
        self.s3_get_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> crate::EngineCounters {
        let v = |a: &AtomicU64| a.load(Ordering::Relaxed);
        crate::EngineCounters {
            db_transactions: v(&self.db_transactions),
            db_retries: v(&self.db_retries),
            db_prepares: v(&self.db_prepares),
            db_statements: v(&self.db_statements),
            db_round_trips: v(&self.db_round_trips),
            db_floor_writes: v(&self.db_floor_writes),
            s3_puts: v(&self.s3_puts),
            s3_put_bytes: v(&self.s3_put_bytes),
            s3_gets: v(&self.s3_gets),
            s3_get_bytes: v(&self.s3_get_bytes),
            jukebox: v(&self.jukebox),
        }
    }
}

/// The database pool, the S3 store and the runtime that drives both.
pub(crate) struct Engines {
    /// The backend's runtime (owned by [`crate::ObjectFs`], which shuts it down).
    handle: tokio::runtime::Handle,
    pub(crate) pool: deadpool_postgres::Pool,
    /// How the pool connects, for a connection of its own (the lock waits' LISTEN).
    pub(crate) pg: tokio_postgres::Config,
    pub(crate) store: Arc<dyn ObjectStore>,
    /// Key prefix of this file system's objects in the bucket ("" or "fs1/").
    pub(crate) prefix: String,
    /// An engine failed and has not answered since: its outage was logged.
    db_down: AtomicBool,
    store_down: AtomicBool,
    /// An operation ran out of time and none has finished since.
    timed_out: AtomicBool,
    /// Object ids this head took from the database's sequence and has not used yet
    /// ([`Engines::object_id`]).
    object_ids: std::sync::Mutex<Vec<i64>>,
}

impl Engines {
    /// Builds the clients (connections are made on first use).
    ///
    /// # Errors
    /// A malformed PostgreSQL URL or store configuration, said for a person.
    pub(crate) fn new(config: &ObjectConfig) -> Result<(tokio::runtime::Runtime, Self), String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(limits::DRIVER_THREADS)
            .thread_name("granary-object")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the object backend's runtime: {e}"))?;
        let prefix = if config.store.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", config.store.prefix)
        };
        let _inside = runtime.enter();
        let (pool, pg) = pool(&config.postgres)?;
        let store = store(config)?;
        let engines = Self {
            handle: runtime.handle().clone(),
            pool,
            pg,
            store,
            prefix,
            db_down: AtomicBool::new(false),
            store_down: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
            object_ids: std::sync::Mutex::new(Vec::new()),
        };
        drop(_inside);
        Ok((runtime, engines))
    }

    /// Runs `fut` to completion where the caller may block, within the operation
    /// timeout, and tells the client what failed.
    pub(crate) fn run<T, F>(&self, fut: F) -> FsResult<T>
    where
        F: Future<Output = Result<T, Fail>> + Send,
        T: Send,
    {
        self.run_within(limits::OPERATION_TIMEOUT, fut)
    }

    /// As [`Engines::run`], within `timeout`.
    pub(crate) fn run_within<T, F>(&self, timeout: std::time::Duration, fut: F) -> FsResult<T>
    where
        F: Future<Output = Result<T, Fail>> + Send,
        T: Send,
    {
        if !sync::blocking::allowed() {
            return Err(FsError::WouldBlock);
        }
        debug_assert!(
            sync::blocking::remote_allowed(),
            "the object backend was called where its caller judged it would not be \
             (nfsd::v4::reach)"
        );
        let bounded = async {
            match tokio::time::timeout(timeout, fut).await {
                Ok(done) => done,
                Err(_) => Err(Fail::Timeout),
            }
        };
        let handle = &self.handle;
        let done = if tokio::runtime::Handle::try_current().is_ok() {
            // Inside some runtime's context (a test's, or a caller's own), where block_on
            // may not be called: wait on a scoped thread instead.
            std::thread::scope(|s| {
                s.spawn(|| handle.block_on(bounded))
                    .join()
                    .unwrap_or(Err(Fail::Fs(FsError::ServerFault)))
            })
        } else {
            handle.block_on(bounded)
        };
        self.answer(done)
    }

    /// The client's answer to an operation, counting each `Jukebox`.
    fn answer<T>(&self, done: Result<T, Fail>) -> FsResult<T> {
        match done {
            Ok(v) => {
                // Every operation asks the database (an S3 request says so on its own:
                // [`Engines::store_answered`]).
                self.answered(&self.db_down, "database");
                Ok(v)
            }
            Err(e) => {
                let e = self.failed(e);
                if e == FsError::Jukebox {
                    COUNTERS.jukebox();
                }
                Err(e)
            }
        }
    }

    /// What a failure tells a client, said in the log: an engine's outage once, when it
    /// begins (the line when it ends comes from the next request it answers), anything
    /// else once per failure. The publish timer and the collector's rounds tell theirs
    /// here too, so an outage is one line however many operations and files it fails.
    pub(crate) fn failed(&self, e: Fail) -> FsError {
        match e {
            Fail::Fs(e) => {
                self.answered(&self.db_down, "database");
                e
            }
            e @ Fail::Db(_) if e.retryable() => {
                tracing::warn!(error = ?e, "object backend: a transaction kept failing to serialize");
                FsError::Jukebox
            }
            Fail::Db(e) if e.code().is_some_and(|c| !outage(c.code())) => {
                // The database answered, refusing: a constraint or a bug of ours.
                tracing::error!(error = %describe_db(&e), "object backend: the database refused a statement");
                FsError::ServerFault
            }
            Fail::Db(e) => {
                self.down(&self.db_down, "database", &describe_db(&e));
                FsError::Jukebox
            }
            Fail::Pool(e) => {
                self.down(&self.db_down, "database", &e);
                FsError::Jukebox
            }
            // Said once by the failure that began the rest.
            Fail::Raced | Fail::Resting | Fail::DirMove => FsError::Jukebox,
            Fail::Refused(why) => {
                tracing::error!("object backend: {why}");
                FsError::ServerFault
            }
            Fail::Timeout => {
                self.down(&self.timed_out, "database or S3 store", "no answer in time");
                FsError::Jukebox
            }
            Fail::Store(object_store::Error::NotFound { path, .. }) => {
                // A row names an object that is not there: published rows always follow
                // their objects, so this is damage, not an outage.
                tracing::error!(%path, "object backend: an object the database names is missing");
                FsError::Io
            }
            Fail::Store(e) => {
                self.down(&self.store_down, "S3 store", &e.to_string());
                FsError::Jukebox
            }
        }
    }

    fn down(&self, flag: &AtomicBool, what: &str, why: &str) {
        if !flag.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                engine = what,
                error = why,
                "object backend: engine unreachable; clients are told to retry (JUKEBOX)"
            );
        }
    }

    /// `what` answered a request: the end of its outage, if it had one. An operation
    /// that asked only the database says nothing of the store, so an S3 outage stays one
    /// line while metadata is served.
    fn answered(&self, flag: &AtomicBool, what: &str) {
        if flag.swap(false, Ordering::Relaxed) {
            tracing::warn!(engine = what, "object backend: engine answers again");
        }
        if self.timed_out.swap(false, Ordering::Relaxed) {
            tracing::warn!("object backend: operations finish in time again");
        }
    }

    /// The S3 store answered a request (a GET, a PUT or a listing that succeeded).
    pub(crate) fn store_answered(&self) {
        if self.store_down.load(Ordering::Relaxed) {
            self.answered(&self.store_down, "S3 store");
        }
    }

    /// Spawns `fut` on the backend's runtime (a background task).
    pub(crate) fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        drop(self.handle.spawn(fut));
    }

    /// A fresh object id: one this head took from the database's sequence before, or the
    /// first of [`limits::OBJECT_IDS_PER_FETCH`] taken now in one statement (a
    /// transaction per that many uploads instead of one each). Ids are never reused;
    /// those a head never used are gaps, which cost nothing.
    pub(crate) async fn object_id(&self) -> Result<i64, Fail> {
        let held = || {
            self.object_ids
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some(id) = held().pop() {
            return Ok(id);
        }
        let client = self.pool.get().await?;
        COUNTERS.transactions(1);
        let rows = client
            .query(
                "SELECT nextval('granary_object_ids') FROM generate_series(1, $1::int)",
                &[&limits::OBJECT_IDS_PER_FETCH],
            )
            .await?;
        drop(client);
        let mut ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        let id = ids.pop().ok_or(Fail::Fs(FsError::ServerFault))?;
        held().extend(ids);
        Ok(id)
    }

    /// The object key of object `id`.
    pub(crate) fn object_path(&self, id: i64) -> object_store::path::Path {
        object_store::path::Path::from(format!("{}objects/{id:016x}", self.prefix))
    }
}

/// Whether PUTs to `endpoint` leave their body out of the request's signature
/// (`UNSIGNED-PAYLOAD`): when TLS protects it (an `https` endpoint, or none: AWS's own)
/// or it never leaves the machine (a loopback host). A signed body costs a SHA-256 pass
/// over every byte on the head and another on the store; over plain HTTP to another
/// host the signature is what keeps the body from being altered on the way, so there it
/// stays.
pub(crate) fn payload_unsigned(endpoint: Option<&str>) -> bool {
    let Some(endpoint) = endpoint else {
        return true;
    };
    let Ok(url) = url::Url::parse(endpoint) else {
        return false;
    };
    if url.scheme() == "https" {
        return true;
    }
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// SQLSTATE classes that mean the database cannot serve now, not that it refused this
/// statement: connection exceptions (08), insufficient resources (53), operator
/// intervention (57: shut down, starting up, a query cancelled).
fn outage(code: &str) -> bool {
    ["08", "53", "57"]
        .iter()
        .any(|class| code.starts_with(class))
}

/// A database error with its SQLSTATE and message (`Display` says only "db error").
pub(crate) fn describe_db(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

fn pool(url: &str) -> Result<(deadpool_postgres::Pool, tokio_postgres::Config), String> {
    let mut pg: tokio_postgres::Config = url.parse().map_err(|e| {
        format!("postgres URL is not valid ({e}); expected postgres://USER@HOST:PORT/DB")
    })?;
    if pg.get_password().is_none() {
        if let Ok(password) = std::env::var("PGPASSWORD") {
            pg.password(password);
        }
    }
    pg.connect_timeout(limits::CONNECT_TIMEOUT);
    pg.application_name("granary");
    let manager = deadpool_postgres::Manager::from_config(
        pg.clone(),
        tokio_postgres::NoTls,
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(limits::POOL_CONNECTIONS)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(Some(limits::OPERATION_TIMEOUT))
        .create_timeout(Some(limits::CONNECT_TIMEOUT))
        .recycle_timeout(Some(limits::CONNECT_TIMEOUT))
        .build()
        .map_err(|e| format!("cannot build the database pool: {e}"))?;
    Ok((pool, pg))
}

fn store(config: &ObjectConfig) -> Result<Arc<dyn ObjectStore>, String> {
    let s = &config.store;
    let retry = object_store::RetryConfig {
        max_retries: 2,
        retry_timeout: limits::OPERATION_TIMEOUT / 2,
        ..Default::default()
    };
    let options = object_store::ClientOptions::new()
        .with_allow_http(true)
        .with_connect_timeout(limits::CONNECT_TIMEOUT)
        .with_timeout(limits::OPERATION_TIMEOUT);
    let mut builder = object_store::aws::AmazonS3Builder::new()
        .with_unsigned_payload(payload_unsigned(s.endpoint.as_deref()))
        .with_bucket_name(&s.bucket)
        .with_region(&s.region)
        .with_access_key_id(&config.credentials.access_key_id)
        .with_secret_access_key(&config.credentials.secret_access_key)
        .with_retry(retry)
        .with_client_options(options);
    if let Some(endpoint) = &s.endpoint {
        builder = builder
            .with_endpoint(endpoint)
            .with_virtual_hosted_style_request(false);
    }
    let store = builder
        .build()
        .map_err(|e| format!("S3 store {:?}: {e}", s.bucket))?;
    Ok(Arc::new(store))
}

#[cfg(test)]
mod tests {
    use super::payload_unsigned;

    #[test]
    fn a_body_is_signed_unless_tls_or_loopback_protects_it() {
        for (endpoint, unsigned) in [
            (None, true),
            (Some("https://s3.example.com"), true),
            (Some("http://127.0.0.1:8333"), true),
            (Some("http://127.8.0.1:8333"), true),
            (Some("http://localhost:8333"), true),
            (Some("http://[::1]:8333"), true),
            (Some("http://10.0.0.5:8333"), false),
            (Some("http://s3.internal:8333"), false),
            (Some("not a url"), false),
        ] {
            assert_eq!(payload_unsigned(endpoint), unsigned, "{endpoint:?}");
        }
    }
}
