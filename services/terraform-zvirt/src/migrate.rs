//! `terraform-provider-overcast migrate-state` for a zVirt state: what Deckhouse's zVirt
//! layouts left, rewritten for ours.
//!
//! What it relies on: our layouts keep Deckhouse's resource addresses and the oVirt
//! provider's types and attributes, so only the provider address can differ. Deckhouse's
//! 2024 layouts required `oVirt/ovirt` (stored as `registry.terraform.io/ovirt/ovirt`);
//! its later ones and ours `terraform-provider-ovirt/ovirt`. Terraform refuses a state
//! whose provider address is not the configuration's (`Could not load plugin`), so the
//! address is rewritten, on the registry host the state names (Terraform's or OpenTofu's).
//!
//! Our own layouts of the release of 688adc9 (the first that had them; 5e88a76 took
//! Deckhouse's addresses) put each node's resources in a module (`module.master`,
//! `module.node`, of `terraform-modules/node`) and named the provider `ovirt/ovirt`: their
//! resources move to the addresses Deckhouse's layouts and ours give them now
//! ([`OUR_688ADC9`]) — Terraform 1.0 has no `moved` blocks, and a plan of a state at the
//! old addresses destroys the node's VM and makes another (the upgrade test found it). The
//! data sources of those modules are dropped: a plan reads the layout's own again.
//!
//! Deckhouse's earliest layouts grew no boot disk (no `ovirt_disk_resize` in their state,
//! `ee/candi/…/master-node/main.tf` @0505833c); ours do, so the resize is added as an
//! import of the disk the VM boots from (`<vm id>/boot`): the next plan reads its size and,
//! with the layout keeping an existing disk's size, changes nothing.
//!
//! What it never does: change an attribute, drop a managed resource, or guess. A resource of any
//! other type or provider refuses the whole state, nothing written: a state entry lost
//! by mistake is an object nobody deletes. So does a value no layout of ours can keep — an
//! attribute this provider's schema lacks (Terraform would drop it unseen), a master VM
//! not named as dhctl names a master —, naming the resource and the attribute. A state
//! already migrated comes out unchanged (same serial), so running it twice is safe.

use serde_json::{json, Value};

use crate::resource::Resource;
use crate::schema::Block;
use overcast_terraform_core::migrate::Report;

/// The provider's type and the namespaces Deckhouse's layouts named it under.
const NAMESPACES: [&str; 2] = ["ovirt", "terraform-provider-ovirt"];
const OURS: &str = "terraform-provider-ovirt/ovirt";

/// The oVirt provider's resources and data sources a Deckhouse zVirt layout uses (and
/// this provider serves).
const TYPES: [&str; 9] = [
    "ovirt_vm",
    "ovirt_vm_start",
    "ovirt_nic",
    "ovirt_disk",
    "ovirt_disk_attachment",
    "ovirt_disk_resize",
    "ovirt_templates",
    "ovirt_disk_attachments",
    "ovirt_wait_for_ip",
];

/// Where our layouts of 688adc9 put each managed resource (module, type, name) and where
/// it is now (the same type; the name in the node's layout). The data disk's resources
/// had `count` (one instance, key 0) and have none now.
const OUR_688ADC9: [(&str, &str, &str, &str); 10] = [
    ("module.master", "ovirt_vm", "vm", "master_vm"),
    ("module.master", "ovirt_vm_start", "vm", "master_vm"),
    ("module.master", "ovirt_nic", "nic", "master_vm_nic"),
    (
        "module.master",
        "ovirt_disk_resize",
        "boot",
        "master_boot_disk_resize",
    ),
    (
        "module.master",
        "ovirt_disk",
        "kubernetes_data",
        "master-kubernetes-data",
    ),
    (
        "module.master",
        "ovirt_disk_attachment",
        "kubernetes_data",
        "master-kubernetes-data-attachment",
    ),
    ("module.node", "ovirt_vm", "vm", "node_vm"),
    ("module.node", "ovirt_vm_start", "vm", "node_vm"),
    ("module.node", "ovirt_nic", "nic", "node_vm_nic"),
    (
        "module.node",
        "ovirt_disk_resize",
        "boot",
        "node_boot_disk_resize",
    ),
];

/// A resource address of our 688adc9 layouts (`module.master.ovirt_vm.vm`, with or
/// without an index) as it is now (`ovirt_vm.master_vm`).
fn moved_from_688adc9(address: &str) -> Option<String> {
    let address = address.strip_suffix("[0]").unwrap_or(address);
    OUR_688ADC9.iter().find_map(|(module, ty, name, now)| {
        (address == format!("{module}.{ty}.{name}")).then(|| format!("{ty}.{now}"))
    })
}

/// `provider["<host>/<namespace>/ovirt"]` → (host, whether it is already ours); `None`
/// for any other. The namespace is compared as Terraform does, regardless of case
/// (`oVirt/ovirt` is `ovirt/ovirt`).
fn ovirt_provider(address: &str) -> Option<(&str, bool)> {
    let inner = address.strip_prefix("provider[\"")?.strip_suffix("\"]")?;
    let mut parts = inner.split('/');
    let (host, namespace, ty) = (parts.next()?, parts.next()?, parts.next()?);
    let namespace = namespace.to_ascii_lowercase();
    (parts.next().is_none()
        && ty.eq_ignore_ascii_case("ovirt")
        && host.contains('.')
        && NAMESPACES.contains(&namespace.as_str()))
    .then_some((host, inner == format!("{host}/{OURS}")))
}

/// Whether the state is one of the oVirt provider's (every resource of it): then it is
/// this module's to migrate, and the DVP migration's otherwise.
pub fn is_zvirt(state: &Value) -> bool {
    state["resources"].as_array().is_some_and(|all| {
        all.iter().any(|r| {
            r["provider"]
                .as_str()
                .is_some_and(|p| ovirt_provider(p).is_some())
        })
    })
}

/// Rewrites `state` (Terraform's state format 4). An error names each resource it
/// cannot place; then nothing is to be written.
pub fn migrate(state: &Value) -> Result<(Value, Report), String> {
    let resources = overcast_terraform_core::migrate::resources(state)?;
    let mut report = Report::default();
    let mut unknown = Vec::new();
    let mut out = Vec::with_capacity(resources.len());
    for r in resources {
        let module = r["module"]
            .as_str()
            .map(|m| format!("{m}."))
            .unwrap_or_default();
        let data = if r["mode"] == "data" { "data." } else { "" };
        let ty = r["type"].as_str().unwrap_or_default();
        let addr = format!("{module}{data}{ty}.{}", r["name"].as_str().unwrap_or("?"));
        let provider = r["provider"].as_str().unwrap_or_default();
        let Some((host, ours)) = ovirt_provider(provider) else {
            unknown.push(format!("{addr}: provider {provider} is not the oVirt one"));
            continue;
        };
        if !TYPES.contains(&ty) {
            unknown.push(format!(
                "{addr}: a {ty} is not one of Deckhouse's zVirt layouts"
            ));
            continue;
        }
        let mut moved = r.clone();
        if !ours {
            let ours = format!("provider[\"{host}/{OURS}\"]");
            report.moved.push(format!("{addr}: {provider} → {ours}"));
            moved["provider"] = json!(ours);
        }
        if let Some(module) = r["module"].as_str() {
            if module != "module.master" && module != "module.node" {
                unknown.push(format!(
                    "{addr}: no layout of ours or Deckhouse's has {module}"
                ));
                continue;
            }
            if !data.is_empty() {
                report.dropped.push(format!(
                    "{addr}: a data source of our 688adc9 layouts' module (the plan reads the layout's own)"
                ));
                continue;
            }
            let Some(now) = moved_from_688adc9(&addr) else {
                unknown.push(format!("{addr}: not a resource our 688adc9 layouts made"));
                continue;
            };
            let instances = moved["instances"].as_array_mut();
            let Some(instances) = instances.filter(|i| i.len() <= 1) else {
                unknown.push(format!("{addr}: more than one instance"));
                continue;
            };
            if let Some(instance) = instances.first_mut().and_then(|i| i.as_object_mut()) {
                match instance.remove("index_key") {
                    None => {}
                    Some(k) if k == json!(0) => {}
                    Some(k) => {
                        unknown.push(format!("{addr}: an instance of key {k}"));
                        continue;
                    }
                }
            }
            let name = now.split_once('.').map(|(_, n)| n).unwrap_or_default();
            moved.as_object_mut().map(|m| m.remove("module"));
            moved["name"] = json!(name);
            report.moved.push(format!("{addr} → {now}"));
        }
        out.push(moved);
    }
    // What an instance depends on, by the addresses it has now (Terraform orders a
    // destroy by them).
    for r in &mut out {
        for instance in r["instances"].as_array_mut().into_iter().flatten() {
            if let Some(deps) = instance["dependencies"].as_array_mut() {
                for d in deps.iter_mut() {
                    if let Some(now) = d.as_str().and_then(moved_from_688adc9) {
                        *d = json!(now);
                    }
                }
                deps.retain(|d| !d.as_str().is_some_and(|d| d.starts_with("module.")));
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for r in &out {
        let addr = format!(
            "{}{}.{}",
            if r["mode"] == "data" { "data." } else { "" },
            r["type"].as_str().unwrap_or_default(),
            r["name"].as_str().unwrap_or_default()
        );
        if r["module"].is_null() && !seen.insert(addr.clone()) {
            unknown.push(format!(
                "{addr}: in the state twice (at our 688adc9 address and at today's)"
            ));
        }
    }
    for r in &out {
        unkept(r, &mut unknown);
    }
    for w in ["master", "node"] {
        if let Some(resize) = boot_disk_resize(&out, w) {
            report.added.push(format!(
                "ovirt_disk_resize.{w}_boot_disk_resize: the disk VM {} boots from (the layout that made it grew none; ours keeps its size)",
                resize["instances"][0]["attributes"]["id"].as_str().unwrap_or("?").trim_end_matches(super::disks::BOOT_OF),
            ));
            out.push(resize);
        }
    }
    if unknown.is_empty()
        && report.moved.is_empty()
        && report.dropped.is_empty()
        && report.added.is_empty()
    {
        return Ok((state.clone(), report));
    }
    Ok((
        overcast_terraform_core::migrate::rewritten(state, out, &unknown)?,
        report,
    ))
}

/// This provider's schema of a managed resource type of Deckhouse's layouts.
fn schema_of(ty: &str) -> Option<Block> {
    Some(match ty {
        "ovirt_vm" => super::vm::Vm.schema(),
        "ovirt_vm_start" => super::vm_start::VmStart.schema(),
        "ovirt_nic" => super::nic::Nic.schema(),
        "ovirt_disk" => super::disks::Disk.schema(),
        "ovirt_disk_attachment" => super::disks::DiskAttachment.schema(),
        "ovirt_disk_resize" => super::disks::DiskResize.schema(),
        _ => return None,
    })
}

/// A value that says nothing (what a provider writes for an attribute never set).
fn empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Whether `name` is a master's VM name as dhctl gives it (`<prefix>-master-<index>`).
fn a_masters_name(name: &str) -> bool {
    name.rsplit_once("-master-").is_some_and(|(prefix, index)| {
        !prefix.is_empty() && !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit())
    })
}

/// What of the managed resource `r` no layout of ours can keep, each named with its
/// resource and attribute.
fn unkept(r: &Value, unknown: &mut Vec<String>) {
    if r["mode"] != "managed" {
        return;
    }
    let ty = r["type"].as_str().unwrap_or_default();
    let Some(schema) = schema_of(ty) else {
        return;
    };
    let addr = format!("{ty}.{}", r["name"].as_str().unwrap_or("?"));
    for instance in r["instances"].as_array().into_iter().flatten() {
        let Some(attrs) = instance["attributes"].as_object() else {
            continue;
        };
        for (k, v) in attrs {
            let known = schema.attrs.iter().any(|a| a.name == k.as_str())
                || schema.nested.iter().any(|b| b.name == k.as_str());
            if !known && !empty(v) {
                unknown.push(format!(
                    "{addr}: its attribute {k} = {v} is not one this provider's {ty} has (Terraform would drop it unseen)"
                ));
            }
        }
        if addr == "ovirt_vm.master_vm" {
            if let Some(name) = attrs.get("name").and_then(Value::as_str) {
                if !a_masters_name(name) {
                    unknown.push(format!(
                        "{addr}: its name {name:?} is not a master's as dhctl names it (<prefix>-master-<index>): \
                         our layouts find a node's VM by that name and would rename this one \
                         (a layout from before Deckhouse's terraform-modules, \
                         ee/candi/cloud-providers/zvirt/layouts/standard/master-node/main.tf@1c8c88ff, made it so)"
                    ));
                }
            }
        }
    }
}

/// The `ovirt_disk_resize` a node's state lacks when the layout that made it grew no boot
/// disk (`w`: `master` or `node`): an import of the disk its VM boots from.
fn boot_disk_resize(resources: &[Value], w: &str) -> Option<Value> {
    let at_root = |ty: &str, name: &str| {
        resources.iter().find(|r| {
            r["mode"] == "managed"
                && r["type"] == ty
                && r["name"] == name
                && r.get("module").is_none()
        })
    };
    let vm = at_root("ovirt_vm", &format!("{w}_vm"))?;
    if at_root("ovirt_disk_resize", &format!("{w}_boot_disk_resize")).is_some() {
        return None;
    }
    let id = vm["instances"][0]["attributes"]["id"].as_str()?;
    overcast_cloud_zvirt::client::is_id(id).then(|| {
        json!({"mode": "managed", "type": "ovirt_disk_resize", "name": format!("{w}_boot_disk_resize"),
            "provider": vm["provider"],
            "instances": [{"schema_version": 0, "attributes": {"id": format!("{id}{}", super::disks::BOOT_OF)},
                "sensitive_attributes": [], "dependencies": [format!("ovirt_vm.{w}_vm")]}]})
    })
}

#[cfg(test)]
mod tests;
