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
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hyper::body::Bytes;
use overcast_cloud_vsphere::inventory::properties;
use overcast_cloud_vsphere::session::Vcenter;
use overcast_cloud_vsphere::soap::Moref;
use overcast_cloud_vsphere::xml::Element;

use crate::vcsim::{plug_disk, unplug_disk, Vcsim};
use crate::vcsim_front::{Part, VcsimFront};

/// The disk UUID vcsim's CNS answers for every attach.
const VCSIM_DISK_UUID: &str = "6000c298595bf4575739e9105b2c0c2d";

pub struct EsxiHost {
    pub port: u16,
    _front: VcsimFront,
    state: Arc<State>,
}

struct State {
    admin: Arc<Vcenter>,
    /// A real CNS refuses to delete a volume the guest holds; vcsim's does not.
    refusals: crate::vcsim_front::RefusedDeletes,
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
        Self::start_with(sim, admin, by_id, files, None).await
    }

    /// [`EsxiHost::start`] with another part before vcsim too (CNS snapshots, say): a
    /// request passes this host's part, then `also`; an answer comes back the other way.
    pub async fn start_with(
        sim: &Vcsim,
        admin: Arc<Vcenter>,
        by_id: &Path,
        files: &Path,
        also: Option<Arc<dyn Part>>,
    ) -> Self {
        let state = Arc::new(State {
            admin,
            refusals: Default::default(),
            by_id: by_id.to_owned(),
            files: files.to_owned(),
            plugged: Mutex::new(HashMap::new()),
        });
        let part: Arc<dyn Part> = match also {
            None => Arc::clone(&state) as Arc<dyn Part>,
            Some(also) => Arc::new(crate::vcsim_front::Chain(vec![
                Arc::clone(&state) as Arc<dyn Part>,
                also,
            ])),
        };
        let front = VcsimFront::start(sim, part).await;
        Self {
            port: front.port,
            _front: front,
            state,
        }
    }
}

impl Drop for EsxiHost {
    /// The guest's devices go with the host: the loop devices still attached are
    /// detached and their links removed (the volumes' files stay).
    fn drop(&mut self) {
        let plugged = std::mem::take(&mut *self.state.plugged.lock().unwrap());
        for (volume, index) in plugged {
            let file = self.state.files.join(format!("{volume}.img"));
            let _ = overcast_cloud_local::loopdev::detach(index, &file);
            let _ = std::fs::remove_file(
                self.state
                    .by_id
                    .join(format!("wwn-0x{}", disk_uuid(&volume))),
            );
        }
    }
}

#[async_trait::async_trait]
impl Part for State {
    async fn request(&self, path: &str, body: Bytes) -> Bytes {
        match crate::vcsim_front::RefusedDeletes::deleted_volume(path, &body) {
            Some(volume) if self.plugged.lock().unwrap().contains_key(&volume) => {
                crate::vcsim_front::RefusedDeletes::refused(&body)
            }
            _ => body,
        }
    }

    async fn answer(&self, path: &str, request: &[u8], _status: u16, body: Bytes) -> Bytes {
        let body = self.refusals.answer(path, request, body);
        if path.starts_with("/vsanHealth") {
            let text = String::from_utf8_lossy(request);
            if text.contains("CnsAttachVolume") || text.contains("CnsDetachVolume") {
                host_part(self, request, &body, text.contains("CnsAttachVolume")).await;
            } else if text.contains("CnsExtendVolume") {
                grown(self, request, &body).await;
            } else if let Some(volume) =
                crate::vcsim_front::RefusedDeletes::deleted_volume(path, request)
            {
                // The volume's file goes with it, once CNS has deleted it (a refused
                // delete — the volume still plugged — keeps it).
                let plugged = self.plugged.lock().unwrap().contains_key(&volume);
                if !plugged && succeeded(self, &body, "CnsDeleteVolume").await {
                    let _ = std::fs::remove_file(self.files.join(format!("{volume}.img")));
                }
            }
            body
        } else if path.starts_with("/sdk") {
            Bytes::from(per_volume_uuids(&String::from_utf8_lossy(&body)))
        } else {
            body
        }
    }
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
