//! The client plumbing every HTTP cloud shares (OpenStack, zVirt, vSphere), chosen once so
//! four providers don't each invent it:
//!
//! - **TLS** with rustls: the system's roots, or the cloud's own CA bundle (PEM), or — when
//!   the operator says `insecure` — no verification, as upstream's `insecure` flags do.
//! - **Deadlines**: every attempt has a timeout and the whole call (retries included) a
//!   deadline; running out is [`CloudError::DeadlineExceeded`].
//! - **Retries** with the suite's one policy (`overcast_runtime::backoff::Retry`, jittered
//!   exponential): a connection failure, 429, 502, 503 or 504 is tried again — for
//!   idempotent requests only, so a POST that may have happened is never repeated blind.
//! - **Metrics per request name**, with the names the upstream controllers export
//!   (`openstack_api_request_duration_seconds{request}`, `…_requests_total`,
//!   `…_request_errors_total`, the prefix being the cloud's).
//! - **Redaction**: header values are never in an error or a log; bodies quoted in errors
//!   are cut short and have their credential fields and URL passwords masked ([`redact`]).
//!
//! A provider gets responses from [`HttpClient::send`] (a 404 on detach is success to
//! it) and maps the ones it did not expect with [`status_error`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use overcast_cloud::CloudError;
use overcast_runtime::backoff::Retry;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

mod health;
mod redact;
mod tls;

pub use redact::redact;

/// How a cloud's client behaves.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// The cloud's name, for errors.
    pub cloud: &'static str,
    /// PEM bundle of the CA(s) the cloud's endpoints are signed by, instead of the
    /// system's roots.
    pub ca_pem: Option<String>,
    /// Skip certificate verification (the operator's explicit choice).
    pub insecure: bool,
    /// The SHA-1 thumbprint of the one certificate admitted where the roots do not know
    /// it (vSphere's `thumbprint`, as govmomi honours it).
    pub thumbprint: Option<String>,
    /// One attempt's limit.
    pub attempt_timeout: Duration,
    /// The whole call's limit, retries included.
    pub deadline: Duration,
    /// At most this many attempts of an idempotent request.
    pub attempts: u32,
    /// The first retry's delay (doubling, jittered, up to 10 s).
    pub retry_delay: Duration,
    /// The largest answer read; a bigger one (a broken or hostile endpoint) is refused
    /// instead of filling memory.
    pub max_body: usize,
    /// How long an attempt waits for an answer before the endpoint is said not to answer
    /// (it goes on waiting up to `attempt_timeout`).
    pub slow_after: Duration,
}

impl HttpSettings {
    pub fn new(cloud: &'static str) -> Self {
        Self {
            cloud,
            ca_pem: None,
            insecure: false,
            thumbprint: None,
            attempt_timeout: Duration::from_secs(30),
            deadline: Duration::from_secs(120),
            attempts: 4,
            retry_delay: Duration::from_millis(500),
            max_body: 32 << 20,
            slow_after: health::SLOW,
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabel {
    request: String,
}

/// Per-request-name metrics, registered under the cloud's prefix.
#[derive(Debug)]
pub struct ApiMetrics {
    duration: Family<RequestLabel, Histogram>,
    requests: Family<RequestLabel, Counter>,
    errors: Family<RequestLabel, Counter>,
    /// Body bytes sent and received, by request: what an operation moves, read from the
    /// binary as a user reads it (the scale benchmarks divide it by the passes).
    body_bytes: Family<RequestLabel, Counter>,
    /// Every request under any name (benchmarks count calls per operation).
    total: std::sync::atomic::AtomicU64,
    /// Bytes sent and received in request and answer bodies (benchmarks: what an
    /// operation moves).
    bytes: std::sync::atomic::AtomicU64,
    /// Whether each endpoint answers, and when it last did.
    endpoints: health::Endpoints,
}

impl ApiMetrics {
    /// `<prefix>_api_request_duration_seconds{request}`, `<prefix>_api_requests_total`,
    /// `<prefix>_api_request_errors_total` (OCCM's names with prefix `openstack`).
    pub fn register(registry: &mut Registry, prefix: &str) -> Arc<Self> {
        let m = Self::unregistered();
        registry.register(
            format!("{prefix}_api_request_duration_seconds"),
            "Time an API request took, by request",
            m.duration.clone(),
        );
        registry.register(
            format!("{prefix}_api_requests"),
            "API requests made, by request",
            m.requests.clone(),
        );
        registry.register(
            format!("{prefix}_api_request_errors"),
            "API requests that failed, by request",
            m.errors.clone(),
        );
        registry.register(
            format!("{prefix}_api_body_bytes"),
            "Bytes of request and answer bodies, by request",
            m.body_bytes.clone(),
        );
        registry.register(
            format!("{prefix}_api_last_success_timestamp_seconds"),
            "When each endpoint of the cloud last answered (Unix time)",
            m.endpoints.last_success.clone(),
        );
        Arc::new(m)
    }

    /// Metrics no registry exports (tests, benchmarks).
    pub fn unregistered() -> Self {
        Self {
            total: std::sync::atomic::AtomicU64::new(0),
            bytes: std::sync::atomic::AtomicU64::new(0),
            duration: Family::new_with_constructor(|| {
                Histogram::new([0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0])
            }),
            requests: Family::default(),
            errors: Family::default(),
            body_bytes: Family::default(),
            endpoints: health::Endpoints::default(),
        }
    }

    /// Records one request made by another client (a cloud spoken to through kube's
    /// client, as DVP's parent cluster): same names, same metrics.
    pub fn observe(&self, name: &str, took: Duration, ok: bool) {
        let label = RequestLabel {
            request: name.to_owned(),
        };
        self.count(&label);
        self.duration
            .get_or_create(&label)
            .observe(took.as_secs_f64());
        if !ok {
            self.errors.get_or_create(&label).inc();
        }
    }

    /// For a cloud spoken to through another client (DVP's parent cluster through kube's):
    /// `endpoint` answered — the gauge advances, and a silence before is said to be over.
    pub fn endpoint_answered(&self, cloud: &str, endpoint: &str) {
        self.endpoints.answered(cloud, endpoint);
    }

    /// For a cloud spoken to through another client: `endpoint` has not answered
    /// `request` (`why`: the error, or how long it has waited) — said at most once per
    /// [`health::WARN_EVERY`] an endpoint.
    pub fn endpoint_unanswered(
        &self,
        cloud: &str,
        endpoint: &str,
        request: &str,
        why: &str,
        asked: Instant,
    ) {
        self.endpoints
            .unanswered(cloud, endpoint, request, why, asked);
    }

    /// Counts, as an error, a request whose answer came back (and was counted) but says
    /// it failed at the cloud's level: a SOAP fault in an HTTP 500.
    pub fn answered_with_error(&self, name: &str) {
        self.errors
            .get_or_create(&RequestLabel {
                request: name.to_owned(),
            })
            .inc();
    }

    fn count(&self, label: &RequestLabel) {
        self.requests.get_or_create(label).inc();
        self.total
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Body bytes sent and received so far, over every request.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Requests made under any name so far.
    pub fn total(&self) -> u64 {
        self.total.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Requests made under `name` so far (benchmarks count API calls per operation).
    pub fn requests(&self, name: &str) -> u64 {
        self.requests
            .get_or_create(&RequestLabel {
                request: name.to_owned(),
            })
            .get()
    }

    /// How many times an endpoint was said not to answer (warnings logged).
    pub fn endpoint_warnings(&self) -> u64 {
        self.endpoints.warnings()
    }

    /// How long `endpoint` has not answered, as its warnings say (`failing_for`); `None`
    /// while it answers.
    pub fn endpoint_silent_for(&self, endpoint: &str) -> Option<Duration> {
        self.endpoints.silent_for(endpoint)
    }

    /// When `endpoint` (`host:port`) last answered, as the gauge says (Unix seconds; 0:
    /// never).
    pub fn last_success(&self, endpoint: &str) -> f64 {
        self.endpoints
            .last_success
            .get_or_create(&health::EndpointLabel {
                endpoint: endpoint.to_owned(),
            })
            .get()
    }

    pub fn errors(&self, name: &str) -> u64 {
        self.errors
            .get_or_create(&RequestLabel {
                request: name.to_owned(),
            })
            .get()
    }
}

/// One request: what, where, and its name for metrics (`volume_create`).
#[derive(Debug, Clone)]
pub struct Request {
    pub name: &'static str,
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// A POST that only reads (SOAP's `RetrievePropertiesEx`, CNS's query): safe to
    /// send again, as a GET is.
    pub reads_only: bool,
}

impl Request {
    pub fn new(name: &'static str, method: Method, uri: Uri) -> Self {
        Self {
            name,
            method,
            uri,
            headers: HeaderMap::new(),
            body: Bytes::new(),
            reads_only: false,
        }
    }

    /// GET, HEAD, PUT, DELETE, OPTIONS (RFC 9110 §9.2.2), or a request marked
    /// [`Request::reads_only`]: safe to send again.
    pub fn idempotent(&self) -> bool {
        self.reads_only
            || matches!(
                self.method,
                Method::GET | Method::HEAD | Method::PUT | Method::DELETE | Method::OPTIONS
            )
    }
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Clone)]
pub struct HttpClient {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    settings: HttpSettings,
    metrics: Arc<ApiMetrics>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("cloud", &self.settings.cloud)
            .finish()
    }
}

/// A status worth another attempt (the request may not have been acted on, or the
/// server asks for patience).
fn retry_status(s: StatusCode) -> bool {
    matches!(s.as_u16(), 429 | 502 | 503 | 504)
}

/// A 2xx whose body is an HTML page: no cloud API this client speaks (JSON, XML, SOAP)
/// answers one, but a maintenance page or a proxy's login page in front of it does —
/// the endpoint has not answered, and the call is retried as a 503 is. By the body, not
/// the type: OpenStack's services answer an empty 202 typed `text/html` (WebOb's default).
fn is_html_page(resp: &Response) -> bool {
    if !resp.status.is_success() {
        return false;
    }
    let start: Vec<u8> = resp
        .body
        .iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .take(15)
        .map(u8::to_ascii_lowercase)
        .collect();
    start.starts_with(b"<!doctype html") || start.starts_with(b"<html")
}

impl HttpClient {
    pub fn new(
        settings: HttpSettings,
        metrics: Option<Arc<ApiMetrics>>,
    ) -> Result<Self, CloudError> {
        let tls = tls::client_config(
            settings.ca_pem.as_deref(),
            settings.insecure,
            settings.thumbprint.as_deref(),
        )
        .map_err(|e| CloudError::InvalidArgument(format!("{}: TLS: {e}", settings.cloud)))?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(settings.attempt_timeout));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            settings,
            metrics: metrics.unwrap_or_else(|| Arc::new(ApiMetrics::unregistered())),
        })
    }

    pub fn metrics(&self) -> &Arc<ApiMetrics> {
        &self.metrics
    }

    /// Sends `req`, retrying what may be retried, within the deadline. Any status but
    /// 429/502/503/504 comes back as a [`Response`] for the provider to read (a 404 on
    /// detach is its success); the transport's failures, running out of time, and a
    /// 429/502/503/504 that outlasted the retries (or came to a POST) are errors.
    pub async fn send(&self, req: Request) -> Result<Response, CloudError> {
        let started = Instant::now();
        let mut retry = Retry::new(self.settings.retry_delay, Duration::from_secs(10));
        let label = RequestLabel {
            request: req.name.to_owned(),
        };
        let endpoint = req
            .uri
            .authority()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let cloud = self.settings.cloud;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let left = self.settings.deadline.saturating_sub(started.elapsed());
            let limit = self.settings.attempt_timeout.min(left);
            self.metrics.count(&label);
            let one = Instant::now();
            // An attempt still unanswered after a while is said while it goes on waiting.
            let pending = self.attempt(&req);
            tokio::pin!(pending);
            let slow = self.settings.slow_after.min(limit);
            let result = match tokio::time::timeout(slow, pending.as_mut()).await {
                Ok(r) => Ok(r),
                Err(_) if slow < limit => {
                    self.metrics.endpoints.unanswered(
                        cloud,
                        &endpoint,
                        req.name,
                        &format!("no answer after {slow:?}; waiting up to {limit:?}"),
                        one,
                    );
                    tokio::time::timeout(limit - slow, pending.as_mut()).await
                }
                Err(e) => Err(e),
            };
            let moved = req.body.len()
                + match &result {
                    Ok(Ok(resp)) => resp.body.len(),
                    _ => 0,
                };
            self.metrics
                .bytes
                .fetch_add(moved as u64, std::sync::atomic::Ordering::Relaxed);
            self.metrics
                .body_bytes
                .get_or_create(&label)
                .inc_by(moved as u64);
            self.metrics
                .duration
                .get_or_create(&label)
                .observe(one.elapsed().as_secs_f64());
            let e = match result {
                Ok(Ok(resp)) if is_html_page(&resp) => CloudError::Unavailable(format!(
                    "{}: {}: HTTP {} with an HTML page, not the API's answer (a maintenance \
                     page, or a proxy's)",
                    self.settings.cloud,
                    req.name,
                    resp.status.as_u16()
                )),
                Ok(Ok(resp)) if !retry_status(resp.status) => {
                    self.metrics.endpoints.answered(cloud, &endpoint);
                    return Ok(resp);
                }
                Ok(Ok(resp)) => status_error(self.settings.cloud, req.name, &resp),
                Ok(Err(e)) => e,
                Err(_) => CloudError::DeadlineExceeded(format!(
                    "{}: {} took longer than {limit:?}",
                    self.settings.cloud, req.name
                )),
            };
            self.metrics.errors.get_or_create(&label).inc();
            self.metrics
                .endpoints
                .unanswered(cloud, &endpoint, req.name, &e.to_string(), one);
            let wait = retry.failed();
            let oversized = matches!(&e, CloudError::Internal(m) if m.ends_with(OVERSIZED));
            let may_retry = !oversized
                && req.idempotent()
                && attempt < self.settings.attempts
                && started.elapsed() + wait < self.settings.deadline;
            if !may_retry {
                return Err(e);
            }
            tracing::debug!(cloud = self.settings.cloud, request = req.name, attempt, error = %e, retry_in = ?wait, "retrying");
            tokio::time::sleep(wait).await;
        }
    }

    async fn attempt(&self, req: &Request) -> Result<Response, CloudError> {
        let mut builder = http::Request::builder()
            .method(req.method.clone())
            .uri(req.uri.clone());
        if let Some(h) = builder.headers_mut() {
            h.extend(req.headers.clone());
        }
        let request = builder.body(Full::new(req.body.clone())).map_err(|e| {
            CloudError::InvalidArgument(format!("{}: {}: {e}", self.settings.cloud, req.name))
        })?;
        let resp = self.client.request(request).await.map_err(|e| {
            // The URI's path and query may carry ids, never credentials (headers carry
            // those); the host is what an operator needs to see.
            let host = req.uri.host().unwrap_or_default();
            CloudError::Unavailable(redact(&format!(
                "{}: {} to {host}: {}",
                self.settings.cloud,
                req.name,
                chain(&e)
            )))
        })?;
        let (parts, body) = resp.into_parts();
        let max = self.settings.max_body;
        let declared = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(size) = declared.filter(|n| *n > max as u64) {
            return Err(self.oversized(req, &format!("{size} bytes")));
        }
        let body = http_body_util::Limited::new(body, max)
            .collect()
            .await
            .map_err(
                |e| match e.downcast_ref::<http_body_util::LengthLimitError>() {
                    Some(_) => self.oversized(req, &format!("over {max} bytes")),
                    None => CloudError::Unavailable(format!(
                        "{}: {}: reading the answer: {e}",
                        self.settings.cloud, req.name
                    )),
                },
            )?
            .to_bytes();
        Ok(Response {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

impl HttpClient {
    /// An answer larger than this client reads: an error that names the endpoint, the
    /// call and the size, and is not retried — the same call answers the same size again
    /// (an engine listing everything it holds read 472 MB in 49 s of retries before this).
    fn oversized(&self, req: &Request, size: &str) -> CloudError {
        CloudError::Internal(format!(
            "{}: {} ({} {}{}): the answer is {size}, more than the {} this client reads; {OVERSIZED}",
            self.settings.cloud,
            req.name,
            req.method,
            req.uri.host().unwrap_or_default(),
            req.uri.path(),
            match self.settings.max_body {
                n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
                n => format!("{n} bytes"),
            },
        ))
    }
}

/// What an oversized answer's error ends with (and what `send` tells it by).
const OVERSIZED: &str = "not asked again";

/// An error and its causes, one line (hyper's top-level message alone says little).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The typed error for a response a provider did not expect: 400 InvalidArgument, 401
/// Unauthenticated, 403 PermissionDenied, 404 NotFound, 409 Conflict, 413/429
/// ResourceExhausted, 5xx Unavailable; the body, redacted and cut short, says why.
pub fn status_error(cloud: &str, name: &str, resp: &Response) -> CloudError {
    let text = String::from_utf8_lossy(&resp.body);
    let mut why: String = redact(text.trim()).chars().take(300).collect();
    if why.is_empty() {
        why = resp
            .status
            .canonical_reason()
            .unwrap_or("no reason")
            .to_owned();
    }
    let msg = format!("{cloud}: {name}: HTTP {}: {why}", resp.status.as_u16());
    error_for(resp.status.as_u16(), msg)
}

/// The typed error of an HTTP status, saying `msg`.
pub fn error_for(status: u16, msg: String) -> CloudError {
    match status {
        400 | 422 => CloudError::InvalidArgument(msg),
        401 => CloudError::Unauthenticated(msg),
        403 => CloudError::PermissionDenied(msg),
        404 => CloudError::NotFound {
            kind: "object",
            id: msg,
        },
        409 => CloudError::Conflict(msg),
        413 | 429 => CloudError::ResourceExhausted(msg),
        500..=599 => CloudError::Unavailable(msg),
        _ => CloudError::Internal(msg),
    }
}

#[cfg(test)]
mod tests;
