//! Compressed files: mapping a file offset to its extent and physical cluster.
//!
//! The file is cut into logical clusters (lclusters) of `2^lclusterbits` bytes; each has an
//! index entry. A HEAD (or PLAIN, for stored-uncompressed data) entry says that an extent
//! starts inside this lcluster at `clusterofs` and that its physical cluster (pcluster)
//! starts at block `blkaddr`; a NONHEAD entry belongs to the extent of an earlier HEAD
//! (`delta[0]` lclusters back) and knows where the next HEAD is (`delta[1]` ahead). With
//! big pclusters the first NONHEAD of an extent holds the pcluster's block count instead
//! of `delta[0]` (flag `CBLKCNT`).
//!
//! After the inode and its xattrs, aligned to 8 bytes, comes an 8-byte map header:
//! 0 reserved u16 | 2 inline-tail size u16 | 4 advise u16 | 6 algorithms u8 |
//! 7 lclusterbits - block bits (low 3 bits). Then the indexes:
//! - full: 8 bytes of padding, then per lcluster {advise u16 (type in bits 0-1),
//!   clusterofs u16, blkaddr u32 | delta[0] u16, delta[1] u16};
//! - compact: packs of 2 entries in 8 bytes (4B) until the offset is 32-aligned, packs of
//!   16 entries in 32 bytes (2B, if advised) for all whole packs, then 4B packs again.
//!   Each pack ends with the 32-bit block address of its first HEAD; entries hold
//!   `lobits` of clusterofs/delta and 2 bits of type, bit-packed.
//!
//! With tail packing (ztailpacking) the last extent's pcluster is stored right after the
//! index area, inside the inode's metadata block.

use crate::error::{corrupt, ErofsError, Result};
use crate::image::Image;
use crate::inode::{DataLayout, Inode};
use crate::limits::{MAX_EXTENT_BYTES, MAX_PCLUSTER_BYTES};
use crate::source::{le16, le32, read_vec};

const ADVISE_COMPACTED_2B: u16 = 0x1;
const ADVISE_BIG_PCLUSTER_1: u16 = 0x2;
const ADVISE_BIG_PCLUSTER_2: u16 = 0x4;
const ADVISE_INLINE_PCLUSTER: u16 = 0x8;
const ADVISE_UNSUPPORTED: u16 = !0xf;
const FRAGMENT_INODE_BIT: u8 = 0x80;
const D0_CBLKCNT: u32 = 1 << 11;
const MAP_HEADER_BYTES: u64 = 8;
const FULL_INDEX_PADDING: u64 = 8;
const FULL_INDEX_BYTES: u64 = 8;

const TYPE_PLAIN: u8 = 0;
const TYPE_NONHEAD: u8 = 2;
const TYPE_HEAD2: u8 = 3;

/// Where a pcluster's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PclusterSource {
    /// Whole blocks at this image offset.
    Blocks { offset: u64, len: u64 },
    /// Inline in the inode's metadata block (tail packing).
    Inline { offset: u64, len: u64 },
}

impl PclusterSource {
    #[must_use]
    pub fn offset_len(&self) -> (u64, u64) {
        match *self {
            Self::Blocks { offset, len } | Self::Inline { offset, len } => (offset, len),
        }
    }
}

/// One extent of a compressed file: file bytes `[start, start + len)` decode from `src`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub start: u64,
    pub len: u64,
    pub src: PclusterSource,
    /// False for a pcluster stored uncompressed.
    pub compressed: bool,
}

/// Per-inode compression parameters from the map header.
#[derive(Debug, Clone, Copy)]
struct ZInfo {
    advise: u16,
    algs: u8,
    lbits: u32,
    header_end: u64,
    total: u64,
    tail: Option<(u64, u64, u64)>, // (head lcn, inline offset, inline size)
}

#[derive(Debug, Clone, Copy, Default)]
struct Lcluster {
    ty: u8,
    clusterofs: u64,
    delta: [u64; 2],
    pblk: u64,
    cblks: u64,
    next_pack: u64,
}

impl Image {
    /// The extent containing file byte `pos` of a compressed inode.
    ///
    /// # Errors
    /// `Corrupt` for inconsistent indexes; `Unsupported` for algorithms and layouts this
    /// reader does not implement.
    pub fn map_extent(&self, inode: &Inode, pos: u64) -> Result<Extent> {
        if pos >= inode.size_bytes {
            return corrupt("compressed read past the end of the file", inode.pos);
        }
        let zi = self.zinfo(inode)?;
        let (head_lcn, head, _) = self.find_head(inode, &zi, pos)?;
        let start = (head_lcn << zi.lbits) | head.clusterofs;
        let end = self.extent_end(inode, &zi, head_lcn)?;
        if end <= pos || start > pos || end - start > MAX_EXTENT_BYTES {
            return corrupt("compressed extent out of range", inode.pos);
        }
        let src = match zi.tail {
            Some((tail_lcn, offset, len)) if tail_lcn == head_lcn => {
                if offset % self.block_bytes() + len > self.block_bytes() {
                    return corrupt("inline pcluster crosses a block", offset);
                }
                PclusterSource::Inline { offset, len }
            }
            _ => PclusterSource::Blocks {
                offset: head.pblk << self.superblock().block_bits,
                len: self.pcluster_blocks(inode, &zi, head_lcn, head.ty)?
                    << self.superblock().block_bits,
            },
        };
        if src.offset_len().1 > MAX_PCLUSTER_BYTES || src.offset_len().1 == 0 {
            return corrupt("pcluster size out of range", inode.pos);
        }
        let compressed = head.ty != TYPE_PLAIN;
        if compressed {
            let alg = if head.ty == TYPE_HEAD2 {
                zi.algs >> 4
            } else {
                zi.algs & 0xf
            };
            if alg != 0 {
                return Err(ErofsError::Unsupported(format!(
                    "compression algorithm {alg} (only LZ4 is supported)"
                )));
            }
        } else if end - start > src.offset_len().1 {
            return corrupt("uncompressed extent larger than its pcluster", inode.pos);
        }
        Ok(Extent {
            start,
            len: end - start,
            src,
            compressed,
        })
    }

    /// Reads the raw bytes of an extent's pcluster (the read the decoder then works on).
    ///
    /// # Errors
    /// `Corrupt` if the pcluster lies outside the image.
    pub fn read_pcluster(&self, extent: &Extent) -> Result<Vec<u8>> {
        let (offset, len) = extent.src.offset_len();
        read_vec(self.source(), offset, len as usize)
    }

    fn zinfo(&self, inode: &Inode) -> Result<ZInfo> {
        let bbits = u32::from(self.superblock().block_bits);
        let hpos = inode.data_pos().next_multiple_of(8);
        let h = read_vec(self.source(), hpos, MAP_HEADER_BYTES as usize)?;
        let advise = le16(&h, 4);
        if h[7] & FRAGMENT_INODE_BIT != 0 || advise & ADVISE_UNSUPPORTED != 0 {
            return Err(ErofsError::Unsupported(format!(
                "compressed inode advise {advise:#x} / cluster bits {:#x}",
                h[7]
            )));
        }
        let lbits = bbits + u32::from(h[7] & 7);
        let compact = inode.layout == DataLayout::CompressedCompact;
        if compact && (advise & ADVISE_BIG_PCLUSTER_1 == 0) != (advise & ADVISE_BIG_PCLUSTER_2 == 0)
        {
            return corrupt("compact indexes with mixed big-pcluster advice", hpos);
        }
        let mut zi = ZInfo {
            advise,
            algs: h[6],
            lbits,
            header_end: hpos + MAP_HEADER_BYTES,
            total: inode.size_bytes.div_ceil(1 << lbits),
            tail: None,
        };
        if advise & ADVISE_INLINE_PCLUSTER != 0 {
            let idata = u64::from(le16(&h, 2));
            if idata == 0 || inode.size_bytes == 0 {
                return corrupt("inline pcluster without a size", hpos);
            }
            let (head_lcn, _, last) = self.find_head(inode, &zi, inode.size_bytes - 1)?;
            zi.tail = Some((head_lcn, last.next_pack, idata));
        }
        Ok(zi)
    }

    /// The HEAD lcluster of the extent holding `pos`: (its lcn, its entry, the entry of
    /// `pos`'s own lcluster).
    fn find_head(&self, inode: &Inode, zi: &ZInfo, pos: u64) -> Result<(u64, Lcluster, Lcluster)> {
        let lcn = pos >> zi.lbits;
        let endoff = pos & ((1 << zi.lbits) - 1);
        let own = self.load_lcluster(inode, zi, lcn, false)?;
        let mut back = match own.ty {
            TYPE_NONHEAD => own.delta[0],
            _ if endoff >= own.clusterofs => return Ok((lcn, own, own)),
            _ => 1,
        };
        let mut at = lcn;
        loop {
            if back == 0 || back > at {
                return corrupt("lookback past the first lcluster", inode.pos);
            }
            at -= back;
            let m = self.load_lcluster(inode, zi, at, false)?;
            if m.ty != TYPE_NONHEAD {
                return Ok((at, m, own));
            }
            back = m.delta[0];
        }
    }

    /// End (exclusive) of the extent whose HEAD is `head_lcn`: the next HEAD's start, or
    /// the end of the file.
    fn extent_end(&self, inode: &Inode, zi: &ZInfo, head_lcn: u64) -> Result<u64> {
        let mut lcn = head_lcn + 1;
        loop {
            if lcn >= zi.total {
                return Ok(inode.size_bytes);
            }
            let m = self.load_lcluster(inode, zi, lcn, true)?;
            if m.ty != TYPE_NONHEAD {
                return Ok(((lcn << zi.lbits) | m.clusterofs).min(inode.size_bytes));
            }
            lcn += m.delta[1].max(1);
        }
    }

    /// Blocks of the pcluster whose HEAD is `head_lcn`.
    fn pcluster_blocks(&self, inode: &Inode, zi: &ZInfo, head_lcn: u64, ty: u8) -> Result<u64> {
        let one = 1u64 << (zi.lbits - u32::from(self.superblock().block_bits));
        let big = match ty {
            TYPE_HEAD2 => zi.advise & ADVISE_BIG_PCLUSTER_2 != 0,
            _ => zi.advise & ADVISE_BIG_PCLUSTER_1 != 0,
        };
        if !big || head_lcn + 1 >= zi.total {
            return Ok(one);
        }
        let m = self.load_lcluster(inode, zi, head_lcn + 1, false)?;
        match m.ty {
            TYPE_NONHEAD if m.delta[0] == 1 && m.cblks > 0 => Ok(m.cblks),
            TYPE_NONHEAD => corrupt("big pcluster without a block count", inode.pos),
            _ => Ok(one),
        }
    }

    fn load_lcluster(&self, inode: &Inode, zi: &ZInfo, lcn: u64, ahead: bool) -> Result<Lcluster> {
        if lcn >= zi.total {
            return corrupt("lcluster index past the end of the file", inode.pos);
        }
        match inode.layout {
            DataLayout::CompressedFull => self.load_full(zi, lcn),
            _ => self.load_compact(inode, zi, lcn, ahead),
        }
    }

    fn load_full(&self, zi: &ZInfo, lcn: u64) -> Result<Lcluster> {
        let pos = zi.header_end + FULL_INDEX_PADDING + lcn * FULL_INDEX_BYTES;
        let d = read_vec(self.source(), pos, FULL_INDEX_BYTES as usize)?;
        let mut m = Lcluster {
            ty: (le16(&d, 0) & 3) as u8,
            next_pack: pos + FULL_INDEX_BYTES,
            ..Lcluster::default()
        };
        if m.ty == TYPE_NONHEAD {
            m.clusterofs = 1 << zi.lbits;
            m.delta = [u64::from(le16(&d, 4)), u64::from(le16(&d, 6))];
            if m.delta[0] & u64::from(D0_CBLKCNT) != 0 {
                if zi.advise & (ADVISE_BIG_PCLUSTER_1 | ADVISE_BIG_PCLUSTER_2) == 0 {
                    return corrupt("block count without big pclusters", pos);
                }
                m.cblks = m.delta[0] & !u64::from(D0_CBLKCNT);
                m.delta[0] = 1;
            }
        } else {
            m.clusterofs = u64::from(le16(&d, 2));
            if m.clusterofs >= 1 << zi.lbits {
                return corrupt("cluster offset out of range", pos);
            }
            m.pblk = u64::from(le32(&d, 4));
        }
        Ok(m)
    }

    fn load_compact(&self, inode: &Inode, zi: &ZInfo, lcn: u64, ahead: bool) -> Result<Lcluster> {
        if zi.lbits > 14 {
            return Err(ErofsError::Unsupported(
                "compact indexes over 16 KiB lclusters".into(),
            ));
        }
        let ebase = zi.header_end;
        let initial_4b = match (32 - ebase % 32) / 4 {
            8 => 0,
            n => n,
        };
        let compacted_2b = if zi.advise & ADVISE_COMPACTED_2B != 0 && initial_4b < zi.total {
            (zi.total - initial_4b) / 16 * 16
        } else {
            0
        };
        let (pos, shift) = if lcn < initial_4b {
            (ebase + lcn * 4, 2)
        } else if lcn - initial_4b < compacted_2b {
            (ebase + initial_4b * 4 + (lcn - initial_4b) * 2, 1)
        } else {
            let rest = lcn - initial_4b - compacted_2b;
            (ebase + initial_4b * 4 + compacted_2b * 2 + rest * 4, 2)
        };
        self.unpack_compact(inode, zi, pos, shift, ahead)
    }
}

/// One compact pack: `vcnt` bit-packed entries and the block address of its first HEAD.
struct Pack<'a> {
    bytes: &'a [u8],
    lobits: u32,
    encodebits: u64,
    vcnt: i64,
}

impl Pack<'_> {
    /// (low bits, type) of entry `i`.
    fn entry(&self, i: i64) -> Result<(u64, u8)> {
        let bit = u64::try_from(i)
            .unwrap_or(u64::MAX)
            .saturating_mul(self.encodebits);
        let at = usize::try_from(bit / 8).unwrap_or(usize::MAX);
        let Some(w) = self.bytes.get(at..at.saturating_add(4)) else {
            return corrupt("compact index entry outside its pack", 0);
        };
        let v = le32(w, 0) >> (bit % 8);
        let lo = u64::from(v & ((1 << self.lobits) - 1));
        Ok((lo, ((v >> self.lobits) & 3) as u8))
    }

    /// Distance from entry `i` (a NONHEAD) to the next HEAD.
    fn lookahead(&self, mut i: i64) -> Result<u64> {
        let mut d1 = 0u64;
        let mut lo = 0;
        while i < self.vcnt {
            let (l, ty) = self.entry(i)?;
            if ty != TYPE_NONHEAD {
                return Ok(d1);
            }
            lo = l;
            d1 += 1;
            i += 1;
        }
        if lo & u64::from(D0_CBLKCNT) == 0 {
            d1 += lo.saturating_sub(1);
        }
        Ok(d1)
    }

    /// Blocks between the pack's first HEAD and the HEAD at entry `i`.
    fn blocks_before(&self, mut i: i64, big: bool) -> Result<u64> {
        let mut nblk = u64::from(!big);
        while i > 0 {
            i -= 1;
            let (lo, ty) = self.entry(i)?;
            if ty != TYPE_NONHEAD {
                nblk += 1;
                continue;
            }
            if !big {
                i -= i64::try_from(lo).unwrap_or(i64::MAX);
                nblk += u64::from(i >= 0);
            } else if lo & u64::from(D0_CBLKCNT) != 0 {
                i -= 1;
                nblk += lo & !u64::from(D0_CBLKCNT);
            } else if lo <= 1 {
                return corrupt("big pcluster with a plain delta of 1", 0);
            } else {
                i -= i64::try_from(lo - 2).unwrap_or(i64::MAX);
            }
        }
        Ok(nblk)
    }
}

impl Image {
    fn unpack_compact(
        &self,
        inode: &Inode,
        zi: &ZInfo,
        pos: u64,
        shift: u32,
        ahead: bool,
    ) -> Result<Lcluster> {
        let vcnt: u64 = match shift {
            2 => 2,
            _ if zi.lbits <= 12 => 16,
            _ => {
                return Err(ErofsError::Unsupported(
                    "2B compact indexes over 4 KiB".into(),
                ))
            }
        };
        let pack_bytes = vcnt << shift;
        let base = pos / pack_bytes * pack_bytes;
        let bytes = read_vec(self.source(), base, pack_bytes as usize)?;
        let pack = Pack {
            bytes: &bytes,
            lobits: zi.lbits.max(12),
            encodebits: (pack_bytes - 4) * 8 / vcnt,
            vcnt: vcnt as i64,
        };
        let i = ((pos - base) >> shift) as i64;
        let big = zi.advise & ADVISE_BIG_PCLUSTER_1 != 0;
        let (lo, ty) = pack.entry(i)?;
        let mut m = Lcluster {
            ty,
            next_pack: base + pack_bytes,
            ..Lcluster::default()
        };
        if ty == TYPE_NONHEAD {
            m.clusterofs = 1 << zi.lbits;
            if ahead {
                m.delta[1] = pack.lookahead(i)?;
            }
            if lo & u64::from(D0_CBLKCNT) != 0 {
                if !big {
                    return corrupt("block count without big pclusters", pos);
                }
                m.cblks = lo & !u64::from(D0_CBLKCNT);
                m.delta[0] = 1;
            } else if i + 1 != pack.vcnt {
                m.delta[0] = lo;
            } else {
                // The last entry of a pack stores delta[1]; delta[0] comes from the one
                // before it.
                let (plo, pty) = pack.entry(i - 1)?;
                let prev = match pty {
                    TYPE_NONHEAD if plo & u64::from(D0_CBLKCNT) != 0 => 1,
                    TYPE_NONHEAD => plo,
                    _ => 0,
                };
                m.delta[0] = prev + 1;
            }
            return Ok(m);
        }
        if lo >= 1 << zi.lbits {
            return corrupt("cluster offset out of range", inode.pos);
        }
        m.clusterofs = lo;
        let first = u64::from(le32(&bytes, (pack_bytes - 4) as usize));
        m.pblk = first + pack.blocks_before(i, big)?;
        Ok(m)
    }
}
