//! Byte ranges as the lock manager keeps them (first and last byte, inclusive, so the
//! last byte of a 64-bit file can be locked), and the conversions from and to each
//! protocol's (offset, length) where "to the end of the file" is spelled differently:
//! NFSv4 by a length of all ones, NLM by a length of zero.

use std::fmt;

/// Bytes `start..=end` of a file; `end == u64::MAX` reaches to the end of any file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Range {
    start: u64,
    end: u64,
}

/// Why an (offset, length) names no range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RangeError {
    /// NFSv4 length 0 (NFSv4 answers `NFS4ERR_INVAL`).
    ZeroLength,
    /// The last byte would lie past 2^64 - 1 (NFSv4: `NFS4ERR_INVAL`, RFC 8881 section
    /// 18.10.4; NLM: `NLM4_FBIG`).
    Overflow,
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroLength => f.write_str("a lock of length 0"),
            Self::Overflow => f.write_str("offset + length past 2^64"),
        }
    }
}

impl std::error::Error for RangeError {}

impl Range {
    /// Every byte of the file.
    pub const WHOLE: Self = Self {
        start: 0,
        end: u64::MAX,
    };

    /// Bytes `start..=end`, or `None` when `end < start`.
    #[must_use]
    pub const fn new(start: u64, end: u64) -> Option<Self> {
        if end < start {
            None
        } else {
            Some(Self { start, end })
        }
    }

    /// From `offset` to the end of the file.
    #[must_use]
    pub const fn from(offset: u64) -> Self {
        Self {
            start: offset,
            end: u64::MAX,
        }
    }

    #[must_use]
    pub const fn start(self) -> u64 {
        self.start
    }

    /// The last byte (inclusive).
    #[must_use]
    pub const fn end(self) -> u64 {
        self.end
    }

    /// Whether the range reaches the end of any file.
    #[must_use]
    pub const fn to_end(self) -> bool {
        self.end == u64::MAX
    }

    #[must_use]
    pub const fn overlaps(self, other: Self) -> bool {
        self.start <= other.end && other.start <= self.end
    }

    #[must_use]
    pub const fn contains(self, other: Self) -> bool {
        self.start <= other.start && other.end <= self.end
    }

    /// NFSv4's `offset4`/`length4` (RFC 8881 section 18.10.4): a length of all ones is
    /// "to the end"; a length of 0, and an offset + length past 2^64 - 1, are errors.
    ///
    /// # Errors
    /// [`RangeError::ZeroLength`], [`RangeError::Overflow`].
    pub fn nfs4(offset: u64, length: u64) -> Result<Self, RangeError> {
        match length {
            0 => Err(RangeError::ZeroLength),
            u64::MAX => Ok(Self::from(offset)),
            // The sum itself may not pass 2^64 - 1 (knfsd's check_lock_length agrees).
            n => offset
                .checked_add(n)
                .map(|sum| Self {
                    start: offset,
                    end: sum - 1,
                })
                .ok_or(RangeError::Overflow),
        }
    }

    /// NFSv4's (offset, length) of this range.
    #[must_use]
    pub const fn to_nfs4(self) -> (u64, u64) {
        if self.to_end() {
            (self.start, u64::MAX)
        } else {
            (self.start, self.end - self.start + 1)
        }
    }

    /// NLM v4's `l_offset`/`l_len`: a length of 0 is "to the end".
    ///
    /// # Errors
    /// [`RangeError::Overflow`].
    pub fn nlm(offset: u64, len: u64) -> Result<Self, RangeError> {
        if len == 0 {
            return Ok(Self::from(offset));
        }
        offset
            .checked_add(len - 1)
            .map(|end| Self { start: offset, end })
            .ok_or(RangeError::Overflow)
    }

    /// NLM v4's (offset, len) of this range. The one range NLM cannot spell, the whole
    /// 2^64 bytes from offset 0 but the last, is reported one byte short of that.
    #[must_use]
    pub const fn to_nlm(self) -> (u64, u64) {
        if self.to_end() {
            (self.start, 0)
        } else {
            let len = self.end - self.start;
            // `len + 1` overflows only for 0..=u64::MAX - 1, whose length is 2^64 - 1.
            (self.start, len.saturating_add(1))
        }
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.to_end() {
            write!(f, "{}..", self.start)
        } else {
            write!(f, "{}..={}", self.start, self.end)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nfs4_lengths() {
        assert_eq!(Range::nfs4(5, 0), Err(RangeError::ZeroLength));
        assert_eq!(Range::nfs4(5, u64::MAX), Ok(Range::from(5)));
        assert_eq!(
            Range::nfs4(5, 10),
            Range::new(5, 14).ok_or(RangeError::Overflow)
        );
        assert_eq!(Range::nfs4(u64::MAX, 1), Err(RangeError::Overflow));
        assert_eq!(Range::nfs4(u64::MAX, u64::MAX), Ok(Range::from(u64::MAX)));
        assert_eq!(Range::nfs4(u64::MAX, 2), Err(RangeError::Overflow));
        assert_eq!(
            Range::nfs4(1, u64::MAX - 1).map(Range::end),
            Ok(u64::MAX - 1)
        );
        assert_eq!(Range::nfs4(2, u64::MAX - 1), Err(RangeError::Overflow));
        for (o, l) in [(0, 1), (7, 100), (1 << 40, u64::MAX), (3, u64::MAX - 3)] {
            assert_eq!(Range::nfs4(o, l).map(Range::to_nfs4), Ok((o, l)));
        }
    }

    #[test]
    fn nlm_lengths() {
        assert_eq!(Range::nlm(9, 0), Ok(Range::from(9)));
        assert_eq!(Range::nlm(9, 1).map(Range::end), Ok(9));
        assert_eq!(Range::nlm(u64::MAX, 2), Err(RangeError::Overflow));
        for (o, l) in [(0, 0), (7, 100), (1 << 40, 0)] {
            assert_eq!(Range::nlm(o, l).map(Range::to_nlm), Ok((o, l)));
        }
    }

    #[test]
    fn overlap() {
        let a = Range::nfs4(0, 10).unwrap_or(Range::WHOLE);
        let b = Range::nfs4(9, 1).unwrap_or(Range::WHOLE);
        let c = Range::nfs4(10, 1).unwrap_or(Range::WHOLE);
        assert!(a.overlaps(b) && !a.overlaps(c) && Range::WHOLE.contains(c));
    }
}
