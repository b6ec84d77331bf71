//! An oVirt engine for the zVirt tests, its behaviour rebuilt from the engine's public
//! source — ovirt-engine's master branch of 2026-08-19 (4.5.8-SNAPSHOT: its `restapi`
//! resources and `bll` commands' `validate()`, its search backend) and the API model
//! ovirt-engine-api-model 4.6.1 — for everything the provider uses, not from what the
//! provider expects:
//!
//! - `GET /disks/{id}` carries `vms` only with `all_content=true` (or `All-Content: true`);
//!   disk listings and searches never do. `GET /vms?follow=disk_attachments` inlines each
//!   VM's attachments.
//! - Search (`search.rs`: conditions on a VM's `name`, `id`, `cluster`, `status` and a
//!   disk's `alias`/`name`, `id`, `description`; `=` and `!=`, `*` wildcards,
//!   case-insensitive unless `case_sensitive=true`; `and`, `or`; `sortby`; `page`): a
//!   search the backend refuses (`'` or `;` anywhere, a value ending in `\`, an unknown
//!   field, an `id` that is no UUID) is answered 200 with an empty collection, as the
//!   engine does. Paging as the engine pages: a VM search is cut in SQL (`page n` of
//!   `max`, by name unless `sortby`); a disk search is run whole and its first `max` kept
//!   (BackendDisksResource: `page 2` and later answer nothing), by alias then id.
//! - Faults as the engine writes them (`{"reason": "Operation Failed", "detail": "[…]"}`)
//!   with the status its error type maps to (`ErrorMessageHelper`): detaching from a VM
//!   that is gone, or a disk that is not attached, is **400**; attaching to a gone VM is
//!   400; a VM neither Up nor Down cannot have disks detached (409); a disk attached
//!   elsewhere (409), locked (409) or illegal (400) is not attached; an attached disk is
//!   removed only when every VM that has it plugged is Down — and then its attachments go
//!   with it.
//! - Bean validation on create: an alias of letters, digits and `-_.` up to 255
//!   characters, a description of at most 500 ASCII-or-letter characters.
//! - Disks `locked` for a while after create, resize and remove (kept locked past any
//!   deadline on demand), `illegal` on demand, removals held on demand; SSO tokens that
//!   expire; attachments inactive for a while before they are `active`. Faults on demand:
//!   the HTML error page the engine's proxy serves while it is down, slow answers, every
//!   token expired.
//!
//! Attachments are backed by real loop devices linked as
//! `scsi-0QEMU_QEMU_HARDDISK_<disk-id[:20]>` in a by-id directory the node plugin is
//! pointed at, so a volume is really formatted and mounted. Plain HTTP on loopback, or
//! HTTPS with its own CA.
//!
//! It speaks the engine's XML (its canonical form, what the official SDKs and the Go
//! clients upstream send) as well as JSON: the official Python SDK drives it in a test.

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
    /// A VM cloned from a template is `image_locked` this long (its disks copied).
    pub clone: Duration,
    /// A started VM is `wait_for_launch` this long, then `powering_up` for `boot`
    /// (and a shut-down one `powering_down` for `boot`).
    pub launch: Duration,
    pub boot: Duration,
    /// A VM up reports its guest's addresses this long later.
    pub guest_agent: Duration,
}

impl Default for Latency {
    fn default() -> Self {
        Self {
            locked: Duration::from_millis(300),
            activate: Duration::from_millis(200),
            remove: Duration::from_millis(150),
            answer: Duration::from_millis(2),
            clone: Duration::from_millis(400),
            launch: Duration::from_millis(200),
            boot: Duration::from_millis(300),
            guest_agent: Duration::from_millis(300),
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
    /// The engine marked the disk's image illegal (an operation on it failed).
    illegal: bool,
    /// A removal in progress that does not finish until released.
    removal_held: bool,
}

struct SimAttachment {
    active_at: Instant,
    /// The VM's boot disk (a template's copy): never a loop device of the node's.
    bootable: bool,
    /// The loop device, once active.
    device: Option<u32>,
    read_only: bool,
    /// As asked at attach (`virtio_scsi` for a template's disk).
    interface: String,
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
    nics: Vec<vms::SimNic>,
    /// The statuses the VM is due to take, and when.
    next: Vec<(Instant, &'static str)>,
    /// When it came up (its guest agent reports a while later).
    up_since: Option<Instant>,
    /// What it was created with: `initialization` as sent; type, memory policy, CPU
    /// topology and template.
    initialization: Value,
    shape: Value,
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
    templates: Vec<vms::SimTemplate>,
    /// (id, name)
    vnic_profiles: Vec<(String, String)>,
    /// What each VM's guest (by VM name) reports once up.
    guest_ips: BTreeMap<String, Vec<String>>,
    tokens: BTreeMap<String, Instant>,
    /// Every token handed out, expired ones too.
    issued: Vec<String>,
    token_ttl: Option<Duration>,
    html: bool,
    slow: Option<Duration>,
    /// The bytes of every answer's body so far.
    answer_bytes: u64,
    /// Every search answers an empty collection, as the engine answers a search its
    /// backend refuses.
    blind_search: bool,
    stuck_alias: Option<String>,
    /// Calls by `METHOD route` (ids replaced by `{id}`).
    calls: BTreeMap<String, u64>,
    logins: u64,
    /// Calls answered 401 (no valid token).
    unauthorized: u64,
    /// Its devices were unplugged on a test's way out: a request still served after it (a
    /// process not yet killed) plugs none again over files about to go.
    unplugged: bool,
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
/// Its id.
pub const CLUSTER_ID: &str = "a7d6ba4e-8d2b-11ee-9f3c-00163e000001";
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
        self.serve("127.0.0.1:0", None).await
    }

    /// Serves plain HTTP on `address` (`ip:port`): where pods reach it, as the real-node
    /// test's engine at the kit's pod gateway; returns the API URL.
    pub async fn start_on(&self, address: &str) -> String {
        self.serve(address, None).await
    }

    /// [`Engine::start_on`], a taken or invalid address an error (the program's user
    /// gave it) instead of a panic.
    pub async fn try_start_on(&self, address: &str) -> std::io::Result<String> {
        let listener = tokio::net::TcpListener::bind(address).await?;
        Ok(self.serve_listener(listener, None))
    }

    /// Serves HTTPS with `tls`'s certificate, as a real engine does (its own CA);
    /// returns the API URL (`https://127.0.0.1:N/ovirt-engine/api`).
    pub async fn start_tls(&self, tls: tokio_rustls::TlsAcceptor) -> String {
        self.serve("127.0.0.1:0", Some(tls)).await
    }

    async fn serve(&self, address: &str, tls: Option<tokio_rustls::TlsAcceptor>) -> String {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .unwrap_or_else(|e| panic!("bind {address}: {e}"));
        self.serve_listener(listener, tls)
    }

    fn serve_listener(
        &self,
        listener: tokio::net::TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> String {
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
                        async move {
                            let resp = engine.handle(req).await;
                            // What every answer weighs: the benchmarks' bytes per operation.
                            let size = hyper::body::Body::size_hint(resp.body()).lower();
                            engine.state.lock().expect("state").answer_bytes += size;
                            Ok::<_, Infallible>(resp)
                        }
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
}

mod control;
pub use control::UnplugOnDrop;
mod devices;
mod helpers;
mod ops;
mod routes;
mod search;
mod vms;
pub mod xml;

use helpers::*;
use search::{disk_field, searched, vm_field, DISK_FIELDS, VM_FIELDS};
