//! The real `ccm` binary against a faithful in-process Kubernetes API (`fake_api`): nodes
//! initialized, a gone node deleted, a shut-down one tainted, a LoadBalancer Service given
//! a real balancer that carries traffic, and its teardown — with the API requests
//! asserted.

use std::process::{Command, Stdio};
use std::time::Duration;

use overcast_integration::fake_api::FakeApi;
use overcast_integration::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use overcast_integration::KillOnDrop as Ccm;

const NODES: &str = "/api/v1/nodes";
const SERVICES: &str = "/api/v1/namespaces/default/services";

fn node(name: &str, ready: bool, uninitialized: bool) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"keep": "me"}},
        "spec": {"taints": if uninitialized {
            json!([{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}])
        } else { json!([]) }},
        "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]},
    })
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    assert!(
        eventually(Duration::from_secs(20), &mut f).await,
        "timed out waiting for {what}"
    );
}

async fn echo(port: u16) {
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", port))
        .await
        .unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                if let Ok(n) = s.read(&mut buf).await {
                    let _ = s.write_all(&[b"echo:", &buf[..n]].concat()).await;
                }
            });
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ccm_initializes_nodes_runs_their_lifecycle_and_balances_services() {
    let api = FakeApi::default();
    let url = api.start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    let instances = dir.path().join("instances.json");
    std::fs::write(
        &instances,
        json!([
            {"name": "n-file", "addresses": [{"type": "InternalIP", "address": "127.0.0.2"}], "instanceType": "big", "zone": "zone-b"},
            {"name": "n-off", "state": "shutdown"},
        ])
        .to_string(),
    )
    .unwrap();
    api.put(NODES, node("host", true, true));
    api.put(NODES, node("n-file", true, true));
    api.put(NODES, node("n-gone", false, false));
    api.put(NODES, node("n-gone-ready", true, false));
    api.put(NODES, node("n-off", false, false));
    let node_port = free_port();
    echo(node_port).await;
    let lb_port = free_port();
    api.put(
        SERVICES,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": lb_port, "protocol": "TCP", "nodePort": node_port}]},
        }),
    );
    api.put(
        SERVICES,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "theirs", "namespace": "default"},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "example.com/other", "ports": [{"port": 81, "nodePort": 30081}]},
        }),
    );

    let metrics_port = free_port();
    let log = dir.path().join("ccm.log");
    let _ccm = Ccm(Command::new(binary("ccm"))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg("--node-name=host")
        .arg("--zone=zone-a")
        .arg("--region=region-1")
        .arg(format!("--instances-file={}", instances.display()))
        .arg("--lb-pool=127.243.0.0/24")
        .arg("--leader-elect-identity=it-replica")
        .arg(format!("--metrics-address=127.0.0.1:{metrics_port}"))
        .env("RUST_LOG", "info")
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap());
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // Initialization.
    until("host initialized", || {
        api.get(NODES, "host")
            .is_some_and(|n| n["spec"]["providerID"] == "local://host")
    })
    .await;
    let host = api.get(NODES, "host").unwrap();
    assert_eq!(
        host["metadata"]["labels"]["topology.kubernetes.io/zone"],
        "zone-a"
    );
    assert_eq!(
        host["metadata"]["labels"]["topology.kubernetes.io/region"],
        "region-1"
    );
    assert_eq!(
        host["metadata"]["labels"]["keep"], "me",
        "other labels survive"
    );
    assert!(
        host["metadata"]["labels"]["node.kubernetes.io/instance-type"]
            .as_str()
            .unwrap()
            .starts_with("local.")
    );
    assert_eq!(host["spec"]["taints"], json!([]));
    until("n-file addresses", || {
        api.get(NODES, "n-file")
            .is_some_and(|n| !n["status"]["addresses"].is_null())
    })
    .await;
    let n_file = api.get(NODES, "n-file").unwrap();
    assert_eq!(
        n_file["status"]["addresses"],
        json!([{"type": "InternalIP", "address": "127.0.0.2"}, {"type": "Hostname", "address": "n-file"}])
    );
    assert_eq!(
        n_file["metadata"]["labels"]["node.kubernetes.io/instance-type"],
        "big"
    );
    assert_eq!(
        n_file["metadata"]["labels"]["topology.kubernetes.io/zone"],
        "zone-b"
    );

    // Lifecycle.
    until("n-gone deleted", || api.get(NODES, "n-gone").is_none()).await;
    assert!(
        api.get(NODES, "n-gone-ready").is_some(),
        "a Ready node is never deleted"
    );
    until("n-off tainted", || {
        api.get(NODES, "n-off").is_some_and(|n| {
            n["spec"]["taints"]
                .to_string()
                .contains("node.cloudprovider.kubernetes.io/shutdown")
        })
    })
    .await;

    // Leadership.
    let lease = api.get(
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
        "overcast-cloud-controller-manager",
    );
    assert_eq!(lease.unwrap()["spec"]["holderIdentity"], "it-replica");

    // The load balancer: finalizer, ingress, event, real traffic through both nodes' NodePort.
    until("an ingress address", || {
        api.get(SERVICES, "web")
            .is_some_and(|s| !s["status"]["loadBalancer"]["ingress"].is_null())
    })
    .await;
    let web = api.get(SERVICES, "web").unwrap();
    assert_eq!(
        web["status"]["loadBalancer"]["ingress"],
        json!([{"ip": "127.243.0.1"}])
    );
    assert_eq!(
        web["metadata"]["finalizers"],
        json!(["service.kubernetes.io/load-balancer-cleanup"])
    );
    for i in 0..4 {
        let mut s = tokio::net::TcpStream::connect(("127.243.0.1", lb_port))
            .await
            .expect("the balancer listens");
        s.write_all(format!("hi{i}").as_bytes()).await.unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..n], format!("echo:hi{i}").as_bytes());
    }
    let theirs = api.get(SERVICES, "theirs").unwrap();
    assert!(
        theirs["status"]["loadBalancer"]["ingress"].is_null()
            && theirs["metadata"]["finalizers"].is_null(),
        "another class is left alone"
    );
    let seen = api.seen();
    assert!(
        seen.iter().any(|r| r.method == "POST"
            && r.path.ends_with("/events")
            && r.body["reason"] == "EnsuredLoadBalancer"),
        "an event on the Service"
    );

    // Deleting the Service tears the balancer down, then releases the finalizer.
    let client = reqwest_like_delete(&url, &format!("{SERVICES}/web")).await;
    assert!(client, "DELETE accepted");
    until("the service gone", || api.get(SERVICES, "web").is_none()).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        tokio::net::TcpStream::connect(("127.243.0.1", lb_port))
            .await
            .is_err(),
        "the balancer stopped listening"
    );

    // Every request was one the ccm declares in API_CALLS (what deploy/'s RBAC grants),
    // and the only Node it deleted is the one whose machine is gone.
    let own_delete = format!("{SERVICES}/web");
    let checked =
        api.assert_calls_within("ccm", overcast_ccm::API_CALLS, &[("DELETE", &own_delete)]);
    assert!(checked > 10, "{checked} requests");
    for r in api.seen() {
        if r.method == "DELETE" && r.path.starts_with(NODES) {
            assert_eq!(r.path, "/api/v1/nodes/n-gone");
        }
    }
    let (code, metrics) = http_get(metrics_port, "/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("ccm_cloud_calls_total{call=\"list_instances\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("ccm_reconciles_total{controller=\"node\"}"));
    assert!(!log_text().contains("panicked"), "{}", log_text());
}

/// The test's own DELETE (the user deleting the Service), over plain HTTP.
async fn reqwest_like_delete(url: &str, path: &str) -> bool {
    let addr = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "DELETE {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    out.starts_with("HTTP/1.1 200")
}
