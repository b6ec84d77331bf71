//! Which VMs hold a volume, and under which disk UUID — read so that no RPC's cost grows
//! with the inventory: an operation on one node reads that node's VM alone; a listing asks
//! the vCenter which VMs hold the volumes listed (First Class Disk associations, one call)
//! and reads those VMs alone. Only a vCenter that cannot answer that (vcsim, one before
//! 6.7) has every VM's devices read, as before. Whatever the route, a holder is a VM whose
//! own devices carry the volume (`vDiskId`): an association the devices do not confirm is
//! not an attachment.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;

use overcast_cloud::{Attachment, CloudError, Result};

use super::devices::{attachment, no_instance, volume_disks};
use super::{Parts, VsphereDisks};
use crate::cns::Volume;
use crate::inventory::{properties_of, Props};
use crate::search;
use crate::soap::Moref;
use crate::vstorage::{self, Unanswered};

/// VMs whose devices one call reads on the every-VM route.
const DEVICE_BATCH: usize = 100;

/// Volume id → (node name, disk UUID) of each VM holding it.
pub(super) type Holders = HashMap<String, Vec<(String, String)>>;

/// What a VM's node is called: its guest's host name, else its name (as the inventory
/// read names them).
pub(super) fn node_name(p: &Props) -> String {
    p.text("guest.hostName")
        .filter(|h| !h.is_empty())
        .or(p.text("name"))
        .unwrap_or_default()
        .to_owned()
}

impl VsphereDisks {
    /// The node's VM: by its guest's host name through the SearchIndex (one call, not
    /// the inventory), else from the VMs' names (no devices), which also know a VM by
    /// its name (a guest whose tools report no host name) and settle two VMs answering
    /// to one.
    pub(super) async fn node_vm(&self, node: &str) -> Result<Option<Moref>> {
        let found = search::vms_by_dns_name(self.cns.vcenter(), None, node).await?;
        if let [one] = found.as_slice() {
            return Ok(Some(one.clone()));
        }
        Ok(self.read(Parts::Names).await?.vms.get(node).cloned())
    }

    /// Whether `node`'s VM holds volume `id`: that VM's devices alone. No VM of that
    /// name (or one gone meanwhile) holds nothing.
    pub(super) async fn held_on(&self, id: &str, node: &str) -> Result<Holders> {
        let Some(vm) = self.node_vm(node).await? else {
            return Ok(Holders::new());
        };
        let held = match self.vm_volumes(&vm).await {
            Err(CloudError::NotFound { .. }) => Vec::new(),
            other => other?,
        };
        Ok(held
            .into_iter()
            .filter(|(v, _)| v == id)
            .map(|(v, uuid)| (v, vec![(node.to_owned(), uuid)]))
            .collect())
    }

    /// What CNS's `ResourceInUse` for an attach of `volume` to `node`'s VM `vm` means. As
    /// vsphere-csi-driver does, the requested VM is read again: CNS refuses an attach it
    /// is still making (a publish retried while the host attaches) as it refuses one to
    /// another VM, and once the disk is there the attach is done. Otherwise another VM
    /// named as a holder is FAILED_PRECONDITION (a block volume is on one node); none
    /// named (the attach to this VM still under way, or no answer) is ABORTED, retried.
    pub(super) async fn in_use(
        &self,
        volume: &Volume,
        node: &str,
        vm: &Moref,
        fault: &str,
    ) -> Result<Attachment> {
        let id = volume.id.as_str();
        match self.vm_volumes(vm).await {
            Ok(held) => {
                if let Some((_, uuid)) = held.iter().find(|(v, _)| v == id) {
                    return Ok(attachment(node, uuid));
                }
            }
            Err(CloudError::NotFound { .. }) => return Err(no_instance(node)),
            Err(e) => return Err(e),
        }
        let others: Vec<String> = match self.holders(std::slice::from_ref(volume)).await {
            Ok(found) => found
                .get(id)
                .into_iter()
                .flatten()
                .map(|(holder, _)| holder.clone())
                .filter(|holder| holder != node)
                .collect(),
            Err(_) => Vec::new(),
        };
        if others.is_empty() {
            Err(CloudError::Busy(format!(
                "volume {id} is in use and not yet on node {node}'s VM: an attach still under \
                 way? ({fault})"
            )))
        } else {
            Err(CloudError::FailedPrecondition(format!(
                "volume {id} is attached to {}; a block volume is attached to one node ({fault})",
                others.join(", ")
            )))
        }
    }

    /// Every VM holding any of `volumes`.
    pub(super) async fn holders(&self, volumes: &[Volume]) -> Result<Holders> {
        if volumes.is_empty() {
            return Ok(Holders::new());
        }
        if !self.no_associations.load(Ordering::Relaxed) {
            if let Some(found) = self.associated(volumes).await? {
                return Ok(found);
            }
        }
        self.every_holder().await
    }

    /// The holders of every volume from every VM's devices — the route of a vCenter that
    /// cannot say which VMs hold a disk. The VMs are listed without their devices, then
    /// read [`DEVICE_BATCH`] at a time, each batch folded into the holders and dropped:
    /// the memory this takes follows a batch, not the inventory (one read of every VM's
    /// devices held 293 MB at 2,000 VMs — a vcsim answers such a read whole, where a
    /// vCenter pages it). A VM removed meanwhile holds nothing.
    async fn every_holder(&self) -> Result<Holders> {
        let vms: Vec<Moref> = self
            .view
            .retrieve(&[("VirtualMachine", &["name"])])
            .await?
            .into_iter()
            .map(|p| p.obj)
            .collect();
        let paths = ["name", "guest.hostName", "config.hardware.device"];
        let mut holders = Holders::new();
        for batch in vms.chunks(DEVICE_BATCH) {
            let props = match properties_of(self.cns.vcenter(), batch, &paths).await {
                Err(CloudError::NotFound { .. }) => {
                    let mut one_by_one = Vec::new();
                    for vm in batch {
                        match properties_of(self.cns.vcenter(), std::slice::from_ref(vm), &paths)
                            .await
                        {
                            Ok(p) => one_by_one.extend(p),
                            Err(CloudError::NotFound { .. }) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    one_by_one
                }
                other => other?,
            };
            fold(&mut holders, &props);
        }
        Ok(holders)
    }

    /// The holders by the vCenter's associations, confirmed by those VMs' devices; `None`
    /// when the associations cannot say (then every VM is read).
    async fn associated(&self, volumes: &[Volume]) -> Result<Option<Holders>> {
        // A First Class Disk is asked about with its datastore: from the volume's URL.
        let datastores: BTreeMap<String, Moref> = self
            .datastores
            .retrieve(&[("Datastore", &["summary.url"])])
            .await?
            .into_iter()
            .filter_map(|p| {
                let url = p.text("summary.url")?.trim_end_matches('/').to_owned();
                Some((url, p.obj))
            })
            .collect();
        let mut disks = Vec::with_capacity(volumes.len());
        for v in volumes {
            match datastores.get(v.datastore_url.trim_end_matches('/')) {
                Some(ds) => disks.push((v.id.clone(), ds.clone())),
                None => {
                    tracing::debug!(volume = %v.id, datastore = %v.datastore_url, "no datastore of the volume's URL: its holders are read from every VM");
                    return Ok(None);
                }
            }
        }
        let answers = match vstorage::associations(self.cns.vcenter(), &disks).await {
            Ok(a) => a,
            Err(Unanswered::Unsupported(why)) => {
                if !self.no_associations.swap(true, Ordering::Relaxed) {
                    tracing::info!(vcenter = %self.cns.vcenter().server(), %why, "the vCenter does not answer which VMs hold a disk: a volume listing reads every VM's devices");
                }
                return Ok(None);
            }
            Err(Unanswered::Failed(e)) => return Err(e),
        };
        let mut vms: Vec<Moref> = Vec::new();
        for a in &answers {
            match a.fault.as_deref() {
                None => {}
                // Deleted since it was listed: held by none.
                Some("NotFound") => continue,
                Some(other) => {
                    return Err(CloudError::Unavailable(format!(
                        "vsphere: {}: RetrieveVStorageObjectAssociations answered {other} for volume {}",
                        self.cns.vcenter().server(),
                        a.id
                    )))
                }
            }
            for vm in &a.vms {
                let vm = Moref::new("VirtualMachine", vm);
                if !vms.contains(&vm) {
                    vms.push(vm);
                }
            }
        }
        let props = match properties_of(
            self.cns.vcenter(),
            &vms,
            &["name", "guest.hostName", "config.hardware.device"],
        )
        .await
        {
            Ok(p) => p,
            // A VM removed meanwhile, or ids that are not VMs' references (the API
            // reference calls `vmId` the VM's id): the devices of every VM decide.
            Err(CloudError::NotFound { id, .. }) => {
                tracing::debug!(%id, "a VM an association named is not known by that reference: the holders are read from every VM");
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        // Every VM named must answer (a collector may leave an unknown object out rather
        // than fail): one missing would make its volumes look attached nowhere.
        if props.len() < vms.len() {
            tracing::debug!(
                asked = vms.len(),
                answered = props.len(),
                "not every VM an association named answered: the holders are read from every VM"
            );
            return Ok(None);
        }
        let mut holders = Holders::new();
        fold(&mut holders, &props);
        Ok(Some(holders))
    }
}

/// The volumes each of `props`' VMs holds, by its devices, into `holders`.
fn fold(holders: &mut Holders, props: &[Props]) {
    for p in props {
        let node = node_name(p);
        for (volume, uuid) in p
            .get("config.hardware.device")
            .map(volume_disks)
            .unwrap_or_default()
        {
            holders
                .entry(volume)
                .or_default()
                .push((node.clone(), uuid));
        }
    }
}
