//! A TLS endpoint in front of vcsim, with vcsim's own certificate, for a client under test
//! to talk to as it would to the vCenter: every request passes through to vcsim, and a
//! [`Part`] may change a request on its way and an answer on its way back — the parts of
//! a real vCenter or ESXi host that vcsim leaves out.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use overcast_cloud_http::{HttpClient, HttpSettings, Request};
use tokio::task::JoinHandle;

use crate::vcsim::Vcsim;

/// What the front plays.
#[async_trait::async_trait]
pub trait Part: Send + Sync + 'static {
    /// The body sent on to vcsim for a request to `path` (default: as it came).
    async fn request(&self, _path: &str, body: Bytes) -> Bytes {
        body
    }

    /// The body given back for vcsim's answer to `request`.
    async fn answer(&self, path: &str, request: &[u8], status: u16, body: Bytes) -> Bytes;

    /// The status given back for vcsim's `status` (default: the same); a part that
    /// answers what vcsim cannot (a method it lacks) answers 200.
    fn status(&self, _path: &str, _request: &[u8], status: u16) -> u16 {
        status
    }
}

/// Parts in turn: a request through each in order, an answer back through each in the
/// reverse order; the last part's status that differs from vcsim's wins.
pub struct Chain(pub Vec<Arc<dyn Part>>);

#[async_trait::async_trait]
impl Part for Chain {
    async fn request(&self, path: &str, body: Bytes) -> Bytes {
        let mut body = body;
        for p in &self.0 {
            body = p.request(path, body).await;
        }
        body
    }

    async fn answer(&self, path: &str, request: &[u8], status: u16, body: Bytes) -> Bytes {
        let mut body = body;
        for p in self.0.iter().rev() {
            body = p.answer(path, request, status, body).await;
        }
        body
    }

    fn status(&self, path: &str, request: &[u8], status: u16) -> u16 {
        self.0
            .iter()
            .map(|p| p.status(path, request, status))
            .find(|s| *s != status)
            .unwrap_or(status)
    }
}

pub struct VcsimFront {
    pub port: u16,
    task: JoinHandle<()>,
}

struct Front {
    upstream: HttpClient,
    base: String,
    part: Arc<dyn Part>,
}

impl VcsimFront {
    /// Listens on a free loopback port in front of `sim`.
    pub async fn start(sim: &Vcsim, part: Arc<dyn Part>) -> Self {
        use rustls::pki_types::pem::PemObject;
        let cert = std::fs::read(&sim.ca_file).unwrap();
        let key = std::fs::read(sim.dir().join("key.pem")).unwrap();
        let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_slice_iter(&cert)
            .map(|c| c.expect("certificate"))
            .collect();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&key).expect("key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let mut settings = HttpSettings::new("vcsim-front");
        settings.ca_pem = Some(String::from_utf8(cert).unwrap());
        let front = Arc::new(Front {
            upstream: HttpClient::new(settings, None).unwrap(),
            base: format!("https://127.0.0.1:{}", sim.port),
            part,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, front) = (acceptor.clone(), Arc::clone(&front));
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = service_fn(move |req| {
                        let front = Arc::clone(&front);
                        async move { Ok::<_, Infallible>(front.pass(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Self { port, task }
    }
}

impl Drop for VcsimFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Front {
    async fn pass(
        &self,
        req: hyper::Request<hyper::body::Incoming>,
    ) -> hyper::Response<Full<Bytes>> {
        let (parts, body) = req.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let path = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
            .to_owned();
        let body = self.part.request(&path, body).await;
        let mut forward = Request::new(
            "forward",
            parts.method.clone(),
            format!("{}{path}", self.base).parse().unwrap(),
        );
        for (k, v) in &parts.headers {
            if k != http::header::HOST && k != http::header::CONTENT_LENGTH {
                forward.headers.append(k.clone(), v.clone());
            }
        }
        forward.body = body.clone();
        let resp = match self.upstream.send(forward).await {
            Ok(r) => r,
            Err(e) => {
                return hyper::Response::builder()
                    .status(502)
                    .body(Full::new(Bytes::from(e.to_string())))
                    .unwrap()
            }
        };
        let out = self
            .part
            .answer(&path, &body, resp.status.as_u16(), resp.body.clone())
            .await;
        let status = self.part.status(&path, &body, resp.status.as_u16());
        let mut builder = hyper::Response::builder().status(status);
        for (k, v) in &resp.headers {
            if k != http::header::CONTENT_LENGTH && k != http::header::TRANSFER_ENCODING {
                builder = builder.header(k, v);
            }
        }
        builder.body(Full::new(out)).unwrap()
    }
}

/// A real CNS refuses to delete a volume a VM holds: the task fails with `ResourceInUse`
/// ("The resource 'volume' is in use."); vcsim's CNS deletes it. A [`Part`] plays the
/// refusal with this: a `CnsDeleteVolume` of a held volume reaches vcsim naming no volume
/// (its task then does nothing), and its task's info reads back as a real CNS's.
#[derive(Default)]
pub struct RefusedDeletes {
    tasks: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// Marks a rewritten delete for its answer.
const REFUSED: &str = "<!--overcast-refused-delete-->";

impl RefusedDeletes {
    /// The volume a request to `path` deletes, if it is a CNS delete.
    pub fn deleted_volume(path: &str, body: &[u8]) -> Option<String> {
        if !path.starts_with("/vsanHealth")
            || !String::from_utf8_lossy(body).contains("CnsDeleteVolume")
        {
            return None;
        }
        overcast_cloud_vsphere::xml::Element::parse(body)
            .ok()?
            .text_at(&["Body", "CnsDeleteVolume", "volumeIds", "id"])
            .map(str::to_owned)
    }

    /// The delete to send on instead: the same call naming no volume.
    pub fn refused(body: &[u8]) -> Bytes {
        let text = String::from_utf8_lossy(body);
        let (Some(start), Some(end)) = (text.find("<volumeIds"), text.find("</volumeIds>")) else {
            return Bytes::copy_from_slice(body);
        };
        Bytes::from(format!(
            "{}{}{REFUSED}",
            &text[..start],
            &text[end + "</volumeIds>".len()..]
        ))
    }

    /// The answer to give back for `request` (as sent on).
    pub fn answer(&self, path: &str, request: &[u8], body: Bytes) -> Bytes {
        let req = String::from_utf8_lossy(request);
        if path.starts_with("/vsanHealth") && req.contains(REFUSED) {
            let task = overcast_cloud_vsphere::xml::Element::parse(&body)
                .ok()
                .and_then(|e| {
                    e.at(&["Body"])
                        .and_then(|b| b.children.first())
                        .and_then(|r| r.child("returnval"))
                        .and_then(overcast_cloud_vsphere::soap::Moref::of)
                });
            if let Some(task) = task {
                self.tasks.lock().unwrap().insert(task.id);
            }
            return body;
        }
        if path.starts_with("/sdk") && req.contains("type=\"Task\"") {
            let refused = self
                .tasks
                .lock()
                .unwrap()
                .iter()
                .any(|t| req.contains(&format!(">{t}<")));
            if refused {
                return Bytes::from(String::from_utf8_lossy(&body).replace(
                    "<state>success</state>",
                    "<state>error</state><error><fault xsi:type=\"ResourceInUse\"><name>volume</name></fault>\
                     <localizedMessage>The resource &apos;volume&apos; is in use.</localizedMessage></error>",
                ));
            }
        }
        body
    }
}

/// A front's whole part: vCenter's refusal to delete a volume a VM holds, the VMs' devices
/// read on the test's own session (`admin`) at each delete.
pub struct HeldVolumes {
    admin: Arc<overcast_cloud_vsphere::session::Vcenter>,
    refused: RefusedDeletes,
}

impl HeldVolumes {
    pub fn new(admin: Arc<overcast_cloud_vsphere::session::Vcenter>) -> Arc<Self> {
        Arc::new(Self {
            admin,
            refused: RefusedDeletes::default(),
        })
    }
}

#[async_trait::async_trait]
impl Part for HeldVolumes {
    async fn request(&self, path: &str, body: Bytes) -> Bytes {
        let Some(volume) = RefusedDeletes::deleted_volume(path, &body) else {
            return body;
        };
        let view = overcast_cloud_vsphere::inventory::View::new(
            Arc::clone(&self.admin),
            &["VirtualMachine"],
        );
        let vms = view
            .retrieve(&[("VirtualMachine", &["config.hardware.device"])])
            .await
            .unwrap_or_default();
        let held = vms.iter().any(|p| {
            p.get("config.hardware.device").is_some_and(|d| {
                d.children
                    .iter()
                    .any(|dev| dev.text_at(&["vDiskId", "id"]) == Some(volume.as_str()))
            })
        });
        if held {
            RefusedDeletes::refused(&body)
        } else {
            body
        }
    }

    async fn answer(&self, path: &str, request: &[u8], _status: u16, body: Bytes) -> Bytes {
        self.refused.answer(path, request, body)
    }
}

/// What a client under test asked of the vCenter through a front: every request and the
/// bytes of every answer, as a counting proxy sees them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    pub calls: u64,
    pub answer_bytes: u64,
    /// Each call's method (the SOAP body's first element), in order.
    pub methods: Vec<String>,
    /// Time the front spent playing what vcsim lacks (reading every VM for a refused
    /// delete or for associations, which a vCenter answers from its own index): not the
    /// client's.
    pub emulated: std::time::Duration,
}

/// A part that counts what passes through it and otherwise plays `inner`.
pub struct Counting {
    inner: Arc<dyn Part>,
    tally: std::sync::Mutex<Tally>,
}

impl Counting {
    pub fn new(inner: Arc<dyn Part>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            tally: Default::default(),
        })
    }

    /// What was counted since the last take, and a fresh count.
    pub fn take(&self) -> Tally {
        std::mem::take(&mut *self.tally.lock().unwrap())
    }
}

/// The method a SOAP request calls.
pub fn method_of(request: &[u8]) -> String {
    overcast_cloud_vsphere::xml::Element::parse(request)
        .ok()
        .and_then(|e| {
            e.at(&["Body"])
                .and_then(|b| b.children.first())
                .map(|m| m.name.clone())
        })
        .unwrap_or_else(|| "?".into())
}

#[async_trait::async_trait]
impl Part for Counting {
    async fn request(&self, path: &str, body: Bytes) -> Bytes {
        let started = std::time::Instant::now();
        let out = self.inner.request(path, body).await;
        self.tally.lock().unwrap().emulated += started.elapsed();
        out
    }

    async fn answer(&self, path: &str, request: &[u8], status: u16, body: Bytes) -> Bytes {
        let started = std::time::Instant::now();
        let out = self.inner.answer(path, request, status, body).await;
        let mut t = self.tally.lock().unwrap();
        t.emulated += started.elapsed();
        t.calls += 1;
        t.answer_bytes += out.len() as u64;
        t.methods.push(method_of(request));
        out
    }

    fn status(&self, path: &str, request: &[u8], status: u16) -> u16 {
        self.inner.status(path, request, status)
    }
}

/// vCenter's `RetrieveVStorageObjectAssociations` (vSphere API 6.7+), which vcsim lacks
/// (it answers `MethodNotFound`): for each First Class Disk asked about, the VMs whose
/// devices carry it (`vDiskId`), by their managed object id, with the device's key — read
/// from vcsim on the test's own session (`admin`), not counted as the client's. Its shape
/// is the API reference's (`VStorageObjectAssociations`: `id`, `vmDiskAssociations`
/// {`vmId`, `diskKey`}); `vmId` spelled as the VM's managed object id is our reading of
/// "the ID of the virtual machine" (a client that cannot resolve it must fall back).
/// Plays [`HeldVolumes`] besides.
pub struct Associations {
    admin: Arc<overcast_cloud_vsphere::session::Vcenter>,
    held: Arc<HeldVolumes>,
    /// How the VM ids are spelled in answers.
    pub spelling: VmIdSpelling,
}

/// How [`Associations`] spells a VM's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmIdSpelling {
    /// Its managed object id (`vm-58`).
    Moref,
    /// Its instance UUID: what a vCenter would answer if "the ID of the virtual machine"
    /// meant that.
    InstanceUuid,
}

const ASSOCIATIONS: &str = "RetrieveVStorageObjectAssociations";

impl Associations {
    pub fn new(
        admin: Arc<overcast_cloud_vsphere::session::Vcenter>,
        spelling: VmIdSpelling,
    ) -> Arc<Self> {
        Arc::new(Self {
            held: HeldVolumes::new(Arc::clone(&admin)),
            admin,
            spelling,
        })
    }

    fn asks(path: &str, request: &[u8]) -> bool {
        path.starts_with("/sdk") && String::from_utf8_lossy(request).contains(ASSOCIATIONS)
    }

    async fn answered(&self, request: &[u8]) -> Bytes {
        let ids: Vec<String> = overcast_cloud_vsphere::xml::Element::parse(request)
            .ok()
            .and_then(|e| e.at(&["Body", ASSOCIATIONS]).cloned())
            .map(|m| {
                m.all("ids")
                    .filter_map(|i| i.text_at(&["id", "id"]).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let view = overcast_cloud_vsphere::inventory::View::new(
            Arc::clone(&self.admin),
            &["VirtualMachine"],
        );
        let vms = view
            .retrieve(&[(
                "VirtualMachine",
                &["config.hardware.device", "config.instanceUuid"],
            )])
            .await
            .unwrap_or_default();
        let mut out = String::new();
        for id in &ids {
            out.push_str("<returnval>");
            out.push_str(&format!(
                "<id>{}</id>",
                overcast_cloud_vsphere::soap::el("id", id)
            ));
            for p in &vms {
                let Some(devices) = p.get("config.hardware.device") else {
                    continue;
                };
                for d in &devices.children {
                    if d.text_at(&["vDiskId", "id"]) == Some(id.as_str()) {
                        let vm_id = match self.spelling {
                            VmIdSpelling::Moref => p.obj.id.clone(),
                            VmIdSpelling::InstanceUuid => {
                                p.text("config.instanceUuid").unwrap_or_default().to_owned()
                            }
                        };
                        out.push_str(&format!(
                            "<vmDiskAssociations>{}{}</vmDiskAssociations>",
                            overcast_cloud_vsphere::soap::el("vmId", &vm_id),
                            overcast_cloud_vsphere::soap::el(
                                "diskKey",
                                d.text_at(&["key"]).unwrap_or("0")
                            )
                        ));
                    }
                }
            }
            out.push_str("</returnval>");
        }
        Bytes::from(overcast_cloud_vsphere::soap::envelope(
            "urn:vim25",
            "RetrieveVStorageObjectAssociationsResponse",
            &out,
            None,
        ))
    }
}

#[async_trait::async_trait]
impl Part for Associations {
    async fn request(&self, path: &str, body: Bytes) -> Bytes {
        self.held.request(path, body).await
    }

    async fn answer(&self, path: &str, request: &[u8], status: u16, body: Bytes) -> Bytes {
        if Self::asks(path, request) {
            return self.answered(request).await;
        }
        self.held.answer(path, request, status, body).await
    }

    fn status(&self, path: &str, request: &[u8], status: u16) -> u16 {
        if Self::asks(path, request) {
            200
        } else {
            status
        }
    }
}
