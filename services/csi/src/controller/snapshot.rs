//! CreateSnapshot, DeleteSnapshot and ListSnapshots, where the cloud cuts snapshots
//! ([`overcast_cloud::Disks::snapshots`]); CreateVolume from a snapshot is in `create`.

use std::time::UNIX_EPOCH;

use overcast_api::csi_v1 as csi;
use overcast_api::prost_types::Timestamp;
use overcast_cloud::{CloudError, Snapshot, SnapshotSpec};
use tonic::Status;
use tracing::instrument;

use super::ControllerService;
use crate::errors::to_status;
use crate::validation;

/// The CSI view of a cloud snapshot.
pub(super) fn snapshot_of(s: &Snapshot) -> csi::Snapshot {
    let since = s.created.duration_since(UNIX_EPOCH).unwrap_or_default();
    csi::Snapshot {
        size_bytes: i64::try_from(s.size_bytes).unwrap_or(i64::MAX),
        snapshot_id: s.id.clone(),
        source_volume_id: s.source.clone(),
        creation_time: Some(Timestamp {
            seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(since.subsec_nanos()).unwrap_or(0),
        }),
        ready_to_use: s.ready,
        group_snapshot_id: String::new(),
    }
}

impl ControllerService {
    fn snapshots_served(&self, rpc: &str) -> Result<(), Status> {
        if self.cloud.snapshots() {
            Ok(())
        } else {
            Err(Status::unimplemented(format!(
                "{rpc}: this cloud does not cut snapshots (no CREATE_DELETE_SNAPSHOT)"
            )))
        }
    }

    #[instrument(skip_all, fields(snapshot.name = %req.name, volume.id = %req.source_volume_id))]
    pub(super) async fn create_snap(
        &self,
        req: csi::CreateSnapshotRequest,
    ) -> Result<csi::CreateSnapshotResponse, Status> {
        self.snapshots_served("CreateSnapshot")?;
        // The name first: csi-sanity sends a source that does not exist without a name
        // and expects the missing name to be what is refused.
        let name = validation::require("name", &req.name)?;
        let source = validation::require("source_volume_id", &req.source_volume_id)?;
        let (parameters, metadata) = validation::split_parameters(&req.parameters);
        let op = format!("create snapshot {name:?} of volume {source}");
        self.cloud
            .validate_snapshot_parameters(&parameters)
            .map_err(|e| to_status(&op, e))?;
        // One create per name at a time (the sidecar retries a create that timed out
        // while the first is still cutting); a second one is ABORTED and asks again.
        let _guard = self.inflight.claim(
            format!("snapshot-name/{name}"),
            &format!("snapshot named {name:?}"),
        )?;
        let snapshot = self
            .cloud
            .create_snapshot(SnapshotSpec {
                name: name.to_owned(),
                source: source.to_owned(),
                parameters,
                metadata,
            })
            .await
            .map_err(|e| match e {
                CloudError::NotFound { kind: "disk", .. } => {
                    Status::not_found(format!("{op}: the source volume does not exist"))
                }
                e => to_status(&op, e),
            })?;
        Ok(csi::CreateSnapshotResponse {
            snapshot: Some(snapshot_of(&snapshot)),
        })
    }

    #[instrument(skip_all, fields(snapshot.id = %req.snapshot_id))]
    pub(super) async fn delete_snap(
        &self,
        req: csi::DeleteSnapshotRequest,
    ) -> Result<csi::DeleteSnapshotResponse, Status> {
        self.snapshots_served("DeleteSnapshot")?;
        let id = validation::require("snapshot_id", &req.snapshot_id)?;
        let _guard = self
            .inflight
            .claim(format!("snapshot/{id}"), &format!("snapshot {id}"))?;
        match self.cloud.delete_snapshot(id).await {
            // Deleting what is gone succeeds (the spec: a snapshot that does not exist,
            // or whose artifacts are gone, is OK).
            Ok(()) | Err(CloudError::NotFound { .. }) => Ok(csi::DeleteSnapshotResponse {}),
            Err(e) => Err(to_status(&format!("delete snapshot {id}"), e)),
        }
    }

    #[instrument(skip_all)]
    pub(super) async fn list_snaps(
        &self,
        req: csi::ListSnapshotsRequest,
    ) -> Result<csi::ListSnapshotsResponse, Status> {
        self.snapshots_served("ListSnapshots")?;
        let max = usize::try_from(req.max_entries)
            .map_err(|_| Status::invalid_argument("max_entries is negative"))?;
        let entry = |s: &Snapshot| csi::list_snapshots_response::Entry {
            snapshot: Some(snapshot_of(s)),
        };
        let source = Some(req.source_volume_id.as_str()).filter(|s| !s.is_empty());
        if !req.snapshot_id.is_empty() {
            // One snapshot by id: none (not an error) when there is no such snapshot,
            // or when it is not of the source asked for.
            let found = match self.cloud.snapshot(&req.snapshot_id).await {
                Ok(s) => Some(s),
                Err(CloudError::NotFound { .. }) => None,
                Err(e) => return Err(to_status("list snapshots", e)),
            };
            return Ok(csi::ListSnapshotsResponse {
                entries: found
                    .iter()
                    .filter(|s| source.is_none_or(|v| s.source == v))
                    .map(entry)
                    .collect(),
                next_token: String::new(),
            });
        }
        let after = match req.starting_token.as_str() {
            "" => None,
            token => Some(self.redeem_token(token)?),
        };
        let (snapshots, more) = self
            .cloud
            .list_snapshots_page(source, after.as_deref(), max)
            .await
            .map_err(|e| to_status("list snapshots", e))?;
        let next_token = match snapshots.last() {
            Some(last) if more => self.issue_token(&last.id),
            _ => String::new(),
        };
        Ok(csi::ListSnapshotsResponse {
            entries: snapshots.iter().map(entry).collect(),
            next_token,
        })
    }
}
