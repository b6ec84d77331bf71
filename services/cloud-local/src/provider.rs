//! The local cloud as the registry sees it: disks for the CSI controller, this host (and
//! the instances file's machines) with address pools for the ccm, discovery.

use std::sync::Arc;

use anyhow::Context as _;
use overcast_cloud::{Cloud, CloudName, Zone};
use overcast_provider::{NodeIdentity, Provider, Role, Settings};

use crate::cloud_config::LocalCloudConfig;
use crate::discovery::LocalDiscovery;
use crate::instances::LocalInstances;
use crate::lb::{LocalLoadBalancers, Pool, DEFAULT_POOL};
use crate::{LocalCloud, LocalConfig};

/// What this crate gives the registry.
pub static PROVIDER: Local = Local;

pub struct Local;

#[async_trait::async_trait]
impl Provider for Local {
    fn name(&self) -> CloudName {
        CloudName::Local
    }

    fn config_keys(&self) -> overcast_cloud::config::FileKeys {
        crate::cloud_config::file_keys()
    }

    /// The zone and region are the flags', else the cloud-config file's, else `local`.
    fn node_identity(&self, s: &Settings) -> anyhow::Result<NodeIdentity> {
        let file = LocalCloudConfig::load(s.cloud_config.as_deref())?;
        Ok(NodeIdentity {
            node_id: s.node_name(),
            zone: Some(Zone {
                zone: file.zone(s.zone.as_deref()),
                region: file.region(s.region.as_deref()),
            }),
            instance_id_from: None,
            // The node sees the state directory where the controller does (the node
            // DaemonSet mounts it at the same path).
            disk_of_volume: overcast_cloud::DiskOfVolume::BackingFile(
                std::fs::canonicalize(&s.local.state_dir)
                    .unwrap_or_else(|_| s.local.state_dir.clone())
                    .join("disks"),
            ),
        })
    }

    async fn open(&self, role: Role, s: &Settings) -> anyhow::Result<Cloud> {
        let file = LocalCloudConfig::load(s.cloud_config.as_deref())?;
        let me = self.node_identity(s)?;
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
                    instances_file: s
                        .local
                        .instances_file
                        .clone()
                        .or(file.instances_file.clone()),
                    zone: zone.clone(),
                    max_attachments_per_node: s.max_attachments_per_node,
                };
                let disks = LocalCloud::open(config).await.with_context(|| {
                    format!("open the local cloud in {}", s.local.state_dir.display())
                })?;
                cloud.disks = Some(Arc::new(disks));
            }
            Role::Ccm => {
                let pool: Pool = match (&s.local.lb_pool, &file.load_balancer_pool) {
                    (Some(text), _) => text
                        .parse()
                        .map_err(|e| anyhow::anyhow!("--lb-pool: {e}"))?,
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
}
