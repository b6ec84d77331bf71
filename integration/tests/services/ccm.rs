//! The real `ccm` binary against a faithful in-process Kubernetes API (`fake_api`): nodes
//! initialized, a gone node deleted, a shut-down one tainted, a LoadBalancer Service given
//! a real balancer that carries traffic, and its teardown — with the API requests
//! asserted.

use std::collections::BTreeSet;
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

/// A NodePort stand-in on every address: answers `echo:<what it read>@<the address it was
/// reached on>`, so the test can tell which backend node the balancer chose. Dual-stack
/// where the machine has IPv6 (whatever net.ipv6.bindv6only says), since the host's first
/// InternalIP may be an IPv6 address.
async fn echo(port: u16) {
    let dual_stack = || -> std::io::Result<std::net::TcpListener> {
        use socket2::{Domain, Socket, Type};
        let s = Socket::new(Domain::IPV6, Type::STREAM, None)?;
        s.set_only_v6(false)?;
        s.set_nonblocking(true)?;
        s.bind(&std::net::SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)).into())?;
        s.listen(128)?;
        Ok(s.into())
    };
    let listener = match dual_stack() {
        Ok(l) => tokio::net::TcpListener::from_std(l).unwrap(),
        Err(_) => tokio::net::TcpListener::bind(("0.0.0.0", port))
            .await
            .unwrap(),
    };
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                let Ok(local) = s.local_addr() else { return };
                if let Ok(n) = s.read(&mut buf).await {
                    // An IPv4 client of a dual-stack socket shows as ::ffff:a.b.c.d.
                    let ip = local.ip().to_canonical();
                    let reply = format!("echo:{}@{ip}", String::from_utf8_lossy(&buf[..n]));
                    let _ = s.write_all(reply.as_bytes()).await;
                }
            });
        }
    });
}

/// One connection through the balancer: what came back, or why nothing did.
async fn through_balancer(ip: &str, port: u16, say: &str) -> Result<String, String> {
    let mut s = tokio::net::TcpStream::connect((ip, port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    s.write_all(say.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut buf = [0u8; 128];
    let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf))
        .await
        .map_err(|_| "no answer in 3 s".to_string())?
        .map_err(|e| format!("read: {e}"))?;
    if n == 0 {
        return Err("closed without an answer".into());
    }
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
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
        // Two of these five nodes are missing from the listing: past the deletion guard's
        // default 10% (node_deletion_real_cluster.rs tests the guard itself).
        .arg("--node-deletion-max-percent=50")
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
    // The ingress is published by the first reconcile, which may run before the ccm's node
    // cache holds any address (a real cloud's balancer has no backends then either); the
    // backends follow the nodes. So: wait until connections reach every Ready node with an
    // address (the host by its first InternalIP, n-file by 127.0.0.2) — and never anything
    // else, and never answer wrongly.
    let first_internal_ip = |name: &str| -> String {
        let n = api.get(NODES, name).unwrap();
        let addresses = n["status"]["addresses"].as_array().unwrap();
        let ip = addresses
            .iter()
            .find(|a| a["type"] == "InternalIP")
            .unwrap();
        ip["address"].as_str().unwrap().to_owned()
    };
    let expected: BTreeSet<String> =
        [first_internal_ip("host"), first_internal_ip("n-file")].into();
    let mut reached = BTreeSet::new();
    let mut last = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut i = 0;
    while reached != expected && std::time::Instant::now() < deadline {
        i += 1;
        match through_balancer("127.243.0.1", lb_port, &format!("hi{i}")).await {
            Ok(reply) => {
                let (said, backend) = reply.split_once('@').unwrap_or((&reply, ""));
                assert_eq!(said, format!("echo:hi{i}"), "{reply}");
                assert!(expected.contains(backend), "{backend} is no Ready node");
                reached.insert(backend.to_owned());
            }
            // Before the first backends arrive the balancer has nowhere to send a client.
            Err(e) => {
                last = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    assert_eq!(reached, expected, "last failure: {last}\n{}", log_text());
    // Round-robin from then on: consecutive connections alternate between the two.
    let mut next_two = BTreeSet::new();
    for j in 0..2 {
        let reply = through_balancer("127.243.0.1", lb_port, &format!("rr{j}"))
            .await
            .unwrap();
        next_two.insert(reply.split_once('@').unwrap().1.to_owned());
    }
    assert_eq!(next_two, expected, "round-robin");
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
