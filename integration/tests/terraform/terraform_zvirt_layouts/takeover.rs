//! A master and a static node Deckhouse's zVirt layouts made, taken over — for each
//! release a user may be on ([`super::deckhouse`]): the engine's objects as that
//! release's files make them (its CPU topology, etcd disk interface, stop behaviour),
//! the state it leaves as the upstream oVirt provider writes it (its schema; what its
//! Read stores, taken from the engine; its provider address and tool version); then as
//! an operator switching: `terraform-provider-overcast migrate-state`, our layout's
//! `init` and `plan -detailed-exitcode` with Terraform 1.0.3 and with a newer one → no
//! change and no engine write; `apply` → nothing happens; a bigger root disk → an
//! in-place resize, the VM kept.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use overcast_integration::terraform::Run;
use serde_json::Value;

use super::deckhouse::{Release, RELEASE_2024, RELEASE_NEWEST};
use super::*;

const OURS: &str = "registry.terraform.io/terraform-provider-ovirt/ovirt";
const CPUS: i64 = 4;

/// The attributes of the managed resource `ty.name` in a state document.
fn attributes<'a>(state: &'a Value, ty: &str, name: &str) -> &'a Value {
    state["resources"]
        .as_array()
        .and_then(|all| {
            all.iter()
                .find(|r| r["type"] == ty && r["name"] == name && r["mode"] == "managed")
        })
        .map(|r| &r["instances"][0]["attributes"])
        .unwrap_or_else(|| panic!("{ty}.{name} not in the state"))
}

/// Which node: Deckhouse's resource names for it.
#[derive(Clone, Copy)]
struct Role {
    master: bool,
    /// `master` or `node` (`ovirt_vm.master_vm`, `ovirt_nic.node_vm_nic`, …).
    word: &'static str,
    vm_name: &'static str,
    group: &'static str,
    layout: &'static str,
}

const MASTER: Role = Role {
    master: true,
    word: "master",
    vm_name: "tf-master-0",
    group: "master",
    layout: "master-node",
};
const NODE: Role = Role {
    master: false,
    word: "node",
    vm_name: "tf-worker-0",
    group: "worker",
    layout: "static-node",
};

/// The engine's objects as `release`'s files make them for `role`, made through the
/// engine's API (our provider as a plain client of it, in a module of its own whose
/// every value is the release's); answers the ids a state of them names.
fn made_as_deckhouse(
    bin: &Path,
    root: &Path,
    url: &str,
    ids: &BTreeMap<&str, String>,
    release: &Release,
    role: Role,
) -> BTreeMap<&'static str, String> {
    let (sockets, cores, threads) = if role.master {
        (release.master_cpu)(CPUS)
    } else {
        (release.node_cpu)(CPUS)
    };
    let memory = 8192u64 << 20;
    let name = role.vm_name;
    let stop = release
        .stop_behavior
        .map(|b| format!("  stop_behavior = \"{b}\"\n"))
        .unwrap_or_default();
    let etcd = if role.master {
        format!(
            r#"
resource "ovirt_disk" "etcd" {{
  format            = "raw"
  sparse            = false
  size              = {size}
  storage_domain_id = "{domain}"
  alias             = "{name}-kubernetes-data"
}}
resource "ovirt_disk_attachment" "etcd" {{
  disk_id        = ovirt_disk.etcd.id
  vm_id          = ovirt_vm.vm.id
  disk_interface = "{iface}"
  bootable       = false
  active         = true
  # After the boot disk is read: the VM's only disk then (Deckhouse's layouts order
  # it so too, `depends_on` at @04ede46 and @89d8287).
  depends_on = [ovirt_disk_resize.boot]
}}
"#,
            size = 10 * GIB,
            domain = ids["domain"],
            iface = release.etcd_interface,
        )
    } else {
        String::new()
    };
    let hcl = format!(
        r##"
terraform {{
  required_providers {{
    ovirt = {{ source = "terraform-provider-ovirt/ovirt" }}
  }}
}}
provider "ovirt" {{
  url          = "{url}"
  username     = "{user}"
  password     = "{password}"
  tls_insecure = true
}}
data "ovirt_templates" "t" {{
  name          = "ubuntu-2204"
  fail_on_empty = true
}}
resource "ovirt_vm" "vm" {{
  name                         = "{name}"
  cluster_id                   = "{cluster}"
  template_id                  = tolist(data.ovirt_templates.t.templates)[0].id
  clone                        = true
  cpu_sockets                  = {sockets}
  cpu_cores                    = {cores}
  cpu_threads                  = {threads}
  memory                       = {memory}
  maximum_memory               = {memory}
  memory_ballooning            = false
  vm_type                      = "high_performance"
  initialization_custom_script = "#cloud-config\nhostname: {name}\n"
}}
data "ovirt_disk_attachments" "boot" {{
  vm_id = ovirt_vm.vm.id
}}
resource "ovirt_disk_resize" "boot" {{
  disk_id = tolist(data.ovirt_disk_attachments.boot.attachments)[0].disk_id
  size    = {root}
}}
resource "ovirt_nic" "nic" {{
  name            = "nic1"
  vm_id           = ovirt_vm.vm.id
  vnic_profile_id = "{profile}"
}}
{etcd}
resource "ovirt_vm_start" "start" {{
  vm_id      = ovirt_vm.vm.id
  force_stop = true
{stop}  depends_on = [ovirt_nic.nic, ovirt_disk_resize.boot{etcd_dep}]
}}
"##,
        user = zvirt_sim::USER,
        password = zvirt_sim::PASSWORD,
        cluster = zvirt_sim::CLUSTER_ID,
        root = 40 * GIB,
        profile = ids["profile"],
        etcd_dep = if role.master {
            ", ovirt_disk_attachment.etcd"
        } else {
            ""
        },
    );
    let ws = Workspace::new(
        bin,
        root,
        &format!("deckhouse-{}", role.layout),
        ("terraform-provider-ovirt", "ovirt"),
        &[("main.tf", &hcl)],
    );
    tf(|| ws.init());
    tf(|| {
        ws.run(&["apply", "-input=false", "-no-color", "-auto-approve"])
            .ok()
    });
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.dir.join("terraform.tfstate")).unwrap())
            .unwrap();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let mut out = BTreeMap::from([
        ("vm", text(&attributes(&state, "ovirt_vm", "vm")["id"])),
        (
            "boot",
            text(&attributes(&state, "ovirt_disk_resize", "boot")["disk_id"]),
        ),
        ("nic", text(&attributes(&state, "ovirt_nic", "nic")["id"])),
    ]);
    if role.master {
        out.insert(
            "disk",
            text(&attributes(&state, "ovirt_disk", "etcd")["id"]),
        );
    }
    out
}

/// The state `release` leaves for `role` over the engine's objects `made`, as the oVirt
/// provider writes it: every attribute of its schema (2.1.5's, or Deckhouse's 2.2.0
/// build's), what the configuration gave, and what its Read functions store from the
/// engine (`comment`, `status`, `effective_template_id`, `os_type` unless "other", the
/// placement policy it reports; a disk's size, status and total size). Schema version 0
/// everywhere (SDKv2's private data says so).
fn deckhouse_state(
    engine: &Engine,
    ids: &BTreeMap<&str, String>,
    made: &BTreeMap<&str, String>,
    release: &Release,
    role: Role,
) -> Value {
    let provider = format!("provider[\"{}\"]", release.provider);
    let managed = |ty: &str, name: String, attributes: Value, deps: Vec<String>| {
        json!({"mode": "managed", "type": ty, "name": name, "provider": provider,
            "instances": [{"schema_version": 0, "attributes": attributes, "sensitive_attributes": [],
                "private": "eyJzY2hlbWFfdmVyc2lvbiI6IjAifQ==", "dependencies": deps}]})
    };
    let data = |ty: &str, name: String, attributes: Value| {
        json!({"mode": "data", "type": ty, "name": name, "provider": provider,
            "instances": [{"schema_version": 0, "attributes": attributes, "sensitive_attributes": []}]})
    };
    let w = role.word;
    let vm_addr = format!("ovirt_vm.{w}_vm");
    let vm = engine.vm_by_name(role.vm_name).expect("Deckhouse's VM");
    let (sockets, cores, threads) = if role.master {
        (release.master_cpu)(CPUS)
    } else {
        (release.node_cpu)(CPUS)
    };
    let memory = 8192u64 << 20;
    let os = vm["os"]["type"].as_str().filter(|t| *t != "other");
    let placement = &vm["placement_policy"];
    let hosts: Vec<Value> = placement["hosts"]["host"]
        .as_array()
        .map(|h| h.iter().map(|h| h["id"].clone()).collect())
        .unwrap_or_default();
    let mut vm_attrs = json!({
        "id": made["vm"], "name": role.vm_name, "comment": vm["comment"].as_str().unwrap_or(""),
        "cluster_id": zvirt_sim::CLUSTER_ID, "template_id": ids["template"],
        "effective_template_id": vm["template"]["id"], "status": vm["status"],
        "cpu_mode": null, "cpu_cores": cores, "cpu_threads": threads, "cpu_sockets": sockets,
        "os_type": os, "vm_type": "high_performance",
        "placement_policy_affinity": placement["affinity"],
        "placement_policy_host_ids": if placement["affinity"].is_null() { Value::Null } else { json!(hosts) },
        "template_disk_attachment_override": [],
        // The release's bootstrap (read once at first boot; both releases ignore it later).
        "initialization_custom_script": format!("#cloud-config\nhostname: {}\n", role.vm_name),
        "initialization_hostname": null,
        "memory": memory, "maximum_memory": memory, "memory_ballooning": false,
        "serial_console": null, "soundcard_enabled": null, "instance_type_id": null,
        "clone": true, "huge_pages": null,
    });
    if release.provider_2_2 {
        vm_attrs["initialization_nic"] = json!([]);
        vm_attrs["initialization_dns"] = json!("");
    }
    let boot = engine
        .disks()
        .into_iter()
        .find(|(id, ..)| *id == made["boot"])
        .expect("the boot disk");
    let start_deps: Vec<String> = [
        Some(format!("ovirt_disk_resize.{w}_boot_disk_resize")),
        Some(format!("ovirt_nic.{w}_vm_nic")),
        role.master
            .then(|| "ovirt_disk.master-kubernetes-data".to_owned()),
        role.master
            .then(|| "ovirt_disk_attachment.master-kubernetes-data-attachment".to_owned()),
        Some(vm_addr.clone()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut resources = vec![
        data(
            "ovirt_templates",
            format!("{w}_template"),
            json!({
                "id": "ubuntu-2204", "name": "ubuntu-2204", "fail_on_empty": true,
                "templates": [{"id": ids["template"], "description": ""}],
            }),
        ),
        data(
            "ovirt_disk_attachments",
            format!("{w}-vm-boot-disk-attachment"),
            json!({
                "id": made["vm"], "vm_id": made["vm"],
                "attachments": [{"id": made["boot"], "disk_id": made["boot"], "disk_interface": "virtio_scsi"}],
            }),
        ),
        managed(
            "ovirt_vm",
            format!("{w}_vm"),
            vm_attrs,
            vec![format!("data.ovirt_templates.{w}_template")],
        ),
        managed(
            "ovirt_disk_resize",
            format!("{w}_boot_disk_resize"),
            json!({
                "id": made["boot"], "disk_id": made["boot"], "size": boot.2,
            }),
            vec![
                format!("data.ovirt_disk_attachments.{w}-vm-boot-disk-attachment"),
                vm_addr.clone(),
            ],
        ),
        managed(
            "ovirt_nic",
            format!("{w}_vm_nic"),
            json!({
                "id": made["nic"], "name": "nic1", "vm_id": made["vm"], "vnic_profile_id": ids["profile"],
            }),
            vec![vm_addr.clone()],
        ),
        managed(
            "ovirt_vm_start",
            format!("{w}_vm"),
            json!({
                "id": made["vm"], "vm_id": made["vm"], "status": "up",
                "stop_behavior": release.stop_behavior.unwrap_or("shutdown"), "force_stop": true,
            }),
            start_deps,
        ),
    ];
    let mut outputs = json!({});
    if role.master {
        let disk = engine
            .disks()
            .into_iter()
            .find(|(id, ..)| *id == made["disk"])
            .expect("the etcd disk");
        resources.push(data("ovirt_wait_for_ip", "master_vm".into(), json!({
            "id": made["vm"], "vm_id": made["vm"],
            "interfaces": [{"name": "eth0", "ipv4_addresses": ["10.1.0.5"], "ipv6_addresses": []}],
        })));
        resources.push(managed(
            "ovirt_disk",
            "master-kubernetes-data".into(),
            json!({
                "id": made["disk"], "storage_domain_id": ids["domain"], "format": "raw",
                "alias": disk.1, "sparse": false, "total_size": 0, "status": "ok", "size": disk.2,
            }),
            vec![],
        ));
        resources.push(managed(
            "ovirt_disk_attachment",
            "master-kubernetes-data-attachment".into(),
            json!({
                "id": made["disk"], "vm_id": made["vm"], "disk_id": made["disk"],
                "disk_interface": release.etcd_interface, "bootable": false, "active": true,
            }),
            vec!["ovirt_disk.master-kubernetes-data".into(), vm_addr.clone()],
        ));
        outputs = json!({
            "kubernetes_data_device_path": {"value": "/dev/sdb", "type": "string"},
            "master_ip_address_for_ssh": {"value": "10.1.0.5", "type": "string"},
            "node_internal_ip_address": {"value": "10.1.0.5", "type": "string"},
        });
    }
    json!({
        "version": 4, "terraform_version": release.terraform_version, "serial": 9,
        "lineage": "0b7e1f55-6f3c-4c2e-9a51-3f1d2c7b8a90", "outputs": outputs, "resources": resources,
    })
}

/// `terraform-provider-overcast migrate-state < state`: (the migrated state, stderr).
fn migrate_state(state: &Value) -> (Value, String) {
    let mut child = Command::new(overcast_integration::binary("terraform-provider-overcast"))
        .arg("migrate-state")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("migrate-state");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(state.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "migrate-state failed: {stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

/// The engine's calls other than reads since `before`.
fn writes_since(engine: &Engine, before: &BTreeMap<String, u64>) -> Vec<(String, u64)> {
    engine
        .calls()
        .into_iter()
        .filter(|(k, n)| !k.starts_with("GET") && before.get(k) != Some(n))
        .collect()
}

fn plan_says(run: &Run, what: &str) -> bool {
    run.stdout.contains(what)
}

/// `role` of `release` taken over as an operator would.
#[allow(clippy::too_many_arguments)]
fn take_over(
    bin: &Path,
    newer: Option<&Path>,
    root: &Path,
    engine: &Engine,
    url: &str,
    ids: &BTreeMap<&str, String>,
    release: &Release,
    role: Role,
) {
    let what = format!("{} {}", release.label, role.layout);
    let made = made_as_deckhouse(bin, root, url, ids, release, role);
    let layouts = terraform::copy_layouts("zvirt", root);
    let ours = Workspace::module(
        bin,
        root,
        layouts.join("layouts/standard").join(role.layout),
        ("terraform-provider-ovirt", "ovirt"),
    );
    let vars = |root_gb: u64| {
        let mut v = var_file(url, &ids["profile"], &ids["domain"], 0, role.group);
        v["providerClusterConfiguration"]["masterNodeGroup"]["instanceClass"]["rootDiskSizeGb"] =
            json!(root_gb);
        v["providerClusterConfiguration"]["nodeGroups"][0]["instanceClass"]["rootDiskSizeGb"] =
            json!(root_gb);
        let f = root.join(format!("vars-{}-{root_gb}.json", role.layout));
        std::fs::write(&f, v.to_string()).unwrap();
        format!("-var-file={}", f.display())
    };
    let v = vars(40);
    let before = engine.calls();

    // The switch: their state, migrated.
    let theirs = deckhouse_state(engine, ids, &made, release, role);
    let (migrated, said) = migrate_state(&theirs);
    let provider = |s: &Value| s["resources"][0]["provider"].clone();
    if release.provider.starts_with("registry.terraform.io/ovirt/") {
        assert_eq!(
            provider(&migrated),
            format!("provider[\"{OURS}\"]"),
            "{what}"
        );
        assert!(said.contains("moved"), "{what}: {said}");
    } else {
        assert_eq!(
            migrated, theirs,
            "{what}: a state on our address is left as it is"
        );
    }
    std::fs::write(ours.dir.join("terraform.tfstate"), migrated.to_string()).unwrap();
    if release.provider.starts_with("registry.opentofu.org/") {
        // OpenTofu's registry (dhctl ran OpenTofu): planned with Terraform here (no
        // OpenTofu can be installed on this machine), so the state moves to Terraform's
        // as a user switching tools does it.
        ours.install_under(
            "registry.opentofu.org",
            ("terraform-provider-ovirt", "ovirt"),
        );
        tf(|| ours.init());
        tf(|| {
            ours.run(&[
                "state",
                "replace-provider",
                "-auto-approve",
                release.provider,
                OURS,
            ])
            .ok()
        });
    } else {
        tf(|| ours.init());
    }

    // The first plan, with each Terraform: no change.
    let plan = tf(|| ours.plan(&[&v]));
    expect(
        &plan,
        0,
        &format!("{what}: the first plan (Terraform 1.0.3)"),
    );
    if let Some(newer) = newer {
        let with_newer = ours.using(newer);
        tf(|| with_newer.init());
        let plan = tf(|| with_newer.plan(&[&v]));
        expect(
            &plan,
            0,
            &format!("{what}: the first plan ({})", newer.display()),
        );
    }
    if release.module_config {
        // The cluster moved to the ModuleConfig: dhctl passes the objects instead.
        let f = root.join(format!("vars-{}-objects.json", role.layout));
        let v = var_file(url, &ids["profile"], &ids["domain"], 0, role.group);
        std::fs::write(&f, super::as_objects(v).to_string()).unwrap();
        let plan = tf(|| ours.plan(&[&format!("-var-file={}", f.display())]));
        expect(
            &plan,
            0,
            &format!("{what}: the first plan from the ModuleConfig's objects"),
        );
        // And they are what is read: the class's memory doubled there is a change.
        let mut objects = super::as_objects(var_file(
            url,
            &ids["profile"],
            &ids["domain"],
            0,
            role.group,
        ));
        for class in ["master-class", "worker-class"] {
            objects["instanceClasses"][class]["spec"]["memory"] = json!(16384);
        }
        std::fs::write(&f, objects.to_string()).unwrap();
        let plan = tf(|| ours.plan(&[&format!("-var-file={}", f.display())]));
        expect(&plan, 2, &format!("{what}: a bigger class in the objects"));
        assert!(plan_says(&plan, "memory"), "{what}: {}", plan.stdout);
    }
    let writes = writes_since(engine, &before);
    assert!(
        writes.is_empty(),
        "{what}: the plans wrote to the engine: {writes:?}"
    );

    // apply: nothing happens.
    let applied = tf(|| {
        ours.run(&["apply", "-input=false", "-no-color", "-auto-approve", &v])
            .ok()
    });
    assert!(
        plan_says(&applied, "0 added, 0 changed, 0 destroyed"),
        "{what}: {}",
        applied.stdout
    );
    let writes = writes_since(engine, &before);
    assert!(
        writes.is_empty(),
        "{what}: the apply wrote to the engine: {writes:?}"
    );

    // A real change: a bigger root disk grows in place, the VM kept.
    let bigger = vars(50);
    let plan = tf(|| ours.plan(&[&bigger]));
    expect(&plan, 2, &format!("{what}: the plan of a bigger disk"));
    assert!(
        plan_says(&plan, "0 to add, 1 to change, 0 to destroy"),
        "{what}: {}",
        plan.stdout
    );
    tf(|| {
        ours.run(&[
            "apply",
            "-input=false",
            "-no-color",
            "-auto-approve",
            &bigger,
        ])
        .ok()
    });
    let boot = engine
        .disks()
        .into_iter()
        .find(|(id, ..)| *id == made["boot"])
        .expect("the boot disk");
    assert_eq!(boot.2, 50 * GIB, "{what}: the boot disk was not grown");
    let vm = engine.vm_by_name(role.vm_name).expect("the VM");
    assert_eq!(vm["id"], made["vm"], "{what}: the VM was replaced");
    let (sockets, cores, _) = if role.master {
        (release.master_cpu)(CPUS)
    } else {
        (release.node_cpu)(CPUS)
    };
    assert_eq!(
        vm["cpu"]["topology"]["sockets"],
        sockets.to_string(),
        "{what}: the topology changed"
    );
    assert_eq!(vm["cpu"]["topology"]["cores"], cores.to_string(), "{what}");
    expect(
        &tf(|| ours.plan(&[&bigger])),
        0,
        &format!("{what}: after the resize"),
    );

    // Taken over whole: destroy removes what Deckhouse made.
    tf(|| {
        ours.run(&[
            "destroy",
            "-input=false",
            "-no-color",
            "-auto-approve",
            &bigger,
        ])
        .ok()
    });
    engine.finish_removals();
    assert!(
        engine.vm_by_name(role.vm_name).is_none(),
        "{what}: destroy left the VM"
    );
}

/// Every supported release's master and static node: the first plan after the switch
/// changes nothing, on Terraform 1.0.3 and a newer Terraform.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_deckhouse_releases_nodes_plan_no_change_after_the_switch() {
    let Some(bin) = terraform::binary("the zVirt layouts takeover test") else {
        return;
    };
    let newer = terraform::newer("the zVirt layouts takeover test", &bin);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (by_id, files) = (root.join("by-id"), root.join("disks"));
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    let engine = Engine::new(&files, &by_id, 400 * GIB, Latency::default());
    let url = engine.start().await;
    // Its loop devices go however the test ends.
    let _unplug = engine.unplug_on_drop();
    let ids = BTreeMap::from([
        ("template", engine.add_template("ubuntu-2204", 10 * GIB)),
        ("profile", engine.add_vnic_profile("ovirtmgmt")),
        ("domain", engine.storage_domain_id("data")),
    ]);
    engine.set_guest_ips_on_boot(MASTER.vm_name, &["10.1.0.5"]);
    engine.set_guest_ips_on_boot(NODE.vm_name, &["10.1.0.6"]);
    for release in [&RELEASE_2024, &RELEASE_NEWEST] {
        for role in [MASTER, NODE] {
            let at = root.join(format!("{}-{}", release.terraform_version, role.layout));
            std::fs::create_dir_all(&at).unwrap();
            take_over(
                &bin,
                newer.as_deref(),
                &at,
                &engine,
                &url,
                &ids,
                release,
                role,
            );
        }
    }
}
