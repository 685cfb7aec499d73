//! granary's NFSv3 + MOUNT v3 client, over TCP with tokio, with the NFSv4.1 session and
//! lock calls ([`v4`]) and the NLM v4 lock calls ([`nlm`]) `granary bench`'s lock rows
//! make. Used by granary's tests, its load generator (`granary bench`) and `granary lab`.
//!
//! The crate owns the client side of the wire, in three layers:
//!
//! - [`RpcConnection`] ([`conn`]): one pipelined ONC RPC connection. Many calls may be in
//!   flight at once from any number of tasks; each gets a fresh xid and the reply with
//!   that xid, whatever order replies come in. Raw access (`call_raw`, `build_call`) sends
//!   arbitrary record bodies for wire tests; truly malformed framing is easiest with a
//!   plain `tokio::net::TcpStream`.
//! - [`Nfs3Client`] ([`nfs`]): one typed method per NFSv3 and MOUNT v3 procedure, taking
//!   the `nfs3` argument type and returning the `nfs3` result type as the server sent it.
//! - the convenience layer ([`ops`]): mount, path lookup, create, `mkdir -p`, whole-file
//!   pipelined write (with COMMIT and verifier check) and read, directory listing; a
//!   non-OK status becomes [`ClientError::Nfs`].
//!
//! It promises: no call hangs once its connection is dead (every pending and later call
//! fails with [`ClientError::Closed`]), and none waits past the handle's timeout if one is
//! set; nothing from the network is trusted: replies are framed against
//! [`limits::MAX_REPLY_BYTES`], decoded with the bounded `nfs3` decoders, and loops that
//! follow the server (cookies, short reads and writes) are bounded by [`limits`].
//!
//! Credentials are `AUTH_SYS` (default uid 0, gid 0, machine `granary-client`, see
//! [`auth_sys`]) or `AUTH_NONE`, set per handle: clones of a connection or client share the
//! socket but not the credential, so tests can act as several users on one connection.
#![forbid(unsafe_code)]

pub mod auth;
pub mod conn;
pub mod error;
pub mod limits;
pub mod nfs;
pub mod nlm;
pub mod ops;
pub mod url;
pub mod v4;

pub use auth::{auth_sys, default_auth};
pub use conn::{PendingReply, RpcConnection};
pub use error::{nfs_ok, ClientError};
pub use nfs::Nfs3Client;
pub use nlm::NlmClient;
pub use ops::DirEntry;
pub use rpc::msg::Auth;
pub use url::ServerAddrs;
pub use v4::Nfs4Session;
