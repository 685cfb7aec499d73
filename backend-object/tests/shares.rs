//! Share reservations across heads through the backend's seam (`vfs::HeadShares`), on
//! the real engines: two heads of one file system, each with a stand-in for its share
//! table (the union of what its holders have and deny per file). An open that denies
//! nothing costs no transaction on a file nobody denies, yet a deny on the other head
//! is refused while it is open (the other head records it once the file is watched);
//! a deny keeps the other head's conflicting opens off until it is released; a head
//! whose rows were swept records its denies again; and a head that stops frees its
//! reservations after its lease.
//! One test at a time in a binary of its own: the transactions are this process's.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{create, fresh_with_lease, head, query_i64, stand_in, Held};
use granary_backend_object::{engine_counters, ObjectConfig, ObjectFs, TestEngines};
use vfs::{Backend, FileId, HeadShare, HeadShares, ShareMode};

const READ: u32 = 1;
const WRITE: u32 = 2;

/// One head and what its "share table" holds per file.
struct Head {
    fs: ObjectFs,
    held: Held<ShareMode>,
}

impl Head {
    fn open(config: &ObjectConfig) -> Self {
        let fs = head(config);
        let (held, source) = stand_in();
        fs.head_shares()
            .expect("the object backend keeps share reservations across heads")
            .attach(source);
        Self { fs, held }
    }

    fn seam(&self) -> &dyn HeadShares {
        self.fs.head_shares().unwrap()
    }

    /// An open of `access` denying `deny`: granted (the stand-in then holds it beside
    /// what it held), or the other head's reservation in the way.
    fn open_file(&self, id: FileId, access: u32, deny: u32) -> Option<HeadShare> {
        let held = Arc::clone(&self.held);
        let mut grant = move || {
            let mut h = held.lock().unwrap();
            let m = h.entry(id).or_default();
            m.access |= access;
            m.deny |= deny;
        };
        self.seam()
            .share(id, ShareMode { access, deny }, &mut grant)
            .expect("OPEN")
    }

    /// Closes everything on `id` and waits for the record, as a CLOSE does.
    fn close_all(&self, id: FileId) {
        let held = Arc::clone(&self.held);
        let mut release = move || {
            held.lock().unwrap().remove(&id);
        };
        self.seam().settle(id, &mut release).expect("the record");
    }
}

#[test]
fn deny_modes_hold_across_heads_and_an_open_that_denies_nothing_costs_no_transaction() {
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let lease = 3;
    let config = fresh_with_lease(&env, "shares-basic", lease);
    let (a, b) = (Head::open(&config), Head::open(&config));
    let f = create(&a.fs, a.fs.root(), "f");
    let g = create(&a.fs, a.fs.root(), "g");
    // Each head's first open registers it (one transaction, once).
    assert_eq!(a.open_file(g, READ, 0), None);
    assert_eq!(b.open_file(g, READ, 0), None);

    // A reads f, denying nothing: no transaction, nothing recorded.
    let before = engine_counters().db_transactions;
    assert_eq!(a.open_file(f, READ, 0), None);
    assert_eq!(a.open_file(f, READ | WRITE, 0), None);
    assert_eq!(
        engine_counters().db_transactions - before,
        0,
        "an open that denies nothing on a file nobody denies"
    );
    // B denies reading: A reads, so B is refused once A recorded its access (at its
    // next heartbeat, which the deny waits for).
    let other = b.open_file(f, READ, READ).expect("A reads f");
    assert_eq!(
        other.mode.access,
        READ | WRITE,
        "A's access, as A recorded it"
    );
    // B denies nothing on g: granted; denies writing on g: nobody writes g.
    assert_eq!(b.open_file(g, READ, WRITE), None);
    // Now g is watched: A's open for writing is refused, its read granted.
    let other = a.open_file(g, WRITE, 0).expect("B denies writing g");
    assert_eq!(other.mode.deny, WRITE);
    assert_eq!(a.open_file(g, READ, 0), None, "reading g is not denied");
    // A denies writing f while B... B holds nothing on f: granted.
    assert_eq!(a.open_file(f, READ, WRITE), None);
    assert!(b.open_file(f, WRITE, 0).is_some(), "A denies writing f");
    // B lets go of g: A may write it at once.
    b.close_all(g);
    assert_eq!(a.open_file(g, WRITE, 0), None);

    // A cut off long enough for its rows and the watch to be swept (by hand here): its
    // next heartbeat finds its own row new, and it records its deny again, watching the
    // file again.
    common::sql(
        &config,
        "DELETE FROM share_holds; DELETE FROM share_watches; \
         DELETE FROM lock_heads WHERE head = (SELECT min(head) FROM lock_heads)",
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        b.open_file(f, WRITE, 0).is_some(),
        "A's deny recorded again"
    );

    // A head that stops (dropped: its heartbeat ends) holds its denies for its lease.
    drop(a);
    let stopped = Instant::now();
    while b.open_file(f, WRITE, 0).is_some() {
        assert!(
            stopped.elapsed() < Duration::from_secs(lease + 3),
            "A's lease never ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = stopped.elapsed();
    assert!(
        took >= Duration::from_secs(lease - 1),
        "A's denies held for its lease, not {took:?}"
    );
    // Rows stay bounded: one per head and watched file.
    let rows = query_i64(&config, "SELECT count(*) FROM share_holds");
    assert!(rows <= 4, "{rows} share rows");
}
