//! The client against tiny fake servers started inside each test: pipelining and reply
//! matching, RPC-level errors, dead connections, timeouts, raw calls, per-handle
//! credentials, and the convenience layer against a toy NFS server.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use granary_client::{auth_sys, Auth, ClientError, Nfs3Client, RpcConnection};
use nfs3::limits::{MOUNT_PROGRAM, NFS_PROGRAM};
use nfs3::mount::{MntRes, MountProc};
use nfs3::nfs::{
    CommitArgs, CommitOk, Entry3, Fattr3, Filename3, FsinfoOk, Ftype3, GetattrOk, LookupArgs,
    LookupOk, NfsFh3, NfsProc, Nfsstat3, Nfstime3, PostOpAttr, ReadArgs, ReadOk, ReaddirArgs,
    ReaddirOk, Res3, Specdata3, StableHow, Void, WccData, WriteArgs, WriteOk,
};
use rpc::msg::{
    encode_accepted, encode_denied, AcceptStat, AuthStat, Denial, OpaqueAuth, ReplyStatus,
    AUTH_NONE,
};
use rpc::record::{read_record, seal, start_record, RecordTimeouts};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use xdr::{Decode, Decoder, Encode, Encoder};

const PROG: u32 = 400_000;
const LIMIT: Duration = Duration::from_secs(5);
const T: RecordTimeouts = RecordTimeouts {
    idle: LIMIT,
    record: LIMIT,
};

// ---------------------------------------------------------------------------------------
// A fake RPC server
// ---------------------------------------------------------------------------------------

/// A decoded call, as the fake server sees it.
struct Call {
    xid: u32,
    program: u32,
    procedure: u32,
    cred: OpaqueAuth,
    args: Bytes,
}

fn parse_call(body: Bytes) -> Call {
    let mut d = Decoder::new(body);
    let xid = d.u32().unwrap();
    assert_eq!(d.u32().unwrap(), 0, "CALL");
    assert_eq!(d.u32().unwrap(), 2, "RPC version 2");
    let program = d.u32().unwrap();
    let _version = d.u32().unwrap();
    let procedure = d.u32().unwrap();
    let cred = OpaqueAuth::decode(&mut d).unwrap();
    let _verf = OpaqueAuth::decode(&mut d).unwrap();
    Call {
        xid,
        program,
        procedure,
        cred,
        args: d.rest(),
    }
}

/// A whole reply record: accepted with `stat`, then `results`.
fn accepted(xid: u32, stat: AcceptStat, results: &impl Encode) -> Bytes {
    let mut e = Encoder::from_buf(start_record(64));
    encode_accepted(&mut e, xid, stat);
    results.encode(&mut e);
    seal(e.into_inner())
}

fn denied(xid: u32, denial: Denial) -> Bytes {
    let mut e = Encoder::from_buf(start_record(64));
    encode_denied(&mut e, xid, denial);
    seal(e.into_inner())
}

/// Starts a server on 127.0.0.1:0 that runs `serve` on the first connection.
async fn fake_server<F, Fut>(serve: F) -> SocketAddr
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        serve(stream).await;
    });
    addr
}

async fn connect(addr: SocketAddr) -> RpcConnection {
    RpcConnection::connect(addr)
        .await
        .unwrap()
        .with_timeout(LIMIT)
}

/// Reads one call; `None` once the client is gone.
async fn next_call(stream: &mut TcpStream) -> Option<Call> {
    read_record(stream, 1 << 21, T).await.ok().map(parse_call)
}

// ---------------------------------------------------------------------------------------
// The connection
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_concurrent_calls_get_their_own_replies_in_reverse_order() {
    const N: u32 = 100;
    let xids = Arc::new(Mutex::new(HashSet::new()));
    let seen = Arc::clone(&xids);
    let addr = fake_server(move |mut stream| async move {
        let mut calls = Vec::new();
        for _ in 0..N {
            calls.push(next_call(&mut stream).await.unwrap());
        }
        for call in calls.iter().rev() {
            assert!(seen.lock().unwrap().insert(call.xid), "xid reused");
            // Echo the argument, so each caller can recognise its own reply.
            let arg = u32::from_xdr(call.args.clone()).unwrap();
            let reply = accepted(call.xid, AcceptStat::Success, &arg);
            stream.write_all(&reply).await.unwrap();
        }
    })
    .await;
    let conn = connect(addr).await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..N {
        let conn = conn.clone();
        tasks.spawn(async move {
            let got: u32 = conn.call_decode(PROG, 1, 1, &(i * 7)).await.unwrap();
            assert_eq!(got, i * 7);
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    assert_eq!(xids.lock().unwrap().len(), N as usize);
}

#[tokio::test]
async fn rpc_level_refusals_become_rpc_errors() {
    let addr = fake_server(|mut stream| async move {
        while let Some(call) = next_call(&mut stream).await {
            let reply = match call.procedure {
                1 => accepted(call.xid, AcceptStat::GarbageArgs, &Void),
                2 => accepted(
                    call.xid,
                    AcceptStat::ProgMismatch { low: 2, high: 3 },
                    &Void,
                ),
                3 => accepted(call.xid, AcceptStat::ProcUnavail, &Void),
                _ => denied(call.xid, Denial::Auth(AuthStat::TooWeak)),
            };
            stream.write_all(&reply).await.unwrap();
        }
    })
    .await;
    let conn = connect(addr).await;
    let expected = [
        ReplyStatus::Accepted(AcceptStat::GarbageArgs),
        ReplyStatus::Accepted(AcceptStat::ProgMismatch { low: 2, high: 3 }),
        ReplyStatus::Accepted(AcceptStat::ProcUnavail),
        ReplyStatus::Denied(Denial::Auth(AuthStat::TooWeak)),
    ];
    for (procedure, want) in (1..).zip(expected) {
        let err = conn.call(PROG, 1, procedure, &Void).await.unwrap_err();
        assert!(
            matches!(&err, ClientError::Rpc(got) if *got == want),
            "{err:?}"
        );
    }
}

#[tokio::test]
async fn server_closing_fails_pending_and_later_calls() {
    let addr = fake_server(|mut stream| async move {
        for _ in 0..3 {
            next_call(&mut stream).await.unwrap();
        }
        drop(stream);
    })
    .await;
    let conn = connect(addr).await;
    let mut pending = Vec::new();
    for i in 0..3u32 {
        pending.push(conn.send_call(PROG, 1, 1, &i).await.unwrap());
    }
    for reply in pending {
        let err = reply.wait().await.unwrap_err();
        assert!(err.is_closed(), "{err:?}");
    }
    let err = conn.call(PROG, 1, 1, &0u32).await.unwrap_err();
    assert!(err.is_closed(), "{err:?}");
    assert!(conn.is_closed());
}

#[tokio::test]
async fn timeout_fires_and_the_connection_stays_usable() {
    let addr = fake_server(|mut stream| async move {
        let slow = next_call(&mut stream).await.unwrap();
        let quick = next_call(&mut stream).await.unwrap();
        // The late reply comes first; the client dropped that call and must ignore it.
        for call in [slow, quick] {
            let reply = accepted(call.xid, AcceptStat::Success, &call.xid);
            stream.write_all(&reply).await.unwrap();
        }
        next_call(&mut stream).await;
    })
    .await;
    let conn = connect(addr).await.with_timeout(Duration::from_millis(100));
    let err = conn.call(PROG, 1, 1, &Void).await.unwrap_err();
    assert!(
        matches!(err, ClientError::Timeout { after } if after == Duration::from_millis(100)),
        "{err:?}"
    );
    let pending = conn.send_call(PROG, 1, 1, &Void).await.unwrap();
    let xid = pending.xid();
    let echoed: u32 = pending.wait_decode().await.unwrap();
    assert_eq!(echoed, xid);
}

#[tokio::test]
async fn raw_calls_return_the_whole_reply() {
    let addr = fake_server(|mut stream| async move {
        while let Some(call) = next_call(&mut stream).await {
            let reply = accepted(call.xid, AcceptStat::Success, &call.procedure);
            stream.write_all(&reply).await.unwrap();
        }
    })
    .await;
    let conn = connect(addr).await;
    let body = conn.build_call(0xabcd, PROG, 1, 9, &Void);
    let reply = conn.call_raw(body).await.unwrap();
    let mut want = Encoder::new();
    encode_accepted(&mut want, 0xabcd, AcceptStat::Success);
    want.u32(9);
    assert_eq!(reply, want.into_bytes());

    let err = conn
        .call_raw(Bytes::from_static(&[1, 2]))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Io(_)), "{err:?}");
}

#[tokio::test]
async fn credentials_belong_to_each_handle() {
    let addr = fake_server(|mut stream| async move {
        while let Some(call) = next_call(&mut stream).await {
            // Reply with the uid the call claimed, or u32::MAX for AUTH_NONE.
            let uid = match Auth::from_cred(&call.cred).unwrap() {
                Auth::Sys(sys) => sys.uid,
                Auth::None => u32::MAX,
            };
            stream
                .write_all(&accepted(call.xid, AcceptStat::Success, &uid))
                .await
                .unwrap();
        }
    })
    .await;
    let root = connect(addr).await;
    let alice = root.clone().with_auth(&auth_sys(1000, 1000, &[10, 20]));
    let anon = root.clone().with_auth(&Auth::None);
    assert_eq!(anon.credential().flavor, AUTH_NONE);
    for _ in 0..3 {
        let (r, a, n) = tokio::join!(
            root.call_decode::<u32>(PROG, 1, 0, &Void),
            alice.call_decode::<u32>(PROG, 1, 0, &Void),
            anon.call_decode::<u32>(PROG, 1, 0, &Void),
        );
        assert_eq!((r.unwrap(), a.unwrap(), n.unwrap()), (0, 1000, u32::MAX));
    }
}

#[tokio::test]
async fn trailing_bytes_in_results_are_a_protocol_error() {
    let addr = fake_server(|mut stream| async move {
        let call = next_call(&mut stream).await.unwrap();
        let reply = accepted(call.xid, AcceptStat::Success, &[7u8; 8]);
        stream.write_all(&reply).await.unwrap();
        next_call(&mut stream).await;
    })
    .await;
    let conn = connect(addr).await;
    let err = conn
        .call_decode::<u32>(PROG, 1, 0, &Void)
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Protocol(_)), "{err:?}");
}

// ---------------------------------------------------------------------------------------
// A toy NFS server for the convenience layer: one export, one regular file, one
// directory with `DIR_ENTRIES` names listed three per page.
// ---------------------------------------------------------------------------------------

const ROOT: &[u8] = b"root";
const FILE: &[u8] = b"file";
const WTMAX: u32 = 1000;
const DIR_ENTRIES: u64 = 10;
const COOKIEVERF: [u8; 8] = *b"cookieV1";

#[derive(Default)]
struct ToyFs {
    data: Vec<u8>,
    writes: usize,
    commits: usize,
    reads: usize,
    /// Writes take at most this many bytes (short writes).
    max_write: Option<usize>,
    /// The verifier COMMIT answers with; WRITEs answer with `[1; 8]`.
    commit_verf: Option<[u8; 8]>,
    readdir_cookies: Vec<u64>,
}

fn attrs(ftype: Ftype3, size: u64) -> Fattr3 {
    Fattr3 {
        ftype,
        mode: 0o755,
        nlink: 1,
        uid: 0,
        gid: 0,
        size,
        used: size,
        rdev: Specdata3::default(),
        fsid: 1,
        fileid: 2,
        atime: Nfstime3::default(),
        mtime: Nfstime3::default(),
        ctime: Nfstime3::default(),
    }
}

fn toy_answer(fs: &mut ToyFs, call: &Call) -> Bytes {
    let ok = |results: &dyn Fn(&mut Encoder)| {
        let mut e = Encoder::from_buf(start_record(64));
        encode_accepted(&mut e, call.xid, AcceptStat::Success);
        results(&mut e);
        seal(e.into_inner())
    };
    let args = call.args.clone();
    if call.program == MOUNT_PROGRAM {
        assert_eq!(call.procedure, MountProc::Mnt as u32);
        let res = MntRes::Ok {
            fhandle: NfsFh3::new(ROOT),
            auth_flavors: vec![1],
        };
        return ok(&|e| res.encode(e));
    }
    assert_eq!(call.program, NFS_PROGRAM);
    let size = fs.data.len() as u64;
    match NfsProc::from_u32(call.procedure).unwrap() {
        NfsProc::Getattr => {
            let fh = NfsFh3::from_xdr(args).unwrap();
            let ftype = if fh.as_bytes() == FILE {
                Ftype3::Reg
            } else {
                Ftype3::Dir
            };
            let res: Res3<_, Void> = Res3::Ok(GetattrOk {
                obj_attributes: attrs(ftype, size),
            });
            ok(&|e| res.encode(e))
        }
        NfsProc::Lookup => {
            let args = LookupArgs::from_xdr(args).unwrap();
            let res: Res3<LookupOk, PostOpAttr> = if args.what.name.as_bytes() == b"missing" {
                Res3::Fail(Nfsstat3::NoEnt, PostOpAttr(None))
            } else {
                let mut fh = args.what.dir.0.to_vec();
                fh.extend_from_slice(b"/");
                fh.extend_from_slice(args.what.name.as_bytes());
                Res3::Ok(LookupOk {
                    object: NfsFh3::new(fh),
                    obj_attributes: PostOpAttr(Some(attrs(Ftype3::Dir, 0))),
                    dir_attributes: PostOpAttr(None),
                })
            };
            ok(&|e| res.encode(e))
        }
        NfsProc::Fsinfo => {
            let res: Res3<_, PostOpAttr> = Res3::Ok(FsinfoOk {
                rtmax: WTMAX,
                wtmax: WTMAX,
                ..FsinfoOk::default()
            });
            ok(&|e| res.encode(e))
        }
        NfsProc::Write => {
            let args = WriteArgs::from_xdr(args).unwrap();
            assert_eq!(args.count as usize, args.data.len());
            assert!(args.count <= WTMAX);
            let take = fs.max_write.unwrap_or(usize::MAX).min(args.data.len());
            let at = args.offset as usize;
            if fs.data.len() < at + take {
                fs.data.resize(at + take, 0);
            }
            fs.data[at..at + take].copy_from_slice(&args.data[..take]);
            fs.writes += 1;
            let res: Res3<_, WccData> = Res3::Ok(WriteOk {
                file_wcc: WccData::default(),
                count: take as u32,
                committed: StableHow::Unstable,
                verf: [1; 8],
            });
            ok(&|e| res.encode(e))
        }
        NfsProc::Commit => {
            CommitArgs::from_xdr(args).unwrap();
            fs.commits += 1;
            let res: Res3<_, WccData> = Res3::Ok(CommitOk {
                file_wcc: WccData::default(),
                verf: fs.commit_verf.unwrap_or([1; 8]),
            });
            ok(&|e| res.encode(e))
        }
        NfsProc::Read => {
            let args = ReadArgs::from_xdr(args).unwrap();
            fs.reads += 1;
            let from = (args.offset as usize).min(fs.data.len());
            let to = (from + args.count as usize).min(fs.data.len());
            let res: Res3<_, PostOpAttr> = Res3::Ok(ReadOk {
                file_attributes: PostOpAttr(None),
                count: (to - from) as u32,
                eof: to == fs.data.len(),
                data: Bytes::copy_from_slice(&fs.data[from..to]),
            });
            ok(&|e| res.encode(e))
        }
        NfsProc::Readdir => {
            let args = ReaddirArgs::from_xdr(args).unwrap();
            fs.readdir_cookies.push(args.cookie);
            if args.cookie != 0 {
                assert_eq!(args.cookieverf, COOKIEVERF, "verifier sent back");
            }
            let entries: Vec<Entry3> = (args.cookie..DIR_ENTRIES)
                .take(3)
                .map(|i| Entry3 {
                    fileid: 100 + i,
                    name: Filename3::new(format!("f{i}")),
                    cookie: i + 1,
                })
                .collect();
            let eof = args.cookie + 3 >= DIR_ENTRIES;
            let res: Res3<_, PostOpAttr> = Res3::Ok(ReaddirOk {
                dir_attributes: PostOpAttr(None),
                cookieverf: COOKIEVERF,
                entries,
                eof,
            });
            ok(&|e| res.encode(e))
        }
        other => panic!("toy server does not do {other:?}"),
    }
}

/// Starts the toy server; returns a client with separate NFS and MOUNT connections to it
/// and the shared state.
async fn toy(fs: ToyFs) -> (Nfs3Client, Arc<Mutex<ToyFs>>) {
    let fs = Arc::new(Mutex::new(fs));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = Arc::clone(&fs);
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                while let Some(call) = next_call(&mut stream).await {
                    let reply = toy_answer(&mut state.lock().unwrap(), &call);
                    stream.write_all(&reply).await.unwrap();
                }
            });
        }
    });
    let nfs = connect(addr).await;
    let mount = connect(addr).await;
    (Nfs3Client::with_mount(nfs, mount), fs)
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

#[tokio::test]
async fn write_all_chunks_commits_and_read_all_reads_back() {
    let (client, fs) = toy(ToyFs::default()).await;
    let root = client.mount("/export").await.unwrap();
    assert_eq!(root, NfsFh3::new(ROOT));
    let file = NfsFh3::new(FILE);
    let data = pattern(10_500);
    client
        .write_all(&file, 0, &data, StableHow::Unstable)
        .await
        .unwrap();
    {
        let fs = fs.lock().unwrap();
        assert_eq!((fs.writes, fs.commits), (11, 1));
        assert_eq!(fs.data, data);
    }
    assert_eq!(client.read_all(&file).await.unwrap(), data);
    assert_eq!(fs.lock().unwrap().reads, 11, "last chunk carries eof");
}

#[tokio::test]
async fn short_writes_and_reads_are_completed() {
    let fs = ToyFs {
        max_write: Some(300),
        ..ToyFs::default()
    };
    let (client, fs) = toy(fs).await;
    let file = NfsFh3::new(FILE);
    let data = pattern(2_345);
    client
        .write_all_chunked(&file, 0, &data, StableHow::Unstable, 1000)
        .await
        .unwrap();
    assert_eq!(fs.lock().unwrap().data, data);
    let client = client.with_io_size(700);
    assert_eq!(client.read_all(&file).await.unwrap(), data);
}

#[tokio::test]
async fn a_changed_verifier_fails_write_all() {
    let fs = ToyFs {
        commit_verf: Some([2; 8]),
        ..ToyFs::default()
    };
    let (client, _fs) = toy(fs).await;
    let err = client
        .write_all(&NfsFh3::new(FILE), 0, &pattern(3000), StableHow::Unstable)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::VerifierChanged {
                before: [1, ..],
                after: [2, ..]
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn list_dir_follows_cookies_to_eof() {
    let (client, fs) = toy(ToyFs::default()).await;
    let entries = client.list_dir(&NfsFh3::new(ROOT)).await.unwrap();
    let want: Vec<(Bytes, u64, u64)> = (0..DIR_ENTRIES)
        .map(|i| (Bytes::from(format!("f{i}")), 100 + i, i + 1))
        .collect();
    assert_eq!(entries, want);
    assert_eq!(fs.lock().unwrap().readdir_cookies, [0, 3, 6, 9]);
}

#[tokio::test]
async fn lookup_path_and_statuses() {
    let (client, _fs) = toy(ToyFs::default()).await;
    let root = client.mount("/").await.unwrap();
    let (fh, attrs) = client.lookup_path(&root, "/a//b/c").await.unwrap();
    assert_eq!(fh, NfsFh3::new(&b"root/a/b/c"[..]));
    assert_eq!(attrs.ftype, Ftype3::Dir);
    let err = client.lookup_path(&root, "a/missing/c").await.unwrap_err();
    assert_eq!(err.nfs_status(), Some(Nfsstat3::NoEnt));
    let (same, _) = client.lookup_path(&root, "").await.unwrap();
    assert_eq!(same, root);
}
