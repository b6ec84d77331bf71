//! Disks on DVP: a volume is a `VirtualDisk` in the parent namespace, named after the PV
//! (the CSI volume name) and labelled `virtualDiskName` as upstream does; attaching it
//! to a node is a `VirtualMachineBlockDeviceAttachment` named `vmbda-<disk>-<hostname>`
//! with upstream's labels; the node finds it by the serial the hypervisor gives it, the
//! MD5 of the VirtualDisk's uid.
//!
//! Where upstream failed, the rules here:
//! - a condition retrying cannot fix is `FailedPrecondition` or `NotFound`, never a
//!   quick-retry code (upstream answered ABORTED for a failed attachment and was retried
//!   1,580 times in 21 hours);
//! - an attachment that does not finish in time is `DeadlineExceeded` (retryable), with
//!   the VMBDA's own phase and message in the error;
//! - a missing VMBDA on detach is success, and a VM that is gone makes detach succeed
//!   and removes every VMBDA naming it — but only when the parent said the VM is gone
//!   (a 404), never on an error;
//! - a create, first or repeated, answers only a disk the parent says is usable (Ready,
//!   or WaitForFirstConsumer); one the parent will not provision (a quota, a missing
//!   StorageClass, Failed, PVCLost — read from the Ready condition's reason as the real
//!   controller writes it, see `disks/ready.rs`) is deleted and the reason answered, so a
//!   PVC that is given up on leaves no orphan; one being deleted is waited out, then made
//!   anew.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use overcast_cloud::{
    page_of, Attachment, CloudError, Disk, DiskCondition, DiskSource, DiskSpec, Disks, Result,
    Snapshot, SnapshotSpec, Zone,
};
use serde_json::json;

use crate::api::{self, VirtualDisk, VirtualMachine, Vmbda};
use crate::machines::CLUSTER_UUID_LABEL;
use crate::parent::Parent;
use crate::zones::{zones_of, ParentNodes};

mod attach;
mod clones;
mod listing;
mod names;
mod ready;
mod snapshots;

pub use clones::CLONE_SOURCE_FOR_LABEL;
use names::{
    attachment_node, condition_message, context, csi_name_of, is_readonly, is_volume, json_map,
    zone_annotations, zone_of,
};
pub use names::{disk_name, is_name};
pub use snapshots::{REQUIRED_CONSISTENCY, SNAPSHOT_OF_LABEL};

/// The StorageClass parameter naming the parent's StorageClass (upstream's name).
pub const STORAGE_CLASS_PARAMETER: &str = "dvpStorageClass";

/// How long a call waits for the parent's controllers before answering "not yet"
/// (retryable): the CSI sidecars call again, and the next call picks up where this one
/// stopped, since every step is idempotent by name.
#[derive(Debug, Clone, Copy)]
pub struct Waits {
    pub disk_ready: Duration,
    pub attached: Duration,
    pub detached: Duration,
    pub resized: Duration,
    pub deleted: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Self {
            disk_ready: Duration::from_secs(120),
            attached: Duration::from_secs(120),
            detached: Duration::from_secs(120),
            resized: Duration::from_secs(120),
            deleted: Duration::from_secs(60),
        }
    }
}

/// The driver whose disks (labelled `virtualDiskName`, without our annotations) are
/// this cluster's too.
const UPSTREAM_DRIVER: &str = "dvp-csi-driver";

pub struct DvpDisks {
    parent: Parent,
    nodes: ParentNodes,
    max_attachments: u64,
    waits: Waits,
}

impl DvpDisks {
    pub fn new(parent: Parent, max_attachments: u64, waits: Waits) -> Self {
        Self {
            parent,
            nodes: ParentNodes::default(),
            max_attachments,
            waits,
        }
    }

    /// The VirtualDisk named `id`, or NotFound (also for a string that cannot name one:
    /// ids are never used unchecked).
    async fn get_disk(&self, id: &str) -> Result<VirtualDisk> {
        if !is_name(id) {
            return Err(CloudError::not_found("disk", id));
        }
        self.parent
            .get_opt("virtualdisk_get", &self.parent.disks(), id)
            .await?
            .filter(is_volume)
            .ok_or_else(|| CloudError::not_found("disk", id))
    }

    /// The VM whose node name is `node`: by the hostname label, else by name. `None`
    /// only when the parent said so.
    async fn vm_of(&self, node: &str) -> Result<Option<VirtualMachine>> {
        if !is_name(node) {
            return Ok(None);
        }
        let selector = format!("{}={node}", api::HOSTNAME_LABEL);
        let mut by_label = self
            .parent
            .list_all("virtualmachine_list", &self.parent.vms(), Some(&selector))
            .await?;
        match by_label.len() {
            0 => {}
            1 => return Ok(by_label.pop()),
            n => {
                return Err(CloudError::FailedPrecondition(format!(
                    "{n} VirtualMachines carry {}={node}; which one is the node is ambiguous",
                    api::HOSTNAME_LABEL
                )))
            }
        }
        self.parent
            .get_opt("virtualmachine_get", &self.parent.vms(), node)
            .await
    }

    fn to_disk(&self, vd: &VirtualDisk, vmbdas: &[Vmbda]) -> Disk {
        let annotations = vd.metadata.annotations.clone().unwrap_or_default();
        let read_map = |key: &str| -> BTreeMap<String, String> {
            annotations
                .get(key)
                .and_then(|s| serde_json::from_str(s).ok())
                .unwrap_or_default()
        };
        let status = vd.status.clone().unwrap_or_default();
        let spec_size = vd
            .spec
            .persistent_volume_claim
            .size
            .as_ref()
            .and_then(|q| api::quantity_bytes(&q.0));
        let size_bytes = status
            .capacity
            .as_deref()
            .and_then(api::quantity_bytes)
            .or(spec_size)
            .unwrap_or(0);
        let uid = vd.metadata.uid.clone().unwrap_or_default();
        let attachments = vmbdas
            .iter()
            .map(|v| Attachment {
                node: attachment_node(v),
                readonly: is_readonly(v),
                publish_context: context(&uid),
            })
            .collect();
        let condition = match ready::provisioning(vd) {
            ready::Provisioning::Usable | ready::Provisioning::OnItsWay => DiskCondition::Healthy,
            ready::Provisioning::Going => {
                DiskCondition::Abnormal("VirtualDisk is being deleted".into())
            }
            ready::Provisioning::Refused(_) => DiskCondition::Abnormal(format!(
                "VirtualDisk is {}: {}",
                status.phase.as_deref().unwrap_or("unset"),
                condition_message(&status.conditions)
            )),
        };
        let mut metadata = read_map(api::METADATA_ANNOTATION);
        if !annotations.contains_key(api::PARAMETERS_ANNOTATION) {
            // Made by Deckhouse's dvp-csi-driver (a cluster switched from it): it records
            // neither parameters nor metadata, and names the disk after its PV — what the
            // orphan report matches PVs by.
            metadata.insert(
                overcast_cloud::discovery::MADE_BY.to_owned(),
                UPSTREAM_DRIVER.to_owned(),
            );
            metadata.insert(
                overcast_cloud::discovery::PV_NAME_KEY.to_owned(),
                vd.name_any(),
            );
        }
        Disk {
            id: vd.name_any(),
            name: csi_name_of(vd),
            size_bytes,
            zone: zone_of(&annotations),
            parameters: read_map(api::PARAMETERS_ANNOTATION),
            metadata,
            attachments,
            condition,
            source: match annotations.get(clones::CLONE_OF_ANNOTATION) {
                Some(of) => Some(DiskSource::Disk(of.clone())),
                None => snapshots::restored_from(vd).map(|s| DiskSource::Snapshot(s.to_owned())),
            },
        }
    }
}

#[async_trait]
impl Disks for DvpDisks {
    async fn zones(&self) -> Result<Vec<Zone>> {
        let nodes = self.nodes.list(&self.parent).await?.unwrap_or_default();
        let zones = zones_of(&nodes);
        if zones.is_empty() {
            return Ok(vec![Zone::default()]);
        }
        Ok(zones.into_iter().collect())
    }
    fn size_granularity(&self) -> u64 {
        1 << 20
    }
    fn max_disk_size(&self) -> u64 {
        // A PVC of the parent's storage: 64 TiB is beyond any StorageClass we know of,
        // and the parent refuses what its storage cannot hold.
        64 << 40
    }
    fn max_attachments_per_node(&self) -> u64 {
        self.max_attachments
    }
    fn overcommits(&self, _parameters: &BTreeMap<String, String>) -> bool {
        // The parent's storage is not visible to a tenant: no create is refused here
        // for lack of space; the parent's quota and storage decide.
        true
    }
    fn validate_parameters(&self, parameters: &BTreeMap<String, String>) -> Result<()> {
        for (k, v) in parameters {
            match k.as_str() {
                STORAGE_CLASS_PARAMETER if is_name(v) => {}
                STORAGE_CLASS_PARAMETER => {
                    return Err(CloudError::InvalidArgument(format!(
                        "{STORAGE_CLASS_PARAMETER} {v:?} is not a StorageClass name"
                    )))
                }
                other => {
                    return Err(CloudError::InvalidArgument(format!(
                        "unknown StorageClass parameter {other:?} (DVP takes {STORAGE_CLASS_PARAMETER})"
                    )))
                }
            }
        }
        Ok(())
    }

    async fn create_disk(&self, spec: DiskSpec) -> Result<Disk> {
        if spec.name.is_empty() || spec.name.len() > 1024 {
            return Err(CloudError::InvalidArgument(format!(
                "volume name of {} characters",
                spec.name.len()
            )));
        }
        self.validate_parameters(&spec.parameters)?;
        // Upstream labels the disk and its attachments with its name: a label value, so
        // at most 63 characters, which a PV's name (`pvc-<uid>`) is.
        let name = disk_name(&spec.name);
        let mut existing = self
            .parent
            .get_opt("virtualdisk_get", &self.parent.disks(), &name)
            .await?;
        if existing
            .as_ref()
            .is_some_and(|vd| vd.metadata.deletion_timestamp.is_some())
        {
            // A disk of this name on its way out is not the one asked for: wait for it
            // to go, then make the new one.
            existing = self.wait_gone(&name).await?;
        }
        let vd = match existing {
            Some(vd) if !is_volume(&vd) || csi_name_of(&vd) != spec.name => {
                return Err(CloudError::ParameterMismatch {
                    kind: "disk",
                    name: spec.name,
                    reason: "a VirtualDisk of that name exists that is not a volume (a VM's disk?)"
                        .into(),
                })
            }
            Some(vd) => vd,
            None => {
                let mut vd = VirtualDisk::new(
                    &name,
                    &api::virtual_disk(),
                    api::VirtualDiskSpec {
                        persistent_volume_claim: api::DiskClaim {
                            size: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                                spec.size_bytes.to_string(),
                            )),
                            storage_class_name: spec
                                .parameters
                                .get(STORAGE_CLASS_PARAMETER)
                                .cloned(),
                        },
                        data_source: match &spec.source {
                            None => None,
                            Some(DiskSource::Snapshot(id)) => Some(snapshots::restore_source(id)),
                            // Through a temporary snapshot (`disks/clones.rs`).
                            Some(DiskSource::Disk(id)) => Some(self.clone_source(&name, id).await?),
                        },
                    },
                );
                let mut labels = BTreeMap::from([(api::DISK_NAME_LABEL.to_owned(), name.clone())]);
                // As dvp-csi-driver labels its disks when it knows the cluster: listings
                // select this cluster's volumes by it.
                if let Some(uuid) = &self.parent.cluster {
                    labels.insert(CLUSTER_UUID_LABEL.to_owned(), uuid.clone());
                }
                labels.extend(snapshots::source_labels(spec.source.as_ref()));
                vd.metadata.labels = Some(labels);
                let mut annotations = BTreeMap::from([
                    (
                        api::PARAMETERS_ANNOTATION.to_owned(),
                        json_map(&spec.parameters),
                    ),
                    (
                        api::METADATA_ANNOTATION.to_owned(),
                        json_map(&spec.metadata),
                    ),
                ]);
                if name != spec.name {
                    annotations.insert(api::CSI_NAME_ANNOTATION.to_owned(), spec.name.clone());
                }
                if let Some(DiskSource::Disk(of)) = &spec.source {
                    annotations.insert(clones::CLONE_OF_ANNOTATION.to_owned(), of.clone());
                }
                // Where it was asked for; settled once the parent has bound it.
                annotations.extend(
                    zone_annotations(&spec.zone)
                        .into_iter()
                        .flat_map(|(k, v)| v.map(|v| (k.to_owned(), v))),
                );
                vd.metadata.annotations = Some(annotations);
                vd.status = None;
                match self
                    .parent
                    .call(
                        "virtualdisk_create",
                        &format!("create VirtualDisk {name}"),
                        self.parent.disks().create(&PostParams::default(), &vd),
                    )
                    .await
                {
                    Ok(made) => made,
                    // Made by a concurrent create of the same name: compare with it.
                    Err(CloudError::Conflict(_)) => {
                        let vd = self.get_disk(&name).await?;
                        if csi_name_of(&vd) != spec.name {
                            return Err(CloudError::ParameterMismatch {
                                kind: "disk",
                                name: spec.name,
                                reason: format!(
                                    "VirtualDisk {name} was made for another volume name"
                                ),
                            });
                        }
                        vd
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let have = self.to_disk(&vd, &[]);
        // dvp-csi-driver's disk (a create it began before the switch, repeated to us)
        // records no parameters: as that driver, only the name is compared.
        let foreign = have
            .metadata
            .contains_key(overcast_cloud::discovery::MADE_BY);
        if !foreign && have.parameters != spec.parameters {
            return Err(CloudError::ParameterMismatch {
                kind: "disk",
                name: spec.name,
                reason: format!(
                    "it has parameters {:?}, asked {:?}",
                    have.parameters, spec.parameters
                ),
            });
        }
        let ready = self.wait_ready(&name).await?;
        self.drop_clone_source(&ready, false).await;
        let settled = self.settle_zone(ready, &spec.zone).await?;
        Ok(self.to_disk(&settled, &[]))
    }

    async fn disk(&self, id: &str) -> Result<Disk> {
        let vd = self.get_disk(id).await?;
        let vmbdas = self.attachments_of(id).await?;
        Ok(self.to_disk(&vd, &vmbdas))
    }

    async fn disk_by_name(&self, name: &str) -> Result<Option<Disk>> {
        match self.disk(&disk_name(name)).await {
            Ok(d) if d.name == name => Ok(Some(d)),
            Ok(_) => Ok(None),
            Err(CloudError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn list_disks(&self) -> Result<Vec<Disk>> {
        let disks = self.volumes().await?;
        let disks: Vec<&VirtualDisk> = disks.iter().collect();
        self.with_attachments(&disks).await
    }

    async fn list_disks_page(&self, after: Option<&str>, max: usize) -> Result<(Vec<Disk>, bool)> {
        if max == 0 {
            return Ok(page_of(self.list_disks().await?, |d| &d.id, after, max));
        }
        let (found, more) = self.volumes_page(after, max).await?;
        let disks: Vec<&VirtualDisk> = found.iter().collect();
        Ok((self.with_attachments(&disks).await?, more))
    }

    async fn delete_disk(&self, id: &str) -> Result<()> {
        let vd = self.get_disk(id).await?;
        let vmbdas = self.attachments_of(id).await?;
        if !vmbdas.is_empty() {
            let nodes: Vec<String> = vmbdas.iter().map(attachment_node).collect();
            return Err(CloudError::FailedPrecondition(format!(
                "VirtualDisk {id} is attached to {} (VirtualMachineBlockDeviceAttachment {}); detach it first",
                nodes.join(", "),
                vmbdas.iter().map(|v| v.name_any()).collect::<Vec<_>>().join(", ")
            )));
        }
        let used_by: Vec<String> = vd
            .status
            .as_ref()
            .map(|s| {
                s.attached_to_virtual_machines
                    .iter()
                    .map(|a| a.name.clone())
                    .collect()
            })
            .unwrap_or_default();
        if !used_by.is_empty() {
            return Err(CloudError::FailedPrecondition(format!(
                "VirtualDisk {id} is in use by VirtualMachine {}",
                used_by.join(", ")
            )));
        }
        // Only this very disk: a disk of the same name made since is not ours to delete.
        let dp = DeleteParams {
            preconditions: vd.metadata.uid.clone().map(|uid| kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.parent
            .delete("virtualdisk_delete", &self.parent.disks(), id, &dp)
            .await?;
        match self
            .parent
            .wait(
                "virtualdisk",
                self.parent.disks(),
                id,
                self.waits.deleted,
                |o: Option<&VirtualDisk>| o.is_none(),
            )
            .await?
        {
            Some(_) => {
                self.drop_clone_source(&vd, true).await;
                Ok(())
            }
            None => Err(CloudError::DeadlineExceeded(format!(
                "VirtualDisk {id} is still being deleted after {:?}",
                self.waits.deleted
            ))),
        }
    }

    async fn attach_disk(&self, id: &str, node: &str, readonly: bool) -> Result<Attachment> {
        self.attach(id, node, readonly).await
    }

    async fn detach_disk(&self, id: &str, node: &str) -> Result<()> {
        self.detach(id, node).await
    }

    async fn expand_disk(&self, id: &str, size_bytes: u64) -> Result<u64> {
        let vd = self.get_disk(id).await?;
        let current = self.to_disk(&vd, &[]).size_bytes;
        let asked = vd
            .spec
            .persistent_volume_claim
            .size
            .as_ref()
            .and_then(|q| api::quantity_bytes(&q.0))
            .unwrap_or(0);
        if size_bytes <= current && asked <= current {
            return Ok(current);
        }
        let target = size_bytes.max(asked);
        if asked < target {
            let patch = json!({"spec": {"persistentVolumeClaim": {"size": target.to_string()}}});
            self.parent
                .call(
                    "virtualdisk_patch",
                    &format!("resize VirtualDisk {id}"),
                    self.parent
                        .disks()
                        .patch(id, &PatchParams::default(), &Patch::Merge(&patch)),
                )
                .await?;
        }
        let grown = move |o: Option<&VirtualDisk>| {
            o.is_none_or(|vd| {
                vd.status
                    .as_ref()
                    .and_then(|s| s.capacity.as_deref())
                    .and_then(api::quantity_bytes)
                    .is_some_and(|c| c >= target)
            })
        };
        match self
            .parent
            .wait(
                "virtualdisk",
                self.parent.disks(),
                id,
                self.waits.resized,
                grown,
            )
            .await?
        {
            Some(Some(vd)) => Ok(self.to_disk(&vd, &[]).size_bytes),
            Some(None) => Err(CloudError::not_found("disk", id)),
            None => Err(CloudError::DeadlineExceeded(format!(
                "VirtualDisk {id} has not grown to {target} bytes after {:?}",
                self.waits.resized
            ))),
        }
    }

    async fn available_capacity(&self, _zone: Option<&Zone>) -> Result<u64> {
        crate::quota::available_storage(&self.parent)
            .await
            .map(|free| free.unwrap_or_else(|| self.max_disk_size()))
    }

    async fn node_exists(&self, node: &str) -> Result<bool> {
        Ok(self.vm_of(node).await?.is_some())
    }

    fn snapshots(&self) -> bool {
        true
    }
    fn clones(&self) -> bool {
        true
    }
    fn validate_snapshot_parameters(&self, parameters: &BTreeMap<String, String>) -> Result<()> {
        snapshots::validate_snapshot_parameters(parameters)
    }
    async fn create_snapshot(&self, spec: SnapshotSpec) -> Result<Snapshot> {
        self.cut(spec).await
    }
    async fn snapshot(&self, id: &str) -> Result<Snapshot> {
        self.get_snapshot(id).await
    }
    async fn list_snapshots_page(
        &self,
        source: Option<&str>,
        after: Option<&str>,
        max: usize,
    ) -> Result<(Vec<Snapshot>, bool)> {
        self.snapshots_page(source, after, max).await
    }
    async fn delete_snapshot(&self, id: &str) -> Result<()> {
        self.remove_snapshot(id).await
    }

    async fn probe(&self) -> Result<()> {
        let lp = kube::api::ListParams::default().limit(1);
        self.parent
            .call(
                "virtualdisk_list",
                "list VirtualDisks",
                self.parent.disks().list_metadata(&lp),
            )
            .await
            .map(|_| ())
    }
}
