//! Registration with a real rpcbind: granary registers NFS v3 and v4, MOUNT v3, NLM v4
//! and NSM v1 at start (NLM and NSM over UDP too), a libnfs client finds it through the
//! portmapper with no ports in the URL, nfs-utils' own `sm-notify` reaches it over UDP,
//! and SIGTERM unregisters. Uses the host's rpcbind if one runs, else starts `rpcbind -f -w` itself
//! (Debian package rpcbind; needs root to bind port 111) and stops it by PID afterwards.

mod common;

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The tests of this file take turns: each registers with the one rpcbind, and a second
/// server's registration would replace the first's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct OwnRpcbind(Option<Child>);

impl Drop for OwnRpcbind {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn ensure_rpcbind() -> OwnRpcbind {
    if TcpStream::connect("127.0.0.1:111").is_ok() {
        return OwnRpcbind(None);
    }
    let child = Command::new("rpcbind")
        .args(["-f", "-w"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("cannot start rpcbind: apt-get install rpcbind (and run the tests as root)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect("127.0.0.1:111").is_err() {
        assert!(
            Instant::now() < deadline,
            "rpcbind did not start listening on port 111"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    OwnRpcbind(Some(child))
}

fn registrations(port: u16) -> Vec<String> {
    let out = Command::new("rpcinfo")
        .args(["-p", "127.0.0.1"])
        .output()
        .expect("rpcinfo");
    assert!(
        out.status.success(),
        "rpcinfo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.split_whitespace().nth(3) == Some(&port.to_string()))
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn registers_with_rpcbind_and_unregisters_on_exit() {
    let _turn = ONE_AT_A_TIME.blocking_lock();
    let _rpcbind = ensure_rpcbind();
    let mut cmd = Command::new(common::Server::bin());
    cmd.args(["--log", "warn", "serve", "--listen", "127.0.0.1:0"]);
    let server = common::Server::spawn(cmd);
    let port = server.addr.port();
    let expected = vec![
        "100003 3 tcp",
        "100003 4 tcp",
        "100005 3 tcp",
        "100021 4 tcp",
        "100021 4 udp",
        "100024 1 tcp",
        "100024 1 udp",
    ];
    // granary registers one program after another once it listens: under load the
    // listing can come between two of them (CI, 2026-11-28: only NFSv3 and MOUNT yet), so
    // wait up to 10 s for the whole set.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut regs = registrations(port);
    regs.sort();
    while regs != expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        regs = registrations(port);
        regs.sort();
    }
    assert_eq!(regs, expected);
    // A libnfs client with no ports in its URL finds granary through the portmapper.
    // (Another NFS server registered on this host would be found instead; CI has none.)
    let out = Command::new("nfs-ls")
        .arg("nfs://127.0.0.1/?version=3&auto-traverse-mounts=0")
        .output()
        .expect("nfs-ls (apt-get install libnfs-utils)");
    assert!(
        out.status.success(),
        "nfs-ls via portmapper: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = server.terminate();
    assert!(status.success());
    assert_eq!(
        registrations(port),
        Vec::<String>::new(),
        "still registered after exit"
    );
}

/// A call of `program` `version` procedure 0 (NULL) with AUTH_NONE, as one datagram.
fn null_call(xid: u32, program: u32, version: u32) -> Vec<u8> {
    [xid, 0, 2, program, version, 0, 0, 0, 0, 0]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect()
}

/// The accept status of a reply datagram to `xid` (after xid, REPLY, MSG_ACCEPTED and an
/// empty verifier).
fn accept_status(reply: &[u8], xid: u32) -> u32 {
    let word = |i: usize| u32::from_be_bytes(reply[i * 4..i * 4 + 4].try_into().unwrap());
    assert!(reply.len() >= 24, "a {}-byte reply", reply.len());
    assert_eq!(
        (word(0), word(1), word(2)),
        (xid, 1, 0),
        "an accepted reply"
    );
    word(5)
}

/// A client that reboots tells granary with nfs-utils' `sm-notify`, which finds NSM's UDP
/// port through the portmapper and sends SM_NOTIFY over UDP only: granary frees the
/// locks the client's lock manager held (granted over TCP under its name). Over UDP only
/// NLM and NSM are served: NFS gets PROG_UNAVAIL.
#[tokio::test]
async fn sm_notify_over_udp_frees_a_rebooted_clients_locks() {
    use client::nlm::NlmClient;
    use nlm::nlm4::{Stats, TestReply};
    let _turn = ONE_AT_A_TIME.lock().await;
    let _rpcbind = ensure_rpcbind();
    let mut cmd = Command::new(common::Server::bin());
    cmd.args(["serve", "--listen", "127.0.0.1:0"]);
    let server = common::Server::spawn(cmd);
    let port = server.addr.port();

    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reply = [0u8; 512];
    for (xid, program, version, want) in
        [(7, 100_024, 1, 0), (8, 100_021, 4, 0), (9, 100_003, 3, 1)]
    {
        udp.send_to(&null_call(xid, program, version), server.addr)
            .unwrap();
        let (n, _) = udp.recv_from(&mut reply).expect("a UDP reply");
        assert_eq!(
            accept_status(&reply[..n], xid),
            want,
            "NULL of program {program} over UDP"
        );
    }

    let nfs = common::nfs::connect(&server).await;
    let root = nfs.mount("/").await.expect("MNT /");
    let fh = nfs
        .create_file(&root, "locked", 0o644)
        .await
        .expect("CREATE");
    let conn = |name: &'static str| async move {
        let c = client::RpcConnection::connect(server.addr).await.unwrap();
        NlmClient::new(c.with_timeout(Duration::from_secs(10)), name)
    };
    let (rebooted, other) = (conn("smclient").await, conn("other").await);
    let held = rebooted.alock(&fh, 1, b"1@smclient", 0, 10);
    assert_eq!(
        rebooted.lock(held, true, false).await.unwrap(),
        Stats::Granted
    );
    let wanted = other.alock(&fh, 2, b"2@other", 0, 10);
    let before = other.test(wanted.clone(), true).await.unwrap();
    assert!(matches!(before.stat, TestReply::Denied(_)), "{before:?}");

    // sm-notify's state directory after the reboot: the record rpc.statd kept of the
    // server it monitored (address of the local lock manager, its program, version and
    // procedure, a 16-byte cookie, the server's name, the client's own name).
    let dir = std::env::temp_dir().join(format!("granary-sm-notify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["sm", "sm.bak"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(
        dir.join("sm/127.0.0.1"),
        format!(
            "0100007f 000186b5 00000004 00000010 {} 127.0.0.1 smclient\n",
            "0".repeat(32)
        ),
    )
    .unwrap();
    let out = Command::new("timeout")
        .args(["60", "sm-notify", "-d", "-f", "-m", "1", "-P"])
        .arg(&dir)
        .output()
        .expect("sm-notify (apt-get install nfs-common)");
    let _ = std::fs::remove_dir_all(&dir);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.contains("notified successfully"),
        "sm-notify: {said}"
    );
    let after = other.test(wanted, true).await.unwrap();
    assert!(
        matches!(after.stat, TestReply::Other(Stats::Granted)),
        "the rebooted client's lock is still held: {after:?}"
    );
    assert!(server.terminate().success());
    assert!(
        !registrations(port).iter().any(|r| r.ends_with("udp")),
        "still registered over UDP after exit"
    );
}
