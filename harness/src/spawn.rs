//! Starting a `granary serve` process and reading where it listens: the one harness the
//! integration tests, `granary bench` and `granary lab` share.
//!
//! `granary serve` prints `granary: serving NFSv4.2/4.1, NFSv3 + MOUNT v3, NLM v4 on ADDR (N workers)` and then,
//! per export, an indented `nfs://...` URL. [`ServeProcess::spawn`] waits (bounded by
//! [`START_TIMEOUT`]) for the first URL, keeps draining stdout afterwards so the server
//! never blocks on a full pipe, and owns the process: dropping it kills the process (by its
//! own PID) and reaps it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use client::ServerAddrs;

/// Longest wait for a started server to print its address (a debug build on a busy
/// machine takes a few seconds to start).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The line `granary serve` prints once it listens.
pub const SERVING_PREFIX: &str = "granary: serving NFSv4.2/4.1, NFSv3 + MOUNT v3, NLM v4 on ";

/// How often [`ServeProcess::terminate`] polls for the exit.
const EXIT_POLL: Duration = Duration::from_millis(20);

/// The usual command line: `BIN --log warn serve --listen 127.0.0.1:0 --no-portmap EXTRA..`,
/// stdin closed, stdout piped (for the address), stderr inherited.
#[must_use]
pub fn serve_command(bin: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(["--log", "warn", "serve", "--listen", "127.0.0.1:0"])
        .arg("--no-portmap")
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd
}

/// A running `granary serve`, killed when dropped.
#[derive(Debug)]
pub struct ServeProcess {
    child: Child,
    /// The address from the `serving ... on ADDR` line (NFS and MOUNT share it).
    addr: SocketAddr,
    /// The first export's URL, as printed.
    url: String,
    /// NFS and MOUNT addresses and export path parsed from `url`.
    addrs: ServerAddrs,
    /// Lines starting with `granary: ` printed after the URL (see `terminate_with_output`).
    said: Arc<Mutex<Vec<String>>>,
    /// The thread reading stdout; it ends when the process closes stdout.
    reader: Option<JoinHandle<()>>,
}

impl ServeProcess {
    /// Starts [`serve_command`]`(bin, extra)` and waits for its address.
    ///
    /// # Errors
    /// See [`ServeProcess::spawn`].
    pub fn start(bin: &Path, extra: &[&str]) -> Result<Self, String> {
        Self::spawn(serve_command(bin, extra))
    }

    /// Starts `cmd` (any `granary serve` command line; stdout is piped here) and waits
    /// for it to print its address and first export URL.
    ///
    /// # Errors
    /// If the process cannot start, exits or closes stdout before printing them, or takes
    /// longer than [`START_TIMEOUT`] (the process is then killed).
    pub fn spawn(mut cmd: Command) -> Result<Self, String> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
        let Some(stdout) = child.stdout.take() else {
            kill(&mut child);
            return Err("granary serve: stdout not captured".into());
        };
        let (tx, rx) = mpsc::channel();
        let said = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&said);
        let reader = std::thread::spawn(move || read_address(stdout, &tx, &kept));
        match rx.recv_timeout(START_TIMEOUT) {
            Ok((addr, url, addrs)) => Ok(Self {
                child,
                addr,
                url,
                addrs,
                said,
                reader: Some(reader),
            }),
            Err(e) => {
                kill(&mut child);
                let why = match e {
                    mpsc::RecvTimeoutError::Timeout => format!("within {START_TIMEOUT:?}"),
                    mpsc::RecvTimeoutError::Disconnected => "before its output ended".into(),
                };
                Err(format!("granary serve printed no address and URL {why}"))
            }
        }
    }

    /// The address NFS and MOUNT listen on.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The first export's URL as the server printed it.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// NFS and MOUNT addresses and export path of the first export's URL.
    #[must_use]
    pub fn addrs(&self) -> &ServerAddrs {
        &self.addrs
    }

    /// The process id.
    #[must_use]
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM (to this process only) and waits up to `within` for it to exit.
    /// Returns its exit status, or `None` if it had to be killed.
    #[must_use]
    pub fn terminate(mut self, within: Duration) -> Option<ExitStatus> {
        let pid = self.child.id().to_string();
        drop(Command::new("kill").args(["-TERM", &pid]).status());
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(EXIT_POLL);
        }
        None
    }

    /// As [`ServeProcess::terminate`] (killing it if it does not exit within `within`),
    /// then returns the lines starting with `granary: ` it printed after its URL, such as
    /// the counters a server reports when it stops.
    #[must_use]
    pub fn terminate_with_output(mut self, within: Duration) -> (Option<ExitStatus>, Vec<String>) {
        let (reader, said) = (self.reader.take(), Arc::clone(&self.said));
        // Dropping `self` kills the process if it is still running, which closes stdout.
        let status = self.terminate(within);
        if let Some(reader) = reader {
            drop(reader.join());
        }
        let lines = said.lock().unwrap_or_else(PoisonError::into_inner).clone();
        (status, lines)
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

fn kill(child: &mut Child) {
    drop(child.kill());
    drop(child.wait());
}

/// Lines kept for `terminate_with_output`: a server prints a handful when it stops.
const KEPT_LINES: usize = 64;

/// Reads stdout until the first export URL, sends the address, then drains the rest,
/// keeping the first `KEPT_LINES` lines that start with `granary: `.
fn read_address(
    stdout: std::process::ChildStdout,
    tx: &mpsc::Sender<(SocketAddr, String, ServerAddrs)>,
    said: &Mutex<Vec<String>>,
) {
    let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
    let mut addr = None;
    for line in lines.by_ref() {
        if let Some(rest) = line.strip_prefix(SERVING_PREFIX) {
            addr = rest.split_whitespace().next().and_then(|a| a.parse().ok());
        }
        if let (Some(a), Some(addrs)) = (addr, ServerAddrs::parse(&line)) {
            drop(tx.send((a, line.trim().to_string(), addrs)));
            break;
        }
    }
    for line in lines {
        let mut said = said.lock().unwrap_or_else(PoisonError::into_inner);
        if line.starts_with("granary: ") && said.len() < KEPT_LINES {
            said.push(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_address_and_url_from_a_fake_server() {
        let mut cmd = Command::new("sh");
        let script = "echo 'granary: serving NFSv4.2/4.1, NFSv3 + MOUNT v3, NLM v4 on 127.0.0.1:4049 (2 workers)'; \
                      echo '    nfs://127.0.0.1/?version=3&nfsport=4049&mountport=4049'; \
                      exec sleep 30";
        cmd.args(["-c", script]);
        let p = ServeProcess::spawn(cmd).unwrap();
        assert_eq!(p.addr(), "127.0.0.1:4049".parse().unwrap());
        assert_eq!(p.addrs().mount, p.addr());
        assert!(p.url().starts_with("nfs://127.0.0.1/?"), "{}", p.url());
        // SIGTERM ends the `sleep` the shell became.
        assert!(p.terminate(Duration::from_secs(10)).is_some());
    }

    #[test]
    fn keeps_what_the_server_says_on_the_way_out() {
        let mut cmd = Command::new("sh");
        // The trap is set before the address is printed: a SIGTERM sent as soon as the
        // address is read must find it.
        let script = "trap 'echo \"granary: counted 7\"; echo other; exit 0' TERM; \
                      echo 'granary: serving NFSv4.2/4.1, NFSv3 + MOUNT v3, NLM v4 on 127.0.0.1:4049 (2 workers)'; \
                      echo '    nfs://127.0.0.1/?version=3&nfsport=4049&mountport=4049'; \
                      while :; do sleep 0.05; done";
        cmd.args(["-c", script]);
        let p = ServeProcess::spawn(cmd).unwrap();
        let (status, said) = p.terminate_with_output(Duration::from_secs(10));
        assert!(status.is_some());
        assert_eq!(said, ["granary: counted 7"]);
    }

    #[test]
    fn a_process_that_prints_no_address_is_an_error() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo 'nfs://127.0.0.1/?nfsport=1'; exit 3"]);
        let err = ServeProcess::spawn(cmd).unwrap_err();
        assert!(err.contains("printed no address"), "{err}");
    }
}
