//! The registry: the one place a cloud name becomes a provider. Every binary turns its
//! flags into [`Settings`] and asks for the capabilities of its [`Role`]; a new cloud
//! adds its crate (`services/cloud-<name>`), one arm in [`open`] and one in
//! [`node_identity`], and touches no service.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use overcast_cloud::{Cloud, CloudName, Zone};
use overcast_cloud_http::ApiMetrics;
use overcast_cloud_local::cloud_config::{LocalCloudConfig, LocalFlags, LocalOptions};
use overcast_cloud_local::discovery::LocalDiscovery;
use overcast_cloud_local::instances::LocalInstances;
use overcast_cloud_local::lb::{LocalLoadBalancers, DEFAULT_POOL};
use overcast_cloud_local::{LocalCloud, LocalConfig};

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

/// What every binary knows that a provider may need: the cloud, its configuration file,
/// this host's node name. A provider reads its own configuration from the file (and its
/// upstream's variables) and says what is missing; only the local cloud also takes
/// flags, which it declares in [`LocalOptions`]. The services never look inside.
#[derive(Debug, Clone)]
pub struct Settings {
    pub cloud: CloudName,
    /// The cloud's configuration file (the Secret the manifests mount).
    pub cloud_config: Option<PathBuf>,
    /// This host's node name, which is also its CSI node id (default: the hostname).
    pub node_name: Option<String>,
    /// How many disks one node takes.
    pub max_attachments_per_node: u64,
    /// The cluster's name, recorded on the disks made for it (cinder-csi-plugin's
    /// `--cluster`).
    pub cluster: String,
    /// The local provider's own settings (ignored by every other cloud).
    pub local: LocalOptions,
    /// Where a provider counts and times its cloud calls (`<cloud>_api_request_*`): the
    /// binary registers it with its /metrics ([`Settings::register_api_metrics`]).
    pub api_metrics: Arc<ApiMetrics>,
}

impl Settings {
    pub fn new(cloud: CloudName) -> Self {
        Self {
            cloud,
            cloud_config: None,
            node_name: None,
            max_attachments_per_node: 128,
            cluster: "kubernetes".into(),
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

    /// The settings the ccm and the discoverer take from the shared flags.
    pub fn with_local_flags(cloud: CloudName, flags: &LocalFlags) -> Self {
        let mut s = Self::new(cloud);
        s.cloud_config = flags.cloud_config.clone();
        s.node_name = flags.node_name.clone();
        s.local.zone = flags.zone.clone();
        s.local.region = flags.region.clone();
        s.local.instances_file = flags.instances_file.clone();
        s.cluster = flags.cluster.clone();
        s
    }

    fn node_name(&self) -> String {
        self.node_name
            .clone()
            .unwrap_or_else(overcast_runtime::host::hostname_or_localhost)
    }
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
}

/// The keys, beyond `topology.kubernetes.io/zone`, under which a cloud's CSI topology
/// repeats the zone: those of the upstream driver it replaces, so the PVs that driver
/// made keep scheduling after a switch (cinder-csi-plugin's key on OpenStack).
pub fn zone_key_aliases(cloud: CloudName) -> Vec<String> {
    match cloud {
        CloudName::Openstack => vec!["topology.cinder.csi.openstack.org/zone".to_owned()],
        _ => Vec::new(),
    }
}

/// How many volumes a node of this cloud takes when no flag says: OpenStack's
/// `[BlockStorage] node-volume-attach-limit` (read alone, so a node plugin given a
/// cloud-config without credentials gets it too), else cinder-csi-plugin's 256.
pub fn default_attach_limit(s: &Settings) -> Option<u64> {
    match s.cloud {
        CloudName::Openstack => Some(
            overcast_cloud_openstack::config::node_volume_attach_limit(s.cloud_config.as_deref())
                .unwrap_or(256)
                .into(),
        ),
        _ => None,
    }
}

/// Whether a node of this cloud rescans a disk whose size lags its volume's when no flag
/// says: OpenStack's `[BlockStorage] rescan-on-resize`; no elsewhere.
pub fn default_rescan_on_resize(s: &Settings) -> bool {
    match s.cloud {
        CloudName::Openstack => {
            overcast_cloud_openstack::config::rescan_on_resize(s.cloud_config.as_deref())
        }
        _ => false,
    }
}

/// This node's identity as its cloud gives it (the node plugin never reads another
/// cloud's configuration).
pub fn node_identity(s: &Settings) -> anyhow::Result<NodeIdentity> {
    match s.cloud {
        CloudName::Local => {
            let file = LocalCloudConfig::load(s.cloud_config.as_deref())?;
            Ok(NodeIdentity {
                node_id: s.node_name(),
                zone: Some(Zone {
                    zone: file.zone(s.local.zone.as_deref()),
                    region: file.region(s.local.region.as_deref()),
                }),
                instance_id_from: None,
            })
        }
        // A DVP node plugin holds no parent credentials: its node id is its node name
        // (the VM's hostname label), its zone the one the ccm found for its VM.
        CloudName::Dvp => Ok(NodeIdentity {
            node_id: s.node_name(),
            zone: None,
            instance_id_from: None,
        }),
        // The node id is the Nova server's id (cinder-csi-plugin's); the zone is the
        // `--zone` flag's, else the one the ccm labelled the Node with.
        CloudName::Openstack => Ok(NodeIdentity {
            node_id: s.node_name(),
            zone: s.local.zone.clone().map(|zone| Zone {
                zone,
                region: String::new(),
            }),
            instance_id_from: Some("openstack"),
        }),
        // The node id is the VM's id (the oVirt CSI driver's): `--node-id` when it is one,
        // else read from the Node's `zvirt://<id>`. Its zone (cluster) and region (data
        // center) are `--zone`/`--region`, else the labels the ccm gave the Node: the
        // region matters, a disk's PV names its data center alone.
        CloudName::Zvirt => Ok(NodeIdentity {
            node_id: s.node_name(),
            zone: s.local.zone.clone().map(|zone| Zone {
                zone,
                region: s.local.region.clone().unwrap_or_default(),
            }),
            instance_id_from: Some("zvirt"),
        }),
        // What a node plugin of these clouds needs to know about its node (and whether
        // it reads any configuration at all) is each provider's to say when it lands.
        other => anyhow::bail!(other.not_built()),
    }
}

/// The providers whose configuration is built but whose cloud calls are not yet (issues
/// 16–18 and later): their configuration is read and checked as the provider will read
/// it — so a Secret lacking credentials is said now, naming what is missing — and then
/// the binary stops, saying the provider itself is not in this build.
fn configured_but_not_built(cloud: CloudName, s: &Settings) -> anyhow::Result<String> {
    let env = |k: &str| std::env::var(k).ok();
    let path = s.cloud_config.as_deref();
    let (summary, unknown) = match cloud {
        CloudName::Local | CloudName::Dvp | CloudName::Openstack => return Ok(String::new()),
        CloudName::Vsphere => {
            let c = overcast_cloud_vsphere::Config::load(path)?;
            let hosts: Vec<&str> = c.vcenters.iter().map(|v| v.host.as_str()).collect();
            (format!("vCenter {}", hosts.join(", ")), c.unknown)
        }
        CloudName::Zvirt => {
            let c = overcast_cloud_zvirt::Config::load(path, &env)?;
            (format!("engine at {}", c.api_url), c.unknown_keys)
        }
    };
    if !unknown.is_empty() {
        tracing::warn!(cloud = %cloud, keys = ?unknown, "the cloud config has keys this version does not know; ignored");
    }
    Ok(format!(
        "cloud {:?}: its configuration is complete ({summary}); {}",
        cloud.as_str(),
        cloud.not_built()
    ))
}

/// The capabilities `role` needs from the cloud `s` names. A cloud this build lacks is
/// said here (and by [`node_identity`]), before anything is contacted.
pub async fn open(role: Role, s: &Settings) -> anyhow::Result<Cloud> {
    match s.cloud {
        CloudName::Local => open_local(role, s).await,
        CloudName::Dvp => open_dvp(role, s).await,
        CloudName::Openstack => open_openstack(role, s),
        CloudName::Zvirt => open_zvirt(role, s),
        other => anyhow::bail!(configured_but_not_built(other, s)?),
    }
}

/// OpenStack: Cinder volumes attached through Nova, for the CSI controller; Nova servers
/// for the ccm; discovery. Nothing is contacted here: Keystone is asked for a token by
/// the first call.
fn open_openstack(role: Role, s: &Settings) -> anyhow::Result<Cloud> {
    use overcast_cloud_openstack::{CinderDisks, Config, Waits};
    let config = Config::load(s.cloud_config.as_deref())?;
    if !config.unknown.is_empty() {
        tracing::warn!(cloud = "openstack", keys = ?config.unknown, "the cloud config has keys this version does not know; ignored");
    }
    let connect = || -> anyhow::Result<_> {
        let os = overcast_cloud_openstack::connect(&config, Some(Arc::clone(&s.api_metrics)))?;
        // cinder-csi-plugin reports the zone alone (no region): so do its volumes, or
        // they could not be placed on its nodes.
        let disks = CinderDisks::new(
            Arc::clone(&os),
            s.cluster.clone(),
            String::new(),
            Vec::new(),
            s.max_attachments_per_node,
            config.ignore_volume_az,
            Waits::default(),
        );
        Ok((os, disks))
    };
    match role {
        Role::CsiController => Ok(Cloud {
            name: CloudName::Openstack.as_str(),
            disks: Some(Arc::new(connect()?.1)),
            ..Cloud::default()
        }),
        // Nodes from Nova, load balancers on Octavia (unless `[LoadBalancer] enabled =
        // false`), routes on the `[Route] router-id` router when one is named.
        Role::Ccm => {
            let os = overcast_cloud_openstack::connect(&config, Some(Arc::clone(&s.api_metrics)))?;
            // OCCM's switch for `openstack://<region>/<id>` providerIDs.
            let regional = std::env::var("OS_CCM_REGIONAL").is_ok_and(|v| v == "true");
            let load_balancers: Option<Arc<dyn overcast_cloud::LoadBalancers>> =
                config.load_balancer.enabled.then(|| {
                    Arc::new(overcast_cloud_openstack::OctaviaLoadBalancers::new(
                        Arc::clone(&os),
                        config.load_balancer.clone(),
                        s.cluster.clone(),
                    )) as _
                });
            Ok(Cloud {
                name: CloudName::Openstack.as_str(),
                instances: Some(Arc::new(overcast_cloud_openstack::NovaInstances::new(
                    Arc::clone(&os),
                    config.networking.clone(),
                    config.region.clone(),
                    regional,
                ))),
                load_balancers,
                routes: config.router_id.clone().map(|router| {
                    Arc::new(overcast_cloud_openstack::NeutronRoutes::new(
                        Arc::clone(&os),
                        router,
                    )) as Arc<dyn overcast_cloud::Routes>
                }),
                ..Cloud::default()
            })
        }
        Role::Discoverer => {
            let (os, disks) = connect()?;
            Ok(Cloud {
                name: CloudName::Openstack.as_str(),
                discovery: Some(Arc::new(overcast_cloud_openstack::OpenStackDiscovery::new(
                    os,
                    disks,
                    s.cluster.clone(),
                ))),
                ..Cloud::default()
            })
        }
    }
}

/// zVirt: disks on the engine for the CSI controller, its VMs for the ccm, discovery.
/// Nothing is contacted here: the SSO token is asked for by the first call.
fn open_zvirt(role: Role, s: &Settings) -> anyhow::Result<Cloud> {
    use overcast_cloud_zvirt::{Config, EngineDisks, Waits};
    let env = |k: &str| std::env::var(k).ok();
    let config = Config::load(s.cloud_config.as_deref(), &env)?;
    if !config.unknown_keys.is_empty() {
        tracing::warn!(cloud = "zvirt", keys = ?config.unknown_keys, "the cloud config has keys this version does not know; ignored");
    }
    match role {
        Role::CsiController => {
            let engine = overcast_cloud_zvirt::connect(&config, Some(Arc::clone(&s.api_metrics)))?;
            Ok(Cloud {
                name: CloudName::Zvirt.as_str(),
                disks: Some(Arc::new(EngineDisks::new(
                    engine,
                    s.cluster.clone(),
                    s.max_attachments_per_node,
                    Waits::default(),
                ))),
                ..Cloud::default()
            })
        }
        // zVirt has no load balancers (nor routes): the ccm runs the node controllers.
        Role::Ccm => {
            let engine = overcast_cloud_zvirt::connect(&config, Some(Arc::clone(&s.api_metrics)))?;
            Ok(Cloud {
                name: CloudName::Zvirt.as_str(),
                instances: Some(Arc::new(overcast_cloud_zvirt::EngineInstances::new(engine))),
                ..Cloud::default()
            })
        }
        Role::Discoverer => {
            let engine = overcast_cloud_zvirt::connect(&config, Some(Arc::clone(&s.api_metrics)))?;
            let disks = EngineDisks::new(
                Arc::clone(&engine),
                s.cluster.clone(),
                s.max_attachments_per_node,
                Waits::default(),
            );
            Ok(Cloud {
                name: CloudName::Zvirt.as_str(),
                discovery: Some(Arc::new(overcast_cloud_zvirt::EngineDiscovery::new(
                    engine, disks,
                ))),
                ..Cloud::default()
            })
        }
    }
}

/// DVP: the parent cluster's VM API. Nothing is contacted here: an unreachable parent
/// is said by the first call (and by /healthz), as any cloud outage is.
async fn open_dvp(role: Role, s: &Settings) -> anyhow::Result<Cloud> {
    use overcast_cloud_dvp::{
        Config, DvpDiscovery, DvpDisks, DvpInstances, DvpLoadBalancers, Parent, Waits,
    };
    let env = |k: &str| std::env::var(k).ok();
    let config = Config::load(s.cloud_config.as_deref(), &env)?;
    if !config.unknown_keys.is_empty() {
        tracing::warn!(cloud = "dvp", keys = ?config.unknown_keys, "the cloud config has keys this version does not know; ignored");
    }
    let parent = Parent::connect(&config, Arc::clone(&s.api_metrics)).await?;
    let mut cloud = Cloud {
        name: CloudName::Dvp.as_str(),
        ..Cloud::default()
    };
    match role {
        Role::CsiController => {
            cloud.disks = Some(Arc::new(DvpDisks::new(
                parent,
                s.max_attachments_per_node,
                Waits::default(),
            )));
        }
        Role::Ccm => {
            cloud.instances = Some(Arc::new(DvpInstances::new(parent.clone())));
            // Upstream polls five minutes for the parent's address; a shorter wait ends
            // in a retryable error and the service controller's backoff asks again.
            cloud.load_balancers = Some(Arc::new(DvpLoadBalancers::new(
                parent,
                std::time::Duration::from_secs(60),
            )));
        }
        Role::Discoverer => {
            let disks = DvpDisks::new(parent.clone(), s.max_attachments_per_node, Waits::default());
            cloud.discovery = Some(Arc::new(DvpDiscovery::new(parent, disks)));
        }
    }
    Ok(cloud)
}

async fn open_local(role: Role, s: &Settings) -> anyhow::Result<Cloud> {
    let file = LocalCloudConfig::load(s.cloud_config.as_deref())?;
    let me = node_identity(s)?;
    let zone = me.zone.clone().unwrap_or_default();
    let instances = || {
        LocalInstances::new(
            me.node_id.clone(),
            zone.clone(),
            s.local
                .instances_file
                .clone()
                .or(file.instances_file.clone()),
        )
    };
    let mut cloud = Cloud {
        name: CloudName::Local.as_str(),
        ..Cloud::default()
    };
    match role {
        Role::CsiController => {
            let config = LocalConfig {
                state_dir: s.local.state_dir.clone(),
                node_name: me.node_id.clone(),
                zone: zone.clone(),
                max_attachments_per_node: s.max_attachments_per_node,
            };
            let disks = LocalCloud::open(config).await.with_context(|| {
                format!("open the local cloud in {}", s.local.state_dir.display())
            })?;
            cloud.disks = Some(Arc::new(disks));
        }
        Role::Ccm => {
            let pool = match (s.local.lb_pool, &file.load_balancer_pool) {
                (Some(pool), _) => pool,
                (None, Some(text)) => text
                    .parse()
                    .map_err(|e| anyhow::anyhow!("cloud config loadBalancerPool: {e}"))?,
                (None, None) => DEFAULT_POOL.parse().map_err(anyhow::Error::msg)?,
            };
            cloud.instances = Some(Arc::new(instances()));
            cloud.load_balancers = Some(Arc::new(LocalLoadBalancers::new(pool)));
        }
        Role::Discoverer => {
            cloud.discovery = Some(Arc::new(LocalDiscovery::new(
                s.local.state_dir.clone(),
                zone.clone(),
                instances(),
            )));
        }
    }
    Ok(cloud)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_role_gets_its_capabilities_and_unbuilt_clouds_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Settings::new(CloudName::Local);
        s.local.state_dir = dir.path().join("state");
        s.node_name = Some("n1".into());
        s.local.zone = Some("z1".into());
        let ccm = open(Role::Ccm, &s).await.unwrap();
        assert!(ccm.instances.is_some() && ccm.load_balancers.is_some());
        assert!(ccm.disks.is_none() && ccm.discovery.is_none());
        let disc = open(Role::Discoverer, &s).await.unwrap();
        assert!(disc.discovery.is_some() && disc.instances.is_none());
        let me = node_identity(&s).unwrap();
        assert_eq!(me.node_id, "n1");
        assert_eq!(me.zone.unwrap().zone, "z1");
        // DVP: its configuration first; its node plugin needs none.
        let mut dvp = Settings::new(CloudName::Dvp);
        dvp.node_name = Some("worker-1".into());
        let err = open(Role::CsiController, &dvp)
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("lacks credentials or settings"), "{err}");
        let me = node_identity(&dvp).unwrap();
        assert_eq!((me.node_id.as_str(), me.zone), ("worker-1", None));
        for c in CloudName::ALL.into_iter().filter(|c| !c.is_built()) {
            let s = Settings::new(c);
            // Without a configuration, what is missing is said first.
            let err = open(Role::Ccm, &s).await.err().unwrap().to_string();
            assert!(err.contains("lacks credentials or settings"), "{err}");
            assert_eq!(node_identity(&s).is_err(), c != CloudName::Openstack);
        }
    }
}
