//! A plain-HTTP endpoint in front of the parent's API server, where the tests play
//! outages.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::DvpSim;

impl DvpSim {
    /// A plain-HTTP endpoint in front of the parent's API server (as the admin): what a
    /// provider reaches it through when a test plays API outages (`faults.api_down`).
    /// Returns a kubeconfig for it.
    pub async fn api_proxy(&self, dir: &Path) -> PathBuf {
        use hyper::service::service_fn;
        use hyper_util::rt::TokioIo;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (upstream, faults) = (self.client.clone(), Arc::clone(&self.faults));
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (upstream, faults) = (upstream.clone(), Arc::clone(&faults));
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (upstream, faults) = (upstream.clone(), Arc::clone(&faults));
                        async move {
                            use http_body_util::BodyExt;
                            if faults.api_down.load(Ordering::Relaxed) {
                                let page = "<html><head><title>503 Service Temporarily Unavailable</title></head></html>";
                                return Ok::<_, std::convert::Infallible>(
                                    hyper::Response::builder()
                                        .status(503)
                                        .header("content-type", "text/html")
                                        .body(kube::client::Body::from(page.as_bytes().to_vec()))
                                        .expect("response"),
                                );
                            }
                            faults.proxied.fetch_add(1, Ordering::Relaxed);
                            let (mut parts, body) = req.into_parts();
                            if parts.method != hyper::Method::GET {
                                faults
                                    .writes
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .push(format!("{} {}", parts.method, parts.uri.path()));
                            } else {
                                faults
                                    .reads
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .push(parts.uri.to_string());
                            }
                            // The proxy speaks as the admin: the caller's token stays here.
                            parts.headers.remove(hyper::header::AUTHORIZATION);
                            let bytes = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            if let Some(refusal) = webhook_refusal(&parts, &bytes) {
                                return Ok(refusal);
                            }
                            // A read's answer is counted whole; a watch streams on.
                            let counted = parts.method == hyper::Method::GET
                                && !parts.uri.query().unwrap_or_default().contains("watch=true");
                            let req = hyper::Request::from_parts(
                                parts,
                                kube::client::Body::from(bytes.to_vec()),
                            );
                            let answer = match upstream.send(req).await {
                                Ok(answer) => answer,
                                Err(e) => {
                                    return Ok(hyper::Response::builder()
                                        .status(502)
                                        .body(kube::client::Body::from(e.to_string().into_bytes()))
                                        .expect("response"))
                                }
                            };
                            if !counted {
                                return Ok(answer);
                            }
                            let (head, body) = answer.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            faults
                                .answered
                                .fetch_add(body.len() as u64, Ordering::Relaxed);
                            Ok(hyper::Response::from_parts(
                                head,
                                kube::client::Body::from(body.to_vec()),
                            ))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let path = dir.join("parent-through-proxy.kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: parent\n  cluster: {{server: 'http://127.0.0.1:{port}'}}\nusers:\n- name: proxy\n  user: {{token: through-the-proxy}}\ncontexts:\n- name: parent\n  context: {{cluster: parent, user: proxy}}\ncurrent-context: parent\n"
            ),
        )
        .expect("kubeconfig");
        path
    }
}

/// What the virtualization module's VirtualDisk webhook (its `name_validator.go`) answers
/// a create whose name has a `.`: the API server's 403 for a denied admission.
fn webhook_refusal(
    parts: &hyper::http::request::Parts,
    body: &[u8],
) -> Option<hyper::Response<kube::client::Body>> {
    if parts.method != hyper::Method::POST || !parts.uri.path().ends_with("/virtualdisks") {
        return None;
    }
    let doc: serde_json::Value = serde_json::from_slice(body).ok()?;
    let name = doc["metadata"]["name"].as_str()?;
    if !name.contains('.') {
        return None;
    }
    let status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("admission webhook \"vd.virtualization-controller.validate.d8-virtualization\" denied the request: the VirtualDisk name {name:?} is invalid: '.' is forbidden, allowed name symbols are [0-9a-zA-Z-]"),
        "reason": "Forbidden", "code": 403,
    });
    Some(
        hyper::Response::builder()
            .status(403)
            .header("content-type", "application/json")
            .body(kube::client::Body::from(status.to_string().into_bytes()))
            .expect("response"),
    )
}
