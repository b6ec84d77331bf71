//! The suite's one retry policy for loops that retry a failed cycle: exponential, doubling
//! from `min` to `max`, jittered (backon's `ExponentialBuilder`, the crate kube-runtime's
//! own watcher backoff uses), reset after a success. Jitter keeps replicas and restarted
//! pods from retrying in step against a cloud that just came back.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

pub struct Retry {
    builder: ExponentialBuilder,
    max: Duration,
    delays: ExponentialBackoff,
}

impl Retry {
    pub fn new(min: Duration, max: Duration) -> Self {
        let max = max.max(min);
        let builder = ExponentialBuilder::default()
            .with_min_delay(min)
            .with_max_delay(max)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Self {
            delays: builder.build(),
            builder,
            max,
        }
    }

    /// How long to wait after one more failure.
    pub fn failed(&mut self) -> Duration {
        // backon's jitter adds up to the delay again; the cap stays a cap.
        self.delays.next().unwrap_or(self.max).min(self.max)
    }

    /// A success: the next failure waits the shortest time again.
    pub fn succeeded(&mut self) {
        self.delays = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_to_the_cap_with_jitter_and_start_over_after_a_success() {
        let (min, max) = (Duration::from_secs(3), Duration::from_secs(30));
        let mut r = Retry::new(min, max);
        let first: Vec<Duration> = (0..8).map(|_| r.failed()).collect();
        assert!(first[0] >= min && first[0] < 2 * min, "{first:?}");
        assert!(first[1] >= 2 * min, "doubles: {first:?}");
        assert!(first.iter().all(|d| *d <= max), "capped: {first:?}");
        assert_eq!(*first.last().unwrap(), max, "{first:?}");
        r.succeeded();
        let again = r.failed();
        assert!(again >= min && again < 2 * min, "{again:?}");
        // Jittered: two policies do not wait in step.
        let mut a = Retry::new(min, max);
        let mut b = Retry::new(min, max);
        let (da, db): (Vec<_>, Vec<_>) = (0..4).map(|_| (a.failed(), b.failed())).unzip();
        assert_ne!(da, db);
    }
}
