//! CNS volume snapshots (vSphere 7.0U3+): `CnsCreateSnapshots`, `CnsDeleteSnapshots` and
//! `CnsQuerySnapshots`, each a task (govmomi `cns/client.go`; the query's result is read
//! from its task, `GetQuerySnapshotsTaskResult`), in the shapes of govmomi's CNS types.

use overcast_cloud::CloudError;

use super::{manager, Cns};
use crate::session::Endpoint;
use crate::soap::{el, fault_error, Fault, Moref};
use crate::task::{self, TaskError};
use crate::xml::Element;

/// Snapshots per query page: the most one CNS query answers (vsphere-csi-driver's
/// `QuerySnapshotLimit`, "specified by CNS QuerySnapshot API").
const PAGE: u64 = 128;

/// A snapshot as CNS describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CnsSnapshot {
    pub volume_id: String,
    pub snapshot_id: String,
    pub description: String,
    /// xsd:dateTime.
    pub create_time: String,
}

/// One entry of a query: a snapshot, or the fault CNS answered in its place (an unknown
/// volume: `CnsVolumeNotFoundFault`; an unknown snapshot: `CnsSnapshotNotFoundFault`).
#[derive(Debug, Clone)]
pub enum SnapshotEntry {
    Found(CnsSnapshot),
    Fault(Fault),
}

fn snapshot_of(e: &Element) -> CnsSnapshot {
    let t = |p: &[&str]| e.text_at(p).unwrap_or_default().to_owned();
    CnsSnapshot {
        volume_id: t(&["volumeId", "id"]),
        snapshot_id: t(&["snapshotId", "id"]),
        description: t(&["description"]),
        create_time: t(&["createTime"]),
    }
}

/// A `LocalizedMethodFault` element's fault.
fn fault_of(e: &Element) -> Fault {
    Fault {
        kind: e
            .child("fault")
            .and_then(|f| f.xsi_type.clone())
            .unwrap_or_default(),
        message: e
            .text_at(&["localizedMessage"])
            .unwrap_or_default()
            .to_owned(),
        object: None,
    }
}

impl Cns {
    /// Cuts a snapshot of `volume`, described `description`; what CNS made.
    pub async fn create_snapshot(
        &self,
        volume: &str,
        description: &str,
    ) -> Result<CnsSnapshot, CloudError> {
        let task = self.start_snapshot(volume, description).await?;
        Ok(self.snapshot_cut(&task).await?)
    }

    /// Starts a cut of `volume`, described `description`: CNS answers its task at once and
    /// the snapshot is cut (and may be listed) only when the task ends. The caller records
    /// the task before waiting for it with [`Cns::snapshot_cut`], so that a retry of the
    /// same cut waits for this task rather than starting another.
    pub async fn start_snapshot(
        &self,
        volume: &str,
        description: &str,
    ) -> Result<Moref, CloudError> {
        let specs = format!(
            "<snapshotSpecs><volumeId>{}</volumeId>{}</snapshotSpecs>",
            el("id", volume),
            el("description", description)
        );
        self.start("CnsCreateSnapshots", &specs).await
    }

    /// What the cut whose task is `task` made.
    pub async fn snapshot_cut(&self, task: &Moref) -> Result<CnsSnapshot, TaskError> {
        let one = self.finish("CnsCreateSnapshots", task).await?;
        let s = one
            .child("snapshot")
            .map(snapshot_of)
            .unwrap_or_else(|| snapshot_of(&Element::default()));
        if s.snapshot_id.is_empty() {
            return Err(TaskError::Unread(CloudError::Unavailable(format!(
                "vsphere: {}: CnsCreateSnapshots (task {task}) answered no snapshot",
                self.vc.server()
            ))));
        }
        Ok(s)
    }

    /// Deletes snapshot `snapshot` of `volume`. One CNS does not have is gone already
    /// (`NotFound`, as vsphere-csi-driver reads it, and `CnsSnapshotNotFoundFault`).
    pub async fn delete_snapshot(&self, volume: &str, snapshot: &str) -> Result<(), CloudError> {
        let specs = format!(
            "<snapshotDeleteSpecs><volumeId>{}</volumeId><snapshotId>{}</snapshotId></snapshotDeleteSpecs>",
            el("id", volume),
            el("id", snapshot)
        );
        let t = self.start("CnsDeleteSnapshots", &specs).await?;
        let result = task::wait(&self.vc, &t, "CnsDeleteSnapshots", super::TASK_LIMIT).await?;
        let one = result
            .as_ref()
            .and_then(|b| b.all("volumeResults").next())
            .cloned();
        let Some(one) = one else {
            // No result at all: not an answer that it is gone; asked again.
            return Err(CloudError::Unavailable(format!(
                "vsphere: {}: CnsDeleteSnapshots answered no result for snapshot {snapshot} of volume {volume}",
                self.vc.server()
            )));
        };
        match one.child("fault").map(fault_of) {
            None => Ok(()),
            Some(f) if matches!(f.kind.as_str(), "NotFound" | "CnsSnapshotNotFoundFault") => Ok(()),
            Some(f) => Err(fault_error(self.vc.server(), "CnsDeleteSnapshots", &f)),
        }
    }

    /// The snapshots of `volume` (and only `snapshot` of it, when given), or every
    /// snapshot CNS holds: page by page through the cursor.
    pub async fn query_snapshots(
        &self,
        volume: Option<&str>,
        snapshot: Option<&str>,
    ) -> Result<Vec<SnapshotEntry>, CloudError> {
        let spec = match volume {
            Some(v) => format!(
                "<snapshotQuerySpecs><volumeId>{}</volumeId>{}</snapshotQuerySpecs>",
                el("id", v),
                snapshot
                    .map(|s| format!("<snapshotId>{}</snapshotId>", el("id", s)))
                    .unwrap_or_default()
            ),
            None => String::new(),
        };
        let mut out = Vec::new();
        let mut offset = 0u64;
        loop {
            let params = format!(
                "{}<snapshotQueryFilter>{spec}<cursor><offset>{offset}</offset><limit>{PAGE}</limit></cursor></snapshotQueryFilter>",
                manager().xml("_this")
            );
            let r = self
                .vc
                .call(Endpoint::Cns, "CnsQuerySnapshots", &params, false)
                .await?;
            let t = r.child("returnval").and_then(Moref::of).ok_or_else(|| {
                CloudError::Unavailable(format!(
                    "vsphere: {}: CnsQuerySnapshots answered no task",
                    self.vc.server()
                ))
            })?;
            let result = task::wait(&self.vc, &t, "CnsQuerySnapshots", super::TASK_LIMIT)
                .await?
                .unwrap_or_default();
            let mut got = 0u64;
            for e in result.all("entries") {
                got += 1;
                out.push(match e.child("error") {
                    Some(err) => SnapshotEntry::Fault(fault_of(err)),
                    None => SnapshotEntry::Found(
                        e.child("snapshot")
                            .map(snapshot_of)
                            .unwrap_or_else(|| snapshot_of(&Element::default())),
                    ),
                });
            }
            let num = |p: &[&str]| result.text_at(p).and_then(|t| t.parse::<u64>().ok());
            let total = num(&["cursor", "totalRecords"]).unwrap_or(0);
            let next = num(&["cursor", "offset"]).unwrap_or(offset + got);
            // A CNS that pages answers the next offset and the total; one that does not
            // answers everything at once.
            if got == 0 || total == 0 || next >= total || next <= offset {
                return Ok(out);
            }
            offset = next;
        }
    }
}
