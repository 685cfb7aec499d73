//! Whether the calling thread may block: the one flag that tells a backend it is running
//! on a network worker's event loop (and a second one, [`remote_allowed`], that a caller
//! which judged its work reaches no remote backend sets for those backends to check).
//!
//! A network worker serves many connections on one thread; a system call that sleeps on
//! the disk there (`fdatasync`, a `pread` that misses the page cache, a wait for a decode
//! job) stalls every one of them. The connection runs each request inside [`forbidden`];
//! a backend that is about to do such work asks [`allowed`] first and, when it is not,
//! gives up *before it has changed anything*, so the caller can run the same request
//! again on a thread that may block (the worker's blocking pool). Every other thread
//! (blocking pools, tests, tools) may block: the flag is off unless [`forbidden`] set it.
//!
//! A thread-local rather than a parameter: the question is about the thread, not the
//! call, and it has to reach every backend method without widening the `Backend` seam.

use std::cell::Cell;
use std::thread::LocalKey;

thread_local! {
    static FORBIDDEN: Cell<bool> = const { Cell::new(false) };
    static REMOTE_FORBIDDEN: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread may make a system call that can sleep for long.
#[must_use]
pub fn allowed() -> bool {
    !FORBIDDEN.with(Cell::get)
}

/// Runs `f` with blocking forbidden on this thread (restored afterwards, also if `f`
/// panics).
pub fn forbidden<R>(f: impl FnOnce() -> R) -> R {
    scoped(&FORBIDDEN, true, f)
}

/// Runs `f` with blocking allowed on this thread (restored afterwards), for a caller that
/// cannot give up half way: its calls block where they are, as every call did before the
/// blocking pool existed.
pub fn permitted<R>(f: impl FnOnce() -> R) -> R {
    scoped(&FORBIDDEN, false, f)
}

/// Whether the calling thread may call a remote backend (one whose calls wait on a
/// database or an S3 store, `vfs::Backend::remote`). A caller that judged that its work
/// reaches no remote backend, and runs it where only local disks may block it (NFSv4's
/// COMPOUND on a network worker, `nfsd::v4::reach`), runs it inside
/// [`remote_forbidden`]; a remote backend asserts this in debug builds, so a wrong
/// judgement fails the tests instead of stalling an event loop on the network.
#[must_use]
pub fn remote_allowed() -> bool {
    !REMOTE_FORBIDDEN.with(Cell::get)
}

/// Runs `f` with remote backends forbidden on this thread (restored afterwards, also if
/// `f` panics); see [`remote_allowed`].
pub fn remote_forbidden<R>(f: impl FnOnce() -> R) -> R {
    scoped(&REMOTE_FORBIDDEN, true, f)
}

/// Runs `f` with `flag` set to `value` on this thread, restored afterwards, also if `f`
/// panics.
fn scoped<R>(flag: &'static LocalKey<Cell<bool>>, value: bool, f: impl FnOnce() -> R) -> R {
    struct Restore(&'static LocalKey<Cell<bool>>, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            self.0.with(|c| c.set(self.1));
        }
    }
    let _restore = Restore(flag, flag.with(|c| c.replace(value)));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_is_scoped_to_the_call_and_the_thread() {
        assert!(allowed());
        forbidden(|| {
            assert!(!allowed());
            forbidden(|| assert!(!allowed()));
            assert!(!allowed(), "a nested scope restores the outer one");
            std::thread::spawn(|| assert!(allowed(), "another thread may block"))
                .join()
                .unwrap();
        });
        assert!(allowed());
        forbidden(|| {
            permitted(|| assert!(allowed()));
            assert!(!allowed(), "permitted restores the forbidden scope");
        });
        let _ = std::panic::catch_unwind(|| forbidden(|| panic!("unwinds")));
        assert!(allowed(), "restored after a panic");
    }

    #[test]
    fn remote_forbidden_is_scoped_and_apart_from_blocking() {
        assert!(remote_allowed());
        remote_forbidden(|| {
            assert!(!remote_allowed());
            permitted(|| assert!(!remote_allowed(), "permitting blocking permits no remote"));
            std::thread::spawn(|| assert!(remote_allowed(), "another thread may"))
                .join()
                .unwrap();
        });
        assert!(remote_allowed());
        let _ = std::panic::catch_unwind(|| remote_forbidden(|| panic!("unwinds")));
        assert!(remote_allowed(), "restored after a panic");
    }
}
