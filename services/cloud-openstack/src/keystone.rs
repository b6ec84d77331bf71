//! Keystone v3: a token for the configured user (password, scoped to the project) or
//! application credential, cached and renewed before it expires — and once more when an
//! endpoint answers 401 — and the endpoints of the services from the token's catalog, by
//! service type, interface and region.
//!
//! The token is a secret: it travels only in the `X-Auth-Token` header (marked
//! sensitive), never in a log or an error; the password and the credential's secret
//! likewise.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Uri};
use jiff::Timestamp;
use overcast_cloud::{CloudError, Result};
use overcast_cloud_http::{status_error, HttpClient, Request};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::config::{Auth, Credential, Domain, Named};

/// A token is renewed when it has less than this left, so no call starts with one about
/// to expire (a long wait for a volume could outlive it otherwise).
const RENEW_BEFORE: Duration = Duration::from_secs(300);

/// One authenticated session: the token and what it was issued with.
pub struct Session {
    token: HeaderValue,
    pub expires_at: Timestamp,
    pub project_id: Option<String>,
    catalog: Vec<CatalogEntry>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .field("project_id", &self.project_id)
            .finish()
    }
}

impl Session {
    /// The `X-Auth-Token` header value (sensitive: never printed).
    pub fn token(&self) -> &HeaderValue {
        &self.token
    }

    /// The URL of the first of `types` the catalog has, at `interface` in `region` (any
    /// region when none is configured and the service has one), without a trailing `/`.
    pub fn endpoint(
        &self,
        types: &[&str],
        interface: &str,
        region: Option<&str>,
    ) -> Result<String> {
        for t in types {
            let Some(service) = self.catalog.iter().find(|s| s.kind == *t) else {
                continue;
            };
            let found = service.endpoints.iter().find(|e| {
                e.interface == interface
                    && region.is_none_or(|r| {
                        e.region_id.as_deref() == Some(r) || e.region.as_deref() == Some(r)
                    })
            });
            if let Some(e) = found {
                return Ok(e.url.trim_end_matches('/').to_owned());
            }
        }
        Err(CloudError::FailedPrecondition(format!(
            "openstack: the catalog has no {interface} endpoint of {}{}",
            types.join(" or "),
            region
                .map(|r| format!(" in region {r}"))
                .unwrap_or_default()
        )))
    }

    /// The service types the catalog lists.
    pub fn services(&self) -> Vec<String> {
        self.catalog.iter().map(|s| s.kind.clone()).collect()
    }
}

#[derive(Debug, Deserialize)]
struct CatalogEntry {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    endpoints: Vec<Endpoint>,
}

#[derive(Debug, Deserialize)]
struct Endpoint {
    interface: String,
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    region_id: Option<String>,
    url: String,
}

#[derive(Debug, Deserialize)]
struct TokenBody {
    token: TokenInfo,
}

#[derive(Debug, Deserialize)]
struct TokenInfo {
    expires_at: String,
    #[serde(default)]
    catalog: Vec<CatalogEntry>,
    #[serde(default)]
    project: Option<IdOnly>,
}

#[derive(Debug, Deserialize)]
struct IdOnly {
    id: String,
}

pub struct Keystone {
    http: HttpClient,
    tokens_url: Uri,
    auth: Auth,
    current: tokio::sync::Mutex<Option<Arc<Session>>>,
}

impl Keystone {
    pub fn new(http: HttpClient, auth_url: &str, auth: Auth) -> Result<Self> {
        Ok(Self {
            http,
            tokens_url: tokens_url(auth_url)?,
            auth,
            current: tokio::sync::Mutex::new(None),
        })
    }

    /// A session with at least [`RENEW_BEFORE`] left; one token request at a time, so
    /// concurrent calls share one renewal.
    pub async fn session(&self) -> Result<Arc<Session>> {
        let mut current = self.current.lock().await;
        if let Some(s) = current.as_ref() {
            let left = s.expires_at.duration_since(Timestamp::now());
            if left.is_positive() && left.unsigned_abs() > RENEW_BEFORE {
                return Ok(Arc::clone(s));
            }
        }
        let fresh = Arc::new(self.issue().await?);
        *current = Some(Arc::clone(&fresh));
        Ok(fresh)
    }

    /// Forgets `stale` (an endpoint answered 401 to it), so the next session is a new
    /// token; a session another caller has already renewed is kept.
    pub async fn invalidate(&self, stale: &Session) {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|s| s.token == stale.token) {
            *current = None;
        }
    }

    async fn issue(&self) -> Result<Session> {
        let mut req = Request::new(
            "identity_token_create",
            Method::POST,
            self.tokens_url.clone(),
        );
        req.headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        req.body = Bytes::from(token_request(&self.auth).to_string());
        let resp = self.http.send(req).await?;
        if resp.status.as_u16() != 201 {
            return Err(
                match status_error("openstack", "identity_token_create", &resp) {
                    // Keystone's 401 is the credentials: no retry makes them right.
                    CloudError::Unauthenticated(m) => CloudError::Unauthenticated(format!(
                        "{m} (check the user, password or application credential in cloud.conf)"
                    )),
                    e => e,
                },
            );
        }
        let mut token = resp
            .headers
            .get("x-subject-token")
            .cloned()
            .ok_or_else(|| {
                CloudError::Unavailable("openstack: Keystone issued no X-Subject-Token".into())
            })?;
        token.set_sensitive(true);
        let body: TokenBody = serde_json::from_slice(&resp.body).map_err(|e| {
            CloudError::Unavailable(format!("openstack: Keystone's token answer: {e}"))
        })?;
        let expires_at: Timestamp = body.token.expires_at.parse().map_err(|e| {
            CloudError::Unavailable(format!(
                "openstack: Keystone's token expiry {:?}: {e}",
                body.token.expires_at
            ))
        })?;
        Ok(Session {
            token,
            expires_at,
            project_id: body.token.project.map(|p| p.id),
            catalog: body.token.catalog,
        })
    }
}

/// `<auth-url>/auth/tokens`, the URL given with or without its `/v3`.
fn tokens_url(auth_url: &str) -> Result<Uri> {
    let base = auth_url.trim_end_matches('/');
    let url = if base.ends_with("/v3") {
        format!("{base}/auth/tokens")
    } else {
        format!("{base}/v3/auth/tokens")
    };
    url.parse()
        .map_err(|e| CloudError::InvalidArgument(format!("openstack: auth-url {auth_url:?}: {e}")))
}

fn domain(d: &Domain) -> Value {
    match d {
        Domain::Id(id) => json!({"id": id}),
        Domain::Name(name) => json!({"name": name}),
    }
}

fn named(n: &Named) -> Value {
    match n {
        Named::Id(id) => json!({"id": id}),
        Named::Name { name, domain: d } => json!({"name": name, "domain": domain(d)}),
    }
}

/// The body of `POST /v3/auth/tokens` for `auth`: password scoped to the project, or an
/// application credential (scoped by itself).
pub fn token_request(auth: &Auth) -> Value {
    match auth {
        Auth::Password {
            user,
            password,
            project,
        } => {
            let mut user = named(user);
            user["password"] = json!(password);
            json!({"auth": {
                "identity": {"methods": ["password"], "password": {"user": user}},
                "scope": {"project": named(project)},
            }})
        }
        Auth::ApplicationCredential { credential, secret } => {
            let mut c = match credential {
                Credential::Id(id) => json!({"id": id}),
                Credential::Name { name, user } => json!({"name": name, "user": named(user)}),
            };
            c["secret"] = json!(secret);
            json!({"auth": {"identity": {
                "methods": ["application_credential"],
                "application_credential": c,
            }}})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_requests_are_keystone_v3_s() {
        let password = Auth::Password {
            user: Named::Name {
                name: "k8s".into(),
                domain: Domain::Name("Default".into()),
            },
            password: "pw".into(),
            project: Named::Id("p1".into()),
        };
        assert_eq!(
            token_request(&password),
            json!({"auth": {
                "identity": {"methods": ["password"], "password": {"user":
                    {"name": "k8s", "domain": {"name": "Default"}, "password": "pw"}}},
                "scope": {"project": {"id": "p1"}},
            }})
        );
        let named_credential = Auth::ApplicationCredential {
            credential: Credential::Name {
                name: "ccm".into(),
                user: Named::Id("u1".into()),
            },
            secret: "s".into(),
        };
        assert_eq!(
            token_request(&named_credential),
            json!({"auth": {"identity": {"methods": ["application_credential"],
                "application_credential": {"name": "ccm", "user": {"id": "u1"}, "secret": "s"}}}})
        );
    }

    #[test]
    fn the_tokens_url_takes_auth_url_with_or_without_its_version() {
        for url in [
            "https://k:5000/v3",
            "https://k:5000/v3/",
            "https://k:5000",
            "https://k:5000/",
        ] {
            assert_eq!(
                tokens_url(url).unwrap().to_string(),
                "https://k:5000/v3/auth/tokens"
            );
        }
        assert_eq!(
            tokens_url("https://cloud/identity/v3").unwrap().to_string(),
            "https://cloud/identity/v3/auth/tokens"
        );
    }

    #[test]
    fn endpoints_are_chosen_by_type_interface_and_region() {
        let session = Session {
            token: HeaderValue::from_static("t"),
            expires_at: Timestamp::now(),
            project_id: None,
            catalog: serde_json::from_value(json!([
                {"type": "volumev3", "endpoints": [
                    {"interface": "public", "region_id": "R1", "url": "http://c1/v3/p/"},
                    {"interface": "internal", "region_id": "R1", "url": "http://c1-int/v3/p"},
                    {"interface": "public", "region_id": "R2", "url": "http://c2/v3/p"}]},
                {"type": "compute", "endpoints": [
                    {"interface": "public", "region": "R1", "url": "http://n1/v2.1"}]},
            ]))
            .unwrap(),
        };
        let cinder = ["block-storage", "volumev3"];
        assert_eq!(
            session.endpoint(&cinder, "public", Some("R2")).unwrap(),
            "http://c2/v3/p"
        );
        assert_eq!(
            session.endpoint(&cinder, "internal", None).unwrap(),
            "http://c1-int/v3/p"
        );
        assert_eq!(
            session
                .endpoint(&["compute"], "public", Some("R1"))
                .unwrap(),
            "http://n1/v2.1"
        );
        let e = session
            .endpoint(&["network"], "public", Some("R1"))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("no public endpoint of network in region R1"),
            "{e}"
        );
        assert!(!format!("{session:?}").contains("\"t\""));
    }
}
