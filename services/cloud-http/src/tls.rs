//! rustls client configurations: system roots, a cloud's own CA bundle, or — only when
//! the operator sets `insecure` — no verification at all. A pinned SHA-1 thumbprint
//! (vSphere's `thumbprint`) admits the one certificate it names where the roots do not
//! (an unknown issuer, another name), as govmomi's client does.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{ring, verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// A leaf certificate's SHA-1 thumbprint from its usual spelling (`AB:CD:…`, colons and
/// case optional): 20 bytes.
pub fn parse_thumbprint(text: &str) -> Result<Vec<u8>, String> {
    let hex: String = text.chars().filter(|c| *c != ':').collect();
    let bytes: Option<Vec<u8>> = (hex.len() == 40)
        .then(|| {
            (0..40)
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                .collect()
        })
        .flatten();
    bytes.ok_or_else(|| {
        "the thumbprint is not a SHA-1 fingerprint (20 hex bytes, as AB:CD:…)".to_owned()
    })
}

pub fn client_config(
    ca_pem: Option<&str>,
    insecure: bool,
    thumbprint: Option<&str>,
) -> Result<ClientConfig, String> {
    let provider = Arc::new(ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    if insecure {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Verifier {
                check: Check::Any,
                provider,
            }))
            .with_no_client_auth());
    }
    let mut roots = RootCertStore::empty();
    match ca_pem {
        Some(pem) => {
            let certs: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(pem.as_bytes())
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("the CA bundle is not PEM: {e}"))?;
            if certs.is_empty() {
                return Err("the CA bundle holds no certificate".into());
            }
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| format!("a CA certificate is unusable: {e}"))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for c in found.certs {
                // One odd system certificate must not take the others with it.
                let _ = roots.add(c);
            }
        }
    }
    let Some(thumbprint) = thumbprint else {
        return Ok(builder.with_root_certificates(roots).with_no_client_auth());
    };
    let sha1 = parse_thumbprint(thumbprint)?;
    let roots = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::clone(&provider),
    )
    .build()
    .map_err(|e| e.to_string())?;
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Verifier {
            check: Check::Pinned { roots, sha1 },
            provider,
        }))
        .with_no_client_auth())
}

/// A verifier of our own: its [`Check`] decides on the certificate; the handshake's
/// signatures are checked either way (so the session is at least with the holder of the
/// presented key).
#[derive(Debug)]
struct Verifier {
    check: Check,
    provider: Arc<CryptoProvider>,
}

#[derive(Debug)]
enum Check {
    /// Any certificate (`insecure`).
    Any,
    /// The roots' verdict, and where they do not know the certificate (its issuer, or the
    /// name it is for), the pinned thumbprint's: the leaf's SHA-1 must be it.
    Pinned {
        roots: Arc<rustls::client::WebPkiServerVerifier>,
        sha1: Vec<u8>,
    },
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        leaf: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        let Check::Pinned { roots, sha1 } = &self.check else {
            return Ok(ServerCertVerified::assertion());
        };
        match roots.verify_server_cert(leaf, intermediates, name, ocsp, now) {
            Err(Error::InvalidCertificate(
                CertificateError::UnknownIssuer
                | CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. },
            )) => {
                let sum = ::ring::digest::digest(
                    &::ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
                    leaf.as_ref(),
                );
                if sum.as_ref() == sha1.as_slice() {
                    Ok(ServerCertVerified::assertion())
                } else {
                    Err(Error::General(
                        "the certificate's thumbprint is not the one configured".into(),
                    ))
                }
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
