//! Errors of the EROFS reader.

/// Why reading the image failed. `Io` may be transient (the image file itself failed);
/// `Corrupt` and `Unsupported` are permanent for that image.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErofsError {
    /// The image file could not be read.
    #[error("cannot read the image: {0}")]
    Io(#[from] std::io::Error),
    /// The file is not an EROFS image at all (no magic in the superblock).
    #[error("not an EROFS image: {0}")]
    NotErofs(&'static str),
    /// A valid EROFS feature that this reader does not implement.
    #[error("unsupported EROFS feature: {0}")]
    Unsupported(String),
    /// The image contradicts the format: out-of-range offsets, bad counts, bad checksum.
    #[error("corrupt image: {what} (near byte {offset})")]
    Corrupt { what: &'static str, offset: u64 },
}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, ErofsError>;

/// Shorthand for a [`ErofsError::Corrupt`].
pub(crate) fn corrupt<T>(what: &'static str, offset: u64) -> Result<T> {
    Err(ErofsError::Corrupt { what, offset })
}
