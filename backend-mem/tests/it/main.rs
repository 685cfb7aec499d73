//! Integration tests of `MemFs` through the `vfs::Backend` seam, in one binary to keep
//! link time down.

mod behaviour;
mod fixture;
mod model;
mod multigrain;
mod ranges;
mod threads;
