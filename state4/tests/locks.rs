//! Lock stateids as RFC 8881 sections 9 and 18.10-18.12 describe them: derived from an
//! open, one per lock-owner and file, a seqid that goes up with each change, checked for
//! client, file and version; CLOSE and FREE_STATEID refused while locks are held; I/O
//! through a lock stateid; locks that die with the lease; the grace rules of LOCK.

use std::time::Duration;

use bytes::Bytes;
use granary_state4::{Config, OpenRequest, Principal, State};
use locks::{Kind, Range, Request, Wait};
use nfs4::ops::{share, CreateSessionArgs, SequenceArgs};
use nfs4::types::{CallbackSecList, ChannelAttrs4, Sessionid4};
use nfs4::{Nfsstat4, Stateid4};

type File = u64;

const ROOT: Principal = Principal { flavor: 1, uid: 0 };
const T0: Duration = Duration::from_secs(1000);

fn channel() -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1 << 20,
        ca_maxresponsesize: 1 << 20,
        ca_maxresponsesize_cached: 8192,
        ca_maxoperations: 16,
        ca_maxrequests: 4,
        ca_rdma_ird: None,
    }
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// A confirmed client that finished reclaiming.
fn mount(st: &State<File>, name: &str) -> u64 {
    mount_session(st, name).0
}

fn mount_session(st: &State<File>, name: &str) -> (u64, Sessionid4) {
    let e = st.exchange_id(&b(name), [1; 8], 0, ROOT, T0).unwrap();
    let args = CreateSessionArgs {
        csa_clientid: e.clientid,
        csa_sequence: e.sequenceid,
        csa_flags: 0,
        csa_fore_chan_attrs: channel(),
        csa_back_chan_attrs: channel(),
        csa_cb_program: 0x4000_0000,
        csa_sec_parms: CallbackSecList::default(),
    };
    let (ok, _) = st.create_session(&args, ROOT, T0).unwrap();
    st.reclaim_complete(e.clientid).unwrap();
    (e.clientid, ok.csr_sessionid)
}

fn open(st: &State<File>, client: u64, file: File, access: u32) -> Stateid4 {
    let req = OpenRequest {
        owner: b("open-owner"),
        file,
        access,
        deny: share::DENY_NONE,
        reclaim: false,
    };
    st.open(client, &req, T0).unwrap().stateid
}

/// LOCK as the front end does it: the open (or lock stateid), the manager, the stateid.
fn lock(
    st: &State<File>,
    client: u64,
    from: Result<Stateid4, Stateid4>,
    owner: &str,
    file: File,
    range: Range,
) -> Result<Stateid4, Nfsstat4> {
    let (open, owner) = match from {
        Ok(open_sid) => (
            st.lock_open(client, &open_sid, &b(owner), &file, true)?,
            b(owner),
        ),
        Err(lock_sid) => {
            let l = st.lock_stateid(client, &lock_sid, &file, Some(true))?;
            (l.open, l.owner)
        }
    };
    let req = Request {
        file: locks::FileKey { export: 0, file },
        owner: locks::Owner::nfs4(client, owner.clone()),
        kind: Kind::Write,
        range,
        wait: Wait::No,
    };
    st.lock_manager()
        .lock(&req, T0)
        .map_err(|_| Nfsstat4::Denied)?;
    st.lock_granted(client, &owner, &file, open)
}

fn r(s: u64, e: u64) -> Range {
    Range::new(s, e).unwrap()
}

#[test]
fn a_lock_stateid_is_derived_from_an_open_and_counts_its_changes() {
    let st = State::new(Config::new(3), T0);
    let c = mount(&st, "a");
    let osid = open(&st, c, 9, share::ACCESS_BOTH);
    let l1 = lock(&st, c, Ok(osid), "lo", 9, r(0, 9)).unwrap();
    assert_eq!(l1.seqid, 1);
    assert_ne!(l1.other, osid.other);
    let l2 = lock(&st, c, Err(l1), "lo", 9, r(20, 29)).unwrap();
    assert_eq!((l2.other, l2.seqid), (l1.other, 2));
    // The old version is refused, seqid 0 means the current one.
    assert_eq!(
        lock(&st, c, Err(l1), "lo", 9, r(40, 49)),
        Err(Nfsstat4::OldStateid)
    );
    let l0 = Stateid4 { seqid: 0, ..l2 };
    assert_eq!(
        lock(&st, c, Err(l0), "lo", 9, r(40, 49)).map(|s| s.seqid),
        Ok(3)
    );
    // A second open_to_lock_owner of the same lock-owner finds the same stateid.
    let again = lock(&st, c, Ok(osid), "lo", 9, r(60, 69)).unwrap();
    assert_eq!((again.other, again.seqid), (l1.other, 4));
    assert_eq!(st.lock_changed(c, &again).map(|s| s.seqid), Ok(5));
    assert_eq!(st.lock_stateids(), 1);
}

#[test]
fn a_lock_stateid_belongs_to_its_client_and_file() {
    let st = State::new(Config::new(3), T0);
    let (a, bc) = (mount(&st, "a"), mount(&st, "b"));
    let osid = open(&st, a, 9, share::ACCESS_BOTH);
    let l = lock(&st, a, Ok(osid), "lo", 9, r(0, 0)).unwrap();
    assert_eq!(
        st.lock_stateid(bc, &l, &9, None).map(|_| ()),
        Err(Nfsstat4::BadStateid)
    );
    assert_eq!(
        st.lock_stateid(a, &l, &10, None).map(|_| ()),
        Err(Nfsstat4::BadStateid)
    );
    // An open stateid of another file, or of another client, cannot start a lock-owner.
    assert_eq!(
        st.lock_open(a, &osid, &b("x"), &10, false),
        Err(Nfsstat4::BadStateid)
    );
    assert_eq!(
        st.lock_open(bc, &osid, &b("x"), &9, false),
        Err(Nfsstat4::BadStateid)
    );
    assert_eq!(st.test_stateids(a, &[l]), [Nfsstat4::Ok]);
    assert_eq!(st.test_stateids(bc, &[l]), [Nfsstat4::BadStateid]);
}

#[test]
fn a_write_lock_needs_an_open_for_writing() {
    let st = State::new(Config::new(3), T0);
    let c = mount(&st, "a");
    let osid = open(&st, c, 9, share::ACCESS_READ);
    assert_eq!(
        st.lock_open(c, &osid, &b("lo"), &9, true),
        Err(Nfsstat4::Openmode)
    );
    assert!(st.lock_open(c, &osid, &b("lo"), &9, false).is_ok());
}

#[test]
fn close_and_free_stateid_wait_for_the_locks_to_go() {
    let st = State::new(Config::new(3), T0);
    let c = mount(&st, "a");
    let osid = open(&st, c, 9, share::ACCESS_BOTH);
    let l = lock(&st, c, Ok(osid), "lo", 9, r(0, 9)).unwrap();
    assert_eq!(st.close(c, &osid).map(|_| ()), Err(Nfsstat4::LocksHeld));
    assert_eq!(st.free_stateid(c, &l), Err(Nfsstat4::LocksHeld));
    // I/O through the lock stateid is I/O through its open.
    assert!(st.check_io(c, &l, &9, true).is_ok());
    assert_eq!(st.check_io(c, &l, &8, true), Err(Nfsstat4::BadStateid));
    st.lock_manager().unlock(
        locks::FileKey { export: 0, file: 9 },
        &locks::Owner::nfs4(c, b("lo")),
        Range::WHOLE,
        T0,
    );
    assert_eq!(st.free_stateid(c, &l), Ok(()));
    assert_eq!(st.test_stateids(c, &[l]), [Nfsstat4::BadStateid]);
    let l2 = lock(&st, c, Ok(osid), "lo2", 9, r(0, 9)).unwrap();
    st.lock_manager().unlock(
        locks::FileKey { export: 0, file: 9 },
        &locks::Owner::nfs4(c, b("lo2")),
        Range::WHOLE,
        T0,
    );
    assert!(st.close(c, &osid).is_ok());
    assert_eq!(
        st.test_stateids(c, &[l2]),
        [Nfsstat4::BadStateid],
        "gone with its open"
    );
    assert_eq!(st.lock_stateids(), 0);
}

#[test]
fn locks_die_with_the_lease() {
    let st = State::new(Config::new(3), T0);
    let (a, (bc, session)) = (mount(&st, "a"), mount_session(&st, "b"));
    let oa = open(&st, a, 9, share::ACCESS_BOTH);
    lock(&st, a, Ok(oa), "lo", 9, r(0, 9)).unwrap();
    let ob = open(&st, bc, 9, share::ACCESS_BOTH);
    assert_eq!(
        lock(&st, bc, Ok(ob), "lo", 9, r(5, 5)),
        Err(Nfsstat4::Denied)
    );
    // Only `a` stops renewing.
    let later = T0 + st.lease();
    let renew = SequenceArgs {
        sa_sessionid: session,
        sa_sequenceid: 1,
        sa_slotid: 0,
        sa_highest_slotid: 0,
        sa_cachethis: false,
    };
    st.sequence(&renew, later - Duration::from_secs(1)).unwrap();
    let gone = st.expire(later);
    assert_eq!(gone.len(), 1);
    assert_eq!((gone[0].client, gone[0].locks), (a, 1));
    assert!(lock(&st, bc, Ok(ob), "lo", 9, r(5, 5)).is_ok());
    assert_eq!(st.lock_manager().counts().0, 1);
}

#[test]
fn an_expired_client_keeps_its_locks_only_until_they_are_in_the_way() {
    let st = State::new(Config::new(3), T0);
    let (a, bc) = (mount(&st, "a"), mount(&st, "b"));
    let oa = open(&st, a, 9, share::ACCESS_BOTH);
    lock(&st, a, Ok(oa), "lo", 9, r(0, 9)).unwrap();
    let later = T0 + st.lease();
    assert!(!st.expire_client(bc, T0), "a live client is not expired");
    assert!(st.expire_client(a, later));
    assert_eq!(st.lock_manager().counts().0, 0);
}

#[test]
fn lock_reclaims_only_in_grace_and_new_locks_only_after_it() {
    let mut config = Config::new(4);
    config.previous_owners = vec![b("old")];
    let st: State<File> = State::new(config, T0);
    let e = st.exchange_id(&b("old"), [1; 8], 0, ROOT, T0).unwrap();
    let args = CreateSessionArgs {
        csa_clientid: e.clientid,
        csa_sequence: e.sequenceid,
        csa_flags: 0,
        csa_fore_chan_attrs: channel(),
        csa_back_chan_attrs: channel(),
        csa_cb_program: 0x4000_0000,
        csa_sec_parms: CallbackSecList::default(),
    };
    st.create_session(&args, ROOT, T0).unwrap();
    let c = e.clientid;
    assert_eq!(st.check_lock_grace(c, true, T0), Ok(()));
    assert_eq!(st.check_lock_grace(c, false, T0), Err(Nfsstat4::Grace));
    st.reclaim_complete(c).unwrap();
    assert_eq!(st.check_lock_grace(c, true, T0), Err(Nfsstat4::NoGrace));
    assert_eq!(st.check_lock_grace(c, false, T0), Ok(()));
}
