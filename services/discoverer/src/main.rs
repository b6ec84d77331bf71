//! `discoverer`: the cloud-data-discoverer of the Deckhouse cloud-provider modules.
//! Every `--discovery-period` it asks the cloud what it offers and publishes it —
//! Secret `kube-system/d8-cloud-provider-discovery-data`, ConfigMap
//! `kube-system/d8-cloud-provider-conditions`, the `for-cluster-autoscaler`
//! InstanceTypesCatalog — by server-side apply and only when the content changed; it
//! reports disks the cluster made that no PersistentVolume references (never deletes
//! them). A failed cloud request is retried with the suite's backoff (from 3 s, doubling
//! to 30 s, jittered: `overcast_runtime::backoff`) and leaves the last good objects in
//! place.

mod metrics;
mod publish;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use overcast_cloud::{CloudName, Discovery};
use overcast_cloud_local::cloud_config::LocalFlags;
use overcast_clouds::Role;
use overcast_runtime::LogFormat;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "discoverer",
    version,
    about = "Publishes what the cloud offers to the cluster"
)]
struct Options {
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Cloud provider: local, dvp, openstack, vsphere, zvirt.
    #[arg(long, env = "OVERCAST_CLOUD", default_value = "local")]
    cloud: CloudName,
    /// Local cloud: the CSI controller's state directory.
    #[arg(long, env = "CSI_STATE_DIR", default_value = "/var/lib/overcast/local")]
    state_dir: PathBuf,
    #[command(flatten)]
    local: LocalFlags,
    /// Seconds between discoveries.
    #[arg(long, default_value_t = 3600)]
    discovery_period: u64,
    /// /healthz answers 503 once no cycle has both heard the cloud and published for this
    /// many seconds (0: three discovery periods, at least 10 minutes), so a wedged or
    /// cut-off discoverer is restarted and seen, not reported alive forever.
    #[arg(long, default_value_t = 0)]
    stale_after: u64,
    #[arg(long, default_value = "127.0.0.1:8081")]
    metrics_address: std::net::SocketAddr,
    #[arg(long, env = "LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

const BACKOFF_START: Duration = Duration::from_secs(3);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = Options::parse();
    overcast_runtime::logging::init(o.log_format);
    // The cloud first: a wrong or missing cloud setting is said before anything is
    // contacted.
    let mut settings = o.local.settings(o.cloud);
    settings.local.state_dir = o.state_dir.clone();
    settings.kubeconfig = o.kubeconfig.clone();
    let mut registry = prometheus_client::registry::Registry::default();
    settings.register_api_metrics(&mut registry);
    let cloud: Arc<dyn Discovery> = overcast_clouds::open(Role::Discoverer, &settings)
        .await?
        .discovery
        .ok_or_else(|| anyhow::anyhow!("cloud {} has no discovery", settings.cloud))?;
    let client = overcast_kube::client(o.kubeconfig.as_deref()).await?;
    let metrics = metrics::Metrics::register(&mut registry);
    let stale_after = match o.stale_after {
        0 => Duration::from_secs(o.discovery_period.saturating_mul(3).max(600)),
        n => Duration::from_secs(n),
    };
    let freshness = Arc::new(publish::Freshness::new());
    let health: overcast_runtime::http::HealthCheck = {
        let freshness = Arc::clone(&freshness);
        Arc::new(move || {
            let verdict = freshness.check(stale_after);
            Box::pin(async move { verdict })
        })
    };
    let bound =
        overcast_runtime::http::serve(o.metrics_address, Arc::new(registry), health).await?;
    tracing::info!(address = %bound, "serving /metrics and /healthz");

    let publisher = publish::Publisher {
        client,
        cloud,
        metrics,
        freshness,
    };
    let period = Duration::from_secs(o.discovery_period);
    let mut retry = overcast_runtime::backoff::Retry::new(BACKOFF_START, BACKOFF_MAX);
    let cycles = async {
        loop {
            let wait = if publisher.cycle().await {
                retry.succeeded();
                period
            } else {
                retry.failed()
            };
            tokio::time::sleep(wait).await;
        }
    };
    tokio::select! {
        () = cycles => {}
        () = overcast_runtime::shutdown::signal_received() => {}
    }
    Ok(())
}
