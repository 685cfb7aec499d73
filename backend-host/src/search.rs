//! The last resort of handle resolution without kernel handles: when the recorded parent
//! chain no longer leads to a file (a local process renamed it or a directory above it),
//! scan the export breadth-first for its inode number, using only the inode numbers
//! getdents64 returns (no stat per entry), and record the path where it was found.
//!
//! Cost: one scan of up to `MAX_SEARCH_ENTRIES` entries per handle that went astray,
//! then the re-walk is fast again. A file not found is remembered (the last
//! `NEGATIVE_ENTRIES` of them), so a truly stale handle costs one scan, not one per RPC.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::PoisonError;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir, ResolveFlags};
use vfs::FileId;

use crate::attr::{generation, stat_fd, WANT};
use crate::limits::{DIRENT_BUFFER_BYTES, MAX_SEARCH_ENTRIES, NEGATIVE_ENTRIES};
use crate::{os, HostFs};

impl HostFs {
    /// True if a scan found `id` with generation `gen` and recorded where.
    pub(crate) fn search(&self, id: FileId, gen: u32) -> bool {
        if !self.openat2 || self.is_negative(id.0) {
            return false;
        }
        let found = self.scan(id.0, gen);
        if !found {
            let mut neg = self.negative.lock().unwrap_or_else(PoisonError::into_inner);
            if neg.len() == NEGATIVE_ENTRIES {
                neg.pop_front();
            }
            neg.push_back(id.0);
        }
        tracing::info!(
            ino = id.0,
            found,
            "searched the export for a file whose recorded path is gone"
        );
        found
    }

    fn is_negative(&self, ino: u64) -> bool {
        self.negative
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&ino)
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

    fn scan(&self, target: u64, gen: u32) -> bool {
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
    /// generation `gen`.
    fn record_path(&self, path: &[u8], gen: u32) -> bool {
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
            if i + 1 == parts.len() && generation(&st) != gen {
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
