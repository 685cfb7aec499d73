//! Share reservations across two heads of one object export (the real binary,
//! PostgreSQL and S3 from `scripts/object-env.sh`), over NFSv4.1 OPEN and NLM SHARE as
//! clients send them: a deny through head A makes a conflicting OPEN through head B
//! NFS4ERR_SHARE_DENIED and a conflicting SHARE NLM4_DENIED (both ways round, and an
//! open that denies nothing counts with its access); CLOSE, OPEN_DOWNGRADE and UNSHARE
//! let B in at once, and so do FREE_ALL and a client's lease running out; a head killed
//! with SIGKILL frees its reservations after its lease;
//! with the database stopped a deny answers NFS4ERR_DELAY / NLM4_DENIED_NOLOCKS and A's
//! deny still holds once it is back; and what an OPEN and CLOSE cost the database.
//! Fails when the engines are absent unless GRANARY_OBJECT_TESTS=skip.

mod common;

use std::time::{Duration, Instant};

use client::RpcConnection;
use common::object::{self, engine, one_at_a_time};
use common::v4::{name, owner, V4};
use common::{rt, Server};
use nfs4::attr::Fattr;
use nfs4::ops::*;
use nfs4::results::*;
use nfs4::{Nfsstat4, Stateid4};
use nlm::nlm4::{self, FshAccess, FshMode, Stats};

const NLM: u32 = 100_021;

/// Lease of the heads here, the least a config may give.
const LEASE_SECS: u64 = 3;

const R: u32 = share::ACCESS_READ;
const W: u32 = share::ACCESS_WRITE;

/// Two heads of one fresh file system with a short lease, head A with `a_args` too.
fn two_heads_with(tag: &str, a_args: &[&str]) -> Option<(Server, Server)> {
    object::two_heads_with(tag, LEASE_SECS, a_args, &[])
}

/// An NFSv4.1 client of one head.
struct Opener {
    v4: V4,
}

impl Opener {
    async fn new(server: &Server, client: &str) -> Self {
        Self {
            v4: V4::connect(server, client).await,
        }
    }

    /// OPEN of `file` (created if new) by open-owner `oo`: the stateid, or the status.
    async fn open(
        &mut self,
        file: &str,
        oo: &str,
        access: u32,
        deny: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        let (status, r) = self
            .v4
            .run_unchecked(vec![
                ArgOp::Putrootfh,
                ArgOp::Open(OpenArgs {
                    seqid: 0,
                    share_access: access,
                    share_deny: deny,
                    owner: owner(oo),
                    openhow: Openflag4::Create(Createhow4::Unchecked(
                        Fattr {
                            mode: Some(0o666),
                            ..Fattr::default()
                        }
                        .to_fattr4(),
                    )),
                    claim: OpenClaim4::Null(name(file)),
                }),
            ])
            .await;
        match r.get(1) {
            Some(ResOp::Open(Res4::Ok(o))) => Ok(o.stateid),
            _ => Err(status),
        }
    }

    async fn close(&mut self, file: &str, sid: Stateid4) -> Nfsstat4 {
        let ops = vec![
            ArgOp::Putrootfh,
            ArgOp::Lookup(name(file)),
            ArgOp::Close(CloseArgs {
                seqid: 0,
                open_stateid: sid,
            }),
        ];
        self.v4.run_unchecked(ops).await.0
    }

    async fn downgrade(&mut self, file: &str, sid: Stateid4, access: u32, deny: u32) -> Nfsstat4 {
        let ops = vec![
            ArgOp::Putrootfh,
            ArgOp::Lookup(name(file)),
            ArgOp::OpenDowngrade(OpenDowngradeArgs {
                open_stateid: sid,
                seqid: 0,
                share_access: access,
                share_deny: deny,
            }),
        ];
        self.v4.run_unchecked(ops).await.0
    }
}

/// An NLM client host on one head.
struct Sharer {
    conn: RpcConnection,
    host: &'static str,
}

impl Sharer {
    async fn new(server: &Server, host: &'static str) -> Self {
        let conn = RpcConnection::connect(server.addr)
            .await
            .unwrap()
            .with_timeout(Duration::from_secs(30));
        Self { conn, host }
    }

    /// SHARE (`on`) or UNSHARE of `fh`.
    async fn share(&self, fh: &nlm4::Netobj, access: FshAccess, mode: FshMode, on: bool) -> Stats {
        let args = nlm4::ShareArgs {
            cookie: nlm4::Netobj::new(&b"s"[..]),
            share: nlm4::Share {
                caller_name: nlm4::CallerName::new(self.host.as_bytes().to_vec()),
                fh: fh.clone(),
                oh: nlm4::Netobj::new(format!("oh@{}", self.host).into_bytes()),
                mode,
                access,
            },
            reclaim: false,
        };
        let proc = if on {
            nlm4::Proc::Share
        } else {
            nlm4::Proc::Unshare
        };
        let r: nlm4::ShareRes = self
            .conn
            .call_decode(NLM, 4, proc as u32, &args)
            .await
            .expect("NLM SHARE");
        r.stat
    }
}

/// The NFSv3 handle of `file` in the root of `server`'s export, for NLM calls.
async fn nlm_fh(server: &Server, file: &str) -> nlm4::Netobj {
    let nfs = common::nfs::connect(server).await;
    let root = nfs.mount("/").await.expect("MNT /");
    let (fh, _) = nfs.lookup_ok(&root, file).await.expect("LOOKUP");
    nlm4::Netobj(fh.0)
}

#[test]
fn deny_modes_hold_across_heads_over_nfsv4_and_nlm() {
    let _serial = one_at_a_time();
    let Some((a, b)) = two_heads_with("xshare-basic", &[]) else {
        return;
    };
    rt().block_on(async {
        let (mut va, mut vb) = (
            Opener::new(&a, "client-a").await,
            Opener::new(&b, "client-b").await,
        );
        let (na, nb) = (
            Sharer::new(&a, "alpha").await,
            Sharer::new(&b, "beta").await,
        );

        // A opens f for writing, then (an upgrade) denies writing: B may read f, not
        // write it.
        va.open("f", "oo-a", R | W, share::DENY_NONE)
            .await
            .expect("OPEN on A");
        let fa = va
            .open("f", "oo-a", R | W, share::DENY_WRITE)
            .await
            .expect("the upgrade");
        assert_eq!(
            vb.open("f", "oo-b", W, share::DENY_NONE).await,
            Err(Nfsstat4::ShareDenied)
        );
        assert_eq!(
            vb.open("f", "oo-b2", R | W, share::DENY_NONE).await,
            Err(Nfsstat4::ShareDenied)
        );
        let fb = vb
            .open("f", "oo-b3", R, share::DENY_NONE)
            .await
            .expect("reading is not denied");
        // B may not deny the writing A does, nor (through NLM) write.
        assert_eq!(
            vb.open("f", "oo-b4", R, share::DENY_WRITE).await,
            Err(Nfsstat4::ShareDenied)
        );
        let f3 = nlm_fh(&b, "f").await;
        assert_eq!(
            nb.share(&f3, FshAccess::Write, FshMode::DenyNone, true)
                .await,
            Stats::Denied
        );
        assert_eq!(
            nb.share(&f3, FshAccess::Read, FshMode::DenyNone, true)
                .await,
            Stats::Granted
        );
        // A's OPEN_DOWNGRADE to reading, denying nothing: B writes at once.
        assert_eq!(
            va.downgrade("f", fa, R | W, share::DENY_NONE).await,
            Nfsstat4::Ok
        );
        let fb2 = vb
            .open("f", "oo-b5", W, share::DENY_NONE)
            .await
            .expect("A no longer denies writing");
        assert_eq!(vb.close("f", fb2).await, Nfsstat4::Ok);
        assert_eq!(vb.close("f", fb).await, Nfsstat4::Ok);
        assert_eq!(
            nb.share(&f3, FshAccess::Read, FshMode::DenyNone, false)
                .await,
            Stats::Granted
        );

        // An open that denies nothing still counts with its access: B reads g (nothing
        // denied anywhere), so A may not deny reading g, over NFSv4 or NLM.
        let gb = vb
            .open("g", "oo-b", R, share::DENY_NONE)
            .await
            .expect("OPEN g on B");
        let g3 = nlm_fh(&a, "g").await;
        assert_eq!(
            va.open("g", "oo-a2", R, share::DENY_READ).await,
            Err(Nfsstat4::ShareDenied)
        );
        assert_eq!(
            na.share(&g3, FshAccess::Read, FshMode::DenyRead, true)
                .await,
            Stats::Denied
        );
        assert_eq!(
            na.share(&g3, FshAccess::Read, FshMode::DenyWrite, true)
                .await,
            Stats::Granted,
            "B does not write g"
        );
        // A's SHARE denying writing keeps B's OPEN for writing off until UNSHARE.
        assert_eq!(
            vb.open("g", "oo-b6", W, share::DENY_NONE).await,
            Err(Nfsstat4::ShareDenied)
        );
        assert_eq!(
            na.share(&g3, FshAccess::Read, FshMode::DenyWrite, false)
                .await,
            Stats::Granted
        );
        vb.open("g", "oo-b6", W, share::DENY_NONE)
            .await
            .expect("A unshared");
        // B's CLOSE of its read lets A deny reading... not yet: B's write open is there.
        assert_eq!(vb.close("g", gb).await, Nfsstat4::Ok);
        assert_eq!(
            va.open("g", "oo-a3", R, share::DENY_WRITE).await,
            Err(Nfsstat4::ShareDenied)
        );
        va.open("g", "oo-a3", R, share::DENY_READ)
            .await
            .expect("nobody reads g now");
        assert_eq!(
            vb.open("g", "oo-b7", R, share::DENY_NONE).await,
            Err(Nfsstat4::ShareDenied)
        );
    });
}

/// Opens `file` on `v` as `oo` for `access` until it is granted (another head's
/// release is recorded in the background): how long it took, or the status after `max`.
async fn open_within(
    v: &mut Opener,
    file: &str,
    oo: &str,
    access: u32,
    max: Duration,
) -> Result<Duration, Nfsstat4> {
    let at = Instant::now();
    loop {
        match v.open(file, oo, access, share::DENY_NONE).await {
            Ok(_) => return Ok(at.elapsed()),
            Err(Nfsstat4::ShareDenied) if at.elapsed() < max => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The releases no CLOSE or UNSHARE makes reach the other head too: NLM FREE_ALL of a
/// host's shares, and an NFSv4 client whose lease ran out (head A's `--lease-secs 10`).
#[test]
fn free_all_and_a_lease_expiry_release_across_heads() {
    let _serial = one_at_a_time();
    let Some((a, b)) = two_heads_with("xshare-release", &["--lease-secs", "10"]) else {
        return;
    };
    rt().block_on(async {
        let mut va = Opener::new(&a, "client-a").await;
        let mut vb = Opener::new(&b, "client-b").await;
        va.open("f", "oo-a", R | W, share::DENY_WRITE)
            .await
            .expect("OPEN f on A");
        let g = va
            .open("g", "oo-a", R, share::DENY_NONE)
            .await
            .expect("OPEN g on A");
        assert_eq!(va.close("g", g).await, Nfsstat4::Ok);
        let g3 = nlm_fh(&a, "g").await;
        let na = Sharer::new(&a, "alpha").await;
        assert_eq!(
            na.share(&g3, FshAccess::Read, FshMode::DenyWrite, true)
                .await,
            Stats::Granted
        );
        assert_eq!(
            vb.open("g", "oo-b", W, share::DENY_NONE).await,
            Err(Nfsstat4::ShareDenied)
        );
        assert_eq!(
            vb.open("f", "oo-b", W, share::DENY_NONE).await,
            Err(Nfsstat4::ShareDenied)
        );

        // Past the heartbeats that record A's own new watches (which would write what A
        // holds then, whoever told it).
        tokio::time::sleep(Duration::from_millis(2500)).await;
        // FREE_ALL of alpha (from loopback) frees its share on A, and B writes g soon.
        let notify = nlm4::Notify {
            name: nlm4::HostName::new(&b"alpha"[..]),
            state: 3,
        };
        na.conn
            .call(NLM, 4, nlm4::Proc::FreeAll as u32, &notify)
            .await
            .expect("FREE_ALL");
        let took = open_within(&mut vb, "g", "oo-b", W, Duration::from_secs(3)).await;
        eprintln!("FREE_ALL on A reached B in {took:?}");
        assert!(took.is_ok(), "alpha's share never went: {took:?}");

        // Client A stops renewing: its lease runs out, its open goes, and B writes f.
        let took = open_within(&mut vb, "f", "oo-b2", W, Duration::from_secs(30)).await;
        eprintln!("client A's expired open went for B after {took:?}");
        assert!(
            took.is_ok_and(|t| t >= Duration::from_secs(5)),
            "client A's open held for its lease, then went: {took:?}"
        );
    });
}

#[test]
fn a_killed_head_frees_its_share_reservations_after_its_lease() {
    let _serial = one_at_a_time();
    let Some((a, b)) = two_heads_with("xshare-kill", &[]) else {
        return;
    };
    rt().block_on(async {
        let mut va = Opener::new(&a, "client-a").await;
        let mut vb = Opener::new(&b, "client-b").await;
        va.open("f", "oo-a", R | W, share::DENY_BOTH)
            .await
            .expect("OPEN on A");
        let f3 = nlm_fh(&b, "f").await;
        let nb = Sharer::new(&b, "beta").await;
        // Alive, A keeps its lease past the lease's length.
        tokio::time::sleep(Duration::from_secs(LEASE_SECS + 1)).await;
        assert_eq!(
            vb.open("f", "oo-b", R, share::DENY_NONE).await,
            Err(Nfsstat4::ShareDenied)
        );
        let killed = std::process::Command::new("kill")
            .args(["-9", &a.pid().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let at = Instant::now();
        loop {
            match vb.open("f", "oo-b", R, share::DENY_NONE).await {
                Ok(_) => break,
                Err(Nfsstat4::ShareDenied)
                    if at.elapsed() < Duration::from_secs(LEASE_SECS + 5) =>
                {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                other => panic!(
                    "head A's reservation never went: {other:?} after {:?}",
                    at.elapsed()
                ),
            }
        }
        eprintln!(
            "head A's reservation went {:?} after its kill",
            at.elapsed()
        );
        assert_eq!(
            nb.share(&f3, FshAccess::ReadWrite, FshMode::DenyNone, true)
                .await,
            Stats::Granted
        );
    });
    drop(a);
}

#[test]
fn with_the_database_stopped_a_deny_is_delayed_and_held_denies_survive_it() {
    let _serial = one_at_a_time();
    let Some((a, b)) = two_heads_with("xshare-dbdown", &[]) else {
        return;
    };
    rt().block_on(async {
        let mut va = Opener::new(&a, "client-a").await;
        let mut vb = Opener::new(&b, "client-b").await;
        va.open("f", "oo-a", R, share::DENY_WRITE)
            .await
            .expect("OPEN on A");
        vb.open("g", "oo-b", R, share::DENY_NONE)
            .await
            .expect("OPEN g on B");
        let g3 = nlm_fh(&b, "g").await;
        let nb = Sharer::new(&b, "beta").await;
        tokio::task::spawn_blocking(|| engine("pg-stop"))
            .await
            .unwrap();
        let v4 = vb.open("g", "oo-b2", R, share::DENY_WRITE).await;
        let nlm = nb
            .share(&g3, FshAccess::Read, FshMode::DenyWrite, true)
            .await;
        tokio::task::spawn_blocking(|| engine("pg-start"))
            .await
            .unwrap();
        assert_eq!(
            v4,
            Err(Nfsstat4::Delay),
            "NFSv4 OPEN with a deny, the database down"
        );
        assert_eq!(
            nlm,
            Stats::DeniedNolocks,
            "NLM SHARE with the database down"
        );
        // Back: A's deny still keeps B's writing off.
        let back = Instant::now();
        let r = loop {
            let r = vb.open("f", "oo-b3", W, share::DENY_NONE).await;
            if r != Err(Nfsstat4::Delay) || back.elapsed() > Duration::from_secs(60) {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        assert_eq!(
            r,
            Err(Nfsstat4::ShareDenied),
            "A's deny held through the outage"
        );
        vb.open("g", "oo-b2", R, share::DENY_WRITE)
            .await
            .expect("a deny once it is back");
    });
}

/// Head A's database transactions and round trips so far (`granary_object_db_*`).
fn counters(port: u16) -> (f64, f64) {
    let text = common::metrics::scrape(port);
    let v = |n: &str| common::metrics::sample(&text, &format!("granary_object_{n}_total "));
    (v("db_transactions"), v("db_round_trips"))
}

/// `pairs` OPEN+CLOSE pairs of `f` denying `deny`: transactions per OPEN, per CLOSE, and
/// round trips per pair, and how long they took.
async fn open_close_cost(
    va: &mut Opener,
    port: u16,
    pairs: u32,
    deny: u32,
) -> (f64, f64, f64, Duration) {
    let (mut open_tx, mut close_tx, mut trips) = (0.0, 0.0, 0.0);
    let started = Instant::now();
    for _ in 0..pairs {
        let (t0, r0) = counters(port);
        let sid = va.open("f", "oo", R | W, deny).await.expect("OPEN");
        let (t1, _) = counters(port);
        assert_eq!(va.close("f", sid).await, Nfsstat4::Ok);
        let (t2, r2) = counters(port);
        open_tx += t1 - t0;
        close_tx += t2 - t1;
        trips += r2 - r0;
    }
    let n = f64::from(pairs);
    (open_tx / n, close_tx / n, trips / n, started.elapsed())
}

/// What an OPEN and a CLOSE cost the database on an object export, from head A's
/// metrics over 20 pairs each (the head's first OPEN, which registers it, left out): an
/// OPEN that denies nothing on a file nobody denies costs what it did before share
/// reservations held across heads (its CREATE of the existing name, UNCHECKED4), its
/// CLOSE nothing; an OPEN with a deny costs one transaction more (the check and its
/// row), and its CLOSE one (the row).
#[test]
fn an_open_that_denies_nothing_costs_no_more_transactions() {
    let _serial = one_at_a_time();
    let port = common::metrics::free_port();
    let metrics = format!("127.0.0.1:{port}");
    let Some((a, _b)) = two_heads_with("xshare-cost", &["--metrics", &metrics]) else {
        return;
    };
    rt().block_on(async {
        let mut va = Opener::new(&a, "client-a").await;
        let first = va.open("f", "oo", R, share::DENY_NONE).await.expect("OPEN");
        assert_eq!(va.close("f", first).await, Nfsstat4::Ok);
        let pairs = 20;
        let (open, close, trips, took) =
            open_close_cost(&mut va, port, pairs, share::DENY_NONE).await;
        let (dopen, dclose, dtrips, _) =
            open_close_cost(&mut va, port, pairs, share::DENY_WRITE).await;
        eprintln!(
            "DENY_NONE: {open:.2} transactions per OPEN, {close:.2} per CLOSE, {trips:.2} round \
             trips per pair ({:.1} ms a pair); DENY_WRITE: {dopen:.2}, {dclose:.2}, {dtrips:.2}",
            took.as_secs_f64() * 1000.0 / f64::from(pairs)
        );
        // What they cost before, and the heartbeats of the time it took (one a second).
        let beats = (took.as_secs_f64().ceil() + 1.0) / f64::from(pairs);
        assert!(
            open <= OPEN_BEFORE + beats,
            "{open} transactions per DENY_NONE OPEN"
        );
        assert!(
            close <= CLOSE_BEFORE + beats,
            "{close} transactions per DENY_NONE CLOSE"
        );
        assert!(
            dopen >= OPEN_BEFORE + 1.0 && dclose >= CLOSE_BEFORE + 1.0,
            "a deny asks the other heads"
        );
    });
}

/// Transactions of one OPEN and one CLOSE of [`Opener`] on head A before share
/// reservations held across heads (the same loop with `Backend::head_shares` `None`).
const OPEN_BEFORE: f64 = 3.0;
const CLOSE_BEFORE: f64 = 2.0;
