//! NLM v4 and NSM v1 over the wire against the real binary: TEST/LOCK/UNLOCK/CANCEL, a
//! blocked lock granted by a GRANTED call to a client host this test plays (its own
//! portmapper and NLM on one port, named with `--callback-portmap-port`), the `_MSG`
//! variants answered by `_RES` calls, SM_NOTIFY freeing a rebooted host's locks, and a
//! restart that sends SM_NOTIFY and runs a grace period where only reclaims are granted.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use client::RpcConnection;
use common::nfs::connect;
use common::nlm_host::{Host, NLM, NSM};
use common::object::{engine, head_config, scratch};
use common::{HostDirs, Server};
use nlm::nlm4::*;
use nlm::nsm::{self, SmName, StatChge};
use xdr::{Decode, Encode};

struct Nlm {
    conn: RpcConnection,
}

impl Nlm {
    async fn connect(addr: SocketAddr) -> Self {
        let conn = RpcConnection::connect(addr)
            .await
            .unwrap()
            .with_timeout(Duration::from_secs(10));
        Self { conn }
    }

    async fn call<R: Decode>(&self, program: u32, procedure: Proc, args: &impl Encode) -> R {
        let version = if program == NLM { 4 } else { 1 };
        self.conn
            .call_decode(program, version, procedure as u32, args)
            .await
            .unwrap()
    }

    async fn lock(&self, a: &LockArgs) -> Stats {
        let r: Res = self.call(NLM, Proc::Lock, a).await;
        assert_eq!(r.cookie, a.cookie);
        r.stat
    }

    async fn test(&self, l: &Lock, exclusive: bool) -> TestReply {
        let a = TestArgs {
            cookie: Netobj::new(&b"t"[..]),
            exclusive,
            alock: l.clone(),
        };
        let r: TestRes = self.call(NLM, Proc::Test, &a).await;
        r.stat
    }

    async fn unlock(&self, l: &Lock) -> Stats {
        let a = UnlockArgs {
            cookie: Netobj::new(&b"u"[..]),
            alock: l.clone(),
        };
        let r: Res = self.call(NLM, Proc::Unlock, &a).await;
        r.stat
    }
}

fn alock(host: &str, fh: &Netobj, svid: i32, offset: u64, len: u64) -> Lock {
    Lock {
        caller_name: CallerName::new(host.as_bytes().to_vec()),
        fh: fh.clone(),
        oh: Netobj::new(format!("{svid}@{host}").into_bytes()),
        svid,
        l_offset: offset,
        l_len: len,
    }
}

fn lock_args(l: &Lock, exclusive: bool, block: bool) -> LockArgs {
    LockArgs {
        cookie: Netobj::new(&b"c"[..]),
        block,
        exclusive,
        alock: l.clone(),
        reclaim: false,
        state: 1,
    }
}

/// A new file `name` in the first export, as an NLM handle.
async fn file(server: &Server, name: &str) -> Netobj {
    let nfs = connect(server).await;
    let root = nfs.mount("/").await.expect("MNT /");
    let fh = nfs.create_file(&root, name, 0o644).await.expect("CREATE");
    Netobj(fh.0)
}

#[tokio::test]
async fn lock_test_unlock_and_a_blocked_lock_granted_by_callback() {
    let mut host = Host::start().await;
    let port = host.port.to_string();
    let server = Server::start(&["--callback-portmap-port", &port]);
    let fh = file(&server, "f").await;
    let c = Nlm::connect(server.addr).await;
    let (a, b) = (alock("alpha", &fh, 1, 0, 0), alock("beta", &fh, 2, 100, 50));
    let _: Void = c.call(NLM, Proc::Null, &Void).await;
    assert_eq!(c.lock(&lock_args(&a, true, false)).await, Stats::Granted);
    let holder = Holder {
        exclusive: true,
        svid: 1,
        oh: a.oh.clone(),
        l_offset: 0,
        l_len: 0,
    };
    assert_eq!(c.test(&b, false).await, TestReply::Denied(holder));
    assert_eq!(c.lock(&lock_args(&b, true, false)).await, Stats::Denied);
    assert_eq!(c.lock(&lock_args(&b, true, true)).await, Stats::Blocked);
    host.quiet(Duration::from_millis(300)).await;
    assert_eq!(c.unlock(&a).await, Stats::Granted);
    let (program, procedure, args) = host.next().await;
    assert_eq!((program, procedure), (NLM, Proc::Granted as u32));
    let granted = TestArgs::from_xdr(args).unwrap();
    assert_eq!((granted.exclusive, &granted.alock), (true, &b));
    // beta took it (the host answered GRANTED): alpha's lock over it is denied.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(c.lock(&lock_args(&a, true, false)).await, Stats::Denied);
    // A blocked request that is cancelled is never granted.
    assert_eq!(c.lock(&lock_args(&a, true, true)).await, Stats::Blocked);
    let cancel = CancArgs {
        cookie: Netobj::new(&b"x"[..]),
        block: true,
        exclusive: true,
        alock: a.clone(),
    };
    let r: Res = c.call(NLM, Proc::Cancel, &cancel).await;
    assert_eq!(r.stat, Stats::Granted);
    assert_eq!(c.unlock(&b).await, Stats::Granted);
    host.quiet(Duration::from_millis(500)).await;
    assert_eq!(c.test(&a, true).await, TestReply::Other(Stats::Granted));
}

#[tokio::test]
async fn a_host_that_refuses_a_grant_gives_the_lock_back() {
    let mut host = Host::start().await;
    *host.granted_answer.lock().unwrap() = Stats::Denied;
    let port = host.port.to_string();
    let server = Server::start(&["--callback-portmap-port", &port]);
    let fh = file(&server, "f").await;
    let c = Nlm::connect(server.addr).await;
    let (a, b) = (alock("alpha", &fh, 1, 0, 0), alock("beta", &fh, 2, 0, 0));
    assert_eq!(c.lock(&lock_args(&a, true, false)).await, Stats::Granted);
    assert_eq!(c.lock(&lock_args(&b, true, true)).await, Stats::Blocked);
    assert_eq!(c.unlock(&a).await, Stats::Granted);
    let (_, procedure, _) = host.next().await;
    assert_eq!(procedure, Proc::Granted as u32);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while c.test(&a, true).await != TestReply::Other(Stats::Granted) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "lock never given back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client that never answers GRANTED costs the server three 5 s attempts, then the
/// lock goes back; meanwhile every other call is answered at once.
#[tokio::test]
async fn a_host_that_never_answers_a_grant_costs_a_bounded_time() {
    let mut host = Host::start_with(true).await;
    let port = host.port.to_string();
    let server = Server::start(&["--callback-portmap-port", &port]);
    let fh = file(&server, "f").await;
    let c = Nlm::connect(server.addr).await;
    let (a, b) = (alock("alpha", &fh, 1, 0, 0), alock("beta", &fh, 2, 0, 0));
    assert_eq!(c.lock(&lock_args(&a, true, false)).await, Stats::Granted);
    assert_eq!(c.lock(&lock_args(&b, true, true)).await, Stats::Blocked);
    assert_eq!(c.unlock(&a).await, Stats::Granted);
    let started = tokio::time::Instant::now();
    let mut attempts = 0;
    while attempts < 3 {
        let (_, procedure, _) = host.next().await;
        assert_eq!(procedure, Proc::Granted as u32);
        attempts += 1;
        // Not blocked meanwhile: another file locks and unlocks at once.
        let other = file(&server, &format!("g{attempts}")).await;
        let g = alock("gamma", &other, 3, 0, 0);
        let quick = tokio::time::Instant::now();
        assert_eq!(c.lock(&lock_args(&g, true, false)).await, Stats::Granted);
        assert_eq!(c.unlock(&g).await, Stats::Granted);
        assert!(
            quick.elapsed() < Duration::from_secs(2),
            "{:?}",
            quick.elapsed()
        );
    }
    // beta holds it until the last attempt times out, then it is given back.
    assert!(matches!(c.test(&a, true).await, TestReply::Denied(_)));
    let deadline = started + Duration::from_secs(30);
    while c.test(&a, true).await != TestReply::Other(Stats::Granted) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "lock never given back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let cost = started.elapsed();
    assert!(
        cost > Duration::from_secs(14),
        "three 5 s attempts: {cost:?}"
    );
    host.quiet(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn msg_calls_are_answered_by_res_calls() {
    let mut host = Host::start().await;
    let port = host.port.to_string();
    let server = Server::start(&["--callback-portmap-port", &port]);
    let fh = file(&server, "f").await;
    let c = Nlm::connect(server.addr).await;
    let a = alock("alpha", &fh, 1, 0, 0);
    let _: Void = c
        .call(NLM, Proc::LockMsg, &lock_args(&a, true, false))
        .await;
    let (program, procedure, args) = host.next().await;
    assert_eq!((program, procedure), (NLM, Proc::LockRes as u32));
    let res = Res::from_xdr(args).unwrap();
    assert_eq!(
        res,
        Res {
            cookie: Netobj::new(&b"c"[..]),
            stat: Stats::Granted
        }
    );
    let t = TestArgs {
        cookie: Netobj::new(&b"t2"[..]),
        exclusive: true,
        alock: alock("beta", &fh, 2, 0, 0),
    };
    let _: Void = c.call(NLM, Proc::TestMsg, &t).await;
    let (_, procedure, args) = host.next().await;
    assert_eq!(procedure, Proc::TestRes as u32);
    let res = TestRes::from_xdr(args).unwrap();
    assert_eq!(res.cookie, t.cookie);
    assert!(matches!(res.stat, TestReply::Denied(h) if h.svid == 1));
}

#[tokio::test]
async fn sm_notify_frees_the_rebooted_hosts_locks() {
    let server = Server::start(&[]);
    let fh = file(&server, "f").await;
    let c = Nlm::connect(server.addr).await;
    let (a, b) = (alock("alpha", &fh, 1, 0, 10), alock("beta", &fh, 2, 10, 10));
    assert_eq!(c.lock(&lock_args(&a, true, false)).await, Stats::Granted);
    assert_eq!(c.lock(&lock_args(&b, true, false)).await, Stats::Granted);
    let st: nsm::StatRes = c
        .conn
        .call_decode(NSM, 1, nsm::Proc::Stat as u32, &SmName::new(&b"x"[..]))
        .await
        .unwrap();
    assert_eq!((st.res_stat, st.state), (nsm::SmRes::StatSucc, 1));
    let chge = StatChge {
        mon_name: SmName::new(&b"alpha"[..]),
        state: 7,
    };
    let _: nsm::Void = c
        .conn
        .call_decode(NSM, 1, nsm::Proc::Notify as u32, &chge)
        .await
        .unwrap();
    let gamma = alock("gamma", &fh, 3, 0, 10);
    assert_eq!(c.test(&gamma, true).await, TestReply::Other(Stats::Granted));
    let wide = alock("gamma", &fh, 3, 0, 0);
    assert!(matches!(c.test(&wide, true).await, TestReply::Denied(h) if h.svid == 2));
}

#[tokio::test]
async fn restart_notifies_lock_holders_and_grants_only_reclaims_in_grace() {
    let mut host = Host::start().await;
    let port = host.port.to_string();
    let dirs = HostDirs::new("nlm-restart");
    let (export, state) = (dirs.export(), dirs.state());
    let args = [
        export.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--squash",
        "none",
        "--grace-secs",
        "3",
        "--callback-portmap-port",
        &port,
    ];
    let server = Server::start(&args);
    let fh = file(&server, "f").await;
    let c = Nlm::connect(server.addr).await;
    let a = alock("alpha", &fh, 1, 0, 0);
    assert_eq!(c.lock(&lock_args(&a, true, false)).await, Stats::Granted);
    drop(c);
    assert!(server.terminate().success());

    let server = Server::start(&args);
    let (program, procedure, args_seen) = host.next().await;
    assert_eq!((program, procedure), (NSM, nsm::Proc::Notify as u32));
    let chge = StatChge::from_xdr(args_seen).unwrap();
    assert_eq!(
        chge.mon_name.as_bytes(),
        b"127.0.0.1",
        "named as the client reached us"
    );
    assert_eq!(chge.state, 3, "the second boot's state");
    let c = Nlm::connect(server.addr).await;
    let b = alock("beta", &fh, 2, 0, 0);
    assert_eq!(
        c.lock(&lock_args(&b, true, false)).await,
        Stats::DeniedGracePeriod
    );
    let reclaim = LockArgs {
        reclaim: true,
        ..lock_args(&a, true, false)
    };
    assert_eq!(
        c.lock(&reclaim).await,
        Stats::Granted,
        "the handle survived, the lock is back"
    );
    tokio::time::sleep(Duration::from_millis(3200)).await;
    assert_eq!(
        c.lock(&lock_args(&b, true, false)).await,
        Stats::Denied,
        "grace over; alpha holds"
    );
    assert_eq!(
        c.lock(&reclaim).await,
        Stats::DeniedGracePeriod,
        "no reclaims after grace"
    );
}

/// SHARE or UNSHARE of `fh` by `host`'s owner `oh`; the status.
async fn share(
    c: &Nlm,
    on: bool,
    host: &str,
    fh: &Netobj,
    access: FshAccess,
    mode: FshMode,
) -> Stats {
    let a = ShareArgs {
        cookie: Netobj::new(&b"s"[..]),
        share: Share {
            caller_name: CallerName::new(host.as_bytes().to_vec()),
            fh: fh.clone(),
            oh: Netobj::new(&b"o"[..]),
            mode,
            access,
        },
        reclaim: false,
    };
    let procedure = if on { Proc::Share } else { Proc::Unshare };
    let r: ShareRes = c.call(NLM, procedure, &a).await;
    assert_eq!(r.cookie, a.cookie);
    r.stat
}

/// The `_RES` call the host received next: its procedure and its `Res`.
async fn next_res(host: &mut Host) -> (u32, Res) {
    let (program, procedure, args) = host.next().await;
    assert_eq!(program, NLM);
    (procedure, Res::from_xdr(args).unwrap())
}

/// Every NLM procedure that names a file, on an object export (PostgreSQL + S3 from
/// `scripts/object-env.sh`): the head asks the database whether the file exists, which it
/// may not do on a worker's event loop (GETATTR answers WouldBlock there), so each call
/// runs again on the blocking pool; before it did, each answered NLM4_STALE_FH. TEST,
/// LOCK, a conflicting owner DENIED, a blocked LOCK granted by the GRANTED callback after
/// the UNLOCK, CANCEL, the `_MSG` variants answered by `_RES` calls, NM_LOCK,
/// SHARE/UNSHARE, a LOCK while the database is stopped NLM4_DENIED_NOLOCKS (and granted
/// once it is back), and the handle of a removed file NLM4_STALE_FH.
#[test]
fn every_procedure_that_names_a_file_serves_an_object_export() {
    let Some(env) = backend_object::TestEngines::from_env() else {
        return;
    };
    let fs = env.fresh("srv-nlm");
    let dir = scratch("srv-nlm");
    let config = head_config(&dir, "a", &fs, &dir.join("handle.key"));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(nlm_on_an_object_head(config.to_str().unwrap()));
}

async fn nlm_on_an_object_head(config: &str) {
    let mut host = Host::start().await;
    let port = host.port.to_string();
    let server = Server::start(&["--config", config, "--callback-portmap-port", &port]);
    let fh = file(&server, "f").await;
    let c = Nlm::connect(server.addr).await;
    let (a, b) = (alock("alpha", &fh, 1, 0, 0), alock("beta", &fh, 2, 100, 50));

    assert_eq!(c.test(&a, true).await, TestReply::Other(Stats::Granted));
    assert_eq!(c.lock(&lock_args(&a, true, false)).await, Stats::Granted);
    assert!(matches!(c.test(&b, false).await, TestReply::Denied(h) if h.svid == 1));
    assert_eq!(c.lock(&lock_args(&b, true, false)).await, Stats::Denied);
    assert_eq!(c.lock(&lock_args(&b, true, true)).await, Stats::Blocked);
    assert_eq!(c.unlock(&a).await, Stats::Granted);
    let (program, procedure, args) = host.next().await;
    assert_eq!((program, procedure), (NLM, Proc::Granted as u32));
    assert_eq!(TestArgs::from_xdr(args).unwrap().alock, b);
    // beta holds it now: alpha is denied, and its blocked request cancelled never granted.
    assert_eq!(c.lock(&lock_args(&a, true, false)).await, Stats::Denied);
    assert_eq!(c.lock(&lock_args(&a, true, true)).await, Stats::Blocked);
    let cancel = CancArgs {
        cookie: Netobj::new(&b"x"[..]),
        block: true,
        exclusive: true,
        alock: a.clone(),
    };
    let r: Res = c.call(NLM, Proc::Cancel, &cancel).await;
    assert_eq!(r.stat, Stats::Granted);
    assert_eq!(c.unlock(&b).await, Stats::Granted);
    host.quiet(Duration::from_millis(500)).await;
    assert_eq!(c.test(&a, true).await, TestReply::Other(Stats::Granted));

    // The asynchronous variants: each answered by its _RES call to the host.
    let _: Void = c
        .call(NLM, Proc::LockMsg, &lock_args(&a, true, false))
        .await;
    assert_eq!(
        next_res(&mut host).await,
        (
            Proc::LockRes as u32,
            Res {
                cookie: Netobj::new(&b"c"[..]),
                stat: Stats::Granted
            }
        )
    );
    let t = TestArgs {
        cookie: Netobj::new(&b"t"[..]),
        exclusive: true,
        alock: b.clone(),
    };
    let _: Void = c.call(NLM, Proc::TestMsg, &t).await;
    let (program, procedure, args) = host.next().await;
    assert_eq!((program, procedure), (NLM, Proc::TestRes as u32));
    assert!(matches!(TestRes::from_xdr(args).unwrap().stat, TestReply::Denied(h) if h.svid == 1));
    let _: Void = c.call(NLM, Proc::CancelMsg, &cancel).await;
    assert_eq!(next_res(&mut host).await.0, Proc::CancelRes as u32);
    let u = UnlockArgs {
        cookie: Netobj::new(&b"u"[..]),
        alock: a.clone(),
    };
    let _: Void = c.call(NLM, Proc::UnlockMsg, &u).await;
    let (procedure, res) = next_res(&mut host).await;
    assert_eq!(
        (procedure, res.stat),
        (Proc::UnlockRes as u32, Stats::Granted)
    );
    assert_eq!(c.test(&b, true).await, TestReply::Other(Stats::Granted));

    // NM_LOCK (a host without a status monitor), then SHARE and UNSHARE.
    let nm: Res = c.call(NLM, Proc::NmLock, &lock_args(&b, true, false)).await;
    assert_eq!(nm.stat, Stats::Granted);
    assert_eq!(c.lock(&lock_args(&a, true, false)).await, Stats::Denied);
    assert_eq!(c.unlock(&b).await, Stats::Granted);
    let w = FshAccess::Write;
    assert_eq!(
        share(&c, true, "alpha", &fh, w, FshMode::DenyWrite).await,
        Stats::Granted
    );
    assert_eq!(
        share(&c, true, "beta", &fh, w, FshMode::DenyNone).await,
        Stats::Denied
    );
    assert_eq!(
        share(&c, false, "alpha", &fh, w, FshMode::DenyWrite).await,
        Stats::Granted
    );
    assert_eq!(
        share(&c, true, "beta", &fh, w, FshMode::DenyNone).await,
        Stats::Granted
    );

    // The database down: NLM4_DENIED_NOLOCKS, which clients retry; back, a lock again.
    let patient = Nlm {
        conn: RpcConnection::connect(server.addr)
            .await
            .unwrap()
            .with_timeout(Duration::from_secs(30)),
    };
    tokio::task::spawn_blocking(|| engine("pg-stop"))
        .await
        .unwrap();
    let down = patient.lock(&lock_args(&a, true, false)).await;
    tokio::task::spawn_blocking(|| engine("pg-start"))
        .await
        .unwrap();
    assert_eq!(
        down,
        Stats::DeniedNolocks,
        "a lock while the database is down"
    );
    let back = tokio::time::Instant::now();
    loop {
        match patient.lock(&lock_args(&a, true, false)).await {
            Stats::Granted => break,
            Stats::DeniedNolocks if back.elapsed() < Duration::from_secs(60) => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => panic!("LOCK after the database came back: {other:?}"),
        }
    }
    assert_eq!(c.unlock(&a).await, Stats::Granted);

    // The database says the file is gone: its handle is stale.
    let nfs = connect(&server).await;
    let root = nfs.mount("/").await.expect("MNT /");
    nfs.remove_file(&root, "f").await.expect("REMOVE");
    assert_eq!(c.lock(&lock_args(&a, true, false)).await, Stats::StaleFh);
    assert_eq!(c.test(&a, true).await, TestReply::Other(Stats::StaleFh));
}
