//! Wire limits of NLM v4 and NSM v1, and their program numbers. Every variable-length
//! field is decoded against one of these.

/// Longest `netobj` (cookies, owner handles, file handles in NLM), in bytes: XNFS
/// `MAXNETOBJ_SZ`.
pub const MAXNETOBJ_SZ: u32 = 1024;

/// Longest `caller_name` of a lock or share, in bytes: XNFS `LM_MAXSTRLEN`.
pub const LM_MAXSTRLEN: u32 = 1024;

/// Longest host name in `nlm4_notify` (FREE_ALL), in bytes: XNFS `MAXNAMELEN`
/// (`LM_MAXNAMELEN + 1`).
pub const MAXNAMELEN: u32 = 1025;

/// Longest host name in NSM arguments, in bytes: XNFS `SM_MAXSTRLEN`.
pub const SM_MAXSTRLEN: u32 = 1024;

/// Bytes of the private cookie an `SM_MON` caller gets back in its status callback.
pub const SM_PRIV_BYTES: usize = 16;

/// ONC RPC program number of NLM.
pub const NLM_PROGRAM: u32 = 100_021;

/// The NLM version that goes with NFSv3 (64-bit offsets).
pub const NLM_V4: u32 = 4;

/// ONC RPC program number of NSM (statd).
pub const NSM_PROGRAM: u32 = 100_024;

/// The one NSM version.
pub const NSM_V1: u32 = 1;

// Host names fit in a netobj-sized buffer; a notify name is a lock's caller name.
const _: () = assert!(SM_MAXSTRLEN <= MAXNETOBJ_SZ);
const _: () = assert!(LM_MAXSTRLEN < MAXNAMELEN);
