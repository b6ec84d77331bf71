//! What each version of Deckhouse's zVirt layouts ([`super::deckhouse`]) leaves: the
//! cluster configuration of its time (the instance class's keys it read, a static address
//! where it gave one), the engine's objects as its files make them, and the Terraform state
//! the oVirt provider it ran writes over them — the "before" of the takeover tests, built
//! from the version's values alone, never from our layouts.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::deckhouse::{Kind, Network, Objects, Version};
use super::*;

pub(super) const CPUS: i64 = 4;
pub(super) const MEMORY_MIB: u64 = 8192;

/// The static addresses the test's instance classes give (a node takes the one at its
/// index), their netmask, gateway and DNS servers.
pub(super) const INTERFACE: &str = "eth0";
pub(super) const NETMASK: &str = "255.255.255.0";
pub(super) const GATEWAY: &str = "10.1.0.1";
pub(super) const DNS: [&str; 2] = ["10.1.0.53", "10.1.0.54"];

pub(super) fn addresses(kind: Kind) -> [&'static str; 2] {
    match kind {
        Kind::Master => ["10.1.0.5", "10.1.0.9"],
        Kind::Static => ["10.1.0.6", "10.1.0.10"],
    }
}

/// The attributes of the managed resource `ty.name` in a state document.
pub(super) fn attributes<'a>(state: &'a Value, ty: &str, name: &str) -> &'a Value {
    state["resources"]
        .as_array()
        .and_then(|all| {
            all.iter()
                .find(|r| r["type"] == ty && r["name"] == name && r["mode"] == "managed")
        })
        .map(|r| &r["instances"][0]["attributes"])
        .unwrap_or_else(|| panic!("{ty}.{name} not in the state"))
}

/// Deckhouse's resource names for a node: `master` or `node` (`ovirt_vm.master_vm`,
/// `ovirt_nic.node_vm_nic`, …), its group and our layout's folder.
pub(super) fn word(kind: Kind) -> &'static str {
    match kind {
        Kind::Master => "master",
        Kind::Static => "node",
    }
}
pub(super) fn group(kind: Kind) -> &'static str {
    match kind {
        Kind::Master => "master",
        Kind::Static => "worker",
    }
}
pub(super) fn layout(kind: Kind) -> &'static str {
    match kind {
        Kind::Master => "master-node",
        Kind::Static => "static-node",
    }
}

/// The instance class as the cluster's configuration of `v`'s time holds it: no
/// `rootDiskSizeGb` or `etcdDiskSizeGb` unless `root_gb` (the version's defaults apply),
/// the keys its variables read, a static address where it reads one.
pub(super) fn class(v: &Version, ids: &BTreeMap<&str, String>, root_gb: Option<u64>) -> Value {
    let mut c = json!({"numCPUs": CPUS, "memory": MEMORY_MIB, "template": "ubuntu-2204"});
    if v.old_keys {
        c["vnicProfileId"] = json!(ids["profile"]);
        c["storageDomainId"] = json!(ids["domain"]);
        c["clusterId"] = json!(zvirt_sim::CLUSTER_ID);
        c["nicName"] = json!("nic1");
        c["vmType"] = json!("high_performance");
        c["os"] = json!("other_linux");
    } else {
        c["vnicProfileID"] = json!(ids["profile"]);
        c["storageDomainID"] = json!(ids["domain"]);
    }
    if let Some(gb) = root_gb {
        c["rootDiskSizeGb"] = json!(gb);
    }
    let addresses = addresses(v.kind);
    match v.network {
        Network::None => {}
        Network::Flag => {
            c["customNetworkConfig"] = json!(true);
            c["networkInterfaceName"] = json!(INTERFACE);
            c["networkInterfaceAddress"] = json!(addresses);
            c["networkInterfaceNetmask"] = json!([NETMASK, NETMASK]);
            c["networkInterfaceGateway"] = json!(GATEWAY);
        }
        // The ZvirtClusterConfiguration's shape (`cluster_configuration.yaml` @73338704):
        // the DNS servers as one string.
        Network::Object { .. } => {
            c["customNetworkConfig"] = json!({
                "networkInterfaceName": INTERFACE, "networkInterfaceAddress": addresses,
                "networkInterfaceNetmask": NETMASK, "networkInterfaceGateway": GATEWAY,
                "dnsServers": DNS.join(" "),
            })
        }
    }
    c
}

/// dhctl's variables for `v`'s node 0 with the class of [`class`].
pub(super) fn variables(
    v: &Version,
    url: &str,
    ids: &BTreeMap<&str, String>,
    root_gb: Option<u64>,
) -> Value {
    let mut vars = var_file(url, &ids["profile"], &ids["domain"], 0, group(v.kind));
    let c = class(v, ids, root_gb);
    let pcc = &mut vars["providerClusterConfiguration"];
    pcc["masterNodeGroup"]["instanceClass"] = c.clone();
    pcc["nodeGroups"][0]["instanceClass"] = c;
    if v.old_keys {
        // The cluster is the class's then.
        pcc.as_object_mut().unwrap().remove("clusterID");
    }
    vars
}

/// The same as dhctl passes them once the module moved to a ModuleConfig, the network
/// where `v` reads it then.
pub(super) fn objects(v: &Version, url: &str, ids: &BTreeMap<&str, String>, memory: u64) -> Value {
    let mut pcc_vars = variables(v, url, ids, None);
    let plain = |c: &mut Value| {
        c["memory"] = json!(memory);
        c.as_object_mut().unwrap().remove("customNetworkConfig");
    };
    let pcc = &mut pcc_vars["providerClusterConfiguration"];
    plain(&mut pcc["masterNodeGroup"]["instanceClass"]);
    plain(&mut pcc["nodeGroups"][0]["instanceClass"]);
    let mut o = super::as_objects(pcc_vars);
    let addresses = addresses(v.kind);
    let network = json!({"networkInterfaceName": INTERFACE, "networkInterfaceNetmask": NETMASK,
        "networkInterfaceGateway": GATEWAY, "dnsServers": DNS});
    match v.objects {
        Objects::None => {}
        Objects::ModuleConfigNetwork => {
            let mut n = network;
            n["networkInterfaceAddresses"] = json!(addresses);
            o["settings"]["spec"]["settings"]["nodes"]["parameters"]["customNetworkConfigs"] =
                json!({ group(v.kind): n });
        }
        Objects::ClassNetwork => {
            let mut n = network;
            n["networkInterfaceAddress"] = json!(addresses);
            o["instanceClasses"][format!("{}-class", group(v.kind))]["spec"]
                ["customNetworkConfig"] = n;
        }
    }
    o
}

/// The HCL of `v`'s static address and DNS (inside its `ovirt_vm`).
pub(super) fn network_hcl(v: &Version) -> String {
    let address = addresses(v.kind)[0];
    let mut hcl = String::new();
    if let Network::Object { dns: true } = v.network {
        hcl.push_str(&format!("  initialization_dns = \"{}\"\n", DNS.join(" ")));
    }
    if v.network != Network::None {
        hcl.push_str(&format!(
            "  initialization_nic {{\n    name = \"{INTERFACE}\"\n    ipv4 {{\n      address = \"{address}\"\n      netmask = \"{NETMASK}\"\n      gateway = \"{GATEWAY}\"\n    }}\n  }}\n"
        ));
    }
    hcl
}

/// The cloud-init `v` writes (read once, at first boot; every version after the first
/// ignores it later).
pub(super) fn custom_script(v: &Version) -> String {
    format!("#cloud-config\nhostname: {}\n", v.vm_name)
}

/// The engine's objects as `v`'s files make them, made through the engine's API (our
/// provider as a plain client of it, in a module of its own whose every value is the
/// version's); answers the ids a state of them names.
pub(super) fn made_as_deckhouse(
    bin: &Path,
    root: &Path,
    url: &str,
    ids: &BTreeMap<&str, String>,
    v: &Version,
) -> BTreeMap<&'static str, String> {
    let (sockets, cores, threads) = (v.cpu)(CPUS);
    let memory = MEMORY_MIB << 20;
    let name = v.vm_name;
    let master = v.kind == Kind::Master;
    let stop = v
        .stop_behavior
        .map(|b| format!("  stop_behavior = \"{b}\"\n"))
        .unwrap_or_default();
    let mut init = String::new();
    if v.os_type {
        init.push_str("  os_type = \"other_linux\"\n");
    }
    if v.custom_script {
        init.push_str(&format!(
            "  initialization_custom_script = {:?}\n",
            custom_script(v)
        ));
    }
    if v.hostname {
        init.push_str(&format!("  initialization_hostname = \"{name}\"\n"));
    }
    init.push_str(&network_hcl(v));
    let resize = v
        .root_default_gb
        .map(|gb| {
            format!(
                r#"
data "ovirt_disk_attachments" "boot" {{
  vm_id = ovirt_vm.vm.id
}}
resource "ovirt_disk_resize" "boot" {{
  disk_id = tolist(data.ovirt_disk_attachments.boot.attachments)[0].disk_id
  size    = {}
}}
"#,
                gb * GIB
            )
        })
        .unwrap_or_default();
    let etcd = if master {
        format!(
            r#"
resource "ovirt_disk" "etcd" {{
  format            = "{format}"
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
  # it so too, `depends_on` at @04ede460 and @89d82879).
  depends_on = [{after}]
}}
"#,
            format = v.etcd_format,
            size = v.etcd_gb * GIB,
            domain = ids["domain"],
            iface = v.etcd_interface,
            after = if v.root_default_gb.is_some() {
                "ovirt_disk_resize.boot"
            } else {
                "ovirt_vm.vm"
            },
        )
    } else {
        String::new()
    };
    let mut start_deps = vec!["ovirt_nic.nic"];
    if v.root_default_gb.is_some() {
        start_deps.push("ovirt_disk_resize.boot");
    }
    if master {
        start_deps.push("ovirt_disk_attachment.etcd");
    }
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
  name              = "{name}"
  cluster_id        = "{cluster}"
  template_id       = tolist(data.ovirt_templates.t.templates)[0].id
  clone             = true
  cpu_sockets       = {sockets}
  cpu_cores         = {cores}
  cpu_threads       = {threads}
  memory            = {memory}
  maximum_memory    = {memory}
  memory_ballooning = false
  vm_type           = "high_performance"
{init}}}
{resize}
resource "ovirt_nic" "nic" {{
  name            = "nic1"
  vm_id           = ovirt_vm.vm.id
  vnic_profile_id = "{profile}"
}}
{etcd}
resource "ovirt_vm_start" "start" {{
  vm_id      = ovirt_vm.vm.id
  force_stop = true
{stop}  depends_on = [{deps}]
}}
"##,
        user = zvirt_sim::USER,
        password = zvirt_sim::PASSWORD,
        cluster = zvirt_sim::CLUSTER_ID,
        profile = ids["profile"],
        deps = start_deps.join(", "),
    );
    let ws = Workspace::new(
        bin,
        root,
        &format!("deckhouse-{}", layout(v.kind)),
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
    let vm = text(&attributes(&state, "ovirt_vm", "vm")["id"]);
    let mut out = BTreeMap::from([
        ("nic", text(&attributes(&state, "ovirt_nic", "nic")["id"])),
        ("vm", vm),
    ]);
    if master {
        out.insert(
            "disk",
            text(&attributes(&state, "ovirt_disk", "etcd")["id"]),
        );
    }
    out
}

/// The state `v` leaves over the engine's objects `made`, as the oVirt provider it ran
/// writes it: every attribute of its schema (2.1.5's, or Deckhouse's 2.2.0 build's), what
/// the configuration gave, and what its Read functions store from the engine (`comment`,
/// `status`, `effective_template_id`, the placement policy it reports; a disk's size,
/// status and total size). Schema version 0 everywhere (SDKv2's private data says so).
pub(super) fn deckhouse_state(
    engine: &Engine,
    ids: &BTreeMap<&str, String>,
    made: &BTreeMap<&str, String>,
    v: &Version,
) -> Value {
    let provider = format!("provider[\"{}\"]", v.tool.provider);
    let managed = |ty: &str, name: String, attributes: Value, deps: Vec<String>| {
        json!({"mode": "managed", "type": ty, "name": name, "provider": provider,
            "instances": [{"schema_version": 0, "attributes": attributes, "sensitive_attributes": [],
                "private": "eyJzY2hlbWFfdmVyc2lvbiI6IjAifQ==", "dependencies": deps}]})
    };
    let data = |ty: &str, name: String, attributes: Value| {
        json!({"mode": "data", "type": ty, "name": name, "provider": provider,
            "instances": [{"schema_version": 0, "attributes": attributes, "sensitive_attributes": []}]})
    };
    let w = word(v.kind);
    let master = v.kind == Kind::Master;
    let vm_addr = format!("ovirt_vm.{w}_vm");
    let vm = engine.vm_by_name(v.vm_name).expect("Deckhouse's VM");
    let (sockets, cores, threads) = (v.cpu)(CPUS);
    let memory = MEMORY_MIB << 20;
    let placement = &vm["placement_policy"];
    let hosts: Vec<Value> = placement["hosts"]["host"]
        .as_array()
        .map(|h| h.iter().map(|h| h["id"].clone()).collect())
        .unwrap_or_default();
    let mut vm_attrs = json!({
        "id": made["vm"], "name": v.vm_name, "comment": vm["comment"].as_str().unwrap_or(""),
        "cluster_id": zvirt_sim::CLUSTER_ID, "template_id": ids["template"],
        "effective_template_id": vm["template"]["id"], "status": vm["status"],
        "cpu_mode": null, "cpu_cores": cores, "cpu_threads": threads, "cpu_sockets": sockets,
        "os_type": if v.os_type { json!("other_linux") } else { vm["os"]["type"].as_str().filter(|t| *t != "other").into() },
        "vm_type": "high_performance",
        "placement_policy_affinity": placement["affinity"],
        "placement_policy_host_ids": if placement["affinity"].is_null() { Value::Null } else { json!(hosts) },
        "template_disk_attachment_override": [],
        "initialization_custom_script": if v.custom_script { json!(custom_script(v)) } else { Value::Null },
        "initialization_hostname": if v.hostname { json!(v.vm_name) } else { Value::Null },
        "memory": memory, "maximum_memory": memory, "memory_ballooning": false,
        "serial_console": null, "soundcard_enabled": null, "instance_type_id": null,
        "clone": true, "huge_pages": null,
    });
    if v.tool.provider_2_2 {
        let nics = if v.network == Network::None {
            json!([])
        } else {
            json!([{"name": INTERFACE, "ipv4": [{"address": addresses(v.kind)[0],
                "netmask": NETMASK, "gateway": GATEWAY}], "ipv6": []}])
        };
        vm_attrs["initialization_nic"] = nics;
        vm_attrs["initialization_dns"] = match v.network {
            Network::Object { dns: true } => json!(DNS.join(" ")),
            _ => Value::Null,
        };
    }
    let mut resources = vec![
        data(
            "ovirt_templates",
            format!("{w}_template"),
            json!({
                "id": "ubuntu-2204", "name": "ubuntu-2204", "fail_on_empty": true,
                "templates": [{"id": ids["template"], "description": ""}],
            }),
        ),
        managed(
            "ovirt_vm",
            format!("{w}_vm"),
            vm_attrs,
            vec![format!("data.ovirt_templates.{w}_template")],
        ),
        managed(
            "ovirt_nic",
            format!("{w}_vm_nic"),
            json!({
                "id": made["nic"], "name": "nic1", "vm_id": made["vm"], "vnic_profile_id": ids["profile"],
            }),
            vec![vm_addr.clone()],
        ),
    ];
    let mut start_deps = vec![format!("ovirt_nic.{w}_vm_nic"), vm_addr.clone()];
    if v.root_default_gb.is_some() {
        let boot = engine
            .disks()
            .into_iter()
            .find(|(_, alias, _)| alias == &format!("{}_Disk1", v.vm_name))
            .expect("the boot disk");
        resources.push(data(
            "ovirt_disk_attachments",
            format!("{w}-vm-boot-disk-attachment"),
            json!({
                "id": made["vm"], "vm_id": made["vm"],
                "attachments": [{"id": boot.0, "disk_id": boot.0, "disk_interface": "virtio_scsi"}],
            }),
        ));
        resources.push(managed(
            "ovirt_disk_resize",
            format!("{w}_boot_disk_resize"),
            json!({"id": boot.0, "disk_id": boot.0, "size": boot.2}),
            vec![
                format!("data.ovirt_disk_attachments.{w}-vm-boot-disk-attachment"),
                vm_addr.clone(),
            ],
        ));
        start_deps.push(format!("ovirt_disk_resize.{w}_boot_disk_resize"));
    }
    let mut outputs = json!({});
    if master {
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
                "id": made["disk"], "storage_domain_id": ids["domain"], "format": v.etcd_format,
                "alias": disk.1, "sparse": false, "total_size": 0, "status": "ok", "size": disk.2,
            }),
            vec![],
        ));
        resources.push(managed(
            "ovirt_disk_attachment",
            "master-kubernetes-data-attachment".into(),
            json!({
                "id": made["disk"], "vm_id": made["vm"], "disk_id": made["disk"],
                "disk_interface": v.etcd_interface, "bootable": false, "active": true,
            }),
            vec!["ovirt_disk.master-kubernetes-data".into(), vm_addr.clone()],
        ));
        start_deps.push("ovirt_disk.master-kubernetes-data".into());
        start_deps.push("ovirt_disk_attachment.master-kubernetes-data-attachment".into());
        // What every version after the first writes (`master-node/outputs.tf` @cf4bf011;
        // the only earlier one found, @9430278b, names a resource no main.tf declares).
        outputs = json!({
            "kubernetes_data_device_path": {"value": "/dev/sdb", "type": "string"},
            "master_ip_address_for_ssh": {"value": "10.1.0.5", "type": "string"},
            "node_internal_ip_address": {"value": "10.1.0.5", "type": "string"},
        });
    }
    start_deps.sort();
    resources.push(managed(
        "ovirt_vm_start",
        format!("{w}_vm"),
        json!({
            "id": made["vm"], "vm_id": made["vm"], "status": "up",
            "stop_behavior": v.stop_behavior.unwrap_or("shutdown"), "force_stop": true,
        }),
        start_deps,
    ));
    json!({
        "version": 4, "terraform_version": v.tool.terraform_version, "serial": 9,
        "lineage": "0b7e1f55-6f3c-4c2e-9a51-3f1d2c7b8a90", "outputs": outputs, "resources": resources,
    })
}
