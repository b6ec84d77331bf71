//! What terraform-provider-openstack 1.54.1 leaves behind, made apart from our provider:
//! the objects made through the services with the bodies that provider sends, and the
//! Terraform state its Read writes for each — the "before" of the takeover tests.
//!
//! Read from the provider at tag v1.54.1 (`terraform-provider-openstack/terraform-provider-
//! openstack` @a6cf040a, gophercloud v1.8.0, terraform-plugin-sdk v2.30.0), file by file:
//! `openstack/resource_openstack_networking_{network,subnet,router,router_interface,port,
//! secgroup,secgroup_rule}_v2.go`, `resource_openstack_compute_{keypair,instance,
//! floatingip,floatingip_associate,volume_attach}_v2.go` (+ `compute_instance_v2.go`'s
//! `flattenInstanceNetworks`), `resource_openstack_blockstorage_volume_v3.go`. What the
//! SDK adds: every instance at `schema_version` 0; a block's object holds every key, the
//! unset ones at their zero value; a top-level optional attribute neither configured nor
//! read is null; `private` is base64 of the SDK's meta (the declared timeouts in
//! nanoseconds) or of `null`.
//!
//! Nothing here comes from `deploy/terraform/openstack` or `services/terraform-openstack`:
//! where a value agrees with ours, it is because that provider's source says so.

use base64::Engine as _;
use serde_json::{json, Map, Value};

use super::Admin;

/// The provider's address in a state Terraform 0.14/1.x wrote.
pub const PROVIDER: &str =
    "provider[\"registry.terraform.io/terraform-provider-openstack/openstack\"]";

/// The SDK's `private` for a resource declaring these timeouts (keys sorted, in ns).
fn private(timeouts: &[(&str, u64)]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    if timeouts.is_empty() {
        return b64.encode("null");
    }
    let meta: Map<String, Value> = timeouts
        .iter()
        .map(|(k, mins)| ((*k).to_owned(), json!(mins * 60_000_000_000)))
        .collect();
    b64.encode(json!({"e2bfb730-ecaa-11e6-8f88-34363bc7c4c0": meta}).to_string())
}

/// One resource of a state: `module` (or none), its address, its one instance.
pub struct Entry {
    pub module: Option<&'static str>,
    pub ty: &'static str,
    pub name: &'static str,
    pub index: Option<i64>,
    pub attributes: Value,
    pub private: String,
    pub dependencies: Vec<String>,
}

impl Entry {
    fn new(
        ty: &'static str,
        name: &'static str,
        attributes: Value,
        timeouts: &[(&str, u64)],
    ) -> Self {
        Self {
            module: None,
            ty,
            name,
            index: None,
            attributes,
            private: private(timeouts),
            dependencies: Vec::new(),
        }
    }

    pub fn in_module(mut self, module: &'static str) -> Self {
        self.module = Some(module);
        self
    }

    pub fn at(mut self, index: i64) -> Self {
        self.index = Some(index);
        self
    }
}

/// The state document (format 4) of `entries`, as Terraform 0.14.8 (Deckhouse's for
/// OpenStack) wrote it.
pub fn state(entries: Vec<Entry>, outputs: Value) -> Value {
    // One resource per address, its instances by index.
    let mut resources: Vec<Value> = Vec::new();
    for e in entries {
        let mut instance = json!({
            "schema_version": 0,
            "attributes": e.attributes,
            "sensitive_attributes": [],
            "private": e.private,
        });
        if let Some(i) = e.index {
            instance["index_key"] = json!(i);
        }
        if !e.dependencies.is_empty() {
            instance["dependencies"] = json!(e.dependencies);
        }
        let found = resources
            .iter_mut()
            .find(|r| r["type"] == e.ty && r["name"] == e.name && r["module"].as_str() == e.module);
        match found {
            Some(r) => r["instances"].as_array_mut().unwrap().push(instance),
            None => {
                let mut r = json!({"mode": "managed", "type": e.ty, "name": e.name,
                    "provider": PROVIDER, "instances": [instance]});
                if let Some(m) = e.module {
                    r["module"] = json!(m);
                }
                if e.index.is_some() {
                    r["each"] = json!("list");
                }
                resources.push(r);
            }
        }
    }
    json!({"version": 4, "terraform_version": "0.14.8", "serial": 3,
           "lineage": "0f0b5d2e-8c5e-4f3a-9d1e-2b7a6c4d9e10",
           "outputs": outputs, "resources": resources})
}

/// A string field as the SDK writes it (JSON null and a missing key: "").
fn text(v: &Value) -> Value {
    json!(v.as_str().unwrap_or_default())
}

/// The tags Read writes: `all_tags` every one, `tags` untouched (null: none configured).
fn tags(o: &Value) -> (Value, Value) {
    (
        Value::Null,
        json!(o["tags"].as_array().cloned().unwrap_or_default()),
    )
}

/// `openstack_networking_network_v2` (its Read; `segments` empty for a network without
/// provider attributes visible).
pub fn network(n: &Value, region: &str) -> Entry {
    let (tags, all) = tags(n);
    let mut segments = Vec::new();
    if n.get("provider:network_type").is_some_and(|t| !t.is_null()) {
        segments.push(json!({
            "physical_network": text(&n["provider:physical_network"]),
            "network_type": text(&n["provider:network_type"]),
            "segmentation_id": n["provider:segmentation_id"].as_i64().unwrap_or(0),
        }));
    }
    Entry::new(
        "openstack_networking_network_v2",
        "internal",
        json!({
            "id": n["id"], "region": region, "name": n["name"], "description": text(&n["description"]),
            "admin_state_up": n["admin_state_up"], "shared": n["shared"],
            "external": n["router:external"].as_bool().unwrap_or(false),
            "tenant_id": n["tenant_id"], "segments": segments, "value_specs": null,
            "tags": tags, "all_tags": all,
            "availability_zone_hints": n["availability_zone_hints"].as_array().cloned().unwrap_or_default(),
            "transparent_vlan": n["vlan_transparent"].as_bool().unwrap_or(false),
            "port_security_enabled": n["port_security_enabled"].as_bool().unwrap_or(false),
            "mtu": n["mtu"].as_i64().unwrap_or(0), "dns_domain": text(&n["dns_domain"]),
            "qos_policy_id": text(&n["qos_policy_id"]), "timeouts": null,
        }),
        &[("create", 10), ("delete", 10)],
    )
}

/// `openstack_networking_subnet_v2` (both pool attributes written; `host_routes` not read:
/// the configuration's, none).
pub fn subnet(s: &Value, region: &str) -> Entry {
    let (tags, all) = tags(s);
    let pools: Vec<Value> = s["allocation_pools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| json!({"start": p["start"], "end": p["end"]}))
        .collect();
    let gateway = text(&s["gateway_ip"]);
    Entry::new(
        "openstack_networking_subnet_v2",
        "internal",
        json!({
            "id": s["id"], "region": region, "network_id": s["network_id"], "cidr": s["cidr"],
            "prefix_length": null, "name": s["name"], "description": text(&s["description"]),
            "tenant_id": s["tenant_id"], "allocation_pools": pools, "allocation_pool": pools,
            "gateway_ip": gateway, "no_gateway": gateway == "", "ip_version": s["ip_version"],
            "enable_dhcp": s["enable_dhcp"], "dns_nameservers": s["dns_nameservers"],
            "host_routes": [], "ipv6_address_mode": text(&s["ipv6_address_mode"]),
            "ipv6_ra_mode": text(&s["ipv6_ra_mode"]), "subnetpool_id": text(&s["subnetpool_id"]),
            "value_specs": null, "tags": tags, "all_tags": all,
            "service_types": s["service_types"].as_array().cloned().unwrap_or_default(),
            "timeouts": null,
        }),
        &[("create", 10), ("delete", 10)],
    )
}

/// `openstack_networking_router_v2` with a gateway (external_gateway and
/// external_network_id both the gateway's network).
pub fn router(r: &Value, region: &str) -> Entry {
    let (tags, all) = tags(r);
    let gw = &r["external_gateway_info"];
    let fixed: Vec<Value> = gw["external_fixed_ips"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| json!({"subnet_id": f["subnet_id"], "ip_address": f["ip_address"]}))
        .collect();
    Entry::new(
        "openstack_networking_router_v2",
        "router",
        json!({
            "id": r["id"], "region": region, "name": r["name"], "description": text(&r["description"]),
            "admin_state_up": r["admin_state_up"],
            "distributed": r["distributed"].as_bool().unwrap_or(false),
            "external_gateway": text(&gw["network_id"]), "external_network_id": text(&gw["network_id"]),
            "enable_snat": gw["enable_snat"].as_bool().unwrap_or(false),
            "external_fixed_ip": fixed, "external_subnet_ids": null,
            "tenant_id": r["tenant_id"], "value_specs": null,
            "availability_zone_hints": r["availability_zone_hints"].as_array().cloned().unwrap_or_default(),
            "vendor_options": [], "tags": tags, "all_tags": all, "timeouts": null,
        }),
        &[("create", 10), ("delete", 10)],
    )
}

/// `openstack_networking_router_interface_v2`: its id is the interface's port.
pub fn router_interface(port: &Value, subnet: &str, region: &str) -> Entry {
    Entry::new(
        "openstack_networking_router_interface_v2",
        "router",
        json!({"id": port["id"], "region": region, "router_id": port["device_id"],
               "subnet_id": subnet, "port_id": port["id"], "force_destroy": false, "timeouts": null}),
        &[("create", 10), ("delete", 10)],
    )
}

/// `openstack_networking_secgroup_v2` (`delete_default_rules` not read: null).
pub fn secgroup(g: &Value, region: &str) -> Entry {
    let (tags, all) = tags(g);
    Entry::new(
        "openstack_networking_secgroup_v2",
        "kube",
        json!({"id": g["id"], "region": region, "name": g["name"],
               "description": text(&g["description"]), "tenant_id": g["tenant_id"],
               "delete_default_rules": null, "tags": tags, "all_tags": all, "timeouts": null}),
        &[("delete", 10)],
    )
}

/// `openstack_networking_secgroup_rule_v2` named `name`.
pub fn secgroup_rule(name: &'static str, r: &Value, region: &str) -> Entry {
    Entry::new(
        "openstack_networking_secgroup_rule_v2",
        name,
        json!({"id": r["id"], "region": region, "description": text(&r["description"]),
               "direction": r["direction"], "ethertype": r["ethertype"],
               "port_range_min": r["port_range_min"].as_i64().unwrap_or(0),
               "port_range_max": r["port_range_max"].as_i64().unwrap_or(0),
               "protocol": text(&r["protocol"]), "remote_group_id": text(&r["remote_group_id"]),
               "remote_ip_prefix": r["remote_ip_prefix"].as_str().unwrap_or_default().to_lowercase(),
               "security_group_id": r["security_group_id"], "tenant_id": r["tenant_id"],
               "timeouts": null}),
        &[("delete", 10)],
    )
}

/// `openstack_compute_keypair_v2` (`private_key` "" as a create with a public key sets it).
pub fn keypair(k: &Value, region: &str) -> Entry {
    Entry::new(
        "openstack_compute_keypair_v2",
        "ssh",
        json!({"id": k["name"], "region": region, "name": k["name"], "public_key": k["public_key"],
               "value_specs": null, "private_key": "", "fingerprint": k["fingerprint"], "user_id": ""}),
        &[],
    )
}

/// `openstack_networking_port_v2` named `name`, configured with `security_group_ids`,
/// `fixed_ip` blocks and `admin_state_up` (Read writes neither of the first two).
pub fn port(name: &'static str, p: &Value, region: &str, groups: &[&str], fixed: &[&str]) -> Entry {
    let (tags, all) = tags(p);
    let own = p["mac_address"].as_str().unwrap_or_default();
    let pairs: Vec<Value> = p["allowed_address_pairs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let mac = a["mac_address"].as_str().unwrap_or_default();
            json!({"ip_address": a["ip_address"], "mac_address": if mac == own { "" } else { mac }})
        })
        .collect();
    let profile = match &p["binding:profile"] {
        Value::Null => String::new(),
        v => v.to_string(),
    };
    let details: Map<String, Value> = p["binding:vif_details"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            (
                k.clone(),
                json!(v
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string())),
            )
        })
        .collect();
    Entry::new(
        "openstack_networking_port_v2",
        name,
        json!({
            "id": p["id"], "region": region, "name": p["name"], "description": text(&p["description"]),
            "network_id": p["network_id"], "admin_state_up": p["admin_state_up"],
            "mac_address": p["mac_address"], "tenant_id": p["tenant_id"],
            "device_owner": p["device_owner"], "device_id": p["device_id"],
            "security_group_ids": if groups.is_empty() { Value::Null } else { json!(groups) },
            "no_security_groups": null,
            "fixed_ip": fixed.iter().map(|s| json!({"subnet_id": s, "ip_address": ""})).collect::<Vec<_>>(),
            "no_fixed_ip": null, "allowed_address_pairs": pairs, "extra_dhcp_option": [],
            "value_specs": null,
            "all_fixed_ips": p["fixed_ips"].as_array().into_iter().flatten().map(|f| f["ip_address"].clone()).collect::<Vec<_>>(),
            "all_security_group_ids": p["security_groups"],
            "tags": tags, "all_tags": all,
            "port_security_enabled": p["port_security_enabled"].as_bool().unwrap_or(false),
            "binding": [{"host_id": text(&p["binding:host_id"]), "profile": profile,
                         "vif_details": details, "vif_type": text(&p["binding:vif_type"]),
                         "vnic_type": text(&p["binding:vnic_type"])}],
            "dns_name": text(&p["dns_name"]),
            "dns_assignment": p["dns_assignment"].as_array().cloned().unwrap_or_default(),
            "qos_policy_id": text(&p["qos_policy_id"]), "timeouts": null,
        }),
        &[("create", 10), ("delete", 10)],
    )
}

/// `openstack_blockstorage_volume_v3` named `name`, configured with `image_id` (or not),
/// `enable_online_resize` and its timeouts (not read).
pub fn volume(name: &'static str, v: &Value, region: &str, image: Option<&str>) -> Entry {
    let attachments: Vec<Value> = v["attachments"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| json!({"id": a["id"], "instance_id": a["server_id"], "device": a["device"]}))
        .collect();
    Entry::new(
        "openstack_blockstorage_volume_v3",
        name,
        json!({
            "id": v["id"], "region": region, "size": v["size"], "enable_online_resize": true,
            "name": v["name"], "description": text(&v["description"]),
            "availability_zone": v["availability_zone"], "metadata": v["metadata"],
            "snapshot_id": text(&v["snapshot_id"]), "source_vol_id": text(&v["source_volid"]),
            "image_id": image, "backup_id": text(&v["backup_id"]), "volume_type": v["volume_type"],
            "consistency_group_id": null, "source_replica": null, "multiattach": null,
            "attachment": attachments, "scheduler_hints": [],
            "timeouts": {"create": "10m", "delete": "10m"},
        }),
        &[("create", 10), ("delete", 10)],
    )
}

/// Go's `time.Time.String()` of Nova's `2024-01-02T03:04:05Z`.
fn go_time(nova: &str) -> String {
    match nova.strip_suffix('Z').and_then(|t| t.split_once('T')) {
        Some((date, clock)) => format!("{date} {clock} +0000 UTC"),
        None => nova.to_owned(),
    }
}

/// `openstack_compute_instance_v2` named `name`, as made from `config` (its network
/// blocks by port, block devices, user data's SHA-1, metadata, timeouts) and read.
pub fn server(name: &'static str, s: &Value, flavor: &str, region: &str, config: &Value) -> Entry {
    // flattenInstanceNetworks: a configured block by port takes its network's first NIC.
    let mut network = Vec::new();
    for b in config["network"].as_array().into_iter().flatten() {
        let (net_name, net_id) = (
            b["name"].as_str().unwrap_or_default(),
            b["uuid"].as_str().unwrap_or_default(),
        );
        let nics = s["addresses"][net_name]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let fixed = nics
            .iter()
            .find(|a| a["OS-EXT-IPS:type"] == "fixed" && a["version"] == 4);
        network.push(json!({
            "uuid": net_id, "name": net_name, "port": b["port"],
            "fixed_ip_v4": fixed.map(|a| a["addr"].clone()).unwrap_or(json!("")),
            "fixed_ip_v6": "", "floating_ip": "",
            "mac": fixed.map(|a| a["OS-EXT-IPS-MAC:mac_addr"].clone()).unwrap_or(json!("")),
            "access_network": false,
        }));
    }
    let access = network
        .first()
        .map(|n| n["fixed_ip_v4"].clone())
        .unwrap_or(json!(""));
    let boot_from_volume = config["block_device"]
        .as_array()
        .is_some_and(|b| !b.is_empty());
    let (image_id, image_name) = if boot_from_volume {
        (
            json!("Attempt to boot from volume - no image supplied"),
            config["image_name"].clone(),
        )
    } else {
        (s["image"]["id"].clone(), config["image_name"].clone())
    };
    let groups: Vec<Value> = {
        let mut g: Vec<Value> = Vec::new();
        for x in s["security_groups"].as_array().into_iter().flatten() {
            if !g.contains(&x["name"]) {
                g.push(x["name"].clone());
            }
        }
        g
    };
    let digest = config["user_data"].as_str().map(|t| {
        let d = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, t.as_bytes());
        d.as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    });
    Entry::new(
        "openstack_compute_instance_v2",
        name,
        json!({
            "id": s["id"], "region": region, "name": s["name"],
            "image_id": image_id, "image_name": image_name,
            "flavor_id": s["flavor"]["id"], "flavor_name": flavor, "floating_ip": null,
            "user_data": digest, "security_groups": groups, "availability_zone_hints": null,
            "availability_zone": s["OS-EXT-AZ:availability_zone"], "network_mode": null,
            "network": network, "metadata": config["metadata"], "config_drive": config["config_drive"],
            "admin_pass": null, "access_ip_v4": access, "access_ip_v6": "",
            "key_pair": s["key_name"], "block_device": config["block_device"], "volume": [],
            "scheduler_hints": [], "personality": [], "stop_before_destroy": false,
            "force_delete": false, "all_metadata": s["metadata"], "power_state": "active",
            "tags": null, "all_tags": s["tags"], "vendor_options": [],
            "created": go_time(s["created"].as_str().unwrap_or_default()),
            "updated": go_time(s["updated"].as_str().unwrap_or_default()),
            "timeouts": config["timeouts"],
        }),
        &[("create", 30), ("delete", 30), ("update", 30)],
    )
}

/// The block device a layout boots a node from its root volume with, as the SDK writes
/// it (every key, the unset ones at their zero value).
pub fn boot_volume(volume: &str) -> Value {
    json!([{"source_type": "volume", "uuid": volume, "volume_size": 0, "destination_type": "volume",
            "boot_index": 0, "delete_on_termination": true, "guest_format": "", "volume_type": "",
            "device_type": "", "disk_bus": "", "multiattach": false}])
}

/// `openstack_compute_floatingip_v2` (Nova's proxy `os-floating-ips`).
pub fn compute_floatingip(name: &'static str, f: &Value, region: &str) -> Entry {
    Entry::new(
        "openstack_compute_floatingip_v2",
        name,
        json!({"id": f["id"], "region": region, "pool": f["pool"], "address": f["ip"],
               "fixed_ip": text(&f["fixed_ip"]), "instance_id": text(&f["instance_id"])}),
        &[],
    )
}

/// `openstack_compute_floatingip_associate_v2`: id `<fip>/<server>/` (no fixed IP given).
pub fn compute_floatingip_associate(
    name: &'static str,
    fip: &str,
    server: &str,
    region: &str,
) -> Entry {
    Entry::new(
        "openstack_compute_floatingip_associate_v2",
        name,
        json!({"id": format!("{fip}/{server}/"), "region": region, "floating_ip": fip,
               "instance_id": server, "fixed_ip": "", "wait_until_associated": true, "timeouts": null}),
        &[("create", 10)],
    )
}

/// `openstack_compute_volume_attach_v2`: id `<server>/<attachment>`.
pub fn volume_attach(name: &'static str, a: &Value, region: &str) -> Entry {
    Entry::new(
        "openstack_compute_volume_attach_v2",
        name,
        json!({"id": format!("{}/{}", a["serverId"].as_str().unwrap_or_default(), a["id"].as_str().unwrap_or_default()),
               "region": region, "instance_id": a["serverId"], "volume_id": a["volumeId"],
               "device": a["device"], "multiattach": null, "vendor_options": [], "timeouts": null}),
        &[("create", 10), ("delete", 10)],
    )
}

/// Polls `at` until `done` says so (five minutes at most: the services share two cores
/// with the other tests).
pub fn until(admin: &Admin, at: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..600 {
        let v = admin.get(at);
        if done(&v) {
            return v;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("{what}: never, {at}: {}", admin.get(at));
}
