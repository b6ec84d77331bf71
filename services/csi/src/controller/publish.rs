//! ControllerPublishVolume / ControllerUnpublishVolume: attach a disk to a node and
//! tell the node how to find it; detach it again. Both are idempotent; unpublishing
//! what is already gone succeeds (external-attacher repeats it after a crash).

use overcast_api::csi_v1 as csi;
use overcast_cloud::{Attachments, CloudError};
use tonic::Status;
use tracing::instrument;

use super::ControllerService;
use crate::errors::to_status;
use crate::validation;

impl ControllerService {
    #[instrument(skip_all, fields(volume.id = %req.volume_id, node.id = %req.node_id))]
    pub(super) async fn publish(
        &self,
        req: csi::ControllerPublishVolumeRequest,
    ) -> Result<csi::ControllerPublishVolumeResponse, Status> {
        let id = validation::require("volume_id", &req.volume_id)?;
        let node = validation::require("node_id", &req.node_id)?;
        validation::capability(req.volume_capability.as_ref())?;
        let op = format!("publish volume {id} to node {node}");
        let _guard = self.inflight.volume(id)?;

        // This node's attachment alone: whether another node holds the volume is the
        // cloud's to refuse (every cloud refuses a second attach of a single-node disk),
        // and on vSphere finding every holder means reading the VMs.
        let disk = self
            .cloud
            .disk_with(id, Attachments::On(node))
            .await
            .map_err(|e| to_status(&op, e))?;
        if !self
            .cloud
            .node_exists(node)
            .await
            .map_err(|e| to_status(&op, e))?
        {
            return Err(Status::not_found(format!("{op}: node {node} not found")));
        }
        if let Some(existing) = disk.attachments.iter().find(|a| a.node == node) {
            if existing.readonly != req.readonly {
                return Err(Status::already_exists(format!(
                    "{op}: already published there with readonly={}",
                    existing.readonly
                )));
            }
        } else if let Some(other) = disk.attachments.first() {
            // Every access mode we serve is single-node.
            return Err(Status::failed_precondition(format!(
                "{op}: published to node {}",
                other.node
            )));
        }
        let attachment = self
            .cloud
            .attach_disk(id, node, req.readonly)
            .await
            // A provider's FailedPrecondition (a DVP attachment the parent failed, say) is
            // the spec's FAILED_PRECONDITION: not retried quickly, and not "incompatible
            // publish" (the mode is checked above, against the cloud's own record).
            .map_err(|e| to_status(&op, e))?;
        Ok(csi::ControllerPublishVolumeResponse {
            publish_context: attachment.publish_context.into_iter().collect(),
        })
    }

    #[instrument(skip_all, fields(volume.id = %req.volume_id, node.id = %req.node_id))]
    pub(super) async fn unpublish(
        &self,
        req: csi::ControllerUnpublishVolumeRequest,
    ) -> Result<csi::ControllerUnpublishVolumeResponse, Status> {
        let id = validation::require("volume_id", &req.volume_id)?;
        let op = format!("unpublish volume {id} from node {:?}", req.node_id);
        let _guard = self.inflight.volume(id)?;
        // Every node (an empty node id) needs every attachment; one node, its own.
        let wanted = match req.node_id.as_str() {
            "" => Attachments::All,
            node => Attachments::On(node),
        };
        let disk = match self.cloud.disk_with(id, wanted).await {
            Ok(disk) => disk,
            Err(CloudError::NotFound { .. }) => {
                return Ok(csi::ControllerUnpublishVolumeResponse {})
            }
            Err(e) => return Err(to_status(&op, e)),
        };
        // An empty node id means every node the volume is published to.
        for attachment in disk
            .attachments
            .iter()
            .filter(|a| req.node_id.is_empty() || a.node == req.node_id)
        {
            match self.cloud.detach_disk(id, &attachment.node).await {
                Ok(()) | Err(CloudError::NotFound { .. }) => {}
                Err(e) => return Err(to_status(&op, e)),
            }
        }
        Ok(csi::ControllerUnpublishVolumeResponse {})
    }
}
