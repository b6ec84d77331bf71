//! Calls to the engine: an SSO token (`/ovirt-engine/sso/oauth/token`, password grant,
//! scope `ovirt-app-api`) sent as `Authorization: Bearer`, renewed a minute before the
//! `exp` the engine gives and once when a call answers 401; JSON in and out
//! (`Accept: application/json`). The engine answers errors as a fault (`{"reason",
//! "detail"}`), and — when it is down behind its Apache — as an HTML page: anything that
//! is not JSON is Unavailable, never parsed as an empty answer (the oVirt CSI driver's
//! known crash). Deadlines, retries of idempotent requests, metrics per request name and
//! redaction are `overcast_cloud_http`'s.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Method, Uri};
use overcast_cloud::{CloudError, Result};
use overcast_cloud_http::{redact, HttpClient, Request, Response};
use serde_json::Value;

use crate::config::Config;

/// How long before its expiry a token is renewed.
const RENEW_BEFORE: Duration = Duration::from_secs(60);
/// A token whose answer names no expiry is kept this long (the engine's default session
/// lifetime is 30 minutes).
const DEFAULT_LIFETIME: Duration = Duration::from_secs(25 * 60);

struct Token {
    value: String,
    renew_at: Instant,
}

pub struct Engine {
    http: HttpClient,
    /// `https://engine/ovirt-engine/api`, no trailing slash.
    api: String,
    /// `https://engine/ovirt-engine/sso/oauth/token`.
    sso: String,
    username: String,
    password: String,
    token: tokio::sync::Mutex<Option<Token>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("api", &self.api).finish()
    }
}

impl Engine {
    pub fn new(http: HttpClient, config: &Config) -> Result<Self> {
        let api = config.api_url.trim_end_matches('/').to_owned();
        let uri: Uri = api
            .parse()
            .map_err(|e| CloudError::InvalidArgument(format!("zvirt: the API URL {api:?}: {e}")))?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(CloudError::InvalidArgument(format!(
                "zvirt: the API URL {api:?} names no host"
            )));
        };
        Ok(Self {
            http,
            sso: format!("{scheme}://{authority}/ovirt-engine/sso/oauth/token"),
            api,
            username: config.username.clone(),
            password: config.password.clone(),
            token: tokio::sync::Mutex::new(None),
        })
    }

    pub fn http(&self) -> &HttpClient {
        &self.http
    }

    /// The token, asked for when there is none or it is about to expire.
    async fn token(&self, renew: bool) -> Result<String> {
        let mut held = self.token.lock().await;
        if let Some(t) = held
            .as_ref()
            .filter(|t| !renew && Instant::now() < t.renew_at)
        {
            return Ok(t.value.clone());
        }
        let body: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "password")
            .append_pair("scope", "ovirt-app-api")
            .append_pair("username", &self.username)
            .append_pair("password", &self.password)
            .finish();
        let mut req = Request::new(
            "sso_token",
            Method::POST,
            self.sso.parse().map_err(bad_uri)?,
        );
        req.headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        req.headers.insert(
            http::header::ACCEPT,
            HeaderValue::from_static("application/json"),
        );
        req.body = Bytes::from(body);
        let resp = self
            .http
            .send(req)
            .await
            .map_err(|e| html_error("sso_token", e))?;
        let doc = json_of("sso_token", &resp)?;
        if let Some(error) = doc.get("error").and_then(Value::as_str) {
            let code = doc.get("error_code").and_then(Value::as_str).unwrap_or("");
            // The SSO answers a wrong password with 400/401 and `access_denied`.
            return Err(CloudError::Unauthenticated(format!(
                "zvirt: SSO login as {}: {code} {}",
                self.username,
                redact(error)
            )));
        }
        if !resp.status.is_success() {
            return Err(fault("sso_token", &resp, &doc));
        }
        let value = doc
            .get("access_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                CloudError::Unavailable("zvirt: SSO answered without an access_token".into())
            })?
            .to_owned();
        let lifetime = doc
            .get("exp")
            .and_then(number)
            .and_then(|ms| {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
                Duration::from_millis(ms).checked_sub(now)
            })
            .unwrap_or(DEFAULT_LIFETIME);
        let renew_at = Instant::now() + lifetime.saturating_sub(RENEW_BEFORE);
        *held = Some(Token {
            value: value.clone(),
            renew_at,
        });
        Ok(value)
    }

    /// One call to `path` under the API, with a JSON `body`; a 401 renews the token and
    /// is tried once more. Any other status is the caller's to read.
    pub async fn call(
        &self,
        name: &'static str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Response> {
        let uri: Uri = format!("{}{path}", self.api).parse().map_err(bad_uri)?;
        let mut renew = false;
        loop {
            let token = self.token(renew).await?;
            let mut req = Request::new(name, method.clone(), uri.clone());
            let bearer = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                CloudError::Unavailable("zvirt: SSO gave a token no header can carry".into())
            })?;
            req.headers.insert(http::header::AUTHORIZATION, bearer);
            req.headers.insert(
                http::header::ACCEPT,
                HeaderValue::from_static("application/json"),
            );
            if let Some(body) = body {
                req.headers.insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                req.body = Bytes::from(serde_json::to_vec(body).unwrap_or_default());
            }
            let resp = self.http.send(req).await.map_err(|e| html_error(name, e))?;
            if resp.status.as_u16() == 401 && !renew {
                renew = true;
                continue;
            }
            return Ok(resp);
        }
    }

    /// [`Engine::call`] answering the JSON document of a 2xx, or the typed error of
    /// anything else (404 NotFound of `kind` `id`).
    pub async fn json(
        &self,
        name: &'static str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value> {
        let resp = self.call(name, method, path, body).await?;
        if resp.status.is_success() {
            if resp.body.is_empty() {
                return Ok(Value::Null);
            }
            return json_of(name, &resp);
        }
        let doc = json_of(name, &resp).unwrap_or(Value::Null);
        Err(fault(name, &resp, &doc))
    }
}

/// A 502/503/504 the client gave up on carries the answer's body: when that is the
/// proxy's HTML page (the engine is down), it is said so instead of quoting markup.
fn html_error(name: &str, e: CloudError) -> CloudError {
    match e {
        CloudError::Unavailable(msg) if msg.to_ascii_lowercase().contains("<html") => {
            let lower = msg.to_ascii_lowercase();
            let title = lower
                .find("<title>")
                .and_then(|i| {
                    let rest = &msg[i + 7..];
                    rest.find('<').map(|j| rest[..j].trim().to_owned())
                })
                .unwrap_or_default();
            CloudError::Unavailable(format!(
                "zvirt: {name}: the engine answered with an HTML page ({title}) instead of its API (down or restarting?)"
            ))
        }
        other => other,
    }
}

fn bad_uri(e: http::uri::InvalidUri) -> CloudError {
    CloudError::InvalidArgument(format!("zvirt: {e}"))
}

/// The engine's JSON, or Unavailable when the answer is not JSON: the HTML page its proxy
/// serves while the engine is down or restarting.
pub fn json_of(name: &str, resp: &Response) -> Result<Value> {
    let content_type = resp
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let parsed = serde_json::from_slice::<Value>(&resp.body);
    match parsed {
        Ok(v) if !content_type.contains("html") => Ok(v),
        _ => {
            let head: String = String::from_utf8_lossy(&resp.body)
                .chars()
                .filter(|c| !c.is_control())
                .take(120)
                .collect();
            Err(CloudError::Unavailable(format!(
                "zvirt: {name}: the engine answered HTTP {} with {} instead of its API (down or restarting?): {}",
                resp.status.as_u16(),
                if content_type.is_empty() { "no content type" } else { content_type },
                redact(head.trim())
            )))
        }
    }
}

/// The typed error of a fault (`{"reason": "Operation Failed", "detail": "[Cannot …]"}`).
pub fn fault(name: &str, resp: &Response, doc: &Value) -> CloudError {
    let reason = doc.get("reason").and_then(Value::as_str).unwrap_or("");
    let detail = doc.get("detail").and_then(Value::as_str).unwrap_or("");
    let why = redact(format!("{reason} {detail}").trim());
    let msg = format!(
        "zvirt: {name}: HTTP {}: {}",
        resp.status.as_u16(),
        if why.is_empty() {
            "no fault given".into()
        } else {
            why
        }
    );
    // A 409 is the engine's "Cannot … : the disk is locked / VM is being migrated": a
    // state that passes (Conflict, retried).
    overcast_cloud_http::error_for(resp.status.as_u16(), msg)
}

/// The engine writes numbers as strings (`"provisioned_size": "1073741824"`); either
/// form is read.
pub fn number(v: &Value) -> Option<u64> {
    match v {
        Value::String(s) => s.trim().parse().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

/// `"true"`/`true`.
pub fn boolean(v: &Value) -> bool {
    match v {
        Value::String(s) => s.eq_ignore_ascii_case("true"),
        Value::Bool(b) => *b,
        _ => false,
    }
}

/// The members of a collection: `{"disk": [...]}`; the engine answers an empty one as
/// `{}`.
pub fn members<'a>(doc: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    doc.get(key).and_then(Value::as_array).into_iter().flatten()
}

/// Whether `id` can be an engine id (a UUID): anything else is refused before it reaches
/// a URL.
pub fn is_id(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, StatusCode};

    fn resp(status: u16, content_type: &str, body: &str) -> Response {
        let mut headers = HeaderMap::new();
        if !content_type.is_empty() {
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_str(content_type).unwrap(),
            );
        }
        Response {
            status: StatusCode::from_u16(status).unwrap(),
            headers,
            body: Bytes::from(body.to_owned()),
        }
    }

    #[test]
    fn html_or_garbage_is_unavailable_and_faults_map_to_their_kinds() {
        let html = resp(
            503,
            "text/html; charset=iso-8859-1",
            "<!DOCTYPE HTML PUBLIC><html><head><title>503 Service Unavailable</title>",
        );
        let e = json_of("disk_get", &html).unwrap_err();
        assert!(matches!(e, CloudError::Unavailable(_)), "{e:?}");
        assert!(e.to_string().contains("instead of its API"), "{e}");
        // HTML with a 200 is still not the API.
        let e = json_of("disk_get", &resp(200, "text/html", "<html></html>")).unwrap_err();
        assert!(matches!(e, CloudError::Unavailable(_)), "{e:?}");
        let e = json_of("disk_get", &resp(200, "", "")).unwrap_err();
        assert!(matches!(e, CloudError::Unavailable(_)), "{e:?}");
        let doc = serde_json::json!({"reason": "Operation Failed", "detail": "[Cannot remove Virtual Disk. Disk is locked.]"});
        let r = resp(409, "application/json", &doc.to_string());
        let e = fault("disk_remove", &r, &doc);
        assert!(matches!(e, CloudError::Conflict(_)), "{e:?}");
        assert!(e.to_string().contains("Disk is locked"), "{e}");
        for (status, retryable) in [(400, false), (404, false), (500, true), (503, true)] {
            let e = fault("x", &resp(status, "application/json", "{}"), &Value::Null);
            assert_eq!(e.is_retryable(), retryable, "{status}: {e:?}");
        }
    }

    #[test]
    fn numbers_come_as_strings_and_empty_collections_as_nothing() {
        let doc = serde_json::json!({"provisioned_size": "1073741824", "n": 3, "b": "true"});
        assert_eq!(number(&doc["provisioned_size"]), Some(1 << 30));
        assert_eq!(number(&doc["n"]), Some(3));
        assert!(boolean(&doc["b"]));
        assert_eq!(members(&serde_json::json!({}), "disk").count(), 0);
        assert!(is_id("8a3c1c9e-1234-4b6d-9f00-0123456789ab"));
        for bad in ["", "../../etc", "8a3c1c9e-1234-4b6d-9f00-0123456789a/", "x"] {
            assert!(!is_id(bad), "{bad}");
        }
    }
}
