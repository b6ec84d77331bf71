//! A DVP parent cluster for tests and for trying the DVP suite (`overcast-sim dvp`): the real `virtualization.deckhouse.io` CRDs (the kit's,
//! from the public deckhouse/virtualization repository) installed into a real API server,
//! and a small controller doing what the virtualization controller does to the objects a
//! provider makes — level-based, like the real one, so it reacts to what is there, not to
//! what a test expects:
//!
//! - a `VirtualDisk` goes as deckhouse/virtualization's `vd` controller takes a blank disk
//!   (its `life_cycle.go`, `storageclass_ready.go`, the blank source's steps; the
//!   repository's main branch of 2026-08, API `v1alpha2`): a finalizer; phase `Pending`;
//!   a StorageClass named in the spec that does not exist keeps it `Pending` with
//!   StorageClassReady=False `StorageClassNotReady` and Ready=False
//!   `StorageClassIsNotReady` (conditions carry `observedGeneration`); else
//!   `Provisioning` and, after the latency, a real PVC bound to a real PV — refused by
//!   the API server's own ResourceQuota admission when a quota is exceeded, which leaves
//!   the disk `Pending` with Ready=False `QuotaExceeded` (retried after the latency, as
//!   the controller does on quota changes) — and `Ready` with its capacity and target
//!   PVC. The PV's node affinity says where the parent's storage is usable: the
//!   consumer's host for a StorageClass binding on first consumer (the disk waits in
//!   `WaitForFirstConsumer` until a VMBDA's VM runs), the first zone of
//!   `allowedTopologies` for a zonal one, anywhere otherwise; backed by a sparse file. A
//!   larger `spec.persistentVolumeClaim.size` makes it `Resizing → Ready` at the new
//!   capacity (the file grows, and so does its loop device if attached). Deleted, it is
//!   `Terminating` until its finalizer goes with its file;
//! - a `VirtualMachineBlockDeviceAttachment` waits (`Pending`, with the condition saying
//!   why) until its VM exists and is Running and its disk is Ready, then goes
//!   `InProgress → Attached`: the disk's file is bound to a loop device and
//!   `<by-id>/scsi-0QEMU_QEMU_HARDDISK_<md5(VirtualDisk uid)>` links to it, as udev links
//!   a hot-plugged QEMU SCSI disk; the VM's `status.blockDeviceRefs` lists it. Deleted,
//!   the link and the loop device go, then its finalizer;
//! - a Service of type LoadBalancer gets an address after the latency, as the parent's
//!   own load balancer gives one;
//! - faults on demand: attachments that never finish (`stuck_attachments`), disks kept
//!   `Provisioning` past any caller's deadline (`held_provisioning`), disks kept
//!   `Terminating` by their finalizer (`held_deletions`), and — through
//!   [`DvpSim::api_proxy`], standing in for the admission webhook the kit's API server
//!   does not run — the webhook's refusal of a VirtualDisk name with a `.`.
//!
//! - a `VirtualMachine` a provider makes starts as the `vm` controller starts it
//!   (`vm.rs`) once its VirtualMachineClass is Ready (`class.rs`; `generic` is made
//!   Ready at start), and a disk made from an image waits for it (`image.rs`).
//!
//! Everything it makes on the machine (loop devices, files, links) is removed on drop.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use overcast_cloud_dvp::api::{self, VirtualDisk, VirtualMachine, Vmbda};
use overcast_cloud_local::loopdev;
use serde_json::json;

mod class;
mod crds;
mod disk;
mod image;
mod objects;
mod proxy;
mod snapshot;
mod sweep;
mod vm;
mod vmbda;
mod vmip;

pub use crds::{crd_dir, install_crds, install_crds_from};
use disk::reconcile_disk;
use objects::{add_finalizer, cond, remove_finalizer, set_status, wait_for};
pub use sweep::{sweep, sweep_namespace};
use vm::reconcile_vm;
pub use vm::STATIC_ANNOTATION;
use vmbda::{consumer_node, reconcile_vmbda};

const FINALIZER: &str = "virtualization.deckhouse.io/overcast-sim";
const FIELD_MANAGER: &str = "overcast-dvp-sim";
/// On the PersistentVolumes the simulated storage makes: the namespace they are for.
const SIM_LABEL: &str = "overcast.dev/dvp-sim";

/// Taken by the tests of the DVP provider that share the parent's CRDs and the machine's
/// loop devices (`dvp_real_cluster`, `dvp_zones`): one at a time, whichever module of the
/// test binary they are in.
pub static PARENT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Faults the simulator plays on demand.
#[derive(Debug, Default)]
pub struct Faults {
    /// Attachments stay `InProgress` forever (the hot-plug never completes).
    pub stuck_attachments: AtomicBool,
    /// VirtualDisks (by name) kept `Provisioning` until taken out of the set.
    pub held_provisioning: Mutex<HashSet<String>>,
    /// VirtualDisks (by name) whose deletion waits, `Terminating`, until taken out.
    pub held_deletions: Mutex<HashSet<String>>,
    /// VirtualDiskSnapshots (by name) kept `InProgress` until taken out of the set.
    pub held_snapshots: Mutex<HashSet<String>>,
    /// VirtualDiskSnapshots (by name) whose VolumeSnapshot reports an error when cut.
    pub failing_snapshots: Mutex<HashSet<String>>,
    /// VMs (by name) whose guest agent runs: a snapshot of their disks freezes them.
    pub agent_vms: Mutex<HashSet<String>>,
    /// VMs (by name) that go `Degraded` where they would start.
    pub degraded_vms: Mutex<HashSet<String>>,
    /// VMs (by name) stopped, as by hand, once they have started.
    pub stopped_vms: Mutex<HashSet<String>>,
    /// The parent's API, as the provider reaches it through [`DvpSim::api_proxy`], is
    /// down: every request answers 503 with an HTML page, as a broken ingress does.
    pub api_down: AtomicBool,
    /// The requests the proxy passed on (what a provider behind it asked the parent).
    pub proxied: std::sync::atomic::AtomicU64,
    /// The writes among them (method and path): what a provider made, changed or deleted.
    pub writes: Mutex<Vec<String>>,
    /// The reads among them (path and query): what a provider asked to see.
    pub reads: Mutex<Vec<String>>,
    /// The bytes of the answers to those reads, watches left out (what a benchmark counts
    /// of a provider's reads of the parent).
    pub answered: std::sync::atomic::AtomicU64,
}

struct Attached {
    index: u32,
    file: PathBuf,
    link: PathBuf,
}

struct State {
    dir: PathBuf,
    by_id: PathBuf,
    latency: Duration,
    first_seen: Mutex<HashMap<String, Instant>>,
    attached: Mutex<BTreeMap<String, Attached>>,
    /// When each attachment's `Attached` status write was sent (publish latency is
    /// measured from here).
    attached_at: Mutex<HashMap<String, Instant>>,
    /// The last address the parent's load balancer gave.
    next_address: Mutex<u8>,
    /// The last address a started VM got.
    next_vm_address: Mutex<u8>,
    faults: Arc<Faults>,
}

/// The simulated parent: its namespace, where its disks' links appear, its faults.
pub struct DvpSim {
    pub client: Client,
    pub namespace: String,
    /// The directory the node plugin looks in for `/dev/disk/by-id` links.
    pub by_id: PathBuf,
    pub faults: Arc<Faults>,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
    /// A directory of its own when it was given none.
    _dir: Option<tempfile::TempDir>,
}

impl DvpSim {
    /// Starts the controller for `namespace` (created if missing; the CRDs must be
    /// installed). `latency` is how long each transition takes, as the real controllers
    /// take time.
    pub async fn start(client: Client, namespace: &str, latency: Duration) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sim = Self::start_in(client, namespace, latency, dir.path()).await;
        sim._dir = Some(dir);
        sim
    }

    /// [`DvpSim::start`], its disks' files and links in `dir` (`disks/`, `by-id/`): a
    /// directory a later run finds again (`overcast-sim dvp --dir`), where a temporary
    /// one a killed run left would be lost.
    pub async fn start_in(client: Client, namespace: &str, latency: Duration, dir: &Path) -> Self {
        let ns: Api<Namespace> = Api::all(client.clone());
        let _ = ns
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": namespace}})).expect("ns"),
            )
            .await;
        class::ensure_class(&client, class::GENERIC, true).await;
        let by_id = dir.join("by-id");
        std::fs::create_dir_all(&by_id).expect("by-id dir");
        std::fs::create_dir_all(dir.join("disks")).expect("disks dir");
        let faults = Arc::new(Faults::default());
        let state = Arc::new(State {
            dir: dir.join("disks"),
            by_id: by_id.clone(),
            latency,
            first_seen: Mutex::new(HashMap::new()),
            attached: Mutex::new(BTreeMap::new()),
            attached_at: Mutex::new(HashMap::new()),
            next_address: Mutex::new(0),
            next_vm_address: Mutex::new(0),
            faults: Arc::clone(&faults),
        });
        let task = tokio::spawn(run(
            client.clone(),
            namespace.to_owned(),
            Arc::clone(&state),
        ));
        Self {
            client,
            namespace: namespace.to_owned(),
            by_id,
            faults,
            state,
            task,
            _dir: None,
        }
    }

    fn vms(&self) -> Api<VirtualMachine> {
        Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &api::virtual_machine(),
        )
    }

    /// Adds a VM as Deckhouse makes a node's: labelled with its hostname, Running on
    /// `parent_node`, with `ip`.
    pub async fn add_vm(&self, name: &str, hostname: &str, ip: &str, parent_node: &str) {
        self.add_vm_of(None, name, hostname, ip, parent_node).await
    }

    /// [`Self::add_vm`], and labelled with the cluster's UUID as capdvp and the layouts
    /// label theirs (`dvp.deckhouse.io/cluster-uuid`) when `cluster` is given.
    pub async fn add_vm_of(
        &self,
        cluster: Option<&str>,
        name: &str,
        hostname: &str,
        ip: &str,
        parent_node: &str,
    ) {
        let mut labels = json!({api::HOSTNAME_LABEL: hostname});
        if let Some(uuid) = cluster {
            labels["dvp.deckhouse.io/cluster-uuid"] = json!(uuid);
        }
        let vm: VirtualMachine = serde_json::from_value(json!({
            "apiVersion": "virtualization.deckhouse.io/v1alpha2",
            "kind": "VirtualMachine",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {STATIC_ANNOTATION: "true"},
            },
            "spec": {
                "virtualMachineClassName": "generic",
                "cpu": {"cores": 2, "coreFraction": "100%"},
                "memory": {"size": "4Gi"},
                "blockDeviceRefs": [{"kind": "VirtualDisk", "name": format!("{name}-root")}],
            },
        }))
        .expect("vm");
        self.vms()
            .create(&PostParams::default(), &vm)
            .await
            .unwrap_or_else(|e| panic!("create VM {name}: {e}"));
        self.set_vm_phase(name, "Running", Some(ip), Some(parent_node))
            .await;
    }

    pub async fn set_vm_phase(
        &self,
        name: &str,
        phase: &str,
        ip: Option<&str>,
        node: Option<&str>,
    ) {
        let mut status = json!({"phase": phase});
        if let Some(ip) = ip {
            status["ipAddress"] = json!(ip);
        }
        if let Some(node) = node {
            status["nodeName"] = json!(node);
        }
        self.vms()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .unwrap_or_else(|e| panic!("VM {name} status: {e}"));
    }

    /// Adds a Node to the kit's API server (replacing one of that name), labelled for
    /// [`DvpSim::remove_nodes`] and [`sweep`]: a parent node (with a zone label, say) or
    /// this cluster's node of a VM — the kit plays both clusters.
    pub async fn add_node(&self, name: &str, labels: serde_json::Value, uninitialized: bool) {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        let _ = nodes.delete(name, &DeleteParams::default()).await;
        let mut labels = labels;
        labels[SIM_LABEL] = json!(self.namespace);
        let taints = if uninitialized {
            json!([{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        let node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints},
        }))
        .expect("node");
        wait_for("a Node created", Duration::from_secs(10), async || {
            nodes.create(&PostParams::default(), &node).await.ok()
        })
        .await;
    }

    /// Deletes the Nodes [`DvpSim::add_node`] made.
    pub async fn remove_nodes(&self) {
        delete_nodes(&self.client, &self.namespace).await;
    }

    pub async fn delete_vm(&self, name: &str) {
        let _ = self.vms().delete(name, &DeleteParams::default()).await;
    }

    /// The loop device a VMBDA's disk is attached as, while it is.
    pub fn device_of(&self, vmbda: &str) -> Option<PathBuf> {
        let attached = self.state.attached.lock().expect("lock");
        attached.get(vmbda).map(|a| loopdev::device_path(a.index))
    }

    /// When the attachment's `Attached` status write was sent.
    pub fn attached_at(&self, vmbda: &str) -> Option<Instant> {
        self.state
            .attached_at
            .lock()
            .expect("lock")
            .get(vmbda)
            .copied()
    }

    /// How many attachments are live on the machine (loop devices bound).
    pub fn attached_count(&self) -> usize {
        self.state.attached.lock().expect("lock").len()
    }
}

impl Drop for DvpSim {
    fn drop(&mut self) {
        self.task.abort();
        let attached = std::mem::take(&mut *self.state.attached.lock().expect("lock"));
        for a in attached.into_values() {
            let _ = std::fs::remove_file(&a.link);
            // One the test's node still has mounted (a test that failed before it
            // unstaged) goes when it is unmounted, as the zVirt sim's do.
            if loopdev::detach(a.index, &a.file).is_err() {
                let _ = loopdev::release_when_unused(a.index, &a.file);
            }
        }
    }
}

async fn run(client: Client, namespace: String, state: Arc<State>) {
    let disks: Api<VirtualDisk> =
        Api::namespaced_with(client.clone(), &namespace, &api::virtual_disk());
    let vmbdas: Api<Vmbda> = Api::namespaced_with(client.clone(), &namespace, &api::vmbda());
    let vms: Api<VirtualMachine> =
        Api::namespaced_with(client.clone(), &namespace, &api::virtual_machine());
    let w1 = reflector::store::Writer::new(api::virtual_disk());
    let w2 = reflector::store::Writer::new(api::vmbda());
    let w3 = reflector::store::Writer::new(api::virtual_machine());
    let (disk_store, vmbda_store, vm_store) = (w1.as_reader(), w2.as_reader(), w3.as_reader());
    let vmips: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &namespace,
        &api::virtual_machine_ip_address(),
    );
    let w5 = reflector::store::Writer::new(api::virtual_machine_ip_address());
    let vmip_store = w5.as_reader();
    let snapshots: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &api::virtual_disk_snapshot());
    let w6 = reflector::store::Writer::new(api::virtual_disk_snapshot());
    let snapshot_store = w6.as_reader();
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let w4 = reflector::store::Writer::<Service>::default();
    let service_store = w4.as_reader();
    let changed = Arc::new(tokio::sync::Notify::new());
    macro_rules! feed {
        ($api:expr, $writer:expr) => {{
            let changed = Arc::clone(&changed);
            let stream = watcher($api.clone(), watcher::Config::default())
                .default_backoff()
                .reflect($writer)
                .applied_objects();
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while stream.next().await.is_some() {
                    changed.notify_one();
                }
            })
        }};
    }
    let feeders = [
        feed!(disks, w1),
        feed!(vmbdas, w2),
        feed!(vms, w3),
        feed!(services, w4),
        feed!(vmips, w5),
        feed!(snapshots, w6),
    ];
    let _guard = AbortOnDrop(feeders.into_iter().collect());
    loop {
        let _ = tokio::time::timeout(Duration::from_millis(50), changed.notified()).await;
        let vm_list = vm_store.state();
        let vmbda_list = vmbda_store.state();
        for vd in disk_store.state() {
            let consumer = consumer_node(&vd, &vmbda_list, &vm_list);
            if let Err(e) = reconcile_disk(&disks, &vd, consumer.as_deref(), &state).await {
                eprintln!("dvp-sim: VirtualDisk {}: {e}", vd.name_any());
            }
        }
        let disk_list = disk_store.state();
        let around = snapshot::Around {
            disks: &disk_list,
            vmbdas: &vmbda_list,
            vms: &vm_list,
        };
        for s in snapshot_store.state() {
            if let Err(e) = snapshot::reconcile_snapshot(&snapshots, &s, &around, &state).await {
                eprintln!("dvp-sim: VirtualDiskSnapshot {}: {e}", s.name_any());
            }
        }
        let vmip_list = vmip_store.state();
        for ip in &vmip_list {
            if let Err(e) = vmip::reconcile_vmip(&vmips, ip, &vmip_list, &vm_list, &state).await {
                eprintln!("dvp-sim: VirtualMachineIPAddress {}: {e}", ip.name_any());
            }
        }
        for vm in &vm_list {
            if let Err(e) = reconcile_vm(&vms, vm, &disk_list, &vmip_list, &state).await {
                eprintln!("dvp-sim: VirtualMachine {}: {e}", vm.name_any());
            }
        }
        for v in vmbda_store.state() {
            if let Err(e) = reconcile_vmbda(&vmbdas, &vms, &v, &vm_list, &disk_list, &state).await {
                eprintln!("dvp-sim: VMBDA {}: {e}", v.name_any());
            }
        }
        for svc in service_store.state() {
            if let Err(e) = reconcile_service(&services, &svc, &state).await {
                eprintln!("dvp-sim: Service {}: {e}", svc.name_any());
            }
        }
    }
}

/// The parent's own load balancer (MetalLB, say): a Service of type LoadBalancer gets an
/// address from 10.77.0.0/24 after the latency.
async fn reconcile_service(api: &Api<Service>, svc: &Service, state: &State) -> anyhow::Result<()> {
    let is_lb = svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer");
    let has = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
        .is_some_and(|i| !i.is_empty());
    let key = format!("svc/{}", svc.uid().unwrap_or_default());
    if !is_lb || has || svc.metadata.deletion_timestamp.is_some() || !due(state, &key) {
        return Ok(());
    }
    let n = {
        let mut next = state.next_address.lock().expect("lock");
        *next += 1;
        *next
    };
    set_status(
        api,
        &svc.name_any(),
        json!({"loadBalancer": {"ingress": [{"ip": format!("10.77.0.{n}")}]}}),
    )
    .await?;
    forget(state, &key);
    Ok(())
}

struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);
impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

fn due(state: &State, key: &str) -> bool {
    let mut seen = state.first_seen.lock().expect("lock");
    let at = *seen.entry(key.to_owned()).or_insert_with(Instant::now);
    at.elapsed() >= state.latency
}

fn forget(state: &State, key: &str) {
    state.first_seen.lock().expect("lock").remove(key);
}

fn disk_file(state: &State, uid: &str) -> PathBuf {
    state.dir.join(format!("{uid}.img"))
}

/// Deletes the Nodes labelled for a namespace starting with `prefix`.
async fn delete_nodes(client: &Client, prefix: &str) {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    for n in nodes
        .list(&kube::api::ListParams::default().labels(SIM_LABEL))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        if n.labels()
            .get(SIM_LABEL)
            .is_some_and(|ns| ns.starts_with(prefix))
        {
            let _ = nodes.delete(&n.name_any(), &DeleteParams::default()).await;
        }
    }
}
