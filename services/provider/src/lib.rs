//! What a cloud is to the binaries: one [`Provider`] value its crate exports. The
//! registry (`overcast-clouds`) maps a [`CloudName`] to that value; every binary turns
//! its flags into [`Settings`] and asks the provider for the capabilities of its
//! [`Role`]. A provider answers everything that differs between clouds — what it opens,
//! who its node is, its topology key aliases, its default attach limit — so a new cloud
//! is its crate plus one line in the registry and touches no service.

use std::path::PathBuf;
use std::sync::Arc;

use overcast_cloud::{Cloud, CloudName, DiskOfVolume, Zone};
use overcast_cloud_http::ApiMetrics;

/// What a binary runs as; each gets only the capabilities it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The CSI controller: disks.
    CsiController,
    /// The cloud-controller-manager: instances, load balancers, routes.
    Ccm,
    /// The cloud-data-discoverer: discovery.
    Discoverer,
}

/// One cloud: what its crate exports (`overcast_cloud_<name>::PROVIDER`).
#[async_trait::async_trait]
pub trait Provider: Sync {
    fn name(&self) -> CloudName;

    /// The capabilities `role` needs, from the configuration `s` names. A configuration
    /// that lacks something is said here, naming what; nothing need be contacted (an
    /// unreachable cloud is said by the first call, as any outage is).
    async fn open(&self, role: Role, s: &Settings) -> anyhow::Result<Cloud>;

    /// This node's identity as its cloud gives it, for the CSI node plugin (which never
    /// reads another cloud's configuration, and often holds no credentials).
    fn node_identity(&self, s: &Settings) -> anyhow::Result<NodeIdentity>;

    /// The sections, keys and variables this cloud's configuration reader knows, from
    /// its own types and lists (what `docs/reference.md` prints).
    fn config_keys(&self) -> overcast_cloud::config::FileKeys;

    /// The keys, beyond `topology.kubernetes.io/zone` and `/region`, under which this
    /// cloud's CSI topology repeats the zone and the region: those of the upstream
    /// driver it replaces, so the PVs that driver made keep scheduling after a switch.
    /// They may depend on the configuration (vSphere's `topology-categories`), which
    /// the node plugin then reads too.
    fn topology_aliases(&self, _s: &Settings) -> anyhow::Result<TopologyAliases> {
        Ok(TopologyAliases::default())
    }

    /// How many volumes a node takes when no flag says (`None`: the CSI driver's own
    /// default).
    fn default_attach_limit(&self, _s: &Settings) -> Option<u64> {
        None
    }

    /// Whether a node rescans a disk whose size lags its volume's when no flag says.
    fn default_rescan_on_resize(&self, _s: &Settings) -> bool {
        false
    }
}

/// Further topology keys naming the zone and the region (see
/// [`Provider::topology_aliases`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopologyAliases {
    pub zone: Vec<String>,
    pub region: Vec<String>,
}

/// What the CSI node plugin needs to know about its own node, from its own cloud: its
/// node id (the instance's node name, see `overcast_cloud::Instances`) and its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    pub node_id: String,
    /// `None`: the cloud tells the node plugin nothing about its place; its zone is the
    /// one the cloud-controller-manager labels its Node with, read from the API.
    pub zone: Option<Zone>,
    /// The provider-id scheme whose instance id is the node id, when the id given is not
    /// one (OpenStack: the Nova server's id, read from the Node's `openstack:///<id>`).
    pub instance_id_from: Option<&'static str>,
    /// How the node tells a volume's disk from the volume's id alone, for a mount it has
    /// no record of.
    pub disk_of_volume: DiskOfVolume,
}

/// What every binary knows that a provider may need: the cloud, its configuration file,
/// this host's node name and place. A provider reads its own configuration from the file
/// (and its upstream's variables) and says what is missing; only the local cloud also
/// takes flags of its own ([`LocalOptions`]). The services never look inside.
#[derive(Debug, Clone)]
pub struct Settings {
    pub cloud: CloudName,
    /// The cloud's configuration file (the Secret the manifests mount).
    pub cloud_config: Option<PathBuf>,
    /// This host's node name, which is also its CSI node id (default: the hostname).
    pub node_name: Option<String>,
    /// This host's zone and region when a flag gives them (`--zone`, `--region`): the
    /// local cloud's place, and the node plugin's on clouds whose nodes cannot ask.
    pub zone: Option<String>,
    pub region: Option<String>,
    /// How many disks one node takes.
    pub max_attachments_per_node: u64,
    /// The cluster's name, recorded on the disks made for it (cinder-csi-plugin's
    /// `--cluster`) and in the names of its load balancers.
    pub cluster: String,
    /// The Kubernetes API this binary talks to (its `--kubeconfig`; in-cluster when
    /// unset), for a cloud whose credentials are a Secret there (vSphere's `secret-name`).
    pub kubeconfig: Option<PathBuf>,
    /// Where a controller keeps what must outlive a restart of its process (vSphere: the
    /// tasks of creates in flight); `None`: in memory only.
    pub controller_state_dir: Option<PathBuf>,
    /// The local provider's own settings (ignored by every other cloud).
    pub local: LocalOptions,
    /// Where a provider counts and times its cloud calls (`<cloud>_api_request_*`): the
    /// binary registers it with its /metrics ([`Settings::register_api_metrics`]).
    pub api_metrics: Arc<ApiMetrics>,
}

/// The local cloud's flags (its cloud-config file holds the same and flags win).
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// The directory of the disk files and the store.
    pub state_dir: PathBuf,
    /// Further machines (name, addresses, state …), over the file's `instancesFile`.
    pub instances_file: Option<PathBuf>,
    /// Where load-balancer addresses come from (`--lb-pool`, over the file's
    /// `loadBalancerPool`); the local provider parses it.
    pub lb_pool: Option<String>,
}

impl Default for LocalOptions {
    fn default() -> Self {
        Self {
            state_dir: PathBuf::from("/var/lib/overcast/local"),
            instances_file: None,
            lb_pool: None,
        }
    }
}

impl Settings {
    pub fn new(cloud: CloudName) -> Self {
        Self {
            cloud,
            cloud_config: None,
            node_name: None,
            zone: None,
            region: None,
            max_attachments_per_node: 128,
            cluster: "kubernetes".into(),
            kubeconfig: None,
            controller_state_dir: None,
            local: LocalOptions::default(),
            api_metrics: Arc::new(ApiMetrics::unregistered()),
        }
    }

    /// Exports the provider's per-request metrics under the cloud's name (OCCM's names
    /// with prefix `openstack`, `dvp_api_requests_total` for DVP, …). The local cloud
    /// makes no API calls and exports none.
    pub fn register_api_metrics(&mut self, registry: &mut prometheus_client::registry::Registry) {
        if self.cloud != CloudName::Local {
            self.api_metrics = ApiMetrics::register(registry, self.cloud.as_str());
        }
    }

    /// The node name given, else this host's name.
    pub fn node_name(&self) -> String {
        self.node_name
            .clone()
            .unwrap_or_else(overcast_runtime::host::hostname_or_localhost)
    }

    /// The zone and region flags as a place, when the zone is given.
    pub fn zone_flag(&self) -> Option<Zone> {
        self.zone.clone().map(|zone| Zone {
            zone,
            region: self.region.clone().unwrap_or_default(),
        })
    }
}
