//! A bounded cache of decompressed extents, keyed by (nid, extent start). Eviction is
//! second-chance (CLOCK): an entry read since the hand last passed survives one more pass.
//! Each entry is charged its data plus [`crate::EXTENT_ENTRY_BYTES`] (its map slot, queue
//! slot and buffer header), so many tiny extents cannot take more than the capacity.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;

type Key = (u64, u64);

struct Inner {
    map: HashMap<Key, (Bytes, bool)>,
    order: VecDeque<Key>,
    bytes: u64,
}

/// Decoded extents, at most `capacity_bytes` in total.
pub struct ExtentCache {
    capacity_bytes: u64,
    inner: Mutex<Inner>,
}

impl ExtentCache {
    #[must_use]
    pub fn new(capacity_bytes: u64) -> Self {
        Self {
            capacity_bytes,
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                order: VecDeque::new(),
                bytes: 0,
            }),
        }
    }

    pub fn get(&self, nid: u64, start: u64) -> Option<Bytes> {
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let e = g.map.get_mut(&(nid, start))?;
        e.1 = true;
        Some(e.0.clone())
    }

    /// Inserts `data` (not cached if larger than the whole cache), evicting as needed.
    pub fn insert(&self, nid: u64, start: u64, data: Bytes) {
        let len = charge(&data);
        if len > self.capacity_bytes {
            return;
        }
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if g.map.contains_key(&(nid, start)) {
            return;
        }
        while g.bytes + len > self.capacity_bytes {
            let Some(k) = g.order.pop_front() else { break };
            let Some(entry) = g.map.get_mut(&k) else {
                continue;
            };
            if entry.1 {
                entry.1 = false;
                g.order.push_back(k);
            } else if let Some((old, _)) = g.map.remove(&k) {
                g.bytes -= charge(&old);
            }
        }
        g.bytes += len;
        g.map.insert((nid, start), (data, false));
        g.order.push_back((nid, start));
    }

    /// Bytes charged now (data plus [`crate::EXTENT_ENTRY_BYTES`] per entry).
    pub fn bytes(&self) -> u64 {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bytes
    }
}

fn charge(data: &Bytes) -> u64 {
    data.len() as u64 + crate::EXTENT_ENTRY_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_capacity_and_keeps_recently_read_entries() {
        let e = crate::EXTENT_ENTRY_BYTES;
        let c = ExtentCache::new(10 + 2 * e);
        c.insert(1, 0, Bytes::from(vec![0u8; 4]));
        c.insert(1, 4, Bytes::from(vec![0u8; 4]));
        assert!(c.get(1, 0).is_some());
        c.insert(1, 8, Bytes::from(vec![0u8; 4]));
        assert!(c.bytes() <= 10 + 2 * e);
        assert!(c.get(1, 0).is_some(), "read entry got a second chance");
        assert!(c.get(1, 4).is_none());
        c.insert(2, 0, Bytes::from(vec![0u8; 11 + 2 * e as usize]));
        assert!(c.get(2, 0).is_none(), "larger than the cache");
    }
}
