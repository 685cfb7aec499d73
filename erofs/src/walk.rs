//! A bounded walk over a whole image, for the fuzzer and the corruption tests: every
//! reachable inode is parsed, directories listed and looked up, files read. Errors are
//! expected on bad images; panics, unbounded loops and unbounded memory are the bugs.

use std::collections::HashSet;

use crate::image::Image;
use crate::source::MemSource;

/// Most inodes one walk visits.
const MAX_WALK_INODES: usize = 20_000;
/// Most bytes read from one file.
const MAX_WALK_READ_BYTES: u64 = 1 << 20;

/// Opens `bytes` as an image and walks it; returns how many inodes were read.
pub fn exercise(bytes: Vec<u8>) -> usize {
    let Ok(image) = Image::open(Box::new(MemSource(bytes))) else {
        return 0;
    };
    let mut seen = HashSet::new();
    let mut todo = vec![image.root_nid()];
    while let Some(nid) = todo.pop() {
        if seen.len() >= MAX_WALK_INODES || !seen.insert(nid) {
            continue;
        }
        let Ok(inode) = image.inode(nid) else {
            continue;
        };
        if inode.is_dir() {
            let blocks = image
                .dir_blocks(&inode)
                .unwrap_or(0)
                .min(MAX_WALK_INODES as u64);
            for b in 0..blocks {
                let Ok(entries) = image.dir_block(&inode, b) else {
                    continue;
                };
                for e in entries {
                    let _ = image.lookup(&inode, &e.name);
                    todo.push(e.nid);
                }
            }
        } else if inode.is_symlink() {
            let _ = image.read_link(&inode);
        } else if inode.is_reg() {
            let len = inode.size_bytes.min(MAX_WALK_READ_BYTES);
            let mut buf = vec![0; len as usize];
            let _ = image.read_simple(&inode, 0, &mut buf);
            if inode.size_bytes > 1 {
                let _ = image.read_simple(&inode, inode.size_bytes - 1, &mut [0]);
            }
        }
    }
    seen.len()
}
