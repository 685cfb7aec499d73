//! Hostile clients (issue 16): each test runs an attack from one loopback address
//! (127.0.0.2, .3, ...) against the real binary and checks that the server's memory stays
//! under its documented bound, that the attacker's connections are really closed, and that
//! a well-behaved client on 127.0.0.1 is served throughout with bounded latency.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::nfs::{connect, dirop, start};
use common::Server;
use nfs3::limits::{NFS_PROGRAM, NFS_V3};
use nfs3::nfs::{CreateArgs, CreateHow3, NfsFh3, ReadArgs, Sattr3, StableHow};
use rpc::msg::{AuthSys, CallHeader, OpaqueAuth};
use xdr::{Encode, Encoder};

const LAST: u32 = 1 << 31;

/// A TCP connection to `server` from the loopback address `127.0.0.{host}`.
fn connect_from(server: &Server, host: u8) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    let from = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, host)), 0);
    s.bind(&from.into())?;
    // A small receive buffer: a client that does not read fills it quickly.
    let _ = s.set_recv_buffer_size(4096);
    s.connect(&server.addr.into())?;
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    Ok(s)
}

/// One call record as root (AUTH_SYS), with `padding` junk bytes after the arguments.
fn call(xid: u32, procedure: u32, args: &impl Encode, padding: usize) -> Vec<u8> {
    let sys = AuthSys {
        stamp: 1,
        machine_name: Bytes::from_static(b"hostile"),
        ..AuthSys::default()
    };
    let mut e = Encoder::new();
    CallHeader {
        xid,
        program: NFS_PROGRAM,
        version: NFS_V3,
        procedure,
        cred: OpaqueAuth {
            flavor: 1,
            body: sys.to_xdr(),
        },
        verf: OpaqueAuth::default(),
    }
    .encode(&mut e);
    args.encode(&mut e);
    let mut body = e.into_bytes().to_vec();
    body.resize(body.len() + padding, 0xa5);
    let mut out = (LAST | u32::try_from(body.len()).unwrap())
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(&body);
    out
}

/// The server's resident memory, in MiB.
fn rss_mib(server: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kib / 1024
}

/// Open TCP sockets of the server process (listener included).
fn sockets(server: &Server) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", server.pid()))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.to_string_lossy().starts_with("socket:"))
        .count()
}

/// Runs GETATTRs from 127.0.0.1 for `span`, returning the slowest round trip.
async fn well_behaved(server: &Server, root: &NfsFh3, span: Duration) -> Duration {
    let client = connect(server).await;
    let end = Instant::now() + span;
    let mut worst = Duration::ZERO;
    while Instant::now() < end {
        let t = Instant::now();
        client.getattr_ok(root).await.expect("well-behaved GETATTR");
        worst = worst.max(t.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worst
}

/// Bound on one GETATTR round trip of the well-behaved client under attack: generous for
/// a loaded 2-core CI machine, far below the attacks' own time scales.
const LATENCY_BOUND: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_replies_are_closed_and_memory_stays_bounded() {
    let (server, client, root) = start(&["--write-timeout-secs", "2"]).await;
    let file = client
        .create_file(&root, "big", 0o644)
        .await
        .expect("CREATE");
    client
        .write_all(&file, 0, &vec![7u8; 1 << 20], StableHow::FileSync)
        .await
        .expect("WRITE 1 MiB");
    let (rss_before, sockets_before) = (rss_mib(&server), sockets(&server));
    // 8 connections x 64 READs of 1 MiB each, never reading a byte of the replies: the
    // old server queued 8 x 128 MiB of replies and never closed these sockets.
    let mut hostile = Vec::new();
    for c in 0..8 {
        let mut s = connect_from(&server, 2).expect("hostile connect");
        let read = ReadArgs {
            file: file.clone(),
            offset: 0,
            count: 1 << 20,
        };
        let burst: Vec<u8> = (0..64)
            .flat_map(|i| call(c * 100 + i, 6, &read, 0))
            .collect();
        s.write_all(&burst).expect("send READs");
        hostile.push(s);
    }
    let worst = well_behaved(&server, &root, Duration::from_secs(1)).await;
    let rss_peak = rss_mib(&server);
    // Documented bound (docs/LIMITS.md): per connection its budget (8 MiB) plus buffers.
    let bound = rss_before + 8 * (8 + 1) + 32;
    assert!(
        rss_peak <= bound,
        "RSS {rss_peak} MiB > bound {bound} MiB (before: {rss_before})"
    );
    assert!(worst < LATENCY_BOUND, "well-behaved GETATTR took {worst:?}");
    // Within the write timeout (2 s) plus a scan period, every hostile socket is closed.
    let deadline = Instant::now() + Duration::from_secs(8);
    while sockets(&server) > sockets_before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        sockets(&server),
        sockets_before,
        "hostile sockets still open"
    );
    for mut s in hostile {
        // Whatever was in flight, the connection ends (EOF or reset) once drained.
        let mut sink = vec![0u8; 1 << 16];
        let closed = loop {
            match s.read(&mut sink) {
                Ok(0) | Err(_) => break true,
                Ok(_) => {}
            }
        };
        assert!(closed);
    }
    assert!(well_behaved(&server, &root, Duration::from_millis(100)).await < LATENCY_BOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn padded_requests_do_not_pin_their_buffers_in_stored_names() {
    let (server, _client, root) = start(&[]).await;
    let rss_before = rss_mib(&server);
    let mut s = connect_from(&server, 3).expect("connect");
    // 200 CREATEs, each followed by 1 MiB of junk: the old server kept every 1 MiB record
    // alive through the stored name (200 MiB for 200 empty files).
    for i in 0..200u32 {
        let args = CreateArgs {
            where_: dirop(&root, format!("padded-{i}")),
            how: CreateHow3::Unchecked(Sattr3::default()),
        };
        s.write_all(&call(i, 8, &args, 1 << 20))
            .expect("send CREATE");
        let mut mark = [0u8; 4];
        s.read_exact(&mut mark).expect("CREATE reply");
        let mut body = vec![0u8; (u32::from_be_bytes(mark) & !LAST) as usize];
        s.read_exact(&mut body).expect("CREATE reply body");
    }
    let grown = rss_mib(&server).saturating_sub(rss_before);
    assert!(grown < 64, "RSS grew {grown} MiB for 200 empty files");
    assert!(well_behaved(&server, &root, Duration::from_millis(200)).await < LATENCY_BOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_lock_others_out() {
    let (server, _client, root) = start(&[
        "--max-connections",
        "32",
        "--max-connections-per-client",
        "24",
        "--reclaim-idle-secs",
        "1",
    ])
    .await;
    // 127.0.0.2 tries 40 connections: 24 get in; 127.0.0.3 fills the rest of the table.
    let hog: Vec<_> = (0..40)
        .filter_map(|_| connect_from(&server, 2).ok())
        .collect();
    let other: Vec<_> = (0..8)
        .filter_map(|_| connect_from(&server, 3).ok())
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The table is full (the mounting client holds one slot); a new address still gets
    // in, by reclaiming an idle connection of the address that holds the most.
    for _ in 0..3 {
        let worst = well_behaved(&server, &root, Duration::from_millis(100)).await;
        assert!(worst < LATENCY_BOUND, "GETATTR took {worst:?}");
    }
    drop((hog, other));
}

/// Sends one MOUNT call (AUTH_NONE) on `s` and returns the reply's result bytes.
fn mount_call(s: &mut TcpStream, xid: u32, procedure: u32, args: &[u8]) -> xdr::Decoder {
    let mut e = Encoder::new();
    CallHeader {
        xid,
        program: nfs3::limits::MOUNT_PROGRAM,
        version: nfs3::limits::MOUNT_V3,
        procedure,
        cred: OpaqueAuth::default(),
        verf: OpaqueAuth::default(),
    }
    .encode(&mut e);
    let mut body = e.into_bytes().to_vec();
    body.extend_from_slice(args);
    let mut rec = (LAST | u32::try_from(body.len()).unwrap())
        .to_be_bytes()
        .to_vec();
    rec.extend_from_slice(&body);
    s.write_all(&rec).expect("send MOUNT call");
    let mut mark = [0u8; 4];
    s.read_exact(&mut mark).expect("MOUNT reply");
    let mut reply = vec![0u8; (u32::from_be_bytes(mark) & !LAST) as usize];
    s.read_exact(&mut reply).expect("MOUNT reply body");
    let mut d = xdr::Decoder::new(Bytes::from(reply));
    let (got, status) = rpc::msg::decode_reply_header(&mut d).expect("reply header");
    assert_eq!(got, xid);
    assert_eq!(
        status,
        rpc::msg::ReplyStatus::Accepted(rpc::msg::AcceptStat::Success)
    );
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mount_list_is_canonical_bounded_and_shown_to_allowed_clients_only() {
    use nfs3::mount::{DirPath, Exports, MountList};
    use xdr::Decode;
    let path = std::env::temp_dir().join(format!("granary-hostile-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        "[[export]]\npath = \"/\"\nbackend = \"mem\"\nclients = [\"127.0.0.1/32\"]\n",
    )
    .unwrap();
    let server = Server::start(&["--config", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    let mut s = connect_from(&server, 1).expect("connect");
    // 1,000 spellings of "/" (the old server listed each one: 4,096 MNTs made a 4.3 MB DUMP).
    for i in 0..1000u32 {
        let spelling = format!(
            "/{}",
            "./".repeat(i as usize % 500) + &"/".repeat(i as usize / 500)
        );
        let _ = mount_call(&mut s, i, 1, &DirPath(Bytes::from(spelling)).to_xdr());
    }
    let list = MountList::decode(&mut mount_call(&mut s, 5000, 2, &[])).unwrap();
    assert_eq!(
        list.0.len(),
        1,
        "every spelling of / is one entry: {list:?}"
    );
    assert_eq!(&list.0[0].ml_directory.0[..], b"/");
    // A client no export allows learns nothing: no mount list, no export list.
    let mut stranger = connect_from(&server, 6).expect("connect");
    let list = MountList::decode(&mut mount_call(&mut stranger, 1, 2, &[])).unwrap();
    assert!(list.0.is_empty(), "DUMP to a stranger: {list:?}");
    let exports = Exports::decode(&mut mount_call(&mut stranger, 2, 5, &[])).unwrap();
    assert!(exports.0.is_empty(), "EXPORT to a stranger: {exports:?}");
    let exports = Exports::decode(&mut mount_call(&mut s, 5001, 5, &[])).unwrap();
    assert_eq!(exports.0.len(), 1);
}
