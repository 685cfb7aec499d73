//! Every limit of the runtime, with why it is that number.

/// Most workers one server starts; beyond this, threads only add contention.
pub const MAX_WORKERS: usize = 1024;

/// Threads of each worker's blocking pool (`granary-blk-<worker>-<n>`), where calls that
/// sleep on the disk run: COMMIT and FILE_SYNC/DATA_SYNC WRITEs (`fdatasync`/`fsync`),
/// SETATTR size changes, READs that miss the page cache, READs that wait for a decode
/// job. Four lets a worker's clients wait on four such calls at once (one client's
/// COMMIT of a large file does not hold up another's cold READ) while a worker's share of
/// one disk's queue stays small; a cold READ's copy is the only CPU work among them.
/// Idle, a thread costs its stack and nothing else.
pub const BLOCKING_THREADS_PER_WORKER: usize = 4;

/// Calls of one worker that may wait for a blocking-pool thread beyond those running.
/// A request that finds the pool full waits (asynchronously) for room while it keeps its
/// in-flight slot and memory reservation, so the connection's own limits push back on its
/// client; nothing is queued beyond this bound. 64 is half of one connection's in-flight
/// limit: enough to keep the threads fed, while a flood of COMMITs from one client fills
/// its own slots, not the worker's memory.
pub const BLOCKING_QUEUE_PER_WORKER: usize = 64;

const _: () = assert!(BLOCKING_THREADS_PER_WORKER >= 1);
const _: () = assert!(BLOCKING_QUEUE_PER_WORKER >= BLOCKING_THREADS_PER_WORKER);
