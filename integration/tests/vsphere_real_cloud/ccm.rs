//! The real `ccm --cloud vsphere` with an operator's vsphere.conf against the kit's API
//! server and vcsim: Nodes named as the guests' host names are initialized (providerID,
//! instance type, zone and region from tags attached through the REST API, addresses), its
//! session ended by the vCenter is renewed, a powered-off VM's NotReady node is tainted
//! shut down, a destroyed VM's NotReady node
//! is deleted — and with the vCenter stopped mid-run no node is. Needs
//! `OVERCAST_TEST_KUBECONFIG` (the kit's API server) besides `OVERCAST_TEST_VCSIM`.

use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, PostParams};
use overcast_integration::{binary, free_port, say_skipped, KillOnDrop};
use serde_json::json;

use super::sim::{self, Guest, Rest};
use super::*;

const KUBE_ENV: &str = "OVERCAST_TEST_KUBECONFIG";
const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const SHUTDOWN_TAINT: &str = "node.cloudprovider.kubernetes.io/shutdown";
const PREFIX: &str = "overcast-it-vs-";

fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "spec": {"taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]},
    }))
    .unwrap()
}

/// A vcsim started with `args`, the kit's kubeconfig and this test's turn on the kit's
/// Nodes; `None`, saying so, when either is not given.
pub async fn kit_and_vcsim(
    test: &str,
    args: &[&str],
) -> Option<(Vcsim, String, tokio::sync::MutexGuard<'static, ()>)> {
    let sim = Vcsim::start(test, args)?;
    let Ok(kubeconfig) = std::env::var(KUBE_ENV) else {
        say_skipped(&format!(
            "set {KUBE_ENV} besides OVERCAST_TEST_VCSIM to run the ccm on vSphere"
        ));
        return None;
    };
    Some((sim, kubeconfig, KIT_NODES.lock().await))
}

/// The real ccm on vSphere with the kit's API server, syncing nodes every 2 s.
pub fn ccm(
    conf: &std::path::Path,
    kubeconfig: &str,
    lease: &str,
    metrics_port: u16,
    stderr: Stdio,
) -> KillOnDrop {
    KillOnDrop(
        Command::new(binary("ccm"))
            .arg("--cloud=vsphere")
            .arg(format!("--cloud-config={}", conf.display()))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg("--node-sync-period=2")
            .arg(format!("--leader-elect-lease-name={lease}"))
            .arg(format!("--metrics-address=127.0.0.1:{metrics_port}"))
            .stderr(stderr)
            .spawn()
            .expect("ccm"),
    )
}

async fn delete_nodes(nodes: &Api<Node>) {
    for n in nodes.list(&Default::default()).await.expect("nodes") {
        let name = n.metadata.name.unwrap_or_default();
        if name.starts_with(PREFIX) {
            let _ = nodes.delete(&name, &DeleteParams::default()).await;
        }
    }
}

#[tokio::test]
async fn the_ccm_initializes_nodes_from_vcenter_and_deletes_none_while_it_is_silent() {
    let Some((mut sim, kubeconfig, _kit)) = kit_and_vcsim("ccm on vsphere", &[]).await else {
        return;
    };
    let nodes: Api<Node> = Api::all(overcast_integration::real::client(&kubeconfig).await);
    delete_nodes(&nodes).await;

    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let vms = sim::vms(&admin).await;
    let in_cluster: Vec<_> = vms
        .iter()
        .filter(|(n, _)| n.contains("_C0_"))
        .map(|(_, m)| m.clone())
        .collect();
    let (a, b) = (in_cluster[0].clone(), in_cluster[1].clone());
    for (vm, host, ip) in [
        (&a, "overcast-it-vs-a", "10.0.0.5"),
        (&b, "overcast-it-vs-b", "10.0.0.6"),
    ] {
        let guest = Guest {
            host_name: host,
            ip,
            guest_id: "centos7_64Guest",
            cpus: 4,
            memory_mb: 8192,
        };
        sim::reconfigure(&admin, vm, &guest).await;
    }
    let snap =
        overcast_cloud_vsphere::vms::snapshot(&overcast_cloud_vsphere::inventory::View::new(
            Arc::clone(&admin),
            overcast_cloud_vsphere::vms::VIEW_TYPES,
        ))
        .await
        .unwrap();
    let cluster = snap
        .entities
        .keys()
        .find(|m| m.kind == "ClusterComputeResource")
        .unwrap()
        .clone();
    let dc = snap
        .entities
        .keys()
        .find(|m| m.kind == "Datacenter")
        .unwrap()
        .clone();
    let rest = Rest::login(&sim).await;
    let zones = rest.category("k8s-zone").await;
    let regions = rest.category("k8s-region").await;
    rest.tag(&zones, "zone-a", &cluster).await;
    rest.tag(&regions, "region-1", &dc).await;
    let uuid_a = snap
        .vms
        .iter()
        .find(|v| v.moref == a)
        .unwrap()
        .uuid
        .clone()
        .unwrap();

    for name in ["overcast-it-vs-a", "overcast-it-vs-b"] {
        nodes
            .create(&PostParams::default(), &node(name))
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let conf = sim.conf(
        dir.path(),
        "[Labels]\nzone = k8s-zone\nregion = k8s-region\n",
    );
    let metrics_port = free_port();
    let _ccm = ccm(
        &conf,
        &kubeconfig,
        "overcast-it-vs-ccm",
        metrics_port,
        Stdio::inherit(),
    );

    let got = wait("both nodes initialized", 60, async || {
        let a = nodes.get("overcast-it-vs-a").await.ok()?;
        let b = nodes.get("overcast-it-vs-b").await.ok()?;
        (!tainted(&a, UNINITIALIZED) && !tainted(&b, UNINITIALIZED)).then_some(a)
    })
    .await;
    assert_eq!(
        got.spec.as_ref().unwrap().provider_id.as_deref(),
        Some(format!("vsphere://{uuid_a}").as_str())
    );
    let labels = got.metadata.labels.as_ref().unwrap();
    assert_eq!(
        labels["node.kubernetes.io/instance-type"],
        "vsphere-vm.cpu-4.mem-8gb.os-centos7"
    );
    assert_eq!(labels["topology.kubernetes.io/zone"], "zone-a");
    assert_eq!(labels["topology.kubernetes.io/region"], "region-1");
    let addresses: Vec<(String, String)> = got
        .status
        .as_ref()
        .and_then(|s| s.addresses.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    assert!(
        addresses.contains(&("InternalIP".into(), "10.0.0.5".into())),
        "{addresses:?}"
    );
    assert!(
        addresses.contains(&("Hostname".into(), "overcast-it-vs-a".into())),
        "{addresses:?}"
    );

    // The vCenter ends the ccm's session (as an idle timeout would): the ccm logs in again
    // and goes on — the power-off below is seen through the new session.
    sim::terminate_other_sessions(&admin).await;
    // Powered off: the NotReady node is tainted shut down.
    sim::power_off(&admin, &b).await;
    wait("the shutdown taint", 30, async || {
        tainted(&nodes.get("overcast-it-vs-b").await.ok()?, SHUTDOWN_TAINT).then_some(())
    })
    .await;
    let logins = overcast_integration::http_get(metrics_port, "/metrics").1;
    assert!(
        logins.contains("vsphere_api_requests_total{request=\"Login\"} 2"),
        "a second login after the session ended: {logins}"
    );
    // Destroyed: its NotReady node goes; the other stays.
    sim::destroy(&admin, &b).await;
    wait("the destroyed VM's node deleted", 30, async || {
        nodes
            .get_opt("overcast-it-vs-b")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // The vCenter stops answering: several syncs later the NotReady node is still there.
    sim.stop();
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        nodes.get_opt("overcast-it-vs-a").await.unwrap().is_some(),
        "a silent vCenter deleted a node"
    );
    delete_nodes(&nodes).await;
}
