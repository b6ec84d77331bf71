//! The disk capability: name-idempotent create, get, list, delete, attach, detach,
//! expand, and (where the cloud can) snapshots of a disk and disks made from them. The
//! CSI controller is written against this trait alone.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::Result;

/// A placement domain, spelled with the well-known Kubernetes topology keys so that CSI
/// topology and the node labels the cloud-controller-manager sets agree.
/// Both empty: the cloud has no zones (no topology is published). A region with an empty
/// zone is a place every zone of that region reaches (a zVirt data center's storage).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Zone {
    pub region: String,
    pub zone: String,
}

/// What to create. `parameters` shape the disk (the cloud validates them and records
/// them, so a repeated create can be compared); `metadata` only labels it (the PVC and
/// PV names external-provisioner sends), for operators and orphan detection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskSpec {
    pub name: String,
    pub size_bytes: u64,
    pub zone: Zone,
    pub parameters: BTreeMap<String, String>,
    pub metadata: BTreeMap<String, String>,
    /// What the new disk's content starts as: another disk's (a clone, when the cloud
    /// [`Disks::clones`]) or a snapshot's (a restore, when it [`Disks::snapshots`]).
    pub source: Option<DiskSource>,
}

/// Where a disk's content came from (CSI's `VolumeContentSource`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DiskSource {
    /// Another disk, by id: a clone.
    Disk(String),
    /// A snapshot, by id: a restore.
    Snapshot(String),
}

impl DiskSource {
    pub fn id(&self) -> &str {
        match self {
            Self::Disk(id) | Self::Snapshot(id) => id,
        }
    }
}

/// What to snapshot. Name-idempotent like a disk's create: the CSI name (the
/// VolumeSnapshotContent's `snapshot-<uid>`) is recorded with the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSpec {
    pub name: String,
    /// The disk whose content is kept.
    pub source: String,
    /// The VolumeSnapshotClass's parameters (the cloud validates them; unknown keys are
    /// refused).
    pub parameters: BTreeMap<String, String>,
    /// Labels only: what csi-snapshotter sends with `--extra-create-metadata`.
    pub metadata: BTreeMap<String, String>,
}

/// A snapshot of a disk: its content when it was cut, kept apart from the disk (the disk
/// may change or go; the snapshot stays until it is deleted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub id: String,
    pub name: String,
    /// The disk it was cut from (which may be gone since).
    pub source: String,
    /// The size a disk restored from it needs at least: the source's size when it was
    /// cut.
    pub size_bytes: u64,
    /// When the cloud cut it (what the cloud says, not when we asked).
    pub created: std::time::SystemTime,
    /// Whether a disk can be made from it now. `false` while the cloud is still cutting
    /// or uploading it: the CO asks again until it is.
    pub ready: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub node: String,
    pub readonly: bool,
    /// What the node needs to find the disk (a device path, a serial, a WWN).
    pub publish_context: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskCondition {
    Healthy,
    Abnormal(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    pub id: String,
    pub name: String,
    pub size_bytes: u64,
    pub zone: Zone,
    pub parameters: BTreeMap<String, String>,
    pub metadata: BTreeMap<String, String>,
    pub attachments: Vec<Attachment>,
    pub condition: DiskCondition,
    /// What it was made from (a disk or a snapshot), when the cloud records it.
    pub source: Option<DiskSource>,
}

/// Which of a disk's attachments a lookup needs ([`Disks::disk_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attachments<'a> {
    /// Every node it is attached to (ListVolumes, ControllerGetVolume).
    All,
    /// Whether it is attached to this node (ControllerPublish, ControllerUnpublish).
    On(&'a str),
    /// None (an expand, a validation, a clone's source).
    Ignored,
}

#[async_trait]
pub trait Disks: Send + Sync + 'static {
    /// The zones this cloud can place a disk in, preferred first; `[Zone::default()]`
    /// when it has none. Asked per call: a cloud's zones may change while it runs.
    async fn zones(&self) -> Result<Vec<Zone>>;
    /// Smallest disk, and the unit every disk size is rounded up to.
    fn size_granularity(&self) -> u64;
    /// Largest disk the cloud can make.
    fn max_disk_size(&self) -> u64;
    /// How many disks one node can have attached.
    fn max_attachments_per_node(&self) -> u64;
    /// Whether disks made with `parameters` may together exceed the free space (thin
    /// provisioning), so one disk may be larger than what is available now.
    fn overcommits(&self, parameters: &BTreeMap<String, String>) -> bool;
    /// Whether a create can start from another disk's content (`DiskSpec::source`).
    fn clones(&self) -> bool {
        false
    }
    /// Checks the disk-shaping parameters of a create; unknown keys are refused.
    fn validate_parameters(&self, parameters: &BTreeMap<String, String>) -> Result<()>;
    /// Where every disk of a class with `parameters` lands, when the class decides it
    /// rather than the create's zone (zVirt: the data center of `storageDomainName`,
    /// `Zone { region, zone: "" }`, reachable from each of its clusters). `None`: the
    /// zone the CO's topology picks decides.
    async fn placement(&self, _parameters: &BTreeMap<String, String>) -> Result<Option<Zone>> {
        Ok(None)
    }

    /// Whether `disk` was made with the disk-shaping `parameters` (a repeated create of
    /// its name, or ValidateVolumeCapabilities, asks). Default: the parameters the cloud
    /// recorded with it. A cloud that records none compares what the disk is.
    async fn made_with(&self, disk: &Disk, parameters: &BTreeMap<String, String>) -> Result<bool> {
        Ok(disk.parameters == *parameters)
    }

    /// Creates a disk, or returns the one that already carries `spec.name` when its
    /// parameters match (`ParameterMismatch` otherwise).
    async fn create_disk(&self, spec: DiskSpec) -> Result<Disk>;
    async fn disk(&self, id: &str) -> Result<Disk>;
    /// The disk with at least the attachments `wanted` names (others may be left out),
    /// for a cloud where finding every attachment costs more than the disk: on vSphere
    /// the VMs hold them, and an operation on one node reads that node's VM alone, so
    /// its cost does not grow with the inventory. Default: [`Disks::disk`].
    async fn disk_with(&self, id: &str, wanted: Attachments<'_>) -> Result<Disk> {
        let _ = wanted;
        self.disk(id).await
    }
    /// The disk made for CSI volume `name`. Its attachments may be left out: what asks
    /// by name (a repeated CreateVolume) compares size, parameters, source and zone, and
    /// on vSphere finding a volume's holders costs more than the volume.
    async fn disk_by_name(&self, name: &str) -> Result<Option<Disk>>;
    /// All disks, sorted by id (the order pagination relies on).
    async fn list_disks(&self) -> Result<Vec<Disk>>;
    /// A ListVolumes page: the disks whose id sorts after `after`, in id order, at most
    /// `max` of them (0: no limit), and whether more follow. A provider whose cloud can
    /// narrow the listing reads the page's attachments alone (zVirt: a disk's VMs come
    /// with the disk alone, one read each). Default: [`Disks::list_disks`], cut.
    async fn list_disks_page(&self, after: Option<&str>, max: usize) -> Result<(Vec<Disk>, bool)> {
        Ok(page_of(self.list_disks().await?, |d| &d.id, after, max))
    }
    /// Deletes a detached disk: `NotFound` when it is gone, `FailedPrecondition` while
    /// attached.
    async fn delete_disk(&self, id: &str) -> Result<()>;
    /// Attaches to `node`; attaching again with the same mode returns the same attachment.
    async fn attach_disk(&self, id: &str, node: &str, readonly: bool) -> Result<Attachment>;
    /// Detaches from `node`; a disk that is not attached there is already detached.
    async fn detach_disk(&self, id: &str, node: &str) -> Result<()>;
    /// Grows the disk to at least `size_bytes` (never shrinks); returns the new size.
    async fn expand_disk(&self, id: &str, size_bytes: u64) -> Result<u64>;
    /// Bytes available for new disks in `zone` (all zones when `None`).
    async fn available_capacity(&self, zone: Option<&Zone>) -> Result<u64>;
    /// GetCapacity's parameters: a class's, except that what only a create needs may be
    /// absent (the CO may ask with none at all).
    fn validate_capacity_parameters(&self, parameters: &BTreeMap<String, String>) -> Result<()> {
        self.validate_parameters(parameters)
    }
    /// Bytes available for new disks of a class with `parameters` in `zone` (a cloud whose
    /// classes name where disks go answers for that place).
    async fn available_capacity_for(
        &self,
        zone: Option<&Zone>,
        _parameters: &BTreeMap<String, String>,
    ) -> Result<u64> {
        self.available_capacity(zone).await
    }
    /// Whether `node` is an instance disks can be attached to.
    async fn node_exists(&self, node: &str) -> Result<bool>;
    /// Answers only when the cloud and its store do.
    async fn probe(&self) -> Result<()>;

    /// Whether this cloud cuts snapshots of disks and makes disks from them (CSI's
    /// CREATE_DELETE_SNAPSHOT and LIST_SNAPSHOTS). The methods below are called only
    /// where it does.
    fn snapshots(&self) -> bool {
        false
    }
    /// Checks a snapshot class's parameters; unknown keys are refused.
    fn validate_snapshot_parameters(&self, parameters: &BTreeMap<String, String>) -> Result<()> {
        match parameters.keys().next() {
            None => Ok(()),
            Some(k) => Err(crate::CloudError::InvalidArgument(format!(
                "unknown snapshot class parameter {k:?} (this cloud takes none)"
            ))),
        }
    }
    /// Cuts a snapshot of `spec.source`, or answers the one that already carries
    /// `spec.name` when it is of the same disk (`ParameterMismatch` when it is of another).
    /// A source that does not exist is `NotFound` of kind "disk". It may answer before the
    /// cloud is done (`ready: false`); asked again, it answers how far it got.
    async fn create_snapshot(&self, spec: SnapshotSpec) -> Result<Snapshot> {
        Err(no_snapshots(&spec.name))
    }
    /// A snapshot by id: `NotFound` when there is none (or the id cannot be one of ours).
    async fn snapshot(&self, id: &str) -> Result<Snapshot> {
        Err(crate::CloudError::not_found("snapshot", id))
    }
    /// A ListSnapshots page: the snapshots (of `source` only, when given) whose id sorts
    /// after `after`, in id order, at most `max` (0: no limit), and whether more follow.
    async fn list_snapshots_page(
        &self,
        source: Option<&str>,
        after: Option<&str>,
        max: usize,
    ) -> Result<(Vec<Snapshot>, bool)> {
        let _ = (source, after, max);
        Ok((Vec::new(), false))
    }
    /// Deletes a snapshot: `NotFound` when it is gone; `FailedPrecondition` (or `InUse`)
    /// while the cloud refuses because a disk is still being made from it.
    async fn delete_snapshot(&self, id: &str) -> Result<()> {
        Err(crate::CloudError::not_found("snapshot", id))
    }
}

fn no_snapshots(name: &str) -> crate::CloudError {
    crate::CloudError::InvalidArgument(format!(
        "snapshot {name:?}: this cloud does not cut snapshots"
    ))
}

/// The items of `sorted` (in the order of their `id`) after `after`, at most `max` (0:
/// all), and whether more follow: a ListVolumes page.
pub fn page_of<T>(
    sorted: Vec<T>,
    id: impl Fn(&T) -> &str,
    after: Option<&str>,
    max: usize,
) -> (Vec<T>, bool) {
    let mut rest = sorted
        .into_iter()
        .filter(|d| after.is_none_or(|a| id(d) > a))
        .peekable();
    let mut page = Vec::new();
    for d in rest.by_ref() {
        page.push(d);
        if max != 0 && page.len() == max {
            break;
        }
    }
    let more = rest.peek().is_some();
    (page, more)
}
