//! What the integration tests, `granary bench` and `granary lab` share to run granary:
//! [`spawn`] starts a `granary serve` process and reads the address it prints;
//! [`machine`] describes the machine and its load, and refuses busy runs.
#![forbid(unsafe_code)]

pub mod machine;
pub mod spawn;

pub use spawn::{serve_command, ServeProcess};
