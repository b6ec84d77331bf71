//! A small HTTP/1 server for `/metrics` (Prometheus text format) and `/healthz`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// The health check behind `/healthz`: `Ok` is 200, `Err(reason)` is 503 with the reason.
pub type HealthCheck =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// Serves `/metrics` from `registry` and `/healthz` from `health` on `addr` until the
/// task is dropped. Returns the bound address (useful with port 0).
pub async fn serve(
    addr: SocketAddr,
    registry: Arc<Registry>,
    health: HealthCheck,
) -> std::io::Result<SocketAddr> {
    // The address in the error: "Address already in use" alone does not say which of a
    // process's listeners, nor that another process holds it.
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("listening on {addr} for /metrics and /healthz: {e}"),
        )
    })?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let registry = Arc::clone(&registry);
            let health = Arc::clone(&health);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let registry = Arc::clone(&registry);
                    let health = Arc::clone(&health);
                    async move { Ok::<_, Infallible>(route(req, &registry, &health).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(local)
}

async fn route<B>(
    req: Request<B>,
    registry: &Registry,
    health: &HealthCheck,
) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/metrics" => {
            let mut body = String::new();
            if prometheus_client::encoding::text::encode(&mut body, registry).is_err() {
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "encoding metrics failed\n".into(),
                );
            }
            let mut resp = text(StatusCode::OK, body);
            resp.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            resp
        }
        "/healthz" => match health().await {
            Ok(()) => text(StatusCode::OK, "ok\n".into()),
            Err(reason) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A taken address is named in the error (an operator meeting "Address already in
    /// use" alone could not tell which listener, nor what to free).
    #[tokio::test]
    async fn a_taken_address_is_named() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let health: HealthCheck = Arc::new(|| Box::pin(async { Ok(()) }));
        let e = serve(addr, Arc::new(Registry::default()), health)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains(&addr.to_string()), "{e}");
    }
}
