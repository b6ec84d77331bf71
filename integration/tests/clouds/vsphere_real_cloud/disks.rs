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
use overcast_cloud_vsphere::soap::Moref;

use super::*;

/// The ESXi host's part of an attach and a detach, around the provider.
struct Host {
    disks: VsphereDisks,
    vc: Arc<Vcenter>,
    /// The node's name (its guest's host name), its VM and the VM's name.
    node: (String, Moref, String),
    /// The provider's calls: the host does its part only when CNS was asked to (a
    /// provider that skipped CnsAttachVolume or CnsDetachVolume is seen failing).
    metrics: Arc<ApiMetrics>,
}

impl Host {
    async fn vm(&self, node: &str) -> Option<Moref> {
        (node == self.node.0).then(|| self.node.1.clone())
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
    async fn made_with(&self, disk: &Disk, p: &BTreeMap<String, String>) -> Result<bool> {
        self.disks.made_with(disk, p).await
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
        let asked = self.metrics.requests("CnsAttachVolume");
        let a = self.disks.attach_disk(id, node, readonly).await?;
        let vm = self
            .vm(node)
            .await
            .expect("the VM the provider attached to");
        if self.metrics.requests("CnsAttachVolume") == asked {
            return Ok(a);
        }
        super::sim::plug_disk(
            &self.vc,
            &vm,
            &self.node.2,
            id,
            &a.publish_context[CTX_DISK_UUID],
        )
        .await;
        Ok(a)
    }
    async fn detach_disk(&self, id: &str, node: &str) -> Result<()> {
        let asked = self.metrics.requests("CnsDetachVolume");
        self.disks.detach_disk(id, node).await?;
        if self.metrics.requests("CnsDetachVolume") == asked {
            return Ok(());
        }
        if let Some(vm) = self.vm(node).await {
            super::sim::unplug_disk(&self.vc, &vm, id).await;
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
    // The node is known by its guest's host name (found through the SearchIndex); the
    // csi test's node is known by its VM's name (found in the inventory).
    let (vm_name, vm) = super::sim::vms(&vc).await[0].clone();
    let node = "overcast-it-node".to_owned();
    overcast_integration::vcsim::set_host_name(&vc, &vm, &node).await;
    // The provider talks to vcsim through a front playing vCenter's refusal to delete a
    // held volume; the host's part goes straight to vcsim.
    let front = overcast_integration::vcsim_front::VcsimFront::start(
        &sim,
        overcast_integration::vcsim_front::HeldVolumes::new(vcenter(
            &sim,
            &Arc::new(ApiMetrics::unregistered()),
        )),
    )
    .await;
    let through = vcenter_at(&sim, front.port, &metrics);
    let disks = VsphereDisks::new(Cns::new(through), "overcast-it".into(), 59);
    let harness = DiskHarness {
        disks: Arc::new(Host {
            disks,
            vc,
            node: (node.clone(), vm, vm_name),
            metrics,
        }),
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

/// A StorageClass's `storagepolicyname` becomes the volume's SPBM profile (the name looked
/// up among vcsim's policies); a name no policy has is INVALID_ARGUMENT, nothing made.
#[tokio::test]
async fn a_storage_policy_by_name_is_the_volume_s_profile() {
    let Some(sim) = Vcsim::start("storage policy", &[]) else {
        return;
    };
    let vc = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let policy = overcast_cloud_vsphere::pbm::Pbm::new(Arc::clone(&vc))
        .policies()
        .await
        .unwrap()
        .remove(0);
    let disks = VsphereDisks::new(Cns::new(Arc::clone(&vc)), "overcast-it".into(), 59);
    let spec = |name: &str, policy: &str| DiskSpec {
        name: name.into(),
        size_bytes: 1 << 30,
        zone: Zone::default(),
        parameters: [("storagepolicyname".to_owned(), policy.to_owned())].into(),
        metadata: BTreeMap::new(),
        source: None,
    };
    let d = disks
        .create_disk(spec("pvc-policy", &policy.name))
        .await
        .unwrap();
    let v = Cns::new(Arc::clone(&vc))
        .query(&overcast_cloud_vsphere::cns::Filter {
            ids: vec![d.id.clone()],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(v[0].storage_policy_id, policy.id, "{policy:?}");
    let e = disks
        .create_disk(spec("pvc-nopolicy", "no such policy"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, overcast_cloud::CloudError::InvalidArgument(_)),
        "{e:?}"
    );
    assert!(disks.disk_by_name("pvc-nopolicy").await.unwrap().is_none());
}

/// The same suite, and the instance rules, against a real vCenter when one is given:
/// `OVERCAST_TEST_VSPHERE_CONF` (a vsphere.conf whose first vCenter and datacenter are
/// used; volumes are made on any accessible datastore, or on the one
/// `OVERCAST_TEST_VSPHERE_DATASTORE_URL` names) and `OVERCAST_TEST_VSPHERE_NODE` (the
/// guest host name of a running VM with VMware Tools, volumes are attached to). There the
/// ESXi host attaches for real: no test plays it. Skipped, saying so, otherwise.
#[tokio::test]
async fn the_vsphere_provider_passes_the_conformance_suite_on_a_real_vcenter() {
    let (Ok(conf), Ok(node)) = (
        std::env::var("OVERCAST_TEST_VSPHERE_CONF"),
        std::env::var("OVERCAST_TEST_VSPHERE_NODE"),
    ) else {
        overcast_integration::say_skipped(
            "set OVERCAST_TEST_VSPHERE_CONF and OVERCAST_TEST_VSPHERE_NODE to run the vSphere conformance suite against a real vCenter",
        );
        return;
    };
    let config = overcast_cloud_vsphere::Config::load(Some(std::path::Path::new(&conf))).unwrap();
    let vc = &config.vcenters[0];
    let client = overcast_cloud_vsphere::provider::connect(vc, None).unwrap();
    let parameters: BTreeMap<String, String> = std::env::var("OVERCAST_TEST_VSPHERE_DATASTORE_URL")
        .ok()
        .map(|u| ("datastoreurl".to_owned(), u))
        .into_iter()
        .collect();
    let harness = DiskHarness {
        disks: Arc::new(VsphereDisks::new(
            Cns::new(Arc::clone(&client)),
            "overcast-it".into(),
            59,
        )),
        node: node.clone(),
        gone_node: "overcast-it-no-such-vm".into(),
        zone: Zone::default(),
        parameters,
        prefix: format!("overcast-it-{}-", std::process::id()),
        states: None,
        held_for: Duration::from_secs(10),
    };
    conformance::disks(&harness).await;
    let instances = overcast_cloud_vsphere::instances::VsphereInstances::new(
        vec![overcast_cloud_vsphere::instances::Source::new(
            client,
            vc.datacenters.clone(),
            vc.ip_family.clone(),
        )],
        &config,
    );
    conformance::instances(&instances, &node).await;
}
