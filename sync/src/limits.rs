//! Limits of the synchronization structures.

/// Shards of the open-file cache: one read-write lock each (hits read, changes write),
/// picked by the hash of the file identity. Sixteen keeps two cores (and 16-core hosts)
/// from meeting on one lock for long while the cache's memory stays a few hundred bytes
/// when empty.
pub const FILECACHE_SHARDS: usize = 16;

/// Default bound on the entries (open descriptors) of the open-file cache. A host export
/// serving more files at once than this opens the overflow per call, uncached.
pub const FILECACHE_DEFAULT_ENTRIES: usize = 4096;

/// Memory of the server's own one open-file cache entry may take, for docs/LIMITS.md's
/// formula: the shared entry (value, age, flags), its map slot (key, access mode, `Arc`)
/// with the table's slack and the allocation headers (about 150 bytes), rounded up. The
/// kernel's `struct file` behind each descriptor is kernel memory, not the server's RSS.
pub const FILECACHE_ENTRY_BYTES: usize = 256;

/// Descriptors kept back from RLIMIT_NOFILE for everything that is not the cache:
/// client connections, the listener, directories being walked, logs.
pub const FILECACHE_NOFILE_RESERVE: u64 = 256;

/// The cache may hold at most this share (1/N) of what RLIMIT_NOFILE leaves after the
/// reserve, so connections keep room to grow.
pub const FILECACHE_NOFILE_SHARE: u64 = 2;

const _: () = assert!(FILECACHE_SHARDS.is_power_of_two());
const _: () = assert!(FILECACHE_DEFAULT_ENTRIES >= FILECACHE_SHARDS);
const _: () = assert!(FILECACHE_NOFILE_SHARE >= 1);

/// The open-file cache's bound given the process's soft RLIMIT_NOFILE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilecacheBudget {
    /// Entries the cache may hold (at least 1).
    pub entries: usize,
    /// Connections that fit beside the cache and the reserve, when fewer than asked for
    /// (`None`: all of them fit).
    pub connections_short: Option<u64>,
}

/// How many entries the open-file cache may hold given the process's soft RLIMIT_NOFILE
/// and the connections the server admits: 1/[`FILECACHE_NOFILE_SHARE`] of what is left
/// after the connections and the reserve. When the limit cannot hold every connection as
/// well, the cache still gets its share of what the reserve leaves (the server starts,
/// with fewer connections possible at once, and says so) instead of refusing to start.
#[must_use]
pub fn filecache_entries_for(
    requested: usize,
    nofile_soft: u64,
    connections: u64,
) -> FilecacheBudget {
    let usable = nofile_soft.saturating_sub(FILECACHE_NOFILE_RESERVE);
    let after_connections = usable.saturating_sub(connections) / FILECACHE_NOFILE_SHARE;
    let (room, connections_short) = if after_connections > 0 {
        (after_connections, None)
    } else {
        let room = usable / (2 * FILECACHE_NOFILE_SHARE);
        (room, Some(usable - room))
    };
    FilecacheBudget {
        entries: requested
            .min(usize::try_from(room).unwrap_or(usize::MAX))
            .max(1),
        connections_short,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nofile_bounds_the_cache() {
        let fits = |entries| FilecacheBudget {
            entries,
            connections_short: None,
        };
        assert_eq!(filecache_entries_for(4096, 1024, 0), fits((1024 - 256) / 2));
        assert_eq!(filecache_entries_for(100, 1 << 20, 4096), fits(100));
        assert_eq!(
            filecache_entries_for(1 << 20, 65536, 4096),
            fits((65536 - 256 - 4096) / 2)
        );
        // A 1024 or 4096 limit under 4096 connections: the cache takes a quarter of what the
        // reserve leaves and the rest is what connections can use.
        let short = filecache_entries_for(4096, 4096, 4096);
        assert_eq!(short.entries, (4096 - 256) / 4);
        assert_eq!(short.connections_short, Some(4096 - 256 - (4096 - 256) / 4));
        assert_eq!(
            filecache_entries_for(4096, 1024, 4096).entries,
            (1024 - 256) / 4
        );
        assert_eq!(filecache_entries_for(100, 10, 4096).entries, 1);
    }
}
