//! XDR (RFC 4506): the byte layout every ONC RPC protocol uses.
//!
//! This crate owns the primitive codec: big-endian 32/64-bit integers, booleans, fixed and
//! variable-length opaque data padded to four bytes, and optional values. It promises:
//!
//! - decoding never panics and never reads past the buffer: every shortfall is a
//!   [`DecodeError`], which the RPC layer answers with `GARBAGE_ARGS`;
//! - every variable-length item is decoded against an explicit maximum, so a length field
//!   claiming gigabytes is refused before anything is allocated;
//! - opaque data is returned as [`Bytes`] slices of the request buffer (no copy).
//!
//! Protocol crates describe their structures with [`Encode`] and [`Decode`], usually via
//! the [`xdr_struct!`] macro.
#![forbid(unsafe_code)]

use bytes::{BufMut, Bytes, BytesMut};

/// Re-exported for the macros of [`shapes`], which name `Bytes` from the caller's crate.
pub use bytes;

pub mod shapes;
pub use shapes::{bad_discriminant, decode_array, decode_list, encode_array, encode_list};

/// Why a byte string could not be decoded. Permanent for that request: the client sent
/// bytes that do not match the procedure's argument layout, and sees `GARBAGE_ARGS`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The buffer ended before the item did.
    #[error("truncated: {needed} bytes needed at offset {offset}, {available} available")]
    Truncated {
        offset: usize,
        needed: usize,
        available: usize,
    },
    /// A length prefix is larger than the item's limit.
    #[error("{what}: length {len} exceeds the limit of {max}")]
    TooLong {
        what: &'static str,
        len: u32,
        max: u32,
    },
    /// An enum or union discriminant has no meaning.
    #[error("{what}: invalid discriminant {value}")]
    BadDiscriminant { what: &'static str, value: u32 },
    /// A boolean that is neither 0 nor 1.
    #[error("invalid boolean {0}")]
    BadBool(u32),
}

/// Reads XDR items from one buffer, front to back.
#[derive(Debug, Clone)]
pub struct Decoder {
    buf: Bytes,
    pos: usize,
}

/// Rounds `len` up to the next multiple of four (XDR's unit).
#[must_use]
pub const fn padded(len: usize) -> usize {
    (len + 3) & !3
}

impl Decoder {
    #[must_use]
    pub fn new(buf: Bytes) -> Self {
        Self { buf, pos: 0 }
    }

    /// Bytes not yet consumed.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Offset of the next byte to decode.
    #[must_use]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The unconsumed tail, without consuming it.
    #[must_use]
    pub fn rest(&self) -> Bytes {
        self.buf.slice(self.pos..)
    }

    /// The next `n` bytes, consumed.
    fn advance(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated {
                offset: self.pos,
                needed: n,
                available: self.remaining(),
            });
        }
        let start = self.pos;
        self.pos += n;
        Ok(&self.buf[start..start + n])
    }

    /// The next `n` bytes as a slice of the buffer (shares it: one reference count).
    fn take(&mut self, n: usize) -> Result<Bytes, DecodeError> {
        let start = self.pos;
        self.advance(n)?;
        Ok(self.buf.slice(start..start + n))
    }

    /// Words and arrays are copied out, not sliced: a `Bytes` slice would take and drop a
    /// reference to the shared buffer (two atomic operations) for every word decoded.
    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self.advance(N)?;
        Ok(bytes.try_into().expect("advance returns N bytes"))
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.take_array::<4>()?))
    }

    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.take_array::<4>()?))
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.take_array::<8>()?))
    }

    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.take_array::<8>()?))
    }

    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError::BadBool(other)),
        }
    }

    /// Fixed-length opaque data of `len` bytes plus its padding.
    pub fn fixed_opaque(&mut self, len: usize) -> Result<Bytes, DecodeError> {
        let data = self.take(len)?;
        self.advance(padded(len) - len)?;
        Ok(data)
    }

    /// Fixed-length opaque data into an array (verifiers, cookie verifiers).
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let out = self.take_array::<N>()?;
        self.advance(padded(N) - N)?;
        Ok(out)
    }

    /// A length prefix checked against `max`: for arrays and opaque data.
    pub fn length(&mut self, what: &'static str, max: u32) -> Result<u32, DecodeError> {
        let len = self.u32()?;
        if len > max {
            return Err(DecodeError::TooLong { what, len, max });
        }
        Ok(len)
    }

    /// Variable-length opaque data (or a string) of at most `max` bytes.
    pub fn opaque(&mut self, what: &'static str, max: u32) -> Result<Bytes, DecodeError> {
        let len = self.length(what, max)?;
        self.fixed_opaque(len as usize)
    }
}

/// Appends XDR items to a growing buffer.
#[derive(Debug, Default)]
pub struct Encoder {
    buf: BytesMut,
}

impl Encoder {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    #[must_use]
    pub fn with_capacity(capacity_bytes: usize) -> Self {
        Self {
            buf: BytesMut::with_capacity(capacity_bytes),
        }
    }

    /// Continues encoding at the end of `buf` (e.g. after a reserved record header).
    #[must_use]
    pub fn from_buf(buf: BytesMut) -> Self {
        Self { buf }
    }

    /// Bytes written so far.
    #[must_use]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn u32(&mut self, v: u32) {
        self.buf.put_u32(v);
    }

    pub fn i32(&mut self, v: i32) {
        self.buf.put_i32(v);
    }

    pub fn u64(&mut self, v: u64) {
        self.buf.put_u64(v);
    }

    pub fn i64(&mut self, v: i64) {
        self.buf.put_i64(v);
    }

    pub fn bool(&mut self, v: bool) {
        self.buf.put_u32(u32::from(v));
    }

    /// Fixed-length opaque data: the bytes and zero padding, no length prefix.
    pub fn fixed_opaque(&mut self, data: &[u8]) {
        self.buf.put_slice(data);
        self.buf.put_bytes(0, padded(data.len()) - data.len());
    }

    /// Variable-length opaque data or string: length prefix, bytes, padding.
    ///
    /// # Panics
    /// If `data` is 4 GiB or longer, which no caller can build from a bounded request.
    pub fn opaque(&mut self, data: &[u8]) {
        let len = u32::try_from(data.len()).expect("XDR opaque longer than u32::MAX");
        self.u32(len);
        self.fixed_opaque(data);
    }

    /// Overwrites a u32 previously written at `offset` (e.g. a length known only later).
    ///
    /// # Panics
    /// If `offset + 4` is past the end of what was written.
    pub fn patch_u32(&mut self, offset: usize, v: u32) {
        self.buf[offset..offset + 4].copy_from_slice(&v.to_be_bytes());
    }

    /// Overwrites bytes previously written at `offset` (e.g. a reserved slot).
    ///
    /// # Panics
    /// If `offset + bytes.len()` is past the end of what was written.
    pub fn patch(&mut self, offset: usize, bytes: &[u8]) {
        self.buf[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    /// Overwrites the bytes at `offset` with the encoding of `value` (e.g. attributes known
    /// only after what follows them was written), with no buffer of its own: the value is
    /// encoded at the end, moved into place and the end cut back, so the caller reserves
    /// room for it there (else the buffer grows, as for any write past its capacity).
    /// Returns the encoding's length.
    ///
    /// # Panics
    /// If the encoding reaches past what was written before the call.
    pub fn patch_encoded(&mut self, offset: usize, value: &(impl Encode + ?Sized)) -> usize {
        let end = self.buf.len();
        value.encode(self);
        let len = self.buf.len() - end;
        assert!(
            offset + len <= end,
            "patched value runs past what was written"
        );
        self.buf.copy_within(end..end + len, offset);
        self.buf.truncate(end);
        len
    }

    /// Variable-length opaque data that `fill` appends straight into the output buffer (a
    /// file's bytes read into a reply, with no copy in between): length prefix, the bytes,
    /// padding. `fill` must only append. Returns the length and what `fill` returned; if
    /// it fails, nothing of the item stays written.
    ///
    /// # Errors
    /// `fill`'s error.
    ///
    /// # Panics
    /// If `fill` appends 4 GiB or more.
    pub fn opaque_with<T, E>(
        &mut self,
        fill: impl FnOnce(&mut BytesMut) -> Result<T, E>,
    ) -> Result<(usize, T), E> {
        let start = self.buf.len();
        self.u32(0);
        let value = match fill(&mut self.buf) {
            Ok(value) => value,
            Err(e) => {
                self.buf.truncate(start);
                return Err(e);
            }
        };
        let len = self.buf.len() - start - 4;
        let prefix = u32::try_from(len).expect("XDR opaque longer than u32::MAX");
        self.patch_u32(start, prefix);
        self.buf.put_bytes(0, padded(len) - len);
        Ok((len, value))
    }

    /// Makes room for at least `additional_bytes` more without reallocating (a reply whose
    /// size is known only once its arguments are decoded, such as READ's).
    pub fn reserve(&mut self, additional_bytes: usize) {
        self.buf.reserve(additional_bytes);
    }

    /// Drops everything after the first `len` bytes (e.g. a half-encoded reply body that
    /// is replaced by an error).
    pub fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
    }

    /// The bytes written since offset `start` (an earlier [`Encoder::len`]): what a
    /// reply cache keeps of a result it just encoded.
    ///
    /// # Panics
    /// If `start` is past the end.
    #[must_use]
    pub fn written_since(&self, start: usize) -> &[u8] {
        &self.buf[start..]
    }

    #[must_use]
    pub fn into_bytes(self) -> Bytes {
        self.buf.freeze()
    }

    #[must_use]
    pub fn into_inner(self) -> BytesMut {
        self.buf
    }
}

/// A value with an XDR encoding.
pub trait Encode {
    fn encode(&self, e: &mut Encoder);

    /// Convenience: the encoding as a fresh buffer.
    fn to_xdr(&self) -> Bytes {
        let mut e = Encoder::new();
        self.encode(&mut e);
        e.into_bytes()
    }
}

/// A value that can be decoded from XDR. Every variable-length part has a limit.
pub trait Decode: Sized {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError>;

    /// Convenience: decode from a whole buffer (trailing bytes are ignored, as RFC 5531
    /// servers commonly do).
    fn from_xdr(buf: Bytes) -> Result<Self, DecodeError> {
        Self::decode(&mut Decoder::new(buf))
    }
}

macro_rules! primitive {
    ($ty:ty, $method:ident) => {
        impl Encode for $ty {
            fn encode(&self, e: &mut Encoder) {
                e.$method(*self);
            }
        }
        impl Decode for $ty {
            fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
                d.$method()
            }
        }
    };
}

primitive!(u32, u32);
primitive!(i32, i32);
primitive!(u64, u64);
primitive!(i64, i64);
primitive!(bool, bool);

impl<const N: usize> Encode for [u8; N] {
    fn encode(&self, e: &mut Encoder) {
        e.fixed_opaque(self);
    }
}

impl<const N: usize> Decode for [u8; N] {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.array::<N>()
    }
}

/// XDR optional data (`T *x`): a boolean, then the value if true.
impl<T: Encode> Encode for Option<T> {
    fn encode(&self, e: &mut Encoder) {
        match self {
            None => e.bool(false),
            Some(v) => {
                e.bool(true);
                v.encode(e);
            }
        }
    }
}

impl<T: Decode> Decode for Option<T> {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        if d.bool()? {
            Ok(Some(T::decode(d)?))
        } else {
            Ok(None)
        }
    }
}

/// Declares a struct whose XDR encoding is its fields in order.
///
/// Every field type must implement [`Encode`] and [`Decode`].
#[macro_export]
macro_rules! xdr_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty ),*
        }

        impl $crate::Encode for $name {
            fn encode(&self, e: &mut $crate::Encoder) {
                $( $crate::Encode::encode(&self.$field, e); )*
            }
        }

        impl $crate::Decode for $name {
            fn decode(d: &mut $crate::Decoder) -> ::core::result::Result<Self, $crate::DecodeError> {
                Ok(Self { $( $field: $crate::Decode::decode(d)?, )* })
            }
        }
    };
}

/// Declares a C-like enum encoded as its u32 discriminant; unknown values fail to decode.
#[macro_export]
macro_rules! xdr_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr(u32)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $value ),*
        }

        impl $name {
            /// The variant for a wire value, if there is one.
            #[must_use]
            pub fn from_u32(v: u32) -> Option<Self> {
                match v {
                    $( $value => Some(Self::$variant), )*
                    _ => None,
                }
            }
        }

        impl $crate::Encode for $name {
            fn encode(&self, e: &mut $crate::Encoder) {
                e.u32(*self as u32);
            }
        }

        impl $crate::Decode for $name {
            fn decode(d: &mut $crate::Decoder) -> ::core::result::Result<Self, $crate::DecodeError> {
                let v = d.u32()?;
                Self::from_u32(v).ok_or($crate::DecodeError::BadDiscriminant {
                    what: stringify!($name),
                    value: v,
                })
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn opaque_is_padded_to_four_bytes() {
        let mut e = Encoder::new();
        e.opaque(b"abcde");
        assert_eq!(
            &e.into_bytes()[..],
            &[0, 0, 0, 5, b'a', b'b', b'c', b'd', b'e', 0, 0, 0]
        );
    }

    #[test]
    fn opaque_filled_in_place_matches_opaque_and_a_failed_fill_leaves_nothing() {
        for len in 0..9 {
            let data: Vec<u8> = (1..=len).collect();
            let mut copied = Encoder::new();
            copied.u32(7);
            copied.opaque(&data);
            let mut filled = Encoder::new();
            filled.u32(7);
            let (n, tag) = filled
                .opaque_with(|out| {
                    out.extend_from_slice(&data);
                    Ok::<_, ()>("done")
                })
                .unwrap();
            assert_eq!((n, tag), (data.len(), "done"));
            assert_eq!(filled.into_bytes(), copied.into_bytes(), "{len} bytes");
        }
        let mut e = Encoder::new();
        e.u32(7);
        let failed = e.opaque_with(|out| {
            out.extend_from_slice(b"half");
            Err::<(), _>("disk gone")
        });
        assert_eq!(failed, Err("disk gone"));
        e.patch(0, &[0, 0, 0, 9]);
        assert_eq!(&e.into_bytes()[..], &[0, 0, 0, 9]);
    }

    #[test]
    fn a_patched_encoding_lands_in_its_slot_and_nothing_follows() {
        let mut e = Encoder::new();
        e.u32(1);
        e.fixed_opaque(&[0; 8]);
        e.u32(4);
        assert_eq!(e.patch_encoded(4, &[0u8, 0, 0, 7, 0, 0, 0, 9]), 8);
        assert_eq!(
            &e.into_bytes()[..],
            &[0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 9, 0, 0, 0, 4]
        );
    }

    #[test]
    #[should_panic(expected = "runs past")]
    fn a_patched_encoding_longer_than_its_slot_panics() {
        let mut e = Encoder::new();
        e.u32(1);
        e.patch_encoded(2, &5u32);
    }

    #[test]
    fn huge_length_is_refused_before_allocation() {
        let mut d = Decoder::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff]));
        assert_eq!(
            d.opaque("name", 255),
            Err(DecodeError::TooLong {
                what: "name",
                len: u32::MAX,
                max: 255
            })
        );
    }

    #[test]
    fn truncated_opaque_reports_offset() {
        let mut d = Decoder::new(Bytes::from_static(&[0, 0, 0, 8, 1, 2]));
        assert_eq!(
            d.opaque("data", 100),
            Err(DecodeError::Truncated {
                offset: 4,
                needed: 8,
                available: 2
            })
        );
    }

    #[test]
    fn bad_bool_is_an_error() {
        let mut d = Decoder::new(Bytes::from_static(&[0, 0, 0, 2]));
        assert_eq!(d.bool(), Err(DecodeError::BadBool(2)));
    }

    xdr_struct! {
        #[derive(Debug, PartialEq, Eq, Clone)]
        pub struct Sample {
            pub a: u32,
            pub b: Option<u64>,
            pub c: [u8; 8],
            pub d: i64,
        }
    }

    proptest! {
        #[test]
        fn struct_round_trips(a: u32, b: Option<u64>, c: [u8; 8], d: i64) {
            let s = Sample { a, b, c, d };
            let bytes = s.to_xdr();
            prop_assert_eq!(bytes.len() % 4, 0);
            prop_assert_eq!(Sample::from_xdr(bytes).unwrap(), s);
        }

        #[test]
        fn decoding_arbitrary_bytes_never_panics(data: Vec<u8>) {
            let _ = Sample::from_xdr(Bytes::from(data.clone()));
            let mut d = Decoder::new(Bytes::from(data));
            let _ = d.opaque("x", 1 << 20);
        }

        #[test]
        fn opaque_round_trips(data: Vec<u8>) {
            let mut e = Encoder::new();
            e.opaque(&data);
            let mut d = Decoder::new(e.into_bytes());
            prop_assert_eq!(&d.opaque("x", u32::MAX).unwrap()[..], &data[..]);
            prop_assert_eq!(d.remaining(), 0);
        }
    }
}
