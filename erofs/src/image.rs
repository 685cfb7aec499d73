//! An opened image: the superblock plus reads of inodes and of uncompressed file data
//! (flat plain, flat inline and chunk-based layouts).

use crate::error::{corrupt, ErofsError, Result};
use crate::inode::{DataLayout, Inode};
use crate::limits::MAX_SYMLINK_BYTES;
use crate::source::{le32, read_exact_at, read_vec, ImageSource};
use crate::superblock::Superblock;

/// Block address meaning "no block" (a hole in a chunk-based file).
pub const NULL_ADDR: u32 = u32::MAX;
const CHUNK_BLKBITS_MASK: u32 = 0x1f;
const CHUNK_INDEXES: u32 = 0x20;

/// A read-only EROFS image.
pub struct Image {
    src: Box<dyn ImageSource>,
    sb: Superblock,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("sb", &self.sb)
            .finish_non_exhaustive()
    }
}

impl Image {
    /// Checks the superblock and the root directory.
    ///
    /// # Errors
    /// See [`Superblock::read`]; `Corrupt` if the root is not a readable directory.
    pub fn open(src: Box<dyn ImageSource>) -> Result<Self> {
        let sb = Superblock::read(src.as_ref())?;
        let image = Self { src, sb };
        let root = image.inode(image.sb.root_nid)?;
        if !root.is_dir() {
            return corrupt("root inode is not a directory", root.pos);
        }
        Ok(image)
    }

    /// Opens the image file at `path`.
    ///
    /// # Errors
    /// As [`Image::open`], plus `Io` if the file cannot be opened.
    pub fn open_path(path: &std::path::Path) -> Result<Self> {
        Self::open(Box::new(crate::source::FileSource::open(path)?))
    }

    #[must_use]
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// A 64-bit fingerprint of this image, the same for every copy of it and (with
    /// overwhelming probability) different for any other image: SipHash-1-3 under a fixed
    /// domain key of the image's length and every byte of it. It reads the whole image
    /// (about a second per 2 GB here); the server keeps it in its state directory keyed by
    /// the file's identity and times, so it is computed again only for a changed file.
    ///
    /// # Errors
    /// `Io` if the source cannot be read.
    pub fn identity(&self) -> Result<u64> {
        use std::hash::Hasher;
        const DOMAIN: [u8; 16] = *b"granary-erofs-id";
        const CHUNK: u64 = 1 << 20;
        let len = self.src.len_bytes();
        let mut h = siphasher::sip::SipHasher13::new_with_key(&DOMAIN);
        h.write_u64(len);
        let mut buf = vec![0u8; usize::try_from(len.min(CHUNK)).unwrap_or(0)];
        let mut at = 0;
        while at < len {
            let n = usize::try_from((len - at).min(CHUNK)).unwrap_or(0);
            read_exact_at(self.source(), &mut buf[..n], at)?;
            h.write(&buf[..n]);
            at += n as u64;
        }
        Ok(h.finish())
    }

    pub(crate) fn source(&self) -> &dyn ImageSource {
        self.src.as_ref()
    }

    #[must_use]
    pub fn root_nid(&self) -> u64 {
        self.sb.root_nid
    }

    /// Reads inode `nid`.
    ///
    /// # Errors
    /// `Corrupt` if the nid does not name a valid inode.
    pub fn inode(&self, nid: u64) -> Result<Inode> {
        Inode::read(self.src.as_ref(), &self.sb, nid)
    }

    pub(crate) fn block_bytes(&self) -> u64 {
        self.sb.block_bytes()
    }

    /// Fills `buf` with the file bytes at `offset` of an uncompressed inode; holes read as
    /// zeros. The range must lie within the file.
    ///
    /// # Errors
    /// `Corrupt` for a range past the file or data outside the image; `Unsupported` for a
    /// compressed inode (use [`crate::zmap`]).
    pub fn read_flat(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > inode.size_bytes) {
            return corrupt("read past the end of a file", inode.pos);
        }
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let (run, phys) = self.map_flat(inode, pos)?;
            let take = usize::try_from(run.min((buf.len() - done) as u64)).unwrap_or(usize::MAX);
            let take = take.min(buf.len() - done);
            if take == 0 {
                return corrupt("empty data run", inode.pos);
            }
            let dst = &mut buf[done..done + take];
            match phys {
                Some(at) => read_exact_at(self.src.as_ref(), dst, at)?,
                None => dst.fill(0),
            }
            done += take;
        }
        Ok(())
    }

    /// Where file byte `pos` lives: (bytes contiguous from there, image offset or `None`
    /// for a hole).
    fn map_flat(&self, inode: &Inode, pos: u64) -> Result<(u64, Option<u64>)> {
        let bs = self.block_bytes();
        let first = u64::from(inode.union_u32) * bs;
        match inode.layout {
            DataLayout::FlatPlain => Ok((inode.size_bytes - pos, Some(first + pos))),
            DataLayout::FlatInline => {
                let blocks = inode.size_bytes.div_ceil(bs);
                let in_blocks = (blocks.saturating_sub(1)) * bs;
                if pos < in_blocks {
                    return Ok((in_blocks - pos, Some(first + pos)));
                }
                let tail = inode.size_bytes - in_blocks;
                let at = inode.data_pos();
                if at % bs + tail > bs {
                    return corrupt("inline tail crosses a block boundary", at);
                }
                Ok((inode.size_bytes - pos, Some(at + (pos - in_blocks))))
            }
            DataLayout::ChunkBased => self.map_chunk(inode, pos),
            DataLayout::CompressedFull | DataLayout::CompressedCompact => Err(
                ErofsError::Unsupported("flat read of a compressed inode".into()),
            ),
        }
    }

    fn map_chunk(&self, inode: &Inode, pos: u64) -> Result<(u64, Option<u64>)> {
        let format = inode.union_u32;
        if format & !(CHUNK_BLKBITS_MASK | CHUNK_INDEXES) != 0 {
            return Err(ErofsError::Unsupported(format!("chunk format {format:#x}")));
        }
        let chunk_bits = u32::from(self.sb.block_bits) + (format & CHUNK_BLKBITS_MASK);
        if chunk_bits > 40 {
            return corrupt("chunk size out of range", inode.pos);
        }
        let chunk = pos >> chunk_bits;
        let in_chunk = pos & ((1u64 << chunk_bits) - 1);
        let run = ((1u64 << chunk_bits) - in_chunk).min(inode.size_bytes - pos);
        let blkaddr = if format & CHUNK_INDEXES != 0 {
            // 8-byte entries: advise u16, device u16, block u32; table 8-aligned.
            let at = inode.data_pos().next_multiple_of(8) + chunk * 8;
            let e = read_vec(self.src.as_ref(), at, 8)?;
            if u16::from_le_bytes([e[2], e[3]]) != 0 {
                return Err(ErofsError::Unsupported("chunk on an extra device".into()));
            }
            le32(&e, 4)
        } else {
            let at = inode.data_pos().next_multiple_of(4) + chunk * 4;
            let e = read_vec(self.src.as_ref(), at, 4)?;
            le32(&e, 0)
        };
        if blkaddr == NULL_ADDR {
            return Ok((run, None));
        }
        Ok((
            run,
            Some((u64::from(blkaddr) << self.sb.block_bits) + in_chunk),
        ))
    }

    /// The target of a symlink.
    ///
    /// # Errors
    /// `Corrupt` for a target longer than `PATH_MAX` or outside the image.
    pub fn read_link(&self, inode: &Inode) -> Result<Vec<u8>> {
        if inode.size_bytes > MAX_SYMLINK_BYTES || inode.size_bytes == 0 {
            return corrupt("symlink length out of range", inode.pos);
        }
        if inode.is_compressed() {
            return Err(ErofsError::Unsupported("compressed symlink".into()));
        }
        let mut buf = vec![0; inode.size_bytes as usize];
        self.read_flat(inode, 0, &mut buf)?;
        Ok(buf)
    }
}

impl Image {
    /// Reads file bytes of any regular inode, decoding compressed extents on the calling
    /// thread without caching (tools, tests and the fuzzer; the server has its own path).
    ///
    /// # Errors
    /// As [`Image::read_flat`] and [`Image::map_extent`].
    pub fn read_simple(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<()> {
        if !inode.is_compressed() {
            return self.read_flat(inode, offset, buf);
        }
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let ext = self.map_extent(inode, pos)?;
            let raw = self.read_pcluster(&ext)?;
            let data = crate::decompress::decode(self.codec(&ext), &raw, ext.len as usize)?;
            let from = (pos - ext.start) as usize;
            let take = (data.len() - from).min(buf.len() - done);
            buf[done..done + take].copy_from_slice(&data[from..from + take]);
            done += take;
        }
        Ok(())
    }

    /// The codec that decodes `ext`.
    #[must_use]
    pub fn codec(&self, ext: &crate::zmap::Extent) -> crate::decompress::Codec {
        if ext.compressed {
            crate::decompress::Codec::Lz4 {
                zero_padding: self.sb.zero_padding(),
            }
        } else {
            crate::decompress::Codec::Plain
        }
    }
}
