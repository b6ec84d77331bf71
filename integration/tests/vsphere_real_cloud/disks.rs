//! The provider conformance suite on vcsim's CNS. vcsim's CNS is bookkeeping: its attach
//! puts no disk on the VM, so the test plays the ESXi host's part — after an attach it adds
//! to the VM the virtual disk a real host would (`vDiskId` = the volume, `backing.uuid` =
//! the disk UUID CNS answered), after a detach it takes it away — through ReconfigVM, and
//! the provider reads attachments from the VMs' devices as it does on a real vCenter.

use std::collections::BTreeMap;

use async_trait::async_trait;
use overcast_cloud::conformance::{self, DiskHarness};
use overcast_cloud::{Attachment, Disk, DiskSpec, Disks, Result, Zone};
use overcast_cloud_vsphere::cns::Cns;
use overcast_cloud_vsphere::disks::{VsphereDisks, CTX_DISK_UUID};
use overcast_cloud_vsphere::inventory::properties;
use overcast_cloud_vsphere::session::Endpoint;
use overcast_cloud_vsphere::soap::{el, Moref};
use overcast_cloud_vsphere::task;

use super::*;

/// The ESXi host's part of an attach and a detach, around the provider.
struct Host {
    disks: VsphereDisks,
    vc: Arc<Vcenter>,
}

impl Host {
    async fn vm(&self, node: &str) -> Option<Moref> {
        super::sim::vms(&self.vc)
            .await
            .into_iter()
            .find(|(n, _)| n == node)
            .map(|(_, m)| m)
    }

    /// The VM's virtual disks: (key, volume id) — and the pvscsi controller's key and the
    /// units it has taken.
    async fn devices(&self, vm: &Moref) -> (Vec<(String, String)>, String, Vec<u32>) {
        let p = properties(&self.vc, vm, &["config.hardware.device"])
            .await
            .unwrap();
        let all = p.get("config.hardware.device").cloned().unwrap_or_default();
        let controller = all
            .children
            .iter()
            .find(|d| d.xsi_type.as_deref() == Some("ParaVirtualSCSIController"))
            .and_then(|d| d.text_at(&["key"]))
            .expect("a pvscsi controller")
            .to_owned();
        let mut disks = Vec::new();
        let mut units = Vec::new();
        for d in all
            .children
            .iter()
            .filter(|d| d.xsi_type.as_deref() == Some("VirtualDisk"))
        {
            if d.text_at(&["controllerKey"]) == Some(controller.as_str()) {
                units.extend(
                    d.text_at(&["unitNumber"])
                        .and_then(|u| u.parse::<u32>().ok()),
                );
            }
            if let Some(id) = d.text_at(&["vDiskId", "id"]) {
                disks.push((d.text_at(&["key"]).unwrap().to_owned(), id.to_owned()));
            }
        }
        (disks, controller, units)
    }

    async fn reconfigure(&self, vm: &Moref, change: String) {
        let params =
            vm.xml("_this") + &format!("<spec><deviceChange>{change}</deviceChange></spec>");
        let r = self
            .vc
            .call(Endpoint::Vim, "ReconfigVM_Task", &params, false)
            .await
            .unwrap();
        let t = r.child("returnval").and_then(Moref::of).unwrap();
        task::wait(&self.vc, &t, "ReconfigVM_Task", Duration::from_secs(30))
            .await
            .unwrap();
    }
}

#[async_trait]
impl Disks for Host {
    async fn zones(&self) -> Result<Vec<Zone>> {
        self.disks.zones().await
    }
    fn size_granularity(&self) -> u64 {
        self.disks.size_granularity()
    }
    fn max_disk_size(&self) -> u64 {
        self.disks.max_disk_size()
    }
    fn max_attachments_per_node(&self) -> u64 {
        self.disks.max_attachments_per_node()
    }
    fn overcommits(&self, p: &BTreeMap<String, String>) -> bool {
        self.disks.overcommits(p)
    }
    fn validate_parameters(&self, p: &BTreeMap<String, String>) -> Result<()> {
        self.disks.validate_parameters(p)
    }
    async fn create_disk(&self, spec: DiskSpec) -> Result<Disk> {
        self.disks.create_disk(spec).await
    }
    async fn disk(&self, id: &str) -> Result<Disk> {
        self.disks.disk(id).await
    }
    async fn disk_by_name(&self, name: &str) -> Result<Option<Disk>> {
        self.disks.disk_by_name(name).await
    }
    async fn list_disks(&self) -> Result<Vec<Disk>> {
        self.disks.list_disks().await
    }
    async fn delete_disk(&self, id: &str) -> Result<()> {
        self.disks.delete_disk(id).await
    }
    async fn attach_disk(&self, id: &str, node: &str, readonly: bool) -> Result<Attachment> {
        let a = self.disks.attach_disk(id, node, readonly).await?;
        let vm = self
            .vm(node)
            .await
            .expect("the VM the provider attached to");
        let (disks, controller, units) = self.devices(&vm).await;
        if !disks.iter().any(|(_, v)| v == id) {
            let unit = (1..16)
                .find(|u| *u != 7 && !units.contains(u))
                .expect("a free unit");
            let uuid = &a.publish_context[CTX_DISK_UUID];
            self.reconfigure(
                &vm,
                format!(
                    "<operation>add</operation><fileOperation>create</fileOperation>\
                     <device xsi:type=\"VirtualDisk\"><key>-1</key>\
                     <backing xsi:type=\"VirtualDiskFlatVer2BackingInfo\"><fileName>[LocalDS_0] {node}/{id}.vmdk</fileName>\
                     <diskMode>persistent</diskMode>{}</backing>{}{}<capacityInKB>1024</capacityInKB>\
                     <vDiskId>{}</vDiskId></device>",
                    el("uuid", uuid),
                    el("controllerKey", &controller),
                    el("unitNumber", &unit.to_string()),
                    el("id", id)
                ),
            )
            .await;
        }
        Ok(a)
    }
    async fn detach_disk(&self, id: &str, node: &str) -> Result<()> {
        self.disks.detach_disk(id, node).await?;
        if let Some(vm) = self.vm(node).await {
            let (disks, _, _) = self.devices(&vm).await;
            if let Some((key, _)) = disks.iter().find(|(_, v)| v == id) {
                self.reconfigure(
                    &vm,
                    format!(
                        "<operation>remove</operation><device xsi:type=\"VirtualDisk\">{}</device>",
                        el("key", key)
                    ),
                )
                .await;
            }
        }
        Ok(())
    }
    async fn expand_disk(&self, id: &str, size_bytes: u64) -> Result<u64> {
        self.disks.expand_disk(id, size_bytes).await
    }
    async fn available_capacity(&self, zone: Option<&Zone>) -> Result<u64> {
        self.disks.available_capacity(zone).await
    }
    async fn node_exists(&self, node: &str) -> Result<bool> {
        self.disks.node_exists(node).await
    }
    async fn probe(&self) -> Result<()> {
        self.disks.probe().await
    }
}

/// The conformance suite: idempotent create (16 concurrent creates of one name make one
/// volume), attach and detach twice and from a VM that does not exist, an attached volume
/// not deleted, expansion, deletion final, listing; the in-between-state rules say they
/// were skipped (vcsim's CNS has no such states).
#[tokio::test]
async fn the_vsphere_provider_passes_the_conformance_suite_on_vcsim() {
    let Some(sim) = Vcsim::start("disks", &[]) else {
        return;
    };
    let metrics = Arc::new(ApiMetrics::unregistered());
    let vc = vcenter(&sim, &metrics);
    let node = super::sim::vms(&vc).await[0].0.clone();
    let disks = VsphereDisks::new(Cns::new(Arc::clone(&vc)), "overcast-it".into(), 59);
    let harness = DiskHarness {
        disks: Arc::new(Host { disks, vc }),
        node,
        gone_node: "no-such-vm".into(),
        zone: Zone::default(),
        parameters: BTreeMap::new(),
        prefix: "it-".into(),
        states: None,
        held_for: Duration::from_secs(2),
    };
    conformance::disks(&harness).await;
}
