//! Who the host kernel sees: the calling thread's fsuid, fsgid, supplementary groups and
//! effective capabilities, switched per thread to the client's squashed credential when
//! granary runs as root (see the crate's "Owners and permissions").
//!
//! # What it promises
//!
//! - **Per thread, never per process.** Each change is the raw system call (`setfsuid`,
//!   `setfsgid`, `setgroups`, `capset` with pid 0), which Linux applies to the calling
//!   thread only. glibc's `setgroups` and `setuid` wrappers change every thread of the
//!   process (through a signal to each); nothing here uses them.
//! - **As knfsd does.** A non-root caller's thread has `CAP_NFSD_SET` out of its
//!   effective set ([`CALLER_DROPS`]: the file-system capabilities, which a change of the
//!   fsuid away from 0 drops anyway, plus `CAP_LINUX_IMMUTABLE` and `CAP_SYS_RESOURCE`,
//!   which it does not, so quota hard limits and ext4's reserved blocks hold). They stay
//!   in the permitted set; a root caller (`--squash none`) or the server's own call gets
//!   the whole permitted set back as effective.
//! - **Only when it differs.** A thread-local record holds the identity the thread has;
//!   [`act_as`] compares (uid, gid, groups) and makes no system call when they are the
//!   same as the last request's: a client whose requests come from one user pays one
//!   switch per worker thread, not one per call. Any thread may call it (a worker, a
//!   blocking-pool thread, a test's thread): the first call on a thread reads the
//!   thread's real identity first.
//! - **Resolution runs privileged, briefly.** Finding a file from its handle
//!   (`open_by_handle_at`, which needs `CAP_DAC_READ_SEARCH` in the effective set, the
//!   re-walk, the "still beneath the root" climb) is the server's work, not the caller's:
//!   [`raise_for_resolution`] puts `CAP_DAC_OVERRIDE` and `CAP_DAC_READ_SEARCH` back into
//!   the effective set (only if the thread lacks them) and its guard takes them out again
//!   when dropped, so they never outlive the function that resolves. A guard alive while
//!   [`act_as`] runs is a bug (asserted in debug builds).
//! - **A failed change fails the call.** If a system call refuses (no `CAP_SETUID`, a
//!   seccomp filter), the record is forgotten, so the next [`act_as`] on that thread sets
//!   everything again, and the call gets `ServerFault`; it never runs with the wrong
//!   identity.
//!
//! The thread's umask is the other per-thread setting a host call depends on:
//! [`clear_umask`] gives the thread its own `fs_struct` (`unshare(CLONE_FS)`) with umask
//! 0, as nfsd's threads have, so the mode a client asks for is the mode the kernel creates
//! with, and a parent's default ACL (which replaces the umask) applies untouched.

use std::cell::{Cell, RefCell};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::OnceLock;

use rustix::io::Errno;
use rustix::thread::{CapabilitySet, CapabilitySets};

/// `CAP_NFSD_SET` of Linux (`include/linux/capability.h`): what knfsd takes out of a
/// non-root caller's effective set. `CAP_FS_MASK` (chown, dac_override, dac_read_search,
/// fowner, fsetid, mknod, mac_override), `CAP_LINUX_IMMUTABLE` and `CAP_SYS_RESOURCE`.
pub const CALLER_DROPS: CapabilitySet = CapabilitySet::CHOWN
    .union(CapabilitySet::DAC_OVERRIDE)
    .union(CapabilitySet::DAC_READ_SEARCH)
    .union(CapabilitySet::FOWNER)
    .union(CapabilitySet::FSETID)
    .union(CapabilitySet::MKNOD)
    .union(CapabilitySet::MAC_OVERRIDE)
    .union(CapabilitySet::LINUX_IMMUTABLE)
    .union(CapabilitySet::SYS_RESOURCE);

/// What handle resolution needs beside the caller's identity: open any file by handle
/// (`CAP_DAC_READ_SEARCH`), search any directory and open for writing a file the caller
/// may write only as its owner (`CAP_DAC_OVERRIDE`; the caller's permission is asked of
/// the kernel after, on the descriptor).
const RESOLVE: CapabilitySet = CapabilitySet::DAC_OVERRIDE.union(CapabilitySet::DAC_READ_SEARCH);

/// An identity a thread can act as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Who<'a> {
    pub uid: u32,
    pub gid: u32,
    pub groups: &'a [u32],
}

impl Who<'_> {
    /// The effective set this identity runs with, out of the thread's permitted set.
    fn effective(&self, permitted: CapabilitySet) -> CapabilitySet {
        if self.uid == 0 {
            permitted
        } else {
            permitted.difference(CALLER_DROPS)
        }
    }
}

/// The identity a thread has now, as the kernel has it.
#[derive(Debug)]
struct Current {
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
    caps: CapabilitySets,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
    /// Resolution guards alive on this thread (see [`raise_for_resolution`]).
    static RAISED: Cell<u32> = const { Cell::new(0) };
    /// `Some(true)` once this thread's umask is its own and 0; `Some(false)` if that was
    /// refused (the process umask applies; see [`clear_umask`]).
    static UMASK_CLEARED: Cell<Option<bool>> = const { Cell::new(None) };
    /// Switches made on this thread (tests and the lab read it).
    static SWITCHES: Cell<u64> = const { Cell::new(0) };
}

fn errno() -> Errno {
    Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO)
}

/// `setfsuid` or `setfsgid` (`nr`) of one thread, checked: the call reports no error, so
/// a second call with -1 (which changes nothing) reads the value back.
fn set_fs_id(nr: libc::c_long, id: u32) -> Result<(), Errno> {
    // SAFETY: setfsuid/setfsgid take one integer and touch no memory of ours; the raw
    // system call changes the calling thread's credentials only.
    unsafe { libc::syscall(nr, id) };
    // SAFETY: as above; -1 is an invalid id, so this only returns the current one.
    let now = unsafe { libc::syscall(nr, -1_i32) };
    if u32::try_from(now) == Ok(id) {
        Ok(())
    } else {
        Err(Errno::PERM)
    }
}

impl Current {
    /// The calling thread's identity, read from the kernel.
    fn read() -> Result<Self, Errno> {
        // SAFETY: as in `set_fs_id`: -1 changes nothing and returns the current value.
        let uid = unsafe { libc::syscall(libc::SYS_setfsuid, -1_i32) };
        // SAFETY: as above.
        let gid = unsafe { libc::syscall(libc::SYS_setfsgid, -1_i32) };
        let groups = rustix::process::getgroups()?
            .into_iter()
            .map(rustix::process::Gid::as_raw)
            .collect();
        Ok(Self {
            uid: u32::try_from(uid).map_err(|_| errno())?,
            gid: u32::try_from(gid).map_err(|_| errno())?,
            groups,
            caps: rustix::thread::capabilities(None)?,
        })
    }

    fn same(&self, who: &Who<'_>) -> bool {
        self.uid == who.uid
            && self.gid == who.gid
            && self.groups == who.groups
            && self.caps.effective == who.effective(self.caps.permitted)
    }

    /// Makes the thread `who`: groups and fsgid first (they need `CAP_SETGID`, which no
    /// identity drops), then fsuid, then the effective set. `force` sets every part.
    fn switch(&mut self, who: &Who<'_>, force: bool) -> Result<(), Errno> {
        if force || self.groups != who.groups {
            let gids: Vec<_> = who
                .groups
                .iter()
                .map(|&g| rustix::process::Gid::from_raw(g))
                .collect();
            rustix::thread::set_thread_groups(&gids)?;
            self.groups = who.groups.to_vec();
        }
        if force || self.gid != who.gid {
            set_fs_id(libc::SYS_setfsgid, who.gid)?;
            self.gid = who.gid;
        }
        if force || self.uid != who.uid {
            set_fs_id(libc::SYS_setfsuid, who.uid)?;
            self.uid = who.uid;
            // A change of fsuid to or from 0 changes the effective set (Linux
            // `cap_task_fix_setuid`): read what it is now.
            self.caps = rustix::thread::capabilities(None)?;
        }
        let want = who.effective(self.caps.permitted);
        if force || self.caps.effective != want {
            let caps = CapabilitySets {
                effective: want,
                ..self.caps
            };
            rustix::thread::set_capabilities(None, caps)?;
            self.caps = caps;
        }
        SWITCHES.with(|n| n.set(n.get() + 1));
        Ok(())
    }
}

/// Makes the calling thread act as `who` for the host calls that follow (see the module
/// documentation); no system call when it already does.
///
/// # Errors
/// The errno of the system call that refused; the thread's record is then forgotten.
pub fn act_as(who: &Who<'_>) -> Result<(), Errno> {
    debug_assert_eq!(
        RAISED.with(Cell::get),
        0,
        "act_as inside a resolution guard"
    );
    CURRENT.with(|cell| {
        let mut cur = cell.borrow_mut();
        if cur.as_ref().is_some_and(|c| c.same(who)) {
            return Ok(());
        }
        let (mut now, force) = match cur.take() {
            Some(c) => (c, false),
            None => (Current::read()?, true),
        };
        now.switch(who, force).inspect_err(|e| {
            tracing::error!(errno = %e, uid = who.uid, "cannot switch the thread's identity");
        })?;
        *cur = Some(now);
        Ok(())
    })
}

/// Keeps `CAP_DAC_OVERRIDE` and `CAP_DAC_READ_SEARCH` in the thread's effective set while
/// alive (see [`raise_for_resolution`]).
#[derive(Debug)]
#[must_use]
pub struct Raised {
    /// The effective set to put back; `None` if nothing was raised.
    restore: Option<CapabilitySet>,
}

/// Gives the thread what handle resolution needs, if it lacks it (a thread acting for a
/// non-root caller); a no-op for a thread that has it. Without those capabilities in the
/// permitted set (an unprivileged server) it raises nothing: resolution then works as the
/// server's user, as it always did.
///
/// # Errors
/// `capset` refused.
pub fn raise_for_resolution() -> Result<Raised, Errno> {
    CURRENT.with(|cell| {
        let mut cur = cell.borrow_mut();
        let now = match cur.as_mut() {
            Some(c) => c,
            None => cur.insert(Current::read()?),
        };
        let have = now.caps.effective;
        if have.contains(RESOLVE) || !now.caps.permitted.contains(RESOLVE) {
            return Ok(Raised { restore: None });
        }
        let caps = CapabilitySets {
            effective: have.union(RESOLVE),
            ..now.caps
        };
        rustix::thread::set_capabilities(None, caps)?;
        now.caps = caps;
        RAISED.with(|n| n.set(n.get() + 1));
        Ok(Raised {
            restore: Some(have),
        })
    })
}

impl Drop for Raised {
    fn drop(&mut self) {
        let Some(effective) = self.restore else {
            return;
        };
        RAISED.with(|n| n.set(n.get() - 1));
        CURRENT.with(|cell| {
            let mut cur = cell.borrow_mut();
            let Some(now) = cur.as_mut() else { return };
            let caps = CapabilitySets {
                effective,
                ..now.caps
            };
            match rustix::thread::set_capabilities(None, caps) {
                Ok(()) => now.caps = caps,
                Err(e) => {
                    // Forgotten: the next act_as sets every part again, or fails the call.
                    tracing::error!(errno = %e, "cannot drop the resolution capabilities");
                    *cur = None;
                }
            }
        });
    }
}

/// The server's own identity (fsuid, fsgid, groups), once a host export run as root
/// recorded it ([`record_server`]).
static SERVER: OnceLock<(u32, u32, Vec<u32>)> = OnceLock::new();

/// Records who the server is, for [`act_as_server`] (a host export run as root does, at
/// start).
pub fn record_server(uid: u32, gid: u32, groups: &[u32]) {
    let _ = SERVER.set((uid, gid, groups.to_vec()));
}

/// Makes the calling thread the server again, if a host export run as root recorded the
/// server's identity (else nothing). A thread created by one that acted for a client
/// starts as that client (Linux copies a thread's credentials into the threads it
/// creates): a thread that works on the server's own files (the handle index's
/// compaction) calls this first.
///
/// # Errors
/// As [`act_as`].
pub fn act_as_server() -> Result<(), Errno> {
    match SERVER.get() {
        Some((uid, gid, groups)) => act_as(&Who {
            uid: *uid,
            gid: *gid,
            groups,
        }),
        None => Ok(()),
    }
}

/// Identity switches made on the calling thread since it started.
#[must_use]
pub fn switches() -> u64 {
    SWITCHES.with(Cell::get)
}

/// Gives the calling thread its own umask of 0 (once per thread): `unshare(CLONE_FS)`
/// then `umask(0)`. Returns whether the thread's umask is 0; `false` where
/// `unshare` is refused (a seccomp filter, as Docker's default profile has), and then the
/// process's umask applies to what the thread creates.
pub fn clear_umask() -> bool {
    if let Some(done) = UMASK_CLEARED.with(Cell::get) {
        return done;
    }
    // SAFETY: CLONE_FS unshares only the cwd, root and umask of this thread; no descriptor
    // table or memory is unshared, so no other thread's state changes under it.
    let done = match unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FS) } {
        Ok(()) => {
            rustix::process::umask(rustix::fs::Mode::empty());
            true
        }
        Err(e) => {
            tracing::warn!(
                errno = %e,
                "cannot give a thread its own umask; files are created with the process umask and their mode set after"
            );
            false
        }
    };
    UMASK_CLEARED.with(|c| c.set(Some(done)));
    done
}

/// Asks the kernel whether the thread's identity may `mode` (`R_OK`, `W_OK`, `X_OK`, or a
/// combination) the file open as `fd` (any descriptor, `O_PATH` included):
/// `faccessat2(fd, "", mode, AT_EMPTY_PATH | AT_EACCESS)`, which checks the mode bits,
/// POSIX ACLs, read-only mounts, immutable files and LSMs with the fsuid, fsgid, groups
/// and effective capabilities of the calling thread.
///
/// # Errors
/// The kernel's refusal (`ACCESS`, `PERM`, `ROFS`, ...); `NOSYS` before Linux 5.8.
pub fn kernel_allows(fd: BorrowedFd<'_>, mode: libc::c_int) -> Result<(), Errno> {
    // SAFETY: the path is a valid NUL-terminated empty string that outlives the call; the
    // other arguments are integers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            fd.as_raw_fd(),
            c"".as_ptr(),
            mode,
            libc::AT_EMPTY_PATH | libc::AT_EACCESS,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}
