//! docs/LIMITS.md's worst-case memory formula, against the real binary: one server with a
//! host, a mem and an erofs export and small bounds (flags and a config file), every
//! cache filled to its bound through NFS, and the server's RSS (`/proc/PID/status`)
//! checked to stay under what the formula gives for those bounds.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use client::{auth_sys, Nfs3Client};
use common::Server;
use nfs3::nfs::{GetattrArgs, NfsFh3, RemoveArgs, StableHow};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// The bounds the server runs with (see `formula_bytes`).
const INDEX_BYTES: u64 = 4 * MIB;
const REPLY_CACHE_ENTRIES: u64 = 2048;
const MEM_CAPACITY: u64 = 16 * MIB;
const EROFS_CACHE: u64 = 16 * MIB;
const SERVER_BUDGET: u64 = 32 * MIB;
const CONNECTIONS: u64 = 64;

/// Files in the host export: more than the index's byte bound holds.
const HOST_FILES: usize = 15_000;
/// Identities sent: more than the credential cache holds.
const IDENTITIES: u32 = nfsd::limits::CRED_CACHE_ENTRIES as u32 + 1000;

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kib * KIB
}

/// The formula of docs/LIMITS.md, term by term, for this server's bounds (`workers`
/// event loops, `open_files` descriptors cached).
fn formula_bytes(baseline: u64, open_files: u64) -> (u64, Vec<(&'static str, u64)>) {
    let conn_fixed = rpc::limits::CONN_FIXED_BYTES as u64;
    let conn_budget = rpc::conn::ConnLimits::default().budget_bytes as u64;
    let index = backend_host_worst(INDEX_BYTES);
    let terms = vec![
        ("baseline", baseline),
        ("connections' fixed buffers", (CONNECTIONS + 2) * conn_fixed),
        (
            "connection budgets",
            ((CONNECTIONS + 2) * conn_budget).min(SERVER_BUDGET),
        ),
        (
            "reply cache",
            REPLY_CACHE_ENTRIES * rpc::limits::REPLY_CACHE_ENTRY_BYTES as u64,
        ),
        (
            "credential cache",
            nfsd::limits::CRED_CACHE_ENTRIES as u64 * nfsd::limits::CRED_ENTRY_BYTES as u64,
        ),
        (
            "open-file cache",
            open_files * sync::limits::FILECACHE_ENTRY_BYTES as u64,
        ),
        ("host handle index", index),
        (
            "host gone-list",
            (backend_host::limits::NEGATIVE_ENTRIES * backend_host::limits::NEGATIVE_ENTRY_BYTES)
                as u64,
        ),
        ("erofs extent cache", EROFS_CACHE),
        ("mem export", MEM_CAPACITY),
        ("mount list", nfsd::limits::MOUNT_LIST_BYTES as u64),
    ];
    (terms.iter().map(|(_, b)| b).sum(), terms)
}

fn backend_host_worst(index_bytes: u64) -> u64 {
    backend_host::index::IndexLimits {
        max_entries: usize::MAX,
        max_bytes: index_bytes as usize,
    }
    .worst_bytes() as u64
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("granary-memory-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("host")).unwrap();
    dir
}

/// An lz4 image of 48 MiB of data that compresses (about 3:1) but not to nothing.
fn erofs_image(dir: &Path) -> PathBuf {
    let src = dir.join("erofs-src");
    std::fs::create_dir_all(&src).unwrap();
    let mut seed = 0x9e37_79b9_u32;
    for f in 0..12 {
        let mut data = Vec::with_capacity(4 << 20);
        while data.len() < 4 << 20 {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let word = format!("{:08x} ", seed % 4096);
            data.extend_from_slice(word.as_bytes());
        }
        std::fs::write(src.join(format!("f{f}")), &data).unwrap();
    }
    let image = dir.join("image.erofs");
    let out = Command::new("mkfs.erofs")
        .args(["-zlz4", "-C65536"])
        .arg(&image)
        .arg(&src)
        .output()
        .expect("mkfs.erofs (erofs-utils) runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    image
}

fn config(dir: &Path, image: &Path) -> PathBuf {
    let text = format!(
        "[limits]\nreply_cache_entries = {REPLY_CACHE_ENTRIES}\nserver_budget_bytes = {SERVER_BUDGET}\n\
         index_bytes = {INDEX_BYTES}\n\n\
         [[export]]\npath = \"/\"\nbackend = \"host\"\ndir = \"{}\"\nsquash = \"none\"\n\n\
         [[export]]\npath = \"/mem\"\nbackend = \"mem\"\ncapacity_bytes = {MEM_CAPACITY}\nsquash = \"none\"\n\n\
         [[export]]\npath = \"/img\"\nbackend = \"erofs\"\nimage = \"{}\"\n",
        dir.join("host").display(),
        image.display()
    );
    let path = dir.join("granary.toml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn connect(server: &Server) -> Nfs3Client {
    Nfs3Client::connect(server.addr, server.addr)
        .await
        .expect("connect")
        .with_timeout(Duration::from_secs(30))
}

/// Every file of the host export listed with handles (each one recorded in the handle
/// index), then read (each one opened into the open-file cache).
async fn fill_host(client: &Nfs3Client, root: &NfsFh3) -> usize {
    let listed = client.list_dir_plus(root).await.expect("READDIRPLUS");
    let handles: Vec<NfsFh3> = listed
        .into_iter()
        .filter(|e| e.name.0.starts_with(b"file-"))
        .filter_map(|e| e.name_handle.0)
        .collect();
    assert!(handles.len() >= HOST_FILES, "{} handles", handles.len());
    for fh in handles
        .iter()
        .take(sync::limits::FILECACHE_DEFAULT_ENTRIES + 500)
    {
        client.read_all(fh).await.expect("READ");
    }
    handles.len()
}

/// Non-idempotent calls, each kept by the reply cache: REMOVEs of names that do not
/// exist.
async fn fill_reply_cache(client: &Nfs3Client, root: &NfsFh3) {
    for i in 0..REPLY_CACHE_ENTRIES + 500 {
        let args = RemoveArgs {
            object: common::nfs::dirop(root, format!("missing-{i}")),
        };
        client.remove(&args).await.expect("REMOVE reply");
    }
}

/// One GETATTR per identity, each with a full list of groups.
async fn fill_credentials(client: &mut Nfs3Client, root: &NfsFh3) {
    let groups: Vec<u32> = (1..=rpc::limits::MAX_AUTH_GROUPS).collect();
    for uid in 1..=IDENTITIES {
        client.set_auth(&auth_sys(uid, uid, &groups));
        let args = GetattrArgs {
            object: root.clone(),
        };
        client.getattr(&args).await.expect("GETATTR reply");
    }
}

/// Files written to the mem export until it is full.
async fn fill_mem(client: &Nfs3Client) {
    let mem = client.mount("/mem").await.expect("MNT /mem");
    let chunk = vec![0x5a_u8; 1 << 20];
    for i in 0.. {
        let fh = match client.create_file(&mem, format!("f{i}"), 0o644).await {
            Ok(fh) => fh,
            Err(_) => return,
        };
        if client
            .write_all(&fh, 0, &chunk, StableHow::Unstable)
            .await
            .is_err()
        {
            return;
        }
        assert!(i < 64, "a 16 MiB mem export took {i} MiB");
    }
}

/// Every file of the image read (their decoded extents go to the extent cache).
async fn fill_erofs(client: &Nfs3Client) {
    let img = client.mount("/img").await.expect("MNT /img");
    for e in client.list_dir_plus(&img).await.expect("READDIRPLUS /img") {
        if let Some(fh) = e.name_handle.0 {
            if e.name.0.starts_with(b"f") {
                client.read_all(&fh).await.expect("READ erofs");
            }
        }
    }
}

#[tokio::test]
async fn rss_stays_under_the_formula_with_every_cache_full() {
    let dir = scratch();
    for i in 0..HOST_FILES {
        std::fs::write(dir.join("host").join(format!("file-{i:05}")), b"x").unwrap();
    }
    let image = erofs_image(&dir);
    let conf = config(&dir, &image);
    let server = Server::start(&[
        "--config",
        conf.to_str().unwrap(),
        "--state-dir",
        dir.join("state").to_str().unwrap(),
        "--erofs-cache-bytes",
        &EROFS_CACHE.to_string(),
    ]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let baseline = rss_bytes(server.pid());
    let mut client = connect(&server).await;
    let root = client.mount("/").await.expect("MNT /");
    let mut idle = Vec::new();
    for _ in 0..CONNECTIONS {
        idle.push(connect(&server).await);
    }
    let handles = fill_host(&client, &root).await;
    fill_reply_cache(&client, &root).await;
    fill_mem(&client).await;
    fill_erofs(&client).await;
    fill_credentials(&mut client, &root).await;
    let rss = rss_bytes(server.pid());
    let open_files = sync::limits::FILECACHE_DEFAULT_ENTRIES as u64;
    let (bound, terms) = formula_bytes(baseline, open_files);
    for (what, bytes) in &terms {
        eprintln!("{what:>28}: {:>8} KiB", bytes / KIB);
    }
    eprintln!(
        "RSS {} KiB after {handles} host handles, formula {} KiB",
        rss / KIB,
        bound / KIB
    );
    assert!(
        rss <= bound,
        "RSS {} KiB is over the formula's {} KiB",
        rss / KIB,
        bound / KIB
    );
    // The caches were full: without their bounds the same load takes more than this.
    assert!(
        rss > baseline + EROFS_CACHE / 2,
        "the load did not fill the caches (RSS {} KiB, baseline {} KiB)",
        rss / KIB,
        baseline / KIB
    );
    drop(idle);
    server.terminate();
    let _ = std::fs::remove_dir_all(dir);
}
