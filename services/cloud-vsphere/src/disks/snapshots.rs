//! CNS snapshots as vsphere-csi-driver's vanilla controller makes them (at bf809025), so
//! that its snapshots are ours after a switch and ours are its:
//!
//! - the CSI id is `<volume id>+<snapshot id>` (`VSphereCSISnapshotIdDelimiter`); an id
//!   of another shape is no snapshot of ours (NotFound: DeleteSnapshot of it is OK);
//! - the snapshot's description is `<CSI name>-<volume id>` (its `instanceName`): a
//!   repeated CreateSnapshot finds the snapshot by it among the volume's, as that driver
//!   finds one whose task it lost; the same name cut of another volume is found among
//!   every snapshot (ALREADY_EXISTS, which that driver never answers);
//! - a cut's task is recorded before it is awaited (in memory and in the controller's
//!   state directory, `vsphere-snapshots`), as that driver records it in its
//!   CnsVolumeOperationRequest: a retry after a cancelled call or a restart waits for that
//!   task instead of cutting a second snapshot;
//! - at most `global-max-snapshots-per-block-volume` (`[Snapshot]`, default 3) snapshots
//!   of a volume: FAILED_PRECONDITION past it, in that driver's words;
//! - a volume with snapshots is neither deleted nor grown: FAILED_PRECONDITION, in that
//!   driver's words (a grow to the size it has already is still answered);
//! - a vCenter older than 7.0 Update 3 (`about.version`, as that driver reads it) has no
//!   CNS snapshots: a cut is FAILED_PRECONDITION saying so, and nothing else asks CNS;
//! - size is the source volume's capacity, `ready_to_use` true (CNS answers a snapshot
//!   only once it is cut), creation time the snapshot's `createTime`.

use std::time::SystemTime;

use overcast_cloud::{page_of, CloudError, Result, Snapshot, SnapshotSpec};

use super::devices::{not_found, volume_id};
use super::{VsphereDisks, MIB};
use crate::cns::{CnsSnapshot, Filter, SnapshotEntry};
use crate::task::TaskError;

/// vsphere-csi-driver's `VSphereCSISnapshotIdDelimiter`.
pub const DELIMITER: char = '+';
/// vsphere-csi-driver's `DefaultGlobalMaxSnapshotsPerBlockVolume`.
pub const DEFAULT_MAX_SNAPSHOTS: u64 = 3;

/// The (volume, snapshot) a CSI snapshot id names, when it is one of the driver's shape.
pub fn parse_id(id: &str) -> Option<(&str, &str)> {
    let (volume, snapshot) = id.split_once(DELIMITER)?;
    (volume_id(volume) && overcast_cloud::is_uuid(snapshot)).then_some((volume, snapshot))
}

fn csi_id(s: &CnsSnapshot) -> String {
    format!("{}{DELIMITER}{}", s.volume_id, s.snapshot_id)
}

/// The description vsphere-csi-driver gives a snapshot of `volume` named `name`.
fn description(name: &str, volume: &str) -> String {
    format!("{name}-{volume}")
}

fn created(s: &CnsSnapshot) -> SystemTime {
    s.create_time
        .parse::<jiff::Timestamp>()
        .map(SystemTime::from)
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// What a volume's snapshots keep from happening to it.
#[derive(Clone, Copy)]
pub(super) enum Act {
    Delete,
    Expand,
}

fn found(entries: Vec<SnapshotEntry>) -> Vec<CnsSnapshot> {
    entries
        .into_iter()
        .filter_map(|e| match e {
            SnapshotEntry::Found(s) => Some(s),
            SnapshotEntry::Fault(_) => None,
        })
        .collect()
}

impl VsphereDisks {
    fn to_snapshot(&self, s: &CnsSnapshot, size_bytes: u64) -> Snapshot {
        Snapshot {
            id: csi_id(s),
            name: s
                .description
                .strip_suffix(&format!("-{}", s.volume_id))
                .unwrap_or(&s.description)
                .to_owned(),
            source: s.volume_id.clone(),
            size_bytes,
            created: created(s),
            ready: true,
        }
    }

    /// The vCenter's release when it has no CNS snapshots (older than 7.0 Update 3,
    /// whose CNS answers none of the snapshot methods): it holds no snapshot to list,
    /// find, delete or keep a volume from its delete.
    async fn without_snapshots(&self) -> Result<Option<String>> {
        let content = self.cns.vcenter().content().await?;
        Ok((!content.cns_snapshots()).then(|| content.version.clone()))
    }

    pub(super) async fn cut(&self, spec: SnapshotSpec) -> Result<Snapshot> {
        if let Some(k) = spec.parameters.keys().next() {
            return Err(CloudError::InvalidArgument(format!(
                "unknown snapshot class parameter {k:?} (vSphere takes none)"
            )));
        }
        // vsphere-csi-driver answers UNIMPLEMENTED here; the capability is advertised
        // whatever the vCenter, so the snapshotter is told why and retries (an upgraded
        // vCenter cuts it).
        if let Some(version) = self.without_snapshots().await? {
            return Err(CloudError::FailedPrecondition(format!(
                "vCenter {version} does not support snapshot operations: CNS snapshots need \
                 vSphere 7.0 Update 3 or later"
            )));
        }
        let volume = self.volume(&spec.source).await?;
        let size = volume.capacity_mb * MIB;
        let wanted = description(&spec.name, &volume.id);
        // A cut of this name under way (its caller gave up, or the controller was
        // restarted while CNS cut): its task decides, no second cut is started. A CNS may
        // list the snapshot only once the task ends, so looking it up would not do.
        if let Some(task) = self.cutting.get(&wanted) {
            match self.cns.snapshot_cut(&task).await {
                Ok(s) => {
                    self.cutting.forget(&wanted);
                    // A restarted vCenter reuses task ids: only a cut of this very
                    // description is this one's.
                    if s.volume_id == volume.id && s.description == wanted {
                        return Ok(self.to_snapshot(&s, size));
                    }
                }
                // Gone (a vCenter keeps a finished task for minutes), or ended in error:
                // decided afresh below, by the description first.
                Err(TaskError::Unread(CloudError::NotFound { .. }) | TaskError::Failed(_)) => {
                    self.cutting.forget(&wanted)
                }
                Err(TaskError::Unread(e)) => return Err(e),
            }
        }
        let mine = found(self.cns.query_snapshots(Some(&volume.id), None).await?);
        if let Some(s) = mine.iter().find(|s| s.description == wanted) {
            return Ok(self.to_snapshot(s, size));
        }
        // The name on another volume: cut there (its description names that volume).
        let prefix = format!("{}-", spec.name);
        let elsewhere = found(self.cns.query_snapshots(None, None).await?)
            .into_iter()
            .find(|s| {
                s.volume_id != volume.id && s.description == format!("{prefix}{}", s.volume_id)
            });
        if let Some(s) = elsewhere {
            return Err(CloudError::ParameterMismatch {
                kind: "snapshot",
                name: spec.name,
                reason: format!("it is a snapshot of volume {}", s.volume_id),
            });
        }
        if mine.len() as u64 >= self.max_snapshots {
            return Err(CloudError::FailedPrecondition(format!(
                "the number of snapshots on the source volume {} reaches the configured maximum ({})",
                volume.id, self.max_snapshots
            )));
        }
        let task = self.cns.start_snapshot(&volume.id, &wanted).await?;
        self.cutting.record(&wanted, &task);
        match self.cns.snapshot_cut(&task).await {
            Ok(s) => {
                self.cutting.forget(&wanted);
                Ok(self.to_snapshot(&s, size))
            }
            Err(TaskError::Failed(e)) => {
                self.cutting.forget(&wanted);
                Err(e)
            }
            // Not known how it ended: the record stays, and the retry waits for the task.
            Err(TaskError::Unread(e)) => Err(e),
        }
    }

    pub(super) async fn get_snapshot(&self, id: &str) -> Result<Snapshot> {
        let gone = || CloudError::not_found("snapshot", id);
        let Some((volume, snapshot)) = parse_id(id) else {
            return Err(gone());
        };
        if self.without_snapshots().await?.is_some() {
            return Err(gone());
        }
        let entries = self
            .cns
            .query_snapshots(Some(volume), Some(snapshot))
            .await?;
        let Some(s) = found(entries)
            .into_iter()
            .find(|s| s.snapshot_id == snapshot)
        else {
            return Err(gone());
        };
        let size = match self.volume(volume).await {
            Ok(v) => v.capacity_mb * MIB,
            // Its volume gone since: what a restore needs is not known.
            Err(CloudError::NotFound { .. }) => 0,
            Err(e) => return Err(e),
        };
        Ok(self.to_snapshot(&s, size))
    }

    pub(super) async fn snapshots_page(
        &self,
        source: Option<&str>,
        after: Option<&str>,
        max: usize,
    ) -> Result<(Vec<Snapshot>, bool)> {
        if source.is_some_and(|s| !volume_id(s)) || self.without_snapshots().await?.is_some() {
            return Ok((Vec::new(), false));
        }
        // An unknown source is an entry with CnsVolumeNotFoundFault: none listed.
        let all = found(self.cns.query_snapshots(source, None).await?);
        let mut ids: Vec<String> = all.iter().map(|s| s.volume_id.clone()).collect();
        ids.sort();
        ids.dedup();
        let sizes: std::collections::HashMap<String, u64> = if ids.is_empty() {
            Default::default()
        } else {
            self.cns
                .query(&Filter {
                    ids,
                    ..Filter::default()
                })
                .await?
                .into_iter()
                .map(|v| (v.id, v.capacity_mb * MIB))
                .collect()
        };
        let mut out: Vec<Snapshot> = all
            .iter()
            .map(|s| self.to_snapshot(s, sizes.get(&s.volume_id).copied().unwrap_or(0)))
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(page_of(out, |s| &s.id, after, max))
    }

    pub(super) async fn remove_snapshot(&self, id: &str) -> Result<()> {
        let Some((volume, snapshot)) = parse_id(id) else {
            return Err(CloudError::not_found("snapshot", id));
        };
        if self.without_snapshots().await?.is_some() {
            return Err(CloudError::not_found("snapshot", id));
        }
        self.cns.delete_snapshot(volume, snapshot).await
    }

    /// Refuses to `act` on `volume` while it has snapshots, in vsphere-csi-driver's words
    /// (`"volume: %s with existing snapshots %v cannot be {deleted, please delete|expanded.
    /// Please delete} snapshots before ..."`): CNS snapshots live in the volume's disk
    /// chain, so a delete would take them along and a grow is refused under them.
    pub(super) async fn refuse_with_snapshots(&self, volume: &str, act: Act) -> Result<()> {
        if self.without_snapshots().await?.is_some() {
            return Ok(());
        }
        let held: Vec<String> = found(self.cns.query_snapshots(Some(volume), None).await?)
            .iter()
            .map(csi_id)
            .collect();
        if held.is_empty() {
            return Ok(());
        }
        let held = held.join(", ");
        Err(CloudError::FailedPrecondition(match act {
            Act::Delete => format!(
                "volume: {volume} with existing snapshots [{held}] cannot be deleted, please \
                 delete snapshots before deleting the volume"
            ),
            Act::Expand => format!(
                "volume: {volume} with existing snapshots [{held}] cannot be expanded. Please \
                 delete snapshots before expanding the volume"
            ),
        }))
    }

    /// The (volume, snapshot) a restore is made from, checked to exist.
    pub(super) fn restore_source(&self, id: &str) -> Result<(String, String)> {
        let Some((volume, snapshot)) = parse_id(id) else {
            return Err(CloudError::not_found("snapshot", id));
        };
        if !volume_id(volume) {
            return Err(not_found(volume));
        }
        Ok((volume.to_owned(), snapshot.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_vsphere_csi_driver_s_two_uuids() {
        let v = "0c3c7e4b-5f2a-4c61-9a1e-2b5a3c4d5e6f";
        let s = "9b8a7c6d-1e2f-4a3b-8c7d-6e5f4a3b2c1d";
        assert_eq!(parse_id(&format!("{v}+{s}")), Some((v, s)));
        for bad in [
            v.to_owned(),
            format!("{v}+"),
            format!("+{s}"),
            format!("{v}+{s}+{s}"),
            format!("{v}/{s}"),
            "../etc+passwd".to_owned(),
        ] {
            assert_eq!(parse_id(&bad), None, "{bad}");
        }
    }
}
