//! How many TokenReviews callers can make the proxy send: a review is a request to the
//! API server, so an unknown token costs the cluster something and a stream of garbage
//! tokens would turn the proxy into an amplifier. Token buckets per client address, and
//! one for all of them; a caller past its bucket gets 429 without a review. Known tokens
//! are answered from the cache and never counted.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn take(&mut self, rate: f64, burst: f64, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

pub struct ReviewLimit {
    per_client: (f64, f64),
    overall: (f64, f64),
    state: Mutex<(Bucket, HashMap<IpAddr, Bucket>)>,
}

/// Clients remembered at once; past it, the table starts over (a full bucket each).
const MAX_CLIENTS: usize = 4096;

impl ReviewLimit {
    /// `rate` reviews a second per client, bursts of `burst`; all clients together get
    /// five times that.
    pub fn new(rate: f64, burst: f64) -> Self {
        let now = Instant::now();
        Self {
            per_client: (rate, burst),
            overall: (rate * 5.0, burst * 5.0),
            state: Mutex::new((
                Bucket {
                    tokens: burst * 5.0,
                    at: now,
                },
                HashMap::new(),
            )),
        }
    }

    /// Whether `client` may have one more review now.
    pub fn allow(&self, client: IpAddr, now: Instant) -> bool {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (overall, clients) = &mut *guard;
        if clients.len() >= MAX_CLIENTS && !clients.contains_key(&client) {
            clients.clear();
        }
        let (rate, burst) = self.per_client;
        let mine = clients.entry(client).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        // The client's own bucket first: a flood from one address exhausts only it.
        if !mine.take(rate, burst, now) {
            return false;
        }
        let (rate, burst) = self.overall;
        overall.take(rate, burst, now)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn one_flooding_client_exhausts_only_its_own_bucket() {
        let limit = ReviewLimit::new(10.0, 20.0);
        let t0 = Instant::now();
        let attacker: IpAddr = [10, 0, 0, 1].into();
        let other: IpAddr = [10, 0, 0, 2].into();
        let granted = (0..1000).filter(|_| limit.allow(attacker, t0)).count();
        assert_eq!(granted, 20, "the burst, then nothing");
        assert!(limit.allow(other, t0), "another client is still served");
        // A second later the attacker has its rate back, no more.
        let later = t0 + Duration::from_secs(1);
        let granted = (0..1000).filter(|_| limit.allow(attacker, later)).count();
        assert_eq!(granted, 10);
    }

    #[test]
    fn many_clients_together_meet_the_overall_bucket() {
        let limit = ReviewLimit::new(10.0, 2.0);
        let t0 = Instant::now();
        let granted = (0..200u8)
            .filter(|i| limit.allow([10, 0, 1, *i].into(), t0))
            .count();
        assert_eq!(granted, 10, "five times one client's burst");
    }
}
