//! Whether each endpoint of a cloud answers, said as it happens: a call that fails to get
//! an answer — refused, reset, timed out, a 429/502/503/504 — or that has waited
//! [`SLOW`] without one is a warning naming the endpoint, the request, and when the
//! endpoint last answered (at most one per [`WARN_EVERY`] an endpoint: a hung cloud
//! is not a log flood); the first answer after is an info line; and the time of each
//! endpoint's last answer is a gauge (`<prefix>_api_last_success_timestamp_seconds`). A
//! hung cloud holds a call for its whole attempt timeout and retries (minutes): without
//! this, a service waiting on it says nothing until the call finally fails.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// How long a call waits for an answer before it is said to be waiting.
pub const SLOW: Duration = Duration::from_secs(10);
/// At most one warning an endpoint this often.
pub const WARN_EVERY: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct EndpointLabel {
    pub endpoint: String,
}

#[derive(Debug, Default)]
struct State {
    last_answer: Option<SystemTime>,
    /// The same moment on the monotonic clock: a silence begins no earlier.
    last_answer_at: Option<Instant>,
    /// Since when it has not answered (None: it answers).
    failing_since: Option<Instant>,
    warned_at: Option<Instant>,
}

#[derive(Debug, Default)]
pub(crate) struct Endpoints {
    state: Mutex<HashMap<String, State>>,
    pub last_success: Family<EndpointLabel, Gauge<f64, AtomicU64>>,
    /// Warnings said, for tests.
    warned: AtomicU64,
}

impl Endpoints {
    pub fn warnings(&self) -> u64 {
        self.warned.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How long `endpoint` has not answered; `None` while it answers.
    pub fn silent_for(&self, endpoint: &str) -> Option<Duration> {
        let all = self.state.lock().unwrap_or_else(|e| e.into_inner());
        all.get(endpoint)
            .and_then(|s| s.failing_since)
            .map(|since| since.elapsed())
    }

    /// `endpoint` answered.
    pub fn answered(&self, cloud: &str, endpoint: &str) {
        let now = SystemTime::now();
        let mut all = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let s = all.entry(endpoint.to_owned()).or_default();
        if let Some(since) = s.failing_since.take() {
            if s.warned_at.is_some() {
                tracing::info!(
                    cloud,
                    endpoint,
                    after = ?since.elapsed(),
                    "the cloud endpoint answers again"
                );
            }
        }
        s.warned_at = None;
        s.last_answer = Some(now);
        s.last_answer_at = Some(Instant::now());
        let unix = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        self.last_success
            .get_or_create(&EndpointLabel {
                endpoint: endpoint.to_owned(),
            })
            .set(unix);
    }

    /// `endpoint` has not answered `request`, asked at `asked` (`why`: the error, or how
    /// long it has waited). Whether this was said: at most once per [`WARN_EVERY`] an
    /// endpoint. The silence is counted from when the unanswered request was asked — a
    /// hung call is said only after [`SLOW`], and those first seconds are part of it —
    /// but never from before the endpoint's last answer.
    pub fn unanswered(
        &self,
        cloud: &str,
        endpoint: &str,
        request: &str,
        why: &str,
        asked: Instant,
    ) -> bool {
        // Its series exists from the first try: 0 until it answers, so "never answered
        // since the process started" is seen as old.
        drop(self.last_success.get_or_create(&EndpointLabel {
            endpoint: endpoint.to_owned(),
        }));
        let mut all = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let s = all.entry(endpoint.to_owned()).or_default();
        let began = match s.last_answer_at {
            Some(answer) => asked.max(answer),
            None => asked,
        };
        let since = *s.failing_since.get_or_insert(began);
        if s.warned_at.is_some_and(|w| w.elapsed() < WARN_EVERY) {
            return false;
        }
        s.warned_at = Some(Instant::now());
        self.warned
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let last = match s.last_answer {
            Some(t) => format!(
                "{}s ago",
                SystemTime::now()
                    .duration_since(t)
                    .unwrap_or_default()
                    .as_secs()
            ),
            None => "never, since this process started".into(),
        };
        tracing::warn!(
            cloud,
            endpoint,
            request,
            error = why,
            failing_for = ?since.elapsed(),
            last_answer = %last,
            "the cloud endpoint does not answer: what needs it waits (nothing is deleted on it)"
        );
        true
    }
}
