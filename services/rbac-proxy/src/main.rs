//! `rbac-proxy`: what kube-rbac-proxy does, in front of the discoverer's metrics. Every
//! request's bearer token is reviewed (TokenReview) and the request authorized
//! (SubjectAccessReview); then it is proxied to the upstream on loopback — without the
//! caller's token. 401 without a valid token, 403 when not allowed. TLS on the listener,
//! certificates reloaded when they change.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use hyper::Uri;
use hyper_util::rt::TokioExecutor;
use overcast_rbac_proxy::authz::{Authorizer, Resource};
use overcast_rbac_proxy::limit::ReviewLimit;
use overcast_rbac_proxy::proxy::Proxy;
use overcast_rbac_proxy::server::{self, Limits};
use overcast_rbac_proxy::tls;
use overcast_runtime::LogFormat;
use tokio::net::TcpListener;

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
    /// Reviews of tokens not in the cache, per second per client address (bursts of
    /// twice that); past it the client gets 429 without a review.
    #[arg(long, default_value_t = 20.0)]
    token_review_rate: f64,
    /// Connections served at once; more are closed at accept.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Connections served at once for one client address.
    #[arg(long, default_value_t = 64)]
    max_connections_per_client: usize,
    /// Seconds a client has to finish the TLS handshake.
    #[arg(long, default_value_t = 10)]
    tls_handshake_timeout: u64,
    /// Seconds a client has to send a request's headers (and between keep-alive
    /// requests on HTTP/1.x).
    #[arg(long, default_value_t = 10)]
    header_timeout: u64,
    /// Seconds without any traffic after which a connection is closed.
    #[arg(long, default_value_t = 120)]
    idle_timeout: u64,
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    #[arg(long, env = "LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
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
    let metrics = overcast_rbac_proxy::metrics::Metrics::new();
    let proxy = Arc::new(Proxy {
        authz: Authorizer::new(
            kube,
            resource,
            Duration::from_secs(o.auth_cache_ttl),
            ReviewLimit::new(o.token_review_rate, o.token_review_rate * 2.0),
            Arc::clone(&metrics),
        ),
        upstream: o.upstream.clone(),
        ignore_paths: o.ignore_paths.clone(),
        client: hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http(),
        metrics,
    });
    let limits = Limits {
        max_connections: o.max_connections.max(1),
        max_connections_per_client: o.max_connections_per_client.max(1),
        handshake_timeout: Duration::from_secs(o.tls_handshake_timeout),
        header_timeout: Duration::from_secs(o.header_timeout),
        idle_timeout: Duration::from_secs(o.idle_timeout),
    };
    let listener = TcpListener::bind(o.secure_listen_address)
        .await
        .with_context(|| format!("listen on {}", o.secure_listen_address))?;
    tracing::info!(address = %listener.local_addr()?, upstream = %o.upstream, "serving");
    tokio::select! {
        () = server::serve(listener, certs, proxy, limits) => {}
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
            assert_eq!(overcast_rbac_proxy::authz::verb(m), v);
        }
    }
}
