//! A small NFSv4.1 client for the tests: one connection, a confirmed client id and a
//! session whose slot 0 is used in order, built from granary's own RPC client.

use std::time::Duration;

use bytes::Bytes;
use client::{auth_sys, RpcConnection};
use nfs4::ops::*;
use nfs4::results::*;
use nfs4::types::*;
use nfs4::{Compound4Args, Compound4Res, Nfsstat4};

use super::Server;

pub const PROGRAM: u32 = 100_003;

/// One NFSv4.1 client. `minor` and `cachethis` are what [`V4::run`] sends.
pub struct V4 {
    pub conn: RpcConnection,
    pub clientid: u64,
    pub session: Sessionid4,
    pub seqid: u32,
    pub minor: u32,
    pub cachethis: bool,
}

/// How [`V4::connect_with`] sets the client up.
pub struct Setup {
    pub verifier: Verifier4,
    /// `ca_maxrequestsize` and `ca_maxresponsesize` asked for, both channels.
    pub max_bytes: u32,
    pub slots: u32,
    pub timeout: Duration,
    /// Minor version of the COMPOUNDs [`V4::run`] sends.
    pub minor: u32,
    pub cachethis: bool,
    /// Send RECLAIM_COMPLETE after CREATE_SESSION, as Linux does after mounting (new OPENs
    /// wait for it); a client that will reclaim after a restart must not yet.
    pub reclaim_complete: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            verifier: [7; 8],
            max_bytes: 1 << 20,
            slots: 8,
            timeout: Duration::from_secs(10),
            minor: 2,
            cachethis: true,
            reclaim_complete: true,
        }
    }
}

pub fn channel(max_bytes: u32, slots: u32) -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: max_bytes,
        ca_maxresponsesize: max_bytes,
        ca_maxresponsesize_cached: 4096,
        ca_maxoperations: 16,
        ca_maxrequests: slots,
        ca_rdma_ird: None,
    }
}

pub async fn call(conn: &RpcConnection, args: &Compound4Args) -> Compound4Res {
    conn.call_decode(PROGRAM, 4, 1, args)
        .await
        .expect("COMPOUND")
}

/// EXCHANGE_ID as client `owner` with boot verifier `verifier`, no flags, no state
/// protection.
pub fn exchange_id(owner: &str, verifier: [u8; 8]) -> ArgOp {
    ArgOp::ExchangeId(ExchangeIdArgs {
        eia_clientowner: ClientOwner4 {
            co_verifier: verifier,
            co_ownerid: Opaque4(Bytes::from(owner.to_string())),
        },
        eia_flags: 0,
        eia_state_protect: StateProtect4A::None,
        eia_client_impl_id: AtMostOne(None),
    })
}

impl V4 {
    /// A client with the default [`Setup`].
    pub async fn connect(server: &Server, owner: &str) -> V4 {
        Self::connect_with(server, owner, &Setup::default()).await
    }

    /// EXCHANGE_ID and CREATE_SESSION as `owner` (the same verifier every time).
    pub async fn connect_with(server: &Server, owner: &str, setup: &Setup) -> V4 {
        let conn = RpcConnection::connect(server.addr)
            .await
            .expect("connect")
            .with_auth(&auth_sys(0, 0, &[]))
            .with_timeout(setup.timeout);
        let eid = exchange_id(owner, setup.verifier);
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
            csa_fore_chan_attrs: channel(setup.max_bytes, setup.slots),
            csa_back_chan_attrs: channel(setup.max_bytes, setup.slots),
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
            minor: setup.minor,
            cachethis: setup.cachethis,
        };
        if setup.reclaim_complete {
            let (status, _) = v4.run(vec![ArgOp::ReclaimComplete(false)]).await;
            assert_eq!(status, Nfsstat4::Ok, "RECLAIM_COMPLETE");
        }
        v4
    }

    /// The next SEQUENCE on slot 0.
    pub fn sequence(&mut self, cachethis: bool) -> ArgOp {
        self.seqid += 1;
        ArgOp::Sequence(SequenceArgs {
            sa_sessionid: self.session,
            sa_sequenceid: self.seqid,
            sa_slotid: 0,
            sa_highest_slotid: 0,
            sa_cachethis: cachethis,
        })
    }

    /// SEQUENCE + `ops` as minor version `minor`: the COMPOUND's status, SEQUENCE's
    /// status, and the results after SEQUENCE's.
    pub async fn try_run_minor(
        &mut self,
        minor: u32,
        ops: Vec<ArgOp>,
    ) -> (Nfsstat4, Nfsstat4, Vec<ResOp>) {
        let mut all = vec![self.sequence(self.cachethis)];
        all.extend(ops);
        let res = call(&self.conn, &Compound4Args::new(minor, all)).await;
        let mut results = res.results.into_iter();
        let seq = results.next().expect("a SEQUENCE result").status();
        (res.status, seq, results.collect())
    }

    /// [`V4::try_run_minor`] in the client's minor version.
    pub async fn try_run(&mut self, ops: Vec<ArgOp>) -> (Nfsstat4, Nfsstat4, Vec<ResOp>) {
        self.try_run_minor(self.minor, ops).await
    }

    /// SEQUENCE + `ops`, SEQUENCE must succeed: the COMPOUND's status and the results
    /// after SEQUENCE's.
    pub async fn run(&mut self, ops: Vec<ArgOp>) -> (Nfsstat4, Vec<ResOp>) {
        let (status, seq, results) = self.try_run(ops).await;
        assert_eq!(seq, Nfsstat4::Ok, "SEQUENCE");
        (status, results)
    }

    /// SEQUENCE + `ops` where SEQUENCE may fail: then its status is the COMPOUND's and
    /// no results follow.
    pub async fn run_unchecked(&mut self, ops: Vec<ArgOp>) -> (Nfsstat4, Vec<ResOp>) {
        let (status, _, results) = self.try_run(ops).await;
        (status, results)
    }
}

/// A call the server made on a back channel.
pub struct CbCall {
    pub xid: u32,
    pub procedure: u32,
    pub args: xdr::Decoder,
}

pub async fn next_call(calls: &mut tokio::sync::mpsc::UnboundedReceiver<Bytes>) -> CbCall {
    let body = tokio::time::timeout(Duration::from_secs(10), calls.recv())
        .await
        .expect("the server calls back within 10 s")
        .expect("the connection lives");
    let mut d = xdr::Decoder::new(body);
    let mut word = || d.u32().expect("call header word");
    let (xid, _mtype, _rpcvers, _program, _version, procedure) =
        (word(), word(), word(), word(), word(), word());
    let _cred: rpc::msg::OpaqueAuth = xdr::Decode::decode(&mut d).expect("credential");
    let _verf: rpc::msg::OpaqueAuth = xdr::Decode::decode(&mut d).expect("verifier");
    CbCall {
        xid,
        procedure,
        args: d,
    }
}

/// Answers a back-channel call with SUCCESS and `results`.
pub async fn answer(conn: &RpcConnection, call: &CbCall, results: &impl xdr::Encode) {
    let mut e = xdr::Encoder::new();
    rpc::msg::encode_accepted(&mut e, call.xid, rpc::msg::AcceptStat::Success);
    results.encode(&mut e);
    conn.send_record_body(&e.into_inner())
        .await
        .expect("reply sent");
}

/// Answers a CB_COMPOUND with OK for each of its operations (CB_NOTIFY_LOCK only);
/// returns its operations after CB_SEQUENCE.
pub async fn answer_cb(
    conn: &RpcConnection,
    calls: &mut tokio::sync::mpsc::UnboundedReceiver<Bytes>,
    session: Sessionid4,
) -> Vec<nfs4::compound::CbArgOp> {
    use nfs4::compound::{CbArgOp, CbCompound4Args, CbCompound4Res, CbResOp, CbSequenceOk};
    let mut call = next_call(calls).await;
    assert_eq!(call.procedure, 1, "CB_COMPOUND");
    let args: CbCompound4Args = xdr::Decode::decode(&mut call.args).expect("CB_COMPOUND args");
    let CbArgOp::Sequence(seq) = &args.ops[0] else {
        panic!("CB_SEQUENCE first: {args:?}")
    };
    assert_eq!(seq.csa_sessionid, session);
    let mut results = vec![CbResOp::Sequence(Res4::Ok(CbSequenceOk {
        csr_sessionid: session,
        csr_sequenceid: seq.csa_sequenceid,
        csr_slotid: seq.csa_slotid,
        csr_highest_slotid: 0,
        csr_target_highest_slotid: 0,
    }))];
    for op in &args.ops[1..] {
        let code = match op {
            CbArgOp::NotifyLock(_) => nfs4::compound::cb_opnum::CB_NOTIFY_LOCK,
            other => panic!("unexpected callback {other:?}"),
        };
        results.push(CbResOp::Status {
            op: code,
            status: Nfsstat4::Ok,
        });
    }
    let res = CbCompound4Res {
        status: Nfsstat4::Ok,
        tag: args.tag.clone(),
        results,
    };
    answer(conn, &call, &res).await;
    args.ops[1..].to_vec()
}

impl V4 {
    /// A client whose creating connection is its back channel (`CONN_BACK_CHAN`), once
    /// the server's probes (CB_NULL, then CB_SEQUENCE alone) are answered and
    /// RECLAIM_COMPLETE sent: the client, and the calls the server makes on it.
    pub async fn connect_with_back_channel(
        server: &Server,
        owner: &str,
    ) -> (V4, tokio::sync::mpsc::UnboundedReceiver<Bytes>) {
        let conn = RpcConnection::connect(server.addr)
            .await
            .expect("connect")
            .with_auth(&auth_sys(0, 0, &[]))
            .with_timeout(Duration::from_secs(10));
        let mut calls = conn.serve_calls();
        let eid = exchange_id(owner, [3; 8]);
        let res = call(&conn, &Compound4Args::new(1, vec![eid])).await;
        let ResOp::ExchangeId(Res4::Ok(e)) = &res.results[0] else {
            panic!("EXCHANGE_ID: {res:?}")
        };
        let cs = ArgOp::CreateSession(CreateSessionArgs {
            csa_clientid: e.eir_clientid,
            csa_sequence: e.eir_sequenceid,
            csa_flags: session_flags::CONN_BACK_CHAN,
            csa_fore_chan_attrs: channel(1 << 20, 8),
            csa_back_chan_attrs: channel(1 << 20, 8),
            csa_cb_program: 0x4000_0000,
            csa_sec_parms: CallbackSecList(vec![CallbackSecParms4::None]),
        });
        let res = call(&conn, &Compound4Args::new(1, vec![cs])).await;
        let ResOp::CreateSession(Res4::Ok(s)) = &res.results[0] else {
            panic!("CREATE_SESSION: {res:?}")
        };
        let mut v4 = V4 {
            conn: conn.clone(),
            clientid: e.eir_clientid,
            session: s.csr_sessionid,
            seqid: 0,
            minor: 2,
            cachethis: true,
        };
        let probe = next_call(&mut calls).await;
        assert_eq!(probe.procedure, 0, "CB_NULL");
        answer(&conn, &probe, &Nothing).await;
        assert!(answer_cb(&conn, &mut calls, v4.session).await.is_empty());
        let (status, _) = v4.run(vec![ArgOp::ReclaimComplete(false)]).await;
        assert_eq!(status, Nfsstat4::Ok);
        (v4, calls)
    }
}

/// A component of a path, as LOOKUP and OPEN take it.
pub fn name(s: &str) -> Component4 {
    Component4(Bytes::from(s.to_string()))
}

/// An open-owner or lock-owner named `s` (the client id filled in by the session).
pub fn owner(s: &str) -> StateOwner4 {
    StateOwner4 {
        clientid: 0,
        owner: Opaque4(Bytes::from(s.to_string())),
    }
}

/// OPEN4_CREATE (UNCHECKED, mode 0644) of `file` in the current directory as open-owner
/// `owner`, asking `access` and denying `deny`.
pub fn open_create(owner: &str, file: &str, access: u32, deny: u32) -> ArgOp {
    ArgOp::Open(OpenArgs {
        seqid: 0,
        share_access: access,
        share_deny: deny,
        owner: self::owner(owner),
        openhow: Openflag4::Create(Createhow4::Unchecked(
            nfs4::attr::Fattr {
                mode: Some(0o644),
                ..nfs4::attr::Fattr::default()
            }
            .to_fattr4(),
        )),
        claim: OpenClaim4::Null(name(file)),
    })
}
