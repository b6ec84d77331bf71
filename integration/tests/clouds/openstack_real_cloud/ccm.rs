//! The real `ccm --cloud openstack` with an operator's cloud.conf against the kit's API
//! server and the simulator's real Nova and Neutron: Nodes named as servers are
//! initialized from them (providerID, flavor, zone, region, addresses — a two-NIC server's
//! first InternalIP the same on every sync), a stopped server's node is tainted and
//! untainted, a deleted server's NotReady node deleted. Then a Nova that answers wrong —
//! through a Keystone region whose compute endpoint is a [`FaultyFront`] before the real
//! Nova: a 503 page, an HTML page, an empty list after a full one — and a Keystone that
//! hangs delete no node; the same node is deleted once the server is really gone. Needs
//! `OVERCAST_TEST_KUBECONFIG` (the kit's API server) besides the simulator's openrc.

use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, PostParams};
use overcast_integration::faulty_front::{Fault, FaultyFront};
use overcast_integration::{binary, free_port, say_skipped, KillOnDrop};

use super::keystone::{Keystone, FAULTY_REGION};

use super::*;

const KUBE_ENV: &str = "OVERCAST_TEST_KUBECONFIG";
const SHUTDOWN_TAINT: &str = "node.cloudprovider.kubernetes.io/shutdown";

pub fn kubeconfig() -> Option<String> {
    let k = std::env::var(KUBE_ENV).ok();
    if k.is_none() {
        say_skipped(&format!(
            "set {KUBE_ENV} (a disposable cluster's kubeconfig) besides {ENV} to run the ccm on OpenStack"
        ));
    }
    k
}

pub async fn wait<T>(what: &str, limit: u64, f: impl AsyncFnMut() -> Option<T>) -> T {
    overcast_integration::real::wait_for(what, Duration::from_secs(limit), f).await
}

/// A Node as a kubelet registering with `--cloud-provider=external` makes it: tainted
/// uninitialized, no status (NotReady: no Ready condition).
fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]},
    }))
    .unwrap()
}

/// The ccm binary as the openstack overlay runs it, syncing every 2 s.
fn ccm(kubeconfig: &str, conf: &std::path::Path, lease: &str) -> KillOnDrop {
    ccm_with(kubeconfig, conf, lease, &[])
}

/// The real ccm as [`ccm`] starts it, with `extra` arguments.
fn ccm_with(kubeconfig: &str, conf: &std::path::Path, lease: &str, extra: &[&str]) -> KillOnDrop {
    KillOnDrop(
        Command::new(binary("ccm"))
            .args(extra)
            .arg("--cloud=openstack")
            .arg(format!("--cloud-config={}", conf.display()))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg("--node-sync-period=2")
            .arg(format!("--leader-elect-lease-name={lease}"))
            .arg(format!("--metrics-address=127.0.0.1:{}", free_port()))
            .stderr(Stdio::inherit())
            .spawn()
            .expect("ccm"),
    )
}

/// Neutron's answer to `path` (GET), as the admin.
async fn network_get(cloud: &Cloud, path: &str) -> Value {
    let resp = cloud
        .os
        .call(Service::Network, "it_get", Method::GET, path, None, None)
        .await
        .expect("neutron");
    serde_json::from_slice(&resp.body).unwrap_or(Value::Null)
}

/// A network with one subnet, found by name or made.
async fn network(cloud: &Cloud, name: &str, cidr: &str) -> String {
    let found = network_get(cloud, &format!("/v2.0/networks?name={name}")).await;
    if let Some(id) = found["networks"][0]["id"].as_str() {
        return id.to_owned();
    }
    let made = cloud
        .os
        .call(
            Service::Network,
            "it_network",
            Method::POST,
            "/v2.0/networks",
            Some(&json!({"network": {"name": name}})),
            None,
        )
        .await
        .expect("network");
    let made: Value = serde_json::from_slice(&made.body).unwrap();
    let id = made["network"]["id"]
        .as_str()
        .expect("network id")
        .to_owned();
    cloud
        .os
        .call(
            Service::Network,
            "it_subnet",
            Method::POST,
            "/v2.0/subnets",
            Some(
                &json!({"subnet": {"network_id": id, "ip_version": 4, "cidr": cidr, "name": name}}),
            ),
            None,
        )
        .await
        .expect("subnet");
    id
}

/// A server's fixed IP on `network` (its port there, found by Neutron).
async fn fixed_ip_on(cloud: &Cloud, server: &str, network: &str) -> String {
    let ports = network_get(
        cloud,
        &format!("/v2.0/ports?device_id={server}&network_id={network}"),
    )
    .await;
    ports["ports"][0]["fixed_ips"][0]["ip_address"]
        .as_str()
        .unwrap_or_else(|| panic!("{server} has no port on {network}: {ports}"))
        .to_owned()
}

async fn server_action(cloud: &Cloud, id: &str, action: &str, status: &str) {
    let (code, body) = cloud
        .compute(
            "it_action",
            Method::POST,
            &format!("/servers/{id}/action"),
            Some(&json!({ action: null })),
        )
        .await;
    assert_eq!(code, 202, "{action}: {body}");
    for _ in 0..240 {
        let (_, s) = cloud
            .compute("server_get", Method::GET, &format!("/servers/{id}"), None)
            .await;
        if s["server"]["status"] == status {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("server {id} not {status} after {action}");
}

fn internal_ips(n: &Node) -> Vec<String> {
    n.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
        .collect()
}

fn tainted(n: &Node, key: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

async fn delete_nodes(nodes: &Api<Node>, prefix: &str) {
    for n in nodes.list(&Default::default()).await.expect("nodes") {
        let name = n.metadata.name.unwrap_or_default();
        if name.starts_with(prefix) {
            let _ = nodes.delete(&name, &DeleteParams::default()).await;
        }
    }
}

/// The cloud and the cluster, what an earlier run left of ours removed from both; `None`
/// (said SKIPPED) without either.
async fn setup() -> Option<(Cloud, String, Api<Node>)> {
    let cloud = Cloud::new()?;
    let kubeconfig = kubeconfig()?;
    cloud.sweep().await;
    let nodes: Api<Node> = Api::all(overcast_integration::real::client(&kubeconfig).await);
    delete_nodes(&nodes, "overcast-it-os-").await;
    Some((cloud, kubeconfig, nodes))
}

#[tokio::test]
async fn the_ccm_initializes_nodes_from_nova_and_follows_their_servers() {
    let _turn = CLOUD.lock().await;
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some((cloud, kubeconfig, nodes)) = setup().await else {
        return;
    };
    let net2 = network(&cloud, "overcast-it-net2", "10.77.0.0/24").await;
    let net1 = cloud.env["OSSIM_NET_ID"].clone();
    let both = [net1.clone(), net2];
    let (one, two) = tokio::join!(
        cloud.boot_on("overcast-it-os-one", std::slice::from_ref(&net1)),
        cloud.boot_on("overcast-it-os-two", &both),
    );
    for name in ["overcast-it-os-one", "overcast-it-os-two"] {
        nodes
            .create(&PostParams::default(), &node(name))
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let conf = cloud_conf_through_login_cache(&cloud.env, dir.path());
    let _ccm = ccm(&kubeconfig, &conf, "overcast-it-os-ccm");

    // Initialized, and addressed: the taint goes in one patch and the addresses come in
    // the status patch after it (a CI run here read the node between the two).
    let got = wait("both nodes initialized", 60, async || {
        let a = nodes.get("overcast-it-os-one").await.ok()?;
        let b = nodes.get("overcast-it-os-two").await.ok()?;
        let done = |n: &Node, nics: usize| {
            !tainted(n, "node.cloudprovider.kubernetes.io/uninitialized")
                && internal_ips(n).len() >= nics
        };
        (done(&a, 1) && done(&b, 2)).then_some((a, b))
    })
    .await;
    for (n, id) in [(&got.0, &one), (&got.1, &two)] {
        assert_eq!(
            n.spec.as_ref().unwrap().provider_id.as_deref(),
            Some(format!("openstack:///{id}").as_str())
        );
        let labels = n.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels["node.kubernetes.io/instance-type"], "m1.small");
        assert_eq!(labels["topology.kubernetes.io/zone"], "nova");
        assert_eq!(
            labels["topology.kubernetes.io/region"],
            cloud.env["OS_REGION_NAME"]
        );
    }
    assert_eq!(
        internal_ips(&got.0),
        [fixed_ip_on(&cloud, &one, &net1).await]
    );
    // Booted with net1 then net2: its first NIC's address first (Nova's NIC order; the two
    // ports were made in the same second, so Neutron's timestamps cannot tell).
    let two_ips = [
        fixed_ip_on(&cloud, &two, &net1).await,
        fixed_ip_on(&cloud, &two, &both[1]).await,
    ];
    assert_eq!(
        internal_ips(&got.1),
        two_ips,
        "the boot NIC's address first"
    );
    // Several syncs later the two-NIC node's first InternalIP is still the same.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let later = nodes.get("overcast-it-os-two").await.unwrap();
    assert_eq!(internal_ips(&later), two_ips, "stable across syncs");

    // Stopped: the NotReady node is tainted shut down; started: the taint goes.
    server_action(&cloud, &one, "os-stop", "SHUTOFF").await;
    wait("the shutdown taint", 60, async || {
        tainted(&nodes.get("overcast-it-os-one").await.ok()?, SHUTDOWN_TAINT).then_some(())
    })
    .await;
    server_action(&cloud, &one, "os-start", "ACTIVE").await;
    wait("the shutdown taint removed", 60, async || {
        (!tainted(&nodes.get("overcast-it-os-one").await.ok()?, SHUTDOWN_TAINT)).then_some(())
    })
    .await;

    // Deleted: its NotReady node goes.
    cloud.delete_server(&two).await;
    wait("the node of the deleted server deleted", 60, async || {
        nodes
            .get_opt("overcast-it-os-two")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(nodes.get_opt("overcast-it-os-one").await.unwrap().is_some());
    delete_nodes(&nodes, "overcast-it-os-").await;
    cloud.delete_server(&one).await;
}

/// Nova's answers made wrong in front of it, and Keystone hanging: no node is deleted on
/// any of them — not even the one node of a cluster whose server list came back empty
/// (the deletion guard lets a one-node cluster lose its node; the provider refuses an
/// empty list after a full one). Then the server really deleted: the node goes, so the
/// same node could have been deleted all along. A second server stays in the project
/// throughout, as the server the ccm itself runs on does in a real cluster: without it the
/// real deletion leaves an empty list, which the provider refuses by design (a CI run
/// found the project otherwise empty when this test ran first).
#[tokio::test]
async fn a_wrong_or_missing_answer_from_nova_or_keystone_deletes_no_node() {
    let _turn = CLOUD.lock().await;
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some((cloud, kubeconfig, nodes)) = setup().await else {
        return;
    };
    let lone = cloud.boot("overcast-it-os-lone").await;
    let keeper = cloud.boot("overcast-it-os-keeper").await;
    nodes
        .create(&PostParams::default(), &node("overcast-it-os-lone"))
        .await
        .unwrap();

    let keystone = Keystone::new(&cloud).await;
    let (_, nova_url) = keystone.endpoint("compute", &cloud.env["OS_REGION_NAME"]);
    let nova: http::Uri = nova_url.parse().unwrap();
    let upstream = format!("{}:{}", nova.host().unwrap(), nova.port_u16().unwrap_or(80))
        .parse()
        .expect("Nova's address");
    let front = FaultyFront::start(upstream).await;
    keystone.faulty_region(&cloud.env["OS_REGION_NAME"], &front, "compute");
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("cloud.conf");
    let home = std::fs::read_to_string(cloud_conf(&cloud.env, dir.path())).unwrap();
    std::fs::write(
        &conf,
        home.replace(
            &format!("region = {}", cloud.env["OS_REGION_NAME"]),
            &format!("region = {FAULTY_REGION}"),
        ),
    )
    .unwrap();
    let exists = async || {
        nodes
            .get_opt("overcast-it-os-lone")
            .await
            .unwrap()
            .is_some()
    };

    let mut ccm_proc = ccm(&kubeconfig, &conf, "overcast-it-os-faulty");
    wait("the node initialized through the front", 60, async || {
        let n = nodes.get("overcast-it-os-lone").await.ok()?;
        (n.spec?.provider_id? == format!("openstack:///{lone}")).then_some(())
    })
    .await;
    for (what, fault) in [
        ("an empty server list", Fault::json(json!({"servers": []}))),
        // What a token of another project (an edited secret) reads as: the node's server
        // not found, and no server listed at all.
        (
            "a 404 for every server",
            Fault::Answer {
                status: 404,
                content_type: "application/json",
                body: json!({"itemNotFound": {"code": 404, "message": "Instance could not be found."}}).to_string(),
            },
        ),
        // The same, but the listing answers: every node's server 404, and the project
        // lists none where the ccm saw servers — a wrong answer, not a cluster gone.
        (
            "a 404 for every server and an empty listing",
            Fault::EveryServerGone,
        ),
        ("a 503 page", Fault::unavailable()),
        ("an HTML page with 200", Fault::html_page()),
    ] {
        let before = front.faulted();
        front.set(fault);
        // Three syncs' worth, each of which met the fault.
        tokio::time::sleep(Duration::from_secs(7)).await;
        assert!(front.faulted() > before, "{what}: the ccm asked Nova");
        assert!(exists().await, "{what}: the node is still there");
    }
    front.set(Fault::Pass);

    // Keystone hangs (paused) under a new ccm, which holds no token yet (a lease of its
    // own: the first ccm's, never released by a kill, would keep it from leading).
    drop(ccm_proc);
    {
        let _paused = Paused::new(service_group(&cloud, "keystone"));
        ccm_proc = ccm(&kubeconfig, &conf, "overcast-it-os-faulty-2");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(exists().await, "Keystone hanging: the node is still there");
    }

    // The server really gone: the same node is deleted.
    cloud.delete_server(&lone).await;
    wait(
        "the node deleted once its server is gone",
        120,
        async || {
            nodes
                .get_opt("overcast-it-os-lone")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    drop(ccm_proc);
    cloud.delete_server(&keeper).await;
    keystone.drop_region();
}

/// A Node as it stands after another ccm initialized it: its providerID set (spelled as
/// that ccm spells it), no taint, and — its kubelet down, a reboot — NotReady.
fn initialized_node(name: &str, provider_id: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "spec": {"providerID": provider_id},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]},
    }))
    .unwrap()
}

/// Nodes of a live server, NotReady, whose providerIDs OCCM spelled — regional
/// (`OS_CCM_REGIONAL=true`), non-regional, the bare `/<id>` some kubelets wrote — are
/// kept, as is one naming another region (an error for that node, as OCCM's, never
/// "gone"); the node of a server that does not exist goes, so the ccm was deciding.
/// (Before: providerIDs were compared as strings, and the regional node of a running
/// server was deleted as "whose instance no longer exists".)
#[tokio::test]
async fn nodes_of_live_servers_are_kept_however_their_provider_id_is_spelled() {
    let _turn = CLOUD.lock().await;
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some((cloud, kubeconfig, nodes)) = setup().await else {
        return;
    };
    let server = cloud.boot("overcast-it-os-spelled").await;
    let region = cloud.env["OS_REGION_NAME"].clone();
    let spellings = [
        (
            "overcast-it-os-regional",
            format!("openstack://{region}/{server}"),
        ),
        ("overcast-it-os-plain", format!("openstack:///{server}")),
        ("overcast-it-os-bare", format!("/{server}")),
        (
            "overcast-it-os-elsewhere",
            format!("openstack://another-region/{server}"),
        ),
    ];
    let gone = "overcast-it-os-gone";
    for (name, pid) in spellings
        .iter()
        .map(|(n, p)| (*n, p.as_str()))
        .chain([(gone, "openstack:///00000000-0000-4000-8000-000000000000")])
    {
        let made = nodes
            .create(&PostParams::default(), &initialized_node(name, pid))
            .await
            .unwrap();
        // The status is the kubelet's to write: set it through the status subresource.
        let status = json!({"status": initialized_node(name, pid).status});
        nodes
            .patch_status(
                &made.metadata.name.unwrap(),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&status),
            )
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let conf = cloud_conf_through_login_cache(&cloud.env, dir.path());
    // The deletion guard off: what keeps a live server's node here is its identity alone
    // (before the fix, three spellings read as missing, and only the guard, refusing all
    // deletions at once, would have hidden it).
    let _ccm = ccm_with(
        &kubeconfig,
        &conf,
        "overcast-it-os-ccm-spelled",
        &["--node-deletion-max-percent=100"],
    );

    wait(
        "the node of the server that does not exist deleted",
        60,
        async || nodes.get_opt(gone).await.ok()?.is_none().then_some(()),
    )
    .await;
    // Several syncs more (every 2 s): every spelling of the live server stays.
    tokio::time::sleep(Duration::from_secs(7)).await;
    for (name, pid) in &spellings {
        let n = nodes
            .get_opt(name)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{name} ({pid}) of a running server was deleted"));
        assert!(!tainted(&n, SHUTDOWN_TAINT), "{name}: its server runs");
    }
    delete_nodes(&nodes, "overcast-it-os-").await;
    cloud.delete_server(&server).await;
}
