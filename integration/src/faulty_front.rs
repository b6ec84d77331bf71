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
        let (f, n) = (Arc::clone(&fault), Arc::clone(&faulted));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (f, n) = (Arc::clone(&f), Arc::clone(&n));
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let (f, n) = (Arc::clone(&f), Arc::clone(&n));
                        async move { Ok::<_, Infallible>(answer(req, upstream, &f, &n).await) }
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
            task,
        }
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
    let Ok(stream) = tokio::net::TcpStream::connect(upstream).await else {
        return bad_gateway(format!("{upstream} refused"));
    };
    let Ok((mut send, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    else {
        return bad_gateway("handshake".into());
    };
    tokio::spawn(conn);
    let req = hyper::Request::from_parts(parts, Full::new(body));
    match send.send_request(req).await {
        Ok(resp) => {
            let (parts, body) = resp.into_parts();
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            hyper::Response::from_parts(parts, Full::new(body))
        }
        Err(e) => bad_gateway(e.to_string()),
    }
}
