//! The servers a run measures: granary (started by the bench from its own binary), the
//! peers (started and stopped through `bench/peers/*.sh`, each on its own port),
//! servers already running (`--target NAME=URL`), and the limit responder.
//!
//! The bench only ever stops what it started: granary by its child PID, peers through
//! their script's `stop` (which stops only the PID the script saved).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use client::ServerAddrs;
use harness::ServeProcess;

use super::fixtures::{self, Fixtures};
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
    /// The host suite on its tmpfs directory (granary's host backend, ganesha FSAL VFS).
    HostTmpfs,
    /// The host suite on its directory on the root file system.
    HostDisk,
    /// The erofs suite: granary serves the image, ganesha the kernel's mount of it. Every
    /// workload of this group starts cold: the server is restarted and the page cache
    /// dropped first.
    ErofsCold,
    /// The object suite: granary's object backend with one head and with two, the host
    /// backend on a tmpfs directory, and the engines themselves.
    Object,
}

enum Kind {
    Granary {
        bin: PathBuf,
        server: Option<ServeProcess>,
        /// What the running server serves (mem for Small and Data alike).
        serving: Option<Group>,
    },
    Peer {
        script: PathBuf,
        mode: Option<Group>,
    },
    External,
    Limit(Option<Responder>),
    /// `heads` granary heads of the object suite's file system, started from `bin`.
    Object {
        bin: PathBuf,
        /// Which of the fixture's head configs this target's heads use.
        first_head: usize,
        heads: usize,
        servers: Vec<ServeProcess>,
        /// Each head's `--metrics` address.
        metrics: Vec<SocketAddr>,
    },
    /// PostgreSQL and the S3 server themselves (the object suite's engine limits).
    Engines,
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
    /// What the host and erofs suites serve.
    fixtures: Option<Arc<Fixtures>>,
}

impl Target {
    /// granary from `bin` (not started yet).
    #[must_use]
    pub fn granary(bin: PathBuf, version: String) -> Self {
        Self::new(
            "granary",
            Kind::Granary {
                bin,
                server: None,
                serving: None,
            },
            version,
        )
    }

    /// A peer run by `script` (not started yet).
    #[must_use]
    pub fn peer(name: &str, script: PathBuf, version: String, data_root: &Path) -> Self {
        let mut t = Self::new(name, Kind::Peer { script, mode: None }, version);
        t.data_dir = data_root.join(name);
        t
    }

    /// `heads` object heads using the fixture's head configs from `first_head` on (not
    /// started yet).
    #[must_use]
    pub fn object(
        name: &str,
        bin: PathBuf,
        first_head: usize,
        heads: usize,
        version: String,
    ) -> Self {
        Self::new(
            name,
            Kind::Object {
                bin,
                first_head,
                heads,
                servers: Vec::new(),
                metrics: Vec::new(),
            },
            version,
        )
    }

    /// The engines of the object suite, measured without NFS.
    #[must_use]
    pub fn engines(version: String) -> Self {
        let mut t = Self::new("engines", Kind::Engines, version);
        let none = SocketAddr::from(([127, 0, 0, 1], 0));
        t.addrs = Some(ServerAddrs {
            nfs: none,
            mount: none,
            nlm: None,
            export_path: "/".into(),
        });
        t
    }

    /// Every head's NFS address (object targets; one address for the others).
    #[must_use]
    pub fn heads(&self) -> Vec<SocketAddr> {
        match &self.kind {
            Kind::Object { servers, .. } => servers.iter().map(|s| s.addrs().nfs).collect(),
            _ => self.addrs.iter().map(|a| a.nfs).collect(),
        }
    }

    /// Every head's metrics address (object targets only).
    #[must_use]
    pub fn metrics(&self) -> Vec<SocketAddr> {
        match &self.kind {
            Kind::Object { metrics, .. } => metrics.clone(),
            _ => Vec::new(),
        }
    }

    /// The processes whose CPU time the object suite reads around a pass: this target's
    /// heads, and the engines its file system is on (found by their ports; none for a
    /// target of another suite).
    #[must_use]
    pub fn cpu_watch(&self) -> super::object::CpuWatch {
        let heads = match &self.kind {
            Kind::Object { servers, .. } => servers.iter().map(ServeProcess::id).collect(),
            Kind::Engines => Vec::new(),
            _ => return super::object::CpuWatch::default(),
        };
        let config = self.fixtures.as_ref().and_then(|f| f.object.as_ref());
        super::object::CpuWatch::new(heads, config.map(|o| &o.config))
    }

    /// The engines' configuration, for the engines target.
    #[must_use]
    pub fn engine_config(&self) -> Option<&backend_object::ObjectConfig> {
        match &self.kind {
            Kind::Engines => self.fixtures.as_ref()?.object.as_ref().map(|o| &o.config),
            _ => None,
        }
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
            nlm: None,
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
            fixtures: None,
        }
    }

    /// Serves the suites' `fixtures` for the host and erofs groups.
    #[must_use]
    pub fn with_fixtures(mut self, fixtures: Arc<Fixtures>) -> Self {
        self.fixtures = Some(fixtures);
        self
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
            (Kind::Granary { .. }, _, Group::HostTmpfs) => "host backend, tmpfs directory",
            (Kind::Granary { .. }, _, Group::HostDisk) => "host backend, root-fs directory",
            (Kind::Granary { .. }, _, Group::ErofsCold) => "erofs backend, lz4 image",
            (Kind::Granary { .. }, _, Group::Object) => "host backend, tmpfs directory",
            (Kind::Object { heads: 1, .. }, _, _) => "object backend, 1 head",
            (Kind::Object { .. }, _, _) => "object backend, 2 heads (connections alternate)",
            (Kind::Engines, _, _) => "PostgreSQL and S3 themselves, no NFS",
            (Kind::Peer { .. }, "ganesha", Group::HostTmpfs) => "FSAL VFS, tmpfs directory",
            (Kind::Peer { .. }, "ganesha", Group::HostDisk) => "FSAL VFS, root-fs directory",
            (Kind::Peer { .. }, "ganesha", Group::ErofsCold) => "FSAL VFS, kernel erofs mount",
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
        let cold = group == Group::ErofsCold;
        if cold && !self.is_limit() && !matches!(self.kind, Kind::External) {
            // A cold start: the server restarted below, the image's pages out of memory.
            self.stop_server();
            if let Err(e) = fixtures::drop_page_cache() {
                if !self.notes.contains(&e) {
                    self.notes.push(e);
                }
            }
        }
        let result = match &self.kind {
            Kind::External | Kind::Limit(_) | Kind::Engines => Ok(()),
            Kind::Object { .. } => self.prepare_object(),
            Kind::Granary { .. } => self.prepare_granary(group),
            Kind::Peer { .. } => self.prepare_peer(group),
        };
        self.broken = result.as_ref().err().cloned();
        result
    }

    /// What `group` serves from the suite fixtures.
    fn fixture_path(&self, group: Group) -> Result<PathBuf, String> {
        // The peers suite has no fixtures: its Data group uses the target's own directory.
        if matches!(group, Group::Small | Group::Data) {
            return Ok(self.data_dir.clone());
        }
        let f = self
            .fixtures
            .as_ref()
            .ok_or("no suite fixtures for this group")?;
        match group {
            Group::HostTmpfs | Group::Object => Ok(f.host_tmpfs.clone()),
            Group::HostDisk => Ok(f.host_disk.clone()),
            Group::ErofsCold => {
                let erofs = f.erofs.as_ref().ok_or("no EROFS image")?;
                if matches!(self.kind, Kind::Granary { .. }) {
                    Ok(erofs.image.clone())
                } else {
                    erofs
                        .mount
                        .clone()
                        .map_err(|why| format!("no kernel mount of the image: {why}"))
                }
            }
            Group::Small | Group::Data => Ok(self.data_dir.clone()),
        }
    }

    fn prepare_granary(&mut self, group: Group) -> Result<(), String> {
        // Small and Data share one in-memory server.
        let config = if group == Group::Data {
            Group::Small
        } else {
            group
        };
        let path = match config {
            Group::Small | Group::Data => None,
            _ => Some(self.fixture_path(config)?),
        };
        let state = self.fixtures.as_ref().map(|f| f.state_dir.clone());
        let Kind::Granary {
            bin,
            server,
            serving,
        } = &mut self.kind
        else {
            return Ok(());
        };
        if server.is_some() && *serving == Some(config) {
            return Ok(());
        }
        if let Some(p) = server.take() {
            stop_granary(p);
        }
        *serving = None;
        let p = start_granary(bin, path.as_deref(), state.as_deref())?;
        self.addrs = Some(p.addrs().clone());
        *server = Some(p);
        *serving = Some(config);
        Ok(())
    }

    /// Starts the object heads if they do not all run.
    fn prepare_object(&mut self) -> Result<(), String> {
        let configs = self
            .fixtures
            .as_ref()
            .and_then(|f| f.object.as_ref())
            .map(|o| o.head_configs.clone())
            .ok_or("no object file system")?;
        let Kind::Object {
            bin,
            first_head,
            heads,
            servers,
            metrics,
        } = &mut self.kind
        else {
            return Ok(());
        };
        if servers.len() == *heads && servers.iter_mut().all(ServeProcess::alive) {
            return Ok(());
        }
        servers.clear();
        metrics.clear();
        for n in *first_head..*first_head + *heads {
            let config = configs.get(n).ok_or("too few head configs")?;
            let port = free_port()?;
            let at = SocketAddr::from(([127, 0, 0, 1], port));
            let (config, at_text) = (config.to_string_lossy(), at.to_string());
            // The heads' configs set `squash = "none"` (serve refuses --squash with
            // --config).
            let args = ["--config", &config, "--metrics", &at_text];
            let p = ServeProcess::start(bin, &args)?;
            servers.push(p);
            metrics.push(at);
        }
        self.addrs = servers.first().map(|p| p.addrs().clone());
        Ok(())
    }

    fn prepare_peer(&mut self, group: Group) -> Result<(), String> {
        let wanted = if self.name == "ganesha" {
            group
        } else {
            Group::Small
        };
        let dir = match wanted {
            Group::Small => None,
            _ => Some(self.fixture_path(wanted)?),
        };
        let Kind::Peer { script, mode } = &mut self.kind else {
            return Ok(());
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
        let dir = dir.map(|d| d.to_string_lossy().into_owned());
        let args: Vec<&str> = match &dir {
            None => vec!["start", "mem"],
            Some(d) => vec!["start", "dir", d],
        };
        let a = start_peer(script, &args)?;
        *mode = Some(wanted);
        self.addrs = Some(a);
        Ok(())
    }

    /// Stops a server the bench started, keeping the target usable (it starts again on
    /// the next `prepare`).
    fn stop_server(&mut self) {
        match &mut self.kind {
            Kind::Granary {
                server, serving, ..
            } => {
                if let Some(p) = server.take() {
                    stop_granary(p);
                }
                *serving = None;
            }
            Kind::Peer { script, mode } => {
                if mode.take().is_some() {
                    if let Err(e) = run_script(script, &["stop"]) {
                        tracing::warn!(peer = %self.name, error = %e, "stop failed");
                    }
                }
            }
            Kind::Object {
                servers, metrics, ..
            } => {
                for p in servers.drain(..) {
                    stop_granary(p);
                }
                metrics.clear();
            }
            Kind::External | Kind::Limit(_) | Kind::Engines => {}
        }
    }

    /// Stops the target if the bench started it.
    pub fn stop(&mut self) {
        match &mut self.kind {
            Kind::Granary {
                server, serving, ..
            } => {
                *serving = None;
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
            Kind::Object {
                servers, metrics, ..
            } => {
                for p in servers.drain(..) {
                    stop_granary(p);
                }
                metrics.clear();
            }
            Kind::External | Kind::Engines => {}
        }
        if !matches!(self.kind, Kind::Engines) {
            self.addrs = None;
        }
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
            Kind::Object { servers, heads, .. } => {
                servers.len() == *heads && servers.iter_mut().all(ServeProcess::alive)
            }
            Kind::External | Kind::Limit(_) | Kind::Engines => true,
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop();
    }
}

/// SIGTERM, then SIGKILL after the timeout (dropping the process kills it).
fn stop_granary(p: ServeProcess) {
    if p.terminate(GRANARY_STOP_TIMEOUT).is_none() {
        tracing::warn!("granary did not exit on SIGTERM; killed");
    }
}

/// Starts `bin serve` on an ephemeral loopback port and reads its address: the in-memory
/// export, or `path` (a host directory or an EROFS image) with its state in `state`.
fn start_granary(
    bin: &Path,
    path: Option<&Path>,
    state: Option<&Path>,
) -> Result<ServeProcess, String> {
    let cap = GRANARY_MEM_CAP_BYTES.to_string();
    let mut args = vec!["--squash", "none"];
    let (path, state) = (
        path.map(|p| p.to_string_lossy().into_owned()),
        state.map(|p| p.to_string_lossy().into_owned()),
    );
    if let Some(state) = &state {
        args.extend(["--state-dir", state]);
    }
    match &path {
        None => args.extend(["--mem-capacity-bytes", &cap]),
        Some(p) => args.push(p),
    }
    ServeProcess::start(bin, &args)
}

/// A free loopback port (for a head's `--metrics`): bound, read and released; another
/// process could take it before the head binds it, which only fails that head's start.
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port for --metrics: {e}"))
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

/// Finds the repository's peer scripts (`bench/peers`): where this crate was built from,
/// else in the git work tree of the current directory, else beside the binary
/// (`<repo>/target/<profile>/granary`). Each must hold `check.sh` to count.
#[must_use]
pub fn find_peers_dir() -> Option<PathBuf> {
    let built_from = Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("peers"));
    let from_git = Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("bench/peers"));
    let from_exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.ancestors().nth(3).map(|root| root.join("bench/peers")));
    [built_from, from_git, from_exe]
        .into_iter()
        .flatten()
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
