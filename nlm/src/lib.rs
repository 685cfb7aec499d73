//! NLM version 4 (the Network Lock Manager, X/Open XNFS chapter 10 and RFC 1813 appendix
//! II) and NSM version 1 (the Network Status Monitor, XNFS chapter 11) on the wire: the
//! side protocols that give NFSv3 clients byte-range locks and tell a server when a
//! client rebooted.
//!
//! This crate owns the XDR layout of every argument and result of both programs, in both
//! directions (the server decodes calls and, for callbacks such as `NLM4_GRANTED` and
//! `SM_NOTIFY`, encodes calls of its own). It knows nothing about files, locks or sockets.
//!
//! It promises, as `nfs3` does:
//!
//! - every type implements [`xdr::Encode`] and [`xdr::Decode`], and
//!   `decode(encode(x)) == x`;
//! - decoding never panics and every variable-length item (cookies, owners, handles,
//!   names) is checked against a named constant in [`limits`] before anything is
//!   allocated; a violation is an [`xdr::DecodeError`], answered with `GARBAGE_ARGS`;
//! - encoding writes whatever the value holds, so tests can build hostile requests.
//!
//! # Naming
//!
//! The XDR names without their `nlm4_` / `sm_` prefix, in Rust case: `nlm4_lockargs` is
//! [`nlm4::LockArgs`], `sm_stat_res` is [`nsm::StatRes`]. Field names are the XDR ones.
#![forbid(unsafe_code)]

pub mod limits;
pub mod nlm4;
pub mod nsm;
