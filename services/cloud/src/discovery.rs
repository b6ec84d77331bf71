//! The discovery capability: what the cloud offers, published for the rest of the
//! platform (the Deckhouse `d8-cloud-provider-discovery-data` contract), the cloud's
//! health checks, the instance-type catalog for the autoscaler, and the disks the
//! cluster created (for orphan reporting — never deletion).

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::Result;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceType {
    pub name: String,
    pub cpu: u32,
    pub memory_mib: u64,
    pub root_disk_gib: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudCondition {
    pub name: String,
    pub message: String,
    pub ok: bool,
}

impl CloudCondition {
    pub fn new(name: &str, ok: bool, message: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            message: message.into(),
            ok,
        }
    }
}

/// The metadata key a provider sets on a disk it found and kept without knowing whose it
/// is (the local cloud: a disk file with no record and no metadata file). Its value says
/// why. The orphan report lists every such disk no PersistentVolume names, as it lists
/// the cluster's own, so that a kept disk is seen rather than silently held.
pub const UNEXPLAINED: &str = "overcast.dev/unexplained";

/// The metadata key a provider sets on a disk another CSI driver made (a cluster switched
/// from it), recognised as that driver recognises its own; its value names the driver.
pub const MADE_BY: &str = "overcast.dev/made-by";

/// The external-provisioner's metadata key for a volume's PV name
/// (`--extra-create-metadata`), which the orphan report matches PVs by.
pub const PV_NAME_KEY: &str = "csi.storage.k8s.io/pv/name";

/// A disk with the metadata the CSI driver recorded on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDisk {
    pub id: String,
    pub name: String,
    pub metadata: BTreeMap<String, String>,
}

impl From<crate::Disk> for ClusterDisk {
    fn from(d: crate::Disk) -> Self {
        Self {
            id: d.id,
            name: d.name,
            metadata: d.metadata,
        }
    }
}

impl ClusterDisk {
    /// The cluster's disks of a provider whose `Disks::list_disks` already lists only
    /// this cluster's disks (zVirt, DVP), as discovery reports them.
    pub async fn all_of(disks: &dyn crate::Disks) -> Result<Vec<ClusterDisk>> {
        Ok(disks
            .list_disks()
            .await?
            .into_iter()
            .map(ClusterDisk::from)
            .collect())
    }
}

#[async_trait]
pub trait Discovery: Send + Sync + 'static {
    /// The provider's discovery document: `apiVersion`, a provider `kind`, and its fields.
    async fn discovery_data(&self) -> Result<serde_json::Value>;
    async fn instance_types(&self) -> Result<Vec<InstanceType>>;
    async fn conditions(&self) -> Result<Vec<CloudCondition>>;
    async fn cluster_disks(&self) -> Result<Vec<ClusterDisk>>;
}
