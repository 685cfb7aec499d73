//! The `v4` workload: NFSv4.1 against NFSv3 on the same server in the same run (issue
//! 27: "v4 READ/WRITE/GETATTR rates at least the v3 rates of the same server"). Each
//! phase runs twice back to back, first over NFSv3 (`-v3`) and then over NFSv4.1 (`-v4`),
//! one connection with `-dN` calls in flight; the report adds a `v4÷v3` ratio row per
//! pair and target.
//!
//! | phase | NFSv3 call | NFSv4.1 COMPOUND (one round trip each) |
//! |---|---|---|
//! | `getattr` | GETATTR of the export root | SEQUENCE, PUTFH, GETATTR (the attributes Linux asks for) |
//! | `lookup` | LOOKUP of the data file's name | SEQUENCE, PUTFH, LOOKUP, GETFH, GETATTR |
//! | `create` | CREATE of a new file, then REMOVE | SEQUENCE, PUTFH, OPEN (create), GETFH, GETATTR; SEQUENCE, PUTFH, CLOSE; SEQUENCE, PUTFH, REMOVE |
//! | `read4k` | verified 4 KiB READ at a random block | SEQUENCE, PUTFH, READ (open stateid) |
//! | `read64k` | verified 64 KiB READ at a random block | SEQUENCE, PUTFH, READ |
//! | `read1m` | verified 1 MiB READ at a random block | SEQUENCE, PUTFH, READ |
//! | `write4k` | 4 KiB UNSTABLE WRITE, COMMIT every 64 per task | SEQUENCE, PUTFH, WRITE; SEQUENCE, PUTFH, COMMIT every 64 |
//! | `write1m` | 1 MiB UNSTABLE WRITE, COMMIT every 64 per task | as `write4k` |
//!
//! `create` counts files (each made and removed again, so the directory stays small): a
//! new file costs NFSv3 one call (CREATE) and NFSv4 two (OPEN, and CLOSE when the
//! application closes it), as the Linux client sends them, so its `v4÷v3` ratio at one
//! in flight is about 2/3 by the protocols' design, not the server's.
//!
//! The file is made over NFSv3 (FILE_SYNC, the pattern) at the export's root, then opened
//! over NFSv4.1 (OPEN, CLAIM_NULL, share both) for its stateid. One session serves every
//! `-v4` phase of a run, with one slot per task in flight ([`MAX_DEPTH`] slots). A server
//! without NFSv4.1 fails the `-v4` phases with the reason; the limit responder answers
//! NFSv3 only, so the workload does not run on it.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use client::{ClientError, Nfs4Session, RpcConnection};
use nfs3::nfs::{NfsFh3, StableHow};
use nfs4::attr::{num, Fattr};
use nfs4::ops::{
    share, ArgOp, CloseArgs, CommitArgs, Createhow4, OpenArgs, OpenClaim4, Openflag4, ReadArgs,
    StableHow4, WriteArgs,
};
use nfs4::results::{Res4, ResOp};
use nfs4::types::{Bitmap4, Component4, NfsFh4, Opaque4, StateOwner4};
use nfs4::{Nfsstat4, Stateid4};

use super::gen::{self, Done, Measured};
use super::limits::{
    COMMIT_EVERY_WRITES, CONNECT_TIMEOUT, IO_CHUNK_BYTES, SMALL_IO_BYTES, V4_FILE_BYTES,
    V4_READ_BYTES,
};
use super::pattern;
use super::sample::{Metric, PhaseInfo, Sample};
use super::wire::{Conn, OpError};
use super::workloads::{make_file, remove_quietly, Env};

/// What the pairs measure, in run order.
const KINDS: [&str; 8] = [
    "getattr", "lookup", "create", "read4k", "read64k", "read1m", "write4k", "write1m",
];

/// Calls in flight of the pairs: one (the round trip) and many (the server's throughput).
const DEPTHS: [usize; 2] = [1, 16];

/// The open-owner of the `create` phases' OPENs (the data file's is another).
const CREATE_OWNER: &[u8] = b"bench-v4-create-owner";

/// Slots of the session: one per task of the deepest phase.
pub const MAX_DEPTH: usize = 16;

const _: () = assert!(DEPTHS[1] <= MAX_DEPTH);

/// The attributes of the `-v4` GETATTR and LOOKUP: what Linux asks for when it
/// revalidates a file (the `fattr3` of NFSv3 plus change, owner names, mounted-on id).
const GETATTR_BITS: [u32; 15] = [
    num::TYPE,
    num::CHANGE,
    num::SIZE,
    num::FSID,
    num::FILEID,
    num::MODE,
    num::NUMLINKS,
    num::OWNER,
    num::OWNER_GROUP,
    num::RAWDEV,
    num::SPACE_USED,
    num::TIME_ACCESS,
    num::TIME_METADATA,
    num::TIME_MODIFY,
    num::MOUNTED_ON_FILEID,
];

/// The phases: for each kind and depth, `-v3` then `-v4`.
#[must_use]
pub fn phases() -> Vec<PhaseInfo> {
    let mut out = Vec::new();
    for kind in KINDS {
        for depth in DEPTHS {
            for proto in ["v3", "v4"] {
                out.push(PhaseInfo {
                    workload: "v4",
                    phase: format!("{kind}-d{depth}-{proto}"),
                    metric: Metric::Ops,
                    conns: 1,
                    depth,
                });
            }
        }
    }
    out
}

/// The `-v3` phase paired with a `-v4` one (`None` for any other phase name).
#[must_use]
pub fn v3_of(phase: &str) -> Option<String> {
    phase.strip_suffix("-v4").map(|base| format!("{base}-v3"))
}

/// What a phase does, parsed from its name.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Getattr,
    Lookup,
    Create,
    Read(u32),
    Write(u32),
}

fn kind_of(phase: &str) -> Kind {
    match phase.split('-').next() {
        Some("lookup") => Kind::Lookup,
        Some("create") => Kind::Create,
        Some("read4k") => Kind::Read(SMALL_IO_BYTES),
        Some("read64k") => Kind::Read(V4_READ_BYTES),
        Some("read1m") => Kind::Read(IO_CHUNK_BYTES),
        Some("write4k") => Kind::Write(SMALL_IO_BYTES),
        Some("write1m") => Kind::Write(IO_CHUNK_BYTES),
        _ => Kind::Getattr,
    }
}

/// A READ or WRITE of `len` bytes on a file of `size`: at most the file.
fn io_len(len: u32, size: u64) -> u32 {
    u32::try_from(size.min(u64::from(len))).unwrap_or(len)
}

/// The name of the `ticket`th file a `create` phase makes (and removes again).
fn create_name(prefix: &str, ticket: u64) -> Bytes {
    Bytes::from(format!("{prefix}.{ticket}"))
}

/// The file both protocols work on.
struct Setup {
    name: String,
    root3: Rc<NfsFh3>,
    file3: Rc<NfsFh3>,
    size: u64,
}

/// The NFSv4.1 side: the session, its free slots, the export root and the open file.
struct V4 {
    session: Nfs4Session,
    slots: RefCell<Vec<u32>>,
    root: NfsFh4,
    file: NfsFh4,
    open: Stateid4,
}

pub async fn run(env: &Env<'_>, phases: &[PhaseInfo]) -> Result<Vec<Sample>, String> {
    let name = format!(
        "gb-v4-{}-r{}-{}",
        env.target,
        env.repeat,
        std::process::id()
    );
    let root = env.root().await.map_err(|e| e.to_string())?;
    let conn = Conn::connect(env.addrs.nfs, env.limit, env.settings.op_timeout)
        .await
        .map_err(|e| e.to_string())?;
    let size = env.settings.rand_file_bytes.min(V4_FILE_BYTES);
    let file3 = make_file(env, conn.clone(), &root, &name, size).await?;
    let setup = Setup {
        name,
        root3: Rc::new(root),
        file3: Rc::new(file3),
        size,
    };
    let v4 = v4_session(env, &setup.name).await.map(Rc::new);
    let mut out = Vec::new();
    for info in phases {
        let m = if info.phase.ends_with("-v4") {
            match &v4 {
                Ok(v4) => v4_phase(env, info, &setup, v4).await,
                Err(why) => {
                    out.push(Sample::failed(
                        info,
                        env.target,
                        env.backend,
                        env.repeat,
                        why,
                    ));
                    continue;
                }
            }
        } else {
            v3_phase(env, info, &setup).await
        };
        out.push(env.sample(info, &m));
    }
    remove_quietly(&conn, &setup.root3, &setup.name).await;
    Ok(out)
}

/// A session as a client of its own (one per target and repeat), the export root's
/// handle, and the file opened for reading and writing.
async fn v4_session(env: &Env<'_>, name: &str) -> Result<V4, String> {
    let conn =
        match tokio::time::timeout(CONNECT_TIMEOUT, RpcConnection::connect(env.addrs.nfs)).await {
            Ok(Ok(c)) => c
                .with_auth(&client::auth_sys(0, 0, &[]))
                .with_timeout(env.settings.op_timeout),
            Ok(Err(e)) => return Err(format!("connect {}: {e}", env.addrs.nfs)),
            Err(_) => return Err(format!("connect {}: no answer", env.addrs.nfs)),
        };
    let owner = format!(
        "granary-bench-v4-{}-{}-r{}",
        std::process::id(),
        env.target,
        env.repeat
    );
    let slots = u32::try_from(MAX_DEPTH).unwrap_or(1);
    let session = Nfs4Session::connect(conn, owner.as_bytes(), slots)
        .await
        .map_err(|e| format!("NFSv4.1 session: {e}"))?;
    let dir: Vec<&[u8]> = env
        .addrs
        .export_path
        .split('/')
        .filter(|c| !c.is_empty())
        .map(str::as_bytes)
        .collect();
    let mut ops = vec![ArgOp::Putrootfh];
    ops.extend(
        dir.iter()
            .map(|c| ArgOp::Lookup(Component4(Bytes::copy_from_slice(c)))),
    );
    ops.push(ArgOp::Getfh);
    let (status, results) = session
        .compound(0, ops)
        .await
        .map_err(|e| format!("LOOKUP of the export root: {e}"))?;
    let Some(ResOp::Getfh(Res4::Ok(root))) = results.last() else {
        return Err(format!("LOOKUP of the export root: {status:?}"));
    };
    let root = root.clone();
    let (file, open) = session
        .open(0, &dir, name.as_bytes(), b"bench-v4-open-owner")
        .await
        .map_err(|e| format!("OPEN {name}: {e}"))?;
    Ok(V4 {
        session,
        slots: RefCell::new((0..slots).rev().collect()),
        root,
        file,
        open,
    })
}

async fn v3_phase(env: &Env<'_>, info: &PhaseInfo, s: &Setup) -> Measured {
    let conns = env.connect(info.conns).await;
    let kind = kind_of(&info.phase);
    let (root, file, size) = (Rc::clone(&s.root3), Rc::clone(&s.file3), s.size);
    let name: Rc<[u8]> = Rc::from(s.name.as_bytes());
    let prefix: Rc<str> = Rc::from(format!("{}.{}", s.name, info.phase));
    gen::run(env.clock, env.timed(info), conns, move |ctx| {
        let (root, file, name) = (Rc::clone(&root), Rc::clone(&file), Rc::clone(&name));
        let prefix = Rc::clone(&prefix);
        async move {
            match kind {
                Kind::Getattr => {
                    ctx.conn.getattr(&root).await?;
                    Ok(Done::calls(1))
                }
                Kind::Lookup => {
                    ctx.conn.lookup(&root, &name).await?;
                    Ok(Done::calls(1))
                }
                Kind::Create => {
                    let new = create_name(&prefix, ctx.ticket);
                    ctx.conn.create(&root, &new).await?;
                    ctx.conn.remove(&root, &new).await?;
                    Ok(Done::calls(2))
                }
                Kind::Read(len) => {
                    let len = io_len(len, size);
                    let at = block(ctx.rand, size, len);
                    ctx.conn.read(&file, at, len).await?;
                    Ok(io_done(1, len))
                }
                Kind::Write(len) => {
                    let len = io_len(len, size);
                    let at = block(ctx.rand, size, len);
                    let data = pattern::fill(at, len as usize);
                    ctx.conn.write(&file, at, data, StableHow::Unstable).await?;
                    let mut calls = 1;
                    if (ctx.worker_seq + 1).is_multiple_of(COMMIT_EVERY_WRITES) {
                        ctx.conn.commit(&file).await?;
                        calls += 1;
                    }
                    Ok(io_done(calls, len))
                }
            }
        }
    })
    .await
}

async fn v4_phase(env: &Env<'_>, info: &PhaseInfo, s: &Setup, v4: &Rc<V4>) -> Measured {
    // The generator's connection is not used: every call goes on the session's.
    let conns = env.connect(info.conns).await;
    let kind = kind_of(&info.phase);
    let size = s.size;
    let name = Bytes::copy_from_slice(s.name.as_bytes());
    let prefix: Rc<str> = Rc::from(format!("{}.{}", s.name, info.phase));
    let v4 = Rc::clone(v4);
    gen::run(env.clock, env.timed(info), conns, move |ctx| {
        let v4 = Rc::clone(&v4);
        let name = match kind {
            Kind::Create => create_name(&prefix, ctx.ticket),
            _ => name.clone(),
        };
        async move {
            let slot = v4
                .slots
                .borrow_mut()
                .pop()
                .ok_or_else(|| OpError::Protocol("more tasks than session slots".into()))?;
            let r = v4_op(&v4, slot, kind, &name, &ctx, size).await;
            v4.slots.borrow_mut().push(slot);
            r
        }
    })
    .await
}

/// One op of a `-v4` phase on `slot` (`name`: the data file's, or the new file's for
/// `create`).
async fn v4_op(
    v4: &V4,
    slot: u32,
    kind: Kind,
    name: &Bytes,
    ctx: &gen::Ctx,
    size: u64,
) -> Result<Done, OpError> {
    match kind {
        Kind::Getattr => {
            let ops = vec![ArgOp::Putfh(v4.root.clone()), getattr()];
            let results = call(v4, slot, ops).await?;
            check_attrs(results.last())?;
            Ok(Done::calls(1))
        }
        Kind::Lookup => {
            let ops = vec![
                ArgOp::Putfh(v4.root.clone()),
                ArgOp::Lookup(Component4(name.clone())),
                ArgOp::Getfh,
                getattr(),
            ];
            let results = call(v4, slot, ops).await?;
            match results.get(2) {
                Some(ResOp::Getfh(Res4::Ok(fh))) if *fh == v4.file => {}
                other => {
                    return Err(OpError::Protocol(format!(
                        "LOOKUP found another file: {other:?}"
                    )))
                }
            }
            check_attrs(results.last())?;
            Ok(Done::calls(1))
        }
        Kind::Create => v4_create(v4, slot, name).await,
        Kind::Read(len) => {
            let len = io_len(len, size);
            let at = block(ctx.rand, size, len);
            let ops = vec![
                ArgOp::Putfh(v4.file.clone()),
                ArgOp::Read(ReadArgs {
                    stateid: v4.open,
                    offset: at,
                    count: len,
                }),
            ];
            let results = call(v4, slot, ops).await?;
            let Some(ResOp::Read(Res4::Ok(r))) = results.last() else {
                return Err(OpError::Protocol("no READ result".into()));
            };
            if r.data.len() != len as usize {
                return Err(OpError::Protocol(format!(
                    "READ of {len} bytes at {at} returned {}",
                    r.data.len()
                )));
            }
            pattern::verify(at, &r.data).map_err(OpError::Verify)?;
            Ok(io_done(1, len))
        }
        Kind::Write(len) => {
            let len = io_len(len, size);
            let at = block(ctx.rand, size, len);
            let ops = vec![
                ArgOp::Putfh(v4.file.clone()),
                ArgOp::Write(WriteArgs {
                    stateid: v4.open,
                    offset: at,
                    stable: StableHow4::Unstable,
                    data: pattern::fill(at, len as usize),
                }),
            ];
            let results = call(v4, slot, ops).await?;
            match results.last() {
                Some(ResOp::Write(Res4::Ok(w))) if w.count == len => {}
                other => {
                    return Err(OpError::Protocol(format!(
                        "WRITE of {len} bytes: {other:?}"
                    )))
                }
            }
            let mut calls = 1;
            if (ctx.worker_seq + 1).is_multiple_of(COMMIT_EVERY_WRITES) {
                let ops = vec![
                    ArgOp::Putfh(v4.file.clone()),
                    ArgOp::Commit(CommitArgs {
                        offset: 0,
                        count: 0,
                    }),
                ];
                call(v4, slot, ops).await?;
                calls += 1;
            }
            Ok(io_done(calls, len))
        }
    }
}

/// A new file as the Linux client makes one with `open(O_CREAT)` and `close`: OPEN
/// (UNCHECKED create, share both) with GETFH and GETATTR, then CLOSE of its stateid;
/// then REMOVE, so the export root stays small. Three round trips, one file.
async fn v4_create(v4: &V4, slot: u32, name: &Bytes) -> Result<Done, OpError> {
    let ops = vec![
        ArgOp::Putfh(v4.root.clone()),
        ArgOp::Open(OpenArgs {
            seqid: 0,
            share_access: share::ACCESS_BOTH,
            share_deny: share::DENY_NONE,
            owner: StateOwner4 {
                clientid: v4.session.clientid,
                owner: Opaque4(Bytes::from_static(CREATE_OWNER)),
            },
            openhow: Openflag4::Create(Createhow4::Unchecked(
                Fattr {
                    mode: Some(0o644),
                    ..Fattr::default()
                }
                .to_fattr4(),
            )),
            claim: OpenClaim4::Null(Component4(name.clone())),
        }),
        ArgOp::Getfh,
        getattr(),
    ];
    let results = call(v4, slot, ops).await?;
    let (fh, open) = match results.as_slice() {
        [_, ResOp::Open(Res4::Ok(o)), ResOp::Getfh(Res4::Ok(fh)), _] => (fh.clone(), o.stateid),
        other => {
            return Err(OpError::Protocol(format!(
                "OPEN (create) found no new file: {other:?}"
            )))
        }
    };
    check_attrs(results.last())?;
    let ops = vec![
        ArgOp::Putfh(fh),
        ArgOp::Close(CloseArgs {
            seqid: 0,
            open_stateid: open,
        }),
    ];
    call(v4, slot, ops).await?;
    let ops = vec![
        ArgOp::Putfh(v4.root.clone()),
        ArgOp::Remove(Component4(name.clone())),
    ];
    call(v4, slot, ops).await?;
    Ok(Done::calls(3))
}

/// The offset of a random `len`-byte block of a `size`-byte file.
fn block(rand: u64, size: u64, len: u32) -> u64 {
    let blocks = (size / u64::from(len)).max(1);
    (rand % blocks) * u64::from(len)
}

fn io_done(calls: u64, len: u32) -> Done {
    Done {
        calls,
        bytes: u64::from(len),
        entries: 0,
    }
}

fn getattr() -> ArgOp {
    ArgOp::Getattr(Bitmap4::from_bits(&GETATTR_BITS))
}

/// The results after SEQUENCE's of a COMPOUND on `slot`, which must all have succeeded.
async fn call(v4: &V4, slot: u32, ops: Vec<ArgOp>) -> Result<Vec<ResOp>, OpError> {
    let sent = ops.len();
    let (status, results) = v4.session.compound(slot, ops).await.map_err(v4_error)?;
    if status != Nfsstat4::Ok || results.len() != sent {
        let op = results.last().map(ResOp::opnum);
        return Err(OpError::Protocol(format!(
            "COMPOUND: {status:?} after {} of {sent} operations (operation {op:?})",
            results.len()
        )));
    }
    Ok(results)
}

fn v4_error(e: ClientError) -> OpError {
    match e {
        ClientError::Nfs4(s) => OpError::Protocol(format!("SEQUENCE: {s:?}")),
        other => other.into(),
    }
}

/// A GETATTR result must carry the type and size at least (every server has them).
fn check_attrs(r: Option<&ResOp>) -> Result<(), OpError> {
    let Some(ResOp::Getattr(Res4::Ok(f))) = r else {
        return Err(OpError::Protocol(format!("no GETATTR result: {r:?}")));
    };
    let attrs = Fattr::from_fattr4(f).map_err(|e| OpError::Protocol(format!("{e:?}")))?;
    if attrs.ftype.is_none() || attrs.size.is_none() {
        return Err(OpError::Protocol("GETATTR without type or size".into()));
    }
    Ok(())
}
