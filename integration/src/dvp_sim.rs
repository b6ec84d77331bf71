//! A DVP parent cluster for tests: the real `virtualization.deckhouse.io` CRDs (the kit's,
//! from the public deckhouse/virtualization repository) installed into a real API server,
//! and a small controller doing what the virtualization controller does to the objects a
//! provider makes — level-based, like the real one, so it reacts to what is there, not to
//! what a test expects:
//!
//! - a `VirtualDisk` gets a finalizer and goes `Provisioning → Ready` after the latency,
//!   with its capacity and target PVC — a real PVC bound to a real PV, whose node
//!   affinity says where the parent's storage is usable: the consumer's host for a
//!   StorageClass binding on first consumer (the disk waits in `WaitForFirstConsumer`
//!   until a VMBDA's VM runs), the first zone of `allowedTopologies` for a zonal one,
//!   anywhere otherwise; backed by a sparse file; a larger
//!   `spec.persistentVolumeClaim.size` makes it `Resizing → Ready` at the new capacity
//!   (the file grows, and so does its loop device if attached); deleted, its file goes;
//! - a `VirtualMachineBlockDeviceAttachment` waits (`Pending`, with the condition saying
//!   why) until its VM exists and is Running and its disk is Ready, then goes
//!   `InProgress → Attached`: the disk's file is bound to a loop device and
//!   `<by-id>/scsi-0QEMU_QEMU_HARDDISK_<md5(VirtualDisk uid)>` links to it, as udev links
//!   a hot-plugged QEMU SCSI disk; the VM's `status.blockDeviceRefs` lists it. Deleted,
//!   the link and the loop device go, then its finalizer;
//! - a Service of type LoadBalancer gets an address after the latency, as the parent's
//!   own load balancer gives one;
//! - faults on demand: attachments that never finish (`stuck_attachments`), the next
//!   disk failing to provision with a message (`fail_next_disk`).
//!
//! Everything it makes on the machine (loop devices, files, links) is removed on drop.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Service};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use overcast_cloud_dvp::api::{self, VirtualDisk, VirtualMachine, Vmbda};
use overcast_cloud_local::loopdev;
use serde_json::json;

const FINALIZER: &str = "virtualization.deckhouse.io/overcast-sim";
const FIELD_MANAGER: &str = "overcast-dvp-sim";
/// On the PersistentVolumes the simulated storage makes: the namespace they are for.
const SIM_LABEL: &str = "overcast.dev/dvp-sim";

/// Where the kit's virtualization CRDs are (`OVERCAST_DVP_CRDS` overrides).
pub fn crd_dir() -> PathBuf {
    std::env::var_os("OVERCAST_DVP_CRDS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/kit/crds/virtualization")
        })
}

/// Installs the virtualization CRDs (server-side apply) and waits until they serve.
pub async fn install_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let dir = crd_dir();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read CRD");
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = crd.name_any();
        crds.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {name}: {e}"));
        names.push(name);
    }
    for name in names {
        crate::real::wait_for(
            &format!("CRD {name} established"),
            Duration::from_secs(30),
            async || {
                let crd = crds.get(&name).await.ok()?;
                let established = crd
                    .status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                established.then_some(())
            },
        )
        .await;
    }
}

/// Lets go of what a simulator that stopped mid-test (a failed test) left in namespaces
/// named `<prefix>*`: its finalizers, then the namespaces. Nothing else acts on them.
pub async fn sweep(client: &Client, prefix: &str) {
    let ns: Api<Namespace> = Api::all(client.clone());
    let Ok(list) = ns.list(&Default::default()).await else {
        return;
    };
    for n in list
        .items
        .iter()
        .map(|n| n.name_any())
        .filter(|n| n.starts_with(prefix))
    {
        let disks: Api<VirtualDisk> =
            Api::namespaced_with(client.clone(), &n, &api::virtual_disk());
        let vmbdas: Api<Vmbda> = Api::namespaced_with(client.clone(), &n, &api::vmbda());
        for v in vmbdas
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let _ = remove_finalizer(&vmbdas, &v).await;
            let _ = vmbdas.delete(&v.name_any(), &DeleteParams::default()).await;
        }
        for d in disks
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let _ = remove_finalizer(&disks, &d).await;
            let _ = disks.delete(&d.name_any(), &DeleteParams::default()).await;
        }
        let _ = ns.delete(&n, &DeleteParams::default()).await;
    }
    delete_nodes(client, prefix).await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for pv in pvs
        .list(&kube::api::ListParams::default().labels(SIM_LABEL))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        if pv
            .labels()
            .get(SIM_LABEL)
            .is_some_and(|ns| ns.starts_with(prefix))
        {
            let _ = pvs.delete(&pv.name_any(), &DeleteParams::default()).await;
        }
    }
}

/// Faults the simulator plays on demand.
#[derive(Debug, Default)]
pub struct Faults {
    /// Attachments stay `InProgress` forever (the hot-plug never completes).
    pub stuck_attachments: AtomicBool,
    /// The next VirtualDisk to provision goes `Failed` with this message.
    pub fail_next_disk: Mutex<Option<String>>,
    /// The parent's API, as the provider reaches it through [`DvpSim::api_proxy`], is
    /// down: every request answers 503 with an HTML page, as a broken ingress does.
    pub api_down: AtomicBool,
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
    _dir: tempfile::TempDir,
}

impl DvpSim {
    /// Starts the controller for `namespace` (created if missing; the CRDs must be
    /// installed). `latency` is how long each transition takes, as the real controllers
    /// take time.
    pub async fn start(client: Client, namespace: &str, latency: Duration) -> Self {
        let ns: Api<Namespace> = Api::all(client.clone());
        let _ = ns
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": namespace}})).expect("ns"),
            )
            .await;
        let dir = tempfile::tempdir().expect("tempdir");
        let by_id = dir.path().join("by-id");
        std::fs::create_dir_all(&by_id).expect("by-id dir");
        std::fs::create_dir_all(dir.path().join("disks")).expect("disks dir");
        let faults = Arc::new(Faults::default());
        let state = Arc::new(State {
            dir: dir.path().join("disks"),
            by_id: by_id.clone(),
            latency,
            first_seen: Mutex::new(HashMap::new()),
            attached: Mutex::new(BTreeMap::new()),
            attached_at: Mutex::new(HashMap::new()),
            next_address: Mutex::new(0),
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
            _dir: dir,
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
        let vm: VirtualMachine = serde_json::from_value(json!({
            "apiVersion": "virtualization.deckhouse.io/v1alpha2",
            "kind": "VirtualMachine",
            "metadata": {"name": name, "labels": {api::HOSTNAME_LABEL: hostname}},
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
        crate::real::wait_for("a Node created", Duration::from_secs(10), async || {
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

    /// A plain-HTTP endpoint in front of the parent's API server (as the admin): what a
    /// provider reaches it through when a test plays API outages (`faults.api_down`).
    /// Returns a kubeconfig for it.
    pub async fn api_proxy(&self, dir: &Path) -> PathBuf {
        use hyper::service::service_fn;
        use hyper_util::rt::TokioIo;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (upstream, faults) = (self.client.clone(), Arc::clone(&self.faults));
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (upstream, faults) = (upstream.clone(), Arc::clone(&faults));
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (upstream, faults) = (upstream.clone(), Arc::clone(&faults));
                        async move {
                            use http_body_util::BodyExt;
                            if faults.api_down.load(Ordering::Relaxed) {
                                let page = "<html><head><title>503 Service Temporarily Unavailable</title></head></html>";
                                return Ok::<_, std::convert::Infallible>(
                                    hyper::Response::builder()
                                        .status(503)
                                        .header("content-type", "text/html")
                                        .body(kube::client::Body::from(page.as_bytes().to_vec()))
                                        .expect("response"),
                                );
                            }
                            let (mut parts, body) = req.into_parts();
                            // The proxy speaks as the admin: the caller's token stays here.
                            parts.headers.remove(hyper::header::AUTHORIZATION);
                            let bytes = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let req = hyper::Request::from_parts(
                                parts,
                                kube::client::Body::from(bytes.to_vec()),
                            );
                            Ok(upstream.send(req).await.unwrap_or_else(|e| {
                                hyper::Response::builder()
                                    .status(502)
                                    .body(kube::client::Body::from(e.to_string().into_bytes()))
                                    .expect("response")
                            }))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let path = dir.join("parent-through-proxy.kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: parent\n  cluster: {{server: 'http://127.0.0.1:{port}'}}\nusers:\n- name: proxy\n  user: {{token: through-the-proxy}}\ncontexts:\n- name: parent\n  context: {{cluster: parent, user: proxy}}\ncurrent-context: parent\n"
            ),
        )
        .expect("kubeconfig");
        path
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
            let _ = loopdev::detach(a.index, &a.file);
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

async fn add_finalizer<K>(api: &Api<K>, obj: &K) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut finalizers = obj.finalizers().to_vec();
    finalizers.push(FINALIZER.to_owned());
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
}

async fn remove_finalizer<K>(api: &Api<K>, obj: &K) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let finalizers: Vec<&String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .collect();
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn set_status<K>(api: &Api<K>, name: &str, status: serde_json::Value) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .map(|_| ())
}

fn cond(type_: &str, ok: bool, reason: &str, message: &str) -> serde_json::Value {
    json!({
        "type": type_, "status": if ok { "True" } else { "False" }, "reason": reason,
        "message": message, "lastTransitionTime": "2026-11-23T00:00:00Z",
    })
}

/// The parent node of the Running VM a VMBDA attaches `vd` to: where a disk waiting for
/// its first consumer is provisioned.
fn consumer_node(
    vd: &VirtualDisk,
    vmbdas: &[Arc<Vmbda>],
    vms: &[Arc<VirtualMachine>],
) -> Option<String> {
    vmbdas
        .iter()
        .filter(|v| v.spec.block_device_ref.name == vd.name_any())
        .find_map(|v| {
            let vm = vms
                .iter()
                .find(|vm| vm.name_any() == v.spec.virtual_machine_name)?;
            let status = vm.status.as_ref()?;
            (status.phase.as_deref() == Some("Running"))
                .then(|| status.node_name.clone())
                .flatten()
        })
}

/// The target PVC's name, as the virtualization controller names it.
fn claim_name(name: &str, uid: &str) -> String {
    format!("vd-{name}-{}", &uid[..8.min(uid.len())])
}

/// The parent's StorageClass a disk is made in (the kit's object, when a test made one).
async fn storage_class_object(client: &Client, name: &str) -> Option<StorageClass> {
    Api::<StorageClass>::all(client.clone())
        .get_opt(name)
        .await
        .ok()
        .flatten()
}

/// The PVC and the PV behind a Ready disk, as the parent's storage makes them: a PV
/// pinned to the consumer's host for a StorageClass binding on first consumer (local
/// storage), to the first zone of `allowedTopologies` for one that names zones (zonal
/// storage), else usable anywhere (network storage).
async fn provision_claim(
    client: &Client,
    namespace: &str,
    claim: &str,
    class: &str,
    bytes: u64,
    consumer: Option<&str>,
) -> anyhow::Result<()> {
    let sc = storage_class_object(client, class).await;
    let wffc =
        sc.as_ref().and_then(|c| c.volume_binding_mode.as_deref()) == Some("WaitForFirstConsumer");
    let zone = sc
        .as_ref()
        .and_then(|c| c.allowed_topologies.as_ref())
        .and_then(|t| t.first())
        .and_then(|t| t.match_label_expressions.as_ref()?.first().cloned())
        .filter(|e| e.key == "topology.kubernetes.io/zone")
        .and_then(|e| e.values.first().cloned());
    let affinity = match (wffc, consumer, zone) {
        (true, Some(node), _) => Some(("kubernetes.io/hostname", node.to_owned())),
        (_, _, Some(zone)) => Some(("topology.kubernetes.io/zone", zone)),
        _ => None,
    };
    let pv_name = format!("pv-{claim}");
    let mut pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "labels": {SIM_LABEL: namespace}},
        "spec": {
            "capacity": {"storage": bytes.to_string()},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "persistentVolumeReclaimPolicy": "Delete",
            "claimRef": {"namespace": namespace, "name": claim},
            "csi": {"driver": "sim.virtualization.deckhouse.io", "volumeHandle": claim},
        },
    });
    if let Some((key, value)) = affinity {
        pv["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]}});
    }
    let pvc = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "volumeName": pv_name,
            "resources": {"requests": {"storage": bytes.to_string()}},
        },
    });
    let pp = PostParams::default();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    for made in [
        pvs.create(&pp, &serde_json::from_value(pv)?)
            .await
            .map(|_| ()),
        pvcs.create(&pp, &serde_json::from_value(pvc)?)
            .await
            .map(|_| ()),
    ] {
        match made {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
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

async fn delete_claim(client: &Client, namespace: &str, claim: &str) {
    let dp = DeleteParams::default();
    let _ = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
        .delete(claim, &dp)
        .await;
    let _ = Api::<PersistentVolume>::all(client.clone())
        .delete(&format!("pv-{claim}"), &dp)
        .await;
}

async fn reconcile_disk(
    api: &Api<VirtualDisk>,
    vd: &VirtualDisk,
    consumer: Option<&str>,
    state: &State,
) -> anyhow::Result<()> {
    let name = vd.name_any();
    let uid = vd.uid().unwrap_or_default();
    let file = disk_file(state, &uid);
    let client = api.clone().into_client();
    let namespace = vd.namespace().unwrap_or_default();
    let claim = claim_name(&name, &uid);
    if vd.metadata.deletion_timestamp.is_some() {
        if vd.finalizers().iter().any(|f| f == FINALIZER) {
            let _ = std::fs::remove_file(&file);
            delete_claim(&client, &namespace, &claim).await;
            forget(state, &uid);
            remove_finalizer(api, vd).await?;
        }
        return Ok(());
    }
    if !vd.finalizers().iter().any(|f| f == FINALIZER) {
        add_finalizer(api, vd).await?;
        return Ok(());
    }
    let status = vd.status.clone().unwrap_or_default();
    let want = vd
        .spec
        .persistent_volume_claim
        .size
        .as_ref()
        .and_then(|q| api::quantity_bytes(&q.0))
        .unwrap_or(0);
    let have = status.capacity.as_deref().and_then(api::quantity_bytes);
    let storage_class = vd
        .spec
        .persistent_volume_claim
        .storage_class_name
        .clone()
        .unwrap_or_else(|| "default".into());
    match status.phase.as_deref() {
        None | Some("Pending") => {
            let sc = storage_class_object(&client, &storage_class).await;
            let wffc = sc.as_ref().and_then(|c| c.volume_binding_mode.as_deref())
                == Some("WaitForFirstConsumer");
            let status = if wffc {
                json!({
                    "phase": "WaitForFirstConsumer", "storageClassName": storage_class,
                    "target": {"persistentVolumeClaimName": claim},
                    "conditions": [cond("Ready", false, "WaitForFirstConsumer", "the PVC waits for its first consumer")],
                })
            } else {
                json!({
                    "phase": "Provisioning", "storageClassName": storage_class, "progress": "0%",
                    "conditions": [cond("Ready", false, "Provisioning", "the PVC is being provisioned")],
                })
            };
            set_status(api, &name, status).await?;
        }
        // The first VMBDA whose VM runs: provisioned where that VM is.
        Some("WaitForFirstConsumer") if consumer.is_some() => {
            set_status(api, &name, json!({
                "phase": "Provisioning", "storageClassName": storage_class, "progress": "0%",
                "conditions": [cond("Ready", false, "Provisioning", "the PVC is being provisioned")],
            }))
            .await?;
        }
        Some("Provisioning") if due(state, &uid) => {
            let fail = state.faults.fail_next_disk.lock().expect("lock").take();
            if let Some(message) = fail {
                set_status(
                    api,
                    &name,
                    json!({
                        "phase": "Failed",
                        "conditions": [cond("Ready", false, "ProvisioningFailed", &message)],
                    }),
                )
                .await?;
                return Ok(());
            }
            let f = std::fs::File::create(&file)?;
            f.set_len(want)?;
            provision_claim(&client, &namespace, &claim, &storage_class, want, consumer).await?;
            set_status(
                api,
                &name,
                json!({
                    "phase": "Ready", "capacity": want.to_string(), "progress": "100%",
                    "target": {"persistentVolumeClaimName": claim},
                    "conditions": [cond("Ready", true, "Ready", "")],
                }),
            )
            .await?;
            forget(state, &uid);
        }
        Some("Ready") if have.is_some_and(|h| want > h) => {
            set_status(api, &name, json!({
                "phase": "Resizing",
                "conditions": [cond("Ready", true, "Ready", ""), cond("Resized", false, "InProgress", "the PVC is being resized")],
            }))
            .await?;
        }
        Some("Resizing") if due(state, &uid) => {
            let f = std::fs::OpenOptions::new().write(true).open(&file)?;
            if f.metadata()?.len() < want {
                f.set_len(want)?;
            }
            let bound: Vec<u32> = {
                let attached = state.attached.lock().expect("lock");
                attached
                    .values()
                    .filter(|a| a.file == file)
                    .map(|a| a.index)
                    .collect()
            };
            for index in bound {
                loopdev::refresh_capacity(index, &file)?;
            }
            set_status(api, &name, json!({
                "phase": "Ready", "capacity": want.to_string(),
                "conditions": [cond("Ready", true, "Ready", ""), cond("Resized", true, "Resized", "")],
            }))
            .await?;
            forget(state, &uid);
        }
        _ => {}
    }
    Ok(())
}

async fn reconcile_vmbda(
    api: &Api<Vmbda>,
    vms_api: &Api<VirtualMachine>,
    v: &Vmbda,
    vms: &[Arc<VirtualMachine>],
    disks: &[Arc<VirtualDisk>],
    state: &State,
) -> anyhow::Result<()> {
    let name = v.name_any();
    let vm = vms
        .iter()
        .find(|vm| vm.name_any() == v.spec.virtual_machine_name);
    let disk = disks
        .iter()
        .find(|d| d.name_any() == v.spec.block_device_ref.name);
    if v.metadata.deletion_timestamp.is_some() {
        if v.finalizers().iter().any(|f| f == FINALIZER) {
            let gone = state.attached.lock().expect("lock").remove(&name);
            if let Some(a) = gone {
                let _ = std::fs::remove_file(&a.link);
                loopdev::detach(a.index, &a.file)?;
            }
            if let Some(vm) = vm {
                set_vm_devices(vms_api, vm, &name, None).await?;
            }
            forget(state, &name);
            remove_finalizer(api, v).await?;
        }
        return Ok(());
    }
    if !v.finalizers().iter().any(|f| f == FINALIZER) {
        add_finalizer(api, v).await?;
        return Ok(());
    }
    let phase = v.status.as_ref().and_then(|s| s.phase.clone());
    let vm_running =
        vm.is_some_and(|vm| vm.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
    let disk_ready =
        disk.is_some_and(|d| d.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready"));
    if phase.as_deref() == Some("Attached") {
        return Ok(());
    }
    if !vm_running || !disk_ready {
        let vm_msg = match vm {
            None => format!("VirtualMachine {} not found", v.spec.virtual_machine_name),
            Some(_) if !vm_running => format!(
                "VirtualMachine {} is not running",
                v.spec.virtual_machine_name
            ),
            Some(_) => String::new(),
        };
        let disk_msg = if disk_ready {
            String::new()
        } else {
            format!("VirtualDisk {} is not ready", v.spec.block_device_ref.name)
        };
        let want = json!({
            "phase": "Pending", "virtualMachineName": v.spec.virtual_machine_name,
            "conditions": [
                cond("VirtualMachineReady", vm_running, if vm_running { "Ready" } else { "NotReady" }, &vm_msg),
                cond("BlockDeviceReady", disk_ready, if disk_ready { "Ready" } else { "NotReady" }, &disk_msg),
            ],
        });
        if v.status
            .as_ref()
            .map(|s| serde_json::to_value(s).unwrap_or_default())
            != Some(want.clone())
        {
            set_status(api, &name, want).await?;
        }
        forget(state, &name);
        return Ok(());
    }
    if phase.as_deref() != Some("InProgress") {
        set_status(api, &name, json!({
            "phase": "InProgress", "virtualMachineName": v.spec.virtual_machine_name,
            "conditions": [
                cond("VirtualMachineReady", true, "Ready", ""),
                cond("BlockDeviceReady", true, "Ready", ""),
                cond("Attached", false, "AttachmentRequestSent", "the hot-plug request was sent to the VirtualMachine"),
            ],
        }))
        .await?;
        return Ok(());
    }
    if state.faults.stuck_attachments.load(Ordering::Relaxed) || !due(state, &name) {
        return Ok(());
    }
    let (Some(vm), Some(disk)) = (vm, disk) else {
        return Ok(());
    };
    let uid = disk.uid().unwrap_or_default();
    let file = disk_file(state, &uid);
    let link = state.by_id.join(format!(
        "scsi-0QEMU_QEMU_HARDDISK_{}",
        api::disk_serial(&uid)
    ));
    // One device per attachment, also when the status writes below fail and the next
    // pass comes here again.
    let bound = state.attached.lock().expect("lock").contains_key(&name);
    if !bound {
        let index = loopdev::attach(&file, false, &format!("dvp-sim-{name}"))?;
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(loopdev::device_path(index), &link)?;
        state
            .attached
            .lock()
            .expect("lock")
            .insert(name.clone(), Attached { index, file, link });
    }
    let size = disk
        .status
        .as_ref()
        .and_then(|s| s.capacity.clone())
        .unwrap_or_default();
    set_vm_devices(vms_api, vm, &name, Some((&disk.name_any(), &size))).await?;
    // Taken as the status write is sent: the provider may see it before the write returns.
    state
        .attached_at
        .lock()
        .expect("lock")
        .insert(name.clone(), Instant::now());
    set_status(
        api,
        &name,
        json!({
            "phase": "Attached", "virtualMachineName": v.spec.virtual_machine_name,
            "conditions": [
                cond("VirtualMachineReady", true, "Ready", ""),
                cond("BlockDeviceReady", true, "Ready", ""),
                cond("Attached", true, "Attached", ""),
            ],
        }),
    )
    .await?;
    forget(state, &name);
    Ok(())
}

/// Adds (or, with `disk` None, removes) the hot-plugged disk of `vmbda` in the VM's
/// `status.blockDeviceRefs`.
async fn set_vm_devices(
    api: &Api<VirtualMachine>,
    vm: &VirtualMachine,
    vmbda: &str,
    disk: Option<(&str, &str)>,
) -> anyhow::Result<()> {
    let mut refs: Vec<serde_json::Value> = vm
        .status
        .as_ref()
        .map(|s| {
            s.block_device_refs
                .iter()
                .filter(|r| {
                    r.virtual_machine_block_device_attachment_name.as_deref() != Some(vmbda)
                })
                .map(|r| serde_json::to_value(r).unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    if let Some((disk, size)) = disk {
        // The guest's name for it: sdb, sdc, … after the root disk.
        let target = format!("sd{}", char::from(b'b' + (refs.len() % 24) as u8));
        refs.push(json!({"kind": "VirtualDisk", "name": disk, "size": size, "target": target, "attached": true, "hotplugged": true, "virtualMachineBlockDeviceAttachmentName": vmbda}));
    }
    match set_status(api, &vm.name_any(), json!({"blockDeviceRefs": refs})).await {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// An account in the parent bound to exactly `deploy/parent/dvp/rbac.yaml`, in
/// `namespace` (the manifest's `my-cluster` replaced): its Role, and with
/// `cluster_role` also its optional ClusterRole (made per namespace, so tests do not
/// share one; [`drop_tenant`] removes it). Returns a client that talks as that account.
pub async fn tenant(admin_kubeconfig: &str, namespace: &str, cluster_role: bool) -> Client {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let admin = crate::real::client(admin_kubeconfig).await;
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/parent/dvp/rbac.yaml"),
    )
    .expect("deploy/parent/dvp/rbac.yaml");
    // The manifest's namespace is a placeholder, in metadata, subjects and resourceNames.
    let text = text.replace("my-cluster", namespace);
    let docs: Vec<serde_json::Value> = text
        .split("\n---")
        .filter_map(|d| serde_saphyr::from_str::<serde_json::Value>(d).ok())
        .filter(|d| d.is_object())
        .collect();
    let pp = PostParams::default();
    let cluster_name = cluster_role_name(namespace);
    for doc in docs {
        let kind = doc["kind"].as_str().expect("kind").to_owned();
        let made = match kind.as_str() {
            "ServiceAccount" => Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
                .create(&pp, &serde_json::from_value(doc).expect("sa"))
                .await
                .map(|_| ()),
            "Role" => Api::<Role>::namespaced(admin.clone(), namespace)
                .create(&pp, &serde_json::from_value(doc).expect("role"))
                .await
                .map(|_| ()),
            "RoleBinding" => Api::<RoleBinding>::namespaced(admin.clone(), namespace)
                .create(&pp, &serde_json::from_value(doc).expect("binding"))
                .await
                .map(|_| ()),
            "ClusterRole" if !cluster_role => Ok(()),
            "ClusterRole" => {
                let mut role: ClusterRole = serde_json::from_value(doc).expect("cluster role");
                role.metadata.name = Some(cluster_name.clone());
                let made = Api::<ClusterRole>::all(admin.clone())
                    .create(&pp, &role)
                    .await
                    .map(|_| ());
                let binding: ClusterRoleBinding = serde_json::from_value(json!({
                    "metadata": {"name": cluster_name},
                    "subjects": [{"kind": "ServiceAccount", "name": "overcast-dvp", "namespace": namespace}],
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_name},
                }))
                .expect("cluster role binding");
                made.and(
                    Api::<ClusterRoleBinding>::all(admin.clone())
                        .create(&pp, &binding)
                        .await
                        .map(|_| ()),
                )
            }
            other => panic!("unexpected {other} in the parent RBAC manifest"),
        };
        match made {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("{kind} of the parent RBAC manifest: {e}"),
        }
    }
    let req: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).expect("token");
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create_token_request("overcast-dvp", &pp, &req)
        .await
        .expect("a token for the parent account")
        .status
        .expect("token status")
        .token;
    let kubeconfig = kube::config::Kubeconfig::read_from(admin_kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    crate::real::as_account(&config, &token).await
}

fn cluster_role_name(namespace: &str) -> String {
    format!("overcast-dvp-{namespace}")
}

/// Removes what [`tenant`] made outside the namespace.
pub async fn drop_tenant(admin: &Client, namespace: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let name = cluster_role_name(namespace);
    let dp = DeleteParams::default();
    let _ = Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(&name, &dp)
        .await;
    let _ = Api::<ClusterRole>::all(admin.clone())
        .delete(&name, &dp)
        .await;
}
