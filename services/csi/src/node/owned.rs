//! What is really there, when the node has no record of a volume at a path: its records
//! lost or set aside, or the volume staged and published by another node plugin before an
//! image switch. A mount at the path the call names is the volume's only when the kernel
//! says its device is the volume's disk — the loop device whose backing file is the
//! volume's, the disk whose serial or by-id link is the volume's — as the cloud's
//! [`DiskOfVolume`] derives it from the id. A mount of another disk is kept, exactly as
//! before (the volume is not at that path: the spec's idempotent answer), and one that
//! cannot be told apart from the volume's is refused: only a positive answer about that
//! exact disk lets the node unmount it.

use std::path::{Path, PathBuf};

use overcast_cloud::DiskOfVolume;
use overcast_mount::mountinfo::MountInfo;
use tonic::Status;

use super::{mount_status, NodeService};

/// What is mounted at a path the node has no record of.
#[derive(Debug)]
pub(super) enum Seen {
    Nothing,
    /// A mount of the volume's own disk.
    Volume(Found),
    /// A mount of something that is provably not the volume's disk (said why).
    Other(String),
}

/// A mount at a path the node has no record of, found to be of the volume's disk.
#[derive(Debug)]
pub(super) struct Found {
    pub mount: MountInfo,
    /// The volume's device node.
    pub device: PathBuf,
    /// The path is a bind of the device node itself (a block volume), not a filesystem.
    pub block: bool,
}

impl NodeService {
    /// What is mounted at `path`, as far as volume `id` is concerned; FAILED_PRECONDITION,
    /// naming what was found, when something is mounted there that cannot be told apart
    /// from the volume's disk.
    pub(super) async fn mount_of_volume(
        &self,
        op: &str,
        id: &str,
        path: &Path,
    ) -> Result<Seen, Status> {
        let Some(mount) = self.host.top_mount(path).map_err(|e| mount_status(op, e))? else {
            return Ok(Seen::Nothing);
        };
        // A block volume's target is a bind of the device node: the mount table shows
        // the devtmpfs it came from; the node itself is the device.
        let block = self.host.is_block_device(path);
        let numbers = if block {
            self.host
                .device_numbers(path)
                .map_err(|e| mount_status(op, e))?
        } else {
            (mount.major, mount.minor)
        };
        let what = |why: String| {
            format!(
                "{op}: {} holds a mount of {}:{} that this node has no record of, and {why}; it is left as it is",
                path.display(),
                numbers.0,
                numbers.1
            )
        };
        let refuse = |why: String| Status::failed_precondition(what(why));
        let ctx = match self.disk_of_volume {
            DiskOfVolume::Unknown => self.attached_disk(op, id).await?.ok_or_else(|| {
                refuse(
                    "this cloud's volume ids do not name their disks, and no attachment of it to this node names its disk, so it cannot be told to be this volume's"
                        .to_owned(),
                )
            })?,
            _ => self.disk_of_volume.context(id).ok_or_else(|| {
                refuse(format!("the volume id {id:?} cannot name a disk"))
            })?,
        };
        // Looked up once, without waiting: a disk that is not there now is not the one
        // mounted.
        let Some(device) = self.host.find_device_now(&ctx) else {
            return Ok(Seen::Other(what(
                "no disk of this volume is attached here".to_owned(),
            )));
        };
        let disk = self
            .host
            .device_numbers(&device)
            .map_err(|e| mount_status(op, e))?;
        if disk != numbers {
            return Ok(Seen::Other(what(format!(
                "this volume's disk is {} ({}:{})",
                device.display(),
                disk.0,
                disk.1
            ))));
        }
        tracing::warn!(
            path = %path.display(),
            device = %device.display(),
            "a mount with no record of this node is the volume's own disk: taken as this volume's"
        );
        self.metrics.unrecorded_mount(op_name(op));
        Ok(Seen::Volume(Found {
            mount,
            device,
            block,
        }))
    }
}

impl NodeService {
    /// The disk the volume's attachment to this node names (its VolumeAttachment's
    /// publish context), where the node reads attachments; `None` when there is no such
    /// attachment or it names no disk (another driver's, with an empty context).
    /// UNAVAILABLE when the API did not answer: an uncertain answer unmounts nothing.
    pub(super) async fn attached_disk(
        &self,
        op: &str,
        id: &str,
    ) -> Result<Option<overcast_cloud::PublishContext>, Status> {
        use super::attachment::Unread;
        let context = match self.attachments.context(id).await {
            Ok(context) => context,
            // Told apart by nothing: refused as before attachments were read.
            Err(Unread::NoClient(why)) => {
                tracing::warn!(error = %why, "{op}: no API client to read the volume's attachment with");
                None
            }
            Err(Unread::Api(why)) => {
                return Err(Status::unavailable(format!(
                    "{op}: the volume's attachment to this node could not be read: {why}"
                )))
            }
        };
        Ok(context
            .map(|c| overcast_cloud::PublishContext::from_map(&c))
            .filter(|ctx| overcast_mount::device::check_volume(ctx, id).is_ok()))
    }
}

/// The call's name from its op text ("unstage volume …" → "unstage").
fn op_name(op: &str) -> &str {
    op.split_whitespace().next().unwrap_or("node")
}
