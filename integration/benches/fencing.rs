//! A VM dies under a StatefulSet's pod: how long until the pod runs elsewhere, with its
//! volume. On the kit's node (`vm`) and a second one beside it (`vm-b`,
//! `integration/scripts/node-b.sh`), the suite installed as a user installs it, the local
//! cloud's inventory a file: each round the pod runs on `vm-b`, `vm-b` is powered off (its
//! cgroup killed) as its VM is reported `shutdown`, and the clock runs until the pod is
//! Ready on `vm` (its readiness probe reads the volume). p50/p95 over
//! `OVERCAST_BENCH_ROUNDS` rounds (default 10), with the ccm's defaults (`node-fencing`
//! named, grace 30 s, sync period 60 s) against the kit's controller-manager v1.25
//! (node-monitor-grace-period 40 s). Baseline in the same run: the same without fencing —
//! Kubernetes' own timeouts — watched for `OVERCAST_BENCH_BASELINE_LIMIT` seconds
//! (default 420, past the 6-minute force detach).
//!
//! Needs what the real-node test needs, the node started with
//! `KIT_FEATURE_GATES=NodeOutOfServiceVolumeDetach=true`:
//!   OVERCAST_TEST_IMAGES=DIR OVERCAST_TEST_KIT_NODE_DIR=NODE_DIR \
//!     cargo bench -p overcast-integration --bench fencing

use std::path::Path;
use std::time::{Duration, Instant};

use overcast_integration::fencing::{
    attachment, config_secret, configure, pod_node_and_ready, pod_to_vm_b, pv_of, ready_of_b,
    statefulset, taints_of_b, vm_b, wait_pod_ready_on, write_machines, Ccm, KUBELET_ARGS,
    MACHINES_HOST, OUT_OF_SERVICE,
};
use overcast_integration::node_b::{self, NodeB};
use overcast_integration::real_node::Node;

const NS: &str = "overcast-bench-fencing";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// vm-b back: its VM running, powered on, Ready, without the taint.
fn power_on(node: &Node, b: &NodeB, kit: &Path) {
    write_machines(&vm_b("running"));
    b.start(kit, KUBELET_ARGS);
    node.wait_for(
        "vm-b Ready and not out of service",
        Duration::from_secs(180),
        &[
            "get",
            "node",
            node_b::NAME,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status} {.spec.taints[*].key}",
        ],
        |out| out.starts_with("True") && !out.contains(OUT_OF_SERVICE),
    );
}

/// One round: the pod on vm-b, vm-b off as the cloud says so; (off → tainted, off → the
/// pod Ready on vm), or `None` when the pod was not Ready on vm within `limit`.
fn round(node: &Node, b: &NodeB, limit: Duration) -> (Option<Duration>, Option<Duration>) {
    pod_to_vm_b(node, NS);
    let off = Instant::now();
    b.power_off();
    write_machines(&vm_b("shutdown"));
    let mut tainted = None;
    loop {
        if tainted.is_none() && taints_of_b(node).contains(OUT_OF_SERVICE) {
            tainted = Some(off.elapsed());
        }
        if pod_node_and_ready(node, NS) == "vm True" {
            return (tainted, Some(off.elapsed()));
        }
        if off.elapsed() > limit {
            return (tainted, None);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let Some(node) = Node::from_env() else {
        return;
    };
    let Some(kit) = node_b::kit_node_dir() else {
        eprintln!("SKIPPED: set OVERCAST_TEST_KIT_NODE_DIR to the kit node's directory");
        return;
    };
    assert!(
        node_b::controller_manager_gates(&kit).contains("NodeOutOfServiceVolumeDetach=true"),
        "start the kit node with KIT_FEATURE_GATES=NodeOutOfServiceVolumeDetach=true"
    );
    let rounds = env_u64("OVERCAST_BENCH_ROUNDS", 10);
    let baseline_limit = Duration::from_secs(env_u64("OVERCAST_BENCH_BASELINE_LIMIT", 420));
    // Before the install: a Deployment an earlier run patched mounts the file's directory.
    write_machines(&vm_b("running"));
    node.install();
    configure(
        &node,
        &Ccm {
            fencing: true,
            grace: None,
            sync_period: None,
        },
    );
    let b = NodeB::up(
        &kit,
        Path::new("/tmp/overcast-node-b"),
        &node.kubeconfig,
        KUBELET_ARGS,
    )
    .expect("the second node");
    let _ = node.try_kubectl(&["create", "namespace", NS]);
    node.kubectl(&["cordon", "vm"]);
    node.apply("bench-fencing", &[statefulset(NS, "overcast-local")]);
    wait_pod_ready_on(&node, NS, node_b::NAME, Duration::from_secs(180));
    node.kubectl(&["uncordon", "vm"]);

    let mut tainted = Vec::new();
    let mut moved = Vec::new();
    for i in 0..rounds {
        let (t, m) = round(&node, &b, Duration::from_secs(600));
        let m = m.unwrap_or_else(|| panic!("round {i}: the pod never got to vm"));
        eprintln!(
            "round {i}: tainted after {:?}, the pod Ready on vm after {}",
            t.map(secs),
            secs(m)
        );
        tainted.extend(t);
        moved.push(m);
        power_on(&node, &b, &kit);
    }

    // The baseline: no fencing.
    configure(
        &node,
        &Ccm {
            fencing: false,
            grace: None,
            sync_period: None,
        },
    );
    let pv = pv_of(&node, NS);
    let (_, baseline) = round(&node, &b, baseline_limit);
    let left = format!(
        "pod {}, deletionTimestamp {:?}; the volume attached to {}",
        pod_node_and_ready(&node, NS),
        node.try_kubectl(&[
            "-n",
            NS,
            "get",
            "pod",
            "fenced-0",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ])
        .unwrap_or_default(),
        attachment(&node, &pv)
    );
    eprintln!(
        "baseline: {baseline:?} ({left}); vm-b Ready {}",
        ready_of_b(&node)
    );

    println!("#### VM off → the StatefulSet's pod Ready on another node ({rounds} rounds)");
    println!();
    println!("| | p50 | p95 | min | max |");
    println!("|---|---|---|---|---|");
    row("VM off → out-of-service taint (fencing)", &mut tainted);
    row("VM off → pod Ready elsewhere (fencing)", &mut moved);
    match baseline {
        Some(d) => println!(
            "| VM off → pod Ready elsewhere (no fencing, 1 round) | {} | | | |",
            secs(d)
        ),
        None => println!(
            "| VM off → pod Ready elsewhere (no fencing, 1 round) | not within {} ({left}) | | | |",
            secs(baseline_limit)
        ),
    }

    power_on(&node, &b, &kit);
    let _ = node.try_kubectl(&["delete", "namespace", NS, "--wait=true", "--timeout=180s"]);
    drop(b);
    node.apply("fencing-config-back", &[config_secret(false)]);
    let _ = std::fs::remove_dir_all(MACHINES_HOST);
}

/// A table row of `what`'s p50, p95, min and max (none while nothing was measured).
fn row(what: &str, times: &mut [Duration]) {
    times.sort();
    let (Some(min), Some(max)) = (times.first(), times.last()) else {
        return;
    };
    println!(
        "| {what} | {} | {} | {} | {} |",
        secs(percentile(times, 0.5)),
        secs(percentile(times, 0.95)),
        secs(*min),
        secs(*max)
    );
}
