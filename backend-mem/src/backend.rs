//! `vfs::Backend` for [`MemFs`]: attribute and data operations in full, directory
//! operations handed to `namespace` and `rename`.

use bytes::{Bytes, BytesMut};
use gtime::Timestamp;
use vfs::limits::{MAX_FILE_SIZE, MAX_IO_BYTES, MAX_LINKS, MAX_NAME_BYTES, MAX_PATH_BYTES};
use vfs::{
    Attr, Backend, Change, Checks, Content, Cookie, CreateMode, Created, DirPage, FileId, FileType,
    Found, FsError, FsProperties, FsResult, FsStat, Linked, Name, PreAttr, ReadDone, ReadParts,
    Renamed, SetAttr, Sought, SpecialFile, Stability, Written,
};

use crate::dir::Dir;
use crate::inode::{Body, Inode};
use crate::namespace::NewNode;
use crate::sparse::SparseData;
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
            stable_ids: true,
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

    /// Checks and applies under the inode's write lock. A guarded call locks the whole
    /// file first, so no WRITE can move ctime between the check and the change.
    fn setattr(
        &self,
        id: FileId,
        set: &SetAttr,
        guard: Option<Timestamp>,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        let inode = self.inode(id)?;
        let mut state = inode.write()?;
        let whole_file = guard
            .and(inode.file.as_ref())
            .map(|file| file.lock.write(0..u64::MAX));
        let before = inode.observed_attr(&state);
        let set = checks.setattr_rules(&before, set)?;
        if guard.is_some_and(|ctime| ctime != before.ctime) {
            return Err(FsError::NotSync);
        }
        state.check_setattr(&set)?;
        inode.apply_setattr(
            &mut state,
            &set,
            &self.clock,
            &self.space,
            whole_file.is_some(),
        );
        drop(whole_file);
        Ok(Change {
            before: Some(PreAttr::of(&before)),
            after: inode.observed_attr(&state),
        })
    }

    fn lookup(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Found> {
        let dir_inode = self.inode(dir)?;
        let (dir_attr, entry) = {
            let state = dir_inode.read()?;
            let entries = state.body.dir()?;
            let dir_attr = dir_inode.observed_attr(&state);
            checks.may_search(&dir_attr)?;
            (dir_attr, entries.get(name).ok_or(FsError::NoEnt)?)
        };
        // The entry may go between the two locks: then it was not found.
        let attr = self.getattr(entry.id).map_err(|e| match e {
            FsError::Stale => FsError::NoEnt,
            other => other,
        })?;
        Ok(Found {
            attr,
            dir: dir_attr,
        })
    }

    fn parent(&self, dir: FileId, checks: &dyn Checks) -> FsResult<Found> {
        let dir_inode = self.inode(dir)?;
        let (dir_attr, parent) = {
            let state = dir_inode.read()?;
            let parent = state.body.dir()?.parent;
            let dir_attr = dir_inode.observed_attr(&state);
            checks.may_search(&dir_attr)?;
            (dir_attr, parent)
        };
        let attr = self.getattr(parent)?;
        Ok(Found {
            attr,
            dir: dir_attr,
        })
    }

    /// Returns at most `MAX_IO_BYTES` whatever `count` asks (a short read, not `eof`), so
    /// one request cannot make the backend allocate more than a transfer's worth. Takes
    /// the attributes under the inode's read lock, then copies straight from the file's
    /// chunks into `out` under a read range lock (and no other lock).
    fn read_into(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        out: &mut BytesMut,
        checks: &dyn Checks,
    ) -> FsResult<ReadDone> {
        let (attr, eof) = self.read_with(id, offset_bytes, count, checks, |data, count| {
            data.read_into(offset_bytes, count, out)
        })?;
        Ok(ReadDone { attr, eof })
    }

    /// [`Backend::read_into`]'s checks, bounds and locks, with the bytes handed over as
    /// the file's chunks themselves (shared, copied only if a write comes while the reply
    /// holds them): a large READ costs no copy of its bytes in the server.
    fn read_shared(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        checks: &dyn Checks,
    ) -> FsResult<Option<ReadParts>> {
        let (attr, (parts, eof)) =
            self.read_with(id, offset_bytes, count, checks, |data, count| {
                data.read_shared(offset_bytes, count)
            })?;
        Ok(Some(ReadParts {
            parts,
            done: ReadDone { attr, eof },
        }))
    }

    /// An empty write changes nothing (not even mtime), as on Linux. Holds the file's
    /// range lock over the bytes written and, around it, the inode's read lock only for
    /// the permission check (its write lock if set-id bits must go); mtime becomes the
    /// new ctime.
    ///
    /// The returned `before` has the ctime and mtime this write's stamp replaced and the
    /// size just before the bytes were copied; it is `None` when the write cannot be
    /// bracketed exactly: a concurrent write's stamp stood for this one, or another change
    /// stamped the file before the attributes after were read.
    fn write(
        &self,
        id: FileId,
        offset_bytes: u64,
        data: &[u8],
        stable: Stability,
        checks: &dyn Checks,
    ) -> FsResult<Written> {
        let count = u32::try_from(data.len()).map_err(|_| FsError::Inval)?;
        let inode = self.inode(id)?;
        let file = inode.regular_file()?;
        let end = offset_bytes
            .checked_add(u64::from(count))
            .filter(|&end| end <= MAX_FILE_SIZE)
            .ok_or(FsError::FBig)?;
        let (checked, uncleared) = self.check_write(&inode, checks)?;
        // Clearing set-id bits is part of this WRITE: its "before" is the file before that.
        let first = PreAttr::of(uncleared.as_ref().unwrap_or(&checked));
        if count == 0 {
            let after = {
                let state = inode.read()?;
                inode.observed_attr(&state)
            };
            return Ok(written(0, stable, Some(first), after));
        }
        let range = file.lock.write(offset_bytes..end);
        file.check_live()?;
        let size_before = file.data.size_bytes();
        file.data.write(offset_bytes, data, &self.space)?;
        // Under the range lock: whoever locks these bytes next sees the new ctime too.
        let stamp = self.clock.stamp(&inode.ctime, true);
        drop(range);
        let after = {
            let state = inode.read()?;
            inode.observed_attr(&state)
        };
        let exact = stamp.installed && after.ctime == stamp.time;
        let before = exact.then(|| match uncleared {
            // Exact only if no other change came between the clearing and this stamp.
            Some(_) if stamp.previous.time != checked.ctime => None,
            Some(_) => Some(first),
            None => Some(PreAttr {
                size_bytes: size_before,
                mtime: if stamp.previous.tag {
                    stamp.previous.time
                } else {
                    checked.mtime
                },
                ctime: stamp.previous.time,
            }),
        });
        let before = before.flatten();
        Ok(written(count, stable, before, after))
    }

    /// Counts the hold in the inode: a removed file lives on, nameless, until the last.
    fn hold(&self, id: FileId) -> FsResult<bool> {
        let inode = self.inode(id)?;
        inode.regular_file()?;
        inode.write()?.holds += 1;
        Ok(true)
    }

    fn release(&self, id: FileId) {
        let Ok(inode) = self.inode(id) else { return };
        let Ok(mut state) = inode.write() else { return };
        let died = inode.release(&mut state, &self.space);
        drop(state);
        if died {
            self.table.remove(id);
        }
    }

    /// Memory is this backend's stable storage: every write is as durable as it gets.
    fn commit(&self, id: FileId, _offset_bytes: u64, _count: u32) -> FsResult<Change> {
        let inode = self.inode(id)?;
        inode.regular_file()?.check_live()?;
        let state = inode.read()?;
        let attr = inode.observed_attr(&state);
        Ok(Change {
            before: Some(PreAttr::of(&attr)),
            after: attr,
        })
    }

    fn create(
        &self,
        dir: FileId,
        name: &Name,
        mode: &CreateMode,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        self.create_file(dir, name, mode, checks)
    }

    fn mkdir(
        &self,
        dir: FileId,
        name: &Name,
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        let node = NewNode {
            body: Body::Directory(Dir::new(dir)),
            default_mode: 0o755,
            attrs,
        };
        self.add_entry(dir, name, node, checks)
    }

    /// `Inval` for an empty target, `NameTooLong` past `MAX_PATH_BYTES`.
    fn symlink(
        &self,
        dir: FileId,
        name: &Name,
        target: &[u8],
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        if target.is_empty() {
            return Err(FsError::Inval);
        }
        if target.len() > MAX_PATH_BYTES {
            return Err(FsError::NameTooLong);
        }
        let node = NewNode {
            body: Body::Symlink(Bytes::copy_from_slice(target)),
            default_mode: 0o777,
            attrs,
        };
        self.add_entry(dir, name, node, checks)
    }

    fn mknod(
        &self,
        dir: FileId,
        name: &Name,
        kind: SpecialFile,
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        let node = NewNode {
            body: Body::Special(kind),
            default_mode: 0o644,
            attrs,
        };
        self.add_entry(dir, name, node, checks)
    }

    fn readlink(&self, id: FileId) -> FsResult<(Bytes, Attr)> {
        let inode = self.inode(id)?;
        let state = inode.read()?;
        match &state.body {
            Body::Symlink(target) => Ok((target.clone(), inode.observed_attr(&state))),
            _ => Err(FsError::Inval),
        }
    }

    fn remove(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Change> {
        self.remove_entry(dir, name, false, checks)
    }

    fn rmdir(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Change> {
        self.remove_entry(dir, name, true, checks)
    }

    fn rename(
        &self,
        from_dir: FileId,
        from: &Name,
        to_dir: FileId,
        to: &Name,
        checks: &dyn Checks,
    ) -> FsResult<Renamed> {
        self.rename_entry(from_dir, from, to_dir, to, checks)
    }

    fn link(&self, id: FileId, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Linked> {
        self.link_entry(id, dir, name, checks)
    }

    /// `TooSmall` for `max_entries` 0: a page that can hold nothing would never progress.
    /// Holes are the missing 64 KiB chunks (see `sparse`), and the virtual one at the end.
    fn seek(
        &self,
        id: FileId,
        offset_bytes: u64,
        what: Content,
        checks: &dyn Checks,
    ) -> FsResult<Sought> {
        self.seek_in(id, offset_bytes, what, checks)
    }

    /// Zeroed chunks, reserved from the size cap, over the range.
    fn allocate(
        &self,
        id: FileId,
        offset_bytes: u64,
        len_bytes: u64,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        self.space_range(id, offset_bytes, len_bytes, false, checks)
    }

    /// Chunks the range covers whole are freed; the partial ones at its ends are zeroed.
    fn deallocate(
        &self,
        id: FileId,
        offset_bytes: u64,
        len_bytes: u64,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        self.space_range(id, offset_bytes, len_bytes, true, checks)
    }

    fn readdir(
        &self,
        dir: FileId,
        cookie: Cookie,
        max_entries: usize,
        checks: &dyn Checks,
    ) -> FsResult<(DirPage, Attr)> {
        let inode = self.inode(dir)?;
        let state = inode.read()?;
        let entries = state.body.dir()?;
        let attr = inode.observed_attr(&state);
        checks.may_list(&attr)?;
        Ok((entries.list(dir, cookie, max_entries)?, attr))
    }
}

impl MemFs {
    /// What every READ takes: the file's attributes (under the inode's read lock, before
    /// the bytes), `checks.may_read` of them, the count bounded by `MAX_IO_BYTES` (a short
    /// read, so one request cannot make the backend allocate more than a transfer's
    /// worth), and a read range lock over the bytes, under which `read` gets the file's
    /// data and the bounded count.
    fn read_with<T>(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        checks: &dyn Checks,
        read: impl FnOnce(&SparseData, u64) -> T,
    ) -> FsResult<(Attr, T)> {
        let inode = self.inode(id)?;
        let file = inode.regular_file()?;
        let attr = {
            let state = inode.read()?;
            inode.observed_attr(&state)
        };
        checks.may_read(&attr)?;
        let count = u64::from(count.min(MAX_IO_BYTES));
        let _range = file
            .lock
            .read(offset_bytes..offset_bytes.saturating_add(count));
        file.check_live()?;
        Ok((attr, read(&file.data, count)))
    }

    /// Writes `data` at `offset_bytes` of regular file `id` and stamps the change, handing
    /// out no attributes: a change nobody observes, as will-it-scale's `pipe1` writes that
    /// seed 000 measured. `granary lab multigrain` measures multigrain's coarse path with
    /// it. An NFS WRITE cannot take this path: its reply carries the attributes after the
    /// change, so it observes them (see [`Backend::write`]). No permission check.
    ///
    /// # Errors
    /// `Stale`, `IsDir`/`Inval` for a file that is not regular, `FBig`, `NoSpc`.
    pub fn write_unobserved(&self, id: FileId, offset_bytes: u64, data: &[u8]) -> FsResult<()> {
        let inode = self.inode(id)?;
        let file = inode.regular_file()?;
        let end = offset_bytes
            .checked_add(data.len() as u64)
            .filter(|&end| end <= MAX_FILE_SIZE)
            .ok_or(FsError::FBig)?;
        let range = file.lock.write(offset_bytes..end);
        file.check_live()?;
        file.data.write(offset_bytes, data, &self.space)?;
        self.clock.stamp(&inode.ctime, true);
        drop(range);
        Ok(())
    }

    /// WRITE's permission check: under the read lock, or under the write lock when the
    /// check asks for set-id bits to be cleared (and then clears them, checking again
    /// under that lock). Returns the attributes checked (after any clearing) and, if bits
    /// were cleared, the attributes before that.
    pub(crate) fn check_write(
        &self,
        inode: &Inode,
        checks: &dyn Checks,
    ) -> FsResult<(Attr, Option<Attr>)> {
        // The permission check's attributes are not what the client is told is current
        // (the reply's post-op attributes are, and those are marked observed): marking
        // here would make every WRITE take a fine stamp (seed 000).
        let attr = {
            let state = inode.read()?;
            inode.unobserved_attr(&state)
        };
        if checks.may_write(&attr)?.is_none() {
            return Ok((attr, None));
        }
        let mut state = inode.write()?;
        let attr = inode.unobserved_attr(&state);
        let Some(mode) = checks.may_write(&attr)? else {
            return Ok((attr, None));
        };
        let clear = SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        };
        inode.apply_setattr(&mut state, &clear, &self.clock, &self.space, false);
        Ok((inode.observed_attr(&state), Some(attr)))
    }
}

fn written(count: u32, committed: Stability, before: Option<PreAttr>, after: Attr) -> Written {
    debug_assert_eq!(after.file_type, FileType::Regular);
    Written {
        count,
        committed,
        file: Change { before, after },
    }
}
