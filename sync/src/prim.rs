//! The one place that picks the synchronization primitives: std's, or loom's when the
//! crate is built for model checking (`RUSTFLAGS="--cfg loom --cfg crossbeam_loom"`), the
//! way tokio swaps them. crossbeam-epoch follows the same switch through its own
//! `crossbeam_loom` cfg, so the whole lock runs on loom's atomics under the checker.
#![forbid(unsafe_code)]

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockWriteGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockWriteGuard};
