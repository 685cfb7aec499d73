//! Codec helpers shared by the NFS and MOUNT modules: bounded opaque newtypes, optional
//! newtypes and XDR linked lists.

use xdr::{Decode, DecodeError, Decoder, Encode, Encoder};

/// Declares `pub struct $name(pub Bytes)`: variable-length opaque data (or a string) of at
/// most `$max` bytes, checked when decoding.
///
/// Decoding copies the bytes out of the request buffer: names and paths end up stored
/// (directory entries, symlink targets, the mount list), and a slice would keep the whole
/// request record alive with them (a 1 MiB padded CREATE pinning 1 MiB per name). Only
/// types marked `borrowed` (file handles, never stored) stay slices of the request.
macro_rules! bounded_opaque {
    ($(#[$meta:meta])* $name:ident, $what:literal, $max:expr) => {
        $crate::codec::bounded_opaque!(@define $(#[$meta])* $name, $what, $max, |b: ::bytes::Bytes| {
            ::bytes::Bytes::copy_from_slice(&b)
        });
    };
    ($(#[$meta:meta])* $name:ident, $what:literal, $max:expr, borrowed) => {
        $crate::codec::bounded_opaque!(@define $(#[$meta])* $name, $what, $max, |b: ::bytes::Bytes| b);
    };
    (@define $(#[$meta:meta])* $name:ident, $what:literal, $max:expr, $keep:expr) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub ::bytes::Bytes);

        impl $name {
            /// Most bytes the decoder accepts.
            pub const MAX_BYTES: u32 = $max;

            #[must_use]
            pub fn new(bytes: impl Into<::bytes::Bytes>) -> Self {
                Self(bytes.into())
            }

            #[must_use]
            pub fn as_bytes(&self) -> &[u8] {
                &self.0
            }
        }

        impl ::xdr::Encode for $name {
            fn encode(&self, e: &mut ::xdr::Encoder) {
                e.opaque(&self.0);
            }
        }

        impl ::xdr::Decode for $name {
            fn decode(d: &mut ::xdr::Decoder) -> Result<Self, ::xdr::DecodeError> {
                let keep = $keep;
                Ok(Self(keep(d.opaque($what, $max)?)))
            }
        }
    };
}
pub(crate) use bounded_opaque;

/// Encoding of a newtype `$name(pub Option<$inner>)`: XDR optional data (a boolean, then
/// the value if true), which is also the layout of RFC 1813's `switch (bool)` unions.
macro_rules! option_newtype {
    ($name:ident, $inner:ty) => {
        impl ::xdr::Encode for $name {
            fn encode(&self, e: &mut ::xdr::Encoder) {
                self.0.encode(e);
            }
        }

        impl ::xdr::Decode for $name {
            fn decode(d: &mut ::xdr::Decoder) -> Result<Self, ::xdr::DecodeError> {
                Ok(Self(Option::<$inner>::decode(d)?))
            }
        }
    };
}
pub(crate) use option_newtype;

/// Writes an XDR linked list (`struct entry { ...; entry *next; }` reached through a
/// pointer): `true` before each item, `false` after the last.
pub(crate) fn encode_list<T: Encode>(items: &[T], e: &mut Encoder) {
    for item in items {
        e.bool(true);
        item.encode(e);
    }
    e.bool(false);
}

/// Reads an XDR linked list of at most `max` items.
pub(crate) fn decode_list<T: Decode>(
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
pub(crate) fn bad_discriminant(what: &'static str, value: u32) -> DecodeError {
    DecodeError::BadDiscriminant { what, value }
}
