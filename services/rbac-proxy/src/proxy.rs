//! One request: authenticate, authorize the normalized path, forward exactly that path
//! upstream — without the caller's credentials, hop-by-hop headers, or identity headers
//! the caller made up.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri, Version};
use hyper_util::client::legacy::connect::HttpConnector;

use crate::authz::{Authorizer, Decision};
use crate::metrics::{self, CodeLabel, Metrics};
use crate::path;

pub type Body = BoxBody<Bytes, hyper::Error>;
type Upstream = hyper_util::client::legacy::Client<HttpConnector, Incoming>;

pub fn reply(status: StatusCode, text: String) -> Response<Body> {
    let mut resp = Response::new(
        Full::new(Bytes::from(text))
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *resp.status_mut() = status;
    resp
}

pub struct Proxy {
    pub authz: Authorizer,
    pub upstream: Uri,
    pub ignore_paths: Vec<String>,
    pub client: Upstream,
    pub metrics: Arc<Metrics>,
}

/// Headers that belong to one hop, and the caller's credentials: never forwarded.
const HOP_BY_HOP: [&str; 8] = [
    "authorization",
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// Headers an upstream may read as facts the proxy established: a caller must not be
/// able to set them (kube-rbac-proxy's identity headers, and the forwarding chain).
fn spoofable(name: &HeaderName) -> bool {
    let n = name.as_str();
    n.starts_with("x-remote-") || n.starts_with("x-forwarded-") || n == "forwarded"
}

/// The bearer token, whatever the case of the scheme (RFC 7235: it is case-insensitive).
pub fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(hyper::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_owned())
        .filter(|t| !t.is_empty())
}

/// The headers to send upstream: the caller's, less hop-by-hop ones (including every
/// header the caller's `Connection` names), credentials and spoofable identity headers;
/// plus `X-Forwarded-For` with the caller's address.
pub fn upstream_headers(mut headers: HeaderMap, client: IpAddr) -> HeaderMap {
    let named: Vec<HeaderName> = headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    let spoofed: Vec<HeaderName> = headers.keys().filter(|n| spoofable(n)).cloned().collect();
    for name in spoofed {
        headers.remove(name);
    }
    headers.remove(hyper::header::HOST);
    if let Ok(v) = HeaderValue::from_str(&client.to_string()) {
        headers.insert("x-forwarded-for", v);
    }
    headers
}

impl Proxy {
    /// One request, counted by the status it was answered with.
    pub async fn handle(&self, req: Request<Incoming>, client: IpAddr) -> Response<Body> {
        let r = self.answer(req, client).await;
        self.metrics
            .requests
            .get_or_create(&CodeLabel {
                code: r.status().as_u16(),
            })
            .inc();
        r
    }

    async fn answer(&self, req: Request<Incoming>, client: IpAddr) -> Response<Body> {
        let path = match path::normalize(req.uri().path()) {
            Ok(p) => p,
            Err(e) => return reply(StatusCode::BAD_REQUEST, format!("Bad Request: {e}\n")),
        };
        if self.ignore_paths.contains(&path) {
            return self.forward(req, &path, client).await;
        }
        let token = bearer(req.headers());
        match self
            .authz
            .decide(token.as_deref(), req.method().as_str(), &path, client)
            .await
        {
            Ok(Decision::Allowed(user)) => {
                tracing::debug!(%user, %path, "allowed");
                if path == metrics::PATH {
                    let mut r = reply(StatusCode::OK, self.metrics.encode());
                    r.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                    );
                    return r;
                }
                self.forward(req, &path, client).await
            }
            Ok(Decision::Unauthenticated) => {
                let mut r = reply(StatusCode::UNAUTHORIZED, "Unauthorized\n".into());
                r.headers_mut().insert(
                    hyper::header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer"),
                );
                r
            }
            Ok(Decision::Forbidden(why)) => {
                reply(StatusCode::FORBIDDEN, format!("Forbidden: {why}\n"))
            }
            Ok(Decision::TooManyRequests) => {
                let mut r = reply(
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too Many Requests: too many unknown tokens from this address\n".into(),
                );
                r.headers_mut()
                    .insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("1"));
                r
            }
            Err(e) => {
                tracing::warn!(error = %e, "authentication or authorization failed");
                reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Internal Server Error\n".into(),
                )
            }
        }
    }

    /// Sends the request to the upstream at `path` — the normalized path that was
    /// authorized, with the caller's query.
    async fn forward(&self, req: Request<Incoming>, path: &str, client: IpAddr) -> Response<Body> {
        let (mut parts, body) = req.into_parts();
        let query = parts
            .uri
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        let base = self.upstream.to_string();
        let Ok(uri) = format!("{}{path}{query}", base.trim_end_matches('/')).parse::<Uri>() else {
            return reply(StatusCode::BAD_REQUEST, "Bad Request: bad query\n".into());
        };
        parts.uri = uri;
        // Whatever the caller spoke (HTTP/2, HTTP/1.0), the upstream hop is HTTP/1.1.
        parts.version = Version::HTTP_11;
        parts.headers = upstream_headers(std::mem::take(&mut parts.headers), client);
        match self.client.request(Request::from_parts(parts, body)).await {
            Ok(resp) => resp.map(|b| b.boxed()),
            Err(e) => {
                tracing::warn!(error = %e, "upstream failed");
                reply(StatusCode::BAD_GATEWAY, "Bad Gateway\n".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn the_scheme_is_case_insensitive() {
        for v in ["Bearer abc", "bearer abc", "BEARER  abc ", " Bearer abc"] {
            assert_eq!(
                bearer(&headers(&[("authorization", v)])).as_deref(),
                Some("abc"),
                "{v:?}"
            );
        }
        for v in ["Basic abc", "Bearer", "Bearer ", "abc"] {
            assert_eq!(bearer(&headers(&[("authorization", v)])), None, "{v:?}");
        }
    }

    #[test]
    fn hop_by_hop_credentials_and_made_up_identities_stay_behind() {
        let out = upstream_headers(
            headers(&[
                ("authorization", "Bearer secret"),
                ("connection", "keep-alive, X-Secret-Hop"),
                ("x-secret-hop", "1"),
                ("x-remote-user", "system:admin"),
                ("x-remote-group", "system:masters"),
                ("x-remote-extra-scopes", "all"),
                ("x-forwarded-for", "10.9.9.9"),
                ("forwarded", "for=10.9.9.9"),
                ("host", "proxy"),
                ("accept", "text/plain"),
            ]),
            [127, 0, 0, 7].into(),
        );
        let names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(out["accept"], "text/plain");
        assert_eq!(out["x-forwarded-for"], "127.0.0.7");
    }
}
