//! End-to-end runs: a real `granary serve` (this same binary, started on 127.0.0.1:0 with
//! the flags under test) and granary's own client driving it over loopback TCP.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use client::{nfs_ok, ClientError, Nfs3Client};
use gtime::Clock;
use harness::ServeProcess;
use nfs3::nfs::{NfsFh3, StableHow, WriteArgs};

use super::Settings;

/// WRITEs in flight on the one connection: enough to keep both server workers busy.
const IN_FLIGHT: usize = 16;
const WRITE_BYTES: usize = 4096;
/// Offsets cycle through this many 4 KiB blocks of the file.
const BLOCKS: u64 = 256;

/// Starts this same binary as `granary serve` with the flags under test.
pub fn start(extra: &[&str]) -> Result<ServeProcess, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find granary: {e}"))?;
    ServeProcess::start(&exe, extra)
}

/// WRITE rate (4 KiB, UNSTABLE, `IN_FLIGHT` at once) through a server started with
/// `extra` flags: one sample per `settings.samples`, each `settings.server_sample` long.
pub fn write_rate(extra: &[&str], settings: &Settings) -> Result<Vec<f64>, String> {
    let mut rates = write_rates(&[extra], settings)?;
    Ok(rates.pop().unwrap_or_default())
}

/// [`write_rate`] for several servers at once, one per entry of `designs`, all started
/// first and then sampled in turn (first design, second, ..., first again), so that a
/// machine that gets busier or quieter during the run weighs on every design alike.
pub fn write_rates(designs: &[&[&str]], settings: &Settings) -> Result<Vec<Vec<f64>>, String> {
    let servers = designs
        .iter()
        .map(|extra| start(extra))
        .collect::<Result<Vec<_>, _>>()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let local = tokio::task::LocalSet::new();
    local
        .block_on(&runtime, async {
            let mut targets = Vec::with_capacity(servers.len());
            for server in &servers {
                let client = Nfs3Client::connect(server.addr(), server.addr()).await?;
                let root = client.mount("/").await?;
                let file = client.create_file(&root, "lab-write", 0o644).await?;
                targets.push((client, file));
            }
            let mut rates = vec![Vec::with_capacity(settings.samples); servers.len()];
            for _ in 0..settings.samples {
                for ((client, file), rates) in targets.iter().zip(&mut rates) {
                    rates.push(sample(client, file, settings).await?);
                }
            }
            Ok::<_, ClientError>(rates)
        })
        .map_err(|e| format!("WRITE loop through granary serve {designs:?}: {e}"))
}

/// One sample: `IN_FLIGHT` tasks on this thread, each sending its next WRITE as soon as
/// the last one is answered, until the sample time is up.
async fn sample(
    client: &Nfs3Client,
    file: &NfsFh3,
    settings: &Settings,
) -> Result<f64, ClientError> {
    let clock = gtime::SystemClock::new();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let data = Bytes::from(vec![0x5a; WRITE_BYTES]);
    let began = clock.monotonic();
    let writers: Vec<_> = (0..IN_FLIGHT as u64)
        .map(|w| {
            let (client, file) = (client.clone(), file.clone());
            let (stop, done, data) = (Arc::clone(&stop), Arc::clone(&done), data.clone());
            tokio::task::spawn_local(async move {
                let mut block = w;
                while !stop.load(Ordering::Relaxed) {
                    let args = WriteArgs {
                        file: file.clone(),
                        offset: (block % BLOCKS) * WRITE_BYTES as u64,
                        count: WRITE_BYTES as u32,
                        stable: StableHow::Unstable,
                        data: data.clone(),
                    };
                    nfs_ok(client.write(&args).await?)?;
                    done.fetch_add(1, Ordering::Relaxed);
                    block += IN_FLIGHT as u64;
                }
                Ok::<(), ClientError>(())
            })
        })
        .collect();
    tokio::time::sleep(settings.server_sample).await;
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer
            .await
            .map_err(|e| ClientError::Io(std::io::Error::other(e.to_string())))??;
    }
    let seconds = (clock.monotonic() - began).as_secs_f64();
    Ok(done.load(Ordering::Relaxed) as f64 / seconds)
}
