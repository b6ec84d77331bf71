//! Calls to the OpenStack services: the endpoint from the token's catalog, the token in
//! `X-Auth-Token` (renewed once when a service answers 401), the microversion each service
//! speaks negotiated once from its version document, JSON in and out. Deadlines, retries of
//! idempotent requests, metrics per request name and redaction are `overcast_cloud_http`'s.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Uri};
use overcast_cloud::{CloudError, Result};
use overcast_cloud_http::{HttpClient, Request, Response};
use serde_json::Value;

use crate::keystone::{Keystone, Session};

/// The services the provider speaks to, by the catalog types they go by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Service {
    BlockStorage,
    Compute,
    Network,
    Image,
    LoadBalancer,
}

impl Service {
    /// Catalog types, newest name first (Cinder's `block-storage` was `volumev3`).
    pub fn types(self) -> &'static [&'static str] {
        match self {
            Service::BlockStorage => &["block-storage", "volumev3"],
            Service::Compute => &["compute"],
            Service::Network => &["network"],
            Service::Image => &["image"],
            Service::LoadBalancer => &["load-balancer"],
        }
    }

    /// The name in `OpenStack-API-Version: <name> <x.y>`, for the services with
    /// microversions.
    fn microversion_name(self) -> Option<&'static str> {
        match self {
            Service::BlockStorage => Some("volume"),
            Service::Compute => Some("compute"),
            _ => None,
        }
    }
}

/// A microversion, `major.minor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Microversion(pub u32, pub u32);

impl Microversion {
    pub fn parse(s: &str) -> Option<Self> {
        let (a, b) = s.trim().split_once('.')?;
        Some(Self(a.parse().ok()?, b.parse().ok()?))
    }
}

impl std::fmt::Display for Microversion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

pub struct OpenStack {
    http: HttpClient,
    keystone: Keystone,
    interface: String,
    region: Option<String>,
    /// The highest microversion each service speaks (asked once).
    versions: tokio::sync::Mutex<BTreeMap<Service, Option<Microversion>>>,
}

impl OpenStack {
    pub fn new(
        http: HttpClient,
        keystone: Keystone,
        interface: String,
        region: Option<String>,
    ) -> Self {
        Self {
            http,
            keystone,
            interface,
            region,
            versions: tokio::sync::Mutex::new(BTreeMap::new()),
        }
    }

    pub fn http(&self) -> &HttpClient {
        &self.http
    }

    pub async fn session(&self) -> Result<Arc<Session>> {
        self.keystone.session().await
    }

    /// The service's endpoint, as the catalog gives it for our interface and region.
    pub async fn endpoint(&self, service: Service) -> Result<String> {
        self.session()
            .await?
            .endpoint(service.types(), &self.interface, self.region.as_deref())
    }

    /// The highest microversion `service` speaks (`None`: it has none), from its version
    /// document (the versioned endpoint's root), asked once.
    pub async fn max_microversion(&self, service: Service) -> Result<Option<Microversion>> {
        if let Some(v) = self.versions.lock().await.get(&service) {
            return Ok(*v);
        }
        let endpoint = self.endpoint(service).await?;
        // `http://h:8776/v3/<project>` → `http://h:8776/v3/`; `http://h:8774/v2.1` → itself.
        let root = version_root(&endpoint);
        let resp = self
            .raw(
                service,
                "version_get",
                Method::GET,
                Target::Url(&root),
                None,
                Headers::default(),
            )
            .await?;
        let doc: Value = serde_json::from_slice(&resp.body).unwrap_or(Value::Null);
        let version = doc
            .get("version")
            .or_else(|| doc.get("versions").and_then(|v| v.get(0)))
            .and_then(|v| v.get("version"))
            .and_then(Value::as_str)
            .and_then(Microversion::parse);
        self.versions.lock().await.insert(service, version);
        Ok(version)
    }

    /// `want` when the service speaks it, else FailedPrecondition naming what it has.
    pub async fn require(&self, service: Service, want: Microversion, why: &str) -> Result<()> {
        match self.max_microversion(service).await? {
            Some(have) if have >= want => Ok(()),
            have => Err(CloudError::FailedPrecondition(format!(
                "openstack: {why} needs {:?} API microversion {want}, the cloud has {}",
                service,
                have.map(|v| v.to_string()).unwrap_or_else(|| "none".into())
            ))),
        }
    }

    /// One call: `path` under the service's endpoint, JSON `body`, at `microversion`.
    /// A 401 renews the token and is tried once more; any other status is the caller's
    /// to read.
    pub async fn call(
        &self,
        service: Service,
        name: &'static str,
        method: Method,
        path: &str,
        body: Option<&Value>,
        microversion: Option<Microversion>,
    ) -> Result<Response> {
        self.raw(
            service,
            name,
            method,
            Target::Path(path),
            body,
            Headers {
                microversion,
                revision: None,
            },
        )
        .await
    }

    /// [`OpenStack::call`] whose status must be one of `ok`; any other is the error its
    /// status and body say (`overcast_cloud_http::status_error`).
    pub async fn expect(
        &self,
        service: Service,
        name: &'static str,
        method: Method,
        path: &str,
        body: Option<&Value>,
        ok: &[u16],
    ) -> Result<Response> {
        let resp = self.call(service, name, method, path, body, None).await?;
        if ok.contains(&resp.status.as_u16()) {
            Ok(resp)
        } else {
            Err(overcast_cloud_http::status_error("openstack", name, &resp))
        }
    }

    /// A PUT of `body` that applies only if the object is still at `revision` (Neutron's
    /// `If-Match: revision_number=<n>`): a concurrent writer's change makes it fail with
    /// Conflict (HTTP 412) instead of being undone. Without a revision, a plain PUT.
    pub async fn expect_at_revision(
        &self,
        service: Service,
        name: &'static str,
        path: &str,
        body: &Value,
        revision: Option<u64>,
    ) -> Result<()> {
        let resp = self
            .raw(
                service,
                name,
                Method::PUT,
                Target::Path(path),
                Some(body),
                Headers {
                    microversion: None,
                    revision,
                },
            )
            .await?;
        match resp.status.as_u16() {
            200 => Ok(()),
            412 => Err(CloudError::Conflict(format!(
                "openstack: {name}: changed by another writer since it was read; read again"
            ))),
            _ => Err(overcast_cloud_http::status_error("openstack", name, &resp)),
        }
    }

    async fn raw(
        &self,
        service: Service,
        name: &'static str,
        method: Method,
        target: Target<'_>,
        body: Option<&Value>,
        headers: Headers,
    ) -> Result<Response> {
        let Headers {
            microversion,
            revision,
        } = headers;
        let mut renewed = false;
        loop {
            // One session per attempt gives both the token and the endpoint (a renewed
            // token's catalog is the one used).
            let session = self.session().await?;
            let url = match target {
                Target::Path(path) => format!(
                    "{}{path}",
                    session.endpoint(service.types(), &self.interface, self.region.as_deref())?
                ),
                Target::Url(url) => url.to_owned(),
            };
            let uri: Uri = url.parse().map_err(|e| {
                CloudError::InvalidArgument(format!("openstack: {name}: the URL {url:?}: {e}"))
            })?;
            let mut req = Request::new(name, method.clone(), uri.clone());
            req.headers.insert("x-auth-token", session.token().clone());
            if let Some(r) = revision {
                // Neutron's `revision-if-match`: the write applies only at this revision.
                if let Ok(h) = HeaderValue::from_str(&format!("revision_number={r}")) {
                    req.headers.insert(http::header::IF_MATCH, h);
                }
            }
            req.headers.insert(
                http::header::ACCEPT,
                HeaderValue::from_static("application/json"),
            );
            if let (Some(v), Some(svc)) = (microversion, service.microversion_name()) {
                if let Ok(h) = HeaderValue::from_str(&format!("{svc} {v}")) {
                    req.headers.insert("openstack-api-version", h);
                }
            }
            if let Some(b) = body {
                req.headers.insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                req.body = Bytes::from(b.to_string());
            }
            let resp = self.http.send(req).await?;
            if resp.status.as_u16() == 401 && !renewed {
                // Revoked or expired early: one new token, one more try.
                self.keystone.invalidate(&session).await;
                renewed = true;
                continue;
            }
            return Ok(resp);
        }
    }
}

/// The optional headers of a call: the service's microversion, and Neutron's revision
/// guard (`If-Match: revision_number=<n>`).
#[derive(Clone, Copy, Default)]
struct Headers {
    microversion: Option<Microversion>,
    revision: Option<u64>,
}

/// Where a call goes: a path under the service's endpoint, or a whole URL.
#[derive(Clone, Copy)]
enum Target<'a> {
    Path(&'a str),
    Url(&'a str),
}

/// The root of a versioned endpoint: its version document's URL.
fn version_root(endpoint: &str) -> String {
    let mut parts: Vec<&str> = endpoint.split('/').collect();
    // After `scheme:` and the empty part, the host; the first path segment is the version.
    if let Some(pos) = parts
        .iter()
        .skip(3)
        .position(|p| p.starts_with('v') && p[1..].starts_with(|c: char| c.is_ascii_digit()))
    {
        parts.truncate(3 + pos + 1);
    }
    format!("{}/", parts.join("/"))
}

/// Reads a JSON answer of the expected type.
pub fn json<T: serde::de::DeserializeOwned>(name: &str, resp: &Response) -> Result<T> {
    serde_json::from_slice(&resp.body).map_err(|e| {
        CloudError::Unavailable(format!("openstack: {name}: an answer we cannot read: {e}"))
    })
}

/// The value under `key` of a JSON answer (`{"listeners": [...]}`, `{"floatingip": {...}}`),
/// read as `T`; an answer without it is one we cannot use.
pub fn json_at<T: serde::de::DeserializeOwned>(
    name: &str,
    resp: &Response,
    key: &str,
) -> Result<T> {
    let mut doc: Value = json(name, resp)?;
    let item = doc.get_mut(key).map(Value::take).ok_or_else(|| {
        CloudError::Unavailable(format!("openstack: {name}: the answer has no {key:?}"))
    })?;
    serde_json::from_value(item).map_err(|e| {
        CloudError::Unavailable(format!("openstack: {name}: an answer we cannot read: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_documents_are_at_the_versioned_root() {
        assert_eq!(
            version_root("http://127.0.0.1:8776/v3/0123abcd"),
            "http://127.0.0.1:8776/v3/"
        );
        assert_eq!(
            version_root("http://127.0.0.1:8774/v2.1"),
            "http://127.0.0.1:8774/v2.1/"
        );
        assert_eq!(
            version_root("https://cloud/compute/v2.1/p"),
            "https://cloud/compute/v2.1/"
        );
    }

    #[test]
    fn microversions_compare_as_numbers() {
        assert!(Microversion::parse("3.42").unwrap() > Microversion::parse("3.9").unwrap());
        assert_eq!(Microversion::parse("2.60"), Some(Microversion(2, 60)));
        assert_eq!(Microversion::parse("v3"), None);
    }
}
