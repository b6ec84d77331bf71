//! Latency the rbac-proxy adds per request, on loopback: the same GET of a 2 KiB metrics
//! page straight from the upstream (plain HTTP, the raw baseline) and through the proxy
//! (TLS, bearer token, authorization answered from its cache), over keep-alive
//! connections, sequentially and with 16 concurrent clients.
//!
//! `cargo build --release --bins && cargo bench -p overcast-integration --bench rbac_proxy`

use std::convert::Infallible;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::Request;
use hyper_util::rt::TokioIo;
use overcast_integration::fake_api::FakeApi;
use overcast_integration::{binary, free_port};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

const TOKEN: &str = "bench-token";

async fn upstream() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let page = Bytes::from("# TYPE x gauge\n".repeat(140));
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                continue;
            };
            let page = page.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |_req| {
                    let page = page.clone();
                    async move { Ok::<_, Infallible>(hyper::Response::new(Full::new(page))) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    port
}

async fn plain(port: u16) -> SendRequest<Empty<Bytes>> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    send
}

async fn tls(port: u16, ca: &Path) -> SendRequest<Empty<Bytes>> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(ca).expect("ca"))
        .expect("root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("tls");
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    send
}

async fn run(mut send: SendRequest<Empty<Bytes>>, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let req = Request::get("/metrics")
            .header("host", "localhost")
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Empty::new())
            .expect("request");
        send.ready().await.expect("connection ready");
        let t = Instant::now();
        let resp = send.send_request(req).await.expect("response");
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.expect("body");
        out.push(t.elapsed());
    }
    out
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = if std::env::args().any(|a| a == "--quick") {
        500
    } else {
        5000
    };
    let dir = tempfile::tempdir().expect("dir");
    let d = dir.path();
    overcast_integration::self_signed_cert(d, "tls");
    let api = FakeApi::default();
    let url = api.start().await;
    FakeApi::kubeconfig(&url, &d.join("kubeconfig"));
    api.token(TOKEN, "prometheus", &[]);
    api.allow("prometheus", "get", "/metrics");
    let up = upstream().await;
    // This build's proxy, and optionally another build's in the same run (the figures of
    // two sessions are not comparable on a shared machine): OVERCAST_BENCH_BASELINE_PROXY
    // names that binary.
    let mut proxies = vec![("now".to_owned(), binary("rbac-proxy"))];
    if let Ok(path) = std::env::var("OVERCAST_BENCH_BASELINE_PROXY") {
        proxies.insert(0, ("before".to_owned(), path.into()));
    }
    let mut running = Vec::new();
    for (label, bin) in &proxies {
        let port = free_port();
        let proxy = Command::new(bin)
            .arg(format!("--secure-listen-address=127.0.0.1:{port}"))
            .arg(format!("--upstream=http://127.0.0.1:{up}/"))
            .arg(format!("--tls-cert-file={}", d.join("tls.crt").display()))
            .arg(format!(
                "--tls-private-key-file={}",
                d.join("tls.key").display()
            ))
            .arg(format!("--kubeconfig={}", d.join("kubeconfig").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("proxy");
        running.push((label.clone(), port, KillOnDrop(proxy)));
    }
    let ca = d.join("tls.crt");
    for (_, port, _) in &running {
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", *port))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Warm-up: fills the proxy's review cache and its connection pool.
        run(tls(*port, &ca).await, 50).await;
    }
    run(plain(up).await, 50).await;

    println!("## rbac-proxy added latency ({n} GETs of a 2 KiB page per row, keep-alive)\n");
    println!("| proxy | clients | direct p50 | direct p99 | via proxy p50 | via proxy p99 | added p50 | added p99 |");
    println!("|---|---|---|---|---|---|---|---|");
    for clients in [1usize, 16] {
        for (label, port, _) in &running {
            let port = *port;
            let mut direct = Vec::new();
            let mut proxied = Vec::new();
            let mut tasks = Vec::new();
            for _ in 0..clients {
                tasks.push(tokio::spawn(run(plain(up).await, n / clients)));
            }
            for t in tasks {
                direct.extend(t.await.expect("direct"));
            }
            let mut tasks = Vec::new();
            for _ in 0..clients {
                let ca = ca.clone();
                tasks.push(tokio::spawn(async move {
                    run(tls(port, &ca).await, n / clients).await
                }));
            }
            for t in tasks {
                proxied.extend(t.await.expect("proxied"));
            }
            direct.sort();
            proxied.sort();
            let (d50, d99, p50, p99) = (
                pct(&direct, 0.5),
                pct(&direct, 0.99),
                pct(&proxied, 0.5),
                pct(&proxied, 0.99),
            );
            println!(
                "| {label} | {clients} | {} | {} | {} | {} | {} | {} |",
                us(d50),
                us(d99),
                us(p50),
                us(p99),
                us(p50.saturating_sub(d50)),
                us(p99.saturating_sub(d99))
            );
        }
    }
    let reviews = api
        .seen()
        .iter()
        .filter(|r| r.path.ends_with("reviews"))
        .count();
    println!("\n- TokenReview + SubjectAccessReview calls during the run: {reviews} (the rest answered from the cache)");
}

/// Ends the proxy however the benchmark ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
