//! What a running process costs while it waits: how often its threads went to sleep
//! (each voluntary context switch ends one wake-up) and how much CPU time it used, read
//! from `/proc/PID/task/*` (Linux). Used to show that a server holding idle connections
//! is not woken for them (seed 002, issue 15). [`process_cpu_ns`] and [`listener_pid`]:
//! what a process (a head, an engine found by its port) spent over a bench pass
//! (`granary bench --suite object`'s CPU per GiB).

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Counters of one process at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcCounters {
    /// Voluntary context switches of the threads whose name starts with the prefix asked
    /// for (granary's workers are `granary-worker-N`).
    pub wakeups: u64,
    /// CPU time of every thread of the process, in ns (`schedstat`'s run time).
    pub cpu_ns: u64,
}

impl ProcCounters {
    /// Reads `pid`'s counters; threads that exit while they are read are skipped.
    ///
    /// # Errors
    /// If `/proc/PID/task` cannot be listed (the process is gone, or not Linux).
    pub fn read(pid: u32, thread_prefix: &str) -> std::io::Result<Self> {
        let mut counters = Self::default();
        for task in fs::read_dir(format!("/proc/{pid}/task"))? {
            let dir = task?.path();
            let Ok(schedstat) = fs::read_to_string(dir.join("schedstat")) else {
                continue;
            };
            counters.cpu_ns += first_number(&schedstat);
            let name = fs::read_to_string(dir.join("comm")).unwrap_or_default();
            if !name.starts_with(thread_prefix) {
                continue;
            }
            let status = fs::read_to_string(dir.join("status")).unwrap_or_default();
            counters.wakeups += status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .map_or(0, first_number);
        }
        Ok(counters)
    }

    /// Wake-ups and CPU milliseconds per second between `earlier` and `self`.
    #[must_use]
    pub fn rates_since(&self, earlier: &Self, over: Duration) -> (f64, f64) {
        let secs = over.as_secs_f64();
        let wakeups = self.wakeups.saturating_sub(earlier.wakeups) as f64 / secs;
        let cpu_ms = self.cpu_ns.saturating_sub(earlier.cpu_ns) as f64 / 1e6 / secs;
        (wakeups, cpu_ms)
    }
}

/// Nanoseconds of one clock tick of `/proc/PID/stat` (`USER_HZ`, 100 on every
/// architecture Linux runs this on: the ABI fixes it, whatever the kernel's `HZ`).
const TICK_NS: u64 = 10_000_000;

/// CPU time `pid` has used, user and system, in ns: its own threads, those that exited
/// included (`/proc/PID/stat`, in ticks of 10 ms), and with `children` its exited
/// children that it waited for and its live children too (PostgreSQL's backends are
/// children of its postmaster). Unlike [`ProcCounters::cpu_ns`] nothing a thread did is
/// lost when it exits between two readings, so the difference of two readings is what
/// the process spent between them, to a tick.
///
/// # Errors
/// If `/proc/PID/stat` cannot be read or parsed (the process is gone, or not Linux).
pub fn process_cpu_ns(pid: u32, children: bool) -> std::io::Result<u64> {
    let (own, waited) = stat_ticks(pid)?;
    if !children {
        return Ok(own * TICK_NS);
    }
    let mut ticks = own + waited;
    for entry in fs::read_dir("/proc")?.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if parent_of(child) == Some(pid) {
            // A child that exits now is not counted twice: gone from /proc, it is in
            // `waited` only once its parent reaped it, at a later reading.
            ticks += stat_ticks(child).map_or(0, |(own, _)| own);
        }
    }
    Ok(ticks * TICK_NS)
}

/// The fields of `/proc/PID/stat` after the command name (which may hold spaces).
fn stat_fields(pid: u32) -> std::io::Result<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| std::io::Error::other(format!("/proc/{pid}/stat: no command name")))?;
    Ok(rest.split_whitespace().map(str::to_owned).collect())
}

/// (utime + stime, cutime + cstime) of `pid`, in ticks.
fn stat_ticks(pid: u32) -> std::io::Result<(u64, u64)> {
    let f = stat_fields(pid)?;
    // After the name: state is field 3 of the whole line, so utime (14) is index 11.
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    if f.len() < 15 {
        return Err(std::io::Error::other(format!(
            "/proc/{pid}/stat: too short"
        )));
    }
    Ok((n(11) + n(12), n(13) + n(14)))
}

fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(pid).ok()?.get(1)?.parse().ok()
}

/// The process listening on TCP `port` of 127.0.0.1 or any address (an engine of the
/// object suite, found by the port its URL names), if this process may see it.
#[must_use]
pub fn listener_pid(port: u16) -> Option<u32> {
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| fs::read_to_string(p).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    let local_port = f.get(1)?.rsplit_once(':')?.1;
                    let listening = f.get(3)? == &"0A";
                    let ours = u16::from_str_radix(local_port, 16).ok()? == port;
                    let inode = f.get(9)?;
                    (listening && ours).then(|| format!("socket:[{inode}]"))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    if inodes.is_empty() {
        return None;
    }
    fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
        let fds = fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
        fds.flatten()
            .filter_map(|fd| fs::read_link(fd.path()).ok())
            .any(|link| inodes.iter().any(|i| link.as_os_str() == i.as_str()))
            .then_some(pid)
    })
}

/// An RPC NULL call to NFSv3 with AUTH_NONE, in one record.
pub fn null_call(xid: u32) -> Vec<u8> {
    let words = [xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0];
    let mut record = Vec::with_capacity(4 + words.len() * 4);
    record.extend_from_slice(&(0x8000_0000u32 | (words.len() as u32 * 4)).to_be_bytes());
    for word in words {
        record.extend_from_slice(&word.to_be_bytes());
    }
    record
}

/// `count` connections to `addr`, each answered one NULL call, to be left idle.
///
/// # Errors
/// If a connection is refused or its NULL call gets no reply within 10 s.
pub fn idle_connections(addr: SocketAddr, count: usize) -> Result<Vec<TcpStream>, String> {
    let mut conns = Vec::with_capacity(count);
    for i in 0..count {
        let mut conn = TcpStream::connect(addr).map_err(|e| format!("connection {i}: {e}"))?;
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        conn.write_all(&null_call(i as u32))
            .map_err(|e| format!("connection {i}: {e}"))?;
        let mut reply = [0u8; 28];
        conn.read_exact(&mut reply)
            .map_err(|e| format!("connection {i}: no reply to NULL: {e}"))?;
        conns.push(conn);
    }
    Ok(conns)
}

fn first_number(text: &str) -> u64 {
    text.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_cpu_counts_a_thread_that_exited_and_a_listener_is_found_by_its_port() {
        let pid = std::process::id();
        let before = process_cpu_ns(pid, false).unwrap();
        std::thread::spawn(|| {
            let ran = || first_number(&fs::read_to_string("/proc/thread-self/schedstat").unwrap());
            let start = ran();
            while ran() < start + 50_000_000 {}
        })
        .join()
        .unwrap();
        let after = process_cpu_ns(pid, true).unwrap();
        assert!(after >= before + 40_000_000, "{before} {after}");
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(listener_pid(port), Some(pid));
        drop(l);
        assert_eq!(listener_pid(port), None);
    }

    #[test]
    fn a_sleeping_thread_counts_its_wakeups_and_a_spinning_one_its_cpu() {
        let pid = std::process::id();
        let before = ProcCounters::read(pid, "lab-sleeper").unwrap();
        std::thread::Builder::new()
            .name("lab-sleeper".into())
            .spawn(|| {
                for _ in 0..20 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
            .unwrap()
            .join()
            .unwrap();
        // The thread is gone, its counts with it: a live one is needed to see them.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done) = std::sync::mpsc::channel::<()>();
        let sleeper = std::thread::Builder::new()
            .name("lab-sleeper".into())
            .spawn(move || {
                for _ in 0..20 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                // Spins until this thread itself has run 30 ms (however busy the machine).
                let ran =
                    || first_number(&fs::read_to_string("/proc/thread-self/schedstat").unwrap());
                let start = ran();
                while ran() < start + 30_000_000 {}
                done_tx.send(()).ok();
                rx.recv().ok();
            })
            .unwrap();
        // Read once it has slept and spun, while it still lives (a fixed wait was too
        // short on a loaded machine).
        done.recv_timeout(Duration::from_secs(60)).unwrap();
        let after = ProcCounters::read(pid, "lab-sleeper").unwrap();
        tx.send(()).unwrap();
        sleeper.join().unwrap();
        assert!(after.wakeups >= before.wakeups + 20, "{before:?} {after:?}");
        assert!(
            after.cpu_ns >= before.cpu_ns + 25_000_000,
            "{before:?} {after:?}"
        );
    }
}
