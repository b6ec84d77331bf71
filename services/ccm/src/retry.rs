//! Per-object retry with capped exponential backoff, as the upstream service controller
//! does it (k8s.io/cloud-provider: 5 s doubling to 300 s per Service) and as
//! controller-runtime's rate-limited queue does: an object that keeps failing is retried
//! less and less often, without slowing down any other object. A change to the object's
//! spec (a new `metadata.generation`) is worth trying at once; its failure count stays,
//! so editing a broken object does not reset the backoff either.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug)]
struct Entry {
    failures: u32,
    due: Instant,
    generation: Option<i64>,
}

#[derive(Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max: max.max(min),
            entries: HashMap::new(),
        }
    }

    /// Whether the object may be tried now.
    pub fn ready(&self, key: &str, generation: Option<i64>, now: Instant) -> bool {
        self.entries
            .get(key)
            .is_none_or(|e| e.due <= now || e.generation != generation)
    }

    /// How long until the object's next try (zero when it may be tried now).
    pub fn remaining(&self, key: &str, now: Instant) -> Duration {
        self.entries
            .get(key)
            .map_or(Duration::ZERO, |e| e.due.saturating_duration_since(now))
    }

    /// Records a failure; returns how long until the next try.
    pub fn failed(&mut self, key: &str, generation: Option<i64>, now: Instant) -> Duration {
        let e = self.entries.entry(key.to_owned()).or_insert(Entry {
            failures: 0,
            due: now,
            generation,
        });
        e.failures = e.failures.saturating_add(1);
        let delay = self
            .min
            .saturating_mul(2u32.saturating_pow(e.failures - 1))
            .min(self.max);
        e.due = now + delay;
        e.generation = generation;
        delay
    }

    pub fn succeeded(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Forgets objects that no longer exist.
    pub fn retain(&mut self, mut exists: impl FnMut(&str) -> bool) {
        self.entries.retain(|k, _| exists(k));
    }

    /// Objects waiting for a retry.
    pub fn waiting(&self) -> usize {
        self.entries.len()
    }

    pub fn failures(&self, key: &str) -> u32 {
        self.entries.get(key).map_or(0, |e| e.failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn delays_double_up_to_the_cap_and_success_resets() {
        let mut b = Backoff::new(5 * S, 300 * S);
        let t = Instant::now();
        let delays: Vec<u64> = (0..9)
            .map(|_| b.failed("ns/a", Some(1), t).as_secs())
            .collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert!(!b.ready("ns/a", Some(1), t + 299 * S));
        assert!(b.ready("ns/a", Some(1), t + 300 * S));
        assert_eq!(b.remaining("ns/a", t + 100 * S), 200 * S);
        assert_eq!(b.remaining("ns/a", t + 301 * S), Duration::ZERO);
        b.succeeded("ns/a");
        assert_eq!(b.failed("ns/a", Some(1), t).as_secs(), 5);
    }

    #[test]
    fn one_failing_object_delays_no_other_and_a_spec_change_is_tried_at_once() {
        let mut b = Backoff::new(5 * S, 300 * S);
        let t = Instant::now();
        b.failed("ns/a", Some(1), t);
        b.failed("ns/a", Some(1), t);
        assert!(!b.ready("ns/a", Some(1), t + S));
        assert!(
            b.ready("ns/b", Some(1), t + S),
            "another object is not held back"
        );
        assert!(
            b.ready("ns/a", Some(2), t + S),
            "an edited spec is tried at once"
        );
        assert_eq!(
            b.failed("ns/a", Some(2), t + S).as_secs(),
            20,
            "and its failures still count"
        );
        assert_eq!(b.remaining("ns/a", t + S), 20 * S);
        b.retain(|k| k != "ns/a");
        assert_eq!(b.waiting(), 0);
    }
}
