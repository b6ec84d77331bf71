//! Each layout through the cycle dhctl runs: base-infrastructure, a master, a static node
//! (each applied, then planned again to no change), then destroy in dhctl's order, which
//! leaves nothing in Nova, Cinder or Neutron. The standard layout, which has every kind of
//! resource the others have, goes further: each step planned by the machine's newer
//! Terraform too, and real changes made in place (the etcd volume grown, an SSH source
//! added to the layout's security group). Only it: each Terraform command costs the
//! services some seconds of Keystone's token validation, and the CI's time is shared.

use super::*;

/// What the cycle checks of a master in Nova: its server ACTIVE with its volumes attached
/// (the root one and kubernetes-data), and whether it has a floating IP.
fn check_master(admin: &Admin, cluster: &Cluster, outputs: &Value) {
    let name = format!("{}-master-0", cluster.prefix);
    let found = admin.get(&format!("nova:/servers/detail?all_tenants=1&name=^{name}$"));
    let server = &found["servers"][0];
    assert_eq!(server["status"], "ACTIVE", "{name}: {server}");
    let volumes = server["os-extended-volumes:volumes_attached"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(
        volumes, 2,
        "{name} boots from its root volume and has kubernetes-data: {server}"
    );
    let floating = server["addresses"]
        .as_object()
        .into_iter()
        .flat_map(|a| a.values())
        .flat_map(|v| v.as_array().cloned().unwrap_or_default())
        .any(|a| a["OS-EXT-IPS:type"] == "floating");
    let wants_floating = matches!(
        cluster.layout,
        Layout::Standard | Layout::SimpleWithInternalNetwork
    );
    assert_eq!(floating, wants_floating, "{name}'s floating IP: {server}");
    let ssh = outputs["master_ip_address_for_ssh"]["value"]
        .as_str()
        .unwrap_or_default();
    let internal = outputs["node_internal_ip_address"]["value"]
        .as_str()
        .unwrap_or_default();
    assert!(!ssh.is_empty() && !internal.is_empty(), "{outputs}");
    if wants_floating {
        assert!(
            ssh.starts_with("172.24.4."),
            "the floating IP is the way in: {outputs}"
        );
        assert_ne!(ssh, internal);
    }
    assert_eq!(
        outputs["kubernetes_data_device_path"]["value"], "/dev/sdb",
        "{outputs}"
    );
}

/// The discovery data every layout gives dhctl (`OpenStackCloudDiscoveryData`), its keys
/// as the schema's branch for the layout requires them.
fn check_discovery(cluster: &Cluster, outputs: &Value) {
    let d = &outputs["cloud_discovery_data"]["value"];
    assert_eq!(d["apiVersion"], "deckhouse.io/v1", "{d}");
    assert_eq!(d["kind"], "OpenStackCloudDiscoveryData");
    assert_eq!(d["layout"], cluster.layout.name());
    assert_eq!(d["zones"], json!(["nova"]), "{d}");
    assert_eq!(d["instances"]["sshKeyPairName"], cluster.prefix.as_str());
    assert_eq!(d["instances"]["imageName"], "fake-image");
    let (internal, main) = match cluster.layout {
        Layout::Standard => (cluster.prefix.as_str(), cluster.prefix.as_str()),
        Layout::StandardWithNoRouter => (cluster.prefix.as_str(), "public"),
        Layout::Simple => ("public", "public"),
        Layout::SimpleWithInternalNetwork => ("net1", "net1"),
    };
    assert_eq!(d["internalNetworkNames"], json!([internal]), "{d}");
    assert_eq!(d["instances"]["mainNetwork"], main, "{d}");
    match cluster.layout {
        Layout::Standard => {
            assert_eq!(d["externalNetworkNames"], json!(["public"]));
            assert_eq!(d["podNetworkMode"], "DirectRoutingWithPortSecurityEnabled");
            assert_eq!(d["instances"]["securityGroups"], json!([cluster.prefix]));
            assert!(
                d["loadBalancer"]["subnetID"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{d}"
            );
        }
        Layout::StandardWithNoRouter => {
            assert_eq!(
                d["instances"]["additionalNetworks"],
                json!([cluster.prefix])
            );
        }
        Layout::Simple => assert_eq!(d["podNetworkMode"], "VXLAN"),
        Layout::SimpleWithInternalNetwork => {
            // As Deckhouse's layout writes it: the external network by its id.
            let id = d["externalNetworkNames"][0].as_str().unwrap_or_default();
            assert_eq!(d["loadBalancer"]["floatingNetworkID"], id, "{d}");
        }
    }
}

async fn cycle(layout: Layout, cidr: &str) {
    let Some(admin) = Admin::new(&format!("the OpenStack {} layout", layout.name())) else {
        return;
    };
    let Some(bin) = terraform_binary("the OpenStack layouts") else {
        return;
    };
    let _turn = TURN.lock().await;
    let _copies = ImageCopies::new();
    let project = admin.project(&format!("ostf-{}", layout.dir().replace("-with-", "-w-")));
    let cluster = Cluster::new(&admin, &project, layout, cidr);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let layouts = terraform::copy_layouts("openstack", root);

    let base = step(&bin, root, &layouts, layout, "base-infrastructure");
    let base_vars = cluster.var_file(root, "base-infrastructure", 0);
    tf(|| {
        expect(
            &base.plan(&[&base_vars]),
            2,
            "base-infrastructure's first plan",
        )
    });
    apply(&base, &base_vars);
    unchanged(&base, &base_vars, "base-infrastructure after its apply");
    let discovery = tf(|| base.outputs())["cloud_discovery_data"]["value"].clone();
    check_discovery(
        &cluster,
        &json!({"cloud_discovery_data": {"value": discovery}}),
    );
    // node-manager's machine class for this cluster names what the cloud has.
    if let Some(mc) = machine_class(&admin, &cluster, root, &discovery) {
        check_machine_class(&admin, &project, &cluster, &mc, &discovery);
    }

    let master = step(&bin, root, &layouts, layout, "master-node");
    let master_vars = cluster.var_file(root, "master-node", 0);
    apply(&master, &master_vars);
    unchanged(&master, &master_vars, "the master after its apply");
    check_master(&admin, &cluster, &tf(|| master.outputs()));

    let node = step(&bin, root, &layouts, layout, "static-node");
    let node_vars = cluster.var_file(root, "static-node", 0);
    apply(&node, &node_vars);
    unchanged(&node, &node_vars, "the static node after its apply");
    let server = admin.get(&format!(
        "nova:/servers/detail?all_tenants=1&name=^{}-worker-0$",
        cluster.prefix
    ));
    assert_eq!(server["servers"][0]["status"], "ACTIVE", "{server}");

    if layout != Layout::Standard {
        destroy(&node, &node_vars);
        destroy(&master, &master_vars);
        destroy(&base, &base_vars);
        project.assert_empty("after destroy");
        return;
    }
    if let Some(newer) = &terraform::newer("the OpenStack layouts", &bin) {
        for (w, vars, what) in [
            (&base, &base_vars, "base-infrastructure"),
            (&master, &master_vars, "the master"),
            (&node, &node_vars, "the static node"),
        ] {
            let w = w.using(newer);
            tf(|| {
                expect(
                    &w.plan(&[vars]),
                    0,
                    &format!("{what}, planned by the newer Terraform"),
                )
            });
        }
    }

    // The etcd volume grown: in place, online (Cinder's extend of a volume in use).
    let mut grown = Cluster {
        vars: cluster.vars.clone(),
        ..cluster
    };
    grown.vars["providerClusterConfiguration"]["masterNodeGroup"]["instanceClass"]
        ["etcdDiskSizeGb"] = json!(2);
    let grown_vars = grown.var_file(root, "master-node", 0);
    let plan = tf(|| master.plan(&[&grown_vars]));
    expect(&plan, 2, "a bigger etcd volume");
    assert!(
        plan.stdout.contains("0 to add, 1 to change, 0 to destroy"),
        "{}",
        plan.stdout
    );
    apply(&master, &grown_vars);
    unchanged(
        &master,
        &grown_vars,
        "the master after its etcd volume grew",
    );
    let volumes = admin.get(&format!(
        "cinder:/volumes/detail?all_tenants=1&name={}-kubernetes-data-0",
        grown.prefix
    ));
    assert_eq!(volumes["volumes"][0]["size"], 2, "{volumes}");

    // The layout's group gains an SSH source: one rule more, the group kept.
    let mut wider = Cluster {
        vars: grown.vars.clone(),
        ..grown
    };
    wider.vars["providerClusterConfiguration"]["sshAllowList"] =
        json!(["0.0.0.0/0", "10.20.0.0/16"]);
    let wider_vars = wider.var_file(root, "base-infrastructure", 0);
    let plan = tf(|| base.plan(&[&wider_vars]));
    expect(&plan, 2, "an SSH source more");
    assert!(
        plan.stdout.contains("1 to add, 0 to change, 0 to destroy"),
        "{}",
        plan.stdout
    );
    apply(&base, &wider_vars);
    unchanged(
        &base,
        &wider_vars,
        "base-infrastructure after its rule was added",
    );

    // dhctl's order: the nodes, the masters, base-infrastructure.
    destroy(&node, &node_vars);
    destroy(&master, &wider.var_file(root, "master-node", 0));
    destroy(&base, &wider_vars);
    project.assert_empty("after destroy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standard_layout_runs_dhctl_s_cycle_on_openstack() {
    cycle(Layout::Standard, "192.168.201.0/24").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standard_with_no_router_layout_runs_dhctl_s_cycle_on_openstack() {
    cycle(Layout::StandardWithNoRouter, "192.168.202.0/24").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simple_layout_runs_dhctl_s_cycle_on_openstack() {
    cycle(Layout::Simple, "192.168.203.0/24").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simple_with_internal_network_layout_runs_dhctl_s_cycle_on_openstack() {
    cycle(Layout::SimpleWithInternalNetwork, "192.168.204.0/24").await;
}
