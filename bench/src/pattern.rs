//! The data every workload writes and every READ checks: each 8-byte word holds a function
//! of its own file offset, so data at the wrong offset, a stale page, a torn write or a
//! flipped bit all read back as a mismatch, whichever workload wrote the bytes. Rewrites
//! write the same bytes, so a READ phase can verify what the WRITE phases left.

use bytes::{Bytes, BytesMut};

/// Mixes the word index so that neighbouring words, and the same word of files written at
/// different offsets, differ in every byte.
const MIX: u64 = 0x9E37_79B9_7F4A_7C15;
/// XORed into every word so that zero-filled data ("a hole") never matches.
const SALT: u64 = 0x6772_616e_6172_7921; // "granary!"

/// The byte at file offset `offset`.
#[must_use]
fn byte_at(offset: u64) -> u8 {
    let word = (offset / 8).wrapping_mul(MIX) ^ SALT;
    word.to_le_bytes()[(offset % 8) as usize]
}

/// `len` bytes of the pattern starting at file offset `offset`.
#[must_use]
pub fn fill(offset: u64, len: usize) -> Bytes {
    let mut buf = BytesMut::with_capacity(len);
    buf.resize(len, 0);
    fill_into(offset, &mut buf);
    buf.freeze()
}

/// Writes the pattern of `[offset, offset + buf.len())` into `buf`.
pub fn fill_into(offset: u64, buf: &mut [u8]) {
    let mut i = 0usize;
    // Unaligned head, byte by byte.
    while i < buf.len() && !(offset + i as u64).is_multiple_of(8) {
        buf[i] = byte_at(offset + i as u64);
        i += 1;
    }
    // Whole words.
    let words = (buf.len() - i) / 8;
    for (w, chunk) in buf[i..i + words * 8].chunks_exact_mut(8).enumerate() {
        let index = (offset + i as u64) / 8 + w as u64;
        let word = index.wrapping_mul(MIX) ^ SALT;
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    i += words * 8;
    while i < buf.len() {
        buf[i] = byte_at(offset + i as u64);
        i += 1;
    }
}

/// Checks that `data` is the pattern at `offset`; on a mismatch, names the first bad
/// offset. Compares word by word without allocating (it runs on every READ).
///
/// # Errors
/// The first offset whose byte differs, with both values.
pub fn verify(offset: u64, data: &[u8]) -> Result<(), String> {
    // Unaligned head and tail byte by byte; the aligned middle a word at a time.
    let head = usize::try_from((8 - offset % 8) % 8)
        .unwrap_or(0)
        .min(data.len());
    let words = (data.len() - head) / 8;
    let tail_start = head + words * 8;
    let bytes_ok = |range: std::ops::Range<usize>| {
        range.clone().all(|i| data[i] == byte_at(offset + i as u64))
    };
    let first_word = (offset + head as u64) / 8;
    let words_ok = data[head..tail_start]
        .chunks_exact(8)
        .enumerate()
        .all(|(w, chunk)| {
            let word = (first_word + w as u64).wrapping_mul(MIX) ^ SALT;
            chunk == word.to_le_bytes()
        });
    if bytes_ok(0..head) && words_ok && bytes_ok(tail_start..data.len()) {
        return Ok(());
    }
    let at = (0..data.len())
        .find(|&i| data[i] != byte_at(offset + i as u64))
        .unwrap_or(0);
    Err(format!(
        "data mismatch at file offset {}: read {:#04x}, wrote {:#04x}",
        offset + at as u64,
        data[at],
        byte_at(offset + at as u64)
    ))
}

/// Distinct 8-byte words of the compressible ("text") pattern.
const TEXT_WORDS: u64 = 64;

/// The [`TEXT_WORDS`] words of the compressible pattern, seven lowercase letters and a
/// space each; the first two letters name the word.
const TEXT_DICTIONARY: [[u8; 8]; TEXT_WORDS as usize] = {
    let mut words = [[b' '; 8]; TEXT_WORDS as usize];
    let mut pick = 0;
    while pick < TEXT_WORDS {
        let mut j = 0;
        while j < 7 {
            let letter = match j {
                0 => pick % 26,
                1 => pick / 26,
                _ => (pick * 7 + j * (pick + 3)) % 26,
            };
            words[pick as usize][j as usize] = b'a' + letter as u8;
            j += 1;
        }
        pick += 1;
    }
    words
};

/// Word `index` of the compressible pattern: one of the [`TEXT_DICTIONARY`] words, picked
/// by a hash of its position. LZ4 (matches only, no entropy coding) finds nearly every
/// word earlier in its window but few longer runs, so it shrinks the data a few times,
/// like text; every byte still depends on its offset.
#[must_use]
fn text_word(index: u64) -> &'static [u8; 8] {
    // splitmix64's finalizer: neighbouring words pick unrelated dictionary entries.
    let mut x = index.wrapping_mul(MIX) ^ SALT;
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    &TEXT_DICTIONARY[((x ^ (x >> 31)) % TEXT_WORDS) as usize]
}

/// Calls `f` with each run of the compressible pattern of `[offset, offset + len)` that
/// lies in one word: its position in the range and its bytes. Stops when `f` says false.
fn text_runs(offset: u64, len: usize, mut f: impl FnMut(usize, &[u8]) -> bool) {
    let mut i = 0;
    while i < len {
        let at = offset + i as u64;
        let from = (at % 8) as usize;
        let n = (8 - from).min(len - i);
        if !f(i, &text_word(at / 8)[from..from + n]) {
            return;
        }
        i += n;
    }
}

/// Writes the compressible pattern of `[offset, offset + buf.len())` into `buf`.
pub fn text_fill_into(offset: u64, buf: &mut [u8]) {
    text_runs(offset, buf.len(), |i, run| {
        buf[i..i + run.len()].copy_from_slice(run);
        true
    });
}

/// Checks that `data` is the compressible pattern at `offset`, a word at a time (the
/// erofs rows check every byte they read at gigabytes per second, so that the check does
/// not become the client's limit).
///
/// # Errors
/// The first offset whose byte differs, with both values.
pub fn text_verify(offset: u64, data: &[u8]) -> Result<(), String> {
    let mut bad = None;
    text_runs(offset, data.len(), |i, run| {
        let got = &data[i..i + run.len()];
        if got == run {
            return true;
        }
        let j = (0..run.len()).find(|&j| got[j] != run[j]).unwrap_or(0);
        bad = Some(format!(
            "byte at {} is {:#04x}, expected {:#04x}",
            offset + (i + j) as u64,
            got[j],
            run[j]
        ));
        false
    });
    bad.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_bytes_agree_at_any_alignment() {
        let whole = fill(0, 100);
        for start in 0..20u64 {
            let part = fill(start, 50);
            assert_eq!(&part[..], &whole[start as usize..start as usize + 50]);
            assert!(verify(start, &part).is_ok());
        }
    }

    #[test]
    fn a_flipped_bit_or_a_shifted_block_is_caught() {
        let mut data = fill(4096, 4096).to_vec();
        data[100] ^= 1;
        let err = verify(4096, &data).unwrap_err();
        assert!(err.contains("offset 4196"), "{err}");
        let shifted = fill(8192, 4096);
        assert!(verify(4096, &shifted).is_err());
    }

    #[test]
    fn text_pattern_verifies_and_catches_a_flip() {
        let mut buf = vec![0u8; 10_000];
        text_fill_into(12_345, &mut buf);
        assert!(text_verify(12_345, &buf).is_ok());
        assert!(
            text_verify(12_346, &buf).is_err(),
            "an offset shift must not verify"
        );
        for start in 0..20u64 {
            let mut part = vec![0u8; 50];
            text_fill_into(12_345 + start, &mut part);
            assert_eq!(part, buf[start as usize..start as usize + 50]);
            assert!(text_verify(12_345 + start, &part).is_ok());
        }
        buf[4321] ^= 1;
        let err = text_verify(12_345, &buf).unwrap_err();
        assert!(err.contains(&(12_345 + 4321).to_string()), "{err}");
    }

    #[test]
    fn text_pattern_is_text_like() {
        let mut buf = vec![0u8; 1 << 16];
        text_fill_into(0, &mut buf);
        assert!(buf.iter().all(|b| b.is_ascii_lowercase() || *b == b' '));
        let words: std::collections::HashSet<&[u8]> = buf.chunks(8).collect();
        assert_eq!(
            words.len() as u64,
            TEXT_WORDS,
            "every dictionary word is used"
        );
    }
}
