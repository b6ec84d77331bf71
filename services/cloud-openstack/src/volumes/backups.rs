//! Backups on OpenStack: a snapshot class with cinder-csi-plugin's `type: backup` makes a
//! Cinder backup — cinder-backup's copy of the volume in its own store (Swift, Ceph, NFS,
//! a POSIX path), which outlives the volume and its backend — the way cinder-csi-plugin
//! makes one (kubernetes/cloud-provider-openstack at c453fb7c, `controllerserver.go`
//! `CreateSnapshot`, `openstack_backups.go`): a Cinder snapshot of the volume named as the
//! CSI snapshot, backed up (`POST /backups` with its `snapshot_id`) under the same name,
//! with cinder-csi's description and metadata (the cluster, the snapshotter's keys,
//! `type`), and that snapshot deleted once the backup is `available`. The CSI snapshot id
//! is the backup's id; a volume is restored from it by `POST /volumes` with `backup_id`
//! (microversion 3.47). So the backups a switched cluster's cinder-csi-plugin made are
//! restored and deleted here, and ours read the same to it.
//!
//! Where cinder-csi-plugin is fragile, the rules here:
//! - it holds the CreateSnapshot until the backup is done (20 s a GiB + 30 s, asking every
//!   7 s), then answers INTERNAL and leaves the backup; here the answer comes once the
//!   backup exists, `ready_to_use: false` while cinder-backup copies, and the sidecar asks
//!   again (a repeat finds the backup by name);
//! - a backup Cinder puts in `error` (cinder-backup down, its store full) is deleted once
//!   Cinder says so again, with the snapshot cut for it, and the create fails with Cinder's
//!   `fail_reason`: the retry makes a new one, nothing is left;
//! - the snapshot cut for a backup is deleted by the answer that says ready and, when a
//!   crash left it, by the DeleteSnapshot of the backup: it is deleted only when Cinder
//!   says it is the backup's own (its `snapshot_id`, the backup's name and volume);
//! - a delete Cinder refuses (the backup still being made or restored, an incremental
//!   backup depending on it) is FAILED_PRECONDITION and the sidecar asks again
//!   (cinder-csi: INTERNAL); ListSnapshots by a backup's id lists it (cinder-csi: empty).

use std::time::{Instant, SystemTime};

use serde::Deserialize;

use super::made::{first_answer, Deletion, Made};
use super::snapshots::{cinder_time, force, SNAPSHOT_DESCRIPTION};
use super::*;

/// cinder-csi-plugin's limit on its wait for a backup; taken (an integer, as it parses
/// it) and not needed: a backup still being copied is answered `ready_to_use: false`.
pub const BACKUP_MAX_DURATION_PARAMETER: &str = "backup-max-duration-seconds-per-gb";
/// Backup metadata (3.43) and zone (3.51): cinder-csi-plugin sends 3.51 with every backup.
const BACKUP_WITH_ZONE: Microversion = Microversion(3, 51);
/// `backup_id` in a volume create.
pub(super) const VOLUME_FROM_BACKUP: Microversion = Microversion(3, 47);
/// Cinder's, on a volume restored from a backup once the restore is done (cinder-backup's
/// manager, since Ussuri): a repeated CreateVolume compares the volume's source.
pub const SRC_BACKUP_METADATA: &str = "src_backup_id";
/// Ours, the same while the restore runs (Cinder's volume names a snapshot or a volume it
/// came from, never a backup, and its key comes at the restore's end).
pub const BACKUP_METADATA: &str = "overcast.dev/restored-from-backup";

#[derive(Debug, Clone, Deserialize)]
pub struct CinderBackup {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    pub status: String,
    /// GiB: the volume's size when it was backed up.
    #[serde(default)]
    pub size: Option<u64>,
    #[serde(default)]
    pub volume_id: Option<String>,
    /// The snapshot it was made from.
    #[serde(default)]
    pub snapshot_id: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub fail_reason: Option<String>,
}

#[derive(Deserialize)]
struct OneBackup {
    backup: CinderBackup,
}

#[derive(Deserialize)]
struct ManyBackups {
    backups: Vec<CinderBackup>,
}

impl Made for CinderBackup {
    fn status(&self) -> &str {
        &self.status
    }
}

impl CinderBackup {
    pub fn to_snapshot(&self) -> Snapshot {
        Snapshot {
            id: self.id.clone(),
            name: self.name.clone().unwrap_or_default(),
            source: self.volume_id.clone().unwrap_or_default(),
            size_bytes: self.size.unwrap_or(0) * GIB,
            created: self
                .created_at
                .as_deref()
                .and_then(cinder_time)
                .unwrap_or(SystemTime::UNIX_EPOCH),
            ready: self.status == "available",
        }
    }
}

/// Whether a snapshot class asks for a backup.
pub(super) fn is_backup(parameters: &BTreeMap<String, String>) -> bool {
    parameters
        .get(SNAPSHOT_TYPE_PARAMETER)
        .is_some_and(|t| t == "backup")
}

impl CinderDisks {
    pub(super) async fn cinder_backup(&self, id: &str) -> Result<CinderBackup> {
        if !is_uuid(id) {
            return Err(CloudError::not_found("backup", id));
        }
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "backup_get",
                Method::GET,
                &format!("/backups/{id}"),
                None,
                None,
            )
            .await?;
        match resp.status.as_u16() {
            200 => Ok(json::<OneBackup>("backup_get", &resp)?.backup),
            404 => Err(CloudError::not_found("backup", id)),
            _ => Err(unexpected("backup_get", &resp)),
        }
    }

    /// Backups named `name` (Cinder filters by it; only the exact name counts).
    async fn backups_named(&self, name: &str) -> Result<Vec<CinderBackup>> {
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "backup_list",
                Method::GET,
                &format!("/backups/detail?name={}", encode(name)),
                None,
                None,
            )
            .await?;
        if resp.status.as_u16() != 200 {
            return Err(unexpected("backup_list", &resp));
        }
        let mut found = json::<ManyBackups>("backup_list", &resp)?.backups;
        found.retain(|b| b.name.as_deref() == Some(name));
        Ok(found)
    }

    pub(super) async fn create_backup(&self, spec: SnapshotSpec) -> Result<Snapshot> {
        let _slot = self
            .creating
            .claim(&format!("snapshot/{}", spec.name))
            .map_err(|_| {
                CloudError::Busy(format!(
                    "a create of snapshot {:?} is in progress",
                    spec.name
                ))
            })?;
        let backup = match self.backups_named(&spec.name).await?.as_slice() {
            [] => self.back_up(&spec).await?,
            [one] if one.volume_id.as_deref() == Some(spec.source.as_str()) => one.clone(),
            [one] => {
                return Err(CloudError::ParameterMismatch {
                    kind: "snapshot",
                    name: spec.name,
                    reason: format!(
                        "Cinder backup {} is of volume {}",
                        one.id,
                        one.volume_id.as_deref().unwrap_or("(none)")
                    ),
                })
            }
            many => {
                return Err(CloudError::FailedPrecondition(format!(
                    "{} Cinder backups are named {:?}; which one is the snapshot is ambiguous",
                    many.len(),
                    spec.name
                )))
            }
        };
        let backup = self.until_backed_up(&backup).await?;
        if backup.status == "available" {
            self.drop_backup_snapshot(&backup).await;
        }
        Ok(backup.to_snapshot())
    }

    /// The snapshot (one a crash left under this name is taken again), once `available`,
    /// backed up: the backup as Cinder first answers it. The snapshot must be there before
    /// the answer: the backup's id is the CSI snapshot's, and csi-snapshotter keeps the
    /// first id it is given.
    async fn back_up(&self, spec: &SnapshotSpec) -> Result<CinderBackup> {
        let source = self.get(&spec.source).await.map_err(|e| match e {
            CloudError::NotFound { .. } => CloudError::not_found("disk", &spec.source),
            e => e,
        })?;
        let snapshot = match self.snapshots_named(&spec.name).await?.as_slice() {
            [] => self.cut(spec, &source, force(&spec.parameters)?).await?,
            [one] if one.volume_id == spec.source => one.clone(),
            [one] => {
                return Err(CloudError::ParameterMismatch {
                    kind: "snapshot",
                    name: spec.name.clone(),
                    reason: format!("Cinder snapshot {} is of volume {}", one.id, one.volume_id),
                })
            }
            many => {
                return Err(CloudError::FailedPrecondition(format!(
                    "{} Cinder snapshots are named {:?}; which one to back up is ambiguous",
                    many.len(),
                    spec.name
                )))
            }
        };
        let started = Instant::now();
        let mut snapshot = snapshot;
        while snapshot.status != "available" {
            if started.elapsed() > self.waits.available {
                return Err(CloudError::DeadlineExceeded(format!(
                    "openstack: snapshot {} to back up is still {} after {:?}",
                    snapshot.id, snapshot.status, self.waits.available
                )));
            }
            snapshot = self.until_cut(&snapshot).await?;
        }
        let zone = spec.parameters.get(AVAILABILITY_PARAMETER);
        let microversion = if zone.is_some() {
            BACKUP_WITH_ZONE
        } else {
            Microversion(3, 43)
        };
        self.os
            .require(
                Service::BlockStorage,
                microversion,
                "a backup with metadata",
            )
            .await?;
        // cinder-csi-plugin's metadata: the cluster, the snapshotter's keys and the class's
        // `type` (not `force-create`, which it takes out).
        let mut metadata = spec.metadata.clone();
        metadata.insert(CLUSTER_METADATA.to_owned(), self.cluster.clone());
        metadata.insert(SNAPSHOT_TYPE_PARAMETER.to_owned(), "backup".to_owned());
        let mut body = json!({"backup": {
            "volume_id": source.id,
            "snapshot_id": snapshot.id,
            "name": spec.name,
            "description": SNAPSHOT_DESCRIPTION,
            "force": force(&spec.parameters)?,
            "metadata": metadata,
        }});
        if let Some(zone) = zone {
            body["backup"]["availability_zone"] = json!(zone);
        }
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "backup_create",
                Method::POST,
                "/backups",
                Some(&body),
                Some(microversion),
            )
            .await?;
        let id = match resp.status.as_u16() {
            // Cinder's answer to a create holds the id, name and links alone.
            200 | 202 => json::<Value>("backup_create", &resp)?["backup"]["id"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| unexpected("backup_create", &resp))?,
            404 => return Err(CloudError::not_found("disk", &source.id)),
            413 => {
                return Err(CloudError::ResourceExhausted(format!(
                    "{}",
                    unexpected("backup_create", &resp)
                )))
            }
            400 => {
                return Err(CloudError::FailedPrecondition(format!(
                    "{}",
                    unexpected("backup_create", &resp)
                )))
            }
            _ => return Err(unexpected("backup_create", &resp)),
        };
        match self.cinder_backup(&id).await {
            Err(CloudError::NotFound { .. }) => Err(CloudError::Unavailable(format!(
                "openstack: backup {id} was deleted while it was being made; a retry makes it again"
            ))),
            r => r,
        }
    }

    /// Polls a backup being made as long as [`first_answer`] does: `available`, or how far it
    /// got when cinder-backup takes longer. One in `error` is deleted and the create
    /// fails.
    async fn until_backed_up(&self, backup: &CinderBackup) -> Result<CinderBackup> {
        let Some(now) = first_answer(backup.clone(), || self.cinder_backup(&backup.id)).await?
        else {
            return Err(CloudError::Unavailable(format!(
                "openstack: backup {} was deleted while it was being made; a retry makes it again",
                backup.id
            )));
        };
        match now.status.as_str() {
            "error" => Err(self.remove_failed_backup(&now).await),
            "deleting" | "error_deleting" => Err(CloudError::Unavailable(format!(
                "openstack: backup {} named {:?} is {}; a retry makes it again once it is gone",
                now.id,
                now.name.as_deref().unwrap_or_default(),
                now.status
            ))),
            _ => Ok(now),
        }
    }

    /// Deletes a backup Cinder says is in `error` once it says so again, with the
    /// snapshot cut for it, and says why the create failed.
    async fn remove_failed_backup(&self, failed: &CinderBackup) -> CloudError {
        let why = format!(
            "openstack: Cinder could not back up volume {} as backup {}: {}",
            failed.volume_id.as_deref().unwrap_or_default(),
            failed.id,
            failed.fail_reason.as_deref().unwrap_or("no reason given")
        );
        match self.cinder_backup(&failed.id).await {
            Ok(b) if b.status == "error" => {}
            _ => return CloudError::Internal(why),
        }
        let left = match self.delete_backup(&failed.id).await {
            Ok(()) | Err(CloudError::NotFound { .. }) => "deleted; a retry makes it again",
            Err(_) => "its deletion failed; the next create retries it",
        };
        CloudError::Internal(format!("{why} ({left})"))
    }

    /// Deletes the snapshot cut for `backup` when Cinder says it is that one: the
    /// backup's `snapshot_id`, named as the backup, of its volume, `available`. One that
    /// stays (Cinder refused, or answered nothing) is tried again by the backup's delete.
    async fn drop_backup_snapshot(&self, backup: &CinderBackup) {
        let Some(id) = backup.snapshot_id.as_deref() else {
            return;
        };
        let snapshot = match self.cinder_snapshot(id).await {
            Ok(s) => s,
            Err(CloudError::NotFound { .. }) => return,
            Err(e) => {
                tracing::warn!(backup = %backup.id, snapshot = %id, error = %e, "the snapshot cut for the backup stays until the backup is deleted");
                return;
            }
        };
        if snapshot.name != backup.name
            || Some(&snapshot.volume_id) != backup.volume_id.as_ref()
            || snapshot.status != "available"
        {
            return;
        }
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "snapshot_delete",
                Method::DELETE,
                &format!("/snapshots/{id}"),
                None,
                None,
            )
            .await;
        match resp.map(|r| r.status.as_u16()) {
            Ok(202 | 204 | 404) => {}
            other => {
                tracing::warn!(backup = %backup.id, snapshot = %id, answer = ?other.map_err(|e| e.to_string()), "the snapshot cut for the backup stays until the backup is deleted");
            }
        }
    }

    /// Deletes a backup and waits until it is gone; the snapshot cut for it goes too.
    pub(super) async fn delete_backup(&self, id: &str) -> Result<()> {
        let b = self.cinder_backup(id).await?;
        self.drop_backup_snapshot(&b).await;
        self.delete_made(
            Deletion {
                kind: "backup",
                id,
                call: "backup_delete",
                path: format!("/backups/{id}"),
                reset: "cinder backup-reset-state",
            },
            b,
            || self.cinder_backup(id),
            // cinder-backup puts a backup its driver failed to delete back to `error`,
            // with the driver's reason; the next delete asks again.
            |b: &CinderBackup| match b.status.as_str() {
                "error" => CloudError::Internal(format!(
                    "openstack: cinder-backup failed to delete backup {id}: {}",
                    b.fail_reason.as_deref().unwrap_or("no reason given")
                )),
                other => CloudError::FailedPrecondition(format!(
                    "openstack: Cinder kept backup {id} ({other})"
                )),
            },
        )
        .await
    }

    /// A volume restored from backup `backup`: `POST /volumes` with `backup_id`.
    pub(super) async fn restore_body(&self, body: &mut Value, backup: &str) -> Result<()> {
        self.os
            .require(
                Service::BlockStorage,
                VOLUME_FROM_BACKUP,
                "a volume restored from a backup",
            )
            .await?;
        body["volume"]["backup_id"] = json!(backup);
        body["volume"]["metadata"][BACKUP_METADATA] = json!(backup);
        Ok(())
    }
}

impl CinderDisks {
    /// A volume restored from a backup carries the backed-up volume's metadata: the
    /// backup drivers restore it over what the create asked for (its cluster, its
    /// parameters, its claim's names). Ours, `metadata`, goes back on (a merge).
    pub(super) async fn restored_metadata(
        &self,
        mut volume: Volume,
        spec: &DiskSpec,
        metadata: BTreeMap<String, String>,
    ) -> Result<Volume> {
        let Some(DiskSource::Snapshot(source)) = &spec.source else {
            return Ok(volume);
        };
        if volume.metadata.get(SRC_BACKUP_METADATA) != Some(source)
            || metadata
                .iter()
                .all(|(k, v)| volume.metadata.get(k) == Some(v))
        {
            return Ok(volume);
        }
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "volume_metadata_update",
                Method::POST,
                &format!("/volumes/{}/metadata", volume.id),
                Some(&json!({ "metadata": metadata })),
                None,
            )
            .await?;
        if resp.status.as_u16() != 200 {
            return Err(unexpected("volume_metadata_update", &resp));
        }
        volume.metadata.extend(metadata);
        Ok(volume)
    }
}

/// cinder-csi-plugin parses the limit with Go's `strconv.Atoi`.
pub(super) fn validate_max_duration(v: &str) -> Result<()> {
    v.parse::<i64>().map(|_| ()).map_err(|_| {
        CloudError::InvalidArgument(format!(
            "snapshot class parameter {BACKUP_MAX_DURATION_PARAMETER}: {v:?} is not an integer"
        ))
    })
}
