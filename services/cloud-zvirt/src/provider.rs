//! zVirt as the registry sees it: disks on the engine for the CSI controller, its VMs for
//! the ccm, discovery. Nothing is contacted when opened: the SSO token is asked for by
//! the first call.

use std::sync::Arc;

use overcast_cloud::{Cloud, CloudName};
use overcast_provider::{NodeIdentity, Provider, Role, Settings};

use crate::{Config, EngineDiscovery, EngineDisks, EngineInstances, Waits};

/// What this crate gives the registry.
pub static PROVIDER: Zvirt = Zvirt;

pub struct Zvirt;

#[async_trait::async_trait]
impl Provider for Zvirt {
    fn name(&self) -> CloudName {
        CloudName::Zvirt
    }

    fn config_keys(&self) -> overcast_cloud::config::FileKeys {
        crate::config::file_keys()
    }

    /// The node id is the VM's id (the oVirt CSI driver's): `--node-id` when it is one,
    /// else read from the Node's `zvirt://<id>`. Its zone (cluster) and region (data
    /// center) are `--zone`/`--region`, else the labels the ccm gave the Node: the region
    /// matters, a disk's PV names its data center alone.
    fn node_identity(&self, s: &Settings) -> anyhow::Result<NodeIdentity> {
        Ok(NodeIdentity {
            node_id: s.node_name(),
            zone: s.zone_flag(),
            instance_id_from: Some("zvirt"),
            disk_of_volume: overcast_cloud::DiskOfVolume::Serial,
        })
    }

    async fn open(&self, role: Role, s: &Settings) -> anyhow::Result<Cloud> {
        let env = |k: &str| std::env::var(k).ok();
        let config = Config::load(s.cloud_config.as_deref(), &env)?;
        if !config.unknown_keys.is_empty() {
            tracing::warn!(cloud = "zvirt", keys = ?config.unknown_keys, "the cloud config has keys this version does not know; ignored");
        }
        let engine = crate::connect(&config, Some(Arc::clone(&s.api_metrics)))?;
        let disks = || {
            EngineDisks::new(
                Arc::clone(&engine),
                s.cluster.clone(),
                s.max_attachments_per_node,
                Waits::default(),
            )
        };
        let mut cloud = Cloud {
            name: CloudName::Zvirt.as_str(),
            ..Cloud::default()
        };
        match role {
            Role::CsiController => cloud.disks = Some(Arc::new(disks())),
            // zVirt has no load balancers (nor routes): the ccm runs the node controllers.
            Role::Ccm => {
                cloud.instances = Some(Arc::new(EngineInstances::new(Arc::clone(&engine))));
            }
            Role::Discoverer => {
                cloud.discovery =
                    Some(Arc::new(EngineDiscovery::new(Arc::clone(&engine), disks())));
            }
        }
        Ok(cloud)
    }
}
