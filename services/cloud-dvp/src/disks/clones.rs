//! Clones on DVP: the parent's data sources name no VirtualDisk (its CRD's
//! `objectRef.kind` is ClusterVirtualImage, VirtualImage or VirtualDiskSnapshot), so a
//! clone goes the way DVP clones a VM's disks — through a temporary VirtualDiskSnapshot
//! of the source, deleted once the clone is provisioned (its user guide: cloned disks
//! "keep a dataSource reference to temporary snapshots that were deleted afterwards").
//!
//! The temporary snapshot is named after the clone's CSI name (`csi-<md5>` of
//! `<name>.clone-source`), so a repeated or crashed create finds it again, and labelled
//! `overcast.dev/clone-source-for: <clone>` instead of being a CSI snapshot (no
//! ListSnapshots shows it). It is cut with `requiredConsistency: false`: frozen where the
//! node's agent runs, else what a crash would leave, as any clone of a volume in use.
//! It goes when the clone is Ready; a clone of a class binding on first consumer reads it
//! only at its first attachment, so there it goes with the clone's next create or its
//! delete.

use std::collections::BTreeMap;

use kube::api::PostParams;
use kube::ResourceExt;
use overcast_cloud::{CloudError, Result};

use super::snapshots::{phase, restore_source, SIZE_ANNOTATION};
use super::{disk_name, DvpDisks};
use crate::api::{self, VirtualDisk, VirtualDiskSnapshot};
use crate::machines::CLUSTER_UUID_LABEL;

/// Ours, on a clone's temporary VirtualDiskSnapshot: the VirtualDisk it is for.
pub const CLONE_SOURCE_FOR_LABEL: &str = "overcast.dev/clone-source-for";
/// Ours, on a clone: the volume it was cloned from (its data source names the temporary
/// snapshot, which goes).
pub const CLONE_OF_ANNOTATION: &str = "overcast.dev/clone-of";

/// The temporary snapshot of the clone `disk` (a VirtualDisk name).
fn clone_source_name(disk: &str) -> String {
    disk_name(&format!("{disk}.clone-source"))
}

impl DvpDisks {
    /// The data source of the clone `disk` of volume `source`: its temporary snapshot,
    /// cut (or found again) and Ready.
    pub(super) async fn clone_source(&self, disk: &str, source: &str) -> Result<serde_json::Value> {
        let name = clone_source_name(disk);
        let api = self.parent.snapshots();
        let existing = self
            .parent
            .get_opt("virtualdisksnapshot_get", &api, &name)
            .await?;
        match existing {
            Some(s) if s.labels().get(CLONE_SOURCE_FOR_LABEL).map(String::as_str) != Some(disk) => {
                return Err(CloudError::ParameterMismatch {
                    kind: "disk",
                    name: disk.to_owned(),
                    reason: format!(
                        "VirtualDiskSnapshot {name} exists and is not its clone source"
                    ),
                })
            }
            Some(s) if s.spec.virtual_disk_name != source => {
                return Err(CloudError::ParameterMismatch {
                    kind: "disk",
                    name: disk.to_owned(),
                    reason: format!(
                        "it is being cloned from volume {}",
                        s.spec.virtual_disk_name
                    ),
                })
            }
            Some(_) => {}
            None => {
                let vd = self.get_disk(source).await?;
                let size = self.to_disk(&vd, &[]).size_bytes;
                let mut labels =
                    BTreeMap::from([(CLONE_SOURCE_FOR_LABEL.to_owned(), disk.to_owned())]);
                if let Some(uuid) = &self.parent.cluster {
                    labels.insert(CLUSTER_UUID_LABEL.to_owned(), uuid.clone());
                }
                let mut obj = VirtualDiskSnapshot::new(
                    &name,
                    &api::virtual_disk_snapshot(),
                    api::VirtualDiskSnapshotSpec {
                        virtual_disk_name: source.to_owned(),
                        required_consistency: Some(false),
                    },
                );
                obj.metadata.labels = Some(labels);
                obj.metadata.annotations = Some(BTreeMap::from([(
                    SIZE_ANNOTATION.to_owned(),
                    size.to_string(),
                )]));
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
                    Ok(_) | Err(CloudError::Conflict(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let settled = |o: Option<&VirtualDiskSnapshot>| {
            o.is_none_or(|s| matches!(phase(s), "Ready" | "Failed" | "Terminating"))
        };
        let vds = match self
            .parent
            .wait(
                "virtualdisksnapshot",
                api,
                &name,
                self.waits.disk_ready,
                settled,
            )
            .await?
        {
            Some(Some(s)) => s,
            Some(None) => {
                return Err(CloudError::Unavailable(format!(
                    "VirtualDiskSnapshot {name} (the clone source of {disk}) disappeared while it was being cut; a retry cuts it again"
                )))
            }
            None => {
                return Err(CloudError::DeadlineExceeded(format!(
                    "VirtualDiskSnapshot {name} (the clone source of {disk}) is not Ready after {:?}",
                    self.waits.disk_ready
                )))
            }
        };
        match phase(&vds) {
            "Ready" => Ok(restore_source(&name)),
            "Failed" => Err(self.failed(&vds).await),
            _ => Err(CloudError::Busy(format!(
                "VirtualDiskSnapshot {name} (the clone source of {disk}) is being deleted; a retry cuts it again once it is gone"
            ))),
        }
    }

    /// Deletes the temporary snapshot of the clone `vd` once it is no longer needed: the
    /// clone is Ready, or `deleted`. Best effort: a snapshot left is deleted at the next
    /// create of the clone, or its delete.
    pub(super) async fn drop_clone_source(&self, vd: &VirtualDisk, deleted: bool) {
        if !vd.annotations().contains_key(CLONE_OF_ANNOTATION) {
            return;
        }
        let ready = vd.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready");
        if !ready && !deleted {
            return;
        }
        let disk = vd.name_any();
        let name = clone_source_name(&disk);
        let found = self
            .parent
            .get_opt("virtualdisksnapshot_get", &self.parent.snapshots(), &name)
            .await;
        if let Ok(Some(s)) = found {
            if s.labels().get(CLONE_SOURCE_FOR_LABEL) == Some(&disk) {
                if let Err(e) = self.delete_vds(&s).await {
                    tracing::warn!(disk = %disk, error = %e, "the clone's temporary snapshot is left; the next call deletes it");
                }
            }
        }
    }
}
