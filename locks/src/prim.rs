//! The one place that picks the manager's synchronization primitives: std's, or loom's
//! when the crate is built for model checking (`RUSTFLAGS="--cfg loom"`), as
//! `granary-sync` and tokio swap them. The manager's mutex and its wakers' lock are then
//! loom's, so the model in `loom_tests.rs` runs every order of the calls' critical
//! sections and of the deliveries to the wakers that follow them.

#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard, RwLock};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard, RwLock};
