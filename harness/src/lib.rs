//! What the integration tests, `granary bench` and `granary lab` share to run granary:
//! [`spawn`] starts a `granary serve` process and reads the address it prints.
#![forbid(unsafe_code)]

pub mod spawn;

pub use spawn::{serve_command, ServeProcess};
