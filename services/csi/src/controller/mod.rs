//! The Controller service, written against the cloud's [`Disks`] capability alone.
//! Every call validates its request, takes the volume's in-flight guard, asks the cloud
//! whether the desired state already holds, and only then acts.

mod create;
mod publish;
mod query;
mod snapshot;

use std::sync::Arc;

use overcast_api::csi_v1 as csi;
use overcast_cloud::{Disk, DiskCondition, DiskSource, Disks};
use tonic::{Request, Response, Status};

use crate::inflight::Inflight;
use crate::validation::TopologyKeys;

use csi::controller_service_capability::rpc::Type as Rpc;

pub struct ControllerService {
    cloud: Arc<dyn Disks>,
    inflight: Inflight,
    default_size: u64,
    /// Keys the tags of ListVolumes tokens (a fresh secret per process).
    token_key: std::hash::RandomState,
    topology: TopologyKeys,
}

impl ControllerService {
    pub fn new(cloud: Arc<dyn Disks>, default_size: u64, topology: TopologyKeys) -> Self {
        Self {
            cloud,
            inflight: Inflight::default(),
            default_size,
            token_key: std::hash::RandomState::new(),
            topology,
        }
    }

    /// The CSI view of a cloud disk.
    fn volume_of(&self, disk: &Disk) -> csi::Volume {
        csi::Volume {
            capacity_bytes: i64::try_from(disk.size_bytes).unwrap_or(i64::MAX),
            volume_id: disk.id.clone(),
            volume_context: [(overcast_api::VOLUME_NAME_KEY.to_owned(), disk.name.clone())].into(),
            content_source: disk.source.as_ref().map(|source| csi::VolumeContentSource {
                r#type: Some(match source {
                    DiskSource::Disk(id) => csi::volume_content_source::Type::Volume(
                        csi::volume_content_source::VolumeSource {
                            volume_id: id.clone(),
                        },
                    ),
                    DiskSource::Snapshot(id) => csi::volume_content_source::Type::Snapshot(
                        csi::volume_content_source::SnapshotSource {
                            snapshot_id: id.clone(),
                        },
                    ),
                }),
            }),
            accessible_topology: Some(self.topology.of(&disk.zone))
                .filter(|t| !t.segments.is_empty())
                .into_iter()
                .collect(),
        }
    }
}

const CAPABILITIES: [Rpc; 10] = [
    Rpc::CreateDeleteVolume,
    Rpc::PublishUnpublishVolume,
    Rpc::ListVolumes,
    Rpc::GetCapacity,
    Rpc::PublishReadonly,
    Rpc::ExpandVolume,
    Rpc::ListVolumesPublishedNodes,
    Rpc::VolumeCondition,
    Rpc::GetVolume,
    Rpc::SingleNodeMultiWriter,
];

fn condition_of(disk: &Disk) -> csi::VolumeCondition {
    match &disk.condition {
        DiskCondition::Healthy => csi::VolumeCondition {
            abnormal: false,
            message: "healthy".into(),
        },
        DiskCondition::Abnormal(why) => csi::VolumeCondition {
            abnormal: true,
            message: why.clone(),
        },
    }
}

fn published_nodes(disk: &Disk) -> Vec<String> {
    disk.attachments.iter().map(|a| a.node.clone()).collect()
}

#[tonic::async_trait]
impl csi::controller_server::Controller for ControllerService {
    async fn create_volume(
        &self,
        request: Request<csi::CreateVolumeRequest>,
    ) -> Result<Response<csi::CreateVolumeResponse>, Status> {
        self.create(request.into_inner()).await.map(Response::new)
    }

    async fn delete_volume(
        &self,
        request: Request<csi::DeleteVolumeRequest>,
    ) -> Result<Response<csi::DeleteVolumeResponse>, Status> {
        self.delete(request.into_inner()).await.map(Response::new)
    }

    async fn controller_publish_volume(
        &self,
        request: Request<csi::ControllerPublishVolumeRequest>,
    ) -> Result<Response<csi::ControllerPublishVolumeResponse>, Status> {
        self.publish(request.into_inner()).await.map(Response::new)
    }

    async fn controller_unpublish_volume(
        &self,
        request: Request<csi::ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<csi::ControllerUnpublishVolumeResponse>, Status> {
        self.unpublish(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<csi::ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<csi::ValidateVolumeCapabilitiesResponse>, Status> {
        self.validate(request.into_inner()).await.map(Response::new)
    }

    async fn list_volumes(
        &self,
        request: Request<csi::ListVolumesRequest>,
    ) -> Result<Response<csi::ListVolumesResponse>, Status> {
        self.list(request.into_inner()).await.map(Response::new)
    }

    async fn get_capacity(
        &self,
        request: Request<csi::GetCapacityRequest>,
    ) -> Result<Response<csi::GetCapacityResponse>, Status> {
        self.capacity(request.into_inner()).await.map(Response::new)
    }

    async fn controller_get_capabilities(
        &self,
        _: Request<csi::ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<csi::ControllerGetCapabilitiesResponse>, Status> {
        // CLONE_VOLUME only where the cloud clones; the snapshot calls only where it
        // cuts snapshots.
        let clone = self.cloud.clones().then_some(Rpc::CloneVolume);
        let snapshots: &[Rpc] = if self.cloud.snapshots() {
            &[Rpc::CreateDeleteSnapshot, Rpc::ListSnapshots]
        } else {
            &[]
        };
        let capabilities = CAPABILITIES
            .iter()
            .chain(clone.iter())
            .chain(snapshots)
            .map(|t| csi::ControllerServiceCapability {
                r#type: Some(csi::controller_service_capability::Type::Rpc(
                    csi::controller_service_capability::Rpc { r#type: *t as i32 },
                )),
            })
            .collect();
        Ok(Response::new(csi::ControllerGetCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn controller_expand_volume(
        &self,
        request: Request<csi::ControllerExpandVolumeRequest>,
    ) -> Result<Response<csi::ControllerExpandVolumeResponse>, Status> {
        self.expand(request.into_inner()).await.map(Response::new)
    }

    async fn create_snapshot(
        &self,
        request: Request<csi::CreateSnapshotRequest>,
    ) -> Result<Response<csi::CreateSnapshotResponse>, Status> {
        self.create_snap(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn delete_snapshot(
        &self,
        request: Request<csi::DeleteSnapshotRequest>,
    ) -> Result<Response<csi::DeleteSnapshotResponse>, Status> {
        self.delete_snap(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn list_snapshots(
        &self,
        request: Request<csi::ListSnapshotsRequest>,
    ) -> Result<Response<csi::ListSnapshotsResponse>, Status> {
        self.list_snaps(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn controller_get_volume(
        &self,
        request: Request<csi::ControllerGetVolumeRequest>,
    ) -> Result<Response<csi::ControllerGetVolumeResponse>, Status> {
        self.get(request.into_inner()).await.map(Response::new)
    }
}
