//! VMs' lives, as the engine leads them (ovirt-engine's `BackendVmsResource.add`,
//! `AddVmFromTemplateCommand`, `RunVmCommand`, `StopVmCommand`, `ShutdownVmCommand`,
//! `RemoveVmCommand`, `AddVmInterfaceCommand` and their `validate()`; the messages of
//! `AppErrors.properties`, the statuses `ErrorMessageHelper` gives their error types):
//!
//! - `POST /vms` needs `cluster.id|name`, `name` and `template.id|name` (400 "Incomplete
//!   parameters" naming the missing one); a template that does not exist is 404 (the REST
//!   layer's lookup), a name in use 409. With `clone=true` the template's disks are copied
//!   and the VM is `image_locked` until the copy ends, then `down`.
//! - `start` needs a `down` VM (`image_locked` is 409 "VM is locked", a running one 409 "VM
//!   is running") with a bootable disk and none of its disks locked (a copy or a resize in
//!   progress); it goes `wait_for_launch` → `powering_up` → `up`, and the guest agent
//!   reports its addresses a while after `up`. `stop` (a running VM, else 409 "VM is not
//!   running") is `down` at once; `shutdown` goes through `powering_down`.
//! - `DELETE /vms/{id}` needs it `down` (409 "VM is running"; `image_locked`: 409 "VM is
//!   locked") and removes every disk attached to it with it — a bootable one or not — unless
//!   `detach_only=true`.
//! - `POST /vms/{id}/nics`: a name unique on the VM (409), a vNIC profile that exists (400).

use super::*;

/// A template: the boot disk a clone gets, and the VM shape it starts from.
pub(super) struct SimTemplate {
    pub id: String,
    pub name: String,
    pub disk_size: u64,
    pub memory: u64,
}

pub(super) struct SimNic {
    pub id: String,
    pub name: String,
    /// The vNIC profile's id (`None`: the NIC the engine's inventory started with).
    pub profile: Option<String>,
}

impl Engine {
    /// A template `name` with one bootable disk of `disk_size` bytes; its id.
    pub fn add_template(&self, name: &str, disk_size: u64) -> String {
        let id = uuid();
        self.state
            .lock()
            .expect("state")
            .templates
            .push(SimTemplate {
                id: id.clone(),
                name: name.into(),
                disk_size,
                memory: 1 << 30,
            });
        id
    }

    /// A vNIC profile `name`; its id.
    pub fn add_vnic_profile(&self, name: &str) -> String {
        let id = uuid();
        self.state
            .lock()
            .expect("state")
            .vnic_profiles
            .push((id.clone(), name.into()));
        id
    }

    /// What the guest of the VM named `vm` reports once it is up (its agent's addresses).
    pub fn set_guest_ips_on_boot(&self, vm: &str, ips: &[&str]) {
        self.state
            .lock()
            .expect("state")
            .guest_ips
            .insert(vm.into(), ips.iter().map(|s| (*s).to_owned()).collect());
    }

    /// A VM's status as the engine reports it now, and what it was created with
    /// (`initialization`, `type`, `memory_policy`, the CPU topology, NICs by name and
    /// vNIC profile).
    pub fn vm_by_name(&self, name: &str) -> Option<Value> {
        let mut st = self.state.lock().expect("state");
        self.tick(&mut st);
        let vm = st.vms.values().find(|v| v.name == name)?;
        let mut v = vm_json(vm, true);
        v["initialization"] = vm.initialization.clone();
        v["nics"] = vm
            .nics
            .iter()
            .map(|n| json!({"name": n.name, "vnic_profile": n.profile}))
            .collect();
        Some(v)
    }

    /// Moves every VM along its scheduled statuses, and lets the guest agent of a VM up
    /// long enough report its addresses.
    pub(super) fn advance_vms(&self, st: &mut State, now: Instant) {
        let guest_ips = st.guest_ips.clone();
        for vm in st.vms.values_mut() {
            while vm.next.first().is_some_and(|(at, _)| *at <= now) {
                let (_, status) = vm.next.remove(0);
                vm.status = status.into();
                if status != "up" {
                    vm.ips.clear();
                }
            }
            if vm.status == "up" && vm.ips.is_empty() {
                // What the test says the guest reports, else the static addresses
                // cloud-init gave its interfaces from the VM's initialization (a guest
                // configured so reports them once its agent runs).
                let ips = guest_ips
                    .get(&vm.name)
                    .cloned()
                    .unwrap_or_else(|| static_addresses(&vm.initialization));
                if let Some(since) = vm.up_since.filter(|_| !ips.is_empty()) {
                    if now >= since + self.latency.guest_agent {
                        vm.ips = ips;
                    }
                }
            }
            if vm.status != "up" {
                vm.up_since = None;
            } else if vm.up_since.is_none() {
                vm.up_since = Some(now);
            }
        }
    }

    pub(super) fn templates(&self, st: &State, search: Option<&str>, case: bool) -> Answer {
        let name = search.and_then(|s| search_term(s, "name"));
        collection(
            "template",
            st.templates
                .iter()
                .filter(|t| {
                    name.as_deref()
                        .is_none_or(|n| search_matches(n, &t.name, case))
                })
                .map(template_json)
                .collect(),
        )
    }

    pub(super) fn template(&self, st: &State, id: &str) -> Answer {
        match st.templates.iter().find(|t| t.id == id) {
            Some(t) => answer(200, template_json(t)),
            None => not_found(id),
        }
    }

    /// `POST /vms`, from a template (`clone=true` copies its disks).
    pub(super) fn add_vm_from_template(&self, st: &mut State, doc: &Value, clone: bool) -> Answer {
        let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
        let cluster = match (text(&doc["cluster"]["id"]), text(&doc["cluster"]["name"])) {
            (Some(id), _) => st.clusters.iter().find(|c| c.id == id),
            (None, Some(name)) => st.clusters.iter().find(|c| c.name == name),
            (None, None) => return incomplete("Vm", "cluster.id|name", "add"),
        };
        let Some(name) = text(&doc["name"]) else {
            return incomplete("Vm", "name", "add");
        };
        let template = match (text(&doc["template"]["id"]), text(&doc["template"]["name"])) {
            (Some(id), _) => st.templates.iter().find(|t| t.id == id),
            (None, Some(n)) => st.templates.iter().find(|t| t.name == n),
            (None, None) => return incomplete("Vm", "template.id|name", "add"),
        };
        let Some(cluster) = cluster.map(|c| (c.id.clone(), c.data_center.clone())) else {
            return not_found("GetClusterById");
        };
        let Some(template) = template.map(|t| (t.id.clone(), t.disk_size, t.memory)) else {
            return not_found("GetVmTemplate");
        };
        if st.vms.values().any(|v| v.name == name) {
            return fault(
                409,
                "Cannot add VM. The VM name is already in use, please choose a unique name and try again.",
            );
        }
        let now = Instant::now();
        let id = uuid();
        let mut attachments = BTreeMap::new();
        if template.1 > 0 {
            // The template's disk, copied (clone) or as a thin layer over it: a disk of the
            // VM's own, locked while the copy runs, attached bootable and active.
            let disk = uuid();
            let domain = st
                .domains
                .iter()
                .find(|d| d.data_center == cluster.1)
                .map(|d| d.id.clone())
                .unwrap_or_default();
            let file = self.dir.join(format!("{disk}.img"));
            let _ = std::fs::File::create(&file).and_then(|f| f.set_len(template.1));
            st.disks.insert(
                disk.clone(),
                SimDisk {
                    id: disk.clone(),
                    alias: format!("{name}_Disk1"),
                    description: String::new(),
                    size: template.1,
                    pending_size: None,
                    format: "cow".into(),
                    sparse: true,
                    domain,
                    unlock_at: Some(now + self.latency.clone),
                    gone_at: None,
                    file,
                    stuck: false,
                    illegal: false,
                    removal_held: false,
                },
            );
            attachments.insert(
                disk,
                SimAttachment {
                    active_at: now,
                    device: None,
                    read_only: false,
                    bootable: true,
                    interface: "virtio_scsi".into(),
                },
            );
        }
        let memory = number(&doc["memory"]).unwrap_or(template.2);
        let topology = &doc["cpu"]["topology"];
        let count = |k: &str| number(&topology[k]).unwrap_or(1);
        let vm = SimVm {
            id: id.clone(),
            name,
            status: if clone { "image_locked" } else { "down" }.into(),
            attachments,
            ips: Vec::new(),
            cpus: count("sockets") * count("cores") * count("threads"),
            memory,
            instance_type: None,
            cluster: cluster.0,
            nics: Vec::new(),
            next: if clone {
                vec![(now + self.latency.clone, "down")]
            } else {
                Vec::new()
            },
            up_since: None,
            initialization: doc["initialization"].clone(),
            shape: json!({
                "type": doc["type"].as_str().unwrap_or("server"),
                "memory_policy": doc["memory_policy"],
                "topology": {"sockets": count("sockets"), "cores": count("cores"), "threads": count("threads")},
                "template": template.0,
                "comment": doc["comment"],
            }),
        };
        let out = vm_json(&vm, false);
        st.vms.insert(id, vm);
        answer(201, out)
    }

    /// `PUT /vms/{id}`: the engine's UpdateVm for a VM's name and comment (the name unique
    /// among VMs, as at add: 409); what else a PUT carries is not simulated and refused.
    pub(super) fn update_vm(&self, st: &mut State, id: &str, doc: &Value) -> Answer {
        let name = doc["name"].as_str().map(str::to_owned);
        if let Some(n) = &name {
            if n.is_empty() {
                return incomplete("Vm", "name", "update");
            }
            if st.vms.values().any(|v| v.id != id && &v.name == n) {
                return fault(
                    409,
                    "Cannot edit VM. The VM name is already in use, please choose a unique name and try again.",
                );
            }
        }
        if let Some(other) = doc
            .as_object()
            .and_then(|o| o.keys().find(|k| !matches!(k.as_str(), "name" | "comment")))
        {
            return fault(
                400,
                &format!("the simulator does not update a VM's {other}"),
            );
        }
        let Some(vm) = st.vms.get_mut(id) else {
            return not_found(id);
        };
        if let Some(n) = name {
            vm.name = n;
        }
        if let Some(c) = doc["comment"].as_str() {
            vm.shape["comment"] = json!(c);
        }
        answer(200, vm_json(vm, false))
    }

    /// `POST /vms/{id}/{action}`: start, stop, shutdown.
    pub(super) fn vm_action(&self, st: &mut State, id: &str, action: &str) -> Answer {
        let Some(vm) = st.vms.get_mut(id) else {
            return not_found(id);
        };
        let now = Instant::now();
        let running = matches!(
            vm.status.as_str(),
            "up" | "powering_up" | "wait_for_launch" | "powering_down" | "reboot_in_progress"
        );
        match action {
            "start" => {
                if vm.status == "image_locked" {
                    return fault(
                        409,
                        "Cannot run VM: VM is locked. Please try again in a few minutes.",
                    );
                }
                if vm.status != "down" {
                    return fault(409, "Cannot run VM. VM is running.");
                }
                if !vm.attachments.values().any(|a| a.bootable) {
                    return fault(409, "Cannot run VM without at least one bootable disk.");
                }
                // RunVmValidator's disk check (ACTION_TYPE_FAILED_DISKS_LOCKED): a disk
                // being copied or resized holds the VM down.
                let locked: Vec<String> = vm
                    .attachments
                    .keys()
                    .filter_map(|d| st.disks.get(d))
                    .filter(|d| d.unlock_at.is_some())
                    .map(|d| d.alias.clone())
                    .collect();
                if !locked.is_empty() {
                    return fault(
                        409,
                        &format!(
                            "Cannot run VM: The following disks are locked: {}. Please try again in a few minutes.",
                            locked.join(", ")
                        ),
                    );
                }
                vm.status = "wait_for_launch".into();
                vm.next = vec![
                    (now + self.latency.launch, "powering_up"),
                    (now + self.latency.launch + self.latency.boot, "up"),
                ];
            }
            "stop" | "shutdown" => {
                if !running
                    && !matches!(
                        vm.status.as_str(),
                        "paused" | "not_responding" | "suspended"
                    )
                {
                    let verb = if action == "stop" { "stop" } else { "shutdown" };
                    return fault(409, &format!("Cannot {verb} VM. VM is not running."));
                }
                if action == "stop" {
                    vm.status = "down".into();
                    vm.next.clear();
                } else {
                    vm.status = "powering_down".into();
                    vm.next = vec![(now + self.latency.boot, "down")];
                }
                vm.ips.clear();
            }
            _ => return fault(404, &format!("No handler for POST {action}")),
        }
        answer(200, json!({"status": "complete"}))
    }

    /// `DELETE /vms/{id}`: the VM and, unless `detach_only`, every disk attached to it.
    pub(super) fn remove_vm_api(&self, st: &mut State, id: &str, detach_only: bool) -> Answer {
        let Some(vm) = st.vms.get(id) else {
            return not_found(id);
        };
        match vm.status.as_str() {
            "down" | "unassigned" | "image_illegal" => {}
            "image_locked" => {
                return fault(
                    409,
                    "Cannot remove VM: VM is locked. Please try again in a few minutes.",
                )
            }
            "suspended" => {
                return fault(
                    409,
                    "Cannot remove VM that its state is not down.\n-Please stop the VM first.",
                )
            }
            _ => return fault(409, "Cannot remove VM. VM is running."),
        }
        let vm = st.vms.remove(id).expect("checked");
        let now = Instant::now();
        // Its attachments go with it: their devices are unplugged (a removed VM's disks
        // are plugged nowhere), whether the disks go too or stay.
        for (disk, mut a) in vm.attachments {
            let file = st.disks.get(&disk).map(|d| d.file.clone());
            self.unplug(&disk, &mut a, file.as_deref());
            if !detach_only {
                if let Some(d) = st.disks.get_mut(&disk) {
                    d.gone_at = Some(now + self.latency.remove);
                }
            }
        }
        answer(200, json!({}))
    }

    /// `POST /vms/{id}/nics`.
    pub(super) fn add_nic(&self, st: &mut State, id: &str, doc: &Value) -> Answer {
        let profile = doc["vnic_profile"]["id"].as_str().map(str::to_owned);
        let name = doc["name"].as_str().unwrap_or("").to_owned();
        if name.is_empty() {
            return incomplete("Nic", "name", "add");
        }
        if profile
            .as_ref()
            .is_some_and(|p| !st.vnic_profiles.iter().any(|(i, _)| i == p))
        {
            return fault(
                400,
                "Cannot add Interface. The specified VM network interface profile doesn't exist.",
            );
        }
        let Some(vm) = st.vms.get_mut(id) else {
            return not_found(id);
        };
        if vm.nics.iter().any(|n| n.name == name) {
            return fault(409, "Network interface name is already in use");
        }
        let nic = SimNic {
            id: uuid(),
            name,
            profile,
        };
        let out = nic_json(vm, &nic);
        vm.nics.push(nic);
        answer(201, out)
    }
}

/// The REST layer's `validateParameters`: 400 "Incomplete parameters".
fn incomplete(kind: &str, what: &str, verb: &str) -> Answer {
    answer(
        400,
        json!({"reason": "Incomplete parameters", "detail": format!("{kind} [{what}] required for {verb}")}),
    )
}

fn template_json(t: &SimTemplate) -> Value {
    json!({"href": format!("{API}/templates/{}", t.id), "id": t.id, "name": t.name,
        "status": "ok", "memory": t.memory.to_string(), "type": "server"})
}

pub(super) fn nic_json(vm: &SimVm, nic: &SimNic) -> Value {
    let mut v = json!({"href": format!("{API}/vms/{}/nics/{}", vm.id, nic.id), "id": nic.id,
        "name": nic.name, "interface": "virtio", "linked": "true", "plugged": "true",
        "mac": {"address": "56:6f:1a:2b:00:01"},
        "vm": {"href": format!("{API}/vms/{}", vm.id), "id": vm.id}});
    if let Some(p) = &nic.profile {
        v["vnic_profile"] = json!({"href": format!("{API}/vnicprofiles/{p}"), "id": p});
    }
    v
}

/// The static addresses of a VM's `initialization.nic_configurations` (oVirt's
/// NicConfiguration: `boot_protocol` static, `ip.address`, `ipv6.address`), without a
/// prefix length.
fn static_addresses(init: &Value) -> Vec<String> {
    let nics = init["nic_configurations"]["nic_configuration"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out = Vec::new();
    for nic in nics {
        for (protocol, ip) in [("boot_protocol", "ip"), ("ipv6_boot_protocol", "ipv6")] {
            if nic[protocol].as_str() != Some("static") {
                continue;
            }
            if let Some(a) = nic[ip]["address"].as_str().filter(|a| !a.is_empty()) {
                out.push(a.split('/').next().unwrap_or(a).to_owned());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_reports_the_static_addresses_cloud_init_gave_it() {
        let init = json!({"nic_configurations": {"nic_configuration": [
            {"name": "eth0", "boot_protocol": "static", "on_boot": "true",
             "ip": {"address": "10.1.0.5/24", "netmask": "255.255.255.0", "gateway": "10.1.0.1"},
             "ipv6_boot_protocol": "static", "ipv6": {"address": "fd00::5", "version": "v6"}},
            {"name": "eth1", "boot_protocol": "dhcp"},
        ]}});
        assert_eq!(static_addresses(&init), ["10.1.0.5", "fd00::5"]);
        assert!(static_addresses(&Value::Null).is_empty());
    }
}
