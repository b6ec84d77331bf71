//! The ccm's node lifecycle on a real API server, when the cloud's answer is missing or
//! wrong: a missing instances file deletes nothing (it is no answer), and an inventory
//! that lacks more nodes than the deletion guard allows — or lacks live (Ready) ones —
//! deletes none of them and says so (event per node, metric). Replays issue 12 §4. Runs only with
//! `OVERCAST_TEST_KUBECONFIG` (a disposable cluster: it creates and deletes Nodes named
//! `overcast-it-guard-*`); otherwise it says it was skipped.

use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use overcast_integration::*;
use serde_json::json;

const ENV: &str = "OVERCAST_TEST_KUBECONFIG";
const NODES: usize = 40;
const PREFIX: &str = "overcast-it-guard-";

use overcast_integration::real::client;

fn name(i: usize) -> String {
    format!("{PREFIX}{i:02}")
}

/// Every node index below NODES/2 is NotReady (no Ready condition), the rest Ready.
fn ready(i: usize) -> bool {
    i >= NODES / 2
}

async fn ours(nodes: &Api<Node>) -> Vec<String> {
    let mut names: Vec<String> = nodes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .filter(|n| n.starts_with(PREFIX))
        .collect();
    names.sort();
    names
}

fn write_inventory(path: &std::path::Path, listed: impl Iterator<Item = usize>) {
    let all: Vec<_> = listed.map(|i| json!({"name": name(i)})).collect();
    // Replaced in one rename, as a careful writer would: the test is about the answer,
    // not about a torn read.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(&all).unwrap()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn metric(port: u16, name: &str) -> f64 {
    let (_, body) = http_get(port, "/metrics");
    body.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn a_missing_or_wrong_inventory_deletes_no_node() {
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Ok(kubeconfig) = std::env::var(ENV) else {
        say_skipped(&format!(
            "set {ENV} to a disposable cluster's kubeconfig to run the node deletion guard against a real API server"
        ));
        return;
    };
    let c = client(&kubeconfig).await;
    let nodes: Api<Node> = Api::all(c.clone());
    for n in ours(&nodes).await {
        let _ = nodes.delete(&n, &DeleteParams::default()).await;
    }
    for i in 0..NODES {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name(i)},
            "spec": {"providerID": format!("local://{}", name(i))},
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        if ready(i) {
            let status = json!({"status": {"conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z",
            }]}});
            nodes
                .patch_status(&name(i), &PatchParams::default(), &Patch::Merge(&status))
                .await
                .unwrap();
        }
    }
    assert_eq!(ours(&nodes).await.len(), NODES);

    let dir = tempfile::tempdir().unwrap();
    let inventory = dir.path().join("instances.json");
    write_inventory(&inventory, 0..NODES);
    let port = free_port();
    let _ccm = KillOnDrop(
        Command::new(binary("ccm"))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--instances-file={}", inventory.display()))
            .arg("--node-name=overcast-it-guard-host")
            .arg("--controllers=node,node-lifecycle")
            .arg("--node-sync-period=1")
            .arg("--leader-elect-lease-name=overcast-it-guard")
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    assert!(
        eventually(Duration::from_secs(30), || metric(
            port,
            "ccm_reconciles_total"
        ) >= 1.0)
        .await,
        "the ccm never synced"
    );

    // 1. The file vanishes (a mistyped path, a mount not there yet, delete-then-write):
    // no answer, so no node is gone. Several syncs must fail, none delete.
    std::fs::remove_file(&inventory).unwrap();
    let errors_before = metric(port, "ccm_reconcile_errors_total");
    assert!(
        eventually(Duration::from_secs(30), || {
            metric(port, "ccm_reconcile_errors_total") >= errors_before + 3.0
        })
        .await,
        "syncs without an inventory fail"
    );
    assert_eq!(ours(&nodes).await.len(), NODES, "nothing deleted");

    // 2. An inventory that lists none of them: a positive answer, but 20 of 40 nodes
    // gone at once is past the 10% guard, so none goes, each says why, and it counts.
    write_inventory(&inventory, std::iter::empty());
    assert!(
        eventually(Duration::from_secs(30), || {
            metric(port, "ccm_node_deletions_refused_total") >= (NODES / 2) as f64
        })
        .await,
        "the refusals are counted"
    );
    assert_eq!(ours(&nodes).await.len(), NODES, "nothing deleted");
    let events: Api<Event> = Api::namespaced(c.clone(), "default");
    let expected: std::collections::BTreeSet<String> =
        (0..NODES).filter(|i| !ready(*i)).map(name).collect();
    // The counter moves before the Event is written: wait for the events, then compare.
    let mut refused = std::collections::BTreeSet::new();
    for _ in 0..50 {
        refused = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("DeletionRefused"))
            .filter_map(|e| e.regarding?.name)
            .filter(|n| n.starts_with(PREFIX))
            .collect();
        if refused.len() >= expected.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        refused, expected,
        "an event on each kept NotReady node, none on Ready ones"
    );

    // 2b. A listing that lacks three NotReady nodes — few enough to delete — and five
    // Ready ones, whose kubelets prove them alive: the listing is wrong; nothing goes.
    let refused_before = metric(port, "ccm_node_deletions_refused_total");
    write_inventory(&inventory, (3..NODES).filter(|i| !(20..25).contains(i)));
    assert!(
        eventually(Duration::from_secs(30), || {
            metric(port, "ccm_node_deletions_refused_total") >= refused_before + 3.0
        })
        .await,
        "the three are refused"
    );
    assert_eq!(ours(&nodes).await.len(), NODES, "nothing deleted");

    // 3. Two really gone: within the guard, deleted; the rest stay.
    write_inventory(&inventory, 2..NODES);
    let gone = [name(0), name(1)];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while ours(&nodes).await.iter().any(|n| gone.contains(n)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the two gone nodes were not deleted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(ours(&nodes).await.len(), NODES - 2);

    for n in ours(&nodes).await {
        let _ = nodes.delete(&n, &DeleteParams::default()).await;
    }
}
