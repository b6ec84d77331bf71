//! node-manager's machine class for a cluster a layout made, rendered as Helm renders it
//! and checked against what the cloud has.

use super::*;

/// The OpenStackMachineClass node-manager renders for `worker`'s class in zone `nova`
/// (`deploy/node-manager/openstack/machine-class.yaml`, rendered as Helm renders it by
/// `OVERCAST_TEST_HELM_RENDER`), from what `capi --cloud openstack` registers for this
/// cluster: its cloud.conf and the discovery data base-infrastructure gave. `None` (said
/// skipped) without the renderer.
pub(crate) fn machine_class(
    admin: &Admin,
    cluster: &Cluster,
    root: &Path,
    discovery: &Value,
) -> Option<Value> {
    let Ok(render) = std::env::var("OVERCAST_TEST_HELM_RENDER") else {
        overcast_integration::say_skipped(
            "set OVERCAST_TEST_HELM_RENDER to integration/tools/helm-render built (.ci/run builds it) to render node-manager's OpenStack machine class",
        );
        return None;
    };
    let env = &admin.env;
    let pcc = &cluster.vars["providerClusterConfiguration"];
    let conf = root.join("registration-cloud.conf");
    std::fs::write(
        &conf,
        format!(
            "[Global]\nauth-url = {}\nusername = {}\npassword = {}\ndomain-name = Default\ntenant-name = {}\nregion = {}\n",
            env["OS_AUTH_URL"], env["OS_USERNAME"], env["OS_PASSWORD"],
            pcc["provider"]["tenantName"].as_str().unwrap(), env["OS_REGION_NAME"],
        ),
    )
    .unwrap();
    let config = overcast_cloud_openstack::Config::load_with_env(Some(&conf), &|_| None).unwrap();
    let facts = overcast_capi::registration::InstallerFacts {
        configuration: pcc.clone(),
        discovery: discovery.clone(),
    };
    let openstack = overcast_capi::registration::openstack_connection(&config, None, &facts)
        .expect("capi registers this cluster");
    let class = &pcc["nodeGroups"][0]["instanceClass"];
    let values = json!({
        "Values": {
            "global": {"discovery": {"clusterUUID": cluster.vars["clusterUUID"], "podSubnet": "10.111.0.0/16"}},
            "nodeManager": {"internal": {"cloudProvider": {"openstack": openstack}}},
        },
        "nodeGroup": {"name": "worker", "instanceClass": class,
                      "cloudInstances": {"classReference": {"kind": "OpenStackInstanceClass", "name": "worker"}}},
        "zoneName": "nova",
    });
    let values_path = root.join("machine-class-values.json");
    std::fs::write(&values_path, values.to_string()).unwrap();
    // Deckhouse's helm_lib stand-in: the module's labels.
    let helpers = root.join("helm-lib.tpl");
    std::fs::write(
        &helpers,
        "{{- define \"helm_lib_module_labels\" }}labels:\n  heritage: deckhouse\n  module: cloud-provider-openstack{{ end }}\n",
    )
    .unwrap();
    let template = overcast_integration::package_dir()
        .join("../deploy/node-manager/openstack/machine-class.yaml");
    let out = Command::new(render)
        .arg(&values_path)
        .arg(&template)
        .arg(&helpers)
        .output()
        .expect("helm-render");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    Some(serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}:\n{text}")))
}

/// The machine class names what the cloud has: its flavor, image, key pair, zone, every
/// network (the pod network allowed on the internal ones when the layout routes pods with
/// port security) and security group — the servers MCM makes from it are the ones the
/// layout's nodes are.
pub(crate) fn check_machine_class(
    admin: &Admin,
    project: &Project,
    cluster: &Cluster,
    mc: &Value,
    discovery: &Value,
) {
    assert_eq!(mc["kind"], "OpenStackMachineClass", "{mc}");
    let spec = &mc["spec"];
    assert_eq!(spec["availabilityZone"], "nova");
    assert_eq!(spec["region"], admin.env["OS_REGION_NAME"].as_str());
    assert_eq!(spec["flavorName"], "m1.small");
    assert_eq!(spec["imageName"], "fake-image");
    assert_eq!(spec["keyName"], cluster.prefix.as_str(), "{mc}");
    assert!(!admin
        .get(&format!("nova:/os-keypairs/{}", cluster.prefix))
        .is_null());
    let internal: Vec<&Value> = discovery["internalNetworkNames"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    let routed = discovery["podNetworkMode"] == "DirectRoutingWithPortSecurityEnabled";
    let networks = spec["networks"].as_array().expect("networks");
    assert_eq!(
        networks[0]["name"], discovery["instances"]["mainNetwork"],
        "the main network first: {mc}"
    );
    for n in networks {
        let found = admin.get(&format!(
            "neutron:/networks?name={}",
            n["name"].as_str().unwrap()
        ));
        assert_eq!(
            found["networks"].as_array().map_or(0, Vec::len),
            1,
            "{n} in Neutron"
        );
        let pod = internal.contains(&&n["name"]) && routed;
        assert_eq!(n["podNetwork"].as_bool().unwrap_or(false), pod, "{n}");
    }
    for g in spec["securityGroups"].as_array().into_iter().flatten() {
        let found = admin.get(&format!(
            "neutron:/security-groups?name={}&project_id={}",
            g.as_str().unwrap(),
            project.id
        ));
        assert_eq!(
            found["security_groups"].as_array().map_or(0, Vec::len),
            1,
            "{g} in the project"
        );
    }
    let tags = spec["tags"].as_object().expect("tags");
    assert!(tags.contains_key(&format!(
        "kubernetes.io-cluster-deckhouse-{}",
        cluster.vars["clusterUUID"].as_str().unwrap()
    )));
    assert!(tags.contains_key("kubernetes.io-role-deckhouse-worker-nova"));
}
