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
use kube::{Api, ResourceExt};
use overcast_cloud::conformance::{self, DiskHarness, DiskState, DiskStates};
use overcast_cloud::{CloudError, DiskSpec, Disks, Zone};
use overcast_cloud_dvp::api::{self, VirtualDisk, Vmbda};
use overcast_cloud_dvp::{DvpDisks, DvpInstances, Parent, Waits};
use overcast_cloud_http::ApiMetrics;
use overcast_integration::dvp_sim::{self, DvpSim};
use overcast_integration::real;

use overcast_integration::dvp_sim::PARENT;

/// Several clusters' volumes in one parent namespace.
mod clusters;
/// The create and naming rules as the real virtualization controller and webhooks set them.
mod create_rules;
/// The real `csi` binary: a volume's life, csi-sanity.
mod csi;
/// The Cluster API provider's VMs.
mod machines;
/// The parent RBAC manifest is all the provider needs.
mod rbac;
/// A volume Deckhouse's dvp-csi-driver made, after the switch to ours.
mod upstream;

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
        DvpDisks::new(self.parent.clone(), 64, waits(attach))
    }

    fn vmbdas(&self) -> Api<Vmbda> {
        self.parent.vmbdas()
    }

    /// The parent through the simulator's proxy (which records every read), and the
    /// proxy's kubeconfig, written in `dir`.
    async fn proxied(&self, dir: &std::path::Path) -> (Parent, std::path::PathBuf) {
        dvp_sim::through_proxy(&self.sim, dir, Arc::new(ApiMetrics::unregistered())).await
    }

    /// A cloud-config file as an operator writes it for this parent: the namespace and
    /// the parent's kubeconfig (the kit's admin one).
    fn cloud_config(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let kubeconfig = std::fs::read_to_string(std::env::var(real::ENV).unwrap()).unwrap();
        let indented: String = kubeconfig.lines().map(|l| format!("  {l}\n")).collect();
        let path = dir.join("cloud-config");
        std::fs::write(
            &path,
            format!(
                "namespace: {}\nkubeconfig: |\n{indented}",
                self.sim.namespace
            ),
        )
        .unwrap();
        path
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
        // Here the kit plays the parent and the child at once, so a ccm also served the
        // parent Services it made as LoadBalancer Services of its own (with its
        // finalizer): let go of them, or another test's ccm would pick them up.
        let services: Api<k8s_openapi::api::core::v1::Service> =
            Api::namespaced(self.parent.client.clone(), &self.sim.namespace);
        for svc in services
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let name = svc.name_any();
            let patch = serde_json::json!({"metadata": {"finalizers": null}});
            let _ = services
                .patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await;
            let _ = services.delete(&name, &DeleteParams::default()).await;
        }
        self.sim.remove_nodes().await;
        let name = self.sim.namespace.clone();
        drop(self.sim);
        let _ = ns.delete(&name, &DeleteParams::default()).await;
    }
}

/// The simulated parent's in-between states for the conformance rules, each as the
/// virtualization controller shows it: a disk kept `Provisioning`; a disk whose PVC the
/// parent's storage lost (`PVCLost`, as `ready_step.go` writes it); a disk `Terminating`
/// while a finalizer holds it.
struct SimStates {
    faults: Arc<dvp_sim::Faults>,
    parent: Parent,
}

#[async_trait::async_trait]
impl DiskStates for SimStates {
    async fn hold_creates(&self, name: &str) -> bool {
        let disk = overcast_cloud_dvp::disks::disk_name(name);
        self.faults.held_provisioning.lock().unwrap().insert(disk);
        true
    }
    async fn enter(&self, disk: &overcast_cloud::Disk, state: DiskState) -> bool {
        match state {
            DiskState::Creating => false,
            DiskState::Failed => {
                let vd = self.parent.disks().get(&disk.id).await.expect("get");
                let claim = vd
                    .status
                    .and_then(|s| s.target)
                    .and_then(|t| t.persistent_volume_claim_name)
                    .expect("a Ready disk names its PVC");
                let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
                    Api::namespaced(self.parent.client.clone(), &self.parent.namespace);
                let _ = claims.delete(&claim, &DeleteParams::default()).await;
                let status = serde_json::json!({"status": {"phase": "PVCLost", "conditions": [{
                    "type": "Ready", "status": "False", "reason": "PVCLost",
                    "message": format!("The PersistentVolumeClaim {claim:?} not found."),
                    "lastTransitionTime": "2026-11-24T00:00:00Z",
                }]}});
                self.parent
                    .disks()
                    .patch_status(
                        &disk.id,
                        &Default::default(),
                        &kube::api::Patch::Merge(&status),
                    )
                    .await
                    .expect("PVCLost");
                true
            }
            DiskState::Deleting => {
                self.faults
                    .held_deletions
                    .lock()
                    .unwrap()
                    .insert(disk.id.clone());
                self.parent
                    .disks()
                    .delete(&disk.id, &DeleteParams::default())
                    .await
                    .expect("delete");
                true
            }
        }
    }
    async fn release(&self, disk: &overcast_cloud::Disk, state: DiskState) {
        match state {
            DiskState::Creating => {
                self.faults
                    .held_provisioning
                    .lock()
                    .unwrap()
                    .remove(&disk.id);
            }
            DiskState::Deleting => {
                self.faults.held_deletions.lock().unwrap().remove(&disk.id);
            }
            DiskState::Failed => {}
        }
    }
}

fn spec(name: &str) -> DiskSpec {
    DiskSpec {
        name: name.to_owned(),
        size_bytes: 16 << 20,
        zone: Zone::default(),
        parameters: BTreeMap::new(),
        metadata: BTreeMap::from([("csi.storage.k8s.io/pvc/name".to_owned(), "data".to_owned())]),
        source: None,
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
        states: Some(Arc::new(SimStates {
            faults: Arc::clone(&world.sim.faults),
            parent: world.parent.clone(),
        })),
        held_for: Duration::from_secs(3),
    })
    .await;
    conformance::instances(&DvpInstances::new(world.parent.clone()), "worker-1").await;

    // Hostile node ids never become label selectors or paths: a selector smuggled in
    // through a node id names no instance, and detaching from one touches nothing.
    let held = disks.create_disk(spec("pvc-held")).await.expect("create");
    disks
        .attach_disk(&held.id, "worker-1", false)
        .await
        .expect("attach");
    for node in [
        "worker-1,virtualMachineName!=x",
        "../worker-1",
        "Worker-1",
        "",
    ] {
        assert!(
            matches!(
                disks.attach_disk(&held.id, node, false).await,
                Err(CloudError::NotFound { .. })
            ),
            "attach to {node:?}"
        );
        disks
            .detach_disk(&held.id, node)
            .await
            .expect("detach from a node id that names nothing");
    }
    assert_eq!(
        disks.disk(&held.id).await.unwrap().attachments.len(),
        1,
        "the real attachment is untouched"
    );
    disks
        .detach_disk(&held.id, "worker-1")
        .await
        .expect("detach");
    disks.delete_disk(&held.id).await.expect("delete");

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
    // A project quota, refused by the API server's own ResourceQuota admission; the kit
    // runs no quota controller, so the test writes the quota's status as it would.
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> =
        Api::namespaced(world.parent.client.clone(), &world.sim.namespace);
    let quota = serde_json::json!({
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "d8-quota"},
        "spec": {"hard": {"requests.storage": "1Mi"}},
    });
    quotas
        .create(
            &PostParams::default(),
            &serde_json::from_value(quota).unwrap(),
        )
        .await
        .expect("quota");
    quotas
        .patch_status(
            "d8-quota",
            &Default::default(),
            &kube::api::Patch::Merge(serde_json::json!({"status": {
                "hard": {"requests.storage": "1Mi"}, "used": {"requests.storage": "0"}}})),
        )
        .await
        .expect("quota status");
    // The real controller leaves such a disk Pending (QuotaExceeded), never Failed: the
    // create answers at once, not when its wait runs out.
    let started = std::time::Instant::now();
    match disks.create_disk(spec("pvc-quota")).await {
        Err(e @ CloudError::ResourceExhausted(_)) => {
            assert!(e.to_string().contains("exceeded quota"), "{e}");
        }
        other => panic!("a disk over the parent's quota: {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "answered after {:?}, as if waiting for a phase that never comes",
        started.elapsed()
    );
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
    // Once the quota allows it, the CO's retry makes it anew.
    quotas
        .delete("d8-quota", &DeleteParams::default())
        .await
        .expect("quota deleted");
    disks
        .create_disk(spec("pvc-quota"))
        .await
        .expect("the retry provisions");
    disks.delete_disk("pvc-quota").await.expect("delete");

    // A VM's own disk shares the namespace: no volume call reaches it, whatever its name.
    let root: VirtualDisk = serde_json::from_value(serde_json::json!({
        "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualDisk",
        "metadata": {"name": "vm-worker-1-root"},
        "spec": {"persistentVolumeClaim": {"size": "16Mi"}},
    }))
    .unwrap();
    world
        .parent
        .disks()
        .create(&PostParams::default(), &root)
        .await
        .expect("a VM's disk");
    assert!(matches!(
        disks.disk("vm-worker-1-root").await,
        Err(CloudError::NotFound { .. })
    ));
    assert!(matches!(
        disks.delete_disk("vm-worker-1-root").await,
        Err(CloudError::NotFound { .. })
    ));
    assert!(matches!(
        disks.create_disk(spec("vm-worker-1-root")).await,
        Err(CloudError::ParameterMismatch { .. })
    ));
    assert!(disks
        .list_disks()
        .await
        .unwrap()
        .iter()
        .all(|d| d.id != "vm-worker-1-root"));
    assert!(
        world
            .parent
            .disks()
            .get_opt("vm-worker-1-root")
            .await
            .unwrap()
            .is_some(),
        "still there"
    );
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
    let disks: Arc<dyn Disks> = Arc::new(DvpDisks::new(parent.clone(), 64, Waits::default()));
    conformance::disks(&DiskHarness {
        disks: Arc::clone(&disks),
        node: node.clone(),
        gone_node: "overcast-it-no-such-node".into(),
        zone: Zone::default(),
        parameters: BTreeMap::new(),
        prefix: "overcast-it-".into(),
        // A real parent's states are its controller's: not played here.
        states: None,
        held_for: Duration::from_secs(10),
    })
    .await;
    use overcast_cloud::Instances;
    let instances = DvpInstances::new(parent);
    conformance::instances(&instances, &node).await;
    // Zones as this parent has them: the node's is one of them, and a volume asked for
    // there is recorded in it, or in none (storage any node can use).
    let zones = disks.zones().await.expect("zones");
    let me = instances
        .list_instances()
        .await
        .expect("instances")
        .into_iter()
        .find(|i| i.node_name == node)
        .expect("the node's VM");
    if let Some(zone) = me.zone {
        assert!(zones.contains(&zone), "{zone:?} not in {zones:?}");
        let mut want = spec(&format!("overcast-it-zone-{}", std::process::id()));
        want.zone = zone.clone();
        let made = disks
            .create_disk(want)
            .await
            .expect("a volume in the node's zone");
        let placed = made.zone.clone();
        disks.delete_disk(&made.id).await.expect("delete");
        assert!(
            placed == zone || placed == Zone::default(),
            "asked {zone:?}, recorded {placed:?}"
        );
    }
}

/// The real `ccm` (`--cloud dvp`) initializes a node of this cluster from its VM on the
/// simulated parent (the kit's API server plays both: the Node is this cluster's, the VM
/// the parent's): providerID, instance type, addresses, the taint removed; a Stopped VM's
/// NotReady node is tainted shut down, and deleted once the VM is.
#[tokio::test]
async fn the_ccm_initializes_a_node_from_its_vm_on_the_simulated_parent() {
    use k8s_openapi::api::core::v1::Node;
    let _turn = PARENT.lock().await;
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(world) = World::new("the ccm on DVP", "ccm").await else {
        return;
    };
    let kubeconfig_path = std::env::var(real::ENV).unwrap();
    let name = format!("overcast-it-dvp-node-{}", std::process::id());
    world
        .sim
        .add_vm("vm-ccm-1", &name, "10.66.0.31", "parent-a")
        .await;
    let work = tempfile::tempdir().unwrap();
    let config = world.cloud_config(work.path());
    let nodes: Api<Node> = Api::all(world.parent.client.clone());
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]},
        // The kubelet stopped answering: what the lifecycle controller acts on.
        "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node");
    let port = overcast_integration::free_port();
    let _ccm = overcast_integration::KillOnDrop(
        std::process::Command::new(overcast_integration::binary("ccm"))
            .arg(format!("--kubeconfig={kubeconfig_path}"))
            .arg("--cloud=dvp")
            .arg(format!("--cloud-config={}", config.display()))
            .arg("--controllers=node,node-lifecycle")
            .arg("--leader-elect=false")
            .arg("--node-sync-period=2")
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let initialized = real::wait_for("initialization", Duration::from_secs(30), async || {
        let n = nodes.get(&name).await.ok()?;
        (n.spec.as_ref()?.provider_id.as_deref() == Some("dvp://vm-ccm-1")).then_some(n)
    })
    .await;
    let labels = initialized.metadata.labels.clone().unwrap();
    assert_eq!(labels["node.kubernetes.io/instance-type"], "generic-2c-4gi");
    assert!(!initialized
        .spec
        .as_ref()
        .unwrap()
        .taints
        .iter()
        .flatten()
        .any(|t| t.key.contains("uninitialized")));
    let addresses = real::wait_for("addresses", Duration::from_secs(30), async || {
        let n = nodes.get(&name).await.ok()?;
        let a = n.status?.addresses?;
        (!a.is_empty()).then_some(a)
    })
    .await;
    let pairs: Vec<(String, String)> = addresses
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    for want in [
        ("InternalIP", "10.66.0.31"),
        ("ExternalIP", "10.66.0.31"),
        ("Hostname", name.as_str()),
    ] {
        assert!(
            pairs.contains(&(want.0.to_owned(), want.1.to_owned())),
            "{pairs:?}"
        );
    }
    let (_, body) = overcast_integration::http_get(port, "/metrics");
    assert!(
        real::metric(
            &body,
            "dvp_api_requests_total{request=\"virtualmachine_list\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{body}"
    );
    // Initialized, the node is read by its VM's name (issue 70: a sync reads the
    // cluster's VMs, not the namespace).
    real::wait_for(
        "a sync by the VM's name",
        Duration::from_secs(30),
        async || {
            let (_, body) = overcast_integration::http_get(port, "/metrics");
            real::metric(
                &body,
                "dvp_api_requests_total{request=\"virtualmachine_get\"}",
            )
            .filter(|n| *n >= 1.0)
        },
    )
    .await;
    // The VM stops: the node gets the shutdown taint (not deleted); it runs again: taken off.
    world
        .sim
        .set_vm_phase("vm-ccm-1", "Stopped", None, None)
        .await;
    let shutdown = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| {
                t.iter()
                    .any(|t| t.key == "node.cloudprovider.kubernetes.io/shutdown")
            })
    };
    real::wait_for("the shutdown taint", Duration::from_secs(30), async || {
        nodes.get(&name).await.ok().filter(|n| shutdown(n))
    })
    .await;
    world
        .sim
        .set_vm_phase("vm-ccm-1", "Running", None, None)
        .await;
    real::wait_for(
        "the shutdown taint removed",
        Duration::from_secs(30),
        async || nodes.get(&name).await.ok().filter(|n| !shutdown(n)),
    )
    .await;
    // The VM is deleted in the parent: the NotReady node goes (the parent said so).
    world.sim.delete_vm("vm-ccm-1").await;
    real::wait_for(
        "the node of a deleted VM deleted",
        Duration::from_secs(30),
        async || nodes.get_opt(&name).await.ok()?.is_none().then_some(()),
    )
    .await;
    let _ = nodes.delete(&name, &DeleteParams::default()).await;
    world.finish().await;
}

/// The real `ccm` (`--cloud dvp`) makes a LoadBalancer Service's balancer in the parent:
/// a Service there sending each port to the NodePort on the VMs it selects, the address
/// the parent gives copied back; with `externalTrafficPolicy: Local` only the VMs whose
/// nodes hold a ready endpoint are selected, and the selection follows the
/// EndpointSlice; deleting the Service deletes the parent's and unlabels the VMs.
#[tokio::test]
async fn the_ccm_balances_through_a_parent_service_that_follows_the_endpoints() {
    use k8s_openapi::api::core::v1::{Node, Service};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use overcast_cloud_dvp::api::VirtualMachine;
    let _turn = PARENT.lock().await;
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(world) = World::new("the ccm's balancers on DVP", "lb").await else {
        return;
    };
    let kubeconfig_path = std::env::var(real::ENV).unwrap();
    let pid = std::process::id();
    let (a, b) = (
        format!("overcast-it-dvp-lb-a-{pid}"),
        format!("overcast-it-dvp-lb-b-{pid}"),
    );
    world
        .sim
        .add_vm("vm-lb-a", &a, "10.66.0.41", "parent-a")
        .await;
    world
        .sim
        .add_vm("vm-lb-b", &b, "10.66.0.42", "parent-a")
        .await;
    let nodes: Api<Node> = Api::all(world.parent.client.clone());
    for (name, ip) in [(&a, "10.66.0.41"), (&b, "10.66.0.42")] {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": ip}],
            },
        }))
        .unwrap();
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("node");
    }
    let services: Api<Service> = Api::namespaced(world.parent.client.clone(), "default");
    let svc_name = format!("overcast-it-dvp-web-{pid}");
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": svc_name, "annotations": {"network.example.com/pool": "public"}},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local",
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]},
    }))
    .unwrap();
    let svc = services
        .create(&PostParams::default(), &svc)
        .await
        .expect("service");
    let node_port = svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0]
        .node_port
        .unwrap();
    let uid: String = svc
        .metadata
        .uid
        .clone()
        .unwrap()
        .chars()
        .filter(|c| *c != '-')
        .collect();
    let balancer: String = format!("a{uid}").chars().take(32).collect();
    let slices: Api<EndpointSlice> = Api::namespaced(world.parent.client.clone(), "default");
    let slice = |node: &str| -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{svc_name}-x"), "labels": {"kubernetes.io/service-name": svc_name}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.244.1.5"], "conditions": {"ready": true}, "nodeName": node}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }))
        .unwrap()
    };
    slices
        .create(&PostParams::default(), &slice(&a))
        .await
        .expect("slice");

    let work = tempfile::tempdir().unwrap();
    let config = world.cloud_config(work.path());
    let _ccm = overcast_integration::KillOnDrop(
        std::process::Command::new(overcast_integration::binary("ccm"))
            .arg(format!("--kubeconfig={kubeconfig_path}"))
            .arg("--cloud=dvp")
            .arg(format!("--cloud-config={}", config.display()))
            .arg("--controllers=service")
            .arg("--leader-elect=false")
            .arg(format!(
                "--metrics-address=127.0.0.1:{}",
                overcast_integration::free_port()
            ))
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let parent_services: Api<Service> =
        Api::namespaced(world.parent.client.clone(), &world.sim.namespace);
    let key = overcast_cloud_dvp::lb::vm_label_key(&balancer);
    let parent = real::wait_for("the parent Service", Duration::from_secs(30), async || {
        parent_services.get_opt(&balancer).await.ok().flatten()
    })
    .await;
    let spec = parent.spec.clone().unwrap();
    let port = &spec.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.port, port.target_port.clone()),
        (
            80,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(node_port))
        )
    );
    assert_eq!(spec.selector.as_ref().unwrap()[&key], "loadbalancer");
    assert_eq!(
        parent.labels()["cluster.x-k8s.io/tenant-service-name"],
        svc_name
    );
    assert_eq!(parent.annotations()["network.example.com/pool"], "public");
    let vms: Api<VirtualMachine> = world.parent.vms();
    let selected = async |want: &[&str]| {
        let want: std::collections::BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        real::wait_for(
            &format!("the VMs of {want:?} selected"),
            Duration::from_secs(30),
            async || {
                let list = vms.list(&ListParams::default()).await.ok()?;
                let got: std::collections::BTreeSet<String> = list
                    .items
                    .iter()
                    .filter(|vm| vm.labels().get(&key).map(String::as_str) == Some("loadbalancer"))
                    .map(|vm| api::vm_hostname(vm).to_owned())
                    .collect();
                (got == want).then_some(())
            },
        )
        .await
    };
    selected(&[&a]).await;
    let ingress = real::wait_for("the child's address", Duration::from_secs(30), async || {
        let s = services.get(&svc_name).await.ok()?;
        s.status?.load_balancer?.ingress?.first()?.ip.clone()
    })
    .await;
    assert!(ingress.starts_with("10.77.0."), "{ingress}");

    // The endpoint moves to the other node: so does the selection.
    slices
        .replace(&format!("{svc_name}-x"), &PostParams::default(), &{
            let mut s = slice(&b);
            s.metadata.resource_version = slices
                .get(&format!("{svc_name}-x"))
                .await
                .unwrap()
                .metadata
                .resource_version;
            s
        })
        .await
        .expect("slice moved");
    selected(&[&b]).await;

    services
        .delete(&svc_name, &DeleteParams::default())
        .await
        .expect("delete");
    real::wait_for(
        "the parent Service deleted",
        Duration::from_secs(30),
        async || {
            parent_services
                .get_opt(&balancer)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    selected(&[]).await;
    real::wait_for(
        "the child Service gone",
        Duration::from_secs(30),
        async || {
            services
                .get_opt(&svc_name)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    let _ = slices
        .delete(&format!("{svc_name}-x"), &DeleteParams::default())
        .await;
    for n in [&a, &b] {
        let _ = nodes.delete(n, &DeleteParams::default()).await;
    }
    drop(_ccm);
    world.finish().await;
}

/// The real `discoverer` (`--cloud dvp`) publishes DVP's discovery data from the simulated
/// parent: its StorageClasses as the contract lists them, the instance types of the VMs,
/// the conditions, and a volume no PV names as an orphan (reported, never deleted) — not
/// another cluster's volume in the same namespace.
#[tokio::test]
async fn the_discoverer_publishes_the_parent_s_data_and_its_orphans() {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use k8s_openapi::api::storage::v1::StorageClass;
    let _turn = PARENT.lock().await;
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(world) = World::new("the discoverer on DVP", "disc").await else {
        return;
    };
    let admin = world.parent.client.clone();
    let classes: Api<StorageClass> = Api::all(admin.clone());
    let class_name = format!("overcast-it-dvp-replicated-{}", std::process::id());
    let sc: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": class_name},
        "provisioner": "replicated.csi.storage.deckhouse.io",
        "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Retain", "allowVolumeExpansion": true,
    }))
    .unwrap();
    let _ = classes.create(&PostParams::default(), &sc).await;
    // A volume made for a PV that no longer exists: an orphan to report.
    let disks = world.disks(Duration::from_secs(30));
    let mut orphan = spec("pvc-orphan-1");
    orphan
        .metadata
        .insert("csi.storage.k8s.io/pv/name".into(), "pvc-orphan-1".into());
    disks.create_disk(orphan).await.expect("create");
    // Another cluster's volume in the same namespace, as dvp-csi-driver labels it: no PV
    // of ours names it, and it is not ours to report.
    world
        .parent
        .disks()
        .create(
            &PostParams::default(),
            &clusters::upstream_disk("pvc-theirs-orphan", Some(clusters::THEIRS)),
        )
        .await
        .expect("their disk");

    let kubeconfig_path = std::env::var(real::ENV).unwrap();
    let work = tempfile::tempdir().unwrap();
    let config = world.cloud_config(work.path());
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), "kube-system");
    let _ = secrets
        .delete("d8-cloud-provider-discovery-data", &DeleteParams::default())
        .await;
    let _ = configmaps
        .delete("d8-cloud-provider-conditions", &DeleteParams::default())
        .await;
    let port = overcast_integration::free_port();
    let _d = overcast_integration::KillOnDrop(
        std::process::Command::new(overcast_integration::binary("discoverer"))
            .arg(format!("--kubeconfig={kubeconfig_path}"))
            .arg("--cloud=dvp")
            .arg(format!("--cloud-config={}", config.display()))
            .arg("--discovery-period=2")
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            // As the overlay gives it, from Deckhouse's d8-cluster-uuid.
            .env("CLUSTER_UUID", clusters::OURS)
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let secret = real::wait_for(
        "the discovery Secret",
        Duration::from_secs(30),
        async || {
            secrets
                .get_opt("d8-cloud-provider-discovery-data")
                .await
                .ok()?
        },
    )
    .await;
    let doc: serde_json::Value =
        serde_json::from_slice(&secret.data.unwrap()["discovery-data.json"].0).unwrap();
    assert_eq!(doc["apiVersion"], "deckhouse.io/v1");
    assert_eq!(doc["kind"], "DVPCloudDiscoveryData");
    assert!(
        doc["zones"].as_array().is_some_and(|z| !z.is_empty()),
        "{doc}"
    );
    let ours = doc["storageClasses"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == class_name.as_str()).cloned())
        .unwrap_or_else(|| panic!("{doc}"));
    assert_eq!(
        ours,
        serde_json::json!({"name": class_name, "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Retain",
                           "allowVolumeExpansion": true, "isEnabled": true, "isDefault": false})
    );
    let conditions = real::wait_for("the conditions", Duration::from_secs(30), async || {
        let cm = configmaps
            .get_opt("d8-cloud-provider-conditions")
            .await
            .ok()??;
        let text = cm.data?.get("conditions")?.clone();
        serde_json::from_str::<Vec<serde_json::Value>>(&text).ok()
    })
    .await;
    for name in [
        "parent-reachable",
        "namespace",
        "permissions",
        "storage-classes",
    ] {
        let c = conditions
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {conditions:?}"));
        assert_eq!(c["ok"], true, "{c}");
    }
    let orphans = real::wait_for("the orphan reported", Duration::from_secs(30), async || {
        let (_, body) = overcast_integration::http_get(port, "/metrics");
        let orphans: Vec<String> = body
            .lines()
            .filter(|l| l.starts_with("cloud_data_discovery_orphaned_disk_info{"))
            .map(str::to_owned)
            .collect();
        orphans
            .iter()
            .any(|l| l.contains("pvc-orphan-1"))
            .then_some(orphans)
    })
    .await;
    assert!(
        !orphans.iter().any(|l| l.contains("pvc-theirs-orphan")),
        "another cluster's volume reported as ours: {orphans:?}"
    );
    assert!(
        world
            .parent
            .disks()
            .get_opt("pvc-orphan-1")
            .await
            .unwrap()
            .is_some(),
        "reported, never deleted"
    );
    let _ = classes.delete(&class_name, &DeleteParams::default()).await;
    drop(_d);
    world.finish().await;
}

/// A parent that answers with an error page is an outage, never an answer: nothing is
/// "gone", nothing is deleted, every error is retryable — in the provider and in the ccm,
/// whose NotReady node of a live VM stays through the outage; once the parent is back the
/// same calls succeed.
#[tokio::test]
async fn a_parent_outage_is_retryable_and_deletes_nothing() {
    use k8s_openapi::api::core::v1::Node;
    use overcast_cloud::Instances;
    use std::sync::atomic::Ordering;
    let _turn = PARENT.lock().await;
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(world) = World::new("the DVP outage test", "outage").await else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (parent, proxied) = world.proxied(work.path()).await;
    let disks = DvpDisks::new(parent.clone(), 64, waits(Duration::from_secs(30)));
    disks
        .create_disk(spec("pvc-outage"))
        .await
        .expect("create through the proxy");
    disks
        .attach_disk("pvc-outage", "worker-1", false)
        .await
        .expect("attach");

    world.sim.faults.api_down.store(true, Ordering::Relaxed);
    let outage: Vec<(&str, CloudError)> = vec![
        ("get", disks.disk("pvc-outage").await.unwrap_err()),
        (
            "by name",
            disks.disk_by_name("pvc-outage").await.unwrap_err(),
        ),
        (
            "create",
            disks.create_disk(spec("pvc-outage-2")).await.unwrap_err(),
        ),
        (
            "detach",
            disks
                .detach_disk("pvc-outage", "worker-1")
                .await
                .unwrap_err(),
        ),
        ("delete", disks.delete_disk("pvc-outage").await.unwrap_err()),
        (
            "instances",
            DvpInstances::new(parent.clone())
                .list_instances()
                .await
                .unwrap_err(),
        ),
    ];
    for (what, e) in &outage {
        assert!(!e.is_not_found() && e.is_retryable(), "{what}: {e:?}");
        assert!(matches!(e, CloudError::Unavailable(_)), "{what}: {e:?}");
    }
    // The ccm through the same outage: a NotReady node of a live VM is kept.
    let nodes: Api<Node> = Api::all(world.parent.client.clone());
    let name = format!("overcast-it-dvp-outage-{}", std::process::id());
    world
        .sim
        .add_vm("vm-outage", &name, "10.66.0.61", "parent-a")
        .await;
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"providerID": "dvp://vm-outage"},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node");
    let config_file = work.path().join("cloud-config");
    let proxied_text = std::fs::read_to_string(&proxied).unwrap();
    let indented: String = proxied_text.lines().map(|l| format!("  {l}\n")).collect();
    std::fs::write(
        &config_file,
        format!(
            "namespace: {}\nkubeconfig: |\n{indented}",
            world.sim.namespace
        ),
    )
    .unwrap();
    let port = overcast_integration::free_port();
    let ccm = overcast_integration::KillOnDrop(
        std::process::Command::new(overcast_integration::binary("ccm"))
            .arg(format!(
                "--kubeconfig={}",
                std::env::var(real::ENV).unwrap()
            ))
            .arg("--cloud=dvp")
            .arg(format!("--cloud-config={}", config_file.display()))
            .arg("--controllers=node,node-lifecycle")
            .arg("--leader-elect=false")
            .arg("--node-sync-period=1")
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    // Several syncs fail against the error page...
    // (A sync reads the node's VM by name; a node not yet initialized, by a list.)
    real::wait_for("failed parent calls", Duration::from_secs(30), async || {
        let (_, body) = overcast_integration::http_get(port, "/metrics");
        let failed = |request: &str| {
            real::metric(
                &body,
                &format!("dvp_api_request_errors_total{{request=\"{request}\"}}"),
            )
            .unwrap_or(0.0)
        };
        Some(failed("virtualmachine_get") + failed("virtualmachine_list")).filter(|n| *n >= 3.0)
    })
    .await;
    assert!(
        nodes.get_opt(&name).await.unwrap().is_some(),
        "no node deleted on an error page"
    );
    // ...and once the parent answers, the VM is there: still nothing deleted.
    world.sim.faults.api_down.store(false, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(nodes.get_opt(&name).await.unwrap().is_some());
    disks
        .detach_disk("pvc-outage", "worker-1")
        .await
        .expect("detach after the outage");
    disks
        .delete_disk("pvc-outage")
        .await
        .expect("delete after the outage");
    drop(ccm);
    let _ = nodes.delete(&name, &DeleteParams::default()).await;
    world.finish().await;
}
