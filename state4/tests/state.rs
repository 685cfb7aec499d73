//! NFSv4.1 state as RFC 8881 describes it: the EXCHANGE_ID / CREATE_SESSION record rules,
//! the slot table's exactly-once behaviour against a reference model, share reservations,
//! stateid checks, leases and the grace period.

use std::time::Duration;

use bytes::Bytes;
use granary_state4::{Admission, Config, IoStateid, OpenRequest, Principal, State};
use nfs4::ops::{exchgid, share, CreateSessionArgs, SequenceArgs};
use nfs4::types::{CallbackSecList, ChannelAttrs4, Sessionid4};
use nfs4::{Nfsstat4, Stateid4};
use proptest::prelude::*;

type File = u64;

const ROOT: Principal = Principal { flavor: 1, uid: 0 };
const OTHER: Principal = Principal {
    flavor: 1,
    uid: 1000,
};
const T0: Duration = Duration::from_secs(1000);

fn secs(s: u64) -> Duration {
    T0 + Duration::from_secs(s)
}

fn state() -> State<File> {
    State::new(Config::new(7), T0)
}

fn channel(slots: u32) -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1 << 20,
        ca_maxresponsesize: 1 << 20,
        ca_maxresponsesize_cached: 8192,
        ca_maxoperations: 16,
        ca_maxrequests: slots,
        ca_rdma_ird: None,
    }
}

fn cs_args(clientid: u64, sequence: u32) -> CreateSessionArgs {
    CreateSessionArgs {
        csa_clientid: clientid,
        csa_sequence: sequence,
        csa_flags: 0,
        csa_fore_chan_attrs: channel(4),
        csa_back_chan_attrs: channel(1),
        csa_cb_program: 0x4000_0000,
        csa_sec_parms: CallbackSecList::default(),
    }
}

fn req(owner: &str, file: File, access: u32, deny: u32, reclaim: bool) -> OpenRequest<File> {
    OpenRequest {
        owner: Bytes::copy_from_slice(owner.as_bytes()),
        file,
        access,
        deny,
        reclaim,
    }
}

fn owner(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// EXCHANGE_ID + CREATE_SESSION: a confirmed client and its session.
fn mount_reclaiming(st: &State<File>, name: &str, verifier: u8) -> (u64, Sessionid4) {
    let e = st
        .exchange_id(&owner(name), [verifier; 8], 0, ROOT, T0)
        .unwrap();
    let (ok, _) = st
        .create_session(&cs_args(e.clientid, e.sequenceid), ROOT, T0)
        .unwrap();
    (e.clientid, ok.csr_sessionid)
}

/// [`mount_reclaiming`], then RECLAIM_COMPLETE, as Linux does right after mounting when
/// it has nothing to reclaim.
fn mount(st: &State<File>, name: &str, verifier: u8) -> (u64, Sessionid4) {
    let (id, session) = mount_reclaiming(st, name, verifier);
    st.reclaim_complete(id).unwrap();
    (id, session)
}

fn seq(session: Sessionid4, slot: u32, seqid: u32) -> SequenceArgs {
    SequenceArgs {
        sa_sessionid: session,
        sa_sequenceid: seqid,
        sa_slotid: slot,
        sa_highest_slotid: 3,
        sa_cachethis: true,
    }
}

#[test]
fn a_new_client_is_unconfirmed_until_create_session_and_then_found_again() {
    let st = state();
    let e = st
        .exchange_id(&owner("linux-a"), [1; 8], 0, ROOT, T0)
        .unwrap();
    assert!(!e.confirmed);
    assert_eq!(e.sequenceid, 1);
    assert!(!st.client(e.clientid).unwrap().confirmed);
    st.create_session(&cs_args(e.clientid, 1), ROOT, T0)
        .unwrap();
    assert!(st.client(e.clientid).unwrap().confirmed);
    // The same owner and verifier again: the same record, confirmed, next sequence 2.
    let again = st
        .exchange_id(&owner("linux-a"), [1; 8], 0, ROOT, T0)
        .unwrap();
    assert_eq!(
        (again.clientid, again.confirmed, again.sequenceid),
        (e.clientid, true, 2)
    );
}

#[test]
fn a_rebooted_client_gets_a_new_record_that_drops_the_old_state_when_confirmed() {
    let st = state();
    let (old, _) = mount(&st, "linux-a", 1);
    st.open(
        old,
        &req("oo", 5, share::ACCESS_BOTH, share::DENY_WRITE, false),
        T0,
    )
    .unwrap();
    let e = st
        .exchange_id(&owner("linux-a"), [2; 8], 0, ROOT, T0)
        .unwrap();
    assert_ne!(e.clientid, old);
    assert!(!e.confirmed);
    // Until confirmed, the old record and its open stay (and still deny writers).
    assert!(st.is_open(&5));
    let (_, released) = st
        .create_session(&cs_args(e.clientid, e.sequenceid), ROOT, T0)
        .unwrap();
    let released = released.expect("the old record was replaced");
    assert_eq!(released.client, old);
    assert_eq!(released.closed.len(), 1);
    assert!(st.client(old).is_none());
    assert!(!st.is_open(&5));
}

#[test]
fn another_principal_cannot_take_a_record_with_state() {
    let st = state();
    mount(&st, "linux-a", 1);
    let e = st.exchange_id(&owner("linux-a"), [1; 8], 0, OTHER, T0);
    assert_eq!(e, Err(Nfsstat4::ClidInuse));
}

#[test]
fn updates_need_a_confirmed_record_of_the_same_boot_and_principal() {
    let st = state();
    let upd = exchgid::UPD_CONFIRMED_REC_A;
    assert_eq!(
        st.exchange_id(&owner("x"), [1; 8], upd, ROOT, T0),
        Err(Nfsstat4::Noent)
    );
    mount(&st, "x", 1);
    assert_eq!(
        st.exchange_id(&owner("x"), [2; 8], upd, ROOT, T0),
        Err(Nfsstat4::NotSame)
    );
    assert_eq!(
        st.exchange_id(&owner("x"), [1; 8], upd, OTHER, T0),
        Err(Nfsstat4::Perm)
    );
    assert!(
        st.exchange_id(&owner("x"), [1; 8], upd, ROOT, T0)
            .unwrap()
            .confirmed
    );
}

#[test]
fn create_session_is_sequenced_and_its_retransmission_replayed() {
    let st = state();
    let e = st.exchange_id(&owner("a"), [1; 8], 0, ROOT, T0).unwrap();
    assert_eq!(
        st.create_session(&cs_args(e.clientid, 5), ROOT, T0)
            .map(|_| ()),
        Err(Nfsstat4::SeqMisordered)
    );
    let (first, _) = st
        .create_session(&cs_args(e.clientid, 1), ROOT, T0)
        .unwrap();
    let (again, _) = st
        .create_session(&cs_args(e.clientid, 1), ROOT, T0)
        .unwrap();
    assert_eq!(
        first, again,
        "a retransmission gets the same session, not a new one"
    );
    assert_eq!(st.counts().1, 1);
    assert_eq!(
        st.create_session(&cs_args(0xdead_0000_0001, 1), ROOT, T0)
            .map(|_| ()),
        Err(Nfsstat4::StaleClientid)
    );
}

#[test]
fn channel_attributes_are_capped_by_the_server() {
    let st = state();
    let e = st.exchange_id(&owner("a"), [1; 8], 0, ROOT, T0).unwrap();
    let mut args = cs_args(e.clientid, 1);
    args.csa_fore_chan_attrs.ca_maxrequests = 100_000;
    args.csa_fore_chan_attrs.ca_maxresponsesize_cached = u32::MAX;
    let (ok, _) = st.create_session(&args, ROOT, T0).unwrap();
    let f = ok.csr_fore_chan_attrs;
    assert_eq!(f.ca_maxrequests, granary_state4::limits::MAX_SLOTS);
    assert_eq!(
        f.ca_maxresponsesize_cached,
        granary_state4::limits::MAX_CACHED_REPLY_BYTES
    );
    let mut small = cs_args(e.clientid, 2);
    // Below a SEQUENCE alone (88 bytes of call, 80 of reply), or a back channel too small
    // for a callback: NFS4ERR_TOOSMALL.
    small.csa_fore_chan_attrs.ca_maxrequestsize = 80;
    assert_eq!(
        st.create_session(&small, ROOT, T0).map(|_| ()),
        Err(Nfsstat4::Toosmall)
    );
    let mut small_back = cs_args(e.clientid, 2);
    small_back.csa_back_chan_attrs.ca_maxrequestsize = 10;
    assert_eq!(
        st.create_session(&small_back, ROOT, T0).map(|_| ()),
        Err(Nfsstat4::Toosmall)
    );
    let mut tight = cs_args(e.clientid, 2);
    tight.csa_fore_chan_attrs.ca_maxrequestsize = 88;
    tight.csa_fore_chan_attrs.ca_maxresponsesize = 80;
    assert!(st.create_session(&tight, ROOT, T0).is_ok());
}

#[test]
fn a_record_not_confirmed_within_a_lease_is_stale() {
    let st = state();
    let lease = st.lease();
    let late = st.exchange_id(&owner("late"), [1; 8], 0, ROOT, T0).unwrap();
    let prompt = st
        .exchange_id(&owner("prompt"), [1; 8], 0, ROOT, T0)
        .unwrap();
    assert!(st
        .create_session(&cs_args(prompt.clientid, 1), ROOT, T0 + lease)
        .is_ok());
    assert_eq!(
        st.create_session(&cs_args(late.clientid, 1), ROOT, T0 + lease + secs(1))
            .map(|_| ()),
        Err(Nfsstat4::StaleClientid)
    );
    assert!(st.client(late.clientid).is_none());
}

#[test]
fn another_principal_replaces_a_confirmed_record_without_state() {
    let st = state();
    let (old, session) = mount(&st, "linux-a", 1);
    st.destroy_session(&session).unwrap();
    let e = st
        .exchange_id(&owner("linux-a"), [2; 8], 0, OTHER, T0)
        .unwrap();
    assert_eq!(e.removed, Some(old));
    assert!(st.client(old).is_none());
    assert_eq!(
        st.create_session(&cs_args(old, 2), ROOT, T0).map(|_| ()),
        Err(Nfsstat4::StaleClientid)
    );
}

/// The slot rules of RFC 8881 section 2.10.6.1, as a model: one (seqid, running, kept)
/// per slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelKept {
    Fresh,
    Uncached,
    Reply(u32),
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Send { slot: u32, seqid_delta: i8 },
    Finish { slot: u32, cache: bool },
    Abandon { slot: u32 },
    Withdraw { slot: u32 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u32..5, -2i8..3).prop_map(|(slot, seqid_delta)| Step::Send { slot, seqid_delta }),
        (0u32..5, any::<bool>()).prop_map(|(slot, cache)| Step::Finish { slot, cache }),
        (0u32..5).prop_map(|slot| Step::Abandon { slot }),
        (0u32..5).prop_map(|slot| Step::Withdraw { slot }),
    ]
}

proptest! {
    /// Random sends (next, same, older, newer seqids; in-range and out-of-range slots),
    /// completions, abandoned requests and requests taken back before they changed anything
    /// (`Ticket::withdraw`, which leaves the slot as it was): the slot table answers as the
    /// model does, and a request is admitted to run only once per seqid unless taken back.
    #[test]
    fn slots_match_the_reference_model(steps in proptest::collection::vec(step(), 1..80)) {
        let st = state();
        let (_, sid) = mount(&st, "m", 1);
        let mut model = [(0u32, false, ModelKept::Fresh); 4];
        // Each slot's sequence id and kept reply before the request running on it.
        let mut before = [(0u32, ModelKept::Fresh); 4];
        let mut tickets: [Option<granary_state4::Ticket>; 4] = Default::default();
        let mut ran = std::collections::HashSet::new();
        for s in steps {
            match s {
                Step::Send { slot, seqid_delta } => {
                    let cur = if (slot as usize) < 4 { model[slot as usize].0 } else { 0 };
                    let seqid = cur.wrapping_add_signed(i32::from(seqid_delta));
                    let got = st.sequence(&seq(sid, slot, seqid), T0).map(|(_, a)| a);
                    let expect: Result<Option<u32>, Nfsstat4> = if slot >= 4 {
                        Err(Nfsstat4::Badslot)
                    } else {
                        let (mseq, running, kept) = model[slot as usize];
                        if seqid == mseq.wrapping_add(1) {
                            if running { Err(Nfsstat4::SeqMisordered) } else { Ok(None) }
                        } else if seqid != mseq {
                            Err(Nfsstat4::SeqMisordered)
                        } else if running {
                            Err(Nfsstat4::Delay)
                        } else {
                            match kept {
                                ModelKept::Reply(n) => Ok(Some(n)),
                                ModelKept::Uncached => Err(Nfsstat4::RetryUncachedRep),
                                ModelKept::Fresh => Err(Nfsstat4::SeqMisordered),
                            }
                        }
                    };
                    match (got, expect) {
                        (Ok(Admission::Run(t)), Ok(None)) => {
                            prop_assert!(ran.insert((slot, seqid)), "slot {} seqid {} ran twice", slot, seqid);
                            before[slot as usize] = (model[slot as usize].0, model[slot as usize].2);
                            model[slot as usize] = (seqid, true, ModelKept::Uncached);
                            tickets[slot as usize] = Some(t);
                        }
                        (Ok(Admission::Replay(b)), Ok(Some(n))) => {
                            prop_assert_eq!(&b[..], &n.to_be_bytes()[..]);
                        }
                        (Err(g), Err(e)) => prop_assert_eq!(g, e),
                        (g, e) => prop_assert!(false, "slot {} seqid {}: got {:?}, model {:?}", slot, seqid, g, e),
                    }
                }
                Step::Finish { slot, cache } => {
                    if let Some(t) = tickets.get_mut(slot as usize).and_then(Option::take) {
                        let seqid = model[slot as usize].0;
                        t.finish(cache.then(|| Bytes::copy_from_slice(&seqid.to_be_bytes())));
                        model[slot as usize].1 = false;
                        model[slot as usize].2 = if cache { ModelKept::Reply(seqid) } else { ModelKept::Uncached };
                    }
                }
                Step::Withdraw { slot } => {
                    if let Some(t) = tickets.get_mut(slot as usize).and_then(Option::take) {
                        t.withdraw();
                        ran.remove(&(slot, model[slot as usize].0));
                        let (seqid, kept) = before[slot as usize];
                        model[slot as usize] = (seqid, false, kept);
                    }
                }
                Step::Abandon { slot } => {
                    if let Some(t) = tickets.get_mut(slot as usize).and_then(Option::take) {
                        drop(t);
                        model[slot as usize].1 = false;
                        model[slot as usize].2 = ModelKept::Uncached;
                    }
                }
            }
        }
    }
}

#[test]
fn share_reservations_hold_between_clients_and_owners() {
    let st = state();
    let (a, _) = mount(&st, "a", 1);
    let (b, _) = mount(&st, "b", 1);
    let ga = st
        .open(
            a,
            &req("p1", 9, share::ACCESS_READ, share::DENY_WRITE, false),
            T0,
        )
        .unwrap();
    // B may read, not write, and may not deny reads A is doing.
    assert!(st
        .open(
            b,
            &req("q", 9, share::ACCESS_READ, share::DENY_NONE, false),
            T0
        )
        .is_ok());
    assert_eq!(
        st.open(
            b,
            &req("q2", 9, share::ACCESS_WRITE, share::DENY_NONE, false),
            T0
        ),
        Err(Nfsstat4::ShareDenied)
    );
    assert_eq!(
        st.open(
            b,
            &req("q3", 9, share::ACCESS_READ, share::DENY_READ, false),
            T0
        ),
        Err(Nfsstat4::ShareDenied)
    );
    // Anonymous writes are refused while a deny-write open exists; reads pass.
    assert_eq!(
        st.check_io(b, &Stateid4::ANONYMOUS, &9, true),
        Err(Nfsstat4::Locked)
    );
    assert_eq!(
        st.check_io(b, &Stateid4::ANONYMOUS, &9, false),
        Ok(IoStateid::Special)
    );
    // After A closes, B can write.
    st.close(a, &ga.stateid).unwrap();
    assert!(st
        .open(
            b,
            &req("q2", 9, share::ACCESS_WRITE, share::DENY_NONE, false),
            T0
        )
        .is_ok());
}

#[test]
fn stateids_are_checked_for_owner_file_version_and_mode() {
    let st = state();
    let (a, _) = mount(&st, "a", 1);
    let (b, _) = mount(&st, "b", 1);
    let g1 = st
        .open(
            a,
            &req("p", 1, share::ACCESS_READ, share::DENY_NONE, false),
            T0,
        )
        .unwrap();
    assert_eq!(g1.stateid.seqid, 1);
    assert_eq!(
        st.check_io(a, &g1.stateid, &1, true),
        Err(Nfsstat4::Openmode)
    );
    let io = st.check_io(a, &g1.stateid, &1, false);
    assert!(matches!(
        io,
        Ok(IoStateid::Open {
            access: share::ACCESS_READ,
            ..
        })
    ));
    assert!(io.is_ok_and(|io| io.open_reads() && !io.open_writes()));
    assert_eq!(
        st.check_io(a, &g1.stateid, &2, false),
        Err(Nfsstat4::BadStateid)
    );
    assert_eq!(
        st.check_io(b, &g1.stateid, &1, false),
        Err(Nfsstat4::BadStateid)
    );
    // An upgrade bumps the seqid; the old one is OLD_STATEID, seqid 0 means current.
    let g2 = st
        .open(
            a,
            &req("p", 1, share::ACCESS_WRITE, share::DENY_NONE, false),
            T0,
        )
        .unwrap();
    assert!(g2.upgraded);
    assert_eq!(g2.stateid.other, g1.stateid.other);
    assert_eq!(g2.stateid.seqid, 2);
    assert_eq!(
        st.check_io(a, &g1.stateid, &1, false),
        Err(Nfsstat4::OldStateid)
    );
    let any = Stateid4 {
        seqid: 0,
        ..g2.stateid
    };
    assert!(st.check_io(a, &any, &1, true).is_ok());
    let future = Stateid4 {
        seqid: 9,
        ..g2.stateid
    };
    assert_eq!(st.check_io(a, &future, &1, true), Err(Nfsstat4::BadStateid));
    assert_eq!(
        st.test_stateids(a, &[g2.stateid, g1.stateid, future]),
        vec![Nfsstat4::Ok, Nfsstat4::OldStateid, Nfsstat4::BadStateid]
    );
}

#[test]
fn open_downgrade_goes_back_only_to_what_an_open_granted() {
    let st = state();
    let (a, _) = mount(&st, "a", 1);
    let _read = st
        .open(
            a,
            &req("p", 1, share::ACCESS_READ, share::DENY_NONE, false),
            T0,
        )
        .unwrap();
    let g = st
        .open(
            a,
            &req("p", 1, share::ACCESS_WRITE, share::DENY_NONE, false),
            T0,
        )
        .unwrap();
    // READ and WRITE were each granted: either is a valid downgrade of BOTH.
    let d = st
        .open_downgrade(a, &g.stateid, share::ACCESS_READ, share::DENY_NONE)
        .unwrap();
    assert_eq!(d.seqid, 3);
    // WRITE is not a subset of READ any more.
    assert_eq!(
        st.open_downgrade(a, &d, share::ACCESS_WRITE, share::DENY_NONE),
        Err(Nfsstat4::Inval)
    );
    // A deny that was never asked for cannot appear by downgrade.
    assert_eq!(
        st.open_downgrade(a, &d, share::ACCESS_READ, share::DENY_READ),
        Err(Nfsstat4::Inval)
    );
    let closed = st.close(a, &d).unwrap();
    assert!(closed.last);
    assert_eq!(st.close(a, &d), Err(Nfsstat4::BadStateid));
}

#[test]
fn a_client_that_stops_renewing_loses_its_state_and_a_renewing_one_keeps_it() {
    let st = state();
    let (a, sa) = mount(&st, "a", 1);
    let (b, _) = mount(&st, "b", 1);
    st.open(
        a,
        &req("p", 1, share::ACCESS_READ, share::DENY_WRITE, false),
        T0,
    )
    .unwrap();
    st.open(
        b,
        &req("p", 2, share::ACCESS_READ, share::DENY_NONE, false),
        T0,
    )
    .unwrap();
    let lease = st.lease().as_secs();
    // A renews at half the lease; B never does.
    let Ok((_, Admission::Run(t))) = st.sequence(&seq(sa, 0, 1), secs(lease / 2)) else {
        panic!()
    };
    t.finish(None);
    assert_eq!(st.lease_deadline(a), Some(secs(lease / 2 + lease)));
    let released = st.expire(secs(lease));
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].client, b);
    assert_eq!(released[0].closed.len(), 1);
    assert!(st.client(a).is_some() && st.is_open(&1));
    assert!(!st.is_open(&2));
    assert!(st.expire(secs(lease + 1)).is_empty());
    let released = st.expire(secs(lease / 2 + lease));
    assert_eq!(released.len(), 1);
    assert_eq!(
        st.sequence(&seq(sa, 0, 2), secs(2 * lease)).map(|_| ()),
        Err(Nfsstat4::Badsession)
    );
}

#[test]
fn grace_lets_previous_clients_reclaim_and_holds_new_opens_back() {
    let mut cfg = Config::new(8);
    cfg.previous_owners = vec![owner("old")];
    let st: State<File> = State::new(cfg, T0);
    assert!(st.in_grace(T0));
    let (old, _) = mount_reclaiming(&st, "old", 1);
    let (new, _) = mount(&st, "new", 1);
    assert_eq!(
        st.open(
            new,
            &req("p", 1, share::ACCESS_READ, share::DENY_NONE, false),
            T0
        ),
        Err(Nfsstat4::Grace)
    );
    assert_eq!(
        st.open(
            new,
            &req("p", 1, share::ACCESS_READ, share::DENY_NONE, true),
            T0
        ),
        Err(Nfsstat4::NoGrace)
    );
    assert!(st
        .open(
            old,
            &req("p", 1, share::ACCESS_READ, share::DENY_NONE, true),
            T0
        )
        .is_ok());
    st.reclaim_complete(old).unwrap();
    assert_eq!(st.reclaim_complete(old), Err(Nfsstat4::CompleteAlready));
    // Every previous client is done: grace ends early.
    assert!(!st.in_grace(T0));
    assert!(st
        .open(
            new,
            &req("p", 1, share::ACCESS_READ, share::DENY_NONE, false),
            T0
        )
        .is_ok());
    assert_eq!(
        st.open(
            old,
            &req("p2", 3, share::ACCESS_READ, share::DENY_NONE, true),
            T0
        ),
        Err(Nfsstat4::NoGrace)
    );
}

#[test]
fn grace_ends_by_time_when_a_previous_client_never_comes_back() {
    let mut cfg = Config::new(8);
    cfg.previous_owners = vec![owner("gone")];
    let st: State<File> = State::new(cfg, T0);
    let (c, _) = mount(&st, "new", 1);
    assert!(st.in_grace(secs(10)));
    let grace = st.lease().as_secs();
    assert_eq!(st.grace_deadline(), Some(secs(grace)));
    assert_eq!(st.end_grace(secs(grace - 1)), None, "the timer fired early");
    assert!(!st.in_grace(secs(grace)));
    assert_eq!(
        st.end_grace(secs(grace)),
        Some(1),
        "one client never came back"
    );
    assert_eq!(st.grace_deadline(), None);
    assert!(st
        .open(
            c,
            &req("p", 1, share::ACCESS_READ, share::DENY_NONE, false),
            secs(grace)
        )
        .is_ok());
}

#[test]
fn destroy_clientid_needs_the_client_to_be_idle() {
    let st = state();
    let (a, sa) = mount(&st, "a", 1);
    assert_eq!(st.destroy_clientid(a), Err(Nfsstat4::ClientidBusy));
    st.destroy_session(&sa).unwrap();
    assert_eq!(st.destroy_session(&sa), Err(Nfsstat4::Badsession));
    st.destroy_clientid(a).unwrap();
    assert_eq!(st.destroy_clientid(a), Err(Nfsstat4::StaleClientid));
}

#[test]
fn confirmed_owners_are_what_the_next_boot_may_reclaim() {
    let st = state();
    mount(&st, "a", 1);
    st.exchange_id(&owner("unconfirmed"), [1; 8], 0, ROOT, T0)
        .unwrap();
    assert_eq!(st.confirmed_owners(), vec![owner("a")]);
}

#[test]
fn a_client_opens_anew_only_after_reclaim_complete() {
    let st = state();
    let (c, _) = mount_reclaiming(&st, "fresh", 1);
    assert_eq!(
        st.open(
            c,
            &req("p", 1, share::ACCESS_READ, share::DENY_NONE, false),
            T0
        ),
        Err(Nfsstat4::Grace)
    );
    st.reclaim_complete(c).unwrap();
    assert!(st
        .open(
            c,
            &req("p", 1, share::ACCESS_READ, share::DENY_NONE, false),
            T0
        )
        .is_ok());
}

#[test]
fn an_expired_client_keeps_its_share_reservation_only_until_it_is_in_the_way() {
    let st = state();
    let (a, _) = mount(&st, "a", 1);
    let (b, sb) = mount(&st, "b", 1);
    st.open(
        a,
        &req("p", 1, share::ACCESS_READ, share::DENY_WRITE, false),
        T0,
    )
    .unwrap();
    let lease = st.lease().as_secs();
    // B renews; A does not. Before A's lease ends its deny holds; after, it yields.
    let Ok((_, Admission::Run(t))) = st.sequence(&seq(sb, 0, 1), secs(lease)) else {
        panic!()
    };
    t.finish(None);
    let write = req("q", 1, share::ACCESS_WRITE, share::DENY_NONE, false);
    assert_eq!(
        st.open(b, &write, secs(lease - 1)),
        Err(Nfsstat4::ShareDenied)
    );
    assert!(st.open(b, &write, secs(lease)).is_ok());
    assert!(st.client(a).is_none(), "the expired client's state is gone");
}
