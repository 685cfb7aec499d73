//! UNSTABLE writes a head holds until they are published (COMMIT, FILE_SYNC, the timer,
//! or a full buffer).
//!
//! Bounded per file ([`PENDING_FILE_MAX_BYTES`] open, plus at most one object's worth a
//! publish has taken and not yet committed) and per head ([`PENDING_HEAD_MAX_BYTES`]). The
//! head that holds them reads them over the published data (its clients read their own
//! writes); other heads see them once published, which is close-to-open for clients that
//! COMMIT on close, as the Linux client does.
//!
//! Each extent has a sequence number; a publish commits the oldest extents in groups of
//! at most [`OBJECT_MAX_BYTES`] (one object each), sealed up to one number, in the order
//! they were sealed, and once a group's rows committed releases exactly its extents. A
//! file whose open data fills an object seals it at once and its upload starts (an
//! [`Upload`], at most [`UPLOADS_PER_FILE`] groups per file and [`UPLOADS_PER_HEAD`]
//! uploads per head), before any COMMIT: a sequential writer's objects upload while it
//! fills the next ones, several at a time, and the publish that commits them (COMMIT,
//! FILE_SYNC, the timer, or a writer that needs the room) finds them stored. Sealed
//! extents are never changed by a later write.
//!
//! A file's open (unsealed) extents never overlap: a write drops the bytes it covers from
//! older open extents, so a range sent again (a WRITE the client retries after JUKEBOX)
//! replaces its bytes instead of adding a copy to hold and upload. A newer extent may
//! cover a sealed one; reads lay extents oldest first and the groups commit before the
//! newer extents, so the newer bytes win in both. A publish or an upload that fails rests
//! the file (`may_publish`, `failed`, `upload_failed`) before the next try.
//!
//! A write's bytes are held as the request brought them, shared pieces (see `rope`):
//! merging, sealing and uploading copy none of them.
//!
//! The ctime a head tells its clients for a file it holds writes of (the stamp) moves on
//! every change to the file, whichever head made it and whatever the heads' clocks say:
//! the head notes the row's ctime it laid the stamp over ([`Pending::observe`]); a row
//! whose ctime moved since, but stays at or below the stamp (another head, its clock
//! behind this one's, committed a change), moves the stamp on by 1 ns, and the publish
//! commits at least that, 1 ns more if the row moved since the head last looked
//! ([`Pending::publish_stamp`]), so the ctime never goes back.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::{BoxFuture, Shared};

use crate::limits::{
    OBJECT_MAX_BYTES, PENDING_FILE_MAX_BYTES, PENDING_HEAD_MAX_BYTES, PUBLISH_RETRY_MAX,
    PUBLISH_RETRY_MIN, SEALED_PER_FILE, UPLOADS_PER_FILE, UPLOADS_PER_HEAD,
};
use crate::rope::Rope;

/// One buffered write (consecutive writes merged: their pieces joined, not copied).
#[derive(Debug, Clone)]
pub(crate) struct Extent {
    pub offset: u64,
    pub data: Rope,
    seq: u64,
    /// When its oldest bytes arrived (the injected clock's monotonic time).
    arrived: Duration,
}

impl Extent {
    pub(crate) fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// One file's buffered writes.
#[derive(Default)]
struct FileBuf {
    extents: Vec<Extent>,
    bytes: usize,
    /// Extents up to this sequence number are sealed in `groups` (or were, and went
    /// with them).
    sealed: u64,
    /// Bytes of those extents.
    sealed_bytes: usize,
    /// Sealed groups not yet committed, oldest first: the order they commit in.
    groups: VecDeque<Group>,
    /// When the oldest bytes not yet committed arrived (the injected clock's monotonic
    /// time): what the publish timer goes by. A sequential writer whose objects commit
    /// as it goes (a write that needs the room commits the oldest) never holds data that
    /// old, so the timer leaves its stream alone (it used to publish such a file every
    /// second once its first write was 3 s old, sealing part-filled objects and holding
    /// the file's publish lock while it waited for the uploads).
    since: Duration,
    /// Uploads of its groups in flight (started, not yet over): at most
    /// [`UPLOADS_PER_FILE`].
    uploads: usize,
    /// The ctime the clients were told for the last write (ns), kept by the publish.
    stamp_ns: i64,
    /// The row's ctime (ns) `stamp_ns` was last laid over: a row that moved past it
    /// changed by a commit.
    seen_ns: i64,
    /// The least ctime (ns) a publish commits: the stamp as a change committed by
    /// another head moved it (0: none did).
    moved_ns: i64,
    /// Publishes tried since the last one that committed, and the time before which no
    /// other is tried ([`Pending::may_publish`]).
    tries: u32,
    rest_until: Duration,
    /// A publish or an upload of the file failed since the last commit: no upload starts
    /// before its publish until one commits (a client resending its data meanwhile must
    /// not seal a copy per try, each to be uploaded once the store is back).
    failing: bool,
}

impl FileBuf {
    /// The end of its buffered data and the ctime its clients were told, if it holds any.
    fn held(&self) -> Option<(u64, i64)> {
        let end = self.extents.iter().map(Extent::end).max()?;
        Some((end, self.stamp_ns))
    }

    /// Counts `bytes` and `sealed_bytes` again, and finds `since` again, after extents
    /// came, went or shrank.
    fn recount(&mut self) {
        let sealed = self.sealed;
        let (all, taken) = self.extents.iter().fold((0, 0), |(all, taken), e| {
            let n = e.data.len();
            (all + n, taken + if e.seq <= sealed { n } else { 0 })
        });
        self.bytes = all;
        self.sealed_bytes = taken;
        if let Some(oldest) = self.extents.iter().map(|e| e.arrived).min() {
            self.since = oldest;
        }
    }

    /// Drops the bytes of `[from, to)` from every open extent (the caller adds newer ones
    /// there). An extent cut in two keeps its front; its back becomes an extent of its own
    /// with a new sequence number (from `next_seq`), after the others: open extents never
    /// overlap, so their order decides nothing but what a publish takes first. Sealed
    /// extents stay whole: their group commits them before the newer bytes, which then
    /// win, and reads lay them in the same order.
    fn uncover(&mut self, from: u64, to: u64, next_seq: &mut u64) {
        let mut backs = Vec::new();
        let sealed = self.sealed;
        self.extents.retain_mut(|e| {
            if e.end() <= from || e.offset >= to || e.seq <= sealed {
                return true;
            }
            if e.offset < from && e.end() > to {
                let cut = usize::try_from(to - e.offset).unwrap_or(e.data.len());
                backs.push((to, e.data.split_off(cut), e.arrived));
            }
            if e.offset < from {
                e.data
                    .truncate(usize::try_from(from - e.offset).unwrap_or(0));
                return true;
            }
            if e.end() > to {
                let gone = usize::try_from(to - e.offset).unwrap_or(0);
                e.data.advance(gone);
                e.offset = to;
                return true;
            }
            false
        });
        for (offset, data, arrived) in backs {
            *next_seq += 1;
            self.extents.push(Extent {
                offset,
                data,
                seq: *next_seq,
                arrived,
            });
        }
    }
}

impl FileBuf {
    /// Seals the oldest open extents, at most one object's worth (always at least one
    /// extent, and no open extent is larger), as the newest group, with the upload
    /// `upload` starts for it (if any); `None` if no extent is open.
    fn seal(&mut self, upload: impl FnOnce(&Arc<Snapshot>) -> Option<Upload>) -> Option<()> {
        let sealed = self.sealed;
        // Extents are in sequence order, so the sealed ones come first.
        let first = self.extents.iter().position(|e| e.seq > sealed)?;
        let mut bytes = 0;
        let taken = self.extents[first..]
            .iter()
            .enumerate()
            .take_while(|(i, e)| {
                bytes += e.data.len();
                *i == 0 || bytes <= OBJECT_MAX_BYTES
            })
            .count();
        let extents = self.extents[first..first + taken].to_vec();
        let upto = extents.last()?.seq;
        self.sealed = upto;
        let snap = Arc::new(Snapshot {
            extents,
            upto,
            stamp_ns: self.stamp_ns,
        });
        let upload = upload(&snap);
        self.groups.push_back(Group {
            snap,
            upload,
            cut: None,
        });
        self.recount();
        Some(())
    }
}

/// What one group of a publish commits: one object's worth of a file's oldest extents.
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub extents: Vec<Extent>,
    pub upto: u64,
    pub stamp_ns: i64,
}

impl Snapshot {
    /// Whether its extents all end within [`crate::limits::INLINE_MAX_BYTES`] (inline
    /// rows, no object).
    pub(crate) fn inline(&self) -> bool {
        let end = self.extents.iter().map(Extent::end).max().unwrap_or(0);
        end <= crate::limits::INLINE_MAX_BYTES
    }
}

/// An upload a group started before its publish: the object's id and when it was stored
/// (the injected clock's monotonic time), or `None` if it failed.
pub(crate) type Upload = Shared<BoxFuture<'static, Option<(i64, Duration)>>>;

/// A sealed group: its extents, its upload if one was started, and the least size a
/// truncation cut the file to since it was sealed ([`Pending::cut`]).
#[derive(Clone)]
pub(crate) struct Group {
    pub snap: Arc<Snapshot>,
    pub upload: Option<Upload>,
    cut: Option<u64>,
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
    /// Uploads started before their publish and not yet over ([`UPLOADS_PER_HEAD`] at
    /// most).
    uploading: AtomicUsize,
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
        data: &Bytes,
        now: Duration,
        stamp_ns: i64,
        row_ns: i64,
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
        let f = files.entry(file).or_insert_with(|| FileBuf {
            seen_ns: row_ns,
            ..FileBuf::default()
        });
        let before = f.bytes;
        f.stamp_ns = f.stamp_ns.max(stamp_ns);
        if !data.is_empty() {
            f.uncover(offset, offset + data.len() as u64, next_seq);
        }
        *next_seq += 1;
        let seq = *next_seq;
        let sealed = f.sealed;
        // The request's own bytes, kept as they are (see `rope`).
        let bytes = Rope::from(data.clone());
        match f.extents.last_mut() {
            Some(last) if last.seq > sealed && last.end() == offset => {
                last.data.append(bytes);
                last.seq = seq;
            }
            _ => f.extents.push(Extent {
                offset,
                data: bytes,
                seq,
                arrived: now,
            }),
        }
        f.recount();
        let after = f.bytes;
        s.total = s.total + after - before;
        Ok(())
    }

    /// Lays the stamp of `file` over its row's ctime `row_ns` (ns), read from the
    /// database: if the row moved since the stamp was last laid over it and stays at or
    /// below the stamp, a change committed meanwhile (by another head, whose clock is
    /// behind this one's) would not move the ctime this head's clients see, so the stamp
    /// moves on by 1 ns (and the publish commits at least that). Then as [`Self::overlay`].
    pub(crate) fn observe(&self, file: i64, row_ns: i64) -> Option<(u64, i64)> {
        let mut s = self.state();
        let f = s.files.get_mut(&file)?;
        if row_ns > f.seen_ns {
            if row_ns <= f.stamp_ns {
                f.stamp_ns += 1;
                f.moved_ns = f.stamp_ns;
            }
            f.seen_ns = row_ns;
        }
        f.held()
    }

    /// What the publish of `snap`, a group of `file`, commits: at least its stamp, or the
    /// file's stamp as changes committed by other heads moved it; and the row's ctime the
    /// stamp was last laid over (a row past it at the commit changed since, and the
    /// commit adds the 1 ns [`Self::observe`] would move the stamp by).
    pub(crate) fn publish_stamp(&self, file: i64, snap: &Snapshot) -> (i64, i64) {
        let s = self.state();
        let (moved, seen) = s
            .files
            .get(&file)
            .map_or((0, i64::MAX), |f| (f.moved_ns, f.seen_ns));
        (snap.stamp_ns.max(moved), seen)
    }

    /// The end of `file`'s buffered data and the ctime its clients were told, if any.
    pub(crate) fn overlay(&self, file: i64) -> Option<(u64, i64)> {
        self.state().files.get(&file)?.held()
    }

    /// `bytes`, which hold `file` from `offset`, with its buffered bytes over them: the
    /// same pieces when none overlaps them (the usual READ of published data), else a
    /// copy with them laid over.
    pub(crate) fn read_over_rope(&self, file: i64, offset: u64, bytes: Rope) -> Rope {
        let s = self.state();
        let Some(f) = s.files.get(&file) else {
            return bytes;
        };
        let end = offset + bytes.len() as u64;
        if !f.extents.iter().any(|e| e.offset < end && e.end() > offset) {
            return bytes;
        }
        let mut buf = vec![0u8; bytes.len()];
        bytes.copy_to(&mut buf);
        lay_over(f, offset, &mut buf);
        Rope::from(Bytes::from(buf))
    }

    /// Copies buffered bytes of `file` over `buf`, which holds the file from `offset`.
    #[cfg(test)]
    pub(crate) fn read_over(&self, file: i64, offset: u64, buf: &mut [u8]) {
        let s = self.state();
        if let Some(f) = s.files.get(&file) {
            lay_over(f, offset, buf);
        }
    }

    /// Drops buffered bytes of `file` at or past `size` (a truncation), and the bytes the
    /// groups sealed before it hold there ([`Pending::cut`]), one of which a publish may
    /// be committing now. Called by the truncating transaction after it holds the file's
    /// row and before it commits: a publish's transaction, which locks the row before it
    /// reads the cut, then sees it.
    pub(crate) fn truncate(&self, file: i64, size: u64) {
        let mut s = self.state();
        let Some(f) = s.files.get_mut(&file) else {
            return;
        };
        for g in &mut f.groups {
            g.cut = Some(g.cut.map_or(size, |c| c.min(size)));
        }
        let before = f.bytes;
        f.extents.retain_mut(|e| cut(e, size));
        f.recount();
        let dropped = before - f.bytes;
        s.total -= dropped;
    }

    /// Where a truncation on this head cut `file` since the group sealed up to `upto` was
    /// sealed: its extents' bytes at or past this are gone with the truncation and must
    /// not be committed (they would come back past the new end). Groups sealed after the
    /// truncation have no cut: their bytes were written after it.
    pub(crate) fn cut(&self, file: i64, upto: u64) -> Option<u64> {
        let s = self.state();
        s.files
            .get(&file)?
            .groups
            .iter()
            .find(|g| g.snap.upto == upto)?
            .cut
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

    /// The sequence number of `file`'s newest buffered write or sealed group, if any.
    pub(crate) fn newest(&self, file: i64) -> Option<u64> {
        let s = self.state();
        let f = s.files.get(&file)?;
        let open = f.extents.last().map(|e| e.seq);
        open.max(f.groups.back().map(|g| g.snap.upto))
    }

    /// The oldest sealed group of `file`, the next a publish commits, or a new group of
    /// its oldest open extents (no upload started); `None` if nothing is buffered. A group
    /// whose publish failed is taken again first, so newer writes stay newer.
    pub(crate) fn oldest(&self, file: i64) -> Option<Group> {
        let mut s = self.state();
        let f = s.files.get_mut(&file)?;
        if f.groups.is_empty() {
            f.seal(|_| None)?;
        }
        f.groups.front().cloned()
    }

    /// Seals `file`'s oldest open extents (one object's worth) as a group and starts its
    /// upload with `start`, which the caller then drives; `None` if nothing is sealed.
    /// With `full = Some(len)` (a write of `len` bytes found the file full) only if such a
    /// write still does not fit, fewer than [`UPLOADS_PER_FILE`] of the file's uploads
    /// are in flight and it holds fewer than [`SEALED_PER_FILE`] groups (an upload that
    /// ended early leaves its slot to the next one even while an older one still runs:
    /// the groups commit in order, the uploads need not end in order); with `None` (a
    /// publish is about to commit everything) whatever is open, if a group is sealed
    /// already (else the publish uploads the first itself). Either way never after a
    /// failed publish or upload of the file until a publish commits (a publish in
    /// progress is no reason to wait), nor past [`UPLOADS_PER_HEAD`] uploads on this
    /// head, nor for data that would be inline rows.
    pub(crate) fn seal_for_upload(
        &self,
        file: i64,
        full: Option<usize>,
        start: impl FnOnce(Arc<Snapshot>) -> Upload,
    ) -> Option<Upload> {
        let mut s = self.state();
        let f = s.files.get_mut(&file)?;
        match full {
            Some(len) => {
                let open = f.bytes - f.sealed_bytes;
                if open + len <= PENDING_FILE_MAX_BYTES
                    || f.uploads >= UPLOADS_PER_FILE
                    || f.groups.len() >= SEALED_PER_FILE
                {
                    return None;
                }
            }
            // The publish uploads its first group itself, at once; only the ones after
            // it are worth starting beside it.
            None if f.groups.is_empty() => return None,
            None => {}
        }
        if f.failing || self.uploading.load(Ordering::Acquire) >= UPLOADS_PER_HEAD {
            return None;
        }
        let mut started = None;
        f.seal(|snap| {
            if snap.inline() {
                return None;
            }
            self.uploading.fetch_add(1, Ordering::AcqRel);
            let upload = start(Arc::clone(snap));
            started = Some(upload.clone());
            Some(upload)
        })?;
        if started.is_some() {
            f.uploads += 1;
        }
        started
    }

    /// An upload of `file` that [`Pending::seal_for_upload`] started is over.
    pub(crate) fn upload_over(&self, file: i64) {
        self.uploading.fetch_sub(1, Ordering::AcqRel);
        if let Some(f) = self.state().files.get_mut(&file) {
            f.uploads = f.uploads.saturating_sub(1);
        }
    }

    /// The uploads of `file`'s groups still in flight, oldest first (a writer that
    /// found the file full waits for the first of them to end).
    pub(crate) fn uploads_in_flight(&self, file: i64) -> Vec<Upload> {
        let s = self.state();
        s.files.get(&file).map_or_else(Vec::new, |f| {
            f.groups
                .iter()
                .filter_map(|g| g.upload.clone())
                .filter(|u| u.peek().is_none())
                .collect()
        })
    }

    /// Whether `file`'s oldest sealed group's upload ended and stored its object (its
    /// rows can commit without waiting).
    pub(crate) fn oldest_stored(&self, file: i64) -> bool {
        let s = self.state();
        s.files
            .get(&file)
            .and_then(|f| f.groups.front())
            .and_then(|g| g.upload.as_ref())
            .is_some_and(|u| matches!(u.peek(), Some(Some(_))))
    }

    /// An upload started before its publish failed at `now`: the file rests as after a
    /// failed publish (its publish uploads the group again once the rest is over).
    pub(crate) fn upload_failed(&self, file: i64, now: Duration) {
        let mut s = self.state();
        if let Some(f) = s.files.get_mut(&file) {
            f.tries = f.tries.saturating_add(1);
            f.rest_until = f.rest_until.max(now + backoff(f.tries - 1));
            f.failing = true;
        }
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
            f.failing = true;
        }
    }

    /// Releases what a publish committed; `row_ns` is the row's ctime the commit left
    /// (this head's own change, which moves nothing more).
    pub(crate) fn release(&self, file: i64, upto: u64, row_ns: i64) {
        let mut s = self.state();
        let Some(f) = s.files.get_mut(&file) else {
            return;
        };
        f.seen_ns = f.seen_ns.max(row_ns);
        f.tries = 0;
        f.rest_until = Duration::ZERO;
        f.failing = false;
        let before = f.bytes;
        f.groups.retain(|g| g.snap.upto > upto);
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

/// Copies `f`'s buffered bytes over `buf`, which holds the file from `offset`, oldest
/// first (newer bytes win).
fn lay_over(f: &FileBuf, offset: u64, buf: &mut [u8]) {
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
        e.data.slice(src..src + n).copy_to(&mut buf[dst..dst + n]);
    }
}

/// Cuts `e` at `size`; false if nothing of it is left.
fn cut(e: &mut Extent, size: u64) -> bool {
    if e.end() > size {
        e.data
            .truncate(usize::try_from(size.saturating_sub(e.offset)).unwrap_or(0));
    }
    !e.data.is_empty()
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
    use crate::limits::PUBLISH_AGE;

    impl Pending {
        /// [`Pending::add`] of a copy of `data`.
        fn add_copy(
            &self,
            file: i64,
            offset: u64,
            data: &[u8],
            now: Duration,
            stamp_ns: i64,
        ) -> Result<(), Full> {
            self.add(
                file,
                offset,
                &Bytes::copy_from_slice(data),
                now,
                stamp_ns,
                0,
            )
        }
    }

    /// A row whose ctime moved since the stamp was laid over it, but not past the stamp
    /// (another head committed a change, its clock behind), moves the stamp by 1 ns, once
    /// per change; the publish commits at least the moved stamp; a row past the stamp or
    /// this head's own publish moves nothing.
    #[test]
    fn a_change_committed_below_the_stamp_moves_it() {
        let p = Pending::default();
        p.add(7, 0, &Bytes::from_static(b"abc"), Duration::ZERO, 100, 50)
            .unwrap();
        assert_eq!(
            p.observe(7, 50),
            Some((3, 100)),
            "the row as the write saw it"
        );
        assert_eq!(p.observe(7, 80), Some((3, 101)), "a change committed at 80");
        assert_eq!(p.observe(7, 80), Some((3, 101)), "the same row again");
        assert_eq!(p.observe(7, 90), Some((3, 102)), "another change, at 90");
        assert_eq!(p.observe(9, 90), None, "a file with no buffered writes");
        p.add(7, 3, &Bytes::from_static(b"d"), Duration::ZERO, 103, 90)
            .unwrap();
        assert_eq!(p.observe(7, 90), Some((4, 103)), "the write's own stamp");
        // A row past the stamp: the head's clients see the row's ctime; nothing moves.
        assert_eq!(p.observe(7, 500), Some((4, 103)));
        assert_eq!(p.observe(7, 500), Some((4, 103)));
        let g = Snapshot {
            extents: Vec::new(),
            upto: 0,
            stamp_ns: 100,
        };
        assert_eq!(
            p.publish_stamp(7, &g),
            (102, 500),
            "the stamp as the changes moved it"
        );
        assert_eq!(
            p.publish_stamp(9, &g),
            (100, i64::MAX),
            "a file no change moved"
        );
        // This head's own publish left the row at 600: not a change of another head.
        p.release(7, 0, 600);
        assert_eq!(p.observe(7, 600), Some((4, 103)));
    }

    #[test]
    fn merges_consecutive_writes_but_not_into_a_snapshot() {
        let p = Pending::default();
        let t = Duration::ZERO;
        p.add_copy(1, 0, b"abc", t, 5).unwrap();
        p.add_copy(1, 3, b"def", t, 6).unwrap();
        let snap = p.oldest(1).unwrap().snap;
        assert_eq!(snap.extents.len(), 1);
        assert_eq!(snap.extents[0].data.to_vec(), b"abcdef");
        p.add_copy(1, 6, b"g", t, 7).unwrap();
        p.release(1, snap.upto, 0);
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
            p.add_copy(1, (i * mib.len()) as u64, &mib, t, 0).unwrap();
        }
        let at = |i: usize| (i * mib.len()) as u64;
        assert_eq!(p.add_copy(1, at(objects), &mib, t, 0), Err(Full::File));
        // A publish took the first object's worth: the next one fills while it uploads.
        let first = p.oldest(1).unwrap().snap;
        assert_eq!(first.extents.len(), 1, "consecutive writes merged");
        for i in objects..2 * objects {
            p.add_copy(1, at(i), &mib, t, 0).unwrap();
        }
        assert_eq!(p.add_copy(1, at(2 * objects), &mib, t, 0), Err(Full::File));
        assert_eq!(p.total_bytes(), 2 * PENDING_FILE_MAX_BYTES);
        // That publish failed (no release): the next snapshot takes the same data first,
        // and no more than one object.
        let again = p.oldest(1).unwrap().snap;
        assert_eq!(again.upto, first.upto);
        assert_eq!(again.extents[0].offset, 0);
        let taken: usize = again.extents.iter().map(|e| e.data.len()).sum();
        assert_eq!(taken, OBJECT_MAX_BYTES);
        p.release(1, again.upto, 0);
        assert_eq!(p.total_bytes(), PENDING_FILE_MAX_BYTES);
        // The rest is the second object, newest last; still full of open data.
        assert_eq!(p.add_copy(1, at(2 * objects), &mib, t, 0), Err(Full::File));
        let second = p.oldest(1).unwrap().snap;
        assert_eq!(second.extents[0].offset, at(objects));
        assert_eq!(p.newest(1), Some(second.upto));
        p.release(1, second.upto, 0);
        assert_eq!(p.total_bytes(), 0);
        assert_eq!(p.newest(1), None);
    }

    #[test]
    fn a_range_sent_again_replaces_its_bytes_and_never_adds_a_copy() {
        let p = Pending::default();
        let t = Duration::ZERO;
        p.add_copy(1, 0, b"aaaaaaaaaa", t, 0).unwrap();
        // A WRITE retried after JUKEBOX: the same range, the same size held.
        for _ in 0..100 {
            p.add_copy(1, 0, b"aaaaaaaaaa", t, 0).unwrap();
        }
        assert_eq!(p.total_bytes(), 10);
        // Inside one extent: it is cut in two around the new bytes.
        p.add_copy(1, 3, b"BB", t, 0).unwrap();
        // Over the end of one and the start of the next.
        p.add_copy(1, 12, b"cccc", t, 0).unwrap();
        p.add_copy(1, 8, b"DDDDD", t, 0).unwrap();
        assert_eq!(p.total_bytes(), 16);
        let mut buf = [0u8; 16];
        p.read_over(1, 0, &mut buf);
        assert_eq!(&buf, b"aaaBBaaaDDDDDccc");
        // What a publish took stays whole, and the newer bytes are read over it; the
        // group commits first, then the newer bytes, once each.
        let taken = p.oldest(1).unwrap().snap;
        p.add_copy(1, 0, b"eeeeeeeeeeeeeeee", t, 0).unwrap();
        assert_eq!(p.total_bytes(), 32);
        p.read_over(1, 0, &mut buf);
        assert_eq!(&buf, b"eeeeeeeeeeeeeeee");
        let again = p.oldest(1).unwrap().snap;
        assert_eq!(
            again.upto, taken.upto,
            "a failed publish takes the same group"
        );
        p.release(1, again.upto, 0);
        assert_eq!(p.total_bytes(), 16);
        let newer = p.oldest(1).unwrap().snap;
        assert!(newer.upto > taken.upto);
        assert_eq!(newer.extents.len(), 1);
        assert_eq!(newer.extents[0].data.to_vec(), b"eeeeeeeeeeeeeeee");
        p.release(1, newer.upto, 0);
        assert_eq!(p.total_bytes(), 0);
    }

    #[test]
    fn a_full_file_seals_an_object_and_starts_its_upload_up_to_the_bounds() {
        use futures::FutureExt;
        let p = Pending::default();
        let t = Duration::ZERO;
        let mib = vec![7u8; 1 << 20];
        let per_object = OBJECT_MAX_BYTES / mib.len();
        let started = |snap: Arc<Snapshot>| -> Upload {
            let id = i64::try_from(snap.upto).unwrap();
            futures::future::ready(Some((id, Duration::ZERO)))
                .boxed()
                .shared()
        };
        // An upload ends: its task calls `upload_over` and the shared future completes.
        let end = |p: &Pending, up: &Upload| {
            p.upload_over(1);
            up.clone().now_or_never().unwrap();
        };
        let mut at = 0u64;
        let fill = |p: &Pending, at: &mut u64| {
            for _ in 0..per_object {
                p.add_copy(1, *at, &mib, t, 0).unwrap();
                *at += mib.len() as u64;
            }
        };
        fill(&p, &mut at);
        // Not full yet for a write that fits: nothing sealed.
        assert!(p.seal_for_upload(1, Some(0), started).is_none());
        let mut ups = Vec::new();
        for g in 0..UPLOADS_PER_FILE {
            assert_eq!(p.add_copy(1, at, &mib, t, 0), Err(Full::File));
            let up = p.seal_for_upload(1, Some(mib.len()), started);
            ups.push(up.expect("group {g} starts its upload"));
            fill(&p, &mut at);
            let _ = g;
        }
        assert_eq!(p.uploading.load(Ordering::Acquire), UPLOADS_PER_FILE);
        assert_eq!(p.uploads_in_flight(1).len(), UPLOADS_PER_FILE);
        // Every upload slot of the file is taken: the writer waits for one to end.
        assert!(p.seal_for_upload(1, Some(mib.len()), started).is_none());
        // The second ends before the oldest: the next upload starts at once, beside the
        // oldest, and its group commits after the oldest's.
        end(&p, &ups[1]);
        assert_eq!(p.uploads_in_flight(1).len(), UPLOADS_PER_FILE - 1);
        assert!(!p.oldest_stored(1), "the oldest still uploads");
        let up = p.seal_for_upload(1, Some(mib.len()), started);
        ups.push(up.expect("an ended upload leaves its slot"));
        fill(&p, &mut at);
        // Up to SEALED_PER_FILE groups wait behind the oldest; no more.
        while ups.len() < SEALED_PER_FILE {
            let n = ups.len();
            end(&p, &ups[n - 1]);
            let up = p.seal_for_upload(1, Some(mib.len()), started);
            ups.push(up.expect("room for a sealed group"));
            fill(&p, &mut at);
        }
        let n = ups.len();
        end(&p, &ups[n - 1]);
        assert!(
            p.seal_for_upload(1, Some(mib.len()), started).is_none(),
            "{SEALED_PER_FILE} groups sealed"
        );
        // The oldest ends and commits: room for another group.
        end(&p, &ups[0]);
        assert!(p.oldest_stored(1));
        let oldest = p.oldest(1).unwrap();
        assert_eq!(oldest.snap.extents[0].offset, 0);
        assert!(oldest.upload.is_some());
        p.add_copy(1, 0, b"new", t, 0).unwrap_err();
        p.release(1, oldest.snap.upto, 0);
        p.add_copy(1, 0, b"new", t, 0).unwrap_err();
        let up = p.seal_for_upload(1, Some(3), started);
        assert!(up.is_some(), "room for another group");
        // A write over a sealed range: the group keeps its bytes, reads see the new ones.
        let sealed_at = OBJECT_MAX_BYTES as u64;
        p.add_copy(1, sealed_at, b"new", t, 0).unwrap();
        let mut buf = [0u8; 4];
        p.read_over(1, sealed_at, &mut buf);
        assert_eq!(&buf, b"new\x07");
        let second = p.oldest(1).unwrap().snap;
        assert_eq!(second.extents[0].offset, sealed_at);
        assert_eq!(second.extents[0].data.to_vec()[..3], [7, 7, 7]);
        // Inline data is never uploaded; a resting file starts no upload.
        let flying = p.uploading.load(Ordering::Acquire);
        p.add_copy(2, 0, b"small", t, 0).unwrap();
        p.oldest(2).unwrap();
        p.add_copy(2, 5, b"more", t, 0).unwrap();
        assert!(p.seal_for_upload(2, None, started).is_none());
        assert_eq!(p.uploading.load(Ordering::Acquire), flying);
        p.add_copy(3, 0, &mib, t, 0).unwrap();
        p.oldest(3).unwrap();
        p.add_copy(3, 1 << 20, &mib, t, 0).unwrap();
        p.upload_failed(3, t);
        assert!(p.seal_for_upload(3, None, started).is_none());
        // Nor after the rest, until a publish commits: a client resending meanwhile
        // must not seal a copy per try.
        assert!(p.may_publish(3, t + PUBLISH_RETRY_MAX));
        assert!(p.seal_for_upload(3, None, started).is_none());
        let failed = p.oldest(3).unwrap().snap;
        p.release(3, failed.upto, 0);
        p.add_copy(3, 0, &mib, t, 0).unwrap();
        p.oldest(3).unwrap();
        p.add_copy(3, 1 << 20, &mib, t, 0).unwrap();
        // A publish in progress (tried, not yet over) is no reason to wait.
        assert!(p.may_publish(3, t));
        assert!(p.seal_for_upload(3, None, started).is_some());
    }

    #[test]
    fn the_timer_goes_by_the_oldest_bytes_not_yet_committed() {
        let p = Pending::default();
        let s = Duration::from_secs;
        // A sequential writer: its first object arrived at 0 s and is committed at 2 s,
        // the rest arrived from 1 s on.
        p.add_copy(1, 0, &[1u8; 8192], s(0), 0).unwrap();
        let first = p.oldest(1).unwrap().snap;
        p.add_copy(1, 8192, &[2u8; 8192], s(1), 0).unwrap();
        p.add_copy(1, 16384, &[3u8; 8192], s(2), 0).unwrap();
        assert_eq!(p.older_than(s(3), PUBLISH_AGE), vec![1]);
        p.release(1, first.upto, 0);
        assert!(
            p.older_than(s(3), PUBLISH_AGE).is_empty(),
            "what is left arrived at 1 s"
        );
        assert_eq!(p.older_than(s(4), PUBLISH_AGE), vec![1]);
        // A write at 9 s into the middle of it: the bytes around it keep their age.
        p.add_copy(1, 12288, &[4u8; 100], s(9), 0).unwrap();
        assert_eq!(p.older_than(s(4), PUBLISH_AGE), vec![1]);
        let next = p.oldest(1).unwrap().snap;
        assert_eq!(next.extents.len(), 3);
        p.release(1, next.upto, 0);
        assert!(p.older_than(s(60), Duration::ZERO).is_empty());
    }

    #[test]
    fn a_failed_publish_rests_the_file_longer_each_time_until_one_commits() {
        let p = Pending::default();
        let t = Duration::from_secs(100);
        p.add_copy(1, 0, b"x", t, 0).unwrap();
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
        let snap = p.oldest(1).unwrap().snap;
        p.release(1, snap.upto, 0);
        p.add_copy(1, 0, b"y", t, 0).unwrap();
        assert!(p.may_publish(1, t), "a commit ends the rest");
    }

    #[test]
    fn a_truncation_cuts_what_the_groups_sealed_before_it_took() {
        let p = Pending::default();
        let t = Duration::ZERO;
        p.add_copy(1, 0, b"abcdef", t, 0).unwrap();
        let snap = p.oldest(1).unwrap().snap;
        assert_eq!(p.cut(1, snap.upto), None);
        p.truncate(1, 4);
        p.truncate(1, 2);
        p.truncate(1, 5);
        assert_eq!(
            p.cut(1, snap.upto),
            Some(2),
            "the least size since the seal"
        );
        let mut buf = [9u8; 6];
        p.read_over(1, 0, &mut buf);
        assert_eq!(&buf, b"ab\x09\x09\x09\x09");
        p.add_copy(1, 2, b"cd", t, 0).unwrap();
        // Sealed after the truncation: its bytes were written after it.
        p.release(1, snap.upto, 0);
        let next = p.oldest(1).unwrap().snap;
        assert_eq!(p.cut(1, next.upto), None);
        assert_eq!(next.extents[0].data.to_vec(), b"cd");
    }

    #[test]
    fn a_truncation_cuts_every_group_sealed_before_it_and_keeps_their_uploads() {
        use futures::FutureExt;
        let p = Pending::default();
        let t = Duration::ZERO;
        let stored = |_| {
            futures::future::ready(Some((7, Duration::ZERO)))
                .boxed()
                .shared()
        };
        p.add_copy(1, 0, &[1u8; 8192], t, 0).unwrap();
        assert!(
            p.seal_for_upload(1, None, stored).is_none(),
            "a publish uploads its first group itself"
        );
        let first = p.oldest(1).unwrap().snap;
        p.add_copy(1, 8192, &[2u8; 8192], t, 0).unwrap();
        assert!(p.seal_for_upload(1, None, stored).is_some());
        p.add_copy(1, 16384, &[3u8; 100], t, 0).unwrap();
        p.truncate(1, 12288);
        assert_eq!(p.cut(1, first.upto), Some(12288));
        p.release(1, first.upto, 0);
        let g = p.oldest(1).unwrap();
        assert!(g.upload.is_some(), "the object stays; its rows are clipped");
        assert_eq!(p.cut(1, g.snap.upto), Some(12288));
        assert_eq!(p.newest(1), Some(g.snap.upto));
        let mut buf = [9u8; 2];
        p.read_over(1, 12287, &mut buf);
        assert_eq!(buf, [2, 9]);
        p.release(1, g.snap.upto, 0);
        assert!(p.oldest(1).is_none());
        assert_eq!(p.total_bytes(), 0);
    }

    #[test]
    fn bounds_and_truncation() {
        let p = Pending::default();
        let big = vec![1u8; PENDING_FILE_MAX_BYTES];
        p.add_copy(1, 0, &big, Duration::ZERO, 0).unwrap();
        assert_eq!(p.add_copy(1, 0, b"x", Duration::ZERO, 0), Err(Full::File));
        p.truncate(1, 10);
        assert_eq!(p.total_bytes(), 10);
        p.drop_file(1);
        assert_eq!(p.total_bytes(), 0);
        assert!(p.overlay(1).is_none());
    }
}
