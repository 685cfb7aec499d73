//! Wire tests: malformed and hostile bytes sent to the real server over TCP. Each checks
//! the protocol's answer (or a closed connection) and that other clients keep being served.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::Server;
use nfs3::limits::{MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3};
use nfs3::mount::{DirPath, MntRes};
use nfs3::nfs::{GetattrArgs, GetattrRes, NfsFh3, Nfsstat3};
use rpc::msg::{
    decode_reply_header, AcceptStat, AuthStat, AuthSys, CallHeader, Denial, OpaqueAuth, ReplyStatus,
};
use xdr::{Decode, Decoder, Encode, Encoder};

const LAST: u32 = 1 << 31;

fn sys_cred() -> OpaqueAuth {
    let sys = AuthSys {
        stamp: 1,
        machine_name: Bytes::from_static(b"wire"),
        uid: 0,
        gid: 0,
        gids: vec![],
    };
    OpaqueAuth {
        flavor: 1,
        body: sys.to_xdr(),
    }
}

/// The body of a call record.
fn call_body(
    xid: u32,
    program: u32,
    version: u32,
    procedure: u32,
    cred: OpaqueAuth,
    args: &[u8],
) -> Vec<u8> {
    let mut e = Encoder::new();
    CallHeader {
        xid,
        program,
        version,
        procedure,
        cred,
        verf: OpaqueAuth::default(),
    }
    .encode(&mut e);
    let mut body = e.into_bytes().to_vec();
    body.extend_from_slice(args);
    body
}

fn record(body: &[u8]) -> Vec<u8> {
    let mut out = (LAST | u32::try_from(body.len()).unwrap())
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(body);
    out
}

fn connect(server: &Server) -> TcpStream {
    let s = TcpStream::connect(server.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads one reply record; `None` if the server closed the connection. Panics if the
/// server neither answers nor closes within the read timeout, so "closed" is never
/// mistaken for "silent".
fn read_reply(s: &mut TcpStream) -> Option<Bytes> {
    let mut mark = [0u8; 4];
    if let Err(e) = s.read_exact(&mut mark) {
        use std::io::ErrorKind::{TimedOut, WouldBlock};
        assert!(
            !matches!(e.kind(), WouldBlock | TimedOut),
            "server neither replied nor closed"
        );
        return None;
    }
    let len = (u32::from_be_bytes(mark) & !LAST) as usize;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    Some(Bytes::from(body))
}

fn status_of(reply: Bytes) -> (u32, ReplyStatus, Decoder) {
    let mut d = Decoder::new(reply);
    let (xid, status) = decode_reply_header(&mut d).expect("reply header");
    (xid, status, d)
}

fn null_call(s: &mut TcpStream, xid: u32) -> ReplyStatus {
    s.write_all(&record(&call_body(
        xid,
        NFS_PROGRAM,
        NFS_V3,
        0,
        sys_cred(),
        &[],
    )))
    .unwrap();
    let (got, status, _) = status_of(read_reply(s).expect("NULL reply"));
    assert_eq!(got, xid);
    status
}

fn assert_still_serving(server: &Server) {
    let mut s = connect(server);
    assert_eq!(
        null_call(&mut s, 4242),
        ReplyStatus::Accepted(AcceptStat::Success)
    );
}

fn root_handle(server: &Server) -> NfsFh3 {
    let mut s = connect(server);
    let path = DirPath(Bytes::from_static(b"/")).to_xdr();
    s.write_all(&record(&call_body(
        9,
        MOUNT_PROGRAM,
        MOUNT_V3,
        1,
        sys_cred(),
        &path,
    )))
    .unwrap();
    let (_, status, mut d) = status_of(read_reply(&mut s).unwrap());
    assert_eq!(status, ReplyStatus::Accepted(AcceptStat::Success));
    match MntRes::decode(&mut d).unwrap() {
        MntRes::Ok { fhandle, .. } => fhandle,
        MntRes::Fail(st) => panic!("MNT / failed: {st:?}"),
    }
}

fn getattr_status(server: &Server, fh: NfsFh3) -> Nfsstat3 {
    let mut s = connect(server);
    let args = GetattrArgs { object: fh }.to_xdr();
    s.write_all(&record(&call_body(
        5,
        NFS_PROGRAM,
        NFS_V3,
        1,
        sys_cred(),
        &args,
    )))
    .unwrap();
    let (_, status, mut d) = status_of(read_reply(&mut s).unwrap());
    assert_eq!(status, ReplyStatus::Accepted(AcceptStat::Success));
    GetattrRes::decode(&mut d).unwrap().status()
}

#[test]
fn rpc_level_errors_get_their_replies() {
    let server = Server::start(&[]);
    let mut s = connect(&server);
    let cases: Vec<(Vec<u8>, ReplyStatus)> = vec![
        (
            call_body(1, 555_555, 1, 0, sys_cred(), &[]),
            ReplyStatus::Accepted(AcceptStat::ProgUnavail),
        ),
        (
            // NFS versions 3 and 4 are served.
            call_body(2, NFS_PROGRAM, 2, 0, sys_cred(), &[]),
            ReplyStatus::Accepted(AcceptStat::ProgMismatch { low: 3, high: 4 }),
        ),
        (
            call_body(3, NFS_PROGRAM, NFS_V3, 99, sys_cred(), &[]),
            ReplyStatus::Accepted(AcceptStat::ProcUnavail),
        ),
        (
            // NLM version 4 only (the one with 64-bit offsets), NSM version 1.
            call_body(31, 100_021, 3, 0, sys_cred(), &[]),
            ReplyStatus::Accepted(AcceptStat::ProgMismatch { low: 4, high: 4 }),
        ),
        (
            call_body(32, 100_024, 2, 0, sys_cred(), &[]),
            ReplyStatus::Accepted(AcceptStat::ProgMismatch { low: 1, high: 1 }),
        ),
        (
            // NLM version 4 defines no procedures 16 to 19.
            call_body(33, 100_021, 4, 17, sys_cred(), &[]),
            ReplyStatus::Accepted(AcceptStat::ProcUnavail),
        ),
        (
            // An NLM LOCK cut short.
            call_body(34, 100_021, 4, 2, sys_cred(), &[0, 0, 0, 4, 1]),
            ReplyStatus::Accepted(AcceptStat::GarbageArgs),
        ),
        (
            call_body(4, NFS_PROGRAM, NFS_V3, 1, sys_cred(), &[0, 0]),
            ReplyStatus::Accepted(AcceptStat::GarbageArgs),
        ),
        (
            call_body(
                5,
                NFS_PROGRAM,
                NFS_V3,
                0,
                OpaqueAuth {
                    flavor: 6,
                    body: Bytes::new(),
                },
                &[],
            ),
            ReplyStatus::Denied(Denial::Auth(AuthStat::TooWeak)),
        ),
        (
            call_body(
                6,
                NFS_PROGRAM,
                NFS_V3,
                0,
                OpaqueAuth {
                    flavor: 1,
                    body: Bytes::from_static(&[0, 0, 0, 1]),
                },
                &[],
            ),
            ReplyStatus::Denied(Denial::Auth(AuthStat::BadCred)),
        ),
        (
            call_body(7, MOUNT_PROGRAM, 1, 0, sys_cred(), &[]),
            ReplyStatus::Accepted(AcceptStat::ProgMismatch { low: 3, high: 3 }),
        ),
        (
            // RFC 5531: a credential body over 400 bytes is AUTH_ERROR(BADCRED).
            call_body(
                9,
                NFS_PROGRAM,
                NFS_V3,
                0,
                OpaqueAuth {
                    flavor: 1,
                    body: Bytes::from(vec![0u8; 404]),
                },
                &[],
            ),
            ReplyStatus::Denied(Denial::Auth(AuthStat::BadCred)),
        ),
    ];
    for (body, want) in cases {
        let xid = u32::from_be_bytes(body[..4].try_into().unwrap());
        s.write_all(&record(&body)).unwrap();
        let (got_xid, status, _) = status_of(read_reply(&mut s).expect("reply"));
        assert_eq!((got_xid, status), (xid, want));
    }
    // RPC version 3 is refused with the supported range.
    let mut body = call_body(8, NFS_PROGRAM, NFS_V3, 0, sys_cred(), &[]);
    body[8..12].copy_from_slice(&3u32.to_be_bytes());
    s.write_all(&record(&body)).unwrap();
    let (_, status, _) = status_of(read_reply(&mut s).unwrap());
    assert_eq!(
        status,
        ReplyStatus::Denied(Denial::RpcMismatch { low: 2, high: 2 })
    );
    // The same connection still works after all of that.
    assert_eq!(
        null_call(&mut s, 100),
        ReplyStatus::Accepted(AcceptStat::Success)
    );
}

#[test]
fn truncated_call_header_is_garbage_and_tiny_records_are_dropped() {
    let server = Server::start(&[]);
    let mut s = connect(&server);
    let body = call_body(11, NFS_PROGRAM, NFS_V3, 0, sys_cred(), &[]);
    s.write_all(&record(&body[..20])).unwrap();
    let (xid, status, _) = status_of(read_reply(&mut s).unwrap());
    assert_eq!(
        (xid, status),
        (11, ReplyStatus::Accepted(AcceptStat::GarbageArgs))
    );
    // Two bytes cannot hold an xid: no reply, but the connection keeps working.
    s.write_all(&record(&[1, 2])).unwrap();
    assert_eq!(
        null_call(&mut s, 12),
        ReplyStatus::Accepted(AcceptStat::Success)
    );
}

#[test]
fn multi_fragment_records_are_joined() {
    let server = Server::start(&[]);
    let mut s = connect(&server);
    let body = call_body(21, NFS_PROGRAM, NFS_V3, 0, sys_cred(), &[]);
    let (a, b) = body.split_at(10);
    let mut wire = u32::try_from(a.len()).unwrap().to_be_bytes().to_vec();
    wire.extend_from_slice(a);
    wire.extend_from_slice(&0u32.to_be_bytes()); // an empty middle fragment
    wire.extend_from_slice(&(LAST | u32::try_from(b.len()).unwrap()).to_be_bytes());
    wire.extend_from_slice(b);
    s.write_all(&wire).unwrap();
    let (xid, status, _) = status_of(read_reply(&mut s).unwrap());
    assert_eq!(
        (xid, status),
        (21, ReplyStatus::Accepted(AcceptStat::Success))
    );
}

#[test]
fn record_header_claiming_gigabytes_closes_only_that_connection() {
    let server = Server::start(&[]);
    let mut s = connect(&server);
    s.write_all(&0xffff_fff0u32.to_be_bytes()).unwrap();
    assert!(
        read_reply(&mut s).is_none(),
        "server must close the connection"
    );
    assert_still_serving(&server);
}

#[test]
fn stalled_client_is_dropped_while_others_are_served() {
    let server = Server::start(&["--record-timeout-secs", "1"]);
    let mut stalled = connect(&server);
    let body = call_body(31, NFS_PROGRAM, NFS_V3, 0, sys_cred(), &[]);
    let rec = record(&body);
    stalled.write_all(&rec[..rec.len() / 2]).unwrap();
    let started = Instant::now();
    assert_still_serving(&server);
    assert!(
        read_reply(&mut stalled).is_none(),
        "stalled connection must be closed"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(800) && waited < Duration::from_secs(8),
        "closed after {waited:?}"
    );
}

#[test]
fn connections_past_the_limit_are_closed() {
    let server = Server::start(&["--max-connections", "2"]);
    let mut a = connect(&server);
    let mut b = connect(&server);
    assert_eq!(
        null_call(&mut a, 1),
        ReplyStatus::Accepted(AcceptStat::Success)
    );
    assert_eq!(
        null_call(&mut b, 2),
        ReplyStatus::Accepted(AcceptStat::Success)
    );
    let mut c = connect(&server);
    let _ = c.write_all(&record(&call_body(
        3,
        NFS_PROGRAM,
        NFS_V3,
        0,
        sys_cred(),
        &[],
    )));
    assert!(
        read_reply(&mut c).is_none(),
        "third connection must be closed"
    );
    drop(a);
    // Once a slot frees up, a new client gets in.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut d = connect(&server);
        let _ = d.write_all(&record(&call_body(
            4,
            NFS_PROGRAM,
            NFS_V3,
            0,
            sys_cred(),
            &[],
        )));
        if read_reply(&mut d).is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        null_call(&mut b, 5),
        ReplyStatus::Accepted(AcceptStat::Success)
    );
}

#[test]
fn forged_empty_and_oversized_handles_are_refused() {
    let server = Server::start(&[]);
    let root = root_handle(&server);
    assert_eq!(getattr_status(&server, root.clone()), Nfsstat3::Ok);
    for i in 0..root.0.len() {
        let mut forged = root.0.to_vec();
        forged[i] ^= 0x40;
        let st = getattr_status(&server, NfsFh3(Bytes::from(forged)));
        // Bytes 4..12 name the export and its incarnation: a handle of an export this
        // server does not have, or of another incarnation of it, is stale.
        let want = if (4..12).contains(&i) {
            Nfsstat3::Stale
        } else {
            Nfsstat3::BadHandle
        };
        assert_eq!(st, want, "byte {i} flipped");
    }
    assert_eq!(
        getattr_status(&server, NfsFh3(Bytes::new())),
        Nfsstat3::BadHandle
    );
    assert_eq!(
        getattr_status(&server, NfsFh3(Bytes::from(vec![1u8; 64]))),
        Nfsstat3::BadHandle
    );
    // 65 bytes exceeds NFS3_FHSIZE: the arguments themselves are garbage.
    let mut s = connect(&server);
    let args = GetattrArgs {
        object: NfsFh3(Bytes::from(vec![1u8; 65])),
    }
    .to_xdr();
    s.write_all(&record(&call_body(
        7,
        NFS_PROGRAM,
        NFS_V3,
        1,
        sys_cred(),
        &args,
    )))
    .unwrap();
    let (_, status, _) = status_of(read_reply(&mut s).unwrap());
    assert_eq!(status, ReplyStatus::Accepted(AcceptStat::GarbageArgs));
}

#[test]
fn handles_of_an_earlier_server_are_stale() {
    let first = Server::start(&[]);
    let old_root = root_handle(&first);
    drop(first);
    let second = Server::start(&[]);
    assert_eq!(getattr_status(&second, old_root), Nfsstat3::Stale);
}

#[test]
fn pipelined_requests_all_get_replies() {
    let server = Server::start(&[]);
    let mut s = connect(&server);
    let mut wire = Vec::new();
    for xid in 1000..1200u32 {
        wire.extend(record(&call_body(
            xid,
            NFS_PROGRAM,
            NFS_V3,
            0,
            sys_cred(),
            &[],
        )));
    }
    s.write_all(&wire).unwrap();
    let mut seen: Vec<u32> = (0..200)
        .map(|_| status_of(read_reply(&mut s).unwrap()).0)
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (1000..1200).collect::<Vec<_>>());
}

#[test]
fn sigterm_finishes_and_exits_zero() {
    let server = Server::start(&[]);
    assert_still_serving(&server);
    let status = server.terminate();
    assert!(status.success(), "exit status {status:?}");
}

/// Builds a GUARDED CREATE of `name` in `dir`.
fn create_args(dir: &NfsFh3, name: &str) -> Bytes {
    use nfs3::nfs::{CreateArgs, CreateHow3, DirOpArgs3, Filename3, Sattr3};
    CreateArgs {
        where_: DirOpArgs3 {
            dir: dir.clone(),
            name: Filename3(Bytes::copy_from_slice(name.as_bytes())),
        },
        how: CreateHow3::Guarded(Sattr3::default()),
    }
    .to_xdr()
}

#[test]
fn retransmitted_non_idempotent_call_gets_the_first_reply() {
    use nfs3::nfs::CreateRes;
    let server = Server::start(&[]);
    let root = root_handle(&server);
    let call = record(&call_body(
        0xdead,
        NFS_PROGRAM,
        NFS_V3,
        8,
        sys_cred(),
        &create_args(&root, "once"),
    ));
    let mut first = connect(&server);
    first.write_all(&call).unwrap();
    let original = read_reply(&mut first).unwrap();
    let (_, _, mut d) = status_of(original.clone());
    assert_eq!(CreateRes::decode(&mut d).unwrap().status(), Nfsstat3::Ok);
    // The client times out and retransmits on its connection: same xid, same arguments.
    first.write_all(&call).unwrap();
    assert_eq!(
        read_reply(&mut first).unwrap(),
        original,
        "retransmission must get the cached reply"
    );
    // The same xid from another connection (another port) is another client's call.
    let mut second = connect(&server);
    second.write_all(&call).unwrap();
    let (_, _, mut d) = status_of(read_reply(&mut second).unwrap());
    assert_eq!(CreateRes::decode(&mut d).unwrap().status(), Nfsstat3::Exist);
    // A new call (new xid) with the same arguments really runs: the name exists now.
    second
        .write_all(&record(&call_body(
            0xbeef,
            NFS_PROGRAM,
            NFS_V3,
            8,
            sys_cred(),
            &create_args(&root, "once"),
        )))
        .unwrap();
    let (_, _, mut d) = status_of(read_reply(&mut second).unwrap());
    assert_eq!(CreateRes::decode(&mut d).unwrap().status(), Nfsstat3::Exist);
}

#[test]
fn idle_connections_are_closed_and_busy_ones_kept() {
    let server = Server::start(&["--idle-timeout-secs", "1"]);
    let mut idle = connect(&server);
    let mut busy = connect(&server);
    let started = Instant::now();
    // The busy client talks every 200 ms for 2.5 s: never idle for a whole second.
    let mut xid = 1;
    while started.elapsed() < Duration::from_millis(2500) {
        assert_eq!(
            null_call(&mut busy, xid),
            ReplyStatus::Accepted(AcceptStat::Success)
        );
        xid += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    // The idle one was closed after about a second (plus at most a watchdog period).
    assert!(
        read_reply(&mut idle).is_none(),
        "idle connection still open"
    );
    let _ = idle.write_all(&record(&call_body(
        9,
        NFS_PROGRAM,
        NFS_V3,
        0,
        sys_cred(),
        &[],
    )));
    assert!(
        read_reply(&mut idle).is_none(),
        "idle connection answered after the timeout"
    );
}
