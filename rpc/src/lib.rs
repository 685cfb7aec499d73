//! ONC RPC version 2 (RFC 5531) for granary's servers and its client.
//!
//! - [`msg`]: call and reply headers, AUTH_NONE and AUTH_SYS;
//! - [`record`]: record marking on TCP, with size, fragment and time limits;
//! - [`dispatch`]: procedure tables and the dispatcher that answers RPC-level errors;
//! - [`reply`]: reply records whose bulk data is sent straight from a file;
//! - [`drc`]: the duplicate request cache for non-idempotent calls;
//! - [`conn`]: one pipelined server connection;
//! - `outbound`: a connection's way out: replies written at once or through its writer;
//! - [`backchannel`]: calls the server sends to a client on its connection;
//! - [`offload`]: where a call that must block runs, away from the connection's event loop;
//! - [`budget`]: memory budgets in bytes per connection and per server;
//! - [`table`]: every open connection: admission, reclaim, idle/stall scan;
//! - [`ratelog`]: rate-limited warnings for what clients can trigger at will;
//! - [`limits`]: every limit of this layer.
#![forbid(unsafe_code)]

pub mod backchannel;
pub mod budget;
pub mod conn;
pub mod dispatch;
pub mod drc;
pub mod limits;
pub mod msg;
pub mod offload;
mod outbound;
pub mod ratelog;
pub mod record;
pub mod reply;
pub mod table;

pub use dispatch::{CacheClass, CallContext, Dispatcher, ProcError, Procedure, Program, Service};
pub use msg::{Auth, AuthSys};
pub use reply::{Body, FileSlice, Reply};

#[doc(hidden)]
pub use xdr as __xdr;
