//! The one seam between protocols and storage.
//!
//! A backend stores files; it does not know about NFS, exports, squashing or permission
//! bits of callers: the export layer ([`crate::export::Export`]) checks those before it
//! calls in. A backend promises:
//!
//! - every method is synchronous and safe to call from many threads at once;
//! - a `FileId` that no longer names a file gives `FsError::Stale`;
//! - directory operations are atomic with respect to each other (a rename is never seen
//!   half done);
//! - ctime moves on every change of data, attributes or (for directories) entries, and
//!   mtime moves with data or entry changes, taken from the backend's injected clock.

use bytes::{Bytes, BytesMut};
use gtime::Timestamp;

use crate::error::FsResult;
use crate::types::{
    Attr, Cookie, CreateMode, DirPage, FileId, FsProperties, FsStat, Name, Owner, ReadReply,
    SetAttr, SpecialFile, Stability, WriteReply,
};

/// Storage behind an export: `mem`, `host` or `erofs`.
pub trait Backend: Send + Sync + 'static {
    /// Short name for logs: "mem", "host", "erofs".
    fn kind(&self) -> &'static str;

    /// The root directory.
    fn root(&self) -> FileId;

    /// Static properties.
    fn properties(&self) -> FsProperties;

    /// Space and file counts.
    fn fsstat(&self) -> FsResult<FsStat>;

    fn getattr(&self, id: FileId) -> FsResult<Attr>;

    /// Applies `set` atomically. If `guard` is given, the file's ctime must equal it at
    /// the moment of the change, else `NotSync` and nothing changes. A size change on a
    /// non-regular file is `Inval` (`IsDir` for a directory).
    fn setattr(&self, id: FileId, set: &SetAttr, guard: Option<Timestamp>) -> FsResult<Attr>;

    /// Resolves one name in `dir` (`NotDir` if `dir` is not a directory).
    fn lookup(&self, dir: FileId, name: &Name) -> FsResult<FileId>;

    /// The parent of directory `dir`; the root is its own parent.
    fn parent(&self, dir: FileId) -> FsResult<FileId>;

    /// Reads up to `count` bytes at `offset`. Holes read as zeros. Reading at or past the
    /// end returns no data and `eof`. `IsDir` for directories, `Inval` for other
    /// non-regular files.
    fn read(&self, id: FileId, offset_bytes: u64, count: u32) -> FsResult<ReadReply>;

    /// [`Backend::read`] into the end of `out` (a reply being encoded): appends exactly
    /// the bytes read and returns `eof`. On an error `out` is as it was. Backends that
    /// can fill a caller's buffer (a copy from memory, a `pread`) override this; the
    /// default copies what `read` returns.
    fn read_into(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        out: &mut BytesMut,
    ) -> FsResult<bool> {
        let reply = self.read(id, offset_bytes, count)?;
        out.extend_from_slice(&reply.data);
        Ok(reply.eof)
    }

    /// Writes `data` at `offset`, growing the file (and leaving a hole) as needed.
    /// `FBig` past `properties().max_file_size`, `NoSpc` when storage is full (nothing is
    /// written then).
    fn write(
        &self,
        id: FileId,
        offset_bytes: u64,
        data: &[u8],
        stable: Stability,
    ) -> FsResult<WriteReply>;

    /// Makes earlier unstable writes in the range durable (`count` 0 = to the end).
    fn commit(&self, id: FileId, offset_bytes: u64, count: u32) -> FsResult<()>;

    /// Creates (or per `mode`, reuses) a regular file. Returns its id.
    fn create(&self, dir: FileId, name: &Name, mode: &CreateMode, owner: Owner)
        -> FsResult<FileId>;

    fn mkdir(&self, dir: FileId, name: &Name, attrs: &SetAttr, owner: Owner) -> FsResult<FileId>;

    fn symlink(
        &self,
        dir: FileId,
        name: &Name,
        target: &[u8],
        attrs: &SetAttr,
        owner: Owner,
    ) -> FsResult<FileId>;

    fn mknod(
        &self,
        dir: FileId,
        name: &Name,
        kind: SpecialFile,
        attrs: &SetAttr,
        owner: Owner,
    ) -> FsResult<FileId>;

    /// The target of a symlink (`Inval` for other types).
    fn readlink(&self, id: FileId) -> FsResult<Bytes>;

    /// Removes a non-directory entry (`IsDir` for a directory). The file lives on while
    /// other links remain.
    fn remove(&self, dir: FileId, name: &Name) -> FsResult<()>;

    /// Removes an empty directory (`NotDir`, `NotEmpty`).
    fn rmdir(&self, dir: FileId, name: &Name) -> FsResult<()>;

    /// Renames atomically, replacing a compatible target (file over file, empty directory
    /// over directory). Renaming a directory into its own subtree is `Inval`.
    fn rename(&self, from_dir: FileId, from: &Name, to_dir: FileId, to: &Name) -> FsResult<()>;

    /// Adds a hard link to `id` (not a directory) named `name` in `dir`.
    fn link(&self, id: FileId, dir: FileId, name: &Name) -> FsResult<()>;

    /// Lists up to `max_entries` entries after `cookie` (including `.` and `..`).
    fn readdir(&self, dir: FileId, cookie: Cookie, max_entries: usize) -> FsResult<DirPage>;
}
