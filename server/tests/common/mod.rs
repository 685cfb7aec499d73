//! Starting the real `granary` binary for integration tests.
#![allow(dead_code)]

pub mod metrics;
pub mod nfs;
pub mod nlm_host;
pub mod object;
pub mod v4;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use harness::ServeProcess;

/// A running `granary serve` (started through the shared harness), killed (by its PID)
/// when dropped.
pub struct Server {
    pub addr: SocketAddr,
    /// The libnfs URL the server printed for its first export.
    pub url: String,
    process: ServeProcess,
}

impl Server {
    /// Starts `granary serve --listen 127.0.0.1:0 --no-portmap` plus `args`, and waits
    /// for it to print its address.
    pub fn start(args: &[&str]) -> Server {
        Self::spawn(harness::serve_command(Self::bin(), args))
    }

    /// Starts any `granary serve` command line and waits for it to print its address.
    pub fn spawn(cmd: Command) -> Server {
        let process = ServeProcess::spawn(cmd).expect("start granary");
        Server {
            addr: process.addr(),
            url: process.url().to_string(),
            process,
        }
    }

    /// The server's process id (for /proc figures).
    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// The `granary` binary under test.
    pub fn bin() -> &'static Path {
        Path::new(env!("CARGO_BIN_EXE_granary"))
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
    pub fn terminate(self) -> ExitStatus {
        self.process
            .terminate(Duration::from_secs(10))
            .expect("granary did not exit within 10 s of SIGTERM")
    }
}

/// A fresh `export` and `state` directory for a host export under the temp directory,
/// removed when dropped (drop the [`Server`] first: declare it after).
pub struct HostDirs {
    pub base: PathBuf,
}

impl HostDirs {
    pub fn new(tag: &str) -> Self {
        let base = std::env::temp_dir().join(format!("granary-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("export")).unwrap();
        Self { base }
    }

    /// The same under /dev/shm: an export on a tmpfs (a memory-backed file system).
    pub fn on_tmpfs(tag: &str) -> Self {
        let shm = std::path::Path::new("/dev/shm");
        assert!(shm.is_dir(), "the test needs a tmpfs at /dev/shm");
        let base = shm.join(format!("granary-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("export")).unwrap();
        Self { base }
    }

    pub fn export(&self) -> PathBuf {
        self.base.join("export")
    }

    pub fn state(&self) -> PathBuf {
        self.base.join("state")
    }

    /// `granary serve EXPORT --state-dir STATE --squash none`: the tests run as root and
    /// the export is root's, so root must stay root to write (as with knfsd's
    /// `no_root_squash`).
    pub fn serve(&self) -> Server {
        self.serve_with(&[])
    }

    /// [`HostDirs::serve`] with more options.
    pub fn serve_with(&self, extra: &[&str]) -> Server {
        let (e, s) = (self.export(), self.state());
        let mut args = vec![
            e.to_str().unwrap(),
            "--state-dir",
            s.to_str().unwrap(),
            "--squash",
            "none",
        ];
        args.extend_from_slice(extra);
        Server::start(&args)
    }
}

impl Drop for HostDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// Compiles `tests/libnfs/posix.c` (libnfs's POSIX-like API against a server given by its
/// URL; Debian's libnfs-dev) into a temporary file; the caller removes it.
pub fn build_libnfs_posix() -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/libnfs/posix.c");
    let out = std::env::temp_dir().join(format!(
        "granary-posix-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let status = Command::new("cc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .arg("-lnfs")
        .status()
        .expect("cc not found: install a C compiler (apt-get install gcc)");
    assert!(
        status.success(),
        "compiling {} failed; install libnfs-dev",
        src.display()
    );
    out
}

/// A current-thread runtime for a synchronous test that drives clients.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}
