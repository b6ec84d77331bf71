//! A TLS endpoint in front of vcsim, with vcsim's own certificate, for a client under test
//! to talk to as it would to the vCenter: every request passes through to vcsim, and a
//! [`Part`] may change a request on its way and an answer on its way back — the parts of
//! a real vCenter or ESXi host that vcsim leaves out.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use overcast_cloud_http::{HttpClient, HttpSettings, Request};
use tokio::task::JoinHandle;

use crate::vcsim::Vcsim;

/// What the front plays.
#[async_trait::async_trait]
pub trait Part: Send + Sync + 'static {
    /// The body sent on to vcsim for a request to `path` (default: as it came).
    async fn request(&self, _path: &str, body: Bytes) -> Bytes {
        body
    }

    /// The body given back for vcsim's answer to `request`.
    async fn answer(&self, path: &str, request: &[u8], status: u16, body: Bytes) -> Bytes;
}

pub struct VcsimFront {
    pub port: u16,
    task: JoinHandle<()>,
}

struct Front {
    upstream: HttpClient,
    base: String,
    part: Arc<dyn Part>,
}

impl VcsimFront {
    /// Listens on a free loopback port in front of `sim`.
    pub async fn start(sim: &Vcsim, part: Arc<dyn Part>) -> Self {
        use rustls::pki_types::pem::PemObject;
        let cert = std::fs::read(&sim.ca_file).unwrap();
        let key = std::fs::read(sim.dir().join("key.pem")).unwrap();
        let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_slice_iter(&cert)
            .map(|c| c.expect("certificate"))
            .collect();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&key).expect("key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let mut settings = HttpSettings::new("vcsim-front");
        settings.ca_pem = Some(String::from_utf8(cert).unwrap());
        let front = Arc::new(Front {
            upstream: HttpClient::new(settings, None).unwrap(),
            base: format!("https://127.0.0.1:{}", sim.port),
            part,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, front) = (acceptor.clone(), Arc::clone(&front));
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = service_fn(move |req| {
                        let front = Arc::clone(&front);
                        async move { Ok::<_, Infallible>(front.pass(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Self { port, task }
    }
}

impl Drop for VcsimFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Front {
    async fn pass(
        &self,
        req: hyper::Request<hyper::body::Incoming>,
    ) -> hyper::Response<Full<Bytes>> {
        let (parts, body) = req.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let path = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
            .to_owned();
        let body = self.part.request(&path, body).await;
        let mut forward = Request::new(
            "forward",
            parts.method.clone(),
            format!("{}{path}", self.base).parse().unwrap(),
        );
        for (k, v) in &parts.headers {
            if k != http::header::HOST && k != http::header::CONTENT_LENGTH {
                forward.headers.append(k.clone(), v.clone());
            }
        }
        forward.body = body.clone();
        let resp = match self.upstream.send(forward).await {
            Ok(r) => r,
            Err(e) => {
                return hyper::Response::builder()
                    .status(502)
                    .body(Full::new(Bytes::from(e.to_string())))
                    .unwrap()
            }
        };
        let out = self
            .part
            .answer(&path, &body, resp.status.as_u16(), resp.body.clone())
            .await;
        let mut builder = hyper::Response::builder().status(resp.status);
        for (k, v) in &resp.headers {
            if k != http::header::CONTENT_LENGTH && k != http::header::TRANSFER_ENCODING {
                builder = builder.header(k, v);
            }
        }
        builder.body(Full::new(out)).unwrap()
    }
}
