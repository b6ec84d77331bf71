//! What the DVP binaries cost the parent as its namespace grows beyond the cluster
//! (issue 70): a namespace holding this cluster's 5 VMs (labelled with its UUID, as capdvp
//! labels them) and one volume of ours, and `N − 5` VMs of another cluster with
//! `(N − 5) / 5` volumes of theirs, labelled with their cluster's UUID as dvp-csi-driver
//! labels them and each attached as it attaches (a VirtualMachineBlockDeviceAttachment
//! labelled with its disk), on the simulated parent (the kit's real API server with the
//! virtualization CRDs and the simulator's controllers). Through the real binaries, each
//! given this cluster's UUID — the ccm (node controllers, an in-process API server with
//! the Nodes), the csi controller on its socket, the discoverer — each reaching the parent
//! through the simulator's proxy, which counts the requests and the bytes of every answer
//! to a read (watches left out):
//!
//! - ccm: one node sync (requests and bytes over a window of periodic syncs, divided by
//!   the syncs its own metric counted), and a new Node from its creation to its
//!   initialization;
//! - csi: ControllerPublish and ControllerUnpublish of our volume; ListVolumes whole and
//!   with `max_entries 1` (a page through the parent's paging);
//! - discoverer: one pass (its instance types and orphan report);
//! - each process's resident set (VmRSS) and peak (VmHWM);
//! - the baseline, in the same run, through the provider's own client: what a node sync,
//!   a publish and a ListVolumes read before this issue (every VM, every attachment and
//!   every volume disk of the namespace).
//!
//! Fails when any operation's bytes at the largest size exceed twice those at the
//! smallest (the baselines reported beside them).
//! `eval "$(../shared/kit/kube-up.sh /tmp/kube)" && cargo bench -p overcast-integration
//! --bench dvp_scale` (`OVERCAST_BENCH_VMS=10,2000`, the default).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, PostParams};
use overcast_cloud_http::ApiMetrics;
use overcast_integration::dvp_sim::{self, DvpSim};
use overcast_integration::fake_api::FakeApi;
use overcast_integration::scale::{self, Size};
use overcast_integration::{csi_v1 as csi, free_port, peak_rss_kib, real, rss_kib, Csi, NODE_ID};
use serde_json::json;

const NODES: &str = "/api/v1/nodes";
const OURS: usize = 5;
/// This cluster's UUID, in the binaries' cloud-config and on its VMs.
const UUID: &str = "6b4e0b5c-1d0a-4f6e-9a43-2f4b7f0c9d11";
/// The other cluster's, on its VMs and volumes.
const THEIRS: &str = "0e0e0e0e-1111-4222-8333-944444444444";

/// The proxy's count of requests and of answered bytes so far.
fn moved(sim: &DvpSim) -> (f64, f64) {
    (
        sim.faults.proxied.load(Ordering::Relaxed) as f64,
        sim.faults.answered.load(Ordering::Relaxed) as f64,
    )
}

/// The namespace holds `n` VMs: ours first, then other clusters', with one volume of
/// theirs, attached, for every fifth of theirs.
async fn grow_to(sim: &DvpSim, client: &kube::Client, have: &mut usize, n: usize) {
    let disks: Api<overcast_cloud_dvp::api::VirtualDisk> = Api::namespaced_with(
        client.clone(),
        &sim.namespace,
        &overcast_cloud_dvp::api::virtual_disk(),
    );
    let vmbdas: Api<overcast_cloud_dvp::api::Vmbda> = Api::namespaced_with(
        client.clone(),
        &sim.namespace,
        &overcast_cloud_dvp::api::vmbda(),
    );
    while *have < n {
        let batch: Vec<usize> = (*have..n.min(*have + 20)).collect();
        let (disks, vmbdas) = (&disks, &vmbdas);
        let made = batch.iter().map(|&i| async move {
            if i < OURS {
                let host = if i == 0 {
                    NODE_ID.to_owned()
                } else {
                    format!("ours-{i}")
                };
                sim.add_vm_of(
                    Some(UUID),
                    &format!("vm-ours-{i}"),
                    &host,
                    &format!("10.66.9.{i}"),
                    "parent-a",
                )
                .await;
                return;
            }
            let x = i - OURS;
            sim.add_vm_of(
                Some(THEIRS),
                &format!("vm-x-{x}"),
                &format!("x-{x}"),
                &format!("10.67.{}.{}", x / 250, x % 250 + 1),
                "parent-a",
            )
            .await;
            if !x.is_multiple_of(5) {
                return;
            }
            // Another cluster's volume, as dvp-csi-driver makes and attaches it (to a VM
            // of its own that no longer runs: no device is made for it here).
            let disk = format!("pvc-x-{x}");
            let vd: overcast_cloud_dvp::api::VirtualDisk = serde_json::from_value(json!({
                "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualDisk",
                "metadata": {"name": disk, "labels": {
                    "deckhouse.io/managed-by": "deckhouse",
                    "dvp.deckhouse.io/cluster-uuid": THEIRS,
                    "virtualDiskName": disk}},
                "spec": {"persistentVolumeClaim": {"size": "16Mi"}},
            }))
            .unwrap();
            disks
                .create(&PostParams::default(), &vd)
                .await
                .expect("their disk");
            let v: overcast_cloud_dvp::api::Vmbda = serde_json::from_value(json!({
                "apiVersion": "virtualization.deckhouse.io/v1alpha2",
                "kind": "VirtualMachineBlockDeviceAttachment",
                "metadata": {"name": format!("vmbda-{disk}-gone-{x}"), "labels": {
                    "virtualMachineDiskName": disk, "virtualMachineName": format!("gone-{x}")}},
                "spec": {"virtualMachineName": format!("vm-gone-{x}"),
                         "blockDeviceRef": {"kind": "VirtualDisk", "name": disk}},
            }))
            .unwrap();
            vmbdas
                .create(&PostParams::default(), &v)
                .await
                .expect("their attachment");
        });
        futures::future::join_all(made).await;
        *have = n.min(*have + 20);
    }
}

async fn one_size(
    sim: &DvpSim,
    client: &kube::Client,
    have: &mut usize,
    n: usize,
    conf: &std::path::Path,
    dir: &std::path::Path,
) -> Size {
    grow_to(sim, client, have, n).await;
    let mut size = Size::new(*have);

    // The baseline: what a sync and a publish read before, through the provider's client.
    let (parent, _) = dvp_sim::through_proxy(sim, dir, Arc::new(ApiMetrics::unregistered())).await;
    let (_, cost) = scale::measured(|| moved(sim), async {
        parent
            .list_all("virtualmachine_list", &parent.vms(), None)
            .await
            .expect("VMs");
    })
    .await;
    size.ops.insert("baseline: every VM (a sync before)", cost);
    let (_, cost) = scale::measured(|| moved(sim), async {
        parent
            .list_all("vmbda_list", &parent.vmbdas(), None)
            .await
            .expect("attachments");
    })
    .await;
    size.ops
        .insert("baseline: every attachment (a publish before, twice)", cost);
    let (_, cost) = scale::measured(|| moved(sim), async {
        parent
            .list_all("virtualdisk_list", &parent.disks(), Some("virtualDiskName"))
            .await
            .expect("volume disks");
    })
    .await;
    size.ops
        .insert("baseline: every volume disk (a ListVolumes before)", cost);

    // The csi controller, one volume of ours.
    let csi_port = free_port();
    let csi = Csi::start(&[
        "--cloud=dvp",
        &format!("--cloud-config={}", conf.display()),
        &format!("--device-by-id-dir={}", sim.by_id.display()),
        &format!("--metrics-address=127.0.0.1:{csi_port}"),
    ])
    .await;
    let mut c = csi.controller().await;
    let volume = format!("pvc-ours-{n}");
    c.create_volume(overcast_integration::create_request(&volume, 32 << 20))
        .await
        .expect("create");
    let (_, cost) = scale::measured(|| moved(sim), async {
        c.controller_publish_volume(overcast_integration::publish_request(&volume, false))
            .await
            .expect("publish");
        c.controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
            volume_id: volume.clone(),
            node_id: NODE_ID.into(),
            ..Default::default()
        })
        .await
        .expect("unpublish");
    })
    .await;
    size.ops.insert("csi: ControllerPublish + Unpublish", cost);
    for (label, max) in [
        ("csi: ListVolumes (this cluster's volumes)", 0),
        ("csi: ListVolumes, max_entries 1", 1),
    ] {
        let (listed, cost) = scale::measured(|| moved(sim), async {
            c.list_volumes(csi::ListVolumesRequest {
                max_entries: max,
                starting_token: String::new(),
            })
            .await
            .expect("list")
            .into_inner()
        })
        .await;
        assert!(!listed.entries.is_empty(), "{label}");
        size.ops.insert(label, cost);
    }
    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: volume,
        ..Default::default()
    })
    .await
    .expect("delete our volume");
    size.rss
        .insert("csi", (rss_kib(csi.pid()), peak_rss_kib(csi.pid())));
    drop(csi);

    // The ccm with our Nodes, all but one initialized.
    let api = FakeApi::default();
    let api_url = api.start().await;
    let kubeconfig = dir.join("kubeconfig");
    FakeApi::kubeconfig(&api_url, &kubeconfig);
    let node = |name: &str, provider: Option<&str>| {
        let mut n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        match provider {
            Some(vm) => n["spec"]["providerID"] = json!(format!("dvp://{vm}")),
            None => {
                n["spec"]["taints"] = json!([{"key": "node.cloudprovider.kubernetes.io/uninitialized",
                    "value": "true", "effect": "NoSchedule"}])
            }
        }
        n
    };
    for i in 1..OURS - 1 {
        api.put(
            NODES,
            node(&format!("ours-{i}"), Some(&format!("vm-ours-{i}"))),
        );
    }
    let port = free_port();
    let ccm = scale::ccm("dvp", &kubeconfig, conf, port);
    let sync = scale::per_pass(
        || moved(sim),
        port,
        "ccm_reconciles_total{controller=\"node\"}",
        "ccm_reconcile_duration_seconds_sum{controller=\"node\"}",
        Duration::from_secs(10),
    )
    .await;
    size.ops.insert("ccm: one node sync", sync);
    let newcomer = format!("ours-{}", OURS - 1);
    let (_, cost) = scale::measured(|| moved(sim), async {
        api.put(NODES, node(&newcomer, None));
        assert!(
            overcast_integration::eventually(Duration::from_secs(60), || {
                api.get(NODES, &newcomer).is_some_and(|n| {
                    n["spec"]["providerID"] == format!("dvp://vm-ours-{}", OURS - 1)
                })
            })
            .await,
            "the new Node initialized"
        );
    })
    .await;
    size.ops.insert("ccm: a new Node initialized", cost);
    let pid = ccm.0.id();
    size.rss.insert("ccm", (rss_kib(pid), peak_rss_kib(pid)));
    drop(ccm);

    // The discoverer, one pass.
    let port = free_port();
    let discoverer = scale::discoverer("dvp", &kubeconfig, conf, port, &[]);
    let pass = scale::per_pass(
        || moved(sim),
        port,
        "cloud_data_discovery_cycle_duration_seconds_count",
        "cloud_data_discovery_cycle_duration_seconds_sum",
        Duration::from_secs(10),
    )
    .await;
    size.ops.insert("discoverer: one pass", pass);
    let pid = discoverer.0.id();
    size.rss
        .insert("discoverer", (rss_kib(pid), peak_rss_kib(pid)));
    drop(discoverer);
    size
}

#[tokio::main]
async fn main() {
    let Some(path) = real::kubeconfig("the DVP scale benchmark") else {
        return;
    };
    let client = real::client(&path).await;
    dvp_sim::install_crds(&client).await;
    dvp_sim::sweep(&client, "overcast-bench-dvpscale-").await;
    let ns = format!("overcast-bench-dvpscale-{}", std::process::id());
    let sim = DvpSim::start(client.clone(), &ns, Duration::from_millis(20)).await;
    let dir = tempfile::tempdir().unwrap();
    // The binaries reach the parent through the counting proxy.
    let proxied = sim.api_proxy(dir.path()).await;
    let kubeconfig = std::fs::read_to_string(&proxied).unwrap();
    let indented: String = kubeconfig.lines().map(|l| format!("  {l}\n")).collect();
    let conf = dir.path().join("cloud-config");
    std::fs::write(
        &conf,
        format!("namespace: {ns}\nclusterUUID: {UUID}\nkubeconfig: |\n{indented}"),
    )
    .unwrap();

    let mut sizes: Vec<usize> = std::env::var("OVERCAST_BENCH_VMS")
        .unwrap_or_else(|_| "10,2000".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    // The namespace only grows between sizes.
    sizes.sort_unstable();
    let mut have = 0;
    let mut measured = Vec::new();
    for n in sizes {
        measured.push(one_size(&sim, &client, &mut have, n.max(OURS), &conf, dir.path()).await);
    }
    let grew =
        overcast_integration::scale::report("VMs", &measured, |op| op.starts_with("baseline"));
    let (first, last) = (&measured[0], &measured[measured.len() - 1]);
    drop(sim);
    dvp_sim::sweep_namespace(&client, &ns).await;
    assert!(
        grew.is_empty(),
        "bytes at {} VMs more than twice those at {}: {grew:?}",
        last.size,
        first.size
    );
}
