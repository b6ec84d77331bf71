//! How a Terraform provider is served, as HashiCorp's go-plugin serves one and Terraform
//! (and OpenTofu) start it: the magic cookie in the environment proves the caller is
//! Terraform; the provider listens on a fresh Unix socket and says where on one line of
//! stdout — `1|6|unix|<socket>|grpc|<certificate>` (go-plugin's core protocol 1, plugin
//! protocol 6); with AutoMTLS (`PLUGIN_CLIENT_CERT` set) the connection is TLS with a
//! certificate made at start, whose DER (base64, unpadded) ends that line, and the only
//! client admitted is the one holding the certificate Terraform passed.
//!
//! go-plugin's certificates are self-signed CAs, which webpki refuses as an end entity;
//! the client is therefore admitted by pinning its exact certificate (and checking its
//! handshake signature), which is stricter than a chain to it. Their keys are ECDSA
//! P-521, which rustls on ring cannot verify: the verifier adds P-521 with SHA-512
//! (RustCrypto's `p521`) to ring's algorithms — without it Terraform's client, finding no
//! offered scheme its key can sign with, sends no certificate at all.

use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{
    alg_id, AlgorithmIdentifier, CertificateDer, InvalidSignature, PrivateKeyDer,
    SignatureVerificationAlgorithm, UnixTime,
};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// The cookie Terraform sets for its providers (go-plugin's `MagicCookieKey`/`Value`).
pub const MAGIC_COOKIE_KEY: &str = "TF_PLUGIN_MAGIC_COOKIE";
pub const MAGIC_COOKIE_VALUE: &str =
    "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2";
/// The plugin protocol this provider speaks.
pub const PROTOCOL_VERSION: u32 = 6;

/// What Terraform asked for, read from the environment.
#[derive(Debug)]
pub struct Invocation {
    /// `PLUGIN_CLIENT_CERT`: the PEM certificate of the one client to admit.
    pub client_cert: Option<Vec<u8>>,
}

/// Reads the environment as go-plugin does; an error says why this is not a plugin run.
pub fn invocation(env: &dyn Fn(&str) -> Option<String>) -> Result<Invocation, String> {
    if env(MAGIC_COOKIE_KEY).as_deref() != Some(MAGIC_COOKIE_VALUE) {
        return Err(
            "This binary is a plugin. These are not meant to be executed directly. Please execute the program that consumes these plugins, which will load any plugins automatically"
                .into(),
        );
    }
    // Terraform lists the versions it speaks; none given means it takes what is offered.
    if let Some(list) = env("PLUGIN_PROTOCOL_VERSIONS") {
        let speaks = list
            .split(',')
            .any(|v| v.trim().parse::<u32>() == Ok(PROTOCOL_VERSION));
        if !speaks {
            return Err(format!(
                "this provider speaks plugin protocol {PROTOCOL_VERSION}; the caller speaks {list}"
            ));
        }
    }
    Ok(Invocation {
        client_cert: env("PLUGIN_CLIENT_CERT")
            .filter(|c| !c.is_empty())
            .map(String::into_bytes),
    })
}

/// The handshake line for a socket at `socket`, with the server certificate when TLS.
pub fn handshake_line(socket: &std::path::Path, cert: Option<&CertificateDer<'_>>) -> String {
    let cert = cert
        .map(|c| base64::engine::general_purpose::STANDARD_NO_PAD.encode(c.as_ref()))
        .unwrap_or_default();
    format!("1|{PROTOCOL_VERSION}|unix|{}|grpc|{cert}", socket.display())
}

/// The server side of AutoMTLS: a certificate for `localhost` (the name go-plugin's
/// client checks), HTTP/2 by ALPN (gRPC requires it), and only `client_pem` admitted.
pub fn server_tls(
    client_pem: &[u8],
) -> anyhow::Result<(Arc<rustls::ServerConfig>, CertificateDer<'static>)> {
    use rustls::pki_types::pem::PemObject;
    let client = CertificateDer::from_pem_slice(client_pem)
        .map_err(|e| anyhow::anyhow!("PLUGIN_CLIENT_CERT is not a PEM certificate: {e}"))?;
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
    let cert = made.cert.der().clone();
    let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
        .map_err(|e| anyhow::anyhow!("the plugin's key: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(Pinned {
        cert: client.into_owned(),
        algorithms: with_p521(&provider.signature_verification_algorithms),
    });
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert.clone()], key)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok((Arc::new(config), cert))
}

/// Admits exactly one client certificate.
#[derive(Debug)]
struct Pinned {
    cert: CertificateDer<'static>,
    algorithms: WebPkiSupportedAlgorithms,
}

/// ECDSA on P-521 with SHA-512: go-plugin's certificates' keys.
#[derive(Debug)]
struct EcdsaP521Sha512;

impl SignatureVerificationAlgorithm for EcdsaP521Sha512 {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        use p521::ecdsa::signature::Verifier;
        let key =
            p521::ecdsa::VerifyingKey::from_sec1_bytes(public_key).map_err(|_| InvalidSignature)?;
        let signature =
            p521::ecdsa::Signature::from_der(signature).map_err(|_| InvalidSignature)?;
        key.verify(message, &signature)
            .map_err(|_| InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ECDSA_P521
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ECDSA_SHA512
    }
}

static P521: EcdsaP521Sha512 = EcdsaP521Sha512;
static P521_ONLY: [&dyn SignatureVerificationAlgorithm; 1] = [&P521];

/// `base` and P-521. The algorithm tables are `'static` in rustls: made once a process.
fn with_p521(base: &WebPkiSupportedAlgorithms) -> WebPkiSupportedAlgorithms {
    let mut all: Vec<&'static dyn SignatureVerificationAlgorithm> = base.all.to_vec();
    all.push(&P521);
    let mut mapping = base.mapping.to_vec();
    mapping.push((SignatureScheme::ECDSA_NISTP521_SHA512, &P521_ONLY[..]));
    WebPkiSupportedAlgorithms {
        all: Vec::leak(all),
        mapping: Vec::leak(mapping),
    }
}

impl ClientCertVerifier for Pinned {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.cert.as_ref() {
            Ok(ClientCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A fresh socket path in a directory only this process uses.
pub fn socket_dir() -> std::io::Result<(tempfile::TempDir, PathBuf)> {
    let dir = tempfile::Builder::new().prefix("overcast-tf").tempdir()?;
    let path = dir.path().join("plugin.sock");
    Ok((dir, path))
}

/// The provider the binary was run as, by its file name in the plugin directory
/// (`terraform-provider-<name>_v<version>`): `dvp`, `openstack`, else `ovirt`.
pub fn installed_as(argv0: &str) -> &'static str {
    let file = std::path::Path::new(argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let is = |name: &str| {
        let full = format!("terraform-provider-{name}");
        file == full || file.starts_with(&format!("{full}_"))
    };
    if is("dvp") {
        "dvp"
    } else if is("openstack") {
        "openstack"
    } else {
        "ovirt"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_installed_name_chooses_the_provider() {
        assert_eq!(
            installed_as(
                "/p/registry.terraform.io/overcast/dvp/1.0.0/linux_amd64/terraform-provider-dvp_v1.0.0"
            ),
            "dvp"
        );
        assert_eq!(installed_as("terraform-provider-dvp"), "dvp");
        assert_eq!(
            installed_as("/p/terraform-provider-openstack/openstack/1.54.1/linux_amd64/terraform-provider-openstack_v1.54.1"),
            "openstack"
        );
        assert_eq!(installed_as("/p/terraform-provider-ovirt_v2.2.0"), "ovirt");
        assert_eq!(installed_as("/usr/bin/terraform-provider-dvpx"), "ovirt");
        assert_eq!(installed_as("terraform-provider-overcast"), "ovirt");
    }

    #[test]
    fn only_terraform_s_cookie_and_protocol_make_a_plugin_run() {
        let none = |_: &str| None;
        assert!(invocation(&none).unwrap_err().contains("is a plugin"));
        let env = |k: &str| match k {
            MAGIC_COOKIE_KEY => Some(MAGIC_COOKIE_VALUE.to_owned()),
            "PLUGIN_PROTOCOL_VERSIONS" => Some("5".to_owned()),
            _ => None,
        };
        assert!(invocation(&env).unwrap_err().contains("protocol 6"));
        let env = |k: &str| match k {
            MAGIC_COOKIE_KEY => Some(MAGIC_COOKIE_VALUE.to_owned()),
            "PLUGIN_PROTOCOL_VERSIONS" => Some("5,6".to_owned()),
            _ => None,
        };
        assert!(invocation(&env).unwrap().client_cert.is_none());
    }

    #[test]
    fn the_handshake_line_is_go_plugin_s() {
        let cert = CertificateDer::from(vec![1u8, 2, 3, 4]);
        assert_eq!(
            handshake_line(std::path::Path::new("/tmp/x/plugin.sock"), Some(&cert)),
            "1|6|unix|/tmp/x/plugin.sock|grpc|AQIDBA"
        );
        assert_eq!(
            handshake_line(std::path::Path::new("/s"), None),
            "1|6|unix|/s|grpc|"
        );
    }
}
