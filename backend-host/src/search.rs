//! The slower path of handle resolution: when the handle index holds no record of a file
//! (evicted at the index's bound, see `index`) or the recorded parent chain no longer
//! leads to it (a local process renamed it or a directory above it, and no kernel handle
//! found it), scan the export breadth-first for its inode number, using only the inode
//! numbers getdents64 returns (no stat per entry), and record the path where it was
//! found, every directory on it included. The handle's generation is then checked as for
//! any record, so a removed-and-recreated file's old handle stays `Stale`.
//!
//! Why a search and not a bigger handle: granary's handles are 32 bytes with no room for
//! a kernel handle (knfsd carries one, but needs `CAP_DAC_READ_SEARCH`, which a container
//! rarely has), and a re-walk needs the record that was evicted. A scan needs neither,
//! only `openat2` (Linux 5.6+; without it an evicted file's handle is `Stale` until a
//! LOOKUP or READDIR finds the file again).
//!
//! Cost: one scan of up to `MAX_SEARCH_ENTRIES` entries per handle that went astray
//! (a million entries take well under a second on a local disk), then the re-walk is fast
//! again. One search runs at a time (a second waits, then finds the record the first one
//! made if it looked for the same file), so searches hold at most one worker each. A file
//! not found, or removed through granary, is remembered as gone (the last
//! `NEGATIVE_ENTRIES` of them, see `index`), so a truly stale handle costs one scan, not
//! one per RPC.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::PoisonError;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir, ResolveFlags};
use vfs::FileId;

use crate::attr::{generation, stat_fd, WANT};
use crate::limits::{DIRENT_BUFFER_BYTES, MAX_SEARCH_ENTRIES};
use crate::{os, HostFs};

impl HostFs {
    /// True if a scan found `id` (with generation `gen`, when given) and recorded where.
    pub(crate) fn search(&self, id: FileId, gen: Option<u32>) -> bool {
        // Resolution: the scan reads directories the caller may not.
        let Ok(_raised) = self.resolving() else {
            return false;
        };
        if !self.openat2 || self.index.is_gone(id.0) {
            return false;
        }
        let _one = self
            .searching
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if gen.is_none() && self.index.get(id.0).is_some() {
            // Recorded by the search this one waited for.
            return true;
        }
        let found = self.scan(id.0, gen);
        if !found {
            self.index.mark_gone(id.0);
        }
        tracing::info!(
            ino = id.0,
            found,
            "searched the export for a file the handle index does not hold or whose recorded path is gone"
        );
        found
    }

    fn open_rel(&self, path: &[u8], flags: OFlags) -> Option<OwnedFd> {
        let path = if path.is_empty() { &b"."[..] } else { path };
        let how = ResolveFlags::BENEATH
            | ResolveFlags::NO_SYMLINKS
            | ResolveFlags::NO_MAGICLINKS
            | ResolveFlags::NO_XDEV;
        let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        rustix::fs::openat2(&self.root, os(path), flags, Mode::empty(), how).ok()
    }

    fn scan(&self, target: u64, gen: Option<u32>) -> bool {
        let mut queue: VecDeque<Vec<u8>> = VecDeque::from([Vec::new()]);
        let mut scanned = 0usize;
        let mut buf = Vec::with_capacity(DIRENT_BUFFER_BYTES);
        while let Some(path) = queue.pop_front() {
            let Some(fd) = self.open_rel(&path, OFlags::RDONLY | OFlags::DIRECTORY) else {
                continue;
            };
            let mut iter = RawDir::new(&fd, buf.spare_capacity_mut());
            while let Some(Ok(entry)) = iter.next() {
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                scanned += 1;
                if scanned > MAX_SEARCH_ENTRIES {
                    return false;
                }
                let child = join(&path, name);
                if entry.ino() == target {
                    return self.record_path(&child, gen);
                }
                let dir = match entry.file_type() {
                    FileType::Directory => true,
                    FileType::Unknown => {
                        rustix::fs::statx(&fd, name, AtFlags::SYMLINK_NOFOLLOW, WANT)
                            .is_ok_and(|st| u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR)
                    }
                    _ => false,
                };
                if dir {
                    queue.push_back(child);
                }
            }
        }
        false
    }

    /// Records every component of `path` (the target last) if the target still has
    /// generation `gen` (any, when `None`).
    fn record_path(&self, path: &[u8], gen: Option<u32>) -> bool {
        let mut parent = self.root_id();
        let mut prefix = Vec::new();
        let parts: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
        for (i, name) in parts.iter().enumerate() {
            prefix = if prefix.is_empty() {
                name.to_vec()
            } else {
                join(&prefix, name)
            };
            let Some(fd) = self.open_rel(&prefix, OFlags::PATH) else {
                return false;
            };
            let Ok(st) = stat_fd(&fd) else { return false };
            if i + 1 == parts.len() && gen.is_some_and(|g| g != generation(&st)) {
                return false;
            }
            self.note(parent, name, Some(&fd), &st);
            parent = FileId(st.stx_ino);
        }
        true
    }
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    if !dir.is_empty() {
        p.extend_from_slice(dir);
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}
