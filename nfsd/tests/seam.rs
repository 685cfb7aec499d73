//! The NFSv3 server in process: a `Dispatcher` over the mem backend behind a counting
//! wrapper, whole request records in, whole reply records compared (the style of
//! Buildbarn's NFSv4 tests). Covers the seam's promises: one backend call per common RPC,
//! weak cache consistency data that brackets exactly the caller's own change when
//! another client races it, and no truncation without write permission under a racing
//! create.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use backend_mem::{MemConfig, MemFs};
use bytes::{Bytes, BytesMut};
use granary_nfsd as nfsd;
use gtime::{ManualClock, Timestamp};
use nfs3::nfs::*;
use rpc::msg::{encode_accepted, AcceptStat, AuthSys, CallHeader, OpaqueAuth, AUTH_SYS};
use rpc::Dispatcher;
use vfs::{
    Attr, Backend, Change, Checks, Cookie, CreateMode, Created, DirPage, Export, ExportId,
    ExportOptions, ExportTable, FileId, Found, FsProperties, FsResult, FsStat, HandleKey, Linked,
    Name, ReadDone, Renamed, SetAttr, SpecialFile, Squash, Stability, Written,
};
use xdr::{Encode, Encoder};

type Hook = Box<dyn FnOnce() + Send>;

/// Forwards to a `MemFs`, counting calls, and can run a hook (another client's request)
/// at the start of the next CREATE or REMOVE, before the call reaches the mem backend.
struct Counting {
    inner: MemFs,
    calls: AtomicUsize,
    log: Mutex<Vec<&'static str>>,
    hook: Mutex<Option<Hook>>,
    /// What `writeback_errors` reports (a test sets it).
    writeback: std::sync::atomic::AtomicU64,
}

impl Counting {
    fn count(&self, what: &'static str) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.log.lock().unwrap().push(what);
    }

    fn run_hook(&self) {
        let hook = self.hook.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
    }

    /// Calls so far, and forgets them.
    fn take(&self) -> Vec<&'static str> {
        self.calls.store(0, Ordering::SeqCst);
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

impl Backend for Counting {
    fn kind(&self) -> &'static str {
        "counting"
    }
    fn root(&self) -> FileId {
        self.inner.root()
    }
    fn properties(&self) -> FsProperties {
        self.inner.properties()
    }
    fn fsstat(&self) -> FsResult<FsStat> {
        self.count("fsstat");
        self.inner.fsstat()
    }
    fn generation(&self, id: FileId) -> FsResult<u32> {
        self.count("generation");
        self.inner.generation(id)
    }
    fn writeback_errors(&self) -> u64 {
        self.writeback.load(Ordering::SeqCst)
    }
    fn getattr(&self, id: FileId) -> FsResult<Attr> {
        self.count("getattr");
        self.inner.getattr(id)
    }
    fn setattr(
        &self,
        id: FileId,
        set: &SetAttr,
        guard: Option<Timestamp>,
        checks: &dyn Checks,
    ) -> FsResult<Change> {
        self.count("setattr");
        self.inner.setattr(id, set, guard, checks)
    }
    fn lookup(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Found> {
        self.count("lookup");
        self.inner.lookup(dir, name, checks)
    }
    fn parent(&self, dir: FileId, checks: &dyn Checks) -> FsResult<Found> {
        self.count("parent");
        self.inner.parent(dir, checks)
    }
    fn read_into(
        &self,
        id: FileId,
        offset_bytes: u64,
        count: u32,
        out: &mut BytesMut,
        checks: &dyn Checks,
    ) -> FsResult<ReadDone> {
        self.count("read_into");
        self.inner.read_into(id, offset_bytes, count, out, checks)
    }
    fn write(
        &self,
        id: FileId,
        offset_bytes: u64,
        data: &[u8],
        stable: Stability,
        checks: &dyn Checks,
    ) -> FsResult<Written> {
        self.count("write");
        self.inner.write(id, offset_bytes, data, stable, checks)
    }
    fn commit(&self, id: FileId, offset_bytes: u64, count: u32) -> FsResult<Change> {
        self.count("commit");
        self.inner.commit(id, offset_bytes, count)
    }
    fn create(
        &self,
        dir: FileId,
        name: &Name,
        mode: &CreateMode,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        self.run_hook();
        self.count("create");
        self.inner.create(dir, name, mode, checks)
    }
    fn mkdir(
        &self,
        dir: FileId,
        name: &Name,
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        self.count("mkdir");
        self.inner.mkdir(dir, name, attrs, checks)
    }
    fn symlink(
        &self,
        dir: FileId,
        name: &Name,
        target: &[u8],
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        self.count("symlink");
        self.inner.symlink(dir, name, target, attrs, checks)
    }
    fn mknod(
        &self,
        dir: FileId,
        name: &Name,
        kind: SpecialFile,
        attrs: &SetAttr,
        checks: &dyn Checks,
    ) -> FsResult<Created> {
        self.count("mknod");
        self.inner.mknod(dir, name, kind, attrs, checks)
    }
    fn readlink(&self, id: FileId) -> FsResult<(Bytes, Attr)> {
        self.count("readlink");
        self.inner.readlink(id)
    }
    fn remove(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Change> {
        self.run_hook();
        self.count("remove");
        self.inner.remove(dir, name, checks)
    }
    fn rmdir(&self, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Change> {
        self.count("rmdir");
        self.inner.rmdir(dir, name, checks)
    }
    fn rename(
        &self,
        from_dir: FileId,
        from: &Name,
        to_dir: FileId,
        to: &Name,
        checks: &dyn Checks,
    ) -> FsResult<Renamed> {
        self.count("rename");
        self.inner.rename(from_dir, from, to_dir, to, checks)
    }
    fn link(&self, id: FileId, dir: FileId, name: &Name, checks: &dyn Checks) -> FsResult<Linked> {
        self.count("link");
        self.inner.link(id, dir, name, checks)
    }
    fn readdir(
        &self,
        dir: FileId,
        cookie: Cookie,
        max_entries: usize,
        checks: &dyn Checks,
    ) -> FsResult<(DirPage, Attr)> {
        self.count("readdir");
        self.inner.readdir(dir, cookie, max_entries, checks)
    }
}

const PEER: &str = "127.0.0.1:700";
const NFS: (u32, u32) = (100_003, 3);

/// One server in process.
struct Server {
    dispatcher: Arc<Dispatcher>,
    backend: Arc<Counting>,
    state: Arc<nfsd::NfsState>,
    xid: AtomicUsize,
}

/// Who calls: AUTH_SYS uid, gid and no other groups.
#[derive(Clone, Copy)]
struct As(u32, u32);

const ROOT: As = As(0, 0);

impl Server {
    fn new() -> Arc<Self> {
        let clock = Arc::new(ManualClock::new(Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        }));
        let backend = Arc::new(Counting {
            inner: MemFs::new(MemConfig::default(), clock),
            calls: AtomicUsize::new(0),
            log: Mutex::new(Vec::new()),
            hook: Mutex::new(None),
            writeback: std::sync::atomic::AtomicU64::new(0),
        });
        let options = ExportOptions {
            squash: Squash::None,
            ..ExportOptions::default()
        };
        let export = Export::new(ExportId(1), 7, "/".into(), options, backend.clone());
        let exports = ExportTable::new(vec![export], HandleKey::new([9; 16]));
        let state = Arc::new(nfsd::NfsState::new(
            exports,
            [1; 8],
            nfsd::limits::MAX_IO_BYTES,
        ));
        let mut dispatcher = Dispatcher::new();
        nfsd::register(&mut dispatcher, &state);
        Arc::new(Self {
            dispatcher: Arc::new(dispatcher),
            backend,
            state,
            xid: AtomicUsize::new(1),
        })
    }

    /// The request record of procedure `procedure` with `args`, and its xid.
    fn request(&self, who: As, procedure: u32, args: &impl Encode) -> (u32, Bytes) {
        let xid = u32::try_from(self.xid.fetch_add(1, Ordering::SeqCst)).unwrap();
        let cred = AuthSys {
            stamp: 0,
            machine_name: Bytes::from_static(b"test"),
            uid: who.0,
            gid: who.1,
            gids: vec![],
        };
        let header = CallHeader {
            xid,
            program: NFS.0,
            version: NFS.1,
            procedure,
            cred: OpaqueAuth {
                flavor: AUTH_SYS,
                body: cred.to_xdr(),
            },
            verf: OpaqueAuth::default(),
        };
        let mut e = Encoder::new();
        header.encode(&mut e);
        args.encode(&mut e);
        (xid, e.into_bytes())
    }

    /// Sends one request; returns the whole reply record (mark included) and its xid.
    fn call(&self, who: As, procedure: u32, args: &impl Encode) -> (u32, Bytes) {
        let (xid, record) = self.request(who, procedure, args);
        let peer: SocketAddr = PEER.parse().unwrap();
        (xid, self.dispatcher.handle(record, peer).expect("a reply"))
    }

    /// Calls, and checks the whole reply against `expected(reply)`, built from the
    /// decoded results (so that a mismatch shows both as values).
    fn expect_reply<R: Encode + xdr::Decode + std::fmt::Debug + PartialEq>(
        &self,
        reply: &(u32, Bytes),
        expected: &R,
    ) -> R {
        let got = decode_reply::<R>(&reply.1);
        assert_eq!(&got, expected, "reply results");
        assert_eq!(reply.1, whole_reply(reply.0, expected), "reply bytes");
        got
    }

    fn export(&self) -> &Arc<Export> {
        self.state.exports.by_id(ExportId(1)).unwrap()
    }

    fn fh(&self, attr: &Attr) -> NfsFh3 {
        self.state.handle(self.export(), attr)
    }

    fn root_fh(&self) -> NfsFh3 {
        self.fh(&self.attr(self.backend.inner.root()))
    }

    /// Attributes as the export gives them (fsid set), read past the counter.
    fn attr(&self, id: FileId) -> Attr {
        let mut attr = self.backend.inner.getattr(id).unwrap();
        attr.fsid = 1;
        attr
    }

    fn lookup_id(&self, dir: FileId, name: &str) -> FileId {
        let name = Name::new(name.as_bytes().to_vec()).unwrap();
        self.backend
            .inner
            .lookup(dir, &name, &vfs::Trusted::ROOT)
            .unwrap()
            .attr
            .fileid
    }
}

/// The results of a reply record.
fn decode_reply<R: xdr::Decode>(record: &Bytes) -> R {
    let mut d = xdr::Decoder::new(record.slice(4..));
    let (_, status) = rpc::msg::decode_reply_header(&mut d).unwrap();
    assert_eq!(status, rpc::msg::ReplyStatus::Accepted(AcceptStat::Success));
    let res = R::decode(&mut d).unwrap();
    assert_eq!(d.remaining(), 0, "nothing after the results");
    res
}

/// The reply record a server must send for `xid` with results `res`.
fn whole_reply(xid: u32, res: &impl Encode) -> Bytes {
    let mut e = Encoder::from_buf(rpc::record::start_record(256));
    encode_accepted(&mut e, xid, AcceptStat::Success);
    res.encode(&mut e);
    rpc::record::seal(e.into_inner())
}

fn fattr(a: &Attr) -> Fattr3 {
    nfsd::convert::fattr(a)
}

fn wcc_attr(a: &Attr) -> WccAttr {
    nfsd::convert::wcc_attr(a)
}

fn dirop(dir: &NfsFh3, name: &str) -> DirOpArgs3 {
    DirOpArgs3 {
        dir: dir.clone(),
        name: Filename3(Bytes::copy_from_slice(name.as_bytes())),
    }
}

fn create_args(dir: &NfsFh3, name: &str, how: CreateHow3) -> CreateArgs {
    CreateArgs {
        where_: dirop(dir, name),
        how,
    }
}

fn mode(mode: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(mode),
        ..Sattr3::default()
    }
}

const GETATTR: u32 = 1;
const SETATTR: u32 = 2;
const LOOKUP: u32 = 3;
const READ: u32 = 6;
const WRITE: u32 = 7;
const CREATE: u32 = 8;
const REMOVE: u32 = 12;
const RENAME: u32 = 14;
const COMMIT: u32 = 21;

#[test]
fn common_procedures_make_one_backend_call() {
    let s = Server::new();
    let root = s.backend.inner.root();
    let root_fh = s.root_fh();

    let before = s.attr(root);
    s.backend.take();
    let reply = s.call(
        ROOT,
        CREATE,
        &create_args(&root_fh, "f", CreateHow3::Guarded(mode(0o644))),
    );
    assert_eq!(s.backend.take(), ["create"], "CREATE");
    let f = s.attr(s.lookup_id(root, "f"));
    s.expect_reply(
        &reply,
        &CreateRes::Ok(CreateOk {
            obj: PostOpFh3(Some(s.fh(&f))),
            obj_attributes: PostOpAttr(Some(fattr(&f))),
            dir_wcc: WccData {
                before: PreOpAttr(Some(wcc_attr(&before))),
                after: PostOpAttr(Some(fattr(&s.attr(root)))),
            },
        }),
    );
    let f_fh = s.fh(&f);

    let reply = s.call(
        ROOT,
        GETATTR,
        &GetattrArgs {
            object: f_fh.clone(),
        },
    );
    assert_eq!(s.backend.take(), ["getattr"], "GETATTR");
    s.expect_reply(
        &reply,
        &GetattrRes::Ok(GetattrOk {
            obj_attributes: fattr(&s.attr(f.fileid)),
        }),
    );

    let before = s.attr(f.fileid);
    s.backend.take();
    let data = Bytes::from(vec![5u8; 4096]);
    let write = WriteArgs {
        file: f_fh.clone(),
        offset: 0,
        count: 4096,
        stable: StableHow::FileSync,
        data: data.clone(),
    };
    let reply = s.call(ROOT, WRITE, &write);
    assert_eq!(s.backend.take(), ["write"], "WRITE");
    s.expect_reply(
        &reply,
        &WriteRes::Ok(WriteOk {
            file_wcc: WccData {
                before: PreOpAttr(Some(wcc_attr(&before))),
                after: PostOpAttr(Some(fattr(&s.attr(f.fileid)))),
            },
            count: 4096,
            committed: StableHow::FileSync,
            verf: [1; 8],
        }),
    );

    let read = ReadArgs {
        file: f_fh.clone(),
        offset: 0,
        count: 4096,
    };
    let reply = s.call(ROOT, READ, &read);
    assert_eq!(s.backend.take(), ["read_into"], "READ");
    s.expect_reply(
        &reply,
        &ReadRes::Ok(ReadOk {
            file_attributes: PostOpAttr(Some(fattr(&s.attr(f.fileid)))),
            count: 4096,
            eof: true,
            data,
        }),
    );

    let lookup = LookupArgs {
        what: dirop(&root_fh, "f"),
    };
    let reply = s.call(ROOT, LOOKUP, &lookup);
    assert_eq!(s.backend.take(), ["lookup"], "LOOKUP");
    s.expect_reply(
        &reply,
        &LookupRes::Ok(LookupOk {
            object: f_fh.clone(),
            obj_attributes: PostOpAttr(Some(fattr(&s.attr(f.fileid)))),
            dir_attributes: PostOpAttr(Some(fattr(&s.attr(root)))),
        }),
    );

    let before = s.attr(f.fileid);
    s.backend.take();
    let setattr = SetattrArgs {
        object: f_fh.clone(),
        new_attributes: mode(0o600),
        guard: SattrGuard3(None),
    };
    let reply = s.call(ROOT, SETATTR, &setattr);
    assert_eq!(s.backend.take(), ["setattr"], "SETATTR");
    s.expect_reply(
        &reply,
        &SetattrRes::Ok(SetattrOk {
            obj_wcc: WccData {
                before: PreOpAttr(Some(wcc_attr(&before))),
                after: PostOpAttr(Some(fattr(&s.attr(f.fileid)))),
            },
        }),
    );

    let before = s.attr(root);
    s.backend.take();
    let rename = RenameArgs {
        from: dirop(&root_fh, "f"),
        to: dirop(&root_fh, "g"),
    };
    let reply = s.call(ROOT, RENAME, &rename);
    assert_eq!(s.backend.take(), ["rename"], "RENAME");
    let dir_wcc = WccData {
        before: PreOpAttr(Some(wcc_attr(&before))),
        after: PostOpAttr(Some(fattr(&s.attr(root)))),
    };
    s.expect_reply(
        &reply,
        &RenameRes::Ok(RenameOk {
            fromdir_wcc: dir_wcc,
            todir_wcc: dir_wcc,
        }),
    );

    let before = s.attr(root);
    s.backend.take();
    let reply = s.call(
        ROOT,
        REMOVE,
        &RemoveArgs {
            object: dirop(&root_fh, "g"),
        },
    );
    assert_eq!(s.backend.take(), ["remove"], "REMOVE");
    s.expect_reply(
        &reply,
        &RemoveRes::Ok(RemoveOk {
            dir_wcc: WccData {
                before: PreOpAttr(Some(wcc_attr(&before))),
                after: PostOpAttr(Some(fattr(&s.attr(root)))),
            },
        }),
    );

    // A handle of the removed file: STALE, found by the one call that uses it.
    let reply = s.call(ROOT, GETATTR, &GetattrArgs { object: f_fh });
    assert_eq!(s.backend.take(), ["getattr"], "GETATTR of a removed file");
    s.expect_reply(&reply, &GetattrRes::Fail(Nfsstat3::Stale, Void));
}

/// Two clients create in one directory; the second's request lands inside the first's
/// (after the server received it, before the first reaches storage). Each reply's
/// directory wcc must bracket exactly its own entry: the first's "before" is the
/// second's "after", and the first's "after" holds both entries.
#[test]
fn racing_creates_each_bracket_their_own_change() {
    let s = Server::new();
    let root = s.backend.inner.root();
    let root_fh = s.root_fh();
    let initial = s.attr(root);
    let inner_reply: Arc<Mutex<Option<(u32, Bytes)>>> = Arc::default();
    {
        let (s2, root_fh, out) = (Arc::clone(&s), root_fh.clone(), Arc::clone(&inner_reply));
        *s.backend.hook.lock().unwrap() = Some(Box::new(move || {
            let how = CreateHow3::Guarded(mode(0o644));
            let reply = s2.call(As(2, 2), CREATE, &create_args(&root_fh, "b", how));
            *out.lock().unwrap() = Some(reply);
        }));
    }
    let how = CreateHow3::Guarded(mode(0o644));
    let outer = s.call(As(1, 1), CREATE, &create_args(&root_fh, "a", how));
    let inner = inner_reply
        .lock()
        .unwrap()
        .take()
        .expect("the racing create ran");

    let b = s.attr(s.lookup_id(root, "b"));
    let a = s.attr(s.lookup_id(root, "a"));
    let inner = s.expect_reply(
        &inner,
        &CreateRes::Ok(CreateOk {
            obj: PostOpFh3(Some(s.fh(&b))),
            obj_attributes: PostOpAttr(Some(fattr(&b))),
            dir_wcc: WccData {
                before: PreOpAttr(Some(wcc_attr(&initial))),
                after: created_dir_after(&s, &inner),
            },
        }),
    );
    let CreateRes::Ok(inner) = inner else {
        unreachable!()
    };
    let between = inner.dir_wcc.after.0.expect("attributes after");
    s.expect_reply(
        &outer,
        &CreateRes::Ok(CreateOk {
            obj: PostOpFh3(Some(s.fh(&a))),
            obj_attributes: PostOpAttr(Some(fattr(&a))),
            dir_wcc: WccData {
                before: PreOpAttr(Some(WccAttr {
                    size: between.size,
                    mtime: between.mtime,
                    ctime: between.ctime,
                })),
                after: PostOpAttr(Some(fattr(&s.attr(root)))),
            },
        }),
    );
    assert!(between.size > initial.size_bytes && between.size < s.attr(root).size_bytes);
}

/// The directory's attributes after, as a reply reported them (checked for consistency
/// with the other reply by the caller).
fn created_dir_after(_: &Server, reply: &(u32, Bytes)) -> PostOpAttr {
    match decode_reply::<CreateRes>(&reply.1) {
        CreateRes::Ok(ok) => ok.dir_wcc.after,
        CreateRes::Fail(status, body) => panic!("racing create failed: {status:?} {body:?}"),
    }
}

/// User 2 sends an UNCHECKED CREATE with size 0 for a name that does not exist yet; user
/// 1 creates that file (mode 0644, with data) while the request is on its way to storage.
/// User 2 may not write user 1's file, so the CREATE must fail with ACCES and the data
/// must stay.
#[test]
fn racing_create_never_truncates_without_write_permission() {
    let s = Server::new();
    let root = s.backend.inner.root();
    let root_fh = s.root_fh();
    {
        let s2 = Arc::clone(&s);
        *s.backend.hook.lock().unwrap() = Some(Box::new(move || {
            let owner = vfs::Trusted {
                owner: vfs::Owner { uid: 1, gid: 1 },
            };
            let name = Name::new(&b"f"[..]).unwrap();
            let how = CreateMode::Guarded(SetAttr {
                mode: Some(0o644),
                ..SetAttr::default()
            });
            let made = s2.backend.inner.create(root, &name, &how, &owner).unwrap();
            let id = made.attr.fileid;
            s2.backend
                .inner
                .write(id, 0, b"precious", Stability::FileSync, &owner)
                .unwrap();
        }));
    }
    let truncate = CreateHow3::Unchecked(Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    });
    let reply = s.call(As(2, 2), CREATE, &create_args(&root_fh, "f", truncate));
    let f = s.attr(s.lookup_id(root, "f"));
    assert_eq!(f.size_bytes, 8, "the racing file kept its data");
    s.expect_reply(
        &reply,
        &CreateRes::Fail(
            Nfsstat3::Acces,
            CreateFail {
                dir_wcc: WccData {
                    before: PreOpAttr(Some(wcc_attr(&s.attr(root)))),
                    after: PostOpAttr(Some(fattr(&s.attr(root)))),
                },
            },
        ),
    );
}

/// A sticky directory: user 2 removes its own file "f", but user 1's file takes the name
/// while the request is on its way to storage. The check must see the file it removes.
#[test]
fn racing_remove_in_a_sticky_directory_checks_the_file_it_removes() {
    let s = Server::new();
    let root = s.backend.inner.root();
    let setattr = SetAttr {
        mode: Some(0o1777),
        ..SetAttr::default()
    };
    s.backend
        .inner
        .setattr(root, &setattr, None, &vfs::Trusted::ROOT)
        .unwrap();
    let as_user = |uid: u32| vfs::Trusted {
        owner: vfs::Owner { uid, gid: uid },
    };
    let name = Name::new(&b"f"[..]).unwrap();
    let new = CreateMode::Guarded(SetAttr::default());
    s.backend
        .inner
        .create(root, &name, &new, &as_user(2))
        .unwrap();
    {
        let s2 = Arc::clone(&s);
        *s.backend.hook.lock().unwrap() = Some(Box::new(move || {
            let inner = &s2.backend.inner;
            let root_ = vfs::Trusted::ROOT;
            let name = Name::new(&b"f"[..]).unwrap();
            let other = Name::new(&b"g"[..]).unwrap();
            let made = inner.create(root, &other, &new, &as_user(1)).unwrap();
            assert_eq!(made.attr.uid, 1);
            inner.rename(root, &other, root, &name, &root_).unwrap();
        }));
    }
    let root_fh = s.root_fh();
    let reply = s.call(
        As(2, 2),
        REMOVE,
        &RemoveArgs {
            object: dirop(&root_fh, "f"),
        },
    );
    let f = s.attr(s.lookup_id(root, "f"));
    assert_eq!(f.uid, 1, "user 1's file is still there");
    s.expect_reply(
        &reply,
        &RemoveRes::Fail(
            Nfsstat3::Perm,
            RemoveFail {
                dir_wcc: WccData {
                    before: PreOpAttr(Some(wcc_attr(&s.attr(root)))),
                    after: PostOpAttr(Some(fattr(&s.attr(root)))),
                },
            },
        ),
    );
}

/// A 4 KiB READ reserves what it can return, not the largest READ: the reply record's
/// buffer stays far below 1 MiB.
#[test]
fn a_small_read_reserves_a_small_reply() {
    let s = Server::new();
    let root_fh = s.root_fh();
    let reply = s.call(
        ROOT,
        CREATE,
        &create_args(&root_fh, "f", CreateHow3::Guarded(mode(0o644))),
    );
    let CreateRes::Ok(made) = decode_reply::<CreateRes>(&reply.1) else {
        panic!("create failed")
    };
    let fh = made.obj.0.unwrap();
    let read = ReadArgs {
        file: fh,
        offset: 0,
        count: 4096,
    };
    let (_, reply) = s.call(ROOT, READ, &read);
    // `Bytes` from a frozen `BytesMut` keeps the allocation; its capacity is not visible,
    // but converting back without copying is possible only for a unique buffer: compare
    // the length of the whole record with the bound the row gives instead.
    assert!(reply.len() < 8 << 10, "{} bytes", reply.len());
    let reserved = reply
        .try_into_mut()
        .expect("unique reply buffer")
        .capacity();
    assert!(
        reserved < 64 << 10,
        "a 4 KiB READ reserved {reserved} bytes"
    );
}

/// A writeback error changes the verifier of the next WRITE and COMMIT replies (and only
/// then), so a client resends the UNSTABLE data it could have lost.
#[test]
fn a_writeback_error_changes_the_write_verifier() {
    let s = Server::new();
    let root = s.backend.root();
    let root_fh = s.fh(&s.attr(root));
    s.call(
        ROOT,
        CREATE,
        &create_args(&root_fh, "f", CreateHow3::Guarded(mode(0o644))),
    );
    let f_fh = s.fh(&s.attr(s.lookup_id(root, "f")));
    let write = WriteArgs {
        file: f_fh.clone(),
        offset: 0,
        count: 3,
        stable: StableHow::Unstable,
        data: Bytes::from_static(b"abc"),
    };
    let verf = |reply: &(u32, Bytes)| match decode_reply::<WriteRes>(&reply.1) {
        WriteRes::Ok(ok) => ok.verf,
        other => panic!("WRITE failed: {other:?}"),
    };
    let commit_verf = || {
        let args = CommitArgs {
            file: f_fh.clone(),
            offset: 0,
            count: 0,
        };
        match decode_reply::<CommitRes>(&s.call(ROOT, COMMIT, &args).1) {
            CommitRes::Ok(ok) => ok.verf,
            other => panic!("COMMIT failed: {other:?}"),
        }
    };
    assert_eq!(verf(&s.call(ROOT, WRITE, &write)), [1; 8]);
    assert_eq!(commit_verf(), [1; 8]);
    s.backend.writeback.store(1, Ordering::SeqCst);
    let after = verf(&s.call(ROOT, WRITE, &write));
    assert_ne!(after, [1; 8], "a new verifier after the error");
    assert_eq!(commit_verf(), after, "COMMIT gives the same new verifier");
    assert_eq!(verf(&s.call(ROOT, WRITE, &write)), after, "and it stays");
}
