//! Sparse contents of a regular file, safe to read and write from many threads at once.
//!
//! Data lives in fixed-size chunks keyed by chunk index; a missing chunk is a hole and
//! reads as zeros. Invariant: every byte of an allocated chunk at or past `size_bytes` is
//! zero, so growing the file (by a write past the end or a setattr) exposes zeros without
//! touching the chunks. Writing only zeros where no chunk exists allocates nothing.
//!
//! # Concurrency
//!
//! The caller holds the file's range lock over the bytes it touches (see `inode`): a read
//! or write over its range, a size change over `[min(old, new), end of file)`, clearing
//! over the whole file. Under that, the chunk map sits behind an `RwLock` that I/O takes
//! shared (exclusively only for the moment it adds missing chunks), and each chunk has its
//! own `RwLock`, taken for the copy alone. Two writes of disjoint ranges therefore copy in
//! parallel unless they share a 64 KiB chunk, and then only for the copy. The range lock
//! is what makes an I/O atomic with respect to overlapping ones; these locks only make the
//! memory accesses sound. A size change or clear never removes a chunk a concurrent I/O
//! uses: its range lock starts at or below the size it cuts to, which is past the end of
//! every range it does not exclude.
//!
//! # Shared chunks
//!
//! A large READ ([`SparseData::read_shared`]) answers with the chunks themselves, shared
//! (a reference count each), not a copy: the connection sends them as they are. Every
//! change of a chunk's bytes (a write, a shrink or punch zeroing a tail) therefore goes
//! through [`Arc::make_mut`], which copies the chunk first when a reply still holds it, so
//! a reply already read never sees a later change. Such a copy, and a freed chunk a reply
//! still holds, outlive the bytes `Space` counts until the reply is sent; the replies in
//! flight are bounded by the connection's reply budget.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::{BufMut, Bytes, BytesMut};
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

/// One chunk's bytes, shared with the replies that hold them (see "Shared chunks").
type ChunkBytes = Arc<Box<[u8]>>;
type Chunk = RwLock<ChunkBytes>;
type Chunks = BTreeMap<u64, Chunk>;

// Poisoning is ignored throughout: every critical section below is a copy or a map
// update that cannot leave the data half-changed in a way a later reader could trip on
// (a panic mid-copy already reported a bug).
fn read_chunk(chunk: &Chunk) -> RwLockReadGuard<'_, ChunkBytes> {
    chunk.read().unwrap_or_else(PoisonError::into_inner)
}

fn write_chunk(chunk: &Chunk) -> RwLockWriteGuard<'_, ChunkBytes> {
    chunk.write().unwrap_or_else(PoisonError::into_inner)
}

/// The bytes of a chunk to change, copied first if a reply holds them.
fn own(bytes: &mut ChunkBytes) -> &mut [u8] {
    Arc::make_mut(bytes).as_mut()
}

fn new_chunk() -> Chunk {
    RwLock::new(Arc::new(vec![0; CHUNK_LEN].into_boxed_slice()))
}

/// A chunk's bytes as a reply's piece: the reply holds the chunk, nothing is copied.
struct SharedChunk(ChunkBytes);

impl AsRef<[u8]> for SharedChunk {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// What a hole reads as, for replies made of shared pieces.
static ZEROS: [u8; CHUNK_LEN] = [0; CHUNK_LEN];

/// The bytes of a regular file.
#[derive(Debug, Default)]
pub(crate) struct SparseData {
    size_bytes: AtomicU64,
    /// Number of chunks in `chunks` (what `Space` was charged, in chunks).
    chunk_count: AtomicU64,
    chunks: RwLock<Chunks>,
}

impl SparseData {
    fn map(&self) -> RwLockReadGuard<'_, Chunks> {
        self.chunks.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn map_mut(&self) -> RwLockWriteGuard<'_, Chunks> {
        self.chunks.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.size_bytes.load(Ordering::Acquire)
    }

    /// Bytes held in chunks (what `Space` was charged for this file).
    pub(crate) fn allocated_bytes(&self) -> u64 {
        self.chunk_count.load(Ordering::Acquire) * CHUNK_BYTES
    }

    /// Appends up to `count` bytes at `offset_bytes` to `out` (a reply being encoded);
    /// true when the read reached the end of the file. The caller holds a read range lock
    /// over the bytes.
    pub(crate) fn read_into(&self, offset_bytes: u64, count: u64, out: &mut BytesMut) -> bool {
        let size_bytes = self.size_bytes();
        if offset_bytes >= size_bytes {
            return true;
        }
        let available = size_bytes - offset_bytes;
        // The caller bounds `count` by `MAX_IO_BYTES`, so this fits any usize.
        let len = usize::try_from(count.min(available)).unwrap_or(CHUNK_LEN);
        // Filled piece by piece: copied from a chunk, or zeros for a hole, so no byte is
        // written twice (a zeroed buffer would cost a memset of up to 1 MiB per READ).
        out.reserve(len);
        let map = self.map();
        for piece in pieces(offset_bytes, len) {
            match map.get(&piece.index) {
                Some(chunk) => out
                    .extend_from_slice(&read_chunk(chunk)[piece.within..piece.within + piece.len]),
                None => out.put_bytes(0, piece.len),
            }
        }
        offset_bytes + len as u64 >= size_bytes
    }

    /// [`SparseData::read_into`] as shared pieces, no byte copied: each allocated chunk's
    /// part of the range is the chunk itself (see "Shared chunks"), each hole's a piece of
    /// [`ZEROS`]. Same caller's lock, same result.
    pub(crate) fn read_shared(&self, offset_bytes: u64, count: u64) -> (Vec<Bytes>, bool) {
        let size_bytes = self.size_bytes();
        if offset_bytes >= size_bytes {
            return (Vec::new(), true);
        }
        let len = usize::try_from(count.min(size_bytes - offset_bytes)).unwrap_or(CHUNK_LEN);
        let map = self.map();
        let parts = pieces(offset_bytes, len)
            .map(|piece| {
                let range = piece.within..piece.within + piece.len;
                match map.get(&piece.index) {
                    Some(chunk) => {
                        Bytes::from_owner(SharedChunk(Arc::clone(&read_chunk(chunk)))).slice(range)
                    }
                    None => Bytes::from_static(&ZEROS[..piece.len]),
                }
            })
            .collect();
        (parts, offset_bytes + len as u64 >= size_bytes)
    }

    /// [`SparseData::read_into`] a fresh buffer (for tests).
    #[cfg(test)]
    pub(crate) fn read(&self, offset_bytes: u64, count: u64) -> (bytes::Bytes, bool) {
        let mut out = BytesMut::new();
        let eof = self.read_into(offset_bytes, count, &mut out);
        (out.freeze(), eof)
    }

    /// Writes `data` at `offset_bytes`, reserving new chunks from `space` first: on `NoSpc`
    /// nothing changed. The caller holds a write range lock over the bytes and checked that
    /// the end fits `MAX_FILE_SIZE`.
    pub(crate) fn write(&self, offset_bytes: u64, data: &[u8], space: &Space) -> FsResult<()> {
        let end = offset_bytes + data.len() as u64;
        debug_assert!(end <= vfs::limits::MAX_FILE_SIZE);
        if missing(&self.map(), offset_bytes, data) > 0 {
            self.allocate(offset_bytes, data, space)?;
        }
        let map = self.map();
        for piece in pieces(offset_bytes, data.len()) {
            let source = slice(data, &piece);
            match map.get(&piece.index) {
                Some(chunk) => own(&mut write_chunk(chunk))[piece.within..piece.within + piece.len]
                    .copy_from_slice(source),
                None => debug_assert!(is_zero(source), "non-zero data into a missing chunk"),
            }
        }
        drop(map);
        self.size_bytes.fetch_max(end, Ordering::AcqRel);
        Ok(())
    }

    /// Adds the zeroed chunks a write needs, under the map's write lock so that writers
    /// sharing a new chunk reserve it once.
    fn allocate(&self, offset_bytes: u64, data: &[u8], space: &Space) -> FsResult<()> {
        let mut map = self.map_mut();
        let new_chunks = missing(&map, offset_bytes, data);
        space.reserve_bytes(new_chunks * CHUNK_BYTES)?;
        let mut allocated = 0;
        for piece in pieces(offset_bytes, data.len()) {
            if !map.contains_key(&piece.index) && !is_zero(slice(data, &piece)) {
                map.insert(piece.index, new_chunk());
                allocated += 1;
            }
        }
        assert_eq!(
            allocated, new_chunks,
            "reserved chunks must match allocated ones"
        );
        self.chunk_count.fetch_add(allocated, Ordering::AcqRel);
        Ok(())
    }

    /// Sets the size: shrinking frees whole chunks past the end (giving their bytes back to
    /// `space`) and zeroes the tail of the last one; growing allocates nothing. The caller
    /// holds a write range lock from `min(size_bytes, self.size_bytes())` to the end.
    pub(crate) fn set_size(&self, size_bytes: u64, space: &Space) {
        if size_bytes < self.size_bytes() {
            let mut map = self.map_mut();
            let gone = map.split_off(&size_bytes.div_ceil(CHUNK_BYTES));
            self.chunk_count
                .fetch_sub(gone.len() as u64, Ordering::AcqRel);
            space.release_bytes(gone.len() as u64 * CHUNK_BYTES);
            let within = usize::try_from(size_bytes % CHUNK_BYTES).unwrap_or(0);
            if within != 0 {
                if let Some(chunk) = map.get_mut(&(size_bytes / CHUNK_BYTES)) {
                    own(chunk.get_mut().unwrap_or_else(PoisonError::into_inner))[within..].fill(0);
                }
            }
        }
        self.size_bytes.store(size_bytes, Ordering::Release);
    }

    /// Frees every chunk (the file is gone). The caller holds the whole-file write lock.
    pub(crate) fn clear(&self, space: &Space) {
        let mut map = self.map_mut();
        space.release_bytes(map.len() as u64 * CHUNK_BYTES);
        map.clear();
        self.chunk_count.store(0, Ordering::Release);
        self.size_bytes.store(0, Ordering::Release);
    }
}

impl SparseData {
    /// The first byte at or after `offset_bytes` (below the size) that lies in an
    /// allocated chunk (`data` true) or in a hole (`data` false). A hole always exists:
    /// the virtual one at the size. `None`: no data follows.
    pub(crate) fn seek(&self, offset_bytes: u64, data: bool) -> Option<u64> {
        let size_bytes = self.size_bytes();
        if offset_bytes >= size_bytes {
            return (!data).then_some(size_bytes);
        }
        let map = self.map();
        let first = offset_bytes / CHUNK_BYTES;
        let found = if data {
            map.range(first..).next().map(|(&i, _)| i)
        } else {
            // The first index from `first` on with no chunk: the chunks are sorted, so
            // walk while they are consecutive.
            let mut next = first;
            for (&i, _) in map.range(first..) {
                if i != next {
                    break;
                }
                next += 1;
            }
            Some(next)
        };
        found
            .map(|i| (i * CHUNK_BYTES).max(offset_bytes))
            .filter(|&o| o < size_bytes || !data)
            .map(|o| o.min(size_bytes))
    }

    /// Allocates zeroed chunks for `[offset_bytes, end_bytes)`, reserving them from
    /// `space` first (on `NoSpc` nothing changed), and grows the size to `end_bytes`.
    /// The caller holds a write range lock from `offset_bytes` to the end of the file.
    pub(crate) fn reserve(&self, offset_bytes: u64, end_bytes: u64, space: &Space) -> FsResult<()> {
        debug_assert!(offset_bytes < end_bytes && end_bytes <= vfs::limits::MAX_FILE_SIZE);
        let indices = offset_bytes / CHUNK_BYTES..end_bytes.div_ceil(CHUNK_BYTES);
        let mut map = self.map_mut();
        let present = map.range(indices.clone()).count() as u64;
        let new_chunks = (indices.end - indices.start) - present;
        space.reserve_bytes(new_chunks.saturating_mul(CHUNK_BYTES))?;
        for i in indices {
            map.entry(i).or_insert_with(new_chunk);
        }
        self.chunk_count.fetch_add(new_chunks, Ordering::AcqRel);
        drop(map);
        self.size_bytes.fetch_max(end_bytes, Ordering::AcqRel);
        Ok(())
    }

    /// Makes `[offset_bytes, end_bytes)` read as zeros, freeing the chunks it covers
    /// whole (their bytes go back to `space`); the size does not change. The caller
    /// holds a write range lock over the range.
    pub(crate) fn punch(&self, offset_bytes: u64, end_bytes: u64, space: &Space) {
        let end_bytes = end_bytes.min(self.size_bytes());
        if offset_bytes >= end_bytes {
            return;
        }
        let mut map = self.map_mut();
        // Empty (not reversed: `BTreeMap::range` panics on that) when the range lies
        // within one chunk.
        let first_whole = offset_bytes.div_ceil(CHUNK_BYTES);
        let whole = first_whole..(end_bytes / CHUNK_BYTES).max(first_whole);
        let gone: Vec<u64> = map.range(whole).map(|(&i, _)| i).collect();
        for i in &gone {
            map.remove(i);
        }
        self.chunk_count
            .fetch_sub(gone.len() as u64, Ordering::AcqRel);
        space.release_bytes(gone.len() as u64 * CHUNK_BYTES);
        // What is left of the range lies in the partial chunks at either end.
        let len = usize::try_from(end_bytes - offset_bytes).unwrap_or(usize::MAX);
        for piece in pieces(offset_bytes, len).filter(|p| p.len < CHUNK_LEN) {
            if let Some(chunk) = map.get_mut(&piece.index) {
                own(chunk.get_mut().unwrap_or_else(PoisonError::into_inner))
                    [piece.within..piece.within + piece.len]
                    .fill(0);
            }
        }
    }
}

/// Chunks a write of `data` at `offset_bytes` would have to allocate.
fn missing(map: &Chunks, offset_bytes: u64, data: &[u8]) -> u64 {
    pieces(offset_bytes, data.len())
        .filter(|p| !map.contains_key(&p.index) && !is_zero(slice(data, p)))
        .count() as u64
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
        let data = SparseData::default();
        data.write(3 * C + 10, b"abc", &space).unwrap();
        assert_eq!(data.size_bytes(), 3 * C + 13);
        assert_eq!(data.allocated_bytes(), C);
        let (bytes, eof) = data.read(3 * C + 8, 10);
        assert_eq!(&bytes[..], b"\0\0abc");
        assert!(eof);
        let (hole, eof) = data.read(C, 100);
        assert_eq!(hole, vec![0; 100]);
        assert!(!eof);
    }

    #[test]
    fn writing_zeros_into_a_hole_allocates_nothing() {
        let space = space();
        let data = SparseData::default();
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
        let data = SparseData::default();
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
        let data = SparseData::default();
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
    fn seek_finds_chunks_and_holes() {
        let space = space();
        let d = SparseData::default();
        d.write(C, &[1; 10], &space).unwrap();
        d.write(3 * C, &[1; 10], &space).unwrap();
        d.set_size(5 * C, &space);
        assert_eq!(d.seek(0, true), Some(C));
        assert_eq!(d.seek(C + 5, true), Some(C + 5));
        assert_eq!(d.seek(2 * C, true), Some(3 * C));
        assert_eq!(d.seek(4 * C, true), None);
        assert_eq!(d.seek(0, false), Some(0));
        assert_eq!(d.seek(C, false), Some(2 * C));
        assert_eq!(d.seek(3 * C + 1, false), Some(4 * C));
        // The virtual hole at the end.
        d.set_size(3 * C + 10, &space);
        assert_eq!(d.seek(3 * C, false), Some(3 * C + 10));
        assert_eq!(d.seek(3 * C + 10, false), Some(3 * C + 10));
        assert_eq!(d.seek(3 * C + 10, true), None);
    }

    #[test]
    fn reserve_grows_and_punch_frees_whole_chunks() {
        let space = space();
        let d = SparseData::default();
        d.write(0, &[7; 10], &space).unwrap();
        d.reserve(C / 2, 3 * C, &space).unwrap();
        assert_eq!(d.size_bytes(), 3 * C);
        assert_eq!(d.allocated_bytes(), 3 * C);
        assert_eq!(d.seek(0, false), Some(3 * C));
        // Reserving again takes nothing more.
        d.reserve(0, C, &space).unwrap();
        assert_eq!(d.allocated_bytes(), 3 * C);
        d.write(C, &[9; 100], &space).unwrap();
        d.punch(5, 2 * C + 1, &space);
        assert_eq!(d.allocated_bytes(), 2 * C, "chunk 1 was covered whole");
        assert_eq!(d.size_bytes(), 3 * C);
        let (bytes, _) = d.read(0, 3 * C);
        assert_eq!(&bytes[..5], &[7; 5]);
        assert!(bytes[5..].iter().all(|&b| b == 0));
        assert_eq!(d.seek(0, false), Some(C));
        // Past the end nothing happens.
        d.punch(3 * C, 10 * C, &space);
        assert_eq!(d.size_bytes(), 3 * C);
    }

    #[test]
    fn punching_within_one_chunk_zeroes_those_bytes_only() {
        let space = space();
        let d = SparseData::default();
        d.write(0, &[7; 100], &space).unwrap();
        d.punch(10, 20, &space);
        let (bytes, _) = d.read(0, 100);
        assert_eq!(&bytes[..10], &[7; 10]);
        assert_eq!(&bytes[10..20], &[0; 10]);
        assert_eq!(&bytes[20..], &[7; 80]);
        assert_eq!(d.allocated_bytes(), C);
    }

    #[test]
    fn reserve_that_does_not_fit_changes_nothing() {
        let space = Space::new(2 * C, 100);
        let d = SparseData::default();
        assert_eq!(d.reserve(0, 3 * C, &space), Err(FsError::NoSpc));
        assert_eq!(d.size_bytes(), 0);
        assert_eq!(d.allocated_bytes(), 0);
    }

    #[test]
    fn reads_stop_at_the_end() {
        let space = space();
        let data = SparseData::default();
        data.write(0, b"hello", &space).unwrap();
        assert_eq!(data.read(5, 10), (bytes::Bytes::new(), true));
        assert_eq!(data.read(99, 10), (bytes::Bytes::new(), true));
        assert_eq!(data.read(1, 2), (bytes::Bytes::from_static(b"el"), false));
        assert_eq!(data.read(1, 4), (bytes::Bytes::from_static(b"ello"), true));
    }

    /// `read_shared`'s pieces joined.
    fn shared(data: &SparseData, offset: u64, count: u64) -> (Vec<u8>, bool) {
        let (parts, eof) = data.read_shared(offset, count);
        (parts.concat(), eof)
    }

    #[test]
    fn shared_reads_return_what_copied_reads_return() {
        let space = Space::new(64 * C, 10);
        let data = SparseData::default();
        // Data, a hole, data across a chunk boundary, a short tail.
        data.write(10, &[1; 100], &space).unwrap();
        data.write(3 * C - 7, &[2; 20], &space).unwrap();
        data.write(5 * C + 3, b"end", &space).unwrap();
        for (offset, count) in [
            (0, 6 * C),
            (5, 200),
            (C, C),
            (3 * C - 10, 40),
            (5 * C, 1 << 20),
            (9 * C, 10),
        ] {
            let (copied, eof) = data.read(offset, count);
            assert_eq!(
                shared(&data, offset, count),
                (copied.to_vec(), eof),
                "{offset}+{count}"
            );
        }
        // A 64 KiB-aligned MiB of data is 16 pieces, each a whole chunk held, not copied.
        data.write(16 * C, &vec![3; 16 * CHUNK_LEN], &space)
            .unwrap();
        let (parts, _) = data.read_shared(16 * C, 16 * C);
        assert_eq!(parts.len(), 16);
        assert!(parts
            .iter()
            .all(|p| p.len() == CHUNK_LEN && p.iter().all(|&b| b == 3)));
    }

    #[test]
    fn changes_after_a_shared_read_do_not_reach_its_pieces() {
        let space = space();
        let data = SparseData::default();
        data.write(0, &vec![9; 3 * CHUNK_LEN], &space).unwrap();
        let (held, _) = data.read_shared(0, 3 * C);
        // A write over the first chunk, a shrink into the second (zeroing its tail in
        // place), a punch of the third's middle: each copies the chunk the reply holds.
        data.write(5, &[1; 10], &space).unwrap();
        data.set_size(C + 100, &space);
        data.set_size(3 * C, &space);
        data.write(2 * C, &[9; 8], &space).unwrap();
        data.punch(2 * C + 1, 2 * C + 5, &space);
        assert_eq!(
            held.concat(),
            vec![9; 3 * CHUNK_LEN],
            "a held piece changed"
        );
        // The file itself has every change.
        let (now, _) = data.read(0, 3 * C);
        assert_eq!(&now[5..15], &[1; 10]);
        assert!(now[C as usize + 100..2 * CHUNK_LEN].iter().all(|&b| b == 0));
        assert_eq!(
            &now[2 * CHUNK_LEN..2 * CHUNK_LEN + 8],
            &[9, 0, 0, 0, 0, 9, 9, 9]
        );
        // Space counts the file's chunks, not the copies the reply kept alive.
        assert_eq!(data.allocated_bytes(), 3 * C);
        drop(held);
    }
}
