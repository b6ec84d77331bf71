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
) -> Option<(Vcsim, String, overcast_integration::real::ClusterTurn)> {
    let sim = Vcsim::start(test, args)?;
    let Ok(kubeconfig) = std::env::var(KUBE_ENV) else {
        say_skipped(&format!(
            "set {KUBE_ENV} besides OVERCAST_TEST_VCSIM to run the ccm on vSphere"
        ));
        return None;
    };
    Some((
        sim,
        kubeconfig,
        overcast_integration::real::cluster_turn().await,
    ))
}

/// The real ccm on vSphere with the kit's API server, syncing nodes every 2 s.
pub fn ccm(
    conf: &std::path::Path,
    kubeconfig: &str,
    lease: &str,
    metrics_port: u16,
    stderr: Stdio,
) -> KillOnDrop {
    ccm_with(conf, kubeconfig, lease, metrics_port, stderr, &[])
}

/// The real ccm as [`ccm`] starts it, with `extra` arguments.
pub fn ccm_with(
    conf: &std::path::Path,
    kubeconfig: &str,
    lease: &str,
    metrics_port: u16,
    stderr: Stdio,
    extra: &[&str],
) -> KillOnDrop {
    KillOnDrop(
        Command::new(binary("ccm"))
            .args(extra)
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

/// A process's log, printed when the test fails.
struct ShowLog(std::path::PathBuf);

impl Drop for ShowLog {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- {}:\n{}",
                self.0.display(),
                std::fs::read_to_string(&self.0).unwrap_or_default()
            );
        }
    }
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
    let ccm_log = dir.path().join("ccm.log");
    let _show = ShowLog(ccm_log.clone());
    let _ccm = ccm(
        &conf,
        &kubeconfig,
        "overcast-it-vs-ccm",
        metrics_port,
        Stdio::from(std::fs::File::create(&ccm_log).unwrap()),
    );

    // Initialized, then its addresses: as upstream's cloud-node controller, the ccm
    // removes the taint in one write and sets the addresses on the status in the next (a
    // read between the two saw none, CI28).
    let has_addresses = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .is_some_and(|a| !a.is_empty())
    };
    let got = wait("both nodes initialized", 60, async || {
        let a = nodes.get("overcast-it-vs-a").await.ok()?;
        let b = nodes.get("overcast-it-vs-b").await.ok()?;
        (!tainted(&a, UNINITIALIZED) && !tainted(&b, UNINITIALIZED) && has_addresses(&a))
            .then_some(a)
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

    // The vCenter hangs (its process stopped: connections taken, never answered): the
    // ccm says so within a sync period and its 10 s watch, long before its calls time out
    // (30 s an attempt); nothing is deleted; once it answers, the ccm says that too.
    // What the ccm logged from now on.
    let from = std::fs::metadata(&ccm_log).unwrap().len() as usize;
    let said = |what: &'static str| {
        let log = ccm_log.clone();
        async move || {
            let text = std::fs::read(&log).unwrap_or_default();
            String::from_utf8_lossy(text.get(from..).unwrap_or_default())
                .contains(what)
                .then_some(())
        }
    };
    // A node no VM answers for yet (it stays uninitialized, waiting for its instance)
    // waits on the cloud while it hangs: it is told so.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(
        overcast_integration::real::client(&kubeconfig).await,
        "default",
    );
    nodes
        .create(&PostParams::default(), &node("overcast-it-vs-new"))
        .await
        .unwrap();
    // A sync (every 2 s) has it in its snapshot.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let hung = std::time::Instant::now();
    sim.pause();
    wait(
        "the ccm saying its sync waits on the hung vCenter",
        25,
        said("node sync still waiting on the cloud"),
    )
    .await;
    assert!(
        hung.elapsed() < Duration::from_secs(25),
        "said only after {:?}",
        hung.elapsed()
    );
    let note = wait(
        "an InitializationHeldBack event on the new node",
        30,
        async || {
            events
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("InitializationHeldBack")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                            == Some("overcast-it-vs-new")
                })?
                .note
        },
    )
    .await;
    assert!(
        note.contains("keeps node.cloudprovider.kubernetes.io/uninitialized"),
        "{note}"
    );
    assert!(
        nodes.get_opt("overcast-it-vs-a").await.unwrap().is_some(),
        "a hung vCenter deleted a node"
    );
    sim.resume();
    wait(
        "the ccm saying its sync answered again",
        60,
        said("node sync succeeded again"),
    )
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

/// Nodes of a running VM, NotReady, whose providerIDs were spelled as other providers and
/// older VM hardware spell them — the BIOS UUID in upper case, or with its first three
/// fields byte-swapped (cloud-provider-vsphere lower-cases one and retries the other,
/// `nodemanager.go`) — are kept; the node of a UUID no VM has goes, so the ccm was
/// deciding. (Before: providerIDs were compared as strings, and both nodes of the running
/// VM were deleted as "whose instance no longer exists".)
#[tokio::test]
async fn nodes_of_a_running_vm_are_kept_however_their_provider_id_is_spelled() {
    let Some((sim, kubeconfig, _kit)) = kit_and_vcsim("ccm on vsphere, spellings", &[]).await
    else {
        return;
    };
    let nodes: Api<Node> = Api::all(overcast_integration::real::client(&kubeconfig).await);
    delete_nodes(&nodes).await;
    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let snap =
        overcast_cloud_vsphere::vms::snapshot(&overcast_cloud_vsphere::inventory::View::new(
            Arc::clone(&admin),
            overcast_cloud_vsphere::vms::VIEW_TYPES,
        ))
        .await
        .unwrap();
    let uuid = snap
        .vms
        .iter()
        .find_map(|v| v.uuid.clone())
        .expect("a VM with a BIOS UUID");
    use overcast_cloud_vsphere::instances::swap_uuid_byte_order;
    let spellings = [
        (
            "overcast-it-vs-upper",
            format!("vsphere://{}", uuid.to_ascii_uppercase()),
        ),
        (
            "overcast-it-vs-swapped",
            format!("vsphere://{}", swap_uuid_byte_order(&uuid)),
        ),
        (
            "overcast-it-vs-swapped-upper",
            format!(
                "vsphere://{}",
                swap_uuid_byte_order(&uuid).to_ascii_uppercase()
            ),
        ),
    ];
    let gone = (
        "overcast-it-vs-gone",
        "vsphere://00000000-0000-4000-8000-000000000000".to_owned(),
    );
    for (name, pid) in spellings.iter().chain(std::iter::once(&gone)) {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"providerID": pid},
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        let status = json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]}});
        nodes
            .patch_status(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&status),
            )
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let conf = sim.conf(dir.path(), "");
    // The deletion guard off: what keeps a running VM's node here is its identity alone.
    let _ccm = ccm_with(
        &conf,
        &kubeconfig,
        "overcast-it-vs-ccm-spelled",
        free_port(),
        Stdio::inherit(),
        &["--node-deletion-max-percent=100"],
    );
    wait("the node of a UUID no VM has deleted", 60, async || {
        nodes.get_opt(gone.0).await.ok()?.is_none().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    for (name, pid) in &spellings {
        assert!(
            nodes.get_opt(name).await.unwrap().is_some(),
            "{name} ({pid}) of a running VM was deleted"
        );
    }
    delete_nodes(&nodes).await;
}
