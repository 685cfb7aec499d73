//! A server holding idle connections is not woken for them (issue 15, seed 002): their
//! idle and stall checks are one global scan timer, not a timer per connection, so the
//! workers of an idle server wake about once per scan period (at most 1 s) whatever the
//! number of connections, in every `--timers` mode.

mod common;

use std::time::Duration;

use common::Server;
use harness::procstat::idle_connections;
use harness::ProcCounters;

const CONNECTIONS: usize = 300;
const WINDOW: Duration = Duration::from_secs(3);
/// Wake-ups the workers may take together in `WINDOW`: a scan a second plus re-plans,
/// with room for a loaded machine; a timer per connection would take hundreds.
const MAX_WAKEUPS: u64 = 20;

#[test]
fn idle_connections_do_not_wake_the_workers() {
    for mode in ["pull", "push", "global"] {
        let server = Server::start(&["--timers", mode, "--workers", "2"]);
        let held = idle_connections(server.addr, CONNECTIONS).expect("idle connections");
        std::thread::sleep(Duration::from_secs(1));
        let before = ProcCounters::read(server.pid(), "granary-worker").expect("/proc");
        std::thread::sleep(WINDOW);
        let after = ProcCounters::read(server.pid(), "granary-worker").expect("/proc");
        let woke = after.wakeups - before.wakeups;
        eprintln!("--timers {mode}: {woke} worker wake-ups in {WINDOW:?}");
        assert!(
            woke <= MAX_WAKEUPS,
            "--timers {mode}: {CONNECTIONS} idle connections woke the workers {woke} times in {WINDOW:?}"
        );
        drop(held);
    }
}
