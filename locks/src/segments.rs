//! A map from disjoint byte ranges to values, kept canonical: no two adjacent segments
//! hold equal values (they are merged), and a byte with no value has no segment. One
//! structure serves twice: an owner's locks on a file (value: the lock's kind, so
//! POSIX's split and merge of an owner's ranges is [`Segments::update`]) and a file's
//! holders (value: who holds each piece, so a conflict test visits only the pieces that
//! overlap the request).
//!
//! Cost: `update` and `overlapping` are O(log n + k) for n segments and k segments
//! within (or next to) the range.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::Range;

#[derive(Debug, Clone)]
pub struct Segments<V> {
    /// Segment start → (last byte, value).
    map: BTreeMap<u64, (u64, V)>,
}

impl<V> Default for Segments<V> {
    fn default() -> Self {
        Self {
            map: BTreeMap::new(),
        }
    }
}

impl<V: Clone + Eq> Segments<V> {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every segment in order.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = (Range, &V)> + '_ {
        self.map.iter().map(|(&s, (e, v))| (seg(s, *e), v))
    }

    /// The segment holding byte `at`.
    pub fn at(&self, at: u64) -> Option<(Range, &V)> {
        let (&s, (e, v)) = self.map.range(..=at).next_back()?;
        (*e >= at).then(|| (seg(s, *e), v))
    }

    /// The segments that overlap `r`, in order (the first may start before it).
    pub fn overlapping(&self, r: Range) -> impl Iterator<Item = (Range, &V)> + '_ {
        let first = self
            .map
            .range(..r.start())
            .next_back()
            .filter(|(_, (e, _))| *e >= r.start());
        first
            .into_iter()
            .chain(self.map.range(r.start()..=r.end()))
            .map(|(&s, (e, v))| (seg(s, *e), v))
    }

    /// Makes `at` the first byte of a segment if a segment holds it and `at - 1`.
    fn split_at(&mut self, at: u64) {
        if at == 0 {
            return;
        }
        let Some((s, e, v)) = self
            .map
            .range(..at)
            .next_back()
            .map(|(&s, (e, v))| (s, *e, v.clone()))
        else {
            return;
        };
        if e >= at {
            self.map.insert(s, (at - 1, v.clone()));
            self.map.insert(at, (e, v));
        }
    }

    /// Sets the value of every byte of `r` to `f(its old value)` (`None`: no value), and
    /// merges equal neighbours. `f` is called once per existing segment and once per gap
    /// within `r`, in order. Allocates nothing but the map's own nodes.
    pub fn update(&mut self, r: Range, mut f: impl FnMut(Option<&V>) -> Option<V>) {
        self.split_at(r.start());
        if !r.to_end() {
            self.split_at(r.end() + 1);
        }
        // The next byte not yet given a value; `None` once past u64::MAX. Segments
        // inserted for gaps lie before it, so the walk never meets them again.
        let mut pos = Some(r.start());
        while let Some(p) = pos.filter(|&p| p <= r.end()) {
            let Some((&s, &(e, _))) = self.map.range(p..=r.end()).next() else {
                if let Some(nv) = f(None) {
                    self.map.insert(p, (r.end(), nv));
                }
                break;
            };
            if p < s {
                if let Some(nv) = f(None) {
                    self.map.insert(p, (s - 1, nv));
                }
            }
            let new = self.map.get(&s).and_then(|(_, v)| f(Some(v)));
            match new {
                Some(nv) => {
                    if let Some(slot) = self.map.get_mut(&s) {
                        slot.1 = nv;
                    }
                }
                None => {
                    self.map.remove(&s);
                }
            }
            pos = e.checked_add(1);
        }
        self.merge_around(r);
    }

    /// Merges equal adjacent segments from the one before `r` to the one after it.
    fn merge_around(&mut self, r: Range) {
        let lo = r
            .start()
            .checked_sub(1)
            .and_then(|b| self.at(b).map(|(s, _)| s.start()))
            .unwrap_or(r.start());
        let hi = r.end().saturating_add(1);
        let Some(mut cur) = self.map.range(lo..=hi).next().map(|(&s, _)| s) else {
            return;
        };
        while let Some((&next, (ne, nv))) = self
            .map
            .range((Bound::Excluded(cur), Bound::Included(hi)))
            .next()
        {
            let ne = *ne;
            let joins = self
                .map
                .get(&cur)
                .is_some_and(|(ce, cv)| ce.checked_add(1) == Some(next) && cv == nv);
            if joins {
                self.map.remove(&next);
                if let Some(c) = self.map.get_mut(&cur) {
                    c.0 = ne;
                }
            } else {
                cur = next;
            }
        }
    }
}

fn seg(s: u64, e: u64) -> Range {
    debug_assert!(s <= e);
    Range::new(s, e).unwrap_or(Range::from(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: u64, e: u64) -> Range {
        Range::new(s, e).unwrap_or(Range::WHOLE)
    }

    fn dump(m: &Segments<u8>) -> Vec<(u64, u64, u8)> {
        m.iter().map(|(r, v)| (r.start(), r.end(), *v)).collect()
    }

    #[test]
    fn split_merge_and_gaps() {
        let mut m = Segments::default();
        m.update(r(10, 19), |_| Some(1));
        m.update(r(20, 29), |_| Some(1));
        assert_eq!(dump(&m), [(10, 29, 1)]);
        m.update(r(15, 24), |_| None);
        assert_eq!(dump(&m), [(10, 14, 1), (25, 29, 1)]);
        m.update(r(0, 40), |old| Some(old.map_or(2, |v| v + 4)));
        assert_eq!(
            dump(&m),
            [
                (0, 9, 2),
                (10, 14, 5),
                (15, 24, 2),
                (25, 29, 5),
                (30, 40, 2)
            ]
        );
        m.update(r(10, 29), |_| Some(2));
        assert_eq!(dump(&m), [(0, 40, 2)]);
        m.update(Range::from(41), |_| Some(2));
        assert_eq!(dump(&m), [(0, u64::MAX, 2)]);
        m.update(r(u64::MAX, u64::MAX), |_| None);
        assert_eq!(dump(&m), [(0, u64::MAX - 1, 2)]);
        assert_eq!(m.at(u64::MAX), None);
        let o: Vec<_> = m.overlapping(r(5, 6)).map(|(r, _)| r).collect();
        assert_eq!(o, [r(0, u64::MAX - 1)]);
    }
}
