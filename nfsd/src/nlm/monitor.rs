//! NSM's records: this server's state number, the hosts that hold (or held) NLM locks,
//! and SM_MON registrations of local callers.
//!
//! Hosts that took an NLM lock are kept in the state directory so that a restarted server
//! tells them with SM_NOTIFY (they then reclaim their locks during the grace period).
//! Files in the state directory:
//! - `nsm-state`: this server's NSM state number in decimal, odd while it runs; each
//!   start adds 2 (1 on the first), so clients tell one boot from the next;
//! - `nsm-hosts`: one host per line, `<address> <caller_name in hex>`.
//!
//! Both are written to a temporary name, synced and renamed into place, then the
//! directory is synced: a crash leaves the old file or the new one, never half of one.
//! A host is written before its first lock is granted; a host forgotten (FREE_ALL,
//! SM_NOTIFY) leaves the file at the next write (an extra SM_NOTIFY after a restart is
//! harmless). SM_MON registrations live in memory only.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use nlm::nsm::{Mon, MonId, MyId};

use crate::limits::{MAX_NSM_HOSTS, MAX_NSM_WATCHES};

const STATE_FILE: &str = "nsm-state";
const HOSTS_FILE: &str = "nsm-hosts";

/// A host as NLM knows it: the address it calls from and the name it gives.
pub type Host = (IpAddr, Bytes);

/// Why a host could not be recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchError {
    /// [`MAX_NSM_HOSTS`] hosts are recorded.
    Full,
    /// Recording needs a write and a sync, and this thread may not block.
    WouldBlock,
    /// The state directory could not be written.
    Io(String),
}

#[derive(Debug, Default)]
struct Inner {
    hosts: BTreeSet<Host>,
    /// The NSM state each host's last LOCK carried (`nlm4_lockargs.state`).
    states: HashMap<Host, i32>,
    watches: Vec<Mon>,
}

/// NSM's records. See the module docs.
#[derive(Debug)]
pub struct Monitor {
    dir: Option<PathBuf>,
    state: AtomicI32,
    previous: Vec<Host>,
    inner: Mutex<Inner>,
}

impl Monitor {
    /// Records kept in memory only (no state directory): state 1, no previous hosts.
    #[must_use]
    pub fn in_memory() -> Self {
        Self {
            dir: None,
            state: AtomicI32::new(1),
            previous: Vec::new(),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Opens the records in `dir`: reads the previous boot's state and hosts, and writes
    /// this boot's state number (the previous one plus 2, odd).
    ///
    /// # Errors
    /// The state file cannot be written, with the path and the error.
    pub fn open(dir: &Path) -> Result<Self, String> {
        let before = std::fs::read_to_string(dir.join(STATE_FILE))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .unwrap_or(0);
        let state = if before % 2 == 0 {
            before + 1
        } else {
            before + 2
        };
        let state = if state <= 0 { 1 } else { state };
        write_synced(dir, STATE_FILE, format!("{state}\n").as_bytes())?;
        let previous = read_hosts(&dir.join(HOSTS_FILE));
        Ok(Self {
            dir: Some(dir.to_path_buf()),
            state: AtomicI32::new(state),
            inner: Mutex::new(Inner {
                hosts: previous.iter().cloned().collect(),
                states: HashMap::new(),
                watches: Vec::new(),
            }),
            previous,
        })
    }

    /// This server's NSM state number (SM_STAT, SM_NOTIFY).
    #[must_use]
    pub fn state(&self) -> i32 {
        self.state.load(Ordering::Relaxed)
    }

    /// Hosts that held locks when the previous boot ended: tell them with SM_NOTIFY.
    #[must_use]
    pub fn previous_hosts(&self) -> &[Host] {
        &self.previous
    }

    /// Every recorded host.
    #[must_use]
    pub fn hosts(&self) -> Vec<Host> {
        self.lock().hosts.iter().cloned().collect()
    }

    /// Addresses of the recorded hosts named `name`.
    #[must_use]
    pub fn hosts_named(&self, name: &[u8]) -> Vec<IpAddr> {
        let g = self.lock();
        g.hosts
            .iter()
            .filter(|(_, n)| n.as_ref() == name)
            .map(|(a, _)| *a)
            .collect()
    }

    /// Records `host` before its first lock. `idle` says whether a recorded host holds
    /// nothing and may be forgotten to make room.
    ///
    /// # Errors
    /// See [`WatchError`]; nothing is changed then.
    pub fn watch(
        &self,
        host: IpAddr,
        name: &[u8],
        idle: impl Fn(&Host) -> bool,
    ) -> Result<(), WatchError> {
        let key = (host.to_canonical(), Bytes::copy_from_slice(name));
        let mut g = self.lock();
        if g.hosts.contains(&key) {
            return Ok(());
        }
        if self.dir.is_some() && !sync::blocking::allowed() {
            return Err(WatchError::WouldBlock);
        }
        if g.hosts.len() >= MAX_NSM_HOSTS {
            g.hosts.retain(|h| !idle(h));
            if g.hosts.len() >= MAX_NSM_HOSTS {
                return Err(WatchError::Full);
            }
        }
        let mut next = g.hosts.clone();
        next.insert(key);
        if let Some(dir) = &self.dir {
            write_synced(dir, HOSTS_FILE, &encode_hosts(&next)).map_err(WatchError::Io)?;
        }
        g.hosts = next;
        Ok(())
    }

    /// Notes the NSM state a LOCK of `host` carried; true when it differs from an earlier
    /// one (both non-zero): the host restarted, and its SM_NOTIFY did not reach us (the
    /// notice was lost, or granary's UDP port was taken).
    pub fn rebooted(&self, host: IpAddr, name: &[u8], state: i32) -> bool {
        if state == 0 {
            return false;
        }
        let key = (host.to_canonical(), Bytes::copy_from_slice(name));
        let mut g = self.lock();
        if g.states.len() >= MAX_NSM_HOSTS && !g.states.contains_key(&key) {
            return false;
        }
        let before = g.states.insert(key, state);
        before.is_some_and(|b| b != 0 && b != state)
    }

    /// Forgets `host` (its locks were freed). Written at the next [`Monitor::watch`].
    pub fn forget(&self, host: IpAddr, name: &[u8]) {
        let key = (host.to_canonical(), Bytes::copy_from_slice(name));
        let mut g = self.lock();
        g.hosts.remove(&key);
        g.states.remove(&key);
    }

    /// SM_SIMU_CRASH: a new state number, as after a restart. Returns it.
    pub fn bump_state(&self) -> i32 {
        let s = self.state.fetch_add(2, Ordering::Relaxed) + 2;
        if let Some(dir) = &self.dir {
            if let Err(e) = write_synced(dir, STATE_FILE, format!("{s}\n").as_bytes()) {
                tracing::warn!(error = %e, "NSM state number not written");
            }
        }
        s
    }

    /// SM_MON: `mon` is told when its host reboots. False at [`MAX_NSM_WATCHES`].
    pub fn add_watch(&self, mon: Mon) -> bool {
        let mut g = self.lock();
        if let Some(w) = g.watches.iter_mut().find(|w| w.mon_id == mon.mon_id) {
            *w = mon;
            return true;
        }
        if g.watches.len() >= MAX_NSM_WATCHES {
            return false;
        }
        g.watches.push(mon);
        true
    }

    /// SM_UNMON.
    pub fn remove_watch(&self, id: &MonId) {
        self.lock().watches.retain(|w| w.mon_id != *id);
    }

    /// SM_UNMON_ALL.
    pub fn remove_watches_of(&self, my_id: &MyId) {
        self.lock().watches.retain(|w| w.mon_id.my_id != *my_id);
    }

    /// The registrations watching `mon_name`.
    #[must_use]
    pub fn watches_of(&self, mon_name: &[u8]) -> Vec<Mon> {
        let g = self.lock();
        g.watches
            .iter()
            .filter(|w| w.mon_id.mon_name.as_bytes() == mon_name)
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn encode_hosts(hosts: &BTreeSet<Host>) -> Vec<u8> {
    let mut out = String::new();
    for (addr, name) in hosts {
        let hex: String = name.iter().map(|b| format!("{b:02x}")).collect();
        out.push_str(&format!("{addr} {hex}\n"));
    }
    out.into_bytes()
}

/// The hosts in `path`; lines that do not parse are skipped with a warning.
fn read_hosts(path: &Path) -> Vec<Host> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut hosts = Vec::new();
    for line in text.lines().take(MAX_NSM_HOSTS) {
        match parse_host(line) {
            Some(h) => hosts.push(h),
            None => {
                tracing::warn!(path = %path.display(), line, "unreadable NSM host line skipped")
            }
        }
    }
    hosts
}

fn parse_host(line: &str) -> Option<Host> {
    let (addr, hex) = line.split_once(' ')?;
    let addr: IpAddr = addr.parse().ok()?;
    if hex.len() % 2 != 0 || hex.len() > 2 * nlm::limits::LM_MAXSTRLEN as usize {
        return None;
    }
    let name = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    Some((addr, Bytes::from(name)))
}

/// Writes `bytes` to `dir/name` so that a crash leaves the old or the new file whole.
fn write_synced(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let err = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let mut f = std::fs::File::create(&tmp).map_err(err)?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(err)?;
    std::fs::rename(&tmp, &path).map_err(err)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "granary-nsm-{tag}-{}-{:x}",
            std::process::id(),
            rand_u64()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn rand_u64() -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(7);
        h.finish()
    }

    #[test]
    fn hosts_and_state_survive_a_restart() {
        let dir = tmpdir("restart");
        let m = Monitor::open(&dir).unwrap();
        assert_eq!(m.state(), 1);
        assert!(m.previous_hosts().is_empty());
        let a: IpAddr = "10.0.0.7".parse().unwrap();
        m.watch(a, b"client a", |_| false).unwrap();
        m.watch("::1".parse().unwrap(), &[0, 0xff], |_| false)
            .unwrap();
        drop(m);
        let m = Monitor::open(&dir).unwrap();
        assert_eq!(m.state(), 3, "odd, and two more each boot");
        let mut prev = m.previous_hosts().to_vec();
        prev.sort();
        assert_eq!(
            prev,
            vec![
                (a, Bytes::from_static(b"client a")),
                ("::1".parse().unwrap(), Bytes::from_static(&[0, 0xff])),
            ]
        );
        assert_eq!(m.hosts_named(b"client a"), vec![a]);
        m.forget(a, b"client a");
        assert!(m.hosts_named(b"client a").is_empty());
        std::fs::write(dir.join(HOSTS_FILE), "garbage\n10.0.0.1 6869\n").unwrap();
        let m = Monitor::open(&dir).unwrap();
        assert_eq!(m.state(), 5);
        assert_eq!(
            m.previous_hosts(),
            &[("10.0.0.1".parse().unwrap(), Bytes::from_static(b"hi"))]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn recording_a_new_host_defers_on_an_event_loop() {
        let dir = tmpdir("defer");
        let m = Monitor::open(&dir).unwrap();
        let a: IpAddr = "10.0.0.7".parse().unwrap();
        let r = sync::blocking::forbidden(|| m.watch(a, b"x", |_| false));
        assert_eq!(r, Err(WatchError::WouldBlock));
        assert!(m.hosts().is_empty(), "nothing changed");
        m.watch(a, b"x", |_| false).unwrap();
        // Known already: no write, so no need to block.
        assert_eq!(
            sync::blocking::forbidden(|| m.watch(a, b"x", |_| false)),
            Ok(())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
