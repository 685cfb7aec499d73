//! EROFS image parser: any bytes opened as an image and walked (every inode, directory
//! block, lookup, symlink and up to 1 MiB of every file, compressed or not) give results
//! or errors; never a panic, an out-of-bounds read or an unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    granary_erofs::walk::exercise(data.to_vec());
});
