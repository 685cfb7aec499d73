//! The iozone-style matrix of seed 004 (`iozone -az -i0 -i1 -y1k -s128m -I -N`): for each
//! file size and record size (1 KiB … 16 MiB), four sequential passes over the file at
//! depth 1 (one record at a time, as iozone's one thread does): write (a new file),
//! rewrite, read, reread. Reported in KiB/s and µs per record (`-N`), so the seed's table
//! (Linux nfsd on tmpfs over FDR InfiniBand) can be laid beside ours.
//!
//! How a record maps to calls (iozone `-I` is O_DIRECT: one system call per record, no
//! client cache): a record of at most 1 MiB (the rsize/wsize every server here offers) is
//! one READ, or one FILE_SYNC WRITE; a larger record is its 1 MiB pieces sent at once,
//! then for writes one COMMIT. Every read is verified against the pattern.
//!
//! Unlike iozone, a pass stops after [`IOZONE_PASS_CAP`] even if the file is not done, and
//! its rate is over the records done: a slow server must not take the whole run. The
//! report notes every capped pass.

use std::fmt::Write as _;
use std::rc::Rc;

use nfs3::nfs::{NfsFh3, StableHow};

use super::gen::{self, Done, Load, Stop};
use super::limits::{
    IOZONE_MAX_RECORD_BYTES, IOZONE_MIN_RECORD_BYTES, IOZONE_PASS_CAP, IO_CHUNK_BYTES,
};
use super::pattern;
use super::sample::{PhaseInfo, Sample};
use super::wire::{Conn, OpError};
use super::workloads::{remove_quietly, Env};
use super::Settings;

/// The four passes, in the order iozone runs them.
pub const PASSES: [&str; 4] = ["write", "rewrite", "read", "reread"];

/// `1k`, `16m`, ... for names.
#[must_use]
pub fn size_name(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{}m", bytes >> 20)
    } else {
        format!("{}k", bytes >> 10)
    }
}

/// (file size, record size) cells of the matrix.
#[must_use]
pub fn cells(s: &Settings) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &file in &s.iozone_file_bytes {
        let mut record = IOZONE_MIN_RECORD_BYTES;
        while record <= file.min(IOZONE_MAX_RECORD_BYTES) {
            out.push((file, record));
            record *= 2;
        }
    }
    out
}

/// Phase name of one pass of one cell: `f128m-r4k-write`.
#[must_use]
pub fn phase_name(file: u64, record: u64, pass: &str) -> String {
    format!("f{}-r{}-{pass}", size_name(file), size_name(record))
}

/// Every phase name of the matrix.
#[must_use]
pub fn phases(s: &Settings) -> Vec<String> {
    cells(s)
        .into_iter()
        .flat_map(|(f, r)| PASSES.map(|pass| phase_name(f, r, pass)))
        .collect()
}

/// Runs every cell that has a selected phase; the four passes always run (reads need the
/// written file), only the selected ones are reported.
pub async fn run(env: &Env<'_>, phases: &[PhaseInfo]) -> Result<Vec<Sample>, String> {
    let (conn, dir) = env.workdir("iozone").await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (file, record) in cells(env.settings) {
        let selected: Vec<&PhaseInfo> = phases
            .iter()
            .filter(|p| {
                PASSES
                    .iter()
                    .any(|pass| p.phase == phase_name(file, record, pass))
            })
            .collect();
        if selected.is_empty() {
            continue;
        }
        let name = format!("f{}-r{}", size_name(file), size_name(record));
        let fh =
            match conn.create(&dir, name.as_bytes()).await {
                Ok(fh) => Rc::new(fh),
                Err(e) => {
                    let why = format!("CREATE {name}: {e}");
                    out.extend(selected.iter().map(|info| {
                        Sample::failed(info, env.target, env.backend, env.repeat, &why)
                    }));
                    continue;
                }
            };
        // A pass stopped by the time cap covers the records done by then; the later
        // passes cover the records the write pass wrote.
        let all = file / record;
        let mut records = all;
        for pass in PASSES {
            let suffix = format!("-{pass}");
            let info = selected.iter().find(|p| p.phase.ends_with(&suffix));
            if records == 0 {
                let why = "not run: the write pass wrote no record";
                out.extend(
                    info.map(|i| Sample::failed(i, env.target, env.backend, env.repeat, why)),
                );
                continue;
            }
            let m = pass_once(env, &conn, &fh, record, records, pass).await;
            if pass == "write" {
                records = records.min(m.ops);
            }
            if let Some(info) = info {
                let mut note = record_note(record, pass);
                if m.ops < all && m.ops > 0 {
                    let cap = IOZONE_PASS_CAP.as_secs_f64();
                    let _ = write!(note, "; capped at {cap} s: {} of {all} records", m.ops);
                }
                out.push(env.sample(info, &m).with_note(note));
            }
        }
        remove_quietly(&conn, &dir, &name).await;
    }
    Ok(out)
}

fn record_note(record: u64, pass: &str) -> String {
    let pieces = record.div_ceil(u64::from(IO_CHUNK_BYTES));
    match (pieces, pass.contains("write")) {
        (1, true) => "1 FILE_SYNC WRITE per record; µs/op = latency mean".into(),
        (1, false) => "1 READ per record; µs/op = latency mean".into(),
        (n, true) => format!("{n} × 1 MiB UNSTABLE WRITEs + COMMIT per record"),
        (n, false) => format!("{n} × 1 MiB READs per record"),
    }
}

/// One sequential pass over the file, one record at a time.
async fn pass_once(
    env: &Env<'_>,
    conn: &Conn,
    fh: &Rc<NfsFh3>,
    record: u64,
    records: u64,
    pass: &'static str,
) -> gen::Measured {
    let load = Load {
        conns: 1,
        depth: 1,
        warmup: std::time::Duration::ZERO,
        stop: Stop::Count {
            ops: records,
            deadline: IOZONE_PASS_CAP,
            deadline_fails: false,
        },
    };
    let f = Rc::clone(fh);
    gen::run(env.clock, load, vec![Ok(conn.clone())], move |ctx| {
        let f = Rc::clone(&f);
        async move {
            let at = ctx.ticket * record;
            let calls = if pass.contains("write") {
                write_record(&ctx.conn, &f, at, record).await?
            } else {
                read_record(&ctx.conn, &f, at, record).await?
            };
            Ok(Done {
                calls,
                bytes: record,
                entries: 0,
            })
        }
    })
    .await
}

/// Writes one record; returns the calls made.
async fn write_record(conn: &Conn, fh: &NfsFh3, at: u64, record: u64) -> Result<u64, OpError> {
    let chunk = u64::from(IO_CHUNK_BYTES);
    if record <= chunk {
        let data = pattern::fill(at, usize::try_from(record).unwrap_or(0));
        conn.write(fh, at, data, StableHow::FileSync).await?;
        return Ok(1);
    }
    let mut sent = Vec::new();
    for off in (at..at + record).step_by(IO_CHUNK_BYTES as usize) {
        let data = pattern::fill(off, IO_CHUNK_BYTES as usize);
        sent.push(conn.send_write(fh, off, data, StableHow::Unstable).await?);
    }
    let calls = sent.len() as u64 + 1;
    for w in sent {
        conn.finish_write(w, StableHow::Unstable).await?;
    }
    conn.commit(fh).await?;
    Ok(calls)
}

/// Reads and verifies one record; returns the calls made.
async fn read_record(conn: &Conn, fh: &NfsFh3, at: u64, record: u64) -> Result<u64, OpError> {
    let chunk = u64::from(IO_CHUNK_BYTES);
    let mut sent = Vec::new();
    for off in (at..at + record).step_by(IO_CHUNK_BYTES as usize) {
        let len = u32::try_from(chunk.min(at + record - off)).unwrap_or(IO_CHUNK_BYTES);
        sent.push(conn.send_read(fh, off, len).await?);
    }
    let calls = sent.len() as u64;
    for r in sent {
        conn.finish_read(r).await?;
    }
    Ok(calls)
}
