//! The one seam between protocols and storage.
//!
//! A backend stores files. It does not know about NFS, exports or squashing; the export
//! layer ([`crate::export::Export`]) refuses what needs no file's attributes (a read-only
//! export, a bad name, a device node from a non-root caller) before it calls in. What
//! depends on a file's current attributes (permission bits, the sticky bit, ownership
//! rules) the backend asks the [`Checks`] it is given, at the points its docs list,
//! inside the critical section of the change, so no other change can slip between the
//! check and the change.
//!
//! A backend promises:
//!
//! - every method is synchronous and safe to call from many threads at once;
//! - on a thread that may not block (`sync::blocking::allowed` is false: a network
//!   worker's event loop), a call that would sleep for long (a sync, a read from the
//!   disk, a wait for a decode job) returns `FsError::WouldBlock` before it changes
//!   anything, and the server makes the same call again where it may block. A backend
//!   that never sleeps (mem) never returns it;
//! - a `FileId` that no longer names a file gives `FsError::Stale`;
//! - directory operations are atomic with respect to each other (a rename is never seen
//!   half done);
//! - a mutating call returns the attributes the protocol replies with, taken inside its
//!   critical section: the file's new attributes and, for a directory it changed, a
//!   [`Change`] whose `before` and `after` bracket exactly this change (no other change to
//!   that directory lies between them). A failed call returns only the error;
//! - ctime moves on every change of data, attributes or (for directories) entries, and
//!   mtime moves with data or entry changes, taken from the backend's injected clock;
//! - attributes it returns are "observed" (multigrain timestamps, seed 000): a client saw
//!   them, so the next change must get a later ctime.
//!
//! The space and copy calls of NFSv4.2 ([`Backend::seek`], [`Backend::allocate`],
//! [`Backend::deallocate`], [`Backend::copy_range`], [`Backend::clone_range`]) have
//! defaults: a file that is all data with the virtual hole at its end, a copy through
//! `read_into` and `write`, and `NotSupp` for the rest. They are called with ranges the
//! export checked (see [`crate::Export`]): a non-empty length whose end fits
//! `limits::MAX_FILE_SIZE`, and no overlap when both ends are one file.
//!
//! One call per RPC is the aim: the NFSv3 server makes one backend call for GETATTR, READ,
//! WRITE, SETATTR, LOOKUP, ACCESS, CREATE, MKDIR, REMOVE, RENAME and LINK when they
//! succeed (failures add one getattr for the reply's post-operation attributes).

use bytes::{Bytes, BytesMut};
use gtime::Timestamp;

use crate::checks::Checks;
use crate::error::{FsError, FsResult};
use crate::limits::{MAX_COPY_BYTES, MAX_IO_BYTES};
use crate::types::{
    AccessMask, Attr, Change, Content, Cookie, Copied, CreateMode, Created, DirPage, FileId, Found,
    FsProperties, FsStat, Linked, Name, ReadDone, ReadParts, ReadSlice, Renamed, SetAttr, Sought,
    SpecialFile, Stability, Written,
};

/// Storage behind an export: `mem`, `host`, `erofs` or `object`.
pub trait Backend: Send + Sync + 'static {
    /// Short name for logs: "mem", "host", "erofs", "object".
    fn kind(&self) -> &'static str;

    /// The root directory.
    fn root(&self) -> FileId;

    /// True if every call may wait on the network (the object backend's database and S3
    /// store): the servers then run each call on this backend on the blocking pool before
    /// it starts, instead of on a worker's event loop. Such a backend still answers
    /// `WouldBlock` from any call made where blocking is forbidden. Backends whose calls
    /// are local keep the default, false.
    fn remote(&self) -> bool {
        false
    }

    /// Byte-range locks across the heads of one namespace, when several servers serve
    /// this backend's files (the object backend): the servers' lock front ends ask it
    /// before they grant a lock and tell it what they hold ([`HeadLocks`]). A backend
    /// served by one server keeps the default, `None`: the server's own lock manager is
    /// the whole truth.
    fn head_locks(&self) -> Option<&dyn HeadLocks> {
        None
    }

    /// Share reservations across the heads of one namespace (NFSv4 OPEN's deny modes,
    /// NLM SHARE), as [`Backend::head_locks`] for byte-range locks ([`HeadShares`]).
    /// Default `None`: the server's own share table is the whole truth.
    fn head_shares(&self) -> Option<&dyn HeadShares> {
        None
    }

    /// Static properties; read once when the export is built.
    fn properties(&self) -> FsProperties;

    /// Space and file counts.
    fn fsstat(&self) -> FsResult<FsStat>;

    /// The generation of `id` (`Stale` if it names nothing). Called once per handle
    /// resolved, and only when `properties().stable_ids` is false: a backend whose ids are
    /// never reused keeps the default and is never asked. Must not mark the ctime observed.
    fn generation(&self, id: FileId) -> FsResult<u32> {
        let _ = id;
        Ok(0)
    }

    /// How many times data this backend had acknowledged may have been lost since it
    /// started (a failed sync: a writeback error). The NFS server folds it into the write
    /// verifier of its WRITE and COMMIT replies, so clients resend what they wrote
    /// UNSTABLE. A backend whose acknowledged writes cannot be lost keeps the default, 0.
    /// Called once per WRITE and COMMIT: must be a cheap counter read.
    fn writeback_errors(&self) -> u64 {
        0
    }

    fn getattr(&self, id: FileId) -> FsResult<Attr>;

    /// Which of `want` the caller (`checks`) would be granted on `id`, and its attributes
    /// (NFSv3 ACCESS, and LOOKUP of `.`). The default asks `checks.access` (the mode
    /// bits); a backend whose host enforces permissions itself (ACLs, LSMs) asks the host.
    /// Read-only exports are the export's business: it takes the write bits away after.
    fn access(
        &self,
        id: FileId,
        want: AccessMask,
        checks: &dyn Checks,
    ) -> FsResult<(AccessMask, Attr)> {
        let attr = self.getattr(id)?;
        Ok((checks.access(&attr, want), attr))
    }

    /// Applies what `checks.setattr_rules` returns for `set`, atomically. If `guard` is
    /// given, the file's ctime must equal it at the moment of the change, else `NotSync`
    /// and nothing changes. A size change on a non-regular file is `Inval` (`IsDir` for a
    /// directory).
    fn setattr(
        &self,
        id: FileId,
        set: &SetAttr,
        guard: Option<Timestamp>,
        checks: &dyn Checks,
    ) -> FsResult<Change>;

    /// Resolves one name in `dir` (`NotDir` if `dir` is not a directory), after
    /// `checks.may_search(dir)`.
    fn lookup(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Found>;

    /// The parent of directory `dir` (the root is its own parent), after
    /// `checks.may_search(dir)`.
    fn parent(&self, dir: FileId, checks: &dyn Checks) -> FsResult<Found>;

    /// Appends up to `count` bytes at `offset` to `out` (a reply being encoded), after
    /// `checks.may_read`. Holes read as zeros; at or past the end, no data and `eof`.
    /// `IsDir` for directories, `Inval` for other non-regular files. On an error `out` is
    /// as it was. The attributes returned are the ones checked, taken before the copy.
    fn read_into(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        out: &mut BytesMut,
        checks: &dyn Checks,
    ) -> FsResult<ReadDone>;

    /// A read of at least `limits::ZERO_COPY_READ_MIN_BYTES` that the transport may send
    /// from the file itself: the same checks and attributes as [`Backend::read_into`], but
    /// the bytes stay in the file. `None` (the default) when the backend's data is not in
    /// a file the transport can send from; the caller then uses `read_into`. The bytes
    /// are read when sent, after the attributes were taken, so a reply never pairs older
    /// data with newer attributes.
    fn read_slice(
        &self,
        _id: FileId,
        _offset_bytes: u64,
        _count: u32,
        _checks: &dyn Checks,
    ) -> FsResult<Option<ReadSlice>> {
        Ok(None)
    }

    /// A read whose bytes the backend holds in memory already (the mem backend's chunks,
    /// the object backend's cache of S3 objects): the same checks, attributes and bytes
    /// as [`Backend::read_into`], handed over as shared pieces that the transport sends as
    /// they are, instead of copied into the reply. `None` (the default) when the backend has no such pieces;
    /// the caller then uses `read_into`. Asked for reads of at least
    /// `limits::ZERO_COPY_READ_MIN_BYTES`.
    fn read_shared(
        &self,
        _id: FileId,
        _offset_bytes: u64,
        _count: u32,
        _checks: &dyn Checks,
    ) -> FsResult<Option<ReadParts>> {
        Ok(None)
    }

    /// [`Backend::read_into`] for a caller whose access an NFSv4 OPEN already checked (an
    /// open that grants reading, which holds the file: [`Backend::hold`]), as knfsd reads
    /// through an open's `nfsd_file`: a backend may skip the permission check and the
    /// attributes, which nothing asks for. Returns whether the read reached the end of the
    /// file. `checks` is an [`crate::Opened`] (its `may_read` allows); the default is
    /// `read_into` with them.
    fn read_opened(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        out: &mut BytesMut,
        checks: &dyn Checks,
    ) -> FsResult<bool> {
        self.read_into(id, offset_bytes, count, out, checks)
            .map(|done| done.eof)
    }

    /// [`Backend::write`] for a caller whose access an NFSv4 OPEN for writing already
    /// checked, when nothing asks for the file's attributes (an NFSv4 WRITE that ends its
    /// COMPOUND): a backend may skip the permission check and the attributes around the
    /// write. A write by a caller without the privilege still clears set-id bits. Returns
    /// the count written and the stability reached. `checks` is an [`crate::Opened`] (its
    /// `may_write` only drops set-id bits); the default is [`Backend::write_shared`] with
    /// them.
    fn write_opened(
        &self,
        id: FileId,
        offset_bytes: u64,
        data: &Bytes,
        stable: Stability,
        checks: &dyn Checks,
    ) -> FsResult<(u32, Stability)> {
        self.write_shared(id, offset_bytes, data, stable, checks)
            .map(|w| (w.count, w.committed))
    }

    /// Writes `data` at `offset`, growing the file (and leaving a hole) as needed, after
    /// `checks.may_write`. `FBig` past `properties().max_file_size`, `NoSpc` when storage
    /// is full (nothing is written then).
    fn write(
        &self,
        id: FileId,
        offset_bytes: u64,
        data: &[u8],
        stable: Stability,
        checks: &dyn Checks,
    ) -> FsResult<Written>;

    /// [`Backend::write`] of bytes the caller holds in a shared buffer (the request's), which
    /// a backend that keeps written bytes past the call (the object backend's buffered
    /// UNSTABLE writes) may keep instead of copying them. The default is `write`.
    fn write_shared(
        &self,
        id: FileId,
        offset_bytes: u64,
        data: &Bytes,
        stable: Stability,
        checks: &dyn Checks,
    ) -> FsResult<Written> {
        self.write(id, offset_bytes, data, stable, checks)
    }

    /// An NFSv4 OPEN of regular file `id` (one call per open stateid): until the matching
    /// [`Backend::release`], the file stays readable and writable through `id` after its
    /// last name is removed, and a backend that caches open files keeps the file's entry
    /// (seed 004). Returns whether a removed file is kept so (the server then tells the
    /// client `OPEN4_RESULT_PRESERVE_UNLINKED`, and the client need not rename it away
    /// instead of removing it). The default keeps nothing and says so.
    fn hold(&self, id: FileId) -> FsResult<bool> {
        let _ = id;
        Ok(false)
    }

    /// Ends one [`Backend::hold`] of `id` (CLOSE, or its client's lease ran out). A
    /// removed file whose last hold ends is freed. An id that names nothing is ignored.
    fn release(&self, id: FileId) {
        let _ = id;
    }

    /// Makes earlier unstable writes in the range durable (`count` 0 = to the end).
    /// Returns the file's attributes around the commit.
    fn commit(&self, id: FileId, offset_bytes: u64, count: u32) -> FsResult<Change>;

    /// Creates (or per `mode`, reuses) a regular file.
    fn create(
        &self,
        dir: FileId,
        name: &Name,
        mode: &CreateMode,
        checks: &dyn Checks,
    ) -> FsResult<Created>;

    fn mkdir(
        &self,
        dir: FileId,
        name: &Name,
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created>;

    fn symlink(
        &self,
        dir: FileId,
        name: &Name,
        target: &[u8],
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created>;

    fn mknod(
        &self,
        dir: FileId,
        name: &Name,
        kind: SpecialFile,
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created>;

    /// The target of a symlink (`Inval` for other types) and its attributes.
    fn readlink(&self, id: FileId) -> FsResult<(Bytes, Attr)>;

    /// Removes a non-directory entry (`IsDir` for a directory). The file lives on while
    /// other links remain.
    fn remove(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Change>;

    /// Removes an empty directory (`NotDir`, `NotEmpty`).
    fn rmdir(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Change>;

    /// Renames atomically, replacing a compatible target (file over file, empty directory
    /// over directory). Renaming a directory into its own subtree is `Inval`.
    fn rename(
        &self,
        from_dir: FileId,
        from: &Name,
        to_dir: FileId,
        to: &Name,
        checks: &dyn Checks,
    ) -> FsResult<Renamed>;

    /// Adds a hard link to `id` (`IsDir` for a directory) named `name` in `dir`.
    fn link(&self, id: FileId, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Linked>;

    /// Lists up to `max_entries` entries after `cookie` (including `.` and `..`), after
    /// `checks.may_list(dir)`; also returns the directory's attributes. A backend that
    /// reads entries' attributes with the names may return them in [`crate::DirEntry::attr`]
    /// (as fresh as a GETATTR at the time of the listing would be).
    fn readdir(
        &self,
        dir: FileId,
        cookie: Cookie,
        max_entries: usize,
        checks: &dyn Checks,
    ) -> FsResult<(DirPage, Attr)>;

    /// Where the first byte of `what` at or after `offset_bytes` is, after
    /// `checks.may_read` (`lseek` `SEEK_DATA` / `SEEK_HOLE`). `NxIo` at or past the end
    /// of the file; `IsDir` for a directory, `Inval` for another non-regular file. The
    /// default knows no holes: the whole file is data and the one hole is the virtual
    /// hole at its end, as `lseek` answers on a file system that keeps no holes.
    fn seek(
        &self,
        id: FileId,
        offset_bytes: u64,
        what: Content,
        checks: &dyn Checks,
    ) -> FsResult<Sought> {
        let attr = self.getattr(id)?;
        regular(&attr)?;
        checks.may_read(&attr)?;
        if offset_bytes >= attr.size_bytes {
            return Err(FsError::NxIo);
        }
        let found = match what {
            Content::Data => offset_bytes,
            Content::Hole => attr.size_bytes,
        };
        Ok(Sought {
            offset_bytes: Some(found),
            attr,
        })
    }

    /// Reserves storage for `len_bytes` at `offset_bytes`, after `checks.may_write`, so
    /// writes there cannot fail for space; the file grows to the end of the range
    /// (`fallocate` mode 0). `NoSpc` when it does not fit (nothing reserved then).
    /// Default: `NotSupp`.
    fn allocate(
        &self,
        id: FileId,
        offset_bytes: u64,
        len_bytes: u64,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        let _ = (id, offset_bytes, len_bytes, checks);
        Err(FsError::NotSupp)
    }

    /// Frees the storage of `len_bytes` at `offset_bytes`, after `checks.may_write`: the
    /// range reads as zeros and the size does not change (`fallocate`
    /// `PUNCH_HOLE | KEEP_SIZE`). Default: `NotSupp`.
    fn deallocate(
        &self,
        id: FileId,
        offset_bytes: u64,
        len_bytes: u64,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        let _ = (id, offset_bytes, len_bytes, checks);
        Err(FsError::NotSupp)
    }

    /// Copies up to `len_bytes` from `src` at `src_offset_bytes` to `dst` at
    /// `dst_offset_bytes`, after `checks.may_read(src)` and `checks.may_write(dst)`.
    /// Copies at most `limits::MAX_COPY_BYTES` per call and stops at the source's end: a
    /// short count is not an error. The default reads and writes `MAX_IO_BYTES` at a
    /// time through [`Backend::read_into`] and [`Backend::write`] (unstable writes).
    fn copy_range(
        &self,
        src: FileId,
        src_offset_bytes: u64,
        dst: FileId,
        dst_offset_bytes: u64,
        len_bytes: u64,
        checks: &dyn Checks,
    ) -> FsResult<Copied> {
        let mut done = 0_u64;
        let mut committed = Stability::FileSync;
        let mut first: Option<Change> = None;
        let mut last = None;
        let want = len_bytes.min(MAX_COPY_BYTES);
        let mut buf = BytesMut::new();
        while done < want {
            let count =
                u32::try_from((want - done).min(u64::from(MAX_IO_BYTES))).unwrap_or(MAX_IO_BYTES);
            buf.clear();
            let read = self.read_into(src, src_offset_bytes + done, count, &mut buf, checks)?;
            if buf.is_empty() {
                break;
            }
            let w = self.write(
                dst,
                dst_offset_bytes + done,
                &buf,
                Stability::Unstable,
                checks,
            )?;
            committed = committed.min(w.committed);
            done += u64::from(w.count);
            last = Some(w.file.after.clone());
            first.get_or_insert(w.file);
            if read.eof {
                break;
            }
        }
        let file = match (first, last) {
            (Some(first), Some(after)) => Change {
                before: first.before,
                after,
            },
            _ => {
                let attr = self.getattr(dst)?;
                checks.may_write(&attr)?;
                Change {
                    before: None,
                    after: attr,
                }
            }
        };
        Ok(Copied {
            count_bytes: done,
            committed,
            file,
        })
    }

    /// Makes `len_bytes` of `dst` at `dst_offset_bytes` share the storage of `src` at
    /// `src_offset_bytes` (`FICLONERANGE`), all or nothing, after `checks.may_read(src)`
    /// and `checks.may_write(dst)`. Offsets and length are multiples of
    /// [`Backend::clone_block_bytes`] (the length may instead reach the source's end).
    /// Default: `NotSupp`.
    fn clone_range(
        &self,
        src: FileId,
        src_offset_bytes: u64,
        dst: FileId,
        dst_offset_bytes: u64,
        len_bytes: u64,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        let _ = (
            src,
            src_offset_bytes,
            dst,
            dst_offset_bytes,
            len_bytes,
            checks,
        );
        Err(FsError::NotSupp)
    }

    /// The alignment [`Backend::clone_range`] needs, when this backend can clone at all
    /// (NFSv4.2's `clone_blksize`). Default: `None`, no clones.
    fn clone_block_bytes(&self) -> Option<u32> {
        None
    }
}

/// One range of byte-range locks a head holds (or grants to a waiter) on a file, as the
/// other heads must see it: `first..=last`, exclusive or shared. The owners stay in the
/// head's own lock manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockSpan {
    pub exclusive: bool,
    pub first: u64,
    pub last: u64,
}

impl LockSpan {
    /// Whether a lock of `self` and one of `other` would be in each other's way.
    #[must_use]
    pub fn conflicts(&self, other: &Self) -> bool {
        (self.exclusive || other.exclusive) && self.first <= other.last && other.first <= self.last
    }
}

/// A lock another head holds in the way of a request: that head's number and its span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadLock {
    pub head: u64,
    pub span: LockSpan,
}

/// What this head's lock manager holds on a file, as [`LockSpan`]s in order of offset
/// (`locks::LockManager::mirror`), read when the backend records it.
pub type LockSource = std::sync::Arc<dyn Fn(FileId) -> Vec<LockSpan> + Send + Sync>;

/// Told that another head's ranges of a file this head watches ([`HeadLocks::watch`])
/// may have come free: called on the backend's own threads, so it must not block.
pub type LockFreed = std::sync::Arc<dyn Fn(FileId) + Send + Sync>;

/// Byte-range locks that hold across the heads (servers) of one namespace. The head's
/// own lock manager stays the authority among its clients; this seam keeps, per file,
/// what each head holds where every head can see it, and refuses a head a lock another
/// live head holds. Calls that wait answer [`FsError::WouldBlock`] where blocking is
/// forbidden, [`FsError::Jukebox`] when the engine is down.
pub trait HeadLocks: Send + Sync {
    /// Where [`HeadLocks`] reads what this head holds on a file: set once, when the
    /// server builds its lock manager, before any other call.
    fn attach(&self, source: LockSource);

    /// A LOCK on this head: under a lock of `id` that every head takes, checks `want`
    /// against the other live heads' locks; when none is in the way, runs `grant` (the
    /// head's lock manager) and records what the head holds on `id` after it, all in one
    /// transaction, and returns after its commit. `Ok(Some(_))`: another head's lock is
    /// in the way and `grant` did not run.
    ///
    /// # Errors
    /// `WouldBlock`, `Jukebox`; when the error comes after `grant` ran, the head holds
    /// what `grant` took and the record follows later (the caller may undo it).
    fn lock(
        &self,
        id: FileId,
        want: LockSpan,
        grant: &mut dyn FnMut(),
    ) -> FsResult<Option<HeadLock>>;

    /// A test (LOCKT, NLM TEST): another live head's lock in the way of `want`.
    ///
    /// # Errors
    /// `WouldBlock`, `Jukebox`.
    fn test(&self, id: FileId, want: LockSpan) -> FsResult<Option<HeadLock>>;

    /// What this head holds on `id` (`None`: on any file) may have changed: the record
    /// is brought in step in the background. Never blocks, never fails: a release is
    /// never lost, it is recorded once the engine answers.
    fn changed(&self, id: Option<FileId>);

    /// An unlock on this head: runs `release` (the head's lock manager), then brings
    /// the record of `id` in step and waits for it, so that another head's client finds
    /// the range free at once. `release` always runs, first.
    ///
    /// # Errors
    /// `WouldBlock`, `Jukebox` (the record then follows in the background).
    fn settle(&self, id: FileId, release: &mut dyn FnMut()) -> FsResult<()>;

    /// Where the backend says that ranges of a watched file may have come free on
    /// another head: set once, with [`HeadLocks::attach`].
    fn on_freed(&self, freed: LockFreed);

    /// A mark of the releases this head has heard of from the other heads so far, to
    /// pass to [`HeadLocks::watch`]: read it before the [`HeadLocks::lock`] whose refusal
    /// makes a request wait.
    fn notices(&self) -> u64;

    /// Requests of this head wait for other heads' ranges of `id`: from now on, each
    /// release another head records on `id` calls the [`LockFreed`] callback (promptly
    /// while the backend hears of releases; otherwise at a bounded interval), and so
    /// does another head's lease running out. When the backend heard of any release
    /// since `since` (a [`HeadLocks::notices`] mark), it calls it for `id` at once: that
    /// release may be the one the request waits for, heard before the watch began.
    fn watch(&self, id: FileId, since: u64);

    /// No request of this head waits on `id` any more.
    fn unwatch(&self, id: FileId);
}

/// A share reservation as the other heads see it: the access a head's holders have
/// (read 1, write 2) and the access they deny others, each the union over the head's
/// holders of the file (`locks::share::bits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShareMode {
    pub access: u32,
    pub deny: u32,
}

impl ShareMode {
    /// Whether a reservation of `self` and one of `other` would be in each other's way.
    #[must_use]
    pub fn conflicts(&self, other: &Self) -> bool {
        self.deny & other.access != 0 || other.deny & self.access != 0
    }
}

/// Another head's reservation in the way of a request: that head's number and mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadShare {
    pub head: u64,
    pub mode: ShareMode,
}

/// What this head's share table holds on a file, as one [`ShareMode`] (the union of its
/// holders'), read when the backend records it.
pub type ShareSource = std::sync::Arc<dyn Fn(FileId) -> ShareMode + Send + Sync>;

/// Share reservations that hold across the heads of one namespace. The head's own share
/// table stays the authority among its clients; this seam refuses a head a reservation
/// another live head's is in the way of, and keeps what each head holds where the
/// others can see it. Calls that wait answer [`FsError::WouldBlock`] where blocking is
/// forbidden, [`FsError::Jukebox`] when the engine is down.
pub trait HeadShares: Send + Sync {
    /// Where [`HeadShares`] reads what this head holds on a file: set once, when the
    /// server builds its share table, before any other call.
    fn attach(&self, source: ShareSource);

    /// An OPEN or SHARE on this head asking for `want`: checks it against the other live
    /// heads' reservations; when none is in the way runs `grant` (the head's share
    /// table) and records what the head holds on `id` after it, and returns after the
    /// record is committed. `Ok(Some(_))`: another head's reservation is in the way and
    /// `grant` did not run. A backend may grant without a record when no head can be in
    /// the way (no deny anywhere on the file, and `want` denies nothing).
    ///
    /// # Errors
    /// `WouldBlock`, `Jukebox`; when the error comes after `grant` ran, the head holds
    /// what `grant` took and the record follows later (the caller may undo it).
    fn share(
        &self,
        id: FileId,
        want: ShareMode,
        grant: &mut dyn FnMut(),
    ) -> FsResult<Option<HeadShare>>;

    /// What this head holds on `id` (`None`: on any file) may have changed: the record
    /// is brought in step in the background. Never blocks, never fails.
    fn changed(&self, id: Option<FileId>);

    /// A CLOSE, OPEN_DOWNGRADE or UNSHARE on this head: runs `release` (the head's share
    /// table), then brings the record of `id` in step and waits for it, so another
    /// head's client finds the file free at once. `release` always runs, first.
    ///
    /// # Errors
    /// `WouldBlock`, `Jukebox` (the record then follows in the background).
    fn settle(&self, id: FileId, release: &mut dyn FnMut()) -> FsResult<()>;
}

/// `Ok` for a regular file; `IsDir` for a directory, `Inval` for any other type.
///
/// # Errors
/// As above.
pub fn regular(attr: &Attr) -> FsResult<()> {
    match attr.file_type {
        crate::types::FileType::Regular => Ok(()),
        crate::types::FileType::Directory => Err(FsError::IsDir),
        _ => Err(FsError::Inval),
    }
}
