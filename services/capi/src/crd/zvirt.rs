//! capz's kinds (`infrastructure.cluster.x-k8s.io/v1`, Cluster API contract v1beta1), as
//! Deckhouse's cloud-provider-zvirt defines them: `ZvirtCluster` (the engine cluster the
//! VMs go to), `ZvirtMachine` (one VM cloned from a template), `ZvirtMachineTemplate`
//! (what node-manager renders from a `ZvirtInstanceClass`). Field names, defaults and
//! required fields are theirs.

use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::common::{require, ApiEndpoint, MachineAddress, TemplateMeta, V1Beta1Condition};

/// On a ZvirtMachine until its VM is removed.
pub const MACHINE_FINALIZER: &str = "zvirtmachine.infrastructure.cluster.x-k8s.io";
/// The condition capz keeps on a ZvirtMachine, and its reasons.
pub const VM_READY_CONDITION: &str = "VirtualMachineReady";
pub const REASON_VM_NOT_READY: &str = "VMNotReady";
pub const REASON_VM_ERROR: &str = "VMError";
pub const REASON_VM_IN_FAILED_STATE: &str = "VMInFailedState";
pub const REASON_WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructure";
pub const REASON_WAITING_FOR_BOOTSTRAP_SCRIPT: &str = "WaitingForBootstrapScript";
/// A ZvirtCluster whose `spec.id` names no engine cluster.
pub const REASON_CLUSTER_MISCONFIGURED: &str = "ClusterMisconfigured";
/// capz's message for a ZvirtCluster without `spec.id`.
pub const CLUSTER_ID_NOT_PROVIDED: &str =
    ".spec.id does not contain a valid zVirt cluster identifier";

/// ZvirtCluster is the Schema for the zvirtclusters API.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1",
    kind = "ZvirtCluster",
    namespaced,
    status = "ZvirtClusterStatus",
    doc = "ZvirtCluster is the Schema for the zvirtclusters API"
)]
#[serde(rename_all = "camelCase")]
pub struct ZvirtClusterSpec {
    /// ID holds zVirt cluster identifier of this ZvirtCluster.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZvirtClusterStatus {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
}

/// The VM's CPU, made of sockets × cores × threads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = cpu_required)]
pub struct Cpu {
    /// Sockets is the number of sockets for a VM.
    #[serde(default = "four")]
    pub sockets: i32,
    /// Cores is the number of cores per socket.
    #[serde(default = "one")]
    pub cores: i32,
    /// Threads is the number of thread per core.
    #[serde(default = "one")]
    pub threads: i32,
}

impl Default for Cpu {
    fn default() -> Self {
        Self {
            sockets: 4,
            cores: 1,
            threads: 1,
        }
    }
}

fn cpu_required(s: &mut Schema) {
    require(s, &["cores", "sockets", "threads"]);
}

/// ZvirtMachine is the Schema for the zvirtmachines API.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1",
    kind = "ZvirtMachine",
    namespaced,
    status = "ZvirtMachineStatus",
    doc = "ZvirtMachine is the Schema for the zvirtmachines API"
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = machine_required)]
pub struct ZvirtMachineSpec {
    /// ID is the UUID of the VM.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// ProviderID is the UUID of the VM, prefixed with 'zvirt://' proto.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// The VM template this instance will be created from.
    pub template: String,
    /// VNICProfileID the id of the zVirt vNic profile for the VM.
    #[serde(rename = "vnicProfileID")]
    pub vnic_profile_id: String,
    /// CPU defines the VM CPU.
    pub cpu: Cpu,
    /// MemoryMB is the size of a VM's memory in MiBs.
    #[serde(default = "default_memory")]
    pub memory: i32,
    /// RootDiskSize size of the bootable disk in GiB.
    #[serde(rename = "rootDiskSizeGb", default = "default_root_disk")]
    pub root_disk_size_gb: i64,
    /// NicName is a name that will be assigned to the vNIC attached to the VM.
    #[serde(default = "default_nic")]
    pub nic_name: String,
}

fn machine_required(s: &mut Schema) {
    require(
        s,
        &[
            "cpu",
            "nicName",
            "rootDiskSizeGb",
            "template",
            "vnicProfileID",
        ],
    );
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZvirtMachineStatus {
    /// Ready indicates the VM has been provisioned and is ready.
    #[serde(default)]
    pub ready: bool,
    /// The host names, IP addresses and DNS names of the VM.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<MachineAddress>,
    /// An error type, when something went wrong that no retry mends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<V1Beta1Condition>,
    /// Observations of the machine's initialization: capz's v1beta2 types carry it, and
    /// a machine capz made under them may have it and not `ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<ZvirtMachineInitialization>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = super::common::at_least_one_property)]
pub struct ZvirtMachineInitialization {
    /// True once the VM is provisioned: what Cluster API v1beta2 reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

/// ZvirtMachineTemplate is the Schema for the zvirtmachinetemplates API.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1",
    kind = "ZvirtMachineTemplate",
    namespaced,
    doc = "ZvirtMachineTemplate is the Schema for the zvirtmachinetemplates API"
)]
pub struct ZvirtMachineTemplateSpec {
    pub template: ZvirtMachineTemplateResource,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ZvirtMachineTemplateResource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    #[schemars(transform = super::common::immutable)]
    pub spec: ZvirtMachineSpecTemplate,
}

/// A machine's spec as a template holds it: the CPU may be left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = template_required)]
pub struct ZvirtMachineSpecTemplate {
    /// The VM template this instance will be created from.
    pub template: String,
    /// VNICProfileID the id of the zVirt vNic profile for the VM.
    #[serde(rename = "vnicProfileID")]
    pub vnic_profile_id: String,
    /// CPU defines the VM CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    /// MemoryMB is the size of a VM's memory in MiBs.
    #[serde(default = "default_memory")]
    pub memory: i32,
    /// RootDiskSize size of the bootable disk in GiB.
    #[serde(rename = "rootDiskSizeGb", default = "default_root_disk")]
    pub root_disk_size_gb: i64,
    /// NicName is a name that will be assigned to the vNIC attached to the VM.
    #[serde(default = "default_nic")]
    pub nic_name: String,
}

fn template_required(s: &mut Schema) {
    require(s, &["rootDiskSizeGb", "template", "vnicProfileID"]);
}

fn one() -> i32 {
    1
}
fn four() -> i32 {
    4
}
fn default_memory() -> i32 {
    8192
}
fn default_root_disk() -> i64 {
    20
}
fn default_nic() -> String {
    "nic1".to_owned()
}
