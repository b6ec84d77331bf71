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
    let (out, report) = migrate(&state("provider[\"registry.terraform.io/oVirt/ovirt\"]")).unwrap();
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

/// A master's state as our layouts of 688adc9 wrote it (the shape of the one that
/// release's provider wrote in `terraform_zvirt_layouts::upgrade`).
fn ours_688adc9() -> Value {
    let p = "provider[\"registry.terraform.io/ovirt/ovirt\"]";
    let r = |mode: &str, ty: &str, name: &str, index: Option<u32>, deps: Value| {
        let mut instance = json!({"schema_version": 0, "attributes": {"id": format!("{ty}-id")},
                                  "dependencies": deps});
        if let Some(i) = index {
            instance["index_key"] = json!(i);
        }
        json!({"module": "module.master", "mode": mode, "type": ty, "name": name,
               "provider": p, "instances": [instance]})
    };
    json!({"version": 4, "terraform_version": "1.0.3", "serial": 7, "lineage": "l", "outputs": {},
    "resources": [
        r("data", "ovirt_templates", "template", None, json!([])),
        r("data", "ovirt_wait_for_ip", "vm", None, json!([])),
        r("managed", "ovirt_vm", "vm", None, json!(["module.master.data.ovirt_templates.template"])),
        r("managed", "ovirt_vm_start", "vm", None, json!(["module.master.ovirt_vm.vm",
            "module.master.ovirt_nic.nic", "module.master.ovirt_disk_attachment.kubernetes_data"])),
        r("managed", "ovirt_nic", "nic", None, json!(["module.master.ovirt_vm.vm"])),
        r("managed", "ovirt_disk_resize", "boot", None, json!(["module.master.ovirt_vm.vm"])),
        r("managed", "ovirt_disk", "kubernetes_data", Some(0), json!([])),
        r("managed", "ovirt_disk_attachment", "kubernetes_data", Some(0),
          json!(["module.master.ovirt_disk.kubernetes_data", "module.master.ovirt_vm.vm"])),
    ]})
}

#[test]
fn our_688adc9_layouts_resources_move_to_today_s_addresses() {
    let (out, report) = migrate(&ours_688adc9()).unwrap();
    let names: Vec<String> = out["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert!(r.get("module").is_none(), "{r}");
            assert_eq!(
                r["provider"],
                "provider[\"registry.terraform.io/terraform-provider-ovirt/ovirt\"]"
            );
            let i = &r["instances"][0];
            assert!(i.get("index_key").is_none(), "{r}");
            assert_eq!(
                i["attributes"]["id"],
                format!("{}-id", r["type"].as_str().unwrap())
            );
            format!(
                "{}.{}",
                r["type"].as_str().unwrap(),
                r["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "ovirt_vm.master_vm",
            "ovirt_vm_start.master_vm",
            "ovirt_nic.master_vm_nic",
            "ovirt_disk_resize.master_boot_disk_resize",
            "ovirt_disk.master-kubernetes-data",
            "ovirt_disk_attachment.master-kubernetes-data-attachment",
        ]
    );
    assert_eq!(
        out["resources"][1]["instances"][0]["dependencies"],
        json!([
            "ovirt_vm.master_vm",
            "ovirt_nic.master_vm_nic",
            "ovirt_disk_attachment.master-kubernetes-data-attachment"
        ])
    );
    // The module's data source, named by nothing now, is gone from the dependencies.
    assert_eq!(
        out["resources"][0]["instances"][0]["dependencies"],
        json!([])
    );
    assert_eq!(report.dropped.len(), 2, "{report:?}");
    assert!(report
        .moved
        .contains(&"module.master.ovirt_vm.vm → ovirt_vm.master_vm".to_owned()));
    // Twice is once.
    let (again, report) = migrate(&out).unwrap();
    assert_eq!(again, out);
    assert_eq!(report, Report::default());
}

#[test]
fn a_688adc9_resource_it_does_not_know_refuses_the_whole_state() {
    let mut s = ours_688adc9();
    s["resources"][2]["name"] = json!("other");
    let e = migrate(&s).unwrap_err();
    assert!(
        e.contains("module.master.ovirt_vm.other: not a resource"),
        "{e}"
    );
    let mut s = ours_688adc9();
    s["resources"][6]["instances"][0]["index_key"] = json!(1);
    let e = migrate(&s).unwrap_err();
    assert!(e.contains("an instance of key 1"), "{e}");
    let mut s = ours_688adc9();
    s["resources"][2]["module"] = json!("module.extra");
    let e = migrate(&s).unwrap_err();
    assert!(e.contains("module.extra"), "{e}");
    // Both the old address and today's: refused, not merged.
    let mut s = ours_688adc9();
    let mut today = s["resources"][2].clone();
    today.as_object_mut().unwrap().remove("module");
    today["name"] = json!("master_vm");
    s["resources"].as_array_mut().unwrap().push(today);
    let e = migrate(&s).unwrap_err();
    assert!(e.contains("ovirt_vm.master_vm: in the state twice"), "{e}");
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

const VM: &str = "0b7e1f55-6f3c-4c2e-9a51-3f1d2c7b8a90";

/// A master's state as Deckhouse's layout @0505833c leaves it: no boot disk resize.
fn without_resize(name: &str) -> Value {
    let p = "provider[\"registry.terraform.io/ovirt/ovirt\"]";
    json!({"version": 4, "terraform_version": "0.14.8", "serial": 3, "lineage": "l", "outputs": {},
    "resources": [
        {"mode": "managed", "type": "ovirt_vm", "name": "master_vm", "provider": p,
         "instances": [{"schema_version": 0, "attributes": {"id": VM, "name": name,
             "initialization_hostname": name, "os_type": "other_linux", "cpu_mode": null}}]},
        resource("ovirt_vm_start", "master_vm", p, "managed"),
    ]})
}

#[test]
fn a_state_without_a_boot_disk_resize_gets_one_as_an_import_of_the_vm_s_boot_disk() {
    let (out, report) = migrate(&without_resize("d8-master-0")).unwrap();
    let resize = out["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["type"] == "ovirt_disk_resize")
        .expect("a resize added");
    assert_eq!(resize["name"], "master_boot_disk_resize");
    assert_eq!(
        resize["provider"],
        "provider[\"registry.terraform.io/terraform-provider-ovirt/ovirt\"]"
    );
    assert_eq!(
        resize["instances"][0]["attributes"],
        json!({"id": format!("{VM}/boot")})
    );
    assert_eq!(
        resize["instances"][0]["dependencies"],
        json!(["ovirt_vm.master_vm"])
    );
    assert_eq!(report.added.len(), 1, "{report:?}");
    assert!(report.added[0].contains(VM), "{report:?}");
    // Twice is once.
    let (again, report) = migrate(&out).unwrap();
    assert_eq!(again, out);
    assert_eq!(report, Report::default());
}

#[test]
fn what_no_layout_of_ours_can_keep_refuses_the_state_naming_resource_and_attribute() {
    // The layout before terraform-modules named its one master without an index.
    let e = migrate(&without_resize("d8-master")).unwrap_err();
    assert!(
        e.contains("ovirt_vm.master_vm: its name \"d8-master\""),
        "{e}"
    );
    // An attribute this provider lacks, with a value: Terraform would drop it.
    let mut s = without_resize("d8-master-0");
    s["resources"][0]["instances"][0]["attributes"]["cloud_init_user"] = json!("core");
    let e = migrate(&s).unwrap_err();
    assert!(
        e.contains("ovirt_vm.master_vm: its attribute cloud_init_user = \"core\""),
        "{e}"
    );
    // Without a value it loses nothing.
    s["resources"][0]["instances"][0]["attributes"]["cloud_init_user"] = json!(null);
    assert!(migrate(&s).is_ok());
    for (name, ok) in [
        ("d8-master-0", true),
        ("a-b-master-12", true),
        ("d8-master", false),
        ("-master-0", false),
        ("d8-master-x", false),
    ] {
        assert_eq!(a_masters_name(name), ok, "{name}");
    }
}
