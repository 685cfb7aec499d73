//! The `granary serve` server: configuration (`config`), start-up and the accept loop
//! (`serve`), the portmapper registration (`portmap`), NLM and NSM over UDP (`udp`), the
//! calls granary makes to clients for NLM and NSM (`outbox`), and `granary format` for object exports
//! ([`format()`]). The `granary` binary parses
//! the command line and calls [`run`]; `granary bench` and `granary lab` live in their own
//! crates, so this one carries no benchmark or plotting dependencies.
#![forbid(unsafe_code)]

pub mod config;
mod format;
pub mod metrics;
mod outbox;
mod portmap;
mod serve;
mod state;
mod udp;

pub use format::format;
pub use serve::run;
