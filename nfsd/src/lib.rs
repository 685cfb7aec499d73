//! The NFSv3 and MOUNT v3 servers: procedure tables and handlers over the vfs seam.
//!
//! - [`nfs3proc`]: the 22 NFSv3 procedures, one table;
//! - [`mountproc`]: the 6 MOUNT v3 procedures, one table;
//! - [`convert`]: vfs ⇄ wire types, and the one `FsError` → `nfsstat3` mapping;
//! - [`readdir`]: filling READDIR/READDIRPLUS replies within the client's limits;
//! - [`state`]: exports, write verifier, mount list, handle resolution;
//! - [`nlm`]: NLM v4 and NSM v1, byte-range locks for NFSv3 clients;
//! - [`idmap`]: owners and groups as NFSv4 names (numbers, or `name@domain`);
//! - `remote`: NFSv3 and MOUNT calls on an export of a remote backend (object) go to the
//!   blocking pool before they start (NFSv4 COMPOUNDs that may reach one: [`v4::reach`]).
#![forbid(unsafe_code)]

pub mod convert;
pub mod credcache;
pub mod grace;
pub mod heads;
pub mod idmap;
pub mod limits;
pub mod mountproc;
pub mod nfs3proc;
pub mod nlm;
pub mod readdir;
mod remote;
pub mod state;
pub mod v4;

use std::sync::Arc;

use rpc::{Dispatcher, Service};

pub use state::{NfsState, SendfileMode};

/// Registers NFS v3 and MOUNT v3 on `dispatcher`, both served from `state`.
pub fn register(dispatcher: &mut Dispatcher, state: &Arc<NfsState>) {
    let nfs = Service {
        program: nfs3proc::PROGRAM,
        version: nfs3proc::VERSION,
        procedures: &nfs3proc::PROCEDURES,
        state: Arc::clone(state),
    };
    let mount = Service {
        program: mountproc::PROGRAM,
        version: mountproc::VERSION,
        procedures: &mountproc::PROCEDURES,
        state: Arc::clone(state),
    };
    if !remote::any_remote(state) {
        dispatcher.register(Box::new(nfs));
        dispatcher.register(Box::new(mount));
        return;
    }
    use remote::{Defer, Deferring};
    dispatcher.register(Box::new(Deferring {
        service: nfs,
        defer: Defer::ByHandle,
    }));
    dispatcher.register(Box::new(Deferring {
        service: mount,
        defer: Defer::Mount,
    }));
}
