//! A reader of the EROFS on-disk format, as `mkfs.erofs` (erofs-utils 1.5) writes it.
//!
//! The crate owns parsing only: superblock, inodes, directories, and the mapping of a file
//! offset to where its bytes live (flat blocks, inline tail, chunks, or a compressed
//! physical cluster). Decompression is a separate, pure step ([`decompress::decode`]) so
//! the caller decides where it runs (granary runs it on per-core decode workers, seed 001).
//!
//! Every byte comes from an [`source::ImageSource`] that refuses reads past the end of the
//! image, every count read from disk is checked before it sizes a buffer, and every walk
//! over on-disk links is bounded, so a corrupt or truncated image gives an
//! [`ErofsError`], never a panic or an unbounded allocation.
//!
//! Supported (everything `mkfs.erofs` 1.5 can produce, with `-z lz4|lz4hc`, `-C`,
//! `--chunksize`, `-E legacy-compress,force-inode-compact,force-inode-extended,nosbcrc,
//! noinline_data,force-inode-blockmap,force-chunk-indexes,ztailpacking`, `-x`, `-T`,
//! `--all-root`, `--max-extent-bytes`): 4 KiB blocks; compact and extended inodes; inline
//! xattrs and shared xattrs (skipped); flat plain, flat inline and chunk-based layouts
//! (block map and chunk indexes, holes); LZ4 compression with full and compact (2B/4B)
//! cluster indexes, big physical clusters, uncompressed clusters and inline tail packing;
//! the superblock checksum. Refused at [`Image::open`]: other block sizes, extra devices,
//! fragments, deduplication, xattr prefixes and any unknown incompatible feature. Refused
//! per file (an error when it is read): LZMA/DEFLATE/ZSTD clusters, interlaced clusters.
#![forbid(unsafe_code)]

pub mod crc32c;
pub mod decompress;
pub mod dir;
pub mod error;
pub mod image;
pub mod inode;
pub mod limits;
pub mod source;
pub mod superblock;
pub mod walk;
pub mod zmap;

pub use decompress::{decode, Codec};
pub use dir::{DirEntry, FileKind};
pub use error::{ErofsError, Result};
pub use image::Image;
pub use inode::{DataLayout, Inode};
pub use source::{FileSource, ImageSource, MemSource};
pub use superblock::Superblock;
pub use zmap::{Extent, PclusterSource};
