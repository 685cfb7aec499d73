//! Whole NFSv4 COMPOUND argument bodies (tag, minor version, operations) after a
//! well-formed RPC call header, through the real dispatcher over a mem export. Every
//! call gets an accepted reply; when it is a COMPOUND reply, it decodes with nothing left
//! over, every operation but the last succeeded, and the COMPOUND's status is the last
//! operation's (RFC 8881 section 16.2.3: the server stops at the first failure).
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use rpc::msg::AcceptStat;

static SERVER: OnceLock<(Arc<rpc::Dispatcher>, Arc<nfsd::NfsState>)> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let (dispatcher, _) = SERVER.get_or_init(granary_fuzz::server);
    let call = granary_fuzz::compound_call(44, &granary_fuzz::Raw(data));
    let reply = dispatcher
        .handle(call.clone(), granary_fuzz::PEER)
        .expect("a call with a well-formed header is answered");
    let (accepted, _) = granary_fuzz::compound_reply(&call, &reply);
    if accepted != AcceptStat::Success {
        // GARBAGE_ARGS: the COMPOUND's own header (tag, minor version, count) is unreadable.
        assert_eq!(accepted, AcceptStat::GarbageArgs);
    }
});
