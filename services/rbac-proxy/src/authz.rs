//! Who is calling, and may they? A bearer token is reviewed with a TokenReview; the
//! request is authorized with a SubjectAccessReview — for resource attributes when
//! configured (as kube-rbac-proxy's `resourceAttributes`), otherwise for the
//! non-resource URL and the verb of the HTTP method. Both answers are cached for a short
//! time, keyed so that one token's identity is never served to another.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

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

#[derive(Debug, Clone, PartialEq, Eq)]
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
}

/// (user, verb, path — empty with resource attributes).
type DecisionKey = (String, String, String);

pub struct Authorizer {
    client: Client,
    resource: Option<Resource>,
    ttl: Duration,
    hasher: RandomState,
    identities: Mutex<HashMap<u64, (Instant, Option<User>)>>,
    decisions: Mutex<HashMap<DecisionKey, (Instant, bool)>>,
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
    pub fn new(client: Client, resource: Option<Resource>, ttl: Duration) -> Self {
        Self {
            client,
            resource,
            ttl,
            hasher: RandomState::new(),
            identities: Mutex::default(),
            decisions: Mutex::default(),
        }
    }

    pub async fn decide(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
    ) -> kube::Result<Decision> {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Ok(Decision::Unauthenticated);
        };
        let Some(user) = self.identity(token).await? else {
            return Ok(Decision::Unauthenticated);
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

    async fn identity(&self, token: &str) -> kube::Result<Option<User>> {
        let key = self.hasher.hash_one(token);
        if let Some((at, user)) = self
            .identities
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            if at.elapsed() < self.ttl {
                return Ok(user.clone());
            }
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let status = api
            .create(&PostParams::default(), &review)
            .await?
            .status
            .unwrap_or_default();
        let user = (status.authenticated == Some(true)).then(|| {
            let info = status.user.unwrap_or_default();
            User {
                name: info.username.unwrap_or_default(),
                uid: info.uid.unwrap_or_default(),
                groups: info.groups.unwrap_or_default(),
                extra: info.extra.unwrap_or_default(),
            }
        });
        self.identities
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (Instant::now(), user.clone()));
        Ok(user)
    }

    async fn allowed(&self, user: &User, verb: &str, path: &str) -> kube::Result<bool> {
        // With resource attributes, the path does not enter the decision.
        let key = (
            user.name.clone(),
            verb.to_owned(),
            if self.resource.is_some() {
                String::new()
            } else {
                path.to_owned()
            },
        );
        if let Some((at, ok)) = self
            .decisions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            if at.elapsed() < self.ttl {
                return Ok(*ok);
            }
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
        let ok = api
            .create(&PostParams::default(), &review)
            .await?
            .status
            .is_some_and(|s| s.allowed);
        self.decisions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (Instant::now(), ok));
        Ok(ok)
    }
}
