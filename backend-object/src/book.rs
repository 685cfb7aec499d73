//! A head's book of what it wrote to the database for each file, for one kind of record:
//! its byte-range locks (`heads.rs`, the spans) or its share reservations (`shares.rs`,
//! the access and deny modes). Both keep the same book, under a mutex of their own:
//!
//! - **recorded**: each file with a row, and what the row holds, or that it is unknown
//!   (a write whose outcome is not known: it is written again, whatever it holds). A
//!   file without an entry has no row.
//! - **dirty**: files whose row may be behind what the head holds, for its keeper to
//!   record; **all dirty**: every file with a row may be (a bulk release).
//! - **busy**: files an operation of this head is running on (how many), which writes
//!   the rows itself: a change reported meanwhile is looked at when it ends instead.
//!
//! The book holds no lock and does no I/O; what a record is, how it is read from the
//! head's own tables and how it is written are its owner's.

use std::collections::{HashMap, HashSet};

/// What one head wrote of records `R` per file (the inode's database number).
pub(crate) struct Book<R> {
    recorded: HashMap<i64, Option<R>>,
    dirty: HashSet<i64>,
    all_dirty: bool,
    busy: HashMap<i64, usize>,
}

impl<R> Default for Book<R> {
    fn default() -> Self {
        Self {
            recorded: HashMap::new(),
            dirty: HashSet::new(),
            all_dirty: false,
            busy: HashMap::new(),
        }
    }
}

impl<R: PartialEq + Default> Book<R> {
    /// The row of `file`: `None` if it has none, `Some(None)` if what it holds is unknown.
    pub(crate) fn row(&self, file: i64) -> Option<Option<&R>> {
        self.recorded.get(&file).map(Option::as_ref)
    }

    pub(crate) fn has_row(&self, file: i64) -> bool {
        self.recorded.contains_key(&file)
    }

    /// How many files have a row.
    pub(crate) fn rows(&self) -> usize {
        self.recorded.len()
    }

    /// Whether the database holds `now` for `file` (no write needed); the empty record
    /// is what a file without a row holds.
    pub(crate) fn is_recorded(&self, file: i64, now: &R) -> bool {
        match self.recorded.get(&file) {
            Some(r) => r.as_ref() == Some(now),
            None => *now == R::default(),
        }
    }

    /// Notes what is about to be committed for `file` (under its per-inode lock): `r`,
    /// in a row if `row`, else no row.
    pub(crate) fn set(&mut self, file: i64, r: R, row: bool) {
        if row {
            self.recorded.insert(file, Some(r));
        } else {
            self.recorded.remove(&file);
        }
    }

    /// A write of `file` failed: its row is unknown until written again.
    pub(crate) fn failed(&mut self, file: i64) {
        self.recorded.insert(file, None);
        self.dirty.insert(file);
    }

    /// The row of `file` went (with its watch): nothing to keep of it.
    pub(crate) fn forget(&mut self, file: i64) {
        self.recorded.remove(&file);
    }

    /// Every row of the head went (swept): each file that had one is written again.
    pub(crate) fn all_unknown(&mut self) {
        for (file, r) in &mut self.recorded {
            *r = None;
            self.dirty.insert(*file);
        }
    }

    /// What the head holds on `file` changed (`None`: on every file). Returns whether the
    /// keeper has a file to record: not if an operation running on it writes it.
    pub(crate) fn changed(&mut self, file: Option<i64>) -> bool {
        match file {
            Some(f) if self.busy.contains_key(&f) => false,
            Some(f) => {
                self.dirty.insert(f);
                true
            }
            None => {
                self.all_dirty = true;
                true
            }
        }
    }

    /// An operation on `file` begins: the changes it makes are its own to write.
    pub(crate) fn begin(&mut self, file: i64) {
        *self.busy.entry(file).or_default() += 1;
    }

    /// An operation on `file` ended: a change from now on is the keeper's to record
    /// (see [`Book::behind`] for one made meanwhile).
    pub(crate) fn end(&mut self, file: i64) {
        if let Some(n) = self.busy.get_mut(&file) {
            *n -= 1;
            if *n == 0 {
                self.busy.remove(&file);
            }
        }
    }

    /// Whether the row of `file` is behind `now` (a file without a row counts only if
    /// `may_add`); if so, the file is the keeper's to record.
    pub(crate) fn behind(&mut self, file: i64, now: &R, may_add: bool) -> bool {
        let behind = !self.is_recorded(file, now) && (may_add || self.has_row(file));
        if behind {
            self.dirty.insert(file);
        }
        behind
    }

    /// The files to record now (the dirty ones; all with rows after a bulk release).
    pub(crate) fn take_dirty(&mut self) -> Vec<i64> {
        let mut out: Vec<i64> = self.dirty.drain().collect();
        if std::mem::take(&mut self.all_dirty) {
            out.extend(self.recorded.keys().copied());
            out.sort_unstable();
            out.dedup();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_behind_until_what_it_holds_is_recorded() {
        let mut b: Book<Vec<u8>> = Book::default();
        // No row: recorded as holding nothing.
        assert!(b.is_recorded(1, &vec![]));
        assert!(!b.behind(1, &vec![], true));
        assert!(!b.behind(1, &vec![7], false), "no row, and none to add");
        assert!(b.behind(1, &vec![7], true));
        assert_eq!(b.take_dirty(), [1]);
        b.set(1, vec![7], true);
        assert!(b.is_recorded(1, &vec![7]));
        assert_eq!(b.row(1), Some(Some(&vec![7])));
        // A write that failed: unknown, whatever it holds, and dirty.
        b.failed(1);
        assert_eq!(b.row(1), Some(None));
        assert!(!b.is_recorded(1, &vec![7]));
        assert_eq!(b.take_dirty(), [1]);
        assert!(b.take_dirty().is_empty());
        // Written empty: no row.
        b.set(1, vec![], false);
        assert!(!b.has_row(1));
        assert_eq!(b.rows(), 0);
    }

    #[test]
    fn a_change_on_a_busy_file_is_left_to_its_operation() {
        let mut b: Book<Vec<u8>> = Book::default();
        b.set(2, vec![1], true);
        b.set(3, vec![1], true);
        b.begin(2);
        b.begin(2);
        assert!(!b.changed(Some(2)));
        b.end(2);
        assert!(!b.changed(Some(2)), "one of two still runs");
        b.end(2);
        assert!(b.changed(Some(2)));
        assert_eq!(b.take_dirty(), [2]);
        // A bulk release: every file with a row.
        assert!(b.changed(None));
        assert_eq!(b.take_dirty(), [2, 3]);
        b.all_unknown();
        assert_eq!(b.row(3), Some(None));
        let mut all = b.take_dirty();
        all.sort_unstable();
        assert_eq!(all, [2, 3]);
        b.forget(3);
        assert!(!b.has_row(3));
    }
}
