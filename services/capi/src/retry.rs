//! One backoff per object: a reconcile that failed is retried with the suite's policy
//! (`overcast_runtime::backoff`, doubling and jittered), reset once it succeeds, so one
//! machine stuck on a cloud error never slows the others.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::runtime::finalizer;
use kube::{Resource, ResourceExt};
use overcast_runtime::backoff::Retry;

use crate::{Error, Result};

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

/// The key an object's backoff is kept under: its kind and `namespace/name`.
pub fn key_of<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{} {}/{}",
        K::kind(&()),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

impl Retries {
    /// Every controller's error policy: `obj` looked at again after its backoff.
    pub fn after_failure<K: Resource<DynamicType = ()>>(&self, obj: &K, error: &Error) -> Action {
        let key = key_of(obj);
        let wait = self.failed(&key);
        tracing::warn!(object = %key, error = %error, retry_in = ?wait, "reconcile failed");
        Action::requeue(wait)
    }

    /// A reconcile's outcome, the backoff of `key` reset when it succeeded.
    pub fn settle(&self, key: &str, outcome: Result<Action>) -> Result<Action> {
        if outcome.is_ok() {
            self.succeeded(key);
        }
        outcome
    }

    /// A reconcile run under a finalizer (`kube::runtime::finalizer`): the apply's or the
    /// cleanup's own error, then [`Retries::settle`].
    pub fn settle_finalized(
        &self,
        key: &str,
        outcome: std::result::Result<Action, finalizer::Error<Error>>,
    ) -> Result<Action> {
        self.settle(
            key,
            outcome.map_err(|e| match e {
                finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
                other => Error::Finalizer(other.to_string()),
            }),
        )
    }
}
