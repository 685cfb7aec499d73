//! Accounting of the two things the mem backend can run out of: bytes and files.
//!
//! Bytes are charged for allocated data chunks and symlink targets (memory the backend
//! really holds for a file), files for every live inode including the root. A reservation
//! either fits under the cap and is taken whole, or fails with `NoSpc` and takes nothing,
//! so callers reserve before they change anything.

use std::sync::atomic::{AtomicU64, Ordering};

use vfs::{FsError, FsResult, FsStat};

/// Bytes and file counts, updated lock-free because data writes to different files run in
/// parallel.
#[derive(Debug)]
pub(crate) struct Space {
    capacity_bytes: u64,
    used_bytes: AtomicU64,
    max_files: u64,
    files: AtomicU64,
}

/// Adds `amount` to `counter` if the sum stays at or under `cap`.
fn reserve(counter: &AtomicU64, amount: u64, cap: u64) -> FsResult<()> {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            used.checked_add(amount).filter(|&sum| sum <= cap)
        })
        .map(|_| ())
        .map_err(|_| FsError::NoSpc)
}

/// Gives back what `reserve` took.
fn release(counter: &AtomicU64, amount: u64) {
    let before = counter.fetch_sub(amount, Ordering::AcqRel);
    assert!(
        before >= amount,
        "released {amount} but only {before} was reserved"
    );
}

impl Space {
    pub(crate) fn new(capacity_bytes: u64, max_files: u64) -> Self {
        Self {
            capacity_bytes,
            used_bytes: AtomicU64::new(0),
            max_files,
            files: AtomicU64::new(0),
        }
    }

    /// Takes `amount` bytes, or fails with `NoSpc` taking nothing.
    pub(crate) fn reserve_bytes(&self, amount: u64) -> FsResult<()> {
        if amount == 0 {
            return Ok(());
        }
        reserve(&self.used_bytes, amount, self.capacity_bytes)
    }

    pub(crate) fn release_bytes(&self, amount: u64) {
        release(&self.used_bytes, amount);
    }

    /// Takes one file, or fails with `NoSpc`.
    pub(crate) fn reserve_file(&self) -> FsResult<()> {
        reserve(&self.files, 1, self.max_files)
    }

    /// Counts the root, which exists whatever the cap says.
    pub(crate) fn force_file(&self) {
        self.files.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn release_file(&self) {
        release(&self.files, 1);
    }

    pub(crate) fn stat(&self) -> FsStat {
        let used_bytes = self.used_bytes.load(Ordering::Acquire);
        let files = self.files.load(Ordering::Acquire);
        let free_bytes = self.capacity_bytes.saturating_sub(used_bytes);
        let free_files = self.max_files.saturating_sub(files);
        FsStat {
            total_bytes: self.capacity_bytes,
            free_bytes,
            avail_bytes: free_bytes,
            total_files: self.max_files,
            free_files,
            avail_files: free_files,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stop_at_the_cap_and_take_nothing_when_refused() {
        let space = Space::new(100, 2);
        assert_eq!(space.reserve_bytes(60), Ok(()));
        assert_eq!(space.reserve_bytes(41), Err(FsError::NoSpc));
        assert_eq!(space.stat().free_bytes, 40);
        assert_eq!(space.reserve_bytes(40), Ok(()));
        assert_eq!(space.stat().free_bytes, 0);
        space.release_bytes(100);
        assert_eq!(space.stat().free_bytes, 100);
        assert_eq!(space.reserve_bytes(u64::MAX), Err(FsError::NoSpc));

        assert_eq!(space.reserve_file(), Ok(()));
        assert_eq!(space.reserve_file(), Ok(()));
        assert_eq!(space.reserve_file(), Err(FsError::NoSpc));
        space.release_file();
        assert_eq!(space.stat().free_files, 1);
        assert_eq!(space.stat().total_files, 2);
    }
}
