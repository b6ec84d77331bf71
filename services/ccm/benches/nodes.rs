//! Initializing 5,000 uninitialized nodes in one sync: wall time, Kubernetes API calls
//! per node and cloud calls per sync. The API is an in-process server answering every
//! request at once (so the figure is the controller's own cost, not a network's); the
//! raw baseline in the same run sends the same number of PATCH requests through the same
//! client with no controller logic.
//!
//! `cargo bench -p overcast-ccm --bench nodes`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use http::{Request, Response};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::client::Body;
use kube::{Api, Client};
use overcast_ccm::addresses::AddressPolicy;
use overcast_ccm::metrics::Metrics;
use overcast_ccm::nodes::guard::DeletionGuard;
use overcast_ccm::nodes::{NodeSync, Parts, UNINITIALIZED_TAINT};
use overcast_cloud::{AddressType, Instance, InstanceState, Instances, NodeAddress, Zone};
use serde_json::json;

struct Cloud {
    instances: Vec<Instance>,
    calls: AtomicUsize,
}

#[async_trait]
impl Instances for Cloud {
    fn provider_name(&self) -> &'static str {
        "bench"
    }
    async fn list_instances(&self) -> overcast_cloud::Result<Vec<Instance>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(self.instances.clone())
    }
}

/// An API that answers every request with a small Node, counting requests.
fn api_server() -> (Client, Arc<AtomicUsize>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let count = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&count);
    tokio::spawn(async move {
        let reply = serde_json::to_vec(
            &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}),
        )
        .expect("bench setup");
        while let Some((_req, send)) = handle.next_request().await {
            counter.fetch_add(1, Ordering::Relaxed);
            send.send_response(
                Response::builder()
                    .status(200)
                    .body(Body::from(reply.clone()))
                    .expect("bench setup"),
            );
        }
    });
    (Client::new(service, "default"), count)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = 5000;
    let instances: Vec<Instance> = (0..n)
        .map(|i| Instance {
            node_name: format!("node-{i}"),
            provider_id: format!("bench://node-{i}"),
            instance_type: "m.large".into(),
            addresses: vec![
                NodeAddress {
                    kind: AddressType::InternalIP,
                    address: format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256),
                },
                NodeAddress {
                    kind: AddressType::Hostname,
                    address: format!("node-{i}"),
                },
            ],
            zone: Some(Zone {
                region: "r1".into(),
                zone: format!("z{}", i % 3),
            }),
            state: InstanceState::Running,
        })
        .collect();
    let nodes: Vec<Node> = (0..n)
        .map(|i| {
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": format!("node-{i}"), "resourceVersion": "1"},
                "spec": {"taints": [{"key": UNINITIALIZED_TAINT, "effect": "NoSchedule"}]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .expect("bench setup")
        })
        .collect();
    let cloud = Cloud {
        instances,
        calls: AtomicUsize::new(0),
    };
    let metrics = Metrics::unregistered();
    let policy = AddressPolicy::default();

    let (client, api_calls) = api_server();
    let api: Api<Node> = Api::all(client);
    let started = Instant::now();
    let report = NodeSync {
        api: &api,
        cloud: &cloud,
        policy: &policy,
        metrics: &metrics,
        parts: Parts {
            initialize: true,
            lifecycle: true,
        },
        concurrency: 16,
        guard: &DeletionGuard::off(),
        recorder: None,
    }
    .run(&nodes)
    .await
    .expect("sync");
    let ours = started.elapsed();
    assert_eq!(report.initialized, n);
    let calls = api_calls.load(Ordering::SeqCst);

    // Raw baseline: the same number of PATCH requests, no controller logic.
    let (client, _) = api_server();
    let raw_api: Api<Node> = Api::all(client);
    let patch = json!({"metadata": {"labels": {"a": "b"}}});
    let started = Instant::now();
    for i in 0..calls {
        raw_api
            .patch(
                &format!("node-{}", i % n),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .expect("patch");
    }
    let raw = started.elapsed();

    println!("## CCM: initializing {n} uninitialized nodes in one sync\n");
    println!("| | wall time | per node |");
    println!("|---|---|---|");
    println!(
        "| node controller sync | {:.0} ms | {:.0} µs |",
        ours.as_secs_f64() * 1e3,
        ours.as_secs_f64() * 1e6 / n as f64
    );
    println!(
        "| raw baseline ({calls} bare PATCHes, same client) | {:.0} ms | {:.0} µs |",
        raw.as_secs_f64() * 1e3,
        raw.as_secs_f64() * 1e6 / n as f64
    );
    println!();
    println!(
        "- Kubernetes API calls per node: {:.2} (a spec/metadata patch and a status patch)",
        calls as f64 / n as f64
    );
    println!(
        "- cloud calls per sync: {} (list_instances, for all {n} nodes)",
        cloud.calls.load(Ordering::SeqCst)
    );
}
