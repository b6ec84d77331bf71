//! `deploy/terraform/zvirt/layouts/standard` run as dhctl runs it, with the real
//! Terraform and `terraform-provider-overcast` as the `ovirt` provider, against the zVirt
//! engine simulator: base-infrastructure's discovery data; the master-node module's
//! `init -plugin-dir`, `plan -detailed-exitcode` (2), `apply` of the plan, `output -json`
//! (the engine's address, `/dev/sdb`), a second plan with no change, the VM deleted out
//! of band planned again, `destroy` leaving nothing in the engine; a static node of a
//! NodeGroup. And the takeover: a master's state as dhctl wrote it with the upstream
//! terraform-provider-ovirt (2.1.5 and 2.2.x shapes, Deckhouse's addresses) plans no
//! change and destroys whole. Needs Terraform (`OVERCAST_TERRAFORM` or on the PATH); said
//! skipped without.

use std::time::Duration;

use base64::Engine as _;
use overcast_integration::terraform::{self, expect, tf, Workspace};
use overcast_integration::zvirt_sim::{self, Engine, Latency};
use serde_json::json;

const GIB: u64 = 1 << 30;

/// What dhctl writes to its `-var-file` for the node `index` (of `group`, when not a
/// master).
fn var_file(url: &str, profile: &str, domain: &str, index: u32, group: &str) -> serde_json::Value {
    let instance_class = json!({
        "numCPUs": 4, "memory": 8192, "rootDiskSizeGb": 40, "etcdDiskSizeGb": 10,
        "template": "ubuntu-2204", "vnicProfileID": profile, "storageDomainID": domain,
    });
    let cloud_config =
        base64::engine::general_purpose::STANDARD.encode("runcmd:\n- echo bootstrap\n");
    json!({
        "clusterConfiguration": {
            "apiVersion": "deckhouse.io/v1", "kind": "ClusterConfiguration",
            "clusterType": "Cloud", "cloud": {"provider": "Zvirt", "prefix": "tf"},
            "podSubnetCIDR": "10.111.0.0/16", "serviceSubnetCIDR": "10.222.0.0/16",
            "kubernetesVersion": "Automatic",
        },
        "providerClusterConfiguration": {
            "apiVersion": "deckhouse.io/v1", "kind": "ZvirtClusterConfiguration",
            "layout": "Standard", "sshPublicKey": "ssh-ed25519 AAAA test",
            "clusterID": zvirt_sim::CLUSTER_ID,
            "provider": {"server": url, "username": zvirt_sim::USER,
                         "password": zvirt_sim::PASSWORD, "insecure": true},
            "masterNodeGroup": {"replicas": 1, "instanceClass": instance_class},
            "nodeGroups": [{"name": "worker", "replicas": 1, "instanceClass": instance_class}],
        },
        "clusterUUID": "5c4e1a7e-1111-4222-8333-944444444444",
        "nodeIndex": index,
        "nodeGroupName": group,
        "cloudConfig": cloud_config,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standard_layout_makes_a_master_and_a_node_as_dhctl_runs_it() {
    let Some(bin) = terraform::binary("the zVirt layouts test") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (by_id, files) = (root.join("by-id"), root.join("disks"));
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    let engine = Engine::new(
        &files,
        &by_id,
        200 * GIB,
        Latency {
            clone: Duration::from_millis(800),
            ..Latency::default()
        },
    );
    let url = engine.start().await;
    // Its loop devices go however the test ends.
    let _unplug = engine.unplug_on_drop();
    engine.add_template("ubuntu-2204", 10 * GIB);
    let profile = engine.add_vnic_profile("ovirtmgmt");
    let domain = engine.storage_domain_id("data");
    engine.set_guest_ips_on_boot("tf-master-0", &["127.0.0.1", "fe80::1", "10.1.0.5"]);
    engine.set_guest_ips_on_boot("tf-worker-0", &["10.1.0.6"]);
    let layouts = terraform::copy_layouts("zvirt", root);
    let standard = layouts.join("layouts/standard");
    let vars = |index, group| {
        let f = root.join(format!("vars-{group}-{index}.json"));
        std::fs::write(
            &f,
            var_file(&url, &profile, &domain, index, group).to_string(),
        )
        .unwrap();
        format!("-var-file={}", f.display())
    };

    // base-infrastructure: nothing made, the discovery data.
    let base = Workspace::module(
        &bin,
        root,
        standard.join("base-infrastructure"),
        ("terraform-provider-ovirt", "ovirt"),
    );
    let v = vars(0, "master");
    tf(|| base.init());
    tf(|| {
        base.run(&["apply", "-input=false", "-no-color", "-auto-approve", &v])
            .ok()
    });
    let out = tf(|| base.outputs());
    assert_eq!(
        out["cloud_discovery_data"]["value"]["kind"],
        "ZvirtCloudProviderDiscoveryData"
    );
    assert_eq!(
        out["cloud_discovery_data"]["value"]["zones"],
        json!(["default"])
    );
    assert_eq!(
        engine.total_calls(),
        0,
        "base-infrastructure called the engine"
    );

    // master-node, dhctl's sequence.
    let master = Workspace::module(
        &bin,
        root,
        standard.join("master-node"),
        ("terraform-provider-ovirt", "ovirt"),
    );
    tf(|| master.init());
    let plan = tf(|| master.plan(&[&v, "-out=tfplan"]));
    expect(&plan, 2, "the master's first plan");
    tf(|| {
        master
            .run(&["apply", "-input=false", "-no-color", "tfplan"])
            .ok()
    });
    let out = tf(|| master.outputs());
    assert_eq!(
        out["master_ip_address_for_ssh"]["value"], "10.1.0.5",
        "{out}"
    );
    assert_eq!(out["node_internal_ip_address"]["value"], "10.1.0.5");
    assert_eq!(out["kubernetes_data_device_path"]["value"], "/dev/sdb");
    let shape = engine.vm_by_name("tf-master-0").expect("the master VM");
    assert_eq!(shape["status"], "up", "{shape}");
    assert_eq!(
        shape["cpu"]["topology"],
        json!({"sockets": "1", "cores": "4", "threads": "1"}),
        "{shape}"
    );
    assert_eq!(shape["memory"], (8192u64 << 20).to_string(), "{shape}");
    assert!(
        shape["initialization"]["custom_script"]
            .as_str()
            .is_some_and(|s| s.starts_with("#cloud-config\n")
                && s.contains("echo bootstrap")
                && s.contains("\"hostname\": \"tf-master-0\"")),
        "the bootstrap is not the VM's: {shape}"
    );
    let disks = engine.disks();
    assert!(
        disks
            .iter()
            .any(|(_, alias, size)| alias == "tf-master-0-kubernetes-data" && *size == 10 * GIB),
        "no etcd disk: {disks:?}"
    );
    assert!(
        disks.iter().any(|(_, _, size)| *size == 40 * GIB),
        "the boot disk was not grown to 40 GiB: {disks:?}"
    );
    expect(&tf(|| master.plan(&[&v])), 0, "the master's second plan");

    // The VM deleted behind Terraform's back: the next plan makes it again.
    // (As an admin removing it without its disks: the boot disk is left behind, outside
    // what Terraform holds.)
    let vm = shape["id"].as_str().unwrap().to_owned();
    engine.remove_vm(&vm);
    let left_behind: Vec<_> = engine
        .disks()
        .into_iter()
        .filter(|(_, alias, _)| alias == "tf-master-0_Disk1")
        .collect();
    assert_eq!(left_behind.len(), 1);
    let replan = tf(|| master.plan(&[&v]));
    expect(
        &replan,
        2,
        "the plan after the master was deleted out of band",
    );
    assert!(
        replan.stdout.contains("ovirt_vm.master_vm will be created"),
        "{}",
        replan.stdout
    );
    // A re-run converges: a new VM, the etcd disk (kept) attached to it again.
    tf(|| {
        master
            .run(&["apply", "-input=false", "-no-color", "-auto-approve", &v])
            .ok()
    });
    let again = engine
        .vm_by_name("tf-master-0")
        .expect("the master made again");
    assert_ne!(again["id"], shape["id"]);
    assert_eq!(
        tf(|| master.outputs())["master_ip_address_for_ssh"]["value"],
        "10.1.0.5"
    );
    expect(&tf(|| master.plan(&[&v])), 0, "the plan after the re-run");

    // A static node of the group `worker`.
    let node = Workspace::module(
        &bin,
        root,
        standard.join("static-node"),
        ("terraform-provider-ovirt", "ovirt"),
    );
    let nv = vars(0, "worker");
    tf(|| node.init());
    tf(|| {
        node.run(&["apply", "-input=false", "-no-color", "-auto-approve", &nv])
            .ok()
    });
    let worker = engine.vm_by_name("tf-worker-0").expect("the node's VM");
    assert_eq!(worker["status"], "up", "{worker}");
    assert_eq!(
        tf(|| node.outputs()),
        json!({}),
        "Deckhouse's static node has no outputs"
    );

    // destroy leaves nothing in the engine.
    tf(|| {
        node.run(&["destroy", "-input=false", "-no-color", "-auto-approve", &nv])
            .ok()
    });
    tf(|| {
        master
            .run(&["destroy", "-input=false", "-no-color", "-auto-approve", &v])
            .ok()
    });
    engine.finish_removals();
    assert_eq!(engine.vm_count(), 0, "destroy left a VM");
    assert_eq!(
        engine.disks(),
        left_behind,
        "destroy left a disk of its own"
    );
}

/// The attributes of the managed resource `ty.name` in a state document.
fn attributes<'a>(state: &'a serde_json::Value, ty: &str, name: &str) -> &'a serde_json::Value {
    state["resources"]
        .as_array()
        .and_then(|all| {
            all.iter()
                .find(|r| r["type"] == ty && r["name"] == name && r["mode"] == "managed")
        })
        .map(|r| &r["instances"][0]["attributes"])
        .unwrap_or_else(|| panic!("{ty}.{name} not in the state"))
}

const UPSTREAM: &str = r#"provider["registry.terraform.io/terraform-provider-ovirt/ovirt"]"#;

/// A managed resource's instance as upstream's SDKv2 provider stores it.
fn managed(
    ty: &str,
    name: &str,
    attributes: serde_json::Value,
    deps: &[&str],
) -> serde_json::Value {
    json!({
        "mode": "managed", "type": ty, "name": name, "provider": UPSTREAM,
        "instances": [{
            "schema_version": 0, "attributes": attributes, "sensitive_attributes": [],
            // SDKv2's private data: the schema version.
            "private": "eyJzY2hlbWFfdmVyc2lvbiI6IjAifQ==",
            "dependencies": deps,
        }],
    })
}

fn data(ty: &str, name: &str, attributes: serde_json::Value) -> serde_json::Value {
    json!({
        "mode": "data", "type": ty, "name": name, "provider": UPSTREAM,
        "instances": [{"schema_version": 0, "attributes": attributes, "sensitive_attributes": []}],
    })
}

/// `ovirt_vm`'s attributes as upstream's schema and Read leave them for the VM `name` of
/// Deckhouse's layout (4 cores in one socket, 8 GiB): the engine's `comment` "", the
/// blank template as the effective one (cloned), the engine's OS type; every unset
/// attribute null, the unset set empty. `v2_2`: 2.2.x's `initialization_nic` (empty) and
/// the fork's `initialization_dns` ("", what the layout gives without a custom network).
fn vm_attributes(ids: &serde_json::Value, name: &str, v2_2: bool) -> serde_json::Value {
    let memory = 8192u64 << 20;
    let mut vm = json!({
        "id": ids["vm"], "name": name, "comment": "", "cluster_id": zvirt_sim::CLUSTER_ID,
        "template_id": ids["template"], "effective_template_id": "00000000-0000-0000-0000-000000000000",
        "status": "up", "cpu_mode": null, "cpu_cores": 4, "cpu_threads": 1, "cpu_sockets": 1,
        "os_type": "other_linux", "vm_type": "high_performance",
        "placement_policy_affinity": null, "placement_policy_host_ids": null,
        "template_disk_attachment_override": [],
        "initialization_custom_script": format!("#cloud-config\nhostname: {name}\n"),
        "initialization_hostname": null,
        "memory": memory, "maximum_memory": memory, "memory_ballooning": false,
        "serial_console": null, "soundcard_enabled": null, "instance_type_id": null,
        "clone": true, "huge_pages": null,
    });
    if v2_2 {
        vm["initialization_nic"] = json!([]);
        vm["initialization_dns"] = json!("");
    }
    vm
}

/// The state dhctl leaves for a master of Deckhouse's zVirt layout, written as the
/// upstream terraform-provider-ovirt writes it (its schema, every attribute, version 0;
/// what its Read functions put there: the attachment's id the disk's, the start's id the
/// VM's), naming the engine objects `ids` holds. `v2_2`: the provider 2.2.x of Deckhouse
/// ≥ 1.75 (see [`vm_attributes`]; the etcd disk on `virtio`, as since 1.72); else 2.1.5
/// (`virtio_scsi`).
fn upstream_state(ids: &serde_json::Value, v2_2: bool) -> serde_json::Value {
    let (vm, boot, nic, disk) = (&ids["vm"], &ids["boot"], &ids["nic"], &ids["disk"]);
    let interface = if v2_2 { "virtio" } else { "virtio_scsi" };
    json!({
        "version": 4, "terraform_version": "0.14.8", "serial": 9,
        "lineage": "0b7e1f55-6f3c-4c2e-9a51-3f1d2c7b8a90",
        "outputs": {
            "kubernetes_data_device_path": {"value": "/dev/sdb", "type": "string"},
            "master_ip_address_for_ssh": {"value": "10.1.0.5", "type": "string"},
            "node_internal_ip_address": {"value": "10.1.0.5", "type": "string"},
        },
        "resources": [
            data("ovirt_templates", "master_template", json!({
                "id": "ubuntu-2204", "name": "ubuntu-2204", "fail_on_empty": true,
                "templates": [{"id": ids["template"], "description": ""}],
            })),
            data("ovirt_disk_attachments", "master-vm-boot-disk-attachment", json!({
                "id": vm, "vm_id": vm,
                "attachments": [{"id": boot, "disk_id": boot, "disk_interface": "virtio_scsi"}],
            })),
            data("ovirt_wait_for_ip", "master_vm", json!({
                "id": vm, "vm_id": vm,
                "interfaces": [{"name": "eth0", "ipv4_addresses": ["10.1.0.5"], "ipv6_addresses": []}],
            })),
            managed("ovirt_vm", "master_vm", vm_attributes(ids, "tf-master-0", v2_2), &["data.ovirt_templates.master_template"]),
            managed("ovirt_disk_resize", "master_boot_disk_resize", json!({
                "id": boot, "disk_id": boot, "size": 40 * GIB,
            }), &["data.ovirt_disk_attachments.master-vm-boot-disk-attachment", "ovirt_vm.master_vm"]),
            managed("ovirt_nic", "master_vm_nic", json!({
                "id": nic, "name": "nic1", "vm_id": vm, "vnic_profile_id": ids["profile"],
            }), &["ovirt_vm.master_vm"]),
            managed("ovirt_disk", "master-kubernetes-data", json!({
                "id": disk, "storage_domain_id": ids["domain"], "format": "raw",
                "alias": "tf-master-0-kubernetes-data", "sparse": false,
                "total_size": 0, "status": "ok", "size": 10 * GIB,
            }), &[]),
            managed("ovirt_disk_attachment", "master-kubernetes-data-attachment", json!({
                "id": disk, "vm_id": vm, "disk_id": disk, "disk_interface": interface,
                "bootable": false, "active": true,
            }), &["ovirt_disk.master-kubernetes-data", "ovirt_vm.master_vm"]),
            managed("ovirt_vm_start", "master_vm", json!({
                "id": vm, "vm_id": vm, "status": "up", "stop_behavior": "shutdown", "force_stop": true,
            }), &["ovirt_disk.master-kubernetes-data", "ovirt_disk_attachment.master-kubernetes-data-attachment",
                  "ovirt_disk_resize.master_boot_disk_resize", "ovirt_nic.master_vm_nic", "ovirt_vm.master_vm"]),
        ],
    })
}

/// The same for a static node (`tf-worker-0`): Deckhouse's static-node step has no data
/// disk, no address wait and no outputs.
fn upstream_node_state(ids: &serde_json::Value, v2_2: bool) -> serde_json::Value {
    let (vm, boot, nic) = (&ids["vm"], &ids["boot"], &ids["nic"]);
    json!({
        "version": 4, "terraform_version": "0.14.8", "serial": 4,
        "lineage": "5d1c0b7e-2a9f-4f0e-8e3b-6c7d8e9f0a1b",
        "outputs": {},
        "resources": [
            data("ovirt_templates", "node_template", json!({
                "id": "ubuntu-2204", "name": "ubuntu-2204", "fail_on_empty": true,
                "templates": [{"id": ids["template"], "description": ""}],
            })),
            data("ovirt_disk_attachments", "node-vm-boot-disk-attachment", json!({
                "id": vm, "vm_id": vm,
                "attachments": [{"id": boot, "disk_id": boot, "disk_interface": "virtio_scsi"}],
            })),
            managed("ovirt_vm", "node_vm", vm_attributes(ids, "tf-worker-0", v2_2), &["data.ovirt_templates.node_template"]),
            managed("ovirt_disk_resize", "node_boot_disk_resize", json!({
                "id": boot, "disk_id": boot, "size": 40 * GIB,
            }), &["data.ovirt_disk_attachments.node-vm-boot-disk-attachment", "ovirt_vm.node_vm"]),
            managed("ovirt_nic", "node_vm_nic", json!({
                "id": nic, "name": "nic1", "vm_id": vm, "vnic_profile_id": ids["profile"],
            }), &["ovirt_vm.node_vm"]),
            managed("ovirt_vm_start", "node_vm", json!({
                "id": vm, "vm_id": vm, "status": "up", "stop_behavior": "shutdown", "force_stop": true,
            }), &["ovirt_disk_resize.node_boot_disk_resize", "ovirt_nic.node_vm_nic", "ovirt_vm.node_vm"]),
        ],
    })
}

/// A master and a static node dhctl made with Deckhouse's layout and the upstream
/// provider, taken over: their states (as upstream writes them, 2.1.5's and 2.2.x's)
/// under this layout and this provider plan no change — no VM, NIC or etcd disk re-made,
/// no engine write — and are destroyed whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_the_upstream_provider_made_plans_no_change() {
    let Some(bin) = terraform::binary("the zVirt layouts takeover test") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (by_id, files) = (root.join("by-id"), root.join("disks"));
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    let engine = Engine::new(&files, &by_id, 200 * GIB, Latency::default());
    let url = engine.start().await;
    // Its loop devices go however the test ends.
    let _unplug = engine.unplug_on_drop();
    let template = engine.add_template("ubuntu-2204", 10 * GIB);
    let profile = engine.add_vnic_profile("ovirtmgmt");
    let domain = engine.storage_domain_id("data");
    engine.set_guest_ips_on_boot("tf-master-0", &["10.1.0.5"]);
    engine.set_guest_ips_on_boot("tf-worker-0", &["10.1.0.6"]);
    let layouts = terraform::copy_layouts("zvirt", root);
    let master = Workspace::module(
        &bin,
        root,
        layouts.join("layouts/standard/master-node"),
        ("terraform-provider-ovirt", "ovirt"),
    );
    let node = Workspace::module(
        &bin,
        root,
        layouts.join("layouts/standard/static-node"),
        ("terraform-provider-ovirt", "ovirt"),
    );
    let vars = |group: &str| {
        let f = root.join(format!("vars-{group}.json"));
        std::fs::write(&f, var_file(&url, &profile, &domain, 0, group).to_string()).unwrap();
        format!("-var-file={}", f.display())
    };
    let (v, nv) = (vars("master"), vars("worker"));
    // The engine's objects: a master and a node as the layouts make them (the engine
    // cannot tell who asked); only the states below are upstream's.
    let mut taken = Vec::new();
    for (ws, var, vm, disk) in [
        (&master, &v, ("ovirt_vm", "master_vm"), true),
        (&node, &nv, ("ovirt_vm", "node_vm"), false),
    ] {
        tf(|| ws.init());
        tf(|| {
            ws.run(&["apply", "-input=false", "-no-color", "-auto-approve", var])
                .ok()
        });
        let state_file = ws.dir.join("terraform.tfstate");
        let ours: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
        let prefix = vm.1.trim_end_matches("_vm");
        let ids = json!({
            "vm": attributes(&ours, vm.0, vm.1)["id"],
            "template": template,
            "boot": attributes(&ours, "ovirt_disk_resize", &format!("{prefix}_boot_disk_resize"))["disk_id"],
            "nic": attributes(&ours, "ovirt_nic", &format!("{prefix}_vm_nic"))["id"],
            "disk": if disk { attributes(&ours, "ovirt_disk", "master-kubernetes-data")["id"].clone() } else { json!(null) },
            "profile": profile, "domain": domain,
        });
        taken.push((ws, var, state_file, ids, disk));
    }
    let calls = engine.calls();
    for (ws, var, state_file, ids, master_node) in &taken {
        for v2_2 in [false, true] {
            let state = if *master_node {
                upstream_state(ids, v2_2)
            } else {
                upstream_node_state(ids, v2_2)
            };
            std::fs::write(state_file, state.to_string()).unwrap();
            let _ = std::fs::remove_file(ws.dir.join("terraform.tfstate.backup"));
            let plan = tf(|| ws.plan(&[var.as_str()]));
            expect(
                &plan,
                0,
                &format!(
                    "the plan over upstream's {} state (provider {})",
                    if *master_node {
                        "master"
                    } else {
                        "static node"
                    },
                    if v2_2 { "2.2.x" } else { "2.1.5" }
                ),
            );
        }
    }
    let writes: Vec<_> = engine
        .calls()
        .into_iter()
        .filter(|(k, n)| !k.starts_with("GET") && calls.get(k) != Some(n))
        .collect();
    assert!(
        writes.is_empty(),
        "the plans wrote to the engine: {writes:?}"
    );
    // Taken over whole: destroy removes what upstream made.
    for (ws, var, ..) in &taken {
        tf(|| {
            ws.run(&["destroy", "-input=false", "-no-color", "-auto-approve", var])
                .ok()
        });
    }
    engine.finish_removals();
    assert_eq!(engine.vm_count(), 0, "destroy left the VM");
    assert!(
        engine
            .disks()
            .iter()
            .all(|(_, alias, _)| alias != "tf-master-0-kubernetes-data"),
        "destroy left the etcd disk"
    );
}
