//! The parts of the Deckhouse virtualization API (`virtualization.deckhouse.io/v1alpha2`)
//! this provider reads and writes, typed after the real CRDs (`../shared/kit/crds/
//! virtualization/`): field names and phases are theirs. Only what we use is typed; a
//! write never replaces a whole object (it creates, or merge-patches one field), so the
//! fields we do not know are never lost.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::core::{ApiResource, GroupVersionKind, Object};
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "virtualization.deckhouse.io";
pub const VERSION: &str = "v1alpha2";

/// Label upstream puts on a VirtualDisk it makes: the disk's own name.
pub const DISK_NAME_LABEL: &str = "virtualDiskName";
/// Labels upstream puts on a VirtualMachineBlockDeviceAttachment.
pub const VMBDA_DISK_LABEL: &str = "virtualMachineDiskName";
pub const VMBDA_VM_LABEL: &str = "virtualMachineName";
/// The node name of a VM made by Deckhouse (a VM is found by it, else by its name).
pub const HOSTNAME_LABEL: &str = "dvp.deckhouse.io/hostname";
/// Ours: the disk-shaping StorageClass parameters, recorded so a repeated create can be
/// compared (JSON of a sorted map).
pub const PARAMETERS_ANNOTATION: &str = "overcast.dev/parameters";
/// Ours, on a VMBDA: the attachment was asked read-only (the hypervisor attaches it
/// writable either way; the node mounts it read-only, and a publish in the other mode is
/// refused as incompatible).
pub const READONLY_ANNOTATION: &str = "overcast.dev/readonly";
/// Ours: the CSI volume name a VirtualDisk was made for, when it is not the disk's own
/// name (see [`crate::disks::disk_name`]).
pub const CSI_NAME_ANNOTATION: &str = "overcast.dev/csi-name";
/// Ours: the metadata the CSI sidecars sent (PVC/PV names), for operators.
pub const METADATA_ANNOTATION: &str = "overcast.dev/metadata";
/// Ours: the zone (and region) a volume is in, as its CSI topology says; absent for a
/// volume any node can use.
pub const ZONE_ANNOTATION: &str = "overcast.dev/zone";
pub const REGION_ANNOTATION: &str = "overcast.dev/region";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

pub fn virtual_disk() -> ApiResource {
    resource("VirtualDisk", "virtualdisks")
}
pub fn virtual_disk_snapshot() -> ApiResource {
    resource("VirtualDiskSnapshot", "virtualdisksnapshots")
}
pub fn vmbda() -> ApiResource {
    resource(
        "VirtualMachineBlockDeviceAttachment",
        "virtualmachineblockdeviceattachments",
    )
}
pub fn virtual_machine() -> ApiResource {
    resource("VirtualMachine", "virtualmachines")
}
pub fn cluster_virtual_image() -> ApiResource {
    resource("ClusterVirtualImage", "clustervirtualimages")
}
pub fn virtual_image() -> ApiResource {
    resource("VirtualImage", "virtualimages")
}
pub fn virtual_machine_ip_address() -> ApiResource {
    resource("VirtualMachineIPAddress", "virtualmachineipaddresses")
}
pub fn virtual_machine_class() -> ApiResource {
    resource("VirtualMachineClass", "virtualmachineclasses")
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// The generation the controller wrote it for: a condition of an older generation
    /// is stale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

// ---- VirtualDiskSnapshot ----------------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualDiskSnapshotSpec {
    pub virtual_disk_name: String,
    /// Freeze the VM through its agent, or fail; the CRD's default is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_consistency: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualDiskSnapshotStatus {
    /// Pending, InProgress, Ready, Failed (final), Terminating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_name: Option<String>,
    /// True, or absent (never false: the controller sets it only when it froze the VM
    /// or nothing wrote).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistent: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

pub type VirtualDiskSnapshot = Object<VirtualDiskSnapshotSpec, VirtualDiskSnapshotStatus>;

// ---- VirtualDisk ------------------------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualDiskSpec {
    #[serde(default)]
    pub persistent_volume_claim: DiskClaim,
    /// Where its content comes from (`{type: ObjectRef, objectRef: {kind, name}}` for an
    /// image); absent for a blank disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_source: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskClaim {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualDiskStatus {
    /// Pending, Provisioning, WaitForUserUpload, WaitForFirstConsumer, Ready, Resizing,
    /// Failed, PVCLost, Exporting, Terminating, Migrating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// What the disk holds now (a quantity, e.g. `1Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<DiskTarget>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attached_to_virtual_machines: Vec<AttachedTo>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachedTo {
    pub name: String,
    #[serde(default)]
    pub mounted: bool,
}

pub type VirtualDisk = Object<VirtualDiskSpec, VirtualDiskStatus>;

// ---- VirtualMachineBlockDeviceAttachment -----------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmbdaSpec {
    pub virtual_machine_name: String,
    pub block_device_ref: BlockDeviceRef,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BlockDeviceRef {
    /// VirtualDisk, VirtualImage, ClusterVirtualImage.
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmbdaStatus {
    /// Pending, InProgress, Attached, Failed, Terminating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_name: Option<String>,
}

pub type Vmbda = Object<VmbdaSpec, VmbdaStatus>;

// ---- VirtualMachine ---------------------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmSpec {
    #[serde(default)]
    pub virtual_machine_class_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<VmCpu>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<VmMemory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_policy: Option<String>,
    #[serde(default)]
    pub block_device_refs: Vec<BlockDeviceRef>,
    /// `{type: UserDataRef, userDataRef: {kind: Secret, name}}` for a cloud-init Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootloader: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_paravirtualization: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_migration_policy: Option<String>,
    /// The VirtualMachineIPAddress the VM takes its address from; the vm controller
    /// makes one of the VM's name when none is named.
    #[serde(
        rename = "virtualMachineIPAddressName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub virtual_machine_ip_address_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmCpu {
    #[serde(default)]
    pub cores: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_fraction: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmMemory {
    pub size: Quantity,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmStatus {
    /// Pending, Running, Degraded, Terminating, Stopped, Stopping, Starting, Migrating, Pause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The parent node the VM runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_device_refs: Vec<VmBlockDevice>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmBlockDevice {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub attached: bool,
    #[serde(default)]
    pub hotplugged: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_block_device_attachment_name: Option<String>,
}

pub type VirtualMachine = Object<VmSpec, VmStatus>;

// ---- VirtualMachineClass (cluster-scoped) -----------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmClassSpec {
    /// At most 16; their core ranges do not overlap.
    #[serde(default)]
    pub sizing_policies: Vec<SizingPolicy>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SizingPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<CoreRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryPolicy>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CoreRange {
    pub min: u32,
    pub max: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
}

/// Quantities here are int-or-string in the schema.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_core: Option<PerCore>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PerCore {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmClassStatus {
    /// Pending, Ready, Terminating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

pub type VirtualMachineClass = Object<VmClassSpec, VmClassStatus>;

/// An int-or-string quantity of the schema, in bytes.
pub fn int_or_quantity_bytes(v: &serde_json::Value) -> Option<u64> {
    match v {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => quantity_bytes(s),
        _ => None,
    }
}

/// A VM's node name: its `dvp.deckhouse.io/hostname` label, else its own name.
pub fn vm_hostname(vm: &VirtualMachine) -> &str {
    vm.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(HOSTNAME_LABEL))
        .filter(|h| !h.is_empty())
        .map(String::as_str)
        .or(vm.metadata.name.as_deref())
        .unwrap_or_default()
}

/// `vmbda-<disk>-<hostname>`, upstream's name for the attachment of a disk to a VM.
pub fn vmbda_name(disk: &str, hostname: &str) -> String {
    let name = format!("vmbda-{disk}-{hostname}");
    // An object name is at most 253 characters; a long node name (an FQDN) must not make
    // the attachment impossible. Deterministic, so a retried publish finds it again.
    if name.len() <= 253 {
        name
    } else {
        format!(
            "vmbda-{:x}",
            md5::compute(format!("{disk}/{hostname}").as_bytes())
        )
    }
}

/// Labels of an object, empty when it has none.
pub fn labels(meta: &kube::core::ObjectMeta) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

/// The serial the guest sees for a VirtualDisk: the hex MD5 of its uid (udev links it as
/// `/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_<serial>`).
pub fn disk_serial(uid: &str) -> String {
    format!("{:x}", md5::compute(uid.as_bytes()))
}

/// Parses a Kubernetes quantity of bytes (`10Gi`, `1073741824`, `1G`, `1.5Gi`).
pub fn quantity_bytes(q: &str) -> Option<u64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let mult: f64 = match suffix {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        _ => return None,
    };
    if num.contains('.') {
        let v: f64 = num.parse().ok()?;
        return Some((v * mult).ceil() as u64);
    }
    let v: u64 = num.parse().ok()?;
    v.checked_mul(mult as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_the_api_writes_them() {
        assert_eq!(quantity_bytes("1Gi"), Some(1 << 30));
        assert_eq!(quantity_bytes("1073741824"), Some(1 << 30));
        assert_eq!(quantity_bytes("512Mi"), Some(512 << 20));
        assert_eq!(quantity_bytes("1G"), Some(1_000_000_000));
        assert_eq!(quantity_bytes("1.5Gi"), Some(3 << 29));
        assert_eq!(quantity_bytes("lots"), None);
        assert_eq!(quantity_bytes("1Xi"), None);
    }

    #[test]
    fn a_vm_is_named_by_its_hostname_label_else_its_name() {
        let mut vm = VirtualMachine::new("vm-a", &virtual_machine(), VmSpec::default());
        assert_eq!(vm_hostname(&vm), "vm-a");
        vm.metadata.labels = Some([(HOSTNAME_LABEL.to_owned(), "worker-1".to_owned())].into());
        assert_eq!(vm_hostname(&vm), "worker-1");
        assert_eq!(vmbda_name("pvc-1", "worker-1"), "vmbda-pvc-1-worker-1");
    }
}
