//! The instances capability (the cloud-provider's InstancesV2): whether a node's machine
//! exists, whether it is shut down, and its metadata. Listing is the primitive: one call
//! answers for every node of a sync, so a 5,000-node cluster costs one cloud call per
//! sync, not 5,000.

use std::collections::HashMap;

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
    /// Running, or in a state the cloud does not call off (starting, migrating, a host
    /// the cloud cannot reach): whatever runs there may still write.
    Running,
    /// Powered off, as the cloud positively reports it (zVirt `down`, DVP `Stopped`,
    /// OpenStack `SHUTOFF`, vSphere `poweredOff`): no guest runs, nothing it held is
    /// written. The only state the ccm's fencing acts on.
    Shutdown,
    /// Not running, not off: suspended or paused, it resumes where it stopped, with
    /// whatever its guest had not written yet. Upstream's shutdown taint applies (no new
    /// pods), fencing never does.
    Suspended,
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

/// An instance as the cloud knows it, however a providerID spells it: what
/// [`Instances::instance_keys`] reads a providerID as. Compared instead of providerID
/// strings, which other providers spell otherwise (OpenStack's region, vSphere's case and
/// byte order).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceKey(pub String);

/// The machines of the cloud, as the CCM sees them.
///
/// The identity contract every provider keeps (checked by
/// [`crate::conformance::instances`]): the CSI node id the node plugin reports for a
/// machine is the `node_name` of exactly one listed instance, and that is the
/// Kubernetes node's name; the instance's `provider_id` is `<provider_name>://<id>`,
/// which the CCM writes to `spec.providerID` and looks the node up by from then on (a
/// node found by providerID keeps its instance even if renamed). Every form the
/// provider's upstream writes for an instance ([`Instances::upstream_forms`]) names that
/// same instance.
#[async_trait]
pub trait Instances: Send + Sync + 'static {
    /// The providerID scheme, e.g. `local` for `local://<node>`.
    fn provider_name(&self) -> &'static str;
    /// The keys an instance a node's `provider_id` names may be listed under: the first is
    /// the instance's own, further ones other readings of the same spelling (vSphere's
    /// byte-swapped UUID). Every form the provider's upstream writes or reads is
    /// understood. An error for a providerID this provider cannot read (malformed,
    /// another region): the node is left alone — never taken for one whose instance is
    /// gone.
    fn instance_keys(&self, provider_id: &str) -> Result<Vec<InstanceKey>> {
        plain_keys(self.provider_name(), provider_id)
    }
    /// The providerIDs the provider's upstream writes (or has written) for `instance`,
    /// each of which must find it: what the conformance suite checks.
    fn upstream_forms(&self, instance: &Instance) -> Vec<String> {
        vec![instance.provider_id.clone()]
    }
    /// Every instance. An error means "unknown", never "gone".
    async fn list_instances(&self) -> Result<Vec<Instance>>;
    /// The instances of `nodes`: what a node sync reads. For each node, the instance its
    /// providerID names, or — a node without one — every instance of its name, whenever
    /// they exist; others may come too. What it leaves out is gone, as a listing's
    /// absence is: a provider whose cloud can answer for these alone (zVirt's search on
    /// ids and names) confirms an absence before it answers one, and its cost follows
    /// the cluster, not the cloud. An error means "unknown", never "gone". Default: every
    /// instance.
    async fn instances_of(&self, nodes: &[NodeRef<'_>]) -> Result<Vec<Instance>> {
        let _ = nodes;
        self.list_instances().await
    }
}

/// A node as a sync asks the cloud about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeRef<'a> {
    pub name: &'a str,
    /// Its `spec.providerID`, when set.
    pub provider_id: Option<&'a str>,
}

/// `<scheme>://<id>`, the id non-empty and without `/`: the form most providers write.
pub fn plain_keys(scheme: &str, provider_id: &str) -> Result<Vec<InstanceKey>> {
    let id = provider_id
        .strip_prefix(scheme)
        .and_then(|rest| rest.strip_prefix("://"))
        .filter(|id| !id.is_empty() && !id.contains('/'))
        .ok_or_else(|| {
            crate::CloudError::InvalidArgument(format!(
                "providerID {provider_id:?} is not of the form {scheme}://<id>"
            ))
        })?;
    Ok(vec![InstanceKey(id.to_owned())])
}

/// One listing's instances by key, built once per sync: a node is found in it by the
/// instance its providerID names, whatever the spelling, not by comparing strings.
pub struct InstanceIndex<'a> {
    cloud: &'a dyn Instances,
    list: &'a [Instance],
    by_key: HashMap<InstanceKey, usize>,
}

impl<'a> InstanceIndex<'a> {
    pub fn new(cloud: &'a dyn Instances, list: &'a [Instance]) -> Self {
        let mut by_key = HashMap::with_capacity(list.len());
        for (i, instance) in list.iter().enumerate() {
            match cloud.instance_keys(&instance.provider_id) {
                Ok(keys) => {
                    if let Some(own) = keys.into_iter().next() {
                        by_key.entry(own).or_insert(i);
                    }
                }
                // The provider's own spelling always reads back (the conformance suite
                // checks it); a listing that breaks that names no node's instance.
                Err(e) => {
                    tracing::warn!(provider_id = %instance.provider_id, error = %e, "an instance whose providerID its own provider cannot read")
                }
            }
        }
        Self {
            cloud,
            list,
            by_key,
        }
    }

    pub fn instances(&self) -> &'a [Instance] {
        self.list
    }

    /// The instance of a node: by the instance its providerID names when it has one, else
    /// by name — never one of several of that name (OCCM refuses those too): see
    /// [`InstanceIndex::ambiguous`]. `Ok(None)` only when the listing positively lacks
    /// it; a providerID the provider cannot read is an error, for that node alone.
    pub fn find(&self, node_name: &str, provider_id: Option<&str>) -> Result<Option<&'a Instance>> {
        match provider_id.filter(|p| !p.is_empty()) {
            Some(pid) => Ok(self
                .cloud
                .instance_keys(pid)?
                .iter()
                .find_map(|k| self.by_key.get(k))
                .map(|i| &self.list[*i])),
            None if self.ambiguous(node_name, provider_id) => Ok(None),
            None => Ok(self.list.iter().find(|i| i.node_name == node_name)),
        }
    }

    /// Whether a node without a providerID shares its name with several instances (a
    /// leftover server of the same name): no identity can be given to it, and none is
    /// gone either — it is neither initialized nor deleted until a person tells them
    /// apart.
    pub fn ambiguous(&self, node_name: &str, provider_id: Option<&str>) -> bool {
        provider_id.is_none_or(str::is_empty)
            && self
                .list
                .iter()
                .filter(|i| i.node_name == node_name)
                .count()
                > 1
    }
}

/// Kubernetes' `IsValidLabelValue`: at most 63 characters of `[A-Za-z0-9_.-]`, beginning
/// and ending with a letter or digit; empty is valid. What a label on a Node may hold, and
/// what a label selector may name.
pub fn is_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && v.chars().next().is_none_or(|c| c.is_ascii_alphanumeric())
        && v.chars().last().is_none_or(|c| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_provider_id_reads_as_its_id_and_nothing_else_does() {
        assert_eq!(
            plain_keys("local", "local://n1").unwrap(),
            vec![InstanceKey("n1".into())]
        );
        for bad in [
            "local://",
            "local:///n1",
            "local://a/b",
            "other://n1",
            "n1",
            "",
        ] {
            assert!(plain_keys("local", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn label_values_are_kubernetes_own() {
        // apimachinery's validation_test.go TestIsValidLabelValue, good and bad.
        for good in [
            "simple",
            "now-with-dashes",
            "1-starts-with-num",
            "end-with-num-1",
            "1234",
            "A",
            "AB",
            "AbC",
            "Ab-C",
            "a.b",
            "a_b",
            "",
            &"a".repeat(63),
        ] {
            assert!(is_label_value(good), "{good:?}");
        }
        for bad in [
            "nospecialchars%^=@",
            "Tama-nui-te-rā.is.Māori.sun",
            "\\backslashes\\in\\value",
            "-starts-with-dash",
            "ends-with-dash-",
            ".starts.with.dot",
            "ends.with.dot.",
            &"a".repeat(64),
        ] {
            assert!(!is_label_value(bad), "{bad:?}");
        }
    }
}
