//! The engine's transitions over time (locks ending, removals, attachments going active)
//! and the devices they plug on this machine.

use super::*;

impl Engine {
    /// Advances every transition whose time has come: locks end, removals finish,
    /// attachments go active (and their devices appear).
    pub(super) fn tick(&self, st: &mut State) {
        let now = Instant::now();
        self.advance_vms(st, now);
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
            .filter(|d| d.gone_at.is_some_and(|t| now >= t) && !d.removal_held)
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
        let unplugged = st.unplugged;
        for vm in st.vms.values_mut() {
            for (disk, a) in vm.attachments.iter_mut() {
                if a.device.is_none() && now >= a.active_at && !a.bootable && !unplugged {
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

    pub(super) fn link(&self, disk: &str) -> PathBuf {
        let serial: String = disk.chars().take(20).collect();
        self.by_id
            .join(format!("scsi-0QEMU_QEMU_HARDDISK_{serial}"))
    }

    pub(super) fn plug(&self, disk: &str, file: &Path, read_only: bool) -> Option<u32> {
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
    pub(super) fn deactivated(&self, disk: &str, a: &mut SimAttachment, file: Option<&Path>) {
        self.unplug(disk, a, file);
        a.active_at = Instant::now() + Duration::from_secs(365 * 24 * 3600);
    }

    /// Unplugs the attachment's device (the attachment itself stays unless dropped).
    pub(super) fn unplug(&self, disk: &str, a: &mut SimAttachment, file: Option<&Path>) {
        self.unplug_within(disk, a, file, Duration::ZERO);
    }

    /// [`Self::unplug`], a device still busy tried again for up to `patience`: right after
    /// an unmount the kernel may hold it a moment longer (a program stopped then left its
    /// loop device bound in a CI run). Answers the device still bound, busy after that.
    pub(super) fn unplug_within(
        &self,
        disk: &str,
        a: &mut SimAttachment,
        file: Option<&Path>,
        patience: Duration,
    ) -> Option<u32> {
        let _ = std::fs::remove_file(self.link(disk));
        let mut busy = None;
        if let (Some(index), Some(file)) = (a.device, file) {
            let until = Instant::now() + patience;
            while let Err(e) = overcast_cloud_local::loopdev::detach(index, file) {
                if e.kind() != std::io::ErrorKind::ResourceBusy {
                    break;
                }
                if Instant::now() >= until {
                    busy = Some(index);
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        a.device = None;
        busy
    }

    /// A disk as the engine writes it. `vms` only with `all_content` (the API model's
    /// `DiskService.Get.allContent`: "By default the following disk attributes are
    /// excluded: vms"); the engine's disk listings never carry it
    /// (`BackendDisksResource` populates nothing).
    pub(super) fn disk_json(&self, st: &State, d: &SimDisk, all_content: bool) -> Value {
        let vms: Vec<Value> = st
            .vms
            .values()
            .filter(|vm| vm.attachments.contains_key(&d.id))
            .map(|vm| json!({"href": format!("{API}/vms/{}", vm.id), "id": vm.id}))
            .collect();
        let status = if d.unlock_at.is_some() || d.gone_at.is_some() {
            "locked"
        } else if d.illegal {
            "illegal"
        } else {
            "ok"
        };
        let mut v = json!({
            "href": format!("{API}/disks/{}", d.id),
            "id": d.id,
            "name": d.alias,
            "alias": d.alias,
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
        // The engine's JSON leaves out what is unset (the oVirt CSI driver's disks have
        // no description at all), rather than answering an empty string.
        if !d.description.is_empty() {
            v["description"] = json!(d.description);
        }
        if all_content && !vms.is_empty() {
            v["vms"] = json!({ "vm": vms });
        }
        v
    }

    pub(super) fn attachment_json(vm: &SimVm, disk: &str, a: &SimAttachment) -> Value {
        json!({
            "href": format!("{API}/vms/{}/diskattachments/{disk}", vm.id),
            "id": disk,
            "active": (a.device.is_some() || a.bootable).to_string(),
            "bootable": a.bootable.to_string(),
            "interface": a.interface,
            "pass_discard": "false",
            "read_only": a.read_only.to_string(),
            "uses_scsi_reservation": "false",
            "disk": {"href": format!("{API}/disks/{disk}"), "id": disk},
            "vm": {"href": format!("{API}/vms/{}", vm.id), "id": vm.id},
        })
    }
}
