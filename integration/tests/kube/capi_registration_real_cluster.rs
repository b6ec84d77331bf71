//! node-manager's Secret `kube-system/d8-node-manager-cloud-provider` for the clouds whose
//! machines node-manager orders through machine-controller-manager: the real
//! `capi --cloud openstack|vsphere|local` against the kit's API server, with the installer's
//! record (`d8-provider-cluster-configuration`) as dhctl leaves it. Each writes the fields
//! and values of its Deckhouse module's `registration.yaml`, from the same cloud-config
//! the ccm reads (vSphere's credentials from upstream's Secret); a changed password is
//! carried over at the next rendering, and a configuration the module would refuse to
//! render leaves the last good Secret alone. No cloud is called. Needs
//! `OVERCAST_TEST_KUBECONFIG`; says it was skipped otherwise.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use overcast_integration::real::{self, wait_for};
use overcast_integration::{binary, free_port, KillOnDrop};
use serde_json::{json, Value};

const NAME: &str = "d8-node-manager-cloud-provider";
const INSTALLER: &str = "d8-provider-cluster-configuration";

fn spawn(kubeconfig: &str, cloud: &str, conf: &Path) -> KillOnDrop {
    KillOnDrop(
        Command::new(binary("capi"))
            .arg(format!("--cloud={cloud}"))
            .arg(format!("--cloud-config={}", conf.display()))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg("--registration-period=1")
            .arg(format!(
                "--leader-elect-lease-name=overcast-it-registration-{cloud}-{}",
                std::process::id()
            ))
            .arg(format!("--metrics-address=127.0.0.1:{}", free_port()))
            .stderr(Stdio::inherit())
            .spawn()
            .expect("capi"),
    )
}

/// The installer's record: its cluster configuration (YAML) and discovery data (JSON).
async fn installer(secrets: &Api<Secret>, configuration: Value, discovery: Value) {
    let _ = secrets.delete(INSTALLER, &DeleteParams::default()).await;
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": INSTALLER},
                "stringData": {
                    "cloud-provider-cluster-configuration.yaml": serde_json::to_string(&configuration).unwrap(),
                    "cloud-provider-discovery-data.json": discovery.to_string(),
                },
            }))
            .unwrap(),
        )
        .await
        .expect("the installer's record");
}

/// The Secret's fields once `ready` holds of them.
async fn registered(
    secrets: &Api<Secret>,
    what: &str,
    ready: impl Fn(&std::collections::BTreeMap<String, String>) -> bool,
) -> std::collections::BTreeMap<String, String> {
    wait_for(what, Duration::from_secs(30), async || {
        let data: std::collections::BTreeMap<String, String> = secrets
            .get_opt(NAME)
            .await
            .ok()??
            .data?
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect();
        ready(&data).then_some(data)
    })
    .await
}

fn object(data: &std::collections::BTreeMap<String, String>, key: &str) -> Value {
    serde_json::from_str(&data[key]).unwrap()
}

const CLOUD_CONF: &str = "[Global]\nauth-url = https://keystone.example:5000/v3\nusername = deckhouse\npassword = first\ntenant-name = k8s\ndomain-name = Default\nregion = RegionOne\n";

#[tokio::test]
async fn capi_keeps_node_manager_s_secret_for_openstack_vsphere_and_local() {
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(kubeconfig) = real::kubeconfig("the node-manager registration test") else {
        return;
    };
    let client = real::client(&kubeconfig).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let dir = tempfile::tempdir().unwrap();

    // OpenStack: the connection from cloud.conf, the rest from the discovery data.
    let _ = secrets.delete(NAME, &DeleteParams::default()).await;
    installer(
        &secrets,
        json!({"apiVersion": "deckhouse.io/v1", "kind": "OpenStackClusterConfiguration", "sshPublicKey": "ssh-rsa AAA"}),
        json!({
            "instances": {"sshKeyPairName": "k8s", "imageName": "ubuntu-22-04", "mainNetwork": "k8s-int", "securityGroups": ["k8s"]},
            "internalNetworkNames": ["k8s-int"],
            "externalNetworkNames": ["public"],
            "podNetworkMode": "DirectRoutingWithPortSecurityEnabled",
            "zones": ["nova", "az2"],
        }),
    )
    .await;
    let conf = dir.path().join("cloud.conf");
    std::fs::write(&conf, CLOUD_CONF).unwrap();
    let process = spawn(&kubeconfig, "openstack", &conf);
    let data = registered(&secrets, "the OpenStack registration", |d| {
        d.get("type").map(String::as_str) == Some("openstack")
    })
    .await;
    assert_eq!(data["region"], "RegionOne");
    assert_eq!(data["zones"], "[\"nova\",\"az2\"]");
    assert_eq!(data["instanceClassKind"], "OpenStackInstanceClass");
    assert_eq!(data["machineClassKind"], "OpenStackMachineClass");
    let os = object(&data, "openstack");
    assert_eq!(
        os["connection"],
        json!({"authURL": "https://keystone.example:5000/v3", "username": "deckhouse", "password": "first",
               "domainName": "Default", "tenantName": "k8s", "region": "RegionOne"})
    );
    assert_eq!(os["instances"]["mainNetwork"], "k8s-int");
    assert_eq!(os["internalNetworkNames"], json!(["k8s-int"]));
    assert_eq!(os["externalNetworkNames"], json!(["public"]));
    assert_eq!(os["podNetworkMode"], "DirectRoutingWithPortSecurityEnabled");
    // A rotated password reaches node-manager.
    std::fs::write(
        &conf,
        CLOUD_CONF.replace("password = first", "password = second"),
    )
    .unwrap();
    registered(&secrets, "the new password registered", |d| {
        d.get("openstack")
            .and_then(|o| serde_json::from_str::<Value>(o).ok())
            .is_some_and(|o| o["connection"]["password"] == "second")
    })
    .await;
    // What the module would refuse to render (no region): the last good Secret stays.
    std::fs::write(&conf, CLOUD_CONF.replace("region = RegionOne\n", "")).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let kept = registered(&secrets, "the last good Secret", |_| true).await;
    assert_eq!(kept["region"], "RegionOne");
    drop(process);

    // vSphere: the vCenter from vsphere.conf, its credentials from upstream's Secret, the
    // rest from the cluster configuration.
    let _ = secrets
        .delete("overcast-it-vsphere-creds", &DeleteParams::default())
        .await;
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "overcast-it-vsphere-creds"},
                "stringData": {"vc.example.username": "k8s@vsphere.local", "vc.example.password": "from-secret"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    installer(
        &secrets,
        json!({
            "apiVersion": "deckhouse.io/v1", "kind": "VsphereClusterConfiguration",
            "region": "moscow", "zones": ["ru-central-a"], "sshPublicKey": "ssh-rsa BBB",
            "vmFolderPath": "dev/k8s", "regionTagCategory": "k8s-region", "zoneTagCategory": "k8s-zone",
            "masterNodeGroup": {"replicas": 1, "instanceClass": {"template": "Templates/ubuntu", "datastore": "ds-1", "numCPUs": 4, "memory": 8192}},
        }),
        json!({"resourcePoolPath": "k8s-pool"}),
    )
    .await;
    let conf = dir.path().join("vsphere.conf");
    std::fs::write(
        &conf,
        "[Global]\ninsecure-flag = true\nsecret-name = \"overcast-it-vsphere-creds\"\nsecret-namespace = \"kube-system\"\n\n[VirtualCenter \"vc.example\"]\ndatacenters = \"dc-1\"\n",
    )
    .unwrap();
    let process = spawn(&kubeconfig, "vsphere", &conf);
    let data = registered(&secrets, "the vSphere registration", |d| {
        d.get("type").map(String::as_str) == Some("vsphere")
    })
    .await;
    assert!(!data.contains_key("region"), "{data:?}");
    assert_eq!(data["zones"], "[\"ru-central-a\"]");
    assert_eq!(data["instanceClassKind"], "VsphereInstanceClass");
    assert_eq!(data["machineClassKind"], "VsphereMachineClass");
    assert_eq!(
        object(&data, "vsphere"),
        json!({
            "server": "vc.example", "username": "k8s@vsphere.local", "password": "from-secret",
            "insecure": true, "regionTagCategory": "k8s-region", "zoneTagCategory": "k8s-zone",
            "region": "moscow", "sshKey": "ssh-rsa BBB", "vmFolderPath": "dev/k8s",
            "instanceClassDefaults": {"disableTimesync": true, "resourcePoolPath": "k8s-pool",
                                      "template": "Templates/ubuntu", "datastore": "ds-1"},
        })
    );
    // The credentials Secret deleted, then the configuration changed: the next rendering
    // keeps the credentials last read (as the ccm does), not the last Secret.
    secrets
        .delete("overcast-it-vsphere-creds", &DeleteParams::default())
        .await
        .unwrap();
    let mut configuration = json!({
        "apiVersion": "deckhouse.io/v1", "kind": "VsphereClusterConfiguration",
        "region": "moscow", "zones": ["ru-central-b"], "sshPublicKey": "ssh-rsa BBB",
        "vmFolderPath": "dev/k8s", "regionTagCategory": "k8s-region", "zoneTagCategory": "k8s-zone",
    });
    configuration["masterNodeGroup"] = json!({"replicas": 1, "instanceClass": {"template": "Templates/ubuntu", "datastore": "ds-1", "numCPUs": 4, "memory": 8192}});
    installer(
        &secrets,
        configuration,
        json!({"resourcePoolPath": "k8s-pool"}),
    )
    .await;
    let data = registered(&secrets, "the vSphere registration re-rendered", |d| {
        d.get("zones").map(String::as_str) == Some("[\"ru-central-b\"]")
    })
    .await;
    assert_eq!(object(&data, "vsphere")["password"], "from-secret");
    drop(process);

    // Local: its zone and region, no classes.
    let conf = dir.path().join("local.yaml");
    std::fs::write(&conf, "zone: rack-1\nregion: dc-1\n").unwrap();
    let process = spawn(&kubeconfig, "local", &conf);
    let data = registered(&secrets, "the local registration", |d| {
        d.get("type").map(String::as_str) == Some("local")
    })
    .await;
    assert_eq!(data["zones"], "[\"rack-1\"]");
    assert_eq!(data["region"], "dc-1");
    assert_eq!(data["instanceClassKind"], "");
    drop(process);

    for s in [NAME, INSTALLER, "overcast-it-vsphere-creds"] {
        let _ = secrets.delete(s, &DeleteParams::default()).await;
    }
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client, "kube-system");
    for cloud in ["openstack", "vsphere", "local"] {
        let name = format!("overcast-it-registration-{cloud}-{}", std::process::id());
        let _ = leases.delete(&name, &DeleteParams::default()).await;
    }
}
