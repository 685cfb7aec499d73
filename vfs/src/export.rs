//! Exports: a backend made visible under a path, with who may use it and as whom.
//!
//! [`Export`] is the facade protocols call. It owns the policy that is the same for every
//! backend and every protocol version: read-only exports, squashing, name validation,
//! never resolving `..` above the export root, and the export's fsid on attributes. The
//! checks that depend on a file's current attributes (permission bits, sticky
//! directories, ownership) it hands to the backend as a [`Caller`] (see
//! [`crate::checks`]), so they run inside the backend's critical section.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use gtime::Timestamp;
use ipnet::IpNet;

use crate::backend::Backend;
use crate::checks::{Caller, Checks, Opened};
use crate::error::{FsError, FsResult};
use crate::handle::{Handle, HandleKey, HANDLE_BYTES};
use crate::limits::MAX_FILE_SIZE;
use crate::types::{
    AccessMask, Attr, Change, Content, Cookie, Copied, CreateMode, Created, Cred, DirPage, FileId,
    Found, FsProperties, FsStat, Linked, Name, ReadDone, ReadParts, ReadSlice, Renamed, SetAttr,
    Sought, SpecialFile, Stability, Written,
};

/// Identifies an export inside handles; stable across restarts for the same config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExportId(pub u32);

/// Which callers are mapped to the anonymous identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Squash {
    /// Every uid/gid is used as sent.
    None,
    /// uid 0 becomes the anonymous uid (and gid 0 the anonymous gid). Linux's default.
    #[default]
    Root,
    /// Every caller becomes the anonymous identity.
    All,
}

/// Per-export policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportOptions {
    pub read_only: bool,
    /// Client networks allowed to mount and use the export.
    pub clients: Vec<IpNet>,
    pub squash: Squash,
    pub anon_uid: u32,
    pub anon_gid: u32,
}

/// uid/gid of `nobody` on Debian, Linux nfsd's default anonymous identity.
pub const NOBODY: u32 = 65_534;

impl Default for ExportOptions {
    fn default() -> Self {
        Self {
            read_only: false,
            clients: vec![
                "0.0.0.0/0".parse().expect("valid CIDR"),
                "::/0".parse().expect("valid CIDR"),
            ],
            squash: Squash::Root,
            anon_uid: NOBODY,
            anon_gid: NOBODY,
        }
    }
}

impl ExportOptions {
    /// True if a client at `addr` may use the export. IPv4-mapped IPv6 addresses are
    /// matched as IPv4.
    #[must_use]
    pub fn allows(&self, addr: IpAddr) -> bool {
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 @ IpAddr::V4(_) => v4,
        };
        self.clients.iter().any(|net| net.contains(&addr))
    }

    /// The identity a request runs as. `sent` is the AUTH_SYS credential, `None` for
    /// AUTH_NONE (which is always anonymous).
    #[must_use]
    pub fn map_cred(&self, sent: Option<&Cred>) -> Cred {
        let anon = || Cred {
            uid: self.anon_uid,
            gid: self.anon_gid,
            groups: Vec::new(),
        };
        let Some(sent) = sent else { return anon() };
        match self.squash {
            Squash::All => anon(),
            Squash::Root if sent.uid == 0 => anon(),
            Squash::Root => {
                let squash_gid = |g: u32| if g == 0 { self.anon_gid } else { g };
                Cred {
                    uid: sent.uid,
                    gid: squash_gid(sent.gid),
                    groups: sent.groups.iter().copied().map(squash_gid).collect(),
                }
            }
            Squash::None => sent.clone(),
        }
    }
}

/// One exported file system.
pub struct Export {
    pub id: ExportId,
    /// Part of every handle of this export: a handle of another incarnation is `Stale`.
    pub incarnation: u32,
    /// The path clients mount, e.g. `/` or `/data`. Always starts with `/`.
    pub path: String,
    pub options: ExportOptions,
    backend: Arc<dyn Backend>,
    /// The backend's properties, read once.
    props: FsProperties,
    root: FileId,
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("id", &self.id)
            .field("incarnation", &self.incarnation)
            .field("path", &self.path)
            .field("backend", &self.backend.kind())
            .field("options", &self.options)
            .finish()
    }
}

impl Export {
    #[must_use]
    pub fn new(
        id: ExportId,
        incarnation: u32,
        path: String,
        options: ExportOptions,
        backend: Arc<dyn Backend>,
    ) -> Self {
        debug_assert!(path.starts_with('/'));
        let props = backend.properties();
        let root = backend.root();
        Self {
            id,
            incarnation,
            path,
            options,
            backend,
            props,
            root,
        }
    }

    #[must_use]
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    #[must_use]
    pub fn root(&self) -> FileId {
        self.root
    }

    fn writable(&self) -> FsResult<()> {
        if self.options.read_only || self.props.read_only {
            return Err(FsError::RoFs);
        }
        Ok(())
    }

    /// Stamps the export's fsid on attributes from the backend.
    fn own(&self, mut attr: Attr) -> Attr {
        attr.fsid = u64::from(self.id.0);
        attr
    }

    fn own_change(&self, mut change: Change) -> Change {
        change.after.fsid = u64::from(self.id.0);
        change
    }

    fn own_created(&self, mut made: Created) -> Created {
        made.attr.fsid = u64::from(self.id.0);
        made.dir = self.own_change(made.dir);
        made
    }

    /// Attributes, with the export's fsid.
    pub fn getattr(&self, id: FileId) -> FsResult<Attr> {
        self.backend.getattr(id).map(|a| self.own(a))
    }

    /// Resolves `raw_name` in `dir`. `.` is `dir`; `..` is its parent, except that the
    /// export root is its own parent, so no lookup leaves the export.
    pub fn lookup(&self, cred: &Cred, dir: FileId, raw_name: &[u8]) -> FsResult<Found> {
        let checks = Caller::new(cred);
        let found = match raw_name {
            b"." => self.lookup_self(dir, &checks),
            b".." if dir == self.root => self.lookup_self(dir, &checks),
            b".." => self.backend.parent(dir, &checks),
            _ => {
                let name = Name::new(Bytes::copy_from_slice(raw_name))?;
                self.backend.lookup(dir, &name, &checks)
            }
        }?;
        Ok(Found {
            attr: self.own(found.attr),
            dir: self.own(found.dir),
        })
    }

    /// `.` (and `..` of the root): the directory itself, if the caller may search it (asked
    /// of the backend, so a host export's ACLs apply).
    fn lookup_self(&self, dir: FileId, checks: &dyn Checks) -> FsResult<Found> {
        let want = AccessMask(AccessMask::LOOKUP);
        let (granted, attr) = self.backend.access(dir, want, checks)?;
        if !attr.is_dir() {
            return Err(FsError::NotDir);
        }
        if granted.0 & AccessMask::LOOKUP == 0 {
            return Err(FsError::Access);
        }
        Ok(Found {
            attr: attr.clone(),
            dir: attr,
        })
    }

    /// Which of `want` the caller would be granted (the backend decides: mode bits, or
    /// the host's own answer); a read-only export grants no modify, extend or delete.
    pub fn access(
        &self,
        cred: &Cred,
        id: FileId,
        want: AccessMask,
    ) -> FsResult<(AccessMask, Attr)> {
        let (mut granted, attr) = self.backend.access(id, want, &Caller::new(cred))?;
        if self.writable().is_err() {
            granted.0 &= !(AccessMask::MODIFY | AccessMask::EXTEND | AccessMask::DELETE);
        }
        Ok((AccessMask(granted.0 & want.0), self.own(attr)))
    }

    /// Changes attributes by the ownership rules of [`Caller`].
    pub fn setattr(
        &self,
        cred: &Cred,
        id: FileId,
        set: &SetAttr,
        guard: Option<Timestamp>,
    ) -> FsResult<Change> {
        self.writable()?;
        let change = self.backend.setattr(id, set, guard, &Caller::new(cred))?;
        Ok(self.own_change(change))
    }

    /// Reads file data into the end of `out`, with no copy in between (see
    /// [`Backend::read_into`]).
    pub fn read_into(
        &self,
        cred: &Cred,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        out: &mut BytesMut,
    ) -> FsResult<ReadDone> {
        let mut done = self
            .backend
            .read_into(id, offset_bytes, count, out, &Caller::new(cred))?;
        done.attr = self.own(done.attr);
        Ok(done)
    }

    /// A read the transport sends from the file (see [`Backend::read_slice`]).
    pub fn read_slice(
        &self,
        cred: &Cred,
        id: FileId,
        offset_bytes: u64,
        count: u32,
    ) -> FsResult<Option<ReadSlice>> {
        let slice = self
            .backend
            .read_slice(id, offset_bytes, count, &Caller::new(cred))?;
        Ok(slice.map(|mut s| {
            s.done.attr = self.own(s.done.attr);
            s
        }))
    }

    /// A read whose bytes the backend hands over as shared pieces (see
    /// [`Backend::read_shared`]); `opened`: through an NFSv4 open that grants reading,
    /// checked as [`Opened`] (as [`Export::read_opened`]).
    pub fn read_shared(
        &self,
        cred: &Cred,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        opened: bool,
    ) -> FsResult<Option<ReadParts>> {
        let read = if opened {
            self.backend
                .read_shared(id, offset_bytes, count, &Opened::new(cred))?
        } else {
            self.backend
                .read_shared(id, offset_bytes, count, &Caller::new(cred))?
        };
        Ok(read.map(|mut r| {
            r.done.attr = self.own(r.done.attr);
            r
        }))
    }

    pub fn write(
        &self,
        cred: &Cred,
        id: FileId,
        offset_bytes: u64,
        data: &[u8],
        stable: Stability,
    ) -> FsResult<Written> {
        self.writable()?;
        let mut written = self
            .backend
            .write(id, offset_bytes, data, stable, &Caller::new(cred))?;
        written.file = self.own_change(written.file);
        Ok(written)
    }

    /// [`Export::write`] of the request's own bytes ([`Backend::write_shared`]: a backend
    /// that keeps them need not copy them).
    pub fn write_shared(
        &self,
        cred: &Cred,
        id: FileId,
        offset_bytes: u64,
        data: &bytes::Bytes,
        stable: Stability,
    ) -> FsResult<Written> {
        self.writable()?;
        let mut written =
            self.backend
                .write_shared(id, offset_bytes, data, stable, &Caller::new(cred))?;
        written.file = self.own_change(written.file);
        Ok(written)
    }

    /// [`Export::read_into`] through an NFSv4 open that grants reading (see
    /// [`Backend::read_opened`]): whether the read reached the end of the file.
    pub fn read_opened(
        &self,
        cred: &Cred,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        out: &mut BytesMut,
    ) -> FsResult<bool> {
        self.backend
            .read_opened(id, offset_bytes, count, out, &Opened::new(cred))
    }

    /// [`Export::write_shared`] through an NFSv4 open for writing (checked as
    /// [`Opened`]): the count written, the stability reached, and with `attrs` the file's
    /// attributes after the write; without, the backend need not take them
    /// ([`Backend::write_opened`]).
    pub fn write_opened(
        &self,
        cred: &Cred,
        id: FileId,
        offset_bytes: u64,
        data: &bytes::Bytes,
        (stable, attrs): (Stability, bool),
    ) -> FsResult<(u32, Stability, Option<Attr>)> {
        self.writable()?;
        let checks = Opened::new(cred);
        if !attrs {
            let (count, committed) =
                self.backend
                    .write_opened(id, offset_bytes, data, stable, &checks)?;
            return Ok((count, committed, None));
        }
        let w = self
            .backend
            .write_shared(id, offset_bytes, data, stable, &checks)?;
        Ok((w.count, w.committed, Some(self.own(w.file.after))))
    }

    /// See [`Backend::hold`]: an NFSv4 OPEN keeps the file until [`Export::release`].
    pub fn hold(&self, id: FileId) -> FsResult<bool> {
        self.backend.hold(id)
    }

    /// See [`Backend::release`].
    pub fn release(&self, id: FileId) {
        self.backend.release(id);
    }

    pub fn commit(&self, id: FileId, offset_bytes: u64, count: u32) -> FsResult<Change> {
        self.writable()?;
        let change = self.backend.commit(id, offset_bytes, count)?;
        Ok(self.own_change(change))
    }

    /// Creates a regular file. An UNCHECKED create that would truncate an existing file
    /// needs write permission on that file, as an `open(O_CREAT|O_TRUNC)` would.
    pub fn create(
        &self,
        cred: &Cred,
        dir: FileId,
        name: &Name,
        mode: &CreateMode,
    ) -> FsResult<Created> {
        self.writable()?;
        let made = self.backend.create(dir, name, mode, &Caller::new(cred))?;
        Ok(self.own_created(made))
    }

    pub fn mkdir(
        &self,
        cred: &Cred,
        dir: FileId,
        name: &Name,
        attrs: &SetAttr,
    ) -> FsResult<Created> {
        self.writable()?;
        let made = self.backend.mkdir(dir, name, attrs, &Caller::new(cred))?;
        Ok(self.own_created(made))
    }

    pub fn symlink(
        &self,
        cred: &Cred,
        dir: FileId,
        name: &Name,
        target: &[u8],
        attrs: &SetAttr,
    ) -> FsResult<Created> {
        self.writable()?;
        if target.is_empty() {
            return Err(FsError::Inval);
        }
        if target.len() > crate::limits::MAX_PATH_BYTES {
            return Err(FsError::NameTooLong);
        }
        let made = self
            .backend
            .symlink(dir, name, target, attrs, &Caller::new(cred))?;
        Ok(self.own_created(made))
    }

    /// Device nodes need root; sockets and FIFOs anyone with write access to `dir`.
    pub fn mknod(
        &self,
        cred: &Cred,
        dir: FileId,
        name: &Name,
        kind: SpecialFile,
        attrs: &SetAttr,
    ) -> FsResult<Created> {
        self.writable()?;
        let device = matches!(
            kind,
            SpecialFile::BlockDevice(_) | SpecialFile::CharDevice(_)
        );
        if device && !cred.is_root() {
            return Err(FsError::Perm);
        }
        let made = self
            .backend
            .mknod(dir, name, kind, attrs, &Caller::new(cred))?;
        Ok(self.own_created(made))
    }

    pub fn readlink(&self, id: FileId) -> FsResult<(Bytes, Attr)> {
        let (target, attr) = self.backend.readlink(id)?;
        Ok((target, self.own(attr)))
    }

    pub fn remove(&self, cred: &Cred, dir: FileId, name: &Name) -> FsResult<Change> {
        self.writable()?;
        let change = self.backend.remove(dir, name, &Caller::new(cred))?;
        Ok(self.own_change(change))
    }

    pub fn rmdir(&self, cred: &Cred, dir: FileId, name: &Name) -> FsResult<Change> {
        self.writable()?;
        let change = self.backend.rmdir(dir, name, &Caller::new(cred))?;
        Ok(self.own_change(change))
    }

    pub fn rename(
        &self,
        cred: &Cred,
        from_dir: FileId,
        from: &Name,
        to_dir: FileId,
        to: &Name,
    ) -> FsResult<Renamed> {
        self.writable()?;
        let done = self
            .backend
            .rename(from_dir, from, to_dir, to, &Caller::new(cred))?;
        Ok(Renamed {
            from_dir: self.own_change(done.from_dir),
            to_dir: self.own_change(done.to_dir),
        })
    }

    pub fn link(&self, cred: &Cred, id: FileId, dir: FileId, name: &Name) -> FsResult<Linked> {
        self.writable()?;
        let done = self.backend.link(id, dir, name, &Caller::new(cred))?;
        Ok(Linked {
            attr: self.own(done.attr),
            dir: self.own_change(done.dir),
        })
    }

    pub fn readdir(
        &self,
        cred: &Cred,
        dir: FileId,
        cookie: Cookie,
        max_entries: usize,
    ) -> FsResult<(DirPage, Attr)> {
        let (mut page, attr) =
            self.backend
                .readdir(dir, cookie, max_entries, &Caller::new(cred))?;
        for e in &mut page.entries {
            e.attr = e.attr.take().map(|a| self.own(a));
        }
        Ok((page, self.own(attr)))
    }

    /// Where the next data or hole at or after `offset_bytes` is (see [`Backend::seek`]).
    pub fn seek(
        &self,
        cred: &Cred,
        id: FileId,
        offset_bytes: u64,
        what: Content,
    ) -> FsResult<Sought> {
        let mut sought = self
            .backend
            .seek(id, offset_bytes, what, &Caller::new(cred))?;
        debug_assert!(sought.offset_bytes.is_none_or(|o| o >= offset_bytes));
        sought.attr = self.own(sought.attr);
        Ok(sought)
    }

    /// Reserves storage for a range (see [`Backend::allocate`]): `Inval` for an empty
    /// range, `FBig` for one that ends past `MAX_FILE_SIZE`.
    pub fn allocate(
        &self,
        cred: &Cred,
        id: FileId,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> FsResult<Change> {
        self.writable()?;
        range_end(offset_bytes, len_bytes)?;
        let change = self
            .backend
            .allocate(id, offset_bytes, len_bytes, &Caller::new(cred))?;
        Ok(self.own_change(change))
    }

    /// Punches a hole (see [`Backend::deallocate`]), with the ranges of
    /// [`Export::allocate`].
    pub fn deallocate(
        &self,
        cred: &Cred,
        id: FileId,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> FsResult<Change> {
        self.writable()?;
        range_end(offset_bytes, len_bytes)?;
        let change = self
            .backend
            .deallocate(id, offset_bytes, len_bytes, &Caller::new(cred))?;
        Ok(self.own_change(change))
    }

    /// Copies between two files of this export (see [`Backend::copy_range`]): `Inval`
    /// for overlapping ranges of one file, `FBig` for a destination past
    /// `MAX_FILE_SIZE`. An empty range copies nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_range(
        &self,
        cred: &Cred,
        src: FileId,
        src_offset_bytes: u64,
        dst: FileId,
        dst_offset_bytes: u64,
        len_bytes: u64,
    ) -> FsResult<Copied> {
        self.writable()?;
        check_pair(src, src_offset_bytes, dst, dst_offset_bytes, len_bytes)?;
        let mut copied = self.backend.copy_range(
            src,
            src_offset_bytes,
            dst,
            dst_offset_bytes,
            len_bytes,
            &Caller::new(cred),
        )?;
        debug_assert!(copied.count_bytes <= len_bytes);
        copied.file = self.own_change(copied.file);
        Ok(copied)
    }

    /// Clones a range between two files of this export (see [`Backend::clone_range`]),
    /// with the ranges of [`Export::copy_range`]; `NotSupp` when the backend cannot.
    pub fn clone_range(
        &self,
        cred: &Cred,
        src: FileId,
        src_offset_bytes: u64,
        dst: FileId,
        dst_offset_bytes: u64,
        len_bytes: u64,
    ) -> FsResult<Change> {
        self.writable()?;
        check_pair(src, src_offset_bytes, dst, dst_offset_bytes, len_bytes)?;
        let change = self.backend.clone_range(
            src,
            src_offset_bytes,
            dst,
            dst_offset_bytes,
            len_bytes,
            &Caller::new(cred),
        )?;
        Ok(self.own_change(change))
    }

    /// The alignment clones need, if the backend can clone (see
    /// [`Backend::clone_block_bytes`]); `None` on a read-only export too.
    #[must_use]
    pub fn clone_block_bytes(&self) -> Option<u32> {
        self.writable().ok()?;
        self.backend.clone_block_bytes()
    }

    pub fn fsstat(&self) -> FsResult<FsStat> {
        self.backend.fsstat()
    }

    #[must_use]
    pub fn properties(&self) -> FsProperties {
        let mut props = self.props;
        props.read_only |= self.options.read_only;
        props
    }
}

/// The end of a non-empty range: `Inval` when empty, `FBig` past `MAX_FILE_SIZE`.
fn range_end(offset_bytes: u64, len_bytes: u64) -> FsResult<u64> {
    if len_bytes == 0 {
        return Err(FsError::Inval);
    }
    offset_bytes
        .checked_add(len_bytes)
        .filter(|&end| end <= MAX_FILE_SIZE)
        .ok_or(FsError::FBig)
}

/// A copy's or clone's ranges: the source's end must be a file offset (`Inval`), the
/// destination's fit `MAX_FILE_SIZE` (`FBig`), and two ranges of one file must not
/// overlap (`Inval`).
fn check_pair(
    src: FileId,
    src_offset_bytes: u64,
    dst: FileId,
    dst_offset_bytes: u64,
    len_bytes: u64,
) -> FsResult<()> {
    let src_end = src_offset_bytes
        .checked_add(len_bytes)
        .filter(|&end| end <= MAX_FILE_SIZE)
        .ok_or(FsError::Inval)?;
    let dst_end = dst_offset_bytes
        .checked_add(len_bytes)
        .filter(|&end| end <= MAX_FILE_SIZE)
        .ok_or(FsError::FBig)?;
    if src == dst && src_offset_bytes < dst_end && dst_offset_bytes < src_end {
        return Err(FsError::Inval);
    }
    Ok(())
}

/// Every export of a server, and the key that signs their handles.
#[derive(Debug)]
pub struct ExportTable {
    exports: Vec<Arc<Export>>,
    /// Export id → index in `exports`: a handle finds its export in O(1).
    by_id: HashMap<ExportId, usize>,
    key: HandleKey,
}

impl ExportTable {
    /// # Panics
    /// If two exports share an id or a path (config validation rejects that first).
    #[must_use]
    pub fn new(exports: Vec<Export>, key: HandleKey) -> Self {
        for (i, a) in exports.iter().enumerate() {
            for b in &exports[i + 1..] {
                assert!(
                    a.id != b.id && a.path != b.path,
                    "duplicate export {a:?} / {b:?}"
                );
            }
        }
        let by_id = exports.iter().enumerate().map(|(i, e)| (e.id, i)).collect();
        Self {
            exports: exports.into_iter().map(Arc::new).collect(),
            by_id,
            key,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Export>> {
        self.exports.iter()
    }

    #[must_use]
    pub fn by_id(&self, id: ExportId) -> Option<&Arc<Export>> {
        self.by_id.get(&id).map(|&i| &self.exports[i])
    }

    /// The export whose path is the longest component-wise prefix of `path`, and the
    /// components below it. `.` components are dropped; a `..` anywhere is refused with
    /// `Access`, so a mount path can never climb out of an export.
    pub fn by_mount_path<'p>(&self, path: &'p [u8]) -> FsResult<(&Arc<Export>, Vec<&'p [u8]>)> {
        let components: Vec<&[u8]> = path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
            .collect();
        if components.iter().any(|c| *c == b"..") {
            return Err(FsError::Access);
        }
        let mut best: Option<(&Arc<Export>, usize)> = None;
        for export in &self.exports {
            let export_components: Vec<&[u8]> = export
                .path
                .as_bytes()
                .split(|&b| b == b'/')
                .filter(|c| !c.is_empty())
                .collect();
            let is_prefix = components.len() >= export_components.len()
                && components[..export_components.len()] == export_components[..];
            if is_prefix && best.is_none_or(|(_, n)| export_components.len() > n) {
                best = Some((export, export_components.len()));
            }
        }
        let (export, depth) = best.ok_or(FsError::NoEnt)?;
        Ok((export, components[depth..].to_vec()))
    }

    /// Signs a handle for `attr`'s file in `export`.
    #[must_use]
    pub fn handle(&self, export: &Export, attr: &Attr) -> [u8; HANDLE_BYTES] {
        self.key.encode(&Handle {
            export: export.id,
            incarnation: export.incarnation,
            file: attr.fileid,
            generation: attr.generation,
        })
    }

    /// Verifies a client's handle and finds its export and file: the export by id (O(1)),
    /// then its incarnation (`Stale`), then the MAC (`BadHandle`). It asks the backend
    /// nothing when the backend's ids are never reused (the call on the file then finds a
    /// removed file `Stale`); otherwise one [`Backend::generation`] call compares the
    /// generation (`Stale` if it differs).
    pub fn resolve(&self, raw: &[u8]) -> FsResult<(&Arc<Export>, FileId)> {
        let handle = HandleKey::parse(raw)?;
        let export = self.by_id(handle.export).ok_or(FsError::Stale)?;
        if handle.incarnation != export.incarnation {
            return Err(FsError::Stale);
        }
        self.key.verify(raw)?;
        let generation = if export.props.stable_ids {
            0
        } else {
            export.backend.generation(handle.file)?
        };
        if generation != handle.generation {
            return Err(FsError::Stale);
        }
        Ok((export, handle.file))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_squash_maps_root_and_group_zero() {
        let opts = ExportOptions::default();
        let cred = opts.map_cred(Some(&Cred {
            uid: 0,
            gid: 0,
            groups: vec![0, 5],
        }));
        assert_eq!(
            cred,
            Cred {
                uid: NOBODY,
                gid: NOBODY,
                groups: vec![]
            }
        );
        let cred = opts.map_cred(Some(&Cred {
            uid: 7,
            gid: 0,
            groups: vec![0, 5],
        }));
        assert_eq!(
            cred,
            Cred {
                uid: 7,
                gid: NOBODY,
                groups: vec![NOBODY, 5]
            }
        );
        assert_eq!(opts.map_cred(None).uid, NOBODY);
    }

    #[test]
    fn all_squash_and_no_squash() {
        let mut opts = ExportOptions {
            squash: Squash::All,
            anon_uid: 1000,
            anon_gid: 100,
            ..Default::default()
        };
        let sent = Cred {
            uid: 5,
            gid: 5,
            groups: vec![],
        };
        assert_eq!(opts.map_cred(Some(&sent)).uid, 1000);
        opts.squash = Squash::None;
        assert_eq!(opts.map_cred(Some(&Cred::root())), Cred::root());
    }

    #[test]
    fn ranges_of_space_and_copy_calls() {
        assert_eq!(range_end(0, 0), Err(FsError::Inval));
        assert_eq!(range_end(5, 10), Ok(15));
        assert_eq!(range_end(MAX_FILE_SIZE, 1), Err(FsError::FBig));
        assert_eq!(range_end(u64::MAX, 2), Err(FsError::FBig));
        let (a, b) = (FileId(1), FileId(2));
        assert_eq!(check_pair(a, 0, b, 0, 100), Ok(()));
        assert_eq!(check_pair(a, 0, a, 100, 100), Ok(()));
        assert_eq!(check_pair(a, 0, a, 99, 100), Err(FsError::Inval));
        assert_eq!(check_pair(a, 150, a, 100, 100), Err(FsError::Inval));
        assert_eq!(check_pair(a, u64::MAX, b, 0, 2), Err(FsError::Inval));
        assert_eq!(check_pair(a, 0, b, MAX_FILE_SIZE, 1), Err(FsError::FBig));
        // An empty range of one file overlaps nothing.
        assert_eq!(check_pair(a, 10, a, 10, 0), Ok(()));
    }

    #[test]
    fn client_networks() {
        let opts = ExportOptions {
            clients: vec!["10.1.0.0/16".parse().unwrap()],
            ..Default::default()
        };
        assert!(opts.allows("10.1.2.3".parse().unwrap()));
        assert!(opts.allows("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!opts.allows("10.2.0.1".parse().unwrap()));
        assert!(!opts.allows("::1".parse().unwrap()));
    }
}
