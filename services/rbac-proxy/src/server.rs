//! The listener, hardened as any server facing untrusted callers must be: a bounded number
//! of connections (and of connections per client address), a deadline for the TLS
//! handshake and for each request's headers, connections closed when idle, and an accept
//! loop that backs off and says so when the process runs out of descriptors instead of
//! spinning. HTTP/1.x and HTTP/2 (ALPN) are both served.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::idle::IdleTimeout;
use crate::proxy::Proxy;
use crate::tls::Certificates;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_client: usize,
    pub handshake_timeout: Duration,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
}

/// Open connections per client address; a slot is given back when its guard drops.
#[derive(Default)]
struct PerClient {
    open: Mutex<HashMap<IpAddr, usize>>,
}

struct ClientSlot {
    table: Arc<PerClient>,
    client: IpAddr,
}

impl PerClient {
    fn take(table: &Arc<Self>, client: IpAddr, max: usize) -> Option<ClientSlot> {
        let mut open = table.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(client).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            table: Arc::clone(table),
            client,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.client);
            }
        }
    }
}

/// Accepts and serves connections until the future is dropped.
pub async fn serve(listener: TcpListener, certs: Certificates, proxy: Arc<Proxy>, limits: Limits) {
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let per_client = Arc::new(PerClient::default());
    let mut backoff = Duration::ZERO;
    let mut refused_since_log = 0u64;
    let mut last_refusal_log = Instant::now();
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => {
                backoff = Duration::ZERO;
                accepted
            }
            Err(e) => {
                // EMFILE/ENFILE/ENOBUFS: retrying at once spins on the same error while
                // the pending connection stays in the backlog. Wait for descriptors to
                // come back, a little longer each time.
                backoff = (backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                tracing::warn!(error = %e, retry_in = ?backoff, "accept failed");
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        let client = peer.ip();
        let slots = (
            Arc::clone(&connections).try_acquire_owned().ok(),
            PerClient::take(&per_client, client, limits.max_connections_per_client),
        );
        let (Some(permit), Some(slot)) = slots else {
            refused_since_log += 1;
            if last_refusal_log.elapsed() >= Duration::from_secs(10) {
                tracing::warn!(
                    refused = refused_since_log,
                    %client,
                    max = limits.max_connections,
                    per_client = limits.max_connections_per_client,
                    "connection limit reached; refusing connections"
                );
                refused_since_log = 0;
                last_refusal_log = Instant::now();
            }
            drop(tcp);
            continue;
        };
        let acceptor = certs.acceptor();
        let proxy = Arc::clone(&proxy);
        tokio::spawn(async move {
            let _held = (permit, slot);
            connection(tcp, peer, acceptor, proxy, limits).await;
        });
    }
}

async fn connection(
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
    proxy: Arc<Proxy>,
    limits: Limits,
) {
    let _ = tcp.set_nodelay(true);
    let io = IdleTimeout::new(tcp, limits.idle_timeout);
    let stream = match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(io)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let client = peer.ip();
    let svc = hyper::service::service_fn(move |req| {
        let proxy = Arc::clone(&proxy);
        async move { Ok::<_, Infallible>(proxy.handle(req, client).await) }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // Also the idle time allowed between keep-alive requests: hyper starts it when
        // it waits for the next request's head.
        .header_read_timeout(limits.header_timeout);
    // No HTTP/2 pings: they would count as traffic and keep a silent connection alive;
    // the idle timeout below the protocol closes it, and a dead peer with it.
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(64);
    if let Err(e) = builder.serve_connection(TokioIo::new(stream), svc).await {
        tracing::debug!(%peer, error = %e, "connection ended");
    }
}
