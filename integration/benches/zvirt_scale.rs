//! What the zVirt binaries cost the engine as it grows beyond the cluster (issue 70): an
//! engine holding this cluster's 5 nodes and one volume of ours, and `N − 5` VMs of
//! another oVirt cluster, each with its boot disk (a common enterprise engine). Through
//! the real binaries — the ccm (node controllers, a faithful in-process API server with
//! the 5 Nodes), the csi controller on its socket, the discoverer — against the engine
//! simulator, which counts every call and the bytes of every answer (logins included):
//!
//! - ccm: one node sync (calls and bytes over a window of periodic syncs, divided by the
//!   syncs its own metric counted; the time its duration histogram gives), and a new Node
//!   from its creation to its initialization (the periodic syncs in that window included);
//! - csi: ListVolumes whole and with `max_entries 1`;
//! - discoverer: one pass (its cycle histogram's count and time);
//! - each process's resident set (VmRSS) and peak (VmHWM) after;
//! - the baseline, in the same run: what the releases before this issue read for the
//!   same answers — the whole VM listing with reported devices (a node sync), and the
//!   whole disk listing plus every VM's attachments (ListVolumes) — each as one call
//!   through the provider's own client.
//!
//! Fails when any operation's bytes at the largest size exceed twice those at the
//! smallest. `cargo bench -p overcast-integration --bench zvirt_scale`
//! (`OVERCAST_BENCH_VMS=10,2000`: the engine's sizes).

use std::time::Duration;

use http::Method;
use overcast_integration::fake_api::FakeApi;
use overcast_integration::scale::{self, Size};
use overcast_integration::zvirt_sim::{self, Engine, Latency};
use overcast_integration::{csi_v1 as csi, free_port, peak_rss_kib, rss_kib, Csi};
use serde_json::json;

const NODES: &str = "/api/v1/nodes";
const OURS: usize = 5;
const GIB: u64 = 1 << 30;

/// The engine's count of calls and answered bytes so far.
fn moved(engine: &Engine) -> (f64, f64) {
    (engine.total_calls() as f64, engine.answer_bytes() as f64)
}

async fn one_size(vms: usize) -> Size {
    let dir = tempfile::tempdir().unwrap();
    let (by_id, files) = (dir.path().join("by-id"), dir.path().join("disks"));
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    let engine = Engine::new(&files, &by_id, 64 << 40, Latency::default());
    engine.start().await;
    engine.add_cluster("other", zvirt_sim::DATA_CENTER);
    let mut ours = Vec::new();
    for i in 0..OURS {
        let id = engine.add_vm(&format!("worker-{i}"));
        engine.set_vm_ips(&id, &[&format!("10.1.0.{}", 10 + i)]);
        engine.add_boot_disk(&id, 20 * GIB);
        ours.push(id);
    }
    for i in 0..vms.saturating_sub(OURS) {
        let id = engine.add_vm_in(&format!("other-{i:05}"), "other");
        engine.set_vm_ips(&id, &[&format!("10.2.{}.{}", i / 250, 1 + i % 250)]);
        engine.add_boot_disk(&id, 40 * GIB);
    }
    let conf = engine.cloud_config(dir.path());
    let mut size = Size::new(vms);

    // The baseline: what the releases before read for a node sync and a ListVolumes.
    let config = overcast_cloud_zvirt::Config::load(Some(&conf), &|_| None).unwrap();
    let client = overcast_cloud_zvirt::connect(&config, None).unwrap();
    client.json("api_get", Method::GET, "", None).await.unwrap();
    let (_, c) = scale::measured(|| moved(&engine), async {
        client
            .json("vm_list", Method::GET, "/vms?follow=reported_devices", None)
            .await
            .unwrap()
    })
    .await;
    size.ops
        .insert("baseline: the whole VM listing (a sync before)", c);
    let (_, c) = scale::measured(|| moved(&engine), async {
        client
            .json("disk_list", Method::GET, "/disks", None)
            .await
            .unwrap();
        client
            .json("vm_list", Method::GET, "/vms?follow=disk_attachments", None)
            .await
            .unwrap()
    })
    .await;
    size.ops.insert(
        "baseline: every disk and VM attachment (ListVolumes before)",
        c,
    );

    // The csi controller, one volume of ours.
    let csi = Csi::start(&[
        "--cloud=zvirt",
        &format!("--cloud-config={}", conf.display()),
        &format!("--node-id={}", ours[0]),
        &format!("--zone={}", zvirt_sim::CLUSTER),
    ])
    .await;
    let mut c = csi.controller().await;
    let mut req = overcast_integration::create_request(
        "pvc-11111111-2222-4333-8444-555555555555",
        GIB as i64,
    );
    req.parameters = [
        ("storageDomainName".to_owned(), "data".to_owned()),
        ("thinProvisioning".to_owned(), "true".to_owned()),
    ]
    .into();
    c.create_volume(req).await.expect("create");
    for (label, max) in [
        ("csi: ListVolumes", 0),
        ("csi: ListVolumes, max_entries 1", 1),
    ] {
        let (listed, cost) = scale::measured(|| moved(&engine), async {
            c.list_volumes(csi::ListVolumesRequest {
                max_entries: max,
                starting_token: String::new(),
            })
            .await
            .expect("list")
            .into_inner()
        })
        .await;
        assert_eq!(listed.entries.len(), 1, "{label}: {listed:?}");
        size.ops.insert(label, cost);
    }
    size.rss
        .insert("csi", (rss_kib(csi.pid()), peak_rss_kib(csi.pid())));

    // The ccm with the 5 Nodes, initialized.
    let api = FakeApi::default();
    let api_url = api.start().await;
    let kubeconfig = dir.path().join("kubeconfig");
    FakeApi::kubeconfig(&api_url, &kubeconfig);
    let node = |name: &str, provider: Option<&str>| {
        let mut n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        match provider {
            Some(id) => n["spec"]["providerID"] = json!(format!("zvirt://{id}")),
            None => {
                n["spec"]["taints"] = json!([{"key": "node.cloudprovider.kubernetes.io/uninitialized",
                    "value": "true", "effect": "NoSchedule"}])
            }
        }
        n
    };
    for (i, id) in ours.iter().enumerate().take(OURS - 1) {
        api.put(NODES, node(&format!("worker-{i}"), Some(id)));
    }
    let port = free_port();
    let ccm = scale::ccm("zvirt", &kubeconfig, &conf, port);
    let sync = scale::per_pass(
        || moved(&engine),
        port,
        "ccm_reconciles_total{controller=\"node\"}",
        "ccm_reconcile_duration_seconds_sum{controller=\"node\"}",
        Duration::from_secs(6),
    )
    .await;
    size.ops.insert("ccm: one node sync", sync);
    let newcomer = format!("worker-{}", OURS - 1);
    let (_, c) = scale::measured(|| moved(&engine), async {
        api.put(NODES, node(&newcomer, None));
        assert!(
            overcast_integration::eventually(Duration::from_secs(30), || {
                api.get(NODES, &newcomer).is_some_and(|n| {
                    n["spec"]["providerID"] == format!("zvirt://{}", ours[OURS - 1])
                })
            })
            .await,
            "the new Node initialized"
        );
    })
    .await;
    size.ops.insert("ccm: a new Node initialized", c);
    let pid = ccm.0.id();
    size.rss.insert("ccm", (rss_kib(pid), peak_rss_kib(pid)));
    drop(ccm);

    // The discoverer, one pass.
    let port = free_port();
    let discoverer = scale::discoverer("zvirt", &kubeconfig, &conf, port, &[]);
    let pass = scale::per_pass(
        || moved(&engine),
        port,
        "cloud_data_discovery_cycle_duration_seconds_count",
        "cloud_data_discovery_cycle_duration_seconds_sum",
        Duration::from_secs(6),
    )
    .await;
    size.ops.insert("discoverer: one pass", pass);
    let pid = discoverer.0.id();
    size.rss
        .insert("discoverer", (rss_kib(pid), peak_rss_kib(pid)));
    drop(discoverer);
    drop(csi);
    size
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = std::env::var("OVERCAST_BENCH_VMS")
        .unwrap_or_else(|_| "10,2000".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let mut measured = Vec::new();
    for vms in sizes {
        measured.push(one_size(vms).await);
    }
    let grew =
        overcast_integration::scale::report("VMs", &measured, |op| op.starts_with("baseline"));
    let (first, last) = (&measured[0], &measured[measured.len() - 1]);
    assert!(
        grew.is_empty(),
        "bytes at {} VMs more than twice those at {}: {grew:?}",
        last.size,
        first.size
    );
}
