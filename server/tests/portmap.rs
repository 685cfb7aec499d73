//! Registration with a real rpcbind: granary registers NFS v3 and v4, MOUNT v3, NLM v4
//! and NSM v1 at start, a libnfs client finds it through the portmapper with no ports in
//! the URL, and SIGTERM unregisters. Uses the host's rpcbind if one runs, else starts `rpcbind -f -w` itself
//! (Debian package rpcbind; needs root to bind port 111) and stops it by PID afterwards.

mod common;

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
    let _rpcbind = ensure_rpcbind();
    let mut cmd = Command::new(common::Server::bin());
    cmd.args(["--log", "warn", "serve", "--listen", "127.0.0.1:0"]);
    let server = common::Server::spawn(cmd);
    let port = server.addr.port();
    let mut regs = registrations(port);
    regs.sort();
    assert_eq!(
        regs,
        vec![
            "100003 3 tcp",
            "100003 4 tcp",
            "100005 3 tcp",
            "100021 4 tcp",
            "100024 1 tcp"
        ]
    );
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
