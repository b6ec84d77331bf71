//! Disks on OpenStack: a volume is a Cinder volume named after the CSI volume, carrying
//! cinder-csi-plugin's cluster metadata; attaching it to a node is a Nova
//! `os-volume_attachments` of the node's server (the node id is the server's id, as
//! cinder-csi-plugin's is); the node finds it by the serial Nova gives it, the volume id's
//! first 20 characters (`virtio-<id[:20]>`, `scsi-0QEMU_QEMU_HARDDISK_<id[:20]>`).
//!
//! Where upstream is fragile, the rules here:
//! - detaching from a server that no longer exists, or a volume already detached, is
//!   success (cinder-csi-plugin's most reported bug: volumes stuck after a node crash);
//! - a volume that goes to `error` while being made is deleted and reported, so a PVC
//!   given up on leaves no orphan;
//! - every wait is bounded and ends in a retryable DEADLINE_EXCEEDED naming the status;
//! - ids are checked to be UUIDs before they reach a URL.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use http::Method;
use overcast_cloud::{
    page_of, Attachment, CloudError, Disk, DiskSource, DiskSpec, Disks, PublishContext, Result,
    Snapshot, SnapshotSpec, Zone,
};
use serde_json::{json, Value};

use crate::client::{json, Microversion, OpenStack, Service};
pub use backups::{
    CinderBackup, BACKUP_MAX_DURATION_PARAMETER, BACKUP_METADATA, SRC_BACKUP_METADATA,
};
use model::{Many, One};
pub use model::{Volume, VolumeAttachment};
pub use snapshots::{CinderSnapshot, FORCE_CREATE_PARAMETER, SNAPSHOT_TYPE_PARAMETER};

mod attach;
mod backups;
mod create;
mod listing;
mod made;
mod model;
mod resize;
mod snapshots;
#[cfg(test)]
mod tests;

/// cinder-csi-plugin's metadata key naming the cluster a volume was made for.
pub const CLUSTER_METADATA: &str = "cinder.csi.openstack.org/cluster";
/// Ours: the StorageClass parameters a volume was made with (JSON), so a repeated
/// create compares with what was asked — not with what Cinder filled in (a volume made
/// without a type gets `__DEFAULT__`).
pub const PARAMETERS_METADATA: &str = "overcast.dev/parameters";
/// StorageClass parameters, as cinder-csi-plugin takes them.
pub const TYPE_PARAMETER: &str = "type";
pub const AVAILABILITY_PARAMETER: &str = "availability";

const GIB: u64 = 1 << 30;
/// In-use extend.
const EXTEND_IN_USE: Microversion = Microversion(3, 42);
/// Cinder's attachments API (`DELETE /attachments/{id}`).
const ATTACHMENTS: Microversion = Microversion(3, 27);
/// Attaching a multiattach volume (Nova refuses one at an older microversion, even to a
/// first server).
const MULTIATTACH: Microversion = Microversion(2, 60);
/// How many volumes one listing page asks for.
const PAGE: usize = 500;

#[derive(Debug, Clone, Copy)]
pub struct Waits {
    pub available: Duration,
    pub attached: Duration,
    pub detached: Duration,
    pub extended: Duration,
    pub deleted: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Self {
            available: Duration::from_secs(120),
            attached: Duration::from_secs(120),
            detached: Duration::from_secs(120),
            extended: Duration::from_secs(120),
            deleted: Duration::from_secs(60),
        }
    }
}

pub struct CinderDisks {
    os: Arc<OpenStack>,
    cluster: String,
    region: String,
    /// The zones offered (the configured AZ first); Cinder's own when empty.
    zones: Vec<String>,
    max_attachments: u64,
    ignore_volume_az: bool,
    waits: Waits,
    /// Cinder keeps no names unique: creates of one name are one at a time here.
    creating: overcast_cloud::NameClaims,
    page: usize,
}

impl CinderDisks {
    pub fn new(
        os: Arc<OpenStack>,
        cluster: String,
        region: String,
        zones: Vec<String>,
        max_attachments: u64,
        ignore_volume_az: bool,
        waits: Waits,
    ) -> Self {
        Self {
            os,
            cluster,
            region,
            zones,
            max_attachments,
            ignore_volume_az,
            waits,
            creating: overcast_cloud::NameClaims::default(),
            page: PAGE,
        }
    }

    /// Lists in pages of `n` (tests page through a few volumes).
    pub fn with_page_size(mut self, n: usize) -> Self {
        self.page = n.max(1);
        self
    }

    async fn get(&self, id: &str) -> Result<Volume> {
        if !is_uuid(id) {
            return Err(CloudError::not_found("volume", id));
        }
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "volume_get",
                Method::GET,
                &format!("/volumes/{id}"),
                None,
                None,
            )
            .await?;
        match resp.status.as_u16() {
            200 => Ok(json::<One>("volume_get", &resp)?.volume),
            404 => Err(CloudError::not_found("volume", id)),
            _ => Err(unexpected("volume_get", &resp)),
        }
    }

    /// Volumes whose name is `name` (Cinder filters by it).
    async fn by_name(&self, name: &str) -> Result<Vec<Volume>> {
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "volume_list",
                Method::GET,
                &format!("/volumes/detail?name={}", encode(name)),
                None,
                None,
            )
            .await?;
        if resp.status.as_u16() != 200 {
            return Err(unexpected("volume_list", &resp));
        }
        let mut found = json::<Many>("volume_list", &resp)?.volumes;
        // An older Cinder may match loosely: only the exact name counts.
        found.retain(|v| v.name.as_deref() == Some(name));
        Ok(found)
    }

    /// Polls the volume until `done` says so, `error` states end at once; running out
    /// of time is retryable. Every 100 ms more up to 500 ms for the first 10 s (Cinder
    /// and Nova finish most transitions in a second or two, and a poll's gap is what a
    /// caller waits beyond them: measured, BENCHMARKS.md), then every 2 s.
    async fn wait(
        &self,
        id: &str,
        what: &str,
        limit: Duration,
        done: impl Fn(&Volume) -> bool,
    ) -> Result<Volume> {
        let started = Instant::now();
        let mut delay = Duration::from_millis(100);
        loop {
            let v = self.get(id).await?;
            if done(&v) {
                return Ok(v);
            }
            if v.status.starts_with("error") {
                return Err(CloudError::Internal(format!(
                    "openstack: volume {id} is {} while {what}",
                    v.status
                )));
            }
            if started.elapsed() + delay > limit {
                return Err(CloudError::DeadlineExceeded(format!(
                    "openstack: volume {id} is still {} after {:?} {what}",
                    v.status, limit
                )));
            }
            tokio::time::sleep(delay).await;
            delay = if started.elapsed() < Duration::from_secs(10) {
                (delay + Duration::from_millis(100)).min(Duration::from_millis(500))
            } else {
                Duration::from_secs(2)
            };
        }
    }

    async fn server_exists(&self, server: &str) -> Result<bool> {
        if !is_uuid(server) {
            return Ok(false);
        }
        let resp = self
            .os
            .call(
                Service::Compute,
                "server_get",
                Method::GET,
                &format!("/servers/{server}"),
                None,
                None,
            )
            .await?;
        match resp.status.as_u16() {
            200 => Ok(true),
            404 => Ok(false),
            _ => Err(unexpected("server_get", &resp)),
        }
    }
}

/// The publish context of a volume: the serial its disk carries in the guest.
fn context(id: &str) -> BTreeMap<String, String> {
    PublishContext {
        serial: Some(id.chars().take(20).collect()),
        ..PublishContext::default()
    }
    .to_map()
}

fn attached_to(v: &Volume, server: &str) -> bool {
    v.attachments
        .iter()
        .any(|a| a.server_id.as_deref() == Some(server))
}

/// An answer the call did not expect, as the typed error.
fn unexpected(name: &str, resp: &overcast_cloud_http::Response) -> CloudError {
    overcast_cloud_http::status_error("openstack", name, resp)
}

/// Whether `s` is a UUID (with or without dashes, as OpenStack ids are).
pub fn is_uuid(s: &str) -> bool {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    hex.len() == 32
        && hex.chars().all(|c| c.is_ascii_hexdigit())
        && (s.len() == 32
            || (s.len() == 36 && [8, 13, 18, 23].iter().all(|i| &s[*i..*i + 1] == "-")))
}

/// Percent-encodes a query value or a path segment.
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[async_trait]
impl Disks for CinderDisks {
    async fn zones(&self) -> Result<Vec<Zone>> {
        let zone = |z: &String| Zone {
            zone: z.clone(),
            region: self.region.clone(),
        };
        if !self.zones.is_empty() {
            return Ok(self.zones.iter().map(zone).collect());
        }
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "availability_zone_list",
                Method::GET,
                "/os-availability-zone",
                None,
                None,
            )
            .await?;
        if resp.status.as_u16() != 200 {
            return Err(unexpected("availability_zone_list", &resp));
        }
        let doc: Value = json("availability_zone_list", &resp)?;
        let mut names: Vec<String> = doc["availabilityZoneInfo"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|z| z["zoneState"]["available"].as_bool() == Some(true))
            .filter_map(|z| z["zoneName"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        if names.is_empty() {
            return Ok(vec![Zone::default()]);
        }
        Ok(names.iter().map(zone).collect())
    }
    fn size_granularity(&self) -> u64 {
        GIB
    }
    fn max_disk_size(&self) -> u64 {
        // Cinder sizes are GiB integers; the backend refuses what it cannot hold.
        64 << 40
    }
    fn max_attachments_per_node(&self) -> u64 {
        self.max_attachments
    }
    fn clones(&self) -> bool {
        // Cinder's `source_volid`, as cinder-csi-plugin's CLONE_VOLUME.
        true
    }
    fn overcommits(&self, _parameters: &BTreeMap<String, String>) -> bool {
        // Cinder's quota and its scheduler decide; nothing is refused here for space.
        true
    }
    fn validate_parameters(&self, parameters: &BTreeMap<String, String>) -> Result<()> {
        for k in parameters.keys() {
            if k != TYPE_PARAMETER && k != AVAILABILITY_PARAMETER {
                return Err(CloudError::InvalidArgument(format!(
                    "unknown StorageClass parameter {k:?} (OpenStack takes {TYPE_PARAMETER}, {AVAILABILITY_PARAMETER})"
                )));
            }
        }
        Ok(())
    }

    async fn create_disk(&self, spec: DiskSpec) -> Result<Disk> {
        self.create(spec).await
    }

    async fn disk(&self, id: &str) -> Result<Disk> {
        Ok(self.to_disk(&self.get(id).await?))
    }

    async fn disk_by_name(&self, name: &str) -> Result<Option<Disk>> {
        match self.by_name(name).await?.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(self.to_disk(one))),
            many => Err(CloudError::FailedPrecondition(format!(
                "{} volumes are named {name:?}",
                many.len()
            ))),
        }
    }

    async fn list_disks(&self) -> Result<Vec<Disk>> {
        let mut out: Vec<Disk> = self
            .list_volumes()
            .await?
            .iter()
            .map(|v| self.to_disk(v))
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out.dedup_by(|a, b| a.id == b.id);
        Ok(out)
    }

    /// One Cinder page per ListVolumes page (`max + 1` volumes after the token's id), so
    /// a page costs the same whatever the project holds. The project is listed whole
    /// when the CO asks for every volume (`max` 0, as cinder-csi-plugin answers: every
    /// volume of the project) or the token's volume is gone since the page before.
    async fn list_disks_page(&self, after: Option<&str>, max: usize) -> Result<(Vec<Disk>, bool)> {
        if max > 0 {
            if let Some((volumes, more)) = self.volumes_after(after, max).await? {
                return Ok((volumes.iter().map(|v| self.to_disk(v)).collect(), more));
            }
        }
        Ok(page_of(self.list_disks().await?, |d| &d.id, after, max))
    }

    async fn delete_disk(&self, id: &str) -> Result<()> {
        let v = self.get(id).await?;
        if v.status == "deleting" {
            // Cinder is deleting it already (a DELETE whose answer was lost, another
            // tool's): a second DELETE is refused with a 400 that reads like "in use".
            // Wait for it to go; a retryable answer when the wait ends first.
            return self.wait_gone(id).await;
        }
        if !v.attachments.is_empty() || v.status == "in-use" {
            return Err(CloudError::FailedPrecondition(format!(
                "volume {id} is attached to {}; detach it first",
                v.attachments
                    .iter()
                    .filter_map(|a| a.server_id.clone())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "volume_delete",
                Method::DELETE,
                &format!("/volumes/{id}"),
                None,
                None,
            )
            .await?;
        match resp.status.as_u16() {
            202 | 204 => {}
            404 => return Err(CloudError::not_found("volume", id)),
            400 => {
                return Err(CloudError::FailedPrecondition(format!(
                    "{}",
                    unexpected("volume_delete", &resp)
                )))
            }
            _ => return Err(unexpected("volume_delete", &resp)),
        }
        // Gone, or going: Cinder deletes in the background; only `error_deleting` is a
        // failure, and a volume still deleting when the wait ends is reported so.
        match self
            .wait(id, "being deleted", self.waits.deleted, |_| false)
            .await
        {
            Err(CloudError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
            Ok(_) => Ok(()),
        }
    }

    async fn attach_disk(&self, id: &str, node: &str, readonly: bool) -> Result<Attachment> {
        self.attach(id, node, readonly).await
    }

    async fn detach_disk(&self, id: &str, node: &str) -> Result<()> {
        self.detach(id, node).await
    }

    async fn expand_disk(&self, id: &str, size_bytes: u64) -> Result<u64> {
        self.expand(id, size_bytes).await
    }

    async fn available_capacity(&self, _zone: Option<&Zone>) -> Result<u64> {
        let session = self.os.session().await?;
        let Some(project) = session.project_id.clone() else {
            return Ok(u64::MAX);
        };
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "quota_get",
                Method::GET,
                &format!("/os-quota-sets/{project}?usage=true"),
                None,
                None,
            )
            .await?;
        if resp.status.as_u16() != 200 {
            return Err(unexpected("quota_get", &resp));
        }
        let doc: Value = json("quota_get", &resp)?;
        let g = &doc["quota_set"]["gigabytes"];
        let limit = g["limit"].as_i64().unwrap_or(-1);
        if limit < 0 {
            return Ok(u64::MAX);
        }
        let used = g["in_use"].as_i64().unwrap_or(0) + g["reserved"].as_i64().unwrap_or(0);
        Ok(u64::try_from(limit - used).unwrap_or(0).saturating_mul(GIB))
    }

    async fn node_exists(&self, node: &str) -> Result<bool> {
        self.server_exists(node).await
    }

    async fn probe(&self) -> Result<()> {
        self.os.session().await.map(|_| ())
    }

    fn snapshots(&self) -> bool {
        // Cinder snapshots, and volumes made from them (`snapshot_id`); Cinder backups
        // for a class of `type: backup`.
        true
    }

    fn validate_snapshot_parameters(&self, parameters: &BTreeMap<String, String>) -> Result<()> {
        snapshots::validate_snapshot_parameters(parameters)
    }

    async fn create_snapshot(&self, spec: SnapshotSpec) -> Result<Snapshot> {
        snapshots::validate_snapshot_parameters(&spec.parameters)?;
        if backups::is_backup(&spec.parameters) {
            self.create_backup(spec).await
        } else {
            self.create_snap(spec).await
        }
    }

    /// A snapshot's id is a Cinder snapshot's or, for a class of `type: backup`, a
    /// backup's (Cinder's ids are UUIDs of their own: one is never the other's).
    async fn snapshot(&self, id: &str) -> Result<Snapshot> {
        match self.cinder_snapshot(id).await {
            Err(CloudError::NotFound { .. }) => Ok(self.cinder_backup(id).await?.to_snapshot()),
            r => Ok(r?.to_snapshot()),
        }
    }

    async fn list_snapshots_page(
        &self,
        source: Option<&str>,
        after: Option<&str>,
        max: usize,
    ) -> Result<(Vec<Snapshot>, bool)> {
        self.list_snaps_page(source, after, max).await
    }

    async fn delete_snapshot(&self, id: &str) -> Result<()> {
        match self.delete_snap(id).await {
            Err(CloudError::NotFound { .. }) => self.delete_backup(id).await,
            r => r,
        }
    }
}
