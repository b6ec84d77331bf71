//! Snapshots on DVP: a CSI snapshot is a `VirtualDiskSnapshot` of the volume's
//! VirtualDisk in the parent namespace, and a restore is a VirtualDisk whose data source
//! is that snapshot (`{type: ObjectRef, objectRef: {kind: VirtualDiskSnapshot}}`), as
//! deckhouse/virtualization makes them (cf3a9e6c; docs/clouds/dvp.md, Snapshots).
//!
//! What the parent does that decides the answers:
//! - its `Failed` is final: a snapshot that failed is never retried by the parent, so the
//!   create deletes that very snapshot (by uid) and answers why, and the sidecar's retry
//!   cuts a new one;
//! - a disk attached to a running VM is frozen through the guest agent; without one,
//!   `requiredConsistency` (the parent's default, true; the VolumeSnapshotClass may say
//!   `"false"`) fails the snapshot `PotentiallyInconsistent`: FAILED_PRECONDITION, with
//!   what to change;
//! - nothing on the parent keeps a snapshot a disk is being restored from (no finalizer,
//!   no webhook on delete): one deleted before the restore's PVC is bound leaves that
//!   disk Pending for good. DeleteSnapshot refuses (FAILED_PRECONDITION) while a
//!   VirtualDisk of the namespace is being made from it.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use kube::api::{DeleteParams, PostParams};
use kube::ResourceExt;
use overcast_cloud::{page_of, CloudError, DiskSource, Result, Snapshot, SnapshotSpec};
use serde_json::json;

use super::{disk_name, is_name, json_map, DvpDisks};
use crate::api::{self, VirtualDiskSnapshot};
use crate::machines::CLUSTER_UUID_LABEL;

/// Ours, on a VirtualDiskSnapshot cut for a CSI snapshot: the VirtualDisk it is of (a
/// label, so a listing by source is one selector).
pub const SNAPSHOT_OF_LABEL: &str = "overcast.dev/snapshot-of";
/// Ours: the source's size when it was cut, the least a restore needs (the parent keeps
/// it on the VolumeSnapshot it makes, which a tenant does not read).
pub(super) const SIZE_ANNOTATION: &str = "overcast.dev/size";
/// The VolumeSnapshotClass parameter, the parent's own spec field.
pub const REQUIRED_CONSISTENCY: &str = "requiredConsistency";
/// How long a CreateSnapshot waits for the parent to cut before answering
/// `ready_to_use: false` (the sidecar asks again).
const CUT_WAIT: Duration = Duration::from_secs(10);

/// Go's `strconv.ParseBool`, as the parent's boolean reads in a class parameter.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

pub(super) fn validate_snapshot_parameters(parameters: &BTreeMap<String, String>) -> Result<()> {
    for (k, v) in parameters {
        match k.as_str() {
            REQUIRED_CONSISTENCY if parse_bool(v).is_some() => {}
            REQUIRED_CONSISTENCY => {
                return Err(CloudError::InvalidArgument(format!(
                    "{REQUIRED_CONSISTENCY} {v:?} is not a boolean"
                )))
            }
            other => {
                return Err(CloudError::InvalidArgument(format!(
                    "unknown snapshot class parameter {other:?} (DVP takes {REQUIRED_CONSISTENCY})"
                )))
            }
        }
    }
    Ok(())
}

pub(super) fn phase(vds: &VirtualDiskSnapshot) -> &str {
    vds.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn source_of(vds: &VirtualDiskSnapshot) -> &str {
    &vds.spec.virtual_disk_name
}

/// The CSI name a snapshot was cut for.
fn csi_name(vds: &VirtualDiskSnapshot) -> String {
    vds.annotations()
        .get(api::CSI_NAME_ANNOTATION)
        .cloned()
        .unwrap_or_else(|| vds.name_any())
}

fn is_ours(vds: &VirtualDiskSnapshot) -> bool {
    vds.labels().contains_key(SNAPSHOT_OF_LABEL)
}

/// The `VirtualDiskSnapshotReady` condition's reason and message.
fn why(vds: &VirtualDiskSnapshot) -> (String, String) {
    let c = vds.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == "VirtualDiskSnapshotReady")
    });
    (
        c.and_then(|c| c.reason.clone()).unwrap_or_default(),
        c.and_then(|c| c.message.clone()).unwrap_or_default(),
    )
}

fn to_snapshot(vds: &VirtualDiskSnapshot) -> Snapshot {
    let created = vds
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| SystemTime::from(t.0))
        .unwrap_or(SystemTime::UNIX_EPOCH);
    Snapshot {
        id: vds.name_any(),
        name: csi_name(vds),
        source: source_of(vds).to_owned(),
        size_bytes: vds
            .annotations()
            .get(SIZE_ANNOTATION)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        created,
        ready: phase(vds) == "Ready",
    }
}

/// A restore's data source: the snapshot, by name, in the disk's namespace.
pub(super) fn restore_source(snapshot: &str) -> serde_json::Value {
    json!({"type": "ObjectRef", "objectRef": {"kind": "VirtualDiskSnapshot", "name": snapshot}})
}

/// Ours, on a VirtualDisk restored from a snapshot: the snapshot (DeleteSnapshot finds
/// the restores on their way by it, not by reading the namespace's every disk).
pub const RESTORED_FROM_LABEL: &str = "overcast.dev/restored-from";

/// The labels a new disk made from `source` carries.
pub(super) fn source_labels(source: Option<&DiskSource>) -> Option<(String, String)> {
    match source {
        Some(DiskSource::Snapshot(id)) => Some((RESTORED_FROM_LABEL.to_owned(), id.clone())),
        _ => None,
    }
}

/// The snapshot a VirtualDisk is restored from, when its data source is one.
pub(super) fn restored_from(vd: &api::VirtualDisk) -> Option<&str> {
    let s = vd.spec.data_source.as_ref()?;
    (s["type"] == "ObjectRef" && s["objectRef"]["kind"] == "VirtualDiskSnapshot")
        .then(|| s["objectRef"]["name"].as_str())
        .flatten()
}

impl DvpDisks {
    fn vds_api(&self) -> kube::Api<VirtualDiskSnapshot> {
        self.parent.snapshots()
    }

    /// Our VirtualDiskSnapshot `id`, or NotFound (also for a string that cannot name
    /// one, and for a snapshot cut by someone else).
    async fn get_vds(&self, id: &str) -> Result<VirtualDiskSnapshot> {
        if !is_name(id) {
            return Err(CloudError::not_found("snapshot", id));
        }
        self.parent
            .get_opt("virtualdisksnapshot_get", &self.vds_api(), id)
            .await?
            .filter(is_ours)
            .ok_or_else(|| CloudError::not_found("snapshot", id))
    }

    pub(super) async fn cut(&self, spec: SnapshotSpec) -> Result<Snapshot> {
        validate_snapshot_parameters(&spec.parameters)?;
        let name = disk_name(&spec.name);
        let api = self.vds_api();
        let mut existing = self
            .parent
            .get_opt("virtualdisksnapshot_get", &api, &name)
            .await?;
        if existing
            .as_ref()
            .is_some_and(|s| s.metadata.deletion_timestamp.is_some())
        {
            existing = self.vds_gone(&name).await?;
        }
        let vds = match existing {
            Some(s) if !is_ours(&s) || csi_name(&s) != spec.name => {
                return Err(CloudError::ParameterMismatch {
                    kind: "snapshot",
                    name: spec.name,
                    reason: format!(
                        "VirtualDiskSnapshot {name} exists and was not cut for this snapshot"
                    ),
                })
            }
            Some(s) => s,
            None => {
                let disk = self.get_disk(&spec.source).await?;
                let size = self.to_disk(&disk, &[]).size_bytes;
                let required = spec
                    .parameters
                    .get(REQUIRED_CONSISTENCY)
                    .and_then(|v| parse_bool(v))
                    .unwrap_or(true);
                let mut labels =
                    BTreeMap::from([(SNAPSHOT_OF_LABEL.to_owned(), spec.source.clone())]);
                if let Some(uuid) = &self.parent.cluster {
                    labels.insert(CLUSTER_UUID_LABEL.to_owned(), uuid.clone());
                }
                let mut annotations = BTreeMap::from([
                    (SIZE_ANNOTATION.to_owned(), size.to_string()),
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
                let mut obj = VirtualDiskSnapshot::new(
                    &name,
                    &api::virtual_disk_snapshot(),
                    api::VirtualDiskSnapshotSpec {
                        virtual_disk_name: spec.source.clone(),
                        required_consistency: Some(required),
                    },
                );
                obj.metadata.labels = Some(labels);
                obj.metadata.annotations = Some(annotations);
                obj.status = None;
                match self
                    .parent
                    .call(
                        "virtualdisksnapshot_create",
                        &format!("create VirtualDiskSnapshot {name}"),
                        api.create(&PostParams::default(), &obj),
                    )
                    .await
                {
                    Ok(made) => made,
                    // Cut by a concurrent create of the same name: compared below.
                    Err(CloudError::Conflict(_)) => self.get_vds(&name).await?,
                    Err(e) => return Err(e),
                }
            }
        };
        if source_of(&vds) != spec.source || csi_name(&vds) != spec.name {
            return Err(CloudError::ParameterMismatch {
                kind: "snapshot",
                name: spec.name,
                reason: format!("it is a snapshot of volume {}", source_of(&vds)),
            });
        }
        let settled = |o: Option<&VirtualDiskSnapshot>| {
            o.is_none_or(|s| matches!(phase(s), "Ready" | "Failed" | "Terminating"))
        };
        let vds = match self
            .parent
            .wait("virtualdisksnapshot", api, &name, CUT_WAIT, settled)
            .await?
        {
            Some(Some(s)) => s,
            Some(None) => {
                return Err(CloudError::Unavailable(format!(
                    "VirtualDiskSnapshot {name} disappeared while it was being cut; a retry cuts it again"
                )))
            }
            // Still cutting: the sidecar asks again and reads how far it got.
            None => return Ok(to_snapshot(&vds)),
        };
        match phase(&vds) {
            "Failed" => Err(self.failed(&vds).await),
            "Terminating" => Err(CloudError::Busy(format!(
                "VirtualDiskSnapshot {name} is being deleted; a retry cuts it again once it is gone"
            ))),
            _ => Ok(to_snapshot(&vds)),
        }
    }

    /// A snapshot the parent failed (for good): that very one deleted, and why, as the
    /// code the reason calls for.
    pub(super) async fn failed(&self, vds: &VirtualDiskSnapshot) -> CloudError {
        let name = vds.name_any();
        let (reason, message) = why(vds);
        let deleted = self.delete_vds(vds).await;
        let left = match deleted {
            Ok(()) => "deleted; a retry cuts a new one",
            Err(_) => "its deletion failed; the next create retries it",
        };
        let said = format!("VirtualDiskSnapshot {name} failed ({left}): {reason}: {message}");
        match reason.as_str() {
            "PotentiallyInconsistent" => CloudError::FailedPrecondition(format!(
                "{said} — run qemu-guest-agent in the node's VM, or set {REQUIRED_CONSISTENCY}: \"false\" in the VolumeSnapshotClass to take it unfrozen"
            )),
            // The disk not (yet) Ready: being resized, or still provisioning.
            "WaitingForTheVirtualDisk" => CloudError::Unavailable(said),
            _ => CloudError::Internal(said),
        }
    }

    pub(super) async fn delete_vds(&self, vds: &VirtualDiskSnapshot) -> Result<()> {
        // Only this very snapshot: one of the same name cut since is not ours to delete.
        let dp = DeleteParams {
            preconditions: vds
                .metadata
                .uid
                .clone()
                .map(|uid| kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
            ..DeleteParams::default()
        };
        self.parent
            .delete(
                "virtualdisksnapshot_delete",
                &self.vds_api(),
                &vds.name_any(),
                &dp,
            )
            .await
    }

    async fn vds_gone(&self, name: &str) -> Result<Option<VirtualDiskSnapshot>> {
        match self
            .parent
            .wait(
                "virtualdisksnapshot",
                self.vds_api(),
                name,
                self.waits.deleted,
                |o: Option<&VirtualDiskSnapshot>| o.is_none(),
            )
            .await?
        {
            Some(_) => Ok(None),
            None => Err(CloudError::Busy(format!(
                "VirtualDiskSnapshot {name} is still being deleted after {:?}",
                self.waits.deleted
            ))),
        }
    }

    pub(super) async fn get_snapshot(&self, id: &str) -> Result<Snapshot> {
        Ok(to_snapshot(&self.get_vds(id).await?))
    }

    /// This cluster's snapshots (of `source` only, when given), by id.
    pub(super) async fn snapshots_page(
        &self,
        source: Option<&str>,
        after: Option<&str>,
        max: usize,
    ) -> Result<(Vec<Snapshot>, bool)> {
        let mut selector = match source {
            Some(s) if !is_name(s) || s.len() > 63 => return Ok((Vec::new(), false)),
            Some(s) => format!("{SNAPSHOT_OF_LABEL}={s}"),
            None => SNAPSHOT_OF_LABEL.to_owned(),
        };
        if let Some(uuid) = &self.parent.cluster {
            selector.push_str(&format!(",{CLUSTER_UUID_LABEL}={uuid}"));
        }
        let mut found: Vec<Snapshot> = self
            .parent
            .list_all("virtualdisksnapshot_list", &self.vds_api(), Some(&selector))
            .await?
            .iter()
            .filter(|s| source.is_none_or(|src| source_of(s) == src))
            .map(to_snapshot)
            .collect();
        found.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(page_of(found, |s| &s.id, after, max))
    }

    pub(super) async fn remove_snapshot(&self, id: &str) -> Result<()> {
        let vds = self.get_vds(id).await?;
        // The parent keeps no snapshot a restore needs: refused here while one is on
        // its way (until its disk is Ready: a disk waiting for its first consumer has
        // not read the snapshot yet).
        let selector = format!("{RESTORED_FROM_LABEL}={id}");
        let restoring: Vec<String> = self
            .parent
            .list_all("virtualdisk_list", &self.parent.disks(), Some(&selector))
            .await?
            .iter()
            .filter(|vd| restored_from(vd) == Some(id))
            .filter(|vd| {
                vd.metadata.deletion_timestamp.is_none()
                    && vd.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Ready")
            })
            .map(|vd| vd.name_any())
            .collect();
        if !restoring.is_empty() {
            return Err(CloudError::FailedPrecondition(format!(
                "VirtualDiskSnapshot {id} is the source of VirtualDisk {} being made; deleted now, the parent would never finish it: retry once it is Ready",
                restoring.join(", ")
            )));
        }
        self.delete_vds(&vds).await?;
        match self.vds_gone(id).await {
            Ok(_) => Ok(()),
            Err(_) => Err(CloudError::DeadlineExceeded(format!(
                "VirtualDiskSnapshot {id} is still being deleted after {:?}",
                self.waits.deleted
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_parameter_reads_as_go_reads_a_bool_and_nothing_else_is_taken() {
        for ok in ["true", "false", "1", "0", "T", "F", "TRUE", "False"] {
            let p = BTreeMap::from([(REQUIRED_CONSISTENCY.to_owned(), ok.to_owned())]);
            assert!(validate_snapshot_parameters(&p).is_ok(), "{ok}");
        }
        for bad in ["yes", "", "on"] {
            let p = BTreeMap::from([(REQUIRED_CONSISTENCY.to_owned(), bad.to_owned())]);
            assert!(matches!(
                validate_snapshot_parameters(&p),
                Err(CloudError::InvalidArgument(_))
            ));
        }
        let p = BTreeMap::from([("type".to_owned(), "snapshot".to_owned())]);
        assert!(matches!(
            validate_snapshot_parameters(&p),
            Err(CloudError::InvalidArgument(_))
        ));
    }
}
