//! End-to-end runs: a real `granary serve` (this same binary, started on 127.0.0.1:0 with
//! the flags under test) and granary's own client driving it over loopback TCP. When a
//! run ends, each server is stopped with SIGTERM and the counters it prints on the way out
//! (`granary: multigrain clock ...`) are kept.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use client::{nfs_ok, ClientError, Nfs3Client};
use gtime::Clock;
use harness::ServeProcess;
use nfs3::nfs::{NfsFh3, ReadArgs, StableHow, WriteArgs};

use super::Settings;

const IO_BYTES: usize = 4096;
/// Offsets cycle through this many 4 KiB blocks of the file.
const BLOCKS: u64 = 256;
/// Lines a server prints at shutdown that a run keeps.
const REPORT_PREFIX: &str = "granary: multigrain clock";
/// How long a server may take to stop after SIGTERM before it is killed.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// What the clients send: 4 KiB READs or UNSTABLE WRITEs at rotating offsets of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
}

/// A client load: `conns` connections (the server puts each on one worker), each keeping
/// `in_flight` calls outstanding.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub op: Op,
    pub conns: usize,
    pub in_flight: usize,
    pub placement: Placement,
}

/// Where the servers and the client of a run execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Wherever the scheduler puts them: client and servers share every core, so a
    /// server's saving is diluted by the client's and the kernel's share of each call.
    Shared,
    /// Each server with one worker, pinned to the last core, and the client on the first:
    /// the rate is what one server core can do, as long as the client keeps up (on a
    /// machine with one core it is [`Placement::Shared`]).
    Split,
}

/// 4 KiB WRITEs, 16 in flight on one connection (the multigrain and timers labs).
pub const WRITES: Load = Load {
    op: Op::Write,
    conns: 1,
    in_flight: 16,
    placement: Placement::Shared,
};

/// Pins the calling thread for a [`Placement::Split`] run and puts its CPU mask back when
/// dropped. Threads and processes started while it pins inherit the mask.
struct Pinning {
    saved: Option<rustix::thread::CpuSet>,
    cores: Vec<usize>,
}

impl Pinning {
    fn new(placement: Placement) -> Self {
        let saved = rustix::thread::sched_getaffinity(None).ok();
        let cores = saved
            .as_ref()
            .map(|set| {
                (0..rustix::thread::CpuSet::MAX_CPU)
                    .filter(|&c| set.is_set(c))
                    .collect()
            })
            .unwrap_or_default();
        let split = placement == Placement::Split && Vec::len(&cores) >= 2;
        Self {
            saved: saved.filter(|_| split),
            cores,
        }
    }

    fn split(&self) -> bool {
        self.saved.is_some()
    }

    fn to(&self, core: usize) -> Result<(), String> {
        let mut set = rustix::thread::CpuSet::new();
        set.set(core);
        rustix::thread::sched_setaffinity(None, &set)
            .map_err(|e| format!("pin to core {core}: {e}"))
    }

    /// Servers started now run on the last core.
    fn servers(&self) -> Result<(), String> {
        match self.cores.last() {
            Some(&core) if self.split() => self.to(core),
            _ => Ok(()),
        }
    }

    /// This thread (the client) runs on the first core from now on.
    fn client(&self) -> Result<(), String> {
        match self.cores.first() {
            Some(&core) if self.split() => self.to(core),
            _ => Ok(()),
        }
    }
}

impl Drop for Pinning {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = rustix::thread::sched_setaffinity(None, saved);
        }
    }
}

/// One server's part of a run.
#[derive(Debug, Default)]
pub struct Run {
    /// Operations per second, one per sample.
    pub samples: Vec<f64>,
    /// Operations completed over all samples.
    pub ops: u64,
    /// What the server printed about itself when it stopped.
    pub report: Vec<String>,
}

/// Starts this same binary as `granary serve` with the flags under test.
pub fn start(extra: &[&str]) -> Result<ServeProcess, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find granary: {e}"))?;
    ServeProcess::start(&exe, extra)
}

/// Stops a server with SIGTERM and keeps the report lines it printed on the way out.
fn stop(server: ServeProcess) -> Vec<String> {
    let (_, said) = server.terminate_with_output(STOP_WAIT);
    said.into_iter()
        .filter(|line| line.starts_with(REPORT_PREFIX))
        .collect()
}

/// `load` through several servers, one per entry of `designs`, all started first and then
/// sampled in turn (first design, second, ..., first again), so that a machine that gets
/// busier or quieter during the run weighs on every design alike.
pub fn runs(designs: &[&[&str]], load: Load, settings: &Settings) -> Result<Vec<Run>, String> {
    let pinning = Pinning::new(load.placement);
    pinning.servers()?;
    let servers = designs
        .iter()
        .map(|extra| {
            if pinning.split() {
                start(&[extra, &["--workers", "1"][..]].concat())
            } else {
                start(extra)
            }
        })
        .collect::<Result<Vec<_>, _>>();
    pinning.client()?;
    let servers = servers?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let local = tokio::task::LocalSet::new();
    let mut runs: Vec<Run> = local
        .block_on(&runtime, async {
            let mut targets = Vec::with_capacity(servers.len());
            for server in &servers {
                targets.push(connect(server.addr(), load).await?);
            }
            let mut runs: Vec<Run> = (0..servers.len()).map(|_| Run::default()).collect();
            for _ in 0..settings.samples {
                for ((clients, file), run) in targets.iter().zip(&mut runs) {
                    let (rate, ops) = sample(clients, file, load, settings).await?;
                    run.samples.push(rate);
                    run.ops += ops;
                }
            }
            Ok::<_, ClientError>(runs)
        })
        .map_err(|e| format!("{load:?} through granary serve {designs:?}: {e}"))?;
    for (server, run) in servers.into_iter().zip(&mut runs) {
        run.report = stop(server);
    }
    Ok(runs)
}

/// `load.conns` clients of one server and the file they share (filled, for READs).
async fn connect(
    addr: std::net::SocketAddr,
    load: Load,
) -> Result<(Vec<Nfs3Client>, NfsFh3), ClientError> {
    let first = Nfs3Client::connect(addr, addr).await?;
    let root = first.mount("/").await?;
    let file = first.create_file(&root, "lab-file", 0o644).await?;
    if load.op == Op::Read {
        let data = Bytes::from(vec![0x5a; IO_BYTES]);
        for block in 0..BLOCKS {
            nfs_ok(first.write(&write_args(&file, block, &data)).await?)?;
        }
    }
    let mut clients = vec![first];
    for _ in 1..load.conns {
        clients.push(Nfs3Client::connect(addr, addr).await?);
    }
    Ok((clients, file))
}

fn write_args(file: &NfsFh3, block: u64, data: &Bytes) -> WriteArgs {
    WriteArgs {
        file: file.clone(),
        offset: (block % BLOCKS) * IO_BYTES as u64,
        count: IO_BYTES as u32,
        stable: StableHow::Unstable,
        data: data.clone(),
    }
}

/// One call of `op` on `block`.
async fn call(
    client: &Nfs3Client,
    file: &NfsFh3,
    op: Op,
    block: u64,
    data: &Bytes,
) -> Result<(), ClientError> {
    match op {
        Op::Write => nfs_ok(client.write(&write_args(file, block, data)).await?).map(drop),
        Op::Read => {
            let args = ReadArgs {
                file: file.clone(),
                offset: (block % BLOCKS) * IO_BYTES as u64,
                count: IO_BYTES as u32,
            };
            nfs_ok(client.read(&args).await?).map(drop)
        }
    }
}

/// One sample: `load.in_flight` tasks per client on this thread, each sending its next
/// call as soon as the last one is answered, until the sample time is up. Returns the rate
/// and the operations done.
async fn sample(
    clients: &[Nfs3Client],
    file: &NfsFh3,
    load: Load,
    settings: &Settings,
) -> Result<(f64, u64), ClientError> {
    let clock = gtime::SystemClock::new();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let data = Bytes::from(vec![0x5a; IO_BYTES]);
    let began = clock.monotonic();
    let tasks = clients.len() * load.in_flight;
    let workers: Vec<_> = (0..tasks)
        .map(|w| {
            let (client, file) = (clients[w % clients.len()].clone(), file.clone());
            let (stop, done, data) = (Arc::clone(&stop), Arc::clone(&done), data.clone());
            tokio::task::spawn_local(async move {
                let mut block = w as u64;
                while !stop.load(Ordering::Relaxed) {
                    call(&client, &file, load.op, block, &data).await?;
                    done.fetch_add(1, Ordering::Relaxed);
                    block += tasks as u64;
                }
                Ok::<(), ClientError>(())
            })
        })
        .collect();
    tokio::time::sleep(settings.server_sample).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker
            .await
            .map_err(|e| ClientError::Io(std::io::Error::other(e.to_string())))??;
    }
    let seconds = (clock.monotonic() - began).as_secs_f64();
    let ops = done.load(Ordering::Relaxed);
    Ok((ops as f64 / seconds, ops))
}
