//! The lock manager against a reference model that keeps, for every byte of a small
//! file, which owner holds it and how (the bytes past the 24th stand for one byte: the
//! generated ranges either reach to the end of the file or stop before it), under random
//! lock, unlock, test and release sequences. After every step each owner's locks must be
//! the model's runs, merged, and every refusal must name a lock the model holds.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use granary_locks::{
    Client, Conflict, FileKey, Kind, LockError, LockManager, Owner, Protocol, Range, Request, Wait,
};
use proptest::prelude::*;

const CELLS: usize = 25;
const TAIL: usize = CELLS - 1;
const FILES: usize = 2;

fn owners() -> Vec<Owner> {
    vec![
        Owner::nfs4(1, Bytes::from_static(b"a")),
        Owner::nfs4(1, Bytes::from_static(b"b")),
        Owner::nfs4(2, Bytes::from_static(b"a")),
        Owner::nlm(Bytes::from_static(b"host"), 7, b"oh"),
    ]
}

fn file(i: usize) -> FileKey {
    FileKey {
        export: 1,
        file: i as u64,
    }
}

#[derive(Debug, Clone)]
enum Op {
    Lock(usize, usize, Kind, Range),
    Unlock(usize, usize, Range),
    Test(usize, usize, Kind, Range),
    ReleaseOwner(usize),
    ReleaseClient(usize),
    ReleaseOwnerFile(usize, usize),
}

fn range() -> impl Strategy<Value = Range> {
    (0..CELLS as u64, 0..CELLS as u64).prop_map(|(a, b)| {
        let (s, e) = (a.min(b), a.max(b));
        if e as usize == TAIL {
            Range::from(s)
        } else {
            Range::new(s, e).unwrap_or(Range::WHOLE)
        }
    })
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Read), Just(Kind::Write)]
}

fn op() -> impl Strategy<Value = Op> {
    let o = 0..4usize;
    let f = 0..FILES;
    prop_oneof![
        6 => (o.clone(), f.clone(), kind(), range()).prop_map(|(o, f, k, r)| Op::Lock(o, f, k, r)),
        3 => (o.clone(), f.clone(), range()).prop_map(|(o, f, r)| Op::Unlock(o, f, r)),
        2 => (o.clone(), f.clone(), kind(), range()).prop_map(|(o, f, k, r)| Op::Test(o, f, k, r)),
        1 => o.clone().prop_map(Op::ReleaseOwner),
        1 => (0..3usize).prop_map(Op::ReleaseClient),
        1 => (o, f).prop_map(|(o, f)| Op::ReleaseOwnerFile(o, f)),
    ]
}

/// Per file, per cell: owner index → kind.
type Model = Vec<Vec<BTreeMap<usize, Kind>>>;

fn cells(r: Range) -> std::ops::RangeInclusive<usize> {
    let s = usize::try_from(r.start()).unwrap_or(TAIL);
    let e = if r.to_end() {
        TAIL
    } else {
        usize::try_from(r.end()).unwrap_or(TAIL)
    };
    s..=e
}

fn cell_range(s: usize, e: usize) -> Range {
    if e == TAIL {
        Range::from(s as u64)
    } else {
        Range::new(s as u64, e as u64).unwrap_or(Range::WHOLE)
    }
}

/// The model's locks of `o` on `f`, as merged runs.
fn runs(m: &Model, f: usize, o: usize) -> Vec<(Range, Kind)> {
    let mut out: Vec<(usize, usize, Kind)> = Vec::new();
    for (c, holders) in m[f].iter().enumerate() {
        if let Some(&k) = holders.get(&o) {
            match out.last_mut() {
                Some(last) if last.1 + 1 == c && last.2 == k => last.1 = c,
                _ => out.push((c, c, k)),
            }
        }
    }
    out.into_iter()
        .map(|(s, e, k)| (cell_range(s, e), k))
        .collect()
}

fn in_the_way(m: &Model, f: usize, o: usize, k: Kind, r: Range) -> bool {
    cells(r).any(|c| {
        m[f][c]
            .iter()
            .any(|(&h, &hk)| h != o && (k == Kind::Write || hk == Kind::Write))
    })
}

/// A reported conflict is a whole run of another owner, in the way of the request.
fn check_conflict(m: &Model, f: usize, o: usize, k: Kind, r: Range, c: &Conflict) {
    let all = owners();
    let h = all
        .iter()
        .position(|x| *x == c.owner)
        .expect("a known owner");
    assert_ne!(h, o, "an owner is never in its own way");
    assert!(k == Kind::Write || c.kind == Kind::Write);
    assert!(c.range.overlaps(r));
    assert!(
        runs(m, f, h).contains(&(c.range, c.kind)),
        "{c:?} is not one of the holder's locks {:?}",
        runs(m, f, h)
    );
}

fn check_all(lm: &LockManager, m: &Model) {
    let all = owners();
    let mut held = [0u64; 2];
    for f in 0..FILES {
        for (i, o) in all.iter().enumerate() {
            let want = runs(m, f, i);
            assert_eq!(lm.locks_of(file(f), o), want, "owner {i} file {f}");
            held[usize::from(o.protocol() == Protocol::Nlm)] += want.len() as u64;
        }
    }
    let met = lm.metrics();
    assert_eq!([met.nfs4.held, met.nlm.held], held);
    let (locks, waiters, _) = lm.counts();
    assert_eq!(locks as u64, held[0] + held[1]);
    assert_eq!(waiters, 0);
}

fn clients() -> Vec<Client> {
    vec![
        Client::nfs4(1),
        Client::nfs4(2),
        Client::nlm(Bytes::from_static(b"host")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn matches_the_byte_model(ops in proptest::collection::vec(op(), 1..80)) {
        let lm = LockManager::default();
        let all = owners();
        let mut m: Model = vec![vec![BTreeMap::new(); CELLS]; FILES];
        let now = Duration::from_secs(1);
        for op in ops {
            match op {
                Op::Lock(o, f, k, r) => {
                    let req = Request { file: file(f), owner: all[o].clone(), kind: k, range: r, wait: Wait::No };
                    let got = lm.lock(&req, now);
                    if in_the_way(&m, f, o, k, r) {
                        match got {
                            Err(LockError::Denied { conflict, queued: None }) => {
                                check_conflict(&m, f, o, k, r, &conflict);
                            }
                            other => panic!("expected a denial, got {other:?}"),
                        }
                    } else {
                        prop_assert_eq!(got.map(|g| g.wakes.len()), Ok(0));
                        for c in cells(r) {
                            m[f][c].insert(o, k);
                        }
                    }
                }
                Op::Unlock(o, f, r) => {
                    prop_assert!(lm.unlock(file(f), &all[o], r, now).is_empty());
                    for c in cells(r) {
                        m[f][c].remove(&o);
                    }
                }
                Op::Test(o, f, k, r) => {
                    let got = lm.test(file(f), &all[o], k, r);
                    prop_assert_eq!(got.is_some(), in_the_way(&m, f, o, k, r));
                    if let Some(c) = got {
                        check_conflict(&m, f, o, k, r, &c);
                    }
                }
                Op::ReleaseOwner(o) => {
                    let want: usize = (0..FILES).map(|f| runs(&m, f, o).len()).sum();
                    prop_assert_eq!(lm.release_owner(&all[o], now).locks, want);
                    for f in &mut m {
                        for c in f.iter_mut() {
                            c.remove(&o);
                        }
                    }
                }
                Op::ReleaseOwnerFile(o, f) => {
                    let want = runs(&m, f, o).len();
                    prop_assert_eq!(lm.release_owner_file(file(f), &all[o], now).locks, want);
                    for c in &mut m[f] {
                        c.remove(&o);
                    }
                }
                Op::ReleaseClient(ci) => {
                    let client = &clients()[ci];
                    let mine: Vec<usize> = (0..all.len()).filter(|&i| all[i].client == *client).collect();
                    let want: usize = mine.iter().map(|&o| (0..FILES).map(|f| runs(&m, f, o).len()).sum::<usize>()).sum();
                    prop_assert_eq!(lm.release_client(client, now).locks, want);
                    for f in &mut m {
                        for c in f.iter_mut() {
                            c.retain(|o, _| !mine.contains(o));
                        }
                    }
                }
            }
            check_all(&lm, &m);
        }
    }
}
