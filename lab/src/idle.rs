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
            let read = || ProcCounters::read(server.id(), WORKER_THREADS);
            let before = read().map_err(|e| format!("server {}: {e}", server.id()))?;
            std::thread::sleep(window);
            let after = read().map_err(|e| format!("server {}: {e}", server.id()))?;
            let (wakeups, cpu_ms) = after.rates_since(&before, window);
            run.wakeups_per_sec.push(wakeups);
            run.cpu_ms_per_sec.push(cpu_ms);
        }
    }
    drop(held);
    Ok(runs)
}
