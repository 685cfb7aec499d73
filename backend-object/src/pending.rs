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
//!
//! A file's extents never overlap: a write drops the bytes it covers from older extents,
//! so a range sent again (a WRITE the client retries after JUKEBOX) replaces its bytes
//! instead of adding a copy to hold and upload. A publish that fails rests the file
//! (`may_publish`, `failed`) before the next try.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::limits::{
    OBJECT_MAX_BYTES, PENDING_FILE_MAX_BYTES, PENDING_HEAD_MAX_BYTES, PUBLISH_RETRY_MAX,
    PUBLISH_RETRY_MIN,
};

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
    /// The least size a truncation on this head cut the file to since the publish in
    /// progress took its snapshot: that publish commits none of its bytes at or past it
    /// ([`Pending::cut`]).
    cut: Option<u64>,
    /// When the oldest extent arrived (the injected clock's monotonic time).
    since: Duration,
    /// The ctime the clients were told for the last write (ns), kept by the publish.
    stamp_ns: i64,
    /// Publishes tried since the last one that committed, and the time before which no
    /// other is tried ([`Pending::may_publish`]).
    tries: u32,
    rest_until: Duration,
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

    /// Drops the bytes of `[from, to)` from every extent (the caller adds newer ones
    /// there). An extent cut in two keeps its front; its back becomes an extent of its own
    /// with a new sequence number (from `next_seq`), after the others: extents never
    /// overlap, so their order decides nothing but what a publish takes first. (Should the
    /// cut extent belong to a publish in progress, that publish still commits the old
    /// bytes, and the back is published again after it: correct, and rare.)
    fn uncover(&mut self, from: u64, to: u64, next_seq: &mut u64) {
        let mut backs = Vec::new();
        self.extents.retain_mut(|e| {
            if e.end() <= from || e.offset >= to {
                return true;
            }
            if e.offset < from && e.end() > to {
                let cut = usize::try_from(to - e.offset).unwrap_or(e.data.len());
                backs.push((to, e.data.split_off(cut)));
            }
            if e.offset < from {
                e.data
                    .truncate(usize::try_from(from - e.offset).unwrap_or(0));
                return true;
            }
            if e.end() > to {
                let gone = usize::try_from(to - e.offset).unwrap_or(0);
                e.data.drain(..gone);
                e.offset = to;
                return true;
            }
            false
        });
        for (offset, data) in backs {
            *next_seq += 1;
            self.extents.push(Extent {
                offset,
                data,
                seq: *next_seq,
            });
        }
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

    /// Buffers `data` at `offset` of `file`. Bytes of older extents that it covers are
    /// dropped (a client that sends a range again, such as a WRITE retried after JUKEBOX,
    /// replaces it rather than adding a copy), so a file's extents never overlap and it
    /// holds at most its own distinct bytes.
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
        let State {
            files, next_seq, ..
        } = &mut *s;
        let f = files.entry(file).or_default();
        if f.extents.is_empty() {
            f.since = now;
        }
        let before = f.bytes;
        f.stamp_ns = f.stamp_ns.max(stamp_ns);
        if !data.is_empty() {
            f.uncover(offset, offset + data.len() as u64, next_seq);
        }
        *next_seq += 1;
        let seq = *next_seq;
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
        f.recount();
        let after = f.bytes;
        s.total = s.total + after - before;
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

    /// Drops buffered bytes of `file` at or past `size` (a truncation), and the bytes a
    /// publish in progress took there ([`Pending::cut`]). Called by the truncating
    /// transaction after it holds the file's row and before it commits: a publish's
    /// transaction, which locks the row before it reads the cut, then sees it.
    pub(crate) fn truncate(&self, file: i64, size: u64) {
        let mut s = self.state();
        let Some(f) = s.files.get_mut(&file) else {
            return;
        };
        f.cut = Some(f.cut.map_or(size, |c| c.min(size)));
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

    /// Where a truncation on this head cut `file` since the publish in progress took its
    /// snapshot: its extents' bytes at or past this are gone with the truncation and must
    /// not be committed (they would come back past the new end).
    pub(crate) fn cut(&self, file: i64) -> Option<u64> {
        self.state().files.get(&file)?.cut
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
        f.cut = None;
        f.sealed_bytes = extents.iter().map(|e| e.data.len()).sum();
        Some(Snapshot {
            extents,
            upto,
            stamp_ns: f.stamp_ns,
        })
    }

    /// Whether a publish of `file` may be tried at `now`; if so, it is counted as tried,
    /// and the next one waits [`PUBLISH_RETRY_MIN`] from now, twice that after each
    /// publish that did not commit, up to [`PUBLISH_RETRY_MAX`], until one commits
    /// ([`Pending::release`]). A store or database that fails every publish is then
    /// asked a few times a minute for the file, not once per retry of every client (which
    /// sent a 4 KiB file's data to S3 500 times a minute in CI).
    pub(crate) fn may_publish(&self, file: i64, now: Duration) -> bool {
        let mut s = self.state();
        let Some(f) = s.files.get_mut(&file) else {
            return true;
        };
        if now < f.rest_until {
            return false;
        }
        f.rest_until = now + backoff(f.tries);
        f.tries = f.tries.saturating_add(1);
        true
    }

    /// A publish of `file` failed at `now`: the next waits from now.
    pub(crate) fn failed(&self, file: i64, now: Duration) {
        let mut s = self.state();
        if let Some(f) = s.files.get_mut(&file) {
            f.rest_until = now + backoff(f.tries.saturating_sub(1));
        }
    }

    /// Releases what a publish committed.
    pub(crate) fn release(&self, file: i64, upto: u64) {
        let mut s = self.state();
        let Some(f) = s.files.get_mut(&file) else {
            return;
        };
        f.tries = 0;
        f.rest_until = Duration::ZERO;
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

/// The rest after `tries` publishes that did not commit.
fn backoff(tries: u32) -> Duration {
    PUBLISH_RETRY_MIN
        .saturating_mul(1 << tries.min(16))
        .min(PUBLISH_RETRY_MAX)
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
    fn a_range_sent_again_replaces_its_bytes_and_never_adds_a_copy() {
        let p = Pending::default();
        let t = Duration::ZERO;
        p.add(1, 0, b"aaaaaaaaaa", t, 0).unwrap();
        // A WRITE retried after JUKEBOX: the same range, the same size held.
        for _ in 0..100 {
            p.add(1, 0, b"aaaaaaaaaa", t, 0).unwrap();
        }
        assert_eq!(p.total_bytes(), 10);
        // Inside one extent: it is cut in two around the new bytes.
        p.add(1, 3, b"BB", t, 0).unwrap();
        // Over the end of one and the start of the next.
        p.add(1, 12, b"cccc", t, 0).unwrap();
        p.add(1, 8, b"DDDDD", t, 0).unwrap();
        assert_eq!(p.total_bytes(), 16);
        let mut buf = [0u8; 16];
        p.read_over(1, 0, &mut buf);
        assert_eq!(&buf, b"aaaBBaaaDDDDDccc");
        // What a publish took is cut too: a failed publish's next try takes the new bytes
        // once, beside what is left of the old.
        let taken = p.snapshot(1).unwrap();
        p.add(1, 0, b"eeeeeeeeeeeeeeee", t, 0).unwrap();
        assert_eq!(p.total_bytes(), 16);
        let again = p.snapshot(1).unwrap();
        assert!(again.upto > taken.upto);
        let bytes: usize = again.extents.iter().map(|e| e.data.len()).sum();
        assert_eq!(bytes, 16);
        p.release(1, again.upto);
        assert_eq!(p.total_bytes(), 0);
    }

    #[test]
    fn a_failed_publish_rests_the_file_longer_each_time_until_one_commits() {
        let p = Pending::default();
        let t = Duration::from_secs(100);
        p.add(1, 0, b"x", t, 0).unwrap();
        assert!(p.may_publish(1, t));
        p.failed(1, t);
        assert!(!p.may_publish(1, t + PUBLISH_RETRY_MIN / 2));
        assert!(p.may_publish(1, t + PUBLISH_RETRY_MIN));
        p.failed(1, t + PUBLISH_RETRY_MIN);
        assert!(!p.may_publish(1, t + PUBLISH_RETRY_MIN * 2));
        assert!(p.may_publish(1, t + PUBLISH_RETRY_MIN * 3));
        for _ in 0..10 {
            p.failed(1, t);
            assert!(p.may_publish(1, t + PUBLISH_RETRY_MAX));
        }
        assert!(!p.may_publish(1, t + PUBLISH_RETRY_MAX));
        let snap = p.snapshot(1).unwrap();
        p.release(1, snap.upto);
        p.add(1, 0, b"y", t, 0).unwrap();
        assert!(p.may_publish(1, t), "a commit ends the rest");
    }

    #[test]
    fn a_truncation_cuts_what_a_publish_in_progress_took_until_the_next_snapshot() {
        let p = Pending::default();
        let t = Duration::ZERO;
        p.add(1, 0, b"abcdef", t, 0).unwrap();
        let snap = p.snapshot(1).unwrap();
        assert_eq!(p.cut(1), None);
        p.truncate(1, 4);
        p.truncate(1, 2);
        p.truncate(1, 5);
        assert_eq!(p.cut(1), Some(2), "the least size since the snapshot");
        let mut buf = [9u8; 6];
        p.read_over(1, 0, &mut buf);
        assert_eq!(&buf, b"ab\x09\x09\x09\x09");
        p.release(1, snap.upto);
        p.add(1, 2, b"cd", t, 0).unwrap();
        let next = p.snapshot(1).unwrap();
        assert_eq!(
            p.cut(1),
            None,
            "a new snapshot takes what is left after the cut"
        );
        assert_eq!(next.extents[0].data, b"cd");
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
