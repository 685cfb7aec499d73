//! READ of regular files: flat data straight into the reply; compressed extents through
//! the decoded-extent cache and the decode workers.

use std::sync::Arc;

use bytes::BytesMut;
use erofs::Inode;
use vfs::FsResult;

use crate::{io_error, ErofsBackend};

impl ErofsBackend {
    /// Appends up to `count` bytes at `offset` of a regular file to `out`; returns eof.
    pub(crate) fn read_file(
        &self,
        inode: &Inode,
        offset: u64,
        count: u32,
        out: &mut BytesMut,
    ) -> FsResult<bool> {
        let size = inode.size_bytes;
        if offset >= size {
            return Ok(true);
        }
        let len = u64::from(count).min(size - offset);
        let eof = offset + len == size;
        let start = out.len();
        let result = if inode.is_compressed() {
            self.read_compressed(inode, offset, len, out)
        } else {
            out.resize(start + len as usize, 0);
            self.image
                .read_flat(inode, offset, &mut out[start..])
                .map_err(|e| io_error(inode.nid, "read", &e))
        };
        if result.is_err() {
            out.truncate(start);
        }
        result.map(|()| eof)
    }

    fn read_compressed(
        &self,
        inode: &Inode,
        offset: u64,
        len: u64,
        out: &mut BytesMut,
    ) -> FsResult<()> {
        let mut pos = offset;
        while pos < offset + len {
            let data = self.extent_at(inode, pos)?;
            let (start, bytes) = data;
            let from = (pos - start) as usize;
            let take = ((bytes.len() - from) as u64).min(offset + len - pos) as usize;
            out.extend_from_slice(&bytes[from..from + take]);
            pos += take as u64;
        }
        Ok(())
    }

    /// The decoded extent holding `pos`: (its start, its bytes).
    fn extent_at(&self, inode: &Inode, pos: u64) -> FsResult<(u64, Arc<[u8]>)> {
        let nid = inode.nid;
        let ext = self
            .image
            .map_extent(inode, pos)
            .map_err(|e| io_error(nid, "map", &e))?;
        if let Some(hit) = self.cache.get(nid, ext.start) {
            return Ok((ext.start, hit));
        }
        // The read of the compressed bytes completes here, on the network worker; the
        // decoding is handed to that core's decode worker (or the pool, or done inline).
        let raw = self
            .image
            .read_pcluster(&ext)
            .map_err(|e| io_error(nid, "read", &e))?;
        let codec = self.image.codec(&ext);
        let out_len = ext.len as usize;
        let decoded = self.decode.run(move || erofs::decode(codec, &raw, out_len));
        let data: Arc<[u8]> = Arc::from(decoded.map_err(|e| io_error(nid, "decode", &e))?);
        if (data.len() as u64) <= pos - ext.start {
            return Err(io_error(
                nid,
                "decode",
                &erofs::ErofsError::Corrupt {
                    what: "short extent",
                    offset: 0,
                },
            ));
        }
        self.cache.insert(nid, ext.start, Arc::clone(&data));
        Ok((ext.start, data))
    }
}
