//! Whole NFSv4 COMPOUND argument bodies (tag, minor version, operations) after a
//! well-formed RPC call header, through the real dispatcher over a mem export. Every
//! call gets an accepted reply; when it is a COMPOUND reply, it decodes with nothing left
//! over, every operation but the last succeeded, and the COMPOUND's status is the last
//! operation's (RFC 8881 section 16.2.3: the server stops at the first failure).
#![no_main]

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use nfs4::{Compound4Res, Nfsstat4};
use rpc::msg::{decode_reply_header, AcceptStat, AuthSys, CallHeader, OpaqueAuth, ReplyStatus};
use xdr::{Decode, Decoder, Encode, Encoder};

static SERVER: OnceLock<(Arc<rpc::Dispatcher>, Arc<nfsd::NfsState>)> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let (dispatcher, _) = SERVER.get_or_init(granary_fuzz::server);
    let sys = AuthSys {
        stamp: 1,
        machine_name: Bytes::from_static(b"fuzz"),
        ..AuthSys::default()
    };
    let mut e = Encoder::new();
    CallHeader {
        xid: 44,
        program: 100_003,
        version: 4,
        procedure: 1,
        cred: OpaqueAuth {
            flavor: 1,
            body: sys.to_xdr(),
        },
        verf: OpaqueAuth::default(),
    }
    .encode(&mut e);
    e.fixed_opaque(data);
    let reply = dispatcher
        .handle(e.into_bytes(), granary_fuzz::PEER)
        .expect("a call with a well-formed header is answered");
    let mut d = Decoder::new(reply.slice(4..));
    let (xid, status) = decode_reply_header(&mut d).expect("reply header");
    assert_eq!(xid, 44);
    let ReplyStatus::Accepted(accepted) = status else {
        panic!("a COMPOUND call was denied: {status:?}");
    };
    if accepted != AcceptStat::Success {
        // GARBAGE_ARGS: the COMPOUND's own header (tag, minor version, count) is unreadable.
        assert_eq!(accepted, AcceptStat::GarbageArgs);
        return;
    }
    let res = Compound4Res::decode(&mut d).expect("the COMPOUND reply decodes");
    assert_eq!(d.remaining(), 0, "bytes after the COMPOUND reply");
    if let Some((last, before)) = res.results.split_last() {
        assert_eq!(
            res.status,
            last.status(),
            "COMPOUND status is the last op's"
        );
        for r in before {
            assert_eq!(
                r.status(),
                Nfsstat4::Ok,
                "the COMPOUND went on after a failure"
            );
        }
    }
});
