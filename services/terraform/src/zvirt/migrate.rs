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
//! What it never does: change an attribute, drop a resource, or guess. A resource of any
//! other type or provider refuses the whole state, nothing written: a state entry lost
//! by mistake is an object nobody deletes. A state already migrated comes out unchanged
//! (same serial), so running it twice is safe.

use serde_json::{json, Value};

use crate::migrate::Report;

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
    let resources = crate::migrate::resources(state)?;
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
        out.push(moved);
    }
    if unknown.is_empty() && report.moved.is_empty() {
        return Ok((state.clone(), report));
    }
    Ok((crate::migrate::rewritten(state, out, &unknown)?, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(ty: &str, name: &str, provider: &str, mode: &str) -> Value {
        json!({"mode": mode, "type": ty, "name": name, "provider": provider,
               "instances": [{"schema_version": 0, "attributes": {"id": "x"}}]})
    }

    fn state(provider: &str) -> Value {
        json!({"version": 4, "terraform_version": "0.14.8", "serial": 9, "lineage": "l",
        "outputs": {"kubernetes_data_device_path": {"value": "/dev/sdb", "type": "string"}},
        "resources": [
            resource("ovirt_templates", "master_template", provider, "data"),
            resource("ovirt_vm", "master_vm", provider, "managed"),
            resource("ovirt_vm_start", "master_vm", provider, "managed"),
        ]})
    }

    #[test]
    fn the_2024_address_becomes_ours_on_the_same_registry() {
        for host in ["registry.terraform.io", "registry.opentofu.org"] {
            let theirs = format!("provider[\"{host}/ovirt/ovirt\"]");
            let (out, report) = migrate(&state(&theirs)).unwrap();
            assert_eq!(report.moved.len(), 3, "{report:?}");
            for r in out["resources"].as_array().unwrap() {
                assert_eq!(
                    r["provider"],
                    format!("provider[\"{host}/terraform-provider-ovirt/ovirt\"]")
                );
                assert_eq!(r["instances"][0]["attributes"]["id"], "x");
            }
            assert_eq!(out["serial"], 10);
            assert_eq!(out["lineage"], "l");
            assert_eq!(out["outputs"], state(&theirs)["outputs"]);
            // Twice is once.
            let (again, report) = migrate(&out).unwrap();
            assert_eq!(again, out);
            assert!(report.moved.is_empty());
        }
    }

    #[test]
    fn a_namespace_in_any_case_is_the_ovirt_one() {
        let (out, report) =
            migrate(&state("provider[\"registry.terraform.io/oVirt/ovirt\"]")).unwrap();
        assert_eq!(report.moved.len(), 3, "{report:?}");
        assert_eq!(
            out["resources"][1]["provider"],
            "provider[\"registry.terraform.io/terraform-provider-ovirt/ovirt\"]"
        );
    }

    #[test]
    fn a_state_already_on_our_address_is_unchanged() {
        let s = state("provider[\"registry.terraform.io/terraform-provider-ovirt/ovirt\"]");
        let (out, report) = migrate(&s).unwrap();
        assert_eq!(out, s);
        assert!(report.moved.is_empty());
    }

    #[test]
    fn anything_else_refuses_the_whole_state() {
        let mut s = state("provider[\"registry.terraform.io/ovirt/ovirt\"]");
        s["resources"].as_array_mut().unwrap().push(resource(
            "null_resource",
            "x",
            "provider[\"registry.terraform.io/hashicorp/null\"]",
            "managed",
        ));
        s["resources"].as_array_mut().unwrap().push(resource(
            "ovirt_tag",
            "t",
            "provider[\"registry.terraform.io/ovirt/ovirt\"]",
            "managed",
        ));
        let e = migrate(&s).unwrap_err();
        assert!(e.contains("null_resource.x: provider"), "{e}");
        assert!(e.contains("ovirt_tag.t: a ovirt_tag"), "{e}");
        assert!(migrate(&json!({"version": 3})).is_err());
    }

    #[test]
    fn a_zvirt_state_is_told_from_a_dvp_one() {
        assert!(is_zvirt(&state(
            "provider[\"registry.terraform.io/ovirt/ovirt\"]"
        )));
        assert!(!is_zvirt(&state(
            "provider[\"registry.terraform.io/hashicorp/kubernetes\"]"
        )));
    }
}
