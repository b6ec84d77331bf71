//! A faithful oVirt engine for the zVirt tests: the subset of `/ovirt-engine/api` and
//! `/ovirt-engine/sso/oauth/token` the provider uses, with the engine's behaviour as its
//! REST API reference describes it — JSON (`Accept: application/json`) with numbers and
//! booleans as strings, an empty collection as `{}`, errors as faults (`{"reason",
//! "detail"}`) with the engine's status codes (400 validation, 401 without a valid token,
//! 404 unknown id, 409 a locked object or a conflicting state); SSO tokens that expire;
//! disks `locked` for a while after create, resize and remove; attachments inactive for a
//! while before they are `active`. Faults on demand: the HTML error page the engine's
//! proxy serves while it is down, slow answers, a disk stuck locked, every token expired.
//!
//! Attachments are backed by real loop devices linked as
//! `scsi-0QEMU_QEMU_HARDDISK_<disk-id[:20]>` in a by-id directory the node plugin is
//! pointed at, so a volume is really formatted and mounted. Plain HTTP on loopback.
//!
//! It speaks the engine's XML (its canonical form, what the official SDKs and the Go
//! clients upstream send) as well as JSON: the official Python SDK drives it in a test.
//! Search takes `alias=`/`name=` (case-insensitive, `*` wildcards) and `max`; nothing
//! else of the search language.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

pub const USER: &str = "admin@internal";
pub const PASSWORD: &str = "overcast-sim-password";

/// How long the engine takes over each transition.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    /// A new disk, or a resized one, stays `locked` this long.
    pub locked: Duration,
    /// An attachment is inactive this long before it is active.
    pub activate: Duration,
    /// A removed disk is `locked` this long before it is gone.
    pub remove: Duration,
    /// Every answer waits this long first.
    pub answer: Duration,
}

impl Default for Latency {
    fn default() -> Self {
        Self {
            locked: Duration::from_millis(300),
            activate: Duration::from_millis(200),
            remove: Duration::from_millis(150),
            answer: Duration::from_millis(2),
        }
    }
}

struct SimDisk {
    id: String,
    alias: String,
    description: String,
    size: u64,
    /// The size the engine reports once the disk is unlocked (a resize in progress).
    pending_size: Option<u64>,
    format: String,
    sparse: bool,
    domain: String,
    unlock_at: Option<Instant>,
    /// A removal in progress: gone at this instant.
    gone_at: Option<Instant>,
    file: PathBuf,
    stuck: bool,
}

struct SimAttachment {
    active_at: Instant,
    /// The loop device, once active.
    device: Option<u32>,
    read_only: bool,
}

struct SimVm {
    id: String,
    name: String,
    status: String,
    attachments: BTreeMap<String, SimAttachment>,
    /// The guest agent's addresses (reported devices).
    ips: Vec<String>,
    cpus: u64,
    memory: u64,
    instance_type: Option<String>,
    /// The id of the cluster the VM runs in.
    cluster: String,
}

struct Domain {
    id: String,
    name: String,
    available: u64,
    storage: String,
    external_status: String,
    /// The id of the data center the domain is attached to.
    data_center: String,
}

struct SimCluster {
    id: String,
    name: String,
    data_center: String,
}

struct DataCenter {
    id: String,
    name: String,
}

#[derive(Default)]
struct State {
    disks: BTreeMap<String, SimDisk>,
    vms: BTreeMap<String, SimVm>,
    domains: Vec<Domain>,
    clusters: Vec<SimCluster>,
    data_centers: Vec<DataCenter>,
    tokens: BTreeMap<String, Instant>,
    /// Every token handed out, expired ones too.
    issued: Vec<String>,
    token_ttl: Option<Duration>,
    html: bool,
    slow: Option<Duration>,
    stuck_alias: Option<String>,
    /// Calls by `METHOD route` (ids replaced by `{id}`).
    calls: BTreeMap<String, u64>,
    logins: u64,
    /// Calls answered 401 (no valid token).
    unauthorized: u64,
}

#[derive(Clone)]
pub struct Engine {
    state: Arc<Mutex<State>>,
    latency: Latency,
    dir: Arc<PathBuf>,
    by_id: Arc<PathBuf>,
    url: Arc<Mutex<String>>,
}

fn uuid() -> String {
    let b: [u8; 16] = rand::random();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        u16::from_be_bytes([b[4], b[5]]),
        u16::from_be_bytes([b[6], b[7]]) & 0x0fff,
        (u16::from_be_bytes([b[8], b[9]]) & 0x3fff) | 0x8000,
        u64::from_be_bytes([0, 0, b[10], b[11], b[12], b[13], b[14], b[15]])
    )
}

type Answer = Response<Full<Bytes>>;

fn answer(status: u16, body: Value) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn fault(status: u16, detail: &str) -> Answer {
    answer(
        status,
        json!({"reason": "Operation Failed", "detail": format!("[{detail}]")}),
    )
}

/// The page Apache serves in front of an engine that is down.
fn html_page() -> Answer {
    let mut r = Response::new(Full::new(Bytes::from_static(
        b"<!DOCTYPE HTML PUBLIC \"-//IETF//DTD HTML 2.0//EN\">\n<html><head>\n<title>503 Service Unavailable</title>\n</head><body>\n<h1>Service Unavailable</h1>\n<p>The server is temporarily unable to service your request due to maintenance downtime or capacity problems. Please try again later.</p>\n</body></html>\n",
    )));
    *r.status_mut() = hyper::StatusCode::SERVICE_UNAVAILABLE;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/html; charset=iso-8859-1"),
    );
    r
}

const API: &str = "/ovirt-engine/api";
/// The engine's one cluster, as a fresh install names it.
pub const CLUSTER: &str = "Default";
const CLUSTER_ID: &str = "a7d6ba4e-8d2b-11ee-9f3c-00163e000001";
const DATA_CENTER_ID: &str = "a7d6ba4e-8d2b-11ee-9f3c-00163e000002";
/// The engine's data center, as a fresh install names it.
pub const DATA_CENTER: &str = "Default";
/// The instance types a fresh engine has: (name, CPUs, memory in MiB).
pub const INSTANCE_TYPES: &[(&str, u64, u64)] = &[
    ("Tiny", 1, 512),
    ("Small", 1, 2048),
    ("Medium", 2, 4096),
    ("Large", 2, 8192),
    ("XLarge", 4, 16384),
];

/// An instance type's stable id in this engine.
fn instance_type_id(name: &str) -> String {
    let n = INSTANCE_TYPES
        .iter()
        .position(|(t, _, _)| *t == name)
        .unwrap_or(0);
    format!("00000003-0003-0003-0003-{n:012x}")
}

impl Engine {
    /// An engine with one data storage domain `data` of `capacity` bytes, keeping disk
    /// files in `dir` and linking attached disks in `by_id`.
    pub fn new(dir: &Path, by_id: &Path, capacity: u64, latency: Latency) -> Self {
        let state = State {
            domains: vec![Domain {
                id: uuid(),
                name: "data".into(),
                available: capacity,
                storage: "nfs".into(),
                external_status: "ok".into(),
                data_center: DATA_CENTER_ID.into(),
            }],
            clusters: vec![SimCluster {
                id: CLUSTER_ID.into(),
                name: CLUSTER.into(),
                data_center: DATA_CENTER_ID.into(),
            }],
            data_centers: vec![DataCenter {
                id: DATA_CENTER_ID.into(),
                name: DATA_CENTER.into(),
            }],
            ..State::default()
        };
        Self {
            state: Arc::new(Mutex::new(state)),
            latency,
            dir: Arc::new(dir.to_owned()),
            by_id: Arc::new(by_id.to_owned()),
            url: Arc::default(),
        }
    }

    /// Serves plain HTTP on a loopback port; returns the API URL
    /// (`http://127.0.0.1:N/ovirt-engine/api`).
    pub async fn start(&self) -> String {
        self.serve(None).await
    }

    /// Serves HTTPS with `tls`'s certificate, as a real engine does (its own CA);
    /// returns the API URL (`https://127.0.0.1:N/ovirt-engine/api`).
    pub async fn start_tls(&self, tls: tokio_rustls::TlsAcceptor) -> String {
        self.serve(Some(tls)).await
    }

    async fn serve(&self, tls: Option<tokio_rustls::TlsAcceptor>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let engine = self.clone();
        let scheme = if tls.is_some() { "https" } else { "http" };
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (engine, tls) = (engine.clone(), tls.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let engine = engine.clone();
                        async move { Ok::<_, Infallible>(engine.handle(req).await) }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    match tls {
                        None => {
                            let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                        }
                        // A client that does not trust the certificate fails the handshake.
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(stream).await {
                                let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                            }
                        }
                    }
                });
            }
        });
        let url = format!("{scheme}://{addr}{API}");
        *self.url.lock().expect("url") = url.clone();
        url
    }

    /// A VM (status `up`, 2 CPUs, 4 GiB, no guest addresses yet) in the cluster
    /// `Default`; returns its id.
    pub fn add_vm(&self, name: &str) -> String {
        self.add_vm_in(name, CLUSTER)
    }

    /// A VM as [`Engine::add_vm`], in the cluster named `cluster`.
    pub fn add_vm_in(&self, name: &str, cluster: &str) -> String {
        let id = uuid();
        let mut st = self.state.lock().expect("state");
        let cluster = st
            .clusters
            .iter()
            .find(|c| c.name == cluster)
            .map(|c| c.id.clone())
            .unwrap_or_else(|| panic!("no cluster {cluster}"));
        st.vms.insert(
            id.clone(),
            SimVm {
                id: id.clone(),
                name: name.to_owned(),
                status: "up".into(),
                attachments: BTreeMap::new(),
                ips: Vec::new(),
                cpus: 2,
                memory: 4 << 30,
                instance_type: None,
                cluster,
            },
        );
        id
    }

    /// Another data center; returns its id.
    pub fn add_data_center(&self, name: &str) -> String {
        let id = uuid();
        self.state
            .lock()
            .expect("state")
            .data_centers
            .push(DataCenter {
                id: id.clone(),
                name: name.to_owned(),
            });
        id
    }

    /// Another cluster, in the data center named `data_center`; returns its id.
    pub fn add_cluster(&self, name: &str, data_center: &str) -> String {
        let id = uuid();
        let mut st = self.state.lock().expect("state");
        let data_center = data_center_id(&st, data_center);
        st.clusters.push(SimCluster {
            id: id.clone(),
            name: name.to_owned(),
            data_center,
        });
        id
    }

    /// Another data storage domain (`storage`: nfs, iscsi, fcp, …) in the data center
    /// `Default`.
    pub fn add_storage_domain(&self, name: &str, capacity: u64, storage: &str) {
        self.add_storage_domain_in(name, capacity, storage, DATA_CENTER);
    }

    /// A data storage domain as [`Engine::add_storage_domain`], attached to the data
    /// center named `data_center`.
    pub fn add_storage_domain_in(
        &self,
        name: &str,
        capacity: u64,
        storage: &str,
        data_center: &str,
    ) {
        let mut st = self.state.lock().expect("state");
        let data_center = data_center_id(&st, data_center);
        st.domains.push(Domain {
            id: uuid(),
            name: name.to_owned(),
            available: capacity,
            storage: storage.to_owned(),
            external_status: "ok".into(),
            data_center,
        });
    }

    /// A storage domain's `external_status` (`ok`, `warning`, `error`, `failure`).
    pub fn set_storage_domain_status(&self, name: &str, status: &str) {
        let mut st = self.state.lock().expect("state");
        if let Some(d) = st.domains.iter_mut().find(|d| d.name == name) {
            d.external_status = status.to_owned();
        }
    }

    /// What the guest agent reports of VM `id`'s addresses.
    pub fn set_vm_ips(&self, id: &str, ips: &[&str]) {
        if let Some(vm) = self.state.lock().expect("state").vms.get_mut(id) {
            vm.ips = ips.iter().map(|s| s.to_string()).collect();
        }
    }

    /// VM `id`'s status (`up`, `down`, `powering_up`, …).
    pub fn set_vm_status(&self, id: &str, status: &str) {
        if let Some(vm) = self.state.lock().expect("state").vms.get_mut(id) {
            vm.status = status.to_owned();
        }
    }

    /// VM `id` made from the engine's instance type `name` (`Small`, `Medium`, …).
    pub fn set_vm_instance_type(&self, id: &str, name: &str) {
        if let Some(vm) = self.state.lock().expect("state").vms.get_mut(id) {
            vm.instance_type = INSTANCE_TYPES
                .iter()
                .find(|(n, _, _)| *n == name)
                .map(|(n, _, _)| n.to_string());
        }
    }

    /// Removes a VM (its attachments' devices go with it).
    pub fn remove_vm(&self, id: &str) {
        let mut st = self.state.lock().expect("state");
        if let Some(vm) = st.vms.remove(id) {
            for (disk, mut a) in vm.attachments {
                let file = st.disks.get(&disk).map(|d| d.file.clone());
                self.unplug(&disk, &mut a, file.as_deref());
            }
        }
    }

    /// Deactivates the attachment of `disk` to `vm` as an admin would (the device goes;
    /// the attachment stays, inactive, until someone activates it).
    pub fn deactivate(&self, vm: &str, disk: &str) {
        let mut st = self.state.lock().expect("state");
        let file = st.disks.get(disk).map(|d| d.file.clone());
        if let Some(a) = st.vms.get_mut(vm).and_then(|v| v.attachments.get_mut(disk)) {
            self.deactivated(disk, a, file.as_deref());
        }
    }

    /// Unplugs every attachment's device (the attachments stay): a test calls it on its
    /// way out, failed or not, before its directory goes, so no loop device outlives it.
    pub fn unplug_all(&self) {
        let mut st = self.state.lock().expect("state");
        let files = disk_files(&st);
        for vm in st.vms.values_mut() {
            for (disk, a) in vm.attachments.iter_mut() {
                self.unplug(disk, a, files.get(disk).map(PathBuf::as_path));
            }
        }
    }

    /// Every answer is the proxy's HTML error page while `on`.
    pub fn set_html(&self, on: bool) {
        self.state.lock().expect("state").html = on;
    }

    /// Every answer waits `delay` first.
    pub fn set_slow(&self, delay: Option<Duration>) {
        self.state.lock().expect("state").slow = delay;
    }

    /// Disks made with this alias stay locked.
    pub fn stick_locked(&self, alias: Option<&str>) {
        self.state.lock().expect("state").stuck_alias = alias.map(str::to_owned);
    }

    /// Disks stuck locked get unstuck (their operation finishes at last).
    pub fn unstick_all(&self) {
        let mut st = self.state.lock().expect("state");
        for d in st.disks.values_mut() {
            d.stuck = false;
        }
    }

    /// Tokens issued from now on live `ttl` (the engine's default is 30 minutes).
    pub fn set_token_ttl(&self, ttl: Option<Duration>) {
        self.state.lock().expect("state").token_ttl = ttl;
    }

    /// Every token issued so far expires now (the engine restarted, or an admin logged
    /// the session out).
    pub fn expire_tokens(&self) {
        self.state.lock().expect("state").tokens.clear();
    }

    /// Every SSO token the engine has handed out (to check none reaches a log).
    pub fn issued_tokens(&self) -> Vec<String> {
        self.state.lock().expect("state").issued.clone()
    }

    /// SSO logins so far.
    pub fn logins(&self) -> u64 {
        self.state.lock().expect("state").logins
    }

    /// How many VMs the engine has.
    pub fn vm_count(&self) -> usize {
        self.state.lock().expect("state").vms.len()
    }

    /// When the attachment of `disk` to `vm` became (or becomes) active.
    pub fn active_at(&self, vm: &str, disk: &str) -> Option<Instant> {
        let st = self.state.lock().expect("state");
        Some(st.vms.get(vm)?.attachments.get(disk)?.active_at)
    }

    /// Calls answered 401 so far (no valid token).
    pub fn unauthorized(&self) -> u64 {
        self.state.lock().expect("state").unauthorized
    }

    /// Calls so far by `METHOD route`.
    pub fn calls(&self) -> BTreeMap<String, u64> {
        self.state.lock().expect("state").calls.clone()
    }

    /// API calls so far (logins not counted).
    pub fn total_calls(&self) -> u64 {
        self.calls().values().sum()
    }

    /// The disks the engine holds: (id, alias, size).
    pub fn disks(&self) -> Vec<(String, String, u64)> {
        let mut st = self.state.lock().expect("state");
        self.tick(&mut st);
        st.disks
            .values()
            .map(|d| (d.id.clone(), d.alias.clone(), d.size))
            .collect()
    }

    /// Advances every transition whose time has come: locks end, removals finish,
    /// attachments go active (and their devices appear).
    fn tick(&self, st: &mut State) {
        let now = Instant::now();
        for d in st.disks.values_mut() {
            if d.unlock_at.is_some_and(|t| now >= t) && !d.stuck {
                d.unlock_at = None;
                if let Some(size) = d.pending_size.take() {
                    d.size = size;
                    if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&d.file) {
                        let _ = f.set_len(size);
                    }
                }
            }
        }
        let gone: Vec<String> = st
            .disks
            .values()
            .filter(|d| d.gone_at.is_some_and(|t| now >= t))
            .map(|d| d.id.clone())
            .collect();
        for id in gone {
            if let Some(d) = st.disks.remove(&id) {
                let _ = std::fs::remove_file(&d.file);
                if let Some(domain) = st.domains.iter_mut().find(|x| x.id == d.domain) {
                    domain.available += d.size;
                }
            }
        }
        let files = disk_files(st);
        for vm in st.vms.values_mut() {
            for (disk, a) in vm.attachments.iter_mut() {
                if a.device.is_none() && now >= a.active_at {
                    if let Some(file) = files.get(disk) {
                        a.device = self.plug(disk, file, a.read_only);
                    }
                }
            }
        }
        // A resized disk's attached device grows with it.
        for vm in st.vms.values() {
            for (disk, a) in &vm.attachments {
                if let (Some(index), Some(file)) = (a.device, files.get(disk)) {
                    let _ = overcast_cloud_local::loopdev::refresh_capacity(index, file);
                }
            }
        }
    }

    fn link(&self, disk: &str) -> PathBuf {
        let serial: String = disk.chars().take(20).collect();
        self.by_id
            .join(format!("scsi-0QEMU_QEMU_HARDDISK_{serial}"))
    }

    fn plug(&self, disk: &str, file: &Path, read_only: bool) -> Option<u32> {
        let index =
            overcast_cloud_local::loopdev::attach(file, read_only, "overcast-zvirt-sim").ok()?;
        let _ = std::fs::remove_file(self.link(disk));
        let _ = std::os::unix::fs::symlink(
            overcast_cloud_local::loopdev::device_path(index),
            self.link(disk),
        );
        Some(index)
    }

    /// An inactive attachment: its device unplugged, never active again until activated.
    fn deactivated(&self, disk: &str, a: &mut SimAttachment, file: Option<&Path>) {
        self.unplug(disk, a, file);
        a.active_at = Instant::now() + Duration::from_secs(365 * 24 * 3600);
    }

    /// Unplugs the attachment's device (the attachment itself stays unless dropped).
    fn unplug(&self, disk: &str, a: &mut SimAttachment, file: Option<&Path>) {
        let _ = std::fs::remove_file(self.link(disk));
        if let (Some(index), Some(file)) = (a.device, file) {
            let _ = overcast_cloud_local::loopdev::detach(index, file);
        }
        a.device = None;
    }

    fn disk_json(&self, st: &State, d: &SimDisk) -> Value {
        let vms: Vec<Value> = st
            .vms
            .values()
            .filter(|vm| vm.attachments.contains_key(&d.id))
            .map(|vm| json!({"href": format!("{API}/vms/{}", vm.id), "id": vm.id}))
            .collect();
        let status = if d.unlock_at.is_some() || d.gone_at.is_some() {
            "locked"
        } else {
            "ok"
        };
        let mut v = json!({
            "href": format!("{API}/disks/{}", d.id),
            "id": d.id,
            "name": d.alias,
            "alias": d.alias,
            "description": d.description,
            "provisioned_size": d.size.to_string(),
            "actual_size": "0",
            "total_size": "0",
            "format": d.format,
            "sparse": d.sparse.to_string(),
            "shareable": "false",
            "bootable": "false",
            "status": status,
            "content_type": "data",
            "storage_type": "image",
            "wipe_after_delete": "false",
            "propagate_errors": "false",
            "storage_domains": {"storage_domain": [{"href": format!("{API}/storagedomains/{}", d.domain), "id": d.domain}]},
        });
        if !vms.is_empty() {
            v["vms"] = json!({ "vm": vms });
        }
        v
    }

    fn attachment_json(vm: &SimVm, disk: &str, a: &SimAttachment) -> Value {
        json!({
            "href": format!("{API}/vms/{}/diskattachments/{disk}", vm.id),
            "id": disk,
            "active": (a.device.is_some()).to_string(),
            "bootable": "false",
            "interface": "virtio_scsi",
            "pass_discard": "false",
            "read_only": a.read_only.to_string(),
            "uses_scsi_reservation": "false",
            "disk": {"href": format!("{API}/disks/{disk}"), "id": disk},
            "vm": {"href": format!("{API}/vms/{}", vm.id), "id": vm.id},
        })
    }

    /// Answers in the engine's XML when the client asks for it (`Accept: application/xml`,
    /// as the SDKs do), reading an XML body too; JSON otherwise.
    async fn handle(&self, req: Request<hyper::body::Incoming>) -> Answer {
        let header = |name: hyper::header::HeaderName| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let wants_xml = header(hyper::header::ACCEPT).contains("xml");
        let method = req.method().as_str().to_owned();
        let path = req.uri().path().to_owned();
        let resp = self.handle_json(req).await;
        if !wants_xml
            || resp
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .is_none_or(|v| v != "application/json")
        {
            return resp;
        }
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let root = match status.as_u16() {
            400.. => "fault".to_owned(),
            _ => xml_root(&method, &path),
        };
        let mut r = Response::new(Full::new(Bytes::from(xml::to_xml(&root, &value))));
        *r.status_mut() = status;
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/xml;charset=UTF-8"),
        );
        r
    }

    async fn handle_json(&self, req: Request<hyper::body::Incoming>) -> Answer {
        tokio::time::sleep(self.latency.answer).await;
        let slow = self.state.lock().expect("state").slow;
        if let Some(delay) = slow {
            tokio::time::sleep(delay).await;
        }
        let method = req.method().as_str().to_owned();
        let path = req.uri().path().to_owned();
        let query = req.uri().query().unwrap_or("").to_owned();
        let auth = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned);
        let body = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut st = self.state.lock().expect("state");
        if st.html {
            return html_page();
        }
        if path == "/ovirt-engine/sso/oauth/token" && method == "POST" {
            return self.login(&mut st, &body);
        }
        let Some(rest) = path.strip_prefix(API) else {
            return fault(404, "Not found");
        };
        let valid = auth
            .as_deref()
            .and_then(|t| st.tokens.get(t))
            .is_some_and(|until| Instant::now() < *until);
        if !valid {
            st.unauthorized += 1;
            // The engine answers an expired or unknown token with 401 and no fault.
            let mut r = answer(401, json!({}));
            r.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer"),
            );
            return r;
        }
        self.tick(&mut st);
        let parts: Vec<&str> = rest.trim_matches('/').split('/').collect();
        let route = parts
            .iter()
            .enumerate()
            .map(|(i, p)| if i % 2 == 1 { "{id}" } else { p })
            .collect::<Vec<_>>()
            .join("/");
        *st.calls.entry(format!("{method} /{route}")).or_default() += 1;
        let doc: Value = match body.first() {
            Some(b'<') => match xml::from_xml(&String::from_utf8_lossy(&body)) {
                Ok((_, v)) => v,
                Err(e) => return fault(400, &format!("Request syntax error: {e}")),
            },
            _ => serde_json::from_slice(&body).unwrap_or(Value::Null),
        };
        let search = form_value(&query, "search");
        // `max` caps a listing (no `max`: everything, as the engine answers).
        let max = form_value(&query, "max")
            .and_then(|m| m.parse::<usize>().ok())
            .unwrap_or(usize::MAX);
        match (method.as_str(), parts.as_slice()) {
            ("GET", [""]) => answer(
                200,
                json!({"product_info": {"name": "oVirt Engine", "vendor": "ovirt.org",
                    "version": {"major": "4", "minor": "5", "build": "4", "revision": "0", "full_version": "4.5.4"}}}),
            ),
            ("GET", ["disks"]) => {
                let wanted = search.as_deref().and_then(|s| search_term(s, "alias"));
                let list: Vec<Value> = st
                    .disks
                    .values()
                    .filter(|d| wanted.as_deref().is_none_or(|a| search_matches(a, &d.alias)))
                    .take(max)
                    .map(|d| self.disk_json(&st, d))
                    .collect();
                collection("disk", list)
            }
            ("POST", ["disks"]) => self.add_disk(&mut st, &doc),
            ("GET", ["disks", id]) => match st.disks.get(*id) {
                Some(d) => answer(200, self.disk_json(&st, d)),
                None => not_found(id),
            },
            ("PUT", ["disks", id]) => self.update_disk(&mut st, id, &doc),
            ("DELETE", ["disks", id]) => self.remove_disk(&mut st, id),
            ("GET", ["vms"]) => {
                let wanted = search.as_deref().and_then(|s| search_term(s, "name"));
                let list: Vec<Value> = st
                    .vms
                    .values()
                    .filter(|vm| wanted.as_deref().is_none_or(|n| search_matches(n, &vm.name)))
                    .take(max)
                    .map(|vm| vm_json(vm, follows(&query, "reported_devices")))
                    .collect();
                collection("vm", list)
            }
            ("GET", ["vms", id]) => match st.vms.get(*id) {
                Some(vm) => answer(200, vm_json(vm, follows(&query, "reported_devices"))),
                None => not_found(id),
            },
            ("GET", ["vms", id, "nics"]) => match st.vms.get(*id) {
                Some(vm) => collection(
                    "nic",
                    vec![json!({"href": format!("{API}/vms/{}/nics/{}", vm.id, vm.id), "id": vm.id,
                        "name": "nic1", "interface": "virtio", "linked": "true", "plugged": "true",
                        "mac": {"address": "56:6f:1a:2b:00:01"},
                        "vm": {"href": format!("{API}/vms/{}", vm.id), "id": vm.id}})],
                ),
                None => not_found(id),
            },
            ("GET", ["vms", id, "reporteddevices"]) => match st.vms.get(*id) {
                Some(vm) => answer(200, reported_devices(vm)),
                None => not_found(id),
            },
            ("GET", ["datacenters"]) => collection(
                "data_center",
                st.data_centers.iter().map(data_center_json).collect(),
            ),
            ("GET", ["instancetypes"]) => collection(
                "instance_type",
                INSTANCE_TYPES
                    .iter()
                    .map(|(name, cpus, mib)| {
                        let id = instance_type_id(name);
                        json!({"href": format!("{API}/instancetypes/{id}"), "id": id, "name": name,
                            "memory": (mib << 20).to_string(),
                            "cpu": {"topology": {"sockets": cpus.to_string(), "cores": "1", "threads": "1"}}})
                    })
                    .collect(),
            ),
            ("GET", ["vms", id, "diskattachments"]) => match st.vms.get(*id) {
                Some(vm) => collection(
                    "disk_attachment",
                    vm.attachments
                        .iter()
                        .map(|(d, a)| Self::attachment_json(vm, d, a))
                        .collect(),
                ),
                None => not_found(id),
            },
            ("POST", ["vms", id, "diskattachments"]) => self.attach(&mut st, id, &doc),
            ("GET", ["vms", id, "diskattachments", disk]) => {
                match st
                    .vms
                    .get(*id)
                    .and_then(|vm| Some((vm, vm.attachments.get(*disk)?)))
                {
                    Some((vm, a)) => answer(200, Self::attachment_json(vm, disk, a)),
                    None => not_found(disk),
                }
            }
            // Activating (or deactivating) an attachment: a plugged device is unplugged on
            // deactivation; activation takes the engine's activation time again.
            ("PUT", ["vms", id, "diskattachments", disk]) => {
                let file = st.disks.get(*disk).map(|d| d.file.clone());
                let Some(vm) = st.vms.get_mut(*id) else {
                    return not_found(id);
                };
                let Some(a) = vm.attachments.get_mut(*disk) else {
                    return not_found(disk);
                };
                match doc["active"].as_str() {
                    Some("false") => self.deactivated(disk, a, file.as_deref()),
                    Some("true") if a.device.is_none() => {
                        let soon = Instant::now() + self.latency.activate;
                        a.active_at = a.active_at.min(soon);
                    }
                    _ => {}
                }
                let vm = &st.vms[*id];
                answer(200, Self::attachment_json(vm, disk, &vm.attachments[*disk]))
            }
            ("DELETE", ["vms", id, "diskattachments", disk]) => {
                let file = st.disks.get(*disk).map(|d| d.file.clone());
                let Some(vm) = st.vms.get_mut(*id) else {
                    return not_found(id);
                };
                match vm.attachments.remove(*disk) {
                    Some(mut a) => {
                        self.unplug(disk, &mut a, file.as_deref());
                        answer(200, json!({}))
                    }
                    None => not_found(disk),
                }
            }
            ("GET", ["clusters"]) => collection(
                "cluster",
                st.clusters
                    .iter()
                    .map(|c| {
                        json!({"href": format!("{API}/clusters/{}", c.id), "id": c.id, "name": c.name,
                            "data_center": data_center_ref(&st, &c.data_center, follows(&query, "data_center"))})
                    })
                    .collect(),
            ),
            ("GET", ["storagedomains"]) => collection(
                "storage_domain",
                st.domains
                    .iter()
                    .map(|sd| {
                        let used: u64 = st
                            .disks
                            .values()
                            .filter(|d| d.domain == sd.id)
                            .map(|d| d.size)
                            .sum();
                        json!({
                            "href": format!("{API}/storagedomains/{}", sd.id), "id": sd.id,
                            "name": sd.name, "type": "data", "master": (sd.name == "data").to_string(),
                            "available": sd.available.to_string(), "used": used.to_string(),
                            "committed": used.to_string(), "external_status": sd.external_status,
                            "storage": {"type": sd.storage},
                            "data_centers": {"data_center": [
                                data_center_ref(&st, &sd.data_center, follows(&query, "data_centers"))]},
                        })
                    })
                    .collect(),
            ),
            _ => fault(404, &format!("No handler for {method} {path}")),
        }
    }

    fn login(&self, st: &mut State, body: &[u8]) -> Answer {
        let form = String::from_utf8_lossy(body).into_owned();
        let user = form_value(&form, "username");
        let password = form_value(&form, "password");
        let grant = form_value(&form, "grant_type");
        if grant.as_deref() != Some("password")
            || user.as_deref() != Some(USER)
            || password.as_deref() != Some(PASSWORD)
        {
            return answer(
                400,
                json!({"error_code": "access_denied", "error": "Cannot authenticate user: Invalid username or password."}),
            );
        }
        st.logins += 1;
        let ttl = st.token_ttl.unwrap_or(Duration::from_secs(1800));
        let token = format!("{}{}", uuid().replace('-', ""), uuid().replace('-', ""));
        st.tokens.insert(token.clone(), Instant::now() + ttl);
        st.issued.push(token.clone());
        let exp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_add(ttl)
            .as_millis();
        answer(
            200,
            json!({"access_token": token, "scope": "ovirt-app-api ovirt-ext=token-info:authz-search",
                "exp": exp.to_string(), "token_type": "bearer"}),
        )
    }

    fn add_disk(&self, st: &mut State, doc: &Value) -> Answer {
        let alias = doc["alias"].as_str().or(doc["name"].as_str()).unwrap_or("");
        let size = number(&doc["provisioned_size"]);
        let domain_name = doc["storage_domains"]["storage_domain"][0]["name"]
            .as_str()
            .unwrap_or("");
        let (Some(size), false) = (size, alias.is_empty()) else {
            return fault(
                400,
                "Cannot add Virtual Disk. Request syntax error: provisioned_size and alias are required",
            );
        };
        let Some(domain) = st.domains.iter_mut().find(|d| d.name == domain_name) else {
            return fault(
                400,
                &format!("Cannot add Virtual Disk. Storage Domain {domain_name} does not exist"),
            );
        };
        if size > domain.available {
            return fault(
                409,
                &format!(
                    "Cannot add Virtual Disk. Low disk space on Storage Domain {}.",
                    domain.name
                ),
            );
        }
        domain.available -= size;
        let domain_id = domain.id.clone();
        let id = uuid();
        let file = self.dir.join(format!("{id}.img"));
        if std::fs::File::create(&file)
            .and_then(|f| f.set_len(size))
            .is_err()
        {
            return fault(500, "Internal Engine Error");
        }
        let stuck = st.stuck_alias.as_deref() == Some(alias);
        let disk = SimDisk {
            id: id.clone(),
            alias: alias.to_owned(),
            description: doc["description"].as_str().unwrap_or("").to_owned(),
            size,
            pending_size: None,
            format: doc["format"].as_str().unwrap_or("cow").to_owned(),
            sparse: doc["sparse"].as_str() == Some("true") || doc["sparse"] == json!(true),
            domain: domain_id,
            unlock_at: Some(Instant::now() + self.latency.locked),
            gone_at: None,
            file,
            stuck,
        };
        let out = self.disk_json(st, &disk);
        st.disks.insert(id, disk);
        answer(201, out)
    }

    fn update_disk(&self, st: &mut State, id: &str, doc: &Value) -> Answer {
        let Some(d) = st.disks.get_mut(id) else {
            return not_found(id);
        };
        if d.unlock_at.is_some() || d.gone_at.is_some() {
            return fault(
                409,
                "Cannot edit Virtual Disk. Related operation is currently in progress. Please try again later.",
            );
        }
        let Some(size) = number(&doc["provisioned_size"]) else {
            return answer(200, Value::Null);
        };
        if size < d.size {
            return fault(
                400,
                "Cannot edit Virtual Disk. New disk size must be larger than the current disk size.",
            );
        }
        d.pending_size = Some(size);
        d.unlock_at = Some(Instant::now() + self.latency.locked);
        let grow = size - d.size;
        let domain = d.domain.clone();
        if let Some(sd) = st.domains.iter_mut().find(|x| x.id == domain) {
            sd.available = sd.available.saturating_sub(grow);
        }
        let d = &st.disks[id];
        answer(200, self.disk_json(st, d))
    }

    fn remove_disk(&self, st: &mut State, id: &str) -> Answer {
        let attached = st.vms.values().any(|vm| vm.attachments.contains_key(id));
        let Some(d) = st.disks.get_mut(id) else {
            return not_found(id);
        };
        if d.unlock_at.is_some() || d.gone_at.is_some() {
            return fault(
                409,
                "Cannot remove Virtual Disk. Related operation is currently in progress. Please try again later.",
            );
        }
        if attached {
            return fault(
                409,
                "Cannot remove Virtual Disk. Disk is attached to a VM; detach it first.",
            );
        }
        d.gone_at = Some(Instant::now() + self.latency.remove);
        answer(200, json!({}))
    }

    fn attach(&self, st: &mut State, vm_id: &str, doc: &Value) -> Answer {
        let disk_id = doc["disk"]["id"].as_str().unwrap_or("").to_owned();
        if !st.vms.contains_key(vm_id) {
            return not_found(vm_id);
        }
        let Some(d) = st.disks.get(&disk_id) else {
            return fault(
                400,
                &format!("Cannot attach Virtual Disk. Disk {disk_id} does not exist"),
            );
        };
        if d.unlock_at.is_some() || d.gone_at.is_some() {
            return fault(
                409,
                "Cannot attach Virtual Disk. Related operation is currently in progress. Please try again later.",
            );
        }
        if doc["interface"].as_str().is_none() {
            return fault(
                400,
                "Cannot attach Virtual Disk. Request syntax error: interface is required",
            );
        }
        if st
            .vms
            .values()
            .any(|vm| vm.id != vm_id && vm.attachments.contains_key(&disk_id))
        {
            return fault(
                409,
                "Cannot attach Virtual Disk. The disk is already attached to another VM and is not shareable.",
            );
        }
        // A disk's storage domain must be attached to the VM's data center (the engine's
        // ACTION_TYPE_FAILED_STORAGE_POOL_NOT_MATCH).
        let disk_dc = st
            .domains
            .iter()
            .find(|sd| sd.id == d.domain)
            .map(|sd| sd.data_center.clone());
        let vm_dc = st
            .clusters
            .iter()
            .find(|c| c.id == st.vms[vm_id].cluster)
            .map(|c| c.data_center.clone());
        if disk_dc != vm_dc {
            return fault(
                409,
                "Cannot attach Virtual Disk. The target Data Center does not contain the Virtual Disk.",
            );
        }
        let vm = st.vms.get_mut(vm_id).expect("checked");
        if vm.attachments.contains_key(&disk_id) {
            return fault(
                409,
                "Cannot attach Virtual Disk. The disk is already attached to VM.",
            );
        }
        let a = SimAttachment {
            active_at: Instant::now() + self.latency.activate,
            device: None,
            read_only: doc["read_only"].as_str() == Some("true"),
        };
        let out = Self::attachment_json(vm, &disk_id, &a);
        vm.attachments.insert(disk_id, a);
        answer(201, out)
    }
}

fn vm_json(vm: &SimVm, follow_devices: bool) -> Value {
    let mut v = json!({"href": format!("{API}/vms/{}", vm.id), "id": vm.id, "name": vm.name,
        "status": vm.status, "memory": vm.memory.to_string(), "type": "server",
        "cpu": {"architecture": "x86_64", "topology": {"sockets": vm.cpus.to_string(), "cores": "1", "threads": "1"}},
        "cluster": {"href": format!("{API}/clusters/{}", vm.cluster), "id": vm.cluster},
        "link": [{"href": format!("{API}/vms/{}/reporteddevices", vm.id), "rel": "reporteddevices"},
                 {"href": format!("{API}/vms/{}/diskattachments", vm.id), "rel": "diskattachments"}]});
    if let Some(t) = &vm.instance_type {
        let id = instance_type_id(t);
        v["instance_type"] = json!({"href": format!("{API}/instancetypes/{id}"), "id": id});
    }
    if follow_devices {
        v["reported_devices"] = reported_devices(vm);
    }
    v
}

/// The guest agent's report: one NIC carrying every address (`{}` before it reports).
fn reported_devices(vm: &SimVm) -> Value {
    if vm.ips.is_empty() {
        return json!({});
    }
    let ips: Vec<Value> = vm
        .ips
        .iter()
        .map(|ip| json!({"address": ip, "version": if ip.contains(':') {"v6"} else {"v4"}}))
        .collect();
    json!({"reported_device": [{
        "href": format!("{API}/vms/{}/reporteddevices/{}", vm.id, vm.id), "id": vm.id,
        "name": "eth0", "type": "network", "description": "guest reported data",
        "ips": {"ip": ips}, "mac": {"address": "56:6f:1a:2b:00:01"},
        "vm": {"href": format!("{API}/vms/{}", vm.id), "id": vm.id},
    }]})
}

/// The XML root of a successful answer: a collection's plural, an object's type, the
/// API root's `api`, an action's `action`.
fn xml_root(method: &str, path: &str) -> String {
    let rest = path.strip_prefix(API).unwrap_or(path).trim_matches('/');
    if rest.is_empty() {
        return "api".into();
    }
    let parts: Vec<&str> = rest.split('/').collect();
    let collection = parts[(parts.len() - 1) / 2 * 2];
    let singular = match collection {
        "disks" => "disk",
        "vms" => "vm",
        "diskattachments" => "disk_attachment",
        "storagedomains" => "storage_domain",
        "clusters" => "cluster",
        "datacenters" => "data_center",
        "instancetypes" => "instance_type",
        "reporteddevices" => "reported_device",
        "nics" => "nic",
        other => other,
    };
    match (method, parts.len() % 2) {
        ("DELETE", _) => "action".into(),
        ("GET", 1) => format!("{singular}s"),
        _ => singular.into(),
    }
}

/// Each disk's backing file, by disk id (what plugging and unplugging a device needs while
/// the VMs are borrowed mutably).
fn disk_files(st: &State) -> BTreeMap<String, PathBuf> {
    st.disks
        .values()
        .map(|d| (d.id.clone(), d.file.clone()))
        .collect()
}

fn data_center_id(st: &State, name: &str) -> String {
    st.data_centers
        .iter()
        .find(|d| d.name == name)
        .map(|d| d.id.clone())
        .unwrap_or_else(|| panic!("no data center {name}"))
}

fn data_center_json(dc: &DataCenter) -> Value {
    json!({"href": format!("{API}/datacenters/{}", dc.id), "id": dc.id, "name": dc.name,
        "status": "up", "local": "false", "storage_format": "v5"})
}

/// A link to data center `id`, or the data center itself when the query follows it.
fn data_center_ref(st: &State, id: &str, follow: bool) -> Value {
    match st.data_centers.iter().find(|d| d.id == id) {
        Some(dc) if follow => data_center_json(dc),
        _ => json!({"href": format!("{API}/datacenters/{id}"), "id": id}),
    }
}

/// Whether `?follow=` names `link` (a comma-separated list).
fn follows(query: &str, link: &str) -> bool {
    form_value(query, "follow").is_some_and(|f| f.split(',').any(|l| l.trim() == link))
}

fn not_found(id: &str) -> Answer {
    fault(404, &format!("Entity not found: {id}"))
}

/// A collection as the engine writes it: `{"disk": [...]}`, and `{}` when empty.
fn collection(key: &str, items: Vec<Value>) -> Answer {
    if items.is_empty() {
        return answer(200, json!({}));
    }
    answer(200, json!({ key: items }))
}

fn number(v: &Value) -> Option<u64> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

fn form_value(form: &str, key: &str) -> Option<String> {
    form_urlencoded::parse(form.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// Whether the engine's search matches `value` with `pattern`: case-insensitively, `*`
/// standing for any run of characters (the engine searches with SQL's ILIKE).
fn search_matches(pattern: &str, value: &str) -> bool {
    let (pattern, value) = (pattern.to_lowercase(), value.to_lowercase());
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == value;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !value.starts_with(first) || !value[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(i) => rest = &rest[i + middle.len()..],
            None => return false,
        }
    }
    true
}

/// `alias="x"` or `alias=x` in a search expression: the value for `key`.
fn search_term(search: &str, key: &str) -> Option<String> {
    let rest = search
        .trim()
        .strip_prefix(key)?
        .trim_start()
        .strip_prefix('=')?;
    let rest = rest.trim();
    Some(match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next().unwrap_or("").to_owned(),
        None => rest.split_whitespace().next().unwrap_or("").to_owned(),
    })
}

/// The engine's XML, from and to the JSON form the simulator keeps: an object is an
/// element, its `id`, `href` and `rel` attributes; an array is its elements repeated under
/// the array's name (`{"disk": [..]}` in `<disks>` is `<disks><disk/>…</disks>`); a scalar
/// is text. The SDKs and Go clients upstream speak this form.
pub mod xml {
    use serde_json::{Map, Value};

    const ATTRIBUTES: &[&str] = &["href", "id", "rel"];

    fn escape(s: &str) -> String {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    }

    fn text(v: &Value) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }

    fn write(out: &mut String, name: &str, v: &Value) {
        match v {
            Value::Null => {}
            Value::Array(items) => {
                for item in items {
                    write(out, name, item);
                }
            }
            Value::Object(map) => {
                out.push('<');
                out.push_str(name);
                for key in ATTRIBUTES {
                    if let Some(t) = map.get(*key).and_then(text) {
                        out.push_str(&format!(" {key}=\"{}\"", escape(&t)));
                    }
                }
                let children: Vec<(&String, &Value)> = map
                    .iter()
                    .filter(|(k, _)| !ATTRIBUTES.contains(&k.as_str()))
                    .collect();
                if children.is_empty() {
                    out.push_str("/>");
                    return;
                }
                out.push('>');
                for (k, v) in children {
                    write(out, k, v);
                }
                out.push_str(&format!("</{name}>"));
            }
            scalar => {
                let t = text(scalar).unwrap_or_default();
                out.push_str(&format!("<{name}>{}</{name}>", escape(&t)));
            }
        }
    }

    /// `value` as the element `root`.
    pub fn to_xml(root: &str, value: &Value) -> String {
        let mut out =
            String::from("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n");
        match value {
            // An empty collection, or an answer with nothing in it.
            Value::Object(m) if m.is_empty() => out.push_str(&format!("<{root}/>")),
            _ => write(&mut out, root, value),
        }
        out
    }

    struct Node {
        name: String,
        attributes: Map<String, Value>,
        children: Vec<Node>,
        text: String,
    }

    fn to_value(node: Node) -> Value {
        if node.children.is_empty() && node.attributes.is_empty() {
            return Value::String(node.text.trim().to_owned());
        }
        let mut map = node.attributes;
        let plural_of = |child: &str| node.name == format!("{child}s");
        for child in node.children {
            let name = child.name.clone();
            let list = plural_of(&name);
            let v = to_value(child);
            match map.get_mut(&name) {
                Some(Value::Array(items)) => items.push(v),
                Some(existing) => {
                    let first = existing.take();
                    *existing = Value::Array(vec![first, v]);
                }
                None if list => {
                    map.insert(name, Value::Array(vec![v]));
                }
                None => {
                    map.insert(name, v);
                }
            }
        }
        Value::Object(map)
    }

    /// The root element's name and its content, or why the text is not XML.
    pub fn from_xml(text: &str) -> Result<(String, Value), String> {
        use quick_xml::events::Event;
        let mut reader = quick_xml::Reader::from_str(text);
        let mut stack: Vec<Node> = Vec::new();
        let open = |e: &quick_xml::events::BytesStart| -> Result<Node, String> {
            let mut attributes = Map::new();
            for a in e.attributes() {
                let a = a.map_err(|e| e.to_string())?;
                let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
                let value = a.unescape_value().map_err(|e| e.to_string())?;
                attributes.insert(key, Value::String(value.into_owned()));
            }
            Ok(Node {
                name: String::from_utf8_lossy(e.name().as_ref()).into_owned(),
                attributes,
                children: Vec::new(),
                text: String::new(),
            })
        };
        loop {
            match reader.read_event().map_err(|e| e.to_string())? {
                Event::Start(e) => stack.push(open(&e)?),
                Event::Empty(e) => {
                    let node = open(&e)?;
                    match stack.last_mut() {
                        Some(parent) => parent.children.push(node),
                        None => return Ok((node.name.clone(), to_value(node))),
                    }
                }
                Event::Text(t) => {
                    if let Some(top) = stack.last_mut() {
                        top.text.push_str(&t.decode().map_err(|e| e.to_string())?);
                    }
                }
                // `&lt;` and its kind come apart from the text around them.
                Event::GeneralRef(r) => {
                    if let Some(top) = stack.last_mut() {
                        let c = match r.resolve_char_ref().map_err(|e| e.to_string())? {
                            Some(c) => c,
                            None => match r.decode().map_err(|e| e.to_string())?.as_ref() {
                                "lt" => '<',
                                "gt" => '>',
                                "amp" => '&',
                                "quot" => '"',
                                "apos" => '\'',
                                other => return Err(format!("unknown entity &{other};")),
                            },
                        };
                        top.text.push(c);
                    }
                }
                Event::End(_) => {
                    let node = stack.pop().ok_or("an end without a start")?;
                    match stack.last_mut() {
                        Some(parent) => parent.children.push(node),
                        None => return Ok((node.name.clone(), to_value(node))),
                    }
                }
                Event::Eof => return Err("no root element".into()),
                _ => {}
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use serde_json::json;

        #[test]
        fn the_engine_s_xml_reads_back_as_its_json() {
            let disk = json!({"href": "/ovirt-engine/api/disks/1", "id": "1", "alias": "a<b",
                "provisioned_size": "1073741824",
                "storage_domains": {"storage_domain": [{"id": "sd1", "href": "/sd/sd1"}]},
                "vms": {"vm": [{"id": "v1"}, {"id": "v2"}]}});
            let text = to_xml("disk", &disk);
            assert!(
                text.contains("<disk href=\"/ovirt-engine/api/disks/1\" id=\"1\">"),
                "{text}"
            );
            assert!(text.contains("<alias>a&lt;b</alias>"), "{text}");
            let (root, back) = from_xml(&text).unwrap();
            assert_eq!(root, "disk");
            assert_eq!(back, disk);
            let (root, empty) = from_xml(&to_xml("disks", &json!({}))).unwrap();
            assert!(super::super::search_matches("PVC*", "pvc-1 = x"));
            assert!(super::super::search_matches("p*c*x", "pvc-1 = x"));
            assert!(!super::super::search_matches("pvc", "pvc-1"));
            assert!(!super::super::search_matches("a*b", "ab-"));
            assert_eq!((root.as_str(), empty), ("disks", json!("")));
            assert!(from_xml("{\"not\": \"xml\"}").is_err());
        }
    }
}
