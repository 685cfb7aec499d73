//! Directories: blocks of sorted entries. Each block starts with 12-byte records
//! (nid u64, name offset u16, file type u8, reserved u8); the first record's name offset
//! divided by 12 is the number of records; names follow, unterminated, each ending where
//! the next begins (the last one at the end of the block or at its first NUL). Names are
//! sorted by bytes within a block and across blocks, `.` and `..` included.

use std::cmp::Ordering;

use crate::error::{corrupt, ErofsError, Result};
use crate::image::Image;
use crate::inode::Inode;
use crate::limits::{DIRENT_BYTES, MAX_NAME_BYTES};
use crate::source::{le16, le64};

/// The file type a directory entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Unknown,
    Regular,
    Directory,
    CharDevice,
    BlockDevice,
    Fifo,
    Socket,
    Symlink,
}

impl FileKind {
    fn from_disk(t: u8) -> Self {
        match t {
            1 => Self::Regular,
            2 => Self::Directory,
            3 => Self::CharDevice,
            4 => Self::BlockDevice,
            5 => Self::Fifo,
            6 => Self::Socket,
            7 => Self::Symlink,
            _ => Self::Unknown,
        }
    }
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub nid: u64,
    pub kind: FileKind,
}

impl Image {
    /// Number of directory blocks of `dir`.
    ///
    /// # Errors
    /// `Corrupt`/`Unsupported` if `dir` is not a flat directory.
    pub fn dir_blocks(&self, dir: &Inode) -> Result<u64> {
        if !dir.is_dir() {
            return corrupt("not a directory", dir.pos);
        }
        if dir.is_compressed() {
            return Err(ErofsError::Unsupported("compressed directory".into()));
        }
        Ok(dir.size_bytes.div_ceil(self.block_bytes()))
    }

    /// The entries of directory block `index`, in on-disk (sorted) order.
    ///
    /// # Errors
    /// `Corrupt` for a malformed block.
    pub fn dir_block(&self, dir: &Inode, index: u64) -> Result<Vec<DirEntry>> {
        let bs = self.block_bytes();
        let start = index * bs;
        if start >= dir.size_bytes {
            return corrupt("directory block past the end", dir.pos);
        }
        let len = (dir.size_bytes - start).min(bs) as usize;
        let mut block = vec![0; len];
        self.read_flat(dir, start, &mut block)?;
        parse_block(&block, dir.pos)
    }

    /// Finds `name` in `dir` by binary search over blocks, then within the block.
    ///
    /// # Errors
    /// `Corrupt` for malformed blocks on the search path.
    pub fn lookup(&self, dir: &Inode, name: &[u8]) -> Result<Option<DirEntry>> {
        let blocks = self.dir_blocks(dir)?;
        let (mut lo, mut hi) = (0u64, blocks);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let entries = self.dir_block(dir, mid)?;
            let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
                return corrupt("empty directory block", dir.pos);
            };
            match (name.cmp(&first.name[..]), name.cmp(&last.name[..])) {
                (Ordering::Less, _) => hi = mid,
                (_, Ordering::Greater) => lo = mid + 1,
                _ => {
                    let found = entries.binary_search_by(|e| e.name[..].cmp(name));
                    return Ok(found.ok().map(|i| entries[i].clone()));
                }
            }
        }
        Ok(None)
    }
}

fn parse_block(block: &[u8], at: u64) -> Result<Vec<DirEntry>> {
    if block.len() < DIRENT_BYTES {
        return corrupt("directory block shorter than one entry", at);
    }
    let first_name = usize::from(le16(block, 8));
    if first_name == 0 || first_name % DIRENT_BYTES != 0 || first_name > block.len() {
        return corrupt("bad first name offset in a directory block", at);
    }
    let count = first_name / DIRENT_BYTES;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let rec = i * DIRENT_BYTES;
        let name_at = usize::from(le16(block, rec + 8));
        let name_end = if i + 1 < count {
            usize::from(le16(block, rec + DIRENT_BYTES + 8))
        } else {
            let tail = block.get(name_at..).unwrap_or_default();
            name_at + tail.iter().position(|&b| b == 0).unwrap_or(tail.len())
        };
        if name_at < first_name || name_end > block.len() || name_end <= name_at {
            return corrupt("bad name offsets in a directory block", at);
        }
        if name_end - name_at > MAX_NAME_BYTES {
            return corrupt("directory entry name too long", at);
        }
        out.push(DirEntry {
            name: block[name_at..name_end].to_vec(),
            nid: le64(block, rec),
            kind: FileKind::from_disk(block[rec + 10]),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects_blocks() {
        // Two entries "a" (nid 5) and "bc" (nid 6), then zero padding.
        let mut b = vec![0u8; 64];
        b[0] = 5;
        b[8] = 24;
        b[10] = 1;
        b[12] = 6;
        b[20] = 25;
        b[22] = 2;
        b[24] = b'a';
        b[25] = b'b';
        b[26] = b'c';
        let e = parse_block(&b, 0).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!((&e[0].name[..], e[0].nid), (&b"a"[..], 5));
        assert_eq!(
            (&e[1].name[..], e[1].kind),
            (&b"bc"[..], FileKind::Directory)
        );
        b[8] = 7; // not a multiple of 12
        assert!(parse_block(&b, 0).is_err());
        b[8] = 24;
        b[20] = 200; // past the block
        assert!(parse_block(&b, 0).is_err());
    }
}
