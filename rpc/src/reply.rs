//! A reply record whose bulk data may stay in a file until the socket takes it.
//!
//! A large READ from a file on the host does not copy the file's bytes into the reply: the
//! procedure encodes everything up to the data's length word and hands over the file and
//! range ([`FileSlice`]). The connection's writer sends the head, then the range with
//! `sendfile` (for page-cache files the kernel hands the socket references to the cached
//! pages, so the bytes are copied once, by the receiver), then the XDR padding. Linux nfsd
//! does the same with `splice`. Callers that want the whole record in memory (tests, the
//! fuzzers, the lab) call [`Reply::into_bytes`], which reads the range with `pread`.
//!
//! A backend that holds the bytes in memory already (the mem backend's chunks, the object
//! backend's cache of S3 objects) hands over its pieces instead ([`Body::Memory`]): the writer sends them as
//! they are after the head, and the server copies nothing into the reply.
//!
//! The range's length is fixed when the procedure encodes its reply (it is in the data's
//! length word and in the record mark). If the file shrinks before the writer has sent the
//! range, the record cannot be finished truthfully: the writer closes the connection
//! instead of sending zeros or a torn record, and the client retries on a new one.

use std::fmt;
use std::os::fd::AsFd;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

/// A file's bytes that belong at the end of a reply, sent from the file itself.
#[derive(Clone)]
pub struct FileSlice {
    /// Open for reading; shared so the descriptor stays open until the bytes are sent.
    pub file: Arc<dyn AsFd + Send + Sync>,
    pub offset: u64,
    pub len: u32,
}

impl fmt::Debug for FileSlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileSlice")
            .field("fd", &self.file.as_fd())
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

impl FileSlice {
    /// Zero bytes that follow the data to a multiple of 4 (XDR opaque padding).
    #[must_use]
    pub fn pad_bytes(&self) -> usize {
        (4 - self.len as usize % 4) % 4
    }

    /// The error for a file that ended after `sent` of the slice's bytes: a
    /// [`SliceShrank`] inside an `UnexpectedEof`.
    #[must_use]
    pub fn shrank(&self, sent: u64) -> std::io::Error {
        let shrank = SliceShrank {
            sent,
            len: self.len,
        };
        std::io::Error::new(std::io::ErrorKind::UnexpectedEof, shrank)
    }
}

/// The file was shorter than its reply said when its bytes were read for sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("file shrank while a reply was being sent from it ({sent} of {len} bytes)")]
pub struct SliceShrank {
    pub sent: u64,
    pub len: u32,
}

/// Bytes that end a reply, and where they are.
#[derive(Debug, Clone)]
pub enum Body {
    /// In a file, sent from it.
    File(FileSlice),
    /// In memory, in pieces sent as they are (their length is the sum of theirs).
    Memory(Vec<Bytes>),
}

impl Body {
    /// The data's length (without its padding).
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Self::File(f) => f.len as usize,
            Self::Memory(parts) => parts.iter().map(Bytes::len).sum(),
        }
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Zero bytes that follow the data to a multiple of 4 (XDR opaque padding).
    #[must_use]
    pub fn pad_bytes(&self) -> usize {
        (4 - self.len() % 4) % 4
    }
}

/// One reply record, record mark included: `head`, then `body`'s bytes and padding.
#[derive(Debug, Clone)]
pub struct Reply {
    pub head: Bytes,
    pub body: Option<Body>,
}

impl From<Bytes> for Reply {
    fn from(head: Bytes) -> Self {
        Self { head, body: None }
    }
}

impl Reply {
    /// Bytes the record takes on the wire, mark included.
    #[must_use]
    pub fn len(&self) -> usize {
        self.head.len() + self.body.as_ref().map_or(0, |b| b.len() + b.pad_bytes())
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the reply holds in the server's memory until it is written (a body sent
    /// from a file stays in the file's pages).
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        match &self.body {
            Some(b @ Body::Memory(_)) => self.head.len() + b.len(),
            _ => self.head.len(),
        }
    }

    /// The record as the pieces it is sent in (the head, a body in memory's pieces, its
    /// padding), none copied; `None` for a body sent from a file.
    #[must_use]
    pub fn memory_pieces(&self) -> Option<Vec<Bytes>> {
        static PAD: [u8; 3] = [0; 3];
        let mut pieces = vec![self.head.clone()];
        match &self.body {
            None => {}
            Some(Body::File(_)) => return None,
            Some(b @ Body::Memory(parts)) => {
                pieces.extend(parts.iter().cloned());
                pieces.push(Bytes::from_static(&PAD[..b.pad_bytes()]));
            }
        }
        pieces.retain(|p| !p.is_empty());
        Some(pieces)
    }

    /// The whole record in memory, the body read with `pread`.
    ///
    /// # Errors
    /// The file could not be read, or was shorter than the reply says ([`SliceShrank`]
    /// as an `UnexpectedEof` error).
    pub fn into_bytes(self) -> std::io::Result<Bytes> {
        let Some(body) = self.body else {
            return Ok(self.head);
        };
        let mut buf = BytesMut::with_capacity(self.head.len() + body.len() + 3);
        buf.put_slice(&self.head);
        match &body {
            Body::File(file) => {
                let start = buf.len();
                buf.resize(start + file.len as usize, 0);
                read_exact_at(file, &mut buf[start..])?;
            }
            Body::Memory(parts) => {
                for p in parts {
                    buf.put_slice(p);
                }
            }
        }
        buf.put_bytes(0, body.pad_bytes());
        Ok(buf.freeze())
    }
}

/// Reads all of `slice` into `out` (which is `slice.len` long) with `pread`.
pub(crate) fn read_exact_at(slice: &FileSlice, out: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < out.len() {
        let at = slice.offset + done as u64;
        match rustix::io::pread(slice.file.as_fd(), &mut out[done..], at) {
            Ok(0) => return Err(slice.shrank(done as u64)),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// An unlinked file holding `bytes`.
    fn temp_file(bytes: &[u8]) -> std::fs::File {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("granary-rpc-{}-{n}", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    #[test]
    fn into_bytes_appends_the_range_and_its_padding() {
        let f = temp_file(b"0123456789");
        let reply = Reply {
            head: Bytes::from_static(b"HEAD"),
            body: Some(Body::File(FileSlice {
                file: Arc::new(f),
                offset: 3,
                len: 5,
            })),
        };
        assert_eq!(reply.len(), 4 + 5 + 3);
        assert_eq!(reply.memory_bytes(), 4);
        let bytes = reply.into_bytes().unwrap();
        assert_eq!(&bytes[..], b"HEAD34567\0\0\0");
    }

    #[test]
    fn a_memory_body_is_sent_as_its_pieces_and_counts_in_memory() {
        let reply = Reply {
            head: Bytes::from_static(b"HEAD"),
            body: Some(Body::Memory(vec![
                Bytes::from_static(b"ab"),
                Bytes::from_static(b"cde"),
            ])),
        };
        assert_eq!(reply.len(), 4 + 5 + 3);
        assert_eq!(reply.memory_bytes(), 4 + 5);
        assert_eq!(&reply.into_bytes().unwrap()[..], b"HEADabcde\0\0\0");
    }

    #[test]
    fn a_file_shorter_than_the_reply_is_an_error_not_zeros() {
        let f = temp_file(b"0123");
        let reply = Reply {
            head: Bytes::new(),
            body: Some(Body::File(FileSlice {
                file: Arc::new(f),
                offset: 2,
                len: 4,
            })),
        };
        let e = reply.into_bytes().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("2 of 4 bytes"), "{e}");
    }
}
