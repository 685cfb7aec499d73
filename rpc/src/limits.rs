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

/// Default open connections per server; more are accepted and closed at once, with a
/// log line, so a flood cannot exhaust file descriptors.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// How long a client may take to deliver the rest of a record it has started. A client
/// that sends half a request and stalls is dropped after this.
pub const DEFAULT_RECORD_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection may stay silent between requests before it is closed.
/// Linux nfsd closes idle TCP connections after about 6 minutes.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(360);

/// Replies the writer batches into one socket write before flushing.
pub const WRITE_BATCH: usize = 32;

const _: () = assert!(MIN_MAX_RECORD_BYTES <= DEFAULT_MAX_RECORD_BYTES);
const _: () = assert!(
    DEFAULT_MAX_RECORD_BYTES < (1 << 31),
    "fragment length is 31 bits"
);
const _: () = assert!(WRITE_BATCH <= DEFAULT_MAX_IN_FLIGHT);
