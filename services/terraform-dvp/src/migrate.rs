//! `terraform-provider-dvp migrate-state`: a Terraform state Deckhouse's DVP layouts wrote
//! (hashicorp/kubernetes' `kubernetes_manifest` and `kubernetes_secret`, in the modules
//! `root-disk`, `kubernetes-data-disk`, `additional-disk`, `ipv4-address`, `master` and
//! `static-node`) rewritten for this provider's layouts: each object becomes the typed
//! resource of ours that makes it, at our address, holding its name alone — the state an
//! import starts from. The next plan reads every object from the parent (as after
//! `terraform import`) and, since our layouts name and label them as Deckhouse's do
//! (`deploy/terraform/dvp/terraform-modules/node.tf`), changes nothing.
//!
//! Resources that own no object of their own are dropped (readiness checks, owner
//! references — the references stay on the objects —, base-infrastructure's
//! `terraform_data` checks and the data sources); so is
//! base-infrastructure's NetworkPolicy, which stays in the parent, no longer managed. A
//! resource it does not know is refused and nothing is written: a state entry dropped
//! by mistake is an object nobody deletes. Resources already of this provider pass as
//! they are, so a state migrated twice is the same.

use serde_json::{json, Value};

use overcast_terraform_core::migrate::Report;

/// A `kubernetes_manifest`'s `object` (or `manifest`), unwrapped from the `{value, type}`
/// a dynamic attribute is stored as.
fn manifest(attrs: &Value) -> Option<&Value> {
    ["object", "manifest"].iter().find_map(|k| {
        let v = attrs.get(*k)?;
        let v = if v.get("type").is_some() && v.get("value").is_some() {
            &v["value"]
        } else {
            v
        };
        v.get("kind").is_some().then_some(v)
    })
}

/// The resource's address as Terraform prints it.
fn address(r: &Value) -> String {
    let module = r["module"]
        .as_str()
        .map(|m| format!("{m}."))
        .unwrap_or_default();
    let data = if r["mode"] == "data" { "data." } else { "" };
    format!(
        "{module}{data}{}.{}",
        r["type"].as_str().unwrap_or("?"),
        r["name"].as_str().unwrap_or("?")
    )
}

/// The `for_each` key of the module an address is in (`module.additional-disk["1"]`).
fn module_key(module: &str) -> Option<&str> {
    let start = module.find("[\"")? + 2;
    let end = module[start..].find("\"]")? + start;
    Some(&module[start..end])
}

/// Where an object of `kind` made in `module` goes: (our type, our name, its for_each key).
fn target(kind: &str, module: &str) -> Option<(&'static str, &'static str, Option<String>)> {
    let base = module.split('[').next().unwrap_or(module);
    Some(match (kind, base) {
        ("VirtualDisk", "module.root-disk") => ("dvp_virtual_disk", "root", None),
        ("VirtualDisk", "module.kubernetes-data-disk") => {
            ("dvp_virtual_disk", "kubernetes_data", None)
        }
        ("VirtualDisk", "module.additional-disk") => (
            "dvp_virtual_disk",
            "additional",
            Some(module_key(module)?.to_owned()),
        ),
        ("VirtualMachineIPAddress", "module.ipv4-address") => {
            ("dvp_virtual_machine_ip_address", "node", None)
        }
        ("VirtualMachine", "module.master" | "module.static-node") => {
            ("dvp_virtual_machine", "node", None)
        }
        _ => return None,
    })
}

/// The provider address the migrated resources carry: ours, on the registry host the
/// state's kubernetes provider came from (Terraform's or OpenTofu's).
fn our_provider(theirs: &str) -> String {
    let host = theirs
        .split('"')
        .nth(1)
        .and_then(|a| a.split('/').next())
        .filter(|h| h.contains('.'))
        .unwrap_or("registry.terraform.io");
    format!("provider[\"{host}/overcast/dvp\"]")
}

/// Rewrites `state` (Terraform's state format 4). An error names what it cannot place;
/// then nothing is to be written.
pub fn migrate(state: &Value) -> Result<(Value, Report), String> {
    let resources = overcast_terraform_core::migrate::resources(state)?;
    let mut report = Report::default();
    let mut out: Vec<Value> = Vec::new();
    let mut unknown = Vec::new();
    for r in resources {
        let addr = address(r);
        let ty = r["type"].as_str().unwrap_or_default();
        if ty.starts_with("dvp_") {
            out.push(r.clone());
            continue;
        }
        if r["mode"] == "data"
            || matches!(
                ty,
                "kubernetes_resource_ready_v1"
                    | "kubernetes_owner_references_v1"
                    // base-infrastructure's checks of the parent (Terraform's builtin).
                    | "terraform_data"
            )
        {
            report.dropped.push(format!("{addr}: owns no object"));
            continue;
        }
        // Refused by its type, not only per instance: a resource with no instances (a
        // `count = 0`) of a type we do not know must not vanish from the state unseen.
        if !matches!(
            ty,
            "kubernetes_manifest" | "kubernetes_secret" | "kubernetes_secret_v1"
        ) {
            unknown.push(format!(
                "{addr}: a {ty} is not one of Deckhouse's DVP layouts"
            ));
            continue;
        }
        let module = r["module"].as_str().unwrap_or_default();
        let provider = our_provider(r["provider"].as_str().unwrap_or_default());
        let instances = r["instances"].as_array().cloned().unwrap_or_default();
        for inst in &instances {
            let attrs = &inst["attributes"];
            let (kind, name) = match ty {
                "kubernetes_manifest" => {
                    let Some(m) = manifest(attrs) else {
                        unknown.push(format!("{addr}: no object recorded"));
                        continue;
                    };
                    (
                        m["kind"].as_str().unwrap_or_default().to_owned(),
                        m["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    )
                }
                "kubernetes_secret" | "kubernetes_secret_v1" => {
                    let name = attrs["metadata"][0]["name"]
                        .as_str()
                        .map(str::to_owned)
                        .or_else(|| {
                            attrs["id"]
                                .as_str()
                                .and_then(|id| id.rsplit('/').next())
                                .map(str::to_owned)
                        })
                        .unwrap_or_default();
                    ("Secret".to_owned(), name)
                }
                _ => {
                    unknown.push(format!(
                        "{addr}: a {ty} is not one of Deckhouse's DVP layouts"
                    ));
                    continue;
                }
            };
            if kind == "NetworkPolicy" {
                report.dropped.push(format!(
                    "{addr}: NetworkPolicy {name} stays in the parent, no longer managed"
                ));
                continue;
            }
            let placed = if kind == "Secret" {
                matches!(module, "module.master" | "module.static-node")
                    .then(|| ("dvp_cloud_init_secret", "node", None))
            } else {
                target(&kind, module)
            };
            let Some((our_type, our_name, key)) = placed.filter(|_| !name.is_empty()) else {
                unknown.push(format!("{addr}: a {kind} {name:?} ours makes nowhere"));
                continue;
            };
            let mut instance = json!({
                "schema_version": 0,
                "attributes": {"id": name},
                "sensitive_attributes": [],
            });
            if let Some(k) = &key {
                instance["index_key"] = json!(k);
            }
            let ours = key
                .as_ref()
                .map(|k| format!("{our_type}.{our_name}[\"{k}\"]"))
                .unwrap_or_else(|| format!("{our_type}.{our_name}"));
            report
                .moved
                .push(format!("{addr} ({kind} {name}) → {ours}"));
            // One resource per address; for_each instances gather under it.
            match out.iter_mut().find(|o| {
                o["type"] == our_type && o["name"] == our_name && o.get("module").is_none()
            }) {
                Some(o) if key.is_some() => o["instances"]
                    .as_array_mut()
                    .expect("instances")
                    .push(instance),
                Some(_) => return Err(format!("{addr}: a second {our_type}.{our_name}")),
                None => {
                    let mut res = json!({
                        "mode": "managed", "type": our_type, "name": our_name,
                        "provider": provider, "instances": [instance],
                    });
                    if key.is_some() {
                        res["each"] = json!("map");
                    }
                    out.push(res);
                }
            }
        }
    }
    Ok((
        overcast_terraform_core::migrate::rewritten(state, out, &unknown)?,
        report,
    ))
}

#[cfg(test)]
mod tests;
