//! Limits of the client: how much it buffers, how many calls it keeps in flight, how long
//! it loops. Each bounds something a buggy or hostile server could otherwise make grow
//! without end.

use std::time::Duration;

use nfs3::limits::MAX_DATA;

/// Largest reply record accepted: a READ of [`MAX_DATA`] bytes plus its RPC and NFS
/// headers, with room to spare (the server's own request limit has the same shape). A
/// larger record mark closes the connection before anything is allocated.
pub const MAX_REPLY_BYTES: u32 = MAX_DATA + (64 << 10);

/// Calls one connection may have waiting for replies. The bench runs depth 64 per
/// connection; granary's server stops reading past 128 and lets TCP push back, so more
/// slots only queue in the kernel. A caller over the limit waits for a slot.
pub const MAX_IN_FLIGHT: usize = 1024;

/// Whole records queued for the writer task. Bounded so that callers feel back-pressure
/// when the socket is slower than they are.
pub const WRITE_QUEUE_RECORDS: usize = 256;

/// Records the writer gathers into one flush (fewer syscalls at depth 64).
pub const WRITE_BATCH_RECORDS: usize = 32;

/// How long the reader waits for the rest of a reply once its first byte arrived. A
/// server that stalls mid-record this long is treated as dead.
pub const REPLY_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the reader waits for the first byte of a reply before simply waiting again;
/// an idle connection is not an error for a client.
pub const REPLY_IDLE_POLL: Duration = Duration::from_secs(3600);

/// Chunks of one `write_all` / `read_all` in flight at once.
pub const PIPELINE_CHUNKS: usize = 16;

/// `count` asked of READDIR, and `maxcount` of READDIRPLUS, by the listing helpers:
/// Linux's default `dtpref`-sized pages.
pub const READDIR_COUNT_BYTES: u32 = 32 << 10;

/// `dircount` asked of READDIRPLUS by `list_dir_plus`.
pub const READDIRPLUS_DIRCOUNT_BYTES: u32 = 8 << 10;

/// Most entries a listing helper collects before it gives up: a server whose cookies
/// never reach `eof` would otherwise loop forever.
pub const MAX_LIST_ENTRIES: usize = 1 << 20;

/// Most bytes `read_all` collects: a server that never says `eof` would otherwise fill
/// memory.
pub const MAX_READ_ALL_BYTES: u64 = 4 << 30;

/// `ca_maxrequestsize` and `ca_maxresponsesize` an NFSv4.1 session asks for: a 1 MiB READ
/// or WRITE (the bench's NFSv4.1 rows) and the COMPOUND around it, as Linux asks; the
/// server grants at most its own bound.
pub const V4_CHANNEL_BYTES: u32 = (1 << 20) + 8192;

/// Most slots an NFSv4.1 session asks for: one per call in flight, and the bench runs at
/// most 64 in flight per connection.
pub const V4_MAX_SLOTS: u32 = 64;

/// Default `AUTH_SYS` machine name.
pub const DEFAULT_MACHINE_NAME: &str = "granary-client";

const _: () = assert!(
    MAX_REPLY_BYTES > MAX_DATA + 1024,
    "room for READ reply headers"
);
const _: () = assert!(MAX_REPLY_BYTES < (1 << 31), "fragment length is 31 bits");
const _: () = assert!(WRITE_BATCH_RECORDS <= WRITE_QUEUE_RECORDS);
const _: () = assert!(PIPELINE_CHUNKS <= MAX_IN_FLIGHT);
const _: () = assert!(READDIR_COUNT_BYTES <= MAX_DATA);
const _: () = assert!(READDIRPLUS_DIRCOUNT_BYTES <= READDIR_COUNT_BYTES);
const _: () = assert!(DEFAULT_MACHINE_NAME.len() <= rpc::limits::MAX_MACHINE_NAME_BYTES as usize);
