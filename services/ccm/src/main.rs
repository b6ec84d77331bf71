//! `ccm`: the Overcast cloud-controller-manager.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Api, ResourceExt};
use overcast_ccm::addresses::{AddressPolicy, Cidr};
use overcast_ccm::metrics::Metrics;
use overcast_ccm::nodes::guard::DeletionGuard;
use overcast_ccm::nodes::{Fencing, NodeSync, Parts, Wake, WatchTriage};
use overcast_ccm::retry::Backoff;
use overcast_ccm::routes::RouteSync;
use overcast_ccm::services::{self, ServiceSync};
use overcast_ccm::MANAGER;
use overcast_cloud::{Cloud, CloudName};
use overcast_cloud_local::cloud_config::LocalFlags;
use overcast_cloud_local::lb::Pool;
use overcast_clouds::Role;
use overcast_kube::leader::Election;
use overcast_kube::leader::{DEFAULT_LEASE_NAME, DEFAULT_LEASE_NAMESPACE};
use overcast_runtime::LogFormat;
use tokio::sync::Notify;

#[derive(Debug, Clone, Parser)]
#[command(name = "ccm", version, about = "Overcast cloud-controller-manager")]
struct Options {
    /// kubeconfig to use; in-cluster configuration when unset.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Cloud provider: local, dvp, openstack, vsphere, zvirt (`--cloud-provider`, the
    /// upstream spelling, too).
    #[arg(
        long,
        alias = "cloud-provider",
        env = "OVERCAST_CLOUD",
        default_value = "local"
    )]
    cloud: CloudName,
    /// Controllers to run: node, node-lifecycle, service, route (comma-separated; * for
    /// all of them), and node-fencing, which runs only when named (`*,node-fencing`).
    #[arg(long, default_value = "*", value_delimiter = ',')]
    controllers: Vec<String>,
    /// Fencing: how long a node's Ready condition must have been Unknown (its lease
    /// expired) before a VM the cloud reports off or gone gets the out-of-service taint.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    node_fencing_grace: Duration,
    #[command(flatten)]
    local: LocalFlags,
    /// Local cloud: where load-balancer addresses come from (default: the cloud-config
    /// file's loadBalancerPool, else 127.240.0.0/16).
    #[arg(long, value_parser = |s: &str| s.parse::<Pool>().map(|_| s.to_owned()))]
    lb_pool: Option<String>,
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
    /// How long a lease holds without renewal before another replica may take it
    /// (`15s`, `1m`, `500ms`; plain numbers are seconds).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    leader_elect_lease_duration: Duration,
    /// Leadership ends when no renewal succeeded for this long; shorter than the lease
    /// duration, so we stop before anyone else may start.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    leader_elect_renew_deadline: Duration,
    /// Between attempts to take or renew the lease.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    leader_elect_retry_period: Duration,
    /// A Service whose load balancer fails is retried after this long, doubling per
    /// failure up to --service-retry-max-delay (the upstream service controller's 5 s–300 s).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    service_retry_min_delay: Duration,
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    service_retry_max_delay: Duration,
    /// Services reconciled at once (upstream's flag; its default of 1 lets one slow
    /// balancer hold every other Service).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    concurrent_service_syncs: u16,
    /// Pod networks, comma-separated: the route controller makes and deletes routes in
    /// these only (the upstream flag).
    #[arg(long, value_delimiter = ',')]
    cluster_cidr: Vec<Cidr>,
    /// Nodes get pod CIDRs (the upstream flag): the route controller runs only with it.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    allocate_node_cidrs: bool,
    /// The upstream switch for the route controller (on by default, as upstream).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    configure_cloud_routes: bool,
    /// Routes are reconciled this often (upstream's 10 s).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    route_reconciliation_period: Duration,
    /// Serve /metrics and /healthz here.
    #[arg(long, default_value = "0.0.0.0:10258")]
    metrics_address: std::net::SocketAddr,
    #[arg(long, env = "LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

/// Go-style durations as the upstream flags take them: `15s`, `500ms`, `2m`; a bare
/// number is seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 15s"))?;
    let seconds = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

impl Options {
    fn runs(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == "*" || c == controller)
    }

    /// A controller `*` does not include: it runs only when named.
    fn runs_named(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = Options::parse();
    overcast_runtime::logging::init(o.log_format);
    // Flags first: a wrong one is said before anything is contacted.
    if o.leader_elect_renew_deadline >= o.leader_elect_lease_duration
        || o.leader_elect_retry_period >= o.leader_elect_renew_deadline
    {
        anyhow::bail!(
            "leader election needs retry period < renew deadline < lease duration \
             (client-go's rule: otherwise a replica may lead past its lease)"
        );
    }
    // The cloud first: a wrong or missing cloud setting is said before anything is
    // contacted.
    let mut registry = prometheus_client::registry::Registry::default();
    let cloud = build_cloud(&o, &mut registry).await?;
    let client = overcast_kube::client(o.kubeconfig.as_deref()).await?;

    let metrics = Metrics::register(&mut registry);
    let health: overcast_runtime::http::HealthCheck = Arc::new(|| Box::pin(async { Ok(()) }));
    let bound =
        overcast_runtime::http::serve(o.metrics_address, Arc::new(registry), health).await?;
    tracing::info!(address = %bound, "serving /metrics and /healthz");

    // The caches are read-only and survive leadership changes: a replica that leads again
    // does not list the cluster again.
    let nodes_api: Api<Node> = Api::all(client.clone());
    let (nodes, writer) = reflector::store();
    let node_changed = Arc::new(Notify::new());
    let svc_changed = Arc::new(Notify::new());
    {
        let (n, s) = (Arc::clone(&node_changed), Arc::clone(&svc_changed));
        let stream = watcher(nodes_api.clone(), watcher::Config::default())
            .modify(overcast_ccm::nodes::slim)
            .reflect(writer);
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut triage = WatchTriage::default();
            let mut relist = std::collections::HashSet::new();
            while let Some(ev) = stream.next().await {
                let wake = match ev {
                    Ok(watcher::Event::Apply(node)) => triage.applied(&node),
                    Ok(watcher::Event::Delete(node)) => triage.deleted(&node),
                    Ok(watcher::Event::Init) => {
                        relist.clear();
                        Wake::default()
                    }
                    Ok(watcher::Event::InitApply(node)) => {
                        relist.insert(node.metadata.uid.clone().unwrap_or_else(|| node.name_any()));
                        triage.applied(&node);
                        Wake::default()
                    }
                    Ok(watcher::Event::InitDone) => triage.relisted(&relist),
                    Err(_) => Wake::default(),
                };
                if wake.nodes {
                    n.notify_one();
                }
                if wake.services {
                    s.notify_one();
                }
            }
        });
    }
    nodes.wait_until_ready().await.context("node watch")?;
    let services = match (&cloud.load_balancers, o.runs("service")) {
        (Some(_), true) => true,
        (None, true) => {
            tracing::info!(
                cloud = cloud.name,
                "service controller not started: the cloud has no load balancers"
            );
            false
        }
        _ => {
            tracing::info!("service controller not chosen");
            false
        }
    };
    let routes = match (&cloud.routes, o.runs("route")) {
        (Some(_), true) if !(o.allocate_node_cidrs && o.configure_cloud_routes) => {
            tracing::info!("route controller not started: it needs --allocate-node-cidrs=true and --configure-cloud-routes=true");
            false
        }
        (Some(_), true) if o.cluster_cidr.is_empty() => {
            anyhow::bail!("the route controller needs --cluster-cidr (the pod networks whose routes it manages)")
        }
        (Some(_), true) => true,
        (None, true) => {
            tracing::info!(
                cloud = cloud.name,
                "route controller not started: the cloud has no routes (OpenStack: [Route] router-id)"
            );
            false
        }
        _ => false,
    };

    let controllers = Controllers {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: MANAGER.into(),
                instance: None,
            },
        ),
        client: client.clone(),
        nodes_api,
        nodes,
        services,
        routes,
        node_changed,
        svc_changed,
        policy: Arc::new(AddressPolicy {
            internal_subnets: o.internal_subnets.clone(),
            external_subnets: o.external_subnets.clone(),
            excluded_subnets: o.excluded_subnets.clone(),
            sort_order: o.address_sort_order.clone(),
        }),
        // The guard's window outlives a leadership: a replica that leads again remembers
        // what it deleted.
        guard: Arc::new(DeletionGuard::new(
            o.node_deletion_max_percent,
            Duration::from_secs(o.node_deletion_window),
        )),
        service_backoff: Arc::new(std::sync::Mutex::new(Backoff::new(
            o.service_retry_min_delay,
            o.service_retry_max_delay,
        ))),
        cloud,
        metrics: Arc::clone(&metrics),
        o: o.clone(),
    };

    if !o.leader_elect {
        let tasks = controllers.start();
        overcast_runtime::shutdown::signal_received().await;
        for t in tasks {
            t.abort();
        }
        return Ok(());
    }
    let election = Election {
        name: o.leader_elect_lease_name.clone(),
        identity: o.leader_elect_identity.clone().unwrap_or_else(|| {
            format!(
                "{}_{}",
                overcast_runtime::host::hostname_or_localhost(),
                std::process::id()
            )
        }),
        lease_duration: o.leader_elect_lease_duration,
        renew_deadline: o.leader_elect_renew_deadline,
        retry_period: o.leader_elect_retry_period,
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), &o.leader_elect_namespace);
    metrics.leading(&election.name, false);
    let shutdown = overcast_runtime::shutdown::signal_received();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            _ = election.acquire(&leases) => {}
            _ = &mut shutdown => return Ok(()),
        }
        metrics.leading(&election.name, true);
        let tasks = controllers.start();
        let lost = tokio::select! {
            lost = election.hold(&leases) => Some(lost),
            _ = &mut shutdown => None,
        };
        // Stop acting at once: after the lease duration another replica may act. The load
        // balancers are the cloud's, not the controllers': they keep forwarding to the
        // backends they have, and whoever leads next reconciles (adopts) them.
        for t in &tasks {
            t.abort();
        }
        metrics.leading(&election.name, false);
        match lost {
            None => {
                // A clean shutdown (a rolling restart): the next replica takes over at
                // once instead of after the lease duration.
                election.release(&leases).await;
                return Ok(());
            }
            Some(why) => tracing::warn!(
                ?why,
                "controllers stopped; load balancers keep forwarding; contending for the lease again"
            ),
        }
    }
}

/// Everything the controllers need, kept across leaderships: `start` spawns them.
struct Controllers {
    o: Options,
    client: kube::Client,
    cloud: Cloud,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    nodes_api: Api<Node>,
    nodes: reflector::Store<Node>,
    /// Whether the service controller runs.
    services: bool,
    routes: bool,
    node_changed: Arc<Notify>,
    svc_changed: Arc<Notify>,
    policy: Arc<AddressPolicy>,
    guard: Arc<DeletionGuard>,
    /// Outlives a leadership, as the guard does: a broken Service does not start over at
    /// the shortest delay each time this replica leads again.
    service_backoff: Arc<std::sync::Mutex<Backoff>>,
}

impl Controllers {
    fn start(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = Vec::new();
        let o = &self.o;
        let parts = Parts {
            initialize: o.runs("node"),
            lifecycle: o.runs("node-lifecycle"),
            fencing: o.runs_named("node-fencing").then_some(Fencing {
                grace: o.node_fencing_grace,
            }),
        };
        match (
            &self.cloud.instances,
            parts.initialize || parts.lifecycle || parts.fencing.is_some(),
        ) {
            (Some(instances), true) => {
                let (instances, nodes, metrics, notify, policy, guard) = (
                    Arc::clone(instances),
                    self.nodes.clone(),
                    Arc::clone(&self.metrics),
                    Arc::clone(&self.node_changed),
                    Arc::clone(&self.policy),
                    Arc::clone(&self.guard),
                );
                let period = Duration::from_secs(o.node_sync_period);
                let concurrency = o.node_sync_concurrency;
                let api = self.nodes_api.clone();
                let recorder = self.recorder.clone();
                tasks.push(tokio::spawn(async move {
                    // A failed sync (the cloud or the API server) is retried sooner than the
                    // period, backing off from 1 s up to the period.
                    let mut retry = overcast_runtime::backoff::Retry::new(Duration::from_secs(1), period);
                    // When a sync last succeeded: what a warning says the nodes are as of.
                    let mut last_success: Option<std::time::Instant> = None;
                    let mut failures = 0u32;
                    let held_back = overcast_ccm::nodes::held_back::HeldBack::default();
                    loop {
                        // The cache's own Arcs: a sync copies no node.
                        let snapshot = nodes.state();
                        let sync = NodeSync { api: &api, cloud: instances.as_ref(), policy: &policy, metrics: &metrics, parts, concurrency, guard: &guard, recorder: Some(&recorder), held_back: Some(&held_back) };
                        let (result, waited) = watched(sync.run(&snapshot), last_success).await;
                        let wait = match result {
                            Ok(report) => {
                                tracing::debug!(?report, "node sync");
                                if failures > 0 || waited {
                                    tracing::info!(failures, last_success = %ago(last_success), "node sync succeeded again");
                                }
                                failures = 0;
                                last_success = Some(std::time::Instant::now());
                                retry.succeeded();
                                // A fencing grace that runs out before the period is
                                // looked at when it does (a second later, at the earliest).
                                report.recheck_in.map_or(period, |d| {
                                    d.max(Duration::from_secs(1)).min(period)
                                })
                            }
                            Err(e) => {
                                let wait = retry.failed();
                                failures += 1;
                                tracing::warn!(error = %e, retry_in = ?wait, last_success = %ago(last_success), failures, "node sync failed: no node is initialized, deleted or fenced until it succeeds; retrying");
                                wait
                            }
                        };
                        tokio::select! { _ = notify.notified() => {}, _ = tokio::time::sleep(wait) => {} }
                        // Let a burst of changes settle into one sync.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }));
            }
            (None, true) => tracing::info!(
                cloud = self.cloud.name,
                "node controllers not started: the cloud has no instances capability"
            ),
            _ => tracing::info!("node controllers not chosen"),
        }

        if let (Some(cloud), true) = (&self.cloud.routes, self.routes) {
            let sync = RouteSync {
                api: self.nodes_api.clone(),
                cloud: Arc::clone(cloud),
                cluster_cidrs: o.cluster_cidr.clone(),
                metrics: Arc::clone(&self.metrics),
            };
            let (nodes, period) = (self.nodes.clone(), o.route_reconciliation_period);
            tasks.push(tokio::spawn(async move {
                loop {
                    // The ready cache (waited for before any controller starts): an empty
                    // one means no nodes, not an unanswered list.
                    let snapshot = nodes.state();
                    let started = std::time::Instant::now();
                    let result = sync.run(&snapshot).await;
                    sync.metrics.reconciled("route", started.elapsed().as_secs_f64(), result.as_ref().err());
                    match result {
                        Ok(report) => tracing::debug!(?report, "route sync"),
                        Err(e) => tracing::warn!(error = %e, "route sync failed; nothing was deleted; retried next period"),
                    }
                    tokio::time::sleep(period).await;
                }
            }));
        }
        if let (Some(lbs), true) = (&self.cloud.load_balancers, self.services) {
            let mut sync = ServiceSync::new(
                self.client.clone(),
                Arc::clone(lbs),
                Arc::clone(&self.metrics),
            );
            sync.recorder = Some(self.recorder.clone());
            sync.class = o.load_balancer_class.clone();
            sync.backoff = Arc::clone(&self.service_backoff);
            // Each node change the triage finds relevant to balancers re-runs every
            // Service (its backends may have changed).
            let changed = futures::stream::unfold(Arc::clone(&self.svc_changed), |n| async move {
                n.notified().await;
                Some(((), n))
            });
            let (nodes, concurrency) = (self.nodes.clone(), o.concurrent_service_syncs);
            tasks.push(tokio::spawn(services::run(
                Arc::new(sync),
                nodes,
                changed,
                concurrency,
            )));
        }
        tasks
    }
}

async fn build_cloud(
    o: &Options,
    registry: &mut prometheus_client::registry::Registry,
) -> anyhow::Result<Cloud> {
    let mut s = o.local.settings(o.cloud);
    s.local.lb_pool = o.lb_pool.clone();
    s.kubeconfig = o.kubeconfig.clone();
    s.register_api_metrics(registry);
    overcast_clouds::open(Role::Ccm, &s).await
}

/// How often a sync still running says so.
const STILL_WAITING: Duration = Duration::from_secs(10);

/// Runs a node sync, warning every [`STILL_WAITING`] while it has not answered: a hung
/// cloud holds a sync for its calls' whole timeouts and retries (minutes), during which
/// nothing is initialized, deleted or fenced — an operator sees that at once rather than
/// when the sync finally fails. Also whether it warned.
async fn watched<T>(
    sync: impl std::future::Future<Output = T>,
    last_success: Option<std::time::Instant>,
) -> (T, bool) {
    let started = tokio::time::Instant::now();
    let mut tick = tokio::time::interval_at(started + STILL_WAITING, STILL_WAITING);
    tokio::pin!(sync);
    let mut warned = false;
    loop {
        tokio::select! {
            out = &mut sync => return (out, warned),
            _ = tick.tick() => {
                warned = true;
                tracing::warn!(
                    waiting = ?started.elapsed(),
                    last_success = %ago(last_success),
                    "node sync still waiting on the cloud or the API server: no node is initialized, deleted or fenced until it answers"
                );
            }
        }
    }
}

/// "12s ago", or "none since this process started".
fn ago(t: Option<std::time::Instant>) -> String {
    match t {
        Some(t) => format!("{}s ago", t.elapsed().as_secs()),
        None => "none since this process started".into(),
    }
}
