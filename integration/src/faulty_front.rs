//! An HTTP endpoint in front of a real service that passes every request through until a
//! test tells it to answer otherwise: what a load balancer or a proxy in front of a cloud
//! API does on a bad day (a 503 page, an HTML page with 200, an answer that is valid but
//! empty). A cloud's catalog is pointed at it (OpenStack: a region whose endpoint is this
//! one), so the provider under test meets the fault exactly where it would in production.
//! One upstream connection per request: a fault set takes effect on the next request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::task::JoinHandle;

/// How the front answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Every request goes to the service, its answer comes back.
    Pass,
    /// Every request is answered here, never reaching the service.
    Answer {
        status: u16,
        content_type: &'static str,
        body: String,
    },
    /// Nova taking a volume attachment back after it accepted it (its compute host's attach
    /// failed, and it rolled back): the next `POST …/os-volume_attachments` is passed, then
    /// the front waits for the volume to be in-use, detaches it through Nova and waits for
    /// it to be available before it gives Nova's answer — which names an attachment that
    /// is gone. Every request after it passes.
    TakeBackAttach,
    /// Nova failing a server's delete on its compute host: the next `DELETE …/servers/<id>`
    /// is answered 204 here (accepted, as Nova does before its compute host fails it) and
    /// never reaches Nova, and the next read of that server is answered as Nova then shows
    /// it — in ERROR with no task and a fault — once. Every request after it passes.
    FailServerDelete,
    /// (Of [`Fault::FailServerDelete`]: the server whose next read is answered.)
    ServerDeleteFailed(String),
    /// Nova slow to build a server (its compute host busy, an image being fetched): until
    /// the instant, every read of one server (`GET …/servers/<id>`) that Nova answers
    /// ACTIVE is answered as Nova shows a server still spawning — `BUILD`, vm_state
    /// `building`, task_state `spawning`, power state NOSTATE. Every other request passes.
    SlowBuild(std::time::Instant),
    /// What a token of another project (an edited secret) reads as: every server's read
    /// (`GET …/servers/<id>`) answered 404, every listing of servers (`GET …/servers`,
    /// `…/servers/detail`) answered 200 with none. Every other request passes.
    EveryServerGone,
    /// A Cinder whose operator took a filter out of its `resource_filters.json`: every
    /// volume listing (`GET …/volumes`, `…/volumes/detail`) whose query holds the filter
    /// `name` is answered 400 as Cinder's `reject_invalid_filters` answers a non-admin
    /// (cinder/api/common.py). Every other request passes.
    RefuseFilter(&'static str),
}

impl Fault {
    /// What a proxy says when the service behind it is down.
    pub fn unavailable() -> Self {
        Fault::Answer {
            status: 503,
            content_type: "text/html",
            body: "<html><head><title>503 Service Unavailable</title></head><body>No server is available to handle this request.</body></html>".into(),
        }
    }

    /// A captive page or a misrouted vhost: 200, but not the JSON asked for.
    pub fn html_page() -> Self {
        Fault::Answer {
            status: 200,
            content_type: "text/html",
            body: "<!DOCTYPE html><html><body>Welcome to nginx!</body></html>".into(),
        }
    }

    /// 200 with this JSON.
    pub fn json(body: serde_json::Value) -> Self {
        Fault::Answer {
            status: 200,
            content_type: "application/json",
            body: body.to_string(),
        }
    }
}

pub struct FaultyFront {
    pub addr: SocketAddr,
    fault: Arc<Mutex<Fault>>,
    /// Requests answered with a fault.
    faulted: Arc<AtomicUsize>,
    /// Requests passed to the service, and the bytes of their bodies both ways (what a
    /// benchmark counts of a client's calls).
    passed: Arc<(AtomicUsize, std::sync::atomic::AtomicU64)>,
    task: JoinHandle<()>,
}

impl FaultyFront {
    /// Listens on a free loopback port, in front of `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let fault = Arc::new(Mutex::new(Fault::Pass));
        let faulted = Arc::new(AtomicUsize::new(0));
        let passed = Arc::new((AtomicUsize::new(0), std::sync::atomic::AtomicU64::new(0)));
        let (f, n, p) = (
            Arc::clone(&fault),
            Arc::clone(&faulted),
            Arc::clone(&passed),
        );
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (f, n, p) = (Arc::clone(&f), Arc::clone(&n), Arc::clone(&p));
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let (f, n, p) = (Arc::clone(&f), Arc::clone(&n), Arc::clone(&p));
                        async move { Ok::<_, Infallible>(answer(req, upstream, &f, &n, &p).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            addr,
            fault,
            faulted,
            passed,
            task,
        }
    }

    /// Requests passed to the service so far, and their bodies' bytes (request and answer).
    pub fn passed(&self) -> (usize, u64) {
        (
            self.passed.0.load(Ordering::Relaxed),
            self.passed.1.load(Ordering::Relaxed),
        )
    }

    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    /// How many requests were answered with a fault so far.
    pub fn faulted(&self) -> usize {
        self.faulted.load(Ordering::Relaxed)
    }
}

impl Drop for FaultyFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    upstream: SocketAddr,
    fault: &Mutex<Fault>,
    faulted: &AtomicUsize,
    passed: &(AtomicUsize, std::sync::atomic::AtomicU64),
) -> hyper::Response<Full<Bytes>> {
    let now = fault.lock().unwrap().clone();
    if let Fault::Answer {
        status,
        content_type,
        body,
    } = now
    {
        faulted.fetch_add(1, Ordering::Relaxed);
        return hyper::Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .expect("response");
    }
    let bad_gateway = |why: String| {
        hyper::Response::builder()
            .status(502)
            .body(Full::new(Bytes::from(why)))
            .expect("response")
    };
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let server_read = match &now {
        Fault::ServerDeleteFailed(id) => {
            parts.method == hyper::Method::GET
                && parts.uri.path().ends_with(&format!("/servers/{id}"))
        }
        _ => false,
    };
    let server_delete = now == Fault::FailServerDelete
        && parts.method == hyper::Method::DELETE
        && parts.uri.path().contains("/servers/")
        && !parts.uri.path().contains("/os-");
    if server_delete {
        let id = parts
            .uri
            .path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        *fault.lock().unwrap() = Fault::ServerDeleteFailed(id);
        faulted.fetch_add(1, Ordering::Relaxed);
        return hyper::Response::builder()
            .status(204)
            .body(Full::new(Bytes::new()))
            .expect("response");
    }
    if now == Fault::EveryServerGone && parts.method == hyper::Method::GET {
        let path = parts.uri.path();
        let tail = path.rsplit_once("/servers").map(|(_, t)| t);
        let answer = match tail {
            Some("" | "/" | "/detail") => Some((200, serde_json::json!({"servers": []}))),
            Some(t) if t.len() > 1 && !t[1..].contains('/') => Some((
                404,
                serde_json::json!({"itemNotFound": {"code": 404, "message": "Instance could not be found."}}),
            )),
            _ => None,
        };
        if let Some((status, body)) = answer {
            faulted.fetch_add(1, Ordering::Relaxed);
            return hyper::Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body.to_string())))
                .expect("response");
        }
    }
    if let Fault::RefuseFilter(filter) = now {
        let listing = parts.method == hyper::Method::GET
            && (parts.uri.path().ends_with("/volumes")
                || parts.uri.path().ends_with("/volumes/detail"));
        let filtered = parts
            .uri
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv.split('=').next() == Some(filter)));
        if listing && filtered {
            faulted.fetch_add(1, Ordering::Relaxed);
            let message = format!("Invalid filters {filter} are found in query options.");
            return hyper::Response::builder()
                .status(400)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(
                    serde_json::json!({"badRequest": {"code": 400, "message": message}})
                        .to_string(),
                )))
                .expect("response");
        }
    }
    let slow_read = match &now {
        Fault::SlowBuild(until) => {
            std::time::Instant::now() < *until
                && parts.method == hyper::Method::GET
                && parts
                    .uri
                    .path()
                    .rsplit_once("/servers/")
                    .is_some_and(|(_, id)| !id.is_empty() && !id.contains('/') && id != "detail")
        }
        _ => false,
    };
    let take_back = now == Fault::TakeBackAttach
        && parts.method == hyper::Method::POST
        && parts.uri.path().ends_with("/os-volume_attachments");
    let token = parts.headers.get("x-auth-token").cloned();
    passed.0.fetch_add(1, Ordering::Relaxed);
    passed.1.fetch_add(body.len() as u64, Ordering::Relaxed);
    let asked: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let server_path = parts
        .uri
        .path()
        .trim_end_matches("/os-volume_attachments")
        .to_owned();
    match forward(upstream, hyper::Request::from_parts(parts, Full::new(body))).await {
        Ok((parts, body)) => {
            passed.1.fetch_add(body.len() as u64, Ordering::Relaxed);
            if server_read && parts.status.is_success() {
                *fault.lock().unwrap() = Fault::Pass;
                let mut doc: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                doc["server"]["status"] = "ERROR".into();
                doc["server"]["OS-EXT-STS:vm_state"] = "error".into();
                doc["server"]["OS-EXT-STS:task_state"] = serde_json::Value::Null;
                doc["server"]["fault"] = serde_json::json!({"code": 500, "message": "OperationalError: (sqlite3.OperationalError) database is locked"});
                let body = Bytes::from(doc.to_string());
                let mut parts = parts;
                parts.headers.remove(hyper::header::CONTENT_LENGTH);
                return hyper::Response::from_parts(parts, Full::new(body));
            }
            if slow_read && parts.status.is_success() {
                let mut doc: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                if doc["server"]["status"] == "ACTIVE" {
                    faulted.fetch_add(1, Ordering::Relaxed);
                    doc["server"]["status"] = "BUILD".into();
                    doc["server"]["OS-EXT-STS:vm_state"] = "building".into();
                    doc["server"]["OS-EXT-STS:task_state"] = "spawning".into();
                    doc["server"]["OS-EXT-STS:power_state"] = 0.into();
                    let mut parts = parts;
                    parts.headers.remove(hyper::header::CONTENT_LENGTH);
                    return hyper::Response::from_parts(
                        parts,
                        Full::new(Bytes::from(doc.to_string())),
                    );
                }
            }
            if take_back && parts.status.is_success() {
                *fault.lock().unwrap() = Fault::Pass;
                faulted.fetch_add(1, Ordering::Relaxed);
                let volume = asked["volumeAttachment"]["volumeId"]
                    .as_str()
                    .unwrap_or_default();
                if let Err(e) = detach(upstream, token, &server_path, volume).await {
                    return bad_gateway(format!(
                        "the front could not take the attachment back: {e}"
                    ));
                }
            }
            hyper::Response::from_parts(parts, Full::new(body))
        }
        Err(e) => bad_gateway(e),
    }
}

/// One request to `upstream` on a connection of its own: the answer's head and body.
pub(crate) async fn forward(
    upstream: SocketAddr,
    req: hyper::Request<Full<Bytes>>,
) -> Result<(hyper::http::response::Parts, Bytes), String> {
    let stream = tokio::net::TcpStream::connect(upstream)
        .await
        .map_err(|_| format!("{upstream} refused"))?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|_| "handshake".to_owned())?;
    tokio::spawn(conn);
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    let (parts, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    Ok((parts, body))
}

/// What Nova's rollback leaves, done through Nova with the caller's token: `volume`,
/// once in-use on the server at `server_path` (`/v2.1/servers/<id>`), detached, and
/// available again (its status read through Nova's volume proxy, `/os-volumes`).
async fn detach(
    upstream: SocketAddr,
    token: Option<hyper::header::HeaderValue>,
    server_path: &str,
    volume: &str,
) -> Result<(), String> {
    let root = server_path.split("/servers/").next().unwrap_or_default();
    let call = |method: hyper::Method, path: String| {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", upstream.to_string());
        if let Some(t) = &token {
            req = req.header("x-auth-token", t.clone());
        }
        forward(
            upstream,
            req.body(Full::new(Bytes::new())).expect("request"),
        )
    };
    let status = |path: String| {
        let call = &call;
        async move {
            let (_, body) = call(hyper::Method::GET, path).await?;
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            Ok::<_, String>(
                v["volume"]["status"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        }
    };
    let volume_path = format!("{root}/os-volumes/{volume}");
    let until = |want: &'static str| {
        let status = &status;
        let volume_path = volume_path.clone();
        async move {
            for _ in 0..240 {
                if status(volume_path.clone()).await? == want {
                    return Ok(());
                }
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            Err(format!("volume {volume} never {want}"))
        }
    };
    until("in-use").await?;
    let (parts, body) = call(
        hyper::Method::DELETE,
        format!("{server_path}/os-volume_attachments/{volume}"),
    )
    .await?;
    if !parts.status.is_success() {
        return Err(format!(
            "detach: {} {}",
            parts.status,
            String::from_utf8_lossy(&body)
        ));
    }
    until("available").await
}
