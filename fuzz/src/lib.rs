//! Helpers shared by granary's fuzz targets: a server stack (dispatcher, NFSv3 + MOUNT +
//! NLM + NSM and NFSv4.1/4.2 over one mem export) built the way `granary serve` builds it,
//! without sockets (the calls NLM makes to clients are dropped).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use nfs4::{Compound4Res, Nfsstat4};
use rpc::msg::{decode_reply_header, AcceptStat, AuthSys, CallHeader, OpaqueAuth, ReplyStatus};
use rpc::Dispatcher;
use vfs::{Export, ExportId, ExportOptions, ExportTable, HandleKey};
use xdr::{Decode, Decoder, Encode, Encoder};

/// The peer every fuzzed call comes from.
pub const PEER: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    700,
));

/// Drops NLM's calls to clients, telling their callers they failed.
struct Dropped;

impl nfsd::nlm::Outbox for Dropped {
    fn send(&self, call: nfsd::nlm::Callback) {
        if let Some(done) = call.done {
            done(Err("fuzzing: no client".into()));
        }
    }
}

/// A dispatcher serving NFSv3, MOUNT v3, NLM v4, NSM v1 and NFSv4.1/4.2 over one small mem
/// export `/`, with a reply cache, on a manual clock (no time passes unless a target advances it).
#[must_use]
pub fn server() -> (Arc<Dispatcher>, Arc<nfsd::NfsState>) {
    let clock = Arc::new(gtime::ManualClock::new(gtime::Timestamp::default()));
    let mem = backend_mem::MemConfig {
        capacity_bytes: 4 << 20,
        max_files: 4096,
        ..Default::default()
    };
    let backend: Arc<dyn vfs::Backend> = Arc::new(backend_mem::MemFs::new(mem, clock.clone()));
    let options = ExportOptions::default();
    let export = Export::new(ExportId(1), 1, "/".into(), options, backend);
    let table = ExportTable::new(vec![export], HandleKey::new([2; 16]));
    let max_io_bytes = nfsd::limits::MAX_IO_BYTES;
    let state = Arc::new(nfsd::NfsState::new(table, [7; 8], max_io_bytes));
    let mut d = Dispatcher::new();
    nfsd::register(&mut d, &state);
    let nlm = nfsd::nlm::NlmState::new(
        Arc::clone(&state),
        nfsd::nlm::Monitor::in_memory(),
        clock.clone(),
        Arc::new(Dropped),
    );
    nfsd::nlm::register(&mut d, &nlm);
    let v4 = Arc::new(nfsd::v4::Nfs4State::with_defaults(
        Arc::clone(&state),
        clock.clone(),
        0x5eed,
    ));
    nfsd::v4::register(&mut d, &v4);
    let cache = Arc::new(rpc::drc::ReplyCache::new(
        64,
        std::time::Duration::from_secs(60),
    ));
    d.set_reply_cache(cache, clock);
    (Arc::new(d), state)
}

/// An NFSv4 COMPOUND call record from an AUTH_SYS root caller: `xid`, then `args` (the
/// COMPOUND's arguments, encoded or raw).
#[must_use]
pub fn compound_call(xid: u32, args: &impl Encode) -> Bytes {
    let sys = AuthSys {
        stamp: 1,
        machine_name: Bytes::from_static(b"fuzz"),
        ..AuthSys::default()
    };
    let mut e = Encoder::new();
    CallHeader {
        xid,
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
    args.encode(&mut e);
    e.into_bytes()
}

/// Bytes that encode as themselves (arguments that are not a well-formed COMPOUND).
pub struct Raw<'a>(pub &'a [u8]);

impl Encode for Raw<'_> {
    fn encode(&self, e: &mut Encoder) {
        e.fixed_opaque(self.0);
    }
}

/// Reads the reply `dispatcher` gave to `call` (a [`compound_call`]): it must be accepted
/// and carry the call's xid. For SUCCESS, the COMPOUND result must decode with nothing
/// left over, and follow RFC 8881 section 16.2.3: every result before the last succeeded
/// and the COMPOUND's status is the last one's. Returns the accept status and the result.
#[must_use]
pub fn compound_reply(call: &Bytes, reply: &Bytes) -> (AcceptStat, Option<Compound4Res>) {
    let mut d = Decoder::new(reply.slice(4..));
    let (xid, status) = decode_reply_header(&mut d).expect("reply header");
    assert_eq!(xid.to_be_bytes(), call[..4], "the reply's xid");
    let ReplyStatus::Accepted(accepted) = status else {
        panic!("a COMPOUND call was denied: {status:?}");
    };
    if accepted != AcceptStat::Success {
        return (accepted, None);
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
    (accepted, Some(res))
}
