//! Shared helpers: a `MemFs` on a manual clock, and short ways to call it.

use std::sync::Arc;
use std::time::Duration;

use granary_backend_mem::{MemConfig, MemFs};
use gtime::{ManualClock, Timestamp};
use vfs::{Backend, CreateMode, FileId, Name, Owner, SetAttr, Stability};

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
