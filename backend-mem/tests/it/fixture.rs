//! Shared helpers: a `MemFs` on a manual clock, and short ways to call it.

use std::sync::Arc;
use std::time::Duration;

use granary_backend_mem::{MemConfig, MemFs};
use gtime::{ManualClock, Timestamp};
use vfs::{CreateMode, FileId, Name, Owner, SetAttr, Stability, Trusted};

pub const START: Timestamp = Timestamp {
    seconds: 1_700_000_000,
    nanos: 0,
};

pub const OWNER: Owner = Owner {
    uid: 1000,
    gid: 100,
};

pub struct Fx {
    pub fs: MemFs,
    pub clock: Arc<ManualClock>,
}

impl Fx {
    pub fn new() -> Self {
        Self::with(MemConfig::default())
    }

    pub fn with(config: MemConfig) -> Self {
        let clock = Arc::new(ManualClock::new(START));
        let fs = MemFs::new(config, clock.clone());
        Self { fs, clock }
    }

    pub fn root(&self) -> FileId {
        self.fs.root()
    }

    /// Moves the clock by one millisecond and returns the new time.
    pub fn tick(&self) -> Timestamp {
        self.clock.advance(Duration::from_millis(1));
        gtime::Clock::now(&*self.clock)
    }

    pub fn create(&self, dir: FileId, name: &str) -> FileId {
        let mode = CreateMode::Guarded(SetAttr::default());
        self.fs.create(dir, &n(name), &mode, OWNER).expect("create")
    }

    pub fn mkdir(&self, dir: FileId, name: &str) -> FileId {
        self.fs
            .mkdir(dir, &n(name), &SetAttr::default(), OWNER)
            .expect("mkdir")
    }

    pub fn write(&self, id: FileId, offset_bytes: u64, data: &[u8]) {
        let reply = self
            .fs
            .write(id, offset_bytes, data, Stability::Unstable)
            .expect("write");
        assert_eq!(reply.count as usize, data.len());
    }

    /// The whole file, read in `MAX_IO_BYTES` pieces.
    pub fn contents(&self, id: FileId) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let reply = self
                .fs
                .read(id, out.len() as u64, vfs::limits::MAX_IO_BYTES)
                .expect("read");
            out.extend_from_slice(&reply.data);
            if reply.eof {
                return out;
            }
            assert!(!reply.data.is_empty(), "no progress without eof");
        }
    }

    pub fn size(&self, size_bytes: u64) -> SetAttr {
        SetAttr {
            size_bytes: Some(size_bytes),
            ..SetAttr::default()
        }
    }

    /// Names in a directory (without `.` and `..`), read one entry per page to exercise
    /// cookies.
    pub fn names(&self, dir: FileId) -> Vec<String> {
        let mut cookie = vfs::Cookie::START;
        let mut out = Vec::new();
        loop {
            let page = self.fs.readdir(dir, cookie, 1).expect("readdir");
            for entry in &page.entries {
                let name = String::from_utf8_lossy(&entry.name).into_owned();
                if name != "." && name != ".." {
                    out.push(name);
                }
                cookie = entry.cookie;
            }
            if page.eof {
                return out;
            }
        }
    }
}

pub fn n(name: &str) -> Name {
    Name::new(name.as_bytes().to_vec()).expect("valid name")
}

/// The backend's calls in the shape these tests were written for: no checks (every
/// call runs as [`vfs::Trusted`], new files owned by the given owner or [`OWNER`]), and
/// only the results the tests look at. The wcc data and checks of the seam itself are
/// tested in `seam.rs`.
pub trait Plain {
    fn root(&self) -> FileId;
    fn properties(&self) -> vfs::FsProperties;
    fn fsstat(&self) -> vfs::FsResult<vfs::FsStat>;
    fn getattr(&self, id: FileId) -> vfs::FsResult<vfs::Attr>;
    fn setattr(
        &self,
        id: FileId,
        set: &SetAttr,
        guard: Option<Timestamp>,
    ) -> vfs::FsResult<vfs::Attr>;
    fn lookup(&self, dir: FileId, name: &Name) -> vfs::FsResult<FileId>;
    fn parent(&self, dir: FileId) -> vfs::FsResult<FileId>;
    fn read(&self, id: FileId, offset_bytes: u64, count: u32) -> vfs::FsResult<Read>;
    fn write(
        &self,
        id: FileId,
        offset_bytes: u64,
        data: &[u8],
        stable: Stability,
    ) -> vfs::FsResult<vfs::Written>;
    fn commit(&self, id: FileId, offset_bytes: u64, count: u32) -> vfs::FsResult<()>;
    fn create(
        &self,
        dir: FileId,
        name: &Name,
        mode: &CreateMode,
        owner: Owner,
    ) -> vfs::FsResult<FileId>;
    fn mkdir(
        &self,
        dir: FileId,
        name: &Name,
        attrs: &SetAttr,
        owner: Owner,
    ) -> vfs::FsResult<FileId>;
    fn symlink(
        &self,
        dir: FileId,
        name: &Name,
        target: &[u8],
        attrs: &SetAttr,
        owner: Owner,
    ) -> vfs::FsResult<FileId>;
    fn mknod(
        &self,
        dir: FileId,
        name: &Name,
        kind: vfs::SpecialFile,
        attrs: &SetAttr,
        owner: Owner,
    ) -> vfs::FsResult<FileId>;
    fn readlink(&self, id: FileId) -> vfs::FsResult<bytes::Bytes>;
    fn remove(&self, dir: FileId, name: &Name) -> vfs::FsResult<()>;
    fn rmdir(&self, dir: FileId, name: &Name) -> vfs::FsResult<()>;
    fn rename(&self, from_dir: FileId, from: &Name, to_dir: FileId, to: &Name)
        -> vfs::FsResult<()>;
    fn link(&self, id: FileId, dir: FileId, name: &Name) -> vfs::FsResult<()>;
    fn readdir(
        &self,
        dir: FileId,
        cookie: vfs::Cookie,
        max_entries: usize,
    ) -> vfs::FsResult<vfs::DirPage>;
}

/// Bytes read and whether the read reached the end.
#[derive(Debug, PartialEq, Eq)]
pub struct Read {
    pub data: bytes::Bytes,
    pub eof: bool,
}

const T: Trusted = Trusted { owner: OWNER };

impl Plain for MemFs {
    fn root(&self) -> FileId {
        vfs::Backend::root(self)
    }
    fn properties(&self) -> vfs::FsProperties {
        vfs::Backend::properties(self)
    }
    fn fsstat(&self) -> vfs::FsResult<vfs::FsStat> {
        vfs::Backend::fsstat(self)
    }
    fn getattr(&self, id: FileId) -> vfs::FsResult<vfs::Attr> {
        vfs::Backend::getattr(self, id)
    }
    fn setattr(
        &self,
        id: FileId,
        set: &SetAttr,
        guard: Option<Timestamp>,
    ) -> vfs::FsResult<vfs::Attr> {
        vfs::Backend::setattr(self, id, set, guard, &T).map(|c| c.after)
    }
    fn lookup(&self, dir: FileId, name: &Name) -> vfs::FsResult<FileId> {
        vfs::Backend::lookup(self, dir, name, &T).map(|f| f.attr.fileid)
    }
    fn parent(&self, dir: FileId) -> vfs::FsResult<FileId> {
        vfs::Backend::parent(self, dir, &T).map(|f| f.attr.fileid)
    }
    fn read(&self, id: FileId, offset_bytes: u64, count: u32) -> vfs::FsResult<Read> {
        let mut out = bytes::BytesMut::new();
        let done = vfs::Backend::read_into(self, id, offset_bytes, count, &mut out, &T)?;
        Ok(Read {
            data: out.freeze(),
            eof: done.eof,
        })
    }
    fn write(
        &self,
        id: FileId,
        offset_bytes: u64,
        data: &[u8],
        stable: Stability,
    ) -> vfs::FsResult<vfs::Written> {
        vfs::Backend::write(self, id, offset_bytes, data, stable, &T)
    }
    fn commit(&self, id: FileId, offset_bytes: u64, count: u32) -> vfs::FsResult<()> {
        vfs::Backend::commit(self, id, offset_bytes, count).map(|_| ())
    }
    fn create(
        &self,
        dir: FileId,
        name: &Name,
        mode: &CreateMode,
        owner: Owner,
    ) -> vfs::FsResult<FileId> {
        vfs::Backend::create(self, dir, name, mode, &Trusted { owner }).map(|c| c.attr.fileid)
    }
    fn mkdir(
        &self,
        dir: FileId,
        name: &Name,
        attrs: &SetAttr,
        owner: Owner,
    ) -> vfs::FsResult<FileId> {
        vfs::Backend::mkdir(self, dir, name, attrs, &Trusted { owner }).map(|c| c.attr.fileid)
    }
    fn symlink(
        &self,
        dir: FileId,
        name: &Name,
        target: &[u8],
        attrs: &SetAttr,
        owner: Owner,
    ) -> vfs::FsResult<FileId> {
        vfs::Backend::symlink(self, dir, name, target, attrs, &Trusted { owner })
            .map(|c| c.attr.fileid)
    }
    fn mknod(
        &self,
        dir: FileId,
        name: &Name,
        kind: vfs::SpecialFile,
        attrs: &SetAttr,
        owner: Owner,
    ) -> vfs::FsResult<FileId> {
        vfs::Backend::mknod(self, dir, name, kind, attrs, &Trusted { owner }).map(|c| c.attr.fileid)
    }
    fn readlink(&self, id: FileId) -> vfs::FsResult<bytes::Bytes> {
        vfs::Backend::readlink(self, id).map(|(t, _)| t)
    }
    fn remove(&self, dir: FileId, name: &Name) -> vfs::FsResult<()> {
        vfs::Backend::remove(self, dir, name, &T).map(|_| ())
    }
    fn rmdir(&self, dir: FileId, name: &Name) -> vfs::FsResult<()> {
        vfs::Backend::rmdir(self, dir, name, &T).map(|_| ())
    }
    fn rename(
        &self,
        from_dir: FileId,
        from: &Name,
        to_dir: FileId,
        to: &Name,
    ) -> vfs::FsResult<()> {
        vfs::Backend::rename(self, from_dir, from, to_dir, to, &T).map(|_| ())
    }
    fn link(&self, id: FileId, dir: FileId, name: &Name) -> vfs::FsResult<()> {
        vfs::Backend::link(self, id, dir, name, &T).map(|_| ())
    }
    fn readdir(
        &self,
        dir: FileId,
        cookie: vfs::Cookie,
        max_entries: usize,
    ) -> vfs::FsResult<vfs::DirPage> {
        vfs::Backend::readdir(self, dir, cookie, max_entries, &T).map(|(page, _)| page)
    }
}
