//! Bytes held in pieces, each a shared [`Bytes`]: how this head keeps object data, so
//! that what a WRITE brought, a sealed group, an upload, a GET's answer, the byte cache
//! and a READ's slices of it share one copy instead of each making its own.
//!
//! A WRITE's bytes stay in the request's buffer (`vfs::Backend::write_shared`), a piece
//! of their own; consecutive WRITEs join as more pieces (no reallocation and copy of what
//! is held), a sealed group takes the pieces by reference and its upload sends them as
//! they are (`PutPayload` is a list of pieces): the head copies none of them. A GET's
//! answer is kept as the pieces the HTTP client received (not gathered into one
//! buffer), and a READ copies what it wants from them once, into its reply.

use std::ops::Range;

use bytes::{Bytes, BytesMut};

/// A sequence of bytes held as pieces, in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rope {
    parts: Vec<Bytes>,
    len: usize,
}

impl From<Bytes> for Rope {
    fn from(b: Bytes) -> Self {
        let mut r = Self::default();
        r.push(b);
        r
    }
}

impl Rope {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces, in order (none empty).
    pub(crate) fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// Adds `b` at the end (no copy).
    pub(crate) fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.len += b.len();
            self.parts.push(b);
        }
    }

    /// Adds `other`'s pieces at the end (no copy of their bytes).
    pub(crate) fn append(&mut self, other: Self) {
        self.len += other.len;
        self.parts.extend(other.parts);
    }

    /// The bytes of `range` (clamped to the rope), sharing its pieces.
    pub(crate) fn slice(&self, range: Range<usize>) -> Self {
        let (start, end) = (range.start.min(self.len), range.end.min(self.len));
        let mut out = Self::default();
        if start >= end {
            return out;
        }
        let mut at = 0;
        for p in &self.parts {
            let (from, to) = (at, at + p.len());
            at = to;
            if to <= start {
                continue;
            }
            if from >= end {
                break;
            }
            out.push(p.slice(start.saturating_sub(from)..(end - from).min(p.len())));
        }
        out
    }

    /// Keeps the first `n` bytes.
    pub(crate) fn truncate(&mut self, n: usize) {
        if n < self.len {
            *self = self.slice(0..n);
        }
    }

    /// Splits at `at`: keeps the bytes before it and returns the rest.
    pub(crate) fn split_off(&mut self, at: usize) -> Self {
        let rest = self.slice(at..self.len);
        self.truncate(at);
        rest
    }

    /// Drops the first `n` bytes.
    pub(crate) fn advance(&mut self, n: usize) {
        *self = self.slice(n..self.len);
    }

    /// Copies the first `dst.len()` bytes into `dst` (which must not be longer).
    pub(crate) fn copy_to(&self, dst: &mut [u8]) {
        debug_assert!(dst.len() <= self.len, "{} > {}", dst.len(), self.len);
        let mut at = 0;
        for p in &self.parts {
            if at >= dst.len() {
                break;
            }
            let n = p.len().min(dst.len() - at);
            dst[at..at + n].copy_from_slice(&p[..n]);
            at += n;
        }
    }

    /// The pieces, in order (none empty).
    pub(crate) fn into_parts(self) -> Vec<Bytes> {
        self.parts
    }

    /// Appends every byte to `out` (one copy, no zeroing first).
    pub(crate) fn extend_into(&self, out: &mut BytesMut) {
        for p in &self.parts {
            out.extend_from_slice(p);
        }
    }

    /// The bytes in one buffer (a copy; for inline rows and tests).
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for p in &self.parts {
            v.extend_from_slice(p);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rope(pieces: &[&[u8]]) -> Rope {
        let mut r = Rope::default();
        for p in pieces {
            r.push(Bytes::copy_from_slice(p));
        }
        r
    }

    #[test]
    fn slices_splits_and_copies_match_one_buffer() {
        let pieces: [&[u8]; 4] = [b"abc", b"", b"defg", b"hi"];
        let whole = b"abcdefghi";
        let r = rope(&pieces);
        assert_eq!(r.len(), whole.len());
        assert_eq!(r.parts().len(), 3, "empty pieces are not kept");
        for start in 0..=whole.len() {
            for end in start..=whole.len() + 2 {
                let s = r.slice(start..end);
                assert_eq!(
                    s.to_vec(),
                    whole[start..end.min(whole.len())],
                    "{start}..{end}"
                );
                let mut rest = r.clone();
                let back = rest.split_off(start);
                assert_eq!(rest.to_vec(), whole[..start]);
                assert_eq!(back.to_vec(), whole[start..]);
                let mut front = r.clone();
                front.advance(start);
                assert_eq!(front.to_vec(), whole[start..]);
            }
            let mut dst = vec![0u8; start];
            r.copy_to(&mut dst);
            assert_eq!(dst, whole[..start]);
        }
        let mut out = BytesMut::from(&b">"[..]);
        r.extend_into(&mut out);
        assert_eq!(&out[..], b">abcdefghi");
        let mut joined = rope(&[b"ab"]);
        joined.append(rope(&[b"c", b"d"]));
        assert_eq!((joined.len(), joined.to_vec()), (4, b"abcd".to_vec()));
    }

    #[test]
    fn a_slice_shares_the_pieces_bytes() {
        let r = Rope::from(Bytes::from_static(b"shared bytes"));
        let s = r.slice(7..12);
        assert_eq!(s.parts()[0].as_ptr(), r.parts()[0][7..].as_ptr());
    }
}
