//! File handles: what a client holds to name a file, authenticated so it cannot be forged.
//!
//! Wire layout (version 2, `HANDLE_BYTES` = 32 bytes, all integers big-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | version (2) |
//! | 1 | 3 | reserved, zero |
//! | 4 | 4 | export id |
//! | 8 | 4 | export incarnation: changes when the export's files of an earlier run are gone |
//! | 12 | 8 | file id |
//! | 20 | 4 | generation |
//! | 24 | 8 | SipHash-2-4 MAC of bytes 0..24 under the server's 128-bit key |
//!
//! The incarnation belongs to the export, not the server: a mem export gets a fresh
//! random one per start (its files died with the last run), while an export whose files
//! outlive the server (a host directory) keeps its incarnation, and the server its key, in
//! a state directory, so its handles stay valid across restarts.
//!
//! A handle of the wrong length or version, or with a bad MAC, is `BadHandle` (forged or
//! corrupt); a well-formed handle of an unknown export or another incarnation is `Stale`
//! (checked before the MAC, since the key of an earlier run may differ too).

use std::hash::Hasher;

use siphasher::sip::SipHasher24;

use crate::error::{FsError, FsResult};
use crate::export::ExportId;
use crate::types::FileId;

/// Length of every handle granary issues. NFSv3 allows up to 64 bytes.
pub const HANDLE_BYTES: usize = 32;
const VERSION: u8 = 2;
const MAC_OFFSET: usize = 24;

const _: () = assert!(HANDLE_BYTES <= 64, "NFSv3 handles are at most 64 bytes");

/// The decoded contents of a handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle {
    pub export: ExportId,
    pub incarnation: u32,
    pub file: FileId,
    pub generation: u32,
}

/// The secret that signs handles.
#[derive(Clone)]
pub struct HandleKey {
    key: [u8; 16],
}

impl std::fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandleKey").finish_non_exhaustive()
    }
}

impl HandleKey {
    /// `key` must be secret and random.
    #[must_use]
    pub fn new(key: [u8; 16]) -> Self {
        Self { key }
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
        out[4..8].copy_from_slice(&handle.export.0.to_be_bytes());
        out[8..12].copy_from_slice(&handle.incarnation.to_be_bytes());
        out[12..20].copy_from_slice(&handle.file.0.to_be_bytes());
        out[20..24].copy_from_slice(&handle.generation.to_be_bytes());
        let mac = self.mac(&out[..MAC_OFFSET]);
        out[MAC_OFFSET..].copy_from_slice(&mac.to_be_bytes());
        out
    }

    /// Reads a handle's fields without checking the MAC (call [`HandleKey::verify`] once
    /// the export and incarnation are known).
    ///
    /// # Errors
    /// `BadHandle` for a wrong length, version or reserved bytes.
    pub fn parse(raw: &[u8]) -> FsResult<Handle> {
        let raw: &[u8; HANDLE_BYTES] = raw.try_into().map_err(|_| FsError::BadHandle)?;
        if raw[0] != VERSION || raw[1..4] != [0, 0, 0] {
            return Err(FsError::BadHandle);
        }
        let field =
            |at: usize| u32::from_be_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
        let mut file = [0u8; 8];
        file.copy_from_slice(&raw[12..20]);
        Ok(Handle {
            export: ExportId(field(4)),
            incarnation: field(8),
            file: FileId(u64::from_be_bytes(file)),
            generation: field(20),
        })
    }

    /// Checks the MAC of a handle [`HandleKey::parse`] accepted.
    ///
    /// # Errors
    /// `BadHandle` for a bad MAC (or a handle `parse` refuses).
    pub fn verify(&self, raw: &[u8]) -> FsResult<()> {
        if raw.len() != HANDLE_BYTES {
            return Err(FsError::BadHandle);
        }
        let mut mac = [0u8; 8];
        mac.copy_from_slice(&raw[MAC_OFFSET..]);
        if u64::from_be_bytes(mac) != self.mac(&raw[..MAC_OFFSET]) {
            return Err(FsError::BadHandle);
        }
        Ok(())
    }

    /// Parses and verifies a handle.
    ///
    /// # Errors
    /// As [`HandleKey::parse`] and [`HandleKey::verify`].
    pub fn decode(&self, raw: &[u8]) -> FsResult<Handle> {
        let handle = Self::parse(raw)?;
        self.verify(raw)?;
        Ok(handle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> HandleKey {
        HandleKey::new(*b"0123456789abcdef")
    }

    fn handle(file: u64) -> Handle {
        Handle {
            export: ExportId(3),
            incarnation: 77,
            file: FileId(file),
            generation: 5,
        }
    }

    #[test]
    fn round_trip() {
        let h = handle(99);
        assert_eq!(key().decode(&key().encode(&h)), Ok(h));
    }

    #[test]
    fn other_key_is_bad_and_short_or_long_is_bad() {
        let raw = HandleKey::new(*b"fedcba9876543210").encode(&handle(99));
        assert_eq!(HandleKey::parse(&raw), Ok(handle(99)));
        assert_eq!(key().decode(&raw), Err(FsError::BadHandle));
        assert_eq!(key().decode(&[]), Err(FsError::BadHandle));
        assert_eq!(key().decode(&[0u8; 64]), Err(FsError::BadHandle));
    }

    proptest! {
        #[test]
        fn any_single_bit_flip_is_refused(bit in 0usize..HANDLE_BYTES * 8, file: u64) {
            let mut raw = key().encode(&handle(file));
            raw[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(key().decode(&raw).is_err());
        }
    }
}
