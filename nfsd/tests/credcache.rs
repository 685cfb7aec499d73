//! Seed 004's credential cache in the request path: the mapped credential per (export,
//! client identity) is shared across calls, mapped by the same rules as without the cache,
//! and holds identities only, so a permission changed on the server is checked by the very
//! next call.

use std::net::SocketAddr;
use std::sync::Arc;

use backend_mem::{MemConfig, MemFs};
use bytes::Bytes;
use granary_nfsd as nfsd;
use gtime::{ManualClock, Timestamp};
use nfs3::nfs::{NfsFh3, Nfsstat3, ReadArgs, ReadRes};
use rpc::msg::{AcceptStat, AuthSys, CallHeader, OpaqueAuth, AUTH_SYS};
use rpc::{Auth, CallContext, Dispatcher};
use vfs::{
    Backend, CreateMode, Cred, Export, ExportId, ExportOptions, ExportTable, FileId, HandleKey,
    Name, SetAttr, Squash, Stability, Trusted,
};
use xdr::{Encode, Encoder};

const READ: u32 = 6;
const NOBODY: u32 = 65_534;

struct Server {
    mem: Arc<MemFs>,
    state: Arc<nfsd::NfsState>,
    dispatcher: Dispatcher,
}

/// Export 1 is `/` with root squash, export 2 is `/open` with no squash, one mem backend.
fn server(cache_on: bool) -> Server {
    let clock = Arc::new(ManualClock::new(Timestamp {
        seconds: 1_700_000_000,
        nanos: 0,
    }));
    let mem = Arc::new(MemFs::new(MemConfig::default(), clock));
    let squash_none = ExportOptions {
        squash: Squash::None,
        ..ExportOptions::default()
    };
    let exports = vec![
        Export::new(
            ExportId(1),
            7,
            "/".into(),
            ExportOptions::default(),
            mem.clone(),
        ),
        Export::new(ExportId(2), 7, "/open".into(), squash_none, mem.clone()),
    ];
    let table = ExportTable::new(exports, HandleKey::new([3; 16]));
    let state = nfsd::NfsState::new(table, [1; 8], nfsd::limits::MAX_IO_BYTES);
    let state = Arc::new(state.with_cred_cache(cache_on));
    let mut dispatcher = Dispatcher::new();
    nfsd::register(&mut dispatcher, &state);
    Server {
        mem,
        state,
        dispatcher,
    }
}

fn sys(uid: u32, gid: u32, gids: &[u32]) -> Auth {
    Auth::Sys(AuthSys {
        stamp: 0,
        machine_name: Bytes::from_static(b"t"),
        uid,
        gid,
        gids: gids.to_vec(),
    })
}

fn ctx(auth: Auth) -> CallContext {
    CallContext::new(1, "127.0.0.1:800".parse().unwrap(), auth, READ)
}

impl Server {
    fn fh(&self, export: u32, id: FileId) -> NfsFh3 {
        let export = self.state.exports.by_id(ExportId(export)).unwrap();
        self.state.handle(export, &self.mem.getattr(id).unwrap())
    }

    fn cred(&self, fh: &NfsFh3, auth: Auth) -> Arc<Cred> {
        let target = self.state.resolve(&ctx(auth), fh).expect("resolves");
        target.cred
    }

    /// A file `name` in the root owned by `uid`:`gid` with `mode`, holding 4 bytes.
    fn file(&self, name: &str, uid: u32, gid: u32, mode: u32) -> FileId {
        let set = SetAttr {
            mode: Some(mode),
            uid: Some(uid),
            gid: Some(gid),
            ..SetAttr::default()
        };
        let name = Name::new(name.as_bytes().to_vec()).unwrap();
        let made = self.mem.create(
            self.mem.root(),
            &name,
            &CreateMode::Guarded(SetAttr::default()),
            &Trusted::ROOT,
        );
        let id = made.unwrap().attr.fileid;
        self.mem.setattr(id, &set, None, &Trusted::ROOT).unwrap();
        let attr = self.mem.getattr(id).unwrap();
        assert_eq!((attr.uid, attr.gid, attr.mode & 0o7777), (uid, gid, mode));
        let written = self
            .mem
            .write(id, 0, b"data", Stability::Unstable, &Trusted::ROOT);
        written.unwrap();
        id
    }

    /// A whole READ through the dispatcher as `auth`; its status.
    fn read(&self, fh: &NfsFh3, auth: &AuthSys) -> Nfsstat3 {
        let header = CallHeader {
            xid: 9,
            program: 100_003,
            version: 3,
            procedure: READ,
            cred: OpaqueAuth {
                flavor: AUTH_SYS,
                body: auth.to_xdr(),
            },
            verf: OpaqueAuth::default(),
        };
        let mut e = Encoder::new();
        header.encode(&mut e);
        let args = ReadArgs {
            file: fh.clone(),
            offset: 0,
            count: 4,
        };
        args.encode(&mut e);
        let peer: SocketAddr = "127.0.0.1:800".parse().unwrap();
        let reply = self
            .dispatcher
            .handle(e.into_bytes(), peer)
            .expect("a reply");
        let mut d = xdr::Decoder::new(reply.slice(4..));
        let (_, status) = rpc::msg::decode_reply_header(&mut d).unwrap();
        assert_eq!(status, rpc::msg::ReplyStatus::Accepted(AcceptStat::Success));
        <ReadRes as xdr::Decode>::decode(&mut d).unwrap().status()
    }

    fn chmod(&self, id: FileId, mode: u32) {
        let set = SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        };
        self.mem.setattr(id, &set, None, &Trusted::ROOT).unwrap();
    }
}

#[test]
fn one_identity_shares_one_mapped_credential_per_export() {
    let s = server(true);
    let root = s.mem.root();
    let (squashed, open) = (s.fh(1, root), s.fh(2, root));
    let user = || sys(1000, 0, &[0, 5, 6]);

    let first = s.cred(&squashed, user());
    let again = s.cred(&squashed, user());
    assert!(
        Arc::ptr_eq(&first, &again),
        "a hit shares the mapped credential"
    );
    // Mapped exactly as without the cache: group 0 squashed on the root-squash export.
    let options = &s.state.exports.by_id(ExportId(1)).unwrap().options;
    let sent = nfsd::state::sent_cred(&user());
    assert_eq!(*first, options.map_cred(sent.as_ref()));
    assert_eq!(first.groups, [NOBODY, 5, 6]);

    // The same identity on another export is another entry, mapped by that export's rules.
    let unsquashed = s.cred(&open, user());
    assert_eq!(unsquashed.gid, 0);
    assert!(!Arc::ptr_eq(&first, &unsquashed));
    // Root is squashed on one export and not on the other.
    assert_eq!(s.cred(&squashed, sys(0, 0, &[])).uid, NOBODY);
    assert_eq!(s.cred(&open, sys(0, 0, &[])).uid, 0);
    // Another group list (even the same groups in another order) is another identity.
    let reordered = s.cred(&squashed, sys(1000, 0, &[6, 5, 0]));
    assert_eq!(reordered.groups, [6, 5, NOBODY]);
    // AUTH_NONE is the anonymous identity, and not confused with uid 0's key.
    let none = s.cred(&open, Auth::None);
    assert_eq!((none.uid, none.gid), (NOBODY, NOBODY));
    assert!(Arc::ptr_eq(&none, &s.cred(&open, Auth::None)));
    // 8 lookups: `again` and the second AUTH_NONE hit, every other one mapped once (hits
    // of a worker thread's own entries are reported in batches, so only misses are exact).
    assert_eq!(
        s.state.cred_cache_stats().map(|(_, misses)| misses),
        Some(6)
    );
}

#[test]
fn off_maps_every_call_afresh_with_the_same_result() {
    let (on, off) = (server(true), server(false));
    let root = on.mem.root();
    for (uid, gid, gids) in [(1000, 0, vec![0, 5]), (0, 0, vec![]), (7, 7, vec![7])] {
        for export in [1, 2] {
            let cached = on.cred(&on.fh(export, root), sys(uid, gid, &gids));
            let a = off.cred(&off.fh(export, root), sys(uid, gid, &gids));
            let b = off.cred(&off.fh(export, root), sys(uid, gid, &gids));
            assert_eq!((&*cached, &*a), (&*b, &*b), "uid {uid} export {export}");
            assert!(
                !Arc::ptr_eq(&a, &b),
                "off: each call maps its own credential"
            );
        }
    }
    assert_eq!(off.state.cred_cache_stats(), None);
}

#[test]
fn a_permission_change_on_the_server_is_seen_by_the_next_call() {
    let s = server(true);
    let id = s.file("f", 1000, 100, 0o644);
    let fh = s.fh(1, id);
    let other = AuthSys {
        stamp: 0,
        machine_name: Bytes::from_static(b"t"),
        uid: 2000,
        gid: 100,
        gids: vec![100],
    };
    assert_eq!(s.read(&fh, &other), Nfsstat3::Ok);
    assert_eq!(s.read(&fh, &other), Nfsstat3::Ok);
    // Changed on the server, behind the client's back: the next READ is refused.
    s.chmod(id, 0o600);
    assert_eq!(s.read(&fh, &other), Nfsstat3::Acces);
    // Group read: the same cached identity is now allowed through its group.
    s.chmod(id, 0o640);
    assert_eq!(s.read(&fh, &other), Nfsstat3::Ok);
    let (_, misses) = s.state.cred_cache_stats().unwrap();
    assert_eq!(misses, 1, "the four calls mapped one credential");
}
