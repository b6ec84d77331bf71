//! A cache with a size and an expiry per entry, so that no caller can grow it: when full,
//! expired entries go first, then the oldest. The proxy's answers for tokens and
//! decisions live here (a spray of garbage tokens once grew an unbounded map for good).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::Instant;

pub struct TtlCache<K, V> {
    capacity: usize,
    /// key -> (expiry, insertion number, value)
    entries: HashMap<K, (Instant, u64, V)>,
    /// Keys in insertion order with their insertion number, for eviction; a key
    /// re-inserted appears again, and its older mention is skipped.
    order: VecDeque<(K, u64)>,
    next: u64,
}

impl<K: Hash + Eq + Clone, V: Clone> TtlCache<K, V> {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            entries: HashMap::new(),
            order: VecDeque::new(),
            next: 0,
        }
    }

    /// The value of `key` if it has not expired by `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        self.entries
            .get(key)
            .filter(|(expires, _, _)| now < *expires)
            .map(|(_, _, v)| v.clone())
    }

    pub fn insert(&mut self, key: K, value: V, expires: Instant, now: Instant) {
        self.next += 1;
        self.entries
            .insert(key.clone(), (expires, self.next, value));
        self.order.push_back((key, self.next));
        self.evict(now);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    fn current(&self, key: &K, seq: u64) -> Option<Instant> {
        self.entries
            .get(key)
            .filter(|(_, s, _)| *s == seq)
            .map(|(e, _, _)| *e)
    }

    fn evict(&mut self, now: Instant) {
        // From the oldest: stale mentions, expired entries, and anything past the
        // capacity.
        while let Some((key, seq)) = self.order.front() {
            match self.current(key, *seq) {
                None => {
                    self.order.pop_front();
                }
                Some(expires) if expires <= now || self.entries.len() > self.capacity => {
                    if let Some((key, _)) = self.order.pop_front() {
                        self.entries.remove(&key);
                    }
                }
                Some(_) => break,
            }
        }
        // Mentions of re-inserted keys must not let the queue outgrow the map.
        if self.order.len() > 2 * self.capacity {
            let entries = &self.entries;
            self.order
                .retain(|(k, seq)| entries.get(k).is_some_and(|(_, s, _)| s == seq));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn entries_expire_and_the_size_is_bounded() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut c = TtlCache::new(3);
        c.insert("a", 1, t0 + 10 * s, t0);
        c.insert("b", 2, t0 + s, t0);
        assert_eq!(c.get(&"a", t0), Some(1));
        assert_eq!(c.get(&"b", t0 + 2 * s), None, "expired");
        for i in 0..1000 {
            c.insert(if i % 2 == 0 { "x" } else { "y" }, i, t0 + 10 * s, t0);
        }
        c.insert("z", 9, t0 + 10 * s, t0);
        assert!(c.len() <= 3, "{}", c.len());
        assert!(c.order.len() <= 6);
        assert_eq!(c.get(&"z", t0), Some(9), "the newest stays");
        assert_eq!(c.get(&"y", t0), Some(999));
        // Oldest go first when full.
        let mut c = TtlCache::new(2);
        for (i, k) in ["1", "2", "3"].iter().enumerate() {
            c.insert(*k, i, t0 + 10 * s, t0);
        }
        assert_eq!(c.get(&"1", t0), None);
        assert_eq!(c.get(&"3", t0), Some(2));
        // Expired entries are dropped on the next insert, whatever the capacity.
        c.insert("4", 4, t0 + 30 * s, t0 + 20 * s);
        assert_eq!(c.len(), 1);
    }
}
