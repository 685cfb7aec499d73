//! What the integration tests, `granary bench` and `granary lab` share to run granary:
//! [`spawn`] starts a `granary serve` process and reads the address it prints;
//! [`machine`] describes the machine and its load, and refuses busy runs; [`procstat`]
//! reads what a running server costs (wake-ups, CPU time).
#![forbid(unsafe_code)]

pub mod machine;
pub mod procstat;
pub mod spawn;

pub use procstat::ProcCounters;
pub use spawn::{serve_command, ServeProcess};
