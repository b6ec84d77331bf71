//! `ccm`: the Overcast cloud-controller-manager.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Api;
use overcast_ccm::addresses::{AddressPolicy, Cidr};
use overcast_ccm::leader::Election;
use overcast_ccm::leader::{DEFAULT_LEASE_NAME, DEFAULT_LEASE_NAMESPACE};
use overcast_ccm::metrics::Metrics;
use overcast_ccm::nodes::guard::DeletionGuard;
use overcast_ccm::nodes::{NodeSync, Parts};
use overcast_ccm::services::{ServiceSync, FINALIZER};
use overcast_ccm::MANAGER;
use overcast_cloud::local::cloud_config::{LocalFlags, LocalSettings};
use overcast_cloud::local::instances::LocalInstances;
use overcast_cloud::local::lb::{LocalLoadBalancers, Pool, DEFAULT_POOL};
use overcast_cloud::Cloud;
use overcast_runtime::LogFormat;
use tokio::sync::Notify;

#[derive(Debug, Clone, Parser)]
#[command(name = "ccm", version, about = "Overcast cloud-controller-manager")]
struct Options {
    /// kubeconfig to use; in-cluster configuration when unset.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Cloud provider.
    #[arg(long, env = "OVERCAST_CLOUD", default_value = "local")]
    cloud: String,
    /// Controllers to run: node, node-lifecycle, service, route (comma-separated; * for all).
    #[arg(long, default_value = "*", value_delimiter = ',')]
    controllers: Vec<String>,
    #[command(flatten)]
    local: LocalFlags,
    /// Local cloud: where load-balancer addresses come from (default: the cloud-config
    /// file's loadBalancerPool, else 127.240.0.0/16).
    #[arg(long)]
    lb_pool: Option<Pool>,
    /// Also serve Services with this spec.loadBalancerClass (besides those with none).
    #[arg(long)]
    load_balancer_class: Option<String>,
    /// Full node sync at least this often (seconds); changes trigger one sooner.
    #[arg(long, default_value_t = 60)]
    node_sync_period: u64,
    /// Nodes a sync works on at once.
    #[arg(long, default_value_t = 16)]
    node_sync_concurrency: usize,
    /// Node lifecycle: delete at most this percentage of the cluster's nodes (rounded
    /// up) per --node-deletion-window; a sync that would delete more deletes none and
    /// reports it. 0 never deletes, 100 turns the guard off.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u8).range(0..=100))]
    node_deletion_max_percent: u8,
    /// The window of --node-deletion-max-percent, in seconds.
    #[arg(long, default_value_t = 600)]
    node_deletion_window: u64,
    #[arg(long, value_delimiter = ',')]
    internal_subnets: Vec<Cidr>,
    #[arg(long, value_delimiter = ',')]
    external_subnets: Vec<Cidr>,
    #[arg(long, value_delimiter = ',')]
    excluded_subnets: Vec<Cidr>,
    #[arg(long, value_delimiter = ',')]
    address_sort_order: Vec<Cidr>,
    /// Run only while holding the leader lease.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    #[arg(long, default_value = DEFAULT_LEASE_NAMESPACE)]
    leader_elect_namespace: String,
    #[arg(long, default_value = DEFAULT_LEASE_NAME)]
    leader_elect_lease_name: String,
    /// This replica's identity in the lease (default: hostname and pid).
    #[arg(long)]
    leader_elect_identity: Option<String>,
    /// Serve /metrics and /healthz here.
    #[arg(long, default_value = "0.0.0.0:10258")]
    metrics_address: std::net::SocketAddr,
    #[arg(long, env = "LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

/// What the node cache drops: managedFields and the image list are most of a Node's
/// size (memory grows with the cluster: BENCHMARKS.md) and no controller reads them;
/// every write is a patch, so nothing dropped here is ever written back.
fn slim_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(status) = node.status.as_mut() {
        status.images = None;
    }
}

impl Options {
    fn runs(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == "*" || c == controller)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = Options::parse();
    overcast_runtime::logging::init(o.log_format);
    let client = overcast_kube::client(o.kubeconfig.as_deref()).await?;
    let cloud = build_cloud(&o)?;

    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let health: overcast_runtime::http::HealthCheck = Arc::new(|| Box::pin(async { Ok(()) }));
    let bound =
        overcast_runtime::http::serve(o.metrics_address, Arc::new(registry), health).await?;
    tracing::info!(address = %bound, "serving /metrics and /healthz");

    if o.leader_elect {
        let election = Election {
            name: o.leader_elect_lease_name.clone(),
            identity: o.leader_elect_identity.clone().unwrap_or_else(|| {
                format!(
                    "{}_{}",
                    overcast_runtime::host::hostname_or_localhost(),
                    std::process::id()
                )
            }),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        };
        let leases: Api<Lease> = Api::namespaced(client.clone(), &o.leader_elect_namespace);
        election.acquire(&leases).await;
        tokio::spawn(async move {
            election.hold(&leases).await;
            // Another replica leads now: stop at once rather than act twice.
            std::process::exit(1);
        });
    }

    let nodes_api: Api<Node> = Api::all(client.clone());
    let (nodes, writer) = reflector::store();
    let node_changed = Arc::new(Notify::new());
    let svc_changed = Arc::new(Notify::new());
    {
        let (n, s) = (Arc::clone(&node_changed), Arc::clone(&svc_changed));
        let stream = watcher(nodes_api.clone(), watcher::Config::default())
            .modify(slim_node)
            .reflect(writer)
            .applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                if ev.is_ok() {
                    n.notify_one();
                    s.notify_one();
                }
            }
        });
    }
    nodes.wait_until_ready().await.context("node watch")?;
    let policy = AddressPolicy {
        internal_subnets: o.internal_subnets.clone(),
        external_subnets: o.external_subnets.clone(),
        excluded_subnets: o.excluded_subnets.clone(),
        sort_order: o.address_sort_order.clone(),
    };
    let mut tasks = Vec::new();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: MANAGER.into(),
            instance: None,
        },
    );

    let parts = Parts {
        initialize: o.runs("node"),
        lifecycle: o.runs("node-lifecycle"),
    };
    match (&cloud.instances, parts.initialize || parts.lifecycle) {
        (Some(instances), true) => {
            let (instances, nodes, metrics, notify) = (
                Arc::clone(instances),
                nodes.clone(),
                Arc::clone(&metrics),
                Arc::clone(&node_changed),
            );
            let period = Duration::from_secs(o.node_sync_period);
            let concurrency = o.node_sync_concurrency;
            let api = nodes_api.clone();
            let guard = DeletionGuard::new(
                o.node_deletion_max_percent,
                Duration::from_secs(o.node_deletion_window),
            );
            let recorder = recorder.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let snapshot: Vec<Node> = nodes.state().iter().map(|n| n.as_ref().clone()).collect();
                    let sync = NodeSync { api: &api, cloud: instances.as_ref(), policy: &policy, metrics: &metrics, parts, concurrency, guard: &guard, recorder: Some(&recorder) };
                    let wait = match sync.run(&snapshot).await {
                        Ok(report) => {
                            tracing::debug!(?report, "node sync");
                            period
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "node sync failed; retrying");
                            Duration::from_secs(5).min(period)
                        }
                    };
                    tokio::select! { _ = notify.notified() => {}, _ = tokio::time::sleep(wait) => {} }
                    // Let a burst of changes settle into one sync.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }));
        }
        (None, true) => tracing::info!(
            cloud = cloud.name,
            "node controllers not started: the cloud has no instances capability"
        ),
        _ => tracing::info!("node controllers not chosen"),
    }

    match (&cloud.load_balancers, o.runs("service")) {
        (Some(lbs), true) => {
            let svc_api: Api<Service> = Api::all(client.clone());
            let (services, writer) = reflector::store();
            let notify = Arc::clone(&svc_changed);
            let stream =
                reflector(writer, watcher(svc_api, watcher::Config::default())).applied_objects();
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(ev) = stream.next().await {
                    if ev.is_ok() {
                        notify.notify_one();
                    }
                }
            });
            services.wait_until_ready().await.context("service watch")?;
            let recorder = recorder.clone();
            let (lbs, nodes, metrics, notify, class, client) = (
                Arc::clone(lbs),
                nodes.clone(),
                Arc::clone(&metrics),
                Arc::clone(&svc_changed),
                o.load_balancer_class.clone(),
                client.clone(),
            );
            tasks.push(tokio::spawn(async move {
                loop {
                    let node_list: Vec<Node> = nodes.state().iter().map(|n| n.as_ref().clone()).collect();
                    let sync = ServiceSync { client: client.clone(), cloud: lbs.as_ref(), recorder: Some(&recorder), metrics: &metrics, class: class.clone() };
                    let mut failed = false;
                    for svc in services.state() {
                        let relevant = svc.spec.as_ref().is_some_and(|s| s.type_.as_deref() == Some("LoadBalancer"))
                            || svc.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER);
                        if relevant {
                            if let Err(e) = sync.reconcile(&svc, &node_list).await {
                                tracing::warn!(service = ?svc.metadata.name, error = %e, "service reconcile failed");
                                failed = true;
                            }
                        }
                    }
                    let wait = if failed { Duration::from_secs(5) } else { Duration::from_secs(300) };
                    tokio::select! { _ = notify.notified() => {}, _ = tokio::time::sleep(wait) => {} }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }));
        }
        (None, true) => tracing::info!(
            cloud = cloud.name,
            "service controller not started: the cloud has no load balancers"
        ),
        _ => tracing::info!("service controller not chosen"),
    }

    match (&cloud.routes, o.runs("route")) {
        (Some(_), true) => {
            tracing::warn!("route controller: routes are not implemented for any cloud yet")
        }
        (None, true) => tracing::info!(
            cloud = cloud.name,
            "route controller not started: the cloud has no routes"
        ),
        _ => {}
    }

    overcast_runtime::shutdown::signal_received().await;
    for t in tasks {
        t.abort();
    }
    Ok(())
}

fn build_cloud(o: &Options) -> anyhow::Result<Cloud> {
    match o.cloud.as_str() {
        "local" => {
            let LocalSettings {
                file,
                zone,
                node_name,
                instances_file,
            } = o.local.resolve()?;
            let pool = match (o.lb_pool, &file.load_balancer_pool) {
                (Some(pool), _) => pool,
                (None, Some(text)) => text
                    .parse()
                    .map_err(|e| anyhow::anyhow!("cloud config loadBalancerPool: {e}"))?,
                (None, None) => DEFAULT_POOL.parse().map_err(anyhow::Error::msg)?,
            };
            Ok(Cloud {
                name: "local",
                disks: None,
                instances: Some(Arc::new(LocalInstances::new(
                    node_name,
                    zone,
                    instances_file,
                ))),
                load_balancers: Some(Arc::new(LocalLoadBalancers::new(pool))),
                routes: None,
                discovery: None,
            })
        }
        other => anyhow::bail!("unknown cloud {other:?} (this build knows: local)"),
    }
}
