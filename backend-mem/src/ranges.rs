//! NFSv4.2's space calls on regular files: SEEK over the chunk map (a missing chunk is a
//! hole), ALLOCATE (zeroed chunks reserved from the cap) and DEALLOCATE (chunks freed).
//! Each takes the file's range lock over its bytes, as a WRITE does, and stamps the
//! change like one. Copies use the seam's default (`read_into` then `write`); clones are
//! not offered: chunks are not shared between files.

use vfs::limits::MAX_FILE_SIZE;
use vfs::{Change, Checks, Content, FileId, FsError, FsResult, Sought};

use crate::MemFs;

impl MemFs {
    pub(crate) fn seek_in(
        &self,
        id: FileId,
        offset_bytes: u64,
        what: Content,
        checks: &dyn Checks,
    ) -> FsResult<Sought> {
        let inode = self.inode(id)?;
        let file = inode.regular_file()?;
        let attr = {
            let state = inode.read()?;
            inode.observed_attr(&state)
        };
        checks.may_read(&attr)?;
        if offset_bytes >= attr.size_bytes {
            return Err(FsError::NxIo);
        }
        let _range = file.lock.read(offset_bytes..MAX_FILE_SIZE);
        file.check_live()?;
        let found = file.data.seek(offset_bytes, what == Content::Data);
        Ok(Sought {
            offset_bytes: found,
            attr,
        })
    }

    /// ALLOCATE (`punch` false) or DEALLOCATE (`punch` true) of `[offset, offset + len)`.
    pub(crate) fn space_range(
        &self,
        id: FileId,
        offset_bytes: u64,
        len_bytes: u64,
        punch: bool,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        let inode = self.inode(id)?;
        let file = inode.regular_file()?;
        let end = offset_bytes
            .checked_add(len_bytes)
            .filter(|&end| end <= MAX_FILE_SIZE && len_bytes > 0)
            .ok_or(FsError::Inval)?;
        self.check_write(&inode, checks)?;
        let range = file.lock.write(offset_bytes..end);
        file.check_live()?;
        if punch {
            file.data.punch(offset_bytes, end, &self.space);
        } else {
            file.data.reserve(offset_bytes, end, &self.space)?;
        }
        self.clock.stamp(&inode.ctime, true);
        drop(range);
        let after = {
            let state = inode.read()?;
            inode.observed_attr(&state)
        };
        Ok(Change {
            before: None,
            after,
        })
    }
}
