//! Wire limits of NFSv3 and MOUNT v3: the largest item each decoder accepts, and the
//! program numbers. Every variable-length field is decoded against one of these.

/// Largest file handle, in bytes (RFC 1813 `NFS3_FHSIZE`, MOUNT `FHSIZE3`). A handle of
/// zero bytes decodes; the server answers it with `NFS3ERR_BADHANDLE`.
pub const FHSIZE3: u32 = 64;

/// Longest file name a decoder accepts, in bytes. Deliberately above the 255-byte
/// `NAME_MAX` the file systems enforce, so that a 256..=1024 byte name reaches the server
/// and gets `NFS3ERR_NAMETOOLONG` (what the client expects) rather than `GARBAGE_ARGS`.
/// Anything longer is garbage.
pub const MAX_NAME_WIRE: u32 = 1024;

/// Longest path (symlink target, `nfspath3`), in bytes: Linux `PATH_MAX`.
pub const MAX_PATH_WIRE: u32 = 4096;

/// Largest READ or WRITE payload, in bytes. The server advertises this as `rtmax` and
/// `wtmax`, and clients never send or ask for more, so no margin is needed: a larger
/// opaque is a decode error before 1 MiB+ is buffered. Equal to Linux nfsd's maximum.
pub const MAX_DATA: u32 = 1 << 20;

/// Most READDIR / READDIRPLUS entries decoded from one reply. Each entry takes at least
/// 24 bytes, so a reply that honours a `count` of at most [`MAX_DATA`] stays far below.
pub const MAX_DIR_ENTRIES: u32 = 1 << 20;

/// Longest MOUNT host or group name, in bytes (RFC 1813 appendix I `MNTNAMLEN`).
pub const MNTNAMLEN: u32 = 255;

/// Longest MOUNT directory path, in bytes (RFC 1813 appendix I `MNTPATHLEN`).
pub const MNTPATHLEN: u32 = 1024;

/// Most security flavors in one MNT reply. Real servers list one to three; the RFC sets
/// no bound, 64 is far beyond any server.
pub const MAX_AUTH_FLAVORS: u32 = 64;

/// Most entries in a MOUNT DUMP reply (hosts with something mounted).
pub const MAX_MOUNT_LIST: u32 = 1 << 16;

/// Most exports in a MOUNT EXPORT reply.
pub const MAX_EXPORTS: u32 = 1 << 12;

/// Most groups (client names or networks) listed for one export.
pub const MAX_EXPORT_GROUPS: u32 = 1 << 12;

/// ONC RPC program number of NFS.
pub const NFS_PROGRAM: u32 = 100_003;

/// The NFS version this crate speaks.
pub const NFS_V3: u32 = 3;

/// ONC RPC program number of MOUNT.
pub const MOUNT_PROGRAM: u32 = 100_005;

/// The MOUNT version that goes with NFSv3.
pub const MOUNT_V3: u32 = 3;

// Names must fit in paths; mount paths are a kind of path.
const _: () = assert!(MAX_NAME_WIRE <= MAX_PATH_WIRE);
const _: () = assert!(MNTNAMLEN < MAX_NAME_WIRE);
const _: () = assert!(MNTPATHLEN <= MAX_PATH_WIRE);
// The largest handle fills whole XDR units, and the data limit fits the u32 `count`.
const _: () = assert!(xdr::padded(FHSIZE3 as usize) == FHSIZE3 as usize);
const _: () = assert!(MAX_DATA as u64 <= u32::MAX as u64);
// The smallest entry3 is 24 bytes plus its value_follows word; MAX_DIR_ENTRIES of them
// must exceed anything a MAX_DATA-sized reply can hold.
const _: () = assert!(MAX_DIR_ENTRIES as u64 * 28 > MAX_DATA as u64);
