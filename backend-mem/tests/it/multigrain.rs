//! Seed 000 through the mem backend, on an injected clock whose coarse clock ticks every
//! 4 ms: the sequence that broke gnulib's `test-stat-time` under Linux's first multigrain
//! series (a file changed later got an older ctime than a file changed earlier, because
//! one had a fine stamp and the other a coarse one), and a wall clock stepped backwards.

use std::sync::Arc;
use std::time::Duration;

use granary_backend_mem::{MemConfig, MemFs, TimestampMode};
use gtime::{Clock, ManualClock, Timestamp};
use vfs::{Attr, FileId, Stability};

use crate::fixture::{n, Plain, OWNER, START};

const TICK: Duration = Duration::from_millis(4);

/// A mem file system stamping in `mode` on a clock 1 ms into a coarse tick.
fn fs(mode: TimestampMode) -> (Arc<ManualClock>, MemFs) {
    let clock = Arc::new(ManualClock::with_tick(START, TICK));
    clock.advance(Duration::from_millis(1));
    let config = MemConfig {
        timestamps: mode,
        ..MemConfig::default()
    };
    (clock.clone(), MemFs::new(config, clock))
}

fn file(fs: &MemFs, name: &str) -> FileId {
    let how = vfs::CreateMode::Unchecked(vfs::SetAttr::default());
    fs.create(fs.root(), &n(name), &how, OWNER).expect("create")
}

/// One byte written, a microsecond after the previous step (time passes, within a tick).
fn write(clock: &ManualClock, fs: &MemFs, id: FileId) {
    clock.advance(Duration::from_micros(1));
    fs.write(id, 0, b"x", Stability::Unstable).expect("write");
}

/// A client's stat: the attributes, with the ctime marked observed.
fn stat(clock: &ManualClock, fs: &MemFs, id: FileId) -> Attr {
    clock.advance(Duration::from_micros(1));
    fs.getattr(id).expect("getattr")
}

fn nanos(t: Timestamp) -> u64 {
    t.as_nanos()
}

/// f1 (written last) has a ctime no older than f2's.
fn assert_not_older(a1: &Attr, a2: &Attr, mode: TimestampMode) {
    assert!(
        a1.ctime >= a2.ctime,
        "{mode}: f1 {:?} < f2 {:?}",
        a1.ctime,
        a2.ctime
    );
}

/// write f1, stat f2, write f2, stat f2, write f1, stat f1: f1 was written last, so its
/// ctime (and mtime) must not be older than f2's. f2 was observed before its write, so it
/// got a fine stamp; f1 was not, so it got the coarse time, which is older than f2's
/// fine one within the tick: only the floor (the latest fine stamp handed out) lifts it.
#[test]
fn gnulib_stat_time_sequence_keeps_later_writes_later() {
    for mode in [TimestampMode::Multigrain, TimestampMode::Fine] {
        let (clock, fs) = fs(mode);
        let (f1, f2) = (file(&fs, "f1"), file(&fs, "f2"));
        write(&clock, &fs, f1);
        let _ = stat(&clock, &fs, f2);
        write(&clock, &fs, f2);
        let a2 = stat(&clock, &fs, f2);
        write(&clock, &fs, f1);
        let a1 = stat(&clock, &fs, f1);
        assert_not_older(&a1, &a2, mode);
        assert!(
            a1.mtime >= a2.mtime,
            "{mode}: mtime f1 {:?} < f2 {:?}",
            a1.mtime,
            a2.mtime
        );
        if mode == TimestampMode::Multigrain {
            // f2's stamp was fine (past the coarse tick). Every change through the seam
            // returns the attributes its reply carries, marked observed (as a WRITE reply's
            // post-op attributes are seen by the client), so each of the three writes
            // followed an observed ctime and took a fine stamp and a floor swap. The case
            // of an unobserved file lifted to the floor is the time crate's
            // `an_observed_stamp_is_followed_by_a_later_one_even_on_a_still_clock`.
            assert!(
                nanos(a2.ctime) > nanos(clock.coarse_now()),
                "f2 got a fine stamp"
            );
            assert_eq!(
                fs.clock().stats().floor_swaps,
                3,
                "{:?}",
                fs.clock().stats()
            );
        }
    }
}

/// The gnulib sequence with writes that hand out no attributes (`write_unobserved`, the
/// seed's `pipe1` case): f1's last write follows no look at its ctime, so it takes the
/// coarse time, which is older than f2's fine stamp within the tick; the floor lifts it.
#[test]
fn gnulib_sequence_with_unobserved_writes_lifts_the_coarse_stamp_to_the_floor() {
    let (clock, fs) = fs(TimestampMode::Multigrain);
    let (f1, f2) = (file(&fs, "f1"), file(&fs, "f2"));
    let quiet = |id| {
        clock.advance(Duration::from_micros(1));
        fs.write_unobserved(id, 0, b"x").expect("write");
    };
    quiet(f1);
    let _ = stat(&clock, &fs, f2);
    quiet(f2); // f2's ctime was observed: a fine stamp, which raises the floor
    let a2 = stat(&clock, &fs, f2);
    let fine_before = fs.clock().stats().fine_stamps;
    quiet(f1); // nobody looked since f1's last write: coarse, lifted to the floor
    assert_eq!(
        fs.clock().stats().fine_stamps,
        fine_before,
        "an unobserved ctime takes the coarse clock"
    );
    let a1 = stat(&clock, &fs, f1);
    assert_not_older(&a1, &a2, TimestampMode::Multigrain);
    assert!(
        nanos(a1.ctime) > nanos(clock.coarse_now()),
        "lifted past the tick"
    );
    assert_eq!(a1.size_bytes, 1, "the byte was written");
}

/// The same sequence in coarse mode gives both files one stamp: ordered (equal), but a
/// client that looked at f2 between its two changes cannot tell them apart, which is the
/// problem multigrain solves.
#[test]
fn gnulib_sequence_in_coarse_mode_shares_one_stamp() {
    let (clock, fs) = fs(TimestampMode::Coarse);
    let (f1, f2) = (file(&fs, "f1"), file(&fs, "f2"));
    write(&clock, &fs, f1);
    let seen = stat(&clock, &fs, f2);
    write(&clock, &fs, f2);
    let a2 = stat(&clock, &fs, f2);
    write(&clock, &fs, f1);
    let a1 = stat(&clock, &fs, f1);
    assert_eq!(a1.ctime, a2.ctime);
    assert_eq!(seen.ctime, a2.ctime, "f2's change is invisible by ctime");
}

/// A wall clock stepped back an hour: an inode's ctime never goes back, an observed one
/// still moves strictly forward, the floor holds other files' stamps at the latest fine
/// stamp until the clock catches up, and then stamps follow the clock again.
#[test]
fn a_clock_stepped_back_never_moves_ctime_back() {
    let (clock, fs) = fs(TimestampMode::Multigrain);
    let (f, g) = (file(&fs, "f"), file(&fs, "g"));
    write(&clock, &fs, g);
    let g0 = fs.getattr(g).expect("getattr").ctime;
    write(&clock, &fs, f);
    let before = stat(&clock, &fs, f).ctime;
    clock.step_back(Duration::from_secs(3600));
    assert!(nanos(clock.now()) < nanos(before));

    write(&clock, &fs, f);
    let after = stat(&clock, &fs, f).ctime;
    assert!(
        after > before,
        "observed, so strictly later: {after:?} vs {before:?}"
    );
    // g was written before the step and is changed again after it: the floor (f's fine
    // stamp) holds its new stamp at or above everything handed out before.
    write(&clock, &fs, g);
    let g1 = fs.getattr(g).expect("getattr").ctime;
    assert!(g1 >= after && g1 > g0, "g {g1:?} after f {after:?}");

    // Half an hour later the clock is still behind: stamps stay at or above the floor.
    clock.advance(Duration::from_secs(1800));
    write(&clock, &fs, f);
    let held = stat(&clock, &fs, f).ctime;
    assert!(held > after);
    assert!(
        nanos(held) > nanos(clock.now()),
        "held above the stepped-back clock"
    );

    // Once the clock is past the old time again, unobserved changes are coarse stamps.
    clock.advance(Duration::from_secs(1801));
    write(&clock, &fs, g);
    let caught_up = fs.getattr(g).expect("getattr").ctime;
    assert_eq!(
        caught_up,
        clock.coarse_now(),
        "stamps follow the clock again"
    );
}

/// Coarse and fine modes stamp whatever the clock says, as Linux does without multigrain:
/// after a step back, a file's next ctime is older than its last one. Only multigrain
/// holds ctimes (above) — the cost of that guarantee is a fine read when observed.
#[test]
fn coarse_and_fine_modes_follow_the_clock_back() {
    for mode in [TimestampMode::Coarse, TimestampMode::Fine] {
        let (clock, fs) = fs(mode);
        let f = file(&fs, "f");
        clock.advance(Duration::from_secs(10));
        write(&clock, &fs, f);
        let f0 = stat(&clock, &fs, f).ctime;
        clock.step_back(Duration::from_secs(3600));
        write(&clock, &fs, f);
        let f1 = stat(&clock, &fs, f).ctime;
        assert!(f1 < f0, "{mode}: {f1:?} vs {f0:?}");
    }
}
