//! OpenStack as the registry sees it: Cinder volumes attached through Nova for the CSI
//! controller; Nova servers, Octavia load balancers and Neutron routes for the ccm;
//! discovery. Nothing is contacted when opened: Keystone is asked for a token by the
//! first call.

use std::sync::Arc;

use overcast_cloud::{Cloud, CloudName, Zone};
use overcast_provider::{NodeIdentity, Provider, Role, Settings, TopologyAliases};

use crate::{
    CinderDisks, Config, NeutronRoutes, NovaInstances, OctaviaLoadBalancers, OpenStackDiscovery,
    Waits,
};

/// What this crate gives the registry.
pub static PROVIDER: Openstack = Openstack;

pub struct Openstack;

#[async_trait::async_trait]
impl Provider for Openstack {
    fn name(&self) -> CloudName {
        CloudName::Openstack
    }

    fn config_keys(&self) -> overcast_cloud::config::FileKeys {
        crate::config::file_keys()
    }

    /// The node id is the Nova server's id (cinder-csi-plugin's); the zone is the
    /// `--zone` flag's, else the one the ccm labelled the Node with. cinder-csi-plugin
    /// reports no region.
    fn node_identity(&self, s: &Settings) -> anyhow::Result<NodeIdentity> {
        Ok(NodeIdentity {
            node_id: s.node_name(),
            zone: s.zone.clone().map(|zone| Zone {
                zone,
                region: String::new(),
            }),
            instance_id_from: Some("openstack"),
            disk_of_volume: overcast_cloud::DiskOfVolume::Serial,
        })
    }

    /// cinder-csi-plugin's key, so the PVs it made keep scheduling after a switch.
    fn topology_aliases(&self, _s: &Settings) -> anyhow::Result<TopologyAliases> {
        Ok(TopologyAliases {
            zone: vec!["topology.cinder.csi.openstack.org/zone".to_owned()],
            region: Vec::new(),
        })
    }

    /// `[BlockStorage] node-volume-attach-limit` (read alone, so a node plugin given a
    /// cloud-config without credentials gets it too), else cinder-csi-plugin's 256.
    fn default_attach_limit(&self, s: &Settings) -> Option<u64> {
        Some(
            crate::config::node_volume_attach_limit(s.cloud_config.as_deref())
                .unwrap_or(256)
                .into(),
        )
    }

    /// `[BlockStorage] rescan-on-resize`.
    fn default_rescan_on_resize(&self, s: &Settings) -> bool {
        crate::config::rescan_on_resize(s.cloud_config.as_deref())
    }

    async fn open(&self, role: Role, s: &Settings) -> anyhow::Result<Cloud> {
        let config = Config::load(s.cloud_config.as_deref())?;
        if !config.unknown.is_empty() {
            tracing::warn!(cloud = "openstack", keys = ?config.unknown, "the cloud config has keys this version does not know; ignored");
        }
        let os = crate::connect(&config, Some(Arc::clone(&s.api_metrics)))?;
        // cinder-csi-plugin reports the zone alone (no region): so do its volumes, or
        // they could not be placed on its nodes.
        let disks = || {
            CinderDisks::new(
                Arc::clone(&os),
                s.cluster.clone(),
                String::new(),
                Vec::new(),
                s.max_attachments_per_node,
                config.ignore_volume_az,
                Waits::default(),
            )
        };
        let mut cloud = Cloud {
            name: CloudName::Openstack.as_str(),
            ..Cloud::default()
        };
        match role {
            Role::CsiController => cloud.disks = Some(Arc::new(disks())),
            // Nodes from Nova, load balancers on Octavia (unless `[LoadBalancer] enabled
            // = false`), routes on the `[Route] router-id` router when one is named.
            Role::Ccm => {
                // OCCM's switch for `openstack://<region>/<id>` providerIDs.
                let regional = std::env::var("OS_CCM_REGIONAL").is_ok_and(|v| v == "true");
                cloud.instances = Some(Arc::new(NovaInstances::new(
                    Arc::clone(&os),
                    config.networking.clone(),
                    config.region.clone(),
                    regional,
                )));
                if config.load_balancer.enabled {
                    cloud.load_balancers = Some(Arc::new(OctaviaLoadBalancers::new(
                        Arc::clone(&os),
                        config.load_balancer.clone(),
                        s.cluster.clone(),
                    )));
                }
                cloud.routes = config.router_id.clone().map(|router| {
                    Arc::new(NeutronRoutes::new(Arc::clone(&os), router))
                        as Arc<dyn overcast_cloud::Routes>
                });
            }
            Role::Discoverer => {
                cloud.discovery = Some(Arc::new(OpenStackDiscovery::new(
                    Arc::clone(&os),
                    disks(),
                    s.cluster.clone(),
                )));
            }
        }
        Ok(cloud)
    }
}
