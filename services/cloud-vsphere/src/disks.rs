//! CNS block volumes as the CSI controller's disks, the way vsphere-csi-driver makes and
//! attaches them: a volume is made on the StorageClass's datastore (`datastoreurl`) or on
//! any accessible one, with its storage policy (`storagepolicyname`) when it names one,
//! recorded with this cluster's id so it is found by name again; whether and where it is
//! attached is read, as upstream's `IsDiskAttached` does, from the VMs' virtual disks
//! (`vDiskId` = the volume id, `backing.uuid` = the disk UUID the guest sees) — never from
//! memory, so a restart or a second controller agrees. With zone and region tag
//! categories configured, a volume goes where its zone's hosts all reach
//! ([`placement`]).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use async_trait::async_trait;
use overcast_cloud::{
    Attachment, Attachments, CloudError, Disk, DiskCondition, DiskSpec, Disks, Result, Snapshot,
    SnapshotSpec, Zone,
};
use tokio::sync::Mutex;

use crate::cns::{Cns, Filter, Volume};
use crate::creates::InFlight;
use crate::inventory::{properties, View};
use crate::pbm::Pbm;
use crate::search;
use crate::soap::Moref;

mod create;
mod devices;
mod holders;
pub mod placement;
pub mod snapshots;
use devices::{attachment, disk_uuid, no_instance, not_found, volume_disks, volume_id};
use holders::Holders;
use placement::{Places, Topology};
use snapshots::Act;

use crate::config::Config;
use crate::tags::Tags;

/// StorageClass parameters upstream's driver reads (`csi.storage.k8s.io/*` are the
/// provisioner's and never reach a create).
pub const PARAM_DATASTORE_URL: &str = "datastoreurl";
pub const PARAM_STORAGE_POLICY: &str = "storagepolicyname";
pub const PARAM_FSTYPE: &str = "fstype";
/// Publish context: the disk's UUID (upstream's key) and upstream's volume type.
pub const CTX_DISK_UUID: &str = "diskUUID";
pub const CTX_TYPE: &str = "type";
pub const BLOCK_VOLUME_TYPE: &str = "vSphere CNS Block Volume";
/// Upstream's limit without a configured one (255 on vSphere 8 with NVMe/PVSCSI tuning).
pub const DEFAULT_MAX_VOLUMES: u64 = 59;

const MIB: u64 = 1 << 20;
/// The largest virtual disk vSphere makes: 62 TiB.
const MAX_DISK: u64 = 62 << 40;

/// What [`VsphereDisks::read`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parts {
    /// The VMs' names alone (no devices): finding one VM by node name.
    Names,
    Datastores,
}

/// What one inventory read says: each VM by its node name, and the datastores.
#[derive(Debug, Default)]
struct Inventory {
    vms: BTreeMap<String, Moref>,
    /// Accessible datastores.
    datastores: Vec<placement::Datastore>,
}

impl Inventory {
    /// Its datastores as places without zones (each is everywhere).
    fn places(self) -> Places {
        Places {
            hosts: Vec::new(),
            datastores: self.datastores,
        }
    }
}

pub struct VsphereDisks {
    cns: Cns,
    pbm: Pbm,
    view: View,
    /// The datastores alone: a create's placement reads them without the vCenter walking
    /// every VM of the inventory.
    datastores: View,
    cluster_id: String,
    max_attachments: u64,
    /// One create of a name at a time in this process (CNS does not refuse a second
    /// volume of the same name).
    creating: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// The tasks of creates under way, for a retry to wait on ([`InFlight`]).
    in_flight: InFlight,
    /// Zones from tags, when the configuration names their categories.
    topology: Option<Topology>,
    /// The vCenter answered that it cannot say which VMs hold a disk (vcsim, a vCenter
    /// before 6.7): listings read every VM's devices without asking again.
    no_associations: AtomicBool,
    /// `[Snapshot] global-max-snapshots-per-block-volume`.
    max_snapshots: u64,
    /// The snapshot each restored volume was made from (CNS does not say it back): what
    /// a repeated CreateVolume is compared with. Kept as the creates in flight are, by
    /// volume name (a record's "task" is the snapshot's CSI id), in `vsphere-restores`,
    /// written before the create.
    restores: InFlight,
    /// Snapshot cuts in flight, by description (`<CSI name>-<volume id>`), in
    /// `vsphere-snapshots`: vsphere-csi-driver's CnsVolumeOperationRequest for a
    /// snapshot, whose task a retry waits for.
    cutting: InFlight,
}

impl VsphereDisks {
    pub fn new(cns: Cns, cluster_id: String, max_attachments: u64) -> Self {
        let view = View::new(
            Arc::clone(cns.vcenter()),
            &[
                "VirtualMachine",
                "Datastore",
                "HostSystem",
                "ComputeResource",
                "Folder",
                "Datacenter",
            ],
        );
        Self {
            pbm: Pbm::new(Arc::clone(cns.vcenter())),
            datastores: View::new(Arc::clone(cns.vcenter()), &["Datastore"]),
            cns,
            view,
            cluster_id,
            max_attachments,
            creating: Mutex::new(HashMap::new()),
            in_flight: InFlight::new(None),
            topology: None,
            no_associations: AtomicBool::new(false),
            max_snapshots: snapshots::DEFAULT_MAX_SNAPSHOTS,
            restores: InFlight::new(None),
            cutting: InFlight::new(None),
        }
    }

    /// At most `n` snapshots a volume (0: vsphere-csi-driver's default, 3).
    pub fn with_max_snapshots(mut self, n: u64) -> Self {
        if n > 0 {
            self.max_snapshots = n;
        }
        self
    }

    /// Volumes placed by zone when `config`'s `[Labels]` names a zone or region
    /// category (as the ccm places nodes); without, every volume is usable everywhere.
    pub fn with_topology(mut self, config: &Config) -> Self {
        self.topology = config.zoned().then(|| Topology {
            zone_category: config.zone_category.clone(),
            region_category: config.region_category.clone(),
            tags: Tags::new(Arc::clone(self.cns.vcenter())),
        });
        self
    }

    /// Hosts, datastores and zones, when volumes have places.
    async fn places(&self) -> Result<Option<Places>> {
        match &self.topology {
            Some(t) => Ok(Some(t.read(&self.view).await?)),
            None => Ok(None),
        }
    }

    /// Creates in flight recorded in `dir` too, so that a restarted process's retry
    /// waits for the task its predecessor started (the csi's `--controller-state-dir`).
    pub fn with_state_dir(mut self, dir: PathBuf) -> Self {
        self.in_flight = InFlight::new(Some(dir.join("vsphere-creates")));
        self.restores = InFlight::new(Some(dir.join("vsphere-restores")));
        self.cutting = InFlight::new(Some(dir.join("vsphere-snapshots")));
        self
    }

    /// The VMs and their virtual disks (where volumes are attached), or the datastores:
    /// one PropertyCollector call either way, the VMs' devices being most of its size on
    /// a large inventory, so an operation reads only the part it needs.
    async fn read(&self, parts: Parts) -> Result<Inventory> {
        let spec: (&str, &[&str]) = match parts {
            Parts::Names => ("VirtualMachine", &["name", "guest.hostName"]),
            Parts::Datastores => ("Datastore", &["summary"]),
        };
        let view = match parts {
            Parts::Datastores => &self.datastores,
            Parts::Names => &self.view,
        };
        let props = view.retrieve(&[spec]).await?;
        let mut inv = Inventory::default();
        for p in props {
            if p.obj.kind == "Datastore" {
                let s = p.get("summary").cloned().unwrap_or_default();
                if s.text_at(&["accessible"]) == Some("true") {
                    let free = s
                        .text_at(&["freeSpace"])
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let url = s.text_at(&["url"]).unwrap_or_default();
                    inv.datastores.push(placement::Datastore {
                        moref: p.obj.clone(),
                        url: url.trim_end_matches('/').to_owned(),
                        free,
                    });
                }
                continue;
            }
            let node = holders::node_name(&p);
            inv.vms.insert(node, p.obj);
        }
        Ok(inv)
    }

    /// The volumes one VM holds (volume id, disk UUID), from its own devices alone; a VM
    /// that is gone is `NotFound`.
    async fn vm_volumes(&self, vm: &Moref) -> Result<Vec<(String, String)>> {
        let p = properties(self.cns.vcenter(), vm, &["config.hardware.device"]).await?;
        Ok(p.get("config.hardware.device")
            .map(volume_disks)
            .unwrap_or_default())
    }

    /// `v` as a disk, placed where `places` say its datastore is reached (`prefer`:
    /// the zone it was made for, among several).
    fn disk_of(
        &self,
        v: Volume,
        holders: &Holders,
        places: Option<&Places>,
        prefer: Option<&Zone>,
    ) -> Disk {
        let zone = places
            .map(|p| p.zone_of(&v.datastore_url, prefer))
            .unwrap_or_default();
        let attachments = holders
            .get(&v.id)
            .into_iter()
            .flatten()
            .map(|(node, uuid)| attachment(node, uuid))
            .collect();
        let condition = match v.health.as_str() {
            "" | "green" => DiskCondition::Healthy,
            other => DiskCondition::Abnormal(format!("CNS health {other}")),
        };
        // The state directory's record (a restore made without a PV name has no entity to
        // carry it), else the volume's CNS metadata (a new pod's empty state directory).
        let source = self
            .restores
            .get(&v.name)
            .map(|s| s.id)
            .or_else(|| v.restored_from.clone())
            .map(overcast_cloud::DiskSource::Snapshot);
        Disk {
            id: v.id,
            name: v.name,
            size_bytes: v.capacity_mb * MIB,
            zone,
            parameters: BTreeMap::new(),
            metadata: v.metadata,
            attachments,
            condition,
            source,
        }
    }

    /// The volume of `id`, this cluster's: one another cluster's id marks (a cluster
    /// sharing the vCenter, or vsphere-csi-driver's before a switch that did not carry
    /// its `cluster-id` over) is refused, never touched.
    async fn volume(&self, id: &str) -> Result<Volume> {
        if !volume_id(id) {
            return Err(not_found(id));
        }
        let v = self
            .cns
            .query(&Filter {
                ids: vec![id.to_owned()],
                ..Filter::default()
            })
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| not_found(id))?;
        if !v.cluster_id.is_empty() && v.cluster_id != self.cluster_id {
            return Err(CloudError::FailedPrecondition(format!(
                "volume {id} is cluster {:?}'s (its CNS containerCluster), not this \
                 cluster's ({:?}): left alone; a cluster switched from vsphere-csi-driver \
                 sets that driver's cluster id as [Global] cluster-id",
                v.cluster_id, self.cluster_id
            )));
        }
        Ok(v)
    }

    async fn by_name(&self, name: &str) -> Result<Option<Volume>> {
        Ok(self
            .cns
            .query(&Filter {
                names: vec![name.to_owned()],
                cluster_ids: vec![self.cluster_id.clone()],
                ..Filter::default()
            })
            .await?
            .into_iter()
            .next())
    }
}

#[async_trait]
impl Disks for VsphereDisks {
    /// The zones hosts are tagged with; none known (no categories, no tags): one
    /// zone that is everywhere.
    async fn zones(&self) -> Result<Vec<Zone>> {
        let zones = self.places().await?.map(|p| p.zones()).unwrap_or_default();
        Ok(if zones.is_empty() {
            vec![Zone::default()]
        } else {
            zones
        })
    }

    fn size_granularity(&self) -> u64 {
        MIB
    }

    fn max_disk_size(&self) -> u64 {
        MAX_DISK
    }

    fn max_attachments_per_node(&self) -> u64 {
        self.max_attachments
    }

    /// CNS volumes are thin unless a storage policy says otherwise.
    fn overcommits(&self, _parameters: &BTreeMap<String, String>) -> bool {
        true
    }

    fn validate_parameters(&self, parameters: &BTreeMap<String, String>) -> Result<()> {
        for (k, v) in parameters {
            match k.to_ascii_lowercase().as_str() {
                PARAM_DATASTORE_URL | PARAM_FSTYPE => {}
                PARAM_STORAGE_POLICY if v.trim().is_empty() => {
                    return Err(CloudError::InvalidArgument(format!("{k} is empty")))
                }
                PARAM_STORAGE_POLICY => {}
                _ => {
                    return Err(CloudError::InvalidArgument(format!(
                    "unknown StorageClass parameter {k:?} (vSphere takes {PARAM_DATASTORE_URL}, \
                         {PARAM_STORAGE_POLICY}, {PARAM_FSTYPE})"
                )))
                }
            }
        }
        Ok(())
    }

    /// CNS keeps no class parameters, so what a volume is says what it was made with: a
    /// `datastoreurl` asked is its datastore (a restore's is its snapshot's, whatever the
    /// class says), a `storagepolicyname` its profile; `fstype` shapes what the node
    /// makes, not the volume. (vsphere-csi-driver compares none: it answers a repeated
    /// create from its record of the name.)
    async fn made_with(&self, disk: &Disk, parameters: &BTreeMap<String, String>) -> Result<bool> {
        let v = self.volume(&disk.id).await?;
        for (k, want) in parameters {
            match k.to_ascii_lowercase().as_str() {
                PARAM_DATASTORE_URL
                    if disk.source.is_none() && !placement::same_url(&v.datastore_url, want) =>
                {
                    return Ok(false)
                }
                PARAM_STORAGE_POLICY => {
                    let profile = self
                        .pbm
                        .policies()
                        .await?
                        .into_iter()
                        .find(|p| &p.name == want);
                    if profile.is_none_or(|p| p.id != v.storage_policy_id) {
                        return Ok(false);
                    }
                }
                _ => {}
            }
        }
        Ok(true)
    }

    async fn create_disk(&self, spec: DiskSpec) -> Result<Disk> {
        self.create(spec).await
    }

    async fn disk(&self, id: &str) -> Result<Disk> {
        self.disk_with(id, Attachments::All).await
    }

    /// The volume from CNS, and its holders as asked: one node's VM, the VMs the
    /// vCenter says hold it, or none.
    async fn disk_with(&self, id: &str, wanted: Attachments<'_>) -> Result<Disk> {
        let v = self.volume(id).await?;
        let holders = match wanted {
            Attachments::All => self.holders(std::slice::from_ref(&v)).await?,
            Attachments::On(node) => self.held_on(id, node).await?,
            Attachments::Ignored => Holders::new(),
        };
        let places = self.places().await?;
        Ok(self.disk_of(v, &holders, places.as_ref(), None))
    }

    /// Without its holders: a repeated CreateVolume, what asks by name, answers with
    /// none, and on a vCenter that cannot say which VMs hold a disk they cost every VM.
    async fn disk_by_name(&self, name: &str) -> Result<Option<Disk>> {
        let Some(v) = self.by_name(name).await? else {
            return Ok(None);
        };
        let places = self.places().await?;
        Ok(Some(self.disk_of(
            v,
            &Holders::new(),
            places.as_ref(),
            None,
        )))
    }

    async fn list_disks(&self) -> Result<Vec<Disk>> {
        let volumes = self
            .cns
            .query(&Filter {
                cluster_ids: vec![self.cluster_id.clone()],
                ..Filter::default()
            })
            .await?;
        let holders = self.holders(&volumes).await?;
        let places = self.places().await?;
        Ok(volumes
            .into_iter()
            .map(|v| self.disk_of(v, &holders, places.as_ref(), None))
            .collect())
    }

    /// CNS itself refuses to delete a volume a VM holds (`ResourceInUse`, "The resource
    /// 'volume' is in use."), as vsphere-csi-driver relies on: no VM is read, so a delete
    /// costs the same whatever the inventory's size. The volume is read first: another
    /// cluster's is refused.
    async fn delete_disk(&self, id: &str) -> Result<()> {
        let volume = self.volume(id).await?;
        self.refuse_with_snapshots(id, Act::Delete).await?;
        match self.cns.delete(id).await {
            Err(CloudError::Busy(m)) if m.contains("ResourceInUse") => Err(CloudError::InUse(
                format!("volume {id} is attached to a VM ({m})"),
            )),
            Ok(()) => {
                self.restores.forget(&volume.name);
                Ok(())
            }
            other => other,
        }
    }

    /// The node's VM found by its name and its own devices read (upstream reads the one
    /// VM concerned too): calls and bytes do not grow with the inventory. Whether another
    /// VM holds the volume is CNS's to say: it refuses the attach (`ResourceInUse`).
    async fn attach_disk(&self, id: &str, node: &str, _readonly: bool) -> Result<Attachment> {
        let vm = self.node_vm(node).await?.ok_or_else(|| no_instance(node))?;
        let volume = self.volume(id).await?;
        let held = match self.vm_volumes(&vm).await {
            Err(CloudError::NotFound { .. }) => return Err(no_instance(node)),
            other => other?,
        };
        if let Some((_, uuid)) = held.iter().find(|(v, _)| v == id) {
            return Ok(attachment(node, uuid));
        }
        if held.len() as u64 >= self.max_attachments {
            return Err(CloudError::ResourceExhausted(format!(
                "node {node} holds {} volumes, its limit",
                held.len()
            )));
        }
        match self.cns.attach(id, &vm).await {
            Ok(uuid) => Ok(attachment(node, &disk_uuid(&uuid))),
            Err(CloudError::Busy(m)) if m.contains("ResourceInUse") => {
                self.in_use(&volume, node, &vm, &m).await
            }
            Err(e) => Err(e),
        }
    }

    /// A VM that is gone, or a volume not on it, is detached already.
    async fn detach_disk(&self, id: &str, node: &str) -> Result<()> {
        if !volume_id(id) {
            return Err(not_found(id));
        }
        // The node's VM through the SearchIndex and then its devices alone; else (no guest
        // host name, or two VMs answering to it) the VMs' names, then its devices alone.
        let found = search::vms_by_dns_name(self.cns.vcenter(), None, node).await?;
        let (vm, held) = if let [vm] = found.as_slice() {
            match properties(self.cns.vcenter(), vm, &["config.hardware.device"]).await {
                Ok(p) => {
                    let held = p
                        .get("config.hardware.device")
                        .is_some_and(|d| volume_disks(d).iter().any(|(v, _)| v == id));
                    (vm.clone(), held)
                }
                Err(CloudError::NotFound { .. }) => return Ok(()),
                Err(e) => return Err(e),
            }
        } else {
            let Some(vm) = self.read(Parts::Names).await?.vms.get(node).cloned() else {
                return Ok(());
            };
            match self.vm_volumes(&vm).await {
                Ok(held) => {
                    let held = held.iter().any(|(v, _)| v == id);
                    (vm, held)
                }
                Err(CloudError::NotFound { .. }) => return Ok(()),
                Err(e) => return Err(e),
            }
        };
        if !held {
            return Ok(());
        }
        match self.cns.detach(id, &vm).await {
            Ok(()) | Err(CloudError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn expand_disk(&self, id: &str, size_bytes: u64) -> Result<u64> {
        let v = self.volume(id).await?;
        let have = v.capacity_mb * MIB;
        if size_bytes <= have {
            return Ok(have);
        }
        self.refuse_with_snapshots(id, Act::Expand).await?;
        let mb = size_bytes.div_ceil(MIB);
        self.cns.extend(id, mb).await?;
        Ok(mb * MIB)
    }

    /// The most one volume can get: the freest datastore's space (in `zone`: of those
    /// every host of it mounts).
    async fn available_capacity(&self, zone: Option<&Zone>) -> Result<u64> {
        self.available_capacity_for(zone, &BTreeMap::new()).await
    }

    async fn available_capacity_for(
        &self,
        zone: Option<&Zone>,
        parameters: &BTreeMap<String, String>,
    ) -> Result<u64> {
        let places = match self.places().await? {
            Some(p) => p,
            None => self.read(Parts::Datastores).await?.places(),
        };
        let url = parameters
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(PARAM_DATASTORE_URL))
            .map(|(_, v)| v.as_str());
        let everywhere = Zone::default();
        Ok(places.free_in(zone.unwrap_or(&everywhere), url))
    }

    async fn node_exists(&self, node: &str) -> Result<bool> {
        Ok(self.node_vm(node).await?.is_some())
    }

    fn snapshots(&self) -> bool {
        true
    }
    async fn create_snapshot(&self, spec: SnapshotSpec) -> Result<Snapshot> {
        self.cut(spec).await
    }
    async fn snapshot(&self, id: &str) -> Result<Snapshot> {
        self.get_snapshot(id).await
    }
    async fn list_snapshots_page(
        &self,
        source: Option<&str>,
        after: Option<&str>,
        max: usize,
    ) -> Result<(Vec<Snapshot>, bool)> {
        self.snapshots_page(source, after, max).await
    }
    async fn delete_snapshot(&self, id: &str) -> Result<()> {
        self.remove_snapshot(id).await
    }

    async fn probe(&self) -> Result<()> {
        self.cns.vcenter().content().await.map(|_| ())
    }
}

#[cfg(test)]
mod tests;
