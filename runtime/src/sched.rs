//! Thread scheduling priority (Linux). The only unsafe code of the runtime: two libc calls
//! on the calling thread.
#![allow(unsafe_code)]

/// Puts the calling thread in `SCHED_FIFO` at priority 1 (the kernel's
/// `sched_set_fifo_low`): it preempts normal threads on its core.
///
/// # Errors
/// `EPERM` without `CAP_SYS_NICE` (or an RT budget).
pub fn set_fifo_low() -> std::io::Result<()> {
    set_fifo(1)
}

/// Puts the calling thread in `SCHED_FIFO` at `priority` (1..=99).
///
/// # Errors
/// `EPERM` without `CAP_SYS_NICE`; `EINVAL` for a priority out of range.
pub fn set_fifo(priority: i32) -> std::io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a valid, initialized sched_param that outlives the call; pid 0
    // names the calling thread. The call has no other memory effects.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Sets the calling thread's nice value.
///
/// # Errors
/// `EACCES`/`EPERM` when lowering nice without privilege.
pub fn set_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: gettid has no preconditions; setpriority with PRIO_PROCESS and a thread id
    // changes only that thread's nice value.
    let rc = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
