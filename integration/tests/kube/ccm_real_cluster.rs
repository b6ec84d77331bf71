//! The `ccm` and `discoverer` binaries against a real Kubernetes API server. Run only when
//! `OVERCAST_TEST_KUBECONFIG` names a kubeconfig for a disposable cluster (the test
//! creates and deletes Node and Service objects prefixed `overcast-it-`); otherwise it
//! says clearly that it was skipped.

use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use overcast_integration::*;
use serde_json::json;

const ENV: &str = "OVERCAST_TEST_KUBECONFIG";

use overcast_integration::KillOnDrop as Ccm;

use overcast_integration::real::client;

async fn wait_for<T>(what: &str, f: impl AsyncFnMut() -> Option<T>) -> T {
    overcast_integration::real::wait_for(what, Duration::from_secs(30), f).await
}

#[tokio::test]
async fn ccm_initializes_deletes_taints_and_balances_on_a_real_api_server() {
    let Ok(kubeconfig) = std::env::var(ENV) else {
        say_skipped(&format!("set {ENV} to a disposable cluster's kubeconfig to run the CCM against a real API server"));
        return;
    };
    let _turn = overcast_integration::real::cluster_turn().await;
    let dir = tempfile::tempdir().unwrap();
    let instances = dir.path().join("instances.json");
    std::fs::write(
        &instances,
        json!([
            {"name": "overcast-it-new", "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]},
            {"name": "overcast-it-off", "state": "shutdown"},
        ])
        .to_string(),
    )
    .unwrap();
    let c = client(&kubeconfig).await;
    let nodes: Api<Node> = Api::all(c.clone());
    for name in ["overcast-it-new", "overcast-it-gone", "overcast-it-off"] {
        let _ = nodes.delete(name, &DeleteParams::default()).await;
    }
    let node = |name: &str, taint: bool| -> Node {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"taints": if taint { json!([{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]) } else { json!([]) }},
        }))
        .unwrap()
    };
    nodes
        .create(&PostParams::default(), &node("overcast-it-new", true))
        .await
        .unwrap();
    nodes
        .create(&PostParams::default(), &node("overcast-it-gone", false))
        .await
        .unwrap();
    nodes
        .create(&PostParams::default(), &node("overcast-it-off", false))
        .await
        .unwrap();

    let port = free_port();
    let _ccm = Ccm(Command::new(binary("ccm"))
        .arg(format!("--kubeconfig={kubeconfig}"))
        .arg(format!("--instances-file={}", instances.display()))
        .arg("--node-name=overcast-it-host")
        .arg("--zone=zone-a")
        .arg("--region=region-1")
        .arg("--lb-pool=127.242.0.0/24")
        // Existing nodes are synced periodically (their watch events start no sync): a
        // first sync that met another test's leftovers is repeated soon.
        .arg("--node-sync-period=2")
        .arg("--leader-elect-lease-name=overcast-it-ccm")
        .arg(format!("--metrics-address=127.0.0.1:{port}"))
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap());

    let initialized = wait_for("initialization", async || {
        let n = nodes.get("overcast-it-new").await.ok()?;
        let spec = n.spec.clone()?;
        (spec.provider_id.as_deref() == Some("local://overcast-it-new")).then_some(n)
    })
    .await;
    let labels = initialized.metadata.labels.unwrap();
    assert_eq!(labels["topology.kubernetes.io/zone"], "zone-a");
    assert!(labels["node.kubernetes.io/instance-type"].starts_with("local."));
    assert!(!initialized
        .spec
        .unwrap()
        .taints
        .unwrap_or_default()
        .iter()
        .any(|t| t.key.contains("uninitialized")));
    // A node with no Ready condition is NotReady: gone instance → deleted; shut down → tainted.
    wait_for("deletion", async || {
        nodes
            .get_opt("overcast-it-gone")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    wait_for("shutdown taint", async || {
        let n = nodes.get("overcast-it-off").await.ok()?;
        n.spec?
            .taints?
            .iter()
            .any(|t| t.key == "node.cloudprovider.kubernetes.io/shutdown")
            .then_some(())
    })
    .await;

    let services: Api<Service> = Api::namespaced(c.clone(), "default");
    let _ = services
        .delete("overcast-it-lb", &DeleteParams::default())
        .await;
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "overcast-it-lb"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "none"}, "ports": [{"port": 18080, "protocol": "TCP"}]},
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let ip = wait_for("an ingress address", async || {
        let s = services.get("overcast-it-lb").await.ok()?;
        s.status?.load_balancer?.ingress?.first()?.ip.clone()
    })
    .await;
    assert!(ip.starts_with("127.242.0."), "{ip}");
    services
        .delete("overcast-it-lb", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the finalizer released", async || {
        services
            .get_opt("overcast-it-lb")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    for name in ["overcast-it-new", "overcast-it-off"] {
        let _ = nodes.delete(name, &DeleteParams::default()).await;
    }
}

#[tokio::test]
async fn ccm_without_a_cluster_fails_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-kubeconfig");
    let out = Command::new(binary("ccm"))
        .arg(format!("--kubeconfig={}", missing.display()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-kubeconfig"), "{err}");
}

#[tokio::test]
async fn discoverer_publishes_to_a_real_api_server() {
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Ok(kubeconfig) = std::env::var(ENV) else {
        say_skipped(&format!("set {ENV} to a disposable cluster's kubeconfig to run the discoverer against a real API server"));
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("disks")).unwrap();
    let c = client(&kubeconfig).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(c.clone(), "kube-system");
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(c.clone(), "kube-system");
    // What an earlier run published would be found at once, before this discoverer's
    // first cycle rewrites it (its state directory, hence its data, is new).
    let _ = secrets
        .delete("d8-cloud-provider-discovery-data", &DeleteParams::default())
        .await;
    let _ = configmaps
        .delete("d8-cloud-provider-conditions", &DeleteParams::default())
        .await;
    let port = free_port();
    let _d = Ccm(Command::new(binary("discoverer"))
        .arg(format!("--kubeconfig={kubeconfig}"))
        .arg(format!("--state-dir={}", dir.path().display()))
        .arg("--zone=zone-a")
        .arg("--discovery-period=2")
        .arg(format!("--metrics-address=127.0.0.1:{port}"))
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap());
    let secret = wait_for("the discovery Secret", async || {
        secrets
            .get_opt("d8-cloud-provider-discovery-data")
            .await
            .ok()?
    })
    .await;
    let doc: serde_json::Value =
        serde_json::from_slice(&secret.data.unwrap()["discovery-data.json"].0).unwrap();
    assert_eq!(doc["zones"], json!(["zone-a"]));
    wait_for("the conditions ConfigMap", async || {
        configmaps
            .get_opt("d8-cloud-provider-conditions")
            .await
            .ok()?
    })
    .await;
    // Unchanged data is not rewritten: the resourceVersion stays across cycles.
    let before = secrets
        .get("d8-cloud-provider-discovery-data")
        .await
        .unwrap()
        .metadata
        .resource_version;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = secrets
        .get("d8-cloud-provider-discovery-data")
        .await
        .unwrap()
        .metadata
        .resource_version;
    assert_eq!(before, after);
}

/// Leader-election timings that would let a replica lead past its lease are refused at
/// start, before any cluster is contacted, as are durations that do not parse.
#[tokio::test]
async fn ccm_refuses_leader_timings_that_could_split() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-kubeconfig");
    for (flags, says) in [
        (
            vec!["--leader-elect-renew-deadline=20s"],
            "renew deadline < lease duration",
        ),
        (
            vec![
                "--leader-elect-retry-period=10s",
                "--leader-elect-renew-deadline=10s",
            ],
            "retry period < renew deadline",
        ),
        (vec!["--leader-elect-lease-duration=5x"], "unknown unit"),
    ] {
        let out = Command::new(binary("ccm"))
            .arg(format!("--kubeconfig={}", missing.display()))
            .args(&flags)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flags:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{flags:?}: {err}");
        assert!(
            !err.contains("no-kubeconfig"),
            "{flags:?}: checked after reading the kubeconfig: {err}"
        );
    }
}

/// A node's addresses become exactly the cloud's: two addresses of one type both stay,
/// and one the cloud no longer lists goes (before, a strategic-merge patch merged them
/// by type: one InternalIP was lost, a stale ExternalIP stayed, and the node was
/// patched on every sync). Only a real server merges by the patch key, so only it shows
/// this.
#[tokio::test]
async fn node_addresses_become_exactly_the_clouds_on_a_real_api_server() {
    let Ok(kubeconfig) = std::env::var(ENV) else {
        say_skipped(&format!(
            "set {ENV} to a disposable cluster's kubeconfig to check node addresses on a real API server"
        ));
        return;
    };
    let _turn = overcast_integration::real::cluster_turn().await;
    let name = "overcast-it-addresses";
    let dir = tempfile::tempdir().unwrap();
    let instances = dir.path().join("instances.json");
    std::fs::write(
        &instances,
        json!([{"name": name, "addresses": [
            {"type": "InternalIP", "address": "10.0.0.1"},
            {"type": "InternalIP", "address": "10.0.0.2"},
        ]}])
        .to_string(),
    )
    .unwrap();
    let c = client(&kubeconfig).await;
    let nodes: Api<Node> = Api::all(c.clone());
    let _ = nodes.delete(name, &DeleteParams::default()).await;
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "spec": {"providerID": format!("local://{name}")},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    // What an earlier listing left: an ExternalIP the cloud no longer has.
    nodes
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"addresses": [
                {"type": "ExternalIP", "address": "203.0.113.9"},
                {"type": "InternalIP", "address": "10.0.0.1"},
            ]}})),
        )
        .await
        .unwrap();

    let port = free_port();
    let _ccm = Ccm(Command::new(binary("ccm"))
        .arg(format!("--kubeconfig={kubeconfig}"))
        .arg(format!("--instances-file={}", instances.display()))
        .arg("--node-name=overcast-it-host")
        .arg("--controllers=node")
        .arg("--node-sync-period=1")
        .arg("--leader-elect-lease-name=overcast-it-ccm-addresses")
        .arg(format!("--metrics-address=127.0.0.1:{port}"))
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap());

    let pairs = |n: &Node| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = n
            .status
            .as_ref()
            .and_then(|s| s.addresses.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a.type_ != "Hostname")
            .map(|a| (a.type_, a.address))
            .collect();
        v.sort();
        v
    };
    let want = vec![
        ("InternalIP".to_owned(), "10.0.0.1".to_owned()),
        ("InternalIP".to_owned(), "10.0.0.2".to_owned()),
    ];
    let settled = overcast_integration::real::wait_for(
        "the cloud's addresses, exactly",
        Duration::from_secs(30),
        async || {
            let n = nodes.get(name).await.ok()?;
            (pairs(&n) == want).then_some(n)
        },
    )
    .await;
    // Settled: three more syncs change nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = nodes.get(name).await.unwrap();
    assert_eq!(pairs(&later), want);
    assert_eq!(
        later.metadata.resource_version, settled.metadata.resource_version,
        "the node was not written again"
    );
    let _ = nodes.delete(name, &DeleteParams::default()).await;
}

/// A clean shutdown gives the lease up, so a rolling restart has no leaderless gap
/// (before, the next replica waited out the lease duration, 15 s by default).
#[tokio::test]
async fn sigterm_releases_the_lease_on_a_real_api_server() {
    use k8s_openapi::api::coordination::v1::Lease;
    let Ok(kubeconfig) = std::env::var(ENV) else {
        say_skipped(&format!(
            "set {ENV} to a disposable cluster's kubeconfig to check the lease release on a real API server"
        ));
        return;
    };
    let _turn = overcast_integration::real::cluster_turn().await;
    let lease_name = "overcast-it-ccm-release";
    let identity = "overcast-it-releaser";
    let c = client(&kubeconfig).await;
    let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-system");
    let _ = leases.delete(lease_name, &DeleteParams::default()).await;
    let port = free_port();
    let mut ccm = Ccm(Command::new(binary("ccm"))
        .arg(format!("--kubeconfig={kubeconfig}"))
        .arg("--node-name=overcast-it-host")
        .arg("--controllers=node")
        .arg(format!("--leader-elect-lease-name={lease_name}"))
        .arg(format!("--leader-elect-identity={identity}"))
        .arg(format!("--metrics-address=127.0.0.1:{port}"))
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap());
    wait_for("the lease held", async || {
        let l = leases.get_opt(lease_name).await.ok()??;
        (l.spec?.holder_identity.as_deref() == Some(identity)).then_some(())
    })
    .await;
    let pid = nix::unistd::Pid::from_raw(ccm.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let exited = wait_for("the ccm to exit", async || match ccm.0.try_wait() {
        Ok(Some(status)) => Some(status),
        _ => {
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    })
    .await;
    assert!(exited.success(), "{exited}");
    let spec = leases.get(lease_name).await.unwrap().spec.unwrap();
    assert_eq!(
        spec.holder_identity.as_deref().unwrap_or(""),
        "",
        "{spec:?}"
    );
    assert_eq!(spec.lease_duration_seconds, Some(1));
    let _ = leases.delete(lease_name, &DeleteParams::default()).await;
}

/// Heartbeats do not list the cloud: kubelets patch their node's status every few
/// seconds, and before every such event started a full sync (one cloud listing each).
/// Twenty heartbeats after initialization cost no listing; a new node costs one.
#[tokio::test]
async fn heartbeats_do_not_list_the_cloud_on_a_real_api_server() {
    let Ok(kubeconfig) = std::env::var(ENV) else {
        say_skipped(&format!(
            "set {ENV} to a disposable cluster's kubeconfig to count cloud listings on a real API server"
        ));
        return;
    };
    let _turn = overcast_integration::real::cluster_turn().await;
    let names = ["overcast-it-beat", "overcast-it-late"];
    let dir = tempfile::tempdir().unwrap();
    let instances = dir.path().join("instances.json");
    std::fs::write(
        &instances,
        json!([{"name": names[0]}, {"name": names[1]}]).to_string(),
    )
    .unwrap();
    let c = client(&kubeconfig).await;
    let nodes: Api<Node> = Api::all(c.clone());
    let node = |name: &str| -> Node {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]},
        }))
        .unwrap()
    };
    for n in names {
        let _ = nodes.delete(n, &DeleteParams::default()).await;
    }
    nodes
        .create(&PostParams::default(), &node(names[0]))
        .await
        .unwrap();
    let port = free_port();
    let _ccm = Ccm(Command::new(binary("ccm"))
        .arg(format!("--kubeconfig={kubeconfig}"))
        .arg(format!("--instances-file={}", instances.display()))
        .arg("--node-name=overcast-it-host")
        .arg("--controllers=node")
        .arg("--node-sync-period=600")
        .arg("--leader-elect-lease-name=overcast-it-ccm-beats")
        .arg(format!("--metrics-address=127.0.0.1:{port}"))
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap());
    let initialized = |name: &'static str| {
        let nodes = nodes.clone();
        async move {
            wait_for("initialization", async || {
                let n = nodes.get(name).await.ok()?;
                n.spec?.provider_id.is_some().then_some(())
            })
            .await
        }
    };
    initialized(names[0]).await;
    let listings = || {
        let (_, body) = http_get(port, "/metrics");
        overcast_integration::real::metric(&body, "ccm_cloud_calls_total{call=\"list_instances\"}")
            .unwrap_or(0.0)
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = listings();
    for i in 0..20 {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        nodes
            .patch_status(
                names[0],
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"status": {"conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": format!("beat {i}"), "lastHeartbeatTime": now, "lastTransitionTime": now}
                ]}})),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_beats = listings();
    // The first heartbeat turned the node Ready: one sync for that, none for the rest.
    assert!(
        after_beats - before <= 1.0,
        "20 heartbeats cost {} cloud listings",
        after_beats - before
    );
    nodes
        .create(&PostParams::default(), &node(names[1]))
        .await
        .unwrap();
    initialized(names[1]).await;
    assert!(listings() > after_beats, "a new node is handled at once");
    for n in names {
        let _ = nodes.delete(n, &DeleteParams::default()).await;
    }
}

/// A node the ccm initializes while a LoadBalancer Service exists joins the Service's pool
/// at once — a connection through the balancer reaches the node's NodePort within
/// seconds — not at the Services' next resync (300 s): the node getting its providerID
/// and addresses wakes the Services. (Before: only a readiness change did, and a node
/// that was Ready before the ccm gave it addresses waited for the resync.)
#[tokio::test]
async fn a_node_initialized_while_a_service_exists_joins_its_pool_at_once() {
    let Ok(kubeconfig) = std::env::var(ENV) else {
        say_skipped(&format!(
            "set {ENV} to a disposable cluster's kubeconfig to run the CCM against a real API server"
        ));
        return;
    };
    let _turn = overcast_integration::real::cluster_turn().await;
    let dir = tempfile::tempdir().unwrap();
    let instances = dir.path().join("instances.json");
    let node_ip = "127.0.0.91";
    std::fs::write(
        &instances,
        json!([{"name": "overcast-it-pool", "addresses": [{"type": "InternalIP", "address": node_ip}]}])
            .to_string(),
    )
    .unwrap();
    let c = client(&kubeconfig).await;
    let nodes: Api<Node> = Api::all(c.clone());
    let services: Api<Service> = Api::namespaced(c.clone(), "default");
    let _ = nodes
        .delete("overcast-it-pool", &DeleteParams::default())
        .await;
    // A run that failed left its Service with the finalizer of a ccm that is gone.
    let _ = services
        .delete("overcast-it-pool", &DeleteParams::default())
        .await;
    let _ = services
        .patch(
            "overcast-it-pool",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await;
    wait_for("an earlier run's Service gone", async || {
        services
            .get_opt("overcast-it-pool")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let _ccm = Ccm(Command::new(binary("ccm"))
        .arg(format!("--kubeconfig={kubeconfig}"))
        .arg(format!("--instances-file={}", instances.display()))
        .arg("--node-name=overcast-it-host")
        .arg("--zone=zone-a")
        .arg("--region=region-1")
        .arg("--lb-pool=127.243.0.0/24")
        .arg("--node-sync-period=2")
        .arg("--leader-elect-lease-name=overcast-it-ccm-pool")
        .arg(format!("--metrics-address=127.0.0.1:{}", free_port()))
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap());
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "overcast-it-pool"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "none"}, "ports": [{"port": 18090, "protocol": "TCP"}]},
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let (ip, node_port) = wait_for("an ingress address", async || {
        let s = services.get("overcast-it-pool").await.ok()?;
        let ip = s.status?.load_balancer?.ingress?.first()?.ip.clone()?;
        Some((ip, s.spec?.ports?.first()?.node_port?))
    })
    .await;
    // The node's NodePort, played by the test: what the balancer forwards to.
    let listener = tokio::net::TcpListener::bind((node_ip, node_port as u16))
        .await
        .expect("the NodePort's stand-in");

    // A kubelet registers the node, Ready, waiting for the ccm.
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "overcast-it-pool"},
        "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]},
    }))
    .unwrap();
    let registered = std::time::Instant::now();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    nodes
        .patch_status(
            "overcast-it-pool",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}})),
        )
        .await
        .unwrap();
    let joined = overcast_integration::real::wait_for(
        "a connection through the balancer to the new node",
        Duration::from_secs(30),
        async || {
            let mut s = tokio::time::timeout(
                Duration::from_millis(500),
                tokio::net::TcpStream::connect((ip.as_str(), 18090)),
            )
            .await
            .ok()?
            .ok()?;
            let accepted = tokio::time::timeout(Duration::from_millis(500), listener.accept())
                .await
                .ok()?
                .ok()?;
            use tokio::io::AsyncWriteExt;
            let _ = s.write_all(b"x").await;
            drop(accepted);
            Some(registered.elapsed())
        },
    )
    .await;
    eprintln!(
        "the new node joined the pool {} ms after it registered",
        joined.as_millis()
    );
    assert!(joined < Duration::from_secs(30));
    services
        .delete("overcast-it-pool", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the finalizer released", async || {
        services
            .get_opt("overcast-it-pool")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let _ = nodes
        .delete("overcast-it-pool", &DeleteParams::default())
        .await;
}
