//! The lock manager's promises one by one: POSIX split, merge, upgrade and downgrade;
//! conflicts across protocols; fair queues of waiters in both delivery modes; bulk
//! release; bounds; metrics.

use std::time::Duration;

use bytes::Bytes;
use granary_locks::{
    Client, Conflict, FileKey, Kind, LimitReason, Limits, LockError, LockManager, Owner, Protocol,
    Range, Request, Wait, Wake,
};

const F: FileKey = FileKey {
    export: 1,
    file: 42,
};
const G: FileKey = FileKey {
    export: 1,
    file: 43,
};
const NOW: Duration = Duration::from_secs(100);

fn v4(client: u64, owner: &'static str) -> Owner {
    Owner::nfs4(client, Bytes::from_static(owner.as_bytes()))
}

fn nlm(host: &'static str, svid: u32) -> Owner {
    Owner::nlm(Bytes::from_static(host.as_bytes()), svid, b"oh")
}

fn r(s: u64, e: u64) -> Range {
    Range::new(s, e).expect("a range")
}

fn req(file: FileKey, owner: &Owner, kind: Kind, range: Range, wait: Wait) -> Request {
    Request {
        file,
        owner: owner.clone(),
        kind,
        range,
        wait,
    }
}

fn lock(lm: &LockManager, o: &Owner, k: Kind, range: Range) -> Result<Vec<Wake>, LockError> {
    lm.lock(&req(F, o, k, range, Wait::No), NOW)
        .map(|g| g.wakes)
}

fn denied(e: Result<Vec<Wake>, LockError>) -> Conflict {
    match e {
        Err(LockError::Denied { conflict, .. }) => conflict,
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[test]
fn an_owners_ranges_split_merge_upgrade_and_downgrade() {
    let lm = LockManager::default();
    let a = v4(1, "a");
    lock(&lm, &a, Kind::Read, r(0, 9)).unwrap();
    lock(&lm, &a, Kind::Read, r(10, 19)).unwrap();
    assert_eq!(
        lm.locks_of(F, &a),
        [(r(0, 19), Kind::Read)],
        "adjacent locks merge"
    );
    lock(&lm, &a, Kind::Write, r(5, 9)).unwrap();
    assert_eq!(
        lm.locks_of(F, &a),
        [
            (r(0, 4), Kind::Read),
            (r(5, 9), Kind::Write),
            (r(10, 19), Kind::Read)
        ],
        "an upgrade of the middle splits the range"
    );
    lm.unlock(F, &a, r(7, 12), NOW);
    assert_eq!(
        lm.locks_of(F, &a),
        [
            (r(0, 4), Kind::Read),
            (r(5, 6), Kind::Write),
            (r(13, 19), Kind::Read)
        ]
    );
    lock(&lm, &a, Kind::Read, Range::from(3)).unwrap();
    assert_eq!(
        lm.locks_of(F, &a),
        [(Range::from(0), Kind::Read)],
        "a downgrade merges"
    );
    assert_eq!(lm.metrics().nfs4.held, 1);
}

#[test]
fn a_conflict_names_the_whole_lock_in_the_way_across_protocols() {
    let lm = LockManager::default();
    let (a, b) = (v4(1, "a"), nlm("mac", 7));
    lock(&lm, &a, Kind::Write, r(100, 199)).unwrap();
    lock(&lm, &a, Kind::Read, r(200, 299)).unwrap();
    let c = denied(lock(&lm, &b, Kind::Read, r(150, 150)));
    assert_eq!(
        c,
        Conflict {
            owner: a.clone(),
            kind: Kind::Write,
            range: r(100, 199)
        }
    );
    lock(&lm, &b, Kind::Read, r(250, 260)).expect("readers share");
    let c = denied(lock(&lm, &b, Kind::Write, r(0, 1000)));
    assert_eq!(
        (c.owner, c.range),
        (a.clone(), r(100, 199)),
        "the first in the way"
    );
    assert_eq!(
        lm.test(F, &a, Kind::Write, r(255, 255)).map(|c| c.owner),
        Some(b.clone())
    );
    assert_eq!(lm.test(F, &a, Kind::Write, r(0, 99)), None);
    assert_eq!(
        lm.test(G, &b, Kind::Write, Range::WHOLE),
        None,
        "files are apart"
    );
    let m = lm.metrics();
    assert_eq!(
        (m.nfs4.held, m.nlm.held, m.nlm.denials, m.nlm.grants),
        (2, 1, 2, 1)
    );
}

#[test]
fn a_failed_upgrade_changes_nothing() {
    let lm = LockManager::default();
    let (a, b) = (v4(1, "a"), v4(2, "b"));
    lock(&lm, &a, Kind::Read, r(0, 99)).unwrap();
    lock(&lm, &b, Kind::Read, r(50, 59)).unwrap();
    denied(lock(&lm, &a, Kind::Write, r(0, 99)));
    assert_eq!(lm.locks_of(F, &a), [(r(0, 99), Kind::Read)]);
}

#[test]
fn the_last_byte_of_a_64_bit_file() {
    let lm = LockManager::default();
    let (a, b) = (v4(1, "a"), v4(2, "b"));
    lock(&lm, &a, Kind::Write, Range::from(u64::MAX)).unwrap();
    let c = denied(lock(&lm, &b, Kind::Read, Range::WHOLE));
    assert_eq!(c.range, Range::from(u64::MAX));
    lock(&lm, &b, Kind::Write, r(0, u64::MAX - 1)).expect("all but the last byte");
}

#[test]
fn grant_waiters_are_served_in_arrival_order() {
    let lm = LockManager::default();
    let (h, w1, w2, w3) = (v4(1, "h"), nlm("x", 1), nlm("x", 2), nlm("y", 3));
    lock(&lm, &h, Kind::Write, r(0, 99)).unwrap();
    let q = |o: &Owner, k| lm.lock(&req(F, o, k, r(0, 9), Wait::Grant), NOW);
    for (o, k) in [(&w1, Kind::Write), (&w2, Kind::Read), (&w3, Kind::Read)] {
        match q(o, k) {
            Err(LockError::Denied {
                queued: Some(_), ..
            }) => {}
            other => panic!("expected to be queued, got {other:?}"),
        }
    }
    assert_eq!(lm.counts().1, 3);
    assert_eq!(lm.metrics().nlm.waiters, 3);
    let woken = lm.unlock(F, &h, Range::WHOLE, NOW);
    assert_eq!(woken.len(), 1, "only the writer at the head: {woken:?}");
    assert!(woken[0].granted && woken[0].owner == w1);
    assert_eq!(lm.locks_of(F, &w1), [(r(0, 9), Kind::Write)]);
    let woken = lm.unlock(F, &w1, Range::WHOLE, NOW);
    let owners: Vec<_> = woken.iter().map(|w| w.owner.clone()).collect();
    assert_eq!(owners, [w2.clone(), w3.clone()], "both readers at once");
    assert_eq!(lm.counts().1, 0);
    assert_eq!(lm.metrics().nlm.grants, 3);
}

#[test]
fn a_newcomer_waits_behind_an_earlier_waiter() {
    let lm = LockManager::default();
    let (reader, writer, late) = (v4(1, "r"), v4(2, "w"), v4(3, "late"));
    lock(&lm, &reader, Kind::Read, r(0, 9)).unwrap();
    let poll = Wait::Poll {
        deadline: NOW + Duration::from_secs(90),
    };
    let first = lm.lock(&req(F, &writer, Kind::Write, r(0, 9), poll), NOW);
    assert!(matches!(
        first,
        Err(LockError::Denied {
            queued: Some(_),
            ..
        })
    ));
    // Another reader would share with the holder, but the writer asked first.
    let c = denied(lock(&lm, &late, Kind::Read, r(5, 5)));
    assert_eq!((c.owner, c.kind), (writer.clone(), Kind::Write));
    // A reader elsewhere is not held back.
    lock(&lm, &late, Kind::Read, r(10, 19)).unwrap();
    // The holder itself is not held back by the writer that waits for it.
    lock(&lm, &reader, Kind::Read, r(0, 19)).expect("the waiter waits for this owner");
    let woken = lm.unlock(F, &reader, r(0, 4), NOW);
    assert!(woken.is_empty(), "the reader still holds 5..=19");
    let woken = lm.unlock(F, &reader, Range::WHOLE, NOW);
    assert_eq!(woken.len(), 1);
    assert!(
        !woken[0].granted && woken[0].owner == writer,
        "a poll waiter is told"
    );
    assert!(lm.locks_of(F, &writer).is_empty());
    // Told, it keeps its place: a newcomer is held back until it asks again.
    denied(lock(&lm, &late, Kind::Read, r(0, 0)));
    let again = lm.lock(&req(F, &writer, Kind::Write, r(0, 9), poll), NOW);
    assert_eq!(again.map(|g| g.wakes), Ok(vec![]));
    assert_eq!(lm.locks_of(F, &writer), [(r(0, 9), Kind::Write)]);
    assert_eq!(lm.counts().1, 0);
}

#[test]
fn a_poll_waiter_that_stops_asking_loses_its_place() {
    let lm = LockManager::default();
    let (h, w, late) = (v4(1, "h"), v4(2, "w"), v4(3, "late"));
    lock(&lm, &h, Kind::Write, r(0, 9)).unwrap();
    let deadline = NOW + Duration::from_secs(90);
    let _ = lm.lock(
        &req(F, &w, Kind::Write, r(0, 9), Wait::Poll { deadline }),
        NOW,
    );
    // Asking again keeps the one place and moves the deadline on.
    let later = deadline + Duration::from_secs(10);
    let again = lm.lock(
        &req(F, &w, Kind::Write, r(0, 9), Wait::Poll { deadline: later }),
        NOW,
    );
    assert!(matches!(
        again,
        Err(LockError::Denied {
            queued: Some(_),
            ..
        })
    ));
    assert_eq!(lm.counts().1, 1);
    lm.unlock(F, &h, Range::WHOLE, NOW);
    denied(lock(&lm, &late, Kind::Write, r(0, 9)));
    assert!(lm.expire_waiters(deadline).is_empty());
    assert_eq!(lm.counts().1, 1, "not yet: the deadline moved");
    lm.expire_waiters(later);
    assert_eq!(lm.counts(), (0, 0, 0));
    lock(&lm, &late, Kind::Write, r(0, 9)).expect("nobody waits any more");
}

#[test]
fn an_expired_waiter_holds_nobody_back_even_before_the_timer() {
    let lm = LockManager::default();
    let (h, w, late) = (v4(1, "h"), v4(2, "w"), v4(3, "late"));
    lock(&lm, &h, Kind::Write, r(0, 9)).unwrap();
    let deadline = NOW + Duration::from_secs(1);
    let _ = lm.lock(
        &req(F, &w, Kind::Write, r(0, 9), Wait::Poll { deadline }),
        NOW,
    );
    lm.unlock(F, &h, Range::WHOLE, NOW);
    let late_req = req(F, &late, Kind::Write, r(0, 9), Wait::No);
    assert!(lm.lock(&late_req, deadline).is_ok());
}

#[test]
fn cancel_and_release_wake_the_next() {
    let lm = LockManager::default();
    let (h, w1, w2) = (nlm("a", 1), nlm("b", 1), nlm("c", 1));
    lock(&lm, &h, Kind::Write, Range::WHOLE).unwrap();
    let _ = lm.lock(&req(F, &w1, Kind::Write, r(0, 0), Wait::Grant), NOW);
    let _ = lm.lock(&req(F, &w2, Kind::Write, r(0, 0), Wait::Grant), NOW);
    assert_eq!(lm.cancel(F, &w1, NOW).waiters, 1);
    assert_eq!(lm.cancel(F, &w1, NOW).waiters, 0);
    let out = lm.release_client(&Client::nlm(Bytes::from_static(b"a")), NOW);
    assert_eq!(out.locks, 1);
    assert_eq!(out.wakes.len(), 1);
    assert!(out.wakes[0].granted && out.wakes[0].owner == w2);
    assert!(lm.holds_locks(F, &w2));
}

#[test]
fn release_client_frees_every_file_of_every_owner() {
    let lm = LockManager::default();
    let (a, b, other) = (v4(9, "a"), v4(9, "b"), v4(10, "a"));
    for (o, f) in [(&a, F), (&a, G), (&b, F), (&other, G)] {
        lm.lock(&req(f, o, Kind::Read, r(0, 0), Wait::No), NOW)
            .unwrap();
    }
    let _ = lm.lock(&req(G, &a, Kind::Write, r(5, 5), Wait::No), NOW);
    let _ = lm.lock(
        &req(
            G,
            &b,
            Kind::Write,
            r(0, 0),
            Wait::Poll { deadline: NOW * 2 },
        ),
        NOW,
    );
    assert_eq!(lm.client_locks(&Client::nfs4(9)), 4);
    let out = lm.release_client(&Client::nfs4(9), NOW);
    assert_eq!((out.locks, out.waiters), (4, 1));
    assert_eq!(lm.counts(), (1, 0, 1));
    assert!(lm.holds_locks(G, &other) && !lm.holds_locks(F, &a));
}

#[test]
fn bounds_refuse_and_leave_locks_as_they_were() {
    let limits = Limits {
        max_locks: 6,
        max_locks_per_client: 4,
        max_waiters: 1,
        max_waiters_per_client: 1,
        max_entries_per_file: 100,
    };
    let lm = LockManager::new(limits);
    let (a, b) = (v4(1, "a"), v4(2, "b"));
    for i in 0..4 {
        lock(&lm, &a, Kind::Read, r(i * 10, i * 10)).unwrap();
    }
    assert_eq!(
        lock(&lm, &a, Kind::Read, r(100, 100)),
        Err(LockError::Limit(LimitReason::ClientLocks))
    );
    // Merging does not add a lock, so it passes; an upgrade that splits does not.
    lock(&lm, &a, Kind::Read, r(1, 1)).expect("merges into 0..=1");
    assert_eq!(
        lock(&lm, &a, Kind::Write, r(20, 20)).map(|_| ()),
        Ok(()),
        "a whole range changes kind without adding one"
    );
    assert_eq!(
        lock(&lm, &a, Kind::Write, r(0, 0)),
        Err(LockError::Limit(LimitReason::ClientLocks))
    );
    assert_eq!(
        lm.locks_of(F, &a),
        [
            (r(0, 1), Kind::Read),
            (r(10, 10), Kind::Read),
            (r(20, 20), Kind::Write),
            (r(30, 30), Kind::Read)
        ]
    );
    lock(&lm, &b, Kind::Read, r(50, 50)).unwrap();
    lock(&lm, &b, Kind::Read, r(52, 52)).unwrap();
    assert_eq!(
        lock(&lm, &b, Kind::Read, r(54, 54)),
        Err(LockError::Limit(LimitReason::TotalLocks))
    );
    // Unlocking the middle of a range is never refused.
    lm.unlock(F, &a, r(1, 1), NOW);
    lm.unlock(F, &a, r(0, 0), NOW);
    let w = |o: &Owner| lm.lock(&req(F, o, Kind::Write, r(20, 20), Wait::Grant), NOW);
    assert!(matches!(
        w(&b),
        Err(LockError::Denied {
            queued: Some(_),
            ..
        })
    ));
    assert!(matches!(
        w(&v4(3, "c")),
        Err(LockError::Denied { queued: None, .. })
    ));
    let m = lm.metrics();
    assert_eq!((m.nfs4.limited, m.nfs4.waiters), (3, 1));
    let long = Owner::nfs4(1, Bytes::from(vec![0; 2000]));
    assert_eq!(
        lock(&lm, &long, Kind::Read, r(0, 0)),
        Err(LockError::Limit(LimitReason::OwnerTooLong))
    );
}

#[test]
fn overlapping_shared_locks_are_bounded_per_file() {
    let limits = Limits {
        max_entries_per_file: 50,
        ..Limits::default()
    };
    let lm = LockManager::new(limits);
    // Owner i reads i..=100: piece j has j + 1 holders.
    let mut refused = None;
    for i in 0..20u64 {
        let o = Owner::nfs4(i, Bytes::from_static(b"o"));
        if let Err(e) = lock(&lm, &o, Kind::Read, r(i, 100)) {
            refused = Some((i, e));
            break;
        }
    }
    let (i, e) = refused.expect("the bound refuses one");
    assert_eq!(e, LockError::Limit(LimitReason::FileEntries));
    assert!(i > 5, "refused only once the map is big: {i}");
    assert_eq!(lm.counts().0, i as usize);
    assert_eq!(lm.metrics().get(Protocol::Nfs4).held, i);
}

/// Thousands of locks on one file: the cost of a lock/unlock pair and of a refused test
/// stays nearly flat as the count grows, where a list scanned in full per request (the
/// structure knfsd's and Ganesha's per-file lock lists are) grows with it. Run with
/// `--release -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
fn many_locks() {
    use std::time::Instant;
    println!("locks on the file | manager: lock+unlock, refused test | list: lock+unlock, refused test (ns)");
    for n in [10u64, 1_000, 10_000, 100_000] {
        let lm = LockManager::default();
        // n one-byte write locks of n owners at every other byte (no merging).
        let owners: Vec<Owner> = (0..n)
            .map(|i| Owner::nfs4(i % 1000, Bytes::copy_from_slice(&i.to_be_bytes())))
            .collect();
        let mut list = Vec::new();
        for (i, o) in owners.iter().enumerate() {
            let at = 2 * i as u64;
            lock(&lm, o, Kind::Write, r(at, at)).expect("disjoint");
            list.push((i as u64, at, at));
        }
        let me = v4(5000, "me");
        let rounds = (20_000_000 / n).clamp(200, 20_000);
        let place = |i: u64| 2 * ((i * 7919) % n);
        let t = Instant::now();
        for i in 0..rounds {
            let at = place(i) + 1;
            lock(&lm, &me, Kind::Write, r(at, at)).expect("a free byte");
            lm.unlock(F, &me, r(at, at), NOW);
        }
        let pair_ns = t.elapsed().as_nanos() / u128::from(rounds);
        let t = Instant::now();
        for i in 0..rounds {
            assert!(lm.test(F, &me, Kind::Read, r(place(i), place(i))).is_some());
        }
        let test_ns = t.elapsed().as_nanos() / u128::from(rounds);
        // The list: every request scans every lock of the file for a conflict.
        let conflict = |l: &Vec<(u64, u64, u64)>, s: u64, e: u64| {
            l.iter().any(|&(_, ls, le)| ls <= e && s <= le)
        };
        let t = Instant::now();
        for i in 0..rounds {
            let at = place(i) + 1;
            assert!(!conflict(&list, at, at));
            list.push((u64::MAX - 1, at, at));
            let pos = list.iter().rposition(|x| *x == (u64::MAX - 1, at, at));
            list.swap_remove(pos.expect("just pushed"));
        }
        let list_pair_ns = t.elapsed().as_nanos() / u128::from(rounds);
        let t = Instant::now();
        for i in 0..rounds {
            assert!(conflict(&list, place(i), place(i)));
        }
        let list_test_ns = t.elapsed().as_nanos() / u128::from(rounds);
        println!("{n:>7} | {pair_ns:>7} {test_ns:>7} | {list_pair_ns:>9} {list_test_ns:>9}");
    }
}

/// What another server must not be granted (`mirror`): every byte held, exclusive where
/// any holder writes, merged across owners and protocols, plus the ranges of waiters the
/// manager would grant on its own (NLM), and not those of waiters that ask again
/// (NFSv4); and the observer hears of each file that changed.
#[test]
fn the_mirror_merges_owners_and_keeps_grant_waiters_and_the_observer_hears_each_change() {
    use std::sync::{Arc, Mutex};
    struct Heard(Mutex<Vec<Option<FileKey>>>);
    impl granary_locks::Observer for Heard {
        fn changed(&self, file: Option<FileKey>) {
            self.0.lock().unwrap().push(file);
        }
    }
    let lm = LockManager::default();
    let heard = Arc::new(Heard(Mutex::new(Vec::new())));
    lm.set_observer(heard.clone());
    let (a, b, c) = (v4(1, "a"), v4(2, "b"), nlm("host", 7));
    lock(&lm, &a, Kind::Read, r(0, 9)).unwrap();
    lock(&lm, &b, Kind::Read, r(5, 14)).unwrap();
    lock(&lm, &c, Kind::Write, r(15, 19)).unwrap();
    lock(&lm, &a, Kind::Write, r(100, 109)).unwrap();
    assert_eq!(
        lm.mirror(F),
        [
            (r(0, 14), Kind::Read),
            (r(15, 19), Kind::Write),
            (r(100, 109), Kind::Write)
        ]
    );
    // An NFSv4 waiter (it asks again) is not mirrored; an NLM waiter (granted here on
    // its own) is, of its kind, over what it waits for.
    let poll = req(
        F,
        &b,
        Kind::Write,
        r(100, 120),
        Wait::Poll { deadline: NOW * 2 },
    );
    assert!(lm.lock(&poll, NOW).is_err());
    assert_eq!(lm.mirror(F).len(), 3);
    let d = nlm("other", 8);
    let grant = req(F, &d, Kind::Write, r(200, 210), Wait::Grant);
    lock(&lm, &a, Kind::Read, r(205, 205)).unwrap();
    assert!(lm.lock(&grant, NOW).is_err(), "waits behind a's read");
    assert_eq!(
        lm.mirror(F)[3..],
        [(r(200, 210), Kind::Write)],
        "the waiter's whole range, exclusive over a's read"
    );
    assert!(lm.mirror(G).is_empty());
    let before = heard.0.lock().unwrap().len();
    lm.unlock(F, &c, r(15, 19), NOW);
    lm.release_client(&Client::nfs4(1), NOW);
    let heard = heard.0.lock().unwrap();
    assert_eq!(heard[before..], [Some(F), None]);
    assert!(heard[..before].iter().all(|f| *f == Some(F)));
}
