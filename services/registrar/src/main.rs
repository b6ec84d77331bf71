//! `registrar`: what node-driver-registrar and livenessprobe do, in one small process.
//!
//! It learns the driver's name from the driver itself, serves kubelet's plugin
//! registration API on `<plugins_registry>/<name>-reg.sock` (re-created whenever kubelet
//! wipes the directory), exits non-zero when kubelet rejects the registration (so the pod
//! restarts, as users of the upstream sidecar expect), and answers `/healthz` by probing
//! the driver.

mod health;
mod registration;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use overcast_api::csi_v1 as csi;
use overcast_runtime::{client, socket, LogFormat};

#[derive(Debug, Clone, Parser)]
#[command(
    name = "registrar",
    version,
    about = "Registers a CSI driver with kubelet and reports its health"
)]
struct Options {
    /// The CSI driver's socket, as this process sees it.
    #[arg(long, env = "ADDRESS", default_value = "unix:///csi/csi.sock")]
    csi_address: String,

    /// The CSI driver's socket as kubelet sees it (what kubelet will dial).
    #[arg(long, env = "DRIVER_REG_SOCK_PATH")]
    kubelet_registration_path: PathBuf,

    /// kubelet's plugin registration directory.
    #[arg(
        long,
        env = "PLUGIN_REGISTRATION_DIR",
        default_value = "/var/lib/kubelet/plugins_registry"
    )]
    plugin_registration_dir: PathBuf,

    /// Serve /healthz (and /metrics) here.
    #[arg(long, env = "HEALTH_ADDRESS", default_value = "0.0.0.0:9809")]
    health_address: SocketAddr,

    /// How long the driver has to answer a health Probe.
    #[arg(long, default_value_t = 1000)]
    probe_timeout_ms: u64,

    /// How often to check that the registration socket still exists.
    #[arg(long, default_value_t = 1000)]
    socket_check_interval_ms: u64,

    #[arg(long, env = "LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

// Not `#[tokio::main]`: SIGTERM is caught from the first instruction, as the driver's.
fn main() -> anyhow::Result<()> {
    overcast_runtime::shutdown::run(registrar)
}

async fn registrar(mut signals: overcast_runtime::shutdown::Signals) -> anyhow::Result<()> {
    let options = Options::parse();
    overcast_runtime::logging::init(options.log_format);
    let csi_path = socket::parse_endpoint(&options.csi_address)?;
    let channel = client::unix_channel(&csi_path, None);

    let name = tokio::select! {
        name = driver_name(channel.clone()) => name,
        () = signals.received() => return Ok(()),
    };
    let reg_socket = options
        .plugin_registration_dir
        .join(format!("{name}-reg.sock"));
    tracing::info!(driver = %name, socket = %reg_socket.display(), "registering with kubelet");

    let probe_channel = client::unix_channel(
        &csi_path,
        Some(Duration::from_millis(options.probe_timeout_ms)),
    );
    let health = health::check(probe_channel, reg_socket.clone());
    let registry = Arc::new(prometheus_client::registry::Registry::default());
    let bound = overcast_runtime::http::serve(options.health_address, registry, health)
        .await
        .with_context(|| format!("serve /healthz on {}", options.health_address))?;
    tracing::info!(address = %bound, "serving /healthz");

    let info = registration::Info {
        name,
        endpoint: options.kubelet_registration_path.display().to_string(),
    };
    let check = Duration::from_millis(options.socket_check_interval_ms);
    let outcome = registration::serve(
        info,
        &reg_socket,
        check,
        async move { signals.received().await },
    )
    .await;
    socket::remove(&reg_socket);
    match outcome? {
        registration::Outcome::Shutdown => Ok(()),
        registration::Outcome::Rejected(reason) => {
            tracing::error!(%reason, "kubelet rejected the registration; exiting so the pod restarts");
            std::process::exit(1);
        }
    }
}

/// Asks the driver its name, retrying with backoff until it answers: the driver's
/// container may start after ours.
async fn driver_name(channel: tonic::transport::Channel) -> String {
    let mut identity = csi::identity_client::IdentityClient::new(channel);
    let mut pause = Duration::from_millis(100);
    loop {
        match identity.get_plugin_info(csi::GetPluginInfoRequest {}).await {
            Ok(r) if !r.get_ref().name.is_empty() => return r.into_inner().name,
            Ok(_) => tracing::warn!("the driver answered GetPluginInfo with no name; retrying"),
            Err(e) => {
                tracing::info!(code = ?e.code(), message = e.message(), "waiting for the CSI driver")
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}
