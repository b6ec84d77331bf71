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
//! - a disk whose provisioning failed (phase Failed) is deleted and the reason reported,
//!   so a PVC that is given up on leaves no orphan behind.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use overcast_cloud::{
    Attachment, CloudError, Disk, DiskCondition, DiskSpec, Disks, PublishContext, Result, Zone,
};
use serde_json::json;

use crate::api::{self, VirtualDisk, VirtualMachine, Vmbda};
use crate::parent::Parent;
use crate::zones::{pv_zones, zones_of, ParentNode, ParentNodes};

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

    async fn attachments_of(&self, disk: &str) -> Result<Vec<Vmbda>> {
        let selector = format!("{}={disk}", api::VMBDA_DISK_LABEL);
        let mut found = self
            .parent
            .list_all("vmbda_list", &self.parent.vmbdas(), Some(&selector))
            .await?;
        // Attachments made by hand or by another tool name the disk in their spec only.
        found.retain(|v| {
            v.spec.block_device_ref.kind == "VirtualDisk" && v.spec.block_device_ref.name == disk
        });
        Ok(found)
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
        let condition = match status.phase.as_deref() {
            Some("Failed" | "PVCLost") => DiskCondition::Abnormal(format!(
                "VirtualDisk is {}: {}",
                status.phase.as_deref().unwrap_or_default(),
                condition_message(&status.conditions)
            )),
            _ => DiskCondition::Healthy,
        };
        Disk {
            id: vd.name_any(),
            name: csi_name_of(vd),
            size_bytes,
            zone: zone_of(&annotations),
            parameters: read_map(api::PARAMETERS_ANNOTATION),
            metadata: read_map(api::METADATA_ANNOTATION),
            attachments,
            condition,
            source: None,
        }
    }

    /// Records where a disk that the parent has bound can be used: the zones of the
    /// parent nodes its PersistentVolume admits. The zone asked for is kept when it is
    /// one of them (or when that cannot be told: a topology narrower than the truth
    /// only restricts scheduling), another when the parent bound it elsewhere, none
    /// when every zone can use it (network storage). A disk waiting for its first
    /// consumer keeps the zone asked for: its first attachment, made in that zone,
    /// binds it there.
    async fn settle_zone(&self, vd: VirtualDisk, asked: &Zone) -> Result<VirtualDisk> {
        let status = vd.status.clone().unwrap_or_default();
        if *asked == Zone::default() || status.phase.as_deref() != Some("Ready") {
            return Ok(vd);
        }
        let name = vd.name_any();
        let nodes = self.nodes.list(&self.parent).await?.unwrap_or_default();
        let Some(admitted) = self.bound_zones(&vd, &nodes).await? else {
            return Ok(vd);
        };
        let all = zones_of(&nodes);
        let zone = match admitted {
            None => Zone::default(),
            Some(zones) if zones == all => Zone::default(),
            Some(zones) if zones.contains(asked) => asked.clone(),
            Some(zones) => match zones.into_iter().next() {
                Some(z) => z,
                None => {
                    tracing::warn!(disk = %name, "its PersistentVolume admits no parent node with a zone: the zone asked for is kept");
                    asked.clone()
                }
            },
        };
        let annotations = vd.metadata.annotations.clone().unwrap_or_default();
        if zone_of(&annotations) == zone {
            return Ok(vd);
        }
        let patch = json!({"metadata": {"annotations": zone_annotations(&zone)}});
        self.parent
            .call(
                "virtualdisk_patch",
                &format!("record the zone of VirtualDisk {name}"),
                self.parent
                    .disks()
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await
    }

    /// The zones the PersistentVolume of a bound disk admits (`Some(None)`: any node;
    /// `None`: it cannot be told — no target PVC yet, or the account may not read it).
    async fn bound_zones(
        &self,
        vd: &VirtualDisk,
        nodes: &[ParentNode],
    ) -> Result<Option<Option<BTreeSet<Zone>>>> {
        let Some(claim) = vd
            .status
            .as_ref()
            .and_then(|s| s.target.as_ref())
            .and_then(|t| t.persistent_volume_claim_name.clone())
        else {
            return Ok(None);
        };
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.parent.client.clone(), &self.parent.namespace);
        let pvc = match self
            .parent
            .get_opt("persistentvolumeclaim_get", &claims, &claim)
            .await
        {
            Ok(Some(pvc)) => pvc,
            Ok(None) => return Ok(None),
            Err(CloudError::PermissionDenied(e)) => {
                tracing::warn!(error = %e, "the parent's PVCs cannot be read: volumes keep the zone asked for");
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let Some(volume) = pvc.spec.and_then(|s| s.volume_name) else {
            return Ok(None);
        };
        let volumes: Api<PersistentVolume> = Api::all(self.parent.client.clone());
        let pv = match self
            .parent
            .get_opt("persistentvolume_get", &volumes, &volume)
            .await
        {
            Ok(Some(pv)) => pv,
            Ok(None) => return Ok(None),
            Err(CloudError::PermissionDenied(e)) => {
                tracing::warn!(error = %e, "the parent's PersistentVolumes cannot be read: volumes keep the zone asked for");
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        Ok(Some(pv_zones(&pv, nodes)))
    }

    /// Waits until the disk is usable: Ready, or WaitForFirstConsumer (the parent's
    /// StorageClass binds on first use: the first attachment provisions it). Failed is
    /// answered at once, and the failed disk deleted.
    async fn wait_ready(&self, name: &str) -> Result<VirtualDisk> {
        let usable = |vd: &VirtualDisk| {
            matches!(
                vd.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Ready" | "WaitForFirstConsumer" | "Failed")
            )
        };
        let waited = self
            .parent
            .wait(
                "virtualdisk",
                self.parent.disks(),
                name,
                self.waits.disk_ready,
                move |o: Option<&VirtualDisk>| o.is_none_or(usable),
            )
            .await?;
        match waited {
            None => {}
            Some(None) => {
                return Err(CloudError::Unavailable(format!(
                    "VirtualDisk {name} disappeared while it was being provisioned"
                )))
            }
            Some(Some(vd)) => {
                let status = vd.status.clone().unwrap_or_default();
                if status.phase.as_deref() != Some("Failed") {
                    return Ok(vd);
                }
                let why = condition_message(&status.conditions);
                // Ours, never attached, and the parent says it failed: leave nothing behind.
                let _ = self
                    .parent
                    .delete(
                        "virtualdisk_delete",
                        &self.parent.disks(),
                        name,
                        &DeleteParams::default(),
                    )
                    .await;
                let msg = format!("VirtualDisk {name} failed to provision (deleted): {why}");
                return Err(if why.to_lowercase().contains("quota") {
                    CloudError::ResourceExhausted(msg)
                } else {
                    CloudError::Internal(msg)
                });
            }
        }
        let now = self.get_disk(name).await?;
        let status = now.status.unwrap_or_default();
        Err(CloudError::DeadlineExceeded(format!(
            "VirtualDisk {name} is not Ready after {:?}: phase {}: {}",
            self.waits.disk_ready,
            status.phase.as_deref().unwrap_or("unset"),
            condition_message(&status.conditions)
        )))
    }
}

/// The publish context of a VirtualDisk: the serial its SCSI disk carries in the guest.
fn context(uid: &str) -> BTreeMap<String, String> {
    PublishContext {
        serial: Some(api::disk_serial(uid)),
        ..PublishContext::default()
    }
    .to_map()
}

/// Whether a VirtualDisk was made as a volume (upstream's label naming it): the VMs'
/// root disks share the namespace, and no volume call may reach one — not even a
/// DeleteVolume of a PV someone pointed at it by hand.
fn is_volume(vd: &VirtualDisk) -> bool {
    vd.labels().get(api::DISK_NAME_LABEL).map(String::as_str) == Some(vd.name_any().as_str())
}

fn is_readonly(v: &Vmbda) -> bool {
    v.annotations()
        .get(api::READONLY_ANNOTATION)
        .is_some_and(|r| r == "true")
}

/// The node an attachment is for: upstream's label (the hostname), else the VM's name.
fn attachment_node(v: &Vmbda) -> String {
    v.labels()
        .get(api::VMBDA_VM_LABEL)
        .cloned()
        .unwrap_or_else(|| v.spec.virtual_machine_name.clone())
}

fn condition_message(conditions: &[api::Condition]) -> String {
    let parts: Vec<String> = conditions
        .iter()
        .filter(|c| c.status != "True")
        .filter_map(|c| {
            let msg = c.message.as_deref().filter(|m| !m.is_empty())?;
            Some(format!(
                "{} {}: {msg}",
                c.type_,
                c.reason.as_deref().unwrap_or("")
            ))
        })
        .collect();
    if parts.is_empty() {
        "no condition says why".to_owned()
    } else {
        parts.join("; ")
    }
}

/// The VirtualDisk for a CSI volume name: the name itself when it can be one (a PV's
/// `pvc-<uid>`, as upstream names them), else `csi-<md5 of the name>` — deterministic, so
/// a repeated create finds the same disk; the CSI name is kept in an annotation and
/// compared, so two names never share a disk.
pub fn disk_name(csi_name: &str) -> String {
    if is_name(csi_name) && csi_name.len() <= 63 {
        csi_name.to_owned()
    } else {
        format!("csi-{:x}", md5::compute(csi_name.as_bytes()))
    }
}

/// The CSI name a VirtualDisk was made for.
fn csi_name_of(vd: &VirtualDisk) -> String {
    vd.annotations()
        .get(api::CSI_NAME_ANNOTATION)
        .cloned()
        .unwrap_or_else(|| vd.name_any())
}

/// Whether `s` can be the name of a namespaced object (an RFC 1123 subdomain): the ids
/// and node names we are given are checked before they reach a URL.
pub fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// A volume's zone, as its annotations record it (none when they record none).
fn zone_of(annotations: &BTreeMap<String, String>) -> Zone {
    Zone {
        zone: annotations
            .get(api::ZONE_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
        region: annotations
            .get(api::REGION_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
    }
}

/// The annotations recording `zone`; `None` removes one (in a merge patch).
fn zone_annotations(zone: &Zone) -> BTreeMap<&'static str, Option<String>> {
    let set = |v: &str| Some(v.to_owned()).filter(|v| !v.is_empty());
    BTreeMap::from([
        (api::ZONE_ANNOTATION, set(&zone.zone)),
        (api::REGION_ANNOTATION, set(&zone.region)),
    ])
}

fn json_map(m: &BTreeMap<String, String>) -> String {
    serde_json::to_string(m).unwrap_or_default()
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
        let existing = self
            .parent
            .get_opt("virtualdisk_get", &self.parent.disks(), &name)
            .await?;
        let vd = match existing {
            Some(vd) if !is_volume(&vd) || csi_name_of(&vd) != spec.name => {
                return Err(CloudError::ParameterMismatch {
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
                    },
                );
                vd.metadata.labels = Some(BTreeMap::from([(
                    api::DISK_NAME_LABEL.to_owned(),
                    name.clone(),
                )]));
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
        if have.parameters != spec.parameters {
            return Err(CloudError::ParameterMismatch {
                name: spec.name,
                reason: format!(
                    "it has parameters {:?}, asked {:?}",
                    have.parameters, spec.parameters
                ),
            });
        }
        let ready = self.wait_ready(&name).await?;
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
        // Only the disks made as volumes (upstream's label): the VMs' boot disks share
        // the namespace and are no volumes.
        let disks = self
            .parent
            .list_all(
                "virtualdisk_list",
                &self.parent.disks(),
                Some(api::DISK_NAME_LABEL),
            )
            .await?;
        let vmbdas = self
            .parent
            .list_all("vmbda_list", &self.parent.vmbdas(), None)
            .await?;
        let mut by_disk: BTreeMap<&str, Vec<Vmbda>> = BTreeMap::new();
        for v in &vmbdas {
            if v.spec.block_device_ref.kind == "VirtualDisk" {
                by_disk
                    .entry(v.spec.block_device_ref.name.as_str())
                    .or_default()
                    .push(v.clone());
            }
        }
        let mut out: Vec<Disk> = disks
            .iter()
            .filter(|vd| is_volume(vd))
            .map(|vd| {
                let name = vd.name_any();
                self.to_disk(
                    vd,
                    by_disk.get(name.as_str()).map(Vec::as_slice).unwrap_or(&[]),
                )
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
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
            Some(_) => Ok(()),
            None => Err(CloudError::DeadlineExceeded(format!(
                "VirtualDisk {id} is still being deleted after {:?}",
                self.waits.deleted
            ))),
        }
    }

    async fn attach_disk(&self, id: &str, node: &str, readonly: bool) -> Result<Attachment> {
        let vd = self.get_disk(id).await?;
        let Some(vm) = self.vm_of(node).await? else {
            return Err(CloudError::not_found("instance", node));
        };
        let hostname = api::vm_hostname(&vm).to_owned();
        let name = api::vmbda_name(id, &hostname);
        let uid = vd.metadata.uid.clone().unwrap_or_default();
        let existing = self.attachments_of(id).await?.into_iter().find(|v| {
            attachment_node(v) == hostname || v.spec.virtual_machine_name == vm.name_any()
        });
        let vmbda = match existing {
            Some(v) if is_readonly(&v) != readonly => {
                return Err(CloudError::FailedPrecondition(format!(
                    "VirtualDisk {id} is attached to {hostname} with readonly={}",
                    is_readonly(&v)
                )))
            }
            Some(v) => v,
            None => {
                let mut v = Vmbda::new(
                    &name,
                    &api::vmbda(),
                    api::VmbdaSpec {
                        virtual_machine_name: vm.name_any(),
                        block_device_ref: api::BlockDeviceRef {
                            kind: "VirtualDisk".into(),
                            name: id.to_owned(),
                        },
                    },
                );
                v.metadata.labels = Some(BTreeMap::from([
                    (api::VMBDA_DISK_LABEL.to_owned(), id.to_owned()),
                    (api::VMBDA_VM_LABEL.to_owned(), hostname.clone()),
                ]));
                if readonly {
                    v.metadata.annotations = Some(BTreeMap::from([(
                        api::READONLY_ANNOTATION.to_owned(),
                        "true".to_owned(),
                    )]));
                }
                v.status = None;
                match self
                    .parent
                    .call(
                        "vmbda_create",
                        &format!("create VirtualMachineBlockDeviceAttachment {name}"),
                        self.parent.vmbdas().create(&PostParams::default(), &v),
                    )
                    .await
                {
                    Ok(made) => made,
                    Err(CloudError::Conflict(_)) => self
                        .parent
                        .get_opt("vmbda_get", &self.parent.vmbdas(), &name)
                        .await?
                        .ok_or_else(|| {
                            CloudError::Conflict(format!(
                                "{name} was deleted while it was being made"
                            ))
                        })?,
                    Err(e) => return Err(e),
                }
            }
        };
        let vmbda_name = vmbda.name_any();
        let phase = |v: &Vmbda| v.status.as_ref().and_then(|s| s.phase.clone());
        let settled = |o: Option<&Vmbda>| {
            o.is_none_or(|v| matches!(phase(v).as_deref(), Some("Attached" | "Failed")))
        };
        let outcome = if settled(Some(&vmbda)) {
            Some(Some(vmbda))
        } else {
            self.parent
                .wait(
                    "vmbda",
                    self.parent.vmbdas(),
                    &vmbda_name,
                    self.waits.attached,
                    settled,
                )
                .await?
        };
        let attached = Attachment {
            node: hostname.clone(),
            readonly,
            publish_context: context(&uid),
        };
        match outcome {
            Some(Some(v)) if phase(&v).as_deref() == Some("Attached") => Ok(attached),
            Some(Some(v)) => {
                // Failed: the parent will not retry it; neither should the caller, until
                // something changes (the VM starts, the disk is freed elsewhere).
                let status = v.status.unwrap_or_default();
                Err(CloudError::FailedPrecondition(format!(
                    "attaching VirtualDisk {id} to {hostname} failed (VirtualMachineBlockDeviceAttachment {vmbda_name}): {}",
                    condition_message(&status.conditions)
                )))
            }
            Some(None) => Err(CloudError::Unavailable(format!(
                "VirtualMachineBlockDeviceAttachment {vmbda_name} was deleted before it attached"
            ))),
            None => {
                // Not attached in time. A VM deleted meanwhile makes it NotFound, and the
                // attachment is taken back so that nothing names the gone VM.
                if self.vm_of(node).await?.is_none() {
                    self.delete_vmbda(&vmbda_name).await?;
                    return Err(CloudError::not_found("instance", node));
                }
                let now = self
                    .parent
                    .get_opt("vmbda_get", &self.parent.vmbdas(), &vmbda_name)
                    .await?;
                let status = now.and_then(|v| v.status).unwrap_or_default();
                Err(CloudError::DeadlineExceeded(format!(
                    "VirtualMachineBlockDeviceAttachment {vmbda_name} is not Attached after {:?}: phase {}: {}",
                    self.waits.attached,
                    status.phase.as_deref().unwrap_or("unset"),
                    condition_message(&status.conditions)
                )))
            }
        }
    }

    async fn detach_disk(&self, id: &str, node: &str) -> Result<()> {
        if !is_name(id) {
            return Ok(());
        }
        let vm = self.vm_of(node).await?;
        let vmbdas = self.attachments_of(id).await?;
        let mine: Vec<Vmbda> = vmbdas
            .into_iter()
            .filter(|v| {
                attachment_node(v) == node
                    || vm
                        .as_ref()
                        .is_some_and(|vm| v.spec.virtual_machine_name == vm.name_any())
            })
            .collect();
        if vm.is_none() {
            // The parent says the VM is gone: every attachment naming it is dead weight.
            let selector = format!("{}={node}", api::VMBDA_VM_LABEL);
            let orphans = if is_name(node) {
                self.parent
                    .list_all("vmbda_list", &self.parent.vmbdas(), Some(&selector))
                    .await?
            } else {
                Vec::new()
            };
            for v in orphans.iter().chain(&mine) {
                self.delete_vmbda(&v.name_any()).await?;
            }
            return Ok(());
        }
        for v in &mine {
            let name = v.name_any();
            self.delete_vmbda(&name).await?;
            match self
                .parent
                .wait(
                    "vmbda",
                    self.parent.vmbdas(),
                    &name,
                    self.waits.detached,
                    |o: Option<&Vmbda>| o.is_none(),
                )
                .await?
            {
                Some(_) => {}
                None => {
                    return Err(CloudError::DeadlineExceeded(format!(
                        "VirtualMachineBlockDeviceAttachment {name} is still detaching after {:?}",
                        self.waits.detached
                    )))
                }
            }
        }
        Ok(())
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

impl DvpDisks {
    async fn delete_vmbda(&self, name: &str) -> Result<()> {
        self.parent
            .delete(
                "vmbda_delete",
                &self.parent.vmbdas(),
                name,
                &DeleteParams::default(),
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_object_names_pass() {
        for ok in ["pvc-0a1b", "a", "disk.v1", "x-1"] {
            assert!(is_name(ok), "{ok}");
        }
        for bad in [
            "",
            "../../etc/passwd",
            "vol-/x",
            "A",
            "-a",
            "a-",
            "a..b",
            "a b",
            &"x".repeat(254),
        ] {
            assert!(!is_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_volume_name_that_cannot_name_a_disk_is_hashed_and_kept() {
        assert_eq!(
            disk_name("pvc-0a1b2c3d-0000-4000-8000-000000000001"),
            "pvc-0a1b2c3d-0000-4000-8000-000000000001"
        );
        let long = disk_name("sanity-Controller-Service-CreateVolume-1A2B3C4D-5E6F7081");
        assert!(
            long.starts_with("csi-") && long.len() == 36 && is_name(&long),
            "{long}"
        );
        assert_eq!(
            long,
            disk_name("sanity-Controller-Service-CreateVolume-1A2B3C4D-5E6F7081")
        );
        assert_ne!(
            long,
            disk_name("sanity-Controller-Service-CreateVolume-1A2B3C4D-5E6F7082")
        );
        assert!(disk_name(&"x".repeat(64)).starts_with("csi-"));
    }

    #[test]
    fn the_context_carries_the_serial_the_guest_sees() {
        let ctx = context("6a5a9c4e-7d0b-4f7e-9c61-1b2e3f4a5b6c");
        let serial = &ctx[overcast_cloud::publish::SERIAL];
        assert_eq!(serial.len(), 32);
        assert_eq!(
            serial,
            &format!(
                "{:x}",
                md5::compute(b"6a5a9c4e-7d0b-4f7e-9c61-1b2e3f4a5b6c")
            )
        );
        assert_eq!(ctx.len(), 1);
    }
}
