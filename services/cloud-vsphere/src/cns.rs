//! Cloud Native Storage (`/vsanHealth`, namespace `urn:vsan`): the calls
//! vsphere-csi-driver makes for block volumes. Every change is a task whose result is a
//! batch of per-volume results; a volume's own fault rides in its result (a task that
//! failed as a whole carries its fault as any task). Queries are paginated by a cursor.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use overcast_cloud::CloudError;

use crate::session::{Endpoint, Vcenter};
use crate::soap::{el, fault_error, Fault, Moref};
use crate::task::{self, TaskError};
use crate::xml::Element;

mod snapshots;
pub use snapshots::{CnsSnapshot, SnapshotEntry};

/// How long a CNS task is waited for before the call says DeadlineExceeded (the caller's
/// retry finds what the task did).
const TASK_LIMIT: Duration = Duration::from_secs(120);
/// Volumes per query page.
const PAGE: u64 = 100;

fn manager() -> Moref {
    Moref::new("CnsVolumeManager", "cns-volume-manager")
}

/// A block volume as CNS describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    pub id: String,
    pub name: String,
    pub datastore_url: String,
    pub capacity_mb: u64,
    /// The cluster the volume was made for (`metadata.containerCluster.clusterId`).
    pub cluster_id: String,
    pub storage_policy_id: String,
    pub health: String,
    /// What its Kubernetes entities say, under the CSI metadata keys
    /// (`csi.storage.k8s.io/pv/name`, `…/pvc/name`, `…/pvc/namespace`).
    pub metadata: BTreeMap<String, String>,
    /// The CSI snapshot a restore was made from ([`RESTORED_FROM_LABEL`] on its PV's
    /// entity): CNS does not say a volume's source back otherwise.
    pub restored_from: Option<String>,
}

/// Ours, a label of a restore's PERSISTENT_VOLUME entity: the CSI id of the snapshot it
/// was made from (`<volume id>+<snapshot id>`).
pub const RESTORED_FROM_LABEL: &str = "overcast.dev/restored-from";

/// The CSI metadata keys the external-provisioner passes and CNS records as entities.
pub const PV_NAME: &str = overcast_cloud::discovery::PV_NAME_KEY;
pub const PVC_NAME: &str = "csi.storage.k8s.io/pvc/name";
pub const PVC_NAMESPACE: &str = "csi.storage.k8s.io/pvc/namespace";

/// What a new volume is: upstream's create spec for a block volume.
#[derive(Debug, Clone)]
pub struct CreateSpec {
    pub name: String,
    pub capacity_mb: u64,
    /// Where it may be placed (upstream: the datastore of `datastoreurl`, else the ones
    /// every node shares).
    pub datastores: Vec<Moref>,
    /// A storage policy's profile id (`storagepolicyname`, resolved).
    pub profile_id: Option<String>,
    pub cluster_id: String,
    pub vsphere_user: String,
    /// The CSI metadata of the create (PV and PVC names), recorded as upstream's driver
    /// records them: a PERSISTENT_VOLUME entity and a PERSISTENT_VOLUME_CLAIM entity
    /// referring to it.
    pub metadata: BTreeMap<String, String>,
    /// A restore: the (volume id, snapshot id) of the CNS snapshot its content comes from
    /// (`volumeSource` of xsi:type `CnsSnapshotVolumeSource`, the create spec's last field).
    pub snapshot: Option<(String, String)>,
}

/// A query's filter; empty fields do not filter.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub ids: Vec<String>,
    pub names: Vec<String>,
    pub cluster_ids: Vec<String>,
}

pub struct Cns {
    vc: Arc<Vcenter>,
}

impl Cns {
    pub fn new(vc: Arc<Vcenter>) -> Self {
        Self { vc }
    }

    pub fn vcenter(&self) -> &Arc<Vcenter> {
        &self.vc
    }

    /// Makes the volume; its id.
    /// Creates a volume and waits for it: its id.
    pub async fn create(&self, spec: &CreateSpec) -> Result<String, CloudError> {
        let task = self.start_create(spec).await?;
        self.created(&task).await?.ok_or_else(|| {
            CloudError::Unavailable(format!(
                "vsphere: {}: CnsCreateVolume answered no volume id",
                self.vc.server()
            ))
        })
    }

    /// Starts a create: CNS answers its task at once and the volume exists (and is found
    /// by name) only when the task has succeeded, seconds later on a real vCenter. The
    /// caller records the task before waiting for it with [`Cns::created`], so that a
    /// retry of the same create waits for this task rather than starting another.
    pub async fn start_create(&self, spec: &CreateSpec) -> Result<Moref, CloudError> {
        let mut s = String::from("<createSpecs>");
        s.push_str(&el("name", &spec.name));
        s.push_str(&el("volumeType", "BLOCK"));
        for d in &spec.datastores {
            s.push_str(&d.xml("datastores"));
        }
        s.push_str("<metadata><containerCluster>");
        s.push_str(&el("clusterType", "KUBERNETES"));
        s.push_str(&el("clusterId", &spec.cluster_id));
        s.push_str(&el("vSphereUser", &spec.vsphere_user));
        s.push_str(&el("clusterFlavor", "VANILLA"));
        s.push_str("</containerCluster>");
        let restored_from = spec.snapshot.as_ref().map(|(v, s)| format!("{v}+{s}"));
        s.push_str(&entities(
            &spec.metadata,
            &spec.cluster_id,
            restored_from.as_deref(),
        ));
        s.push_str("</metadata>");
        s.push_str(&format!(
            "<backingObjectDetails xsi:type=\"CnsBlockBackingDetails\">{}</backingObjectDetails>",
            el("capacityInMb", &spec.capacity_mb.to_string())
        ));
        if let Some(p) = &spec.profile_id {
            s.push_str(&format!(
                "<profile xsi:type=\"VirtualMachineDefinedProfileSpec\">{}</profile>",
                el("profileId", p)
            ));
        }
        if let Some((volume, snapshot)) = &spec.snapshot {
            s.push_str(&format!(
                "<volumeSource xsi:type=\"CnsSnapshotVolumeSource\"><volumeId>{}</volumeId><snapshotId>{}</snapshotId></volumeSource>",
                el("id", volume),
                el("id", snapshot)
            ));
        }
        s.push_str("</createSpecs>");
        self.start("CnsCreateVolume", &s).await
    }

    /// The id of the volume a create's task made, once it has succeeded; `None` when its
    /// result names no volume (not a create's task).
    pub async fn created(&self, task: &Moref) -> Result<Option<String>, TaskError> {
        let r = self.finish("CnsCreateVolume", task).await?;
        Ok(r.text_at(&["volumeId", "id"])
            .filter(|id| !id.is_empty())
            .map(str::to_owned))
    }

    /// Every volume the filter matches, page by page. (The filter is applied again here:
    /// not every CNS honours every field.)
    pub async fn query(&self, filter: &Filter) -> Result<Vec<Volume>, CloudError> {
        let mut out = Vec::new();
        let mut offset = 0u64;
        loop {
            let mut f = String::from("<filter>");
            for id in &filter.ids {
                f.push_str(&format!("<volumeIds>{}</volumeIds>", el("id", id)));
            }
            for n in &filter.names {
                f.push_str(&el("names", n));
            }
            for c in &filter.cluster_ids {
                f.push_str(&el("containerClusterIds", c));
            }
            f.push_str(&format!(
                "<cursor><offset>{offset}</offset><limit>{PAGE}</limit></cursor></filter>"
            ));
            let params = manager().xml("_this") + &f;
            let r = self
                .vc
                .call(Endpoint::Cns, "CnsQueryVolume", &params, true)
                .await?;
            let Some(rv) = r.child("returnval") else {
                break;
            };
            let page: Vec<Volume> = rv.all("volumes").map(volume).collect();
            let got = page.len() as u64;
            out.extend(page.into_iter().filter(|v| matches(filter, v)));
            let total: u64 = rv
                .text_at(&["cursor", "totalRecords"])
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            offset += got;
            // A CNS without paging answers everything at once, with no total.
            if got == 0 || got < PAGE || total == 0 || offset >= total {
                break;
            }
        }
        Ok(out)
    }

    /// Deletes the volume and its disk. A volume CNS does not know is gone already.
    pub async fn delete(&self, id: &str) -> Result<(), CloudError> {
        let params = format!(
            "<volumeIds>{}</volumeIds><deleteDisk>true</deleteDisk>",
            el("id", id)
        );
        match self.change_one("CnsDeleteVolume", &params).await {
            Ok(_) | Err(CloudError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Attaches the volume to `vm`; the disk's UUID (its SCSI WWN in the guest).
    pub async fn attach(&self, id: &str, vm: &Moref) -> Result<String, CloudError> {
        let params = format!(
            "<attachSpecs><volumeId>{}</volumeId>{}</attachSpecs>",
            el("id", id),
            vm.xml("vm")
        );
        let r = self.change_one("CnsAttachVolume", &params).await?;
        r.text_at(&["diskUUID"])
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| {
                CloudError::Unavailable(format!(
                    "vsphere: {}: CnsAttachVolume answered no disk UUID for {id}",
                    self.vc.server()
                ))
            })
    }

    pub async fn detach(&self, id: &str, vm: &Moref) -> Result<(), CloudError> {
        let params = format!(
            "<detachSpecs><volumeId>{}</volumeId>{}</detachSpecs>",
            el("id", id),
            vm.xml("vm")
        );
        self.change_one("CnsDetachVolume", &params)
            .await
            .map(|_| ())
    }

    pub async fn extend(&self, id: &str, capacity_mb: u64) -> Result<(), CloudError> {
        let params = format!(
            "<extendSpecs><volumeId>{}</volumeId>{}</extendSpecs>",
            el("id", id),
            el("capacityInMb", &capacity_mb.to_string())
        );
        self.change_one("CnsExtendVolume", &params)
            .await
            .map(|_| ())
    }

    /// A change of one volume: sent, its task awaited.
    async fn change_one(&self, method: &'static str, specs: &str) -> Result<Element, CloudError> {
        let t = self.start(method, specs).await?;
        Ok(self.finish(method, &t).await?)
    }

    /// Sends a change; its task.
    async fn start(&self, method: &'static str, specs: &str) -> Result<Moref, CloudError> {
        let params = manager().xml("_this") + specs;
        let r = self.vc.call(Endpoint::Cns, method, &params, false).await?;
        r.child("returnval").and_then(Moref::of).ok_or_else(|| {
            CloudError::Unavailable(format!(
                "vsphere: {}: {method} answered no task",
                self.vc.server()
            ))
        })
    }

    /// Waits for a change's task: its one result, that result's fault as the error.
    async fn finish(&self, method: &'static str, t: &Moref) -> Result<Element, TaskError> {
        let result = task::wait(&self.vc, t, method, TASK_LIMIT).await?;
        let one = result
            .as_ref()
            .and_then(|b| b.all("volumeResults").next())
            .cloned()
            .unwrap_or_default();
        if let Some(f) = one.child("fault") {
            let fault = Fault {
                kind: f
                    .child("fault")
                    .and_then(|x| x.xsi_type.clone())
                    .unwrap_or_default(),
                message: f
                    .text_at(&["localizedMessage"])
                    .unwrap_or_default()
                    .to_owned(),
                object: None,
            };
            return Err(TaskError::Failed(fault_error(
                self.vc.server(),
                method,
                &fault,
            )));
        }
        Ok(one)
    }
}

/// The Kubernetes entities of a create: the PV (labelled with the snapshot a restore is
/// made from), and the PVC referring to it.
fn entities(
    metadata: &BTreeMap<String, String>,
    cluster_id: &str,
    restored_from: Option<&str>,
) -> String {
    let mut out = String::new();
    let Some(pv) = metadata.get(PV_NAME) else {
        return out;
    };
    let entity = |kind: &str, name: &str, labels: &str, namespace: Option<&str>, refers: &str| {
        format!(
            "<entityMetadata xsi:type=\"CnsKubernetesEntityMetadata\">{}{labels}<delete>false</delete>{}{}{}{refers}</entityMetadata>",
            el("entityName", name),
            el("clusterId", cluster_id),
            el("entityType", kind),
            namespace.map(|n| el("namespace", n)).unwrap_or_default(),
        )
    };
    let labels = restored_from
        .map(|id| {
            format!(
                "<labels>{}{}</labels>",
                el("key", RESTORED_FROM_LABEL),
                el("value", id)
            )
        })
        .unwrap_or_default();
    out.push_str(&entity("PERSISTENT_VOLUME", pv, &labels, None, ""));
    if let (Some(pvc), Some(ns)) = (metadata.get(PVC_NAME), metadata.get(PVC_NAMESPACE)) {
        let refers = format!(
            "<referredEntity>{}{}{}</referredEntity>",
            el("entityType", "PERSISTENT_VOLUME"),
            el("entityName", pv),
            el("clusterId", cluster_id)
        );
        out.push_str(&entity(
            "PERSISTENT_VOLUME_CLAIM",
            pvc,
            "",
            Some(ns),
            &refers,
        ));
    }
    out
}

fn matches(f: &Filter, v: &Volume) -> bool {
    (f.ids.is_empty() || f.ids.contains(&v.id))
        && (f.names.is_empty() || f.names.contains(&v.name))
        && (f.cluster_ids.is_empty() || f.cluster_ids.contains(&v.cluster_id))
}

fn volume(e: &Element) -> Volume {
    let t = |p: &[&str]| e.text_at(p).unwrap_or_default().to_owned();
    Volume {
        id: t(&["volumeId", "id"]),
        name: t(&["name"]),
        datastore_url: t(&["datastoreUrl"]),
        capacity_mb: e
            .text_at(&["backingObjectDetails", "capacityInMb"])
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        cluster_id: t(&["metadata", "containerCluster", "clusterId"]),
        storage_policy_id: t(&["storagePolicyId"]),
        health: t(&["healthStatus"]),
        metadata: entity_metadata(e),
        restored_from: restored_from(e),
    }
}

/// The [`RESTORED_FROM_LABEL`] of a volume's PERSISTENT_VOLUME entity.
fn restored_from(volume: &Element) -> Option<String> {
    volume
        .child("metadata")?
        .all("entityMetadata")
        .filter(|e| e.text_at(&["entityType"]) == Some("PERSISTENT_VOLUME"))
        .flat_map(|e| e.all("labels"))
        .find(|l| l.text_at(&["key"]) == Some(RESTORED_FROM_LABEL))
        .and_then(|l| l.text_at(&["value"]).map(str::to_owned))
}

/// A volume's Kubernetes entities under the CSI metadata keys.
fn entity_metadata(volume: &Element) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(m) = volume.child("metadata") else {
        return out;
    };
    for e in m.all("entityMetadata") {
        let name = e.text_at(&["entityName"]).unwrap_or_default().to_owned();
        match e.text_at(&["entityType"]) {
            Some("PERSISTENT_VOLUME") => {
                out.insert(PV_NAME.to_owned(), name);
            }
            Some("PERSISTENT_VOLUME_CLAIM") => {
                out.insert(PVC_NAME.to_owned(), name);
                if let Some(ns) = e.text_at(&["namespace"]) {
                    out.insert(PVC_NAMESPACE.to_owned(), ns.to_owned());
                }
            }
            _ => {}
        }
    }
    out
}
