//! The proxy's own metrics, served at [`PATH`] on its secure listener and authorized like
//! any other path (a scraper needs `get` on that non-resource URL): answers by status,
//! reviews by kind and outcome with their latency, cache lookups, refused reviews.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Where the proxy answers with its own metrics instead of forwarding.
pub const PATH: &str = "/rbac-proxy/metrics";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabel {
    /// `token` (TokenReview) or `access` (SubjectAccessReview).
    pub review: &'static str,
    /// `allowed`/`authenticated`, `denied`/`unauthenticated`, or `error`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabel {
    /// `token` or `decision`.
    pub cache: &'static str,
    /// `hit` or `miss`.
    pub result: &'static str,
}

pub struct Metrics {
    pub registry: Registry,
    pub requests: Family<CodeLabel, Counter>,
    pub reviews: Family<ReviewLabel, Histogram, fn() -> Histogram>,
    pub cache: Family<CacheLabel, Counter>,
    pub rate_limited: Counter,
}

fn histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 14))
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::default();
        let requests = Family::<CodeLabel, Counter>::default();
        let reviews =
            Family::<ReviewLabel, Histogram, fn() -> Histogram>::new_with_constructor(histogram);
        let cache = Family::<CacheLabel, Counter>::default();
        let rate_limited = Counter::default();
        let r = registry.sub_registry_with_prefix("rbac_proxy");
        r.register(
            "requests",
            "Requests answered, by HTTP status",
            requests.clone(),
        );
        r.register(
            "review_duration_seconds",
            "TokenReviews and SubjectAccessReviews sent to the API server, by outcome",
            reviews.clone(),
        );
        r.register(
            "cache_lookups",
            "Identity and decision cache lookups",
            cache.clone(),
        );
        r.register(
            "reviews_rate_limited",
            "Unknown tokens answered 429 without a TokenReview",
            rate_limited.clone(),
        );
        Arc::new(Self {
            registry,
            requests,
            reviews,
            cache,
            rate_limited,
        })
    }

    pub fn cache(&self, cache: &'static str, hit: bool) {
        self.cache
            .get_or_create(&CacheLabel {
                cache,
                result: if hit { "hit" } else { "miss" },
            })
            .inc();
    }

    pub fn review(&self, review: &'static str, outcome: &'static str, seconds: f64) {
        self.reviews
            .get_or_create(&ReviewLabel { review, outcome })
            .observe(seconds);
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
