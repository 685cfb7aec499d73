//! Wire limits of NFSv4.1/4.2: the largest item each decoder accepts, and the program
//! numbers. Every variable-length field is decoded against one of these; the server's
//! own, usually smaller, limits (session channel attributes, state table sizes) live with
//! the state they bound.

/// Largest file handle, in bytes (RFC 8881 `NFS4_FHSIZE`).
pub const NFS4_FHSIZE: u32 = 128;

/// Largest opaque owner, client id or server scope (RFC 8881 `NFS4_OPAQUE_LIMIT`).
pub const NFS4_OPAQUE_LIMIT: u32 = 1024;

/// Bytes in a session id (RFC 8881 `NFS4_SESSIONID_SIZE`).
pub const NFS4_SESSIONID_SIZE: usize = 16;

/// Bytes in the `other` part of a stateid (RFC 8881 `NFS4_OTHER_SIZE`).
pub const NFS4_OTHER_SIZE: usize = 12;

/// Bytes in a verifier (RFC 8881 `NFS4_VERIFIER_SIZE`).
pub const NFS4_VERIFIER_SIZE: usize = 8;

/// Longest component name a decoder accepts, in bytes. Above the 255-byte `NAME_MAX` for
/// the same reason as NFSv3's: a 256..=1024 byte name reaches the server and gets
/// `NFS4ERR_NAMETOOLONG` instead of `NFS4ERR_BADXDR`.
pub const MAX_NAME_WIRE: u32 = 1024;

/// Longest symlink target (`linktext4`), in bytes: Linux `PATH_MAX`.
pub const MAX_PATH_WIRE: u32 = 4096;

/// Longest COMPOUND tag. The RFC sets no bound; clients send an empty tag or a short
/// name, and the server echoes it back, so a long one only costs reply space.
pub const MAX_TAG: u32 = NFS4_OPAQUE_LIMIT;

/// Most operations decoded from one COMPOUND. A session's `ca_maxoperations` (what the
/// server grants, at most this) is the limit a client sees; this bound only stops a
/// hostile record before its ops are allocated. Linux sends at most about 20.
pub const MAX_OPS_WIRE: u32 = 256;

/// Largest READ or WRITE payload, in bytes: the same as NFSv3's, and Linux nfsd's.
pub const MAX_DATA: u32 = 1 << 20;

/// Most 32-bit words of an attribute bitmap. Attributes defined so far end at 82 (three
/// words); eight words (256 attributes) leave room for extensions without letting a
/// bitmap claim megabytes.
pub const MAX_BITMAP_WORDS: u32 = 8;

/// Largest `attrlist4` (the packed attribute values of one `fattr4`), in bytes. Every
/// fixed-size attribute together is well under 1 KiB; owner names and ACLs are the large
/// ones.
pub const MAX_ATTR_BYTES: u32 = 64 * 1024;

/// Most stateids in one TEST_STATEID. Linux tests one at a time.
pub const MAX_TEST_STATEIDS: u32 = 1024;

/// Most security entries (`callback_sec_parms4`, SECINFO results, hash/encryption OIDs)
/// in one argument or result; real clients send one or two.
pub const MAX_SEC_ENTRIES: u32 = 16;

/// Most supplementary groups in an `authsys_parms` (RFC 5531 `gids<16>`).
pub const MAX_AUTHSYS_GIDS: u32 = 16;

/// Longest machine name in an `authsys_parms` (RFC 5531).
pub const MAX_MACHINE_NAME: u32 = 255;

/// Most directory entries decoded from one READDIR reply (client side). Each entry takes
/// at least 24 bytes, so a reply within [`MAX_DATA`] stays far below.
pub const MAX_DIR_ENTRIES: u32 = 1 << 20;

/// Most referring-call lists and calls in a CB_SEQUENCE (server-sent; bounded for the
/// decoder of tests and clients).
pub const MAX_REFERRING_CALLS: u32 = 64;

/// Most results decoded from one READ_PLUS reply, and most segments in general lists.
pub const MAX_SEGMENTS: u32 = 1 << 16;

/// ONC RPC program number of NFS.
pub const NFS_PROGRAM: u32 = 100_003;

/// The NFS version this crate speaks (minor versions travel inside COMPOUND).
pub const NFS_V4: u32 = 4;

/// Procedure numbers of program 100003 version 4.
pub const NFSPROC4_NULL: u32 = 0;
pub const NFSPROC4_COMPOUND: u32 = 1;

/// Procedure numbers of the callback program (the number itself is the client's choice,
/// sent in CREATE_SESSION's `csa_cb_program`).
pub const CB_NULL: u32 = 0;
pub const CB_COMPOUND: u32 = 1;

// Names fit in paths; the largest handle fills whole XDR units.
const _: () = assert!(MAX_NAME_WIRE <= MAX_PATH_WIRE);
const _: () = assert!(xdr::padded(NFS4_FHSIZE as usize) == NFS4_FHSIZE as usize);
const _: () = assert!(MAX_DATA as u64 <= u32::MAX as u64);
// The smallest entry4 is 24 bytes plus its value_follows word.
const _: () = assert!(MAX_DIR_ENTRIES as u64 * 28 > MAX_DATA as u64);
