//! Model checks of the wait queue under loom: every order (up to loom's preemption bound)
//! of a holder's unlock racing with blocking requests, each call's critical section and
//! the delivery of its wakes to the protocol's [`Waker`] after the mutex is released.
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom-sync \
//!     cargo test -p granary-locks --release --lib loom
//! ```
//!
//! What is checked:
//! - **No waiter is lost**: a blocking request racing with the unlock that frees its range
//!   is granted at once, or queued and then granted (NLM, [`Wait::Grant`]: a GRANTED wake
//!   reaches NLM's waker) or told (NFSv4, [`Wait::Poll`]: a wake reaches NFSv4's waker,
//!   and asking again takes the lock). Draining the holders one by one grants every
//!   request in the end.
//! - **No waiter is granted twice**: each request is granted once (at once, or by one
//!   wake), and no two holders ever hold conflicting locks.
//! - **FIFO as promised**: the state after the race is what some serial order of the
//!   calls gives under the queue's rule ([`reference`]: a request waits while a lock or an
//!   earlier waiter of an incompatible kind is in its way; an unlock grants the waiters
//!   in queue order that nothing held or queued ahead of them is in the way of), and the
//!   queued requests' numbers follow that order's arrivals.
//!
//! Each model keeps to three threads besides the main one; the whole set takes seconds.
//! The manager and the wakers are shared with std's `Arc` (the manager's API takes one);
//! what loom explores is the manager's mutex, its wakers' lock and the wakers' own mutex.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use loom::sync::Mutex;
use loom::thread;

use crate::{
    FileKey, Kind, LockError, LockManager, Owner, Protocol, Range, Request, Wait, WaiterId, Wake,
    Waker,
};

const F: FileKey = FileKey { export: 1, file: 7 };
const NOW: Duration = Duration::from_secs(10);
/// A poll waiter's deadline, far past anything the models do.
const LATER: Duration = Duration::from_secs(1000);

fn range() -> Range {
    Range::new(0, 9).expect("a range")
}

/// A waker that records what it is handed.
#[derive(Default)]
struct Log(Mutex<Vec<Wake>>);

impl Waker for Log {
    fn wake(&self, wakes: &[Wake]) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(wakes);
    }
}

impl Log {
    fn all(&self) -> Vec<Wake> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// A manager with both protocols' wakers registered.
fn manager() -> (Arc<LockManager>, Arc<Log>, Arc<Log>) {
    let lm = Arc::new(LockManager::default());
    let nlm = Arc::new(Log::default());
    let nfs4 = Arc::new(Log::default());
    lm.set_waker(Protocol::Nlm, nlm.clone());
    lm.set_waker(Protocol::Nfs4, nfs4.clone());
    (lm, nlm, nfs4)
}

fn holder() -> Owner {
    Owner::nfs4(1, Bytes::from_static(b"holder"))
}

fn requester(i: usize) -> Owner {
    Owner::nlm(Bytes::from_static(b"client"), 100 + i as u32, b"oh")
}

fn request(owner: Owner, kind: Kind, wait: Wait) -> Request {
    Request {
        file: F,
        owner,
        kind,
        range: range(),
        wait,
    }
}

fn builder(preemptions: usize) -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        b.preemption_bound = Some(preemptions);
    }
    b
}

fn compatible(a: Kind, b: Kind) -> bool {
    a == Kind::Read && b == Kind::Read
}

/// A step of a serial order: the holder's unlock, or requester `i`'s blocking lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Unlock,
    Lock(usize),
}

/// What a serial order leaves: which requests were granted at once, which hold the range
/// now, and the queue (requesters in arrival order; `queued_order` every request that was
/// queued, granted since or not).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    at_once: Vec<bool>,
    holds: Vec<bool>,
    queue: Vec<usize>,
    queued_order: Vec<usize>,
}

/// The queue's rule, written out for one range held by a writer that unlocks once: a
/// request waits while the writer holds, a granted request of an incompatible kind holds,
/// or an earlier waiter of an incompatible kind waits; the unlock walks the queue in order
/// and grants each waiter nothing granted or queued ahead of it is in the way of.
fn reference(kinds: &[Kind], order: &[Step]) -> Outcome {
    let n = kinds.len();
    let mut out = Outcome {
        at_once: vec![false; n],
        holds: vec![false; n],
        queue: Vec::new(),
        queued_order: Vec::new(),
    };
    let mut writer = true;
    let free = |holds: &[bool], ahead: &[usize], i: usize| {
        (0..n).all(|j| !holds[j] || compatible(kinds[i], kinds[j]))
            && ahead.iter().all(|&j| compatible(kinds[i], kinds[j]))
    };
    for step in order {
        match *step {
            Step::Lock(i) => {
                if !writer && free(&out.holds, &out.queue, i) {
                    out.holds[i] = true;
                    out.at_once[i] = true;
                } else {
                    out.queue.push(i);
                    out.queued_order.push(i);
                }
            }
            Step::Unlock => {
                writer = false;
                let mut left = Vec::new();
                for &i in &out.queue {
                    if free(&out.holds, &left, i) {
                        out.holds[i] = true;
                    } else {
                        left.push(i);
                    }
                }
                out.queue = left;
            }
        }
    }
    out
}

/// Every order of the unlock and `n` locks.
fn orders(n: usize) -> Vec<Vec<Step>> {
    fn go(rest: &mut Vec<Step>, done: &mut Vec<Step>, all: &mut Vec<Vec<Step>>) {
        if rest.is_empty() {
            all.push(done.clone());
        }
        for k in 0..rest.len() {
            let s = rest.remove(k);
            done.push(s);
            go(rest, done, all);
            done.pop();
            rest.insert(k, s);
        }
    }
    let mut rest: Vec<Step> = (0..n).map(Step::Lock).collect();
    rest.push(Step::Unlock);
    let mut all = Vec::new();
    go(&mut rest, &mut Vec::new(), &mut all);
    all
}

/// How many times requester `i` was granted: at once, plus GRANTED wakes.
fn grants(i: usize, at_once: &[bool], wakes: &[Wake]) -> usize {
    let me = requester(i);
    usize::from(at_once[i]) + wakes.iter().filter(|w| w.owner == me && w.granted).count()
}

/// No two holders of the range conflict.
fn check_exclusion(lm: &LockManager, kinds: &[Kind]) {
    let holding: Vec<Kind> = (0..kinds.len())
        .filter(|&i| !lm.locks_of(F, &requester(i)).is_empty())
        .map(|i| kinds[i])
        .collect();
    for (a, ka) in holding.iter().enumerate() {
        for kb in &holding[a + 1..] {
            assert!(compatible(*ka, *kb), "conflicting holders: {holding:?}");
        }
    }
}

/// The holder (an NFSv4 owner) holds a write lock on the range; the main thread unlocks
/// it while one thread per `kinds` entry sends a blocking NLM request for the range.
/// Then the outcome must be a serial order's, and draining the holders grants everyone
/// exactly once.
fn race_blocking_requests(kinds: &'static [Kind], preemptions: usize) {
    builder(preemptions).check(move || {
        let (lm, nlm_log, nfs4_log) = manager();
        lm.lock(&request(holder(), Kind::Write, Wait::No), NOW)
            .expect("the first lock");
        let threads: Vec<_> = (0..kinds.len())
            .map(|i| {
                let lm = lm.clone();
                thread::spawn(move || lm.lock(&request(requester(i), kinds[i], Wait::Grant), NOW))
            })
            .collect();
        lm.unlock(F, &holder(), range(), NOW);
        let results: Vec<Result<_, LockError>> = threads
            .into_iter()
            .map(|t| t.join().expect("a requester"))
            .collect();

        let n = kinds.len();
        let at_once: Vec<bool> = results.iter().map(Result::is_ok).collect();
        let mut queued: Vec<(WaiterId, usize)> = Vec::new();
        for (i, r) in results.iter().enumerate() {
            match r {
                Ok(_) => {}
                Err(LockError::Denied {
                    queued: Some(id), ..
                }) => queued.push((*id, i)),
                Err(e) => panic!("requester {i}: {e:?}"),
            }
        }
        queued.sort_unstable();
        let mut waiting: Vec<(WaiterId, usize)> = (0..n)
            .filter_map(|i| lm.waiting(F, &requester(i)).map(|id| (id, i)))
            .collect();
        waiting.sort_unstable();
        let seen = Outcome {
            at_once: at_once.clone(),
            holds: (0..n)
                .map(|i| !lm.locks_of(F, &requester(i)).is_empty())
                .collect(),
            queue: waiting.iter().map(|&(_, i)| i).collect(),
            queued_order: queued.iter().map(|&(_, i)| i).collect(),
        };
        assert!(
            orders(n).iter().any(|o| reference(kinds, o) == seen),
            "no serial order of the calls leaves {seen:?}"
        );
        check_exclusion(&lm, kinds);
        assert!(nfs4_log.all().is_empty(), "no NFSv4 owner waited");
        let wakes = nlm_log.all();
        assert!(wakes.iter().all(|w| w.granted), "NLM waiters are granted");
        for i in 0..n {
            let holds = seen.holds[i];
            assert_eq!(
                grants(i, &at_once, &wakes),
                usize::from(holds),
                "requester {i}"
            );
        }

        // Drain: unlock every holder; each unlock grants the next in line.
        for _ in 0..n {
            for i in 0..n {
                lm.unlock(F, &requester(i), range(), NOW);
                check_exclusion(&lm, kinds);
            }
        }
        let wakes = nlm_log.all();
        for i in 0..n {
            assert_eq!(grants(i, &at_once, &wakes), 1, "requester {i} granted once");
        }
        assert_eq!(lm.counts(), (0, 0, 0), "nothing left");
    });
}

#[test]
fn loom_unlock_racing_a_blocking_request_grants_it_once() {
    race_blocking_requests(&[Kind::Write], 2);
}

#[test]
fn loom_two_writers_are_granted_in_arrival_order() {
    race_blocking_requests(&[Kind::Write, Kind::Write], 2);
}

#[test]
fn loom_readers_and_a_writer_are_served_in_arrival_order() {
    race_blocking_requests(&[Kind::Read, Kind::Write, Kind::Read], 2);
}

/// NFSv4's polling waiter: racing with the unlock, it is granted at once or queued and
/// told exactly once (the wake reaches NFSv4's waker), and asking again takes the lock.
#[test]
fn loom_unlock_racing_a_polling_request_tells_it_once() {
    builder(2).check(|| {
        let (lm, nlm_log, nfs4_log) = manager();
        let waiter = Owner::nfs4(2, Bytes::from_static(b"waiter"));
        let holder = Owner::nlm(Bytes::from_static(b"host"), 1, b"oh");
        lm.lock(&request(holder.clone(), Kind::Write, Wait::No), NOW)
            .expect("the first lock");
        let poll = Wait::Poll { deadline: LATER };
        let t = {
            let lm = lm.clone();
            let waiter = waiter.clone();
            thread::spawn(move || lm.lock(&request(waiter, Kind::Write, poll), NOW))
        };
        lm.unlock(F, &holder, range(), NOW);
        let first = t.join().expect("the waiter");
        assert!(nlm_log.all().is_empty(), "no NLM owner waited");
        let told = nfs4_log.all();
        match first {
            Ok(_) => assert!(told.is_empty(), "granted at once: told {told:?}"),
            Err(LockError::Denied {
                queued: Some(id), ..
            }) => {
                assert_eq!(told.len(), 1, "a queued waiter is told once: {told:?}");
                assert_eq!((told[0].waiter, told[0].granted), (id, false));
                assert_eq!(lm.waiting(F, &waiter), Some(id), "it keeps its place");
                lm.lock(&request(waiter.clone(), Kind::Write, poll), NOW)
                    .expect("asking again takes the lock");
            }
            Err(e) => panic!("the waiter: {e:?}"),
        }
        assert_eq!(lm.locks_of(F, &waiter), vec![(range(), Kind::Write)]);
        assert_eq!(lm.waiting(F, &waiter), None);
    });
}

/// The reference itself: the orders the models rely on give what the rule says.
#[test]
fn loom_reference_orders() {
    use Kind::{Read, Write};
    let kinds = [Read, Write, Read];
    let o = reference(
        &kinds,
        &[Step::Lock(0), Step::Lock(1), Step::Lock(2), Step::Unlock],
    );
    assert_eq!(o.holds, [true, false, false]);
    assert_eq!(o.queue, [1, 2]);
    let o = reference(
        &kinds,
        &[Step::Lock(0), Step::Lock(2), Step::Lock(1), Step::Unlock],
    );
    assert_eq!(o.holds, [true, false, true]);
    assert_eq!(o.queue, [1]);
    let o = reference(
        &kinds,
        &[Step::Unlock, Step::Lock(0), Step::Lock(1), Step::Lock(2)],
    );
    assert_eq!(o.at_once, [true, false, false]);
    assert_eq!(o.queue, [1, 2]);
    assert_eq!(orders(3).len(), 24);
}
