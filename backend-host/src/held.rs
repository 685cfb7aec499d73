//! Files that NFSv4 OPENs hold ([`vfs::Backend::hold`]): an open file stays readable and
//! writable after its last name is removed, until its CLOSE (or its client's lease ends).
//!
//! A hold keeps the file's `O_PATH` descriptor: the open-file cache's entry when the
//! cache is on (holding it is what keeps aging from closing it: seed 004's entry lives as
//! long as the open, as knfsd's `nfsd_file` does), or one of its own. The kernel keeps an
//! unlinked inode alive while any descriptor names it, so while a held file has a name
//! nothing here is consulted, and once it has none:
//!
//! - its handle still resolves: the generation recorded at the hold answers
//!   [`HostFs::held_generation`] after the handle index forgot the file;
//! - attributes come from the held descriptor (`nlink` 0 is then not `Stale`);
//! - READ, WRITE and SETATTR reopen the inode through `/proc/self/fd/N` of the held
//!   descriptor, the one path that reaches a file with no name. The open checks
//!   permission as usual, against the inode.
//!
//! The table is empty on a server with no NFSv4 opens, and every lookup starts with one
//! relaxed atomic load that says so: NFSv3 and files that still have names pay nothing.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::fs::{Mode, OFlags};
use vfs::{FileId, FsError, FsResult};

use crate::attr::stat_fd;
use crate::errno::fs_err;
use crate::files::Fd;
use crate::{Access, HostFs, Opened};

/// One held file.
#[derive(Debug)]
struct HeldFile {
    holds: u32,
    generation: u32,
    fd: Fd,
}

/// The held files of one export, by inode number.
#[derive(Debug, Default)]
pub(crate) struct Held {
    files: Mutex<HashMap<u64, HeldFile>>,
    /// Entries of `files`: 0 lets every lookup skip the lock.
    len: AtomicUsize,
}

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, HeldFile>> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get<T>(&self, id: FileId, f: impl FnOnce(&HeldFile) -> T) -> Option<T> {
        if self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.lock().get(&id.0).map(f)
    }
}

/// A second reference to a held descriptor (the cache entry's `Arc`, or a `dup`).
fn share(fd: &Fd) -> FsResult<Fd> {
    Ok(match fd {
        Fd::Cached(entry) => Fd::Cached(Arc::clone(entry)),
        Fd::Own(own) => Fd::Own(rustix::io::fcntl_dupfd_cloexec(own, 0).map_err(fs_err)?),
    })
}

impl HostFs {
    /// See [`vfs::Backend::hold`]. Resolves the file as the server (the OPEN already
    /// checked the caller's permission).
    pub(crate) fn hold_file(&self, id: FileId) -> FsResult<()> {
        if let Some(f) = self.held.lock().get_mut(&id.0) {
            f.holds += 1;
            return Ok(());
        }
        let generation = vfs::Backend::generation(self, id)?;
        let (fd, _) = self.find(id, false)?;
        let mut files = self.held.lock();
        files
            .entry(id.0)
            .and_modify(|f| f.holds += 1)
            .or_insert(HeldFile {
                holds: 1,
                generation,
                fd,
            });
        self.held.len.store(files.len(), Ordering::Relaxed);
        Ok(())
    }

    /// See [`vfs::Backend::release`]. The last release drops the descriptor (and so lets
    /// the cache age the entry out, or closes its own one).
    pub(crate) fn release_file(&self, id: FileId) {
        let gone = {
            let mut files = self.held.lock();
            let Some(f) = files.get_mut(&id.0) else {
                return;
            };
            f.holds -= 1;
            let gone = (f.holds == 0).then(|| files.remove(&id.0));
            self.held.len.store(files.len(), Ordering::Relaxed);
            gone
        };
        let Some(Some(file)) = gone else { return };
        // A file with no name left: drop the cache entries its I/O opened meanwhile, so a
        // later file given the same inode number never hits them. Its last close frees its
        // blocks, so a worker leaves it to the closing thread (see `closer`).
        if stat_fd(&file.fd).is_ok_and(|st| st.stx_nlink == 0) {
            self.forget_open(id);
            crate::closer::close_unlinked(file, &self.io.deferred_closes);
        }
        // Otherwise closed here, outside the lock.
    }

    /// The generation recorded when `id` was first held, if it is held.
    pub(crate) fn held_generation(&self, id: FileId) -> Option<u32> {
        self.held.get(id, |f| f.generation)
    }

    /// Whether `id` is held (a held file with no name is not `Stale`).
    pub(crate) fn is_held(&self, id: FileId) -> bool {
        self.held.get(id, |_| ()).is_some()
    }

    /// `id` opened with `access` through its held descriptor: the way to a held file that
    /// no longer has a name. `None` when it is not held.
    pub(crate) fn open_held(&self, id: FileId, access: Access) -> Option<FsResult<Opened>> {
        let fd = self.held.get(id, |f| share(&f.fd))?;
        Some(fd.and_then(|fd| {
            let fd = match access {
                Access::Path => match fd {
                    Fd::Own(own) => own,
                    cached => rustix::io::fcntl_dupfd_cloexec(&cached, 0).map_err(fs_err)?,
                },
                // The magic link names the inode itself, with or without a name; it is a
                // symlink, so O_NOFOLLOW must go.
                _ => {
                    let path = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
                    let flags = access.flags() & !OFlags::NOFOLLOW;
                    let reopened: OwnedFd =
                        rustix::fs::open(path.as_str(), flags, Mode::empty()).map_err(fs_err)?;
                    reopened
                }
            };
            let st = stat_fd(&fd)?;
            if st.stx_ino != id.0 {
                return Err(FsError::Stale);
            }
            Ok(Opened { fd, st })
        }))
    }
}
