//! The Node service: make an attached disk usable by a pod. It never talks to the
//! cloud: the device is found from what ControllerPublishVolume put in the publish
//! context; what was staged and published where is recorded in [`state`], and the
//! kernel's mount table is checked before every action.

pub mod attachment;
pub mod faults;
mod metrics;
mod owned;
mod publish;
mod stage;
mod state;
mod stats;
mod zone;

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use overcast_api::csi_v1 as csi;
use std::sync::Arc;

use overcast_mount::{Host, MountError};
use tonic::{Request, Response, Status};

use crate::inflight::Inflight;
use crate::validation::TopologyKeys;
use faults::Faults;
pub use metrics::NodeMetrics;
use overcast_cloud::DiskOfVolume;
pub use state::NodeState;
pub use zone::NodeZone;

use csi::node_service_capability::rpc::Type as Rpc;

pub struct NodeService {
    node_id: String,
    max_volumes: u64,
    zone: NodeZone,
    topology: TopologyKeys,
    /// The provider-id scheme whose instance id is this node's id (OpenStack's server
    /// id), read from the Node when the given id is not one.
    instance_scheme: Option<&'static str>,
    inflight: Inflight,
    state: NodeState,
    device_wait: Duration,
    /// NodeExpandVolume asks the kernel to read the disk's size again when it is smaller
    /// than asked (OpenStack's `[BlockStorage] rescan-on-resize`).
    rescan_on_resize: bool,
    /// The machine: devices, mounts, filesystems (`overcast_mount::System` in the
    /// binary; an in-memory host in the root-free tests).
    host: Arc<dyn Host>,
    /// How a volume's disk is told from its id, for a mount with no record.
    disk_of_volume: DiskOfVolume,
    /// Where a volume's attachment is read when its id does not name its disk.
    attachments: attachment::Attachments,
    metrics: Arc<NodeMetrics>,
    faults: Faults,
}

impl NodeService {
    pub fn new(
        node_id: String,
        max_volumes: u64,
        zone: NodeZone,
        state: NodeState,
        device_wait: Duration,
        host: Arc<dyn Host>,
    ) -> Self {
        Self {
            node_id,
            max_volumes,
            zone,
            topology: TopologyKeys::default(),
            instance_scheme: None,
            inflight: Inflight::default(),
            state,
            device_wait,
            rescan_on_resize: false,
            host,
            disk_of_volume: DiskOfVolume::Unknown,
            attachments: attachment::Attachments::None,
            metrics: Arc::new(NodeMetrics::default()),
            faults: Faults::default(),
        }
    }
}

impl NodeService {
    /// How this cloud's volume ids name their disks (its provider's `NodeIdentity`).
    pub fn with_disk_of_volume(mut self, disk_of_volume: DiskOfVolume) -> Self {
        self.disk_of_volume = disk_of_volume;
        self
    }

    /// Where a volume's attachment is read, for a mount with no record on a cloud whose
    /// ids do not name their disks.
    pub fn with_attachments(mut self, attachments: attachment::Attachments) -> Self {
        self.attachments = attachments;
        self
    }

    /// Where the node's own counts go (the binary's `/metrics`).
    pub fn with_metrics(mut self, metrics: Arc<NodeMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Fault points a test armed (`OVERCAST_FAULTS`).
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// The zone keys NodeGetInfo reports (the replaced driver's too).
    pub fn with_topology(mut self, topology: TopologyKeys) -> Self {
        self.topology = topology;
        self
    }

    /// Whether NodeExpandVolume rescans a disk still smaller than asked (and waits, up to
    /// the device wait, for the new size) instead of answering OUT_OF_RANGE at once.
    pub fn with_rescan_on_resize(mut self, rescan: bool) -> Self {
        self.rescan_on_resize = rescan;
        self
    }

    /// The node id is the instance of the Node's provider id under `scheme` (as
    /// `openstack:///<server id>`) unless the id given already is a UUID.
    pub fn with_instance_id_from(mut self, scheme: Option<&'static str>) -> Self {
        self.instance_scheme = scheme;
        self
    }

    fn node_id_from(&self, facts: &zone::NodeFacts) -> Result<String, Status> {
        let Some(scheme) = self.instance_scheme else {
            return Ok(self.node_id.clone());
        };
        if zone::is_uuid(&self.node_id) {
            return Ok(self.node_id.clone());
        }
        facts
            .provider_id
            .as_deref()
            .and_then(|p| zone::instance_of(p, scheme))
            .ok_or_else(|| {
                Status::failed_precondition(format!(
                    "node {} is not a {scheme} instance id, and its Node names none ({}://…/<id> in spec.providerID: {:?}); set --node-id to the instance's id",
                    self.node_id, scheme, facts.provider_id
                ))
            })
    }
}

const CAPABILITIES: [Rpc; 5] = [
    Rpc::StageUnstageVolume,
    Rpc::GetVolumeStats,
    Rpc::ExpandVolume,
    Rpc::VolumeCondition,
    Rpc::SingleNodeMultiWriter,
];

/// A path field: required, absolute, without `..` (a CO path is used as given, so it
/// must not climb out of where the CO put it).
fn path_field(field: &str, value: &str) -> Result<PathBuf, Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    let path = Path::new(value);
    if !path.is_absolute()
        || path.components().any(|c| c == Component::ParentDir)
        || value.contains('\0')
    {
        return Err(Status::invalid_argument(format!(
            "{field} {value:?} must be an absolute path without .."
        )));
    }
    Ok(path.to_owned())
}

/// Node-side failures as gRPC statuses; `op` names the call and its volume.
fn mount_status(op: &str, err: MountError) -> Status {
    let code = match &err {
        MountError::DeviceNotFound(_) => tonic::Code::NotFound,
        MountError::Invalid(_) => tonic::Code::InvalidArgument,
        MountError::InUse(_) | MountError::Refused(_) => tonic::Code::FailedPrecondition,
        MountError::OutOfRange(_) => tonic::Code::OutOfRange,
        MountError::Timeout { .. } => tonic::Code::DeadlineExceeded,
        MountError::Io { source, .. } => errno_code(source),
        MountError::Command { .. } => tonic::Code::Internal,
    };
    Status::new(code, format!("{op}: {err}"))
}

fn io_status(op: &str, err: std::io::Error) -> Status {
    Status::new(errno_code(&err), format!("{op}: {err}"))
}

/// A system call's failure by its root cause, not all as INTERNAL: what the caller (or
/// an operator) can act on gets the code that says so.
fn errno_code(err: &std::io::Error) -> tonic::Code {
    use nix::errno::Errno;
    use tonic::Code;
    let Some(errno) = err.raw_os_error().map(Errno::from_raw) else {
        // An error that says more than its errno (the node's read-only state directory).
        return match err.kind() {
            std::io::ErrorKind::ReadOnlyFilesystem => Code::FailedPrecondition,
            _ => Code::Internal,
        };
    };
    match errno {
        Errno::ENOENT => Code::NotFound,
        Errno::ENOSPC | Errno::EDQUOT => Code::ResourceExhausted,
        // The path is not what the call needs it to be (a file where a directory goes,
        // a busy mount, a read-only filesystem): fixable by changing the state, not by
        // retrying as is.
        Errno::EBUSY
        | Errno::ENOTDIR
        | Errno::EISDIR
        | Errno::EEXIST
        | Errno::ENOTEMPTY
        | Errno::ELOOP
        | Errno::EROFS => Code::FailedPrecondition,
        Errno::EACCES | Errno::EPERM => Code::PermissionDenied,
        Errno::ENAMETOOLONG | Errno::EINVAL => Code::InvalidArgument,
        _ => Code::Internal,
    }
}

/// Refuses a path whose last component is a symbolic link: mount(2) follows it, so a
/// link planted at a target would put the volume (or take it away) somewhere else.
fn not_a_symlink(op: &str, path: &Path) -> Result<(), Status> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(Status::failed_precondition(format!(
            "{op}: {} is a symbolic link; it is not followed",
            path.display()
        ))),
        _ => Ok(()),
    }
}

#[tonic::async_trait]
impl csi::node_server::Node for NodeService {
    async fn node_stage_volume(
        &self,
        request: Request<csi::NodeStageVolumeRequest>,
    ) -> Result<Response<csi::NodeStageVolumeResponse>, Status> {
        self.stage(request.into_inner()).await.map(Response::new)
    }

    async fn node_unstage_volume(
        &self,
        request: Request<csi::NodeUnstageVolumeRequest>,
    ) -> Result<Response<csi::NodeUnstageVolumeResponse>, Status> {
        self.unstage(request.into_inner()).await.map(Response::new)
    }

    async fn node_publish_volume(
        &self,
        request: Request<csi::NodePublishVolumeRequest>,
    ) -> Result<Response<csi::NodePublishVolumeResponse>, Status> {
        self.publish(request.into_inner()).await.map(Response::new)
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<csi::NodeUnpublishVolumeResponse>, Status> {
        self.unpublish(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<csi::NodeGetVolumeStatsResponse>, Status> {
        self.stats(request.into_inner()).await.map(Response::new)
    }

    async fn node_expand_volume(
        &self,
        request: Request<csi::NodeExpandVolumeRequest>,
    ) -> Result<Response<csi::NodeExpandVolumeResponse>, Status> {
        self.expand(request.into_inner()).await.map(Response::new)
    }

    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        let capabilities = CAPABILITIES
            .iter()
            .map(|t| csi::NodeServiceCapability {
                r#type: Some(csi::node_service_capability::Type::Rpc(
                    csi::node_service_capability::Rpc { r#type: *t as i32 },
                )),
            })
            .collect();
        Ok(Response::new(csi::NodeGetCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn node_get_info(
        &self,
        _: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        let facts = self.zone.resolve(&self.node_id).await?;
        Ok(Response::new(csi::NodeGetInfoResponse {
            node_id: self.node_id_from(&facts)?,
            max_volumes_per_node: i64::try_from(self.max_volumes).unwrap_or(i64::MAX),
            accessible_topology: Some(self.topology.of(&facts.zone)),
        }))
    }
}

#[cfg(test)]
mod tests;
