//! A volume's life on the kit's real node, with the suite installed as a user installs it
//! (`kubectl apply -k integration/real-node`): PVC created → pod Running, and pod deleted
//! → volume detached, p50 and p95 over N rounds (`OVERCAST_BENCH_ROUNDS`, default 20),
//! each split by stage. Baseline in the same run: the same pod with an emptyDir (no CSI
//! at all), created → Running and deleted → gone — the floor of the scheduler, kubelet and
//! containerd under which no volume can go. Then the node plugin's resident memory with
//! no volume and with N volumes mounted at once.
//!
//! Stages as the cluster sees them, from a watch of the objects (each moment is when the
//! component responsible wrote it): provision = PVC created → Bound (scheduler picks the
//! node, external-provisioner, CreateVolume); attach = Bound → VolumeAttachment attached
//! (attach-detach controller, external-attacher, ControllerPublishVolume); mount =
//! attached → pod Running (kubelet: NodeStageVolume, NodePublishVolume, the container's
//! start). Inside them, our own time: each CSI call's latency from the csi containers'
//! logs (their `rpc` lines).
//!
//! Needs what the real-node test needs — `../shared/kit/node-up.sh DIR` exported and
//! `deploy/images/build.sh DIR` — then:
//!   OVERCAST_TEST_IMAGES=DIR cargo bench -p overcast-integration --bench real_node

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use kube::Client;
use serde_json::{json, Value};

use overcast_integration::real;
use overcast_integration::real_node::{Node, DRIVER};

const NS: &str = "overcast-bench-node";

/// When each thing was first seen, by key (`pvc-bound/NAME`, `va-attached/PV`, …).
type Seen = Arc<Mutex<HashMap<String, SystemTime>>>;

fn mark(seen: &Seen, key: String) {
    seen.lock()
        .unwrap()
        .entry(key)
        .or_insert_with(SystemTime::now);
}

/// Watches pods and claims in the namespace and every VolumeAttachment, marking the moments
/// the stages end at.
fn observe(client: &Client) -> Seen {
    let seen: Seen = Arc::default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    let s = Arc::clone(&seen);
    tokio::spawn(async move {
        let mut w = watcher(pods, watcher::Config::default()).boxed();
        while let Some(e) = w.next().await {
            match e {
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => {
                    let name = p.metadata.name.unwrap_or_default();
                    if p.status.and_then(|s| s.phase).as_deref() == Some("Running") {
                        mark(&s, format!("pod-running/{name}"));
                    }
                }
                Ok(watcher::Event::Delete(p)) => mark(
                    &s,
                    format!("pod-gone/{}", p.metadata.name.unwrap_or_default()),
                ),
                _ => {}
            }
        }
    });
    let s = Arc::clone(&seen);
    tokio::spawn(async move {
        let mut w = watcher(claims, watcher::Config::default()).boxed();
        while let Some(e) = w.next().await {
            if let Ok(watcher::Event::Apply(c)) | Ok(watcher::Event::InitApply(c)) = e {
                if c.status.and_then(|s| s.phase).as_deref() == Some("Bound") {
                    let name = c.metadata.name.unwrap_or_default();
                    mark(&s, format!("pvc-bound/{name}"));
                    if let Some(pv) = c.spec.and_then(|s| s.volume_name) {
                        s.lock()
                            .unwrap()
                            .entry(format!("pv-of/{name}/{pv}"))
                            .or_insert(SystemTime::UNIX_EPOCH);
                    }
                }
            }
        }
    });
    let s = Arc::clone(&seen);
    tokio::spawn(async move {
        let mut w = watcher(attachments, watcher::Config::default()).boxed();
        while let Some(e) = w.next().await {
            match e {
                Ok(watcher::Event::Apply(va)) | Ok(watcher::Event::InitApply(va)) => {
                    let pv = va.spec.source.persistent_volume_name.unwrap_or_default();
                    if va.status.is_some_and(|s| s.attached) {
                        mark(&s, format!("va-attached/{pv}"));
                    }
                }
                Ok(watcher::Event::Delete(va)) => {
                    let pv = va.spec.source.persistent_volume_name.unwrap_or_default();
                    mark(&s, format!("va-gone/{pv}"));
                }
                _ => {}
            }
        }
    });
    seen
}

/// Waits for `key` to be seen; when it was.
async fn seen_at(seen: &Seen, key: &str, limit: Duration) -> SystemTime {
    real::wait_for(key, limit, async || seen.lock().unwrap().get(key).copied()).await
}

/// The PV bound to claim `claim`, once seen.
fn pv_of(seen: &Seen, claim: &str) -> Option<String> {
    let prefix = format!("pv-of/{claim}/");
    seen.lock()
        .unwrap()
        .keys()
        .find_map(|k| k.strip_prefix(&prefix).map(str::to_owned))
}

fn pod_json(name: &str, volume: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "c", "image": "busybox:1.35.0", "imagePullPolicy": "Never",
                "command": ["sh", "-c", "sleep 3600"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [volume],
        },
    }))
    .unwrap()
}

fn claim_json(name: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "overcast-local",
            "resources": {"requests": {"storage": "16Mi"}},
        },
    }))
    .unwrap()
}

/// A claim and a pod that mounts it, both named `name`.
async fn claim_and_pod(claims: &Api<PersistentVolumeClaim>, pods: &Api<Pod>, name: &str) {
    let pp = PostParams::default();
    claims.create(&pp, &claim_json(name)).await.unwrap();
    pods.create(
        &pp,
        &pod_json(
            name,
            json!({"name": "data", "persistentVolumeClaim": {"claimName": name}}),
        ),
    )
    .await
    .unwrap();
}

fn since(a: SystemTime, b: SystemTime) -> Duration {
    b.duration_since(a).unwrap_or_default()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// One line of the report: p50 and p95 of `d`.
fn row(what: &str, mut d: Vec<Duration>) {
    d.sort();
    println!(
        "| {what} | {} | {:.0} ms | {:.0} ms |",
        d.len(),
        percentile(&d, 0.5).as_secs_f64() * 1e3,
        percentile(&d, 0.95).as_secs_f64() * 1e3
    );
}

/// Each successful CSI call's latency from a csi container's `rpc` log lines since
/// `from`, by method (`CreateVolume`, …).
fn rpc_latencies(node: &Node, selector: &str, from: SystemTime) -> HashMap<String, Vec<Duration>> {
    let since = jiff::Timestamp::try_from(from).unwrap().to_string();
    let logs = node.kubectl(&[
        "-n",
        "kube-system",
        "logs",
        "-l",
        selector,
        "-c",
        "csi",
        "--tail=-1",
        &format!("--since-time={since}"),
    ]);
    let mut by = HashMap::<String, Vec<Duration>>::new();
    for line in logs.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["message"] != "rpc" || v["code"] != "Ok" {
            continue;
        }
        let (Some(method), Some(us)) = (v["method"].as_str(), v["latency_us"].as_u64()) else {
            continue;
        };
        let name = method.rsplit('/').next().unwrap_or(method).to_owned();
        by.entry(name).or_default().push(Duration::from_micros(us));
    }
    by
}

/// The node plugin's process on this machine (the DaemonSet's `csi --mode=node`): its
/// resident set, KiB.
fn node_plugin_rss_kib() -> u64 {
    let mut found = vec![];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_plugin = args.first().is_some_and(|a| a.ends_with(b"/csi"))
            && args.iter().any(|a| *a == b"--mode=node");
        if !is_plugin {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        if let Some(kib) = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        {
            found.push(kib);
        }
    }
    assert_eq!(found.len(), 1, "one node plugin process: {found:?}");
    found[0]
}

#[tokio::main]
async fn main() {
    let Some(node) = Node::from_env() else {
        return;
    };
    let rounds: usize = std::env::var("OVERCAST_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20);
    node.install();
    let _ = node.try_kubectl(&["delete", "namespace", NS, "--wait=true"]);
    node.kubectl(&["create", "namespace", NS]);
    let client = real::client(&node.kubeconfig).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let seen = observe(&client);
    let limit = Duration::from_secs(180);
    let pp = PostParams::default();
    let now_dp = DeleteParams::default();

    // Baseline: an emptyDir pod, created → Running, deleted → gone.
    let (mut base_up, mut base_gone) = (vec![], vec![]);
    for i in 0..rounds {
        let name = format!("base-{i}");
        let t0 = SystemTime::now();
        pods.create(
            &pp,
            &pod_json(&name, json!({"name": "data", "emptyDir": {}})),
        )
        .await
        .unwrap();
        base_up.push(since(
            t0,
            seen_at(&seen, &format!("pod-running/{name}"), limit).await,
        ));
        let t1 = SystemTime::now();
        pods.delete(&name, &now_dp).await.unwrap();
        base_gone.push(since(
            t1,
            seen_at(&seen, &format!("pod-gone/{name}"), limit).await,
        ));
    }

    // The same pod with a claim of the local cloud's StorageClass.
    let from = SystemTime::now();
    let (mut up, mut provision, mut attach, mut mount) = (vec![], vec![], vec![], vec![]);
    let (mut down, mut unmount, mut detach) = (vec![], vec![], vec![]);
    for i in 0..rounds {
        let name = format!("vol-{i}");
        let t0 = SystemTime::now();
        claim_and_pod(&claims, &pods, &name).await;
        let running = seen_at(&seen, &format!("pod-running/{name}"), limit).await;
        let bound = seen_at(&seen, &format!("pvc-bound/{name}"), limit).await;
        let pv = pv_of(&seen, &name).expect("the claim's PV once Bound");
        let attached = seen_at(&seen, &format!("va-attached/{pv}"), limit).await;
        up.push(since(t0, running));
        provision.push(since(t0, bound));
        attach.push(since(bound, attached));
        mount.push(since(attached, running));

        let t1 = SystemTime::now();
        pods.delete(&name, &now_dp).await.unwrap();
        let gone = seen_at(&seen, &format!("pod-gone/{name}"), limit).await;
        let detached = seen_at(&seen, &format!("va-gone/{pv}"), limit).await;
        down.push(since(t1, detached));
        unmount.push(since(t1, gone));
        detach.push(since(gone, detached));
        // The claim goes too, and its volume with it, before the next round starts.
        claims.delete(&name, &now_dp).await.unwrap();
        node.wait_for(
            "the round's PV deleted",
            limit,
            &["get", "pv", &pv, "--ignore-not-found", "-o", "name"],
            |out| out.trim().is_empty(),
        );
    }
    let controller = rpc_latencies(&node, "app.kubernetes.io/component=csi-controller", from);
    let plugin = rpc_latencies(&node, "app.kubernetes.io/component=csi-node", from);

    // The node plugin's memory: idle, then with N volumes mounted at once.
    let idle_kib = node_plugin_rss_kib();
    for i in 0..rounds {
        let name = format!("many-{i}");
        claim_and_pod(&claims, &pods, &name).await;
    }
    for i in 0..rounds {
        seen_at(
            &seen,
            &format!("pod-running/many-{i}"),
            Duration::from_secs(600),
        )
        .await;
    }
    let loaded_kib = node_plugin_rss_kib();
    node.kubectl(&["delete", "namespace", NS, "--wait=true", "--timeout=600s"]);
    node.wait_for(
        "every PV of the benchmark deleted",
        Duration::from_secs(600),
        &["get", "pv", "-o", "name"],
        |out| out.trim().is_empty(),
    );

    println!("## Real node ({DRIVER}, kubelet v1.25 on this machine), {rounds} rounds\n");
    println!("| stage | n | p50 | p95 |");
    println!("| --- | --- | --- | --- |");
    row("baseline: emptyDir pod created → Running", base_up);
    row("PVC + pod created → pod Running", up);
    row("· provision (created → PVC Bound)", provision);
    row("· attach (Bound → VolumeAttachment attached)", attach);
    row("· mount (attached → pod Running)", mount);
    row("baseline: emptyDir pod deleted → gone", base_gone);
    row("pod deleted → volume detached", down);
    row("· unmount (deleted → pod gone)", unmount);
    row("· detach (pod gone → VolumeAttachment deleted)", detach);
    for (side, calls) in [("controller", &controller), ("node plugin", &plugin)] {
        let mut names: Vec<&String> = calls.keys().collect();
        names.sort();
        for name in names {
            row(&format!("our {name} ({side}'s log)"), calls[name].clone());
        }
    }
    println!(
        "\nnode plugin resident set: {:.1} MiB with no volume, {:.1} MiB with {rounds} mounted",
        idle_kib as f64 / 1024.0,
        loaded_kib as f64 / 1024.0
    );
}
