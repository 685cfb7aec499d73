//! Whole call records (RPC header, credentials, verifier, then the procedure arguments of
//! NFSv3, MOUNT v3, NLM v4 or NSM v1) through the real dispatcher over a mem export: every
//! record gets a well-formed reply record or is dropped as unanswerable; nothing panics.
#![no_main]

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

static SERVER: OnceLock<(Arc<rpc::Dispatcher>, Arc<nfsd::NfsState>)> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let (dispatcher, _) = SERVER.get_or_init(granary_fuzz::server);
    if let Ok(reply) = dispatcher.handle(Bytes::copy_from_slice(data), granary_fuzz::PEER) {
        // A reply is one last fragment whose mark states its length, then the xid.
        assert!(reply.len() >= 4 + 12);
        let mark = u32::from_be_bytes([reply[0], reply[1], reply[2], reply[3]]);
        assert_eq!(mark, (1 << 31) | (reply.len() as u32 - 4));
        assert_eq!(&reply[4..8], &data[..4]);
    }
});
