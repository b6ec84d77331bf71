//! vSphere tags over vCenter's REST API (`/rest/com/vmware/cis/tagging/…`): its own
//! session (`POST /rest/com/vmware/cis/session` with basic auth, then the
//! `vmware-api-session-id` header; a 401 logs in again once), the tags attached to many
//! objects in one call (`list-attached-tags-on-objects`), and each tag's name and
//! category read once and kept (tags are renamed rarely; a new tag is read when seen).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode};
use overcast_cloud::CloudError;
use overcast_cloud_http::{status_error, Request, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use crate::session::Vcenter;
use crate::soap::Moref;

const SESSION_HEADER: &str = "vmware-api-session-id";

/// A tag's name and its category's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    pub name: String,
    pub category: String,
}

/// The name of the tag in `category` nearest the start of `chain` (an object and its
/// ancestors, nearest first), as upstream finds a zone; empty when none has one or
/// there is no category.
pub fn nearest(
    chain: &[Moref],
    attached: &BTreeMap<Moref, Vec<Tag>>,
    category: Option<&str>,
) -> String {
    let Some(category) = category else {
        return String::new();
    };
    chain
        .iter()
        .find_map(|m| {
            attached
                .get(m)?
                .iter()
                .find(|t| t.category == category)
                .map(|t| t.name.clone())
        })
        .unwrap_or_default()
}

pub struct Tags {
    vc: Arc<Vcenter>,
    session: Mutex<Option<String>>,
    tags: Mutex<HashMap<String, Value>>,
    categories: Mutex<HashMap<String, Value>>,
}

#[derive(Deserialize)]
struct Attached {
    object_id: ObjectId,
    /// `null` for an object without tags (Go's nil slice).
    #[serde(default)]
    tag_ids: Option<Vec<String>>,
}

#[derive(Deserialize, serde::Serialize)]
struct ObjectId {
    #[serde(rename = "type")]
    kind: String,
    id: String,
}

impl Tags {
    pub fn new(vc: Arc<Vcenter>) -> Self {
        Self {
            vc,
            session: Mutex::new(None),
            tags: Mutex::new(HashMap::new()),
            categories: Mutex::new(HashMap::new()),
        }
    }

    /// The tags attached to each of `objects` (objects without tags are absent).
    pub async fn attached(
        &self,
        objects: &[Moref],
    ) -> Result<BTreeMap<Moref, Vec<Tag>>, CloudError> {
        if objects.is_empty() {
            return Ok(BTreeMap::new());
        }
        let ids: Vec<ObjectId> = objects
            .iter()
            .map(|m| ObjectId {
                kind: m.kind.clone(),
                id: m.id.clone(),
            })
            .collect();
        let v = self
            .call(
                "tag_list_attached",
                Method::POST,
                "/com/vmware/cis/tagging/tag-association?~action=list-attached-tags-on-objects",
                Some(json!({ "object_ids": ids })),
                true,
            )
            .await?;
        // `value` is absent or null when no object has a tag.
        let value = match &v["value"] {
            Value::Null => Value::Array(Vec::new()),
            other => other.clone(),
        };
        let attached: Vec<Attached> = serde_json::from_value(value).map_err(|e| {
            CloudError::Unavailable(format!("vsphere: {}: attached tags: {e}", self.vc.server()))
        })?;
        let mut out = BTreeMap::new();
        for a in attached {
            let mut tags = Vec::new();
            for id in a.tag_ids.iter().flatten() {
                tags.push(self.tag(id).await?);
            }
            if !tags.is_empty() {
                out.insert(Moref::new(&a.object_id.kind, &a.object_id.id), tags);
            }
        }
        Ok(out)
    }

    async fn tag(&self, id: &str) -> Result<Tag, CloudError> {
        let tag = self.named(&self.tags, "tag_get", "tag", id).await?;
        let category_id = tag["category_id"].as_str().unwrap_or_default();
        let category = self
            .named(
                &self.categories,
                "tag_category_get",
                "category",
                category_id,
            )
            .await?;
        Ok(Tag {
            name: tag["name"].as_str().unwrap_or_default().to_owned(),
            category: category["name"].as_str().unwrap_or_default().to_owned(),
        })
    }

    /// A tag's or category's description (`/com/vmware/cis/tagging/<kind>/id:<id>`),
    /// read once and kept in `cache`.
    async fn named(
        &self,
        cache: &Mutex<HashMap<String, Value>>,
        name: &'static str,
        kind: &str,
        id: &str,
    ) -> Result<Value, CloudError> {
        if let Some(v) = cache.lock().await.get(id) {
            return Ok(v.clone());
        }
        let v = self
            .get(
                name,
                format!("/com/vmware/cis/tagging/{kind}/id:{}", path(id)),
            )
            .await?["value"]
            .take();
        cache.lock().await.insert(id.to_owned(), v.clone());
        Ok(v)
    }

    async fn get(&self, name: &'static str, rest_path: String) -> Result<Value, CloudError> {
        self.call(name, Method::GET, &rest_path, None, true).await
    }

    /// One REST call, logged in; a 401 logs in again once.
    async fn call(
        &self,
        name: &'static str,
        method: Method,
        rest_path: &str,
        body: Option<Value>,
        reads_only: bool,
    ) -> Result<Value, CloudError> {
        let attempt = async |session: &str| {
            self.send(name, &method, rest_path, body.as_ref(), reads_only, session)
                .await
        };
        let session = self.logged_in(None).await?;
        let mut resp = attempt(&session).await?;
        if resp.status == StatusCode::UNAUTHORIZED {
            let session = self.logged_in(Some(&session)).await?;
            resp = attempt(&session).await?;
        }
        if !resp.status.is_success() {
            return Err(status_error("vsphere", name, &resp));
        }
        serde_json::from_slice(&resp.body).map_err(|e| {
            CloudError::Unavailable(format!(
                "vsphere: {name} at {}: not JSON ({e})",
                self.vc.server()
            ))
        })
    }

    async fn send(
        &self,
        name: &'static str,
        method: &Method,
        rest_path: &str,
        body: Option<&Value>,
        reads_only: bool,
        session: &str,
    ) -> Result<Response, CloudError> {
        let (http, base) = self.vc.rest_parts();
        let uri = format!("{base}/rest{rest_path}")
            .parse()
            .map_err(|e| CloudError::InvalidArgument(format!("vsphere: {rest_path}: {e}")))?;
        let mut req = Request::new(name, method.clone(), uri);
        req.reads_only = reads_only;
        if let Some(b) = body {
            req.body = Bytes::from(b.to_string());
            req.headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        let mut v = HeaderValue::from_str(session)
            .map_err(|_| CloudError::Internal("vsphere: an unprintable REST session".into()))?;
        v.set_sensitive(true);
        req.headers.insert(SESSION_HEADER, v);
        http.send(req).await
    }

    /// The REST session, made when there is none or when `failed` is the current one.
    async fn logged_in(&self, failed: Option<&str>) -> Result<String, CloudError> {
        let mut s = self.session.lock().await;
        if let Some(id) = s.as_deref() {
            if failed != Some(id) {
                return Ok(id.to_owned());
            }
        }
        let (http, base) = self.vc.rest_parts();
        let credential = self.vc.credential().await?;
        let (user, password) = (&credential.user, &credential.password);
        let uri = format!("{base}/rest/com/vmware/cis/session")
            .parse()
            .map_err(|e| CloudError::InvalidArgument(format!("vsphere: {base}: {e}")))?;
        let mut req = Request::new("rest_login", Method::POST, uri);
        let basic = base64_encode(format!("{user}:{password}").as_bytes());
        let mut auth = HeaderValue::from_str(&format!("Basic {basic}")).map_err(|_| {
            CloudError::InvalidArgument("vsphere: an unprintable user or password".into())
        })?;
        auth.set_sensitive(true);
        req.headers.insert(http::header::AUTHORIZATION, auth);
        let resp = http.send(req).await?;
        if resp.status == StatusCode::UNAUTHORIZED {
            return Err(CloudError::Unauthenticated(format!(
                "vsphere: {}: the REST API refused the login of {user:?}",
                self.vc.server()
            )));
        }
        if !resp.status.is_success() {
            return Err(status_error("vsphere", "rest_login", &resp));
        }
        let v: Value = serde_json::from_slice(&resp.body).map_err(|e| {
            CloudError::Unavailable(format!(
                "vsphere: REST login at {}: not JSON ({e})",
                self.vc.server()
            ))
        })?;
        let id = v["value"]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                CloudError::Unavailable(format!(
                    "vsphere: REST login at {}: no session id",
                    self.vc.server()
                ))
            })?;
        *s = Some(id.to_owned());
        Ok(id.to_owned())
    }
}

/// A tag or category id inside a path (`urn:vmomi:…:GLOBAL`: colons are fine, anything
/// else outside the unreserved set is escaped).
fn path(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~:".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
