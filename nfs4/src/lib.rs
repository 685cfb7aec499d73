//! NFS version 4.1 (RFC 8881) and 4.2 (RFC 7862) on the wire: COMPOUND and its
//! operations, the attribute codec, and the callback program's CB_COMPOUND.
//!
//! This crate owns the XDR layout of every argument and result granary serves or sends,
//! in both directions: the server decodes COMPOUND arguments and encodes results (and
//! encodes CB_COMPOUND calls on the back channel); granary's own test client does the
//! reverse. It knows nothing about files, state or sockets; `nfsd` maps these types to
//! the `vfs` seam and the NFSv4 state.
//!
//! It promises, as `nfs3` does:
//!
//! - every type implements [`xdr::Encode`] and [`xdr::Decode`], and
//!   `decode(encode(x)) == x` (property tests in `tests/roundtrip.rs`);
//! - decoding never panics and every variable-length item (handles, names, owners,
//!   bitmaps, attribute values, data, operation lists) is checked against a named
//!   constant in [`limits`] before anything is allocated;
//! - a COMPOUND whose operations cannot all be read still decodes up to the first that
//!   cannot ([`compound::Stopped`]), so the server can answer it as RFC 8881 section 15.2
//!   asks: the operations before it run, it gets its error, and the COMPOUND ends there.
//!
//! # Naming
//!
//! Operation `FOO` has `FooArgs` (RFC `FOO4args`) in [`ops`] and `FooOk` (RFC
//! `FOO4resok`) in [`results`]; a result that is a status plus an optional body is
//! [`results::Res4`]. RFC field names are kept.
#![forbid(unsafe_code)]

pub mod attr;
pub mod compound;
pub mod limits;
pub mod ops;
pub mod results;
pub mod types;

pub use compound::{Compound4Args, Compound4Res};
pub use ops::ArgOp;
pub use results::{Res4, ResOp};
pub use types::{Bitmap4, Fattr4, Nfsstat4, Stateid4};
