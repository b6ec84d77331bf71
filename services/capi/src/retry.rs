//! One backoff per object: a reconcile that failed is retried with the suite's policy
//! (`overcast_runtime::backoff`, doubling and jittered), reset once it succeeds, so one
//! machine stuck on a cloud error never slows the others.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use overcast_runtime::backoff::Retry;

pub struct Retries {
    min: Duration,
    max: Duration,
    by_object: Mutex<HashMap<String, Retry>>,
}

impl Retries {
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            by_object: Mutex::new(HashMap::new()),
        }
    }

    /// The wait before `key`'s next try, after one more failure.
    pub fn failed(&self, key: &str) -> Duration {
        let mut all = self.by_object.lock().unwrap_or_else(|e| e.into_inner());
        all.entry(key.to_owned())
            .or_insert_with(|| Retry::new(self.min, self.max))
            .failed()
    }

    pub fn succeeded(&self, key: &str) {
        let mut all = self.by_object.lock().unwrap_or_else(|e| e.into_inner());
        all.remove(key);
    }
}
