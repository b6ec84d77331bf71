//! Cinder's volume as its API answers it, and how one reads as a [`Disk`].

use std::collections::BTreeMap;

use overcast_cloud::{Attachment, Disk, DiskCondition, DiskSource, Zone};
use serde::Deserialize;

use super::{context, CinderDisks, BACKUP_METADATA, GIB, PARAMETERS_METADATA, SRC_BACKUP_METADATA};

#[derive(Debug, Clone, Deserialize)]
pub struct Volume {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    pub status: String,
    /// GiB.
    pub size: u64,
    #[serde(default)]
    pub availability_zone: Option<String>,
    #[serde(default)]
    pub volume_type: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub attachments: Vec<VolumeAttachment>,
    #[serde(default)]
    pub multiattach: bool,
    /// The volume it was cloned from.
    #[serde(default)]
    pub source_volid: Option<String>,
    /// The snapshot it was made from.
    #[serde(default)]
    pub snapshot_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct VolumeAttachment {
    #[serde(default)]
    pub server_id: Option<String>,
    #[serde(default)]
    pub attachment_id: Option<String>,
    #[serde(default)]
    pub device: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct One {
    pub volume: Volume,
}

#[derive(Deserialize)]
pub(super) struct Many {
    pub volumes: Vec<Volume>,
}

impl CinderDisks {
    pub(super) fn to_disk(&self, v: &Volume) -> Disk {
        let parameters: BTreeMap<String, String> = v
            .metadata
            .get(PARAMETERS_METADATA)
            .and_then(|p| serde_json::from_str(p).ok())
            .unwrap_or_default();
        let metadata = v
            .metadata
            .iter()
            .filter(|(k, _)| k.starts_with("csi.storage.k8s.io/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let attachments = v
            .attachments
            .iter()
            .filter_map(|a| {
                Some(Attachment {
                    node: a.server_id.clone()?,
                    readonly: false,
                    publish_context: context(&v.id),
                })
            })
            .collect();
        // A volume on its way in or out, failed, or held by an admin is not one a
        // workload can use.
        let condition = if v.status.starts_with("error")
            || matches!(
                v.status.as_str(),
                "creating" | "deleting" | "maintenance" | "awaiting-transfer" | "restoring-backup"
            ) {
            DiskCondition::Abnormal(format!("the volume is {}", v.status))
        } else {
            DiskCondition::Healthy
        };
        let zone = match v.availability_zone.as_deref() {
            Some(az) if !az.is_empty() && !self.ignore_volume_az => Zone {
                zone: az.to_owned(),
                region: self.region.clone(),
            },
            _ => Zone::default(),
        };
        Disk {
            id: v.id.clone(),
            name: v.name.clone().unwrap_or_default(),
            size_bytes: v.size * GIB,
            zone,
            parameters,
            metadata,
            attachments,
            condition,
            source: match (&v.snapshot_id, &v.source_volid) {
                (Some(snapshot), _) => Some(DiskSource::Snapshot(snapshot.clone())),
                (None, Some(volume)) => Some(DiskSource::Disk(volume.clone())),
                // Restored from a backup (the CSI snapshot is the backup): Cinder says
                // which once the restore is done (cinder-csi-plugin's restores too), our
                // metadata while it runs.
                (None, None) => v
                    .metadata
                    .get(SRC_BACKUP_METADATA)
                    .or_else(|| v.metadata.get(BACKUP_METADATA))
                    .map(|b| DiskSource::Snapshot(b.clone())),
            },
        }
    }
}
