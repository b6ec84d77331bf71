//! `deploy/terraform/zvirt/layouts/standard` run as dhctl runs it, with the real
//! Terraform and `terraform-provider-overcast` as the `ovirt` provider, against the zVirt
//! engine simulator: base-infrastructure's discovery data; the master-node module's
//! `init -plugin-dir`, `plan -detailed-exitcode` (2), `apply` of the plan, `output -json`
//! (the engine's address, `/dev/sdb`), a second plan with no change, the VM deleted out
//! of band planned again, `destroy` leaving nothing in the engine; a static node of a
//! NodeGroup. And the takeover ([`takeover`]): the nodes of each Deckhouse release
//! ([`deckhouse`]) plan no change after the switch. Needs Terraform (`OVERCAST_TERRAFORM`
//! or on the PATH); said skipped without.

mod deckhouse;
mod made;
mod takeover;
mod upgrade;

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

/// The same variables as dhctl passes them for a cluster whose cloud-provider-zvirt module
/// moved to a ModuleConfig (Deckhouse's `migration/locals.tf` @cf4bf01 reads these): the
/// ModuleConfig version 2, the NodeGroups and ZvirtInstanceClasses by name, the Secret
/// `d8-credentials`; no ZvirtClusterConfiguration.
fn as_objects(mut v: serde_json::Value) -> serde_json::Value {
    let pcc = v["providerClusterConfiguration"].take();
    let provider = &pcc["provider"];
    let group = |name: &str| {
        json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": name},
            "spec": {"nodeType": "CloudPermanent", "cloudInstances": {"minPerZone": 1, "maxPerZone": 1,
                "classReference": {"kind": "ZvirtInstanceClass", "name": format!("{name}-class")}}}})
    };
    let class = |name: &str, spec: &serde_json::Value| {
        json!({"apiVersion": "deckhouse.io/v1", "kind": "ZvirtInstanceClass",
            "metadata": {"name": format!("{name}-class")}, "spec": spec})
    };
    v["settings"] = json!({"apiVersion": "deckhouse.io/v1alpha1", "kind": "ModuleConfig",
        "metadata": {"name": "cloud-provider-zvirt"},
        "spec": {"enabled": true, "version": 2, "settings": {
            "provider": {"parameters": {"server": provider["server"], "clusterID": pcc["clusterID"],
                "insecure": provider["insecure"], "caBundle": ""}},
            "nodes": {"parameters": {"sshPublicKey": pcc["sshPublicKey"], "layout": "Standard"}}}}});
    v["nodeGroups"] = json!({"master": group("master"), "worker": group("worker")});
    v["instanceClasses"] = json!({
        "master-class": class("master", &pcc["masterNodeGroup"]["instanceClass"]),
        "worker-class": class("worker", &pcc["nodeGroups"][0]["instanceClass"]),
    });
    v["secrets"] = json!({"d8-credentials": {"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "d8-credentials", "namespace": "d8-cloud-provider-zvirt"},
        "type": "cloud-provider.deckhouse.io/credentials",
        "stringData": {"authScheme": "userPassword", "identity": provider["username"],
            "secret": provider["password"]}}});
    v
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
    // The worker's address is the static one its class gives (below): the guest reports
    // what cloud-init set.
    let layouts = terraform::copy_layouts("zvirt", root);
    let standard = layouts.join("layouts/standard");
    let vars = |index, group| {
        let f = root.join(format!("vars-{group}-{index}.json"));
        let mut v = var_file(&url, &profile, &domain, index, group);
        // The workers have static addresses (`customNetworkConfig`, as the
        // ZvirtClusterConfiguration spells it: the DNS servers one string).
        v["providerClusterConfiguration"]["nodeGroups"][0]["instanceClass"]
            ["customNetworkConfig"] = json!({
            "networkInterfaceName": "eth0", "networkInterfaceAddress": ["10.1.0.7", "10.1.0.8"],
            "networkInterfaceNetmask": "255.255.255.0", "networkInterfaceGateway": "10.1.0.1",
            "dnsServers": "10.1.0.53 10.1.0.54",
        });
        std::fs::write(&f, v.to_string()).unwrap();
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
    // Its static address, as the engine records the VM's initialization, and the guest
    // that booted with it.
    assert_eq!(
        worker["initialization"]["nic_configurations"]["nic_configuration"],
        json!([{"name": "eth0", "on_boot": "true", "boot_protocol": "static",
            "ip": {"address": "10.1.0.7", "netmask": "255.255.255.0", "gateway": "10.1.0.1"}}]),
        "{worker}"
    );
    assert_eq!(
        worker["initialization"]["dns_servers"], "10.1.0.53 10.1.0.54",
        "{worker}"
    );
    let reported = real_wait_for_ip(&engine, "tf-worker-0");
    assert_eq!(reported, ["10.1.0.7"], "the guest's address");
    expect(&tf(|| node.plan(&[&nv])), 0, "the node's second plan");
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

/// The addresses the guest of VM `name` reports, once it reports any (30 s at most).
fn real_wait_for_ip(engine: &Engine, name: &str) -> Vec<String> {
    let started = std::time::Instant::now();
    loop {
        let vm = engine.vm_by_name(name).expect("the VM");
        let ips: Vec<String> = vm["reported_devices"]["reported_device"][0]["ips"]["ip"]
            .as_array()
            .map(|ips| {
                ips.iter()
                    .filter_map(|ip| ip["address"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if !ips.is_empty() {
            return ips;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{name}'s guest reported no address: {vm}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
