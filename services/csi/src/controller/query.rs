//! The read-only calls: ValidateVolumeCapabilities, ListVolumes, GetCapacity and
//! ControllerGetVolume.

use std::hash::BuildHasher;

use overcast_api::csi_v1 as csi;
use overcast_cloud::Attachments;
use tonic::Status;
use tracing::instrument;

use super::{condition_of, published_nodes, ControllerService};
use crate::errors::to_status;
use crate::validation;

/// ListVolumes tokens name the last volume of the previous page; ids sort, so a page
/// boundary survives volumes being created or deleted between calls. Each carries a tag
/// keyed by a secret of this process, so a token this driver did not issue — forged, or
/// from before a restart — is ABORTED instead of answered with a page that ends early
/// and makes the caller believe the listing complete.
const TOKEN_PREFIX: &str = "after:";

impl ControllerService {
    fn token_tag(&self, after: &str) -> u64 {
        self.token_key.hash_one(after)
    }

    pub(super) fn issue_token(&self, after: &str) -> String {
        format!("{TOKEN_PREFIX}{:016x}:{after}", self.token_tag(after))
    }

    /// The volume id a token issued by [`Self::issue_token`] names.
    pub(super) fn redeem_token(&self, token: &str) -> Result<String, Status> {
        let issued = token
            .strip_prefix(TOKEN_PREFIX)
            .and_then(|rest| rest.split_once(':'))
            .filter(|(tag, id)| {
                tag.len() == 16
                    && !id.is_empty()
                    && u64::from_str_radix(tag, 16).ok() == Some(self.token_tag(id))
            });
        match issued {
            Some((_, id)) => Ok(id.to_owned()),
            None => Err(Status::aborted(format!(
                "starting_token {token:?} was not issued by this driver (or by this run of it); list from the start"
            ))),
        }
    }
}

impl ControllerService {
    #[instrument(skip_all, fields(volume.id = %req.volume_id))]
    pub(super) async fn validate(
        &self,
        req: csi::ValidateVolumeCapabilitiesRequest,
    ) -> Result<csi::ValidateVolumeCapabilitiesResponse, Status> {
        let id = validation::require("volume_id", &req.volume_id)?;
        if req.volume_capabilities.is_empty() {
            return Err(Status::invalid_argument("volume_capabilities is required"));
        }
        let disk = self
            .cloud
            .disk_with(id, Attachments::Ignored)
            .await
            .map_err(|e| to_status(&format!("validate volume {id}"), e))?;
        let unconfirmed = |message: String| csi::ValidateVolumeCapabilitiesResponse {
            confirmed: None,
            message,
        };
        if let Some(problem) = req
            .volume_capabilities
            .iter()
            .find_map(validation::capability_problem)
        {
            return Ok(unconfirmed(problem));
        }
        let (parameters, _) = validation::split_parameters(&req.parameters);
        let made_with = req.parameters.is_empty()
            || self
                .cloud
                .made_with(&disk, &parameters)
                .await
                .map_err(|e| to_status(&format!("validate volume {id}"), e))?;
        if !made_with {
            // What the volume was made with, where the cloud records it (vSphere's CNS
            // does not: what was asked is said instead).
            return Ok(unconfirmed(if disk.parameters.is_empty() {
                format!("the volume was not made with parameters {parameters:?}")
            } else {
                format!(
                    "the volume was created with parameters {:?}",
                    disk.parameters
                )
            }));
        }
        if !req.mutable_parameters.is_empty() {
            return Ok(unconfirmed("mutable_parameters are not supported".into()));
        }
        Ok(csi::ValidateVolumeCapabilitiesResponse {
            confirmed: Some(csi::validate_volume_capabilities_response::Confirmed {
                volume_context: req.volume_context,
                volume_capabilities: req.volume_capabilities,
                parameters: req.parameters,
                mutable_parameters: Default::default(),
            }),
            message: String::new(),
        })
    }

    #[instrument(skip_all)]
    pub(super) async fn list(
        &self,
        req: csi::ListVolumesRequest,
    ) -> Result<csi::ListVolumesResponse, Status> {
        let max = usize::try_from(req.max_entries)
            .map_err(|_| Status::invalid_argument("max_entries is negative"))?;
        let after = match req.starting_token.as_str() {
            "" => None,
            token => Some(self.redeem_token(token)?),
        };
        let (disks, more) = self
            .cloud
            .list_disks_page(after.as_deref(), max)
            .await
            .map_err(|e| to_status("list volumes", e))?;
        let entries: Vec<_> = disks
            .iter()
            .map(|disk| csi::list_volumes_response::Entry {
                volume: Some(self.volume_of(disk)),
                status: Some(csi::list_volumes_response::VolumeStatus {
                    published_node_ids: published_nodes(disk),
                    volume_condition: Some(condition_of(disk)),
                }),
            })
            .collect();
        let next_token = match more {
            true => disks
                .last()
                .map(|d| self.issue_token(&d.id))
                .unwrap_or_default(),
            false => String::new(),
        };
        Ok(csi::ListVolumesResponse {
            entries,
            next_token,
        })
    }

    #[instrument(skip_all)]
    pub(super) async fn capacity(
        &self,
        req: csi::GetCapacityRequest,
    ) -> Result<csi::GetCapacityResponse, Status> {
        let (parameters, _) = validation::split_parameters(&req.parameters);
        self.cloud
            .validate_capacity_parameters(&parameters)
            .map_err(|e| to_status("get capacity", e))?;
        let zones = self
            .cloud
            .zones()
            .await
            .map_err(|e| to_status("get capacity", e))?;
        let zone = match &req.accessible_topology {
            None => None,
            Some(t) => match zones.iter().find(|z| self.topology.matches(t, z)) {
                Some(z) => Some(z),
                // A segment we do not serve has no capacity for us.
                None => return Ok(empty_capacity()),
            },
        };
        if req
            .volume_capabilities
            .iter()
            .any(|c| validation::capacity_problem(c).is_some())
        {
            return Ok(empty_capacity());
        }
        let available = self
            .cloud
            .available_capacity_for(zone, &parameters)
            .await
            .map_err(|e| to_status("get capacity", e))?;
        let available = i64::try_from(available).unwrap_or(i64::MAX);
        // A thin disk may be larger than the free space; a thick one may not.
        let max_disk = i64::try_from(self.cloud.max_disk_size()).unwrap_or(i64::MAX);
        let largest = if self.cloud.overcommits(&parameters) {
            max_disk
        } else {
            available.min(max_disk)
        };
        Ok(csi::GetCapacityResponse {
            available_capacity: available,
            maximum_volume_size: Some(largest),
            minimum_volume_size: Some(i64::try_from(self.cloud.size_granularity()).unwrap_or(0)),
        })
    }

    #[instrument(skip_all, fields(volume.id = %req.volume_id))]
    pub(super) async fn get(
        &self,
        req: csi::ControllerGetVolumeRequest,
    ) -> Result<csi::ControllerGetVolumeResponse, Status> {
        let id = validation::require("volume_id", &req.volume_id)?;
        let disk = self
            .cloud
            .disk(id)
            .await
            .map_err(|e| to_status(&format!("get volume {id}"), e))?;
        Ok(csi::ControllerGetVolumeResponse {
            volume: Some(self.volume_of(&disk)),
            status: Some(csi::controller_get_volume_response::VolumeStatus {
                published_node_ids: published_nodes(&disk),
                volume_condition: Some(condition_of(&disk)),
            }),
        })
    }
}

fn empty_capacity() -> csi::GetCapacityResponse {
    csi::GetCapacityResponse {
        available_capacity: 0,
        maximum_volume_size: None,
        minimum_volume_size: None,
    }
}
