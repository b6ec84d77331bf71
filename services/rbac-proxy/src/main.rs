//! `rbac-proxy`: what kube-rbac-proxy does, in front of the discoverer's metrics. Every
//! request's bearer token is reviewed (TokenReview) and the request authorized
//! (SubjectAccessReview); then it is proxied to the upstream on loopback — without the
//! caller's token. 401 without a valid token, 403 when not allowed. TLS on the listener,
//! certificates reloaded when they change.

mod authz;
mod tls;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use overcast_runtime::LogFormat;
use tokio::net::TcpListener;

use authz::{Authorizer, Decision, Resource};

#[derive(Debug, Clone, Parser)]
#[command(
    name = "rbac-proxy",
    version,
    about = "TokenReview + SubjectAccessReview in front of an upstream"
)]
struct Options {
    #[arg(long, default_value = "0.0.0.0:8443")]
    secure_listen_address: SocketAddr,
    /// Where authorized requests go (on loopback).
    #[arg(long, default_value = "http://127.0.0.1:8081/")]
    upstream: Uri,
    /// The serving certificate (PEM); with neither file, a self-signed one is made.
    #[arg(long, requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    #[arg(long, requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    /// Paths passed upstream without authentication (kube-rbac-proxy's --ignore-paths),
    /// e.g. /healthz for kubelet's probe, which carries no token.
    #[arg(long, value_delimiter = ',')]
    ignore_paths: Vec<String>,
    /// How often to look for a new certificate.
    #[arg(long, default_value_t = 10_000)]
    tls_reload_interval_ms: u64,
    /// How long a token review or an authorization decision is reused.
    #[arg(long, default_value_t = 60)]
    auth_cache_ttl: u64,
    /// Authorize against this resource (kube-rbac-proxy's resourceAttributes) instead of
    /// the non-resource URL.
    #[arg(long)]
    resource: Option<String>,
    #[arg(long, default_value = "")]
    resource_namespace: String,
    #[arg(long, default_value = "")]
    resource_group: String,
    #[arg(long, default_value = "v1")]
    resource_version: String,
    #[arg(long, default_value = "")]
    resource_subresource: String,
    #[arg(long, default_value = "")]
    resource_name: String,
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    #[arg(long, env = "LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

type Body = BoxBody<Bytes, hyper::Error>;
type Upstream = hyper_util::client::legacy::Client<HttpConnector, Incoming>;

fn reply(status: StatusCode, text: String) -> Response<Body> {
    let mut resp = Response::new(
        Full::new(Bytes::from(text))
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *resp.status_mut() = status;
    resp
}

struct Proxy {
    authz: Authorizer,
    upstream: Uri,
    ignore_paths: Vec<String>,
    client: Upstream,
}

/// Headers that belong to one hop, and the caller's credentials: never forwarded.
const DROPPED: [&str; 7] = [
    "authorization",
    "connection",
    "keep-alive",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
];

impl Proxy {
    async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        let token = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned);
        let path = req.uri().path().to_owned();
        if self.ignore_paths.contains(&path) {
            return self.forward(req).await;
        }
        match self
            .authz
            .decide(token.as_deref(), req.method().as_str(), &path)
            .await
        {
            Ok(Decision::Allowed(user)) => {
                tracing::debug!(%user, %path, "allowed");
                self.forward(req).await
            }
            Ok(Decision::Unauthenticated) => {
                let mut r = reply(StatusCode::UNAUTHORIZED, "Unauthorized\n".into());
                r.headers_mut().insert(
                    hyper::header::WWW_AUTHENTICATE,
                    hyper::header::HeaderValue::from_static("Bearer"),
                );
                r
            }
            Ok(Decision::Forbidden(why)) => {
                reply(StatusCode::FORBIDDEN, format!("Forbidden: {why}\n"))
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

    async fn forward(&self, req: Request<Incoming>) -> Response<Body> {
        let (mut parts, body) = req.into_parts();
        let pq = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let base = self.upstream.to_string();
        let Ok(uri) = format!("{}{pq}", base.trim_end_matches('/')).parse::<Uri>() else {
            return reply(StatusCode::BAD_REQUEST, "bad path\n".into());
        };
        parts.uri = uri;
        for h in DROPPED {
            parts.headers.remove(h);
        }
        parts.headers.remove(hyper::header::HOST);
        match self.client.request(Request::from_parts(parts, body)).await {
            Ok(resp) => resp.map(|b| b.boxed()),
            Err(e) => {
                tracing::warn!(error = %e, "upstream failed");
                reply(StatusCode::BAD_GATEWAY, "Bad Gateway\n".into())
            }
        }
    }
}

/// The names a self-signed certificate carries: this pod's hostname, and localhost.
fn self_signed_names() -> Vec<String> {
    let mut names = vec!["localhost".to_owned()];
    names.extend(overcast_runtime::host::hostname());
    names
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = Options::parse();
    overcast_runtime::logging::init(o.log_format);
    let kube = overcast_kube::client(o.kubeconfig.as_deref()).await?;
    let resource = o.resource.clone().map(|resource| Resource {
        namespace: o.resource_namespace.clone(),
        group: o.resource_group.clone(),
        version: o.resource_version.clone(),
        resource,
        subresource: o.resource_subresource.clone(),
        name: o.resource_name.clone(),
    });
    let certs = match (&o.tls_cert_file, &o.tls_private_key_file) {
        (Some(cert), Some(key)) => tls::Certificates::watch(
            cert.clone(),
            key.clone(),
            Duration::from_millis(o.tls_reload_interval_ms),
        )?,
        _ => {
            tracing::info!("no certificate given: serving a self-signed one");
            tls::Certificates::self_signed(self_signed_names())?
        }
    };
    let proxy = Arc::new(Proxy {
        authz: Authorizer::new(kube, resource, Duration::from_secs(o.auth_cache_ttl)),
        upstream: o.upstream.clone(),
        ignore_paths: o.ignore_paths.clone(),
        client: hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http(),
    });
    let listener = TcpListener::bind(o.secure_listen_address)
        .await
        .with_context(|| format!("listen on {}", o.secure_listen_address))?;
    tracing::info!(address = %listener.local_addr()?, upstream = %o.upstream, "serving");
    let serve = async {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = certs.acceptor();
            let proxy = Arc::clone(&proxy);
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |req| {
                    let proxy = Arc::clone(&proxy);
                    async move { Ok::<_, Infallible>(proxy.handle(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    };
    tokio::select! {
        () = serve => {}
        () = overcast_runtime::shutdown::signal_received() => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn methods_map_to_verbs() {
        for (m, v) in [
            ("GET", "get"),
            ("HEAD", "get"),
            ("POST", "create"),
            ("PUT", "update"),
            ("PATCH", "patch"),
            ("DELETE", "delete"),
        ] {
            assert_eq!(crate::authz::verb(m), v);
        }
    }
}
