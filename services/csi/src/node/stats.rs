//! NodeGetVolumeStats and NodeExpandVolume: usage of a staged or published volume and
//! its condition as the node sees it; growing its filesystem online.

use std::path::{Path, PathBuf};

use overcast_api::csi_v1 as csi;
use tonic::Status;
use tracing::instrument;

use super::owned::Seen;
use super::state::NodeVolume;
use super::{mount_status, NodeService};
use crate::validation;

use csi::volume_usage::Unit;

fn usage(unit: Unit, total: u64, available: u64, used: u64) -> csi::VolumeUsage {
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    csi::VolumeUsage {
        total: n(total),
        available: n(available),
        used: n(used),
        unit: unit as i32,
    }
}

fn condition(abnormal: Option<String>) -> csi::VolumeCondition {
    match abnormal {
        Some(message) => csi::VolumeCondition {
            abnormal: true,
            message,
        },
        None => csi::VolumeCondition {
            abnormal: false,
            message: "healthy".into(),
        },
    }
}

/// A path the call only looks up among the paths recorded for the volume: any string
/// may be compared, and only a recorded (hence validated, absolute) path is used, so a
/// relative or odd path is simply not found — the spec's NOT_FOUND, which csi-sanity
/// checks with "some/path".
fn recorded_path(field: &str, value: &str) -> Result<PathBuf, Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    Ok(PathBuf::from(value))
}

impl NodeService {
    /// The record of `id` if `path` is one of its staging or target paths — or, with no
    /// record, what is mounted there when it is the volume's own disk (its read-only
    /// flag then taken as asked for: nothing says otherwise). A mount of anything else is
    /// NOT_FOUND, as the spec says of a volume not at that path.
    async fn recorded(
        &self,
        op: &str,
        id: &str,
        path: &Path,
    ) -> Result<Option<(NodeVolume, Option<bool>)>, Status> {
        if let Some(v) = self.state.get(id) {
            if let Some(ro) = v.targets.get(path) {
                let ro = Some(*ro);
                return Ok(Some((v, ro)));
            }
            if v.staging.as_deref() == Some(path) {
                return Ok(Some((v, None)));
            }
        }
        let seen = self
            .mount_of_volume(op, id, path)
            .await
            .map_err(|s| Status::not_found(s.message().to_owned()))?;
        let found = match seen {
            Seen::Volume(found) => Some(found),
            Seen::Nothing => None,
            Seen::Other(what) => return Err(Status::not_found(what)),
        };
        Ok(found.map(|f| {
            let readonly = Some(f.mount.readonly());
            let v = NodeVolume {
                device: Some(f.device),
                block: f.block,
                fs_type: f.mount.fs_type,
                ..NodeVolume::default()
            };
            (v, readonly)
        }))
    }

    #[instrument(skip_all, fields(volume.id = %req.volume_id))]
    pub(super) async fn stats(
        &self,
        req: csi::NodeGetVolumeStatsRequest,
    ) -> Result<csi::NodeGetVolumeStatsResponse, Status> {
        let id = validation::require("volume_id", &req.volume_id)?;
        let path = recorded_path("volume_path", &req.volume_path)?;
        let op = format!("stats of volume {id} at {}", path.display());
        let Some((record, readonly)) = self.recorded(&op, id, &path).await? else {
            return Err(Status::not_found(format!(
                "{op}: not a path this volume is staged or published at"
            )));
        };
        let Some(mount) = self
            .host
            .top_mount(&path)
            .map_err(|e| mount_status(&op, e))?
        else {
            return Ok(csi::NodeGetVolumeStatsResponse {
                usage: vec![],
                volume_condition: Some(condition(Some(format!(
                    "{} is no longer mounted",
                    path.display()
                )))),
            });
        };
        if record.block {
            let dev = record.device.clone().unwrap_or_default();
            let problem = match self.host.device_numbers(&path) {
                Ok((major, minor)) => self.host.device_problem(major, minor),
                Err(e) => Some(e.to_string()),
            };
            let size = self.host.device_size(&dev).unwrap_or(0);
            return Ok(csi::NodeGetVolumeStatsResponse {
                usage: vec![usage(Unit::Bytes, size, 0, 0)],
                volume_condition: Some(condition(problem)),
            });
        }
        let st = nix::sys::statvfs::statvfs(&path)
            .map_err(|e| Status::internal(format!("{op}: statvfs: {e}")))?;
        let frsize = st.fragment_size() as u64;
        let (blocks, bfree, bavail) = (
            st.blocks() as u64,
            st.blocks_free() as u64,
            st.blocks_available() as u64,
        );
        let (files, ffree, favail) = (
            st.files() as u64,
            st.files_free() as u64,
            st.files_available() as u64,
        );
        let problem = self
            .host
            .device_problem(mount.major, mount.minor)
            .or_else(|| {
                (mount.readonly() && readonly != Some(true))
                    .then(|| format!("{} went read-only", path.display()))
            });
        Ok(csi::NodeGetVolumeStatsResponse {
            usage: vec![
                usage(
                    Unit::Bytes,
                    blocks * frsize,
                    bavail * frsize,
                    (blocks - bfree) * frsize,
                ),
                usage(Unit::Inodes, files, favail, files - ffree),
            ],
            volume_condition: Some(condition(problem)),
        })
    }

    /// Asks the kernel to read the disk's size again, then waits (up to the device wait)
    /// until it has at least `required` bytes; the size last read either way.
    async fn rescanned_size(&self, dev: &Path, required: u64, op: &str) -> Result<u64, Status> {
        self.host
            .rescan_size(dev)
            .map_err(|e| mount_status(op, e))?;
        let deadline = std::time::Instant::now() + self.device_wait;
        loop {
            let size = self
                .host
                .device_size(dev)
                .map_err(|e| mount_status(op, e))?;
            if size >= required || std::time::Instant::now() >= deadline {
                tracing::info!(device = %dev.display(), size, required, "rescanned the disk's size");
                return Ok(size);
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    #[instrument(skip_all, fields(volume.id = %req.volume_id))]
    pub(super) async fn expand(
        &self,
        req: csi::NodeExpandVolumeRequest,
    ) -> Result<csi::NodeExpandVolumeResponse, Status> {
        let id = validation::require("volume_id", &req.volume_id)?;
        let path = recorded_path("volume_path", &req.volume_path)?;
        if req.volume_capability.is_some() {
            validation::capability(req.volume_capability.as_ref())?;
        }
        let (required, limit) = validation::range_bounds(req.capacity_range.as_ref())?;
        let op = format!("expand volume {id} at {}", path.display());
        let _guard = self.inflight.volume(id)?;
        let Some((record, _)) = self.recorded(&op, id, &path).await? else {
            return Err(Status::not_found(format!(
                "{op}: not a path this volume is staged or published at"
            )));
        };
        let dev = record
            .device
            .clone()
            .ok_or_else(|| Status::failed_precondition(format!("{op}: no device recorded")))?;
        let mut size = self
            .host
            .device_size(&dev)
            .map_err(|e| mount_status(&op, e))?;
        if size < required && self.rescan_on_resize {
            size = self.rescanned_size(&dev, required, &op).await?;
        }
        if size < required {
            return Err(Status::out_of_range(format!(
                "{op}: the device has {size} bytes, {required} were asked for"
            )));
        }
        if limit != 0 && size > limit {
            return Err(Status::out_of_range(format!(
                "{op}: the device has {size} bytes, more than limit_bytes {limit}"
            )));
        }
        if !(record.block || validation::is_block(req.volume_capability.as_ref())) {
            let Some(mount) = self
                .host
                .top_mount(&path)
                .map_err(|e| mount_status(&op, e))?
            else {
                return Err(Status::failed_precondition(format!(
                    "{op}: nothing is mounted there"
                )));
            };
            self.host
                .grow(&dev, &path, &mount.fs_type)
                .await
                .map_err(|e| mount_status(&op, e))?;
        }
        Ok(csi::NodeExpandVolumeResponse {
            capacity_bytes: i64::try_from(size).unwrap_or(i64::MAX),
        })
    }
}
