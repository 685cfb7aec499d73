//! Exports: a backend made visible under a path, with who may use it and as whom.
//!
//! [`Export`] is the facade protocols call. It owns the checks that are the same for every
//! backend and every protocol version: read-only exports, squashing, POSIX permission
//! bits of the caller, sticky directories, name validation, and never resolving `..`
//! above the export root. Backends then only store.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use gtime::Timestamp;
use ipnet::IpNet;

use crate::access::{access_mask, mode_allows, R, W, X};
use crate::backend::Backend;
use crate::error::{FsError, FsResult};
use crate::handle::{Handle, HandleKey, HANDLE_BYTES};
use crate::types::{
    AccessMask, Attr, Cookie, CreateMode, Cred, DirPage, FileId, FileType, FsProperties, FsStat,
    Name, Owner, SetAttr, SetTime, SpecialFile, Stability, WriteReply,
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
    /// The path clients mount, e.g. `/` or `/data`. Always starts with `/`.
    pub path: String,
    pub options: ExportOptions,
    backend: Arc<dyn Backend>,
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("id", &self.id)
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
        path: String,
        options: ExportOptions,
        backend: Arc<dyn Backend>,
    ) -> Self {
        debug_assert!(path.starts_with('/'));
        Self {
            id,
            path,
            options,
            backend,
        }
    }

    #[must_use]
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    #[must_use]
    pub fn root(&self) -> FileId {
        self.backend.root()
    }

    fn writable(&self) -> FsResult<()> {
        if self.options.read_only || self.backend.properties().read_only {
            return Err(FsError::RoFs);
        }
        Ok(())
    }

    fn require(&self, attr: &Attr, cred: &Cred, want: u32) -> FsResult<()> {
        if mode_allows(attr, cred, want) {
            Ok(())
        } else {
            Err(FsError::Access)
        }
    }

    /// A directory the caller may search and change entries in.
    fn writable_dir(&self, cred: &Cred, dir: FileId) -> FsResult<Attr> {
        self.writable()?;
        let attr = self.getattr(dir)?;
        if !attr.is_dir() {
            return Err(FsError::NotDir);
        }
        self.require(&attr, cred, W | X)?;
        Ok(attr)
    }

    /// In a sticky directory only the owner of the entry or of the directory (or root)
    /// may remove or rename it.
    fn check_sticky(&self, cred: &Cred, dir: &Attr, victim: FileId) -> FsResult<()> {
        if dir.mode & 0o1000 == 0 || cred.is_root() || cred.uid == dir.uid {
            return Ok(());
        }
        if self.backend.getattr(victim)?.uid == cred.uid {
            return Ok(());
        }
        Err(FsError::Perm)
    }

    /// Attributes, with the export's fsid.
    pub fn getattr(&self, id: FileId) -> FsResult<Attr> {
        let mut attr = self.backend.getattr(id)?;
        attr.fsid = u64::from(self.id.0);
        Ok(attr)
    }

    /// Resolves `raw_name` in `dir`. `.` is `dir`; `..` is its parent, except that the
    /// export root is its own parent, so no lookup leaves the export.
    pub fn lookup(&self, cred: &Cred, dir: FileId, raw_name: &[u8]) -> FsResult<FileId> {
        let dir_attr = self.getattr(dir)?;
        if !dir_attr.is_dir() {
            return Err(FsError::NotDir);
        }
        self.require(&dir_attr, cred, X)?;
        match raw_name {
            b"." => Ok(dir),
            b".." if dir == self.root() => Ok(dir),
            b".." => self.backend.parent(dir),
            _ => self
                .backend
                .lookup(dir, &Name::new(Bytes::copy_from_slice(raw_name))?),
        }
    }

    /// Which of `want` the caller would be granted.
    pub fn access(
        &self,
        cred: &Cred,
        id: FileId,
        want: AccessMask,
    ) -> FsResult<(AccessMask, Attr)> {
        let attr = self.getattr(id)?;
        let writable = self.writable().is_ok();
        Ok((access_mask(&attr, cred, want, writable), attr))
    }

    /// Changes attributes with POSIX ownership rules: only root gives files away; the
    /// owner may change mode, group (to one of its groups) and set times; anyone with
    /// write permission may truncate or touch to the server's time.
    pub fn setattr(
        &self,
        cred: &Cred,
        id: FileId,
        set: &SetAttr,
        guard: Option<Timestamp>,
    ) -> FsResult<Attr> {
        self.writable()?;
        let attr = self.getattr(id)?;
        if !cred.is_root() {
            self.check_setattr_rights(cred, &attr, set)?;
        }
        let set = mode_rules(cred, &attr, set);
        let mut attr = self.backend.setattr(id, &set, guard)?;
        attr.fsid = u64::from(self.id.0);
        Ok(attr)
    }

    fn check_setattr_rights(&self, cred: &Cred, attr: &Attr, set: &SetAttr) -> FsResult<()> {
        let owner = cred.uid == attr.uid;
        if set.uid.is_some_and(|uid| uid != attr.uid) {
            return Err(FsError::Perm);
        }
        if let Some(gid) = set.gid {
            if gid != attr.gid && !(owner && cred.in_group(gid)) {
                return Err(FsError::Perm);
            }
        }
        if set.mode.is_some() && !owner {
            return Err(FsError::Perm);
        }
        let client_time =
            matches!(set.atime, SetTime::Client(_)) || matches!(set.mtime, SetTime::Client(_));
        if client_time && !owner {
            return Err(FsError::Perm);
        }
        let server_time = set.atime == SetTime::ServerTime || set.mtime == SetTime::ServerTime;
        let writes = set.size_bytes.is_some() || server_time;
        if writes && !owner && !mode_allows(attr, cred, W) {
            return Err(FsError::Access);
        }
        Ok(())
    }

    /// Reads file data into the end of `out`, with no copy in between (see
    /// [`Backend::read_into`]). The owner may always read (Linux nfsd's owner override, so
    /// a file opened before a chmod stays readable), others need read or execute
    /// permission. Returns the attributes taken for the permission check, before the read:
    /// a reply that carries them next to the data never pairs old data with newer
    /// attributes (which would let a client cache stale data as current), and `eof`.
    pub fn read_into(
        &self,
        cred: &Cred,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        out: &mut BytesMut,
    ) -> FsResult<(Attr, bool)> {
        let attr = self.getattr(id)?;
        let allowed =
            cred.uid == attr.uid || mode_allows(&attr, cred, R) || mode_allows(&attr, cred, X);
        if !allowed {
            return Err(FsError::Access);
        }
        let eof = self.backend.read_into(id, offset_bytes, count, out)?;
        Ok((attr, eof))
    }

    /// Writes file data; the owner may always write (owner override), others need `w`.
    pub fn write(
        &self,
        cred: &Cred,
        id: FileId,
        offset_bytes: u64,
        data: &[u8],
        stable: Stability,
    ) -> FsResult<WriteReply> {
        self.writable()?;
        let attr = self.getattr(id)?;
        if cred.uid != attr.uid && !mode_allows(&attr, cred, W) {
            return Err(FsError::Access);
        }
        if !cred.is_root() && without_set_id(attr.mode) != attr.mode {
            // Writing a set-id program drops its privilege, so a writer cannot plant code
            // that runs as the owner.
            let clear = SetAttr {
                mode: Some(without_set_id(attr.mode)),
                ..SetAttr::default()
            };
            self.backend.setattr(id, &clear, None)?;
        }
        self.backend.write(id, offset_bytes, data, stable)
    }

    pub fn commit(&self, id: FileId, offset_bytes: u64, count: u32) -> FsResult<()> {
        self.writable()?;
        self.backend.commit(id, offset_bytes, count)
    }

    /// The owner of a new entry: the caller, with the directory's group if the directory
    /// is setgid (BSD/POSIX group inheritance).
    fn owner_for(cred: &Cred, dir: &Attr) -> Owner {
        let gid = if dir.mode & 0o2000 != 0 {
            dir.gid
        } else {
            cred.gid
        };
        Owner { uid: cred.uid, gid }
    }

    /// Creates a regular file. An UNCHECKED create that would truncate an existing file
    /// needs write permission on that file, as an `open(O_CREAT|O_TRUNC)` would.
    pub fn create(
        &self,
        cred: &Cred,
        dir: FileId,
        name: &Name,
        mode: &CreateMode,
    ) -> FsResult<FileId> {
        let dir_attr = self.writable_dir(cred, dir)?;
        if let CreateMode::Unchecked(SetAttr {
            size_bytes: Some(_),
            ..
        }) = mode
        {
            if let Ok(existing) = self.backend.lookup(dir, name) {
                let attr = self.getattr(existing)?;
                if cred.uid != attr.uid && !mode_allows(&attr, cred, W) {
                    return Err(FsError::Access);
                }
            }
        }
        let mode = match mode {
            CreateMode::Unchecked(a) => {
                CreateMode::Unchecked(strip_inherited_sgid(a, cred, &dir_attr))
            }
            CreateMode::Guarded(a) => CreateMode::Guarded(strip_inherited_sgid(a, cred, &dir_attr)),
            CreateMode::Exclusive(v) => CreateMode::Exclusive(*v),
        };
        self.backend
            .create(dir, name, &mode, Self::owner_for(cred, &dir_attr))
    }

    pub fn mkdir(
        &self,
        cred: &Cred,
        dir: FileId,
        name: &Name,
        attrs: &SetAttr,
    ) -> FsResult<FileId> {
        let dir_attr = self.writable_dir(cred, dir)?;
        let mut attrs = attrs.clone();
        if dir_attr.mode & 0o2000 != 0 {
            // Group inheritance continues down the tree: a setgid directory's
            // subdirectories are setgid too.
            attrs.mode = Some(attrs.mode.unwrap_or(0o755) | 0o2000);
        }
        self.backend
            .mkdir(dir, name, &attrs, Self::owner_for(cred, &dir_attr))
    }

    pub fn symlink(
        &self,
        cred: &Cred,
        dir: FileId,
        name: &Name,
        target: &[u8],
        attrs: &SetAttr,
    ) -> FsResult<FileId> {
        if target.is_empty() {
            return Err(FsError::Inval);
        }
        if target.len() > crate::limits::MAX_PATH_BYTES {
            return Err(FsError::NameTooLong);
        }
        let dir_attr = self.writable_dir(cred, dir)?;
        self.backend
            .symlink(dir, name, target, attrs, Self::owner_for(cred, &dir_attr))
    }

    /// Device nodes need root; sockets and FIFOs anyone with write access to `dir`.
    pub fn mknod(
        &self,
        cred: &Cred,
        dir: FileId,
        name: &Name,
        kind: SpecialFile,
        attrs: &SetAttr,
    ) -> FsResult<FileId> {
        let dir_attr = self.writable_dir(cred, dir)?;
        let device = matches!(
            kind,
            SpecialFile::BlockDevice(_) | SpecialFile::CharDevice(_)
        );
        if device && !cred.is_root() {
            return Err(FsError::Perm);
        }
        let attrs = strip_inherited_sgid(attrs, cred, &dir_attr);
        self.backend
            .mknod(dir, name, kind, &attrs, Self::owner_for(cred, &dir_attr))
    }

    pub fn readlink(&self, id: FileId) -> FsResult<Bytes> {
        self.backend.readlink(id)
    }

    pub fn remove(&self, cred: &Cred, dir: FileId, name: &Name) -> FsResult<()> {
        let dir_attr = self.writable_dir(cred, dir)?;
        let victim = self.backend.lookup(dir, name)?;
        self.check_sticky(cred, &dir_attr, victim)?;
        self.backend.remove(dir, name)
    }

    pub fn rmdir(&self, cred: &Cred, dir: FileId, name: &Name) -> FsResult<()> {
        let dir_attr = self.writable_dir(cred, dir)?;
        let victim = self.backend.lookup(dir, name)?;
        self.check_sticky(cred, &dir_attr, victim)?;
        self.backend.rmdir(dir, name)
    }

    pub fn rename(
        &self,
        cred: &Cred,
        from_dir: FileId,
        from: &Name,
        to_dir: FileId,
        to: &Name,
    ) -> FsResult<()> {
        let from_attr = self.writable_dir(cred, from_dir)?;
        let to_attr = self.writable_dir(cred, to_dir)?;
        let moving = self.backend.lookup(from_dir, from)?;
        self.check_sticky(cred, &from_attr, moving)?;
        if let Ok(replaced) = self.backend.lookup(to_dir, to) {
            self.check_sticky(cred, &to_attr, replaced)?;
        }
        // Moving a directory to a new parent rewrites its `..`: that needs write access to it.
        let moving_attr = self.getattr(moving)?;
        if moving_attr.is_dir() && from_dir != to_dir {
            self.require(&moving_attr, cred, W)?;
        }
        self.backend.rename(from_dir, from, to_dir, to)
    }

    pub fn link(&self, cred: &Cred, id: FileId, dir: FileId, name: &Name) -> FsResult<()> {
        self.writable_dir(cred, dir)?;
        if self.getattr(id)?.file_type == FileType::Directory {
            return Err(FsError::IsDir);
        }
        self.backend.link(id, dir, name)
    }

    pub fn readdir(
        &self,
        cred: &Cred,
        dir: FileId,
        cookie: Cookie,
        max_entries: usize,
    ) -> FsResult<DirPage> {
        let attr = self.getattr(dir)?;
        if !attr.is_dir() {
            return Err(FsError::NotDir);
        }
        self.require(&attr, cred, R)?;
        self.backend.readdir(dir, cookie, max_entries)
    }

    pub fn fsstat(&self) -> FsResult<FsStat> {
        self.backend.fsstat()
    }

    #[must_use]
    pub fn properties(&self) -> FsProperties {
        let mut props = self.backend.properties();
        props.read_only |= self.options.read_only;
        props
    }
}

/// A new file in a setgid directory gets the directory's group; a caller outside that
/// group must not get a group-executable setgid program of it (Linux `mode_strip_sgid`,
/// the fix of CVE-2018-13405).
fn strip_inherited_sgid(attrs: &SetAttr, cred: &Cred, dir: &Attr) -> SetAttr {
    let mut attrs = attrs.clone();
    if let Some(mode) = attrs.mode {
        let inherits = dir.mode & 0o2000 != 0;
        if inherits && !cred.is_root() && !cred.in_group(dir.gid) && mode & 0o2010 == 0o2010 {
            attrs.mode = Some(mode & !0o2000);
        }
    }
    attrs
}

/// The mode rules of a SETATTR, as Linux applies them: giving a regular file away clears
/// its set-id bits (also from a mode set in the same call), and a non-root caller outside
/// the file's group cannot set setgid.
fn mode_rules(cred: &Cred, attr: &Attr, set: &SetAttr) -> SetAttr {
    let mut set = set.clone();
    let owner_changes =
        set.uid.is_some_and(|u| u != attr.uid) || set.gid.is_some_and(|g| g != attr.gid);
    if owner_changes && attr.file_type == FileType::Regular {
        set.mode = Some(without_set_id(set.mode.unwrap_or(attr.mode)));
    }
    if let Some(mode) = set.mode {
        let gid = set.gid.unwrap_or(attr.gid);
        if mode & 0o2000 != 0 && !cred.is_root() && !cred.in_group(gid) {
            set.mode = Some(mode & !0o2000);
        }
    }
    set
}

/// `mode` without setuid, and without setgid if the group may execute (setgid without
/// group execute means mandatory locking on some systems and is kept).
fn without_set_id(mode: u32) -> u32 {
    let mut m = mode & !0o4000;
    if m & 0o2010 == 0o2010 {
        m &= !0o2000;
    }
    m
}

/// Every export of a server, and the key that signs their handles.
#[derive(Debug)]
pub struct ExportTable {
    exports: Vec<Arc<Export>>,
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
        Self {
            exports: exports.into_iter().map(Arc::new).collect(),
            key,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Export>> {
        self.exports.iter()
    }

    #[must_use]
    pub fn by_id(&self, id: ExportId) -> Option<&Arc<Export>> {
        self.exports.iter().find(|e| e.id == id)
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

    /// Signs a handle for `id` in `export`.
    #[must_use]
    pub fn handle(&self, export: &Export, attr: &Attr) -> [u8; HANDLE_BYTES] {
        self.key.encode(&Handle {
            export: export.id,
            file: attr.fileid,
            generation: attr.generation,
        })
    }

    /// Verifies a client's handle and finds its export and file. The file must still
    /// exist with the same generation, else `Stale`.
    pub fn resolve(&self, raw: &[u8]) -> FsResult<(&Arc<Export>, FileId)> {
        let handle = self.key.decode(raw)?;
        let export = self.by_id(handle.export).ok_or(FsError::Stale)?;
        let attr = export.backend.getattr(handle.file)?;
        if attr.generation != handle.generation {
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
    fn set_id_bits_are_cleared_like_linux() {
        assert_eq!(without_set_id(0o4755), 0o755);
        assert_eq!(without_set_id(0o2755), 0o755);
        assert_eq!(without_set_id(0o2745), 0o2745);
        assert_eq!(without_set_id(0o1777), 0o1777);
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
