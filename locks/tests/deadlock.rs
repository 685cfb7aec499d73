//! Deadlock detection: a waiting request that would close a cycle of owners waiting for
//! each other is refused with `LockError::Deadlock` (NLM4_DEADLCK, NFS4ERR_DEADLOCK),
//! across files and protocols, and one that would not waits as before. The last test
//! checks the manager against a wait-for graph built from its public state under
//! random blocking sequences: a request is refused as a deadlock exactly when waiting
//! would close a cycle through its owner.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use granary_locks::limits::MAX_DEADLOCK_SEARCH_STEPS;
use granary_locks::{FileKey, Kind, LockError, LockManager, Owner, Range, Request, Wait};
use proptest::prelude::*;

const NOW: Duration = Duration::from_secs(100);

fn file(n: u64) -> FileKey {
    FileKey { export: 1, file: n }
}

fn v4(client: u64, owner: &'static str) -> Owner {
    Owner::nfs4(client, Bytes::from_static(owner.as_bytes()))
}

fn nlm(host: &'static str, svid: u32) -> Owner {
    Owner::nlm(Bytes::from_static(host.as_bytes()), svid, b"oh")
}

fn r(s: u64, e: u64) -> Range {
    Range::new(s, e).expect("a range")
}

fn poll() -> Wait {
    Wait::Poll {
        deadline: NOW + Duration::from_secs(45),
    }
}

fn ask(lm: &LockManager, f: FileKey, o: &Owner, k: Kind, range: Range, wait: Wait) -> LockError {
    let req = Request {
        file: f,
        owner: o.clone(),
        kind: k,
        range,
        wait,
    };
    match lm.lock(&req, NOW) {
        Ok(_) => panic!("{o:?} was granted {range:?} on {f:?}"),
        Err(e) => e,
    }
}

fn take(lm: &LockManager, f: FileKey, o: &Owner, range: Range) {
    let req = Request {
        file: f,
        owner: o.clone(),
        kind: Kind::Write,
        range,
        wait: Wait::No,
    };
    lm.lock(&req, NOW).expect("a free range");
}

fn queued(e: &LockError) -> bool {
    matches!(
        e,
        LockError::Denied {
            queued: Some(_),
            ..
        }
    )
}

fn deadlock_with(e: &LockError) -> &Owner {
    match e {
        LockError::Deadlock { conflict } => &conflict.owner,
        other => panic!("expected a deadlock, got {other:?}"),
    }
}

#[test]
fn two_nlm_owners_on_two_files() {
    let lm = LockManager::default();
    let (a, b) = (nlm("alpha", 1), nlm("beta", 2));
    take(&lm, file(1), &a, r(0, 9));
    take(&lm, file(2), &b, r(0, 9));
    assert!(queued(&ask(
        &lm,
        file(2),
        &a,
        Kind::Write,
        r(0, 0),
        Wait::Grant
    )));
    let e = ask(&lm, file(1), &b, Kind::Write, r(5, 5), Wait::Grant);
    assert_eq!(deadlock_with(&e), &a, "the lock in the way is a's");
    assert_eq!(
        lm.waiting(file(1), &b),
        None,
        "a refused request does not wait"
    );
    assert_eq!(lm.metrics().nlm.deadlocks, 1);
    // b's F_SETLK (no wait) is an ordinary denial: nothing waits, nothing deadlocks.
    assert!(matches!(
        ask(&lm, file(1), &b, Kind::Write, r(5, 5), Wait::No),
        LockError::Denied { queued: None, .. }
    ));
    // When b lets go, a's waiting request is granted, as before.
    let wakes = lm.unlock(file(2), &b, Range::WHOLE, NOW);
    assert_eq!(wakes.len(), 1);
    assert!(wakes[0].granted);
    assert_eq!(lm.locks_of(file(2), &a), [(r(0, 0), Kind::Write)]);
}

#[test]
fn a_cycle_across_protocols_is_found_from_either_side() {
    // An NLM owner waits (GRANTED mode) for an NFSv4 owner's lock; the NFSv4 owner's
    // blocking (polling) request for the NLM owner's lock would close the cycle.
    let lm = LockManager::default();
    let (n, v) = (nlm("v3host", 7), v4(0x10, "proc"));
    take(&lm, file(1), &n, r(0, 0));
    take(&lm, file(2), &v, r(0, 0));
    assert!(queued(&ask(
        &lm,
        file(2),
        &n,
        Kind::Read,
        r(0, 0),
        Wait::Grant
    )));
    let e = ask(&lm, file(1), &v, Kind::Write, Range::WHOLE, poll());
    assert_eq!(deadlock_with(&e), &n);
    assert_eq!(lm.metrics().nfs4.deadlocks, 1);
    assert_eq!(lm.metrics().nlm.deadlocks, 0);

    // The other way round: the NFSv4 owner waits first, the NLM request is refused.
    let lm = LockManager::default();
    take(&lm, file(1), &n, r(0, 0));
    take(&lm, file(2), &v, r(0, 0));
    assert!(queued(&ask(&lm, file(1), &v, Kind::Write, r(0, 0), poll())));
    let e = ask(&lm, file(2), &n, Kind::Write, r(0, 0), Wait::Grant);
    assert_eq!(deadlock_with(&e), &v);
    assert_eq!(lm.metrics().nlm.deadlocks, 1);
}

#[test]
fn a_cycle_on_one_file() {
    let lm = LockManager::default();
    let (a, b) = (v4(1, "a"), v4(2, "b"));
    take(&lm, file(1), &a, r(0, 0));
    take(&lm, file(1), &b, r(1, 1));
    assert!(queued(&ask(&lm, file(1), &a, Kind::Write, r(1, 1), poll())));
    let e = ask(&lm, file(1), &b, Kind::Read, r(0, 0), poll());
    assert_eq!(deadlock_with(&e), &a);
}

#[test]
fn a_longer_chain_and_one_that_is_not_a_cycle() {
    let lm = LockManager::default();
    let o = [nlm("h", 1), v4(2, "b"), nlm("h", 3), v4(4, "d")];
    for (i, x) in o.iter().enumerate() {
        take(&lm, file(i as u64), x, r(0, 0));
    }
    // o0 waits for o1, o1 for o2, o2 for o3.
    for (i, x) in o.iter().take(3).enumerate() {
        let w = if i % 2 == 0 { Wait::Grant } else { poll() };
        assert!(queued(&ask(
            &lm,
            file(i as u64 + 1),
            x,
            Kind::Write,
            r(0, 0),
            w
        )));
    }
    // o3 asking for o1's file waits for o1, which waits (via o2) for o3: a cycle.
    let e = ask(&lm, file(1), &o[3], Kind::Write, r(0, 0), Wait::Grant);
    assert_eq!(deadlock_with(&e), &o[1]);
    // A fifth owner waiting for o0 closes nothing: it waits.
    let e = v4(5, "e");
    assert!(queued(&ask(
        &lm,
        file(0),
        &e,
        Kind::Write,
        r(0, 0),
        Wait::Grant
    )));
}

#[test]
fn waiting_in_a_queue_counts_as_waiting_for_the_waiter_ahead() {
    // a holds file 1 byte 0, b waits for it. c holds file 2 byte 0 and a waits for it.
    // c's request for bytes 0-9 of file 1 overlaps b's request, not a's lock; the queue
    // holds c back behind b, and b waits for a, which waits for c: a cycle.
    let lm = LockManager::default();
    let (a, b, c) = (nlm("a", 1), nlm("b", 1), v4(3, "c"));
    take(&lm, file(1), &a, r(0, 0));
    take(&lm, file(2), &c, r(0, 0));
    assert!(queued(&ask(
        &lm,
        file(1),
        &b,
        Kind::Write,
        r(0, 9),
        Wait::Grant
    )));
    assert!(queued(&ask(
        &lm,
        file(2),
        &a,
        Kind::Write,
        r(0, 0),
        Wait::Grant
    )));
    let e = ask(&lm, file(1), &c, Kind::Write, r(5, 9), poll());
    assert_eq!(
        deadlock_with(&e),
        &b,
        "the waiter ahead is what is in the way"
    );
}

#[test]
fn a_waiter_that_asks_again_into_a_cycle_leaves_the_queue_and_frees_those_behind() {
    let lm = LockManager::default();
    let (a, b, c) = (v4(1, "a"), v4(2, "b"), v4(3, "c"));
    take(&lm, file(1), &a, r(0, 0));
    take(&lm, file(2), &b, r(0, 0));
    // b waits for byte 5 of file 1 (nobody holds it: a poll waiter is told at once, and
    // keeps its place); c behind b, for the same byte, waits for b.
    take(&lm, file(1), &c, r(5, 5));
    assert!(queued(&ask(&lm, file(1), &b, Kind::Write, r(5, 5), poll())));
    lm.unlock(file(1), &c, Range::WHOLE, NOW);
    assert!(queued(&ask(
        &lm,
        file(1),
        &c,
        Kind::Write,
        r(5, 5),
        Wait::Grant
    )));
    assert!(queued(&ask(&lm, file(2), &a, Kind::Write, r(0, 0), poll())));
    // b asks again for a's byte instead: it would wait for a, which waits for b.
    let e = ask(&lm, file(1), &b, Kind::Write, r(0, 5), poll());
    assert_eq!(deadlock_with(&e), &a);
    assert_eq!(lm.waiting(file(1), &b), None, "b left the queue");
    assert_eq!(
        lm.locks_of(file(1), &c),
        [(r(5, 5), Kind::Write)],
        "c, held back by b alone, was granted when b left"
    );
}

#[test]
fn an_expired_poll_waiter_waits_for_nobody() {
    let lm = LockManager::default();
    let (a, b) = (v4(1, "a"), v4(2, "b"));
    take(&lm, file(1), &a, r(0, 0));
    take(&lm, file(2), &b, r(0, 0));
    let soon = Wait::Poll {
        deadline: NOW + Duration::from_secs(1),
    };
    assert!(queued(&ask(&lm, file(2), &a, Kind::Write, r(0, 0), soon)));
    let later = NOW + Duration::from_secs(2);
    let req = Request {
        file: file(1),
        owner: b.clone(),
        kind: Kind::Write,
        range: r(0, 0),
        wait: Wait::Grant,
    };
    assert!(matches!(
        lm.lock(&req, later),
        Err(LockError::Denied {
            queued: Some(_),
            ..
        })
    ));
}

#[test]
fn the_search_is_bounded() {
    // A chain of owners each waiting for the next, longer than the search may follow:
    // closing it is not reported (the request waits), one short enough is.
    let n = MAX_DEADLOCK_SEARCH_STEPS as u64 + 8;
    let lm = LockManager::default();
    let owner = |i: u64| Owner::nfs4(i, Bytes::from_static(b"o"));
    for i in 0..n {
        take(&lm, file(i), &owner(i), r(0, 0));
    }
    for i in 0..n - 1 {
        assert!(queued(&ask(
            &lm,
            file(i + 1),
            &owner(i),
            Kind::Write,
            r(0, 0),
            Wait::Grant
        )));
    }
    let last = owner(n - 1);
    assert!(
        queued(&ask(&lm, file(0), &last, Kind::Write, r(0, 0), Wait::Grant)),
        "a cycle of {n} owners is past the bound"
    );
    lm.cancel(file(0), &last, NOW);
    let near = n - 16;
    assert!(matches!(
        ask(&lm, file(near), &last, Kind::Write, r(0, 0), Wait::Grant),
        LockError::Deadlock { .. }
    ));
}

// ---- against a wait-for graph built from the manager's public state ----

const OWNERS: usize = 4;
const FILES: u64 = 2;
const CELLS: u64 = 8;

fn owners() -> [Owner; OWNERS] {
    [nlm("x", 1), nlm("x", 2), v4(1, "p"), v4(2, "q")]
}

fn conflicts(a: Kind, b: Kind) -> bool {
    a == Kind::Write || b == Kind::Write
}

/// Edges of the wait-for graph: owner → owners it waits for, from the files' locks and
/// queues; `extra` adds a request about to wait (in place of the owner's own on that
/// file, at its place in the queue, or at the end).
fn graph(lm: &LockManager, extra: Option<&Request>) -> BTreeMap<usize, BTreeSet<usize>> {
    let all = owners();
    let idx = |o: &Owner| all.iter().position(|x| x == o).expect("a known owner");
    let mut g: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for f in 0..FILES {
        let held: Vec<Vec<(Range, Kind)>> = all.iter().map(|o| lm.locks_of(file(f), o)).collect();
        let mut queue: Vec<(usize, Kind, Range)> = lm
            .waiters(file(f))
            .iter()
            .map(|(o, k, rg)| (idx(o), *k, *rg))
            .collect();
        if let Some(q) = extra.filter(|q| q.file == file(f)) {
            let me = idx(&q.owner);
            match queue.iter().position(|w| w.0 == me) {
                Some(p) => queue[p] = (me, q.kind, q.range),
                None => queue.push((me, q.kind, q.range)),
            }
        }
        for (i, &(x, k, rg)) in queue.iter().enumerate() {
            let edges = g.entry(x).or_default();
            for (y, locks) in held.iter().enumerate() {
                if y != x
                    && locks
                        .iter()
                        .any(|(l, lk)| l.overlaps(rg) && conflicts(k, *lk))
                {
                    edges.insert(y);
                }
            }
            for &(y, yk, yr) in &queue[..i] {
                let x_in_ys_way = held[x]
                    .iter()
                    .any(|(l, lk)| l.overlaps(yr) && conflicts(*lk, yk));
                if y != x && yr.overlaps(rg) && conflicts(k, yk) && !x_in_ys_way {
                    edges.insert(y);
                }
            }
        }
    }
    g
}

/// Whether `me` waits, through the owners it waits for, for itself.
fn cycle_through(g: &BTreeMap<usize, BTreeSet<usize>>, me: usize) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<usize> = g.get(&me).into_iter().flatten().copied().collect();
    while let Some(o) = stack.pop() {
        if o == me {
            return true;
        }
        if seen.insert(o) {
            stack.extend(g.get(&o).into_iter().flatten().copied());
        }
    }
    false
}

#[derive(Debug, Clone)]
enum Op {
    Lock(usize, u64, Kind, Range, Wait),
    Unlock(usize, u64, Range),
    Cancel(usize, u64),
    Release(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let range = (0..CELLS, 0..CELLS).prop_map(|(a, b)| r(a.min(b), a.max(b)));
    let kind = prop_oneof![Just(Kind::Read), Just(Kind::Write)];
    let wait = prop_oneof![Just(Wait::No), Just(Wait::Grant), Just(poll())];
    prop_oneof![
        8 => (0..OWNERS, 0..FILES, kind, range.clone(), wait)
            .prop_map(|(o, f, k, rg, w)| Op::Lock(o, f, k, rg, w)),
        3 => (0..OWNERS, 0..FILES, range).prop_map(|(o, f, rg)| Op::Unlock(o, f, rg)),
        1 => (0..OWNERS, 0..FILES).prop_map(|(o, f)| Op::Cancel(o, f)),
        1 => (0..OWNERS).prop_map(Op::Release),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_request_is_refused_as_a_deadlock_exactly_when_it_would_close_a_cycle(
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let lm = LockManager::default();
        let all = owners();
        for op in ops {
            match op {
                Op::Lock(o, f, k, rg, w) => {
                    let req = Request { file: file(f), owner: all[o].clone(), kind: k, range: rg, wait: w };
                    let would = w != Wait::No && cycle_through(&graph(&lm, Some(&req)), o);
                    match lm.lock(&req, NOW) {
                        Err(LockError::Deadlock { conflict }) => {
                            prop_assert!(would, "a deadlock answered for {req:?} closes no cycle");
                            prop_assert!(conflict.owner != all[o]);
                            prop_assert_eq!(lm.waiting(file(f), &all[o]), None);
                        }
                        // Granted: nothing in its way, so it waits for nobody.
                        Ok(_) => {}
                        other => prop_assert!(!would, "{req:?} closes a cycle, answered {other:?}"),
                    }
                }
                Op::Unlock(o, f, rg) => {
                    lm.unlock(file(f), &all[o], rg, NOW);
                }
                Op::Cancel(o, f) => {
                    lm.cancel(file(f), &all[o], NOW);
                }
                Op::Release(o) => {
                    lm.release_owner(&all[o], NOW);
                }
            }
        }
    }
}
