//! Clients that misbehave on purpose, for the rbac-proxy's hardening tests and its attack
//! benchmark: connections that never speak, descriptors exhausted, garbage tokens
//! sprayed — each from a loopback address of its own, so that a well-behaved client on
//! 127.0.0.1 can be told apart.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

/// The attacker's address (any of 127/8 is loopback on Linux).
pub const ATTACKER: [u8; 4] = [127, 0, 0, 2];

/// A TCP connection to `port` on 127.0.0.1 from `from`.
pub async fn connect_from(port: u16, from: IpAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket
        .connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
}

/// `n` connections from `from` that never send a byte.
pub async fn idle_connections(port: u16, from: IpAddr, n: usize) -> Vec<TcpStream> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        if let Ok(s) = connect_from(port, from).await {
            out.push(s);
        }
    }
    out
}

/// How many of `streams` the other side has closed (a read ends at once).
pub async fn closed_by_peer(streams: &mut [TcpStream]) -> usize {
    let mut closed = 0;
    for s in streams.iter_mut() {
        let mut buf = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(5), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => closed += 1,
            _ => {}
        }
    }
    closed
}

/// A TLS client configuration trusting `ca` (PEM).
pub fn tls_config(ca: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(ca).expect("ca"))
        .expect("root");
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// An HTTP/1.1 connection over TLS to the proxy on `port`, from `from`.
pub async fn https(
    port: u16,
    config: Arc<rustls::ClientConfig>,
    from: IpAddr,
) -> std::io::Result<SendRequest<Empty<Bytes>>> {
    let tcp = connect_from(port, from).await?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await?;
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(conn);
    Ok(send)
}

/// GET `path` with `token`; the status, or 0 when the connection failed.
pub async fn get(send: &mut SendRequest<Empty<Bytes>>, path: &str, token: &str) -> u16 {
    let req = hyper::Request::get(path)
        .header("host", "localhost")
        .header("authorization", format!("Bearer {token}"))
        .body(Empty::new())
        .expect("request");
    if send.ready().await.is_err() {
        return 0;
    }
    match send.send_request(req).await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let _ = resp.into_body().collect().await;
            status
        }
        Err(_) => 0,
    }
}

/// `n` requests with distinct garbage tokens (distinct across calls with distinct
/// `tag`s) from `from` over `conns` keep-alive connections, reconnecting when the proxy
/// closes one; statuses seen, with counts.
pub async fn token_spray(
    port: u16,
    config: Arc<rustls::ClientConfig>,
    from: IpAddr,
    n: usize,
    conns: usize,
    tag: &str,
) -> BTreeMap<u16, usize> {
    let per = n.div_ceil(conns.max(1));
    let mut tasks = Vec::new();
    for c in 0..conns {
        let config = Arc::clone(&config);
        let tag = tag.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut seen = BTreeMap::new();
            let mut send = None;
            for i in 0..per {
                if send.is_none() {
                    send = https(port, Arc::clone(&config), from).await.ok();
                }
                let status = match send.as_mut() {
                    Some(s) => get(s, "/metrics", &format!("garbage-{tag}-{c}-{i}")).await,
                    None => 0,
                };
                if status == 0 {
                    send = None;
                }
                *seen.entry(status).or_insert(0) += 1;
            }
            seen
        }));
    }
    let mut all = BTreeMap::new();
    for t in tasks {
        for (k, v) in t.await.expect("spray task") {
            *all.entry(k).or_insert(0) += v;
        }
    }
    all
}

/// CPU seconds `pid` has used (user + system), from /proc.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the command.
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(100.0, |v| v as f64);
    (ticks(11) + ticks(12)) / hz
}
