//! DVP as the registry sees it: the parent cluster's VM API. Nothing is contacted when
//! opened: an unreachable parent is said by the first call (and by /healthz), as any
//! cloud outage is.

use std::sync::Arc;

use overcast_cloud::{Cloud, CloudName};
use overcast_provider::{NodeIdentity, Provider, Role, Settings};

use crate::{Config, DvpDiscovery, DvpDisks, DvpInstances, DvpLoadBalancers, Parent, Waits};

/// What this crate gives the registry.
pub static PROVIDER: Dvp = Dvp;

pub struct Dvp;

#[async_trait::async_trait]
impl Provider for Dvp {
    fn name(&self) -> CloudName {
        CloudName::Dvp
    }

    fn config_keys(&self) -> overcast_cloud::config::FileKeys {
        crate::config::file_keys()
    }

    /// A DVP node plugin holds no parent credentials: its node id is its node name (the
    /// VM's hostname label), its zone the one the ccm found for its VM.
    fn node_identity(&self, s: &Settings) -> anyhow::Result<NodeIdentity> {
        Ok(NodeIdentity {
            node_id: s.node_name(),
            zone: None,
            instance_id_from: None,
            disk_of_volume: overcast_cloud::DiskOfVolume::Unknown,
        })
    }

    async fn open(&self, role: Role, s: &Settings) -> anyhow::Result<Cloud> {
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
                // Upstream polls five minutes for the parent's address; a shorter wait
                // ends in a retryable error and the service controller's backoff asks
                // again.
                cloud.load_balancers = Some(Arc::new(DvpLoadBalancers::new(
                    parent,
                    std::time::Duration::from_secs(60),
                )));
            }
            Role::Discoverer => {
                let disks =
                    DvpDisks::new(parent.clone(), s.max_attachments_per_node, Waits::default());
                cloud.discovery = Some(Arc::new(DvpDiscovery::new(parent, disks)));
            }
        }
        Ok(cloud)
    }
}
