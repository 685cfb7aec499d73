//! Limits of the object backend, each with why it is that number.

use std::time::Duration;

/// Files whose data ends at or below this many bytes keep it in the database (inline
/// slice rows), so a small file costs no S3 request at all: DittoFS measured 12-18
/// creates/s when every file cost a PUT, and a PUT to the S3 server here takes ~3 ms
/// against ~0.4 ms for a database transaction. 4 KiB is one page of most clients' writes
/// and keeps a row well under PostgreSQL's 8 KiB page (TOAST would move it out of line).
pub const INLINE_MAX_BYTES: u64 = 4096;

/// Largest object one publish uploads: "a few MiB at most" (issue 29). 4 MiB is one PUT
/// of ~44 ms to the S3 server here, near its best throughput, and bounds what one GET
/// must fetch for a read of a few KiB.
pub const OBJECT_MAX_BYTES: usize = 4 << 20;

/// UNSTABLE data one file may hold open (not yet sealed for a publish) in a head. One
/// object's worth: a file whose open data fills it seals it as one object and starts
/// its upload at once ([`UPLOADS_PER_FILE`]); past that, a write waits for one of the
/// file's uploads to end, or publishes the oldest sealed object first (the writer waits
/// for its upload: back-pressure). So a file holds at most this plus [`SEALED_PER_FILE`]
/// objects.
pub const PENDING_FILE_MAX_BYTES: usize = OBJECT_MAX_BYTES;

/// Uploads of one file's objects in flight at once before its publish. Three: with the
/// object being filled that is 16 MiB per file, the window of 1 MiB WRITEs a sequential
/// writer keeps in flight (the bench's 16; the Linux client's writeback sends about as
/// much), so the writer never waits while the store takes its objects three at a time: a
/// PUT of 4 MiB took ~44 ms here, and three at once keep the store's throughput while one
/// file is written (on a quiet machine the S3 server here took 4 MiB PUTs at 185 MiB/s
/// three at once, 78 MiB/s one at a time).
pub const UPLOADS_PER_FILE: usize = 3;

/// Objects of one file sealed and not yet committed (uploading, or uploaded and waiting
/// for an older one: their rows commit in the order sealed) at once before its publish.
/// Twice [`UPLOADS_PER_FILE`]: uploads end out of order (4 MiB PUTs took 100-390 ms each,
/// three at once, on a busy machine), and when this bound was the uploads' own, an
/// upload that ended before an older one kept its slot until that one ended too, so one
/// slow PUT left the store one or two PUTs of the file at a time. With room for three
/// stored objects behind a slow one, the next upload starts as soon as any ends. A file
/// then holds at most 28 MiB ([`PENDING_FILE_MAX_BYTES`] and six objects).
pub const SEALED_PER_FILE: usize = 2 * UPLOADS_PER_FILE;

/// Uploads started before their publish one head runs at once, over all files: two
/// files' worth, 24 MiB in flight, well within [`PENDING_HEAD_MAX_BYTES`]; past it a
/// full file publishes as before (upload, then commit).
pub const UPLOADS_PER_HEAD: usize = 2 * UPLOADS_PER_FILE;

/// Longest time between an upload started before its publish and that publish's commit
/// of it: an older one is uploaded again (a new object; the old one is an orphan the
/// sweep finds). The collector's grace counts on a publish committing within one
/// [`OPERATION_TIMEOUT`] of its upload (see `gc`); the commit's transaction begins within
/// this and ends within one operation timeout after, so 5 s + 10 s stays under
/// [`GC_MIN_GRACE`] (20 s).
pub const UPLOAD_FRESH: Duration = Duration::from_secs(5);

/// Times a WRITE that finds its file's open data full publishes it and tries again before
/// it answers `Jukebox`. Other writers of the file may fill it again while one publish
/// uploads; each try publishes what they wrote, at least an object's worth, so 8 tries is
/// 32 MiB written by others meanwhile, twice the bench's 16 writes of 1 MiB in flight to
/// one file; `OPERATION_TIMEOUT` bounds the time anyway.
pub const WRITE_PUBLISH_TRIES: u32 = 8;

/// UNSTABLE data all files of one head may hold. A write past it publishes its own file
/// first; if the other files' data still fills it, the write answers `Jukebox` (the client
/// retries) while the publisher drains them. 64 MiB is sixteen files' worth, a few hundred
/// milliseconds of uploads at the S3 server's throughput here.
pub const PENDING_HEAD_MAX_BYTES: usize = 64 << 20;

/// How often the publisher looks for UNSTABLE data to publish on its own (the "timer" of
/// the publish protocol).
pub const PUBLISH_INTERVAL: Duration = Duration::from_secs(1);

/// Least time between two publishes of one file after one did not commit (the store or
/// the database failed, or the operation ran out of time); doubled after each further
/// failure up to [`PUBLISH_RETRY_MAX`]. Meanwhile a COMMIT or FILE_SYNC WRITE of the file
/// answers `Jukebox` at once, and the client's retry (the Linux client's NFSv4 retries
/// start at 0.1 s) costs no upload. Half a second keeps a transient failure short.
pub const PUBLISH_RETRY_MIN: Duration = Duration::from_millis(500);

/// Longest time between two publishes of one file while they keep failing: a store that
/// comes back is used within it, and an outage costs a few tries a minute per file.
/// Below the Linux client's longest NFSv4 retry delay (15 s), so its next retry finds
/// the rest over.
pub const PUBLISH_RETRY_MAX: Duration = Duration::from_secs(8);

/// UNSTABLE data older than this is published by the timer even without a COMMIT: a
/// client that never commits (a crash of its own) still has its data reach other heads,
/// as the Linux client's dirty-page writeback does within ~30 s; 3 s keeps another head's
/// view close behind.
pub const PUBLISH_AGE: Duration = Duration::from_secs(3);

/// Longest one NFS operation waits for the database or the S3 store. Past it the client
/// gets `NFS3ERR_JUKEBOX` / `NFS4ERR_DELAY` and retries; the Linux client waits 5 s
/// (`NFS_JUKEBOX_RETRY_TIME`) before it does, so an outage costs it no faster polling.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest the head waits for one new database connection: short, so that an outage
/// answers `Jukebox` quickly instead of holding blocking-pool threads.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Times one operation runs again after a serialization failure or a deadlock the
/// database detected (SQLSTATE 40001, 40P01). Locks taken in one order make both rare;
/// the bound keeps a pathological case from spinning, and `Jukebox` tells the client to
/// come back.
pub const MAX_TRANSACTION_TRIES: u32 = 8;

/// Database connections of one head: the blocking pool runs at most this many
/// operations at once against the database anyway (its threads), and PostgreSQL's default
/// `max_connections` of 100 then serves several heads.
pub const POOL_CONNECTIONS: usize = 16;

/// Object ids a head takes from the database's sequence in one statement: a sequential
/// writer's uploads then cost a transaction per 64 MiB (16 objects) instead of one per
/// object, and a head that stops leaves at most 15 ids unused (gaps in a 64-bit
/// sequence, nothing to sweep).
pub const OBJECT_IDS_PER_FETCH: i32 = 16;

/// Threads of the head's own tokio runtime that drive the database and S3 clients'
/// sockets. The calls themselves wait on blocking-pool threads; two drivers keep one
/// stalled socket from delaying every other.
pub const DRIVER_THREADS: usize = 2;

/// Bytes a directory's size grows by per entry, as the mem backend counts them.
pub const DIR_ENTRY_BYTES: u64 = 32;

/// Directory entries one READDIR query fetches at most beyond what the page asks for: one
/// more tells whether the listing ended.
pub const READDIR_MAX_ENTRIES: usize = 4096;

/// How often a head writes the ctime floor (seed 000) it has handed out to the database,
/// so a head started later never stamps below it. Not on every operation: one row all
/// heads update on every change is the hot row JuiceFS #6246 warns of.
pub const FLOOR_PERSIST_INTERVAL: Duration = Duration::from_secs(1);

/// Deepest directory chain the rename cycle check walks before it gives up with
/// `ServerFault` (a loop in the parent chain would be corruption).
pub const MAX_DEPTH: usize = 4096;

/// How often a head runs a round of garbage collection and compaction by default. Rounds
/// of all heads take one advisory lock, so one runs at a time whatever the number of
/// heads; 30 s keeps the bucket within a minute or two of what the rows name.
pub const GC_INTERVAL: Duration = Duration::from_secs(30);

/// How long an object no row names stays in the store before the collector deletes it,
/// by default. Every reader of an object (READ, a compaction, a publish that has uploaded
/// and not yet committed) finishes within [`OPERATION_TIMEOUT`] of reading the rows, and
/// the transaction that let go of the object committed within [`OPERATION_TIMEOUT`] of
/// stamping it: twice that is the least that is safe ([`GC_MIN_GRACE`]); a minute gives
/// a stalled head margin.
pub const GC_GRACE: Duration = Duration::from_secs(60);

/// The least grace a configuration may give: two operation timeouts (see [`GC_GRACE`]).
pub const GC_MIN_GRACE: Duration = Duration::from_secs(2 * OPERATION_TIMEOUT.as_secs());

/// A file with at least this many slices is compacted by default: sixteen 4 KiB random
/// writes cost sixteen GETs to read back across them; one object costs one.
pub const COMPACT_MIN_SLICES: u32 = 16;

/// Files one round compacts at most (found a page at a time, most slices first, through
/// the `inodes_by_slice_count` index, going on from where the last round stopped).
pub const COMPACT_FILES_PER_ROUND: i64 = 64;

/// Bytes one compaction pass holds at most: the new object it builds (at most
/// [`OBJECT_MAX_BYTES`]), the object ranges it has fetched and not yet copied into it (at
/// most [`COMPACT_FETCH_BYTES`]: its GETs go out in batches of that many bytes), and the
/// inline bytes of the page of rows it is reading (at most [`COMPACT_PAGE_ROWS`] ×
/// [`INLINE_MAX_BYTES`]). A file of any number of slices is compacted in passes of one
/// new object each, so compaction's memory does not grow with the file. 8 MiB: an
/// eighth of what the head may hold of buffered writes ([`PENDING_HEAD_MAX_BYTES`]) or
/// of fetched objects ([`OBJECT_CACHE_MAX_BYTES`]), the two budgets it sits beside
/// ([`HEAD_DATA_MAX_BYTES`]), and one pass at a time per head (rounds are one at a time).
pub const COMPACT_PASS_MAX_BYTES: usize = 2 * OBJECT_MAX_BYTES;

/// Bytes of object ranges one compaction pass fetches at once (its GETs, up to 16 in
/// flight, until their bytes are copied into the new object): half an object, so the
/// pass stays within [`COMPACT_PASS_MAX_BYTES`] with its object and a page of rows.
pub const COMPACT_FETCH_BYTES: usize = OBJECT_MAX_BYTES / 2;

/// `slices` rows a compaction pass plans from: a page of offsets and lengths in offset
/// order (24 bytes each, about 100 KiB). 4,096 is a 4 MiB object's worth of 1 KiB
/// writes, so a page's runs nearly always end where the object bound ends them rather
/// than at the page's end; a run the page's end cuts is left for the next pass's page,
/// unless it is the page's only one (then it is merged as it is: correct, one more row).
pub const COMPACT_PLAN_ROWS: i64 = 4096;

/// `slices` rows one statement of a compaction pass reads while it lays the run's bytes
/// (newest first, with their inline bytes, at most 4 KiB each): 512 KiB of inline bytes
/// at most.
pub const COMPACT_PAGE_ROWS: i64 = 128;

/// Compaction passes (one new object each, one transaction each) one round runs at most
/// over all files: 256 MiB rewritten at most per round, a few seconds of S3 traffic here,
/// so the round's orphan sweep and deletions still run well within [`GC_ROUND_TIMEOUT`].
pub const COMPACT_PASSES_PER_ROUND: u64 = 64;

/// Longest a round spends compacting before it starts no more passes (each is bounded by
/// [`OPERATION_TIMEOUT`] anyway): half the round's time, so the sweep and the deletions
/// that follow are never starved by a file of many slices.
pub const COMPACT_ROUND_TIME: Duration = Duration::from_secs(GC_ROUND_TIMEOUT.as_secs() / 2);

/// Dead objects one round deletes at most (S3 DELETEs, a few ms each here): a round stays
/// within a few seconds, and the next round takes the rest.
pub const GC_DELETES_PER_ROUND: i64 = 1000;

/// Keys one round lists from the store looking for orphans (objects no row ever named:
/// a head that died between its upload and its commit), continuing where the last
/// round stopped: ten pages of S3's 1,000 keys.
pub const GC_LIST_PER_ROUND: usize = 10_000;

/// Longest one round of garbage collection runs; the next round goes on from there.
/// Each compaction within it is bounded by [`OPERATION_TIMEOUT`] like a READ.
pub const GC_ROUND_TIMEOUT: Duration = Duration::from_secs(120);

/// Bytes of file data one head may hold in memory: buffered writes, fetched objects and
/// one compaction pass, each within its own budget above.
pub const HEAD_DATA_MAX_BYTES: usize =
    PENDING_HEAD_MAX_BYTES + OBJECT_CACHE_MAX_BYTES + COMPACT_PASS_MAX_BYTES;

const _: () = assert!(
    OBJECT_MAX_BYTES + COMPACT_FETCH_BYTES + COMPACT_PAGE_ROWS as usize * INLINE_MAX_BYTES as usize
        <= COMPACT_PASS_MAX_BYTES
);
const _: () = assert!(COMPACT_FETCH_BYTES >= INLINE_MAX_BYTES as usize);
const _: () = assert!(COMPACT_PAGE_ROWS >= 2);
const _: () = assert!(COMPACT_ROUND_TIME.as_secs() < GC_ROUND_TIMEOUT.as_secs());
const _: () = assert!(GC_MIN_GRACE.as_secs() >= 2 * OPERATION_TIMEOUT.as_secs());
const _: () = assert!(GC_GRACE.as_secs() >= GC_MIN_GRACE.as_secs());
const _: () =
    assert!(UPLOAD_FRESH.as_secs() + OPERATION_TIMEOUT.as_secs() < GC_MIN_GRACE.as_secs());
const _: () =
    assert!(PENDING_FILE_MAX_BYTES + UPLOADS_PER_HEAD * OBJECT_MAX_BYTES <= PENDING_HEAD_MAX_BYTES);
const _: () =
    assert!(PENDING_FILE_MAX_BYTES + SEALED_PER_FILE * OBJECT_MAX_BYTES <= PENDING_HEAD_MAX_BYTES);
const _: () = assert!(SEALED_PER_FILE >= UPLOADS_PER_FILE);

/// Files whose slice map (their `slices` rows at one `inodes.version`) a head keeps: a
/// few KiB each, so a few MiB in all; enough for the files a busy client reads again.
pub const SLICE_MAPS_MAX: usize = 4096;

/// Rows of a slice map the cache keeps at most: a file written in more pieces (before
/// compaction merges them) is read range by range, uncached. 256 rows are a few KiB of
/// offsets and ids, and a small file's inline bytes (each at most 4 KiB).
pub const SLICE_MAP_MAX_ROWS: i64 = 256;

/// Bytes of objects a head keeps in memory (object ranges it fetched, immutable, so never
/// stale): 64 MiB is sixteen of the largest objects and beside the 64 MiB of buffered
/// writes the head may hold; one range is kept only if it is at most a quarter of it.
pub const OBJECT_CACHE_MAX_BYTES: usize = 64 << 20;

/// A READ of at least this many bytes fetches the whole object it reads from (the part of
/// it the file's slice map names, at most [`WHOLE_SLICE_MAX`]; without a map, the whole
/// slice) in one GET, which the READs in flight on that object share and the byte cache
/// keeps: a sequential reader of 1 MiB READs then sends one 4 MiB GET per object instead
/// of one per READ, in whatever order its READs arrive (an object holds the extents of
/// one publish, which a writer's out-of-order WRITEs make several slices). 256 KiB: the
/// Linux client's READs of a file read in order are 1 MiB (rsize) and its readahead's at
/// least 128 KiB; a READ of a few KiB (random access) fetches only what it asked for,
/// unless it belongs to a sequential stream ([`STREAM_MIN_TOUCHING`]).
pub const WHOLE_SLICE_READ_MIN_BYTES: usize = 256 << 10;

/// Read-ahead GETs (whole objects after a long or streaming READ, fetched in the
/// background) one head runs at once: four 4 MiB objects, 16 MiB in flight, a quarter of
/// the byte cache, enough to keep the next objects of a few sequential readers coming.
pub const READ_AHEAD_MAX: usize = 4;

/// How far past a long or streaming READ the head reads ahead: the objects holding the
/// next 8 MiB, two objects. A client keeps a window of READs in flight (the bench 16 MiB,
/// the Linux client its readahead), whose own READs fetch the objects they fall in; two
/// more objects keep the store busy while the next window's READs are on their way, and
/// leave the byte cache room for three such readers' windows.
pub const READ_AHEAD_BYTES: i64 = 2 * OBJECT_MAX_BYTES as i64;

/// Largest object range a long READ fetches whole: one object, the most a slice names.
pub const WHOLE_SLICE_MAX: u64 = OBJECT_MAX_BYTES as u64;

/// READs of a file the stream detector remembers: a client's window of READs in flight
/// (the bench's 16, the Linux client's 16 RPC slots of its default), so a READ that
/// arrives before those just before it still finds one it touches.
pub const STREAM_WINDOW_READS: usize = 16;

/// Of a file's last [`STREAM_WINDOW_READS`] READs, how many must touch another of them
/// (start where it ended, or end where it started) before a short READ is taken as part
/// of a sequential stream and fetches whole objects. Six of sixteen: a random 4 KiB READ
/// touches one of 16 others in a file of N pages with a chance of about 32/N, so in a
/// file of 8 MiB about half a READ of the sixteen does on average and six almost never
/// (a chance of about 1e-5), while a stream's READs nearly all touch, even when eight at
/// once arrive in any order; its first five or so READs fetch by range.
pub const STREAM_MIN_TOUCHING: usize = 6;

/// Files whose last READs the stream detector remembers (first in first out): 16 pairs
/// of offsets each, about 400 KiB in all.
pub const STREAM_FILES_MAX: usize = 1024;

const _: () = assert!(WHOLE_SLICE_MAX as usize <= OBJECT_CACHE_MAX_BYTES / 4);
const _: () = assert!(READ_AHEAD_MAX * OBJECT_MAX_BYTES <= OBJECT_CACHE_MAX_BYTES / 4);
const _: () = assert!(STREAM_MIN_TOUCHING <= STREAM_WINDOW_READS);
const _: () = assert!(PENDING_FILE_MAX_BYTES <= OBJECT_MAX_BYTES);
const _: () = assert!(PENDING_FILE_MAX_BYTES <= PENDING_HEAD_MAX_BYTES);
const _: () = assert!((INLINE_MAX_BYTES as usize) < OBJECT_MAX_BYTES);
const _: () = assert!(PUBLISH_INTERVAL.as_millis() <= PUBLISH_AGE.as_millis());
const _: () = assert!(PUBLISH_RETRY_MIN.as_millis() <= PUBLISH_RETRY_MAX.as_millis());

/// Byte-range locks across heads (`heads.rs`): how long a head's locks count for the
/// other heads after its last heartbeat, unless the export says `lock_lease_secs`.
/// A head that dies (`kill -9`, a lost machine) holds the ranges its clients locked for
/// at most this long, then every other head ignores them; a head alive renews it every
/// [`HEAD_HEARTBEAT`]. 20 s is far above a heartbeat or two missed on a busy machine,
/// and keeps what a dead head's clients locked out of the others' reach for less than
/// the 30 s a Linux client's blocked lock waits between two polls; a head that misses
/// its heartbeats for longer loses its locks' protection (docs/LOCKS.md, "Across
/// heads").
pub const HEAD_LOCK_LEASE: Duration = Duration::from_secs(20);

/// Shortest `lock_lease_secs` an export may give: several heartbeats, so one late
/// heartbeat on a loaded head does not let another head past its locks.
pub const HEAD_LOCK_MIN_LEASE: Duration = Duration::from_secs(3);

/// How often a head that holds locks renews its lease (one statement), sweeps the rows
/// of heads whose lease ended more than a lease ago, and records again the files whose
/// record failed (an outage).
pub const HEAD_HEARTBEAT: Duration = Duration::from_secs(1);

/// Most rows one head keeps for one file. A head records its locks on a file as maximal
/// ranges of one kind (the owners stay in its lock manager), so most files need one or
/// two; a client that locks thousands of separate records of one file (a database) would
/// make every LOCK of that file on any head read and rewrite thousands of rows. Past 64
/// the head records two hulls instead (one over its exclusive ranges, one over its
/// shared ones): the other heads may then be refused ranges between this head's locks,
/// never granted one inside them.
pub const HEAD_LOCK_SPANS_PER_FILE: usize = 64;

/// Most files one head keeps rows for; a LOCK on one more file is refused
/// (NFS4ERR_RESOURCE, NLM4_DENIED_NOLOCKS) until it lets go of one. With
/// [`HEAD_LOCK_SPANS_PER_FILE`] it bounds a head's rows at 1 Mi (about 100 MiB of table
/// and index), and the head's memory of what it recorded at 16 Ki files; a head's lock
/// manager allows 64 Ki locks per client, so a few clients locking many files each reach
/// it first.
pub const HEAD_LOCK_FILES_MAX: usize = 16_384;

/// How often, while its LISTEN connection is down (the database restarting, a network
/// outage), a head asks again for every file it waits on, as if another head had freed
/// ranges of each: a release it could not hear of is found within this. One second is a
/// transaction per waiting request and second for the outage's length, and it keeps a
/// waiter's delay at the scale of the outage, not of the client's 30 s poll.
pub const HEAD_WAIT_POLL: Duration = Duration::from_secs(1);

/// How often, while it listens, a head asks again for every file it waits on anyway: a
/// net under the notices (one lost between a LISTEN connection's drop and its return is
/// caught by the recheck after it reconnects; this catches anything else). Ten seconds
/// is a third of the Linux client's own 30 s poll, so a waiter is never later than
/// without waiting across heads, at a transaction per waiting request every 10 s.
pub const HEAD_WAIT_RECHECK: Duration = Duration::from_secs(10);

const _: () = assert!(HEAD_LOCK_MIN_LEASE.as_millis() >= 3 * HEAD_HEARTBEAT.as_millis());
const _: () = assert!(HEAD_WAIT_POLL.as_millis() < HEAD_WAIT_RECHECK.as_millis());
const _: () = assert!(HEAD_LOCK_MIN_LEASE.as_millis() <= HEAD_LOCK_LEASE.as_millis());
const _: () = assert!(HEAD_LOCK_SPANS_PER_FILE >= 2);

/// Share reservations across heads (`shares.rs`): how long an OPEN or SHARE that denies
/// an access waits for every other live head to say it has recorded what its holders
/// have on a file newly watched (each does at its next heartbeat), before it answers
/// NFS4ERR_DELAY / NLM4_DENIED_NOLOCKS (the client asks again). Two heartbeats and a
/// margin: a live head acks within one; a head that cannot for longer is stuck or cut
/// off, and counts no more once its lease ends.
pub const SHARE_WATCH_WAIT: Duration = Duration::from_secs(3);

/// How often such a waiting OPEN asks whether the acks are in (one statement each).
pub const SHARE_ACK_POLL: Duration = Duration::from_millis(50);

/// How old a watch must be before the release of a file's last deny may drop it (with
/// every head's rows of the file): longer than any OPEN waits for its acks
/// ([`SHARE_WATCH_WAIT`]), so a deny still waiting never loses the watch it waits on.
pub const SHARE_WATCH_KEEP: Duration = Duration::from_secs(10);

/// Most watched files a heartbeat reads (they are read whole each second: the files
/// some live head denies an access on, plus those whose last deny went with a dead head
/// until their next release). Past it the head takes every OPEN through the database
/// (it cannot tell which files are watched) and acks no further: denies elsewhere then
/// wait, never slip past this head's opens. Each head's own denies are bounded by its
/// opens and NLM shares, so this is far above what a few heads hold.
pub const SHARE_WATCHES_READ_MAX: i64 = 65_536;

const _: () = assert!(SHARE_WATCH_WAIT.as_millis() >= 2 * HEAD_HEARTBEAT.as_millis());
const _: () = assert!(SHARE_WATCH_KEEP.as_millis() > SHARE_WATCH_WAIT.as_millis());
const _: () = assert!(SHARE_ACK_POLL.as_millis() < HEAD_HEARTBEAT.as_millis());
