//! NFSv4.2's space and copy operations (RFC 7862 sections 15.1, 15.2, 15.4, 15.11,
//! 15.13): SEEK, ALLOCATE, DEALLOCATE, COPY (intra-server, synchronous) and CLONE.
//!
//! Each checks its stateids as READ and WRITE do (`state4`'s `check_io`: an open of
//! this client on this file, with write access where it writes, or the anonymous
//! stateids when no share reservation denies them), refuses what is not a regular
//! file (`NFS4ERR_ISDIR`, `NFS4ERR_WRONG_TYPE`), then calls the export's seam
//! (`vfs::Export::seek` and the rest), whose ranges and errors it maps. COPY and CLONE
//! read the saved filehandle (source) and write the current one (destination); the two
//! must be files of one export (`NFS4ERR_XDEV`). COPY copies at most
//! `vfs::limits::MAX_COPY_BYTES` per call and answers the count it copied, so a large
//! copy is several COPYs from the client; it never runs asynchronously (no callback id,
//! `cr_synchronous` true, as RFC 7862 allows whatever `ca_synchronous` asked), and an
//! inter-server copy (a source server named) is `NFS4ERR_NOTSUPP`.

use std::sync::Arc;

use nfs4::ops::{CloneArgs, CopyArgs, DataContent4, RangeArgs, SeekArgs, StableHow4};
use nfs4::results::{CopyOk, SeekOk, WriteResponse4};
use nfs4::types::AtMostOne;
use nfs4::{Nfsstat4, Stateid4};
use vfs::{Attr, Content, Cred, Export, FileId, FileType, Stability};

use super::compound::{Cx, Fh};
use super::convert::status_of;

/// A regular file that a stateid lets this COMPOUND read (`write` false) or write.
struct Target {
    export: Arc<Export>,
    id: FileId,
    cred: Arc<Cred>,
    attr: Attr,
}

/// `fh` checked as the file of an I/O with stateid `sid`.
fn target(cx: &Cx<'_>, fh: &Fh, sid: &Stateid4, write: bool) -> Result<Target, Nfsstat4> {
    let Fh::File { export, id, .. } = fh else {
        // A pseudo directory.
        return Err(Nfsstat4::Isdir);
    };
    let client = cx.client()?;
    let sid = cx.stateid(sid)?;
    cx.s.state
        .check_io(client, &sid, &Cx::key(export, *id), write)?;
    let attr = export.getattr(*id).map_err(status_of)?;
    match attr.file_type {
        FileType::Regular => {}
        FileType::Directory => return Err(Nfsstat4::Isdir),
        _ => return Err(Nfsstat4::WrongType),
    }
    Ok(Target {
        cred: cx.s.core.cred(export, &cx.ctx.auth),
        export: Arc::clone(export),
        id: *id,
        attr,
    })
}

pub fn seek(cx: &mut Cx<'_>, a: &SeekArgs) -> Result<SeekOk, Nfsstat4> {
    let t = target(cx, cx.cur()?, &a.sa_stateid, false)?;
    let what = match a.sa_what {
        DataContent4::Data => Content::Data,
        DataContent4::Hole => Content::Hole,
    };
    let sought = t
        .export
        .seek(&t.cred, t.id, a.sa_offset, what)
        .map_err(status_of)?;
    let size = sought.attr.size_bytes;
    // No data after the offset: not an error, the end of the file (RFC 7862 15.11.3).
    let at = sought.offset_bytes.unwrap_or(size);
    Ok(SeekOk {
        sr_eof: at >= size,
        sr_offset: at,
    })
}

/// ALLOCATE (`punch` false) and DEALLOCATE (`punch` true).
pub fn space(cx: &mut Cx<'_>, a: &RangeArgs, punch: bool) -> Result<(), Nfsstat4> {
    let t = target(cx, cx.cur()?, &a.stateid, true)?;
    let r = if punch {
        t.export.deallocate(&t.cred, t.id, a.offset, a.length)
    } else {
        t.export.allocate(&t.cred, t.id, a.offset, a.length)
    };
    r.map(|_| ()).map_err(status_of)
}

/// The source (saved filehandle) and destination (current) of COPY and CLONE, checked:
/// one export, readable and writable through their stateids.
fn pair(cx: &Cx<'_>, src_sid: &Stateid4, dst_sid: &Stateid4) -> Result<(Target, Target), Nfsstat4> {
    let dst_fh = cx.cur()?;
    let src_fh = cx.saved.as_ref().ok_or(Nfsstat4::Nofilehandle)?;
    if let (Fh::File { export: s, .. }, Fh::File { export: d, .. }) = (src_fh, dst_fh) {
        if s.id != d.id {
            return Err(Nfsstat4::Xdev);
        }
    }
    let src = target(cx, src_fh, src_sid, false)?;
    let dst = target(cx, dst_fh, dst_sid, true)?;
    Ok((src, dst))
}

/// The length of a copy or clone: `count`, or with 0 the rest of the source; `Inval`
/// when the range starts or ends past the source's end (RFC 7862 15.2.3, 15.13.3).
fn source_len(src: &Attr, offset_bytes: u64, count: u64) -> Result<u64, Nfsstat4> {
    let size = src.size_bytes;
    if offset_bytes > size {
        return Err(Nfsstat4::Inval);
    }
    if count == 0 {
        return Ok(size - offset_bytes);
    }
    match offset_bytes.checked_add(count) {
        Some(end) if end <= size => Ok(count),
        _ => Err(Nfsstat4::Inval),
    }
}

fn stable_how(s: Stability) -> StableHow4 {
    match s {
        Stability::Unstable => StableHow4::Unstable,
        Stability::DataSync => StableHow4::DataSync,
        Stability::FileSync => StableHow4::FileSync,
    }
}

pub fn copy(cx: &mut Cx<'_>, a: &CopyArgs) -> Result<CopyOk, Nfsstat4> {
    if a.ca_source_servers > 0 {
        return Err(Nfsstat4::Notsupp);
    }
    let (src, dst) = pair(cx, &a.ca_src_stateid, &a.ca_dst_stateid)?;
    let len = source_len(&src.attr, a.ca_src_offset, a.ca_count)?;
    let copied = dst
        .export
        .copy_range(
            &dst.cred,
            src.id,
            a.ca_src_offset,
            dst.id,
            a.ca_dst_offset,
            len,
        )
        .map_err(status_of)?;
    Ok(CopyOk {
        cr_response: WriteResponse4 {
            wr_callback_id: AtMostOne(None),
            wr_count: copied.count_bytes,
            wr_committed: stable_how(copied.committed),
            wr_writeverf: cx.s.core.write_verifier_for(&dst.export),
        },
        cr_consecutive: true,
        cr_synchronous: true,
    })
}

pub fn clone(cx: &mut Cx<'_>, a: &CloneArgs) -> Result<(), Nfsstat4> {
    let (src, dst) = pair(cx, &a.cl_src_stateid, &a.cl_dst_stateid)?;
    let len = source_len(&src.attr, a.cl_src_offset, a.cl_count)?;
    if let Some(block) = dst.export.clone_block_bytes().map(u64::from) {
        // Offsets on block boundaries; the length too, unless it reaches the source's end.
        let to_end = a.cl_src_offset + len == src.attr.size_bytes;
        if !a.cl_src_offset.is_multiple_of(block)
            || !a.cl_dst_offset.is_multiple_of(block)
            || (!len.is_multiple_of(block) && !to_end)
        {
            return Err(Nfsstat4::Inval);
        }
    }
    dst.export
        .clone_range(
            &dst.cred,
            src.id,
            a.cl_src_offset,
            dst.id,
            a.cl_dst_offset,
            len,
        )
        .map(|_| ())
        .map_err(status_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(size_bytes: u64) -> Attr {
        Attr {
            file_type: FileType::Regular,
            mode: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            size_bytes,
            used_bytes: 0,
            rdev: vfs::DeviceNumber::default(),
            fsid: 0,
            fileid: FileId(5),
            generation: 0,
            atime: vfs::Timestamp::default(),
            mtime: vfs::Timestamp::default(),
            ctime: vfs::Timestamp::default(),
        }
    }

    #[test]
    fn a_zero_count_copies_to_the_end_and_ranges_past_it_are_invalid() {
        let f = file(100);
        assert_eq!(source_len(&f, 0, 0), Ok(100));
        assert_eq!(source_len(&f, 40, 0), Ok(60));
        assert_eq!(source_len(&f, 100, 0), Ok(0));
        assert_eq!(source_len(&f, 40, 60), Ok(60));
        assert_eq!(source_len(&f, 40, 61), Err(Nfsstat4::Inval));
        assert_eq!(source_len(&f, 101, 0), Err(Nfsstat4::Inval));
        assert_eq!(source_len(&f, 1, u64::MAX), Err(Nfsstat4::Inval));
    }
}
