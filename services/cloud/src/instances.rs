//! The instances capability (the cloud-provider's InstancesV2): whether a node's machine
//! exists, whether it is shut down, and its metadata. Listing is the primitive: one call
//! answers for every node of a sync, so a 5,000-node cluster costs one cloud call per
//! sync, not 5,000.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{Result, Zone};

/// The five Kubernetes node address types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum AddressType {
    Hostname,
    InternalIP,
    ExternalIP,
    InternalDNS,
    ExternalDNS,
}

impl AddressType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hostname => "Hostname",
            Self::InternalIP => "InternalIP",
            Self::ExternalIP => "ExternalIP",
            Self::InternalDNS => "InternalDNS",
            Self::ExternalDNS => "ExternalDNS",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeAddress {
    #[serde(rename = "type")]
    pub kind: AddressType,
    pub address: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceState {
    Running,
    Shutdown,
}

/// One machine as the cloud knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// The name a Kubernetes node of this machine carries.
    pub node_name: String,
    pub provider_id: String,
    pub instance_type: String,
    pub addresses: Vec<NodeAddress>,
    pub zone: Option<Zone>,
    pub state: InstanceState,
}

/// The machines of the cloud, as the CCM sees them.
///
/// The identity contract every provider keeps (checked by
/// [`crate::conformance::instances`]): the CSI node id the node plugin reports for a
/// machine is the `node_name` of exactly one listed instance, and that is the
/// Kubernetes node's name; the instance's `provider_id` is `<provider_name>://<id>`,
/// which the CCM writes to `spec.providerID` and looks the node up by from then on (a
/// node found by providerID keeps its instance even if renamed).
#[async_trait]
pub trait Instances: Send + Sync + 'static {
    /// The providerID scheme, e.g. `local` for `local://<node>`.
    fn provider_name(&self) -> &'static str;
    /// Every instance. An error means "unknown", never "gone".
    async fn list_instances(&self) -> Result<Vec<Instance>>;
}

/// Finds the instance of a node: by providerID when the node has one, else by name —
/// never one of several of that name (OCCM refuses those too): see [`ambiguous`].
pub fn find<'a>(
    instances: &'a [Instance],
    node_name: &str,
    provider_id: Option<&str>,
) -> Option<&'a Instance> {
    match provider_id.filter(|p| !p.is_empty()) {
        Some(pid) => instances.iter().find(|i| i.provider_id == pid),
        None if ambiguous(instances, node_name, provider_id) => None,
        None => instances.iter().find(|i| i.node_name == node_name),
    }
}

/// Whether a node without a providerID shares its name with several instances (a
/// leftover server of the same name): no identity can be given to it, and none is
/// gone either — it is neither initialized nor deleted until a person tells them apart.
pub fn ambiguous(instances: &[Instance], node_name: &str, provider_id: Option<&str>) -> bool {
    provider_id.is_none_or(str::is_empty)
        && instances
            .iter()
            .filter(|i| i.node_name == node_name)
            .count()
            > 1
}
