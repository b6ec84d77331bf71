//! NodePublishVolume / NodeUnpublishVolume: bind the staged filesystem (or the device,
//! for a block volume) into the pod's target path, truly read-only when asked; and
//! take it away again, leaving nothing behind — but only at a target this driver
//! recorded for that volume, or, without a record, one whose mount is the volume's own
//! disk: any other mount is not ours to unmount or delete.

use std::path::Path;

use overcast_api::csi_v1 as csi;
use tonic::Status;
use tracing::instrument;

use super::owned::Seen;
use super::{io_status, mount_status, not_a_symlink, path_field, NodeService};
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
        let mut record = self
            .state
            .get(id)
            .filter(|v| v.staging.as_deref() == Some(staging.as_path()));
        if record.is_none() {
            record = self
                .adopt_stage(&op, id, &staging, &cap.access_type)
                .await?;
        }

        match &cap.access_type {
            Some(AccessType::Block(_)) => {
                let dev = match record
                    .as_ref()
                    .and_then(|r| r.device.clone())
                    .filter(|d| self.host.is_block_device(d))
                {
                    Some(dev) => dev,
                    None => {
                        return Err(Status::failed_precondition(format!(
                            "{op}: the volume is not staged at {}",
                            staging.display()
                        )))
                    }
                };
                let numbers = self
                    .host
                    .device_numbers(&dev)
                    .map_err(|e| mount_status(&op, e))?;
                if let Some(existing) = self
                    .host
                    .top_mount(&target)
                    .map_err(|e| mount_status(&op, e))?
                {
                    // A bound device node stats as the device itself.
                    let same = self.host.device_numbers(&target).ok() == Some(numbers);
                    return self.already_published(
                        id,
                        &op,
                        &target,
                        same,
                        existing.readonly(),
                        readonly,
                    );
                }
                not_a_symlink(&op, &target)?;
                match std::fs::symlink_metadata(&target) {
                    Ok(m) if m.is_file() && m.len() == 0 => {}
                    Ok(_) => {
                        return Err(Status::failed_precondition(format!(
                            "{op}: the target exists and is not an empty file; binding the device over it would hide it"
                        )))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        if let Some(parent) = target.parent() {
                            std::fs::create_dir_all(parent).map_err(|e| io_status(&op, e))?;
                        }
                        std::fs::File::create(&target).map_err(|e| io_status(&op, e))?;
                    }
                    Err(e) => return Err(io_status(&op, e)),
                }
                self.record_target(id, &target, readonly)?;
                if let Err(e) = self.host.bind(&dev, &target, readonly, &[]) {
                    self.forget_target(id, &target);
                    return Err(mount_status(&op, e));
                }
            }
            Some(AccessType::Mount(m)) => {
                let Some(staged) = self
                    .host
                    .top_mount(&staging)
                    .map_err(|e| mount_status(&op, e))?
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
                if let Some(existing) = self
                    .host
                    .top_mount(&target)
                    .map_err(|e| mount_status(&op, e))?
                {
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
                not_a_symlink(&op, &target)?;
                std::fs::create_dir_all(&target).map_err(|e| io_status(&op, e))?;
                if std::fs::read_dir(&target)
                    .map_err(|e| io_status(&op, e))?
                    .next()
                    .is_some()
                {
                    return Err(Status::failed_precondition(format!(
                        "{op}: the target directory is not empty; mounting over it would hide its files"
                    )));
                }
                self.record_target(id, &target, readonly)?;
                if let Err(e) = self.host.bind(&staging, &target, readonly, &m.mount_flags) {
                    self.forget_target(id, &target);
                    return Err(mount_status(&op, e));
                }
            }
            None => {
                return Err(Status::invalid_argument(
                    "volume_capability.access_type is required",
                ))
            }
        }
        Ok(csi::NodePublishVolumeResponse {})
    }

    /// A stage this node has no record of (its records lost, or another plugin staged
    /// the volume), recorded as this node's when what is there is the volume's own disk:
    /// the filesystem mounted at `staging`, or — a block volume, whose stage mounts
    /// nothing — the volume's device attached here. `None` when neither is.
    async fn adopt_stage(
        &self,
        op: &str,
        id: &str,
        staging: &Path,
        access: &Option<AccessType>,
    ) -> Result<Option<super::state::NodeVolume>, Status> {
        let (device, block, fs_type) = match access {
            Some(AccessType::Mount(_)) => match self.mount_of_volume(op, id, staging).await {
                Ok(Seen::Volume(found)) if !found.block => {
                    (found.device, false, found.mount.fs_type)
                }
                _ => return Ok(None),
            },
            Some(AccessType::Block(_)) => {
                let ctx = match self.disk_of_volume {
                    overcast_cloud::DiskOfVolume::Unknown => self.attached_disk(op, id).await?,
                    _ => self.disk_of_volume.context(id),
                };
                let Some(device) = ctx.and_then(|ctx| self.host.find_device_now(&ctx)) else {
                    return Ok(None);
                };
                (device, true, String::new())
            }
            None => return Ok(None),
        };
        tracing::warn!(staging = %staging.display(), device = %device.display(), "publishing from a stage this node had no record of: its disk is the volume's");
        self.state
            .update(id, |v| {
                v.staging = Some(staging.to_owned());
                v.device = Some(device.clone());
                v.block = block;
                v.fs_type = fs_type.clone();
            })
            .map_err(|e| io_status(&format!("record stage of volume {id}"), e))?;
        Ok(self.state.get(id))
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

    /// Records `target` as this volume's — before the mount, so that a crash after it
    /// still leaves a mount unpublish will take away.
    fn record_target(&self, id: &str, target: &Path, readonly: bool) -> Result<(), Status> {
        self.state
            .update(id, |v| {
                v.targets.insert(target.to_owned(), readonly);
            })
            .map_err(|e| io_status(&format!("record publish of volume {id}"), e))
    }

    /// Drops a target recorded for a mount that then failed.
    fn forget_target(&self, id: &str, target: &Path) {
        if let Err(e) = self.state.update(id, |v| {
            v.targets.remove(target);
        }) {
            tracing::warn!(error = %e, target = %target.display(), "could not drop the record of a failed publish");
        }
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
        if !self
            .state
            .get(id)
            .is_some_and(|v| v.targets.contains_key(&target))
            // No record of this target (lost, or another plugin published it): only a
            // mount of the volume's own disk is taken away. Nothing mounted, or another
            // disk, is the spec's idempotent success (the volume is not there; the other
            // mount stays); a mount that cannot be told apart is refused.
            && !matches!(
                self.mount_of_volume(&op, id, &target).await?,
                Seen::Volume(_)
            )
        {
            return Ok(csi::NodeUnpublishVolumeResponse {});
        }
        self.host
            .unmount_all(&target)
            .map_err(|e| mount_status(&op, e))?;
        // The spec: the SP deletes the file or directory it created at the target —
        // an empty directory, or the empty file a block volume was bound onto. Anything
        // else there (files written while nothing was mounted, a link) is left.
        match std::fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() => match std::fs::remove_dir(&target) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOTEMPTY) => {
                    tracing::warn!(target = %target.display(), "leaving a target directory that holds files");
                }
                Err(e) => return Err(io_status(&op, e)),
            },
            Ok(m) if m.is_file() && m.len() == 0 => {
                std::fs::remove_file(&target).map_err(|e| io_status(&op, e))?
            }
            Ok(_) => {
                tracing::warn!(target = %target.display(), "leaving a target that is not what this driver made");
            }
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
