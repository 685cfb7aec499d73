//! Helpers shared by granary's fuzz targets: a server stack (dispatcher, NFSv3 + MOUNT +
//! NLM + NSM and NFSv4.1/4.2 over one mem export) built the way `granary serve` builds it,
//! without sockets (the calls NLM makes to clients are dropped).

use std::net::SocketAddr;
use std::sync::Arc;

use rpc::Dispatcher;
use vfs::{Export, ExportId, ExportOptions, ExportTable, HandleKey};

/// The peer every fuzzed call comes from.
pub const PEER: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    700,
));

/// Drops NLM's calls to clients, telling their callers they failed.
struct Dropped;

impl nfsd::nlm::Outbox for Dropped {
    fn send(&self, call: nfsd::nlm::Callback) {
        if let Some(done) = call.done {
            done(Err("fuzzing: no client".into()));
        }
    }
}

/// A dispatcher serving NFSv3, MOUNT v3, NLM v4, NSM v1 and NFSv4.1/4.2 over one small mem
/// export `/`, with a reply cache, on a manual clock (no time passes unless a target advances it).
#[must_use]
pub fn server() -> (Arc<Dispatcher>, Arc<nfsd::NfsState>) {
    let clock = Arc::new(gtime::ManualClock::new(gtime::Timestamp::default()));
    let mem = backend_mem::MemConfig {
        capacity_bytes: 4 << 20,
        max_files: 4096,
        ..Default::default()
    };
    let backend: Arc<dyn vfs::Backend> = Arc::new(backend_mem::MemFs::new(mem, clock.clone()));
    let options = ExportOptions::default();
    let export = Export::new(ExportId(1), 1, "/".into(), options, backend);
    let table = ExportTable::new(vec![export], HandleKey::new([2; 16]));
    let max_io_bytes = nfsd::limits::MAX_IO_BYTES;
    let state = Arc::new(nfsd::NfsState::new(table, [7; 8], max_io_bytes));
    let mut d = Dispatcher::new();
    nfsd::register(&mut d, &state);
    let nlm = nfsd::nlm::NlmState::new(
        Arc::clone(&state),
        nfsd::nlm::Monitor::in_memory(),
        clock.clone(),
        Arc::new(Dropped),
    );
    nfsd::nlm::register(&mut d, &nlm);
    let v4 = Arc::new(nfsd::v4::Nfs4State::with_defaults(
        Arc::clone(&state),
        clock.clone(),
        0x5eed,
    ));
    nfsd::v4::register(&mut d, &v4);
    let cache = Arc::new(rpc::drc::ReplyCache::new(
        64,
        std::time::Duration::from_secs(60),
    ));
    d.set_reply_cache(cache, clock);
    (Arc::new(d), state)
}
