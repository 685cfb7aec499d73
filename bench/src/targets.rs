//! The servers a run measures: granary (started by the bench from its own binary), the
//! peers (started and stopped through `../shared/peers/*.sh`, each on its own port),
//! servers already running (`--target NAME=URL`), and the limit responder.
//!
//! The bench only ever stops what it started: granary by its child PID, peers through
//! their script's `stop` (which stops only the PID the script saved).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use client::ServerAddrs;
use harness::ServeProcess;

use super::limit::Responder;
use super::limits::GRANARY_MEM_CAP_BYTES;

/// How long granary may take to exit after SIGTERM before it is killed.
const GRANARY_STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The peers the scripts know, in report order.
pub const PEERS: [&str; 3] = ["ganesha", "gonfs", "nfsserve"];

/// Which workloads a target serves in which configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Small ops: NULL, GETATTR, metadata, READDIRPLUS, connections.
    Small,
    /// Data: random and sequential I/O, the iozone matrix.
    Data,
}

enum Kind {
    Granary {
        bin: PathBuf,
        server: Option<ServeProcess>,
    },
    Peer {
        script: PathBuf,
        mode: Option<Group>,
    },
    External,
    Limit(Option<Responder>),
}

/// One server under test.
pub struct Target {
    pub name: String,
    kind: Kind,
    addrs: Option<ServerAddrs>,
    pub version: String,
    /// Why the target cannot serve (it did not start), if so.
    pub broken: Option<String>,
    /// What the report must say about how it ran (FSAL, backend, build).
    pub notes: Vec<String>,
    /// Scratch directory for a peer's `dir` mode, removed at the end.
    data_dir: PathBuf,
}

impl Target {
    /// granary from `bin` (not started yet).
    #[must_use]
    pub fn granary(bin: PathBuf, version: String) -> Self {
        Self::new("granary", Kind::Granary { bin, server: None }, version)
    }

    /// A peer run by `script` (not started yet).
    #[must_use]
    pub fn peer(name: &str, script: PathBuf, version: String, data_root: &Path) -> Self {
        let mut t = Self::new(name, Kind::Peer { script, mode: None }, version);
        t.data_dir = data_root.join(name);
        t
    }

    /// A server already running at `addrs`.
    #[must_use]
    pub fn external(name: &str, addrs: ServerAddrs) -> Self {
        let mut t = Self::new(name, Kind::External, "external".into());
        t.addrs = Some(addrs);
        t
    }

    /// The limit responder (started at once).
    ///
    /// # Errors
    /// It could not bind.
    pub fn limit() -> std::io::Result<Self> {
        let responder = Responder::start()?;
        let addr = responder.addr();
        let mut t = Self::new("limit", Kind::Limit(Some(responder)), "loopback".into());
        t.addrs = Some(ServerAddrs {
            nfs: addr,
            mount: addr,
            export_path: "/".into(),
        });
        Ok(t)
    }

    fn new(name: &str, kind: Kind, version: String) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            addrs: None,
            version,
            broken: None,
            notes: Vec::new(),
            data_dir: PathBuf::new(),
        }
    }

    #[must_use]
    pub fn is_limit(&self) -> bool {
        matches!(self.kind, Kind::Limit(_))
    }

    /// Where the target serves, once it runs.
    #[must_use]
    pub fn addrs(&self) -> Option<&ServerAddrs> {
        self.addrs.as_ref()
    }

    /// What backend serves `group` on this target (for the report).
    #[must_use]
    pub fn backend(&self, group: Group) -> &'static str {
        match (&self.kind, self.name.as_str(), group) {
            (Kind::Granary { .. }, _, _) => "mem",
            (Kind::Peer { .. }, "ganesha", Group::Small) => "FSAL MEM",
            (Kind::Peer { .. }, "ganesha", Group::Data) => "FSAL VFS on tmpfs",
            (Kind::Peer { .. }, "gonfs", _) => "go-nfs memfs",
            (Kind::Peer { .. }, "nfsserve", _) => "nfsserve memfs",
            (Kind::Limit(_), _, _) => "no-op responder",
            (Kind::External, _, _) => "external",
            (Kind::Peer { .. }, _, _) => "?",
        }
    }

    /// Makes sure the target runs in the configuration for `group`: starts it if it is not
    /// running, and switches ganesha between FSAL MEM (small ops) and FSAL VFS on a tmpfs
    /// directory (data), since FSAL MEM keeps only the first 2 MiB of a file.
    ///
    /// # Errors
    /// The target could not start; the reason is also kept in `broken`.
    pub fn prepare(&mut self, group: Group) -> Result<(), String> {
        let result = match &mut self.kind {
            Kind::External | Kind::Limit(_) => Ok(()),
            Kind::Granary {
                server: Some(_), ..
            } => Ok(()),
            Kind::Granary { bin, server } => start_granary(bin).map(|p| {
                self.addrs = Some(p.addrs().clone());
                *server = Some(p);
            }),
            Kind::Peer { script, mode } => {
                let wanted = if self.name == "ganesha" {
                    group
                } else {
                    Group::Small
                };
                if *mode == Some(wanted) && self.broken.is_none() {
                    return Ok(());
                }
                if mode.is_some() {
                    run_script(script, &["stop"]).map(drop).unwrap_or_else(|e| {
                        tracing::warn!(peer = %self.name, error = %e, "stop failed");
                    });
                    *mode = None;
                    self.addrs = None;
                }
                let dir = self.data_dir.to_string_lossy().into_owned();
                let args: Vec<&str> = match wanted {
                    Group::Small => vec!["start", "mem"],
                    Group::Data => vec!["start", "dir", &dir],
                };
                start_peer(script, &args).map(|a| {
                    *mode = Some(wanted);
                    self.addrs = Some(a);
                })
            }
        };
        self.broken = result.as_ref().err().cloned();
        result
    }

    /// Stops the target if the bench started it.
    pub fn stop(&mut self) {
        match &mut self.kind {
            Kind::Granary { server, .. } => {
                if let Some(p) = server.take() {
                    // Not exited within the timeout: dropping the process killed it.
                    if p.terminate(GRANARY_STOP_TIMEOUT).is_none() {
                        tracing::warn!("granary did not exit on SIGTERM; killed");
                    }
                }
            }
            Kind::Peer { script, mode } => {
                if mode.take().is_some() {
                    if let Err(e) = run_script(script, &["stop"]) {
                        tracing::warn!(peer = %self.name, error = %e, "stop failed");
                    }
                }
                if self.data_dir.starts_with("/dev/shm") && self.data_dir.exists() {
                    drop(std::fs::remove_dir_all(&self.data_dir));
                    // The run's parent directory goes with its last peer (fails while
                    // another peer's directory is still in it).
                    if let Some(parent) = self.data_dir.parent() {
                        drop(std::fs::remove_dir(parent));
                    }
                }
            }
            Kind::Limit(r) => drop(r.take()),
            Kind::External => {}
        }
        self.addrs = None;
    }

    /// Whether the target's process still runs (always true for ones not started here).
    pub fn alive(&mut self) -> bool {
        match &mut self.kind {
            Kind::Granary {
                server: Some(p), ..
            } => p.alive(),
            // The script's `url` fails unless the PID it saved still runs the server.
            Kind::Peer {
                script,
                mode: Some(_),
            } => run_script(script, &["url"]).is_ok(),
            Kind::Peer { mode: None, .. } | Kind::Granary { server: None, .. } => false,
            Kind::External | Kind::Limit(_) => true,
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts `bin serve` on an ephemeral loopback port and reads its address.
fn start_granary(bin: &Path) -> Result<ServeProcess, String> {
    let cap = GRANARY_MEM_CAP_BYTES.to_string();
    ServeProcess::start(bin, &["--squash", "none", "--mem-capacity-bytes", &cap])
}

/// Runs a peer script's `start ...` and parses the URL it prints last.
fn start_peer(script: &Path, args: &[&str]) -> Result<ServerAddrs, String> {
    let out = run_script(script, args)?;
    out.lines()
        .rev()
        .find_map(ServerAddrs::parse)
        .ok_or_else(|| format!("{} printed no URL: {out}", script.display()))
}

/// Runs a peer script; its stdout, or stderr's last lines as the error.
fn run_script(script: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(script)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = err.lines().rev().take(4).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(format!(
        "{} {} failed ({}): {}",
        script.display(),
        args.join(" "),
        out.status,
        tail.join(" | ")
    ))
}

/// Finds `../shared/peers` from the git work tree of the current directory, or from the
/// binary's location (`<repo>/target/<profile>/granary`).
#[must_use]
pub fn find_peers_dir() -> Option<PathBuf> {
    let from_git = Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let from_exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.ancestors().nth(3).map(Path::to_path_buf));
    [from_git, from_exe]
        .into_iter()
        .flatten()
        .map(|root| root.join("../shared/peers"))
        .find(|p| p.join("check.sh").exists())
}

/// A peer's version, from its own tools or its pinned dependency files.
#[must_use]
pub fn peer_version(peers_dir: &Path, name: &str) -> String {
    let found = match name {
        "ganesha" => Command::new("ganesha.nfsd")
            .arg("-v")
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .find(|l| l.contains("Release"))
                    .map(|l| l.trim().to_owned())
            }),
        "gonfs" => std::fs::read_to_string(peers_dir.join("gonfs/go.mod"))
            .ok()
            .and_then(|m| {
                m.lines()
                    .find(|l| l.contains("willscott/go-nfs "))
                    .map(|l| format!("go-nfs {}", l.split_whitespace().last().unwrap_or("?")))
            }),
        "nfsserve" => std::fs::read_to_string(peers_dir.join("nfsserve/Cargo.lock"))
            .ok()
            .and_then(|lock| {
                let at = lock.find("name = \"nfsserve\"")?;
                let version = lock[at..].lines().nth(1)?;
                Some(format!(
                    "nfsserve {}",
                    version.trim().trim_start_matches("version = ")
                ))
            }),
        _ => None,
    };
    found.unwrap_or_else(|| "unknown".into())
}
