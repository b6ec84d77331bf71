//! `capi`: the Cluster API infrastructure provider. `capi --cloud zvirt` runs capz's
//! controllers (ZvirtCluster, ZvirtMachine) against the engine its cloud-config names;
//! `capi --cloud dvp` capdvp's (DeckhouseCluster, DeckhouseMachine) against the parent
//! cluster its cloud-config names; leader-elected on a Lease. `capi crds --cloud zvirt|dvp`
//! prints a provider's CRDs (what `deploy/crds/` holds).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use overcast_capi::crd::zvirt::{ZvirtCluster, ZvirtMachine};
use overcast_capi::crd::{manifest, Family};
use overcast_capi::retry::Retries;
use overcast_capi::zvirt::{self, Context};
use overcast_ccm::leader::Election;
use overcast_runtime::LogFormat;

#[derive(Debug, Parser)]
#[command(
    name = "capi",
    version,
    about = "Cluster API infrastructure provider for zVirt and DVP"
)]
struct Options {
    #[command(subcommand)]
    command: Option<Command>,
    /// The cloud whose provider runs: zvirt or dvp.
    #[arg(long, env = "OVERCAST_CLOUD", value_enum, default_value = "zvirt")]
    cloud: Cloud,
    /// The cloud's configuration: the file the csi and ccm read (zvirt: or the `ZVIRT_*`
    /// variables; dvp: the parent's namespace and kubeconfig).
    #[arg(long, env = "CLOUD_CONFIG")]
    cloud_config: Option<PathBuf>,
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// dvp: this cluster's id, put on its VMs, disks and Secrets in the parent
    /// (`dvp.deckhouse.io/cluster-uuid`, as capdvp's `CLUSTER_UUID`).
    #[arg(long, env = "CLUSTER_UUID")]
    cluster_uuid: Option<String>,
    /// Only this namespace's objects (node-manager's is d8-cloud-instance-manager); all
    /// namespaces when unset.
    #[arg(long)]
    namespace: Option<String>,
    /// Seconds between looks at a VM on its way (being made, starting, awaiting its
    /// address).
    #[arg(long, default_value_t = 10)]
    poll_interval: u64,
    /// Seconds between renderings of node-manager's Secret
    /// `kube-system/d8-node-manager-cloud-provider` (0: never written).
    #[arg(long, default_value_t = 600)]
    registration_period: u64,
    #[arg(long, default_value = "overcast-capi")]
    leader_elect_lease_name: String,
    #[arg(long, default_value = "kube-system")]
    leader_elect_namespace: String,
    #[arg(long, default_value = "127.0.0.1:8083")]
    metrics_address: std::net::SocketAddr,
    #[arg(long, env = "LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions of a provider's kinds, as YAML.
    Crds {
        #[arg(long, value_enum)]
        cloud: Cloud,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Cloud {
    Zvirt,
    Dvp,
}

impl Cloud {
    fn family(self) -> Family {
        match self {
            Self::Zvirt => Family::Zvirt,
            Self::Dvp => Family::Dvp,
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = Options::parse();
    if let Some(Command::Crds { cloud }) = o.command {
        print!("{}", manifest(cloud.family()));
        return Ok(());
    }
    overcast_runtime::logging::init(o.log_format);
    let kube_config = overcast_kube::config(o.kubeconfig.as_deref()).await?;
    let api_server = api_server(&kube_config.cluster_url);
    let client = kube::Client::try_from(kube_config)?;
    // The cloud's calls, counted as the other binaries count them (`zvirt_api_*`,
    // `dvp_api_*`).
    let mut registry = prometheus_client::registry::Registry::default();
    let api_metrics = overcast_cloud_http::ApiMetrics::register(
        &mut registry,
        match o.cloud {
            Cloud::Zvirt => "zvirt",
            Cloud::Dvp => "dvp",
        },
    );
    let registry = Arc::new(registry);
    let health: overcast_runtime::http::HealthCheck = Arc::new(|| Box::pin(async { Ok(()) }));
    let at = overcast_runtime::http::serve(o.metrics_address, registry, health).await?;
    tracing::info!(address = %at, "serving /metrics and /healthz");

    let election = Election {
        name: o.leader_elect_lease_name.clone(),
        identity: format!(
            "{}_{}",
            overcast_runtime::host::hostname_or_localhost(),
            std::process::id()
        ),
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), &o.leader_elect_namespace);
    tokio::select! {
        _ = election.acquire(&leases) => {}
        _ = overcast_runtime::shutdown::signal_received() => return Ok(()),
    }

    let lost = |lost| {
        Err(anyhow::anyhow!(
            "leadership lost ({lost:?}): exiting so a new leader takes over"
        ))
    };
    let outcome: anyhow::Result<()> = match o.cloud {
        Cloud::Zvirt => {
            let run = zvirt_controllers(&o, client, api_server, api_metrics).await?;
            tokio::select! {
                r = run => r,
                l = election.hold(&leases) => lost(l),
            }
        }
        Cloud::Dvp => {
            let run = dvp_controllers(&o, client, api_metrics).await?;
            tokio::select! {
                r = run => r,
                l = election.hold(&leases) => lost(l),
            }
        }
    };
    outcome.context("capi")
}

/// The Cluster API Machines to watch and, for each, the infrastructure machine of `kind`
/// it points at.
fn machine_refs<K>(
    kind: &'static str,
) -> impl Fn(DynamicObject) -> Option<ObjectRef<K>> + Send + Sync + Clone + 'static
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    move |m: DynamicObject| {
        let infra = m.data["spec"]["infrastructureRef"].clone();
        let ns = m.metadata.namespace.clone();
        (infra["kind"] == kind)
            .then(|| infra["name"].as_str().map(str::to_owned))
            .flatten()
            .map(|name| {
                let r = ObjectRef::<K>::new(&name);
                match ns {
                    Some(ns) => r.within(&ns),
                    None => r,
                }
            })
    }
}

/// An Api of `K` in `--namespace`, else everywhere.
fn scoped<K>(client: &kube::Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn capi_machines(client: &kube::Client, ns: Option<&str>) -> Api<DynamicObject> {
    let r = overcast_capi::core::machine_resource();
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &r),
        None => Api::all_with(client.clone(), &r),
    }
}

async fn dvp_controllers(
    o: &Options,
    client: kube::Client,
    metrics: Arc<overcast_cloud_http::ApiMetrics>,
) -> anyhow::Result<impl std::future::Future<Output = anyhow::Result<()>>> {
    use overcast_capi::crd::dvp::{DeckhouseCluster, DeckhouseMachine};
    use overcast_capi::dvp;
    let env = |k: &str| std::env::var(k).ok();
    let config = overcast_cloud_dvp::Config::load(o.cloud_config.as_deref(), &env)?;
    let parent = overcast_cloud_dvp::Parent::connect(&config, metrics).await?;
    let cluster_uuid = o
        .cluster_uuid
        .clone()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| {
            anyhow::anyhow!("--cluster-uuid (CLUSTER_UUID) is required with --cloud dvp")
        })?;
    let ctx = Arc::new(dvp::Context {
        client: client.clone(),
        vms: overcast_cloud_dvp::ParentVms::new(parent, cluster_uuid),
        poll: Duration::from_secs(o.poll_interval.max(1)),
        retries: Retries::new(Duration::from_secs(1), Duration::from_secs(60)),
    });
    let ns = o.namespace.as_deref();
    let machines = Controller::new(
        scoped::<DeckhouseMachine>(&client, ns),
        watcher::Config::default(),
    )
    .watches_with(
        capi_machines(&client, ns),
        overcast_capi::core::machine_resource(),
        watcher::Config::default(),
        machine_refs::<DeckhouseMachine>("DeckhouseMachine"),
    )
    .shutdown_on_signal()
    .run(
        dvp::machine::reconcile,
        dvp::machine::error_policy,
        Arc::clone(&ctx),
    )
    .for_each(|r| said("DeckhouseMachine", r));
    let clusters = Controller::new(
        scoped::<DeckhouseCluster>(&client, ns),
        watcher::Config::default(),
    )
    .shutdown_on_signal()
    .run(
        dvp::cluster::reconcile,
        dvp::cluster::error_policy,
        Arc::clone(&ctx),
    )
    .for_each(|r| said("DeckhouseCluster", r));
    let registration = register(
        client.clone(),
        Family::Dvp,
        o.registration_period,
        |_ssh: Option<&str>, labels| overcast_capi::registration::dvp_connection(labels),
    );
    tracing::info!(
        cloud = "dvp",
        "DeckhouseCluster and DeckhouseMachine controllers started"
    );
    Ok(async move {
        tokio::select! {
            _ = async { tokio::join!(machines, clusters) } => {}
            _ = registration => {}
        }
        Ok(())
    })
}

async fn zvirt_controllers(
    o: &Options,
    client: kube::Client,
    api_server: Option<(String, i32)>,
    metrics: Arc<overcast_cloud_http::ApiMetrics>,
) -> anyhow::Result<impl std::future::Future<Output = anyhow::Result<()>>> {
    let env = |k: &str| std::env::var(k).ok();
    let config = overcast_cloud_zvirt::Config::load(o.cloud_config.as_deref(), &env)?;
    let engine = overcast_cloud_zvirt::connect(&config, Some(metrics))?;
    let ctx = Arc::new(Context {
        client: client.clone(),
        vms: overcast_cloud_zvirt::EngineVms::new(Arc::clone(&engine)),
        engine,
        poll: Duration::from_secs(o.poll_interval.max(1)),
        api_server,
        retries: Retries::new(Duration::from_secs(1), Duration::from_secs(60)),
    });
    let ns = o.namespace.as_deref();
    let machine_controller = Controller::new(
        scoped::<ZvirtMachine>(&client, ns),
        watcher::Config::default(),
    )
    // A Machine's change (its bootstrap data made, its Node joined) reaches the
    // ZvirtMachine it points at.
    .watches_with(
        capi_machines(&client, ns),
        overcast_capi::core::machine_resource(),
        watcher::Config::default(),
        machine_refs::<ZvirtMachine>("ZvirtMachine"),
    )
    .shutdown_on_signal()
    .run(
        zvirt::machine::reconcile,
        zvirt::machine::error_policy,
        Arc::clone(&ctx),
    )
    .for_each(|r| said("ZvirtMachine", r));
    let cluster_controller = Controller::new(
        scoped::<ZvirtCluster>(&client, ns),
        watcher::Config::default(),
    )
    .shutdown_on_signal()
    .run(
        zvirt::cluster::reconcile,
        zvirt::cluster::error_policy,
        Arc::clone(&ctx),
    )
    .for_each(|r| said("ZvirtCluster", r));
    let registration = register(client.clone(), Family::Zvirt, o.registration_period, {
        let config = config.clone();
        move |ssh: Option<&str>, _labels| {
            overcast_capi::registration::zvirt_connection(&config, ssh)
        }
    });
    tracing::info!(
        cloud = "zvirt",
        "ZvirtCluster and ZvirtMachine controllers started"
    );
    Ok(async move {
        tokio::select! {
            _ = async { tokio::join!(machine_controller, cluster_controller) } => {}
            _ = registration => {}
        }
        Ok(())
    })
}

/// Says what a controller's stream reports that is not a reconcile's own (a watch that
/// fails, an object that cannot be read): the reconcile errors are said by their policy.
async fn said<T, E: std::fmt::Display>(
    kind: &str,
    r: Result<T, kube::runtime::controller::Error<overcast_capi::Error, E>>,
) {
    match r {
        Ok(_) | Err(kube::runtime::controller::Error::ReconcilerFailed(..)) => {}
        // A related object's event for one not in the cache yet: its own event follows.
        Err(kube::runtime::controller::Error::ObjectNotFound(r)) => {
            tracing::debug!(kind, object = %r, "not cached yet")
        }
        Err(e) => tracing::warn!(kind, error = %e, "controller"),
    }
}

/// Keeps node-manager's Secret as the configuration and the installer's facts say, every
/// `period` seconds (never when 0); a failure is said and tried again next period.
/// `connection` makes the cloud's object from the SSH key and the additional VM labels
/// the installer recorded.
async fn register(
    client: kube::Client,
    family: Family,
    period: u64,
    connection: impl Fn(Option<&str>, Option<serde_json::Value>) -> serde_json::Value,
) {
    use overcast_capi::registration::{self, Registration};
    if period == 0 {
        return std::future::pending().await;
    }
    loop {
        let written: overcast_capi::Result<usize> = async {
            let (zones, ssh, labels) = registration::installer_facts(&client).await?;
            let r = Registration {
                family,
                zones,
                connection: connection(ssh.as_deref(), labels),
                ssh_public_key: ssh,
            };
            registration::publish(&client, &registration::render(&r)).await
        }
        .await;
        match written {
            Ok(0) => {}
            Ok(n) => tracing::info!(secrets = n, "node-manager registration written"),
            Err(e) => tracing::warn!(error = %e, "node-manager registration not written"),
        }
        tokio::time::sleep(Duration::from_secs(period)).await;
    }
}

/// The management cluster's API server as this process reaches it: capz's control plane
/// endpoint for a ZvirtCluster.
fn api_server(url: &http::Uri) -> Option<(String, i32)> {
    let host = url
        .host()?
        .trim_matches(|c| c == '[' || c == ']')
        .to_owned();
    let port = url
        .port_u16()
        .unwrap_or(if url.scheme_str() == Some("http") {
            80
        } else {
            443
        });
    Some((host, i32::from(port)))
}
