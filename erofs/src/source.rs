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
#[derive(Debug)]
pub struct FileSource {
    file: std::fs::File,
    len: u64,
}

impl FileSource {
    /// Opens `path` read-only.
    ///
    /// # Errors
    /// If the file cannot be opened or stat'ed.
    pub fn open(path: &std::path::Path) -> std::io::Result<Self> {
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        Ok(Self { file, len })
    }
}

impl ImageSource for FileSource {
    fn len_bytes(&self) -> u64 {
        self.len
    }

    fn read_at_raw(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.file.read_exact_at(buf, offset)
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
