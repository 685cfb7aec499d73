//! Exports beyond loopback (issue 25): a listen address other hosts can reach needs a client
//! list (`--clients`, or `clients =` in each `[[export]]`), or the server does not start; a
//! client outside the list gets `MNT3ERR_ACCES` and `NFS3ERR_ACCES`, and the server logs
//! one line for each; the URLs and the mount line name an address a client can connect
//! to, never the wildcard.
//!
//! The serving test listens on 0.0.0.0 (that is what it checks), with an export that only
//! 127.0.0.1 may use, for the second or two it runs.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};

use client::{Nfs3Client, RpcConnection};
use nfs3::mount::{MntRes, Mountstat3};
use nfs3::nfs::{GetattrArgs, Nfsstat3, Res3};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_granary")
}

/// Runs `granary serve ARGS` expecting it to refuse to start; returns its stderr.
fn refused(args: &[&str]) -> String {
    let out = Command::new(bin())
        .arg("serve")
        .args(["--no-portmap"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run granary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "started: {stdout}{stderr}");
    assert!(!stdout.contains("serving"), "{stdout}");
    stderr
}

fn temp_config(name: &str, text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "granary-clients-{}-{name}.toml",
        std::process::id()
    ));
    std::fs::write(&path, text).expect("write config");
    path
}

#[test]
fn a_start_beyond_loopback_without_a_client_list_is_refused() {
    let e = refused(&["--listen", "0.0.0.0:0"]);
    assert!(
        e.contains("listening on 0.0.0.0:0 reaches other hosts"),
        "{e}"
    );
    assert!(e.contains("export \"/\" has no client list"), "{e}");
    assert!(e.contains("--clients 192.168.1.0/24"), "{e}");
    assert!(
        e.contains("clients = [\"192.168.1.0/24\"] in each [[export]]"),
        "{e}"
    );
    let e = refused(&["--listen", "[::]:0"]);
    assert!(e.contains("--clients"), "{e}");
    // A config file: the export without a list is named, the one with a list is not.
    let path = temp_config(
        "half",
        "listen = \"0.0.0.0:0\"\n[[export]]\npath = \"/a\"\nclients = [\"10.0.0.0/8\"]\n\
         [[export]]\npath = \"/b\"\n",
    );
    let e = refused(&["--config", path.to_str().expect("UTF-8 path")]);
    std::fs::remove_file(&path).expect("remove config");
    assert!(e.contains("export \"/b\" has no client list"), "{e}");
    assert!(!e.contains("\"/a\""), "{e}");
    // --clients belongs to the command line's export; a config file names its own.
    let path = temp_config("flag", "[[export]]\npath = \"/\"\n");
    let e = refused(&[
        "--config",
        path.to_str().expect("UTF-8 path"),
        "--clients",
        "10.0.0.0/8",
    ]);
    std::fs::remove_file(&path).expect("remove config");
    assert!(
        e.contains("with --config, set clients = [") && e.contains("[[export]]"),
        "{e}"
    );
    // So do the other options of that export: refused, not silently ignored.
    let path = temp_config(
        "flags",
        "[[export]]\npath = \"/\"\nclients = [\"127.0.0.1/32\"]\n",
    );
    for (flags, key) in [
        (&["--squash", "none"][..], "set squash = "),
        (&["--read-only"][..], "set read_only = true"),
        (
            &["--mem-capacity-bytes", "1048576"][..],
            "set capacity_bytes = N",
        ),
    ] {
        let mut args = vec!["--config", path.to_str().expect("UTF-8 path")];
        args.extend_from_slice(flags);
        let e = refused(&args);
        assert!(e.contains(flags[0]) && e.contains(key), "{flags:?}: {e}");
    }
    std::fs::remove_file(&path).expect("remove config");
    let e = refused(&["--clients", "10.0.0.0/33"]);
    assert!(
        e.contains("--clients: invalid client network \"10.0.0.0/33\""),
        "{e}"
    );
}

/// The server process, killed (by its own PID) and reaped when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads the server's start-up lines up to the kernel client's (NFSv3) mount line, then
/// keeps draining stdout on a thread so the server never writes to a closed pipe.
fn start_lines(child: &mut Child) -> Vec<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let mut reader = BufReader::new(stdout).lines();
    let mut lines = Vec::new();
    for line in reader.by_ref() {
        let line = line.expect("read stdout");
        let done = line.contains("kernel client (NFSv3): mount");
        lines.push(line);
        if done {
            std::thread::spawn(move || reader.for_each(drop));
            return lines;
        }
    }
    panic!("granary exited before printing its mount line: {lines:?}");
}

/// The host part of `nfs://HOST/...` or of `HOST:/path` in the mount line.
fn assert_reachable(host: &str, all: &[String]) {
    assert_ne!(host, "0.0.0.0", "{all:?}");
    if host == "SERVER-ADDRESS" {
        assert!(
            all.iter().any(|l| l.contains("replace SERVER-ADDRESS")),
            "{all:?}"
        );
        return;
    }
    let ip: IpAddr = host.parse().expect("an address");
    assert!(
        !ip.is_unspecified() && !ip.is_loopback(),
        "{host} in {all:?}"
    );
}

/// A client whose connection comes from 127.0.0.`host`.
async fn client_from(host: u8, server: SocketAddr) -> Nfs3Client {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, host)),
            0,
        ))
        .expect("bind a loopback source address");
    let stream = socket.connect(server).await.expect("connect");
    Nfs3Client::new(RpcConnection::from_stream(stream).expect("connection"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_outside_the_list_are_refused_and_urls_name_a_reachable_address() {
    let log = std::env::temp_dir().join(format!("granary-clients-{}.log", std::process::id()));
    let log_file = std::fs::File::create(&log).expect("log file");
    let mut child = Command::new(bin())
        .args([
            "--log",
            "warn",
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--no-portmap",
        ])
        .args(["--clients", "127.0.0.1/32"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        .spawn()
        .expect("start granary");
    let lines = start_lines(&mut child);
    let server = Running(child);
    let serving = lines
        .iter()
        .find_map(|l| l.strip_prefix(harness::spawn::SERVING_PREFIX))
        .expect("serving line");
    let port: u16 = serving
        .split([':', ' '])
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("port");
    assert!(serving.starts_with("0.0.0.0:"), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("clients 127.0.0.1/32")),
        "{lines:?}"
    );
    let urls: Vec<&String> = lines.iter().filter(|l| l.contains("nfs://")).collect();
    assert!(!urls.is_empty(), "{lines:?}");
    for url in urls {
        let host = url.trim().trim_start_matches("nfs://");
        assert_reachable(&host[..host.find('/').expect("a path")], &lines);
    }
    // The NFSv4.2 mount line (off port 2049 it names the port) and then the NFSv3 one.
    let v4 = lines
        .iter()
        .find(|l| l.contains("kernel client (NFSv4.2): mount -t nfs -o vers=4.2,port="))
        .expect("NFSv4.2 mount line");
    for mount in [v4, lines.last().expect("mount line")] {
        let host = mount.rsplit(' ').nth(1).expect("HOST:/ /mnt");
        assert_reachable(host.trim_end_matches(":/"), &lines);
    }

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let allowed = client_from(1, addr).await;
    let root = allowed.mount("/").await.expect("127.0.0.1 may mount /");
    allowed
        .getattr_ok(&root)
        .await
        .expect("GETATTR from 127.0.0.1");
    let stranger = client_from(2, addr).await;
    let mnt = stranger.mnt("/").await.expect("MNT call");
    assert!(
        matches!(mnt, MntRes::Fail(Mountstat3::Acces)),
        "MNT from 127.0.0.2: {mnt:?}"
    );
    let args = GetattrArgs {
        object: root.clone(),
    };
    let res = stranger.getattr(&args).await.expect("GETATTR call");
    assert!(
        matches!(res, Res3::Fail(Nfsstat3::Acces, _)),
        "GETATTR from 127.0.0.2 with a handle of /: {res:?}"
    );
    allowed
        .getattr_ok(&root)
        .await
        .expect("127.0.0.1 still served");
    drop(server);
    let said = std::fs::read_to_string(&log).expect("read log");
    std::fs::remove_file(&log).expect("remove log");
    let refusals: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("not allowed by the export's clients list"))
        .collect();
    assert_eq!(
        refusals.len(),
        2,
        "one line for MNT, one for GETATTR:\n{said}"
    );
    assert!(
        refusals[0].contains("mount refused") && refusals[0].contains("127.0.0.2"),
        "{said}"
    );
    assert!(refusals[1].contains("127.0.0.2"), "{said}");
}
