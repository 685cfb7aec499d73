//! Record marking: any byte stream yields whole records within the limit, or an error;
//! never a panic, never a record over the limit, never more bytes than were sent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpc::record::{read_record, RecordError, RecordTimeouts};
use std::sync::OnceLock;
use std::time::Duration;

const MAX_BYTES: u32 = 64 << 10;

static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let rt = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
    });
    let timeouts = RecordTimeouts {
        idle: Duration::from_secs(3600),
        record: Duration::from_secs(3600),
    };
    rt.block_on(async {
        let mut r = data;
        let mut total = 0usize;
        loop {
            match read_record(&mut r, MAX_BYTES, timeouts).await {
                Ok(record) => {
                    assert!(record.len() <= MAX_BYTES as usize);
                    total += record.len();
                    assert!(total <= data.len());
                }
                Err(RecordError::Idle(_) | RecordError::Stalled(_)) => {
                    unreachable!("an in-memory reader never stalls")
                }
                Err(_) => break,
            }
        }
    });
});
