//! Initializing 5,000 uninitialized nodes in one sync: wall time, Kubernetes API calls
//! per node and cloud calls per sync. The API is an in-process server answering every
//! request at once (so the figure is the controller's own cost, not a network's); the
//! raw baseline in the same run sends the same number of PATCH requests through the same
//! client with no controller logic.
//!
//! `cargo bench -p overcast-ccm --bench nodes`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
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

/// Counts the bytes live on the heap, so the node cache's size is measured exactly.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is the system allocator's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap bytes the node cache holds for `n` kubelet-written Nodes, as they come from the
/// API and as `nodes::slim` keeps them.
fn cache_bytes(n: usize) -> (isize, isize, isize) {
    let values: Vec<serde_json::Value> = (0..n).map(overcast_ccm::fixtures::kubelet_node).collect();
    let start = LIVE.load(Ordering::SeqCst);
    let full: Vec<Node> = values
        .iter()
        .map(|v| serde_json::from_value(v.clone()).expect("bench setup"))
        .collect();
    let full_bytes = LIVE.load(Ordering::SeqCst) - start;
    let start = LIVE.load(Ordering::SeqCst);
    let slim: Vec<Node> = full
        .iter()
        .map(|n| {
            let mut n = n.clone();
            overcast_ccm::nodes::slim(&mut n);
            n
        })
        .collect();
    let slim_bytes = LIVE.load(Ordering::SeqCst) - start;
    // What the cache kept before issue 15: managedFields and the image list dropped.
    let start = LIVE.load(Ordering::SeqCst);
    let earlier: Vec<Node> = full
        .iter()
        .map(|n| {
            let mut n = n.clone();
            n.metadata.managed_fields = None;
            if let Some(s) = n.status.as_mut() {
                s.images = None;
            }
            n
        })
        .collect();
    let earlier_bytes = LIVE.load(Ordering::SeqCst) - start;
    drop((values, full, slim, earlier));
    (full_bytes, earlier_bytes, slim_bytes)
}

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
            fencing: None,
        },
        concurrency: 16,
        guard: &DeletionGuard::off(),
        recorder: None,
        held_back: None,
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

    // The node cache: heap bytes per 1,000 kubelet-written Nodes (40 images, nodeInfo,
    // five conditions, managedFields), as the API sends them and as the cache keeps them.
    let (full, earlier, slim) = cache_bytes(n);
    let mib_per_1000 = |b: isize| b as f64 / (n as f64 / 1000.0) / (1024.0 * 1024.0);
    println!();
    println!("### The ccm's node cache, {n} kubelet-written Nodes (heap bytes, counted)");
    println!();
    println!("| | per 1,000 nodes | per node |");
    println!("|---|---|---|");
    println!(
        "| as the API sends them (baseline) | {:.1} MiB | {} B |",
        mib_per_1000(full),
        full / n as isize
    );
    println!(
        "| managedFields and images dropped (the cache before issue 15) | {:.1} MiB | {} B |",
        mib_per_1000(earlier),
        earlier / n as isize
    );
    println!(
        "| as the cache keeps them (`nodes::slim`) | {:.1} MiB | {} B |",
        mib_per_1000(slim),
        slim / n as isize
    );
}
