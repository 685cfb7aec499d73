//! Plain, protocol-neutral types that cross the Backend seam.

use bytes::Bytes;
use gtime::Timestamp;

use crate::error::{FsError, FsResult};
use crate::limits;

/// A backend's identifier for one file: stable for the file's life, never reused by the
/// mem backend. Sent to clients inside a handle and as the `fileid` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId(pub u64);

/// The kind of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    Regular,
    Directory,
    BlockDevice,
    CharDevice,
    Symlink,
    Socket,
    Fifo,
}

/// Major and minor number of a device node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DeviceNumber {
    pub major: u32,
    pub minor: u32,
}

/// Attributes of a file, as every protocol needs them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub file_type: FileType,
    /// Permission bits and setuid/setgid/sticky (`0o7777`), never the type bits.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size_bytes: u64,
    /// Bytes of storage actually allocated (less than `size_bytes` for sparse files).
    pub used_bytes: u64,
    pub rdev: DeviceNumber,
    /// Set by the export layer, not the backend: identifies the exported file system.
    pub fsid: u64,
    pub fileid: FileId,
    /// Distinguishes incarnations of a reused `fileid` (host backends); 0 where ids are
    /// never reused.
    pub generation: u32,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
}

impl Attr {
    #[must_use]
    pub fn is_dir(&self) -> bool {
        self.file_type == FileType::Directory
    }
}

/// How to set one timestamp in a SETATTR-like request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetTime {
    #[default]
    DontChange,
    /// The server's current time.
    ServerTime,
    /// A time the client chose.
    Client(Timestamp),
}

/// Attribute changes requested by a client; `None` leaves the attribute alone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size_bytes: Option<u64>,
    pub atime: SetTime,
    pub mtime: SetTime,
}

impl SetAttr {
    /// True if nothing is to be changed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The identity an operation runs as, after the export's squash rules were applied.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, at most `limits::MAX_GROUPS`.
    pub groups: Vec<u32>,
}

impl Cred {
    /// The superuser, for tests and internal setup.
    #[must_use]
    pub fn root() -> Self {
        Self {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        }
    }

    #[must_use]
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// True if `gid` is the primary or a supplementary group.
    #[must_use]
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// Owner given to a newly created file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// A validated directory-entry name: 1..=255 bytes, not `.` or `..`, without `/` or NUL.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(Bytes);

impl Name {
    /// Validates a name from a client.
    ///
    /// # Errors
    /// `NameTooLong` past `MAX_NAME_BYTES`; `Inval` for empty, `.`, `..`, or a name
    /// containing `/` or NUL (such names are never created nor resolved through).
    pub fn new(raw: impl Into<Bytes>) -> FsResult<Self> {
        let raw = raw.into();
        if raw.len() > limits::MAX_NAME_BYTES {
            return Err(FsError::NameTooLong);
        }
        if raw.is_empty() || &raw[..] == b"." || &raw[..] == b".." {
            return Err(FsError::Inval);
        }
        if raw.iter().any(|&b| b == b'/' || b == 0) {
            return Err(FsError::Inval);
        }
        Ok(Self(raw))
    }

    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    #[must_use]
    pub fn to_bytes(&self) -> Bytes {
        self.0.clone()
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(&self.0))
    }
}

/// How durable a write must be before the call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stability {
    /// May be lost on a crash until a COMMIT.
    Unstable,
    /// File data on stable storage; metadata may lag.
    DataSync,
    /// Data and metadata on stable storage.
    FileSync,
}

/// How CREATE treats an existing name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateMode {
    /// Reuse an existing regular file (applying the attributes, e.g. truncation).
    Unchecked(SetAttr),
    /// Fail with `Exist` if the name exists.
    Guarded(SetAttr),
    /// Exactly-once create: an existing file created with the same verifier is a
    /// retransmission and succeeds; any other existing file is `Exist`.
    Exclusive([u8; 8]),
}

/// A special (non-regular, non-directory, non-symlink) file for MKNOD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialFile {
    BlockDevice(DeviceNumber),
    CharDevice(DeviceNumber),
    Socket,
    Fifo,
}

impl SpecialFile {
    #[must_use]
    pub fn file_type(self) -> FileType {
        match self {
            Self::BlockDevice(_) => FileType::BlockDevice,
            Self::CharDevice(_) => FileType::CharDevice,
            Self::Socket => FileType::Socket,
            Self::Fifo => FileType::Fifo,
        }
    }
}

/// The attributes a client compares with its cache before trusting the ones after a
/// change (NFSv3 `wcc_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreAttr {
    pub size_bytes: u64,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
}

impl PreAttr {
    #[must_use]
    pub fn of(attr: &Attr) -> Self {
        Self {
            size_bytes: attr.size_bytes,
            mtime: attr.mtime,
            ctime: attr.ctime,
        }
    }
}

/// One file's (or directory's) attributes just before and just after one change, taken
/// inside the backend's critical section for that change, so that no other change lies
/// between them (RFC 1813 section 2.6, weak cache consistency).
///
/// `before` is `None` only where the backend cannot bracket the change exactly (it says
/// where in its docs); a client then revalidates instead of trusting its cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub before: Option<PreAttr>,
    pub after: Attr,
}

/// A new entry: the new file's attributes and its directory's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub attr: Attr,
    pub dir: Change,
}

/// A RENAME: both directories' changes (the same change twice when they are one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renamed {
    pub from_dir: Change,
    pub to_dir: Change,
}

/// A LINK: the file's attributes after it gained the name, and the directory's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Linked {
    pub attr: Attr,
    pub dir: Change,
}

/// A name resolved: the file's attributes and the directory's, as the lookup saw them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub attr: Attr,
    pub dir: Attr,
}

/// Outcome of a read into a caller's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadDone {
    /// Attributes taken with the permission check, before the bytes were copied: a reply
    /// that carries them next to the data never pairs old data with newer attributes.
    pub attr: Attr,
    /// True if the read reached the end of the file.
    pub eof: bool,
}

/// A read answered with where its bytes are rather than a copy of them (see
/// [`crate::Backend::read_slice`]): the transport sends them from the file itself.
#[derive(Clone)]
pub struct ReadSlice {
    /// Open for reading; the transport holds it until the bytes are sent.
    pub file: std::sync::Arc<dyn std::os::fd::AsFd + Send + Sync>,
    pub offset: u64,
    /// Bytes in the range when `done.attr` was taken (the file's size bounds it).
    pub len: u32,
    pub done: ReadDone,
}

impl std::fmt::Debug for ReadSlice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadSlice")
            .field("fd", &self.file.as_fd())
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("done", &self.done)
            .finish()
    }
}

/// A read answered with the bytes as the backend holds them in memory, in pieces (see
/// [`crate::Backend::read_shared`]): the transport sends the pieces as they are.
#[derive(Debug, Clone)]
pub struct ReadParts {
    /// In order; their lengths add up to the bytes read (none past the end of the file).
    pub parts: Vec<bytes::Bytes>,
    pub done: ReadDone,
}

impl ReadParts {
    /// Bytes read.
    #[must_use]
    pub fn len(&self) -> usize {
        self.parts.iter().map(bytes::Bytes::len).sum()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a seek looks for (`lseek`'s `SEEK_DATA` / `SEEK_HOLE`, NFSv4.2 SEEK's
/// `data_content4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    Data,
    Hole,
}

/// Where a seek found what it looked for (see [`crate::Backend::seek`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sought {
    /// The first byte at or after the offset asked for that holds the content; `None`
    /// when no data follows the offset. A hole always follows: every file ends in the
    /// virtual hole at its size.
    pub offset_bytes: Option<u64>,
    /// The attributes the permission check saw (the size the answer is bounded by).
    pub attr: Attr,
}

/// Outcome of a copy between two files (see [`crate::Backend::copy_range`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    /// Bytes copied: fewer than asked is a short copy the client continues, and 0 means
    /// the source ends at the offset asked for.
    pub count_bytes: u64,
    /// The stability the copied bytes reached in the destination.
    pub committed: Stability,
    /// The destination's attributes around the copy.
    pub file: Change,
}

/// Outcome of a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub count: u32,
    /// The stability actually reached (at least the one asked for).
    pub committed: Stability,
    /// The file's attributes around this write.
    pub file: Change,
}

/// A position in a directory listing. `Cookie::START` begins a listing; a cookie returned
/// with an entry resumes after that entry, even if other entries were added or removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cookie(pub u64);

impl Cookie {
    pub const START: Cookie = Cookie(0);
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The raw entry name; `.` and `..` are included by backends that list them.
    pub name: Bytes,
    pub fileid: FileId,
    /// Resumes the listing after this entry.
    pub cookie: Cookie,
    /// The entry's attributes, when the backend read them with the listing (the object
    /// backend: names and attributes in one query), so READDIRPLUS asks no GETATTR for
    /// it; `None` when it did not (the caller then asks [`crate::Backend::getattr`]).
    pub attr: Option<Attr>,
}

/// A page of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirPage {
    pub entries: Vec<DirEntry>,
    /// True if no entries follow the last one in `entries`.
    pub eof: bool,
    /// Changes when cookies of this directory stop being valid (0 = cookies never expire).
    pub verifier: u64,
}

/// Space and file-count figures of a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsStat {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub avail_bytes: u64,
    pub total_files: u64,
    pub free_files: u64,
    pub avail_files: u64,
}

/// Static properties of a backend (FSINFO / PATHCONF material).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsProperties {
    /// True if a `FileId` never names another file later (mem, erofs): handles carry
    /// generation 0 and resolving one makes no backend call. False (host) makes the
    /// export call [`crate::Backend::generation`] once per handle resolved.
    pub stable_ids: bool,
    pub max_file_size: u64,
    /// Granularity of stored timestamps.
    pub time_granularity_ns: u32,
    pub supports_hard_links: bool,
    pub supports_symlinks: bool,
    pub max_links: u32,
    pub max_name_bytes: u32,
    pub case_insensitive: bool,
    pub case_preserving: bool,
    pub read_only: bool,
}

/// What a caller wants to do with a file, for access checks (NFSv3 ACCESS3 bit meanings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessMask(pub u32);

impl AccessMask {
    pub const READ: u32 = 0x01;
    pub const LOOKUP: u32 = 0x02;
    pub const MODIFY: u32 = 0x04;
    pub const EXTEND: u32 = 0x08;
    pub const DELETE: u32 = 0x10;
    pub const EXECUTE: u32 = 0x20;
    pub const ALL: u32 = 0x3f;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_never_created_or_resolved() {
        for bad in [&b""[..], b".", b"..", b"a/b", b"/", b"a\0b"] {
            assert_eq!(
                Name::new(Bytes::copy_from_slice(bad)),
                Err(FsError::Inval),
                "{bad:?}"
            );
        }
        assert_eq!(Name::new(vec![b'x'; 256]), Err(FsError::NameTooLong));
        assert!(Name::new(vec![b'x'; 255]).is_ok());
        assert!(Name::new(&b"...a"[..]).is_ok());
    }
}
