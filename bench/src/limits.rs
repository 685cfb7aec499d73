//! Every bound of `granary bench`, in one place: how long and how much it runs, how many
//! connections and calls it keeps open, and how long it waits for a server that stopped
//! answering. Each has a reason; the run as a whole must stay inside the workplace's time
//! (quick run under 2 minutes, full run under 30) and never load anything but loopback.

use std::time::Duration;

/// Warm-up before each measured phase of a full run: long enough for a server's caches,
/// allocators and TCP windows to settle, short enough that 23 timed phases × 5 targets ×
/// 3 repeats (about 12 minutes) fit the 30-minute budget with setup, sequential I/O and
/// the iozone matrix.
pub const FULL_WARMUP: Duration = Duration::from_millis(500);
/// Measured time of each timed phase of a full run.
pub const FULL_DURATION: Duration = Duration::from_millis(1500);
/// Repeats of a full run (median and spread are reported over them).
pub const FULL_REPEATS: u32 = 3;

/// `--quick`: one repeat of short phases, granary and the limit only.
pub const QUICK_WARMUP: Duration = Duration::from_millis(150);
pub const QUICK_DURATION: Duration = Duration::from_millis(500);

/// Longest `--duration` and `--warmup` accepted: a typo must not load the machine for hours.
pub const MAX_PHASE_DURATION: Duration = Duration::from_secs(600);
/// Most repeats accepted.
pub const MAX_REPEATS: u32 = 100;
/// Most ops one count-mode phase (`--count`) may do.
pub const MAX_COUNT_OPS: u64 = 100_000_000;

/// One call that has not been answered after this long fails with a timeout, so a server
/// that hangs fails its workload instead of hanging the run (the default and the most
/// `--op-timeout-secs` accepts: [`STOP_GRACE`] must outlast it).
pub const OP_TIMEOUT: Duration = Duration::from_secs(20);
/// After a phase's stop time, how long its workers may take to finish their last call
/// before they are aborted and the phase is reported as not stopping on time.
pub const STOP_GRACE: Duration = Duration::from_secs(25);
/// Errors after which a phase gives up (a server that refuses everything would otherwise
/// be hammered for the whole phase).
pub const MAX_PHASE_ERRORS: u64 = 1000;
/// Connecting one client; a server that does not accept within this fails the phase.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections one phase opens (the connections workload's top step).
pub const MAX_CONNECTIONS: usize = 1000;
/// Most calls in flight on one connection (the depth-64 phases).
pub const MAX_DEPTH: usize = 64;

/// Full-run sizes, from issue 4.
pub const RAND_FILE_BYTES: u64 = 256 << 20;
pub const SEQ_FILE_BYTES: u64 = 1 << 30;
pub const DIR_ENTRIES: u32 = 10_000;
/// Names the metadata workload's LOOKUP phases pick from.
pub const LOOKUP_NAMES: u32 = 1000;
/// iozone matrix file sizes of a full run (the seed's table is the 128 MiB row).
pub const IOZONE_FILE_BYTES: [u64; 2] = [1 << 20, 128 << 20];

/// `--quick` sizes: small enough for a debug build to finish in under 2 minutes.
pub const QUICK_RAND_FILE_BYTES: u64 = 32 << 20;
pub const QUICK_SEQ_FILE_BYTES: u64 = 128 << 20;
pub const QUICK_IOZONE_FILE_BYTES: [u64; 1] = [4 << 20];

/// The granary the bench starts must hold the sequential file plus the random one and an
/// iozone file at once (each workload removes its files, but the mem backend may free
/// lazily): 3 GiB covers 1 GiB + 256 MiB + 128 MiB with room.
pub const GRANARY_MEM_CAP_BYTES: u64 = 3 << 30;

/// Record sizes of the iozone matrix: 1 KiB … 16 MiB, as `iozone -a -y1k`.
pub const IOZONE_MIN_RECORD_BYTES: u64 = 1 << 10;
pub const IOZONE_MAX_RECORD_BYTES: u64 = 16 << 20;
/// One iozone pass (over one file with one record size) stops after this long and is
/// measured over the records done: 26 cells × 4 passes must fit the run even for a peer
/// doing 1 KiB records at 1,000/s (go-nfs takes about 100 s for the matrix).
pub const IOZONE_PASS_CAP: Duration = Duration::from_secs(2);

/// The READ/WRITE size of the data workloads: 1 MiB, what every peer advertises and the
/// kernel client uses against them (`rsize=wsize=1048576`).
pub const IO_CHUNK_BYTES: u32 = 1 << 20;
/// Sequential and setup I/O keep this many 1 MiB calls in flight, as a kernel client's
/// read-ahead and write-back do.
pub const SEQ_DEPTH: usize = 16;
/// Random 4 KiB I/O size.
pub const SMALL_IO_BYTES: u32 = 4096;
/// The `v4` workload's large READ: 64 KiB, a Linux client's read size on a small file or
/// a random read, and still one page of the server's buffers.
pub const V4_READ_BYTES: u32 = 64 << 10;
/// Largest file of the `v4` workload (the random-I/O file's size when that is smaller):
/// it compares protocols, not caches, and its setup runs for every target and repeat.
pub const V4_FILE_BYTES: u64 = 16 << 20;
/// In the UNSTABLE random-write phases, each worker COMMITs after this many WRITEs (a
/// client flushing dirty pages every 256 KiB per stream).
pub const COMMIT_EVERY_WRITES: u64 = 64;
/// Depth of pipelined setup (creating the 10,000 entries, LOOKUP names).
pub const SETUP_DEPTH: usize = 32;

/// READDIRPLUS `dircount` and `maxcount`: the Linux client's defaults (8 KiB of names,
/// 32 KiB pages).
pub const READDIRPLUS_DIRCOUNT_BYTES: u32 = 8 << 10;
pub const READDIRPLUS_MAXCOUNT_BYTES: u32 = 32 << 10;
/// Pages one directory listing may take before the server is declared broken.
pub const MAX_LIST_PAGES: u32 = 100_000;

/// Points kept of each latency CDF in the JSON and plots.
pub const CDF_POINTS: usize = 64;

/// Loopback stream ceiling: bytes per write.
pub const STREAM_CHUNK_BYTES: usize = 1 << 20;

/// The host and erofs suites' load: connections × calls in flight on each (issue 12).
pub const SUITE_CONNS: usize = 4;
pub const SUITE_DEPTH: usize = 64;
/// The host suite's 4 KiB file and 1 MiB file (full run, then --quick).
pub const HOST_SMALL_FILE_BYTES: u64 = 32 << 20;
pub const HOST_BIG_FILE_BYTES: u64 = 64 << 20;
pub const QUICK_HOST_SMALL_FILE_BYTES: u64 = 8 << 20;
pub const QUICK_HOST_BIG_FILE_BYTES: u64 = 16 << 20;
/// The erofs suite's compressible file (full run, then --quick).
pub const EROFS_FILE_BYTES: u64 = 128 << 20;
pub const QUICK_EROFS_FILE_BYTES: u64 = 32 << 20;
/// 4 KiB READs of the erofs suite's cold random phase (count-bound: the cache warms).
pub const EROFS_COLD_RAND_OPS: u64 = 8192;

/// The object suite's load: connections × calls in flight (a head's database pool holds
/// 16 connections, so 64 in flight keep it busy with a queue behind it).
pub const OBJECT_CONNS: usize = 4;
pub const OBJECT_DEPTH: usize = 16;
/// The object suite's random 4 KiB file and sequential 1 MiB file: the sequential file is
/// 16 of the backend's 4 MiB objects (a PUT of 4 MiB took ~44 ms here, so a pass is about
/// a second), the random one 2,048 blocks.
pub const OBJECT_RAND_FILE_BYTES: u64 = 8 << 20;
pub const OBJECT_SEQ_FILE_BYTES: u64 = 64 << 20;
pub const QUICK_OBJECT_RAND_FILE_BYTES: u64 = 4 << 20;
pub const QUICK_OBJECT_SEQ_FILE_BYTES: u64 = 16 << 20;
/// `--quick` object suite: a smaller READDIRPLUS directory (10,000 creates take 10-20 s
/// per file system on the busy machine).
pub const QUICK_OBJECT_DIR_ENTRIES: u32 = 1000;
/// Ops of the count-bound pass that measures what one NFS operation costs the engines
/// (the heads' counters are read before and after it).
pub const COST_OPS: u64 = 256;

const _: () = assert!(QUICK_DURATION.as_millis() < FULL_DURATION.as_millis());
const _: () = assert!(FULL_WARMUP.as_millis() < MAX_PHASE_DURATION.as_millis());
const _: () = assert!(MAX_DEPTH <= client::limits::MAX_IN_FLIGHT);
const _: () = assert!(SEQ_DEPTH <= MAX_DEPTH);
const _: () = assert!(IO_CHUNK_BYTES <= nfs3::limits::MAX_DATA);
const _: () = assert!(READDIRPLUS_MAXCOUNT_BYTES <= nfs3::limits::MAX_DATA);
const _: () = assert!(SEQ_FILE_BYTES.is_multiple_of(IO_CHUNK_BYTES as u64));
const _: () = assert!(RAND_FILE_BYTES.is_multiple_of(SMALL_IO_BYTES as u64));
const _: () = assert!(V4_FILE_BYTES.is_multiple_of(V4_READ_BYTES as u64));
const _: () = assert!(SEQ_FILE_BYTES + RAND_FILE_BYTES + (128 << 20) < GRANARY_MEM_CAP_BYTES);
const _: () = assert!(OP_TIMEOUT.as_secs() < STOP_GRACE.as_secs());
const _: () = assert!(SUITE_DEPTH <= MAX_DEPTH);
const _: () = assert!(HOST_BIG_FILE_BYTES.is_multiple_of(IO_CHUNK_BYTES as u64));
const _: () = assert!(QUICK_HOST_BIG_FILE_BYTES.is_multiple_of(IO_CHUNK_BYTES as u64));
const _: () = assert!(EROFS_FILE_BYTES.is_multiple_of(IO_CHUNK_BYTES as u64));
const _: () = assert!(QUICK_EROFS_FILE_BYTES.is_multiple_of(IO_CHUNK_BYTES as u64));
const _: () = assert!(EROFS_FILE_BYTES <= SEQ_FILE_BYTES);

/// Bytes of each lock of the `locks` workload (owners of the `disjoint` phases lock
/// neighbouring ranges of this size).
pub const LOCK_BYTES: u64 = 100;

/// Most LOCK attempts of one pair in a contended `locks` phase before it counts as an
/// error: the other owner holds the range for one round trip at a time, so thousands of
/// refusals in a row mean a lock that is never given up.
pub const MAX_LOCK_ATTEMPTS: u64 = 10_000;
