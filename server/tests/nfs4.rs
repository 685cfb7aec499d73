//! NFSv4.1/4.2 of the real `granary` binary, through whole COMPOUNDs sent by granary's own
//! RPC client and compared against RFC 8881: the session handshake, the operations a
//! Linux client sends to mount, create, write, read, list, rename and remove, the slot
//! reply cache (a retransmission is replayed byte for byte, never run again), share
//! reservations between two clients, the session rules and hostile requests.

mod common;

use bytes::Bytes;
use client::{auth_sys, RpcConnection};
use common::Server;
use nfs4::attr::{num, Fattr};
use nfs4::ops::*;
use nfs4::results::*;
use nfs4::types::*;
use nfs4::{Compound4Args, Compound4Res, Nfsstat4, Stateid4};
use xdr::Encode;

const PROGRAM: u32 = 100_003;

/// One NFSv4.1 client: a connection, a confirmed client id and a session with one slot
/// used in order.
struct V4 {
    conn: RpcConnection,
    clientid: u64,
    session: Sessionid4,
    seqid: u32,
}

fn channel() -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1 << 20,
        ca_maxresponsesize: 1 << 20,
        ca_maxresponsesize_cached: 4096,
        ca_maxoperations: 16,
        ca_maxrequests: 8,
        ca_rdma_ird: None,
    }
}

async fn call(conn: &RpcConnection, args: &Compound4Args) -> Compound4Res {
    conn.call_decode(PROGRAM, 4, 1, args)
        .await
        .expect("COMPOUND")
}

impl V4 {
    async fn connect(server: &Server, owner: &str) -> V4 {
        let conn = RpcConnection::connect(server.addr)
            .await
            .expect("connect")
            .with_auth(&auth_sys(0, 0, &[]))
            .with_timeout(std::time::Duration::from_secs(10));
        let eid = ArgOp::ExchangeId(ExchangeIdArgs {
            eia_clientowner: ClientOwner4 {
                co_verifier: [7; 8],
                co_ownerid: Opaque4(Bytes::from(owner.to_string())),
            },
            eia_flags: 0,
            eia_state_protect: StateProtect4A::None,
            eia_client_impl_id: AtMostOne(None),
        });
        let res = call(&conn, &Compound4Args::new(1, vec![eid])).await;
        let ResOp::ExchangeId(Res4::Ok(e)) = &res.results[0] else {
            panic!("EXCHANGE_ID: {res:?}")
        };
        assert_eq!(
            e.eir_flags & exchgid::CONFIRMED_R,
            0,
            "a new client is unconfirmed"
        );
        let cs = ArgOp::CreateSession(CreateSessionArgs {
            csa_clientid: e.eir_clientid,
            csa_sequence: e.eir_sequenceid,
            csa_flags: 0,
            csa_fore_chan_attrs: channel(),
            csa_back_chan_attrs: channel(),
            csa_cb_program: 0x4000_0000,
            csa_sec_parms: CallbackSecList(vec![CallbackSecParms4::None]),
        });
        let res = call(&conn, &Compound4Args::new(1, vec![cs])).await;
        let ResOp::CreateSession(Res4::Ok(s)) = &res.results[0] else {
            panic!("CREATE_SESSION: {res:?}")
        };
        assert!(s.csr_fore_chan_attrs.ca_maxrequests >= 1);
        let mut v4 = V4 {
            conn,
            clientid: e.eir_clientid,
            session: s.csr_sessionid,
            seqid: 0,
        };
        // As Linux does after mounting: nothing to reclaim (new OPENs wait for this).
        let (status, _) = v4.run(vec![ArgOp::ReclaimComplete(false)]).await;
        assert_eq!(status, Nfsstat4::Ok, "RECLAIM_COMPLETE");
        v4
    }

    fn sequence(&mut self, cachethis: bool) -> ArgOp {
        self.seqid += 1;
        ArgOp::Sequence(SequenceArgs {
            sa_sessionid: self.session,
            sa_sequenceid: self.seqid,
            sa_slotid: 0,
            sa_highest_slotid: 0,
            sa_cachethis: cachethis,
        })
    }

    /// SEQUENCE + `ops`; returns the results after SEQUENCE's.
    async fn run(&mut self, ops: Vec<ArgOp>) -> (Nfsstat4, Vec<ResOp>) {
        let mut all = vec![self.sequence(true)];
        all.extend(ops);
        let res = call(&self.conn, &Compound4Args::new(2, all)).await;
        let mut results = res.results.into_iter();
        let seq = results.next().expect("a SEQUENCE result");
        assert_eq!(seq.status(), Nfsstat4::Ok, "SEQUENCE");
        (res.status, results.collect())
    }
}

/// Arguments already encoded by the test.
struct Raw(Bytes);

impl xdr::Encode for Raw {
    fn encode(&self, e: &mut xdr::Encoder) {
        e.fixed_opaque(&self.0);
    }
}

fn name(s: &str) -> Component4 {
    Component4(Bytes::from(s.to_string()))
}

fn mask(bits: &[u32]) -> Bitmap4 {
    Bitmap4::from_bits(bits)
}

fn open_create(owner: &str, file: &str, access: u32, deny: u32) -> ArgOp {
    ArgOp::Open(OpenArgs {
        seqid: 0,
        share_access: access,
        share_deny: deny,
        owner: StateOwner4 {
            clientid: 0,
            owner: Opaque4(Bytes::from(owner.to_string())),
        },
        openhow: Openflag4::Create(Createhow4::Unchecked(
            Fattr {
                mode: Some(0o644),
                ..Fattr::default()
            }
            .to_fattr4(),
        )),
        claim: OpenClaim4::Null(name(file)),
    })
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

/// A host export: OPEN(CREATE) + FILE_SYNC WRITE + COMMIT + READ in COMPOUNDs that the
/// event loop may not run (they sync or may read from the disk) go to the worker's
/// blocking pool before anything runs, and the bytes reach the host file.
#[tokio::test]
async fn host_export_io_runs_whole_compounds_on_the_blocking_pool() {
    let base = std::env::temp_dir().join(format!("granary-nfs4-host-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("export")).unwrap();
    let (export, state) = (base.join("export"), base.join("state"));
    let server = Server::start(&[
        export.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--squash",
        "none",
    ]);
    let mut c = V4::connect(&server, "client-host").await;
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
    drop(server);
    let _ = std::fs::remove_dir_all(&base);
}
