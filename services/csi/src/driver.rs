//! Picks the services for the mode, builds the cloud they share, and serves them on
//! the CSI socket until shutdown.

use std::future::Future;
use std::sync::Arc;

use anyhow::Context as _;
use overcast_api::csi_v1 as csi;
use overcast_cloud::Disks;
use overcast_clouds::{Role, Settings};
use overcast_runtime::{socket, GrpcLogLayer, GrpcMetrics};
use prometheus_client::registry::Registry;
use tokio::net::UnixListener;
use tonic::transport::Server;

use crate::controller::ControllerService;
use crate::identity::IdentityService;
use crate::node::faults::Faults;
use crate::node::{NodeMetrics, NodeService, NodeState, NodeZone};
use crate::options::Options;
use crate::validation::TopologyKeys;

/// How long a shutdown waits for open connections to finish.
const DRAIN_PERIOD: std::time::Duration = std::time::Duration::from_secs(2);

pub struct Driver {
    options: Options,
    /// `--driver-name`, else the cloud's upstream name.
    driver_name: String,
    /// Removed when the driver is dropped, whichever way it ends.
    socket: socket::Owned,
    listener: UnixListener,
    cloud: Option<Arc<dyn Disks>>,
    /// Where this host is: flags first, then the cloud-config file; or its Node's labels.
    zone: NodeZone,
    /// The zone keys the topology carries (the replaced driver's too).
    topology: TopologyKeys,
    /// The provider-id scheme whose instance is the node id (OpenStack).
    instance_id_from: Option<&'static str>,
    /// NodeGetInfo's attach limit: the flag, else the cloud's.
    max_volumes: u64,
    rescan_on_resize: bool,
    /// How this cloud's volume ids name their disks (for mounts with no record).
    disk_of_volume: overcast_cloud::DiskOfVolume,
    registry: Registry,
    metrics: Arc<GrpcMetrics>,
    node_metrics: Arc<NodeMetrics>,
}

impl Driver {
    /// Builds the cloud (controller modes only: a node needs none) and binds the socket.
    pub async fn start(options: Options) -> anyhow::Result<Self> {
        let socket_path = socket::parse_endpoint(&options.endpoint)?;
        // Before anything else: a cloud this build lacks, or a configuration lacking
        // credentials, is said at once, in any mode (the node plugin's topology comes
        // from its cloud too). The controller's configuration first: it is what a
        // Secret without credentials breaks.
        let mut settings = settings(&options)?;
        let mut registry = Registry::default();
        settings.register_api_metrics(&mut registry);
        let cloud: Option<Arc<dyn Disks>> = if options.mode.controller() {
            let cloud = overcast_clouds::open(Role::CsiController, &settings).await?;
            Some(
                cloud
                    .disks
                    .ok_or_else(|| anyhow::anyhow!("cloud {} has no disks", settings.cloud))?,
            )
        } else {
            None
        };
        let identity = overcast_clouds::node_identity(&settings)?;
        let max_volumes = settings.max_attachments_per_node;
        let rescan_on_resize = options
            .rescan_on_resize
            .unwrap_or_else(|| overcast_clouds::default_rescan_on_resize(&settings));
        let instance_id_from = identity.instance_id_from;
        let disk_of_volume = identity.disk_of_volume;
        let zone = match identity.zone {
            Some(zone) => NodeZone::Known(zone),
            None => NodeZone::FromNodeLabels {
                kubeconfig: options.kubeconfig.clone(),
                wait: std::time::Duration::from_secs(options.node_zone_wait_seconds),
                poll: std::time::Duration::from_secs(1),
            },
        };
        let aliases = overcast_clouds::topology_aliases(&settings)?;
        let topology = TopologyKeys {
            zone_aliases: aliases.zone,
            region_aliases: aliases.region,
        };
        let driver_name = options.driver_name().map_err(anyhow::Error::msg)?;
        let listener = socket::bind(&socket_path)
            .await
            .with_context(|| format!("bind {}", socket_path.display()))?;
        // From here every way out removes it: an error, or a signal ending the start.
        let socket = socket::Owned::new(socket_path);
        let metrics = GrpcMetrics::register(&mut registry, "csi");
        let node_metrics = if options.mode.node() {
            NodeMetrics::register(&mut registry)
        } else {
            Arc::new(NodeMetrics::default())
        };
        Ok(Self {
            options,
            driver_name,
            socket,
            listener,
            cloud,
            zone,
            topology,
            instance_id_from,
            max_volumes,
            rescan_on_resize,
            disk_of_volume,
            registry,
            metrics,
            node_metrics,
        })
    }

    /// Serves until `shutdown` resolves, then removes the socket.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Self {
            options,
            driver_name,
            socket,
            listener,
            cloud,
            zone,
            topology,
            instance_id_from,
            max_volumes,
            rescan_on_resize,
            disk_of_volume,
            registry,
            metrics,
            node_metrics,
        } = self;
        let node_id = options.node_id();

        if let Some(addr) = options.metrics_address {
            // `/healthz` is the deployment's liveness probe: it says this process serves,
            // not that the cloud answers. A cloud outage restarted the controller (and
            // its sidecars with it) into a crash loop whose back-off outlived the outage;
            // the cloud's state is the Probe RPC's `ready` and the operations' metrics.
            let health: overcast_runtime::http::HealthCheck =
                Arc::new(|| Box::pin(async { Ok(()) }));
            let bound = overcast_runtime::http::serve(addr, Arc::new(registry), health).await?;
            tracing::info!(address = %bound, "serving /metrics and /healthz");
        }

        let identity = IdentityService::new(
            driver_name.clone(),
            options.mode.controller(),
            cloud.clone(),
        );
        let controller = cloud.map(|c| {
            csi::controller_server::ControllerServer::new(ControllerService::new(
                c,
                options.default_volume_size,
                topology.clone(),
            ))
        });
        let node = match options.mode.node() {
            true => {
                let state = NodeState::open(&options.node_state_dir).with_context(|| {
                    format!("open node state in {}", options.node_state_dir.display())
                })?;
                node_metrics.records_set_aside(state.set_aside().is_some());
                let faults =
                    Faults::from_env(&options.node_state_dir).map_err(anyhow::Error::msg)?;
                let wait = std::time::Duration::from_secs(options.device_wait_seconds);
                let service = NodeService::new(
                    node_id.clone(),
                    max_volumes,
                    zone,
                    state,
                    wait,
                    Arc::new(overcast_mount::System {
                        by_id: options.device_by_id_dir.clone(),
                        sysfs: options.sysfs_dir.clone(),
                    }),
                )
                .with_rescan_on_resize(rescan_on_resize)
                .with_topology(topology)
                .with_instance_id_from(instance_id_from)
                .with_attachments(match disk_of_volume {
                    // Where ids do not name disks, the attachment kubelet reads does.
                    overcast_cloud::DiskOfVolume::Unknown => {
                        crate::node::attachment::Attachments::Api {
                            kubeconfig: options.kubeconfig.clone(),
                            driver: driver_name.clone(),
                            node: node_id.clone(),
                        }
                    }
                    _ => crate::node::attachment::Attachments::None,
                })
                .with_disk_of_volume(disk_of_volume)
                .with_metrics(node_metrics)
                .with_faults(faults);
                Some(csi::node_server::NodeServer::new(service))
            }
            false => None,
        };
        tracing::info!(
            endpoint = %socket.path().display(),
            driver = %driver_name,
            mode = ?options.mode,
            node.id = %node_id,
            "serving CSI"
        );
        let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
        let server = Server::builder()
            .layer(GrpcLogLayer::new(Some(metrics)))
            .add_service(csi::identity_server::IdentityServer::new(identity))
            .add_optional_service(controller)
            .add_optional_service(node)
            .serve_with_incoming_shutdown(
                overcast_runtime::authority::incoming(listener),
                async move {
                    shutdown.await;
                    let _ = stopping_tx.send(());
                },
            );
        // Graceful shutdown lets calls in flight finish, but the sidecars and kubelet keep
        // idle connections open indefinitely: past the drain period, stop regardless.
        let drain_expired = async move {
            if stopping_rx.await.is_ok() {
                tokio::time::sleep(DRAIN_PERIOD).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let result = tokio::select! {
            r = server => r.context("serve CSI"),
            () = drain_expired => {
                tracing::warn!(period = ?DRAIN_PERIOD, "connections still open after the drain period; stopping");
                Ok(())
            }
        };
        drop(socket);
        result
    }
}

/// The registry's settings from the csi's flags.
fn settings(options: &Options) -> anyhow::Result<Settings> {
    let mut s = Settings::new(options.cloud().map_err(anyhow::Error::msg)?);
    s.cloud_config = options.cloud_config.clone();
    s.node_name = Some(options.node_id());
    s.zone = options.zone.clone();
    s.region = options.region.clone();
    s.local.state_dir = options.state_dir.clone();
    s.controller_state_dir = options.controller_state_dir.clone();
    s.max_attachments_per_node = options
        .max_volumes_per_node
        .or_else(|| overcast_clouds::default_attach_limit(&s))
        .unwrap_or(128);
    s.cluster = options.cluster.clone();
    Ok(s)
}
