//! The handle index's charge per record covers what a record really takes: the bytes the
//! allocator hands out (glibc's usable size of each block plus its 8-byte header) while
//! an index fills, the hash table's growth included, never exceed the bytes the index
//! charges its records (`limits::RECORD_CHARGE_BYTES` plus names and kernel handles).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use granary_backend_host::index::{Index, IndexLimits, Record};
use granary_backend_host::KernelHandle;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn block_bytes(ptr: *mut u8) -> usize {
    // SAFETY: `ptr` was just returned by (or is about to be given back to) glibc's
    // allocator through `System`, which is glibc's malloc on Linux.
    unsafe { libc::malloc_usable_size(ptr.cast()) + 8 }
}

// SAFETY: every call is passed on to `System` unchanged; the counting has no effect on
// the memory returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `System.alloc`, with the caller's layout.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(block_bytes(p), Ordering::Relaxed) + block_bytes(p);
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(block_bytes(ptr), Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn record(ino: u64, name_len: usize, kernel_len: usize) -> Record {
    let name: Vec<u8> = (0..name_len)
        .map(|i| b'a' + ((ino as usize + i) % 26) as u8)
        .collect();
    Record {
        generation: ino as u32 | 1,
        kind: 0o100_000,
        parent: ino / 100,
        name: Bytes::from(name),
        kernel: (kernel_len > 0).then(|| {
            Arc::new(KernelHandle {
                handle_type: 1,
                bytes: ino.to_le_bytes().repeat(kernel_len.div_ceil(8))[..kernel_len].to_vec(),
            })
        }),
    }
}

/// Fills an in-memory index and checks, after every record, that the allocator's peak
/// since the start stays under what the index charges (plus 64 KiB for the map's first
/// allocations and the test's own).
fn fill(records: u64, name_len: usize, kernel_len: usize) {
    let idx = Index::in_memory(IndexLimits {
        max_entries: usize::MAX,
        max_bytes: usize::MAX,
    });
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let mut worst = 0f64;
    for ino in 1..=records {
        idx.note(ino, record(ino, name_len, kernel_len));
        let charged = idx.stats().charged_bytes;
        let used = PEAK.load(Ordering::Relaxed) - base;
        assert!(
            used <= charged + (64 << 10),
            "{ino} records ({name_len}-byte names, {kernel_len}-byte kernel handles): \
             the allocator's peak is {used} bytes, the index charges {charged}"
        );
        if ino >= 10_000 {
            worst = worst.max(used as f64 / charged as f64);
        }
    }
    eprintln!(
        "{records} records, {name_len}-byte names, {kernel_len}-byte kernel handles: \
         peak/charge from 10,000 records on at worst {worst:.2}, {} bytes per record at the end",
        (LIVE.load(Ordering::Relaxed) - base) / records as usize
    );
}

#[test]
fn a_record_takes_no_more_than_it_is_charged() {
    fill(300_000, 12, 8);
    fill(100_000, 1, 0);
    fill(50_000, 255, 128);
}
