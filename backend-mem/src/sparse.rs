//! Sparse contents of a regular file.
//!
//! Data lives in fixed-size chunks keyed by chunk index; a missing chunk is a hole and
//! reads as zeros. Invariant: every byte of an allocated chunk at or past `size_bytes` is
//! zero, so growing the file (by a write past the end or a setattr) exposes zeros without
//! touching the chunks. Writing only zeros where no chunk exists allocates nothing.

use std::collections::BTreeMap;

use vfs::FsResult;

use crate::space::Space;

/// Allocation unit of file data. 64 KiB keeps the per-chunk map overhead under 0.1% and a
/// 1 MiB READ or WRITE (`vfs::limits::MAX_IO_BYTES`) touching at most 17 chunks, while a
/// sparse file pays for its data in units no bigger than a typical NFS transfer.
pub const CHUNK_BYTES: u64 = 64 * 1024;

/// `CHUNK_BYTES` as a slice length.
const CHUNK_LEN: usize = 64 * 1024;

const _: () = assert!(CHUNK_LEN as u64 == CHUNK_BYTES);
const _: () = assert!(CHUNK_BYTES <= vfs::limits::MAX_IO_BYTES as u64);

/// The part of one chunk an I/O touches.
#[derive(Debug, Clone, Copy)]
struct Piece {
    /// Which chunk.
    index: u64,
    /// Where in the chunk the piece starts.
    within: usize,
    /// Where in the caller's buffer the piece starts.
    at: usize,
    len: usize,
}

/// Splits `len` bytes at `offset_bytes` into per-chunk pieces.
fn pieces(offset_bytes: u64, len: usize) -> impl Iterator<Item = Piece> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= len {
            return None;
        }
        // `at < len`, a buffer length, so the sum cannot overflow a u64.
        let position = offset_bytes + at as u64;
        let within = usize::try_from(position % CHUNK_BYTES).unwrap_or(0);
        let piece = Piece {
            index: position / CHUNK_BYTES,
            within,
            at,
            len: (CHUNK_LEN - within).min(len - at),
        };
        at += piece.len;
        Some(piece)
    })
}

/// The bytes of a regular file.
#[derive(Debug, Default)]
pub(crate) struct SparseData {
    size_bytes: u64,
    chunks: BTreeMap<u64, Box<[u8]>>,
}

impl SparseData {
    pub(crate) fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Bytes held in chunks (what `Space` was charged for this file).
    pub(crate) fn allocated_bytes(&self) -> u64 {
        self.chunks.len() as u64 * CHUNK_BYTES
    }

    /// Copies up to `count` bytes at `offset_bytes`; true as second value when the read
    /// reached the end of the file.
    pub(crate) fn read(&self, offset_bytes: u64, count: u64) -> (Vec<u8>, bool) {
        if offset_bytes >= self.size_bytes {
            return (Vec::new(), true);
        }
        let available = self.size_bytes - offset_bytes;
        // The caller bounds `count` by `MAX_IO_BYTES`, so this fits any usize.
        let len = usize::try_from(count.min(available)).unwrap_or(CHUNK_LEN);
        let mut out = vec![0; len];
        for piece in pieces(offset_bytes, len) {
            if let Some(chunk) = self.chunks.get(&piece.index) {
                out[piece.at..piece.at + piece.len]
                    .copy_from_slice(&chunk[piece.within..piece.within + piece.len]);
            }
        }
        let eof = offset_bytes + len as u64 >= self.size_bytes;
        (out, eof)
    }

    /// Writes `data` at `offset_bytes`, reserving new chunks from `space` first: on `NoSpc`
    /// nothing changed. The caller checked that the end fits `MAX_FILE_SIZE`.
    pub(crate) fn write(&mut self, offset_bytes: u64, data: &[u8], space: &Space) -> FsResult<()> {
        let end = offset_bytes + data.len() as u64;
        debug_assert!(end <= vfs::limits::MAX_FILE_SIZE);
        let new_chunks = pieces(offset_bytes, data.len())
            .filter(|p| !self.chunks.contains_key(&p.index) && !is_zero(slice(data, p)))
            .count() as u64;
        space.reserve_bytes(new_chunks * CHUNK_BYTES)?;
        let mut allocated = 0;
        for piece in pieces(offset_bytes, data.len()) {
            let source = slice(data, &piece);
            let chunk = match self.chunks.get_mut(&piece.index) {
                Some(chunk) => chunk,
                None if is_zero(source) => continue,
                None => {
                    allocated += 1;
                    self.chunks
                        .entry(piece.index)
                        .or_insert_with(|| vec![0; CHUNK_LEN].into_boxed_slice())
                }
            };
            chunk[piece.within..piece.within + piece.len].copy_from_slice(source);
        }
        assert_eq!(
            allocated, new_chunks,
            "reserved chunks must match allocated ones"
        );
        self.size_bytes = self.size_bytes.max(end);
        Ok(())
    }

    /// Sets the size: shrinking frees whole chunks past the end (giving their bytes back to
    /// `space`) and zeroes the tail of the last one; growing allocates nothing.
    pub(crate) fn set_size(&mut self, size_bytes: u64, space: &Space) {
        if size_bytes < self.size_bytes {
            let gone = self.chunks.split_off(&size_bytes.div_ceil(CHUNK_BYTES));
            space.release_bytes(gone.len() as u64 * CHUNK_BYTES);
            let within = usize::try_from(size_bytes % CHUNK_BYTES).unwrap_or(0);
            if within != 0 {
                if let Some(chunk) = self.chunks.get_mut(&(size_bytes / CHUNK_BYTES)) {
                    chunk[within..].fill(0);
                }
            }
        }
        self.size_bytes = size_bytes;
    }

    /// Frees every chunk (the file is gone).
    pub(crate) fn clear(&mut self, space: &Space) {
        space.release_bytes(self.allocated_bytes());
        self.chunks.clear();
        self.size_bytes = 0;
    }
}

fn slice<'d>(data: &'d [u8], piece: &Piece) -> &'d [u8] {
    &data[piece.at..piece.at + piece.len]
}

fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vfs::FsError;

    const C: u64 = CHUNK_BYTES;

    fn space() -> Space {
        Space::new(16 * C, 10)
    }

    #[test]
    fn pieces_split_at_chunk_boundaries() {
        let all: Vec<_> = pieces(C - 2, CHUNK_LEN + 4)
            .map(|p| (p.index, p.within, p.at, p.len))
            .collect();
        assert_eq!(
            all,
            vec![
                (0, CHUNK_LEN - 2, 0, 2),
                (1, 0, 2, CHUNK_LEN),
                (2, 0, CHUNK_LEN + 2, 2)
            ]
        );
        assert_eq!(pieces(5, 0).count(), 0);
    }

    #[test]
    fn holes_read_as_zeros_and_cost_nothing() {
        let space = space();
        let mut data = SparseData::default();
        data.write(3 * C + 10, b"abc", &space).unwrap();
        assert_eq!(data.size_bytes(), 3 * C + 13);
        assert_eq!(data.allocated_bytes(), C);
        let (bytes, eof) = data.read(3 * C + 8, 10);
        assert_eq!(bytes, b"\0\0abc");
        assert!(eof);
        let (hole, eof) = data.read(C, 100);
        assert_eq!(hole, vec![0; 100]);
        assert!(!eof);
    }

    #[test]
    fn writing_zeros_into_a_hole_allocates_nothing() {
        let space = space();
        let mut data = SparseData::default();
        data.write(0, &vec![0; 3 * CHUNK_LEN], &space).unwrap();
        assert_eq!(data.size_bytes(), 3 * C);
        assert_eq!(data.allocated_bytes(), 0);
        data.write(C, &[0, 7, 0], &space).unwrap();
        assert_eq!(data.allocated_bytes(), C);
        assert_eq!(data.read(C, 3).0, vec![0, 7, 0]);
    }

    #[test]
    fn shrink_then_grow_reads_zeros() {
        let space = space();
        let mut data = SparseData::default();
        data.write(0, &vec![0xaa; 2 * CHUNK_LEN], &space).unwrap();
        assert_eq!(space.stat().free_bytes, 14 * C);
        data.set_size(10, &space);
        assert_eq!(data.allocated_bytes(), C);
        assert_eq!(space.stat().free_bytes, 15 * C);
        data.set_size(2 * C, &space);
        let (bytes, eof) = data.read(0, 2 * C);
        assert!(eof);
        assert_eq!(&bytes[..10], &[0xaa; 10]);
        assert!(bytes[10..].iter().all(|&b| b == 0));
        data.set_size(0, &space);
        assert_eq!(data.allocated_bytes(), 0);
        assert_eq!(space.stat().free_bytes, 16 * C);
    }

    #[test]
    fn a_write_that_does_not_fit_changes_nothing() {
        let space = Space::new(2 * C, 10);
        let mut data = SparseData::default();
        data.write(0, &[1; 10], &space).unwrap();
        let before = data.read(0, 10);
        assert_eq!(
            data.write(5, &vec![2; 2 * CHUNK_LEN], &space),
            Err(FsError::NoSpc)
        );
        assert_eq!(data.read(0, 100), before);
        assert_eq!(data.size_bytes(), 10);
        assert_eq!(space.stat().free_bytes, C);
        data.clear(&space);
        assert_eq!(space.stat().free_bytes, 2 * C);
    }

    #[test]
    fn reads_stop_at_the_end() {
        let space = space();
        let mut data = SparseData::default();
        data.write(0, b"hello", &space).unwrap();
        assert_eq!(data.read(5, 10), (Vec::new(), true));
        assert_eq!(data.read(99, 10), (Vec::new(), true));
        assert_eq!(data.read(1, 2), (b"el".to_vec(), false));
        assert_eq!(data.read(1, 4), (b"ello".to_vec(), true));
    }
}
