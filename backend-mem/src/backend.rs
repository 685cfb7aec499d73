//! `vfs::Backend` for [`MemFs`]: attribute and data operations in full, directory
//! operations handed to `namespace` and `rename`.

use bytes::{Bytes, BytesMut};
use gtime::Timestamp;
use vfs::limits::{MAX_FILE_SIZE, MAX_IO_BYTES, MAX_LINKS, MAX_NAME_BYTES, MAX_PATH_BYTES};
use vfs::{
    Attr, Backend, Cookie, CreateMode, DirPage, FileId, FsError, FsProperties, FsResult, FsStat,
    Name, Owner, ReadReply, SetAttr, SpecialFile, Stability, WriteReply,
};

use crate::dir::Dir;
use crate::inode::Body;
use crate::namespace::NewNode;
use crate::table::ROOT;
use crate::MemFs;

impl Backend for MemFs {
    fn kind(&self) -> &'static str {
        "mem"
    }

    fn root(&self) -> FileId {
        ROOT
    }

    fn properties(&self) -> FsProperties {
        FsProperties {
            max_file_size: MAX_FILE_SIZE,
            time_granularity_ns: 1,
            supports_hard_links: true,
            supports_symlinks: true,
            max_links: MAX_LINKS,
            // MAX_NAME_BYTES is 255, well inside a u32.
            max_name_bytes: MAX_NAME_BYTES as u32,
            case_insensitive: false,
            case_preserving: true,
            read_only: false,
        }
    }

    fn fsstat(&self) -> FsResult<FsStat> {
        Ok(self.space.stat())
    }

    /// Marks the ctime observed: whoever asked will see it (seed 000).
    fn getattr(&self, id: FileId) -> FsResult<Attr> {
        let inode = self.inode(id)?;
        let state = inode.read()?;
        Ok(inode.observed_attr(&state))
    }

    /// A guarded call locks the whole file first, so no WRITE can move ctime between the
    /// check and the change.
    fn setattr(&self, id: FileId, set: &SetAttr, guard: Option<Timestamp>) -> FsResult<Attr> {
        let inode = self.inode(id)?;
        let mut state = inode.write()?;
        let whole_file = guard
            .and(inode.file.as_ref())
            .map(|file| file.lock.write(0..u64::MAX));
        if guard.is_some_and(|ctime| ctime != inode.ctime.load().time) {
            return Err(FsError::NotSync);
        }
        state.check_setattr(set)?;
        inode.apply_setattr(
            &mut state,
            set,
            &self.clock,
            &self.space,
            whole_file.is_some(),
        );
        drop(whole_file);
        Ok(inode.observed_attr(&state))
    }

    fn lookup(&self, dir: FileId, name: &Name) -> FsResult<FileId> {
        let entry = self.inode(dir)?.read()?.body.dir()?.get(name);
        entry.map(|e| e.id).ok_or(FsError::NoEnt)
    }

    fn parent(&self, dir: FileId) -> FsResult<FileId> {
        Ok(self.inode(dir)?.read()?.body.dir()?.parent)
    }

    /// Returns at most `MAX_IO_BYTES` whatever `count` asks (a short read, not `eof`), so
    /// one request cannot make the backend allocate more than a transfer's worth. Holds the
    /// file's range lock over the bytes asked for, and no other lock.
    fn read(&self, id: FileId, offset_bytes: u64, count: u32) -> FsResult<ReadReply> {
        let mut out = BytesMut::new();
        let eof = self.read_into(id, offset_bytes, count, &mut out)?;
        Ok(ReadReply {
            data: out.freeze(),
            eof,
        })
    }

    /// Copies straight from the file's chunks into `out`, under a read range lock.
    fn read_into(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        out: &mut BytesMut,
    ) -> FsResult<bool> {
        let inode = self.inode(id)?;
        let file = inode.regular_file()?;
        let count = u64::from(count.min(MAX_IO_BYTES));
        let _range = file
            .lock
            .read(offset_bytes..offset_bytes.saturating_add(count));
        file.check_live()?;
        Ok(file.data.read_into(offset_bytes, count, out))
    }

    /// An empty write changes nothing (not even mtime), as on Linux. Holds the file's
    /// range lock over the bytes written, and no other lock; mtime becomes the new ctime.
    fn write(
        &self,
        id: FileId,
        offset_bytes: u64,
        data: &[u8],
        stable: Stability,
    ) -> FsResult<WriteReply> {
        let count = u32::try_from(data.len()).map_err(|_| FsError::Inval)?;
        let inode = self.inode(id)?;
        let file = inode.regular_file()?;
        let end = offset_bytes
            .checked_add(u64::from(count))
            .filter(|&end| end <= MAX_FILE_SIZE)
            .ok_or(FsError::FBig)?;
        let _range = file.lock.write(offset_bytes..end);
        file.check_live()?;
        if count > 0 {
            file.data.write(offset_bytes, data, &self.space)?;
            // Under the range lock: whoever locks these bytes next sees the new ctime too.
            self.clock.stamp(&inode.ctime, true);
        }
        Ok(WriteReply {
            count,
            committed: stable,
        })
    }

    /// Memory is this backend's stable storage: every write is as durable as it gets.
    fn commit(&self, id: FileId, _offset_bytes: u64, _count: u32) -> FsResult<()> {
        self.inode(id)?.regular_file()?.check_live()
    }

    fn create(
        &self,
        dir: FileId,
        name: &Name,
        mode: &CreateMode,
        owner: Owner,
    ) -> FsResult<FileId> {
        self.create_file(dir, name, mode, owner)
    }

    fn mkdir(&self, dir: FileId, name: &Name, attrs: &SetAttr, owner: Owner) -> FsResult<FileId> {
        let node = NewNode {
            body: Body::Directory(Dir::new(dir)),
            default_mode: 0o755,
            owner,
            attrs,
        };
        self.add_entry(dir, name, node)
    }

    /// `Inval` for an empty target, `NameTooLong` past `MAX_PATH_BYTES`.
    fn symlink(
        &self,
        dir: FileId,
        name: &Name,
        target: &[u8],
        attrs: &SetAttr,
        owner: Owner,
    ) -> FsResult<FileId> {
        if target.is_empty() {
            return Err(FsError::Inval);
        }
        if target.len() > MAX_PATH_BYTES {
            return Err(FsError::NameTooLong);
        }
        let node = NewNode {
            body: Body::Symlink(Bytes::copy_from_slice(target)),
            default_mode: 0o777,
            owner,
            attrs,
        };
        self.add_entry(dir, name, node)
    }

    fn mknod(
        &self,
        dir: FileId,
        name: &Name,
        kind: SpecialFile,
        attrs: &SetAttr,
        owner: Owner,
    ) -> FsResult<FileId> {
        let node = NewNode {
            body: Body::Special(kind),
            default_mode: 0o644,
            owner,
            attrs,
        };
        self.add_entry(dir, name, node)
    }

    fn readlink(&self, id: FileId) -> FsResult<Bytes> {
        match &self.inode(id)?.read()?.body {
            Body::Symlink(target) => Ok(target.clone()),
            _ => Err(FsError::Inval),
        }
    }

    fn remove(&self, dir: FileId, name: &Name) -> FsResult<()> {
        self.remove_entry(dir, name, false)
    }

    fn rmdir(&self, dir: FileId, name: &Name) -> FsResult<()> {
        self.remove_entry(dir, name, true)
    }

    fn rename(&self, from_dir: FileId, from: &Name, to_dir: FileId, to: &Name) -> FsResult<()> {
        self.rename_entry(from_dir, from, to_dir, to)
    }

    fn link(&self, id: FileId, dir: FileId, name: &Name) -> FsResult<()> {
        self.link_entry(id, dir, name)
    }

    /// `TooSmall` for `max_entries` 0: a page that can hold nothing would never progress.
    fn readdir(&self, dir: FileId, cookie: Cookie, max_entries: usize) -> FsResult<DirPage> {
        self.inode(dir)?
            .read()?
            .body
            .dir()?
            .list(dir, cookie, max_entries)
    }
}
