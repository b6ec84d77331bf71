//! NodeStageVolume / NodeUnstageVolume: find the device, format it only when blank,
//! mount it at the staging path; and undo that.

use overcast_api::csi_v1 as csi;
use overcast_mount::format::{self, Content};
use overcast_mount::{device, mountinfo, mounts};
use tonic::Status;
use tracing::instrument;

use super::{io_status, mount_status, path_field, NodeService};
use crate::validation;

use csi::volume_capability::AccessType;

const DEFAULT_FS: &str = "ext4";

impl NodeService {
    #[instrument(skip_all, fields(volume.id = %req.volume_id))]
    pub(super) async fn stage(
        &self,
        req: csi::NodeStageVolumeRequest,
    ) -> Result<csi::NodeStageVolumeResponse, Status> {
        let id = validation::require("volume_id", &req.volume_id)?;
        let staging = path_field("staging_target_path", &req.staging_target_path)?;
        let cap = validation::capability(req.volume_capability.as_ref())?;
        let hint = device::DeviceHint::from_context(&req.publish_context)
            .map_err(|e| mount_status("stage", e))?;
        let op = format!("stage volume {id} at {}", staging.display());
        let _guard = self.inflight.volume(id)?;

        let dev = device::find(&hint, self.device_wait)
            .await
            .map_err(|e| mount_status(&op, e))?;
        let (major, minor) = device::numbers(&dev).map_err(|e| mount_status(&op, e))?;
        std::fs::create_dir_all(&staging).map_err(|e| io_status(&op, e))?;

        let mount = match &cap.access_type {
            Some(AccessType::Mount(m)) => m,
            // A block volume needs no filesystem: publish binds the device itself.
            _ => {
                if let Some(existing) =
                    mountinfo::top(&staging).map_err(|e| mount_status(&op, e))?
                {
                    return Err(Status::already_exists(format!(
                        "{op}: the staging path holds a {} mount",
                        existing.fs_type
                    )));
                }
                self.record_stage(id, &staging, &dev, true, "")?;
                return Ok(csi::NodeStageVolumeResponse {});
            }
        };
        let fs_type = if mount.fs_type.is_empty() {
            DEFAULT_FS
        } else {
            mount.fs_type.as_str()
        };

        // Already staged from this device: nothing to do. Anything else there: refuse.
        if let Some(existing) = mountinfo::top(&staging).map_err(|e| mount_status(&op, e))? {
            if (existing.major, existing.minor) != (major, minor) {
                return Err(Status::already_exists(format!(
                    "{op}: the staging path holds another device ({}:{})",
                    existing.major, existing.minor
                )));
            }
            if existing.fs_type != fs_type {
                return Err(Status::already_exists(format!(
                    "{op}: staged as {}, asked for {fs_type}",
                    existing.fs_type
                )));
            }
            self.record_stage(id, &staging, &dev, false, fs_type)?;
            return Ok(csi::NodeStageVolumeResponse {});
        }

        // Data safety first: only a blank device is formatted.
        match format::probe(&dev)
            .await
            .map_err(|e| mount_status(&op, e))?
        {
            Content::Blank => format::mkfs(&dev, fs_type)
                .await
                .map_err(|e| mount_status(&op, e))?,
            Content::Filesystem(found) if found == fs_type => {}
            Content::Filesystem(found) => {
                return Err(Status::failed_precondition(format!(
                    "{op}: the device holds {found}, not {fs_type}"
                )))
            }
            Content::PartitionTable(t) => {
                return Err(Status::failed_precondition(format!(
                    "{op}: the device holds a {t} partition table"
                )))
            }
            Content::Unknown(what) => {
                return Err(Status::failed_precondition(format!(
                    "{op}: the device holds data blkid cannot name ({what})"
                )))
            }
        }
        mounts::mount_fs(&dev, &staging, fs_type, &mount.mount_flags)
            .map_err(|e| mount_status(&op, e))?;
        self.record_stage(id, &staging, &dev, false, fs_type)?;
        Ok(csi::NodeStageVolumeResponse {})
    }

    fn record_stage(
        &self,
        id: &str,
        staging: &std::path::Path,
        dev: &std::path::Path,
        block: bool,
        fs: &str,
    ) -> Result<(), Status> {
        self.state
            .update(id, |v| {
                v.staging = Some(staging.to_owned());
                v.device = Some(dev.to_owned());
                v.block = block;
                v.fs_type = fs.to_owned();
            })
            .map_err(|e| io_status(&format!("record stage of volume {id}"), e))
    }

    #[instrument(skip_all, fields(volume.id = %req.volume_id))]
    pub(super) async fn unstage(
        &self,
        req: csi::NodeUnstageVolumeRequest,
    ) -> Result<csi::NodeUnstageVolumeResponse, Status> {
        let id = validation::require("volume_id", &req.volume_id)?;
        let staging = path_field("staging_target_path", &req.staging_target_path)?;
        let op = format!("unstage volume {id} from {}", staging.display());
        let _guard = self.inflight.volume(id)?;
        mounts::unmount_all(&staging).map_err(|e| mount_status(&op, e))?;
        self.state
            .update(id, |v| {
                if v.staging.as_deref() == Some(staging.as_path()) {
                    v.staging = None;
                }
            })
            .map_err(|e| io_status(&op, e))?;
        Ok(csi::NodeUnstageVolumeResponse {})
    }
}
