//! NodeStageVolume / NodeUnstageVolume: find the volume's own disk, format it only when
//! it is provably blank (or holds the remains of a format of ours that was interrupted),
//! mount it at the staging path; and undo that — only where this volume's own disk is
//! mounted (by this node's record, or, without one, by what the kernel says of the
//! device), and never under a live publish.

use std::path::Path;

use overcast_api::csi_v1 as csi;
use overcast_cloud::DiskOfVolume;
use overcast_mount::device;
use overcast_mount::format::Content;
use overcast_mount::mountinfo::MountInfo;
use tonic::Status;
use tracing::instrument;

use super::owned::Seen;
use super::state::FormatIntent;
use super::{io_status, mount_status, not_a_symlink, path_field, NodeService};
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
        let hint = self.disk_named(id, &req.publish_context)?;
        let op = format!("stage volume {id} at {}", staging.display());
        let _guard = self.inflight.volume(id)?;

        // One volume, one staging mount: a second filesystem mount of the same disk
        // elsewhere is a second writer the first one does not know about.
        if let Some(other) = self.state.get(id).and_then(|v| v.staging) {
            if other != staging
                && self
                    .host
                    .top_mount(&other)
                    .map_err(|e| mount_status(&op, e))?
                    .is_some()
            {
                return Err(Status::failed_precondition(format!(
                    "{op}: the volume is already staged at {}; unstage it there first",
                    other.display()
                )));
            }
        }

        let dev = self
            .host
            .find_device(&hint, self.device_wait)
            .await
            .map_err(|e| mount_status(&op, e))?;
        let (major, minor) = self
            .host
            .device_numbers(&dev)
            .map_err(|e| mount_status(&op, e))?;
        not_a_symlink(&op, &staging)?;
        std::fs::create_dir_all(&staging).map_err(|e| io_status(&op, e))?;

        let mount = match &cap.access_type {
            Some(AccessType::Mount(m)) => m,
            // A block volume needs no filesystem: publish binds the device itself.
            _ => {
                if let Some(existing) = self
                    .host
                    .top_mount(&staging)
                    .map_err(|e| mount_status(&op, e))?
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
        if let Some(existing) = self
            .host
            .top_mount(&staging)
            .map_err(|e| mount_status(&op, e))?
        {
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

        // Mounting over files would hide them (kubelet's staging directory is empty).
        if std::fs::read_dir(&staging)
            .map_err(|e| io_status(&op, e))?
            .next()
            .is_some()
        {
            return Err(Status::failed_precondition(format!(
                "{op}: the staging directory is not empty; mounting over it would hide its files"
            )));
        }
        // Recorded before anything is mounted: a crash after the mount leaves a path
        // unstage knows to be ours.
        self.record_stage(id, &staging, &dev, false, fs_type)?;
        if let Err(e) = self
            .format_and_mount(&op, id, &dev, &staging, fs_type, &mount.mount_flags)
            .await
        {
            // Nothing was mounted: the record would claim a path that is not ours. (A
            // format intent stays: mkfs may have written part of its output.)
            let _ = self.state.update(id, |v| {
                if v.staging.as_deref() == Some(staging.as_path()) {
                    v.staging = None;
                }
            });
            return Err(e);
        }
        Ok(csi::NodeStageVolumeResponse {})
    }

    /// The disk the publish context names as the volume's. A context that names no disk
    /// in any form this driver reads is another driver's attachment, made before the
    /// cluster switched (cinder-csi-plugin's Nova `DevicePath`, which its own node
    /// ignores; the oVirt and DVP drivers' empty one): on a cloud whose volume ids are
    /// their disks' serials (OpenStack, zVirt), the disk is the one the id names — as
    /// those drivers' own nodes find it.
    fn disk_named(
        &self,
        id: &str,
        context: &std::collections::HashMap<String, String>,
    ) -> Result<overcast_cloud::PublishContext, Status> {
        if overcast_cloud::PublishContext::from_map(context) == Default::default() {
            match (&self.disk_of_volume, self.disk_of_volume.context(id)) {
                (DiskOfVolume::Serial, Some(hint)) => return Ok(hint),
                (DiskOfVolume::Unknown, _) => {
                    return Err(Status::failed_precondition(format!(
                        "stage volume {id}: the publish context names no disk ({}) — another driver's attachment — and this cloud's volume ids do not name their disks; detach the volume (drain the node) so that this driver attaches it again",
                        if context.is_empty() {
                            "it is empty".to_owned()
                        } else {
                            let keys: Vec<&str> = context.keys().map(String::as_str).collect();
                            format!("its keys: {}", keys.join(", "))
                        }
                    )))
                }
                _ => {}
            }
        }
        let hint = device::from_context(context).map_err(|e| mount_status("stage", e))?;
        device::check_volume(&hint, id)
            .map_err(|e| mount_status(&format!("stage volume {id}"), e))?;
        Ok(hint)
    }

    /// Formats `dev` only when [`format::probe`] read it and found it empty — or when
    /// this node's record says a format of its own was begun there and not finished
    /// (whatever it holds then is what that mkfs left) — then mounts.
    async fn format_and_mount(
        &self,
        op: &str,
        id: &str,
        dev: &Path,
        staging: &Path,
        fs_type: &str,
        flags: &[String],
    ) -> Result<(), Status> {
        let intent = self.state.get(id).and_then(|v| v.formatting);
        match (
            self.host
                .probe(dev)
                .await
                .map_err(|e| mount_status(op, e))?,
            intent,
        ) {
            (Content::Blank, _) => self.format(op, id, dev, fs_type, false).await?,
            // Never mounted since (the intent is cleared before the mount): nothing of
            // anyone's is on it but the interrupted mkfs's own output.
            (found, Some(intent)) => {
                tracing::warn!(
                    device = %dev.display(),
                    found = ?found,
                    began_as = %intent.fs_type,
                    since_unix = intent.since_unix,
                    "formatting again: this node's own format of the volume was interrupted"
                );
                self.metrics.format_resumed();
                self.format(op, id, dev, fs_type, true).await?
            }
            (Content::Filesystem(found), None) if found == fs_type => {}
            (Content::Filesystem(found), None) => {
                return Err(Status::failed_precondition(format!(
                    "{op}: the device holds {found}, not {fs_type}"
                )))
            }
            (Content::PartitionTable(t), None) => {
                return Err(Status::failed_precondition(format!(
                    "{op}: the device holds a {t} partition table"
                )))
            }
            (Content::Unknown(what), None) => {
                return Err(Status::failed_precondition(format!(
                    "{op}: the device holds data blkid cannot name ({what})"
                )))
            }
        }
        not_a_symlink(op, staging)?;
        // A disk attached read-only (ControllerPublishVolume readonly=true) is mounted
        // read-only: the kernel refuses a writable mount of it anyway.
        let mut flags = flags.to_vec();
        if self.host.read_only(dev).map_err(|e| mount_status(op, e))? {
            flags.push("ro".into());
        }
        // A volume restored from a snapshot, or cloned, holds its source's XFS with the
        // source's UUID, which XFS refuses to mount twice on one host ("duplicate UUID")
        // while the source is mounted: nouuid, as aws-ebs-csi-driver mounts XFS.
        if fs_type == "xfs" && !flags.iter().any(|f| f == "nouuid") {
            flags.push("nouuid".into());
        }
        self.host
            .mount_fs(dev, staging, fs_type, &flags)
            .map_err(|e| mount_status(op, e))
    }

    /// Runs mkfs with its intent recorded around it: synced before mkfs starts, cleared
    /// only once it succeeded, so a kill or a failure in between leaves a disk the next
    /// stage knows to be its own unfinished work.
    async fn format(
        &self,
        op: &str,
        id: &str,
        dev: &Path,
        fs_type: &str,
        overwrite: bool,
    ) -> Result<(), Status> {
        let since_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        self.state
            .update(id, |v| {
                v.formatting = Some(FormatIntent {
                    fs_type: fs_type.to_owned(),
                    device: dev.to_owned(),
                    since_unix,
                })
            })
            .map_err(|e| io_status(&format!("record the format of volume {id}"), e))?;
        self.faults.during_mkfs(dev);
        self.host
            .mkfs(dev, fs_type, overwrite)
            .await
            .map_err(|e| mount_status(op, e))?;
        self.state
            .update(id, |v| v.formatting = None)
            .map_err(|e| io_status(&format!("record the format of volume {id}"), e))
    }

    fn record_stage(
        &self,
        id: &str,
        staging: &Path,
        dev: &Path,
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
        let Some(record) = self
            .state
            .get(id)
            .filter(|v| v.staging.as_deref() == Some(staging.as_path()))
        else {
            // No record of this volume there (lost, or another plugin staged it): what
            // is mounted there is taken away only when it is the volume's own disk.
            // Nothing mounted, or another disk, is the spec's idempotent success: the
            // volume is not staged there (and the other mount stays).
            let found = match self.mount_of_volume(&op, id, &staging).await? {
                Seen::Volume(found) => found,
                Seen::Nothing => return Ok(csi::NodeUnstageVolumeResponse {}),
                Seen::Other(what) => {
                    tracing::info!("{what}");
                    return Ok(csi::NodeUnstageVolumeResponse {});
                }
            };
            if !found.block {
                self.not_mounted_elsewhere(&op, &found.mount, &staging)?;
            }
            self.host
                .unmount_all(&staging)
                .map_err(|e| mount_status(&op, e))?;
            return Ok(csi::NodeUnstageVolumeResponse {});
        };

        // The spec orders unpublish before unstage; taking the staging mount from under
        // a live bind would leave the pod writing to a disk the controller then detaches.
        let mut live = Vec::new();
        for target in record.targets.keys() {
            if self
                .host
                .top_mount(target)
                .map_err(|e| mount_status(&op, e))?
                .is_some()
            {
                live.push(target.display().to_string());
            }
        }
        if !live.is_empty() {
            return Err(Status::failed_precondition(format!(
                "{op}: still published at {}; unpublish first",
                live.join(", ")
            )));
        }

        if !record.block {
            if let Some(top) = self
                .host
                .top_mount(&staging)
                .map_err(|e| mount_status(&op, e))?
            {
                let ours = record
                    .device
                    .as_deref()
                    .and_then(|d| self.host.device_numbers(d).ok())
                    .is_none_or(|numbers| numbers == (top.major, top.minor))
                    // A record older than the mount (kept across a time the node plugin
                    // ran without it, while the disk came back as another device): what
                    // is mounted is still this volume's when its device is the disk.
                    || matches!(
                        self.mount_of_volume(&op, id, &staging).await,
                        Ok(Seen::Volume(_))
                    );
                if !ours {
                    return Err(Status::failed_precondition(format!(
                        "{op}: the staging path holds a mount of {}:{} that this driver did not make",
                        top.major, top.minor
                    )));
                }
                // Targets the record does not list (published before its records were
                // lost) are still binds of this filesystem: the kernel lists them.
                self.not_mounted_elsewhere(&op, &top, &staging)?;
            }
            self.host
                .unmount_all(&staging)
                .map_err(|e| mount_status(&op, e))?;
        }
        self.state
            .update(id, |v| {
                v.staging = None;
                // Targets left here were checked above: none is mounted any more.
                v.targets.clear();
            })
            .map_err(|e| io_status(&op, e))?;
        Ok(csi::NodeUnstageVolumeResponse {})
    }

    /// Refuses while the filesystem mounted at `staging` is also mounted anywhere else
    /// (a pod's bind of it): the staging mount must be the last to go.
    fn not_mounted_elsewhere(
        &self,
        op: &str,
        staged: &MountInfo,
        staging: &Path,
    ) -> Result<(), Status> {
        let elsewhere: Vec<String> = self
            .host
            .mounts_of(staged.major, staged.minor)
            .map_err(|e| mount_status(op, e))?
            .into_iter()
            .filter(|m| m.mount_point != staging)
            .map(|m| m.mount_point.display().to_string())
            .collect();
        if elsewhere.is_empty() {
            Ok(())
        } else {
            Err(Status::failed_precondition(format!(
                "{op}: still mounted at {}; unpublish first",
                elsewhere.join(", ")
            )))
        }
    }
}
