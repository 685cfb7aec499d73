//! Entries of one directory and the cookies that resume a listing.
//!
//! Every entry gets a per-directory insertion sequence number as its cookie (`.` is 1,
//! `..` is 2, entries start at 3 and only grow), and listings go in sequence order. A
//! cookie therefore stays meaningful whatever is added or removed later: a listing resumed
//! from it never repeats an entry and never skips one that still exists (an entry added
//! meanwhile shows up; one renamed meanwhile is a new entry and may show up again under its
//! new name). Cookies never expire, so the listing verifier is always 0.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use bytes::Bytes;
use vfs::{Cookie, DirEntry, DirPage, FileId, FsError, FsResult, Name};

const DOT_COOKIE: u64 = 1;
const DOTDOT_COOKIE: u64 = 2;
const FIRST_ENTRY_COOKIE: u64 = 3;

/// Size a directory reports per entry (`.` and `..` included); like tmpfs, a made-up but
/// monotone figure so clients that look at directory sizes see them change.
pub(crate) const ENTRY_SIZE_BYTES: u64 = 32;

/// What a name points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) id: FileId,
    pub(crate) is_dir: bool,
    cookie: u64,
}

/// The contents of a directory.
#[derive(Debug)]
pub(crate) struct Dir {
    /// `..`; the root's is the root.
    pub(crate) parent: FileId,
    by_name: HashMap<Name, Entry>,
    by_cookie: BTreeMap<u64, (Name, FileId)>,
    next_cookie: u64,
    subdirs: u32,
}

impl Dir {
    pub(crate) fn new(parent: FileId) -> Self {
        Self {
            parent,
            by_name: HashMap::new(),
            by_cookie: BTreeMap::new(),
            next_cookie: FIRST_ENTRY_COOKIE,
            subdirs: 0,
        }
    }

    pub(crate) fn get(&self, name: &Name) -> Option<Entry> {
        self.by_name.get(name).copied()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// `2 + subdirectories`: the entry in the parent, `.`, and each child's `..`.
    pub(crate) fn nlink(&self) -> u32 {
        self.subdirs.saturating_add(2)
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        (self.by_name.len() as u64 + 2) * ENTRY_SIZE_BYTES
    }

    /// Adds a new name; the caller checked that it is free.
    pub(crate) fn insert(&mut self, name: &Name, id: FileId, is_dir: bool) {
        assert!(
            !self.by_name.contains_key(name),
            "insert over an existing name"
        );
        let cookie = self.next_cookie;
        // 2^64 insertions into one directory cannot happen; saturating keeps this total.
        self.next_cookie = self.next_cookie.saturating_add(1);
        self.by_name
            .insert(name.clone(), Entry { id, is_dir, cookie });
        self.by_cookie.insert(cookie, (name.clone(), id));
        if is_dir {
            self.subdirs += 1;
        }
    }

    /// Removes a name, returning what it pointed at.
    pub(crate) fn remove(&mut self, name: &Name) -> Option<Entry> {
        let entry = self.by_name.remove(name)?;
        let listed = self.by_cookie.remove(&entry.cookie);
        assert!(listed.is_some(), "every entry is listed under its cookie");
        if entry.is_dir {
            self.subdirs -= 1;
        }
        Some(entry)
    }

    /// Up to `max_entries` entries after `cookie`, `.` (of `me`) and `..` first.
    pub(crate) fn list(&self, me: FileId, cookie: Cookie, max_entries: usize) -> FsResult<DirPage> {
        if max_entries == 0 {
            return Err(FsError::TooSmall);
        }
        let dots = [
            (DOT_COOKIE, &b"."[..], me),
            (DOTDOT_COOKIE, &b".."[..], self.parent),
        ];
        let dots = dots
            .into_iter()
            .filter(|(c, _, _)| *c > cookie.0)
            .map(|(c, name, fileid)| entry(c, Bytes::from_static(name), fileid));
        let after = Bound::Excluded(cookie.0.max(DOTDOT_COOKIE));
        let rest = self
            .by_cookie
            .range((after, Bound::Unbounded))
            .map(|(&c, (name, fileid))| entry(c, name.to_bytes(), *fileid));
        let mut all = dots.chain(rest).peekable();
        let entries: Vec<DirEntry> = all.by_ref().take(max_entries).collect();
        Ok(DirPage {
            entries,
            eof: all.peek().is_none(),
            verifier: 0,
        })
    }
}

fn entry(cookie: u64, name: Bytes, fileid: FileId) -> DirEntry {
    DirEntry {
        name,
        fileid,
        cookie: Cookie(cookie),
        attr: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        Name::new(s.as_bytes().to_vec()).unwrap()
    }

    fn names(page: &DirPage) -> Vec<String> {
        page.entries
            .iter()
            .map(|e| String::from_utf8_lossy(&e.name).into_owned())
            .collect()
    }

    #[test]
    fn listing_starts_with_dots_and_follows_insertion_order() {
        let mut dir = Dir::new(FileId(1));
        dir.insert(&name("b"), FileId(5), false);
        dir.insert(&name("a"), FileId(6), true);
        let page = dir.list(FileId(4), Cookie::START, 10).unwrap();
        assert_eq!(names(&page), [".", "..", "b", "a"]);
        assert_eq!(page.entries[0].fileid, FileId(4));
        assert_eq!(page.entries[1].fileid, FileId(1));
        let cookies: Vec<u64> = page.entries.iter().map(|e| e.cookie.0).collect();
        assert_eq!(cookies, [1, 2, 3, 4]);
        assert!(page.eof);
        assert_eq!(page.verifier, 0);
        assert_eq!(dir.nlink(), 3);
        assert_eq!(dir.size_bytes(), 4 * ENTRY_SIZE_BYTES);
    }

    #[test]
    fn pages_resume_after_their_cookie() {
        let mut dir = Dir::new(FileId(1));
        for n in ["a", "b", "c"] {
            dir.insert(&name(n), FileId(9), false);
        }
        let first = dir.list(FileId(1), Cookie::START, 2).unwrap();
        assert_eq!(names(&first), [".", ".."]);
        assert!(!first.eof);
        let second = dir.list(FileId(1), Cookie(2), 2).unwrap();
        assert_eq!(names(&second), ["a", "b"]);
        assert!(!second.eof);
        let third = dir.list(FileId(1), second.entries[1].cookie, 2).unwrap();
        assert_eq!(names(&third), ["c"]);
        assert!(third.eof);
        let from_dot = dir.list(FileId(1), Cookie(1), 1).unwrap();
        assert_eq!(names(&from_dot), [".."]);
        // Exactly filling a page at the end still says eof.
        let exact = dir.list(FileId(1), Cookie(3), 2).unwrap();
        assert_eq!(names(&exact), ["b", "c"]);
        assert!(exact.eof);
    }

    #[test]
    fn unknown_cookies_list_what_follows_and_zero_entries_is_too_small() {
        let mut dir = Dir::new(FileId(1));
        dir.insert(&name("a"), FileId(2), false);
        let page = dir.list(FileId(1), Cookie(1000), 5).unwrap();
        assert!(page.entries.is_empty());
        assert!(page.eof);
        let page = dir.list(FileId(1), Cookie(u64::MAX), 5).unwrap();
        assert!(page.eof);
        assert_eq!(
            dir.list(FileId(1), Cookie::START, 0),
            Err(FsError::TooSmall)
        );
    }

    #[test]
    fn removing_keeps_counts_and_cookies() {
        let mut dir = Dir::new(FileId(1));
        dir.insert(&name("d"), FileId(2), true);
        dir.insert(&name("f"), FileId(3), false);
        assert_eq!(dir.nlink(), 3);
        let gone = dir.remove(&name("d")).unwrap();
        assert_eq!((gone.id, gone.is_dir), (FileId(2), true));
        assert_eq!(dir.nlink(), 2);
        assert_eq!(dir.remove(&name("d")), None);
        dir.insert(&name("d"), FileId(4), false);
        let page = dir.list(FileId(1), Cookie(3), 10).unwrap();
        assert_eq!(names(&page), ["f", "d"]);
        assert_eq!(page.entries[1].cookie, Cookie(5));
        assert!(!dir.is_empty());
    }
}
