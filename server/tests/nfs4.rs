//! NFSv4.1/4.2 of the real `granary` binary, through whole COMPOUNDs sent by granary's own
//! RPC client and compared against RFC 8881: the session handshake, the operations a
//! Linux client sends to mount, create, write, read, list, rename and remove, the slot
//! reply cache (a retransmission is replayed byte for byte, never run again), share
//! reservations between two clients, the session rules and hostile requests.

mod common;

use bytes::Bytes;
use client::{auth_sys, RpcConnection};
use common::v4::{call, channel, name, open_create, Setup, PROGRAM, V4};
use common::{HostDirs, Server};
use nfs4::attr::{num, Fattr};
use nfs4::ops::*;
use nfs4::results::*;
use nfs4::types::*;
use nfs4::{Compound4Args, Compound4Res, Nfsstat4, Stateid4};
use xdr::Encode;

/// Arguments already encoded by the test.
struct Raw(Bytes);

impl xdr::Encode for Raw {
    fn encode(&self, e: &mut xdr::Encoder) {
        e.fixed_opaque(&self.0);
    }
}

/// Creates `file` at the root with an OPEN of `owner`, writes `data` to it FILE_SYNC and
/// gives its filehandle.
async fn create_written(c: &mut V4, owner: &str, file: &str, data: &Bytes) -> NfsFh4 {
    let (status, r) = c
        .run(vec![
            ArgOp::Putrootfh,
            open_create(owner, file, share::ACCESS_BOTH, share::DENY_NONE),
            ArgOp::Write(WriteArgs {
                stateid: Stateid4::CURRENT,
                offset: 0,
                stable: StableHow4::FileSync,
                data: data.clone(),
            }),
            ArgOp::Getfh,
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let ResOp::Getfh(Res4::Ok(fh)) = &r[3] else {
        panic!("GETFH: {r:?}")
    };
    fh.clone()
}

/// A READ with the anonymous stateid.
fn read(offset: u64, count: u32) -> ArgOp {
    ArgOp::Read(ReadArgs {
        stateid: Stateid4::ANONYMOUS,
        offset,
        count,
    })
}

fn mask(bits: &[u32]) -> Bitmap4 {
    Bitmap4::from_bits(bits)
}

fn attrs(r: &ResOp) -> Fattr {
    let ResOp::Getattr(Res4::Ok(f)) = r else {
        panic!("GETATTR: {r:?}")
    };
    Fattr::from_fattr4(f).expect("attributes granary sends unpack")
}

fn opened(r: &ResOp) -> Stateid4 {
    let ResOp::Open(Res4::Ok(o)) = r else {
        panic!("OPEN: {r:?}")
    };
    o.stateid
}

#[tokio::test]
async fn mount_create_write_read_list_rename_remove() {
    let server = Server::start(&[]);
    let mut c = V4::connect(&server, "client-a").await;
    let want = mask(&[
        num::TYPE,
        num::CHANGE,
        num::SIZE,
        num::FSID,
        num::FILEID,
        num::MODE,
        num::OWNER,
        num::SUPPORTED_ATTRS,
    ]);
    let (status, r) = c
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Getfh,
            ArgOp::Getattr(want.clone()),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok);
    let root = attrs(&r[2]);
    assert_eq!(root.ftype, Some(NfsFtype4::Dir));
    assert_eq!(
        root.owner.as_ref().map(|o| o.0.clone()),
        Some(Bytes::from_static(b"0"))
    );
    assert!(root.supported_attrs.unwrap().contains(num::CHANGE));

    // OPEN(CREATE) + WRITE(FILE_SYNC) + GETATTR in one COMPOUND, on the current stateid.
    let data = Bytes::from_static(b"hello, nfsv4");
    let (status, r) = c
        .run(vec![
            ArgOp::Putrootfh,
            open_create("o1", "f", share::ACCESS_BOTH, share::DENY_NONE),
            ArgOp::Getfh,
            ArgOp::Write(WriteArgs {
                stateid: Stateid4::CURRENT,
                offset: 0,
                stable: StableHow4::FileSync,
                data: data.clone(),
            }),
            ArgOp::Getattr(mask(&[num::SIZE, num::CHANGE])),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let sid = opened(&r[1]);
    assert_eq!(sid.seqid, 1);
    let ResOp::Getfh(Res4::Ok(fh)) = &r[2] else {
        panic!()
    };
    let ResOp::Write(Res4::Ok(w)) = &r[3] else {
        panic!()
    };
    assert_eq!(
        (w.count, w.committed),
        (data.len() as u32, StableHow4::FileSync)
    );
    assert_eq!(attrs(&r[4]).size, Some(data.len() as u64));

    let (status, r) = c
        .run(vec![
            ArgOp::Putfh(fh.clone()),
            ArgOp::Read(ReadArgs {
                stateid: sid,
                offset: 0,
                count: 100,
            }),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok);
    let ResOp::Read(Res4::Ok(read)) = &r[1] else {
        panic!()
    };
    assert_eq!((read.data.clone(), read.eof), (data.clone(), true));

    // CLOSE and OPEN_DOWNGRADE act on the current file: a stateid of another file is
    // NFS4ERR_BAD_STATEID, no filehandle NFS4ERR_NOFILEHANDLE, and the open stays.
    let close = ArgOp::Close(CloseArgs {
        seqid: 0,
        open_stateid: sid,
    });
    let downgrade = ArgOp::OpenDowngrade(OpenDowngradeArgs {
        open_stateid: sid,
        seqid: 0,
        share_access: share::ACCESS_READ,
        share_deny: share::DENY_NONE,
    });
    for op in [close.clone(), downgrade] {
        let (status, _) = c.run(vec![ArgOp::Putrootfh, op.clone()]).await;
        assert_eq!(status, Nfsstat4::BadStateid, "{op:?} from the root");
        let (status, _) = c.run(vec![op.clone()]).await;
        assert_eq!(
            status,
            Nfsstat4::Nofilehandle,
            "{op:?} without a filehandle"
        );
    }
    let (status, _) = c
        .run(vec![
            ArgOp::Putfh(fh.clone()),
            ArgOp::Read(ReadArgs {
                stateid: sid,
                offset: 0,
                count: 1,
            }),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "the open stayed");

    // CLOSE answers the invalid stateid; the closed one is then refused.
    let (_, r) = c
        .run(vec![
            ArgOp::Putfh(fh.clone()),
            ArgOp::Close(CloseArgs {
                seqid: 0,
                open_stateid: sid,
            }),
        ])
        .await;
    assert_eq!(r[1], ResOp::Close(Res4::Ok(Stateid4::INVALID)));
    let (status, _) = c
        .run(vec![
            ArgOp::Putfh(fh.clone()),
            ArgOp::Read(ReadArgs {
                stateid: sid,
                offset: 0,
                count: 1,
            }),
        ])
        .await;
    assert_eq!(status, Nfsstat4::BadStateid);

    // A directory, a listing (no . or .., no reserved cookies), a rename, a remove.
    let (status, _) = c
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Create(CreateArgs {
                objtype: Createtype4::Dir,
                objname: name("d"),
                createattrs: Fattr4::default(),
            }),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok);
    let readdir = ArgOp::Readdir(ReaddirArgs {
        cookie: 0,
        cookieverf: [0; 8],
        dircount: 8192,
        maxcount: 32768,
        attr_request: mask(&[num::TYPE, num::FILEID]),
    });
    let (_, r) = c.run(vec![ArgOp::Putrootfh, readdir.clone()]).await;
    let ResOp::Readdir(Res4::Ok(list)) = &r[1] else {
        panic!("{r:?}")
    };
    let mut names: Vec<_> = list.entries.iter().map(|e| e.name.0.clone()).collect();
    names.sort();
    assert_eq!(
        names,
        vec![Bytes::from_static(b"d"), Bytes::from_static(b"f")]
    );
    assert!(list.eof);
    assert!(
        list.entries.iter().all(|e| e.cookie > 2),
        "cookies 0, 1 and 2 are reserved"
    );
    let (status, r) = c
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Savefh,
            ArgOp::Lookup(name("d")),
            ArgOp::Rename(RenameArgs {
                oldname: name("f"),
                newname: name("g"),
            }),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let ResOp::Rename(Res4::Ok(rn)) = &r[3] else {
        panic!()
    };
    assert!(
        rn.source_cinfo.after != rn.source_cinfo.before,
        "the change attribute moved"
    );
    let (status, _) = c
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Lookup(name("d")),
            ArgOp::Lookup(name("g")),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok);
    let (status, r) = c
        .run(vec![ArgOp::Putrootfh, ArgOp::Remove(name("d"))])
        .await;
    assert_eq!(status, Nfsstat4::Notempty, "{r:?}");
    let (status, _) = c
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Lookup(name("d")),
            ArgOp::Remove(name("g")),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok);
    let (status, _) = c
        .run(vec![ArgOp::Putrootfh, ArgOp::Remove(name("d"))])
        .await;
    assert_eq!(status, Nfsstat4::Ok);
    // The handle of the removed file is stale now.
    let (status, _) = c
        .run(vec![
            ArgOp::Putfh(fh.clone()),
            ArgOp::Getattr(mask(&[num::SIZE])),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Stale);
}

#[tokio::test]
async fn a_retransmission_is_replayed_byte_for_byte_and_not_run_again() {
    let server = Server::start(&[]);
    let mut c = V4::connect(&server, "client-r").await;
    let seq = c.sequence(true);
    let args = Compound4Args::new(
        2,
        vec![
            seq,
            ArgOp::Putrootfh,
            ArgOp::Create(CreateArgs {
                objtype: Createtype4::Dir,
                objname: name("once"),
                createattrs: Fattr4::default(),
            }),
        ],
    );
    let first = c.conn.call(PROGRAM, 4, 1, &args).await.expect("first");
    let again = c
        .conn
        .call(PROGRAM, 4, 1, &args)
        .await
        .expect("retransmission");
    assert_eq!(
        first, again,
        "the slot's kept reply, not a second CREATE (which would be EXIST)"
    );
    let res = <Compound4Res as xdr::Decode>::from_xdr(first).expect("a COMPOUND reply");
    assert_eq!(res.status, Nfsstat4::Ok);
    // The next seqid runs again: now the name exists.
    let (status, _) = c
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Create(CreateArgs {
                objtype: Createtype4::Dir,
                objname: name("once"),
                createattrs: Fattr4::default(),
            }),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Exist);
    // An old seqid is misordered; a reply not kept is RETRY_UNCACHED_REP.
    c.seqid += 1;
    let uncached = Compound4Args::new(
        2,
        vec![
            ArgOp::Sequence(SequenceArgs {
                sa_sessionid: c.session,
                sa_sequenceid: c.seqid,
                sa_slotid: 0,
                sa_highest_slotid: 0,
                sa_cachethis: false,
            }),
            ArgOp::Putrootfh,
        ],
    );
    assert_eq!(call(&c.conn, &uncached).await.status, Nfsstat4::Ok);
    assert_eq!(
        call(&c.conn, &uncached).await.status,
        Nfsstat4::RetryUncachedRep
    );
    let mut old = uncached.clone();
    if let ArgOp::Sequence(s) = &mut old.ops[0] {
        s.sa_sequenceid -= 2;
    }
    assert_eq!(call(&c.conn, &old).await.status, Nfsstat4::SeqMisordered);
}

#[tokio::test]
async fn share_reservations_hold_between_two_clients() {
    let server = Server::start(&[]);
    let mut a = V4::connect(&server, "client-a").await;
    let mut b = V4::connect(&server, "client-b").await;
    let (status, _) = a
        .run(vec![
            ArgOp::Putrootfh,
            open_create("oa", "shared", share::ACCESS_READ, share::DENY_WRITE),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok);
    let (status, _) = b
        .run(vec![
            ArgOp::Putrootfh,
            open_create("ob", "shared", share::ACCESS_WRITE, share::DENY_NONE),
        ])
        .await;
    assert_eq!(status, Nfsstat4::ShareDenied);
    let (status, r) = b
        .run(vec![
            ArgOp::Putrootfh,
            open_create("ob", "shared", share::ACCESS_READ, share::DENY_NONE),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok);
    // B's read-only open may not write.
    let sid = opened(&r[1]);
    let (status, _) = b
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Lookup(name("shared")),
            ArgOp::Write(WriteArgs {
                stateid: sid,
                offset: 0,
                stable: StableHow4::Unstable,
                data: Bytes::from_static(b"x"),
            }),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Openmode);
    // Another client's stateid is not B's.
    let (status, _) = a
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Lookup(name("shared")),
            ArgOp::Read(ReadArgs {
                stateid: sid,
                offset: 0,
                count: 1,
            }),
        ])
        .await;
    assert_eq!(status, Nfsstat4::BadStateid);
}

#[tokio::test]
async fn session_rules_and_hostile_requests() {
    let server = Server::start(&[]);
    let mut c = V4::connect(&server, "client-h").await;
    let conn = c.conn.clone();
    let conn = &conn;
    // No SEQUENCE first.
    let res = call(
        conn,
        &Compound4Args::new(1, vec![ArgOp::Putrootfh, ArgOp::Getfh]),
    )
    .await;
    assert_eq!(
        (res.status, res.results.len()),
        (Nfsstat4::OpNotInSession, 1)
    );
    // Minor version 0 and 3 are not served.
    for minor in [0, 3] {
        let res = call(conn, &Compound4Args::new(minor, vec![ArgOp::Putrootfh])).await;
        assert_eq!(
            (res.status, res.results.len()),
            (Nfsstat4::MinorVersMismatch, 0)
        );
    }
    // EXCHANGE_ID must be alone when it opens a COMPOUND.
    let eid = ArgOp::ExchangeId(ExchangeIdArgs {
        eia_clientowner: ClientOwner4 {
            co_verifier: [1; 8],
            co_ownerid: Opaque4(Bytes::from_static(b"x")),
        },
        eia_flags: 0,
        eia_state_protect: StateProtect4A::None,
        eia_client_impl_id: AtMostOne(None),
    });
    let res = call(conn, &Compound4Args::new(1, vec![eid, ArgOp::Putrootfh])).await;
    assert_eq!(res.status, Nfsstat4::NotOnlyOp);
    // An EXCHANGE_ID whose eia_client_impl_id<1> holds two entries does not decode:
    // NFS4ERR_BADXDR for it, not an empty success.
    let mut e = xdr::Encoder::new();
    Tag4::default().encode(&mut e);
    e.u32(1);
    e.u32(1);
    e.u32(opnum::EXCHANGE_ID);
    e.fixed_opaque(&[1; 8]);
    e.opaque(b"raw-client");
    e.u32(0); // flags
    e.u32(0); // SP4_NONE
    e.u32(2); // two implementation ids where at most one may be
    let res: Compound4Res = conn
        .call_decode(PROGRAM, 4, 1, &Raw(e.into_bytes()))
        .await
        .expect("COMPOUND");
    assert_eq!(res.status, Nfsstat4::Badxdr);
    assert_eq!(
        res.results,
        vec![ResOp::ExchangeId(Res4::Err(Nfsstat4::Badxdr))]
    );
    // SEQUENCE anywhere but first; a forged handle; no current filehandle; locks (not
    // yet implemented) and an unimplemented operation end the COMPOUND.
    let (status, r) = c
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Sequence(SequenceArgs {
                sa_sessionid: [0; 16],
                sa_sequenceid: 1,
                sa_slotid: 0,
                sa_highest_slotid: 0,
                sa_cachethis: false,
            }),
        ])
        .await;
    assert_eq!((status, r.len()), (Nfsstat4::SequencePos, 2));
    let (status, _) = c
        .run(vec![
            ArgOp::Putfh(NfsFh4(Bytes::from_static(&[0xAB; 32]))),
            ArgOp::Getfh,
        ])
        .await;
    assert_eq!(status, Nfsstat4::Badhandle);
    let (status, _) = c.run(vec![ArgOp::Getfh]).await;
    assert_eq!(status, Nfsstat4::Nofilehandle);
    let (status, r) = c
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::NotSupported(opnum::LAYOUTGET),
        ])
        .await;
    assert_eq!((status, r.len()), (Nfsstat4::Notsupp, 2));
    // A bad session id.
    let bad = Compound4Args::new(
        1,
        vec![ArgOp::Sequence(SequenceArgs {
            sa_sessionid: [9; 16],
            sa_sequenceid: 1,
            sa_slotid: 0,
            sa_highest_slotid: 0,
            sa_cachethis: false,
        })],
    );
    assert_eq!(call(conn, &bad).await.status, Nfsstat4::Badsession);
    // A slot the session does not have.
    let bad = Compound4Args::new(
        1,
        vec![ArgOp::Sequence(SequenceArgs {
            sa_sessionid: c.session,
            sa_sequenceid: 1,
            sa_slotid: 500,
            sa_highest_slotid: 500,
            sa_cachethis: false,
        })],
    );
    assert_eq!(call(&c.conn, &bad).await.status, Nfsstat4::Badslot);
    // DESTROY_CLIENTID of a client with a session is refused; after DESTROY_SESSION it works.
    let res = call(
        &c.conn,
        &Compound4Args::new(1, vec![ArgOp::DestroyClientid(c.clientid)]),
    )
    .await;
    assert_eq!(res.status, Nfsstat4::ClientidBusy);
    let res = call(
        &c.conn,
        &Compound4Args::new(1, vec![ArgOp::DestroySession(c.session)]),
    )
    .await;
    assert_eq!(res.status, Nfsstat4::Ok);
    let res = call(
        &c.conn,
        &Compound4Args::new(1, vec![ArgOp::DestroyClientid(c.clientid)]),
    )
    .await;
    assert_eq!(res.status, Nfsstat4::Ok);
}

#[tokio::test]
async fn v3_and_v4_share_handles() {
    let server = Server::start(&[]);
    let mut c = V4::connect(&server, "client-s").await;
    let (_, r) = c
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Create(CreateArgs {
                objtype: Createtype4::Dir,
                objname: name("both"),
                createattrs: Fattr4::default(),
            }),
            ArgOp::Getfh,
        ])
        .await;
    let ResOp::Getfh(Res4::Ok(fh4)) = &r[2] else {
        panic!("{r:?}")
    };
    let v3 = common::nfs::connect(&server).await;
    let root = v3.mount("/").await.expect("MNT");
    let found = v3
        .lookup(&nfs3::nfs::LookupArgs {
            what: common::nfs::dirop(&root, "both"),
        })
        .await
        .expect("LOOKUP");
    let nfs3::nfs::Res3::Ok(ok) = found else {
        panic!("{found:?}")
    };
    assert_eq!(
        ok.object.0, fh4.0,
        "one core: the same handle in both versions"
    );
}

/// granary's own client (the bench's) connecting twice as one owner from one process gets
/// the same client id, confirmed once: the second RECLAIM_COMPLETE answers
/// NFS4ERR_COMPLETE_ALREADY, which the client takes as done, and both sessions work.
#[tokio::test]
async fn the_clients_second_session_as_one_owner_is_ready() {
    let server = Server::start(&[]);
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let conn = RpcConnection::connect(server.addr).await.expect("connect");
        sessions.push(
            client::v4::Nfs4Session::connect(conn, b"bench-owner", 2)
                .await
                .expect("EXCHANGE_ID, CREATE_SESSION, RECLAIM_COMPLETE"),
        );
    }
    assert_eq!(sessions[0].clientid, sessions[1].clientid, "one client id");
    for s in &sessions {
        let (status, r) = s
            .compound(1, vec![ArgOp::Putrootfh, ArgOp::Getfh])
            .await
            .expect("SEQUENCE");
        assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    }
}

/// A host export: OPEN(CREATE) + FILE_SYNC WRITE + COMMIT + READ in COMPOUNDs that the
/// event loop may not run (they sync or may read from the disk) go to the worker's
/// blocking pool before anything runs, and the bytes reach the host file.
#[tokio::test]
async fn host_export_io_runs_whole_compounds_on_the_blocking_pool() {
    let dirs = HostDirs::new("nfs4-host");
    let export = dirs.export();
    let server = dirs.serve();
    let mut c = V4::connect(&server, "client-host").await;
    // A READ reply is not asked to be kept (as Linux asks): it is larger than the cache.
    c.cachethis = false;
    let data = Bytes::from(vec![0x5a; 100_000]);
    let (status, r) = c
        .run(vec![
            ArgOp::Putrootfh,
            open_create("oh", "synced", share::ACCESS_BOTH, share::DENY_NONE),
            ArgOp::Write(WriteArgs {
                stateid: Stateid4::CURRENT,
                offset: 0,
                stable: StableHow4::FileSync,
                data: data.clone(),
            }),
            ArgOp::Commit(CommitArgs {
                offset: 0,
                count: 0,
            }),
            ArgOp::Read(ReadArgs {
                stateid: Stateid4::CURRENT,
                offset: 0,
                count: 200_000,
            }),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let ResOp::Write(Res4::Ok(w)) = &r[2] else {
        panic!()
    };
    assert_eq!(w.committed, StableHow4::FileSync);
    let ResOp::Read(Res4::Ok(read)) = &r[4] else {
        panic!()
    };
    assert_eq!(read.data, data);
    assert_eq!(std::fs::read(export.join("synced")).unwrap(), data.to_vec());
}

/// Drops the page cache's pages of `file` (written FILE_SYNC, so clean): GNU dd's
/// `iflag=nocache count=0` advises the kernel to drop the whole file.
fn evict(file: &std::path::Path) {
    let st = std::process::Command::new("dd")
        .arg(format!("if={}", file.display()))
        .args(["iflag=nocache", "count=0", "status=none"])
        .status()
        .expect("run dd");
    assert!(st.success(), "dd iflag=nocache: {st}");
}

/// A host export on a disk: the Linux client's READ COMPOUND (SEQUENCE, PUTFH, READ) is
/// answered on the network worker when the page cache holds its range, and otherwise
/// gives its slot back and runs again on the blocking pool: the bytes are right either
/// way, the slot's next request runs, and each READ is counted once.
#[tokio::test]
async fn a_host_read_compound_runs_on_the_worker_when_the_page_cache_holds_it() {
    let port = common::metrics::free_port();
    let metrics = format!("127.0.0.1:{port}");
    let dirs = HostDirs::new("nfs4-worker-read");
    let export = dirs.export();
    let server = dirs.serve_with(&["--metrics", &metrics]);
    let mut c = V4::connect(&server, "client-worker-read").await;
    c.cachethis = false;
    let data: Bytes = (0..256u32 << 10).map(|i| (i % 251) as u8).collect();
    let fh = create_written(&mut c, "owr", "cached", &data).await;
    let mut reads = 0;
    let mut read_all = async |c: &mut V4| {
        reads += 1;
        let (status, r) = c
            .run(vec![ArgOp::Putfh(fh.clone()), read(0, 256 << 10)])
            .await;
        assert_eq!(status, Nfsstat4::Ok, "{r:?}");
        let ResOp::Read(Res4::Ok(got)) = &r[1] else {
            panic!("READ: {r:?}")
        };
        assert_eq!(got.data, data, "READ {reads}");
        assert!(got.eof);
    };
    let worker_reads = |outcome: &str| {
        let text = common::metrics::scrape(port);
        common::metrics::sample(
            &text,
            &format!(r#"granary_nfs4_worker_reads_total{{outcome="{outcome}"}}"#),
        )
    };
    // Just written: cached, answered where it arrived.
    read_all(&mut c).await;
    assert_eq!(worker_reads("answered"), 1.0);
    assert_eq!(worker_reads("deferred"), 0.0);
    // Evicted: the read gives up (the kernel's readahead may win the race now and then,
    // as backend-host's blocking test explains), and runs again where it may block.
    for _ in 0..20 {
        evict(&export.join("cached"));
        read_all(&mut c).await;
    }
    assert!(
        worker_reads("deferred") > 0.0,
        "no evicted read was deferred"
    );
    assert_eq!(worker_reads("answered") + worker_reads("deferred"), 21.0);
    // Each READ and SEQUENCE is counted once, deferred or not (besides the READs' 21,
    // the COMPOUNDs of RECLAIM_COMPLETE and of the create had a SEQUENCE each).
    let text = common::metrics::scrape(port);
    let sample = |p: &str| common::metrics::sample(&text, p);
    assert_eq!(sample(r#"granary_nfs4_operations_total{op="read"}"#), 21.0);
    assert_eq!(
        sample(r#"granary_nfs4_operations_total{op="sequence"}"#),
        23.0
    );
    // A COMPOUND with more than reads in it still goes to the pool up front.
    let (status, r) = c
        .run(vec![
            ArgOp::Putfh(fh.clone()),
            ArgOp::Commit(CommitArgs {
                offset: 0,
                count: 0,
            }),
            read(0, 16),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    assert_eq!(worker_reads("answered") + worker_reads("deferred"), 21.0);
}

/// The Linux client's O_DIRECT WRITE (SEQUENCE, PUTFH, FILE_SYNC WRITE, GETATTR) and its
/// COMMIT (SEQUENCE, PUTFH, COMMIT) on a host export: answered on the network worker when
/// the export is memory-backed (tmpfs: its sync has nothing to write back), sent to the
/// blocking pool when it is on a disk; FILE_SYNC either way, the bytes read back over
/// NFSv4 and from the host file, and every COMPOUND counted once.
#[tokio::test]
async fn a_syncing_write_runs_on_the_worker_only_on_a_memory_backed_export() {
    for tmpfs in [true, false] {
        let port = common::metrics::free_port();
        let metrics = format!("127.0.0.1:{port}");
        let dirs = if tmpfs {
            HostDirs::on_tmpfs("nfs4-worker-write")
        } else {
            HostDirs::new("nfs4-worker-write")
        };
        let export = dirs.export();
        let server = dirs.serve_with(&["--metrics", &metrics]);
        let mut c = V4::connect(&server, "client-worker-write").await;
        c.cachethis = false;
        let fh = create_written(&mut c, "oww", "w", &Bytes::from_static(b"0123456789")).await;
        let worker_writes = |outcome: &str| {
            let text = common::metrics::scrape(port);
            common::metrics::sample(
                &text,
                &format!(r#"granary_nfs4_worker_writes_total{{outcome="{outcome}"}}"#),
            )
        };
        let (here, pool) = (worker_writes("answered"), worker_writes("deferred"));
        assert_eq!((here, pool), (0.0, 0.0), "the OPEN's COMPOUND is not tried");
        for (i, stable) in [StableHow4::FileSync, StableHow4::DataSync]
            .into_iter()
            .enumerate()
        {
            let (status, r) = c
                .run(vec![
                    ArgOp::Putfh(fh.clone()),
                    ArgOp::Write(WriteArgs {
                        stateid: Stateid4::ANONYMOUS,
                        offset: 2 + 3 * i as u64,
                        stable,
                        data: Bytes::from_static(b"abc"),
                    }),
                    ArgOp::Getattr(mask(&[num::SIZE, num::CHANGE])),
                ])
                .await;
            assert_eq!(status, Nfsstat4::Ok, "tmpfs {tmpfs}: {r:?}");
            let ResOp::Write(Res4::Ok(w)) = &r[1] else {
                panic!("WRITE: {r:?}")
            };
            assert_eq!((w.count, w.committed), (3, stable), "tmpfs {tmpfs}");
            let ResOp::Getattr(Res4::Ok(_)) = &r[2] else {
                panic!("GETATTR: {r:?}")
            };
        }
        let (status, r) = c
            .run(vec![
                ArgOp::Putfh(fh.clone()),
                ArgOp::Commit(CommitArgs {
                    offset: 0,
                    count: 0,
                }),
            ])
            .await;
        assert_eq!(status, Nfsstat4::Ok, "tmpfs {tmpfs}: {r:?}");
        let (status, r) = c.run(vec![ArgOp::Putfh(fh.clone()), read(0, 64)]).await;
        assert_eq!(status, Nfsstat4::Ok, "{r:?}");
        let ResOp::Read(Res4::Ok(got)) = &r[1] else {
            panic!("READ: {r:?}")
        };
        assert_eq!(&got.data[..], b"01abcabc89", "tmpfs {tmpfs}");
        assert_eq!(std::fs::read(export.join("w")).unwrap(), b"01abcabc89");
        // Two WRITEs and a COMMIT: on the worker (tmpfs), or each sent to the pool.
        let want = if tmpfs { (3.0, 0.0) } else { (0.0, 3.0) };
        assert_eq!(
            (worker_writes("answered"), worker_writes("deferred")),
            want,
            "tmpfs {tmpfs}"
        );
        let text = common::metrics::scrape(port);
        let sample = |p: &str| common::metrics::sample(&text, p);
        assert_eq!(
            sample(r#"granary_nfs4_operations_total{op="write"}"#),
            3.0,
            "tmpfs {tmpfs}: the create's WRITE and two more, each counted once"
        );
        assert_eq!(sample(r#"granary_nfs4_operations_total{op="commit"}"#), 1.0);
        drop(c);
        drop(server);
    }
}

/// A call the server sent on a back channel: its xid, program, version, procedure,
/// credential, and a decoder at its arguments.
struct CbCall {
    xid: u32,
    program: u32,
    version: u32,
    procedure: u32,
    cred: rpc::msg::OpaqueAuth,
    args: xdr::Decoder,
}

async fn next_call(calls: &mut tokio::sync::mpsc::UnboundedReceiver<Bytes>) -> CbCall {
    let body = tokio::time::timeout(std::time::Duration::from_secs(10), calls.recv())
        .await
        .expect("the server calls back within 10 s")
        .expect("the connection lives");
    let mut d = xdr::Decoder::new(body);
    let mut word = || d.u32().expect("call header word");
    let (xid, mtype, rpcvers) = (word(), word(), word());
    assert_eq!((mtype, rpcvers), (0, 2), "an RPC version 2 CALL");
    let (program, version, procedure) = (word(), word(), word());
    let cred: rpc::msg::OpaqueAuth = xdr::Decode::decode(&mut d).expect("credential");
    let verf: rpc::msg::OpaqueAuth = xdr::Decode::decode(&mut d).expect("verifier");
    assert_eq!(verf.flavor, 0, "verifier AUTH_NONE");
    CbCall {
        xid,
        program,
        version,
        procedure,
        cred,
        args: d,
    }
}

/// Answers `call` with `stat` and, when it is SUCCESS, `results`.
async fn answer(
    conn: &RpcConnection,
    call: &CbCall,
    stat: rpc::msg::AcceptStat,
    results: &impl xdr::Encode,
) {
    let mut e = xdr::Encoder::new();
    rpc::msg::encode_accepted(&mut e, call.xid, stat);
    if stat == rpc::msg::AcceptStat::Success {
        results.encode(&mut e);
    }
    conn.send_record_body(&e.into_inner())
        .await
        .expect("reply sent");
}

/// Takes a CB_COMPOUND, checks its CB_SEQUENCE names `session` and slot 0 with sequence
/// id `seqid`, and answers it with `status`.
async fn answer_cb_sequence(
    conn: &RpcConnection,
    calls: &mut tokio::sync::mpsc::UnboundedReceiver<Bytes>,
    (session, seqid, program): (Sessionid4, u32, u32),
    status: Nfsstat4,
) {
    use nfs4::compound::{CbArgOp, CbCompound4Args, CbCompound4Res, CbResOp, CbSequenceOk};
    let mut call = next_call(calls).await;
    assert_eq!(
        (call.program, call.version, call.procedure),
        (program, 1, 1),
        "CB_COMPOUND"
    );
    let args: CbCompound4Args = xdr::Decode::decode(&mut call.args).expect("CB_COMPOUND args");
    let [CbArgOp::Sequence(seq)] = &args.ops[..] else {
        panic!("a CB_COMPOUND of CB_SEQUENCE alone: {args:?}")
    };
    assert_eq!(seq.csa_sessionid, session, "the session's back channel");
    assert_eq!((seq.csa_slotid, seq.csa_sequenceid), (0, seqid));
    assert_eq!(seq.csa_highest_slotid, 0, "one back-channel slot granted");
    let ok = CbSequenceOk {
        csr_sessionid: session,
        csr_sequenceid: seqid,
        csr_slotid: 0,
        csr_highest_slotid: 0,
        csr_target_highest_slotid: 0,
    };
    let result = match status {
        Nfsstat4::Ok => Res4::Ok(ok),
        other => Res4::Err(other),
    };
    let res = CbCompound4Res {
        status,
        tag: args.tag.clone(),
        results: vec![CbResOp::Sequence(result)],
    };
    answer(conn, &call, rpc::msg::AcceptStat::Success, &res).await;
}

/// SEQUENCE's status flags (retrying until `want` or 10 s passed, for changes the
/// server makes when it notices something on another connection).
async fn flags_become(v4: &mut V4, want: u32) -> u32 {
    let mut got = 0;
    for _ in 0..100 {
        let seq = v4.sequence(false);
        let res = call(&v4.conn, &Compound4Args::new(1, vec![seq])).await;
        let ResOp::Sequence(Res4::Ok(ok)) = &res.results[0] else {
            panic!("SEQUENCE: {res:?}")
        };
        got = ok.sr_status_flags;
        if got == want {
            return got;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    got
}

#[tokio::test]
async fn back_channel_is_probed_and_sequence_tells_whether_it_works() {
    use seq_status::{CB_PATH_DOWN, CB_PATH_DOWN_SESSION};
    let server = Server::start(&[]);
    let down = CB_PATH_DOWN | CB_PATH_DOWN_SESSION;

    // Client A asks for its creating connection as the back channel, with AUTH_SYS.
    let conn = RpcConnection::connect(server.addr)
        .await
        .expect("connect")
        .with_auth(&auth_sys(0, 0, &[]))
        .with_timeout(std::time::Duration::from_secs(10));
    let mut calls = conn.serve_calls();
    let eid = ArgOp::ExchangeId(ExchangeIdArgs {
        eia_clientowner: ClientOwner4 {
            co_verifier: [1; 8],
            co_ownerid: Opaque4(Bytes::from_static(b"backchannel-a")),
        },
        eia_flags: 0,
        eia_state_protect: StateProtect4A::None,
        eia_client_impl_id: AtMostOne(None),
    });
    let res = call(&conn, &Compound4Args::new(1, vec![eid])).await;
    let ResOp::ExchangeId(Res4::Ok(e)) = &res.results[0] else {
        panic!("EXCHANGE_ID: {res:?}")
    };
    let sys = AuthsysParms {
        stamp: 5,
        machinename: MachineName(Bytes::from_static(b"cbhost")),
        uid: 7,
        gid: 11,
        gids: vec![13],
    };
    let cs = ArgOp::CreateSession(CreateSessionArgs {
        csa_clientid: e.eir_clientid,
        csa_sequence: e.eir_sequenceid,
        csa_flags: session_flags::CONN_BACK_CHAN,
        csa_fore_chan_attrs: channel(1 << 20, 8),
        csa_back_chan_attrs: channel(1 << 20, 8),
        csa_cb_program: 0x4000_0000,
        csa_sec_parms: CallbackSecList(vec![
            CallbackSecParms4::Gss {
                service: 1,
                handle_from_server: SecOid4(Bytes::from_static(b"s")),
                handle_from_client: SecOid4(Bytes::from_static(b"c")),
            },
            CallbackSecParms4::Sys(sys),
        ]),
    });
    let res = call(&conn, &Compound4Args::new(1, vec![cs])).await;
    let ResOp::CreateSession(Res4::Ok(s)) = &res.results[0] else {
        panic!("CREATE_SESSION: {res:?}")
    };
    assert_ne!(
        s.csr_flags & session_flags::CONN_BACK_CHAN,
        0,
        "back channel granted"
    );
    assert_eq!(s.csr_back_chan_attrs.ca_maxrequests, 1, "one back slot");
    let mut a = V4 {
        conn: conn.clone(),
        clientid: e.eir_clientid,
        session: s.csr_sessionid,
        seqid: 0,
        minor: 2,
        cachethis: true,
    };

    // The probe: CB_NULL with the first usable credential (AUTH_SYS, not GSS).
    let probe = next_call(&mut calls).await;
    assert_eq!(
        (probe.program, probe.version, probe.procedure),
        (0x4000_0000, 1, 0),
        "CB_NULL"
    );
    assert_eq!(probe.cred.flavor, 1, "AUTH_SYS");
    let cred: rpc::AuthSys = xdr::Decode::decode(&mut xdr::Decoder::new(probe.cred.body.clone()))
        .expect("AUTH_SYS body");
    assert_eq!((cred.uid, cred.gid, &cred.gids[..]), (7, 11, &[13][..]));
    // While it is in flight, SEQUENCE reports nothing (the client is not told to rebind).
    assert_eq!(flags_become(&mut a, 0).await, 0);
    answer(
        &conn,
        &probe,
        rpc::msg::AcceptStat::Success,
        &Raw(Bytes::new()),
    )
    .await;
    // As Linux does while it sets the new session up: NFS4ERR_DELAY. The same request
    // comes again on the same slot with the same sequence id.
    let first = (a.session, 1, 0x4000_0000);
    answer_cb_sequence(&conn, &mut calls, first, Nfsstat4::Delay).await;
    answer_cb_sequence(&conn, &mut calls, first, Nfsstat4::Ok).await;
    assert_eq!(flags_become(&mut a, 0).await, 0, "a working back channel");

    // Client B makes its session without a back channel: SEQUENCE says so.
    let mut b = V4::connect(&server, "backchannel-b").await;
    assert_eq!(flags_become(&mut b, down).await, down, "no back channel");

    // B binds a second connection for both directions; its probe is refused.
    let conn2 = RpcConnection::connect(server.addr)
        .await
        .expect("connect")
        .with_auth(&auth_sys(0, 0, &[]))
        .with_timeout(std::time::Duration::from_secs(10));
    let mut calls2 = conn2.serve_calls();
    let bind = ArgOp::BindConnToSession(BindConnToSessionArgs {
        bctsa_sessid: b.session,
        bctsa_dir: ChannelDirFromClient4::BackOrBoth,
        bctsa_use_conn_in_rdma_mode: false,
    });
    let res = call(&conn2, &Compound4Args::new(1, vec![bind])).await;
    let ResOp::BindConnToSession(Res4::Ok(bound)) = &res.results[0] else {
        panic!("BIND_CONN_TO_SESSION: {res:?}")
    };
    assert_eq!(bound.bctsr_dir, ChannelDirFromServer4::Both);
    let probe = next_call(&mut calls2).await;
    assert_eq!(probe.procedure, 0, "CB_NULL on the bound connection");
    answer(
        &conn2,
        &probe,
        rpc::msg::AcceptStat::ProgUnavail,
        &Raw(Bytes::new()),
    )
    .await;
    assert_eq!(flags_become(&mut b, down).await, down, "a failed probe");

    // BACKCHANNEL_CTL: GSS alone is refused; AUTH_NONE and a new program are probed.
    let gss_only = CallbackSecList(vec![CallbackSecParms4::Gss {
        service: 1,
        handle_from_server: SecOid4(Bytes::from_static(b"s")),
        handle_from_client: SecOid4(Bytes::from_static(b"c")),
    }]);
    let ctl = |sec| {
        ArgOp::BackchannelCtl(BackchannelCtlArgs {
            bca_cb_program: 0x4000_0001,
            bca_sec_parms: sec,
        })
    };
    let (status, _) = b.run(vec![ctl(gss_only)]).await;
    assert_eq!(status, Nfsstat4::EncrAlgUnsupp);
    let none = CallbackSecList(vec![CallbackSecParms4::None]);
    let (status, _) = b.run(vec![ctl(none)]).await;
    assert_eq!(status, Nfsstat4::Ok, "BACKCHANNEL_CTL");
    let probe = next_call(&mut calls2).await;
    assert_eq!((probe.program, probe.procedure), (0x4000_0001, 0));
    assert_eq!(probe.cred.flavor, 0, "AUTH_NONE");
    answer(
        &conn2,
        &probe,
        rpc::msg::AcceptStat::Success,
        &Raw(Bytes::new()),
    )
    .await;
    answer_cb_sequence(
        &conn2,
        &mut calls2,
        (b.session, 1, 0x4000_0001),
        Nfsstat4::Ok,
    )
    .await;
    assert_eq!(flags_become(&mut b, 0).await, 0, "working again");

    // The back channel's connection goes away: the path is down again.
    drop((calls2, conn2));
    assert_eq!(flags_become(&mut b, down).await, down, "connection closed");
    // A's channel was never touched.
    assert_eq!(flags_become(&mut a, 0).await, 0);
}

/// `--metrics`: NFSv4 COMPOUNDs are counted as program nfs4, each operation and each
/// failed operation by name, and the state held is a gauge.
#[tokio::test]
async fn metrics_count_operations_by_name_and_the_state_held() {
    let port = common::metrics::free_port();
    let addr = format!("127.0.0.1:{port}");
    let server = Server::start(&["--metrics", &addr]);
    let mut c = V4::connect(&server, "client-metrics").await;
    let (status, _) = c
        .run(vec![
            ArgOp::Putrootfh,
            open_create("om", "counted", share::ACCESS_BOTH, share::DENY_NONE),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok);
    let (status, _) = c
        .run(vec![ArgOp::Putrootfh, ArgOp::Lookup(name("absent"))])
        .await;
    assert_eq!(status, Nfsstat4::Noent);
    let text = common::metrics::scrape(port);
    let sample = |p: &str| common::metrics::sample(&text, p);
    // EXCHANGE_ID and CREATE_SESSION alone, then three SEQUENCE COMPOUNDs.
    let compounds = r#"granary_requests_total{program="nfs4",procedure="compound"}"#;
    assert_eq!(sample(compounds), 5.0);
    assert_eq!(
        sample(r#"granary_nfs4_operations_total{op="sequence"}"#),
        3.0
    );
    assert_eq!(
        sample(r#"granary_nfs4_operations_total{op="putrootfh"}"#),
        2.0
    );
    assert_eq!(sample(r#"granary_nfs4_operations_total{op="open"}"#), 1.0);
    assert_eq!(sample(r#"granary_nfs4_operations_total{op="lookup"}"#), 1.0);
    assert_eq!(
        sample(r#"granary_nfs4_operation_errors_total{op="lookup"}"#),
        1.0
    );
    assert_eq!(
        sample(r#"granary_nfs4_operation_errors_total{op="open"}"#),
        0.0
    );
    assert_eq!(sample("granary_nfs4_clients"), 1.0);
    assert_eq!(sample("granary_nfs4_sessions"), 1.0);
    assert_eq!(sample("granary_nfs4_opens"), 1.0);
}

/// A file removed (by another client) while open stays readable and writable through
/// the open until CLOSE, and OPEN says so (`OPEN4_RESULT_PRESERVE_UNLINKED`); after the
/// CLOSE its handle is stale. On a mem export and on a host export (where the kernel
/// keeps the unlinked inode for the open's descriptor).
async fn removed_open_file_lives_until_close(server: &Server, host_dir: Option<&std::path::Path>) {
    let mut a = V4::connect(server, "client-keeper").await;
    let mut b = V4::connect(server, "client-remover").await;
    let (status, r) = a
        .run(vec![
            ArgOp::Putrootfh,
            open_create("ok", "doomed", share::ACCESS_BOTH, share::DENY_NONE),
            ArgOp::Getfh,
            ArgOp::Write(WriteArgs {
                stateid: Stateid4::CURRENT,
                offset: 0,
                stable: StableHow4::Unstable,
                data: Bytes::from_static(b"before removal "),
            }),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let ResOp::Open(Res4::Ok(o)) = &r[1] else {
        panic!("OPEN: {r:?}")
    };
    assert_ne!(
        o.rflags & open_result::PRESERVE_UNLINKED,
        0,
        "PRESERVE_UNLINKED"
    );
    let sid = o.stateid;
    let ResOp::Getfh(Res4::Ok(fh)) = &r[2] else {
        panic!("GETFH: {r:?}")
    };
    let (status, _) = b
        .run(vec![ArgOp::Putrootfh, ArgOp::Remove(name("doomed"))])
        .await;
    assert_eq!(status, Nfsstat4::Ok);
    if let Some(dir) = host_dir {
        assert!(
            !dir.join("doomed").exists(),
            "the name is gone on the host too"
        );
    }
    let (status, r) = a
        .run(vec![
            ArgOp::Putfh(fh.clone()),
            ArgOp::Write(WriteArgs {
                stateid: sid,
                offset: 15,
                stable: StableHow4::FileSync,
                data: Bytes::from_static(b"and after"),
            }),
            ArgOp::Read(ReadArgs {
                stateid: sid,
                offset: 0,
                count: 100,
            }),
            ArgOp::Getattr(mask(&[num::NUMLINKS, num::SIZE])),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "I/O on the removed open file: {r:?}");
    let ResOp::Read(Res4::Ok(read)) = &r[2] else {
        panic!("READ: {r:?}")
    };
    assert_eq!(&read.data[..], b"before removal and after");
    let got = attrs(&r[3]);
    assert_eq!(got.numlinks, Some(0));
    assert_eq!(got.size, Some(24));
    let (status, _) = a
        .run(vec![
            ArgOp::Putfh(fh.clone()),
            ArgOp::Close(CloseArgs {
                seqid: 0,
                open_stateid: sid,
            }),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok);
    let (status, _) = a
        .run(vec![
            ArgOp::Putfh(fh.clone()),
            ArgOp::Getattr(mask(&[num::SIZE])),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Stale, "the file is freed at CLOSE");
}

#[tokio::test]
async fn a_removed_open_file_lives_until_close_on_mem() {
    let server = Server::start(&[]);
    removed_open_file_lives_until_close(&server, None).await;
}

#[tokio::test]
async fn a_removed_open_file_lives_until_close_on_host() {
    let dirs = HostDirs::new("nfs4-unlinked");
    let server = dirs.serve();
    removed_open_file_lives_until_close(&server, Some(&dirs.export())).await;
}

/// READ as the COMPOUND's last operation is read straight into the reply, or (host,
/// `--sendfile always`, 64 KiB and more) sent from the file; any other READ into its own
/// buffer. Every way gives the same bytes, eof and errors.
async fn reads_give_the_same_bytes_however_they_are_sent(server: &Server) {
    let mut c = V4::connect(server, "client-tail").await;
    // Large READs are not asked to be kept (as Linux asks); the last check asks.
    c.cachethis = false;
    let data: Bytes = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let fh = &create_written(&mut c, "ot", "tail", &data).await;
    let got = |r: &ResOp| {
        let ResOp::Read(Res4::Ok(ok)) = r else {
            panic!("READ: {r:?}")
        };
        (ok.data.clone(), ok.eof)
    };
    // Last: a large read (the file path where the backend has one), a short one at the
    // end, one past the end, a small one.
    for (offset, count) in [
        (0u64, 200_000u32),
        (250_000, 100_000),
        (400_000, 10),
        (7, 1000),
    ] {
        let (status, r) = c
            .run(vec![ArgOp::Putfh(fh.clone()), read(offset, count)])
            .await;
        assert_eq!(status, Nfsstat4::Ok, "{r:?}");
        let from = (offset as usize).min(data.len());
        let to = (offset as usize + count as usize).min(data.len());
        assert_eq!(
            got(&r[1]),
            (data.slice(from..to), to == data.len()),
            "READ {count} at {offset}"
        );
    }
    // Not last: read into its own buffer, and the GETATTR after it runs.
    let (status, r) = c
        .run(vec![
            ArgOp::Putfh(fh.clone()),
            read(100_000, 150_000),
            ArgOp::Getattr(mask(&[num::SIZE])),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    assert_eq!(got(&r[1]), (data.slice(100_000..250_000), false));
    assert_eq!(attrs(&r[2]).size, Some(data.len() as u64));
    // A final READ whose read fails: its result and the COMPOUND's status say why.
    let (status, r) = c
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Create(CreateArgs {
                objtype: Createtype4::Dir,
                objname: name("tail-dir"),
                createattrs: Fattr4::default(),
            }),
            read(0, 100_000),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Isdir, "{r:?}");
    assert_eq!(r.len(), 3);
    assert_eq!(r[2], ResOp::Read(Res4::Err(Nfsstat4::Isdir)));
    // A kept reply (cachethis) holds the data: its retransmission gets the same bytes.
    let args = Compound4Args::new(
        2,
        vec![c.sequence(true), ArgOp::Putfh(fh.clone()), read(1000, 2000)],
    );
    let first = c.conn.call(PROGRAM, 4, 1, &args).await.expect("first");
    let again = c.conn.call(PROGRAM, 4, 1, &args).await.expect("again");
    assert_eq!(first, again, "the slot's kept reply");
    let res = <Compound4Res as xdr::Decode>::from_xdr(first).expect("a COMPOUND reply");
    assert_eq!(got(&res.results[2]), (data.slice(1000..3000), false));
}

#[tokio::test]
async fn reads_give_the_same_bytes_however_they_are_sent_on_mem() {
    let server = Server::start(&[]);
    reads_give_the_same_bytes_however_they_are_sent(&server).await;
}

#[tokio::test]
async fn reads_give_the_same_bytes_however_they_are_sent_on_host_with_sendfile() {
    let dirs = HostDirs::new("nfs4-tail");
    let server = dirs.serve_with(&["--sendfile", "always"]);
    reads_give_the_same_bytes_however_they_are_sent(&server).await;
}

/// An OPEN of `file` at the root as `owner`, no create, with `access`.
fn open_existing(owner: &str, file: &str, access: u32) -> ArgOp {
    ArgOp::Open(OpenArgs {
        seqid: 0,
        share_access: access,
        share_deny: share::DENY_NONE,
        owner: StateOwner4 {
            clientid: 0,
            owner: Opaque4(Bytes::from(owner.to_string())),
        },
        openhow: Openflag4::NoCreate,
        claim: OpenClaim4::Null(name(file)),
    })
}

/// READ and WRITE through an open are checked when the file is opened, not on every
/// call, as knfsd does (and as a local process's open file): after the owner takes
/// every permission away, another user's open still reads and writes, with or without
/// the attributes a GETATTR after the WRITE asks for, while the anonymous stateid and a
/// new OPEN are refused. A READ through an open says `eof` exactly as one with the
/// anonymous stateid, which takes the file's size (a host export reads a byte more
/// instead), at the end, short of it, past it and for no bytes.
async fn io_through_an_open_is_checked_at_open(server: &Server) {
    let mut root = V4::connect(server, "client-root").await;
    let data = Bytes::from_static(b"0123456789");
    let fh = create_written(&mut root, "or", "opened", &data).await;
    let mode = |m: u32| {
        ArgOp::Setattr(SetattrArgs {
            stateid: Stateid4::ANONYMOUS,
            obj_attributes: Fattr {
                mode: Some(m),
                ..Fattr::default()
            }
            .to_fattr4(),
        })
    };
    let (status, r) = root.run(vec![ArgOp::Putfh(fh.clone()), mode(0o666)]).await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let mut other = V4::connect(server, "client-2000").await;
    other.conn.set_auth(&auth_sys(2000, 2000, &[]));
    let (status, r) = other
        .run(vec![
            ArgOp::Putrootfh,
            open_existing("o2000", "opened", share::ACCESS_BOTH),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let sid = opened(&r[1]);
    let (status, r) = root.run(vec![ArgOp::Putfh(fh.clone()), mode(0)]).await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let got = |r: &ResOp| match r {
        ResOp::Read(Res4::Ok(ok)) => Ok((ok.data.clone(), ok.eof)),
        ResOp::Read(Res4::Err(e)) => Err(*e),
        r => panic!("READ: {r:?}"),
    };
    let through = |offset, count| {
        ArgOp::Read(ReadArgs {
            stateid: sid,
            offset,
            count,
        })
    };
    for (offset, count) in [
        (0u64, 10u32),
        (0, 4),
        (4, 6),
        (6, 10),
        (10, 5),
        (20, 5),
        (3, 0),
    ] {
        let from = (offset as usize).min(data.len());
        let to = (offset as usize + count as usize).min(data.len());
        let want = Ok((data.slice(from..to), offset + u64::from(count) >= 10));
        let fh = ArgOp::Putfh(fh.clone());
        // Last (read into the reply), then followed by another operation.
        let (_, r) = other.run(vec![fh.clone(), through(offset, count)]).await;
        assert_eq!(
            got(&r[1]),
            want,
            "READ {count} at {offset} through the open"
        );
        let (_, r) = other
            .run(vec![fh.clone(), through(offset, count), ArgOp::Getfh])
            .await;
        assert_eq!(got(&r[1]), want, "READ {count} at {offset}, not last");
        let (_, r) = root.run(vec![fh.clone(), read(offset, count)]).await;
        assert_eq!(got(&r[1]), want, "READ {count} at {offset}, anonymous");
        let (_, r) = other.run(vec![fh, read(offset, count)]).await;
        assert_eq!(got(&r[1]), Err(Nfsstat4::Access), "anonymous READ, mode 0");
    }
    let write = |stateid, offset, bytes: &'static [u8]| {
        ArgOp::Write(WriteArgs {
            stateid,
            offset,
            stable: StableHow4::FileSync,
            data: Bytes::from_static(bytes),
        })
    };
    let fh_op = || ArgOp::Putfh(fh.clone());
    let (status, r) = other.run(vec![fh_op(), write(sid, 0, b"ab")]).await;
    assert_eq!(status, Nfsstat4::Ok, "WRITE through the open, last: {r:?}");
    let (status, r) = other
        .run(vec![
            fh_op(),
            write(sid, 2, b"cd"),
            ArgOp::Getattr(mask(&[num::SIZE, num::MODE])),
        ])
        .await;
    assert_eq!(
        status,
        Nfsstat4::Ok,
        "WRITE through the open, GETATTR: {r:?}"
    );
    let after = attrs(&r[2]);
    assert_eq!((after.size, after.mode), (Some(10), Some(0)));
    let (status, _) = other
        .run(vec![fh_op(), write(Stateid4::ANONYMOUS, 0, b"x")])
        .await;
    assert_eq!(status, Nfsstat4::Access, "anonymous WRITE, mode 0");
    let (status, _) = other
        .run(vec![
            ArgOp::Putrootfh,
            open_existing("o2000-b", "opened", share::ACCESS_READ),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Access, "a new OPEN, mode 0");
    let (_, r) = root.run(vec![fh_op(), read(0, 100)]).await;
    assert_eq!(got(&r[1]), Ok((Bytes::from_static(b"abcd456789"), true)));
}

#[tokio::test]
async fn io_through_an_open_is_checked_at_open_on_mem() {
    let server = Server::start(&["--squash", "none"]);
    io_through_an_open_is_checked_at_open(&server).await;
}

#[tokio::test]
async fn io_through_an_open_is_checked_at_open_on_host() {
    // On a disk (reads only of what the page cache holds, on the worker) and on a tmpfs.
    for dirs in [
        HostDirs::new("nfs4-opened"),
        HostDirs::on_tmpfs("nfs4-opened"),
    ] {
        let server = dirs.serve();
        io_through_an_open_is_checked_at_open(&server).await;
    }
}

/// EXCHANGE_ID of `owner` with `verifier` on `conn` (whose credential is the principal):
/// the client id and the sequence id its CREATE_SESSION carries.
async fn exchange_id(
    conn: &RpcConnection,
    owner: &str,
    verifier: Verifier4,
) -> Result<(u64, u32), Nfsstat4> {
    let eid = ArgOp::ExchangeId(ExchangeIdArgs {
        eia_clientowner: ClientOwner4 {
            co_verifier: verifier,
            co_ownerid: Opaque4(Bytes::from(owner.to_string())),
        },
        eia_flags: 0,
        eia_state_protect: StateProtect4A::None,
        eia_client_impl_id: AtMostOne(None),
    });
    match call(conn, &Compound4Args::new(1, vec![eid]))
        .await
        .results
        .remove(0)
    {
        ResOp::ExchangeId(Res4::Ok(e)) => Ok((e.eir_clientid, e.eir_sequenceid)),
        r => Err(r.status()),
    }
}

/// CREATE_SESSION of `clientid` with these channels, callbacks with AUTH_NONE.
async fn create_session(
    conn: &RpcConnection,
    clientid: u64,
    sequence: u32,
    fore: ChannelAttrs4,
    back: ChannelAttrs4,
) -> Result<CreateSessionOk, Nfsstat4> {
    let sec = CallbackSecList(vec![CallbackSecParms4::None]);
    create_session_with(conn, clientid, sequence, (fore, back), sec).await
}

/// CREATE_SESSION of `clientid` with these channels and callback security.
async fn create_session_with(
    conn: &RpcConnection,
    clientid: u64,
    sequence: u32,
    (fore, back): (ChannelAttrs4, ChannelAttrs4),
    sec: CallbackSecList,
) -> Result<CreateSessionOk, Nfsstat4> {
    let cs = ArgOp::CreateSession(CreateSessionArgs {
        csa_clientid: clientid,
        csa_sequence: sequence,
        csa_flags: 0,
        csa_fore_chan_attrs: fore,
        csa_back_chan_attrs: back,
        csa_cb_program: 0x4000_0000,
        csa_sec_parms: sec,
    });
    match call(conn, &Compound4Args::new(1, vec![cs]))
        .await
        .results
        .remove(0)
    {
        ResOp::CreateSession(Res4::Ok(s)) => Ok(s),
        r => Err(r.status()),
    }
}

/// A fore channel of `request` and `reply` bytes, `cached` of them kept, one slot.
fn sized(request: u32, reply: u32, cached: u32) -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_maxrequestsize: request,
        ca_maxresponsesize: reply,
        ca_maxresponsesize_cached: cached,
        ..channel(1 << 20, 1)
    }
}

/// The attributes of the root as pynfs's CSESS26 asks them, four times over: a reply of
/// several hundred bytes.
fn big_getattrs() -> Vec<ArgOp> {
    let every = mask(&[
        num::SUPPORTED_ATTRS,
        num::TYPE,
        num::FH_EXPIRE_TYPE,
        num::CHANGE,
        num::SIZE,
        num::LINK_SUPPORT,
        num::SYMLINK_SUPPORT,
        num::NAMED_ATTR,
        num::FSID,
        num::UNIQUE_HANDLES,
        num::LEASE_TIME,
        num::RDATTR_ERROR,
        num::FILEHANDLE,
        num::SUPPATTR_EXCLCREAT,
    ]);
    let mut ops = vec![ArgOp::Putrootfh];
    ops.extend((0..4).map(|_| ArgOp::Getattr(every.clone())));
    ops
}

/// RFC 8881's errors for a COMPOUND that does not fit its session's channel sizes
/// (sections 2.10.6.4, 15.1.11, 18.36.3 and 18.46.3; pynfs's SEQ6, CSESS26 to CSESS29):
/// channels too small to use are refused, a request too big is refused at SEQUENCE without
/// using the slot, and a reply is cut at the first result that would take it past the
/// session's size (or its cached size, when the client asked for the reply to be kept),
/// an operation that changes something being refused before it runs.
#[tokio::test]
async fn compounds_past_the_channel_sizes_get_the_rfc_errors() {
    let server = Server::start(&[]);
    let conn = RpcConnection::connect(server.addr)
        .await
        .expect("connect")
        .with_auth(&auth_sys(0, 0, &[]));
    let (clientid, mut sequence) = exchange_id(&conn, "client-sizes", [5; 8])
        .await
        .expect("EXCHANGE_ID");
    let back = channel(1 << 20, 1);
    let tiny_back = sized(10, 8192, 8192);
    for (fore, back) in [
        (sized(20, 8192, 8192), back),
        (sized(8192, 8192, 8192), tiny_back),
    ] {
        let refused = create_session(&conn, clientid, sequence, fore, back).await;
        assert_eq!(refused.err(), Some(Nfsstat4::Toosmall), "{fore:?} {back:?}");
    }
    // No callback security at all is no reason to skip the sizes' check (pynfs's CSESS25
    // and CSESS28 send none).
    let none = CallbackSecList(vec![]);
    let refused = create_session_with(&conn, clientid, sequence, (sized(8192, 0, 0), back), none);
    assert_eq!(refused.await.err(), Some(Nfsstat4::Toosmall));
    let s = create_session(&conn, clientid, sequence, sized(512, 400, 200), back)
        .await
        .expect("a 400-byte session");
    sequence += 1;
    assert_eq!(s.csr_fore_chan_attrs.ca_maxresponsesize, 400);
    let mut c = V4 {
        conn: conn.clone(),
        clientid,
        session: s.csr_sessionid,
        seqid: 0,
        minor: 1,
        cachethis: false,
    };
    let (status, _) = c.run(vec![ArgOp::ReclaimComplete(false)]).await;
    assert_eq!(status, Nfsstat4::Ok);

    // A request over 512 bytes: NFS4ERR_REQ_TOO_BIG, and the slot's sequence id is not used.
    let long = ArgOp::Lookup(name(&"n".repeat(600)));
    let (status, seq, results) = c.try_run(vec![ArgOp::Putrootfh, long]).await;
    assert_eq!(
        (status, seq, results.len()),
        (Nfsstat4::ReqTooBig, Nfsstat4::ReqTooBig, 0)
    );
    c.seqid -= 1;
    let (status, _) = c.run(vec![ArgOp::Putrootfh]).await;
    assert_eq!(
        status,
        Nfsstat4::Ok,
        "the same sequence id runs after REQ_TOO_BIG"
    );

    // A reply over 400 bytes: the GETATTR that would pass it is NFS4ERR_REP_TOO_BIG, the
    // results before it stand, and what is sent fits.
    c.seqid += 1;
    let seq = ArgOp::Sequence(SequenceArgs {
        sa_sessionid: c.session,
        sa_sequenceid: c.seqid,
        sa_slotid: 0,
        sa_highest_slotid: 0,
        sa_cachethis: false,
    });
    let mut ops = vec![seq];
    ops.extend(big_getattrs());
    let args = Compound4Args::new(1, ops);
    let body = c.conn.call(PROGRAM, 4, 1, &args).await.expect("COMPOUND");
    assert!(body.len() + 24 <= 400, "a {}-byte reply body", body.len());
    let res = <Compound4Res as xdr::Decode>::from_xdr(body).expect("a COMPOUND reply");
    assert_eq!(res.status, Nfsstat4::RepTooBig);
    let last = res.results.last().expect("results");
    assert_eq!(
        (last.opnum(), last.status()),
        (opnum::GETATTR, Nfsstat4::RepTooBig)
    );
    assert!(
        res.results.len() > 2,
        "the GETATTRs that fit: {:?}",
        res.results
    );
    assert!(res.results[..res.results.len() - 1]
        .iter()
        .all(|r| r.status().is_ok()));

    // Asked to keep a reply over its 200 cached bytes: NFS4ERR_REP_TOO_BIG_TO_CACHE, and
    // that reply (which fits) is kept for a retransmission.
    c.cachethis = true;
    let (status, results) = c.run(big_getattrs()).await;
    assert_eq!(status, Nfsstat4::RepTooBigToCache);
    assert_eq!(results.last().map(ResOp::opnum), Some(opnum::GETATTR));
    // A CREATE whose result might not fit the cached size is refused before it runs.
    let mkdir = ArgOp::Create(CreateArgs {
        objtype: Createtype4::Dir,
        objname: name("never"),
        createattrs: Fattr4::default(),
    });
    let (status, results) = c.run(vec![ArgOp::Putrootfh, ArgOp::Getfh, mkdir]).await;
    assert_eq!(status, Nfsstat4::RepTooBigToCache);
    assert_eq!(results.last().map(ResOp::opnum), Some(opnum::CREATE));
    c.cachethis = false;
    let (status, _) = c
        .run(vec![ArgOp::Putrootfh, ArgOp::Lookup(name("never"))])
        .await;
    assert_eq!(status, Nfsstat4::Noent, "the refused CREATE did not run");

    // A cached size too small for SEQUENCE's own result: SEQUENCE fails when asked to
    // keep the reply, and works when not.
    let none = CallbackSecList(vec![]);
    let s = create_session_with(
        &conn,
        clientid,
        sequence,
        (sized(8192, 8192, 10), back),
        none,
    )
    .await
    .expect("a session with a 10-byte reply cache");
    c.session = s.csr_sessionid;
    c.seqid = 0;
    c.cachethis = true;
    let (status, seq, _) = c.try_run(vec![]).await;
    assert_eq!(
        (status, seq),
        (Nfsstat4::RepTooBigToCache, Nfsstat4::RepTooBigToCache)
    );
    c.seqid -= 1;
    c.cachethis = false;
    let (status, _) = c.run(vec![ArgOp::Putrootfh]).await;
    assert_eq!(status, Nfsstat4::Ok);
}

/// EXCHANGE_ID's client-collision case (RFC 8881 section 18.35.5, case 3; pynfs's EID5e):
/// another principal's EXCHANGE_ID for an owner whose confirmed record holds no state
/// replaces it at once (its client id is stale), while a record with a session is
/// `NFS4ERR_CLID_INUSE`.
#[tokio::test]
async fn another_principal_replaces_a_client_record_only_without_state() {
    let server = Server::start(&[]);
    let connect = |uid| async move {
        RpcConnection::connect(server.addr)
            .await
            .expect("connect")
            .with_auth(&auth_sys(uid, uid, &[]))
    };
    let (root, user) = (connect(0).await, connect(1000).await);
    let back = channel(1 << 20, 1);
    let (idle, seq) = exchange_id(&root, "client-idle", [1; 8])
        .await
        .expect("EXCHANGE_ID");
    let s = create_session(&root, idle, seq, back, back)
        .await
        .expect("CREATE_SESSION");
    let destroy = ArgOp::DestroySession(s.csr_sessionid);
    assert_eq!(
        call(&root, &Compound4Args::new(1, vec![destroy]))
            .await
            .status,
        Nfsstat4::Ok
    );
    let (other, _) = exchange_id(&user, "client-idle", [2; 8])
        .await
        .expect("a new record");
    assert_ne!(other, idle);
    let stale = create_session(&root, idle, seq + 1, back, back).await;
    assert_eq!(stale.err(), Some(Nfsstat4::StaleClientid));

    let (busy, seq) = exchange_id(&root, "client-busy", [1; 8])
        .await
        .expect("EXCHANGE_ID");
    create_session(&root, busy, seq, back, back)
        .await
        .expect("CREATE_SESSION");
    let taken = exchange_id(&user, "client-busy", [2; 8]).await;
    assert_eq!(taken.err(), Some(Nfsstat4::ClidInuse));
}

/// RECLAIM_COMPLETE (RFC 8881 section 18.51; pynfs's RECC1): one for the current file
/// system only needs a current filehandle and does not end the client's reclaims; the
/// global one does, once.
#[tokio::test]
async fn reclaim_complete_for_one_file_system_then_for_all() {
    let server = Server::start(&[]);
    let setup = Setup {
        reclaim_complete: false,
        ..Setup::default()
    };
    let mut c = V4::connect_with(&server, "client-recc", &setup).await;
    let (status, _) = c.run(vec![ArgOp::ReclaimComplete(true)]).await;
    assert_eq!(status, Nfsstat4::Nofilehandle);
    let (status, _) = c
        .run(vec![ArgOp::Putrootfh, ArgOp::ReclaimComplete(true)])
        .await;
    assert_eq!(status, Nfsstat4::Ok);
    let (status, _) = c.run(vec![ArgOp::ReclaimComplete(false)]).await;
    assert_eq!(status, Nfsstat4::Ok);
    let (status, _) = c.run(vec![ArgOp::ReclaimComplete(false)]).await;
    assert_eq!(status, Nfsstat4::CompleteAlready);
}

/// OPEN's delegation answer (RFC 8881 section 18.16.3; pynfs's DELEG4): granary grants no
/// delegation; a client that says nothing gets `OPEN_DELEGATE_NONE`, one that asks for
/// none is told `WND4_NOT_WANTED`, and one that asks for one is told why not.
#[tokio::test]
async fn open_says_why_it_grants_no_delegation() {
    let server = Server::start(&[]);
    let mut c = V4::connect(&server, "client-deleg").await;
    for (want, expect) in [
        (0, OpenDelegation4::None),
        (
            share::WANT_NO_DELEG,
            OpenDelegation4::NoneExt {
                why: why_no_delegation::NOT_WANTED,
                will_signal: None,
            },
        ),
        (
            share::WANT_CANCEL,
            OpenDelegation4::NoneExt {
                why: why_no_delegation::CANCELLED,
                will_signal: None,
            },
        ),
    ] {
        let file = format!("deleg-{want:x}");
        let open = open_create("o", &file, share::ACCESS_READ | want, share::DENY_NONE);
        let (status, r) = c.run(vec![ArgOp::Putrootfh, open]).await;
        assert_eq!(status, Nfsstat4::Ok);
        let ResOp::Open(Res4::Ok(o)) = &r[1] else {
            panic!("OPEN: {r:?}")
        };
        assert_eq!(o.delegation, expect, "want {want:#x}");
    }
}

/// SEQUENCE and `ops` on `c`'s session, sent whole: the reply, which must have succeeded
/// and fit 4 KiB with its RPC header (24 bytes).
async fn ok_within_4k(c: &mut V4, ops: Vec<ArgOp>) -> Compound4Res {
    let mut all = vec![c.sequence(false)];
    all.extend(ops);
    let args = Compound4Args::new(1, all);
    let body = c.conn.call(PROGRAM, 4, 1, &args).await.expect("COMPOUND");
    assert!(body.len() + 24 <= 4096, "a {}-byte reply body", body.len());
    let res = <Compound4Res as xdr::Decode>::from_xdr(body).expect("a COMPOUND reply");
    assert_eq!(res.status, Nfsstat4::Ok, "{:?}", res.results);
    res
}

/// A session whose replies may be at most 4 KiB (RFC 8881 sections 2.10.6.4 and 18.22.3):
/// a READ that ends the COMPOUND and asks for more is answered short, with the right
/// bytes and `eof` false, within the size, and a READDIR that ends it lists what fits;
/// a READ or READDIR whose result would not fit and that is not the last operation is
/// `NFS4ERR_REP_TOO_BIG`, and nothing after it runs.
#[tokio::test]
async fn reads_past_the_session_reply_size_are_short_when_last_and_refused_otherwise() {
    let server = Server::start(&[]);
    let mut big = V4::connect(&server, "client-reply-size-writer").await;
    big.cachethis = false;
    let data: Bytes = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    let mkdir = |n: &str| {
        ArgOp::Create(CreateArgs {
            objtype: Createtype4::Dir,
            objname: name(n),
            createattrs: Fattr4::default(),
        })
    };
    let (status, r) = big.run(vec![ArgOp::Putrootfh, mkdir("sized")]).await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    // Enough entries that one READDIR of them is well over 4 KiB.
    for i in 0..60 {
        let entry = format!("entry-with-a-long-name-{i:03}");
        let ops = vec![
            ArgOp::Putrootfh,
            ArgOp::Lookup(name("sized")),
            mkdir(&entry),
        ];
        let (status, r) = big.run(ops).await;
        assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    }
    let fh = &create_written(&mut big, "ow", "sized-file", &data).await;

    let setup = Setup {
        max_bytes: 4096,
        slots: 1,
        cachethis: false,
        minor: 1,
        ..Setup::default()
    };
    let mut small = V4::connect_with(&server, "client-reply-size-4k", &setup).await;
    // Last: short, eof false, the file's bytes, and the whole reply within 4 KiB.
    let res = ok_within_4k(
        &mut small,
        vec![ArgOp::Putfh(fh.clone()), read(1000, 50_000)],
    )
    .await;
    let ResOp::Read(Res4::Ok(ok)) = &res.results[2] else {
        panic!("READ: {:?}", res.results)
    };
    let n = ok.data.len();
    assert!(
        (3000..4096).contains(&n),
        "{n} bytes read into a 4 KiB reply"
    );
    assert!(!ok.eof, "a short READ inside the file is not at its end");
    assert_eq!(ok.data, data.slice(1000..1000 + n));

    // Not last: NFS4ERR_REP_TOO_BIG for the READ, and the GETATTR after it does not run.
    let (status, r) = small
        .run(vec![
            ArgOp::Putfh(fh.clone()),
            read(0, 50_000),
            ArgOp::Getattr(mask(&[num::SIZE])),
        ])
        .await;
    assert_eq!(status, Nfsstat4::RepTooBig, "{r:?}");
    assert_eq!(r.len(), 2, "{r:?}");
    assert_eq!(
        (r[1].opnum(), r[1].status()),
        (opnum::READ, Nfsstat4::RepTooBig)
    );
    // A READ that fits runs, and so does the operation after it.
    let (status, r) = small
        .run(vec![
            ArgOp::Putfh(fh.clone()),
            read(10, 100),
            ArgOp::Getattr(mask(&[num::SIZE])),
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    assert_eq!(attrs(&r[2]).size, Some(data.len() as u64));

    // READDIR of the 60 entries, not last: NFS4ERR_REP_TOO_BIG.
    let readdir = ArgOp::Readdir(ReaddirArgs {
        cookie: 0,
        cookieverf: [0; 8],
        dircount: 65_536,
        maxcount: 65_536,
        attr_request: mask(&[num::TYPE, num::FILEID, num::SIZE]),
    });
    let (status, r) = small
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Lookup(name("sized")),
            readdir,
            ArgOp::Getfh,
        ])
        .await;
    assert_eq!(status, Nfsstat4::RepTooBig, "{r:?}");
    assert_eq!(r.len(), 3, "{r:?}");
    assert_eq!(
        (r[2].opnum(), r[2].status()),
        (opnum::READDIR, Nfsstat4::RepTooBig)
    );

    // Last: each reply is shortened to the 4 KiB (eof false until the end, as knfsd
    // answers), and following the cookies lists all 60 entries once.
    let (status, r) = small
        .run(vec![
            ArgOp::Putrootfh,
            ArgOp::Lookup(name("sized")),
            ArgOp::Getfh,
        ])
        .await;
    assert_eq!(status, Nfsstat4::Ok, "{r:?}");
    let ResOp::Getfh(Res4::Ok(dir)) = &r[2] else {
        panic!("GETFH: {r:?}")
    };
    let (mut cookie, mut cookieverf, mut names, mut replies) = (0, [0; 8], Vec::new(), 0);
    loop {
        let readdir = ArgOp::Readdir(ReaddirArgs {
            cookie,
            cookieverf,
            dircount: 65_536,
            maxcount: 65_536,
            attr_request: mask(&[num::TYPE, num::FILEID, num::SIZE]),
        });
        let res = ok_within_4k(&mut small, vec![ArgOp::Putfh(dir.clone()), readdir]).await;
        let ResOp::Readdir(Res4::Ok(ok)) = &res.results[2] else {
            panic!("READDIR: {:?}", res.results)
        };
        replies += 1;
        assert!(
            !ok.entries.is_empty() || ok.eof,
            "an empty list before the end"
        );
        names.extend(ok.entries.iter().map(|e| e.name.0.clone()));
        if ok.eof {
            break;
        }
        cookie = ok.entries.last().map(|e| e.cookie).expect("entries");
        cookieverf = ok.cookieverf;
        assert!(replies < 60, "the listing never ends");
    }
    assert!(replies > 1, "60 entries fit one 4 KiB reply?");
    let mut want: Vec<Bytes> = (0..60)
        .map(|i| Bytes::from(format!("entry-with-a-long-name-{i:03}")))
        .collect();
    names.sort();
    want.sort();
    assert_eq!(names, want);
}
