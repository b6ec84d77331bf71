//! A brake on node deletion that protects every cloud from the same class of mistake:
//! an inventory that is wrong but not an error (the wrong project, an emptied file, a
//! paging bug) makes every NotReady node look gone at once. Within a sliding window the
//! node lifecycle controller deletes at most a share of the cluster's nodes; a sync
//! whose deletions would pass that share deletes none of them, and says so (log, event
//! per node, metric), so that a person decides.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct DeletionGuard {
    /// The share of the cluster's nodes that may be deleted per window, 0.0–1.0.
    max_share: f64,
    window: Duration,
    /// When each admitted deletion was admitted, oldest first.
    admitted: Mutex<VecDeque<Instant>>,
}

/// What the guard says to a sync's deletions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Refused {
        /// Deletions already admitted in the window.
        recent: usize,
        /// Deletions the window allows for a cluster of this size.
        budget: usize,
    },
}

impl DeletionGuard {
    /// `max_percent` of the cluster's nodes (rounded up, so a small cluster can still
    /// lose one) per `window`; 0 forbids deletion, 100 turns the guard off.
    pub fn new(max_percent: u8, window: Duration) -> Self {
        Self {
            max_share: f64::from(max_percent.min(100)) / 100.0,
            window,
            admitted: Mutex::new(VecDeque::new()),
        }
    }

    /// A guard that admits everything (tests and tools).
    pub fn off() -> Self {
        Self::new(100, Duration::ZERO)
    }

    /// Admits all `candidates` deletions in a cluster of `nodes` nodes, or none.
    pub fn admit(&self, candidates: usize, nodes: usize, now: Instant) -> Verdict {
        if candidates == 0 || self.max_share >= 1.0 {
            return Verdict::Allowed;
        }
        let mut admitted = self.admitted.lock().unwrap_or_else(|p| p.into_inner());
        while admitted
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= self.window)
        {
            admitted.pop_front();
        }
        let budget = (self.max_share * nodes as f64).ceil() as usize;
        if admitted.len() + candidates > budget {
            return Verdict::Refused {
                recent: admitted.len(),
                budget,
            };
        }
        admitted.extend(std::iter::repeat_n(now, candidates));
        Verdict::Allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_of_the_cluster_per_window_and_all_or_nothing() {
        let guard = DeletionGuard::new(10, Duration::from_secs(600));
        let t0 = Instant::now();
        // 50 nodes: 5 per window.
        assert_eq!(
            guard.admit(6, 50, t0),
            Verdict::Refused {
                recent: 0,
                budget: 5
            }
        );
        assert_eq!(guard.admit(3, 50, t0), Verdict::Allowed);
        assert_eq!(guard.admit(2, 50, t0), Verdict::Allowed);
        assert_eq!(
            guard.admit(1, 50, t0 + Duration::from_secs(599)),
            Verdict::Refused {
                recent: 5,
                budget: 5
            },
            "the window still holds five"
        );
        assert_eq!(
            guard.admit(5, 50, t0 + Duration::from_secs(600)),
            Verdict::Allowed,
            "they age out of the window"
        );
    }

    #[test]
    fn small_clusters_can_lose_one_and_the_extremes_mean_what_they_say() {
        let t0 = Instant::now();
        let guard = DeletionGuard::new(10, Duration::from_secs(600));
        assert_eq!(guard.admit(1, 3, t0), Verdict::Allowed);
        assert!(matches!(guard.admit(1, 3, t0), Verdict::Refused { .. }));
        let never = DeletionGuard::new(0, Duration::from_secs(600));
        assert_eq!(
            never.admit(1, 1000, t0),
            Verdict::Refused {
                recent: 0,
                budget: 0
            }
        );
        assert_eq!(never.admit(0, 1000, t0), Verdict::Allowed);
        let off = DeletionGuard::off();
        assert_eq!(off.admit(1000, 1000, t0), Verdict::Allowed);
    }
}
