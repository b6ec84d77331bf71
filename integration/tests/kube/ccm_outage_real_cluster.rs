//! Issue 13 §4 replayed on a real API server: etcd stopped under a leading ccm, and a
//! Service whose load balancer keeps failing. Runs only when `OVERCAST_TEST_KUBECONFIG`
//! names the kit's cluster (the test stops the kit's etcd with SIGSTOP and resumes it);
//! otherwise it says clearly that it was skipped.
//!
//! Expected, as client-go's leader election and the upstream service controller behave:
//! - leadership ends within the renew deadline of the last renewal, even though the API
//!   server takes the requests and never answers — before the lease could expire for
//!   another replica;
//! - the process stays up and its load balancers keep forwarding while it does not lead;
//! - when the API server is back it leads again and adopts the balancers it has;
//! - a Service whose balancer fails is retried with a doubling delay, and no other Service
//!   waits for it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use overcast_integration::real::{self, kit_etcd, metric, wait_for, EtcdStopped};
use overcast_integration::{binary, free_port, http_get, KillOnDrop};
use serde_json::json;

const LEASE: &str = "overcast-it-outage";
const NODE: &str = "overcast-it-outage-node";
const SERVICES: [&str; 3] = [
    "overcast-it-outage-a",
    "overcast-it-outage-dup",
    "overcast-it-outage-b",
];

/// A NodePort stand-in on the node's address: answers `hello` to every connection.
fn backend(port: u16) {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind the node port");
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let _ = conn.write_all(b"hello");
        }
    });
}

/// What a client gets through the balancer at `ip:port`.
fn through(ip: &str, port: u16) -> std::io::Result<String> {
    let mut conn = TcpStream::connect_timeout(
        &format!("{ip}:{port}").parse().unwrap(),
        Duration::from_secs(2),
    )?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut out = String::new();
    conn.read_to_string(&mut out)?;
    Ok(out)
}

fn service(name: &str, port: u16, ip: Option<&str>) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "selector": {"app": "none"},
                 "ports": [{"port": port, "protocol": "TCP"}],
                 "loadBalancerIP": ip},
    }))
    .unwrap()
}

async fn ingress(api: &Api<Service>, name: &str) -> Option<String> {
    let s = api.get(name).await.ok()?;
    s.status?.load_balancer?.ingress?.first()?.ip.clone()
}

/// Creates a LoadBalancer Service, waits for its address and starts the NodePort stand-in
/// behind it: (ingress IP, port).
async fn balanced(services: &Api<Service>, name: &str) -> (String, u16) {
    let port = free_port();
    services
        .create(&PostParams::default(), &service(name, port, None))
        .await
        .unwrap();
    let ip = wait_for(
        &format!("an address for {name}"),
        Duration::from_secs(30),
        async || ingress(services, name).await,
    )
    .await;
    let spec = services.get(name).await.unwrap().spec.unwrap();
    let node_port = spec.ports.unwrap()[0].node_port.unwrap();
    backend(u16::try_from(node_port).unwrap());
    (ip, port)
}

fn leading(metrics_port: u16) -> Option<f64> {
    let (code, body) = http_get(metrics_port, "/metrics");
    (code == 200)
        .then(|| {
            metric(
                &body,
                &format!("leader_election_master_status{{name=\"{LEASE}\"}}"),
            )
        })
        .flatten()
}

fn service_errors(metrics_port: u16) -> f64 {
    let (_, body) = http_get(metrics_port, "/metrics");
    metric(
        &body,
        "ccm_reconcile_errors_total{controller=\"service\",kind=\"cloud\"}",
    )
    .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_outage_ends_leadership_in_time_and_never_stops_the_traffic() {
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(kubeconfig) = real::kubeconfig("the ccm outage test") else {
        return;
    };
    let Some(etcd) = kit_etcd(&kubeconfig) else {
        overcast_integration::say_skipped(
            "the ccm outage test: the cluster is not the kit's (no etcd of its own to stop)",
        );
        return;
    };
    let c = real::client(&kubeconfig).await;
    let nodes: Api<Node> = Api::all(c.clone());
    let services: Api<Service> = Api::namespaced(c.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-system");
    let _ = nodes.delete(NODE, &DeleteParams::default()).await;
    let _ = leases.delete(LEASE, &DeleteParams::default()).await;
    for s in SERVICES {
        // A Service left by an earlier run still carries the finalizer of a ccm long gone.
        let _ = services
            .patch(
                s,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
        let _ = services.delete(s, &DeleteParams::default()).await;
    }
    // One Ready node at 127.0.0.1: the balancers' only backend.
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    nodes
        .patch_status(
            NODE,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test",
                                "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            }})),
        )
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let instances = dir.path().join("instances.json");
    std::fs::write(
        &instances,
        json!([{"name": NODE, "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}])
            .to_string(),
    )
    .unwrap();
    let metrics_port = free_port();
    let mut ccm = KillOnDrop(
        Command::new(binary("ccm"))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--instances-file={}", instances.display()))
            .args([
                "--node-name=overcast-it-host",
                "--zone=zone-a",
                "--region=region-1",
            ])
            .args(["--controllers=service", "--lb-pool=127.243.0.0/24"])
            .arg(format!("--leader-elect-lease-name={LEASE}"))
            .args([
                "--leader-elect-lease-duration=6s",
                "--leader-elect-renew-deadline=4s",
                "--leader-elect-retry-period=1s",
                "--service-retry-min-delay=1s",
                "--service-retry-max-delay=8s",
            ])
            .arg(format!("--metrics-address=127.0.0.1:{metrics_port}"))
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );

    // A balancer that works.
    let (ip_a, port_a) = balanced(&services, SERVICES[0]).await;
    assert_eq!(through(&ip_a, port_a).unwrap(), "hello");

    // A balancer that cannot work: the address is taken. Retried 1 s, 2 s, 4 s, 8 s, 8 s…
    // apart: in 12 s at most 5 attempts (a fixed 1 s retry would make about 12).
    let before = service_errors(metrics_port);
    services
        .create(
            &PostParams::default(),
            &service(SERVICES[1], free_port(), Some(&ip_a)),
        )
        .await
        .unwrap();
    wait_for("the first failure", Duration::from_secs(10), async || {
        (service_errors(metrics_port) > before).then_some(())
    })
    .await;
    let first = service_errors(metrics_port);
    tokio::time::sleep(Duration::from_secs(12)).await;
    let attempts = service_errors(metrics_port) - first;
    assert!(
        (2.0..=5.0).contains(&attempts),
        "a failing Service was retried {attempts} times in 12 s after its first failure (want 2–5: doubling delays)"
    );

    // The outage. Leadership must end within the renew deadline (4 s) of the last renewal,
    // which was at most a retry period (1 s) before: well before the 6 s lease could pass to
    // another replica.
    assert_eq!(leading(metrics_port), Some(1.0));
    let stopped_at = Instant::now();
    {
        let _stopped = EtcdStopped::new(etcd);
        wait_for("leadership to end", Duration::from_secs(6), async || {
            (leading(metrics_port) == Some(0.0)).then_some(())
        })
        .await;
        let took = stopped_at.elapsed();
        assert!(
            took < Duration::from_secs(6),
            "still leading {took:?} after the API server stopped answering: past the lease"
        );
        // Not leading, not exited, still forwarding.
        assert!(
            ccm.0.try_wait().unwrap().is_none(),
            "the ccm exited on losing leadership"
        );
        for _ in 0..3 {
            assert_eq!(
                through(&ip_a, port_a).unwrap(),
                "hello",
                "traffic stopped with the control plane"
            );
        }
        // Beyond the lease: the outage outlasts it.
        let outage = Duration::from_secs(10);
        tokio::time::sleep(outage.saturating_sub(stopped_at.elapsed())).await;
        assert_eq!(through(&ip_a, port_a).unwrap(), "hello");
    }

    // Back: it leads again, the balancer it kept is adopted (not rebound), and a new
    // Service is served while the broken one is still backing off.
    wait_for("leadership again", Duration::from_secs(40), async || {
        (leading(metrics_port) == Some(1.0)).then_some(())
    })
    .await;
    let (ip_b, port_b) = balanced(&services, SERVICES[2]).await;
    assert_eq!(through(&ip_b, port_b).unwrap(), "hello");
    // The broken Service's backoff outlived the leadership: it did not start over at 1 s.
    let (_, body) = http_get(metrics_port, "/metrics");
    assert_eq!(metric(&body, "ccm_service_retry_waiting"), Some(1.0));
    assert_eq!(through(&ip_a, port_a).unwrap(), "hello");
    assert_eq!(
        ingress(&services, SERVICES[0]).await.as_deref(),
        Some(&ip_a[..])
    );
    assert!(ccm.0.try_wait().unwrap().is_none());
    let lease = leases.get(LEASE).await.unwrap().spec.unwrap();
    assert!(lease.lease_transitions.unwrap_or(0) <= 1, "{lease:?}");

    for s in SERVICES {
        let _ = services.delete(s, &DeleteParams::default()).await;
    }
    wait_for(
        "the finalizers released",
        Duration::from_secs(30),
        async || {
            for s in [SERVICES[0], SERVICES[2]] {
                if services.get_opt(s).await.ok()?.is_some() {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    drop(ccm);
    let _ = services
        .patch(
            SERVICES[1],
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    let _ = nodes.delete(NODE, &DeleteParams::default()).await;
    let _ = leases.delete(LEASE, &DeleteParams::default()).await;
}
