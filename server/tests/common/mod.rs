//! Starting the real `granary` binary for integration tests.
#![allow(dead_code)]

pub mod nfs;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Address and URL of a server whose process is owned elsewhere.
pub struct Pending {
    pub addr: SocketAddr,
    pub url: String,
}

impl Pending {
    /// Takes ownership of the process: it is killed when the `Server` is dropped.
    pub fn adopt(self, child: Child) -> Server {
        Server {
            child,
            addr: self.addr,
            url: self.url,
        }
    }
}

/// A running `granary serve`, killed (by its PID) when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    /// The libnfs URL the server printed for its first export.
    pub url: String,
}

impl Server {
    /// Starts `granary serve --listen 127.0.0.1:0 --no-portmap` plus `args`, and waits
    /// for it to print its address.
    pub fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_granary"))
            .args([
                "--log",
                "warn",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--no-portmap",
            ])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start granary");
        Self::from_child(&mut child).adopt(child)
    }

    /// Waits for a started `granary serve` (stdout piped) to print its address. The
    /// returned value does not own the process until [`Server::adopt`].
    pub fn from_child(child: &mut Child) -> Pending {
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut addr = None;
        let mut url = None;
        for line in lines.by_ref() {
            let line = line.expect("read granary stdout");
            if let Some(rest) = line.strip_prefix("granary: serving NFSv3 + MOUNT v3 on ") {
                let a = rest.split_whitespace().next().expect("address");
                addr = Some(a.parse().expect("socket address"));
            }
            if line.trim_start().starts_with("nfs://") {
                url = Some(line.trim().to_string());
                break;
            }
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Pending {
            addr: addr.expect("granary printed no address"),
            url: url.expect("granary printed no URL"),
        }
    }

    /// The URL of `path` (a file or directory below the first export).
    pub fn url_of(&self, path: &str) -> String {
        let port = self.addr.port();
        format!(
            "nfs://127.0.0.1/{}?version=3&nfsport={port}&mountport={port}&auto-traverse-mounts=0",
            path.trim_start_matches('/')
        )
    }

    /// Sends SIGTERM and waits for exit, returning the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("granary did not exit within 10 s of SIGTERM");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
