//! What one call of the lock manager costs in the common cases, as a measurement (ignored
//! by default): `cargo test -p granary-locks --release --test cost -- --ignored
//! --nocapture`. Each line is the median over [`RUNS`] runs of wall-clock nanoseconds per
//! operation; on a shared machine compare two builds by running their binaries in turn.
//!
//! - `alone`: an owner locks and unlocks one byte of a file nobody else locks (the owner
//!   holds nothing between the pairs, so the manager forgets it each time).
//! - `beside-10`: the same beside 10 one-byte locks of 10 other owners on the file.
//! - `keeps-one`: an owner that keeps one lock on the file locks and unlocks another byte.
//! - `disjoint-N`: one owner takes N one-byte locks at every other byte of a file, then
//!   unlocks them one by one: per lock+unlock pair (a database locking records).
//! - `owners-N`: N owners each lock one byte of a file and unlock it (N NLM processes).
//! - `test-10`: a refused test (LOCKT, NLM TEST) beside the 10 locks.

use std::time::{Duration, Instant};

use bytes::Bytes;
use granary_locks::{FileKey, Kind, LockManager, Owner, Range, Request, Wait};

const F: FileKey = FileKey {
    export: 1,
    file: 42,
};
const NOW: Duration = Duration::from_secs(100);
/// Runs of each case; the median is printed.
const RUNS: usize = 7;

fn owner(i: u64) -> Owner {
    Owner::nfs4(i % 64, Bytes::copy_from_slice(&i.to_be_bytes()))
}

fn byte(at: u64) -> Range {
    Range::new(at, at).expect("a range")
}

fn lock(lm: &LockManager, o: &Owner, at: u64) {
    let req = Request {
        file: F,
        owner: o.clone(),
        kind: Kind::Write,
        range: byte(at),
        wait: Wait::No,
    };
    lm.lock(&req, NOW).expect("a free byte");
}

/// Median ns per op of `f`, which does `ops` operations on a fresh manager from `setup`.
fn measure(ops: u64, setup: impl Fn() -> LockManager, f: impl Fn(&LockManager)) -> u128 {
    let mut ns: Vec<u128> = (0..RUNS)
        .map(|_| {
            let lm = setup();
            let t = Instant::now();
            f(&lm);
            t.elapsed().as_nanos() / u128::from(ops)
        })
        .collect();
    ns.sort_unstable();
    ns[RUNS / 2]
}

fn beside(n: u64) -> LockManager {
    let lm = LockManager::default();
    for i in 0..n {
        lock(&lm, &owner(1000 + i), 2 * i);
    }
    lm
}

#[test]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
fn per_call() {
    let me = owner(7);
    let pairs = 100_000u64;
    let pair = |lm: &LockManager| {
        for i in 0..pairs {
            let at = 1_000_001 + 2 * (i % 8);
            lock(lm, &me, at);
            lm.unlock(F, &me, byte(at), NOW);
        }
    };
    println!("case ns/op");
    println!("alone {}", measure(pairs, LockManager::default, pair));
    println!("beside-10 {}", measure(pairs, || beside(10), pair));
    let keeps = || {
        let lm = LockManager::default();
        lock(&lm, &me, 0);
        lm
    };
    println!("keeps-one {}", measure(pairs, keeps, pair));
    for n in [1_000u64, 10_000] {
        let disjoint = |lm: &LockManager| {
            for i in 0..n {
                lock(lm, &me, 2 * i);
            }
            for i in 0..n {
                lm.unlock(F, &me, byte(2 * i), NOW);
            }
        };
        println!(
            "disjoint-{n} {}",
            measure(n, LockManager::default, disjoint)
        );
        let owners: Vec<Owner> = (0..n).map(owner).collect();
        let many = |lm: &LockManager| {
            for (i, o) in (0..).zip(&owners) {
                lock(lm, o, 2 * i);
            }
            for (i, o) in (0..).zip(&owners) {
                lm.unlock(F, o, byte(2 * i), NOW);
            }
        };
        println!("owners-{n} {}", measure(n, LockManager::default, many));
    }
    let tests = |lm: &LockManager| {
        for i in 0..pairs {
            let at = 2 * (i % 10);
            assert!(lm.test(F, &me, Kind::Read, byte(at)).is_some());
        }
    };
    println!("test-10 {}", measure(pairs, || beside(10), tests));
}
