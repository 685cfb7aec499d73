//! Where the last close of a file with no name left happens when the caller may not
//! block.
//!
//! Closing the last descriptor of an unlinked file frees its blocks in the close itself:
//! for a large file on ext4 or XFS that is extent-tree work and journal writes, long
//! enough to stall every connection of a network worker's event loop. The two places that
//! can drop such a descriptor on a worker are the NFSv4 CLOSE of an open whose file was
//! removed meanwhile ([`crate::HostFs`]'s hold release) and a REMOVE or RENAME that takes
//! a file's last name while seed 004's open-file cache still holds its descriptors. On a
//! thread where blocking is forbidden (`sync::blocking::forbidden`) both hand what they
//! would drop to one process-wide closing thread, `granary-unlinked`; everywhere else
//! (blocking pools, tests, tools) they drop it where they are, as before.
//!
//! Nothing waits on the closing thread, so its queue is unbounded; what it holds is
//! bounded by the descriptors the server may have open at all.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::OnceLock;

type Doomed = Box<dyn Send>;

/// The closing thread's queue; `None` if the thread could not be started (then closes
/// happen where they are, logged once).
fn queue() -> Option<&'static Sender<Doomed>> {
    static QUEUE: OnceLock<Option<Sender<Doomed>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = channel::<Doomed>();
            match std::thread::Builder::new()
                .name("granary-unlinked".into())
                .spawn(move || rx.into_iter().for_each(drop))
            {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        "no thread for closing removed files; workers close them"
                    );
                    None
                }
            }
        })
        .as_ref()
}

/// Drops `doomed` (descriptors of a file with no name left) on the closing thread when
/// the caller may not block, and here otherwise. Counts the handed-off drops in
/// `deferred`.
pub(crate) fn close_unlinked<T: Send + 'static>(doomed: T, deferred: &AtomicU64) {
    if sync::blocking::allowed() {
        return;
    }
    let Some(tx) = queue() else { return };
    if tx.send(Box::new(doomed)).is_ok() {
        deferred.fetch_add(1, Ordering::Relaxed);
    }
    // A failed send hands `doomed` back inside the error, dropped here.
}
