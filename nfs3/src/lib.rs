//! NFS version 3 (RFC 1813) and MOUNT version 3 (RFC 1813 appendix I) on the wire.
//!
//! This crate owns the XDR layout of every argument and result of both programs, in both
//! directions: the server decodes arguments and encodes results, granary's own client
//! encodes arguments and decodes results. It knows nothing about files, exports or
//! sockets; `nfsd` maps these types to the `vfs` seam.
//!
//! It promises:
//!
//! - every type implements [`xdr::Encode`] and [`xdr::Decode`], and
//!   `decode(encode(x)) == x`;
//! - decoding never panics and every variable-length item (handles, names, paths, data,
//!   lists) is checked against a named constant in [`limits`] before anything is
//!   allocated; a violation is an [`xdr::DecodeError`], answered with `GARBAGE_ARGS`;
//! - encoding writes whatever the value holds, even beyond those limits, so tests can
//!   build the malformed requests a hostile client would send.
//!
//! # Naming
//!
//! Procedure `FOO` has `FooArgs`, `FooOk` (RFC `FOO3resok`), `FooFail` (RFC
//! `FOO3resfail`) and `FooRes = Res3<FooOk, FooFail>` in [`nfs`]; a void part is
//! [`nfs::Void`]. Every result is a [`nfs::Res3`]: `Ok(body)` or `Fail(status, body)`.
//! RFC field names are kept (`obj_attributes`, `dir_wcc`, ...); `where` is `where_`.
#![forbid(unsafe_code)]

pub mod limits;
pub mod mount;
pub mod nfs;
