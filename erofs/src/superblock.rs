//! The superblock: 128 bytes at byte 1024 of the image.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic 0xE0F5E1E2 |
//! | 4 | 4 | checksum: CRC-32C of bytes 1024..block end, this field zeroed |
//! | 8 | 4 | compatible features (bit 0: checksum) |
//! | 12 | 1 | log2 block size |
//! | 13 | 1 | extra 16-byte superblock slots |
//! | 14 | 2 | root directory nid |
//! | 16 | 8 | inode count |
//! | 24 | 8 + 4 | build time (s, ns): the times of compact inodes |
//! | 36 | 4 | block count |
//! | 40 | 4 | first block of the inode area (meta_blkaddr) |
//! | 44 | 4 | first block of shared xattrs |
//! | 48 | 16 | uuid |
//! | 64 | 16 | volume name |
//! | 80 | 4 | incompatible features |
//! | 84 | 2 | compression algorithms available (with COMPR_CFGS) or LZ4 max distance |
//! | 86 | 2 | extra devices |

use crate::crc32c;
use crate::error::{corrupt, ErofsError, Result};
use crate::limits::BLOCK_BITS;
use crate::source::{le16, le32, le64, read_vec, ImageSource};

/// Byte offset of the superblock.
pub const SUPER_OFFSET: u64 = 1024;
/// Bytes of the base superblock.
pub const SUPER_BYTES: usize = 128;
pub const MAGIC: u32 = 0xE0F5_E1E2;

pub const COMPAT_SB_CHKSUM: u32 = 0x1;
pub const COMPAT_MTIME: u32 = 0x2;

pub const INCOMPAT_ZERO_PADDING: u32 = 0x1;
/// Also `COMPR_CFGS`: per-algorithm configuration records follow the superblock.
pub const INCOMPAT_BIG_PCLUSTER: u32 = 0x2;
pub const INCOMPAT_CHUNKED_FILE: u32 = 0x4;
/// Also `COMPR_HEAD2`.
pub const INCOMPAT_DEVICE_TABLE: u32 = 0x8;
pub const INCOMPAT_ZTAILPACKING: u32 = 0x10;
/// Also `DEDUPE`.
pub const INCOMPAT_FRAGMENTS: u32 = 0x20;
pub const INCOMPAT_XATTR_PREFIXES: u32 = 0x40;

/// Incompatible features this reader implements.
pub const SUPPORTED_INCOMPAT: u32 =
    INCOMPAT_ZERO_PADDING | INCOMPAT_BIG_PCLUSTER | INCOMPAT_CHUNKED_FILE | INCOMPAT_ZTAILPACKING;

/// Bit of LZ4 in the available-algorithms mask.
pub const ALG_LZ4_BIT: u16 = 0x1;

/// The fields of the superblock the reader uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub block_bits: u8,
    pub root_nid: u64,
    pub inodes: u64,
    pub build_time_s: u64,
    pub build_time_ns: u32,
    pub blocks: u32,
    pub meta_blkaddr: u32,
    pub feature_compat: u32,
    pub feature_incompat: u32,
    pub uuid: [u8; 16],
    pub volume_name: [u8; 16],
}

impl Superblock {
    /// Reads and checks the superblock.
    ///
    /// # Errors
    /// `NotErofs` without the magic; `Unsupported` for features outside
    /// [`SUPPORTED_INCOMPAT`] or a block size other than 4 KiB; `Corrupt` for a bad
    /// checksum or an image shorter than its first block.
    pub fn read(src: &dyn ImageSource) -> Result<Self> {
        if src.len_bytes() < SUPER_OFFSET + SUPER_BYTES as u64 {
            return Err(ErofsError::NotErofs("file shorter than a superblock"));
        }
        let b = read_vec(src, SUPER_OFFSET, SUPER_BYTES)?;
        if le32(&b, 0) != MAGIC {
            return Err(ErofsError::NotErofs("no EROFS magic at byte 1024"));
        }
        let sb = Self {
            block_bits: b[12],
            root_nid: u64::from(le16(&b, 14)),
            inodes: le64(&b, 16),
            build_time_s: le64(&b, 24),
            build_time_ns: le32(&b, 32),
            blocks: le32(&b, 36),
            meta_blkaddr: le32(&b, 40),
            feature_compat: le32(&b, 8),
            feature_incompat: le32(&b, 80),
            uuid: b[48..64].try_into().unwrap_or_default(),
            volume_name: b[64..80].try_into().unwrap_or_default(),
        };
        sb.check_features(&b)?;
        if sb.feature_compat & COMPAT_SB_CHKSUM != 0 {
            sb.check_checksum(src, le32(&b, 4))?;
        }
        Ok(sb)
    }

    fn check_features(&self, b: &[u8]) -> Result<()> {
        if self.block_bits != BLOCK_BITS {
            return Err(ErofsError::Unsupported(format!(
                "block size 2^{} (only 4096-byte blocks are supported)",
                self.block_bits
            )));
        }
        let unknown = self.feature_incompat & !SUPPORTED_INCOMPAT;
        if unknown != 0 {
            return Err(ErofsError::Unsupported(format!(
                "incompatible feature bits {unknown:#x} ({})",
                incompat_names(unknown)
            )));
        }
        if le16(b, 86) != 0 {
            return Err(ErofsError::Unsupported("extra devices".into()));
        }
        if self.feature_incompat & INCOMPAT_BIG_PCLUSTER != 0 {
            let algs = le16(b, 84);
            if algs & !ALG_LZ4_BIT != 0 {
                return Err(ErofsError::Unsupported(format!(
                    "compression algorithms {algs:#x} (only LZ4 is supported)"
                )));
            }
        }
        Ok(())
    }

    fn check_checksum(&self, src: &dyn ImageSource, stored: u32) -> Result<()> {
        let len = self.block_bytes() - SUPER_OFFSET;
        let mut rest = read_vec(src, SUPER_OFFSET, len as usize)?;
        rest[4..8].fill(0);
        if crc32c::update(!0, &rest) != stored {
            return corrupt("superblock checksum mismatch", SUPER_OFFSET + 4);
        }
        Ok(())
    }

    #[must_use]
    pub fn block_bytes(&self) -> u64 {
        1 << self.block_bits
    }

    /// True if LZ4 clusters are right-aligned behind zero padding.
    #[must_use]
    pub fn zero_padding(&self) -> bool {
        self.feature_incompat & INCOMPAT_ZERO_PADDING != 0
    }
}

fn incompat_names(bits: u32) -> String {
    let names = [
        (INCOMPAT_DEVICE_TABLE, "device table / compression head 2"),
        (INCOMPAT_FRAGMENTS, "fragments / dedupe"),
        (INCOMPAT_XATTR_PREFIXES, "xattr prefixes"),
    ];
    let mut out: Vec<&str> = names
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    if bits & !(INCOMPAT_DEVICE_TABLE | INCOMPAT_FRAGMENTS | INCOMPAT_XATTR_PREFIXES) != 0 {
        out.push("unknown");
    }
    out.join(", ")
}
