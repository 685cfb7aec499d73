//! Inodes: 32-byte compact or 64-byte extended records in the inode area, addressed by
//! nid (byte offset = meta_blkaddr * block size + nid * 32).
//!
//! Compact (32 bytes): 0 format u16 | 2 xattr count u16 | 4 mode u16 | 6 nlink u16 |
//! 8 size u32 | 12 reserved | 16 union u32 | 20 ino u32 | 24 uid u16 | 26 gid u16 |
//! 28 reserved. Its times are the image's build time.
//!
//! Extended (64 bytes): 0 format | 2 xattr count | 4 mode u16 | 6 reserved | 8 size u64 |
//! 16 union u32 | 20 ino u32 | 24 uid u32 | 28 gid u32 | 32 mtime s u64 | 40 mtime ns u32
//! | 44 nlink u32 | 48 reserved.
//!
//! The union is the first data block (flat layouts), the device number (special files),
//! the compressed block count (compressed layouts) or the chunk format (chunk-based).
//! Inline xattrs follow the inode: 12 bytes of header plus 4 bytes per further count;
//! the reader skips them.

use crate::error::{corrupt, ErofsError, Result};
use crate::source::{le16, le32, le64, read_exact_at, ImageSource};
use crate::superblock::Superblock;

/// Bytes of the inode-address unit.
pub const NID_UNIT: u64 = 32;
const COMPACT_BYTES: usize = 32;
const EXTENDED_BYTES: usize = 64;

/// How an inode's data is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataLayout {
    /// Contiguous blocks from the first data block.
    FlatPlain,
    /// Full blocks from the first data block, the last partial block right after the inode.
    FlatInline,
    /// Compressed, one 8-byte index per logical cluster.
    CompressedFull,
    /// Compressed, packed 2- and 4-byte indexes.
    CompressedCompact,
    /// Fixed-size chunks, each mapped to blocks or a hole.
    ChunkBased,
}

/// One parsed inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inode {
    pub nid: u64,
    pub layout: DataLayout,
    /// Type and permission bits, as in `st_mode`.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size_bytes: u64,
    pub mtime_s: u64,
    pub mtime_ns: u32,
    /// The on-disk union (see the module documentation).
    pub union_u32: u32,
    /// Byte offset of the inode in the image.
    pub pos: u64,
    /// 32 (compact) or 64 (extended).
    pub inode_bytes: u64,
    pub xattr_bytes: u64,
}

impl Inode {
    /// Reads the inode `nid`.
    ///
    /// # Errors
    /// `Corrupt` for an nid past the image or an invalid format field.
    pub fn read(src: &dyn ImageSource, sb: &Superblock, nid: u64) -> Result<Self> {
        let pos = nid
            .checked_mul(NID_UNIT)
            .and_then(|o| o.checked_add(u64::from(sb.meta_blkaddr) << sb.block_bits))
            .ok_or(ErofsError::Corrupt {
                what: "nid out of range",
                offset: 0,
            })?;
        let mut b = [0u8; EXTENDED_BYTES];
        read_exact_at(src, &mut b[..COMPACT_BYTES], pos)?;
        let format = le16(&b, 0);
        let extended = format & 1 == 1;
        if format >> 4 != 0 {
            return corrupt("unknown inode format bits", pos);
        }
        let layout = match (format >> 1) & 7 {
            0 => DataLayout::FlatPlain,
            1 => DataLayout::CompressedFull,
            2 => DataLayout::FlatInline,
            3 => DataLayout::CompressedCompact,
            4 => DataLayout::ChunkBased,
            _ => return corrupt("unknown inode data layout", pos),
        };
        let xattr_count = u64::from(le16(&b, 2));
        let xattr_bytes = if xattr_count == 0 {
            0
        } else {
            12 + 4 * (xattr_count - 1)
        };
        let mut inode = Self {
            nid,
            layout,
            mode: u32::from(le16(&b, 4)),
            nlink: u32::from(le16(&b, 6)),
            uid: u32::from(le16(&b, 24)),
            gid: u32::from(le16(&b, 26)),
            size_bytes: u64::from(le32(&b, 8)),
            mtime_s: sb.build_time_s,
            mtime_ns: sb.build_time_ns,
            union_u32: le32(&b, 16),
            pos,
            inode_bytes: COMPACT_BYTES as u64,
            xattr_bytes,
        };
        if extended {
            read_exact_at(src, &mut b[COMPACT_BYTES..], pos + COMPACT_BYTES as u64)?;
            inode.inode_bytes = EXTENDED_BYTES as u64;
            inode.size_bytes = le64(&b, 8);
            inode.uid = le32(&b, 24);
            inode.gid = le32(&b, 28);
            inode.mtime_s = le64(&b, 32);
            inode.mtime_ns = le32(&b, 40);
            inode.nlink = le32(&b, 44);
        }
        inode.check()?;
        Ok(inode)
    }

    fn check(&self) -> Result<()> {
        if self.mtime_ns >= 1_000_000_000 {
            return corrupt("inode nanoseconds out of range", self.pos);
        }
        if self.size_bytes > i64::MAX as u64 {
            return corrupt("inode size out of range", self.pos);
        }
        let kind = self.mode & 0o170_000;
        let ok = matches!(
            kind,
            0o100_000 | 0o040_000 | 0o120_000 | 0o020_000 | 0o060_000 | 0o010_000 | 0o140_000
        );
        if !ok {
            return corrupt("inode has an unknown file type", self.pos);
        }
        Ok(())
    }

    /// Byte offset right after the inode and its inline xattrs (where inline data,
    /// chunk tables and compression headers start).
    #[must_use]
    pub fn data_pos(&self) -> u64 {
        self.pos + self.inode_bytes + self.xattr_bytes
    }

    #[must_use]
    pub fn is_dir(&self) -> bool {
        self.mode & 0o170_000 == 0o040_000
    }

    #[must_use]
    pub fn is_reg(&self) -> bool {
        self.mode & 0o170_000 == 0o100_000
    }

    #[must_use]
    pub fn is_symlink(&self) -> bool {
        self.mode & 0o170_000 == 0o120_000
    }

    #[must_use]
    pub fn is_compressed(&self) -> bool {
        matches!(
            self.layout,
            DataLayout::CompressedFull | DataLayout::CompressedCompact
        )
    }

    /// Major and minor of a device node (Linux "new" encoding).
    #[must_use]
    pub fn rdev(&self) -> (u32, u32) {
        let dev = self.union_u32;
        let major = (dev & 0xfff00) >> 8;
        let minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
        (major, minor)
    }
}
