//! `terraform-provider-overcast`: a Terraform/OpenTofu provider speaking plugin protocol 6,
//! started by Terraform as go-plugin starts a provider ([`plugin`]).
//!
//! Installed as `terraform-provider-ovirt` it serves `ovirt` (`overcast_terraform_zvirt`),
//! with the oVirt provider's names and schemas, on Overcast's zVirt engine client; installed
//! as `terraform-provider-dvp`, `dvp` (`overcast_terraform_dvp`) on its DVP client; as
//! `terraform-provider-openstack`, `openstack` (`overcast_terraform_openstack`, with
//! terraform-provider-openstack 1.54.1's names) on its OpenStack client; the core
//! (`overcast_terraform_core`) plans and applies the same way for every resource. The
//! transport (its `plugin`): go-plugin's handshake, AutoMTLS (the client pinned to
//! Terraform's certificate, P-521 verified), the Provider service and go-plugin's
//! controller on a Unix socket.

mod migrate;
mod shapes;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use overcast_api::goplugin::grpc_controller_server::{GrpcController, GrpcControllerServer};
use overcast_api::tfplugin6::provider_server::ProviderServer;
use overcast_terraform_core::plugin;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixListener;
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

/// go-plugin's controller: Terraform's `Shutdown` ends the server.
struct Controller(Arc<Notify>);

#[tonic::async_trait]
impl GrpcController for Controller {
    async fn shutdown(
        &self,
        _request: Request<overcast_api::goplugin::Empty>,
    ) -> Result<Response<overcast_api::goplugin::Empty>, Status> {
        self.0.notify_one();
        Ok(Response::new(overcast_api::goplugin::Empty {}))
    }
}

trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// A connection, plain or TLS, as tonic serves it.
struct Conn(Box<dyn Stream>);

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ();
    fn connect_info(&self) {}
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Not as a plugin: a state written by Deckhouse's zVirt or DVP layouts, rewritten for ours.
    if std::env::args().nth(1).as_deref() == Some("migrate-state") {
        if let Err(why) = migrate::run() {
            eprintln!("{why}");
            std::process::exit(1);
        }
        return Ok(());
    }
    let run = match plugin::invocation(&|k| std::env::var(k).ok()) {
        Ok(run) => run,
        Err(why) => {
            eprintln!("{why}");
            std::process::exit(1);
        }
    };
    let (_dir, socket) = plugin::socket_dir()?;
    let listener = UnixListener::bind(&socket)?;
    let (tls, cert) = match &run.client_cert {
        Some(pem) => {
            let (config, cert) = plugin::server_tls(pem)?;
            (Some(tokio_rustls::TlsAcceptor::from(config)), Some(cert))
        }
        None => (None, None),
    };
    // The one line Terraform reads; everything else goes to stderr, which it logs.
    println!("{}", plugin::handshake_line(&socket, cert.as_ref()));
    let incoming = futures::stream::unfold((listener, tls), |(listener, tls)| async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => return Some((Err(e), (listener, tls))),
            };
            let conn = match &tls {
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(s) => Conn(Box::new(s)),
                    // A client without Terraform's certificate: refused, the next one awaited.
                    Err(e) => {
                        eprintln!("a connection refused: {e}");
                        continue;
                    }
                },
                None => Conn(Box::new(stream)),
            };
            return Some((Ok::<_, std::io::Error>(conn), (listener, tls)));
        }
    });
    let stop = Arc::new(Notify::new());
    let stopped = Arc::clone(&stop);
    let mut builder = tonic::transport::Server::builder();
    // Terraform runs the binary under the name it is installed as in the plugin
    // directory: `terraform-provider-dvp_v…` serves `dvp`, `…-openstack_v…` `openstack`,
    // any other name `ovirt`.
    let argv0 = std::env::args().next().unwrap_or_default();
    let router = match plugin::installed_as(&argv0) {
        "dvp" => builder.add_service(ProviderServer::new(overcast_terraform_dvp::server())),
        "openstack" => {
            builder.add_service(ProviderServer::new(overcast_terraform_openstack::server()))
        }
        _ => builder.add_service(ProviderServer::new(overcast_terraform_zvirt::server())),
    };
    router
        .add_service(GrpcControllerServer::new(Controller(stop)))
        .serve_with_incoming_shutdown(incoming, async move {
            tokio::select! {
                _ = stopped.notified() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        })
        .await?;
    Ok(())
}
