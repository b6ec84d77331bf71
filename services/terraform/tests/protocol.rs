//! The provider binary as Terraform drives it, without Terraform: started with the magic
//! cookie and a client certificate, it prints go-plugin's handshake line, serves the
//! Provider service over mutual TLS on the socket it names, answers the schema, answers
//! bad requests with diagnostics (not a crash), refuses a client holding
//! another certificate, and ends on go-plugin's `Shutdown`. Without the cookie it says it
//! is a plugin and exits 1.

// A helper here that meets the unexpected fails the test: that is what it is for.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use overcast_api::goplugin::grpc_controller_client::GrpcControllerClient;
use overcast_api::tfplugin6::provider_client::ProviderClient;
use overcast_api::tfplugin6::{
    attribute_path, get_provider_schema, read_data_source, read_resource, validate_resource_config,
    DynamicValue,
};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

const BIN: &str = env!("CARGO_BIN_EXE_terraform-provider-overcast");
const COOKIE: (&str, &str) = (
    "TF_PLUGIN_MAGIC_COOKIE",
    "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2",
);

/// Trusts exactly the certificate the handshake line carried, as go-plugin's client does.
#[derive(Debug)]
struct PinnedServer(CertificateDer<'static>, Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for PinnedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        (end_entity.as_ref() == self.0.as_ref())
            .then(ServerCertVerified::assertion)
            .ok_or(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            ))
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.1.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.1.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.1.signature_verification_algorithms.supported_schemes()
    }
}

/// A client certificate and key (P-256, as rcgen makes them).
fn identity() -> (String, CertificateDer<'static>, PrivateKeyDer<'static>) {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let key = PrivateKeyDer::try_from(made.signing_key.serialize_der()).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(made.cert.der());
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    let pem = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    );
    (pem, made.cert.der().clone(), key)
}

/// A gRPC channel to the plugin at `socket` over TLS as `cert`/`key`, trusting `server`.
async fn channel(
    socket: String,
    server: CertificateDer<'static>,
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedServer(server, provider)))
        .with_client_auth_cert(vec![cert], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    tonic::transport::Endpoint::try_from("http://plugin")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_| {
            let (connector, socket) = (connector.clone(), socket.clone());
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                let tls = connector
                    .connect(ServerName::try_from("localhost").unwrap(), stream)
                    .await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        }))
        .await
}

#[test]
fn without_terraform_s_cookie_it_says_it_is_a_plugin() {
    let out = Command::new(BIN).env_remove(COOKIE.0).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("This binary is a plugin"));
    assert!(
        out.stdout.is_empty(),
        "no handshake line without the cookie"
    );
}

#[tokio::test]
async fn it_serves_the_protocol_over_mutual_tls_to_terraform_s_certificate_only() {
    let (pem, cert, key) = identity();
    let mut child = Command::new(BIN)
        .env(COOKIE.0, COOKIE.1)
        .env("PLUGIN_PROTOCOL_VERSIONS", "5,6")
        .env("PLUGIN_CLIENT_CERT", &pem)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let parts: Vec<&str> = line.trim_end().split('|').collect();
    assert_eq!(&parts[..3], ["1", "6", "unix"], "{line}");
    assert_eq!(parts[4], "grpc");
    let server = CertificateDer::from(
        base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(parts[5])
            .expect("the server certificate, base64 without padding"),
    );
    let socket = parts[3].to_owned();

    let ch = channel(socket.clone(), server.clone(), cert, key)
        .await
        .expect("connected as Terraform");
    let mut provider = ProviderClient::new(ch.clone());
    let schema = provider
        .get_provider_schema(get_provider_schema::Request {})
        .await
        .unwrap()
        .into_inner();
    let block = schema.provider.unwrap().block.unwrap();
    let password = block
        .attributes
        .iter()
        .find(|a| a.name == "password")
        .unwrap();
    assert!(password.sensitive && password.required);
    // Bad requests get diagnostics, never a crash: a value that is not msgpack, a type
    // it has not, a configuration it refuses (naming the attribute), a call before the
    // provider is configured.
    let garbage = provider
        .read_resource(read_resource::Request {
            type_name: "ovirt_vm".into(),
            current_state: Some(DynamicValue {
                msgpack: vec![0xc1, 0xff, 0x00],
                json: Vec::new(),
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        garbage.diagnostics[0].summary, "Malformed value from Terraform",
        "{garbage:?}"
    );
    let unknown = provider
        .validate_resource_config(validate_resource_config::Request {
            type_name: "ovirt_nothing".into(),
            config: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        unknown.diagnostics[0].summary.contains("ovirt_nothing"),
        "{unknown:?}"
    );
    // {"vm_type": "huge"} in msgpack.
    let mut config = vec![0x81, 0xa7];
    config.extend_from_slice(b"vm_type");
    config.push(0xa4);
    config.extend_from_slice(b"huge");
    let refused = provider
        .validate_resource_config(validate_resource_config::Request {
            type_name: "ovirt_vm".into(),
            config: Some(DynamicValue {
                msgpack: config.clone(),
                json: Vec::new(),
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let at = refused.diagnostics[0].attribute.clone().unwrap();
    assert_eq!(
        at.steps[0].selector,
        Some(attribute_path::step::Selector::AttributeName(
            "vm_type".into()
        )),
        "{refused:?}"
    );
    let early = provider
        .read_data_source(read_data_source::Request {
            type_name: "ovirt_templates".into(),
            config: Some(DynamicValue {
                msgpack: vec![0x80],
                json: Vec::new(),
            }),
            provider_meta: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        early.diagnostics[0].summary.contains("not configured"),
        "{early:?}"
    );

    // Someone else's certificate: the TLS handshake fails, nothing is served.
    let (_, other_cert, other_key) = identity();
    let stranger = channel(socket, server, other_cert, other_key).await;
    let refused = match stranger {
        Err(_) => true,
        Ok(ch) => ProviderClient::new(ch)
            .get_provider_schema(get_provider_schema::Request {})
            .await
            .is_err(),
    };
    assert!(refused, "a client with another certificate was served");

    // go-plugin's Shutdown ends the process.
    GrpcControllerClient::new(ch)
        .shutdown(overcast_api::goplugin::Empty {})
        .await
        .unwrap();
    for _ in 0..100 {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    panic!("the plugin did not end on Shutdown");
}
