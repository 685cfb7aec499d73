//! File handles: what a client holds to name a file, authenticated so it cannot be forged.
//!
//! Wire layout (version 1, `HANDLE_BYTES` = 32 bytes, all integers big-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | version (1) |
//! | 1 | 3 | reserved, zero |
//! | 4 | 4 | server instance: changes when handles of an earlier server become stale |
//! | 8 | 4 | export id |
//! | 12 | 8 | file id |
//! | 20 | 4 | generation |
//! | 24 | 8 | SipHash-2-4 MAC of bytes 0..24 under the server's 128-bit key |
//!
//! A handle of the wrong length or version, or with a bad MAC, is `BadHandle` (forged or
//! corrupt); a well-formed handle from another server instance is `Stale`.

use std::hash::Hasher;

use siphasher::sip::SipHasher24;

use crate::error::{FsError, FsResult};
use crate::export::ExportId;
use crate::types::FileId;

/// Length of every handle granary issues. NFSv3 allows up to 64 bytes.
pub const HANDLE_BYTES: usize = 32;
const VERSION: u8 = 1;
const MAC_OFFSET: usize = 24;

/// The decoded contents of a handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle {
    pub export: ExportId,
    pub file: FileId,
    pub generation: u32,
}

/// The secret that signs handles, and the instance number of this server.
#[derive(Clone)]
pub struct HandleKey {
    instance: u32,
    key: [u8; 16],
}

impl std::fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandleKey")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl HandleKey {
    /// `key` must be secret and random; `instance` should differ between server runs
    /// whose handles must not be accepted by each other.
    #[must_use]
    pub fn new(instance: u32, key: [u8; 16]) -> Self {
        Self { instance, key }
    }

    fn mac(&self, body: &[u8]) -> u64 {
        let mut h = SipHasher24::new_with_key(&self.key);
        h.write(body);
        h.finish()
    }

    /// Encodes and signs a handle.
    #[must_use]
    pub fn encode(&self, handle: &Handle) -> [u8; HANDLE_BYTES] {
        let mut out = [0u8; HANDLE_BYTES];
        out[0] = VERSION;
        out[4..8].copy_from_slice(&self.instance.to_be_bytes());
        out[8..12].copy_from_slice(&handle.export.0.to_be_bytes());
        out[12..20].copy_from_slice(&handle.file.0.to_be_bytes());
        out[20..24].copy_from_slice(&handle.generation.to_be_bytes());
        let mac = self.mac(&out[..MAC_OFFSET]);
        out[MAC_OFFSET..].copy_from_slice(&mac.to_be_bytes());
        out
    }

    /// Verifies and decodes a handle from a client.
    ///
    /// # Errors
    /// `BadHandle` for a wrong length, version, reserved bytes or MAC; `Stale` for a
    /// handle issued by another server instance.
    pub fn decode(&self, raw: &[u8]) -> FsResult<Handle> {
        let raw: &[u8; HANDLE_BYTES] = raw.try_into().map_err(|_| FsError::BadHandle)?;
        if raw[0] != VERSION || raw[1..4] != [0, 0, 0] {
            return Err(FsError::BadHandle);
        }
        let field =
            |at: usize| u32::from_be_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
        if field(4) != self.instance {
            return Err(FsError::Stale);
        }
        let mut mac = [0u8; 8];
        mac.copy_from_slice(&raw[MAC_OFFSET..]);
        if u64::from_be_bytes(mac) != self.mac(&raw[..MAC_OFFSET]) {
            return Err(FsError::BadHandle);
        }
        let mut file = [0u8; 8];
        file.copy_from_slice(&raw[12..20]);
        Ok(Handle {
            export: ExportId(field(8)),
            file: FileId(u64::from_be_bytes(file)),
            generation: field(20),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> HandleKey {
        HandleKey::new(7, *b"0123456789abcdef")
    }

    #[test]
    fn round_trip() {
        let h = Handle {
            export: ExportId(3),
            file: FileId(99),
            generation: 5,
        };
        assert_eq!(key().decode(&key().encode(&h)), Ok(h));
    }

    #[test]
    fn other_instance_is_stale_and_other_key_is_bad() {
        let h = Handle {
            export: ExportId(3),
            file: FileId(99),
            generation: 5,
        };
        let raw = HandleKey::new(8, *b"0123456789abcdef").encode(&h);
        assert_eq!(key().decode(&raw), Err(FsError::Stale));
        let raw = HandleKey::new(7, *b"fedcba9876543210").encode(&h);
        assert_eq!(key().decode(&raw), Err(FsError::BadHandle));
        assert_eq!(key().decode(&[]), Err(FsError::BadHandle));
        assert_eq!(key().decode(&[0u8; 64]), Err(FsError::BadHandle));
    }

    proptest! {
        #[test]
        fn any_single_bit_flip_is_refused(bit in 0usize..HANDLE_BYTES * 8, file: u64) {
            let h = Handle { export: ExportId(1), file: FileId(file), generation: 0 };
            let mut raw = key().encode(&h);
            raw[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(key().decode(&raw).is_err());
        }
    }
}
