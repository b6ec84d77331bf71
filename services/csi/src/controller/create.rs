//! CreateVolume, DeleteVolume and ControllerExpandVolume: the calls that make, remove
//! and grow disks.

use overcast_api::csi_v1 as csi;
use overcast_cloud::{Attachments, CloudError, DiskSource, DiskSpec, Zone};
use tonic::Status;
use tracing::instrument;

use super::ControllerService;
use crate::errors::to_status;
use crate::validation::{self, is_block};

impl ControllerService {
    #[instrument(skip_all, fields(volume.name = %req.name))]
    pub(super) async fn create(
        &self,
        req: csi::CreateVolumeRequest,
    ) -> Result<csi::CreateVolumeResponse, Status> {
        let name = validation::volume_name(&req.name)?;
        validation::capabilities(&req.volume_capabilities)?;
        use csi::volume_content_source::Type as Source;
        let source = match req
            .volume_content_source
            .as_ref()
            .and_then(|s| s.r#type.as_ref())
        {
            None => None,
            Some(Source::Snapshot(_)) if !self.cloud.snapshots() => {
                return Err(Status::invalid_argument(
                    "volume_content_source: this cloud does not cut snapshots (no CREATE_DELETE_SNAPSHOT)",
                ))
            }
            Some(Source::Snapshot(s)) => Some(DiskSource::Snapshot(
                validation::require("volume_content_source.snapshot.snapshot_id", &s.snapshot_id)?
                    .to_owned(),
            )),
            Some(Source::Volume(_)) if !self.cloud.clones() => {
                return Err(Status::invalid_argument(
                    "volume_content_source: this cloud does not clone volumes (no CLONE_VOLUME)",
                ))
            }
            Some(Source::Volume(v)) => Some(DiskSource::Disk(
                validation::require("volume_content_source.volume.volume_id", &v.volume_id)?
                    .to_owned(),
            )),
        };
        if !req.mutable_parameters.is_empty() {
            return Err(Status::invalid_argument(
                "mutable_parameters is not supported (no MODIFY_VOLUME)",
            ));
        }
        let (parameters, metadata) = validation::split_parameters(&req.parameters);
        let op = format!("create volume {name:?}");
        self.cloud
            .validate_parameters(&parameters)
            .map_err(|e| to_status(&op, e))?;
        // A class that decides where its disks go (one data center's storage) is checked
        // against the requisite topologies; otherwise the topology picks the zone. The
        // class's refusal waits until the name is looked up: a disk that already has the
        // name answers first (the spec's ALREADY_EXISTS when it is elsewhere).
        let placement = self
            .cloud
            .placement(&parameters)
            .await
            .map_err(|e| to_status(&op, e))?;
        let (zone, unplaceable) = match placement {
            Some(place) => {
                let refused = validation::check_placement(
                    req.accessibility_requirements.as_ref(),
                    &place,
                    &self.topology,
                )
                .err();
                (place, refused)
            }
            None => {
                let zones = self.cloud.zones().await.map_err(|e| to_status(&op, e))?;
                let zone = validation::pick_zone(
                    req.accessibility_requirements.as_ref(),
                    &zones,
                    &self.topology,
                )?;
                (zone, None)
            }
        };
        let mut size = validation::disk_size(
            req.capacity_range.as_ref(),
            self.default_size,
            self.cloud.size_granularity(),
            self.cloud.max_disk_size(),
        )?;
        if let Some(source) = &source {
            // The spec's codes: a source that does not exist is NOT_FOUND; the new volume
            // is at least as large as its source, so a limit below it is OUT_OF_RANGE.
            let (what, source_size) = self.source_size(source, &op).await?;
            let (_, limit) = validation::range_bounds(req.capacity_range.as_ref())?;
            if limit != 0 && source_size > limit {
                return Err(Status::out_of_range(format!(
                    "{op}: {what} has {source_size} bytes, more than limit_bytes {limit}"
                )));
            }
            size = size.max(source_size);
        }

        let _guard = self.inflight.name(name)?;
        // Idempotency by name: an existing disk answers if it fits what is asked now.
        let mut existing = self
            .cloud
            .disk_by_name(name)
            .await
            .map_err(|e| to_status(&op, e))?;
        // Whether it was made with this request's parameters. A disk another driver made (a
        // create it began before the cluster switched, repeated to us) records no
        // parameters of ours: its size and source are what there is to compare, as that
        // driver compares. One gone between the two answers (deleted meanwhile) is made
        // anew below: NOT_FOUND is the spec's answer for a missing source, not this.
        let mut made_with = true;
        if let Some(disk) = &existing {
            let foreign = disk
                .metadata
                .contains_key(overcast_cloud::discovery::MADE_BY);
            if disk.source == source && !foreign {
                match self.cloud.made_with(disk, &parameters).await {
                    Ok(same) => made_with = same,
                    Err(CloudError::NotFound { .. }) => existing = None,
                    Err(e) => return Err(to_status(&op, e)),
                }
            }
        }
        if let Some(disk) = existing {
            let fits = validation::size_fits(disk.size_bytes, req.capacity_range.as_ref())?;
            let same_params = disk.source == source && made_with;
            // A disk without a zone is reachable from every topology.
            let placed = match &req.accessibility_requirements {
                _ if disk.zone == Zone::default() => true,
                Some(r) if !r.requisite.is_empty() => r
                    .requisite
                    .iter()
                    .any(|t| self.topology.matches(t, &disk.zone)),
                _ => true,
            };
            if !(fits && same_params && placed) {
                return Err(Status::already_exists(format!(
                    "{op}: volume {} exists with {} bytes, parameters {:?}, source {:?}, zone {}/{}",
                    disk.id,
                    disk.size_bytes,
                    disk.parameters,
                    disk.source,
                    disk.zone.region,
                    disk.zone.zone
                )));
            }
            // The name is taken by a disk that fits, but finding it is not enough: only a
            // disk the cloud says is usable answers OK. The provider's create waits for
            // one still on its way, removes one that failed and answers why, and does not
            // answer with one being deleted (external-provisioner repeats a create after
            // its own timeout, while the cloud may still be provisioning).
            let spec = DiskSpec {
                name: name.to_owned(),
                size_bytes: disk.size_bytes,
                zone: disk.zone,
                parameters,
                metadata,
                source,
            };
            let disk = self
                .cloud
                .create_disk(spec)
                .await
                .map_err(|e| to_status(&op, e))?;
            return Ok(csi::CreateVolumeResponse {
                volume: Some(self.volume_of(&disk)),
            });
        }
        if let Some(refused) = unplaceable {
            return Err(refused);
        }
        let spec = DiskSpec {
            name: name.to_owned(),
            size_bytes: size,
            zone,
            parameters,
            metadata,
            source,
        };
        let disk = self
            .cloud
            .create_disk(spec)
            .await
            .map_err(|e| to_status(&op, e))?;
        Ok(csi::CreateVolumeResponse {
            volume: Some(self.volume_of(&disk)),
        })
    }

    /// What a new volume's source is called in errors, and its size: the disk's for a
    /// clone, the snapshot's for a restore. NOT_FOUND when it does not exist (whatever
    /// its id looks like: csi-sanity's made-up ids are not ours to call malformed);
    /// UNAVAILABLE for a snapshot still being cut (the provisioner asks again), as
    /// cinder-csi answers.
    async fn source_size(&self, source: &DiskSource, op: &str) -> Result<(String, u64), Status> {
        match source {
            DiskSource::Disk(id) => match self.cloud.disk_with(id, Attachments::Ignored).await {
                Ok(d) => Ok((format!("the source volume {id}"), d.size_bytes)),
                Err(CloudError::NotFound { .. }) => Err(Status::not_found(format!(
                    "{op}: the source volume {id} does not exist"
                ))),
                Err(e) => Err(to_status(op, e)),
            },
            DiskSource::Snapshot(id) => match self.cloud.snapshot(id).await {
                Ok(s) if !s.ready => Err(Status::unavailable(format!(
                    "{op}: the source snapshot {id} is not ready yet"
                ))),
                Ok(s) => Ok((format!("the source snapshot {id}"), s.size_bytes)),
                Err(CloudError::NotFound { .. }) => Err(Status::not_found(format!(
                    "{op}: the source snapshot {id} does not exist"
                ))),
                Err(e) => Err(to_status(op, e)),
            },
        }
    }

    #[instrument(skip_all, fields(volume.id = %req.volume_id))]
    pub(super) async fn delete(
        &self,
        req: csi::DeleteVolumeRequest,
    ) -> Result<csi::DeleteVolumeResponse, Status> {
        let id = validation::require("volume_id", &req.volume_id)?;
        let _guard = self.inflight.volume(id)?;
        match self.cloud.delete_disk(id).await {
            // Deleting what is gone succeeds: the CO may be retrying a delete that worked.
            Ok(()) | Err(CloudError::NotFound { .. }) => Ok(csi::DeleteVolumeResponse {}),
            Err(e) => Err(to_status(&format!("delete volume {id}"), e)),
        }
    }

    #[instrument(skip_all, fields(volume.id = %req.volume_id))]
    pub(super) async fn expand(
        &self,
        req: csi::ControllerExpandVolumeRequest,
    ) -> Result<csi::ControllerExpandVolumeResponse, Status> {
        let id = validation::require("volume_id", &req.volume_id)?;
        let range = req
            .capacity_range
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("capacity_range is required"))?;
        if req.volume_capability.is_some() {
            validation::capability(req.volume_capability.as_ref())?;
        }
        let op = format!("expand volume {id}");
        let _guard = self.inflight.volume(id)?;
        let disk = self
            .cloud
            .disk_with(id, Attachments::Ignored)
            .await
            .map_err(|e| to_status(&op, e))?;
        let (required, limit) = validation::range_bounds(Some(range))?;
        let granularity = self.cloud.size_granularity();
        let asked = required.div_ceil(granularity).saturating_mul(granularity);
        let target = asked.max(disk.size_bytes);
        if limit != 0 && target > limit {
            return Err(Status::out_of_range(format!(
                "{op}: the volume has {} bytes and cannot fit under limit_bytes {limit}",
                disk.size_bytes
            )));
        }
        if target > self.cloud.max_disk_size() {
            return Err(Status::out_of_range(format!(
                "{op}: {target} bytes exceeds the largest disk"
            )));
        }
        if asked < disk.size_bytes {
            // Below what the volume already has: nothing to do, on the controller or on
            // the node. (A retry of an expansion that already happened asks for the
            // size it made, not less, and still gets node_expansion_required below.)
            return Ok(csi::ControllerExpandVolumeResponse {
                capacity_bytes: i64::try_from(disk.size_bytes).unwrap_or(i64::MAX),
                node_expansion_required: false,
            });
        }
        let size = self
            .cloud
            .expand_disk(id, target)
            .await
            .map_err(|e| to_status(&op, e))?;
        Ok(csi::ControllerExpandVolumeResponse {
            capacity_bytes: i64::try_from(size).unwrap_or(i64::MAX),
            // A block volume has no filesystem for the node to grow.
            node_expansion_required: !is_block(req.volume_capability.as_ref()),
        })
    }
}
