//! The `locks` workload: byte-range lock and unlock pairs per second over NFSv4.1 and NLM
//! v4, through granary's own client (`client::v4`, `client::nlm`). Phases (one
//! connection; `-dN` is N owners, each one task with one call in flight):
//!
//! - `v4-new-owner-d1`: LOCK by a new lock-owner (open_to_lock_owner4, from the open
//!   stateid), LOCKU, FREE_STATEID: one op = 3 COMPOUNDs.
//! - `v4-pair-d1`: LOCK by an existing lock-owner (its lock stateid), LOCKU: 2 COMPOUNDs.
//! - `v4-same-d2`, `v4-disjoint-d2`: two lock-owners of one client (two session slots),
//!   on the same 100 bytes or on 100 bytes each; a refused LOCK (NFS4ERR_DENIED) is asked
//!   again at once until granted: one op = one granted pair, every attempt a call.
//! - `nlm-pair-d1`, `nlm-same-d2`, `nlm-disjoint-d2`: the same with NLM LOCK (block
//!   false, exclusive) and UNLOCK (two `svid`s of one host), on the NFS port or the
//!   target URL's `nlmport` (nfs-ganesha's NLM has a port of its own, and the peer script
//!   runs rpc.statd for it); a refusal is `NLM4_DENIED`.
//!
//! Every pair checks its answers: a LOCK that is refused when nothing else can hold the
//! range (`-d1`, `disjoint`), or an UNLOCK that fails, is an error. The limit responder
//! answers NFSv3 calls only, so this workload does not run on it. A server without NLM
//! where the bench looks for it fails the NLM phases with that reason; one without
//! NFSv4.1 fails the v4 phases.

use std::cell::RefCell;
use std::rc::Rc;

use client::nlm::nlm_ok;
use client::v4::{existing_lock_owner, new_lock_owner};
use client::{ClientError, Nfs4Session, NlmClient, RpcConnection};
use nfs3::nfs::NfsFh3;
use nfs4::ops::NfsLockType4;
use nfs4::types::NfsFh4;
use nfs4::Stateid4;
use nlm::nlm4::Stats;
use rpc::msg::{AcceptStat, ReplyStatus};

use super::gen::{self, Done};
use super::limits::{CONNECT_TIMEOUT, LOCK_BYTES, MAX_LOCK_ATTEMPTS};
use super::sample::{Metric, PhaseInfo, Sample};
use super::wire::OpError;
use super::workloads::Env;

/// The phases: (name, protocol is NLM, owners, owners share one range).
const PHASES: [(&str, bool, usize, bool); 7] = [
    ("v4-new-owner-d1", false, 1, false),
    ("v4-pair-d1", false, 1, false),
    ("v4-same-d2", false, 2, true),
    ("v4-disjoint-d2", false, 2, false),
    ("nlm-pair-d1", true, 1, false),
    ("nlm-same-d2", true, 2, true),
    ("nlm-disjoint-d2", true, 2, false),
];

#[must_use]
pub fn phases() -> Vec<PhaseInfo> {
    PHASES
        .iter()
        .map(|&(name, _, owners, _)| PhaseInfo {
            workload: "locks",
            phase: name.to_owned(),
            metric: Metric::Ops,
            conns: 1,
            depth: owners,
        })
        .collect()
}

/// One lock owner: its slot (v4) or svid (NLM), its range, and its lock stateid once
/// it has one.
struct Owner {
    index: u32,
    offset: u64,
    stateid: Option<Stateid4>,
}

/// The owners of a phase, lent to one op at a time (each task takes one for its op).
type Pool = Rc<RefCell<Vec<Owner>>>;

fn pool(owners: usize, same: bool) -> Pool {
    let all = (0..owners)
        .map(|i| Owner {
            index: u32::try_from(i).unwrap_or(0),
            offset: if same { 0 } else { LOCK_BYTES * i as u64 },
            stateid: None,
        })
        .rev()
        .collect();
    Rc::new(RefCell::new(all))
}

fn take(p: &Pool) -> Result<Owner, OpError> {
    p.borrow_mut()
        .pop()
        .ok_or_else(|| OpError::Protocol("more tasks than lock owners".into()))
}

fn not_served(e: &ClientError) -> bool {
    matches!(
        e.rpc_status(),
        Some(ReplyStatus::Accepted(
            AcceptStat::ProgUnavail | AcceptStat::ProgMismatch { .. }
        ))
    )
}

pub async fn run(env: &Env<'_>, phases: &[PhaseInfo]) -> Result<Vec<Sample>, String> {
    if env.limit {
        return Err("the limit responder answers NFSv3 calls only".into());
    }
    let name = format!(
        "gb-locks-{}-r{}-{}",
        env.target,
        env.repeat,
        std::process::id()
    );
    let mut out = Vec::new();
    let (v4, nlm): (Vec<&PhaseInfo>, Vec<&PhaseInfo>) =
        phases.iter().partition(|p| p.phase.starts_with("v4"));
    if !v4.is_empty() {
        match v4_file(env, &name).await {
            Ok((session, fh, open)) => {
                let session = Rc::new(session);
                let fh = Rc::new(fh);
                for info in v4 {
                    out.push(v4_phase(env, info, &session, &fh, open).await);
                }
            }
            Err(why) => out.extend(v4.iter().map(|info| failed(env, info, &why))),
        }
    }
    if !nlm.is_empty() {
        match nlm_file(env, &name).await {
            Ok((client, fh)) => {
                for info in nlm {
                    out.push(nlm_phase(env, info, &client, &fh).await);
                }
            }
            Err(why) => out.extend(nlm.iter().map(|info| failed(env, info, &why))),
        }
    }
    Ok(out)
}

fn failed(env: &Env<'_>, info: &PhaseInfo, why: &str) -> Sample {
    Sample::failed(info, env.target, env.backend, env.repeat, why)
}

fn spec(info: &PhaseInfo) -> (usize, bool) {
    PHASES
        .iter()
        .find(|p| p.0 == info.phase)
        .map_or((1, false), |p| (p.2, p.3))
}

async fn connect(env: &Env<'_>) -> Result<RpcConnection, String> {
    connect_to(env, env.addrs.nfs).await
}

/// A connection to `addr` as AUTH_SYS root.
async fn connect_to(env: &Env<'_>, addr: std::net::SocketAddr) -> Result<RpcConnection, String> {
    let c = tokio::time::timeout(CONNECT_TIMEOUT, RpcConnection::connect(addr)).await;
    match c {
        Ok(Ok(c)) => Ok(c
            .with_auth(&client::auth_sys(0, 0, &[]))
            .with_timeout(env.settings.op_timeout)),
        Ok(Err(e)) => Err(format!("connect {addr}: {e}")),
        Err(_) => Err(format!("connect {addr}: no answer")),
    }
}

/// A session with a slot per owner of the widest phase, and the file, opened (created)
/// at the export's root.
async fn v4_file(env: &Env<'_>, name: &str) -> Result<(Nfs4Session, NfsFh4, Stateid4), String> {
    let conn = connect(env).await?;
    // One client per target and repeat, as the v4 workload's: a second repeat that came
    // back as the same client would find its RECLAIM_COMPLETE already done.
    let owner = format!(
        "granary-bench-{}-{}-r{}",
        std::process::id(),
        env.target,
        env.repeat
    );
    let slots = PHASES.iter().map(|p| p.2).max().unwrap_or(1) as u32;
    let session = Nfs4Session::connect(conn, owner.as_bytes(), slots)
        .await
        .map_err(|e| {
            if not_served(&e) {
                format!("NFSv4.1 is not served: {e}")
            } else {
                format!("NFSv4.1 session: {e}")
            }
        })?;
    let dir: Vec<&[u8]> = env
        .addrs
        .export_path
        .split('/')
        .filter(|c| !c.is_empty())
        .map(str::as_bytes)
        .collect();
    let (fh, open) = session
        .open(0, &dir, name.as_bytes(), b"bench-open-owner")
        .await
        .map_err(|e| format!("OPEN {name}: {e}"))?;
    Ok((session, fh, open))
}

async fn v4_phase(
    env: &Env<'_>,
    info: &PhaseInfo,
    session: &Rc<Nfs4Session>,
    fh: &Rc<NfsFh4>,
    open: Stateid4,
) -> Sample {
    let (owners, same) = spec(info);
    let new_owner = info.phase.starts_with("v4-new-owner");
    let pool = pool(owners, same);
    let conns = env.connect(1).await;
    let (session, fh) = (Rc::clone(session), Rc::clone(fh));
    let phase = info.phase.clone();
    let clientid = session.clientid;
    let m = gen::run(env.clock, env.timed(info), conns, move |ctx| {
        let (session, fh, pool) = (Rc::clone(&session), Rc::clone(&fh), Rc::clone(&pool));
        let phase = phase.clone();
        async move {
            let mut o = take(&pool)?;
            let lock_owner = if new_owner {
                format!("lo-new-{}", ctx.ticket)
            } else {
                format!("lo-{phase}-{}", o.index)
            };
            let pair = Pair {
                open,
                clientid,
                new_owner,
                same,
            };
            let r = v4_pair(&session, &fh, &mut o, lock_owner.as_bytes(), pair).await;
            if r.is_err() {
                // The lock-owner's state is unknown after a failure: start a new one.
                o.stateid = None;
            }
            pool.borrow_mut().push(o);
            r.map_err(|e| OpError::Protocol(format!("{phase}: {e}")))
        }
    })
    .await;
    env.sample(info, &m)
}

/// What every v4 pair of a phase shares.
#[derive(Clone, Copy)]
struct Pair {
    open: Stateid4,
    clientid: u64,
    /// A new lock-owner for each pair (freed after it).
    new_owner: bool,
    /// Owners share the range: a refusal is asked again.
    same: bool,
}

/// One granted LOCK and its LOCKU (and FREE_STATEID for a new owner each time).
async fn v4_pair(
    s: &Nfs4Session,
    fh: &NfsFh4,
    o: &mut Owner,
    lock_owner: &[u8],
    p: Pair,
) -> Result<Done, ClientError> {
    let Pair {
        open,
        clientid,
        new_owner,
        same,
    } = p;
    let slot = o.index;
    let mut calls = 0;
    let sid = loop {
        let locker = match o.stateid {
            Some(sid) if !new_owner => existing_lock_owner(sid),
            _ => new_lock_owner(clientid, open, lock_owner),
        };
        calls += 1;
        let r = s
            .lock(slot, fh, NfsLockType4::Write, o.offset, LOCK_BYTES, locker)
            .await?;
        match r {
            Ok(sid) => break sid,
            Err(d) if same && calls < MAX_LOCK_ATTEMPTS => {
                tracing::trace!(?d, "denied, asking again");
            }
            Err(d) => {
                return Err(ClientError::Protocol(format!(
                    "LOCK refused after {calls} attempts, in the way: {d:?}"
                )))
            }
        }
    };
    let after = s.locku(slot, fh, sid, o.offset, LOCK_BYTES).await?;
    calls += 1;
    if new_owner {
        s.free_stateid(slot, after).await?;
        calls += 1;
    } else {
        o.stateid = Some(after);
    }
    Ok(Done::calls(calls))
}

/// NLM (on the NFS port, or on the port of its own the target's URL gives as `nlmport`:
/// nfs-ganesha's), and the file created by NFSv3 CREATE at the export's root.
async fn nlm_file(env: &Env<'_>, name: &str) -> Result<(Rc<NlmClient>, Rc<NfsFh3>), String> {
    let root = env.root().await.map_err(|e| e.to_string())?;
    let conns = env.connect(1).await;
    let Some(Ok(conn)) = conns.into_iter().next() else {
        return Err("no connection for the NLM file's CREATE".into());
    };
    let fh = conn
        .create(&root, format!("{name}-nlm").as_bytes())
        .await
        .map_err(|e| format!("CREATE {name}-nlm: {e}"))?;
    let host = format!("granary-bench-{}", std::process::id());
    let nlm = env.addrs.nlm.unwrap_or(env.addrs.nfs);
    let client = NlmClient::new(connect_to(env, nlm).await?, &host);
    // One probe: a server without NLM on this port says so once, not 1,000 times.
    let probe = client.alock(&fh, 1, b"probe", 0, LOCK_BYTES);
    match client.lock(probe.clone(), true, false).await {
        Ok(Stats::Granted) => {}
        Ok(other) => return Err(format!("NLM LOCK of a free range: {other:?}")),
        Err(e) if not_served(&e) => {
            return Err(format!(
                "NLM v4 is not served at {nlm} ({e}); a server whose NLM has a port of \
                 its own gives it as nlmport= in its URL"
            ))
        }
        Err(e) => return Err(format!("NLM LOCK: {e}")),
    }
    nlm_ok(client.unlock(probe).await.map_err(|e| e.to_string())?)
        .map_err(|e| format!("NLM UNLOCK: {e}"))?;
    Ok((Rc::new(client), Rc::new(fh)))
}

async fn nlm_phase(
    env: &Env<'_>,
    info: &PhaseInfo,
    client: &Rc<NlmClient>,
    fh: &Rc<NfsFh3>,
) -> Sample {
    let (owners, same) = spec(info);
    let pool = pool(owners, same);
    let conns = env.connect(1).await;
    let (client, fh) = (Rc::clone(client), Rc::clone(fh));
    let phase = info.phase.clone();
    let m = gen::run(env.clock, env.timed(info), conns, move |_ctx| {
        let (client, fh, pool) = (Rc::clone(&client), Rc::clone(&fh), Rc::clone(&pool));
        let phase = phase.clone();
        async move {
            let o = take(&pool)?;
            let r = nlm_pair(&client, &fh, &o, same).await;
            pool.borrow_mut().push(o);
            r.map_err(|e| OpError::Protocol(format!("{phase}: {e}")))
        }
    })
    .await;
    env.sample(info, &m)
}

async fn nlm_pair(c: &NlmClient, fh: &NfsFh3, o: &Owner, same: bool) -> Result<Done, ClientError> {
    let svid = i32::try_from(o.index + 1).unwrap_or(1);
    let alock = c.alock(fh, svid, b"bench", o.offset, LOCK_BYTES);
    let mut calls = 0;
    loop {
        calls += 1;
        match c.lock(alock.clone(), true, false).await? {
            Stats::Granted => break,
            Stats::Denied if same && calls < MAX_LOCK_ATTEMPTS => {}
            other => {
                return Err(ClientError::Protocol(format!(
                    "NLM LOCK: {other:?} after {calls} attempts"
                )))
            }
        }
    }
    nlm_ok(c.unlock(alock).await?)?;
    Ok(Done::calls(calls + 1))
}
