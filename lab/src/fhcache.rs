//! `granary lab fhcache` (seed 004): what the open-file cache saves on one 4 KiB WRITE or
//! READ of a real file, and what a cache hit itself costs.
//!
//! Each variant is a loop in this process on a file in a scratch directory (`$TMPDIR`, or
//! `/tmp`): `off` opens the file, does the I/O system call and closes it, as a host export
//! does per RPC without the cache; `on` takes the open file from
//! [`sync::filecache::FileCache`] (a hit) and does the same system call. The stage rows
//! time one piece alone: `open+close`, the cache hit, `pwrite`, `pread`.
//!
//! Not yet measured here (they need the host backend behind the cache, still being built):
//! the iozone table through the server, and the per-stage breakdown of a whole RPC
//! (decode, handle verify, export, credential, encode).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use sync::filecache::{Access, FileCache};

use crate::measure;
use crate::report::{Report, Variant};
use crate::Settings;

const SEED_CLAIM: &str = "nfsd_open ~20 us per 4 KiB WRITE (15 us of it fh_verify); the \
                          open cache saved ~1 us per WRITE below 64 KiB records";

/// The file every loop uses: 1 MiB, I/O at 4 KiB offsets cycling through it.
const FILE_BYTES: u64 = 1 << 20;
const IO_BYTES: usize = 4096;

struct Scratch {
    dir: PathBuf,
    path: PathBuf,
}

impl Scratch {
    fn new() -> Result<Self, String> {
        let base = std::env::var_os("TMPDIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
        let dir = base.join(format!("granary-lab-fhcache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join("f");
        let file = File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        file.set_len(FILE_BYTES)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Self { dir, path })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn open(path: &Path, write: bool) -> std::io::Result<File> {
    OpenOptions::new().read(true).write(write).open(path)
}

/// One 4 KiB I/O at the next offset.
fn io(file: &File, write: bool, buf: &mut [u8], offset: &mut u64) {
    *offset = (*offset + IO_BYTES as u64) % FILE_BYTES;
    let done = if write {
        file.write_at(buf, *offset)
    } else {
        file.read_at(buf, *offset)
    };
    assert_eq!(done.ok(), Some(IO_BYTES), "4 KiB I/O on the scratch file");
}

/// ns per operation of one thread running `make()`'s loop.
fn ns_per_op<O: FnMut()>(settings: &Settings, make: impl Fn() -> O + Sync) -> Vec<f64> {
    (0..settings.samples)
        .map(|_| 1e9 / measure::rate(1, settings.sample, |_| make()))
        .collect()
}

fn variant(group: &str, label: &str, baseline: Option<&str>, samples: Vec<f64>) -> Variant {
    Variant {
        name: format!("{group} {label}"),
        label: label.to_string(),
        group: group.to_string(),
        baseline: baseline.map(|b| format!("{group} {b}")),
        samples,
    }
}

/// `off` (open + I/O + close) against `on` (cache hit + I/O) for one direction.
fn io_group(scratch: &Scratch, write: bool, settings: &Settings, out: &mut Vec<Variant>) {
    let group = if write { "write4k" } else { "read4k" };
    let access = if write { Access::Write } else { Access::Read };
    let cache: FileCache<u64, File> = FileCache::new(16);
    let off = ns_per_op(settings, || {
        let (mut buf, mut offset) = (vec![7u8; IO_BYTES], 0);
        move || {
            let file = open(&scratch.path, write).expect("open the scratch file");
            io(&file, write, &mut buf, &mut offset);
        }
    });
    let on = ns_per_op(settings, || {
        let (mut buf, mut offset) = (vec![7u8; IO_BYTES], 0);
        let cache = &cache;
        move || {
            let file = cache
                .get_or_open(&1, access, || open(&scratch.path, write))
                .expect("open the scratch file");
            io(&file, write, &mut buf, &mut offset);
        }
    });
    out.push(variant(group, "off (open+io+close)", None, off));
    out.push(variant(
        group,
        "on (cache hit+io)",
        Some("off (open+io+close)"),
        on,
    ));
}

/// Each stage alone, so the cost outside the I/O call can be read off.
fn stage_group(scratch: &Scratch, settings: &Settings, out: &mut Vec<Variant>) {
    let group = "stage";
    let open_close = ns_per_op(settings, || {
        move || drop(open(&scratch.path, true).expect("open the scratch file"))
    });
    let cache: FileCache<u64, File> = FileCache::new(16);
    let hit = ns_per_op(settings, || {
        let cache = &cache;
        move || {
            let file = cache.get_or_open(&1, Access::Write, || open(&scratch.path, true));
            drop(file.expect("open the scratch file"));
        }
    });
    let file = open(&scratch.path, true).map_err(|e| e.to_string());
    let file = file.expect("open the scratch file");
    let pwrite = ns_per_op(settings, || {
        let (mut buf, mut offset, file) = (vec![7u8; IO_BYTES], 0, &file);
        move || io(file, true, &mut buf, &mut offset)
    });
    let pread = ns_per_op(settings, || {
        let (mut buf, mut offset, file) = (vec![7u8; IO_BYTES], 0, &file);
        move || io(file, false, &mut buf, &mut offset)
    });
    out.push(variant(group, "open+close", None, open_close));
    out.push(variant(group, "cache hit", Some("open+close"), hit));
    out.push(variant(group, "pwrite 4 KiB", Some("open+close"), pwrite));
    out.push(variant(group, "pread 4 KiB", Some("open+close"), pread));
}

/// Runs the experiment.
///
/// # Errors
/// The scratch directory or file cannot be made.
pub fn run(settings: &Settings) -> Result<Report, String> {
    let scratch = Scratch::new()?;
    let mut variants = Vec::new();
    io_group(&scratch, true, settings, &mut variants);
    io_group(&scratch, false, settings, &mut variants);
    stage_group(&scratch, settings, &mut variants);
    let notes = vec![
        "in process, one thread, a 1 MiB file in $TMPDIR (default /tmp): what the cache \
         saves per 4 KiB WRITE/READ (off/on) and each stage alone; the server-side \
         iozone table and whole-RPC stage breakdown need the host backend behind the \
         cache and are not measured yet"
            .to_string(),
        format!(
            "scratch directory's filesystem decides open/close cost: {}",
            scratch.dir.display()
        ),
    ];
    Ok(Report {
        experiment: "fhcache",
        title: "open-file cache (seed 004)",
        unit: "ns per op",
        higher_is_better: false,
        seed_claim: SEED_CLAIM,
        variants,
        context: Vec::new(),
        notes,
    })
}
