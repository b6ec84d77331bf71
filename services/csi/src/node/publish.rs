//! NodePublishVolume / NodeUnpublishVolume: bind the staged filesystem (or the device,
//! for a block volume) into the pod's target path, truly read-only when asked; and
//! take it away again, leaving nothing behind.

use std::path::Path;

use overcast_api::csi_v1 as csi;
use overcast_mount::{device, mountinfo, mounts};
use tonic::Status;
use tracing::instrument;

use super::{io_status, mount_status, path_field, NodeService};
use crate::validation;

use csi::volume_capability::access_mode::Mode;
use csi::volume_capability::AccessType;

impl NodeService {
    #[instrument(skip_all, fields(volume.id = %req.volume_id))]
    pub(super) async fn publish(
        &self,
        req: csi::NodePublishVolumeRequest,
    ) -> Result<csi::NodePublishVolumeResponse, Status> {
        let id = validation::require("volume_id", &req.volume_id)?;
        let target = path_field("target_path", &req.target_path)?;
        // We advertise STAGE_UNSTAGE_VOLUME, so the CO must say where it staged.
        let staging = path_field("staging_target_path", &req.staging_target_path)?;
        let cap = validation::capability(req.volume_capability.as_ref())?;
        let readonly = req.readonly
            || cap
                .access_mode
                .as_ref()
                .is_some_and(|m| m.mode() == Mode::SingleNodeReaderOnly);
        let op = format!("publish volume {id} at {}", target.display());
        let _guard = self.inflight.volume(id)?;
        let record = self
            .state
            .get(id)
            .filter(|v| v.staging.as_deref() == Some(staging.as_path()));

        match &cap.access_type {
            Some(AccessType::Block(_)) => {
                let dev = match record
                    .as_ref()
                    .and_then(|r| r.device.clone())
                    .filter(|d| device::is_block_device(d))
                {
                    Some(dev) => dev,
                    None => {
                        return Err(Status::failed_precondition(format!(
                            "{op}: the volume is not staged at {}",
                            staging.display()
                        )))
                    }
                };
                let numbers = device::numbers(&dev).map_err(|e| mount_status(&op, e))?;
                if let Some(existing) = mountinfo::top(&target).map_err(|e| mount_status(&op, e))? {
                    // A bound device node stats as the device itself.
                    let same = device::numbers(&target).ok() == Some(numbers);
                    return self.already_published(
                        id,
                        &op,
                        &target,
                        same,
                        existing.readonly(),
                        readonly,
                    );
                }
                if !target.exists() {
                    if let Some(parent) = target.parent() {
                        std::fs::create_dir_all(parent).map_err(|e| io_status(&op, e))?;
                    }
                    std::fs::File::create(&target).map_err(|e| io_status(&op, e))?;
                }
                mounts::bind(&dev, &target, readonly, &[]).map_err(|e| mount_status(&op, e))?;
            }
            Some(AccessType::Mount(m)) => {
                let Some(staged) = mountinfo::top(&staging).map_err(|e| mount_status(&op, e))?
                else {
                    return Err(Status::failed_precondition(format!(
                        "{op}: the volume is not staged at {}",
                        staging.display()
                    )));
                };
                if record.is_none() {
                    return Err(Status::failed_precondition(format!(
                        "{op}: {} was not staged by this driver",
                        staging.display()
                    )));
                }
                if let Some(existing) = mountinfo::top(&target).map_err(|e| mount_status(&op, e))? {
                    let same = (existing.major, existing.minor, &existing.root)
                        == (staged.major, staged.minor, &staged.root);
                    return self.already_published(
                        id,
                        &op,
                        &target,
                        same,
                        existing.readonly(),
                        readonly,
                    );
                }
                std::fs::create_dir_all(&target).map_err(|e| io_status(&op, e))?;
                mounts::bind(&staging, &target, readonly, &m.mount_flags)
                    .map_err(|e| mount_status(&op, e))?;
            }
            None => {
                return Err(Status::invalid_argument(
                    "volume_capability.access_type is required",
                ))
            }
        }
        self.record_target(id, &target, readonly)?;
        Ok(csi::NodePublishVolumeResponse {})
    }

    /// The target is already a mount: the same publish again is OK, anything else is
    /// ALREADY_EXISTS.
    fn already_published(
        &self,
        id: &str,
        op: &str,
        target: &Path,
        same_source: bool,
        was_readonly: bool,
        readonly: bool,
    ) -> Result<csi::NodePublishVolumeResponse, Status> {
        if !same_source {
            return Err(Status::already_exists(format!(
                "{op}: the target holds another mount"
            )));
        }
        if was_readonly != readonly {
            return Err(Status::already_exists(format!(
                "{op}: already published with readonly={was_readonly}"
            )));
        }
        self.record_target(id, target, readonly)?;
        Ok(csi::NodePublishVolumeResponse {})
    }

    fn record_target(&self, id: &str, target: &Path, readonly: bool) -> Result<(), Status> {
        self.state
            .update(id, |v| {
                v.targets.insert(target.to_owned(), readonly);
            })
            .map_err(|e| io_status(&format!("record publish of volume {id}"), e))
    }

    #[instrument(skip_all, fields(volume.id = %req.volume_id))]
    pub(super) async fn unpublish(
        &self,
        req: csi::NodeUnpublishVolumeRequest,
    ) -> Result<csi::NodeUnpublishVolumeResponse, Status> {
        let id = validation::require("volume_id", &req.volume_id)?;
        let target = path_field("target_path", &req.target_path)?;
        let op = format!("unpublish volume {id} from {}", target.display());
        let _guard = self.inflight.volume(id)?;
        mounts::unmount_all(&target).map_err(|e| mount_status(&op, e))?;
        // The spec: the SP deletes the file or directory it created at the target.
        match std::fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() => std::fs::remove_dir(&target).map_err(|e| io_status(&op, e))?,
            Ok(_) => std::fs::remove_file(&target).map_err(|e| io_status(&op, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_status(&op, e)),
        }
        self.state
            .update(id, |v| {
                v.targets.remove(&target);
            })
            .map_err(|e| io_status(&op, e))?;
        Ok(csi::NodeUnpublishVolumeResponse {})
    }
}
