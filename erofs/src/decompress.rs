//! Decoding one extent from its pcluster bytes: a pure function, so callers choose the
//! thread it runs on.

use crate::error::{corrupt, Result};

/// How a pcluster's bytes become file bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// Stored uncompressed: the extent's bytes start at the pcluster's first byte.
    Plain,
    /// An LZ4 block; with `zero_padding` it is right-aligned behind leading zero bytes.
    Lz4 { zero_padding: bool },
}

/// Decodes `raw` (a whole pcluster) into exactly `out_len` bytes.
///
/// # Errors
/// `Corrupt` if the data does not decode to exactly `out_len` bytes.
pub fn decode(codec: Codec, raw: &[u8], out_len: usize) -> Result<Vec<u8>> {
    match codec {
        Codec::Plain => match raw.get(..out_len) {
            Some(data) => Ok(data.to_vec()),
            None => corrupt("uncompressed pcluster shorter than its extent", 0),
        },
        Codec::Lz4 { zero_padding } => {
            if !zero_padding {
                return lz4_partial(raw, out_len);
            }
            let input = match raw.iter().position(|&b| b != 0) {
                Some(skip) => &raw[skip..],
                None => return corrupt("LZ4 pcluster is all zero padding", 0),
            };
            let mut out = vec![0; out_len];
            match lz4_flex::block::decompress_into(input, &mut out) {
                Ok(n) if n == out_len => Ok(out),
                Ok(_) => corrupt("LZ4 pcluster decoded to a different length", 0),
                Err(_) => corrupt("LZ4 pcluster does not decode", 0),
            }
        }
    }
}

/// Decodes an LZ4 block that starts at `raw[0]` and may be followed by unrelated bytes
/// (images without zero padding): stops as soon as `out_len` bytes are produced.
fn lz4_partial(raw: &[u8], out_len: usize) -> Result<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(out_len);
    let mut at = 0usize;
    let bad = || corrupt("LZ4 pcluster does not decode", 0);
    while out.len() < out_len {
        let Some(&token) = raw.get(at) else {
            return bad();
        };
        at += 1;
        let literals = lz4_length(raw, &mut at, usize::from(token >> 4))?;
        let Some(lit) = at.checked_add(literals).and_then(|end| raw.get(at..end)) else {
            return bad();
        };
        let take = lit.len().min(out_len - out.len());
        out.extend_from_slice(&lit[..take]);
        at += literals;
        if out.len() >= out_len {
            break;
        }
        let Some(off) = raw.get(at..at + 2) else {
            return bad();
        };
        let offset = usize::from(u16::from_le_bytes([off[0], off[1]]));
        at += 2;
        let len = lz4_length(raw, &mut at, usize::from(token & 0xf))? + 4;
        if offset == 0 || offset > out.len() {
            return bad();
        }
        let len = len.min(out_len - out.len());
        let from = out.len() - offset;
        if offset >= len {
            out.extend_from_within(from..from + len);
        } else {
            for i in 0..len {
                out.push(out[from + i]);
            }
        }
    }
    Ok(out)
}

/// An LZ4 length: the 4-bit `nibble`, extended by 255-valued bytes while the field is full.
fn lz4_length(raw: &[u8], at: &mut usize, nibble: usize) -> Result<usize> {
    let mut len = nibble;
    if nibble == 15 {
        loop {
            let Some(&b) = raw.get(*at) else {
                return corrupt("LZ4 length past the input", 0);
            };
            *at += 1;
            len = len.saturating_add(usize::from(b));
            if b != 255 {
                break;
            }
        }
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lz4_round_trip_with_padding_and_bad_input() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 97) as u8).collect();
        let packed = lz4_flex::block::compress(&data);
        let mut padded = vec![0u8; 4096 - packed.len() % 4096];
        padded.extend_from_slice(&packed);
        let codec = Codec::Lz4 { zero_padding: true };
        assert_eq!(decode(codec, &padded, data.len()).unwrap(), data);
        assert!(decode(codec, &padded, data.len() - 1).is_err());
        assert!(decode(codec, &[0; 64], 10).is_err());
        assert!(decode(codec, &[0xff; 64], 10).is_err());
        assert!(decode(Codec::Plain, &[1, 2], 3).is_err());
        let mut unpadded = packed.clone();
        unpadded.extend_from_slice(&[0xa5; 300]);
        let codec = Codec::Lz4 {
            zero_padding: false,
        };
        assert_eq!(decode(codec, &unpadded, data.len()).unwrap(), data);
        assert_eq!(decode(codec, &unpadded, 500).unwrap(), data[..500]);
        assert!(decode(codec, &packed[..packed.len() / 2], data.len()).is_err());
    }
}
