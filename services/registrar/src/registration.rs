//! kubelet's plugin registration API on the registration socket, kept alive across
//! kubelet wiping its plugin directory.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use overcast_api::pluginregistration as reg;
use overcast_runtime::{socket, GrpcLogLayer};
use tokio::sync::mpsc;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

/// The CSI plugin API versions we answer kubelet with (what node-driver-registrar sends).
const SUPPORTED_VERSIONS: [&str; 1] = ["1.0.0"];
const CSI_PLUGIN: &str = "CSIPlugin";

#[derive(Clone)]
pub struct Info {
    pub name: String,
    pub endpoint: String,
}

pub enum Outcome {
    Shutdown,
    Rejected(String),
}

struct Registration {
    info: Info,
    verdicts: mpsc::UnboundedSender<reg::RegistrationStatus>,
}

#[tonic::async_trait]
impl reg::registration_server::Registration for Registration {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(reg::PluginInfo {
            r#type: CSI_PLUGIN.to_owned(),
            name: self.info.name.clone(),
            endpoint: self.info.endpoint.clone(),
            supported_versions: SUPPORTED_VERSIONS.iter().map(|v| v.to_string()).collect(),
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        if status.plugin_registered {
            tracing::info!("kubelet registered the plugin");
        }
        let _ = self.verdicts.send(status);
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

/// Serves until `shutdown`, or until kubelet rejects the registration.
pub async fn serve(
    info: Info,
    path: &Path,
    check_every: Duration,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<Outcome> {
    let (verdicts, mut rejected) = mpsc::unbounded_channel::<reg::RegistrationStatus>();
    tokio::pin!(shutdown);
    loop {
        let listener = socket::bind(path).await?;
        tracing::info!(socket = %path.display(), "registration socket ready");
        let service = reg::registration_server::RegistrationServer::new(Registration {
            info: info.clone(),
            verdicts: verdicts.clone(),
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = Server::builder()
            .layer(GrpcLogLayer::new(None))
            .add_service(service)
            .serve_with_incoming_shutdown(overcast_runtime::authority::incoming(listener), async {
                let _ = stop_rx.await;
            });
        tokio::pin!(server);
        let gone = socket_gone(path, check_every);
        tokio::pin!(gone);
        let next = loop {
            tokio::select! {
                r = &mut server => { r?; break None; }
                () = &mut shutdown => break Some(Outcome::Shutdown),
                () = &mut gone => {
                    tracing::warn!(socket = %path.display(), "the registration socket was removed; re-creating it");
                    break None;
                }
                Some(status) = rejected.recv() => {
                    if !status.plugin_registered {
                        break Some(Outcome::Rejected(status.error));
                    }
                }
            }
        };
        let _ = stop_tx.send(());
        // Let the current server finish its last answer (kubelet's Notify) before we go.
        let _ = tokio::time::timeout(Duration::from_millis(500), &mut server).await;
        if let Some(outcome) = next {
            return Ok(outcome);
        }
    }
}

/// Resolves once `path` no longer exists (kubelet removed its plugin directory).
async fn socket_gone(path: &Path, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        if !path.exists() {
            return;
        }
    }
}
