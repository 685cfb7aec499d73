//! The protocol-neutral file-system layer of granary.
//!
//! It owns the seam between protocols (NFSv3 now, NFSv4.1 later) and storage backends
//! (`mem`, `host`, `erofs`):
//!
//! - [`Backend`]: the one trait every backend implements, with plain types ([`Attr`],
//!   [`FileId`], [`Cred`]) and one closed error family ([`FsError`]);
//! - [`Export`] and [`ExportTable`]: policy shared by every backend and protocol (read-only,
//!   client networks, squashing, POSIX permissions, never leaving the export root);
//! - [`handle`]: authenticated file handles.
//!
//! Nothing here knows about XDR or NFS status codes.
#![forbid(unsafe_code)]

pub mod access;
pub mod backend;
pub mod checks;
pub mod error;
pub mod export;
pub mod handle;
pub mod limits;
pub mod types;

pub use backend::{
    Backend, HeadLock, HeadLocks, HeadShare, HeadShares, LockFreed, LockSource, LockSpan,
    ShareMode, ShareSource,
};
pub use checks::{Caller, Checks, Opened, Trusted};
pub use error::{FsError, FsResult};
pub use export::{Export, ExportId, ExportOptions, ExportTable, Squash};
pub use gtime::Timestamp;
pub use handle::{Handle, HandleKey, HANDLE_BYTES};
pub use types::*;
