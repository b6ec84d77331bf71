//! Instances on DVP. A sync reads the cluster's own VMs, whatever else the parent
//! namespace holds (other clusters' VMs, where a namespace is shared): a GET per node
//! with a providerID, and for nodes without one the VM of the node's name and the VMs
//! whose hostname label names it — upstream's GetVMByName and GetVMByHostname, as one
//! set-based selector for 40 names. The whole namespace (pages of 500) is listed only
//! for what asks for every instance. The parent's Nodes are read for the zones the VMs
//! run in.
//!
//! As upstream: providerID `dvp://<vm-name>`, the node name is the VM's
//! `dvp.deckhouse.io/hostname` label (else its name), `status.ipAddress` is both the
//! InternalIP and the ExternalIP, a Stopped VM is shut down, a deleted VM is gone.
//! Beyond upstream: an instance type from the VM's class, cores and memory, and the zone
//! and region of the parent node the VM runs on.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures::stream::{self, StreamExt, TryStreamExt};
use kube::ResourceExt;
use overcast_cloud::instances::NodeRef;
use overcast_cloud::{
    is_label_value, AddressType, Instance, InstanceState, Instances, NodeAddress, Result, Zone,
};

use crate::api::{self, VirtualMachine};
use crate::parent::Parent;
use crate::zones::ParentNodes;

pub const PROVIDER: &str = "dvp";
/// VM GETs in flight at once during a sync.
const IN_FLIGHT: usize = 8;
/// Hostnames one selector names: 40 keep the request line near 2 KB.
const NAMES_A_CALL: usize = 40;

pub struct DvpInstances {
    parent: Parent,
    nodes: ParentNodes,
}

impl DvpInstances {
    pub fn new(parent: Parent) -> Self {
        Self {
            parent,
            nodes: ParentNodes::default(),
        }
    }
}

/// `<class>-<cores>c-<memory>`, e.g. `generic-4c-8gi`: what a VM of this shape is.
pub fn instance_type(vm: &VirtualMachine) -> String {
    let cores = vm.spec.cpu.as_ref().map(|c| c.cores).unwrap_or(0);
    let memory = vm
        .spec
        .memory
        .as_ref()
        .and_then(|m| api::quantity_bytes(&m.size.0))
        .unwrap_or(0);
    shape_name(&vm.spec.virtual_machine_class_name, cores, memory)
}

/// The name of a shape: the class, the cores, the memory (in GiB when whole).
pub fn shape_name(class: &str, cores: u32, memory_bytes: u64) -> String {
    let memory = if memory_bytes > 0 && memory_bytes.is_multiple_of(1 << 30) {
        format!("{}gi", memory_bytes >> 30)
    } else {
        format!("{}mi", memory_bytes.div_ceil(1 << 20))
    };
    format!("{class}-{cores}c-{memory}")
}

pub fn to_instance(vm: &VirtualMachine, zones: &BTreeMap<String, Zone>) -> Instance {
    let hostname = api::vm_hostname(vm).to_owned();
    let status = vm.status.clone().unwrap_or_default();
    let mut addresses = Vec::new();
    if let Some(ip) = status.ip_address.as_deref().filter(|ip| !ip.is_empty()) {
        for kind in [AddressType::InternalIP, AddressType::ExternalIP] {
            addresses.push(NodeAddress {
                kind,
                address: ip.to_owned(),
            });
        }
    }
    addresses.push(NodeAddress {
        kind: AddressType::Hostname,
        address: hostname.clone(),
    });
    let state = match status.phase.as_deref() {
        Some("Stopped") => InstanceState::Shutdown,
        _ => InstanceState::Running,
    };
    Instance {
        node_name: hostname,
        provider_id: format!("{PROVIDER}://{}", vm.name_any()),
        instance_type: instance_type(vm),
        addresses,
        zone: status
            .node_name
            .as_ref()
            .and_then(|n| zones.get(n))
            .cloned(),
        state,
    }
}

#[async_trait]
impl Instances for DvpInstances {
    fn provider_name(&self) -> &'static str {
        PROVIDER
    }

    async fn list_instances(&self) -> Result<Vec<Instance>> {
        let vms = self
            .parent
            .list_all("virtualmachine_list", &self.parent.vms(), None)
            .await?;
        let zones = self.nodes.zones_by_node(&self.parent).await?;
        Ok(vms.iter().map(|vm| to_instance(vm, &zones)).collect())
    }

    /// A 404 for a VM is the parent saying that VM is gone; any other failure is an
    /// error ("unknown"). A providerID this provider cannot read is skipped: the ccm
    /// leaves such a node alone.
    async fn instances_of(&self, nodes: &[NodeRef<'_>]) -> Result<Vec<Instance>> {
        let api = self.parent.vms();
        let mut names: Vec<String> = Vec::new();
        let mut hostnames: Vec<&str> = Vec::new();
        for node in nodes {
            match node.provider_id {
                Some(pid) => {
                    if let Ok(keys) = self.instance_keys(pid) {
                        names.extend(keys.into_iter().next().map(|k| k.0));
                    }
                }
                None => {
                    names.push(node.name.to_owned());
                    // Only a label value can be a label's value.
                    if !node.name.is_empty() && is_label_value(node.name) {
                        hostnames.push(node.name);
                    }
                }
            }
        }
        names.sort();
        names.dedup();
        hostnames.sort_unstable();
        hostnames.dedup();
        let api = &api;
        let mut vms: Vec<VirtualMachine> = stream::iter(names)
            .map(|name| async move { self.parent.get_opt("virtualmachine_get", api, &name).await })
            .buffer_unordered(IN_FLIGHT)
            .try_filter_map(|vm| async move { Ok(vm) })
            .try_collect()
            .await?;
        for chunk in hostnames.chunks(NAMES_A_CALL) {
            let selector = format!("{} in ({})", api::HOSTNAME_LABEL, chunk.join(","));
            vms.extend(
                self.parent
                    .list_all("virtualmachine_list", api, Some(&selector))
                    .await?,
            );
        }
        vms.sort_by_key(|vm| vm.name_any());
        vms.dedup_by_key(|vm| vm.name_any());
        let zones = self.nodes.zones_by_node(&self.parent).await?;
        Ok(vms.iter().map(|vm| to_instance(vm, &zones)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn a_vm_reads_as_upstream_names_it_and_with_what_upstream_left_out() {
        let mut vm = VirtualMachine::new(
            "vm-7f3a",
            &api::virtual_machine(),
            api::VmSpec {
                virtual_machine_class_name: "generic".into(),
                cpu: Some(api::VmCpu {
                    cores: 4,
                    core_fraction: None,
                }),
                memory: Some(api::VmMemory {
                    size: Quantity("8Gi".into()),
                }),
                ..Default::default()
            },
        );
        vm.metadata.labels = Some([(api::HOSTNAME_LABEL.to_owned(), "worker-1".to_owned())].into());
        vm.status = Some(api::VmStatus {
            phase: Some("Stopped".into()),
            node_name: Some("parent-a".into()),
            ip_address: Some("10.66.0.7".into()),
            ..Default::default()
        });
        let zones = BTreeMap::from([(
            "parent-a".to_owned(),
            Zone {
                zone: "z1".into(),
                region: "r1".into(),
            },
        )]);
        let i = to_instance(&vm, &zones);
        assert_eq!(i.node_name, "worker-1");
        assert_eq!(i.provider_id, "dvp://vm-7f3a");
        assert_eq!(i.instance_type, "generic-4c-8gi");
        assert_eq!(i.state, InstanceState::Shutdown);
        assert_eq!(i.zone.as_ref().map(|z| z.zone.as_str()), Some("z1"));
        let kinds: Vec<AddressType> = i.addresses.iter().map(|a| a.kind).collect();
        assert_eq!(
            kinds,
            [
                AddressType::InternalIP,
                AddressType::ExternalIP,
                AddressType::Hostname
            ]
        );
        vm.status.as_mut().unwrap().ip_address = None;
        vm.status.as_mut().unwrap().phase = Some("Running".into());
        let i = to_instance(&vm, &BTreeMap::new());
        assert_eq!(i.addresses.len(), 1);
        assert_eq!(i.state, InstanceState::Running);
        assert!(i.zone.is_none());
    }
}
