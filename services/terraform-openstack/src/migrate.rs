//! `terraform-provider-overcast migrate-state` for an OpenStack state: what Deckhouse's
//! OpenStack layouts wrote with terraform-provider-openstack is this provider's state as it
//! is (the same names, schemas and schema version 0), but for one move Deckhouse made
//! itself: its layouts changed the volumes from `openstack_blockstorage_volume_v2` to
//! `…_v3` (the kubernetes-data volume, the root volumes), and its hook
//! `ee/modules/030-cloud-provider-openstack/hooks/migrate/migrate_terraform_state.go`
//! (@06e6ebd4) rewrote the node states in the cluster: the type, `multiattach` null,
//! `enable_online_resize` true, and the dependencies naming the type. A state from before
//! that hook (or a base-infrastructure state, which it never read) is rewritten the same
//! way here, every instance of it, so the first plan keeps the volume instead of
//! replacing it. Anything else passes as it is; a resource type this provider does not
//! serve is refused, and nothing is written: an entry dropped by mistake is an object
//! nobody deletes.

use serde_json::{json, Value};

use overcast_terraform_core::migrate::{resources, rewritten, Report};

const V2: &str = "openstack_blockstorage_volume_v2";
const V3: &str = "openstack_blockstorage_volume_v3";

/// Whether `state` is an OpenStack state (its resources are terraform-provider-openstack's).
pub fn is_openstack(state: &Value) -> bool {
    state["resources"].as_array().is_some_and(|rs| {
        rs.iter().any(|r| {
            r["provider"]
                .as_str()
                .is_some_and(|p| p.contains("terraform-provider-openstack/openstack"))
        })
    })
}

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

/// `state` rewritten for this provider's layouts, and what moved.
pub fn migrate(state: &Value) -> Result<(Value, Report), String> {
    let server = crate::server();
    let served = server.state_types();
    let data_served = server.data_source_names();
    let mut report = Report::default();
    let mut unknown = Vec::new();
    let mut out = Vec::new();
    for r in resources(state)? {
        let mut r = r.clone();
        let ty = r["type"].as_str().unwrap_or_default().to_owned();
        let known = if r["mode"] == "data" {
            data_served.contains(&ty.as_str())
        } else {
            served.get(&ty).is_some()
        };
        if !known {
            unknown.push(format!(
                "{}: {ty} is not served by this provider",
                address(&r)
            ));
            continue;
        }
        if r["mode"] == "managed" && ty == V2 {
            let before = address(&r);
            r["type"] = json!(V3);
            for i in r["instances"].as_array_mut().into_iter().flatten() {
                i["attributes"]["multiattach"] = Value::Null;
                i["attributes"]["enable_online_resize"] = json!(true);
            }
            report.moved.push(format!("{before} -> {}", address(&r)));
        }
        for i in r["instances"].as_array_mut().into_iter().flatten() {
            for d in i["dependencies"].as_array_mut().into_iter().flatten() {
                if let Some(text) = d.as_str().filter(|t| t.contains(V2)) {
                    *d = json!(text.replace(V2, V3));
                }
            }
        }
        out.push(r);
    }
    let migrated = rewritten(state, out, &unknown)?;
    Ok((migrated, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A master state of Deckhouse's layouts before the v3 volumes (kubernetes-data @1e3730b1):
    /// the volume v2 and the attachment depending on it, as terraform-provider-openstack
    /// writes them.
    fn old_master() -> Value {
        json!({
            "version": 4, "terraform_version": "0.14.8", "serial": 7, "lineage": "l",
            "outputs": {},
            "resources": [
                {"module": "module.kubernetes_data", "mode": "managed", "type": V2, "name": "kubernetes_data",
                 "provider": "provider[\"registry.terraform.io/terraform-provider-openstack/openstack\"]",
                 "instances": [{"schema_version": 0, "attributes": {"id": "v-1", "size": 10, "multiattach": false, "name": "p-kubernetes-data-0"}, "private": "bnVsbA=="}]},
                {"module": "module.kubernetes_data", "mode": "managed", "type": "openstack_compute_volume_attach_v2", "name": "kubernetes_data",
                 "provider": "provider[\"registry.terraform.io/terraform-provider-openstack/openstack\"]",
                 "instances": [{"schema_version": 0, "attributes": {"id": "s-1/v-1"},
                                "dependencies": ["module.kubernetes_data.openstack_blockstorage_volume_v2.kubernetes_data", "module.master.openstack_compute_instance_v2.master"]}]}
            ]
        })
    }

    #[test]
    fn a_v2_volume_becomes_v3_as_deckhouse_s_hook_makes_it() {
        let (m, report) = migrate(&old_master()).unwrap();
        assert_eq!(m["serial"], 8);
        let vol = &m["resources"][0];
        assert_eq!(vol["type"], V3);
        assert_eq!(
            vol["instances"][0]["attributes"]["multiattach"],
            Value::Null
        );
        assert_eq!(
            vol["instances"][0]["attributes"]["enable_online_resize"],
            true
        );
        assert_eq!(vol["instances"][0]["attributes"]["id"], "v-1");
        assert_eq!(
            m["resources"][1]["instances"][0]["dependencies"][0],
            "module.kubernetes_data.openstack_blockstorage_volume_v3.kubernetes_data"
        );
        assert_eq!(report.moved.len(), 1);
        // Twice is once.
        let (again, report) = migrate(&m).unwrap();
        assert_eq!(again["resources"], m["resources"]);
        assert!(report.moved.is_empty());
    }

    #[test]
    fn a_type_not_served_is_refused_with_nothing_written() {
        let mut s = old_master();
        s["resources"].as_array_mut().unwrap().push(json!({
            "mode": "managed", "type": "openstack_lb_loadbalancer_v2", "name": "lb",
            "provider": "provider[\"registry.terraform.io/terraform-provider-openstack/openstack\"]",
            "instances": [{"attributes": {"id": "lb-1"}}]
        }));
        let e = migrate(&s).unwrap_err();
        assert!(e.contains("openstack_lb_loadbalancer_v2.lb"), "{e}");
    }
}
