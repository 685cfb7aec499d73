//! Accounting of the two things the mem backend can run out of: bytes and files.
//!
//! Bytes are charged for what the backend holds: allocated data chunks and symlink
//! targets, and metadata — a fixed charge per live inode (the root included) and per
//! directory entry plus the entry's name. Files are counted per live inode. A reservation
//! either fits under the cap and is taken whole, or fails with `NoSpc` and takes nothing,
//! so callers reserve before they change anything.

use std::sync::atomic::{AtomicU64, Ordering};

use vfs::{FsError, FsResult, FsStat, Name};

/// Bytes charged for each live inode: its `Inode` (attributes, locks, range lock, state)
/// behind an `Arc`, and its slot in the id table. A test checks it covers the structs.
pub const INODE_CHARGE_BYTES: u64 = 512;

/// Bytes charged for each directory entry besides its name: the name's handle in the
/// by-name and by-cookie maps and their nodes. A test checks it covers the structs.
pub const ENTRY_CHARGE_BYTES: u64 = 192;

/// What one directory entry named `name` is charged.
pub fn entry_charge(name: &Name) -> u64 {
    ENTRY_CHARGE_BYTES + name.as_bytes().len() as u64
}

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

    /// Moves the charge from `old` bytes to `new` bytes: takes the difference (or fails
    /// with `NoSpc` taking nothing) when it grows, gives it back when it shrinks.
    pub(crate) fn recharge_bytes(&self, old: u64, new: u64) -> FsResult<()> {
        match new.checked_sub(old) {
            Some(more) => self.reserve_bytes(more),
            None => {
                self.release_bytes(old - new);
                Ok(())
            }
        }
    }

    /// Takes one file and its inode's bytes, or fails with `NoSpc` taking nothing.
    pub(crate) fn reserve_file(&self) -> FsResult<()> {
        reserve(&self.files, 1, self.max_files)?;
        self.reserve_bytes(INODE_CHARGE_BYTES)
            .inspect_err(|_| release(&self.files, 1))
    }

    /// Counts the root, which exists whatever the cap says.
    pub(crate) fn force_file(&self) {
        self.files.fetch_add(1, Ordering::AcqRel);
        self.used_bytes
            .fetch_add(INODE_CHARGE_BYTES, Ordering::AcqRel);
    }

    /// Gives back one file and its inode's bytes.
    pub(crate) fn release_file(&self) {
        release(&self.files, 1);
        self.release_bytes(INODE_CHARGE_BYTES);
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

        let space = Space::new(10 * INODE_CHARGE_BYTES, 2);
        assert_eq!(space.reserve_file(), Ok(()));
        assert_eq!(space.reserve_file(), Ok(()));
        assert_eq!(space.reserve_file(), Err(FsError::NoSpc));
        space.release_file();
        assert_eq!(space.stat().free_files, 1);
        assert_eq!(space.stat().total_files, 2);
    }

    #[test]
    fn a_file_takes_its_inode_bytes_and_gives_them_back() {
        let space = Space::new(INODE_CHARGE_BYTES + 10, 10);
        assert_eq!(space.reserve_file(), Ok(()));
        assert_eq!(space.stat().free_bytes, 10);
        // Out of bytes: the file count is given back too.
        assert_eq!(space.reserve_file(), Err(FsError::NoSpc));
        assert_eq!(space.stat().free_files, 9);
        space.release_file();
        assert_eq!(space.stat().free_bytes, INODE_CHARGE_BYTES + 10);
        assert_eq!(space.recharge_bytes(0, 8), Ok(()));
        assert_eq!(space.recharge_bytes(8, 3), Ok(()));
        assert_eq!(space.stat().free_bytes, INODE_CHARGE_BYTES + 7);
    }

    #[test]
    fn the_charges_cover_what_an_inode_and_an_entry_hold() {
        use std::mem::size_of;
        let inode = size_of::<crate::inode::Inode>() + 2 * size_of::<usize>() // Arc counts
            + size_of::<(vfs::FileId, std::sync::Arc<crate::inode::Inode>)>(); // table slot
        assert!(
            inode as u64 <= INODE_CHARGE_BYTES,
            "an inode holds {inode} bytes"
        );
        // A name's handle twice (by name and by cookie), the entry, the cookie, and a
        // node's overhead in each map.
        let entry = 2 * size_of::<Name>()
            + size_of::<crate::dir::Entry>()
            + 2 * size_of::<u64>()
            + 4 * size_of::<usize>();
        assert!(
            entry as u64 <= ENTRY_CHARGE_BYTES,
            "an entry holds {entry} bytes"
        );
    }
}
