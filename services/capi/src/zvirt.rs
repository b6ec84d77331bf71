//! capz on Overcast: the ZvirtCluster and ZvirtMachine controllers, on the zVirt
//! provider's engine client.

pub mod cluster;
pub mod machine;

use std::sync::Arc;
use std::time::Duration;

use overcast_cloud_zvirt::{Engine, EngineVms, VmSpec};

use crate::crd::zvirt::ZvirtMachineSpec;

/// What both controllers share.
pub struct Context {
    pub client: kube::Client,
    pub engine: Arc<Engine>,
    pub vms: EngineVms,
    /// How often a VM on its way (being made, starting, awaiting its address) is looked at.
    pub poll: Duration,
    /// The management cluster's API server, the ZvirtCluster's control plane endpoint.
    pub api_server: Option<(String, i32)>,
    pub retries: crate::retry::Retries,
}

/// The engine VM a ZvirtMachine asks for, in engine cluster `cluster_id`, for Machine
/// `machine` (its name is the VM's name and the guest's host name).
pub fn vm_spec(spec: &ZvirtMachineSpec, cluster_id: &str, machine: &str) -> VmSpec {
    let positive = |n: i32| u32::try_from(n).unwrap_or(0).max(1);
    VmSpec {
        cluster_id: cluster_id.to_owned(),
        template: spec.template.clone(),
        sockets: positive(spec.cpu.sockets),
        cores: positive(spec.cpu.cores),
        threads: positive(spec.cpu.threads),
        memory_mib: u64::try_from(spec.memory).unwrap_or(0),
        root_disk_gib: u64::try_from(spec.root_disk_size_gb).unwrap_or(0),
        nic_name: spec.nic_name.clone(),
        vnic_profile_id: spec.vnic_profile_id.clone(),
        host_name: machine.to_owned(),
    }
}
