//! Filling a READDIR or READDIRPLUS reply within the client's byte limits.
//!
//! The reply holds whole entries only; `eof` is true only if the last entry of the
//! directory is in the reply. A reply that cannot hold even one entry is `TooSmall`.

use nfs3::nfs::{entry3_size, Cookieverf3};
use vfs::{Attr, Cookie, DirEntry, Export, FsError, FsResult};

use crate::limits::READDIR_BATCH;
use crate::state::Target;

/// Entries chosen for one reply, each with what the caller computed for it.
pub struct Listing<T> {
    pub entries: Vec<(DirEntry, T)>,
    pub eof: bool,
    pub verifier: Cookieverf3,
    /// The directory's attributes, as the last page read saw them.
    pub dir: Attr,
}

/// Byte budgets of one reply.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Bytes of encoded entries (the reply's `count`/`maxcount` minus its fixed part).
    pub reply_bytes: usize,
    /// Bytes of directory information only (`dircount` of READDIRPLUS).
    pub dir_bytes: usize,
}

/// Lists entries after `cookie` until a budget is spent or the directory ends.
/// `entry` returns an entry's encoded size and its extra data, or `None` to skip an entry
/// that vanished while listing.
///
/// # Errors
/// `BadCookie` if the client's cookie verifier is stale; `TooSmall` if the first entry
/// does not fit; errors of the backend.
pub fn collect<T>(
    dir: &Target<'_>,
    cookie: u64,
    verifier: Cookieverf3,
    mut entry: impl FnMut(&DirEntry, &Export) -> Option<(usize, T)>,
    budget: Budget,
) -> FsResult<Listing<T>> {
    let mut out = Vec::new();
    let (mut used, mut dir_used) = (0usize, 0usize);
    let mut next = Cookie(cookie);
    loop {
        let (page, dir_attr) = dir.export.readdir(&dir.cred, dir.id, next, READDIR_BATCH)?;
        let current = page.verifier.to_be_bytes();
        if cookie != 0 && verifier != [0; 8] && verifier != current {
            return Err(FsError::BadCookie);
        }
        for e in page.entries {
            next = e.cookie;
            let Some((size, extra)) = entry(&e, dir.export) else {
                continue;
            };
            let dir_size = entry3_size(e.name.len());
            // dircount is a hint: it ends a reply but never makes it TooSmall.
            let over_dir = dir_used + dir_size > budget.dir_bytes && !out.is_empty();
            if used + size > budget.reply_bytes || over_dir {
                if out.is_empty() {
                    return Err(FsError::TooSmall);
                }
                return Ok(Listing {
                    entries: out,
                    eof: false,
                    verifier: current,
                    dir: dir_attr,
                });
            }
            used += size;
            dir_used += dir_size;
            out.push((e, extra));
        }
        if page.eof {
            return Ok(Listing {
                entries: out,
                eof: true,
                verifier: current,
                dir: dir_attr,
            });
        }
    }
}
