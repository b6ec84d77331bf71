//! The DVP provider against a parent cluster: the kit's real API server with the real
//! virtualization CRDs, played by `overcast_integration::dvp_sim` (a controller doing
//! what DVP's does, with real loop devices behind the disks). Runs when
//! `OVERCAST_TEST_KUBECONFIG` names a disposable cluster; says it was skipped otherwise.
//!
//! The same conformance run goes against a real DVP when given one:
//! `OVERCAST_TEST_DVP_KUBECONFIG` (a kubeconfig for the parent), `OVERCAST_TEST_DVP_NAMESPACE`
//! (the namespace of a cluster's VMs, where the test makes and deletes VirtualDisks
//! prefixed `overcast-it-`) and `OVERCAST_TEST_DVP_NODE` (the hostname of one of its
//! running VMs, which gets disks attached and detached).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{DeleteParams, ListParams, PostParams};
use kube::Api;
use overcast_cloud::conformance::{self, DiskHarness};
use overcast_cloud::{CloudError, DiskSpec, Disks, Zone};
use overcast_cloud_dvp::api::{self, VirtualDisk, Vmbda};
use overcast_cloud_dvp::{DvpDisks, DvpInstances, Parent, Waits};
use overcast_cloud_http::ApiMetrics;
use overcast_integration::dvp_sim::{self, DvpSim};
use overcast_integration::real;

/// The tests of this file share the CRDs and take turns with the machine's loop devices.
static PARENT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn waits(attach: Duration) -> Waits {
    Waits {
        disk_ready: Duration::from_secs(30),
        attached: attach,
        detached: Duration::from_secs(30),
        resized: Duration::from_secs(30),
        deleted: Duration::from_secs(30),
    }
}

struct World {
    sim: DvpSim,
    parent: Parent,
    metrics: Arc<ApiMetrics>,
}

impl World {
    async fn new(what: &str, test: &str) -> Option<Self> {
        let path = real::kubeconfig(what)?;
        let client = real::client(&path).await;
        dvp_sim::install_crds(&client).await;
        // What an earlier run's failed test left (its simulator gone, its finalizers not).
        dvp_sim::sweep(&client, &format!("overcast-it-dvp-{test}-")).await;
        let ns = format!("overcast-it-dvp-{test}-{}", std::process::id());
        let sim = DvpSim::start(client.clone(), &ns, Duration::from_millis(100)).await;
        sim.add_vm("vm-worker-1", "worker-1", "10.66.0.11", "parent-a")
            .await;
        let metrics = Arc::new(ApiMetrics::unregistered());
        let parent = Parent::new(client, ns, Arc::clone(&metrics));
        Some(Self {
            sim,
            parent,
            metrics,
        })
    }

    fn disks(&self, attach: Duration) -> DvpDisks {
        DvpDisks::new(self.parent.clone(), Zone::default(), 64, waits(attach))
    }

    fn vmbdas(&self) -> Api<Vmbda> {
        self.parent.vmbdas()
    }

    async fn finish(self) {
        let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.parent.client.clone());
        // The simulator's finalizers must run before it stops: delete what is left first.
        let left = self
            .vmbdas()
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for v in left {
            let _ = self
                .vmbdas()
                .delete(
                    &v.metadata.name.unwrap_or_default(),
                    &DeleteParams::default(),
                )
                .await;
        }
        let disks: Api<VirtualDisk> = self.parent.disks();
        let _ = disks
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
        let _ = real::wait_for::<()>(
            "the simulator's clean-up",
            Duration::from_secs(30),
            async || {
                let n = disks.list(&ListParams::default()).await.ok()?.items.len()
                    + self
                        .vmbdas()
                        .list(&ListParams::default())
                        .await
                        .ok()?
                        .items
                        .len();
                (n == 0).then_some(())
            },
        )
        .await;
        let name = self.sim.namespace.clone();
        drop(self.sim);
        let _ = ns.delete(&name, &DeleteParams::default()).await;
    }
}

fn spec(name: &str) -> DiskSpec {
    DiskSpec {
        name: name.to_owned(),
        size_bytes: 16 << 20,
        zone: Zone::default(),
        parameters: BTreeMap::new(),
        metadata: BTreeMap::from([("csi.storage.k8s.io/pvc/name".to_owned(), "data".to_owned())]),
    }
}

#[tokio::test]
async fn the_dvp_provider_passes_the_conformance_suite_on_the_simulated_parent() {
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the DVP provider's conformance suite", "conf").await else {
        return;
    };
    let disks: Arc<dyn Disks> = Arc::new(world.disks(Duration::from_secs(30)));
    conformance::disks(&DiskHarness {
        disks: Arc::clone(&disks),
        node: "worker-1".into(),
        gone_node: "worker-gone".into(),
        zone: Zone::default(),
        parameters: BTreeMap::new(),
        prefix: "c-".into(),
    })
    .await;
    conformance::instances(&DvpInstances::new(world.parent.clone()), "worker-1").await;

    // Upstream's names and labels, and the device the node will find.
    let made = disks.create_disk(spec("pvc-0001")).await.expect("create");
    let vd = world
        .parent
        .disks()
        .get("pvc-0001")
        .await
        .expect("VirtualDisk");
    assert_eq!(
        vd.metadata.labels.as_ref().unwrap()[api::DISK_NAME_LABEL],
        "pvc-0001"
    );
    assert!(made.size_bytes >= 16 << 20);
    let attachment = disks
        .attach_disk("pvc-0001", "worker-1", false)
        .await
        .expect("attach");
    let v = world
        .vmbdas()
        .get("vmbda-pvc-0001-worker-1")
        .await
        .expect("upstream's VMBDA name");
    let labels = v.metadata.labels.clone().unwrap();
    assert_eq!(labels[api::VMBDA_DISK_LABEL], "pvc-0001");
    assert_eq!(labels[api::VMBDA_VM_LABEL], "worker-1");
    assert_eq!(v.spec.virtual_machine_name, "vm-worker-1");
    let serial = &attachment.publish_context[overcast_cloud::publish::SERIAL];
    assert_eq!(
        serial,
        &api::disk_serial(vd.metadata.uid.as_deref().unwrap())
    );
    let link = world
        .sim
        .by_id
        .join(format!("scsi-0QEMU_QEMU_HARDDISK_{serial}"));
    let device = std::fs::canonicalize(&link).expect("the by-id link resolves");
    assert_eq!(
        Some(device.clone()),
        world.sim.device_of("vmbda-pvc-0001-worker-1")
    );
    assert_eq!(
        overcast_mount::device::size_bytes(&device).expect("size"),
        16 << 20
    );
    // Growing an attached disk grows the device the node sees.
    let grown = disks
        .expand_disk("pvc-0001", 32 << 20)
        .await
        .expect("expand");
    assert_eq!(grown, 32 << 20);
    assert_eq!(
        overcast_mount::device::size_bytes(&device).expect("size"),
        32 << 20
    );
    disks
        .detach_disk("pvc-0001", "worker-1")
        .await
        .expect("detach");
    assert!(!link.exists(), "detach removes the device");
    assert_eq!(world.sim.attached_count(), 0);
    disks.delete_disk("pvc-0001").await.expect("delete");
    assert!(world.metrics.total() > 0);
    world.finish().await;
}

#[tokio::test]
async fn an_attachment_that_does_not_finish_is_retryable_and_says_why() {
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the DVP stuck-attachment test", "stuck").await else {
        return;
    };
    let disks = world.disks(Duration::from_secs(2));
    disks.create_disk(spec("pvc-stuck")).await.expect("create");
    world
        .sim
        .faults
        .stuck_attachments
        .store(true, std::sync::atomic::Ordering::Relaxed);
    match disks.attach_disk("pvc-stuck", "worker-1", false).await {
        Err(e @ CloudError::DeadlineExceeded(_)) => {
            let text = e.to_string();
            assert!(e.is_retryable());
            assert!(
                text.contains("InProgress") && text.contains("hot-plug request was sent"),
                "{text}"
            );
        }
        other => panic!("a stuck attachment: {other:?}"),
    }
    // Once the parent finishes, the retry attaches the same VMBDA.
    world
        .sim
        .faults
        .stuck_attachments
        .store(false, std::sync::atomic::Ordering::Relaxed);
    let disks = world.disks(Duration::from_secs(30));
    disks
        .attach_disk("pvc-stuck", "worker-1", false)
        .await
        .expect("the retry attaches");
    assert_eq!(
        world
            .vmbdas()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    disks
        .detach_disk("pvc-stuck", "worker-1")
        .await
        .expect("detach");
    disks.delete_disk("pvc-stuck").await.expect("delete");
    world.finish().await;
}

#[tokio::test]
async fn a_vm_deleted_mid_attach_leaves_no_attachment_and_detach_from_it_succeeds() {
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the DVP VM-gone test", "gone").await else {
        return;
    };
    world
        .sim
        .add_vm("vm-worker-2", "worker-2", "10.66.0.12", "parent-a")
        .await;
    let disks = Arc::new(world.disks(Duration::from_secs(3)));
    disks.create_disk(spec("pvc-gone")).await.expect("create");
    world
        .sim
        .faults
        .stuck_attachments
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let attach = {
        let disks = Arc::clone(&disks);
        tokio::spawn(async move { disks.attach_disk("pvc-gone", "worker-2", false).await })
    };
    real::wait_for("the VMBDA", Duration::from_secs(10), async || {
        world
            .vmbdas()
            .get_opt("vmbda-pvc-gone-worker-2")
            .await
            .ok()
            .flatten()
    })
    .await;
    world.sim.delete_vm("vm-worker-2").await;
    match attach.await.expect("task") {
        Err(CloudError::NotFound { .. }) => {}
        other => panic!("attach to a VM deleted meanwhile: {other:?}"),
    }
    world
        .sim
        .faults
        .stuck_attachments
        .store(false, std::sync::atomic::Ordering::Relaxed);
    real::wait_for("no VMBDA left", Duration::from_secs(10), async || {
        world
            .vmbdas()
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;

    // An attachment someone left for a VM that is gone: detach succeeds and removes it.
    let orphan: Vmbda = serde_json::from_value(serde_json::json!({
        "apiVersion": "virtualization.deckhouse.io/v1alpha2",
        "kind": "VirtualMachineBlockDeviceAttachment",
        "metadata": {"name": "vmbda-pvc-gone-worker-2", "labels": {
            api::VMBDA_DISK_LABEL: "pvc-gone", api::VMBDA_VM_LABEL: "worker-2"}},
        "spec": {"virtualMachineName": "vm-worker-2", "blockDeviceRef": {"kind": "VirtualDisk", "name": "pvc-gone"}},
    }))
    .unwrap();
    world
        .vmbdas()
        .create(&PostParams::default(), &orphan)
        .await
        .expect("orphan VMBDA");
    disks
        .detach_disk("pvc-gone", "worker-2")
        .await
        .expect("detach from a gone VM");
    real::wait_for("the orphan removed", Duration::from_secs(10), async || {
        world
            .vmbdas()
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    // A detach with no VMBDA at all is success too.
    disks
        .detach_disk("pvc-gone", "worker-1")
        .await
        .expect("detach of a detached disk");
    disks.delete_disk("pvc-gone").await.expect("delete");
    world.finish().await;
}

#[tokio::test]
async fn a_disk_that_fails_to_provision_is_reported_and_leaves_nothing() {
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the DVP failed-provisioning test", "fail").await else {
        return;
    };
    let disks = world.disks(Duration::from_secs(30));
    *world.sim.faults.fail_next_disk.lock().unwrap() =
        Some("exceeded quota: d8-quota, requested: requests.storage=16Mi".into());
    match disks.create_disk(spec("pvc-quota")).await {
        Err(e @ CloudError::ResourceExhausted(_)) => {
            assert!(e.to_string().contains("exceeded quota"), "{e}");
        }
        other => panic!("a disk the parent failed: {other:?}"),
    }
    real::wait_for(
        "the failed VirtualDisk deleted",
        Duration::from_secs(10),
        async || {
            world
                .parent
                .disks()
                .get_opt("pvc-quota")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    // The CO's retry makes it anew.
    disks
        .create_disk(spec("pvc-quota"))
        .await
        .expect("the retry provisions");
    disks.delete_disk("pvc-quota").await.expect("delete");
    world.finish().await;
}

/// The conformance suite against a real DVP, when one is given.
#[tokio::test]
async fn the_dvp_provider_passes_the_conformance_suite_on_a_real_dvp() {
    let vars = [
        "OVERCAST_TEST_DVP_KUBECONFIG",
        "OVERCAST_TEST_DVP_NAMESPACE",
        "OVERCAST_TEST_DVP_NODE",
    ];
    let values: Vec<Option<String>> = vars.iter().map(|v| std::env::var(v).ok()).collect();
    let [Some(path), Some(ns), Some(node)] = <[Option<String>; 3]>::try_from(values).unwrap()
    else {
        overcast_integration::say_skipped(&format!(
            "set {} to run the DVP conformance suite against a real DVP",
            vars.join(", ")
        ));
        return;
    };
    let client = real::client(&path).await;
    let parent = Parent::new(client, ns, Arc::new(ApiMetrics::unregistered()));
    let disks: Arc<dyn Disks> = Arc::new(DvpDisks::new(
        parent.clone(),
        Zone::default(),
        64,
        Waits::default(),
    ));
    conformance::disks(&DiskHarness {
        disks,
        node: node.clone(),
        gone_node: "overcast-it-no-such-node".into(),
        zone: Zone::default(),
        parameters: BTreeMap::new(),
        prefix: "overcast-it-".into(),
    })
    .await;
    conformance::instances(&DvpInstances::new(parent), &node).await;
}
