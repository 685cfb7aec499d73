//! Multi-threaded smoke tests: many threads on one file, one directory, one tree.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use crate::fixture::Plain;
use vfs::{Cookie, FileId, FsError};

use crate::fixture::{n, Fx};

const THREADS: usize = 4;

/// Writers fill disjoint, chunk-unaligned ranges of one file in small pieces while readers
/// read it; every byte ends up as its writer left it.
#[test]
fn disjoint_writes_to_one_file() {
    const RANGE_BYTES: usize = 150_001;
    const PIECE_BYTES: usize = 7_000;
    let fx = Fx::new();
    let f = fx.create(fx.root(), "shared");
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        for reader in 0..2u64 {
            let (fx, done) = (&fx, &done);
            s.spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    let reply = fx.fs.read(f, reader * 100_000, 64 * 1024).expect("read");
                    assert!(reply.data.len() <= 64 * 1024);
                }
            });
        }
        let writers: Vec<_> = (0..THREADS)
            .map(|t| {
                let fx = &fx;
                s.spawn(move || {
                    let start = t * RANGE_BYTES;
                    let pattern = vec![t as u8 + 1; PIECE_BYTES];
                    for at in (start..start + RANGE_BYTES).step_by(PIECE_BYTES) {
                        let len = PIECE_BYTES.min(start + RANGE_BYTES - at);
                        fx.write(f, at as u64, &pattern[..len]);
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().expect("writer");
        }
        done.store(true, Ordering::Relaxed);
    });
    let contents = fx.contents(f);
    assert_eq!(contents.len(), THREADS * RANGE_BYTES);
    for (t, range) in contents.chunks(RANGE_BYTES).enumerate() {
        assert!(range.iter().all(|&b| b == t as u8 + 1), "range {t}");
    }
}

/// Pages through `dir` once, asserting that no name comes twice.
fn list_once(fx: &Fx, dir: FileId) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut cookie = Cookie::START;
    loop {
        let page = fx.fs.readdir(dir, cookie, 5).expect("readdir");
        for entry in &page.entries {
            let name = String::from_utf8_lossy(&entry.name).into_owned();
            assert!(seen.insert(name.clone()), "{name} listed twice");
            cookie = entry.cookie;
        }
        if page.eof {
            return seen;
        }
    }
}

/// Threads create and remove files in one directory while another lists it.
#[test]
fn creates_and_removes_in_one_directory() {
    const FILES: usize = 150;
    let fx = Fx::new();
    let dir = fx.mkdir(fx.root(), "d");
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        let (fxr, doner) = (&fx, &done);
        s.spawn(move || {
            while !doner.load(Ordering::Relaxed) {
                list_once(fxr, dir);
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let fx = &fx;
                s.spawn(move || {
                    for i in 0..FILES {
                        let id = fx.create(dir, &format!("t{t}-{i}"));
                        fx.write(id, 0, &[t as u8 + 1; 3]);
                        if i % 2 == 1 {
                            fx.fs.remove(dir, &n(&format!("t{t}-{i}"))).expect("remove");
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("worker");
        }
        done.store(true, Ordering::Relaxed);
    });
    let expected: BTreeSet<String> = (0..THREADS)
        .flat_map(|t| (0..FILES).step_by(2).map(move |i| format!("t{t}-{i}")))
        .chain([".".to_owned(), "..".to_owned()])
        .collect();
    assert_eq!(list_once(&fx, dir), expected);
    let stat = fx.fs.fsstat().expect("fsstat");
    assert_eq!(
        stat.free_files,
        1_000_000 - 2 - (THREADS * FILES / 2) as u64
    );
    // One chunk, one inode and one name per file left, and the root's and dir's.
    use granary_backend_mem::{entry_charge, CHUNK_BYTES, INODE_CHARGE_BYTES};
    let left = (0..THREADS).flat_map(|t| (0..FILES).step_by(2).map(move |i| (t, i)));
    let used: u64 = left
        .map(|(t, i)| CHUNK_BYTES + INODE_CHARGE_BYTES + entry_charge(&n(&format!("t{t}-{i}"))))
        .sum();
    let dirs = 2 * INODE_CHARGE_BYTES + entry_charge(&n("d"));
    assert_eq!(stat.free_bytes, (1 << 30) - used - dirs);
}

/// Two threads keep moving two directories into each other; the subtree check under the
/// namespace mutex must keep the tree acyclic, with both still reachable from the root.
#[test]
fn crossing_directory_renames_never_make_a_cycle() {
    let fx = Fx::new();
    let root = fx.root();
    let a = fx.mkdir(root, "a");
    let b = fx.mkdir(root, "b");
    thread::scope(|s| {
        for (moving, other) in [("a", b), ("b", a)] {
            let fx = &fx;
            s.spawn(move || {
                for _ in 0..2_000 {
                    let into = fx.fs.rename(root, &n(moving), other, &n(moving));
                    assert!(matches!(
                        into,
                        Ok(()) | Err(FsError::NoEnt | FsError::Inval)
                    ));
                    let back = fx.fs.rename(other, &n(moving), root, &n(moving));
                    assert!(matches!(back, Ok(()) | Err(FsError::NoEnt)));
                }
            });
        }
    });
    let mut reachable = BTreeSet::new();
    let mut pending = vec![root];
    while let Some(dir) = pending.pop() {
        for name in fx.names(dir) {
            let id = fx.fs.lookup(dir, &n(&name)).expect("lookup");
            assert!(reachable.insert(id), "reached twice");
            pending.push(id);
        }
    }
    assert_eq!(reachable, BTreeSet::from([a, b]));
    let nlinks: u32 = [root, a, b]
        .iter()
        .map(|&d| fx.fs.getattr(d).unwrap().nlink)
        .sum();
    assert_eq!(
        nlinks,
        2 + 2 + 2 + 2,
        "two subdirectories, each counted once"
    );
}
