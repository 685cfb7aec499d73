//! Where image bytes come from. Every read is checked against the image length, so a
//! truncated image gives an error, never a short buffer.

use std::os::unix::fs::FileExt;

use crate::error::{corrupt, Result};

/// Random-access, read-only bytes of one image.
pub trait ImageSource: Send + Sync {
    /// Length of the image in bytes.
    fn len_bytes(&self) -> u64;

    /// Fills `buf` from `offset`. Implementations need not check bounds: callers go
    /// through [`read_exact_at`].
    fn read_at_raw(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
}

/// Reads exactly `buf.len()` bytes at `offset`, refusing ranges past the end of the image.
///
/// # Errors
/// `Corrupt` past the end; `Io` when the source fails.
pub fn read_exact_at(src: &dyn ImageSource, buf: &mut [u8], offset: u64) -> Result<()> {
    let end = offset.checked_add(buf.len() as u64);
    match end {
        Some(end) if end <= src.len_bytes() => Ok(src.read_at_raw(buf, offset)?),
        _ => corrupt("read past the end of the image", offset),
    }
}

/// Reads `len` bytes at `offset` into a new vector (`len` must already be bounded).
///
/// # Errors
/// As [`read_exact_at`].
pub fn read_vec(src: &dyn ImageSource, offset: u64, len: usize) -> Result<Vec<u8>> {
    if (len as u64) > src.len_bytes() {
        return corrupt("length larger than the image", offset);
    }
    let mut buf = vec![0; len];
    read_exact_at(src, &mut buf, offset)?;
    Ok(buf)
}

/// An image in a file, read with `pread` (no shared cursor, safe from many threads).
///
/// Reads smaller than a block (inodes, extent indexes, map headers: the metadata a READ
/// of a compressed file looks up once per extent) go through a one-block cache per
/// thread, so that the hundreds of index lookups of one 1 MiB READ cost a `pread` per
/// index block rather than one each. Images are read-only: a cached block never changes.
#[derive(Debug)]
pub struct FileSource {
    file: std::fs::File,
    len: u64,
    /// Tells this source's blocks from another image's in the per-thread cache.
    id: u64,
}

/// Size of the block the per-thread cache of [`FileSource`] keeps.
const CACHED_BLOCK_BYTES: usize = 4096;

/// Ids of [`FileSource`]s.
static NEXT_SOURCE_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The block one thread read last for a small read: source id, block number, its bytes
/// (fewer than a block at the end of an image).
struct CachedBlock {
    source: u64,
    block: u64,
    bytes: Vec<u8>,
}

thread_local! {
    static LAST_BLOCK: std::cell::RefCell<Option<CachedBlock>> =
        const { std::cell::RefCell::new(None) };
}

impl FileSource {
    /// Opens `path` read-only.
    ///
    /// # Errors
    /// If the file cannot be opened or stat'ed.
    pub fn open(path: &std::path::Path) -> std::io::Result<Self> {
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        let id = NEXT_SOURCE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Self { file, len, id })
    }
}

impl ImageSource for FileSource {
    fn len_bytes(&self) -> u64 {
        self.len
    }

    fn read_at_raw(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let block_bytes = CACHED_BLOCK_BYTES as u64;
        let block = offset / block_bytes;
        let within = (offset % block_bytes) as usize;
        if buf.is_empty()
            || buf.len() >= CACHED_BLOCK_BYTES
            || within + buf.len() > CACHED_BLOCK_BYTES
        {
            return self.file.read_exact_at(buf, offset);
        }
        LAST_BLOCK.with(|last| {
            let mut last = last.borrow_mut();
            let fresh = !matches!(&*last, Some(c) if c.source == self.id && c.block == block);
            if fresh {
                let start = block * block_bytes;
                let len = self.len.saturating_sub(start).min(block_bytes) as usize;
                let mut bytes = last.take().map(|c| c.bytes).unwrap_or_default();
                bytes.resize(len, 0);
                self.file.read_exact_at(&mut bytes, start)?;
                *last = Some(CachedBlock {
                    source: self.id,
                    block,
                    bytes,
                });
            }
            let src = last
                .as_ref()
                .and_then(|c| c.bytes.get(within..within + buf.len()))
                .ok_or(std::io::ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(src);
            Ok(())
        })
    }
}

/// An image held in memory (tests and the fuzzer).
#[derive(Debug, Clone)]
pub struct MemSource(pub Vec<u8>);

impl ImageSource for MemSource {
    fn len_bytes(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_at_raw(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        let src = start
            .checked_add(buf.len())
            .and_then(|end| self.0.get(start..end))
            .ok_or(std::io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// Little-endian field readers over a slice; out-of-range offsets read as an error.
pub(crate) fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn le64(b: &[u8], at: usize) -> u64 {
    u64::from(le32(b, at)) | (u64::from(le32(b, at + 4)) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_reads_through_the_block_cache_equal_the_file() {
        let dir = std::env::temp_dir().join(format!("granary-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        let bytes_a: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let bytes_b: Vec<u8> = (0..5_000u32).map(|i| (i * 13 % 241) as u8).collect();
        std::fs::write(&a, &bytes_a).unwrap();
        std::fs::write(&b, &bytes_b).unwrap();
        let (sa, sb) = (FileSource::open(&a).unwrap(), FileSource::open(&b).unwrap());
        // Alternating sources and blocks, reads inside a block, across a block boundary,
        // of a whole block and at the short last block.
        for (offset, len) in [
            (0, 8),
            (4090, 12),
            (4096, 4096),
            (8200, 1800),
            (9990, 10),
            (100, 1),
        ] {
            for (src, want) in [(&sa, &bytes_a), (&sb, &bytes_b)] {
                if offset + len > want.len() {
                    assert!(read_vec(src, offset as u64, len).is_err());
                    continue;
                }
                let got = read_vec(src, offset as u64, len).unwrap();
                assert_eq!(got, want[offset..offset + len], "{offset}+{len}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
