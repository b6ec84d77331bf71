//! The listener's certificate, reloaded when its files change (cert-manager rotates them
//! in place): every new connection gets the configuration current at that moment. With
//! no files given, a self-signed certificate made at start (what kube-rbac-proxy does), so
//! the manifests work without a certificate issuer; scrapers then skip verification.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

#[derive(Clone)]
pub struct Certificates {
    current: Arc<RwLock<Arc<ServerConfig>>>,
}

fn load(cert: &Path, key: &Path) -> anyhow::Result<Arc<ServerConfig>> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| anyhow::anyhow!("{}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("{}: {e}", cert.display()))?;
    let key =
        PrivateKeyDer::from_pem_file(key).map_err(|e| anyhow::anyhow!("{}: {e}", key.display()))?;
    server_config(chain, key)
}

fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> anyhow::Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    // Everything the server speaks: a client offering only one of these (an h2-only
    // client, `curl --http1.0`) must not fail the handshake.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec(), b"http/1.0".to_vec()];
    Ok(Arc::new(config))
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl Certificates {
    /// A certificate for `names`, signed by its own key, kept for the process's life.
    pub fn self_signed(names: Vec<String>) -> anyhow::Result<Self> {
        let made = rcgen::generate_simple_self_signed(names)?;
        let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
            .map_err(|e| anyhow::anyhow!("self-signed key: {e}"))?;
        Ok(Self {
            current: Arc::new(RwLock::new(server_config(
                vec![made.cert.der().clone()],
                key,
            )?)),
        })
    }

    /// Loads the pair and starts watching it every `every`.
    pub fn watch(cert: PathBuf, key: PathBuf, every: Duration) -> anyhow::Result<Self> {
        let this = Self {
            current: Arc::new(RwLock::new(load(&cert, &key)?)),
        };
        let current = Arc::clone(&this.current);
        tokio::spawn(async move {
            let mut seen = (modified(&cert), modified(&key));
            loop {
                tokio::time::sleep(every).await;
                let now = (modified(&cert), modified(&key));
                if now == seen {
                    continue;
                }
                match load(&cert, &key) {
                    Ok(config) => {
                        *current.write().unwrap_or_else(|p| p.into_inner()) = config;
                        seen = now;
                        tracing::info!(cert = %cert.display(), "certificate reloaded");
                    }
                    // A half-written pair: keep serving the old one, try again next time.
                    Err(e) => tracing::warn!(error = %e, "certificate not reloaded"),
                }
            }
        });
        Ok(this)
    }

    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(Arc::clone(
            &self.current.read().unwrap_or_else(|p| p.into_inner()),
        ))
    }
}
