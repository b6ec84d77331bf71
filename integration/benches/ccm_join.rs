//! A new node in the load balancers' pools: the time from a node's registration (as kubelet
//! registers it: the uninitialized taint, then Ready) to a connection through a LoadBalancer
//! Service's balancer reaching it, with the real `ccm` binary (the local cloud: an instances
//! file, balancers on `--lb-pool`) on the kit's API server — next to, in the same run, its
//! floor: registration to initialization (the ccm setting the providerID), which the node
//! must pass before any pool takes it. Also what it costs: the Service passes each join
//! starts and how many of them reached the cloud (the others are answered from the ccm's
//! ensured cache), and those a minute's worth of heartbeats start (none: a heartbeat
//! changes nothing a balancer is made of). The node sync period is the default (60 s), so a join inside it
//! is the watch's doing, not the periodic sync's.
//!
//! `../shared/kit/kube-up.sh DIR` prints `OVERCAST_TEST_KUBECONFIG`; then
//! `OVERCAST_TEST_KUBECONFIG=DIR/admin.kubeconfig cargo bench --bench ccm_join`

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use overcast_integration::figures::{median, ms};
use overcast_integration::real::{client, metric};
use overcast_integration::{binary, free_port, http_get, KillOnDrop};
use serde_json::json;

const ROUNDS: usize = 7;
const PREFIX: &str = "overcast-bench-join";

async fn until<T>(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// (Service passes, load balancer ensures that reached the cloud) so far.
fn service_work(metrics_port: u16) -> (f64, f64) {
    let (_, body) = http_get(metrics_port, "/metrics");
    (
        metric(&body, "ccm_reconciles_total{controller=\"service\"}").unwrap_or(0.0),
        metric(
            &body,
            "ccm_cloud_calls_total{call=\"ensure_load_balancer\"}",
        )
        .unwrap_or(0.0),
    )
}

fn since(now: (f64, f64), before: (f64, f64)) -> (f64, f64) {
    (now.0 - before.0, now.1 - before.1)
}

fn node_ip(round: usize) -> String {
    format!("127.0.0.{}", 110 + round)
}

fn ready(heartbeat: &str) -> serde_json::Value {
    json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
        "lastHeartbeatTime": heartbeat}]}})
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let Ok(kubeconfig) = std::env::var("OVERCAST_TEST_KUBECONFIG") else {
        println!("SKIPPED: set OVERCAST_TEST_KUBECONFIG (../shared/kit/kube-up.sh) to measure a node's way into the pools");
        return;
    };
    let c = client(&kubeconfig).await;
    let nodes: Api<Node> = Api::all(c.clone());
    let services: Api<Service> = Api::namespaced(c.clone(), "default");
    let name = |round: usize| format!("{PREFIX}-{round}");
    let clean = async || {
        for round in 0..=ROUNDS {
            let _ = nodes.delete(&name(round), &DeleteParams::default()).await;
        }
    };
    clean().await;
    let _ = services.delete(PREFIX, &DeleteParams::default()).await;
    let _ = services
        .patch(
            PREFIX,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await;

    let dir = tempfile::tempdir().unwrap();
    let instances = dir.path().join("instances.json");
    let listed: Vec<_> = (0..=ROUNDS)
        .map(|r| json!({"name": name(r), "addresses": [{"type": "InternalIP", "address": node_ip(r)}]}))
        .collect();
    std::fs::write(&instances, serde_json::Value::Array(listed).to_string()).unwrap();
    let metrics_port = free_port();
    let _ccm = KillOnDrop(
        Command::new(binary("ccm"))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--instances-file={}", instances.display()))
            .arg("--node-name=overcast-bench-host")
            .arg("--zone=zone-a")
            .arg("--region=region-1")
            .arg("--lb-pool=127.244.0.0/24")
            .arg("--leader-elect-lease-name=overcast-bench-join")
            .arg(format!("--metrics-address=127.0.0.1:{metrics_port}"))
            .stderr(Stdio::null())
            .spawn()
            .expect("ccm"),
    );
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": PREFIX},
        "spec": {"type": "LoadBalancer", "selector": {"app": "none"}, "ports": [{"port": 18091, "protocol": "TCP"}]},
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let (ip, node_port) = until("an ingress address", Duration::from_secs(60), async || {
        let s = services.get(PREFIX).await.ok()?;
        let ip = s.status?.load_balancer?.ingress?.first()?.ip.clone()?;
        Some((ip, s.spec?.ports?.first()?.node_port?))
    })
    .await;

    let (mut inits, mut joins, mut reconciles) = (vec![], vec![], vec![]);
    for round in 0..ROUNDS {
        // The NodePort on this node's address: a connection the balancer carries to it
        // lands here and nowhere else.
        let listener = tokio::net::TcpListener::bind((node_ip(round).as_str(), node_port as u16))
            .await
            .expect("the node's NodePort");
        let before = service_work(metrics_port);
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name(round)},
            "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]},
        }))
        .unwrap();
        let registered = Instant::now();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        nodes
            .patch_status(
                &name(round),
                &PatchParams::default(),
                &Patch::Merge(&ready(&jiff::Timestamp::now().to_string())),
            )
            .await
            .unwrap();
        let (init, join) = tokio::join!(
            until("initialization", Duration::from_secs(60), async || {
                let n = nodes.get(&name(round)).await.ok()?;
                n.spec?.provider_id.map(|_| registered.elapsed())
            }),
            until(
                "a connection through the balancer",
                Duration::from_secs(60),
                async || {
                    let mut s = tokio::time::timeout(
                        Duration::from_millis(200),
                        tokio::net::TcpStream::connect((ip.as_str(), 18091)),
                    )
                    .await
                    .ok()?
                    .ok()?;
                    let got = tokio::time::timeout(Duration::from_millis(200), listener.accept())
                        .await
                        .ok()?
                        .ok()?;
                    use tokio::io::AsyncWriteExt;
                    let _ = s.write_all(b"x").await;
                    drop(got);
                    Some(registered.elapsed())
                }
            ),
        );
        inits.push(init);
        joins.push(join);
        // Settled: what the join woke has run.
        tokio::time::sleep(Duration::from_millis(500)).await;
        reconciles.push(since(service_work(metrics_port), before));
        if round + 1 < ROUNDS {
            nodes
                .delete(&name(round), &DeleteParams::default())
                .await
                .unwrap();
        }
    }

    // A minute of heartbeats (one every 10 s, as kubelet's status updates) on the last node.
    let before = service_work(metrics_port);
    for _ in 0..6 {
        nodes
            .patch_status(
                &name(ROUNDS - 1),
                &PatchParams::default(),
                &Patch::Merge(&ready(&jiff::Timestamp::now().to_string())),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let by_heartbeats = since(service_work(metrics_port), before);

    services
        .delete(PREFIX, &DeleteParams::default())
        .await
        .unwrap();
    until("the Service gone", Duration::from_secs(60), async || {
        services.get_opt(PREFIX).await.ok()?.is_none().then_some(())
    })
    .await;
    clean().await;

    let max = |v: &[Duration]| v.iter().max().copied().unwrap_or_default();
    println!("### A new node into a LoadBalancer Service's pool ({ROUNDS} nodes, one at a time; node sync period 60 s)");
    println!();
    println!("| from registration to | median | max |");
    println!("| --- | --- | --- |");
    println!(
        "| initialized (providerID set): the floor | {} | {} |",
        ms(median(inits.clone())),
        ms(max(&inits))
    );
    println!(
        "| a connection through the balancer reaching it | {} | {} |",
        ms(median(joins.clone())),
        ms(max(&joins))
    );
    println!();
    let passes: Vec<f64> = reconciles.iter().map(|r| r.0).collect();
    let ensures: Vec<f64> = reconciles.iter().map(|r| r.1).collect();
    println!(
        "Each join: Service passes {passes:?}, of which reached the cloud (ensure_load_balancer) \
         {ensures:?}; 6 heartbeats: {} passes, {} cloud calls.",
        by_heartbeats.0, by_heartbeats.1
    );
}
