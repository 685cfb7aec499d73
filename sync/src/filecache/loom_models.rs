//! Loom models of the open-file cache's races: two misses on one key, a miss against
//! `forget`, a hit against aging, and two misses competing for the last slot.
//!
//! ```sh
//! RUSTFLAGS="--cfg loom --cfg crossbeam_loom" cargo test -p granary-sync --release --lib \
//!     --target-dir target/loom-sync filecache::loom_models
//! ```

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use super::{Access, FileCache};

/// A value that counts its closes.
struct Fd {
    id: usize,
    closes: Arc<AtomicUsize>,
}

impl Drop for Fd {
    fn drop(&mut self) {
        self.closes.fetch_add(1, Ordering::SeqCst);
    }
}

struct World {
    cache: FileCache<u8, Fd>,
    opens: AtomicUsize,
    closes: Arc<AtomicUsize>,
}

impl World {
    fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            cache: FileCache::new(capacity),
            opens: AtomicUsize::new(0),
            closes: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn get(&self, key: u8) -> std::sync::Arc<super::Entry<Fd>> {
        let got = self.cache.get_or_open(&key, Access::Write, || {
            let id = self.opens.fetch_add(1, Ordering::SeqCst) + 1;
            Ok::<_, ()>(Fd {
                id,
                closes: Arc::clone(&self.closes),
            })
        });
        got.expect("the model's open never fails")
    }

    fn live(&self) -> usize {
        self.opens.load(Ordering::SeqCst) - self.closes.load(Ordering::SeqCst)
    }
}

#[test]
fn two_misses_open_once() {
    loom::model(|| {
        let world = World::new(4);
        let other = Arc::clone(&world);
        let t = thread::spawn(move || other.get(1).id);
        let mine = world.get(1).id;
        let theirs = t.join().unwrap();
        assert_eq!(mine, theirs, "both see the one open");
        assert_eq!(world.opens.load(Ordering::SeqCst), 1);
        assert_eq!(world.cache.len(), 1);
        world.cache.clear();
        assert_eq!(world.live(), 0);
    });
}

#[test]
fn miss_against_forget_leaves_nothing_stale() {
    loom::model(|| {
        let world = World::new(4);
        let other = Arc::clone(&world);
        let t = thread::spawn(move || {
            other.cache.forget(&1);
        });
        let fd = world.get(1);
        t.join().unwrap();
        // The forget came first (the entry stays cached), took the opening marker (the value
        // is served uncached), or removed the installed entry: never an entry left that the
        // caller was told is not cached.
        assert!(world.cache.len() <= usize::from(fd.is_cached()));
        drop(fd);
        world.cache.clear();
        assert_eq!(world.live(), 0, "a value leaked");
        assert!(world.cache.is_empty());
    });
}

#[test]
fn hit_against_aging() {
    loom::model(|| {
        let world = World::new(4);
        drop(world.get(1));
        world.cache.age();
        world.cache.age(); // now neither bit is set: the next pass evicts unless hit first
        let other = Arc::clone(&world);
        let t = thread::spawn(move || other.cache.age());
        let fd = world.get(1);
        let evicted = t.join().unwrap();
        assert!(evicted <= 1);
        assert!(world.cache.len() <= 1);
        assert!(world.opens.load(Ordering::SeqCst) <= 2);
        assert!(fd.id >= 1);
        drop(fd);
        world.cache.clear();
        assert_eq!(world.live(), 0);
    });
}

#[test]
fn two_misses_compete_for_the_last_slot() {
    loom::model(|| {
        let world = World::new(1);
        let other = Arc::clone(&world);
        let t = thread::spawn(move || other.get(1).is_cached());
        let mine = world.get(2).is_cached();
        let theirs = t.join().unwrap();
        assert!(mine ^ theirs, "exactly one of them is cached");
        assert_eq!(world.cache.len(), 1);
        world.cache.clear();
        assert_eq!(world.live(), 0);
    });
}
