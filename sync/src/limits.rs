//! Limits of the synchronization structures.

/// Shards of the open-file cache: one mutex each, picked by the hash of the file identity.
/// Sixteen keeps two cores (and 16-core hosts) from meeting on one lock for long while the
/// cache's memory stays a few hundred bytes when empty.
pub const FILECACHE_SHARDS: usize = 16;

/// Default bound on the entries (open descriptors) of the open-file cache. A host export
/// serving more files at once than this opens the overflow per call, uncached.
pub const FILECACHE_DEFAULT_ENTRIES: usize = 4096;

/// Descriptors kept back from RLIMIT_NOFILE for everything that is not the cache:
/// client connections, the listener, directories being walked, logs.
pub const FILECACHE_NOFILE_RESERVE: u64 = 256;

/// The cache may hold at most this share (1/N) of what RLIMIT_NOFILE leaves after the
/// reserve, so connections keep room to grow.
pub const FILECACHE_NOFILE_SHARE: u64 = 2;

const _: () = assert!(FILECACHE_SHARDS.is_power_of_two());
const _: () = assert!(FILECACHE_DEFAULT_ENTRIES >= FILECACHE_SHARDS);
const _: () = assert!(FILECACHE_NOFILE_SHARE >= 1);

/// How many entries the open-file cache may hold given the process's soft RLIMIT_NOFILE.
///
/// # Errors
/// The limit leaves no room for the cache (below the reserve); the message says how to
/// raise it (`ulimit -n`) or to turn the cache off.
pub fn filecache_entries_for(requested: usize, nofile_soft: u64) -> Result<usize, String> {
    let room = nofile_soft.saturating_sub(FILECACHE_NOFILE_RESERVE) / FILECACHE_NOFILE_SHARE;
    if room == 0 {
        return Err(format!(
            "RLIMIT_NOFILE is {nofile_soft}, which leaves no descriptors for the open-file \
             cache after {FILECACHE_NOFILE_RESERVE} kept for connections; raise it \
             (ulimit -n 65536) or run with --fhcache off"
        ));
    }
    Ok(requested
        .min(usize::try_from(room).unwrap_or(usize::MAX))
        .max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nofile_bounds_the_cache() {
        assert_eq!(filecache_entries_for(4096, 1024), Ok((1024 - 256) / 2));
        assert_eq!(filecache_entries_for(100, 1 << 20), Ok(100));
        assert!(filecache_entries_for(100, 256).is_err());
        assert!(filecache_entries_for(100, 10).is_err());
    }
}
