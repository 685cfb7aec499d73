//! std's atomics, or loom's when the crate is built for model checking
//! (`RUSTFLAGS="--cfg loom"`), as tokio swaps them.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
