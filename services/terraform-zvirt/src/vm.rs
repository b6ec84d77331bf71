//! VMs.

use http::Method;
use overcast_cloud_zvirt::client::{boolean as engine_bool, members, number};
use serde_json::{json, Value as J};

use super::{check_uuid, gone, not_found, until, uuid_of, Cloud};
use crate::cty::Value;
use crate::resource::{Diag, Outcome, Resource};
use crate::schema::{boolean, int, n, s, string, Block, Obj};

mod schema;

// --- ovirt_vm ---------------------------------------------------------------------

pub struct Vm;

/// oVirt's VmType values.
const VM_TYPES: [&str; 3] = ["desktop", "server", "high_performance"];

#[async_trait::async_trait]
impl Resource<Cloud> for Vm {
    fn schema(&self) -> Block {
        schema::schema()
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        check_uuid(c, "cluster_id", &mut out);
        check_uuid(c, "template_id", &mut out);
        check_uuid(c, "instance_type_id", &mut out);
        if let Some(t) = string(c, "vm_type") {
            if !VM_TYPES.contains(&t) {
                out.push(Diag::at(
                    "vm_type",
                    "Unknown vm_type",
                    format!("{t:?} is not one of {}", VM_TYPES.join(", ")),
                ));
            }
        }
        for k in [
            "cpu_cores",
            "cpu_threads",
            "cpu_sockets",
            "memory",
            "maximum_memory",
        ] {
            if int(c, k).is_some_and(|v| v <= 0) {
                out.push(Diag::at(k, format!("{k} must be positive"), ""));
            }
        }
        let cpu = ["cpu_cores", "cpu_threads", "cpu_sockets"];
        let set = cpu
            .iter()
            .filter(|k| !matches!(c.get(**k), None | Some(Value::Null)))
            .count();
        if set != 0 && set != 3 {
            out.push(Diag::at(
                "cpu_cores",
                "cpu_cores, cpu_threads and cpu_sockets go together",
                "set all three or none",
            ));
        }
        if string(c, "name").is_some_and(str::is_empty) {
            out.push(Diag::at("name", "name is empty", ""));
        }
        for o in objects(c, "template_disk_attachment_override") {
            check_uuid(o, "disk_id", &mut out);
            check_uuid(o, "storage_domain_id", &mut out);
            for (k, allowed) in [
                ("format", &["raw", "cow"][..]),
                ("provisioning", &["sparse", "non-sparse"][..]),
            ] {
                if let Some(v) = string(o, k).filter(|v| !allowed.contains(v)) {
                    out.push(Diag::at(
                        "template_disk_attachment_override",
                        format!("Invalid {k}"),
                        format!("{v:?} is not one of {}", allowed.join(", ")),
                    ));
                }
            }
        }
        out
    }

    async fn create(&self, engine: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let plain = |d| (None, d);
        let cluster = uuid_of(p, "cluster_id").map_err(plain)?;
        let template = uuid_of(p, "template_id").map_err(plain)?;
        let mut body = json!({
            "name": string(p, "name").unwrap_or_default(),
            "cluster": {"id": cluster},
            "template": {"id": template},
        });
        let text = |k| string(p, k).map(str::to_owned);
        if let Some(c) = text("comment") {
            body["comment"] = json!(c);
        }
        if let (Some(c), Some(t), Some(so)) = (
            int(p, "cpu_cores"),
            int(p, "cpu_threads"),
            int(p, "cpu_sockets"),
        ) {
            body["cpu"] = json!({"topology": {"cores": c.to_string(), "threads": t.to_string(), "sockets": so.to_string()}});
        }
        if let Some(m) = text("cpu_mode") {
            body["cpu"]["mode"] = json!(m);
        }
        if let Some(os) = text("os_type") {
            body["os"] = json!({"type": os});
        }
        if let Some(t) = text("vm_type") {
            body["type"] = json!(t);
        }
        if let Some(m) = int(p, "memory") {
            body["memory"] = json!(m.to_string());
        }
        let mut policy = serde_json::Map::new();
        if let Some(m) = int(p, "maximum_memory") {
            policy.insert("max".into(), json!(m.to_string()));
        }
        if let Some(b) = boolean(p, "memory_ballooning") {
            policy.insert("ballooning".into(), json!(b.to_string()));
        }
        if !policy.is_empty() {
            body["memory_policy"] = J::Object(policy);
        }
        let mut init = serde_json::Map::new();
        if let Some(script) = text("initialization_custom_script") {
            init.insert("custom_script".into(), json!(script));
        }
        if let Some(h) = text("initialization_hostname") {
            init.insert("host_name".into(), json!(h));
        }
        if let Some(dns) = text("initialization_dns").filter(|d| !d.is_empty()) {
            init.insert("dns_servers".into(), json!(dns));
        }
        let nics = nic_configurations(p);
        if !nics.is_empty() {
            init.insert(
                "nic_configurations".into(),
                json!({"nic_configuration": nics}),
            );
        }
        if !init.is_empty() {
            body["initialization"] = J::Object(init);
        }
        if let Some(a) = text("placement_policy_affinity") {
            let hosts: Vec<J> = match p.get("placement_policy_host_ids") {
                Some(Value::List(h)) => h
                    .iter()
                    .filter_map(|v| match v {
                        Value::String(id) => Some(json!({"id": id})),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            body["placement_policy"] = json!({"affinity": a, "hosts": {"host": hosts}});
        }
        if let Some(b) = boolean(p, "serial_console") {
            body["console"] = json!({"enabled": b.to_string()});
        }
        if let Some(b) = boolean(p, "soundcard_enabled") {
            body["soundcard_enabled"] = json!(b.to_string());
        }
        if let Some(t) = text("instance_type_id") {
            body["instance_type"] = json!({"id": t});
        }
        if let Some(h) = int(p, "huge_pages") {
            body["custom_properties"] =
                json!({"custom_property": [{"name": "hugepages", "value": h.to_string()}]});
        }
        // The template's disks copied otherwise (format, allocation, domain), as the
        // engine takes them on a clone: the VM's disk attachments naming the template's.
        let overrides: Vec<J> = objects(p, "template_disk_attachment_override")
            .map(|o| {
                let mut disk = json!({"id": string(o, "disk_id").unwrap_or_default()});
                if let Some(f) = string(o, "format") {
                    disk["format"] = json!(f);
                }
                if let Some(pr) = string(o, "provisioning") {
                    disk["sparse"] = json!((pr == "sparse").to_string());
                }
                if let Some(sd) = string(o, "storage_domain_id") {
                    disk["storage_domains"] = json!({"storage_domain": [{"id": sd}]});
                }
                json!({"disk": disk})
            })
            .collect();
        if !overrides.is_empty() {
            body["disk_attachments"] = json!({"disk_attachment": overrides});
        }
        let clone = boolean(p, "clone").unwrap_or(false);
        let path = if clone { "/vms?clone=true" } else { "/vms" };
        let made = engine
            .json("vm_create", Method::POST, path, Some(&body))
            .await
            .map_err(|e| (None, Diag::cloud("create the VM", e)))?;
        let mut state = p.clone();
        let id = made["id"].as_str().unwrap_or_default().to_owned();
        state.insert("id".into(), s(&id));
        observe(&mut state, &made);
        // Cloned disks are copied while the VM is image_locked: the resource is made when
        // the VM can be used (upstream waits the same way).
        match wait_unlocked(engine, &id).await {
            Ok(vm) => {
                observe(&mut state, &vm);
                Ok(state)
            }
            Err(d) => Err((Some(state), d)),
        }
    }

    async fn read(&self, engine: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = uuid_of(state, "id")?;
        match engine
            .json("vm_get", Method::GET, &format!("/vms/{id}"), None)
            .await
        {
            Ok(vm) => {
                let mut seen = Obj::new();
                observe(&mut seen, &vm);
                seen.insert("id".into(), s(id));
                if let Some(name) = vm["name"].as_str() {
                    seen.insert("name".into(), s(name));
                }
                if let Some(c) = vm["cluster"]["id"].as_str() {
                    seen.insert("cluster_id".into(), s(c));
                }
                if let Some(c) = vm["comment"].as_str() {
                    seen.insert("comment".into(), s(c));
                }
                let topo = &vm["cpu"]["topology"];
                for (k, f) in [
                    ("cpu_cores", "cores"),
                    ("cpu_threads", "threads"),
                    ("cpu_sockets", "sockets"),
                ] {
                    if let Some(v) = number(&topo[f]) {
                        seen.insert(k.into(), n(v as i64));
                    }
                }
                if let Some(m) = number(&vm["memory"]) {
                    seen.insert("memory".into(), n(m as i64));
                }
                if let Some(m) = number(&vm["memory_policy"]["max"]) {
                    seen.insert("maximum_memory".into(), n(m as i64));
                }
                if !vm["memory_policy"]["ballooning"].is_null() {
                    seen.insert(
                        "memory_ballooning".into(),
                        Value::Bool(engine_bool(&vm["memory_policy"]["ballooning"])),
                    );
                }
                if let Some(t) = vm["type"].as_str() {
                    seen.insert("vm_type".into(), s(t));
                }
                // After an import, the template it was made of is the one it names.
                if string(state, "template_id").is_none() {
                    if let Some(t) = vm["template"]["id"].as_str() {
                        seen.insert("template_id".into(), s(t));
                    }
                }
                Ok(Some(seen))
            }
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(Diag::cloud("read the VM", e)),
        }
    }

    /// A new name or comment, in place.
    async fn update(&self, engine: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let id = uuid_of(prior, "id")?;
        let mut body = serde_json::Map::new();
        for k in ["name", "comment"] {
            if planned.get(k) != prior.get(k) {
                body.insert(k.into(), json!(string(planned, k).unwrap_or_default()));
            }
        }
        let mut state = planned.clone();
        if !body.is_empty() {
            let vm = engine
                .json(
                    "vm_update",
                    Method::PUT,
                    &format!("/vms/{id}"),
                    Some(&J::Object(body)),
                )
                .await
                .map_err(|e| Diag::cloud("update the VM", e))?;
            observe(&mut state, &vm);
        }
        Ok(state)
    }

    async fn delete(&self, engine: &Cloud, state: &Obj) -> Outcome<()> {
        let id = uuid_of(state, "id")?;
        // A running VM is stopped first: the engine refuses to remove one that is up.
        match engine
            .json("vm_get", Method::GET, &format!("/vms/{id}"), None)
            .await
        {
            Err(e) if not_found(&e) => return Ok(()),
            Err(e) => return Err(Diag::cloud("read the VM", e)),
            Ok(vm) if vm["status"].as_str() != Some("down") => {
                let _ = engine
                    .json(
                        "vm_stop",
                        Method::POST,
                        &format!("/vms/{id}/stop"),
                        Some(&json!({"force": "true"})),
                    )
                    .await;
                wait_status(engine, &id, "down").await?;
            }
            Ok(_) => {}
        }
        // The engine removes a VM's attached disks with it: only its boot disk (the
        // template's copy) goes; any other disk is detached first and stays (a data disk
        // another resource or a user holds is never lost with the VM).
        let attached = match engine
            .json(
                "diskattachment_list",
                Method::GET,
                &format!("/vms/{id}/diskattachments"),
                None,
            )
            .await
        {
            Ok(doc) => members(&doc, "disk_attachment")
                .filter(|a| !engine_bool(&a["bootable"]))
                .filter_map(|a| {
                    a["disk"]["id"]
                        .as_str()
                        .or(a["id"].as_str())
                        .map(str::to_owned)
                })
                .collect::<Vec<_>>(),
            Err(e) if not_found(&e) => return Ok(()),
            Err(e) => return Err(Diag::cloud("list the VM's disks", e)),
        };
        for disk in attached {
            match engine
                .json(
                    "diskattachment_remove",
                    Method::DELETE,
                    &format!("/vms/{id}/diskattachments/{disk}"),
                    None,
                )
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => {
                    return Err(Diag::cloud(
                        &format!("detach disk {disk} before removing the VM"),
                        e,
                    ))
                }
            }
        }
        match engine
            .json("vm_delete", Method::DELETE, &format!("/vms/{id}"), None)
            .await
        {
            Ok(_) => {}
            Err(e) if not_found(&e) => return Ok(()),
            Err(e) => return Err(Diag::cloud("remove the VM", e)),
        }
        // The engine removes a VM (and its disks) as a job: done when it is gone.
        gone(
            engine,
            "vm_get",
            &format!("/vms/{id}"),
            &format!("VM {id} removed"),
        )
        .await
    }
}

/// cloud-init's static addresses (`initialization_nic` blocks) as the engine's
/// `nic_configurations`.
fn nic_configurations(p: &Obj) -> Vec<J> {
    let Some(Value::List(blocks)) = p.get("initialization_nic") else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter_map(|b| match b {
            Value::Map(nic) => Some(nic),
            _ => None,
        })
        .map(|nic| {
            let mut conf = json!({
                "name": string(nic, "name").unwrap_or_default(),
                "on_boot": "true",
                "boot_protocol": "static",
            });
            // The engine's NicConfiguration: `ip` for IPv4, `ipv6` (static too) beside it.
            for (block, key) in [("ipv4", "ip"), ("ipv6", "ipv6")] {
                let Some(ip) = objects(nic, block).next() else {
                    continue;
                };
                let mut v = serde_json::Map::new();
                for k in ["address", "netmask", "gateway"] {
                    if let Some(x) = string(ip, k).filter(|x| !x.is_empty()) {
                        v.insert(k.into(), json!(x));
                    }
                }
                if key == "ipv6" {
                    v.insert("version".into(), json!("v6"));
                    conf["ipv6_boot_protocol"] = json!("static");
                }
                conf[key] = J::Object(v);
            }
            conf
        })
        .collect()
}

/// The provider's attributes from the engine's VM.
fn observe(state: &mut Obj, vm: &J) {
    if let Some(st) = vm["status"].as_str() {
        state.insert("status".into(), s(st));
    }
    state.insert(
        "effective_template_id".into(),
        vm["template"]["id"].as_str().map(s).unwrap_or(Value::Null),
    );
}

async fn wait_unlocked(engine: &Cloud, id: &str) -> Outcome<J> {
    until(
        &format!("VM {id}'s disks copied (no longer image_locked)"),
        || async {
            let vm = engine
                .json("vm_get", Method::GET, &format!("/vms/{id}"), None)
                .await
                .map_err(|e| Diag::cloud("read the new VM", e))?;
            Ok((vm["status"].as_str() != Some("image_locked")).then_some(vm))
        },
    )
    .await
}

/// Waits until the VM is `want`; `Ok(None)` when it is gone. A VM that falls back to
/// `down` while it should come `up` failed to start (the engine says why in its events).
pub(super) async fn wait_status(
    engine: &Cloud,
    id: &str,
    want: &'static str,
) -> Outcome<Option<J>> {
    let mut seen_other = false;
    until(&format!("VM {id} {want}"), || {
        let seen_before = seen_other;
        let fut = async move {
            match engine
                .json("vm_get", Method::GET, &format!("/vms/{id}"), None)
                .await
            {
                Ok(vm) if vm["status"].as_str() == Some(want) => Ok(Some(Some(vm))),
                Ok(vm) if want == "up" && seen_before && vm["status"].as_str() == Some("down") => {
                    Err(Diag::new(
                        "The VM did not start",
                        format!("VM {id} went back to down after it was started"),
                    ))
                }
                Ok(_) => Ok(None),
                Err(e) if not_found(&e) => Ok(Some(None)),
                Err(e) => Err(Diag::cloud("read the VM", e)),
            }
        };
        seen_other = true;
        fut
    })
    .await
}

/// The objects of the nested block `name` (none when it is not given).
fn objects<'a>(o: &'a Obj, name: &str) -> impl Iterator<Item = &'a Obj> {
    let blocks = match o.get(name) {
        Some(Value::List(b)) => b.as_slice(),
        _ => &[],
    };
    blocks.iter().filter_map(|b| match b {
        Value::Map(m) => Some(m),
        _ => None,
    })
}
