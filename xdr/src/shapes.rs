//! Shapes every ONC RPC protocol crate needs beyond the primitives: bounded opaque
//! newtypes, optional newtypes, XDR linked lists and counted arrays, each decoded against
//! an explicit limit. Shared by `nfs3` (NFS and MOUNT) and `nfs4`.

use crate::{Decode, DecodeError, Decoder, Encode, Encoder};

/// Declares `pub struct $name(pub Bytes)`: variable-length opaque data (or a string) of at
/// most `$max` bytes, checked when decoding.
///
/// Decoding copies the bytes out of the request buffer: names and paths end up stored
/// (directory entries, symlink targets, the mount list), and a slice would keep the whole
/// request record alive with them (a 1 MiB padded CREATE pinning 1 MiB per name). Only
/// types marked `borrowed` (file handles, never stored) stay slices of the request.
#[macro_export]
macro_rules! bounded_opaque {
    ($(#[$meta:meta])* $name:ident, $what:literal, $max:expr) => {
        $crate::bounded_opaque!(@define $(#[$meta])* $name, $what, $max, |b: $crate::bytes::Bytes| {
            $crate::bytes::Bytes::copy_from_slice(&b)
        });
    };
    ($(#[$meta:meta])* $name:ident, $what:literal, $max:expr, borrowed) => {
        $crate::bounded_opaque!(@define $(#[$meta])* $name, $what, $max, |b: $crate::bytes::Bytes| b);
    };
    (@define $(#[$meta:meta])* $name:ident, $what:literal, $max:expr, $keep:expr) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub $crate::bytes::Bytes);

        impl $name {
            /// Most bytes the decoder accepts.
            pub const MAX_BYTES: u32 = $max;

            #[must_use]
            pub fn new(bytes: impl Into<$crate::bytes::Bytes>) -> Self {
                Self(bytes.into())
            }

            #[must_use]
            pub fn as_bytes(&self) -> &[u8] {
                &self.0
            }
        }

        impl $crate::Encode for $name {
            fn encode(&self, e: &mut $crate::Encoder) {
                e.opaque(&self.0);
            }
        }

        impl $crate::Decode for $name {
            fn decode(d: &mut $crate::Decoder) -> Result<Self, $crate::DecodeError> {
                let keep = $keep;
                Ok(Self(keep(d.opaque($what, $max)?)))
            }
        }
    };
}

/// Encoding of a newtype `$name(pub Option<$inner>)`: XDR optional data (a boolean, then
/// the value if true), which is also the layout of RFC 1813's `switch (bool)` unions.
#[macro_export]
macro_rules! option_newtype {
    ($name:ident, $inner:ty) => {
        impl $crate::Encode for $name {
            fn encode(&self, e: &mut $crate::Encoder) {
                self.0.encode(e);
            }
        }

        impl $crate::Decode for $name {
            fn decode(d: &mut $crate::Decoder) -> Result<Self, $crate::DecodeError> {
                Ok(Self(Option::<$inner>::decode(d)?))
            }
        }
    };
}

/// Writes an XDR linked list (`struct entry { ...; entry *next; }` reached through a
/// pointer): `true` before each item, `false` after the last.
pub fn encode_list<T: Encode>(items: &[T], e: &mut Encoder) {
    for item in items {
        e.bool(true);
        item.encode(e);
    }
    e.bool(false);
}

/// Reads an XDR linked list of at most `max` items.
pub fn decode_list<T: Decode>(
    d: &mut Decoder,
    what: &'static str,
    max: u32,
) -> Result<Vec<T>, DecodeError> {
    let mut items = Vec::new();
    while d.bool()? {
        if items.len() >= max as usize {
            return Err(DecodeError::TooLong {
                what,
                len: max.saturating_add(1),
                max,
            });
        }
        items.push(T::decode(d)?);
    }
    Ok(items)
}

/// The error for an enum or union discriminant that has no meaning for `what`.
pub fn bad_discriminant(what: &'static str, value: u32) -> DecodeError {
    DecodeError::BadDiscriminant { what, value }
}

/// Writes an XDR counted array (`T items<>`): the count, then each item.
pub fn encode_array<T: Encode>(items: &[T], e: &mut Encoder) {
    let count = u32::try_from(items.len()).unwrap_or(u32::MAX);
    e.u32(count);
    for item in items {
        item.encode(e);
    }
}

/// Reads an XDR counted array of at most `max` items; the count is checked before
/// anything is allocated, and the allocation is bounded by the bytes left (each item
/// takes at least four).
pub fn decode_array<T: Decode>(
    d: &mut Decoder,
    what: &'static str,
    max: u32,
) -> Result<Vec<T>, DecodeError> {
    let count = d.length(what, max)? as usize;
    let mut items = Vec::with_capacity(count.min(d.remaining() / 4));
    for _ in 0..count {
        items.push(T::decode(d)?);
    }
    Ok(items)
}
