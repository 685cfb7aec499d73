//! NLM v4 and NSM v1 through the dispatcher, whole calls and whole replies: locks, tests,
//! blocking with the GRANTED callback (its answer taken from a recording outbox), the
//! `_MSG`/`_RES` variants, grace, FREE_ALL and SM_NOTIFY, bad handles and ranges.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backend_mem::{MemConfig, MemFs};
use bytes::Bytes;
use granary_nfsd as nfsd;
use gtime::{ManualClock, Timestamp};
use nfs3::nfs::NfsFh3;
use nfsd::nlm::{Callback, Monitor, NlmState, Outbox};
use nlm::nlm4::*;
use nlm::nsm::{self, SmName, StatChge};
use rpc::msg::{AcceptStat, CallHeader, OpaqueAuth, ReplyStatus};
use rpc::Dispatcher;
use vfs::{
    Backend, CreateMode, Export, ExportId, ExportOptions, ExportTable, FileId, HandleKey, Name,
    SetAttr, Trusted,
};
use xdr::{Decode, Encode, Encoder};

const NLM: u32 = 100_021;
const NSM: u32 = 100_024;

#[derive(Default)]
struct Recorder(Mutex<Vec<Callback>>);

impl Outbox for Recorder {
    fn send(&self, call: Callback) {
        self.0.lock().unwrap().push(call);
    }
}

impl Recorder {
    fn take(&self) -> Vec<Callback> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

struct Server {
    mem: Arc<MemFs>,
    clock: Arc<ManualClock>,
    nfs: Arc<nfsd::NfsState>,
    nlm: Arc<NlmState>,
    out: Arc<Recorder>,
    dispatcher: Dispatcher,
}

const A: &str = "10.0.0.1:700";
const B: &str = "10.0.0.2:700";

/// Export 1 is `/` (read-write), export 2 `/ro` (read-only), one mem backend.
fn server() -> Server {
    let clock = Arc::new(ManualClock::new(Timestamp {
        seconds: 1_700_000_000,
        nanos: 0,
    }));
    let mem = Arc::new(MemFs::new(MemConfig::default(), clock.clone()));
    let ro = ExportOptions {
        read_only: true,
        ..ExportOptions::default()
    };
    let exports = vec![
        Export::new(
            ExportId(1),
            7,
            "/".into(),
            ExportOptions::default(),
            mem.clone(),
        ),
        Export::new(ExportId(2), 7, "/ro".into(), ro, mem.clone()),
    ];
    let table = ExportTable::new(exports, HandleKey::new([3; 16]));
    let nfs = Arc::new(nfsd::NfsState::new(
        table,
        [1; 8],
        nfsd::limits::MAX_IO_BYTES,
    ));
    let out = Arc::new(Recorder::default());
    let nlm = NlmState::new(
        Arc::clone(&nfs),
        Monitor::in_memory(),
        clock.clone(),
        out.clone(),
    );
    let mut dispatcher = Dispatcher::new();
    nfsd::register(&mut dispatcher, &nfs);
    nfsd::nlm::register(&mut dispatcher, &nlm);
    Server {
        mem,
        clock,
        nfs,
        nlm,
        out,
        dispatcher,
    }
}

impl Server {
    fn file(&self, name: &str) -> FileId {
        let name = Name::new(name.as_bytes().to_vec()).unwrap();
        let mode = CreateMode::Guarded(SetAttr::default());
        let made = self
            .mem
            .create(self.mem.root(), &name, &mode, &Trusted::ROOT);
        made.unwrap().attr.fileid
    }

    fn fh(&self, export: u32, id: FileId) -> Netobj {
        let export = self.nfs.exports.by_id(ExportId(export)).unwrap();
        let NfsFh3(b) = self.nfs.handle(export, &self.mem.getattr(id).unwrap());
        Netobj(b)
    }

    /// A whole call from `peer`; the reply's accept status and results.
    fn raw(
        &self,
        peer: &str,
        program: u32,
        procedure: u32,
        args: &impl Encode,
    ) -> (AcceptStat, Bytes) {
        let version = if program == NLM { 4 } else { 1 };
        let header = CallHeader {
            xid: 9,
            program,
            version,
            procedure,
            cred: OpaqueAuth::default(),
            verf: OpaqueAuth::default(),
        };
        let mut e = Encoder::new();
        header.encode(&mut e);
        args.encode(&mut e);
        let peer: SocketAddr = peer.parse().unwrap();
        let reply = self
            .dispatcher
            .handle(e.into_bytes(), peer)
            .expect("a reply");
        let mut d = xdr::Decoder::new(reply.slice(4..));
        let (_, status) = rpc::msg::decode_reply_header(&mut d).unwrap();
        let ReplyStatus::Accepted(stat) = status else {
            panic!("denied: {status:?}");
        };
        (stat, d.rest())
    }

    fn call<R: Decode>(&self, peer: &str, program: u32, procedure: Proc, args: &impl Encode) -> R {
        let (stat, body) = self.raw(peer, program, procedure as u32, args);
        assert_eq!(stat, AcceptStat::Success);
        let mut d = xdr::Decoder::new(body);
        let r = R::decode(&mut d).unwrap();
        assert_eq!(d.remaining(), 0, "nothing after the results");
        r
    }

    fn lock(&self, peer: &str, a: &LockArgs) -> Stats {
        let r: Res = self.call(peer, NLM, Proc::Lock, a);
        assert_eq!(r.cookie, a.cookie, "the cookie comes back");
        r.stat
    }

    fn test(&self, peer: &str, a: &TestArgs) -> TestReply {
        let r: TestRes = self.call(peer, NLM, Proc::Test, a);
        r.stat
    }

    fn unlock(&self, peer: &str, alock: &Lock) -> Stats {
        let a = UnlockArgs {
            cookie: Netobj::new(&b"u"[..]),
            alock: alock.clone(),
        };
        let r: Res = self.call(peer, NLM, Proc::Unlock, &a);
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
        cookie: Netobj::new(&b"c1"[..]),
        block,
        exclusive,
        alock: l.clone(),
        reclaim: false,
        state: 1,
    }
}

fn test_args(l: &Lock, exclusive: bool) -> TestArgs {
    TestArgs {
        cookie: Netobj::new(&b"t"[..]),
        exclusive,
        alock: l.clone(),
    }
}

#[test]
fn exclusive_lock_is_tested_denied_and_released() {
    let s = server();
    let fh = s.fh(1, s.file("f"));
    let a = alock("alpha", &fh, 11, 0, 100);
    let b = alock("beta", &fh, 22, 50, 0);
    assert_eq!(
        s.test(B, &test_args(&b, true)),
        TestReply::Other(Stats::Granted)
    );
    assert_eq!(s.lock(A, &lock_args(&a, true, false)), Stats::Granted);
    let holder = Holder {
        exclusive: true,
        svid: 11,
        oh: a.oh.clone(),
        l_offset: 0,
        l_len: 100,
    };
    assert_eq!(s.test(B, &test_args(&b, false)), TestReply::Denied(holder));
    assert_eq!(s.lock(B, &lock_args(&b, false, false)), Stats::Denied);
    // The owner's own lock is no conflict; a range past it is free.
    assert_eq!(
        s.test(A, &test_args(&a, true)),
        TestReply::Other(Stats::Granted)
    );
    let past = alock("beta", &fh, 22, 100, 10);
    assert_eq!(s.lock(B, &lock_args(&past, true, false)), Stats::Granted);
    assert_eq!(s.unlock(A, &a), Stats::Granted);
    assert_eq!(s.lock(B, &lock_args(&b, false, false)), Stats::Granted);
    assert!(s.out.take().is_empty(), "no callbacks without blocking");
}

#[test]
fn shared_locks_share_and_forged_owners_cannot_unlock() {
    let s = server();
    let fh = s.fh(1, s.file("f"));
    let a = alock("alpha", &fh, 1, 0, 0);
    let b = alock("beta", &fh, 2, 0, 0);
    assert_eq!(s.lock(A, &lock_args(&a, false, false)), Stats::Granted);
    assert_eq!(s.lock(B, &lock_args(&b, false, false)), Stats::Granted);
    assert_eq!(s.unlock(B, &b), Stats::Granted);
    assert_eq!(s.lock(B, &lock_args(&b, true, false)), Stats::Denied);
    // The same caller_name, svid and oh from another address is another owner: its
    // UNLOCK releases nothing of alpha's.
    assert_eq!(s.unlock(B, &a), Stats::Granted);
    assert_eq!(s.lock(B, &lock_args(&b, true, false)), Stats::Denied);
}

#[test]
fn blocked_lock_is_granted_by_a_callback_and_kept_when_accepted() {
    let s = server();
    let fh = s.fh(1, s.file("f"));
    let a = alock("alpha", &fh, 1, 0, 0);
    let b = alock("beta", &fh, 2, 10, 5);
    assert_eq!(s.lock(A, &lock_args(&a, true, false)), Stats::Granted);
    assert_eq!(s.lock(B, &lock_args(&b, true, true)), Stats::Blocked);
    // A retransmission keeps its place.
    assert_eq!(s.lock(B, &lock_args(&b, true, true)), Stats::Blocked);
    assert!(s.out.take().is_empty());
    assert_eq!(s.unlock(A, &a), Stats::Granted);
    let mut calls = s.out.take();
    assert_eq!(calls.len(), 1, "one GRANTED");
    let call = calls.pop().unwrap();
    let host: IpAddr = "10.0.0.2".parse().unwrap();
    assert_eq!(
        (call.host, call.program, call.version, call.procedure),
        (host, NLM, 4, Proc::Granted as u32)
    );
    let granted = TestArgs::from_xdr(call.args.clone()).unwrap();
    assert!(granted.exclusive);
    assert_eq!(granted.alock, b);
    // The client takes it: beta holds bytes 10..15 and alpha is kept out.
    let res = Res {
        cookie: granted.cookie.clone(),
        stat: Stats::Granted,
    };
    (call.done.unwrap())(Ok(res.to_xdr()));
    let holder = Holder {
        exclusive: true,
        svid: 2,
        oh: b.oh.clone(),
        l_offset: 10,
        l_len: 5,
    };
    assert_eq!(s.test(A, &test_args(&a, false)), TestReply::Denied(holder));
}

#[test]
fn a_granted_lock_the_client_refuses_or_never_answers_is_given_back() {
    let s = server();
    let fh = s.fh(1, s.file("f"));
    let a = alock("alpha", &fh, 1, 0, 0);
    let b = alock("beta", &fh, 2, 0, 0);
    for answer in [
        Ok(Res {
            cookie: Netobj::default(),
            stat: Stats::Denied,
        }
        .to_xdr()),
        Err("no answer after 3 tries".to_string()),
    ] {
        assert_eq!(s.lock(A, &lock_args(&a, true, false)), Stats::Granted);
        assert_eq!(s.lock(B, &lock_args(&b, true, true)), Stats::Blocked);
        assert_eq!(s.unlock(A, &a), Stats::Granted);
        let call = s.out.take().pop().expect("GRANTED");
        (call.done.unwrap())(answer);
        assert_eq!(
            s.test(A, &test_args(&a, true)),
            TestReply::Other(Stats::Granted)
        );
    }
}

#[test]
fn granted_res_answers_a_grant_asynchronously() {
    let s = server();
    let fh = s.fh(1, s.file("f"));
    let a = alock("alpha", &fh, 1, 0, 0);
    let b = alock("beta", &fh, 2, 0, 0);
    assert_eq!(s.lock(A, &lock_args(&a, true, false)), Stats::Granted);
    assert_eq!(s.lock(B, &lock_args(&b, true, true)), Stats::Blocked);
    assert_eq!(s.unlock(A, &a), Stats::Granted);
    let call = s.out.take().pop().expect("GRANTED");
    let cookie = TestArgs::from_xdr(call.args).unwrap().cookie;
    let res = Res {
        cookie,
        stat: Stats::Denied,
    };
    let _: Void = s.call(B, NLM, Proc::GrantedRes, &res);
    assert_eq!(
        s.test(A, &test_args(&a, true)),
        TestReply::Other(Stats::Granted)
    );
}

#[test]
fn cancel_removes_the_waiter() {
    let s = server();
    let fh = s.fh(1, s.file("f"));
    let a = alock("alpha", &fh, 1, 0, 0);
    let b = alock("beta", &fh, 2, 0, 0);
    assert_eq!(s.lock(A, &lock_args(&a, true, false)), Stats::Granted);
    assert_eq!(s.lock(B, &lock_args(&b, true, true)), Stats::Blocked);
    let cancel = CancArgs {
        cookie: Netobj::new(&b"x"[..]),
        block: true,
        exclusive: true,
        alock: b.clone(),
    };
    let r: Res = s.call(B, NLM, Proc::Cancel, &cancel);
    assert_eq!(r.stat, Stats::Granted);
    assert_eq!(s.unlock(A, &a), Stats::Granted);
    assert!(s.out.take().is_empty(), "no GRANTED for a cancelled waiter");
    assert_eq!(
        s.test(A, &test_args(&a, true)),
        TestReply::Other(Stats::Granted)
    );
}

#[test]
fn msg_variants_answer_with_res_calls() {
    let s = server();
    let fh = s.fh(1, s.file("f"));
    let a = alock("alpha", &fh, 1, 0, 0);
    let _: Void = s.call(A, NLM, Proc::LockMsg, &lock_args(&a, true, false));
    let _: Void = s.call(
        B,
        NLM,
        Proc::TestMsg,
        &test_args(&alock("beta", &fh, 2, 0, 0), true),
    );
    let unlock = UnlockArgs {
        cookie: Netobj::new(&b"u1"[..]),
        alock: a.clone(),
    };
    let _: Void = s.call(A, NLM, Proc::UnlockMsg, &unlock);
    let calls = s.out.take();
    let procs: Vec<(IpAddr, u32)> = calls.iter().map(|c| (c.host, c.procedure)).collect();
    let (ha, hb) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    assert_eq!(
        procs,
        [
            (ha, Proc::LockRes as u32),
            (hb, Proc::TestRes as u32),
            (ha, Proc::UnlockRes as u32)
        ]
    );
    let lock_res = Res::from_xdr(calls[0].args.clone()).unwrap();
    assert_eq!(
        lock_res,
        Res {
            cookie: Netobj::new(&b"c1"[..]),
            stat: Stats::Granted
        }
    );
    let test_res = TestRes::from_xdr(calls[1].args.clone()).unwrap();
    assert!(matches!(test_res.stat, TestReply::Denied(h) if h.svid == 1));
    assert_eq!(
        Res::from_xdr(calls[2].args.clone()).unwrap().stat,
        Stats::Granted
    );
}

#[test]
fn bad_handles_ranges_and_read_only_exports() {
    let s = server();
    let id = s.file("f");
    let fh = s.fh(1, id);
    let mut forged = fh.0.to_vec();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    for bad in [
        Netobj::new(forged),
        Netobj::new(vec![0; 65]),
        Netobj::default(),
    ] {
        let l = alock("alpha", &bad, 1, 0, 0);
        assert_eq!(s.lock(A, &lock_args(&l, true, false)), Stats::StaleFh);
        assert_eq!(
            s.test(A, &test_args(&l, true)),
            TestReply::Other(Stats::StaleFh)
        );
    }
    let past_end = alock("alpha", &fh, 1, u64::MAX, 2);
    assert_eq!(s.lock(A, &lock_args(&past_end, true, false)), Stats::Fbig);
    let last_byte = alock("alpha", &fh, 1, u64::MAX, 1);
    assert_eq!(
        s.lock(A, &lock_args(&last_byte, true, false)),
        Stats::Granted
    );
    let ro = s.fh(2, id);
    let l = alock("alpha", &ro, 1, 0, 0);
    assert_eq!(s.lock(A, &lock_args(&l, true, false)), Stats::Rofs);
    assert_eq!(s.lock(A, &lock_args(&l, false, false)), Stats::Granted);
    // A removed file's handle is stale.
    let gone = s.file("gone");
    let gone_fh = s.fh(1, gone);
    s.mem
        .remove(
            s.mem.root(),
            &Name::new(b"gone".to_vec()).unwrap(),
            &Trusted::ROOT,
        )
        .unwrap();
    let l = alock("alpha", &gone_fh, 1, 0, 0);
    assert_eq!(s.lock(A, &lock_args(&l, true, false)), Stats::StaleFh);
}

#[test]
fn procedures_16_to_19_are_unavailable() {
    let s = server();
    for p in [16, 17, 18, 19, 24] {
        let (stat, _) = s.raw(A, NLM, p, &Void);
        assert_eq!(stat, AcceptStat::ProcUnavail, "procedure {p}");
    }
    let (stat, _) = s.raw(A, NLM, Proc::Null as u32, &Void);
    assert_eq!(stat, AcceptStat::Success);
}

#[test]
fn grace_grants_reclaims_only() {
    let s = server();
    let fh = s.fh(1, s.file("f"));
    let a = alock("alpha", &fh, 1, 0, 0);
    let b = alock("beta", &fh, 2, 0, 0);
    s.nlm.start_grace(Duration::from_secs(90));
    assert_eq!(
        s.lock(B, &lock_args(&b, true, false)),
        Stats::DeniedGracePeriod
    );
    assert_eq!(
        s.test(B, &test_args(&b, true)),
        TestReply::Other(Stats::DeniedGracePeriod)
    );
    let reclaim = LockArgs {
        reclaim: true,
        ..lock_args(&a, true, false)
    };
    assert_eq!(s.lock(A, &reclaim), Stats::Granted);
    s.clock.advance(Duration::from_secs(91));
    assert_eq!(
        s.lock(B, &lock_args(&b, true, false)),
        Stats::Denied,
        "alpha's reclaimed lock"
    );
    assert_eq!(
        s.lock(A, &reclaim),
        Stats::DeniedGracePeriod,
        "no reclaims after grace"
    );
}

#[test]
fn free_all_and_sm_notify_free_the_hosts_locks_from_its_own_address_only() {
    let s = server();
    let fh = s.fh(1, s.file("f"));
    let a = alock("alpha", &fh, 1, 0, 10);
    let b = alock("beta", &fh, 2, 10, 10);
    assert_eq!(s.lock(A, &lock_args(&a, true, false)), Stats::Granted);
    assert_eq!(s.lock(B, &lock_args(&b, true, false)), Stats::Granted);
    let wide = alock("gamma", &fh, 3, 0, 0);
    // beta (from B) claims alpha rebooted: nothing happens.
    let chge = StatChge {
        mon_name: SmName::new(&b"alpha"[..]),
        state: 3,
    };
    let (stat, _) = s.raw(B, NSM, nsm::Proc::Notify as u32, &chge);
    assert_eq!(stat, AcceptStat::Success);
    assert!(matches!(
        s.test("10.0.0.3:1", &test_args(&wide, true)),
        TestReply::Denied(_)
    ));
    // alpha says so itself: its locks go, beta's stay.
    let (stat, _) = s.raw(A, NSM, nsm::Proc::Notify as u32, &chge);
    assert_eq!(stat, AcceptStat::Success);
    let from_a = alock("gamma", &fh, 3, 0, 10);
    assert_eq!(
        s.test("10.0.0.3:1", &test_args(&from_a, true)),
        TestReply::Other(Stats::Granted)
    );
    // FREE_ALL from beta's address for beta.
    let notify = Notify {
        name: HostName::new(&b"beta"[..]),
        state: 5,
    };
    let _: Void = s.call(B, NLM, Proc::FreeAll, &notify);
    assert_eq!(
        s.test("10.0.0.3:1", &test_args(&wide, true)),
        TestReply::Other(Stats::Granted)
    );
}

#[test]
fn a_lock_with_a_new_nsm_state_frees_the_hosts_old_locks() {
    let s = server();
    let fh = s.fh(1, s.file("f"));
    let before = alock("alpha", &fh, 1, 0, 10);
    assert_eq!(s.lock(A, &lock_args(&before, true, false)), Stats::Granted);
    // alpha rebooted (state 1 -> 3) and its SM_NOTIFY never came: a process of the new
    // boot asks for the same bytes.
    let after = alock("alpha", &fh, 7, 0, 10);
    let mut again = lock_args(&after, true, false);
    assert_eq!(
        s.lock(A, &again),
        Stats::Denied,
        "same boot: the old lock holds"
    );
    again.state = 3;
    assert_eq!(s.lock(A, &again), Stats::Granted);
    let holder = Holder {
        exclusive: true,
        svid: 7,
        oh: after.oh.clone(),
        l_offset: 0,
        l_len: 10,
    };
    assert_eq!(
        s.test(B, &test_args(&alock("beta", &fh, 2, 0, 1), true)),
        TestReply::Denied(holder)
    );
}
