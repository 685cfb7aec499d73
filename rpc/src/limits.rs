//! Limits of the RPC layer. Each can be overridden at run time through [`ConnLimits`]
//! (CLI / config), except the protocol maxima fixed by RFC 5531.
//!
//! [`ConnLimits`]: crate::conn::ConnLimits

use std::time::Duration;

/// Largest credential or verifier body (RFC 5531: 400 bytes).
pub const MAX_AUTH_BYTES: u32 = 400;

/// Longest AUTH_SYS machine name (RFC 5531: 255).
pub const MAX_MACHINE_NAME_BYTES: u32 = 255;

/// Supplementary groups in an AUTH_SYS credential (RFC 5531: 16).
pub const MAX_AUTH_GROUPS: u32 = 16;

/// Default largest request record: a 1 MiB WRITE plus its RPC and NFS headers, with room
/// to spare. A record header claiming more is answered by closing the connection before
/// anything is allocated.
pub const DEFAULT_MAX_RECORD_BYTES: u32 = (1 << 20) + (64 << 10);

/// Smallest useful record limit: an RPC call header with the largest credential and
/// verifier, plus small arguments.
pub const MIN_MAX_RECORD_BYTES: u32 = 4096;

/// Default requests one connection may have in progress at once. Linux clients keep up to
/// 64 slots per transport by default (sunrpc.tcp_max_slot_table_entries is 65536, but
/// the typical working set is far below 128); beyond this the server stops reading the
/// socket, so TCP flow control pushes back on the client.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 128;

/// Default open connections per server. Past it, a connection idle for at least
/// [`DEFAULT_RECLAIM_IDLE`] is closed to make room (from the address holding the most
/// connections); if none is, the new one is accepted and closed at once, with a log line,
/// so a flood cannot exhaust file descriptors.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// Default open connections per client address, checked at accept before the global
/// limit, so one address cannot take every slot. A Linux client uses one connection per
/// server (up to 16 with `nconnect`); load generators on one host use hundreds, so this
/// stays generous: the fairness comes from reclaiming idle slots at the global limit.
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 1024;

/// How long a connection must have been idle (no request in progress, nothing left to
/// write) before it may be reclaimed for a new client at the global limit.
pub const DEFAULT_RECLAIM_IDLE: Duration = Duration::from_secs(5);

/// Default memory budget of one connection, in bytes: requests being read or run and
/// replies waiting to be sent, each request charged its record plus the largest reply
/// its procedure may produce. Past it the connection stops reading until replies drain,
/// so TCP pushes back. Room for a 1 MiB WRITE and a few 1 MiB READ replies in flight.
pub const DEFAULT_CONN_BUDGET_BYTES: usize = 8 << 20;

/// Default memory budget of the whole server for the same things, in bytes. With
/// [`DEFAULT_CONN_BUDGET_BYTES`] per connection, 64 connections moving 1 MiB transfers
/// at full depth fill it; then every connection waits its turn (FIFO).
pub const DEFAULT_SERVER_BUDGET_BYTES: usize = 512 << 20;

/// How long a reply write may make no progress (the client does not read) before the
/// connection is closed and everything it held is freed.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Bytes the reader buffers from the socket: one syscall picks up many small requests.
pub const READ_BUFFER_BYTES: usize = 64 << 10;

/// Bytes the writer gathers before a socket write.
pub const WRITE_BUFFER_BYTES: usize = 64 << 10;

/// Bytes of reply buffer a connection keeps between calls, to encode its next small
/// reply into without an allocation (`dispatch::ReplyBuf`): room for the first 16 KiB a
/// reply buffer starts with, twice. A buffer that grew larger (a large reply) is let go.
pub const KEEP_REPLY_BUFFER_BYTES: usize = 32 << 10;

/// Fixed bytes of one open connection besides its budget: the two buffers above, the kept
/// reply buffer, plus tasks, channel and table entry (measured well under 8 KiB; 16 KiB
/// of margin).
pub const CONN_FIXED_BYTES: usize =
    READ_BUFFER_BYTES + WRITE_BUFFER_BYTES + KEEP_REPLY_BUFFER_BYTES + (16 << 10);

/// Memory one duplicate-request-cache entry may take, for docs/LIMITS.md's formula: its
/// key, its queue slot and the reply record of a non-idempotent call (the largest, a
/// CREATE or RENAME with two sets of wcc data, is under 400 bytes), with the map's slack.
pub const REPLY_CACHE_ENTRY_BYTES: usize = 1024;

/// How long a client may take to deliver the rest of a record it has started. A client
/// that sends half a request and stalls is dropped after this.
pub const DEFAULT_RECORD_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection may stay silent between requests before it is closed.
/// Linux nfsd closes idle TCP connections after about 6 minutes.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(360);

/// Calls the server may have waiting for a reply on one connection (an NFSv4.1 back
/// channel: CB_NULL probes, CB_SEQUENCE-led CB_COMPOUNDs). A session's back-channel slot
/// table keeps its own calls far below this (Linux offers one slot); the bound is for a
/// connection several sessions share, and each waiting call holds only a small record.
pub const MAX_BACK_CALLS: usize = 64;

/// Replies the writer batches into one socket write before flushing.
pub const WRITE_BATCH: usize = 32;

const _: () = assert!(MIN_MAX_RECORD_BYTES <= DEFAULT_MAX_RECORD_BYTES);
const _: () = assert!(
    DEFAULT_MAX_RECORD_BYTES < (1 << 31),
    "fragment length is 31 bits"
);
const _: () = assert!(WRITE_BATCH <= DEFAULT_MAX_IN_FLIGHT);
const _: () = assert!(DEFAULT_MAX_CONNECTIONS_PER_CLIENT <= DEFAULT_MAX_CONNECTIONS);
const _: () = assert!(
    DEFAULT_CONN_BUDGET_BYTES >= 2 * DEFAULT_MAX_RECORD_BYTES as usize,
    "a connection can hold a largest request and a largest reply at once"
);
const _: () = assert!(DEFAULT_SERVER_BUDGET_BYTES >= 16 * DEFAULT_CONN_BUDGET_BYTES);
const _: () = assert!(DEFAULT_RECLAIM_IDLE.as_secs() < DEFAULT_IDLE_TIMEOUT.as_secs());

/// Warnings of one kind a client can trigger (see `ratelog`) logged per second; the rest
/// are counted and summarized, so a flood of bad calls writes a few lines a second.
pub const LOG_LINES_PER_SECOND: u64 = 10;

/// At most this many pieces go into one `writev` of a reply whose data is in memory
/// (Linux takes up to 1,024; a 1 MiB READ from the mem backend is 17 or 18 pieces with
/// its head and padding, one from the object backend's cache a few more).
pub const MAX_IOVECS: usize = 64;
