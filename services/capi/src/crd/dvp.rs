//! capdvp's kinds (`infrastructure.cluster.x-k8s.io/v1alpha1`, Cluster API contract
//! v1beta2), as Deckhouse's cloud-provider-dvp defines them: `DeckhouseCluster`,
//! `DeckhouseMachine` (one VirtualMachine in the parent cluster with its disks),
//! `DeckhouseMachineTemplate` (what node-manager renders from a `DVPInstanceClass`).
//! Field names, defaults, enums, patterns and required fields are theirs; the contract's
//! `status.initialization.provisioned` sits beside Deckhouse's own initialization fields.

use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::common::{require, ApiEndpoint, MachineAddress, MetaCondition, Quantity, TemplateMeta};

/// On a DeckhouseMachine until its VM and disks are gone.
pub const MACHINE_FINALIZER: &str = "deckhousemachine.infrastructure.cluster.x-k8s.io";
/// What capdvp puts on a DeckhouseCluster (its `ClusterFinalizer`). Its value is in no
/// source the index holds; this is the kubebuilder form its machine finalizer has. This
/// provider needs none on the cluster and releases it when the cluster is deleted.
pub const CAPDVP_CLUSTER_FINALIZER: &str = "deckhousecluster.infrastructure.cluster.x-k8s.io";
pub const VM_READY_CONDITION: &str = "VirtualMachineReady";
pub const REASON_VM_NOT_READY: &str = "VMNotReady";
pub const REASON_VM_ERROR: &str = "VMError";
pub const REASON_VM_IN_FAILED_STATE: &str = "VMInFailedState";
pub const REASON_VM_IN_STOPPED_STATE: &str = "VMInStoppedState";
pub const REASON_WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructure";
pub const REASON_WAITING_FOR_BOOTSTRAP_SCRIPT: &str = "WaitingForBootstrapScript";

/// DeckhouseCluster is the Schema for the deckhouseclusters API.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "DeckhouseCluster",
    namespaced,
    status = "DeckhouseClusterStatus",
    doc = "DeckhouseCluster is the Schema for the deckhouseclusters API"
)]
#[serde(rename_all = "camelCase")]
pub struct DeckhouseClusterSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeckhouseClusterStatus {
    /// Observations of the cluster's initialization (the v1beta2 contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<ClusterInitialization>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::at_least_one_property)]
pub struct ClusterInitialization {
    /// True once the infrastructure is provisioned: what Cluster API v1beta2 reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
    /// Deckhouse's name for the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_initialized: Option<bool>,
}

/// The VM's CPU: cores, each given a guaranteed fraction of a physical core's time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = cpu_required)]
pub struct Cpu {
    /// Cores is the number of cores per socket.
    #[serde(default = "four")]
    #[schemars(extend("minimum" = 1))]
    pub cores: i64,
    /// A guaranteed share of CPU time, as a percentage.
    #[serde(rename = "cpuFraction", default = "full")]
    #[schemars(regex(pattern = r"^100%$|^[1-9][0-9]?%$"))]
    pub fraction: String,
}

impl Default for Cpu {
    fn default() -> Self {
        Self {
            cores: 4,
            fraction: full(),
        }
    }
}

fn cpu_required(s: &mut Schema) {
    require(s, &["cores", "cpuFraction"]);
}

/// Where the boot disk's content comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = image_ref_required)]
pub struct DiskImageRef {
    /// Name of the attached resource.
    pub name: String,
    /// Kind is a block device type.
    #[serde(default)]
    pub kind: ImageKind,
}

fn image_ref_required(s: &mut Schema) {
    require(s, &["kind", "name"]);
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ImageKind {
    ClusterVirtualImage,
    #[default]
    VirtualImage,
    VirtualDiskSnapshot,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalDisk {
    /// Size of the disk.
    pub size: Quantity,
    pub storage_class: String,
}

/// The firmware the VM runs on (DVP's bootloader enum).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Bootloader {
    #[serde(rename = "BIOS")]
    Bios,
    #[default]
    #[serde(rename = "EFI")]
    Efi,
    #[serde(rename = "EFIWithSecureBoot")]
    EfiWithSecureBoot,
}

/// When the VM runs (DVP's VirtualMachine `runPolicy`). capdvp's newer releases take it
/// from the machine; without it, `AlwaysOnUnlessStoppedManually`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RunPolicy {
    AlwaysOn,
    AlwaysOff,
    Manual,
    #[default]
    AlwaysOnUnlessStoppedManually,
}

/// How DVP live-migrates the VM (its VirtualMachine `liveMigrationPolicy`). Unset, capdvp
/// chooses by the Machine's role: `PreferForced` for a control-plane one, else
/// `PreferSafe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LiveMigrationPolicy {
    Manual,
    Never,
    AlwaysSafe,
    PreferSafe,
    AlwaysForced,
    PreferForced,
}

/// DeckhouseMachine is the Schema for the deckhousemachines API.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "DeckhouseMachine",
    namespaced,
    status = "DeckhouseMachineStatus",
    doc = "DeckhouseMachine is the Schema for the deckhousemachines API"
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = machine_required)]
pub struct DeckhouseMachineSpec {
    /// ProviderID is the VM's name, prefixed with 'dvp://'.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    #[serde(flatten)]
    pub machine: DeckhouseMachineSpecTemplate,
}

fn machine_required(s: &mut Schema) {
    require(s, MACHINE_REQUIRED);
}

const MACHINE_REQUIRED: &[&str] = &[
    "bootDiskImageRef",
    "cpu",
    "memory",
    "rootDiskSize",
    "rootDiskStorageClass",
    "vmClassName",
];

/// A machine's spec as a template holds it (all but the providerID).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = machine_required)]
pub struct DeckhouseMachineSpecTemplate {
    /// The VirtualMachineClass describing the VM's CPU and memory policy.
    pub vm_class_name: String,
    pub cpu: Cpu,
    /// This machine's RAM amount.
    #[serde(default = "eight_gi")]
    pub memory: Quantity,
    /// The size of the bootable disk.
    pub root_disk_size: Quantity,
    /// The StorageClass of the bootable disk.
    pub root_disk_storage_class: String,
    /// Additional (non-boot) disks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_disks: Vec<AdditionalDisk>,
    /// The image to boot this VM from.
    pub boot_disk_image_ref: DiskImageRef,
    #[serde(default)]
    pub bootloader: Bootloader,
    #[serde(default)]
    pub run_policy: RunPolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_migration_policy: Option<LiveMigrationPolicy>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeckhouseMachineStatus {
    #[serde(default)]
    pub ready: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<MachineAddress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<MetaCondition>,
    /// Observations of the machine's initialization (the v1beta2 contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<MachineInitialization>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::at_least_one_property)]
pub struct MachineInitialization {
    /// True once the VM is provisioned: what Cluster API v1beta2 reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_data_secret_created: Option<bool>,
}

/// DeckhouseMachineTemplate is the Schema for the deckhousemachinetemplates API.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "DeckhouseMachineTemplate",
    namespaced,
    doc = "DeckhouseMachineTemplate is the Schema for the deckhousemachinetemplates API"
)]
pub struct DeckhouseMachineTemplateSpec {
    pub template: DeckhouseMachineTemplateResource,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeckhouseMachineTemplateResource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    #[schemars(transform = super::common::immutable)]
    pub spec: DeckhouseMachineSpecTemplate,
}

fn four() -> i64 {
    4
}
fn full() -> String {
    "100%".to_owned()
}
fn eight_gi() -> Quantity {
    Quantity("8Gi".to_owned())
}
