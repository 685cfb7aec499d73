//! Stateful: a sequence of well-formed NFSv3 calls (CREATE, MKDIR, WRITE, READ, REMOVE,
//! RENAME, SYMLINK, LINK, SETATTR, READDIRPLUS, COMMIT, LOOKUP) on handles the server
//! handed out, through the real dispatcher over a fresh mem export. Each reply must be a
//! successful RPC reply whose NFS result decodes; names come from a tiny alphabet so that
//! collisions, renames over files and removals of busy directories happen often.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use nfs3::mount::{DirPath, MntRes};
use nfs3::nfs::*;
use rpc::msg::{decode_reply_header, AcceptStat, AuthSys, CallHeader, OpaqueAuth, ReplyStatus};
use xdr::{Decode, Decoder, Encode, Encoder};

struct Session {
    dispatcher: std::sync::Arc<rpc::Dispatcher>,
    xid: u32,
    handles: Vec<NfsFh3>,
}

impl Session {
    fn call<A: Encode, R: Decode>(&mut self, program: u32, procedure: u32, args: &A) -> R {
        self.xid += 1;
        let sys = AuthSys {
            stamp: 1,
            machine_name: Bytes::from_static(b"fuzz"),
            ..AuthSys::default()
        };
        let mut e = Encoder::new();
        CallHeader {
            xid: self.xid,
            program,
            version: 3,
            procedure,
            cred: OpaqueAuth {
                flavor: 1,
                body: sys.to_xdr(),
            },
            verf: OpaqueAuth::default(),
        }
        .encode(&mut e);
        args.encode(&mut e);
        let reply = self
            .dispatcher
            .handle(e.into_bytes(), granary_fuzz::PEER)
            .expect("every well-formed call is answered");
        let mut d = Decoder::new(reply.slice(4..));
        let (xid, status) = decode_reply_header(&mut d).expect("reply header");
        assert_eq!(xid, self.xid);
        assert_eq!(status, ReplyStatus::Accepted(AcceptStat::Success), "proc {procedure}");
        let res = R::decode(&mut d).expect("result decodes");
        assert_eq!(d.remaining(), 0, "proc {procedure}: trailing bytes");
        res
    }

    fn handle(&self, pick: u8) -> NfsFh3 {
        self.handles[usize::from(pick) % self.handles.len()].clone()
    }

    fn keep(&mut self, fh: Option<NfsFh3>) {
        if let Some(fh) = fh {
            if self.handles.len() < 64 {
                self.handles.push(fh);
            }
        }
    }
}

fn name(b: u8) -> Filename3 {
    Filename3(Bytes::from(vec![b'a' + b % 6]))
}

fn dirop(s: &Session, h: u8, n: u8) -> DirOpArgs3 {
    DirOpArgs3 {
        dir: s.handle(h),
        name: name(n),
    }
}

fn created(res: Res3<CreateOk, CreateFail>) -> Option<NfsFh3> {
    match res {
        Res3::Ok(ok) => ok.obj.0,
        Res3::Fail(..) => None,
    }
}

fn step(s: &mut Session, op: [u8; 4]) {
    let [kind, a, b, c] = op;
    let sattr = Sattr3::default();
    match kind % 12 {
        0 => {
            let args = CreateArgs { where_: dirop(s, a, b), how: CreateHow3::Unchecked(sattr) };
            let fh = created(s.call(100_003, 8, &args));
            s.keep(fh);
        }
        1 => {
            let args = MkdirArgs { where_: dirop(s, a, b), attributes: sattr };
            let fh = created(s.call(100_003, 9, &args));
            s.keep(fh);
        }
        2 => {
            let data = Bytes::from(vec![c; usize::from(b) * 97]);
            let args = WriteArgs {
                file: s.handle(a),
                offset: u64::from(c) * 40_000,
                count: data.len() as u32,
                stable: StableHow::Unstable,
                data,
            };
            let _: WriteRes = s.call(100_003, 7, &args);
        }
        3 => {
            let args = ReadArgs { file: s.handle(a), offset: u64::from(b) * 1000, count: u32::from(c) * 512 };
            let _: ReadRes = s.call(100_003, 6, &args);
        }
        4 => {
            let _: RemoveRes = s.call(100_003, 12 + u32::from(c % 2), &RemoveArgs { object: dirop(s, a, b) });
        }
        5 => {
            let args = RenameArgs { from: dirop(s, a, b), to: dirop(s, c, c >> 3) };
            let _: RenameRes = s.call(100_003, 14, &args);
        }
        6 => {
            let target = NfsPath3(Bytes::from(vec![b'x'; usize::from(c) * 4]));
            let args = SymlinkArgs {
                where_: dirop(s, a, b),
                symlink: SymlinkData3 { symlink_attributes: sattr, symlink_data: target },
            };
            let fh = created(s.call(100_003, 10, &args));
            s.keep(fh);
        }
        7 => {
            let args = LinkArgs { file: s.handle(a), link: dirop(s, b, c) };
            let _: LinkRes = s.call(100_003, 15, &args);
        }
        8 => {
            let new_attributes = Sattr3 { size: Some(u64::from(b) * 3000), ..Sattr3::default() };
            let args = SetattrArgs { object: s.handle(a), new_attributes, guard: SattrGuard3(None) };
            let _: SetattrRes = s.call(100_003, 2, &args);
        }
        9 => {
            let args = ReaddirplusArgs {
                dir: s.handle(a),
                cookie: u64::from(b % 4),
                cookieverf: [0; 8],
                dircount: u32::from(c) * 16,
                maxcount: u32::from(c) * 64 + 64,
            };
            let _: ReaddirplusRes = s.call(100_003, 17, &args);
        }
        10 => {
            let args = CommitArgs { file: s.handle(a), offset: u64::from(b) << 56, count: u32::from(c) << 24 };
            let _: CommitRes = s.call(100_003, 21, &args);
        }
        _ => {
            let res: LookupRes = s.call(100_003, 3, &LookupArgs { what: dirop(s, a, b) });
            if let Res3::Ok(ok) = res {
                s.keep(Some(ok.object));
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (dispatcher, _) = granary_fuzz::server();
    let mut s = Session { dispatcher, xid: 0, handles: Vec::new() };
    let root = match s.call::<_, MntRes>(100_005, 1, &DirPath(Bytes::from_static(b"/"))) {
        MntRes::Ok { fhandle, .. } => fhandle,
        MntRes::Fail(st) => panic!("MNT / failed: {st:?}"),
    };
    s.handles.push(root.clone());
    for op in data.chunks_exact(4).take(256) {
        step(&mut s, [op[0], op[1], op[2], op[3]]);
    }
    let stat: FsstatRes = s.call(100_003, 18, &FsstatArgs { fsroot: root });
    if let Res3::Ok(ok) = stat {
        assert!(ok.fbytes <= ok.tbytes, "free {} > total {}", ok.fbytes, ok.tbytes);
    }
});
