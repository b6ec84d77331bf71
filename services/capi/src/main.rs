//! `capi`: the Cluster API infrastructure provider. `capi --cloud zvirt` runs capz's
//! controllers (ZvirtCluster, ZvirtMachine) against the engine its cloud-config names;
//! `capi --cloud dvp` capdvp's (DeckhouseCluster, DeckhouseMachine) against the parent
//! cluster its cloud-config names; leader-elected on a Lease. Each also keeps
//! node-manager's Secret. `capi --cloud openstack|vsphere|local` keeps only that Secret
//! (node-manager orders those clouds' machines through machine-controller-manager, not
//! Cluster API). `capi crds --cloud zvirt|dvp` prints a provider's CRDs (what
//! `deploy/crds/` holds).

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
use overcast_capi::registration::{self, InstallerFacts, Registered, Registration};
use overcast_capi::retry::Retries;
use overcast_capi::zvirt::{self, Context};
use overcast_cloud_vsphere::credentials::SecretSource;
use overcast_kube::leader::Election;
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
    /// The cloud whose provider runs: zvirt or dvp; openstack, vsphere or local keep
    /// node-manager's Secret alone.
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
    Openstack,
    Vsphere,
    Local,
}

impl Cloud {
    /// The Cluster API provider this cloud has, if any.
    fn family(self) -> Option<Family> {
        match self {
            Self::Zvirt => Some(Family::Zvirt),
            Self::Dvp => Some(Family::Dvp),
            Self::Openstack | Self::Vsphere | Self::Local => None,
        }
    }

    /// What node-manager's Secret says it is.
    fn registered(self) -> Registered {
        match self {
            Self::Zvirt => Registered::Zvirt,
            Self::Dvp => Registered::Dvp,
            Self::Openstack => Registered::Openstack,
            Self::Vsphere => Registered::Vsphere,
            Self::Local => Registered::Local,
        }
    }

    fn name(self) -> &'static str {
        self.registered().type_name()
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = Options::parse();
    if let Some(Command::Crds { cloud }) = o.command {
        let family = cloud.family().ok_or_else(|| {
            anyhow::anyhow!(
                "{} has no Cluster API provider: node-manager makes its machines through machine-controller-manager",
                cloud.name()
            )
        })?;
        print!("{}", manifest(family));
        return Ok(());
    }
    overcast_runtime::logging::init(o.log_format);
    let kube_config = overcast_kube::config(o.kubeconfig.as_deref()).await?;
    let api_server = api_server(&kube_config.cluster_url);
    let client = kube::Client::try_from(kube_config)?;
    // The cloud's calls, counted as the other binaries count them (`zvirt_api_*`,
    // `dvp_api_*`).
    let mut registry = prometheus_client::registry::Registry::default();
    let api_metrics = overcast_cloud_http::ApiMetrics::register(&mut registry, o.cloud.name());
    register_reconciles(
        &mut registry,
        match o.cloud {
            Cloud::Zvirt => &["ZvirtCluster", "ZvirtMachine"],
            Cloud::Dvp => &["DeckhouseCluster", "DeckhouseMachine"],
            Cloud::Openstack | Cloud::Vsphere | Cloud::Local => &[],
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
        Cloud::Openstack | Cloud::Vsphere | Cloud::Local => {
            let run = registration_alone(&o, client);
            tokio::select! {
                r = run => r,
                l = election.hold(&leases) => lost(l),
                _ = overcast_runtime::shutdown::signal_received() => Ok(()),
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
    let registration = register(client.clone(), o.registration_period, |facts| {
        std::future::ready(Ok(Registration {
            cloud: Registered::Dvp,
            zones: facts.zones(),
            region: Some("default".into()),
            ssh_public_key: facts.ssh_public_key(),
            connection: registration::dvp_connection(facts.additional_vm_labels()),
        }))
    });
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
    let registration = register(client.clone(), o.registration_period, {
        let config = config.clone();
        move |facts| {
            let ssh = facts.ssh_public_key();
            std::future::ready(Ok(Registration {
                cloud: Registered::Zvirt,
                zones: facts.zones(),
                // zVirt has no regions; its module names one.
                region: Some("default".into()),
                connection: registration::zvirt_connection(&config, ssh.as_deref()),
                ssh_public_key: ssh,
            }))
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
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

/// Reconciles by kind, and those that failed (`capi_reconciles_total`,
/// `capi_reconcile_errors_total`): what the monitoring's machine alerts read.
#[derive(Default)]
struct Reconciles {
    done: prometheus_client::metrics::family::Family<
        KindLabel,
        prometheus_client::metrics::counter::Counter,
    >,
    failed: prometheus_client::metrics::family::Family<
        KindLabel,
        prometheus_client::metrics::counter::Counter,
    >,
}

static RECONCILES: std::sync::OnceLock<Reconciles> = std::sync::OnceLock::new();

/// Registers the counters, each kind of `kinds` at 0 from the start (a series that only
/// appears with its first error is one `rate()` cannot see rise).
fn register_reconciles(registry: &mut prometheus_client::registry::Registry, kinds: &[&str]) {
    let r = RECONCILES.get_or_init(Reconciles::default);
    for kind in kinds {
        let label = KindLabel {
            kind: (*kind).to_owned(),
        };
        let _ = r.done.get_or_create(&label);
        let _ = r.failed.get_or_create(&label);
    }
    let sub = registry.sub_registry_with_prefix("capi");
    sub.register(
        "reconciles",
        "Reconciles of the provider's kinds, by kind",
        r.done.clone(),
    );
    sub.register(
        "reconcile_errors",
        "Reconciles that failed (retried with backoff), by kind",
        r.failed.clone(),
    );
}

async fn said<T, E: std::fmt::Display>(
    kind: &str,
    r: Result<T, kube::runtime::controller::Error<overcast_capi::Error, E>>,
) {
    let label = || KindLabel {
        kind: kind.to_owned(),
    };
    if let Some(m) = RECONCILES.get() {
        match &r {
            Ok(_) => {
                m.done.get_or_create(&label()).inc();
            }
            Err(kube::runtime::controller::Error::ReconcilerFailed(..)) => {
                m.done.get_or_create(&label()).inc();
                m.failed.get_or_create(&label()).inc();
            }
            Err(_) => {}
        }
    }
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
/// `make` renders the registration from the installer's facts (an `Err` says what is
/// missing; nothing is written then).
async fn register<F, Fut>(client: kube::Client, period: u64, make: F)
where
    F: Fn(InstallerFacts) -> Fut,
    Fut: std::future::Future<Output = Result<Registration, String>>,
{
    if period == 0 {
        return std::future::pending().await;
    }
    loop {
        let written: anyhow::Result<usize> = async {
            let facts = registration::installer_facts(&client).await?;
            let r = make(facts).await.map_err(anyhow::Error::msg)?;
            Ok(registration::publish(&client, &registration::render(&r)).await?)
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

/// OpenStack, vSphere and local: node-manager's Secret alone, from the cloud-config the
/// ccm reads (read again at each rendering, so a rotated password is carried over).
async fn registration_alone(o: &Options, client: kube::Client) -> anyhow::Result<()> {
    let cloud = o.cloud;
    let path = o.cloud_config.clone();
    let kubeconfig = o.kubeconfig.clone();
    if o.registration_period == 0 {
        anyhow::bail!(
            "--registration-period 0: capi --cloud {} has nothing else to do",
            cloud.name()
        );
    }
    tracing::info!(cloud = cloud.name(), "keeping node-manager's registration");
    let sources = SecretSources::default();
    register(client, o.registration_period, move |facts| {
        let path = path.clone();
        let kubeconfig = kubeconfig.clone();
        let sources = sources.clone();
        async move { render_alone(cloud, path.as_deref(), kubeconfig, &sources, &facts).await }
    })
    .await;
    Ok(())
}

/// vSphere's credentials Secrets, one source each for the life of the process: a source
/// keeps the credentials last read, which a Secret deleted for a while must not take away
/// (as the ccm keeps them).
#[derive(Clone, Default)]
struct SecretSources(Arc<std::sync::Mutex<SourcesByName>>);

/// By the Secret's namespace and name.
type SourcesByName = std::collections::HashMap<(String, String), Arc<SecretSource>>;

impl SecretSources {
    fn get(&self, namespace: &str, name: &str, kubeconfig: Option<PathBuf>) -> Arc<SecretSource> {
        let mut sources = self.0.lock().unwrap_or_else(|e| e.into_inner());
        sources
            .entry((namespace.to_owned(), name.to_owned()))
            .or_insert_with(|| {
                Arc::new(SecretSource::new(
                    namespace.to_owned(),
                    name.to_owned(),
                    kubeconfig,
                ))
            })
            .clone()
    }
}

async fn render_alone(
    cloud: Cloud,
    path: Option<&std::path::Path>,
    kubeconfig: Option<PathBuf>,
    sources: &SecretSources,
    facts: &InstallerFacts,
) -> Result<Registration, String> {
    match cloud {
        Cloud::Openstack => {
            let config = overcast_cloud_openstack::Config::load(path).map_err(|e| e.to_string())?;
            let ca = match &config.ca_file {
                Some(f) => Some(
                    std::fs::read_to_string(f)
                        .map_err(|e| format!("ca-file {}: {e}", f.display()))?,
                ),
                None => None,
            };
            Ok(Registration {
                cloud: Registered::Openstack,
                zones: facts.zones(),
                region: config.region.clone(),
                ssh_public_key: None,
                connection: registration::openstack_connection(&config, ca, facts)?,
            })
        }
        Cloud::Vsphere => {
            use overcast_cloud_vsphere::config::Credentials;
            let config = overcast_cloud_vsphere::Config::load(path).map_err(|e| e.to_string())?;
            let [vc] = config.vcenters.as_slice() else {
                return Err(format!(
                    "node-manager's vsphere object names one vCenter; the cloud-config has {}",
                    config.vcenters.len()
                ));
            };
            let (username, password) = match &vc.credentials {
                Credentials::Inline { user, password } => (user.clone(), password.clone()),
                Credentials::Secret { name, namespace } => {
                    let c = sources
                        .get(namespace, name, kubeconfig)
                        .credential(&vc.server)
                        .await
                        .map_err(|e| e.to_string())?;
                    (c.user, c.password)
                }
                Credentials::Directory(dir) => {
                    let c = overcast_cloud_vsphere::credentials::from_directory(dir, &vc.server)?;
                    (c.user, c.password)
                }
            };
            let login = registration::VcenterLogin {
                server: vc.server.clone(),
                username,
                password,
                insecure: vc.insecure,
            };
            Ok(Registration {
                cloud: Registered::Vsphere,
                zones: registration::strings(&facts.configuration["zones"]),
                region: None,
                ssh_public_key: None,
                connection: registration::vsphere_connection(&login, &config, facts),
            })
        }
        Cloud::Local => {
            let config = overcast_cloud_local::cloud_config::LocalCloudConfig::load(path)
                .map_err(|e| e.to_string())?;
            Ok(Registration {
                cloud: Registered::Local,
                zones: vec![config.zone(None)],
                region: Some(config.region(None)),
                ssh_public_key: None,
                connection: serde_json::json!({}),
            })
        }
        Cloud::Zvirt | Cloud::Dvp => Err("rendered by its controllers".into()),
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
