//! A Standard cluster terraform-provider-openstack 1.54.1 made ([`super::upstream`]:
//! its objects made with the bodies it sends, its states as its Read writes them), taken
//! over as docs/migrate/machines.md says: the provider installed under its address, the
//! states kept — base-infrastructure, the master, a static node each converge without a
//! resource changed, with Terraform 1.0.3 and the newer one. And a master of an older
//! release, whose etcd volume was `openstack_blockstorage_volume_v2`: its plan would replace
//! the volume, `migrate-state` rewrites it as Deckhouse's own hook does, then it is kept.
//! Then our layouts destroy it all.

use base64::Engine as _;

use super::upstream::{self, until};
use super::*;

/// The cloud-init a master is made with (the layouts decode `cloudConfig`).
const CLOUD_CONFIG: &str = "#cloud-config\nruncmd:\n- echo bootstrap\n";

struct Made {
    base: Value,
    master: Value,
    node: Value,
}

/// Standard's objects made as terraform-provider-openstack makes them for Deckhouse's
/// layout, in `os` (the project's token), and the three states it writes over them.
fn make(admin: &Admin, os: &Admin, cluster: &Cluster, cidr: &str) -> Made {
    let p = cluster.prefix.as_str();
    let region = admin.env["OS_REGION_NAME"].as_str();
    let pcc = &cluster.vars["providerClusterConfiguration"];
    let public = admin.get("neutron:/networks?name=public")["networks"][0]["id"]
        .as_str()
        .expect("public")
        .to_owned();
    let image = admin.get("glance:/images?name=fake-image")["images"][0]["id"]
        .as_str()
        .expect("image")
        .to_owned();
    let flavor = admin.get("nova:/flavors")["flavors"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == "m1.small"))
        .map(|f| f["id"].as_str().unwrap_or_default().to_owned())
        .expect("m1.small");

    // base-infrastructure: network-security, keypair, the network, its subnet, the router.
    let sg = os.post(
        "neutron:/security-groups",
        json!({"security_group": {"name": p}}),
    )["security_group"]
        .clone();
    let sg_id = sg["id"].as_str().unwrap().to_owned();
    let rule = |body: Value| {
        let mut r = body;
        r["security_group_id"] = json!(sg_id);
        os.post(
            "neutron:/security-group-rules",
            json!({"security_group_rule": r}),
        )["security_group_rule"]
            .clone()
    };
    let ssh = rule(
        json!({"direction": "ingress", "ethertype": "IPv4", "port_range_max": 22, "port_range_min": 22, "protocol": "tcp", "remote_ip_prefix": "0.0.0.0/0"}),
    );
    let icmp = rule(
        json!({"direction": "ingress", "ethertype": "IPv4", "protocol": "icmp", "remote_ip_prefix": "0.0.0.0/0"}),
    );
    let node_ports = rule(
        json!({"direction": "ingress", "description": "Allow access to node ports", "ethertype": "IPv4", "port_range_max": 32767, "port_range_min": 30000, "protocol": "tcp", "remote_ip_prefix": "0.0.0.0/0"}),
    );
    let internal = rule(
        json!({"direction": "ingress", "description": "Allow internal communication between nodes", "ethertype": "IPv4", "remote_group_id": sg_id}),
    );
    let key = os.post(
        "nova:/os-keypairs",
        json!({"keypair": {"name": p, "public_key": pcc["sshPublicKey"]}}),
    )["keypair"]
        .clone();
    let key = admin.get(&format!(
        "nova:/os-keypairs/{}",
        key["name"].as_str().unwrap()
    ))["keypair"]
        .clone();
    let net = os.post(
        "neutron:/networks",
        json!({"network": {"name": p, "admin_state_up": true}}),
    )["network"]
        .clone();
    let net_id = net["id"].as_str().unwrap().to_owned();
    let base_ip = cidr
        .split('/')
        .next()
        .unwrap()
        .rsplit_once('.')
        .unwrap()
        .0
        .to_owned();
    let subnet = os.post(
        "neutron:/subnets",
        json!({"subnet": {
        "network_id": net_id, "cidr": cidr, "name": p,
        "allocation_pools": [{"start": format!("{base_ip}.2"), "end": format!("{base_ip}.254")}],
        "gateway_ip": format!("{base_ip}.1"), "ip_version": 4, "enable_dhcp": true,
        "dns_nameservers": ["8.8.8.8"]}}),
    )["subnet"]
        .clone();
    let subnet_id = subnet["id"].as_str().unwrap().to_owned();
    let router = os.post(
        "neutron:/routers",
        json!({"router": {"name": p, "admin_state_up": true,
        "external_gateway_info": {"network_id": public}}}),
    )["router"]
        .clone();
    let router_id = router["id"].as_str().unwrap().to_owned();
    let (code, iface) = os.call(
        "PUT",
        &format!("neutron:/routers/{router_id}/add_router_interface"),
        Some(json!({"subnet_id": subnet_id})),
    );
    assert_eq!(code, 200, "{iface}");
    let iface_port = admin.get(&format!(
        "neutron:/ports/{}",
        iface["port_id"].as_str().unwrap()
    ))["port"]
        .clone();
    let router = admin.get(&format!("neutron:/routers/{router_id}"))["router"].clone();
    let net = admin.get(&format!("neutron:/networks/{net_id}"))["network"].clone();
    let sg = admin.get(&format!("neutron:/security-groups/{sg_id}"))["security_group"].clone();
    let ns = "module.network_security";
    let base = upstream::state(
        vec![
            upstream::secgroup(&sg, region).in_module(ns).at(0),
            upstream::secgroup_rule("allow_ssh", &ssh, region)
                .in_module(ns)
                .at(0),
            upstream::secgroup_rule("allow_icmp", &icmp, region)
                .in_module(ns)
                .at(0),
            upstream::secgroup_rule("allow_node_ports", &node_ports, region)
                .in_module(ns)
                .at(0),
            upstream::secgroup_rule("allow_internal_communication", &internal, region)
                .in_module(ns)
                .at(0),
            upstream::keypair(&key, region).in_module("module.keypair"),
            upstream::network(&net, region),
            upstream::subnet(&subnet, region),
            upstream::router(&router, region),
            upstream::router_interface(&iface_port, &subnet_id, region),
        ],
        json!({}),
    );

    // The master: its port, root volume, server, floating IP, etcd volume.
    let port = os.post(
        "neutron:/ports",
        json!({"port": {"network_id": net_id, "admin_state_up": true,
        "fixed_ips": [{"subnet_id": subnet_id}], "security_groups": [sg_id],
        "allowed_address_pairs": [{"ip_address": "10.111.0.0/16"}]}}),
    )["port"]
        .clone();
    let port_id = port["id"].as_str().unwrap().to_owned();
    let root = os.post("cinder:/volumes", json!({"volume": {"size": 1, "availability_zone": "nova",
        "name": format!("{p}-master-root-volume-0"), "imageRef": image, "volume_type": "__DEFAULT__"}}))["volume"].clone();
    let root_id = root["id"].as_str().unwrap().to_owned();
    until(
        admin,
        &format!("cinder:/volumes/{root_id}"),
        "the root volume available",
        |v| v["volume"]["status"] == "available",
    );
    let user_data = base64::engine::general_purpose::STANDARD.encode(CLOUD_CONFIG);
    let server = os.post(
        "nova:/servers",
        json!({"server": {
        "name": format!("{p}-master-0"), "imageRef": "", "flavorRef": flavor,
        "availability_zone": "nova", "networks": [{"uuid": net_id, "port": port_id}],
        "config_drive": false, "user_data": user_data, "key_name": p,
        "block_device_mapping_v2": [{"source_type": "volume", "uuid": root_id, "boot_index": 0,
            "delete_on_termination": true, "destination_type": "volume"}]}}),
    )["server"]
        .clone();
    let server_id = server["id"].as_str().unwrap().to_owned();
    until(
        admin,
        &format!("nova:/servers/{server_id}"),
        "the master ACTIVE",
        |s| s["server"]["status"] == "ACTIVE",
    );
    let fip = os.post("nova:/os-floating-ips", json!({"pool": "public"}))["floating_ip"].clone();
    let fip_ip = fip["ip"].as_str().unwrap().to_owned();
    os.post(
        &format!("nova:/servers/{server_id}/action"),
        json!({"addFloatingIp": {"address": fip_ip}}),
    );
    until(
        admin,
        &format!("nova:/servers/{server_id}"),
        "the floating IP on the master",
        |s| s["server"]["addresses"].to_string().contains(&fip_ip),
    );
    let etcd = os.post("cinder:/volumes", json!({"volume": {"size": 1, "availability_zone": "nova",
        "description": "volume for etcd and kubernetes certs", "name": format!("{p}-kubernetes-data-0"),
        "volume_type": "__DEFAULT__"}}))["volume"].clone();
    let etcd_id = etcd["id"].as_str().unwrap().to_owned();
    until(
        admin,
        &format!("cinder:/volumes/{etcd_id}"),
        "the etcd volume available",
        |v| v["volume"]["status"] == "available",
    );
    os.post(
        &format!("nova:/servers/{server_id}/os-volume_attachments"),
        json!({"volumeAttachment": {"volumeId": etcd_id}}),
    );
    until(
        admin,
        &format!("cinder:/volumes/{etcd_id}"),
        "the etcd volume in use",
        |v| v["volume"]["status"] == "in-use",
    );
    let attachment = admin.get(&format!(
        "nova:/servers/{server_id}/os-volume_attachments/{etcd_id}"
    ))["volumeAttachment"]
        .clone();
    let server = admin.get(&format!("nova:/servers/{server_id}"))["server"].clone();
    let port = admin.get(&format!("neutron:/ports/{port_id}"))["port"].clone();
    let fip = admin.get(&format!(
        "nova:/os-floating-ips/{}",
        fip["id"].as_str().unwrap()
    ))["floating_ip"]
        .clone();
    let root = admin.get(&format!("cinder:/volumes/{root_id}"))["volume"].clone();
    let etcd = admin.get(&format!("cinder:/volumes/{etcd_id}"))["volume"].clone();
    let master_config = json!({
        "network": [{"uuid": net_id, "name": p, "port": port_id}],
        "block_device": upstream::boot_volume(&root_id), "image_name": "fake-image",
        "user_data": CLOUD_CONFIG, "metadata": null, "config_drive": false,
        "timeouts": {"create": "10m", "delete": "10m", "update": "10m"},
    });
    let mut instance = upstream::server("master", &server, "m1.small", region, &master_config)
        .in_module("module.master");
    instance.dependencies = vec![
        "module.master.openstack_blockstorage_volume_v3.master".into(),
        "openstack_networking_port_v2.master_internal_with_security".into(),
    ];
    let mut attach = upstream::volume_attach("kubernetes_data", &attachment, region)
        .in_module("module.kubernetes_data");
    attach.dependencies = vec![
        "module.kubernetes_data.openstack_blockstorage_volume_v3.kubernetes_data".into(),
        "module.master.openstack_compute_instance_v2.master".into(),
    ];
    let master = upstream::state(
        vec![
            upstream::port(
                "master_internal_with_security",
                &port,
                region,
                &[&sg_id],
                &[&subnet_id],
            )
            .at(0),
            upstream::volume("master", &root, region, Some(&image))
                .in_module("module.master")
                .at(0),
            instance,
            upstream::compute_floatingip("master", &fip, region)
                .in_module("module.master")
                .at(0),
            upstream::compute_floatingip_associate("master", &fip_ip, &server_id, region)
                .in_module("module.master")
                .at(0),
            upstream::volume("kubernetes_data", &etcd, region, None)
                .in_module("module.kubernetes_data"),
            attach,
        ],
        json!({}),
    );

    // A static node of `worker`: its port (the pod network allowed), its server.
    let nport = os.post(
        "neutron:/ports",
        json!({"port": {"network_id": net_id, "name": format!("{p}-worker-0"),
        "admin_state_up": true, "security_groups": [sg_id],
        "allowed_address_pairs": [{"ip_address": "10.111.0.0/16"}]}}),
    )["port"]
        .clone();
    let nport_id = nport["id"].as_str().unwrap().to_owned();
    let node = os.post(
        "nova:/servers",
        json!({"server": {
        "name": format!("{p}-worker-0"), "imageRef": image, "flavorRef": flavor,
        "availability_zone": "nova", "networks": [{"uuid": net_id, "port": nport_id}],
        "config_drive": false, "user_data": user_data, "key_name": p}}),
    )["server"]
        .clone();
    let node_id = node["id"].as_str().unwrap().to_owned();
    until(
        admin,
        &format!("nova:/servers/{node_id}"),
        "the node ACTIVE",
        |s| s["server"]["status"] == "ACTIVE",
    );
    let node = admin.get(&format!("nova:/servers/{node_id}"))["server"].clone();
    let nport = admin.get(&format!("neutron:/ports/{nport_id}"))["port"].clone();
    let node_config = json!({
        "network": [{"uuid": net_id, "name": p, "port": nport_id}], "block_device": [],
        "image_name": "fake-image", "user_data": CLOUD_CONFIG, "metadata": {}, "config_drive": false,
        "timeouts": {"create": "10m", "delete": "10m", "update": "10m"},
    });
    let node = upstream::state(
        vec![
            upstream::port("port", &nport, region, &[&sg_id], &[]).at(0),
            upstream::server("node", &node, "m1.small", region, &node_config),
        ],
        json!({}),
    );
    Made { base, master, node }
}

/// The master's state as a release before the v3 volumes left it: its etcd volume an
/// `openstack_blockstorage_volume_v2` (kubernetes-data @1e3730b1, before Deckhouse's
/// hook `migrate_terraform_state.go` @06e6ebd4 rewrote such states).
fn before_v3(master: &Value) -> Value {
    let mut s = master.clone();
    for r in s["resources"].as_array_mut().unwrap() {
        if r["name"] == "kubernetes_data" && r["type"] == "openstack_blockstorage_volume_v3" {
            r["type"] = json!("openstack_blockstorage_volume_v2");
            let a = &mut r["instances"][0]["attributes"];
            let a = a.as_object_mut().unwrap();
            // v2's schema: no enable_online_resize, backup_id or multiattach.
            for k in ["enable_online_resize", "backup_id", "multiattach"] {
                a.remove(k);
            }
        }
        for i in r["instances"].as_array_mut().unwrap() {
            if let Some(deps) = i["dependencies"].as_array_mut() {
                for d in deps {
                    *d = json!(d
                        .as_str()
                        .unwrap()
                        .replace("volume_v3.kubernetes_data", "volume_v2.kubernetes_data"));
                }
            }
        }
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_terraform_provider_openstack_made_converges_unchanged_after_the_switch() {
    let Some(admin) = Admin::new("the OpenStack takeover") else {
        return;
    };
    let Some(bin) = terraform_binary("the OpenStack takeover") else {
        return;
    };
    let _turn = TURN.lock().await;
    let _copies = ImageCopies::new();
    let project = admin.project("ostf-takeover");
    let os = admin.in_project(&project.name);
    let cidr = "192.168.210.0/24";
    let cluster = Cluster::new(&admin, &project, Layout::Standard, cidr);
    let made = tf(|| make(&admin, &os, &cluster, cidr));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let layouts = terraform::copy_layouts("openstack", root);
    let newer = terraform::newer("the OpenStack takeover", &bin);
    let steps = [
        ("base-infrastructure", &made.base, "base-infrastructure"),
        ("master-node", &before_v3(&made.master), "the master"),
        ("static-node", &made.node, "the static node"),
    ];
    let mut modules = Vec::new();
    for (name, state, what) in steps {
        let w = step(&bin, root, &layouts, Layout::Standard, name);
        std::fs::write(
            w.dir.join("terraform.tfstate"),
            serde_json::to_vec_pretty(state).unwrap(),
        )
        .unwrap();
        let vars = cluster.var_file(root, name, 0);
        if name == "master-node" {
            // Before the migration the v2 volume would go (and with it the etcd data).
            let plan = tf(|| w.plan(&[&vars]));
            expect(&plan, 2, "the master of the v2 release, not migrated");
            assert!(
                plan.stdout
                    .contains("openstack_blockstorage_volume_v2.kubernetes_data will be destroyed"),
                "{}",
                plan.stdout
            );
            let state = std::fs::read(w.dir.join("terraform.tfstate")).unwrap();
            let (ok, migrated, said) = terraform::migrate_state(&state);
            assert!(ok, "{said}");
            assert!(
                said.contains("openstack_blockstorage_volume_v2.kubernetes_data"),
                "{said}"
            );
            std::fs::write(w.dir.join("terraform.tfstate"), migrated).unwrap();
        }
        if let Some(newer) = &newer {
            let plan = tf(|| w.using(newer).plan(&[&vars]));
            assert!(
                !plan.stdout.contains("Plan:"),
                "{what}, the newer Terraform: {}{}",
                plan.stdout,
                plan.stderr
            );
        }
        tf(|| w.converges_unchanged(&vars, what));
        modules.push((w, vars));
    }
    // The objects are the same ones: the master kept its server and its volumes.
    let master_state: Value =
        serde_json::from_slice(&std::fs::read(modules[1].0.dir.join("terraform.tfstate")).unwrap())
            .unwrap();
    let mut ids: Vec<&str> = master_state["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["mode"] == "managed")
        .map(|r| {
            r["instances"][0]["attributes"]["id"]
                .as_str()
                .unwrap_or_default()
        })
        .collect();
    let mut made_ids: Vec<&str> = made.master["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["instances"][0]["attributes"]["id"]
                .as_str()
                .unwrap_or_default()
        })
        .collect();
    ids.sort_unstable();
    made_ids.sort_unstable();
    assert_eq!(ids, made_ids, "the master's objects after the switch");
    for (w, vars) in modules.iter().rev() {
        destroy(w, vars);
    }
    project.assert_empty("after our layouts destroyed what terraform-provider-openstack made");
}
