//! nfsserve-peer: NFSv3 + MOUNT on one TCP port through the `nfsserve` crate, serving
//! an in-memory file system (`memfs.rs`) as the export `/mem`.
//!
//! `nfsserve-peer [--addr 127.0.0.1:12249] [--capacity-mib 4096]`

mod memfs;

use nfsserve::tcp::{NFSTcp, NFSTcpListener};

fn usage() -> ! {
    eprintln!("usage: nfsserve-peer [--addr IP:PORT] [--capacity-mib MIB]");
    std::process::exit(2)
}

#[tokio::main]
async fn main() {
    let mut addr = "127.0.0.1:12249".to_owned();
    let mut capacity_mib: u64 = 4096;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--addr", Some(v)) => addr = v,
            ("--capacity-mib", Some(v)) => capacity_mib = v.parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    let fs = memfs::MemFs::new(capacity_mib << 20);
    let mut listener = match NFSTcpListener::bind(&addr, fs).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("nfsserve-peer: cannot listen on {addr}: {e}");
            std::process::exit(1)
        }
    };
    listener.with_export_name("mem");
    println!("nfsserve-peer: serving /mem (memory, {capacity_mib} MiB) on {addr}");
    if let Err(e) = listener.handle_forever().await {
        eprintln!("nfsserve-peer: {e}");
        std::process::exit(1)
    }
}
