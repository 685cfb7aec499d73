//! One 4 KiB WRITE and READ taken apart, in process, on a host export (seed 004's
//! per-stage table): each stage is its own loop on one thread, cache off and on.
//!
//! | stage | what one loop iteration does |
//! |---|---|
//! | decode | decodes the WRITE/READ arguments from the bytes of a request |
//! | handle verify | parses the 32-byte handle and checks its MAC |
//! | export | finds the export by id, compares its incarnation, checks the client address |
//! | credential | the mapped credential: off maps the AUTH_SYS credential (4 groups) afresh, on takes it from the credential cache |
//! | open | off: the host backend's open of the file by id (handle index, `open_by_handle_at` or a walk, `statx` to verify); on: an open-file cache hit |
//! | attributes | one `statx` of the open file (READ needs it on a hit; off gets it from the open) |
//! | I/O syscall | one `pwrite` or `pread` of 4 KiB |
//! | close | off: `close`; on: dropping the cache's reference |
//! | encode | as the server encodes a reply: the buffer the dispatcher starts with, the accepted-reply header, the WRITE results (wcc data, verifier) or the READ results around the data (attributes, count, eof; the data is the I/O stage's `pread` into the buffer), the record mark |
//! | whole call | a request record (built before the loop) through the dispatcher to the host export and back |
//! | extra: identity unchanged | (run as root only) what every host call pays to act as its caller when the thread already does: `backend_host::identity::act_as` finding the thread's record equal |
//! | extra: identity switch | (root only) `act_as` alternating between two non-root callers (uid, gid, 3 groups each): `setgroups`, `setfsgid`, `setfsuid` and the checks that read them back, per switch |
//! | extra: faccessat2 | (root only) the kernel's permission check READ and WRITE make on a descriptor when the caller does not own the file |
//!
//! The `extra` rows are not in the sums: the first is in every call's `whole call` row, the
//! other two only in calls that need them.
//!
//! open and close are timed in batches (open 64, then close those 64), so each is its own
//! figure.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;

use backend_host::{HostConfig, HostFs};
use bytes::{Bytes, BytesMut};
use gtime::Clock;
use nfs3::nfs::{Nfsstat3, PostOpAttr, ReadArgs, Res3, StableHow, WriteArgs, WriteOk};
use rpc::msg::{AuthSys, CallHeader, OpaqueAuth, AUTH_SYS};
use rpc::{Auth, Dispatcher};
use vfs::{
    Backend, Export, ExportId, ExportOptions, ExportTable, FileId, HandleKey, Name, Squash, Trusted,
};
use xdr::{Decode, Encode, Encoder};

use super::{variant, Scratch, MODES};
use crate::report::Variant;
use crate::Settings;

const IO_BYTES: usize = 4096;
/// The file's size; I/O cycles through it.
const FILE_BYTES: u64 = 1 << 20;
/// Descriptors opened before they are closed, in the open/close loops.
const OPEN_BATCH: usize = 64;
const WRITE: u32 = 7;
const READ: u32 = 6;
/// READ's results before its data: status, post-op attributes, count, eof, length.
const READ_HEAD_BYTES: usize = 4 + 88 + 4 + 4 + 4;

/// The reply buffer the dispatcher starts a call with: the procedure's reply bound (512
/// bytes for WRITE, more than 16 KiB for READ) clamped to 16 KiB, plus 64 for the header
/// (rpc's `run`).
fn reply_start_bytes(write: bool) -> usize {
    let bound =
        nfsd::nfs3proc::PROCEDURES[if write { WRITE } else { READ } as usize].max_reply_bytes;
    bound.min(16 << 10) + 64
}

/// One mode's server pieces: a host export of its own directory with the open-file
/// cache on or off, and an `NfsState` with the credential cache on or off.
struct Side {
    host: Arc<HostFs>,
    state: Arc<nfsd::NfsState>,
    dispatcher: Dispatcher,
    file: FileId,
    fh: Bytes,
}

fn side(scratch: &Scratch, mode: &str) -> Result<Side, String> {
    let on = mode == "on";
    let dir = scratch.export(mode);
    let path = std::path::Path::new(&dir).join("stage-file");
    let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    file.set_len(FILE_BYTES)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut config = HostConfig::new(&dir);
    config.open_files = if on { 64 } else { 0 };
    let host = Arc::new(HostFs::new(&config).map_err(|e| e.to_string())?);
    let name = Name::new(b"stage-file".to_vec()).map_err(|e| e.to_string())?;
    let found = host
        .lookup(host.root(), &name, &Trusted::ROOT)
        .map_err(|e| format!("lookup: {e}"))?;
    let options = ExportOptions {
        squash: Squash::None,
        ..ExportOptions::default()
    };
    let export = Export::new(ExportId(1), 1, "/".into(), options, host.clone());
    let table = ExportTable::new(vec![export], HandleKey::new([7; 16]));
    let state = nfsd::NfsState::new(table, [1; 8], nfsd::limits::MAX_IO_BYTES);
    let state = Arc::new(state.with_cred_cache(on));
    let export = state.exports.by_id(ExportId(1)).ok_or("no export")?;
    let fh = Bytes::copy_from_slice(&state.exports.handle(export, &found.attr));
    let mut dispatcher = Dispatcher::new();
    nfsd::register(&mut dispatcher, &state);
    Ok(Side {
        host,
        state,
        dispatcher,
        file: found.attr.fileid,
        fh,
    })
}

/// What a Linux client sends: uid, gid and a few groups.
fn auth_sys() -> AuthSys {
    AuthSys {
        stamp: 0,
        machine_name: Bytes::from_static(b"lab"),
        uid: 0,
        gid: 0,
        gids: vec![0, 4, 24, 27],
    }
}

fn args(fh: &Bytes, write: bool, offset: u64) -> Bytes {
    let mut e = Encoder::new();
    let file = nfs3::nfs::NfsFh3(fh.clone());
    if write {
        WriteArgs {
            file,
            offset,
            count: IO_BYTES as u32,
            stable: StableHow::Unstable,
            data: Bytes::from(vec![0x5a; IO_BYTES]),
        }
        .encode(&mut e);
    } else {
        ReadArgs {
            file,
            offset,
            count: IO_BYTES as u32,
        }
        .encode(&mut e);
    }
    e.into_bytes()
}

fn record(fh: &Bytes, write: bool, offset: u64) -> Bytes {
    let header = CallHeader {
        xid: 1,
        program: 100_003,
        version: 3,
        procedure: if write { WRITE } else { READ },
        cred: OpaqueAuth {
            flavor: AUTH_SYS,
            body: xdr::Encode::to_xdr(&auth_sys()),
        },
        verf: OpaqueAuth::default(),
    };
    let mut e = Encoder::new();
    header.encode(&mut e);
    let mut out = BytesMut::from(&e.into_bytes()[..]);
    out.extend_from_slice(&args(fh, write, offset));
    out.freeze()
}

/// ns per iteration of `op`, `settings.samples` samples on one thread.
fn ns<O: FnMut()>(settings: &Settings, make: impl Fn() -> O + Sync) -> Vec<f64> {
    (0..settings.samples)
        .map(|_| 1e9 / crate::measure::rate(1, settings.sample, |_| make()))
        .collect()
}

/// ns per open and per close: `OPEN_BATCH` opens timed together, then their closes.
fn open_close<T>(settings: &Settings, mut open: impl FnMut() -> T) -> (Vec<f64>, Vec<f64>) {
    let clock = gtime::SystemClock::new();
    let mut held = Vec::with_capacity(OPEN_BATCH);
    let (mut opens, mut closes) = (Vec::new(), Vec::new());
    for _ in 0..settings.samples {
        let began = clock.monotonic();
        let (mut open_ns, mut close_ns, mut n) = (0.0, 0.0, 0.0);
        while clock.monotonic() - began < settings.sample {
            let t0 = clock.monotonic();
            held.extend((0..OPEN_BATCH).map(|_| open()));
            let t1 = clock.monotonic();
            held.clear();
            let t2 = clock.monotonic();
            open_ns += (t1 - t0).as_nanos() as f64;
            close_ns += (t2 - t1).as_nanos() as f64;
            n += OPEN_BATCH as f64;
        }
        opens.push(open_ns / n);
        closes.push(close_ns / n);
    }
    (opens, closes)
}

/// Every stage of one direction for one side.
fn stages_of(side: &Side, write: bool, settings: &Settings) -> Vec<(&'static str, Vec<f64>)> {
    let peer: SocketAddr = "127.0.0.1:900".parse().expect("address");
    let key = HandleKey::new([7; 16]);
    let export = side.state.exports.by_id(ExportId(1)).expect("export");
    let auth = Auth::Sys(auth_sys());
    let body = args(&side.fh, write, 0);
    let mut out = Vec::new();
    out.push((
        "decode",
        ns(settings, || {
            let body = body.clone();
            move || {
                let mut d = xdr::Decoder::new(body.clone());
                if write {
                    std::hint::black_box(WriteArgs::decode(&mut d).is_ok());
                } else {
                    std::hint::black_box(ReadArgs::decode(&mut d).is_ok());
                }
            }
        }),
    ));
    out.push((
        "handle verify",
        ns(settings, || {
            || {
                let h = HandleKey::parse(&side.fh).and_then(|h| key.verify(&side.fh).map(|()| h));
                std::hint::black_box(h.is_ok());
            }
        }),
    ));
    out.push((
        "export",
        ns(settings, || {
            || {
                let e = side.state.exports.by_id(std::hint::black_box(ExportId(1)));
                let ok = e.is_some_and(|e| e.incarnation == 1 && e.options.allows(peer.ip()));
                std::hint::black_box(ok);
            }
        }),
    ));
    out.push((
        "credential",
        ns(settings, || {
            || drop(std::hint::black_box(side.state.cred(export, &auth)))
        }),
    ));
    let (opens, closes) = open_close(settings, || {
        side.host
            .io_file(side.file, write)
            .expect("open the stage file")
    });
    out.push(("open", opens));
    let io = side
        .host
        .io_file(side.file, write)
        .expect("open the stage file");
    out.push((
        "attributes (statx)",
        ns(settings, || {
            || {
                let st = rustix::fs::statx(
                    io.as_fd(),
                    "",
                    rustix::fs::AtFlags::EMPTY_PATH,
                    rustix::fs::StatxFlags::BASIC_STATS,
                );
                std::hint::black_box(st.is_ok());
            }
        }),
    ));
    out.push((
        if write {
            "I/O syscall (pwrite)"
        } else {
            "I/O syscall (pread)"
        },
        ns(settings, || {
            let (mut buf, mut offset) = (vec![0x5a_u8; IO_BYTES], 0u64);
            let fd = io.as_fd();
            move || {
                offset = (offset + IO_BYTES as u64) % FILE_BYTES;
                let n = if write {
                    rustix::io::pwrite(fd, &buf, offset)
                } else {
                    rustix::io::pread(fd, &mut buf, offset)
                };
                assert_eq!(n.ok(), Some(IO_BYTES), "4 KiB I/O on the stage file");
            }
        }),
    ));
    out.push(("close", closes));
    if side.host.acts_as_caller() {
        out.extend(identity_stages(&io, settings));
    }
    let attr = side.host.getattr(side.file).expect("attributes");
    out.push((
        "encode",
        ns(settings, || {
            let attr = attr.clone();
            move || {
                // As the dispatcher does: a reply buffer of the procedure's starting size,
                // the accepted-reply header, the results, the record mark.
                let mut e = Encoder::from_buf(rpc::record::start_record(reply_start_bytes(write)));
                rpc::msg::encode_accepted(&mut e, 1, rpc::msg::AcceptStat::Success);
                if write {
                    let res: nfs3::nfs::WriteRes = Res3::Ok(WriteOk {
                        file_wcc: nfsd::convert::wcc(&vfs::Change {
                            before: Some(vfs::PreAttr::of(&attr)),
                            after: attr.clone(),
                        }),
                        count: IO_BYTES as u32,
                        committed: StableHow::Unstable,
                        verf: [1; 8],
                    });
                    res.encode(&mut e);
                } else {
                    // As the server's READ: the words around the data. The data itself is
                    // the I/O stage's: `pread` writes it straight into this buffer.
                    e.reserve(READ_HEAD_BYTES + IO_BYTES);
                    Nfsstat3::Ok.encode(&mut e);
                    PostOpAttr(Some(nfsd::convert::fattr(&attr))).encode(&mut e);
                    e.u32(IO_BYTES as u32);
                    e.bool(false);
                    e.u32(IO_BYTES as u32);
                }
                std::hint::black_box(rpc::record::seal(e.into_inner()));
            }
        }),
    ));
    drop(io);
    out.push((
        "whole call (dispatcher)",
        ns(settings, || {
            // The client's work stays out of the loop: one request record per offset.
            let records: Vec<Bytes> = (0..FILE_BYTES)
                .step_by(IO_BYTES)
                .map(|offset| record(&side.fh, write, offset))
                .collect();
            let mut next = 0usize;
            move || {
                next = (next + 1) % records.len();
                let reply = side.dispatcher.handle(records[next].clone(), peer);
                let reply = reply.expect("a reply");
                // The status is the first word after the 24-byte accepted reply header
                // and the 4-byte record mark.
                let ok = reply.get(28..32) == Some(&[0, 0, 0, Nfsstat3::Ok as u8][..]);
                assert!(ok, "the in-process call succeeded");
            }
        }),
    ));
    out
}

/// The `extra` rows: what acting as the caller costs (see the module documentation).
fn identity_stages(
    io: &backend_host::IoFile,
    settings: &Settings,
) -> Vec<(&'static str, Vec<f64>)> {
    use backend_host::identity::{act_as, act_as_server, kernel_allows, Who};
    /// `R_OK` of `access(2)`.
    const R_OK: i32 = 4;
    let alice = Who {
        uid: 1000,
        gid: 1000,
        groups: &[1000, 4, 24],
    };
    let bob = Who {
        uid: 1001,
        gid: 1001,
        groups: &[1001, 4, 27],
    };
    let switch = |who: &Who<'_>| assert!(act_as(who).is_ok(), "act as a caller");
    let mut out = Vec::new();
    switch(&alice);
    out.push((
        "extra: identity unchanged",
        ns(settings, || || switch(std::hint::black_box(&alice))),
    ));
    out.push((
        "extra: identity switch",
        ns(settings, || {
            let mut odd = false;
            move || {
                odd = !odd;
                switch(if odd { &bob } else { &alice });
            }
        }),
    ));
    let fd = io.as_fd();
    out.push((
        "extra: faccessat2",
        ns(settings, || {
            move || {
                std::hint::black_box(kernel_allows(fd, R_OK).is_ok());
            }
        }),
    ));
    assert!(act_as_server().is_ok(), "act as the server again");
    out
}

/// Runs the stage groups; returns notes (the sums).
pub fn run(
    scratch: &Scratch,
    settings: &Settings,
    out: &mut Vec<Variant>,
) -> Result<Vec<String>, String> {
    let sides = [side(scratch, "off")?, side(scratch, "on")?];
    let mut notes = Vec::new();
    for write in [true, false] {
        let name = if write { "WRITE" } else { "READ" };
        let per_side: Vec<_> = sides
            .iter()
            .map(|s| stages_of(s, write, settings))
            .collect();
        let mut sums = [0.0f64; 2];
        let mut outside_io = [0.0f64; 2];
        for (i, (stage, _)) in per_side[0].iter().enumerate() {
            let group = format!("stage {name} 4KiB {stage}");
            for (m, (mode, stages)) in MODES.iter().zip(&per_side).enumerate() {
                let v = variant(&group, mode, stages[i].1.clone());
                if !stage.starts_with("whole") && !stage.starts_with("extra") {
                    sums[m] += v.median();
                    if !stage.starts_with("I/O") {
                        outside_io[m] += v.median();
                    }
                }
                out.push(v);
            }
        }
        notes.push(format!(
            "{name} 4 KiB, sum of the stage medians: off {:.0} ns, on {:.0} ns (saved {:.0} \
             ns); outside the I/O syscall: off {:.0} ns, on {:.0} ns (the attributes row \
             counts for READ on a hit; off takes them in its open)",
            sums[0],
            sums[1],
            sums[0] - sums[1],
            outside_io[0],
            outside_io[1]
        ));
    }
    for (mode, s) in MODES.iter().zip(&sides) {
        if let Some(stats) = s.host.open_file_stats() {
            notes.push(format!("open-file cache ({mode}): {stats:?}"));
        }
    }
    Ok(notes)
}
