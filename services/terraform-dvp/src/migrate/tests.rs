//! States shaped as Deckhouse's DVP layouts (release 1.76) leave them with
//! hashicorp/kubernetes 2.x: `kubernetes_manifest` keeps `manifest` and `object` as dynamic
//! values (`{"value", "type"}`), `kubernetes_secret` its `metadata` block and the id
//! `namespace/name`.

use super::*;

const K8S: &str = "provider[\"registry.terraform.io/hashicorp/kubernetes\"]";

fn manifest_resource(module: &str, name: &str, kind: &str, object: &str) -> Value {
    let obj = json!({"apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": kind,
        "metadata": {"name": object, "namespace": "tenant"}});
    let inst = json!({
        "schema_version": 1,
        "attributes": {
            "computed_fields": null, "field_manager": [], "timeouts": [], "wait": [], "wait_for": null,
            "manifest": {"value": obj, "type": ["object", {}]},
            "object": {"value": obj, "type": ["object", {}]},
        },
        "sensitive_attributes": [],
        "private": "eyJzY2hlbWFfdmVyc2lvbiI6IjEifQ==",
    });
    let mut r = json!({"module": module, "mode": "managed", "type": "kubernetes_manifest",
        "name": name, "provider": K8S, "instances": [inst]});
    // Deckhouse's address is counted (`count = ... ? 1 : 0`).
    if name == "ipv4_address" {
        r["instances"][0]["index_key"] = json!(0);
    }
    r
}

fn aside(module: &str, mode: &str, ty: &str, name: &str) -> Value {
    json!({"module": module, "mode": mode, "type": ty, "name": name, "provider": K8S,
        "instances": [{"schema_version": 0, "attributes": {"id": "x"}}]})
}

fn master_state() -> Value {
    json!({
        "version": 4, "terraform_version": "1.0.3", "serial": 7, "lineage": "3a1f-lineage",
        "outputs": {"master_ip_address_for_ssh": {"value": "10.66.20.3", "type": "string"}},
        "resources": [
            manifest_resource("module.root-disk", "root-disk", "VirtualDisk", "d8-master-0-6f1e2a"),
            aside("module.root-disk", "managed", "kubernetes_resource_ready_v1", "root-disk"),
            aside("module.kubernetes-data-disk", "data", "kubernetes_resource", "kubernetes-data-disk"),
            manifest_resource("module.kubernetes-data-disk", "kubernetes-data-disk", "VirtualDisk", "d8-master-kubernetes-data-0-0c9a41"),
            manifest_resource("module.additional-disk[\"0\"]", "additional_disk", "VirtualDisk", "d8-master-additional-disk-0-0-aa0001"),
            manifest_resource("module.additional-disk[\"1\"]", "additional_disk", "VirtualDisk", "d8-master-additional-disk-1-0-aa0002"),
            manifest_resource("module.ipv4-address", "ipv4_address", "VirtualMachineIPAddress", "d8-master-0-auto"),
            manifest_resource("module.master", "vm", "VirtualMachine", "d8-master-0-b21c77"),
            {"module": "module.master", "mode": "managed", "type": "kubernetes_secret", "name": "cloudinit-secret",
             "provider": K8S, "instances": [{"schema_version": 0, "attributes": {
                "id": "tenant/d8-master-0-cloudinit-b21c77", "type": "provisioning.virtualization.deckhouse.io/cloud-init",
                "data": {"userData": "#cloud-config"}, "binary_data": null, "immutable": false,
                "metadata": [{"name": "d8-master-0-cloudinit-b21c77", "namespace": "tenant", "labels": {}, "annotations": null,
                              "generate_name": "", "generation": 0, "resource_version": "812", "uid": "9f0c"}],
             }, "sensitive_attributes": [[{"type": "get_attr", "value": "data"}]]}]},
            aside("", "managed", "kubernetes_owner_references_v1", "root-disk"),
            aside("module.master", "data", "kubernetes_resource", "vm_data"),
        ],
    })
}

fn ours(state: &Value) -> Vec<String> {
    let mut out: Vec<String> = state["resources"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["instances"].as_array().unwrap().iter().map(move |i| {
                format!(
                    "{}.{}{} {} {}",
                    r["type"].as_str().unwrap(),
                    r["name"].as_str().unwrap(),
                    i["index_key"]
                        .as_str()
                        .map(|k| format!("[{k}]"))
                        .unwrap_or_default(),
                    i["attributes"]["id"].as_str().unwrap(),
                    r["provider"].as_str().unwrap(),
                )
            })
        })
        .collect();
    out.sort();
    out
}

#[test]
fn deckhouses_master_becomes_our_resources_holding_their_names() {
    let state = master_state();
    let (migrated, report) = migrate(&state).unwrap();
    let p = "provider[\"registry.terraform.io/overcast/dvp\"]";
    assert_eq!(
        ours(&migrated),
        [
            format!("dvp_cloud_init_secret.node d8-master-0-cloudinit-b21c77 {p}"),
            format!("dvp_virtual_disk.additional[0] d8-master-additional-disk-0-0-aa0001 {p}"),
            format!("dvp_virtual_disk.additional[1] d8-master-additional-disk-1-0-aa0002 {p}"),
            format!("dvp_virtual_disk.kubernetes_data d8-master-kubernetes-data-0-0c9a41 {p}"),
            format!("dvp_virtual_disk.root d8-master-0-6f1e2a {p}"),
            format!("dvp_virtual_machine.node d8-master-0-b21c77 {p}"),
            format!("dvp_virtual_machine_ip_address.node d8-master-0-auto {p}"),
        ]
    );
    let additional = migrated["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "additional")
        .unwrap();
    assert_eq!(additional["each"], "map", "for_each instances");
    assert_eq!(migrated["serial"], 8, "a new serial");
    assert_eq!(migrated["lineage"], "3a1f-lineage", "the same lineage");
    assert_eq!(migrated["outputs"], state["outputs"], "the outputs kept");
    assert_eq!(report.moved.len(), 7);
    assert_eq!(report.dropped.len(), 4, "{:?}", report.dropped);
    assert!(
        !migrated.to_string().contains("#cloud-config"),
        "nothing of the Secret's data is carried"
    );
}

#[test]
fn a_migrated_state_migrates_to_itself_and_opentofu_keeps_its_registry() {
    let mut state = master_state();
    let tofu = "provider[\"registry.opentofu.org/hashicorp/kubernetes\"]";
    for r in state["resources"].as_array_mut().unwrap() {
        r["provider"] = json!(tofu);
    }
    let (once, _) = migrate(&state).unwrap();
    assert!(ours(&once)
        .iter()
        .all(|r| r.ends_with("provider[\"registry.opentofu.org/overcast/dvp\"]")));
    let (twice, report) = migrate(&once).unwrap();
    assert_eq!(ours(&twice), ours(&once));
    assert!(report.moved.is_empty() && report.dropped.is_empty());
}

#[test]
fn what_it_cannot_place_refuses_the_whole_state() {
    let mut state = master_state();
    state["resources"].as_array_mut().unwrap().push(aside(
        "",
        "managed",
        "kubernetes_config_map",
        "extra",
    ));
    let err = migrate(&state).unwrap_err();
    assert!(err.contains("kubernetes_config_map.extra"), "{err}");
    // A VirtualMachine outside the node modules: no guess.
    let mut state = master_state();
    state["resources"][7]["module"] = json!("module.something-else");
    assert!(migrate(&state).unwrap_err().contains("d8-master-0-b21c77"));
    // A resource of another type with no instances (`count = 0`) is refused too, not
    // dropped unseen: a zVirt state whose provider address is not read as the oVirt
    // one came here and left with no resources at all.
    let mut state = master_state();
    state["resources"].as_array_mut().unwrap().push(json!({
        "mode": "managed", "type": "ovirt_vm", "name": "x", "instances": [],
        "provider": "provider[\"registry.terraform.io/example/ovirt\"]"}));
    assert!(migrate(&state).unwrap_err().contains("ovirt_vm.x"));
    // Not a format-4 state, or one without a serial number.
    assert!(migrate(&json!({"version": 3, "modules": []})).is_err());
    let mut no_serial = master_state();
    no_serial["serial"] = json!("x");
    assert!(migrate(&no_serial).unwrap_err().contains("serial"));
}

#[test]
fn base_infrastructures_network_policy_is_left_in_the_parent() {
    let state = json!({"version": 4, "serial": 1, "lineage": "l", "outputs": {}, "resources": [
        {"module": "module.validation", "mode": "managed", "type": "terraform_data", "name": "validation",
         "provider": "provider[\"terraform.io/builtin/terraform\"]", "instances": [{"schema_version": 0,
         "attributes": {"id": "5e1a", "input": null, "output": null, "triggers_replace": null}}]},
        aside("module.validation", "data", "kubernetes_resources", "virtual_machine_classes"),
        {
        "mode": "managed", "type": "kubernetes_manifest", "name": "isolated_cluster_prefix_network_policy",
        "provider": K8S, "each": "map", "instances": [{"index_key": "isolated_cluster_prefix", "schema_version": 1,
        "attributes": {"object": {"value": {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "isolated-d8", "namespace": "tenant"}}, "type": ["object", {}]}}}]}]});
    let (migrated, report) = migrate(&state).unwrap();
    assert_eq!(migrated["resources"], json!([]));
    assert_eq!(report.dropped.len(), 3, "{report:?}");
    assert!(report.dropped[2].contains("isolated-d8"), "{report:?}");
}
