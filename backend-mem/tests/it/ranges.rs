//! The data path under concurrency, in every range-lock mode: I/O on disjoint ranges of
//! one file goes on while a range is held, I/O on an overlapping range waits for it, reads
//! never see half a write, truncation races cleanly with I/O, and the multigrain ctime
//! moves forward for every write a client could have observed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use crate::fixture::Plain;
use granary_backend_mem::{
    MemConfig, MemFs, RangeLockMode, TimestampMode, CHUNK_BYTES, INODE_CHARGE_BYTES,
};
use gtime::SystemClock;
use vfs::{CreateMode, FileId, FsError, Owner, SetAttr, Stability};

use crate::fixture::n;

const LOCKING: [RangeLockMode; 3] = [
    RangeLockMode::Mutex,
    RangeLockMode::LockFree,
    RangeLockMode::Cheat,
];

const OWNER: Owner = Owner { uid: 1, gid: 1 };

fn fs_with(rangelock: RangeLockMode, timestamps: TimestampMode) -> Arc<MemFs> {
    let config = MemConfig {
        rangelock,
        timestamps,
        ..MemConfig::default()
    };
    Arc::new(MemFs::new(config, SystemClock::shared()))
}

fn create(fs: &MemFs, name: &str) -> FileId {
    let mode = CreateMode::Guarded(SetAttr::default());
    fs.create(fs.root(), &n(name), &mode, OWNER)
        .expect("create")
}

fn write(fs: &MemFs, id: FileId, offset: u64, data: &[u8]) {
    let reply = fs
        .write(id, offset, data, Stability::Unstable)
        .expect("write");
    assert_eq!(reply.count as usize, data.len());
}

/// While one thread holds bytes 0..4096 for writing, reads and writes of other ranges of
/// the same file complete, and a read of an overlapping range waits until it is released.
/// (A `cheat` lock serializes everything until its first conflict, by design; the sync
/// crate's tests cover its switch.)
#[test]
fn disjoint_io_proceeds_while_a_range_is_held() {
    for mode in [RangeLockMode::Mutex, RangeLockMode::LockFree] {
        let fs = fs_with(mode, TimestampMode::Multigrain);
        let f = create(&fs, "f");
        write(&fs, f, 0, &[1; 3 * 4096]);
        let (overlap_tx, overlap_rx) = mpsc::channel();
        fs.with_range_held(f, 0..4096, true, || {
            // Disjoint: must finish while the range is held (else this deadlocks).
            thread::scope(|s| {
                s.spawn(|| write(&fs, f, 4096, &[2; 4096]));
                s.spawn(|| assert_eq!(fs.read(f, 8192, 4096).unwrap().data[0], 1));
            });
            // Overlapping: must still be waiting when we let go.
            let fs2 = Arc::clone(&fs);
            let tx = overlap_tx.clone();
            thread::spawn(move || {
                let data = fs2.read(f, 100, 10).expect("read").data;
                tx.send(data).expect("send");
            });
            thread::sleep(Duration::from_millis(50));
            assert!(
                overlap_rx.try_recv().is_err(),
                "{mode}: overlapping read ran"
            );
        })
        .expect("hold");
        let data = overlap_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("overlapping read");
        assert_eq!(data, vec![1; 10], "{mode}");
        assert_eq!(fs.read(f, 4096, 1).unwrap().data, vec![2]);
    }
}

/// A writer keeps rewriting two whole chunks with one pattern or another; readers of
/// both chunks always see one pattern, never a mix (a range lock makes I/O atomic).
#[test]
fn reads_never_see_half_a_write() {
    const LEN: usize = 2 * CHUNK_BYTES as usize;
    for mode in LOCKING {
        let fs = fs_with(mode, TimestampMode::Multigrain);
        let f = create(&fs, "f");
        write(&fs, f, 0, &vec![1; LEN]);
        let done = AtomicBool::new(false);
        thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while !done.load(Ordering::Relaxed) {
                        let data = fs.read(f, 0, LEN as u32).expect("read").data;
                        assert!(data.iter().all(|&b| b == data[0]), "{mode}: torn read");
                    }
                });
            }
            for i in 0..300u32 {
                write(&fs, f, 0, &vec![(i % 2 + 1) as u8; LEN]);
            }
            done.store(true, Ordering::Relaxed);
        });
    }
}

/// Writers of disjoint ranges, readers and a thread that truncates and regrows the file
/// run together; afterwards the space accounting matches the file exactly and every byte
/// is either its writer's or zero.
#[test]
fn truncation_races_cleanly_with_io() {
    const SLICE: u64 = 20_000;
    for mode in LOCKING {
        let fs = fs_with(mode, TimestampMode::Multigrain);
        let f = create(&fs, "f");
        // What f's inode and name are charged besides its data.
        let empty = fs.fsstat().unwrap().free_bytes;
        let done = AtomicBool::new(false);
        thread::scope(|s| {
            let writers: Vec<_> = (0..3u8)
                .map(|t| {
                    let fs = &fs;
                    s.spawn(move || {
                        for round in 0..60u64 {
                            let at = u64::from(t) * SLICE + (round * 997) % (SLICE - 512);
                            write(fs, f, at, &[t + 1; 512]);
                        }
                    })
                })
                .collect();
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    let reply = fs.read(f, 0, 4 * SLICE as u32).expect("read");
                    for (i, &b) in reply.data.iter().enumerate() {
                        let owner = (i as u64 / SLICE) as u8 + 1;
                        assert!(b == 0 || b == owner, "{mode}: byte {i} is {b}");
                    }
                }
            });
            for size in [30_000, 5, 0, 70_000, 12_345] {
                let set = SetAttr {
                    size_bytes: Some(size),
                    ..SetAttr::default()
                };
                fs.setattr(f, &set, None).expect("truncate");
                thread::yield_now();
            }
            for writer in writers {
                writer.join().expect("writer");
            }
            done.store(true, Ordering::Relaxed);
        });
        let attr = fs.getattr(f).unwrap();
        let stat = fs.fsstat().unwrap();
        assert_eq!(empty - stat.free_bytes, attr.used_bytes, "{mode}");
        assert!(attr.used_bytes <= attr.size_bytes.div_ceil(CHUNK_BYTES) * CHUNK_BYTES);
        fs.remove(fs.root(), &n("f")).expect("remove");
        let names = INODE_CHARGE_BYTES + granary_backend_mem::ENTRY_CHARGE_BYTES + 1;
        assert_eq!(
            fs.fsstat().unwrap().free_bytes,
            empty + names,
            "{mode}: leaked"
        );
        assert_eq!(fs.read(f, 0, 1), Err(FsError::Stale));
    }
}

/// Several threads write disjoint ranges of one file and look at its attributes as a
/// client would (each getattr marks the ctime observed): a write that follows a getattr
/// shows a strictly later ctime, mtime equals ctime after every write, and no thread ever
/// sees a ctime go backwards.
#[test]
fn observed_writes_always_move_ctime() {
    for mode in [RangeLockMode::LockFree, RangeLockMode::Mutex] {
        let fs = fs_with(mode, TimestampMode::Multigrain);
        let f = create(&fs, "f");
        let latest = AtomicU64::new(0);
        thread::scope(|s| {
            for t in 0..4u64 {
                let (fs, latest) = (&fs, &latest);
                s.spawn(move || {
                    let mut last = 0;
                    for i in 0..2_000u64 {
                        let before = fs.getattr(f).unwrap();
                        let seen = before.ctime.as_nanos();
                        assert!(seen >= last, "ctime went backwards");
                        write(fs, f, t * 4096 + i % 4096, &[1]);
                        let after = fs.getattr(f).unwrap();
                        let now = after.ctime.as_nanos();
                        assert!(now > seen, "{mode}: write after observing kept {seen}");
                        last = now;
                        latest.fetch_max(now, Ordering::Relaxed);
                    }
                });
            }
        });
        let attr = fs.getattr(f).unwrap();
        assert_eq!(
            attr.mtime, attr.ctime,
            "mtime follows ctime for data changes"
        );
        assert_eq!(attr.ctime.as_nanos(), latest.load(Ordering::Relaxed));
        assert!(fs.clock().stats().fine_stamps > 0);
    }
}
