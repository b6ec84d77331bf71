//! A brake on node deletion that protects every cloud from the same class of mistake:
//! an inventory that is wrong but not an error (the wrong project, an emptied file, a
//! paging bug) makes nodes look gone. Two signs, each capped at a share of the cluster's
//! nodes of this cloud:
//! - the listing lacks more of them than the share — Ready ones included, whose kubelets
//!   prove them alive: the listing is suspect, and nothing is deleted on it;
//! - more deletions than the share within a sliding window.
//!
//! A sync past either deletes none of its candidates and says so (log, event per node,
//! metric), so that a person decides.

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
        /// Nodes the listing lacks, Ready or not.
        missing: usize,
        /// Deletions already admitted in the window.
        recent: usize,
        /// What the share allows for a cluster of this size.
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

    /// Admits all `candidates` deletions (NotReady nodes the listing lacks), or none,
    /// in a cluster of `nodes` nodes of this cloud of which the listing lacks `missing`.
    pub fn admit(&self, candidates: usize, missing: usize, nodes: usize, now: Instant) -> Verdict {
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
        if missing > budget || admitted.len() + candidates > budget {
            return Verdict::Refused {
                missing,
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
            guard.admit(6, 6, 50, t0),
            Verdict::Refused {
                missing: 6,
                recent: 0,
                budget: 5
            }
        );
        assert_eq!(guard.admit(3, 3, 50, t0), Verdict::Allowed);
        assert_eq!(guard.admit(2, 2, 50, t0), Verdict::Allowed);
        assert_eq!(
            guard.admit(1, 1, 50, t0 + Duration::from_secs(599)),
            Verdict::Refused {
                missing: 1,
                recent: 5,
                budget: 5
            },
            "the window still holds five"
        );
        assert_eq!(
            guard.admit(5, 5, 50, t0 + Duration::from_secs(600)),
            Verdict::Allowed,
            "they age out of the window"
        );
    }

    #[test]
    fn a_listing_that_lacks_live_nodes_deletes_nothing() {
        // 5,000 nodes, 20 NotReady, and an empty inventory: 20 deletions would fit the
        // share, but a listing without the 4,980 Ready nodes is wrong.
        let guard = DeletionGuard::new(10, Duration::from_secs(600));
        let t0 = Instant::now();
        assert!(matches!(
            guard.admit(20, 5000, 5000, t0),
            Verdict::Refused { missing: 5000, .. }
        ));
        assert_eq!(guard.admit(20, 20, 5000, t0), Verdict::Allowed);
    }

    #[test]
    fn small_clusters_can_lose_one_and_the_extremes_mean_what_they_say() {
        let t0 = Instant::now();
        let guard = DeletionGuard::new(10, Duration::from_secs(600));
        assert_eq!(guard.admit(1, 1, 3, t0), Verdict::Allowed);
        assert!(matches!(guard.admit(1, 1, 3, t0), Verdict::Refused { .. }));
        let never = DeletionGuard::new(0, Duration::from_secs(600));
        assert_eq!(
            never.admit(1, 1, 1000, t0),
            Verdict::Refused {
                missing: 1,
                recent: 0,
                budget: 0
            }
        );
        assert_eq!(never.admit(0, 0, 1000, t0), Verdict::Allowed);
        let off = DeletionGuard::off();
        assert_eq!(off.admit(1000, 1000, 1000, t0), Verdict::Allowed);
    }
}
