//! The ESXi host and the guest that vcsim's CNS leaves out, as a TLS endpoint in front of
//! vcsim for the real `csi` binary (and csi-sanity) to talk to. vcsim's CNS is bookkeeping:
//! an attach puts no disk on the VM and always answers one disk UUID. Here every request
//! passes through to vcsim, and
//! - after a `CnsAttachVolume` task succeeds, the VM gets the virtual disk a real host would
//!   add (`vDiskId` = the volume, `backing.uuid` = the volume id's 32 hex digits) and the
//!   guest sees it: a loop device over the volume's file under `wwn-0x<uuid>` in the by-id
//!   directory the node plugin is pointed at; a `CnsDetachVolume` takes both away;
//! - in the task results read back through `/sdk`, vcsim's one disk UUID becomes that
//!   per-volume UUID, as a real CNS answers a distinct one per disk.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use overcast_cloud_http::{HttpClient, HttpSettings, Request};
use overcast_cloud_vsphere::inventory::properties;
use overcast_cloud_vsphere::session::Vcenter;
use overcast_cloud_vsphere::soap::Moref;
use overcast_cloud_vsphere::xml::Element;
use tokio::task::JoinHandle;

use crate::vcsim::{plug_disk, unplug_disk, Vcsim};

/// The disk UUID vcsim's CNS answers for every attach.
const VCSIM_DISK_UUID: &str = "6000c298595bf4575739e9105b2c0c2d";

pub struct EsxiHost {
    pub port: u16,
    task: JoinHandle<()>,
}

struct State {
    upstream: HttpClient,
    base: String,
    admin: Arc<Vcenter>,
    by_id: PathBuf,
    files: PathBuf,
    /// Volume id → the guest's loop device index.
    plugged: Mutex<HashMap<String, u32>>,
}

/// A volume's disk UUID: its id's hex digits.
pub fn disk_uuid(volume: &str) -> String {
    volume
        .chars()
        .filter(|c| *c != '-')
        .collect::<String>()
        .to_ascii_lowercase()
}

impl EsxiHost {
    /// Listens on a free loopback port with vcsim's certificate, in front of `sim`; the
    /// guest's devices appear in `by_id`, their files in `files`.
    pub async fn start(sim: &Vcsim, admin: Arc<Vcenter>, by_id: &Path, files: &Path) -> Self {
        let cert = std::fs::read(&sim.ca_file).unwrap();
        let key = std::fs::read(sim.dir().join("key.pem")).unwrap();
        let certs: Vec<_> = rustls_pemfile_certs(&cert);
        let key = {
            use rustls::pki_types::pem::PemObject;
            rustls::pki_types::PrivateKeyDer::from_pem_slice(&key).expect("key")
        };
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let mut settings = HttpSettings::new("esxi-host");
        settings.ca_pem = Some(String::from_utf8(cert).unwrap());
        let state = Arc::new(State {
            upstream: HttpClient::new(settings, None).unwrap(),
            base: format!("https://127.0.0.1:{}", sim.port),
            admin,
            by_id: by_id.to_owned(),
            files: files.to_owned(),
            plugged: Mutex::new(HashMap::new()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, state) = (acceptor.clone(), Arc::clone(&state));
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = service_fn(move |req| {
                        let state = Arc::clone(&state);
                        async move { Ok::<_, Infallible>(answer(&state, req).await) }
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

impl Drop for EsxiHost {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn rustls_pemfile_certs(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .map(|c| c.expect("certificate"))
        .collect()
}

async fn answer(
    state: &State,
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
    let mut forward = Request::new(
        "forward",
        parts.method.clone(),
        format!("{}{path}", state.base).parse().unwrap(),
    );
    for (k, v) in &parts.headers {
        if k != http::header::HOST && k != http::header::CONTENT_LENGTH {
            forward.headers.append(k.clone(), v.clone());
        }
    }
    forward.body = body.clone();
    let resp = match state.upstream.send(forward).await {
        Ok(r) => r,
        Err(e) => {
            return hyper::Response::builder()
                .status(502)
                .body(Full::new(Bytes::from(e.to_string())))
                .unwrap()
        }
    };
    let mut out = resp.body.clone();
    if path.starts_with("/vsanHealth") {
        let text = String::from_utf8_lossy(&body);
        if text.contains("CnsAttachVolume") || text.contains("CnsDetachVolume") {
            host_part(state, &body, &resp.body, text.contains("CnsAttachVolume")).await;
        } else if text.contains("CnsExtendVolume") {
            grown(state, &body, &resp.body).await;
        }
    } else if path.starts_with("/sdk") {
        out = Bytes::from(per_volume_uuids(&String::from_utf8_lossy(&resp.body)));
    }
    let mut builder = hyper::Response::builder().status(resp.status);
    for (k, v) in &resp.headers {
        if k != http::header::CONTENT_LENGTH && k != http::header::TRANSFER_ENCODING {
            builder = builder.header(k, v);
        }
    }
    builder.body(Full::new(out)).unwrap()
}

/// vcsim's one disk UUID, in every attach result, replaced by the volume's own (the
/// `volumeId` just before it).
fn per_volume_uuids(text: &str) -> String {
    let marker = format!("<diskUUID>{VCSIM_DISK_UUID}</diskUUID>");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&marker) {
        let before = &rest[..at];
        let volume = before
            .rfind("<id>")
            .and_then(|i| {
                before[i + 4..]
                    .find("</id>")
                    .map(|j| &before[i + 4..i + 4 + j])
            })
            .unwrap_or_default();
        out.push_str(before);
        out.push_str(&format!("<diskUUID>{}</diskUUID>", disk_uuid(volume)));
        rest = &rest[at + marker.len()..];
    }
    out.push_str(rest);
    out
}

/// After CNS said it attached or detached, the host and the guest follow (only when the
/// task succeeded: a refused attach changes nothing).
async fn host_part(state: &State, request: &[u8], response: &[u8], attach: bool) {
    let Ok(req) = Element::parse(request) else {
        return;
    };
    let spec_name = if attach { "attachSpecs" } else { "detachSpecs" };
    let method = if attach {
        "CnsAttachVolume"
    } else {
        "CnsDetachVolume"
    };
    let Some(spec) = req.at(&["Body", method, spec_name]) else {
        return;
    };
    let (Some(volume), Some(vm)) = (
        spec.text_at(&["volumeId", "id"]),
        spec.child("vm").and_then(Moref::of),
    ) else {
        return;
    };
    if !succeeded(state, response, method).await {
        return;
    }
    let uuid = disk_uuid(volume);
    let link = state.by_id.join(format!("wwn-0x{uuid}"));
    if attach {
        let name = properties(&state.admin, &vm, &["name"])
            .await
            .ok()
            .and_then(|p| p.text("name").map(str::to_owned))
            .unwrap_or_default();
        plug_disk(&state.admin, &vm, &name, volume, &uuid).await;
        // The guest's disk is as large as the volume.
        let file = state.files.join(format!("{volume}.img"));
        let bytes = capacity(state, volume).await;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&file)
            .unwrap();
        if f.metadata().unwrap().len() < bytes {
            f.set_len(bytes).unwrap();
        }
        if let Ok(index) = overcast_cloud_local::loopdev::attach(&file, false, "overcast-esxi-host")
        {
            let _ = std::fs::remove_file(&link);
            let _ = std::os::unix::fs::symlink(
                overcast_cloud_local::loopdev::device_path(index),
                &link,
            );
            state
                .plugged
                .lock()
                .unwrap()
                .insert(volume.to_owned(), index);
        }
    } else {
        unplug_disk(&state.admin, &vm, volume).await;
        let _ = std::fs::remove_file(&link);
        let index = state.plugged.lock().unwrap().remove(volume);
        if let Some(index) = index {
            let _ = overcast_cloud_local::loopdev::detach(
                index,
                &state.files.join(format!("{volume}.img")),
            );
        }
    }
}

/// Whether the task a CNS answer names finished well (a refused change changes nothing).
async fn succeeded(state: &State, response: &[u8], method: &str) -> bool {
    let Some(task) = Element::parse(response).ok().and_then(|resp| {
        resp.at(&["Body"])
            .and_then(|b| b.children.first())
            .and_then(|r| r.child("returnval"))
            .and_then(Moref::of)
    }) else {
        return false;
    };
    overcast_cloud_vsphere::task::wait(
        &state.admin,
        &task,
        method,
        std::time::Duration::from_secs(30),
    )
    .await
    .is_ok()
}

/// A volume's capacity as CNS records it.
async fn capacity(state: &State, volume: &str) -> u64 {
    overcast_cloud_vsphere::cns::Cns::new(Arc::clone(&state.admin))
        .query(&overcast_cloud_vsphere::cns::Filter {
            ids: vec![volume.to_owned()],
            ..Default::default()
        })
        .await
        .ok()
        .and_then(|v| v.first().map(|v| v.capacity_mb << 20))
        .unwrap_or(1 << 30)
}

/// After CNS extended a volume, its disk in the guest grows too (as a real host's
/// does, the guest seeing the new capacity after a rescan).
async fn grown(state: &State, request: &[u8], response: &[u8]) {
    let Ok(req) = Element::parse(request) else {
        return;
    };
    let Some(volume) = req
        .at(&["Body", "CnsExtendVolume", "extendSpecs"])
        .and_then(|s| s.text_at(&["volumeId", "id"]))
        .map(str::to_owned)
    else {
        return;
    };
    if !succeeded(state, response, "CnsExtendVolume").await {
        return;
    }
    let file = state.files.join(format!("{volume}.img"));
    let bytes = capacity(state, &volume).await;
    if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&file) {
        if f.metadata().map(|m| m.len()).unwrap_or(0) < bytes {
            let _ = f.set_len(bytes);
        }
    }
    let index = state.plugged.lock().unwrap().get(&volume).copied();
    if let Some(index) = index {
        let _ = overcast_cloud_local::loopdev::refresh_capacity(index, &file);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn vcsim_s_one_uuid_becomes_the_volume_s() {
        let text = "<volumeResults><volumeId><id>0c2b3f0e-7d4a-4f62-9e1b-2a3b4c5d6e7f</id></volumeId><diskUUID>6000c298595bf4575739e9105b2c0c2d</diskUUID></volumeResults>";
        assert_eq!(
            super::per_volume_uuids(text),
            "<volumeResults><volumeId><id>0c2b3f0e-7d4a-4f62-9e1b-2a3b4c5d6e7f</id></volumeId><diskUUID>0c2b3f0e7d4a4f629e1b2a3b4c5d6e7f</diskUUID></volumeResults>"
        );
    }
}
