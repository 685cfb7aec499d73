//! READ of regular files: flat data straight into the reply; compressed extents through
//! the decoded-extent cache and the decode workers.

use bytes::{Bytes, BytesMut};
use erofs::Inode;
use vfs::FsResult;

use crate::{io_error, ErofsBackend};

/// Most extents decoded in one job (a 1 MiB READ of 4 KiB clusters is 256).
const MAX_BATCH_EXTENTS: usize = 512;

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

    /// A READ of a compressed file: every extent the range touches, from the cache or
    /// decoded. The compressed bytes of the missing extents are read here, on the network
    /// worker, and decoded together in one job on a decode worker (one hand-off per batch,
    /// as the kernel queues every pcluster of one I/O to one decompression work item; a
    /// 1 MiB READ of 4 KiB clusters would otherwise wake a worker 256 times). A batch
    /// holds at most [`MAX_BATCH_EXTENTS`] extents, so a corrupt index of tiny extents
    /// cannot make one READ hold unbounded compressed data.
    fn read_compressed(
        &self,
        inode: &Inode,
        offset: u64,
        len: u64,
        out: &mut BytesMut,
    ) -> FsResult<()> {
        let end = offset + len;
        let mut pos = offset;
        while pos < end {
            pos = self.read_batch(inode, pos, end, out)?;
        }
        Ok(())
    }

    /// One batch of [`Self::read_compressed`] from `pos`; returns where it stopped.
    fn read_batch(&self, inode: &Inode, pos: u64, end: u64, out: &mut BytesMut) -> FsResult<u64> {
        let nid = inode.nid;
        // The extents in order: start and cached bytes, or `None` for the next decode job
        // (jobs are queued in the order of the extents that miss).
        let mut parts: Vec<(u64, Option<Bytes>)> = Vec::new();
        let mut jobs: Vec<(erofs::Codec, Vec<u8>, usize)> = Vec::new();
        let mut at = pos;
        while at < end && parts.len() < MAX_BATCH_EXTENTS {
            let ext = self
                .image
                .map_extent(inode, at)
                .map_err(|e| io_error(nid, "map", &e))?;
            let ext_end = ext.start.saturating_add(ext.len);
            if ext.start > at || ext_end <= at {
                return Err(io_error(nid, "map", &short_extent()));
            }
            match self.cache.get(nid, ext.start) {
                hit @ Some(_) => parts.push((ext.start, hit)),
                // Reading the compressed bytes and waiting for their decoding may sleep:
                // the READ runs again where it may (nothing was changed but `out`, which
                // `read_file` restores).
                None if !sync::blocking::allowed() => return Err(vfs::FsError::WouldBlock),
                None => {
                    let raw = self
                        .image
                        .read_pcluster(&ext)
                        .map_err(|e| io_error(nid, "read", &e))?;
                    jobs.push((self.image.codec(&ext), raw, ext.len as usize));
                    parts.push((ext.start, None));
                }
            }
            at = ext_end;
        }
        let decoded: Vec<erofs::Result<Vec<u8>>> = if jobs.is_empty() {
            Vec::new()
        } else {
            self.decode_batch(jobs)
        };
        let mut decoded = decoded.into_iter();
        let mut at = pos;
        for (start, part) in parts {
            let data = match part {
                Some(hit) => hit,
                None => {
                    let bytes = decoded
                        .next()
                        .ok_or_else(|| io_error(nid, "decode", &short_extent()))?
                        .map_err(|e| io_error(nid, "decode", &e))?;
                    let bytes = Bytes::from(bytes);
                    self.cache.insert(nid, start, bytes.clone());
                    bytes
                }
            };
            // A decoded extent shorter than its map leaves a gap before the next one.
            let from = at
                .checked_sub(start)
                .map(|f| f as usize)
                .filter(|&f| f < data.len())
                .ok_or_else(|| io_error(nid, "decode", &short_extent()))?;
            let take = ((data.len() - from) as u64).min(end - at) as usize;
            out.extend_from_slice(&data[from..from + take]);
            at += take as u64;
        }
        Ok(at)
    }
}

impl ErofsBackend {
    /// Decodes `jobs` in one job on the decode runner and waits for it.
    fn decode_batch(
        &self,
        jobs: Vec<(erofs::Codec, Vec<u8>, usize)>,
    ) -> Vec<erofs::Result<Vec<u8>>> {
        let (done, result) = std::sync::mpsc::sync_channel(1);
        self.decode.run(Box::new(move || {
            let decoded: Vec<_> = jobs
                .into_iter()
                .map(|(codec, raw, out_len)| erofs::decode(codec, &raw, out_len))
                .collect();
            let _ = done.send(decoded);
        }));
        // A runner that returned without running the job: every extent fails (`Io`).
        result.try_recv().unwrap_or_default()
    }
}

/// A decoded extent that does not reach the position it was mapped for.
fn short_extent() -> erofs::ErofsError {
    erofs::ErofsError::Corrupt {
        what: "short extent",
        offset: 0,
    }
}
