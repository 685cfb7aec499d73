//! Stateful NFSv4.1: one client's session (EXCHANGE_ID, CREATE_SESSION with four slots,
//! RECLAIM_COMPLETE), then COMPOUNDs of SEQUENCE plus a filehandle and one operation
//! (OPEN with create, WRITE, READ, CLOSE, OPEN_DOWNGRADE, REMOVE, RENAME, READDIR,
//! GETATTR of every attribute, SAVEFH/RESTOREFH, TEST_STATEID, FREE_STATEID, LOOKUPP),
//! on handles and stateids the server handed out, through the real dispatcher over a
//! fresh mem export. The input picks each call's slot and whether its sequence id is the
//! slot's next, a retransmission of the slot's last call, or out of order.
//!
//! What must hold: every reply decodes whole and follows the COMPOUND status rule; a call
//! with the slot's next sequence id gets SEQUENCE OK; a retransmission gets the very
//! bytes of the first reply when the client asked for it to be cached (or
//! `NFS4ERR_RETRY_UNCACHED_REP`); an out-of-order one gets `NFS4ERR_SEQ_MISORDERED`.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use nfs4::attr::Fattr;
use nfs4::ops::*;
use nfs4::results::*;
use nfs4::types::*;
use nfs4::{Compound4Args, Compound4Res, Nfsstat4, Stateid4};
use rpc::msg::AcceptStat;

const SLOTS: u32 = 4;

/// What was last sent on a slot and what came back.
#[derive(Default, Clone)]
struct Slot {
    seqid: u32,
    /// The call, its reply, and whether the call asked for the reply to be cached.
    last: Option<(Bytes, Bytes, bool)>,
}

struct Client {
    dispatcher: std::sync::Arc<rpc::Dispatcher>,
    xid: u32,
    session: Sessionid4,
    slots: Vec<Slot>,
    handles: Vec<NfsFh4>,
    stateids: Vec<Stateid4>,
}

impl Client {
    /// Sends `call` and returns the reply record and its decoded COMPOUND result.
    fn send(&self, call: Bytes) -> (Bytes, Compound4Res) {
        let reply = self
            .dispatcher
            .handle(call.clone(), granary_fuzz::PEER)
            .expect("every well-formed call is answered");
        let (accepted, res) = granary_fuzz::compound_reply(&call, &reply);
        assert_eq!(accepted, AcceptStat::Success);
        (
            reply,
            res.expect("a successful reply carries a COMPOUND result"),
        )
    }

    fn call(&mut self, ops: Vec<ArgOp>) -> Compound4Res {
        self.xid += 1;
        self.send(granary_fuzz::compound_call(
            self.xid,
            &Compound4Args::new(1, ops),
        ))
        .1
    }

    fn connect(dispatcher: std::sync::Arc<rpc::Dispatcher>) -> Self {
        let mut c = Client {
            dispatcher,
            xid: 0,
            session: [0; 16],
            slots: vec![Slot::default(); SLOTS as usize],
            handles: Vec::new(),
            stateids: Vec::new(),
        };
        let res = c.call(vec![ArgOp::ExchangeId(ExchangeIdArgs {
            eia_clientowner: ClientOwner4 {
                co_verifier: [3; 8],
                co_ownerid: Opaque4(Bytes::from_static(b"fuzz-client")),
            },
            eia_flags: 0,
            eia_state_protect: StateProtect4A::None,
            eia_client_impl_id: AtMostOne(None),
        })]);
        let ResOp::ExchangeId(Res4::Ok(e)) = &res.results[0] else {
            panic!("EXCHANGE_ID: {res:?}")
        };
        let chan = ChannelAttrs4 {
            ca_headerpadsize: 0,
            ca_maxrequestsize: 1 << 20,
            ca_maxresponsesize: 1 << 20,
            ca_maxresponsesize_cached: 2048,
            ca_maxoperations: 8,
            ca_maxrequests: SLOTS,
            ca_rdma_ird: None,
        };
        let res = c.call(vec![ArgOp::CreateSession(CreateSessionArgs {
            csa_clientid: e.eir_clientid,
            csa_sequence: e.eir_sequenceid,
            csa_flags: 0,
            csa_fore_chan_attrs: chan.clone(),
            csa_back_chan_attrs: chan,
            csa_cb_program: 0x4000_0000,
            csa_sec_parms: CallbackSecList(vec![CallbackSecParms4::None]),
        })]);
        let ResOp::CreateSession(Res4::Ok(s)) = &res.results[0] else {
            panic!("CREATE_SESSION: {res:?}")
        };
        assert_eq!(s.csr_fore_chan_attrs.ca_maxrequests, SLOTS);
        c.session = s.csr_sessionid;
        let res = c.sequenced(
            0,
            0,
            true,
            vec![
                ArgOp::ReclaimComplete(false),
                ArgOp::Putrootfh,
                ArgOp::Getfh,
            ],
        );
        assert_eq!(res.status, Nfsstat4::Ok, "RECLAIM_COMPLETE");
        c
    }

    /// SEQUENCE on `slot` plus `ops`. `mode`: 0 the slot's next sequence id, 1 a
    /// retransmission of the slot's last call, 2 a sequence id ahead of the next.
    fn sequenced(&mut self, slot: u32, mode: u8, cache: bool, ops: Vec<ArgOp>) -> Compound4Res {
        let s = slot as usize;
        if mode == 1 {
            if let Some((call, first, cached)) = self.slots[s].last.clone() {
                let (reply, res) = self.send(call);
                if reply != first {
                    // Not replayed: only allowed when the client did not ask for the
                    // reply to be kept, or it was too large for the slot's cache (the
                    // session granted 2 KiB for the COMPOUND reply, less than the record).
                    assert_eq!(
                        res.status,
                        Nfsstat4::RetryUncachedRep,
                        "a retransmission ran again"
                    );
                    assert!(
                        !cached || first.len() > 1800,
                        "a small cached reply was not kept"
                    );
                }
                return res;
            }
        }
        let seqid = match mode {
            2 => self.slots[s].seqid.wrapping_add(2),
            _ => self.slots[s].seqid.wrapping_add(1),
        };
        let mut all = vec![ArgOp::Sequence(SequenceArgs {
            sa_sessionid: self.session,
            sa_sequenceid: seqid,
            sa_slotid: slot,
            sa_highest_slotid: SLOTS - 1,
            sa_cachethis: cache,
        })];
        all.extend(ops);
        self.xid += 1;
        let call = granary_fuzz::compound_call(self.xid, &Compound4Args::new(1, all));
        let (reply, res) = self.send(call.clone());
        let seq = res.results.first().map(ResOp::status);
        if mode == 2 {
            assert_eq!(
                seq,
                Some(Nfsstat4::SeqMisordered),
                "sequence id ahead of the slot"
            );
            return res;
        }
        assert_eq!(seq, Some(Nfsstat4::Ok), "the slot's next sequence id");
        self.slots[s].seqid = seqid;
        self.slots[s].last = Some((call, reply, cache));
        for r in &res.results {
            match r {
                ResOp::Getfh(Res4::Ok(fh)) if self.handles.len() < 32 => {
                    self.handles.push(fh.clone())
                }
                ResOp::Open(Res4::Ok(o)) if self.stateids.len() < 32 => {
                    self.stateids.push(o.stateid)
                }
                _ => {}
            }
        }
        res
    }

    fn fh(&self, pick: u8) -> ArgOp {
        if self.handles.is_empty() || pick < 32 {
            return ArgOp::Putrootfh;
        }
        ArgOp::Putfh(self.handles[usize::from(pick) % self.handles.len()].clone())
    }

    fn stateid(&self, pick: u8) -> Stateid4 {
        match self.stateids.len() {
            _ if pick < 16 => Stateid4::ANONYMOUS,
            0 => Stateid4::CURRENT,
            n => self.stateids[usize::from(pick) % n],
        }
    }
}

fn name(b: u8) -> Component4 {
    Component4(Bytes::from(vec![b'a' + b % 5]))
}

fn all_attributes() -> Bitmap4 {
    Bitmap4(vec![u32::MAX; 3])
}

fn op(c: &Client, kind: u8, a: u8, b: u8) -> Vec<ArgOp> {
    let open = |how: Openflag4, claim: OpenClaim4| {
        ArgOp::Open(OpenArgs {
            seqid: 0,
            share_access: u32::from(a % 3) + 1,
            share_deny: u32::from(b % 4),
            owner: StateOwner4 {
                clientid: 0,
                owner: Opaque4(Bytes::from(vec![b'o', a % 3])),
            },
            openhow: how,
            claim,
        })
    };
    match kind % 15 {
        0 => {
            let attrs = Fattr {
                mode: Some(0o644),
                ..Fattr::default()
            }
            .to_fattr4();
            let how = if b & 1 == 0 {
                Createhow4::Unchecked(attrs)
            } else {
                Createhow4::Guarded(attrs)
            };
            vec![
                open(Openflag4::Create(how), OpenClaim4::Null(name(b))),
                ArgOp::Getfh,
            ]
        }
        1 => vec![
            open(Openflag4::NoCreate, OpenClaim4::Null(name(b))),
            ArgOp::Getfh,
        ],
        2 => vec![open(Openflag4::NoCreate, OpenClaim4::Fh)],
        3 => vec![ArgOp::Write(WriteArgs {
            stateid: c.stateid(a),
            offset: u64::from(b) * 1000,
            stable: if a & 1 == 0 {
                StableHow4::Unstable
            } else {
                StableHow4::FileSync
            },
            data: Bytes::from(vec![a; usize::from(b) * 13]),
        })],
        4 => vec![ArgOp::Read(ReadArgs {
            stateid: c.stateid(a),
            offset: u64::from(b) * 700,
            count: u32::from(a) * 64,
        })],
        5 => vec![ArgOp::Close(CloseArgs {
            seqid: 0,
            open_stateid: c.stateid(a),
        })],
        6 => vec![ArgOp::OpenDowngrade(OpenDowngradeArgs {
            open_stateid: c.stateid(a),
            seqid: 0,
            share_access: u32::from(b % 3) + 1,
            share_deny: u32::from(b >> 4) % 4,
        })],
        7 => vec![ArgOp::Remove(name(b))],
        8 => vec![
            ArgOp::Savefh,
            ArgOp::Rename(RenameArgs {
                oldname: name(a),
                newname: name(b),
            }),
        ],
        9 => vec![ArgOp::Readdir(ReaddirArgs {
            cookie: u64::from(a % 8),
            cookieverf: [0; 8],
            dircount: u32::from(b) * 8,
            maxcount: u32::from(b) * 32 + 64,
            attr_request: all_attributes(),
        })],
        10 => vec![ArgOp::Getattr(all_attributes())],
        11 => vec![
            ArgOp::Savefh,
            ArgOp::Lookup(name(a)),
            ArgOp::Restorefh,
            ArgOp::Getfh,
        ],
        12 => vec![ArgOp::TestStateid(TestStateidArgs {
            ts_stateids: vec![c.stateid(a), c.stateid(b)],
        })],
        13 => vec![ArgOp::FreeStateid(c.stateid(a))],
        _ => vec![ArgOp::Lookupp, ArgOp::Getfh],
    }
}

fuzz_target!(|data: &[u8]| {
    let (dispatcher, _) = granary_fuzz::server();
    let mut c = Client::connect(dispatcher);
    for step in data.chunks_exact(4).take(200) {
        let [kind, a, b, flags] = [step[0], step[1], step[2], step[3]];
        let slot = u32::from(flags & 3);
        let mode = match flags >> 5 {
            0 => 1,
            1 => 2,
            _ => 0,
        };
        let mut ops = vec![c.fh(a)];
        ops.extend(op(&c, kind, a, b));
        c.sequenced(slot, mode, flags & 4 == 0, ops);
    }
});
