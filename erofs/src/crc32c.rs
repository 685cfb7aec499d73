//! CRC-32C (Castagnoli), as the superblock checksum uses it: the register starts at
//! `!0` and is stored without the final inversion (Linux `crc32c(~0, ...)`).

const POLY: u32 = 0x82F6_3B78;

const TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// Updates the raw register `crc` with `data` (no inversions).
#[must_use]
pub fn update(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

#[cfg(test)]
mod tests {
    #[test]
    fn standard_check_value() {
        // The CRC-32C check value of "123456789" is 0xE3069283 (with both inversions).
        assert_eq!(!super::update(!0, b"123456789"), 0xE306_9283);
    }
}
