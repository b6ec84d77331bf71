//! What a test does to the engine from outside the API: shapes its inventory, puts its
//! VMs and disks into states, turns faults on and off, and reads what was asked of it.

use super::*;

impl Engine {
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
                nics: vec![vms::SimNic {
                    id: id.clone(),
                    name: "nic1".into(),
                    profile: None,
                }],
                next: Vec::new(),
                up_since: None,
                initialization: Value::Null,
                shape: Value::Null,
            },
        );
        id
    }

    /// A boot disk for the VM `vm` (`<name>_Disk1`, no description, attached bootable and
    /// active, a sparse file of `size` bytes), as a VM made from a template has: what
    /// fills a real engine's disk listing. Returns the disk's id.
    pub fn add_boot_disk(&self, vm: &str, size: u64) -> String {
        let disk = uuid();
        let file = self.dir.join(format!("{disk}.img"));
        let _ = std::fs::File::create(&file).and_then(|f| f.set_len(size));
        let mut st = self.state.lock().expect("state");
        let now = Instant::now();
        let domain = st.domains.first().map(|d| d.id.clone()).unwrap_or_default();
        let name = st.vms.get(vm).map(|v| v.name.clone()).unwrap_or_default();
        st.disks.insert(
            disk.clone(),
            SimDisk {
                id: disk.clone(),
                alias: format!("{name}_Disk1"),
                description: String::new(),
                size,
                pending_size: None,
                format: "cow".into(),
                sparse: true,
                domain,
                unlock_at: None,
                gone_at: None,
                file,
                stuck: false,
                illegal: false,
                removal_held: false,
            },
        );
        if let Some(v) = st.vms.get_mut(vm) {
            v.attachments.insert(
                disk.clone(),
                SimAttachment {
                    active_at: now,
                    device: None,
                    read_only: false,
                    bootable: true,
                    interface: "virtio_scsi".into(),
                },
            );
        }
        disk
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

    /// VM `id`'s status (`up`, `down`, `powering_up`, …), as something outside the API
    /// changed it (the VM crashed, was powered off in the host's console, or the engine
    /// lost its host). What its guest reported goes as the engine's
    /// `ResourceManager.internalSetVmStatus` resets it: for a VM not running (`down`,
    /// `suspended`, `image_locked`, `image_illegal`) and `unknown`; `not_responding`
    /// keeps the last report.
    pub fn set_vm_status(&self, id: &str, status: &str) {
        if let Some(vm) = self.state.lock().expect("state").vms.get_mut(id) {
            vm.status = status.to_owned();
            vm.next.clear();
            if matches!(
                status,
                "down" | "suspended" | "image_locked" | "image_illegal" | "unknown"
            ) {
                vm.ips.clear();
            }
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

    /// The id of the storage domain `name`.
    pub fn storage_domain_id(&self, name: &str) -> String {
        let st = self.state.lock().expect("state");
        st.domains
            .iter()
            .find(|d| d.name == name)
            .map(|d| d.id.clone())
            .unwrap_or_else(|| panic!("no storage domain {name}"))
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

    /// Unplugs every attachment's device (the attachments stay) and plugs none after: a
    /// test calls it on its way out, failed or not, before its directory goes, so no loop
    /// device outlives it — not even one a request served meanwhile would plug (CI22 left
    /// one over a deleted disk file).
    pub fn unplug_all(&self) {
        let mut st = self.state.lock().expect("state");
        st.unplugged = true;
        let files = disk_files(&st);
        for vm in st.vms.values_mut() {
            for (disk, a) in vm.attachments.iter_mut() {
                // The last chance to release them: a busy one is waited for, then (still
                // mounted by the guest: a node plugin that did not unstage) let go when
                // unmounted, and that is said.
                let file = files.get(disk).map(PathBuf::as_path);
                let busy = self.unplug_within(disk, a, file, Duration::from_secs(10));
                if let (Some(index), Some(file)) = (busy, file) {
                    let released = overcast_cloud_local::loopdev::release_when_unused(index, file);
                    eprintln!(
                        "overcast-sim zvirt: /dev/loop{index} (disk {disk}) is still in use, \
                         mounted by the guest? {}",
                        match released {
                            Ok(()) => "The kernel releases it when it is unmounted.".to_owned(),
                            Err(e) => format!("It is left bound: {e}."),
                        }
                    );
                }
            }
        }
    }

    /// A guard that calls [`Engine::unplug_all`] when dropped: held by a test from the
    /// start, its loop devices go on every way out, a failed assertion's included.
    pub fn unplug_on_drop(&self) -> UnplugOnDrop {
        UnplugOnDrop(self.clone())
    }

    /// The `--cloud-config` of the csi, the ccm, the discoverer and capi for this engine
    /// (upstream's YAML), written as `dir/cloud-config`; the engine must be serving.
    pub fn cloud_config(&self, dir: &Path) -> PathBuf {
        self.try_cloud_config(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join("cloud-config").display()))
    }

    /// [`Engine::cloud_config`], a directory that cannot be written an error.
    pub fn try_cloud_config(&self, dir: &Path) -> std::io::Result<PathBuf> {
        let url = self.url.lock().expect("url").clone();
        assert!(!url.is_empty(), "the engine is not serving yet");
        let path = dir.join("cloud-config");
        std::fs::write(
            &path,
            format!("server: {url}\nusername: {USER}\npassword: {PASSWORD}\n"),
        )?;
        Ok(path)
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

    /// The engine marks disk `id` illegal, as it does when an operation on its image
    /// failed.
    pub fn set_illegal(&self, id: &str) {
        if let Some(d) = self.state.lock().expect("state").disks.get_mut(id) {
            d.illegal = true;
        }
    }

    /// Starts removing disk `id` as `DELETE /disks/{id}` does (locked, then gone), but
    /// keeps the removal in progress until [`Engine::finish_removals`].
    pub fn remove_held(&self, id: &str) {
        if let Some(d) = self.state.lock().expect("state").disks.get_mut(id) {
            d.gone_at = Some(Instant::now());
            d.removal_held = true;
        }
    }

    /// Held removals finish.
    pub fn finish_removals(&self) {
        for d in self.state.lock().expect("state").disks.values_mut() {
            d.removal_held = false;
        }
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

    /// Every search from now on answers nothing (200, an empty collection), as the
    /// engine answers one its search backend refuses.
    pub fn set_blind_search(&self, on: bool) {
        self.state.lock().expect("state").blind_search = on;
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

    /// The calls so far that change something (every method but GET), by `METHOD route`.
    pub fn writes(&self) -> Vec<(String, u64)> {
        self.calls()
            .into_iter()
            .filter(|(call, _)| !call.starts_with("GET "))
            .collect()
    }

    /// API calls so far (logins not counted).
    pub fn total_calls(&self) -> u64 {
        self.calls().values().sum()
    }

    /// The bytes of every answer's body so far (logins included).
    pub fn answer_bytes(&self) -> u64 {
        self.state.lock().expect("state").answer_bytes
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
}

/// See [`Engine::unplug_on_drop`].
pub struct UnplugOnDrop(Engine);

impl Drop for UnplugOnDrop {
    fn drop(&mut self) {
        self.0.unplug_all();
    }
}
