//! UNSTABLE writes a head holds until they are published (COMMIT, FILE_SYNC, the timer,
//! or a full buffer).
//!
//! Bounded per file ([`PENDING_FILE_MAX_BYTES`] open, plus at most one object's worth a
//! publish has taken and not yet committed) and per head ([`PENDING_HEAD_MAX_BYTES`]). The
//! head that holds them reads them over the published data (its clients read their own
//! writes); other heads see them once published, which is close-to-open for clients that
//! COMMIT on close, as the Linux client does.
//!
//! Each extent has a sequence number; a publish takes a snapshot of the oldest extents,
//! at most [`OBJECT_MAX_BYTES`] of them, up to one number and, once their rows committed,
//! releases exactly those. Writes that arrive while it uploads are buffered for the next
//! publish (a sequential writer fills the next object while the last one uploads, so its
//! throughput is the store's PUT throughput, not PUT and fill one after the other). An
//! extent a publish took is never extended afterwards.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::limits::{OBJECT_MAX_BYTES, PENDING_FILE_MAX_BYTES, PENDING_HEAD_MAX_BYTES};

/// One buffered write (consecutive writes merged).
#[derive(Debug, Clone)]
pub(crate) struct Extent {
    pub offset: u64,
    pub data: Vec<u8>,
    seq: u64,
}

impl Extent {
    pub(crate) fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// One file's buffered writes.
#[derive(Debug, Default)]
struct FileBuf {
    extents: Vec<Extent>,
    bytes: usize,
    /// Extents up to this sequence number belong to a publish in progress (or one that
    /// failed: the next publish takes them first).
    sealed: u64,
    /// Bytes of those extents.
    sealed_bytes: usize,
    /// When the oldest extent arrived (the injected clock's monotonic time).
    since: Duration,
    /// The ctime the clients were told for the last write (ns), kept by the publish.
    stamp_ns: i64,
}

impl FileBuf {
    /// Counts `bytes` and `sealed_bytes` again after extents went or shrank.
    fn recount(&mut self) {
        let sealed = self.sealed;
        let (all, taken) = self.extents.iter().fold((0, 0), |(all, taken), e| {
            let n = e.data.len();
            (all + n, taken + if e.seq <= sealed { n } else { 0 })
        });
        self.bytes = all;
        self.sealed_bytes = taken;
    }
}

/// What a publish takes.
pub(crate) struct Snapshot {
    pub extents: Vec<Extent>,
    pub upto: u64,
    pub stamp_ns: i64,
}

/// Why a write could not be buffered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// This file holds its maximum of open (not yet taken) data: publish it first.
    File,
    /// The head holds its maximum in other files' data: retry later.
    Head,
}

#[derive(Default)]
struct State {
    files: HashMap<i64, FileBuf>,
    total: usize,
    next_seq: u64,
}

/// Every file's buffered writes of one head.
#[derive(Default)]
pub(crate) struct Pending {
    state: Mutex<State>,
    /// One publish per file at a time.
    publishing: Mutex<HashMap<i64, Arc<tokio::sync::Mutex<()>>>>,
}

impl Pending {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Buffers `data` at `offset` of `file`.
    pub(crate) fn add(
        &self,
        file: i64,
        offset: u64,
        data: &[u8],
        now: Duration,
        stamp_ns: i64,
    ) -> Result<(), Full> {
        let mut s = self.state();
        let (held, open) = s
            .files
            .get(&file)
            .map_or((0, 0), |f| (f.bytes, f.bytes - f.sealed_bytes));
        if open + data.len() > PENDING_FILE_MAX_BYTES {
            return Err(if held == 0 { Full::Head } else { Full::File });
        }
        if s.total + data.len() > PENDING_HEAD_MAX_BYTES {
            return Err(if held > 0 { Full::File } else { Full::Head });
        }
        s.next_seq += 1;
        let seq = s.next_seq;
        s.total += data.len();
        let f = s.files.entry(file).or_default();
        if f.extents.is_empty() {
            f.since = now;
        }
        f.bytes += data.len();
        f.stamp_ns = f.stamp_ns.max(stamp_ns);
        let sealed = f.sealed;
        match f.extents.last_mut() {
            Some(last) if last.seq > sealed && last.end() == offset => {
                last.data.extend_from_slice(data);
                last.seq = seq;
            }
            _ => f.extents.push(Extent {
                offset,
                data: data.to_vec(),
                seq,
            }),
        }
        Ok(())
    }

    /// The end of `file`'s buffered data and the ctime its clients were told, if any.
    pub(crate) fn overlay(&self, file: i64) -> Option<(u64, i64)> {
        let s = self.state();
        let f = s.files.get(&file)?;
        let end = f.extents.iter().map(Extent::end).max()?;
        Some((end, f.stamp_ns))
    }

    /// Copies buffered bytes of `file` over `buf`, which holds the file from `offset`.
    pub(crate) fn read_over(&self, file: i64, offset: u64, buf: &mut [u8]) {
        let s = self.state();
        let Some(f) = s.files.get(&file) else {
            return;
        };
        let end = offset + buf.len() as u64;
        for e in &f.extents {
            let from = e.offset.max(offset);
            let to = e.end().min(end);
            if from >= to {
                continue;
            }
            let dst = usize::try_from(from - offset).unwrap_or(0);
            let src = usize::try_from(from - e.offset).unwrap_or(0);
            let n = usize::try_from(to - from).unwrap_or(0);
            buf[dst..dst + n].copy_from_slice(&e.data[src..src + n]);
        }
    }

    /// Drops buffered bytes of `file` at or past `size` (a truncation).
    pub(crate) fn truncate(&self, file: i64, size: u64) {
        let mut s = self.state();
        let Some(f) = s.files.get_mut(&file) else {
            return;
        };
        let before = f.bytes;
        f.extents.retain_mut(|e| {
            if e.end() > size {
                e.data
                    .truncate(usize::try_from(size.saturating_sub(e.offset)).unwrap_or(0));
            }
            !e.data.is_empty()
        });
        f.recount();
        let dropped = before - f.bytes;
        s.total -= dropped;
    }

    /// Forgets `file` (its last link went).
    pub(crate) fn drop_file(&self, file: i64) {
        let mut s = self.state();
        if let Some(f) = s.files.remove(&file) {
            s.total -= f.bytes;
        }
    }

    /// The lock a publish of `file` holds.
    pub(crate) fn publish_lock(&self, file: i64) -> Arc<tokio::sync::Mutex<()>> {
        let mut p = self
            .publishing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(p.entry(file).or_default())
    }

    /// Whether `len` more bytes fit in `file`'s open data now.
    pub(crate) fn fits(&self, file: i64, len: usize) -> bool {
        let s = self.state();
        let open = s.files.get(&file).map_or(0, |f| f.bytes - f.sealed_bytes);
        open + len <= PENDING_FILE_MAX_BYTES
    }

    /// The sequence number of `file`'s newest buffered write, if any.
    pub(crate) fn newest(&self, file: i64) -> Option<u64> {
        let s = self.state();
        Some(s.files.get(&file)?.extents.last()?.seq)
    }

    /// Takes what a publish of `file` will write (nothing if none is buffered): the
    /// oldest extents, at most [`OBJECT_MAX_BYTES`] of them (one object; always at least
    /// one extent, and no open extent is larger), so that data a failed publish took comes
    /// first and newer writes stay newer.
    pub(crate) fn snapshot(&self, file: i64) -> Option<Snapshot> {
        let mut s = self.state();
        let f = s.files.get_mut(&file)?;
        let mut bytes = 0;
        let taken = f
            .extents
            .iter()
            .enumerate()
            .take_while(|(i, e)| {
                bytes += e.data.len();
                *i == 0 || bytes <= OBJECT_MAX_BYTES
            })
            .count();
        let extents = f.extents[..taken].to_vec();
        let upto = extents.last()?.seq;
        f.sealed = upto;
        f.sealed_bytes = extents.iter().map(|e| e.data.len()).sum();
        Some(Snapshot {
            extents,
            upto,
            stamp_ns: f.stamp_ns,
        })
    }

    /// Releases what a publish committed.
    pub(crate) fn release(&self, file: i64, upto: u64) {
        let mut s = self.state();
        let Some(f) = s.files.get_mut(&file) else {
            return;
        };
        let before = f.bytes;
        f.extents.retain(|e| e.seq > upto);
        f.recount();
        let released = before - f.bytes;
        let empty = f.extents.is_empty();
        s.total -= released;
        if empty {
            s.files.remove(&file);
            drop(s);
            let mut p = self
                .publishing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if p.get(&file).is_some_and(|l| Arc::strong_count(l) == 1) {
                p.remove(&file);
            }
        }
    }

    /// Files whose oldest buffered write is older than `age` at `now`.
    pub(crate) fn older_than(&self, now: Duration, age: Duration) -> Vec<i64> {
        let s = self.state();
        s.files
            .iter()
            .filter(|(_, f)| now.saturating_sub(f.since) >= age)
            .map(|(&id, _)| id)
            .collect()
    }

    /// Bytes held by every file.
    #[cfg(test)]
    pub(crate) fn total_bytes(&self) -> usize {
        self.state().total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_consecutive_writes_but_not_into_a_snapshot() {
        let p = Pending::default();
        let t = Duration::ZERO;
        p.add(1, 0, b"abc", t, 5).unwrap();
        p.add(1, 3, b"def", t, 6).unwrap();
        let snap = p.snapshot(1).unwrap();
        assert_eq!(snap.extents.len(), 1);
        assert_eq!(snap.extents[0].data, b"abcdef");
        p.add(1, 6, b"g", t, 7).unwrap();
        p.release(1, snap.upto);
        let mut buf = [0u8; 7];
        p.read_over(1, 0, &mut buf);
        assert_eq!(&buf, b"\0\0\0\0\0\0g");
        assert_eq!(p.total_bytes(), 1);
        assert_eq!(p.overlay(1), Some((7, 7)));
    }

    #[test]
    fn a_file_takes_writes_while_a_publish_uploads_and_a_snapshot_is_one_object_at_most() {
        let p = Pending::default();
        let mib = vec![7u8; 1 << 20];
        let objects = PENDING_FILE_MAX_BYTES / mib.len();
        let t = Duration::ZERO;
        for i in 0..objects {
            p.add(1, (i * mib.len()) as u64, &mib, t, 0).unwrap();
        }
        let at = |i: usize| (i * mib.len()) as u64;
        assert_eq!(p.add(1, at(objects), &mib, t, 0), Err(Full::File));
        // A publish took the first object's worth: the next one fills while it uploads.
        let first = p.snapshot(1).unwrap();
        assert_eq!(first.extents.len(), 1, "consecutive writes merged");
        for i in objects..2 * objects {
            p.add(1, at(i), &mib, t, 0).unwrap();
        }
        assert_eq!(p.add(1, at(2 * objects), &mib, t, 0), Err(Full::File));
        assert_eq!(p.total_bytes(), 2 * PENDING_FILE_MAX_BYTES);
        // That publish failed (no release): the next snapshot takes the same data first,
        // and no more than one object.
        let again = p.snapshot(1).unwrap();
        assert_eq!(again.upto, first.upto);
        assert_eq!(again.extents[0].offset, 0);
        let taken: usize = again.extents.iter().map(|e| e.data.len()).sum();
        assert_eq!(taken, OBJECT_MAX_BYTES);
        p.release(1, again.upto);
        assert_eq!(p.total_bytes(), PENDING_FILE_MAX_BYTES);
        // The rest is the second object, newest last; still full of open data.
        assert_eq!(p.add(1, at(2 * objects), &mib, t, 0), Err(Full::File));
        let second = p.snapshot(1).unwrap();
        assert_eq!(second.extents[0].offset, at(objects));
        assert_eq!(p.newest(1), Some(second.upto));
        p.release(1, second.upto);
        assert_eq!(p.total_bytes(), 0);
        assert_eq!(p.newest(1), None);
    }

    #[test]
    fn bounds_and_truncation() {
        let p = Pending::default();
        let big = vec![1u8; PENDING_FILE_MAX_BYTES];
        p.add(1, 0, &big, Duration::ZERO, 0).unwrap();
        assert_eq!(p.add(1, 0, b"x", Duration::ZERO, 0), Err(Full::File));
        p.truncate(1, 10);
        assert_eq!(p.total_bytes(), 10);
        p.drop_file(1);
        assert_eq!(p.total_bytes(), 0);
        assert!(p.overlay(1).is_none());
    }
}
