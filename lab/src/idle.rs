//! Servers holding many idle connections (issue 15, seed 002): how often their workers
//! wake and how much CPU the process uses per second, one server per `--timers` mode.
//! Idle and stalled connections are found by one global scan timer, so an idle server
//! should wake about once per scan period whatever the number of connections, and under
//! `pull` only the worker that went idle last should wake for it.

use std::net::TcpStream;
use std::time::Duration;

use harness::procstat::idle_connections;
use harness::{ProcCounters, ServeProcess};

/// Thread-name prefix of granary's workers (`/proc` keeps the first 15 bytes).
const WORKER_THREADS: &str = "granary-worker";

/// One server's samples: worker wake-ups per second and process CPU ms per second.
#[derive(Debug, Default)]
pub struct IdleRun {
    pub wakeups_per_sec: Vec<f64>,
    pub cpu_ms_per_sec: Vec<f64>,
}

impl IdleRun {
    /// Adds one window's sample of process `pid`, whose threads named `prefix...` are the
    /// ones whose wake-ups count.
    fn sample(&mut self, pid: u32, prefix: &str, window: Duration) -> Result<(), String> {
        let read = || ProcCounters::read(pid, prefix).map_err(|e| format!("process {pid}: {e}"));
        let before = read()?;
        std::thread::sleep(window);
        let (wakeups, cpu_ms) = read()?.rates_since(&before, window);
        self.wakeups_per_sec.push(wakeups);
        self.cpu_ms_per_sec.push(cpu_ms);
        Ok(())
    }
}

/// Lets this process hold `fds` more descriptors (the soft limit is often 1,024).
fn allow_descriptors(fds: usize) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    let want = fds as u64 + 256;
    if limit.current.is_some_and(|cur| cur < want) {
        limit.current = Some(limit.maximum.map_or(want, |hard| want.min(hard)));
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

/// Starts one server per entry of `designs`, gives each `conns` idle connections, and
/// samples them in turn, `samples` windows of `window` each.
///
/// # Errors
/// If a server cannot start or a connection is refused.
pub fn idle_servers(
    designs: &[&[&str]],
    conns: usize,
    window: Duration,
    samples: usize,
) -> Result<Vec<IdleRun>, String> {
    allow_descriptors(conns * designs.len());
    let servers: Vec<ServeProcess> = designs
        .iter()
        .map(|extra| super::e2e::start(extra))
        .collect::<Result<_, _>>()?;
    let held: Vec<Vec<TcpStream>> = servers
        .iter()
        .map(|s| idle_connections(s.addr(), conns))
        .collect::<Result<_, _>>()?;
    // Let the replies' writes and the first scans settle before measuring.
    std::thread::sleep(Duration::from_secs(1));
    let mut runs: Vec<IdleRun> = designs.iter().map(|_| IdleRun::default()).collect();
    for _ in 0..samples {
        for (server, run) in servers.iter().zip(&mut runs) {
            run.sample(server.id(), WORKER_THREADS, window)?;
        }
    }
    drop(held);
    Ok(runs)
}

/// Thread-name prefix of the plain-tokio baseline's workers.
const TOKIO_THREADS: &str = "idle-tokio";

/// How often the baseline's per-connection watchdog fires: the design granary had before
/// its connection checks became one global scan (a local timer per connection, re-armed
/// every second).
const TOKIO_WATCHDOG: Duration = Duration::from_secs(1);

/// The baseline "plain tokio" server: a multi-thread tokio runtime with one worker per
/// core, a task per connection that answers one RPC NULL and then waits for its next
/// request under a watchdog timer re-armed every second, as a typical tokio server does.
/// It runs in this process; its wake-ups are its workers' switches, its CPU the whole
/// process's (the lab's own threads sleep while it is sampled).
///
/// # Errors
/// If the runtime or the listener cannot start, or a connection is refused.
pub fn tokio_baseline(conns: usize, window: Duration, samples: usize) -> Result<IdleRun, String> {
    allow_descriptors(conns);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(crate::cores())
        .thread_name(TOKIO_THREADS)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .map_err(|e| format!("tokio baseline listener: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    rt.spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(watched_connection(stream));
        }
    });
    let held = idle_connections(addr, conns)?;
    std::thread::sleep(Duration::from_secs(1));
    let pid = std::process::id();
    let mut run = IdleRun::default();
    for _ in 0..samples {
        run.sample(pid, TOKIO_THREADS, window)?;
    }
    drop(held);
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(run)
}

/// One baseline connection: answers the NULL call `idle_connections` sends, then waits for
/// more under a one-second watchdog (closing after 10 minutes without a request).
async fn watched_connection(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut call = [0u8; 44];
    if stream.read_exact(&mut call).await.is_err() {
        return;
    }
    let xid = [call[4], call[5], call[6], call[7]];
    let mut reply = Vec::with_capacity(28);
    reply.extend_from_slice(&0x8000_0018u32.to_be_bytes());
    reply.extend_from_slice(&xid);
    for word in [1u32, 0, 0, 0, 0] {
        reply.extend_from_slice(&word.to_be_bytes());
    }
    if stream.write_all(&reply).await.is_err() {
        return;
    }
    let mut last = tokio::time::Instant::now();
    let mut buf = [0u8; 512];
    loop {
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => last = tokio::time::Instant::now(),
            },
            () = tokio::time::sleep(TOKIO_WATCHDOG) => {
                if last.elapsed() > Duration::from_secs(600) {
                    return;
                }
            }
        }
    }
}
