//! NFSv4.2's SEEK, ALLOCATE, DEALLOCATE, COPY and CLONE (RFC 7862) of the real `granary`
//! binary, through whole COMPOUNDs: on a mem export (holes are missing 64 KiB chunks), on
//! a host export (lseek, fallocate, copy_file_range, FICLONERANGE on the test machine's
//! file system), and the RFC's errors: ranges, types, open modes, a read-only export and
//! copies between two exports; and owners as `name@domain` with `--idmap-domain`.

mod common;

use bytes::Bytes;
use common::v4::{name, Setup, V4};
use common::{HostDirs, Server};
use nfs4::attr::{num, Fattr};
use nfs4::ops::*;
use nfs4::results::*;
use nfs4::types::*;
use nfs4::{Nfsstat4, Stateid4};

/// The mem backend's chunk: its unit of holes.
const C: u64 = 64 * 1024;

/// A client as these tests use it: 2 MiB requests (COPY and READ of whole chunks) and
/// no reply caching.
async fn connect(server: &Server, owner: &str) -> V4 {
    let setup = Setup {
        verifier: [3; 8],
        max_bytes: 2 << 20,
        timeout: std::time::Duration::from_secs(20),
        cachethis: false,
        ..Setup::default()
    };
    V4::connect_with(server, owner, &setup).await
}

impl V4 {
    /// SEQUENCE + `ops` as minor version `minor`; SEQUENCE must succeed.
    async fn run_minor(&mut self, minor: u32, ops: Vec<ArgOp>) -> (Nfsstat4, Vec<ResOp>) {
        let (status, seq, results) = self.try_run_minor(minor, ops).await;
        assert_eq!(seq, Nfsstat4::Ok);
        (status, results)
    }

    /// The status of the last operation of `ops` (run after PUTFH `fh`).
    async fn status(&mut self, fh: &NfsFh4, ops: Vec<ArgOp>) -> Nfsstat4 {
        let mut all = vec![ArgOp::Putfh(fh.clone())];
        all.extend(ops);
        self.run(all).await.0
    }

    /// Creates (or opens) `file` in the root with `access`: its handle and stateid.
    async fn open(&mut self, file: &str, access: u32) -> (NfsFh4, Stateid4) {
        let (status, r) = self
            .run(vec![
                ArgOp::Putrootfh,
                ArgOp::Open(OpenArgs {
                    seqid: 0,
                    share_access: access,
                    share_deny: share::DENY_NONE,
                    owner: StateOwner4 {
                        clientid: 0,
                        // One owner per access: a second OPEN by one owner would
                        // upgrade its first open's stateid instead.
                        owner: Opaque4(Bytes::from(format!("v42-{access}"))),
                    },
                    openhow: Openflag4::Create(Createhow4::Unchecked(
                        Fattr {
                            mode: Some(0o644),
                            ..Fattr::default()
                        }
                        .to_fattr4(),
                    )),
                    claim: OpenClaim4::Null(name(file)),
                }),
                ArgOp::Getfh,
            ])
            .await;
        assert_eq!(status, Nfsstat4::Ok, "OPEN {file}: {r:?}");
        let ResOp::Open(Res4::Ok(o)) = &r[1] else {
            panic!("{r:?}")
        };
        let ResOp::Getfh(Res4::Ok(fh)) = &r[2] else {
            panic!("{r:?}")
        };
        (fh.clone(), o.stateid)
    }

    async fn write(&mut self, fh: &NfsFh4, sid: Stateid4, offset: u64, data: &[u8]) {
        let st = self
            .status(
                fh,
                vec![ArgOp::Write(WriteArgs {
                    stateid: sid,
                    offset,
                    stable: StableHow4::FileSync,
                    data: Bytes::copy_from_slice(data),
                })],
            )
            .await;
        assert_eq!(st, Nfsstat4::Ok, "WRITE");
    }

    async fn read(&mut self, fh: &NfsFh4, offset: u64, count: u32) -> Bytes {
        let (status, r) = self
            .run(vec![
                ArgOp::Putfh(fh.clone()),
                ArgOp::Read(ReadArgs {
                    stateid: Stateid4::ANONYMOUS,
                    offset,
                    count,
                }),
            ])
            .await;
        assert_eq!(status, Nfsstat4::Ok);
        let ResOp::Read(Res4::Ok(read)) = &r[1] else {
            panic!("{r:?}")
        };
        read.data.clone()
    }

    async fn seek(
        &mut self,
        fh: &NfsFh4,
        offset: u64,
        what: DataContent4,
    ) -> Result<SeekOk, Nfsstat4> {
        let (_, r) = self
            .run(vec![
                ArgOp::Putfh(fh.clone()),
                ArgOp::Seek(SeekArgs {
                    sa_stateid: Stateid4::ANONYMOUS,
                    sa_offset: offset,
                    sa_what: what,
                }),
            ])
            .await;
        match &r[..] {
            [_, ResOp::Seek(Res4::Ok(s))] => Ok(*s),
            [_, ResOp::Seek(Res4::Err(e))] => Err(*e),
            other => panic!("SEEK: {other:?}"),
        }
    }

    async fn attrs(&mut self, fh: &NfsFh4, bits: &[u32]) -> Fattr {
        let (_, r) = self
            .run(vec![
                ArgOp::Putfh(fh.clone()),
                ArgOp::Getattr(Bitmap4::from_bits(bits)),
            ])
            .await;
        let ResOp::Getattr(Res4::Ok(f)) = &r[1] else {
            panic!("GETATTR: {r:?}")
        };
        Fattr::from_fattr4(f).expect("attributes unpack")
    }

    async fn size(&mut self, fh: &NfsFh4) -> u64 {
        self.attrs(fh, &[num::SIZE]).await.size.expect("size")
    }

    /// COPY from `src` (saved) to `dst` (current); the whole result.
    async fn copy(
        &mut self,
        src: (&NfsFh4, Stateid4),
        dst: (&NfsFh4, Stateid4),
        offsets: (u64, u64),
        count: u64,
    ) -> Result<CopyOk, Nfsstat4> {
        let (_, r) = self
            .run(vec![
                ArgOp::Putfh(src.0.clone()),
                ArgOp::Savefh,
                ArgOp::Putfh(dst.0.clone()),
                ArgOp::Copy(CopyArgs {
                    ca_src_stateid: src.1,
                    ca_dst_stateid: dst.1,
                    ca_src_offset: offsets.0,
                    ca_dst_offset: offsets.1,
                    ca_count: count,
                    ca_consecutive: true,
                    ca_synchronous: false,
                    ca_source_servers: 0,
                }),
            ])
            .await;
        match r.last() {
            Some(ResOp::Copy(Res4::Ok(ok))) => Ok(ok.clone()),
            Some(ResOp::Copy(Res4::Err(e))) => Err(*e),
            Some(other) => Err(other.status()),
            None => panic!("no results"),
        }
    }

    async fn clone_range(
        &mut self,
        src: &NfsFh4,
        dst: &NfsFh4,
        offsets: (u64, u64),
        count: u64,
    ) -> Nfsstat4 {
        self.run(vec![
            ArgOp::Putfh(src.clone()),
            ArgOp::Savefh,
            ArgOp::Putfh(dst.clone()),
            ArgOp::Clone(CloneArgs {
                cl_src_stateid: Stateid4::ANONYMOUS,
                cl_dst_stateid: Stateid4::ANONYMOUS,
                cl_src_offset: offsets.0,
                cl_dst_offset: offsets.1,
                cl_count: count,
            }),
        ])
        .await
        .0
    }
}

fn space(sid: Stateid4, offset: u64, length: u64) -> RangeArgs {
    RangeArgs {
        stateid: sid,
        offset,
        length,
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// SEEK over holes, ALLOCATE, DEALLOCATE, and their errors, on any export of `c`.
/// Holes are `hole_unit` apart; `block` is the granularity of the backend's holes (the
/// first hole after a few bytes at offset 0).
async fn seek_allocate_deallocate(c: &mut V4, hole_unit: u64, block: u64) -> NfsFh4 {
    let (fh, sid) = c.open("sparse", share::ACCESS_BOTH).await;
    c.write(&fh, sid, 0, b"head").await;
    c.write(&fh, sid, 3 * hole_unit + 5, b"tail").await;
    let size = 3 * hole_unit + 9;
    assert_eq!(c.size(&fh).await, size);
    let data = DataContent4::Data;
    let hole = DataContent4::Hole;
    let at = |sr_offset, sr_eof| Ok(SeekOk { sr_eof, sr_offset });
    assert_eq!(c.seek(&fh, 0, data).await, at(0, false));
    assert_eq!(c.seek(&fh, 0, hole).await, at(block, false));
    assert_eq!(c.seek(&fh, hole_unit, data).await, at(3 * hole_unit, false));
    assert_eq!(c.seek(&fh, 3 * hole_unit, hole).await, at(size, true));
    assert_eq!(c.seek(&fh, size, data).await, Err(Nfsstat4::Nxio));
    assert_eq!(c.seek(&fh, u64::MAX, hole).await, Err(Nfsstat4::Nxio));

    // ALLOCATE past the end grows the file, with zeros, and takes space.
    let used = c.attrs(&fh, &[num::SPACE_USED]).await.space_used.unwrap();
    let st = c
        .status(&fh, vec![ArgOp::Allocate(space(sid, 0, 5 * hole_unit))])
        .await;
    assert_eq!(st, Nfsstat4::Ok);
    assert_eq!(c.size(&fh).await, 5 * hole_unit);
    let after = c.attrs(&fh, &[num::SPACE_USED]).await.space_used.unwrap();
    assert!(after >= used + 2 * hole_unit, "{used} -> {after}");
    // mem's reserved chunks are data; ext4 and XFS report allocated but unwritten
    // extents as holes (lseek(2)), so past the first block either answer is right there.
    let first_hole = c.seek(&fh, 0, hole).await;
    if block == C {
        assert_eq!(first_hole, at(5 * hole_unit, true));
    } else {
        assert!(
            first_hole == at(5 * hole_unit, true) || first_hole == at(block, false),
            "{first_hole:?}"
        );
    }
    assert_eq!(&c.read(&fh, 3 * hole_unit + 5, 4).await[..], b"tail");

    // DEALLOCATE punches a hole and keeps the size.
    let st = c
        .status(
            &fh,
            vec![ArgOp::Deallocate(space(sid, hole_unit, 2 * hole_unit))],
        )
        .await;
    assert_eq!(st, Nfsstat4::Ok);
    assert_eq!(c.size(&fh).await, 5 * hole_unit);
    // The first hole: the punched one (mem), or the unwritten blocks before it (host).
    assert_eq!(c.seek(&fh, 0, hole).await, at(block, false));
    assert_eq!(c.seek(&fh, hole_unit, data).await, at(3 * hole_unit, false));
    let zeros = c.read(&fh, hole_unit, 100).await;
    assert!(zeros.iter().all(|&b| b == 0) && zeros.len() == 100);
    assert_eq!(&c.read(&fh, 0, 4).await[..], b"head");
    // A DEALLOCATE inside one block zeroes those bytes and no more (host: the kernel's
    // punch writes zeros; mem once lost such a request to a panic).
    let st = c
        .status(&fh, vec![ArgOp::Deallocate(space(sid, 1, 2))])
        .await;
    assert_eq!(st, Nfsstat4::Ok);
    assert_eq!(&c.read(&fh, 0, 4).await[..], b"h\0\0d");

    // The RFC's errors.
    let bad = [
        (ArgOp::Allocate(space(sid, 0, 0)), Nfsstat4::Inval),
        (ArgOp::Deallocate(space(sid, 0, 0)), Nfsstat4::Inval),
        (
            ArgOp::Allocate(space(sid, u64::MAX - 5, 10)),
            Nfsstat4::Fbig,
        ),
        (
            ArgOp::Deallocate(space(
                Stateid4 {
                    seqid: 1,
                    other: [9; 12],
                },
                0,
                10,
            )),
            Nfsstat4::BadStateid,
        ),
    ];
    for (op, want) in bad {
        assert_eq!(c.status(&fh, vec![op.clone()]).await, want, "{op:?}");
    }
    // A read-only open may seek but not allocate.
    let (_, read_only) = c.open("sparse", share::ACCESS_READ).await;
    let st = c
        .status(&fh, vec![ArgOp::Allocate(space(read_only, 0, 10))])
        .await;
    assert_eq!(st, Nfsstat4::Openmode);
    fh
}

/// COPY between two files, the whole file and a short copy at the bound; its errors.
async fn copy_between_files(c: &mut V4) {
    let (src, src_sid) = c.open("copy-src", share::ACCESS_BOTH).await;
    let (dst, dst_sid) = c.open("copy-dst", share::ACCESS_BOTH).await;
    // 5 MiB: more than one COPY moves (vfs::limits::MAX_COPY_BYTES, 4 MiB).
    let data = pattern(5 << 20, 7);
    for (i, piece) in data.chunks(1 << 20).enumerate() {
        c.write(&src, src_sid, (i as u64) << 20, piece).await;
    }
    let ok = c
        .copy((&src, src_sid), (&dst, dst_sid), (0, 0), 0)
        .await
        .expect("COPY");
    assert_eq!(ok.cr_response.wr_callback_id, AtMostOne(None));
    assert!(ok.cr_synchronous && ok.cr_consecutive);
    assert_eq!(ok.cr_response.wr_count, 4 << 20, "one COPY moves 4 MiB");
    let rest = c
        .copy((&src, src_sid), (&dst, dst_sid), (4 << 20, 4 << 20), 0)
        .await
        .expect("COPY of the rest");
    assert_eq!(rest.cr_response.wr_count, 1 << 20);
    if rest.cr_response.wr_committed == StableHow4::Unstable {
        let st = c
            .status(
                &dst,
                vec![ArgOp::Commit(CommitArgs {
                    offset: 0,
                    count: 0,
                })],
            )
            .await;
        assert_eq!(st, Nfsstat4::Ok);
    }
    assert_eq!(c.size(&dst).await, 5 << 20);
    for i in 0..5u64 {
        let got = c.read(&dst, i << 20, 1 << 20).await;
        assert!(
            got[..] == data[(i as usize) << 20..((i + 1) as usize) << 20],
            "MiB {i}"
        );
    }
    // At an offset, within one file, with anonymous stateids.
    let anon = Stateid4::ANONYMOUS;
    let ok = c
        .copy((&src, anon), (&src, anon), (10, (6 << 20) + 3), 1000)
        .await
        .expect("COPY within one file");
    assert_eq!(ok.cr_response.wr_count, 1000);
    assert_eq!(
        &c.read(&src, (6 << 20) + 3, 1000).await[..],
        &data[10..1010]
    );
    // At the source's end: nothing to copy.
    let size = c.size(&src).await;
    let none = c.copy((&src, anon), (&dst, anon), (size, 0), 0).await;
    assert_eq!(none.map(|o| o.cr_response.wr_count), Ok(0));

    // Errors: past the source's end, overlapping ranges of one file, a read-only
    // destination stateid, a directory.
    let past = c.copy((&src, anon), (&dst, anon), (size - 10, 0), 11).await;
    assert_eq!(past.err(), Some(Nfsstat4::Inval));
    let past = c.copy((&src, anon), (&dst, anon), (size + 1, 0), 0).await;
    assert_eq!(past.err(), Some(Nfsstat4::Inval));
    let overlap = c.copy((&src, anon), (&src, anon), (0, 100), 200).await;
    assert_eq!(overlap.err(), Some(Nfsstat4::Inval));
    let (_, read_only) = c.open("copy-dst", share::ACCESS_READ).await;
    let mode = c.copy((&src, anon), (&dst, read_only), (0, 0), 10).await;
    assert_eq!(mode.err(), Some(Nfsstat4::Openmode));
    let (_, r) = c.run(vec![ArgOp::Putrootfh, ArgOp::Getfh]).await;
    let ResOp::Getfh(Res4::Ok(root)) = &r[1] else {
        panic!("{r:?}")
    };
    let dir = c.copy((&src, anon), (root, anon), (0, 0), 10).await;
    assert_eq!(dir.err(), Some(Nfsstat4::Isdir));
    // No saved filehandle.
    let (_, r) = c
        .run(vec![
            ArgOp::Putfh(dst.clone()),
            ArgOp::Copy(CopyArgs {
                ca_src_stateid: anon,
                ca_dst_stateid: anon,
                ca_src_offset: 0,
                ca_dst_offset: 0,
                ca_count: 1,
                ca_consecutive: true,
                ca_synchronous: true,
                ca_source_servers: 0,
            }),
        ])
        .await;
    assert_eq!(r[1].status(), Nfsstat4::Nofilehandle);
}

/// A symlink is the wrong type for every one of them.
async fn wrong_types(c: &mut V4) {
    let (status, r) = c
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Create(CreateArgs {
                objtype: Createtype4::Link(Linktext4(Bytes::from_static(b"sparse"))),
                objname: name("link"),
                createattrs: Fattr4::default(),
            }),
            ArgOp::Getfh,
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let ResOp::Getfh(Res4::Ok(link)) = &r[2] else {
        panic!("{r:?}")
    };
    let got = c.seek(link, 0, DataContent4::Data).await;
    assert_eq!(got, Err(Nfsstat4::WrongType));
    let st = c
        .status(
            link,
            vec![ArgOp::Allocate(space(Stateid4::ANONYMOUS, 0, 1))],
        )
        .await;
    assert_eq!(st, Nfsstat4::WrongType);
    let (_, r) = c.run(vec![ArgOp::Putrootfh, ArgOp::Getfh]).await;
    let ResOp::Getfh(Res4::Ok(root)) = &r[1] else {
        panic!("{r:?}")
    };
    assert_eq!(
        c.seek(root, 0, DataContent4::Hole).await,
        Err(Nfsstat4::Isdir)
    );
}

#[tokio::test]
async fn mem_export_seeks_allocates_deallocates_and_copies() {
    let server = Server::start(&[]);
    let mut c = connect(&server, "v42-mem").await;
    let fh = seek_allocate_deallocate(&mut c, C, C).await;
    copy_between_files(&mut c).await;
    wrong_types(&mut c).await;
    // Minor version 1 has none of them: OP_ILLEGAL.
    let (status, r) = c
        .run_minor(
            1,
            vec![
                ArgOp::Putfh(fh.clone()),
                ArgOp::Seek(SeekArgs {
                    sa_stateid: Stateid4::ANONYMOUS,
                    sa_offset: 0,
                    sa_what: DataContent4::Data,
                }),
            ],
        )
        .await;
    assert_eq!(status, Nfsstat4::OpIllegal);
    assert_eq!(
        r[1],
        ResOp::Refused {
            op: opnum::ILLEGAL,
            status: Nfsstat4::OpIllegal
        }
    );
    // mem shares no storage between files: CLONE is not offered, nor clone_blksize.
    assert_eq!(c.clone_range(&fh, &fh, (0, C), C).await, Nfsstat4::Notsupp);
    let f = c
        .attrs(&fh, &[num::SUPPORTED_ATTRS, num::CLONE_BLKSIZE])
        .await;
    assert!(!f.supported_attrs.unwrap().contains(num::CLONE_BLKSIZE));
    assert_eq!(f.clone_blksize, None);
}

/// The host file system's allocation unit, for where SEEK finds holes.
fn block_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).unwrap().blksize().max(4096)
}

#[tokio::test]
async fn host_export_seeks_allocates_deallocates_copies_and_clones() {
    use std::os::unix::fs::MetadataExt;
    let dirs = HostDirs::new("nfs4-v42");
    let export = dirs.export();
    let server = dirs.serve();
    let mut c = connect(&server, "v42-host").await;
    // Holes in units of the host's blocks, at least 64 KiB apart so every file system
    // with holes keeps them.
    let block = block_bytes(&export);
    let fh = seek_allocate_deallocate(&mut c, block.max(C), block).await;
    let unit = block.max(C);
    let meta = std::fs::metadata(export.join("sparse")).unwrap();
    assert_eq!(
        meta.len(),
        5 * unit,
        "the host file has the size ALLOCATE gave"
    );
    assert!(
        meta.blocks() * 512 <= 3 * unit + 4096,
        "DEALLOCATE freed the host file's blocks: {} bytes used",
        meta.blocks() * 512
    );
    copy_between_files(&mut c).await;
    assert_eq!(
        std::fs::read(export.join("copy-dst")).unwrap(),
        pattern(5 << 20, 7),
        "COPY wrote the host file"
    );
    wrong_types(&mut c).await;
    // CLONE is FICLONERANGE: the file systems with shared extents (btrfs, XFS) clone,
    // the others (ext4, tmpfs) refuse it and the client copies instead.
    let (dst, _) = c.open("clone-dst", share::ACCESS_BOTH).await;
    let got = c.clone_range(&fh, &dst, (0, 0), unit).await;
    let probe = reflink_probe(&dirs.base);
    if probe {
        assert_eq!(got, Nfsstat4::Ok);
        assert_eq!(&c.read(&dst, 0, 4).await[..], b"head");
    } else {
        assert_eq!(got, Nfsstat4::Notsupp);
    }
}

/// Whether the file system under `dir` clones (`cp --reflink=always` succeeds).
fn reflink_probe(dir: &std::path::Path) -> bool {
    let (a, b) = (dir.join("probe-a"), dir.join("probe-b"));
    std::fs::write(&a, b"x").unwrap();
    let ok = std::process::Command::new("cp")
        .arg("--reflink=always")
        .arg(&a)
        .arg(&b)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let _ = (std::fs::remove_file(&a), std::fs::remove_file(&b));
    ok
}

/// A copy or clone between two exports is `NFS4ERR_XDEV`.
#[tokio::test]
async fn copies_between_exports_are_refused() {
    let dir = std::env::temp_dir().join(format!("granary-nfs4-v42-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("granary.toml");
    std::fs::write(
        &config,
        "[[export]]\npath = \"/a\"\nsquash = \"none\"\n\
         [[export]]\npath = \"/b\"\nsquash = \"none\"\n",
    )
    .unwrap();
    let server = Server::start(&["--config", config.to_str().unwrap()]);
    let mut c = connect(&server, "v42-two").await;
    let mut handles = Vec::new();
    for export in ["a", "b"] {
        let (status, r) = c
            .run(vec![
                ArgOp::Putrootfh,
                ArgOp::Lookup(name(export)),
                ArgOp::Open(OpenArgs {
                    seqid: 0,
                    share_access: share::ACCESS_BOTH,
                    share_deny: share::DENY_NONE,
                    owner: StateOwner4 {
                        clientid: 0,
                        owner: Opaque4(Bytes::from_static(b"two")),
                    },
                    openhow: Openflag4::Create(Createhow4::Unchecked(Fattr4::default())),
                    claim: OpenClaim4::Null(name("f")),
                }),
                ArgOp::Write(WriteArgs {
                    stateid: Stateid4::CURRENT,
                    offset: 0,
                    stable: StableHow4::FileSync,
                    data: Bytes::from_static(b"0123456789"),
                }),
                ArgOp::Getfh,
            ])
            .await;
        assert_eq!(status, Nfsstat4::Ok, "{r:?}");
        let ResOp::Getfh(Res4::Ok(fh)) = &r[4] else {
            panic!("{r:?}")
        };
        handles.push(fh.clone());
    }
    let anon = Stateid4::ANONYMOUS;
    let got = c
        .copy((&handles[0], anon), (&handles[1], anon), (0, 0), 5)
        .await;
    assert_eq!(got.err(), Some(Nfsstat4::Xdev));
    let got = c.clone_range(&handles[0], &handles[1], (0, 0), 5).await;
    assert_eq!(got, Nfsstat4::Xdev);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An EROFS image: SEEK answers from the default (all data, the hole at the end), every
/// change is `NFS4ERR_ROFS`. Needs erofs-utils (scripts/test-all.sh installs it).
#[tokio::test]
async fn erofs_export_seeks_and_refuses_changes() {
    let dir = std::env::temp_dir().join(format!("granary-nfs4-v42-erofs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("tree")).unwrap();
    std::fs::write(dir.join("tree/f"), pattern(10_000, 3)).unwrap();
    let image = dir.join("image.erofs");
    let made = std::process::Command::new("mkfs.erofs")
        .arg(&image)
        .arg(dir.join("tree"))
        .output()
        .expect("mkfs.erofs (erofs-utils) runs");
    assert!(made.status.success(), "{made:?}");
    let server = Server::start(&[image.to_str().unwrap()]);
    let mut c = connect(&server, "v42-erofs").await;
    let (status, r) = c
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Lookup(name("f")),
            ArgOp::Getfh,
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let ResOp::Getfh(Res4::Ok(f)) = &r[2] else {
        panic!("{r:?}")
    };
    let at = |sr_offset, sr_eof| Ok(SeekOk { sr_eof, sr_offset });
    assert_eq!(c.seek(f, 100, DataContent4::Data).await, at(100, false));
    assert_eq!(c.seek(f, 100, DataContent4::Hole).await, at(10_000, true));
    assert_eq!(
        c.seek(f, 10_000, DataContent4::Data).await,
        Err(Nfsstat4::Nxio)
    );
    let anon = Stateid4::ANONYMOUS;
    for op in [
        ArgOp::Allocate(space(anon, 0, 1)),
        ArgOp::Deallocate(space(anon, 0, 1)),
    ] {
        assert_eq!(c.status(f, vec![op]).await, Nfsstat4::Rofs);
    }
    let got = c.copy((f, anon), (f, anon), (0, 5000), 100).await;
    assert_eq!(got.err(), Some(Nfsstat4::Rofs));
    assert_eq!(c.clone_range(f, f, (0, 5000), 100).await, Nfsstat4::Rofs);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

fn owned(owner: Option<&str>, group: Option<&str>) -> Fattr4 {
    Fattr {
        owner: owner.map(|o| Utf8Str(Bytes::from(o.to_string()))),
        owner_group: group.map(|g| Utf8Str(Bytes::from(g.to_string()))),
        ..Fattr::default()
    }
    .to_fattr4()
}

fn text(u: &Option<Utf8Str>) -> String {
    String::from_utf8_lossy(u.as_ref().expect("an owner").as_bytes()).into_owned()
}

/// Owners as names (issue 27): with `--idmap-domain` the server sends `name@domain` for
/// ids this host names and numbers for the others, and takes both in SETATTR, OPEN's
/// create attributes and VERIFY; names it cannot map are `NFS4ERR_BADOWNER`. (Without
/// the option owners are numbers: `nfs4.rs` checks the root's "0".)
#[tokio::test]
async fn owners_are_names_with_an_idmap_domain() {
    let server = Server::start(&["--squash", "none", "--idmap-domain", "test.invalid"]);
    let mut c = connect(&server, "v42-owners").await;
    let (_, r) = c.run(vec![ArgOp::Putrootfh, ArgOp::Getfh]).await;
    let ResOp::Getfh(Res4::Ok(root)) = &r[1] else {
        panic!("{r:?}")
    };
    let f = c.attrs(root, &[num::OWNER, num::OWNER_GROUP]).await;
    assert_eq!(text(&f.owner), "root@test.invalid");
    assert_eq!(text(&f.owner_group), "root@test.invalid");
    let verify = |a: Fattr4| vec![ArgOp::Putfh(root.clone()), ArgOp::Verify(a)];
    let (st, _) = c.run(verify(owned(Some("root@test.invalid"), None))).await;
    assert_eq!(st, Nfsstat4::Ok, "VERIFY by name");

    // OPEN(CREATE) with an owner by name.
    let (status, r) = c
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Open(OpenArgs {
                seqid: 0,
                share_access: share::ACCESS_BOTH,
                share_deny: share::DENY_NONE,
                owner: StateOwner4 {
                    clientid: 0,
                    owner: Opaque4(Bytes::from_static(b"owners")),
                },
                openhow: Openflag4::Create(Createhow4::Unchecked(owned(
                    Some("nobody@test.invalid"),
                    Some("nogroup@test.invalid"),
                ))),
                claim: OpenClaim4::Null(name("theirs")),
            }),
            ArgOp::Getfh,
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let ResOp::Getfh(Res4::Ok(fh)) = &r[2] else {
        panic!("{r:?}")
    };
    let f = c.attrs(fh, &[num::OWNER, num::OWNER_GROUP]).await;
    assert_eq!(
        (text(&f.owner), text(&f.owner_group)),
        ("nobody@test.invalid".into(), "nogroup@test.invalid".into())
    );
    // SETATTR by number (an id this host does not name comes back as its number), and
    // names it cannot map.
    let setattr = |a: Fattr4| {
        vec![ArgOp::Setattr(SetattrArgs {
            stateid: Stateid4::ANONYMOUS,
            obj_attributes: a,
        })]
    };
    let st = c
        .status(fh, setattr(owned(Some("3999999999"), Some("0"))))
        .await;
    assert_eq!(st, Nfsstat4::Ok);
    let f = c.attrs(fh, &[num::OWNER, num::OWNER_GROUP]).await;
    assert_eq!(
        (text(&f.owner), text(&f.owner_group)),
        ("3999999999".into(), "root@test.invalid".into())
    );
    for bad in [
        owned(Some("no-such-user-here@test.invalid"), None),
        owned(Some("root@another.invalid"), None),
        owned(Some("root"), None),
        owned(None, Some("no-such-group-here@test.invalid")),
    ] {
        assert_eq!(c.status(fh, setattr(bad)).await, Nfsstat4::Badowner);
    }
    let f = c.attrs(fh, &[num::OWNER]).await;
    assert_eq!(text(&f.owner), "3999999999", "nothing changed");
}

fn scrape_pool_calls(port: u16) -> f64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to metrics");
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let prefix = "granary_blocking_pool_calls_total";
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sample {prefix} in:\n{text}"))
}

/// On a server with a host export, each COMPOUND holding SEEK, ALLOCATE, DEALLOCATE or
/// COPY runs on the worker's blocking pool (their syscalls may sleep on the disk); on a
/// server of mem exports only, none does.
#[tokio::test]
async fn v42_compounds_run_on_the_blocking_pool_where_the_backend_may_block() {
    let base = std::env::temp_dir().join(format!("granary-nfs4-v42-pool-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("export")).unwrap();
    let (export, state) = (base.join("export"), base.join("state"));
    for host in [true, false] {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let metrics = format!("127.0.0.1:{port}");
        let mut args = vec!["--squash", "none", "--metrics", &metrics];
        let dirs = [
            export.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ];
        if host {
            args.extend(dirs);
        }
        let server = Server::start(&args);
        let mut c = connect(&server, "v42-pool").await;
        let (fh, sid) = c.open("pooled", share::ACCESS_BOTH).await;
        let anon = Stateid4::ANONYMOUS;
        let ops = [
            ArgOp::Allocate(space(sid, 0, 8192)),
            ArgOp::Seek(SeekArgs {
                sa_stateid: anon,
                sa_offset: 0,
                sa_what: DataContent4::Hole,
            }),
            ArgOp::Deallocate(space(sid, 0, 4096)),
        ];
        let before = scrape_pool_calls(port);
        for op in ops {
            assert_eq!(
                c.status(&fh, vec![op.clone()]).await,
                Nfsstat4::Ok,
                "{op:?}"
            );
        }
        let copied = c.copy((&fh, anon), (&fh, anon), (0, 4096), 4096).await;
        assert_eq!(copied.map(|o| o.cr_response.wr_count), Ok(4096));
        // A pool thread counts its call after it answered: wait for the count to settle.
        let want = if host { 4.0 } else { 0.0 };
        let mut ran = 0.0;
        for _ in 0..50 {
            ran = scrape_pool_calls(port) - before;
            if ran >= want {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        ran = ran.max(scrape_pool_calls(port) - before);
        assert_eq!(ran, want, "COMPOUNDs run on the pool, host export {host}");
        drop(server);
    }
    let _ = std::fs::remove_dir_all(&base);
}
