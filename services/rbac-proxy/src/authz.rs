//! Who is calling, and may they? A bearer token is reviewed with a TokenReview; the
//! request is authorized with a SubjectAccessReview — for resource attributes when
//! configured (as kube-rbac-proxy's `resourceAttributes`), otherwise for the
//! non-resource URL and the verb of the HTTP method. Both answers are cached for a short
//! time in bounded caches, keyed so that one token's identity is never served to another
//! and one identity's decision never to another (the user's name, uid, groups and extra
//! all count). A token the API server did not authenticate is remembered briefly; a
//! review for a token not in the cache is subject to [`ReviewLimit`].

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::cache::TtlCache;
use crate::limit::ReviewLimit;
use crate::metrics::Metrics;

/// Resource attributes to authorize every request against (kube-rbac-proxy's
/// `authorization.resourceAttributes`); `None` means non-resource URL checks.
#[derive(Debug, Clone, Default)]
pub struct Resource {
    pub namespace: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Unauthenticated,
    Forbidden(String),
    Allowed(String),
    /// Too many reviews of unknown tokens from this client: try again later.
    TooManyRequests,
}

/// A keyed hash of (user, verb, path — empty with resource attributes).
type DecisionKey = u64;

/// How many identities and decisions are remembered at most (a few MiB at worst).
const CACHE_ENTRIES: usize = 10_000;
/// How long a token the API server rejected is remembered: long enough to absorb a
/// client retrying a bad token, short enough for a token that becomes valid.
const NEGATIVE_TTL: Duration = Duration::from_secs(10);

pub struct Authorizer {
    client: Client,
    resource: Option<Resource>,
    ttl: Duration,
    hasher: RandomState,
    identities: Mutex<TtlCache<u64, Option<User>>>,
    decisions: Mutex<TtlCache<DecisionKey, bool>>,
    limit: ReviewLimit,
    metrics: Arc<Metrics>,
}

/// The verb an HTTP method stands for, as kube-rbac-proxy maps it.
pub fn verb(method: &str) -> &'static str {
    match method {
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "get",
    }
}

impl Authorizer {
    pub fn new(
        client: Client,
        resource: Option<Resource>,
        ttl: Duration,
        limit: ReviewLimit,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            client,
            resource,
            ttl,
            hasher: RandomState::new(),
            identities: Mutex::new(TtlCache::new(CACHE_ENTRIES)),
            decisions: Mutex::new(TtlCache::new(CACHE_ENTRIES)),
            limit,
            metrics,
        }
    }

    /// Identities and decisions held now (for the bounded-memory tests and metrics).
    pub fn cached(&self) -> (usize, usize) {
        (
            self.identities
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .len(),
            self.decisions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .len(),
        )
    }

    pub async fn decide(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        client: IpAddr,
    ) -> kube::Result<Decision> {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Ok(Decision::Unauthenticated);
        };
        let user = match self.identity(token, client).await? {
            Identity::Known(user) => user,
            Identity::Unknown => return Ok(Decision::Unauthenticated),
            Identity::Limited => return Ok(Decision::TooManyRequests),
        };
        let verb = verb(method);
        if self.allowed(&user, verb, path).await? {
            Ok(Decision::Allowed(user.name))
        } else {
            let what = match &self.resource {
                Some(r) => format!("{verb} {}/{}", r.resource, r.subresource),
                None => format!("{verb} {path}"),
            };
            Ok(Decision::Forbidden(format!(
                "user {:?} is not allowed to {what}",
                user.name
            )))
        }
    }

    async fn identity(&self, token: &str, client: IpAddr) -> kube::Result<Identity> {
        let key = self.hasher.hash_one(token);
        let now = Instant::now();
        let cached = self
            .identities
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key, now);
        self.metrics.cache("token", cached.is_some());
        if let Some(user) = cached {
            return Ok(user.map_or(Identity::Unknown, Identity::Known));
        }
        if !self.limit.allow(client, now) {
            self.metrics.rate_limited.inc();
            return Ok(Identity::Limited);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let sent = Instant::now();
        let answer = api.create(&PostParams::default(), &review).await;
        let seconds = sent.elapsed().as_secs_f64();
        let status = match answer {
            Ok(r) => r.status.unwrap_or_default(),
            Err(e) => {
                self.metrics.review("token", "error", seconds);
                return Err(e);
            }
        };
        let outcome = if status.authenticated == Some(true) {
            "authenticated"
        } else {
            "unauthenticated"
        };
        self.metrics.review("token", outcome, seconds);
        let user = (status.authenticated == Some(true)).then(|| {
            let info = status.user.unwrap_or_default();
            User {
                name: info.username.unwrap_or_default(),
                uid: info.uid.unwrap_or_default(),
                groups: info.groups.unwrap_or_default(),
                extra: info.extra.unwrap_or_default(),
            }
        });
        let ttl = match user {
            Some(_) => self.ttl,
            None => self.ttl.min(NEGATIVE_TTL),
        };
        let now = Instant::now();
        self.identities
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, user.clone(), now + ttl, now);
        Ok(user.map_or(Identity::Unknown, Identity::Known))
    }

    async fn allowed(&self, user: &User, verb: &str, path: &str) -> kube::Result<bool> {
        // The whole identity: two users of one name with other groups may differ. With
        // resource attributes, the path does not enter the decision.
        let key =
            self.hasher
                .hash_one((user, verb, if self.resource.is_some() { "" } else { path }));
        let cached = self
            .decisions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key, Instant::now());
        self.metrics.cache("decision", cached.is_some());
        if let Some(ok) = cached {
            return Ok(ok);
        }
        let (resource_attributes, non_resource_attributes) = match &self.resource {
            Some(r) => (
                Some(ResourceAttributes {
                    namespace: Some(r.namespace.clone()),
                    group: Some(r.group.clone()),
                    version: Some(r.version.clone()),
                    resource: Some(r.resource.clone()),
                    subresource: Some(r.subresource.clone()),
                    name: Some(r.name.clone()),
                    verb: Some(verb.to_owned()),
                    ..Default::default()
                }),
                None,
            ),
            None => (
                None,
                Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some(verb.to_owned()),
                }),
            ),
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: Some(user.uid.clone()),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone()),
                resource_attributes,
                non_resource_attributes,
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let sent = Instant::now();
        let answer = api.create(&PostParams::default(), &review).await;
        let seconds = sent.elapsed().as_secs_f64();
        let ok = match answer {
            Ok(r) => r.status.is_some_and(|s| s.allowed),
            Err(e) => {
                self.metrics.review("access", "error", seconds);
                return Err(e);
            }
        };
        self.metrics
            .review("access", if ok { "allowed" } else { "denied" }, seconds);
        let now = Instant::now();
        self.decisions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, ok, now + self.ttl, now);
        Ok(ok)
    }
}

enum Identity {
    Known(User),
    Unknown,
    Limited,
}
