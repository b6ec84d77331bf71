//! Peak memory (VmHWM) of every Overcast container under a representative load, next to
//! the requests and limits `deploy/` gives it: the figures the manifests are sized from.
//! Raw baseline in the same run: the peak of `sleep` (the smallest process there is), and
//! the peaks of the formatting tools the node plugin runs as children (they count
//! against the node container's limit).
//!
//! `cargo bench -p overcast-integration --bench memory` (root: loop devices, mkfs, mounts)
//!
//! Exits non-zero when a measured peak exceeds the limit its manifest sets.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::ResourceRequirements;
use overcast_api::csi_v1 as csi;
use overcast_integration::fake_api::FakeApi;
use overcast_integration::manifests::{deploy_dir, memory_kib, Manifests};
use overcast_integration::*;
use serde_json::json;

use overcast_integration::KillOnDrop as Proc;

/// Runs a program to completion and gives its peak resident set, KiB, as GNU time
/// reports it. Not wait4 from here: a child's ru_maxrss starts at the size of the
/// process that forked it (this bench's), which would hide a smaller tool's own peak;
/// `time` is small, so its child's figure is the tool's.
fn child_peak_rss_kib(program: &str, args: &[&str], file: &Path) -> u64 {
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M", program])
        .args(args)
        .arg(file)
        .stdout(Stdio::null())
        .output()
        .expect("run /usr/bin/time (Debian package `time`)");
    assert!(
        out.status.success(),
        "{program}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stderr);
    text.lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .expect("time -f %M")
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

async fn create(
    c: &mut overcast_api::csi_v1::controller_client::ControllerClient<tonic::transport::Channel>,
    name: &str,
    pv: Option<&str>,
) -> String {
    let mut req = create_request(name, MIB);
    if let Some(pv) = pv {
        req.parameters
            .insert("csi.storage.k8s.io/pv/name".into(), pv.into());
    }
    c.create_volume(req)
        .await
        .expect("create")
        .into_inner()
        .volume
        .expect("volume")
        .volume_id
}

/// The controller under the create/delete load of the CSI bench (2,000 pairs, 64 at a
/// time), then 32 attach/detach pairs.
async fn controller_load(ctl: &Csi) {
    let mut tasks = Vec::new();
    for w in 0..64 {
        let channel = ctl.channel().await;
        tasks.push(tokio::spawn(async move {
            let mut c = csi::controller_client::ControllerClient::new(channel);
            for i in 0..(2000 / 64) {
                let id = create(&mut c, &format!("load-{w}-{i}"), None).await;
                c.delete_volume(delete_request(&id)).await.expect("delete");
            }
        }));
    }
    for t in tasks {
        t.await.expect("worker");
    }
    let mut c = ctl.controller().await;
    for i in 0..32 {
        let id = create(&mut c, &format!("attach-{i}"), None).await;
        c.controller_publish_volume(publish_request(&id, false))
            .await
            .expect("publish");
        c.controller_unpublish_volume(unpublish_request(&id))
            .await
            .expect("unpublish");
        c.delete_volume(delete_request(&id)).await.expect("delete");
    }
}

/// The node plugin staging (mkfs ext4), publishing and tearing down 8 volumes the
/// controller attached.
async fn node_load(ctl: &Csi, node: &Csi) {
    let mut c = ctl.controller().await;
    let mut n = node.node().await;
    let work = node.dir.path().join("mnt");
    for i in 0..8 {
        volume_lifecycle(
            &mut c,
            &mut n,
            &format!("node-{i}"),
            MIB,
            mount_cap("ext4"),
            &work,
        )
        .await;
    }
}

/// The ccm initializing 2,000 nodes and keeping 20 LoadBalancer Services.
async fn ccm_peak(dir: &Path) -> u64 {
    const NODES: usize = 2000;
    let api = FakeApi::default();
    let url = api.start().await;
    let kubeconfig = dir.join("ccm-kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    let mut machines = Vec::new();
    for i in 0..NODES {
        let name = format!("node-{i:04}");
        machines.push(json!({"name": name, "addresses": [{"type": "InternalIP", "address": format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256)}], "instanceType": "m.large", "zone": "zone-a"}));
        // A Node as a kubelet reports it (about 4 KiB of JSON): the reflector keeps them all.
        let images: Vec<_> = (0..20)
            .map(|j| json!({"names": [format!("registry.example.com/team/app-{j}@sha256:{:064x}", j), format!("registry.example.com/team/app-{j}:v1.{j}.0")], "sizeBytes": 50_000_000 + j}))
            .collect();
        let conditions: Vec<_> = ["MemoryPressure", "DiskPressure", "PIDPressure"]
            .iter()
            .map(|t| json!({"type": t, "status": "False", "reason": format!("Kubelet Has No {t}"), "message": "kubelet has sufficient resources", "lastHeartbeatTime": "2026-11-22T07:00:00Z", "lastTransitionTime": "2026-11-01T07:00:00Z"}))
            .chain([json!({"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status", "lastHeartbeatTime": "2026-11-22T07:00:00Z", "lastTransitionTime": "2026-11-01T07:00:00Z"})])
            .collect();
        api.put("/api/v1/nodes", json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "node-role.kubernetes.io/worker": ""},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
            "spec": {"podCIDR": "10.244.0.0/24", "taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]},
            "status": {
                "conditions": conditions,
                "capacity": {"cpu": "8", "memory": "32863900Ki", "pods": "110", "ephemeral-storage": "101430960Ki"},
                "allocatable": {"cpu": "8", "memory": "32761500Ki", "pods": "110", "ephemeral-storage": "93478772582"},
                "nodeInfo": {"machineID": format!("{i:032x}"), "systemUUID": format!("{i:032x}"), "bootID": format!("{i:032x}"), "kernelVersion": "6.1.0-27-amd64", "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "containerd://1.7.24", "kubeletVersion": "v1.33.1", "kubeProxyVersion": "v1.33.1", "operatingSystem": "linux", "architecture": "amd64"},
                "images": images,
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            },
        }));
    }
    for i in 0..20 {
        api.put("/api/v1/namespaces/default/services", json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("svc-{i}"), "namespace": "default"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 20000 + i, "protocol": "TCP", "nodePort": 30000 + i}]},
        }));
    }
    let instances = dir.join("instances.json");
    std::fs::write(&instances, serde_json::to_vec(&machines).expect("json")).expect("write");
    let ccm = Proc(
        Command::new(binary("ccm"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--node-name=bench-host")
            .arg(format!("--instances-file={}", instances.display()))
            .arg("--lb-pool=127.244.0.0/24")
            .arg(format!("--metrics-address=127.0.0.1:{}", free_port()))
            .stderr(Stdio::null())
            .spawn()
            .expect("ccm"),
    );
    let done = eventually(Duration::from_secs(120), || {
        (0..NODES).step_by(97).all(|i| {
            api.get("/api/v1/nodes", &format!("node-{i:04}"))
                .is_some_and(|n| n["spec"]["providerID"].is_string())
        }) && api
            .get("/api/v1/namespaces/default/services", "svc-19")
            .is_some_and(|s| s["status"]["loadBalancer"]["ingress"].is_array())
    })
    .await;
    assert!(done, "ccm did not initialize the nodes");
    tokio::time::sleep(Duration::from_secs(2)).await;
    peak_rss_kib(ccm.0.id())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut peaks: BTreeMap<&str, u64> = BTreeMap::new();

    // Raw baseline: the smallest process.
    let sleep = Proc(Command::new("sleep").arg("5").spawn().expect("sleep"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let baseline = peak_rss_kib(sleep.0.id());
    drop(sleep);

    let ctl = Csi::start(&["--mode=controller"]).await;
    let idle_controller = peak_rss_kib(ctl.pid());
    controller_load(&ctl).await;
    peaks.insert("overcast-csi-controller/csi", peak_rss_kib(ctl.pid()));

    let node = Csi::start(&["--mode=node"]).await;
    let registrar_dir = tempfile::tempdir().expect("tempdir");
    let registrar = Registrar::start(&node.socket, registrar_dir.path());
    node_load(&ctl, &node).await;
    peaks.insert("overcast-csi-node/csi", peak_rss_kib(node.pid()));
    unmount_under(node.dir.path());
    for _ in 0..300 {
        let _ = http_get(registrar.health_port, "/healthz");
    }
    peaks.insert("overcast-csi-node/registrar", peak_rss_kib(registrar.pid()));

    // The formatting tools, at a small and a large disk (sparse files).
    let tools = tempfile::tempdir().expect("tempdir");
    let mut tool_peaks = Vec::new();
    for (label, size) in [("1 GiB", 1u64 << 30), ("1 TiB", 1u64 << 40)] {
        for (tool, args) in [
            ("mkfs.ext4", &["-q", "-F"][..]),
            ("mkfs.xfs", &["-q", "-f"][..]),
        ] {
            let file = tools.path().join(format!("{tool}.img"));
            let f = std::fs::File::create(&file).expect("image");
            f.set_len(size).expect("size");
            drop(f);
            let kib = child_peak_rss_kib(tool, args, &file);
            std::fs::remove_file(&file).expect("remove");
            tool_peaks.push((format!("{tool} {label}"), kib));
        }
    }

    // The discoverer over 300 disks (200 of them the cluster's), and the proxy in front.
    let mut c = ctl.controller().await;
    let api = FakeApi::default();
    let url = api.start().await;
    for i in 0..300 {
        let pv = format!("pv-{i}");
        let id = create(
            &mut c,
            &format!("disc-{i}"),
            (i < 200).then_some(pv.as_str()),
        )
        .await;
        if i < 150 {
            api.put("/api/v1/persistentvolumes", json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv}, "spec": {"csi": {"driver": "local.csi.overcast.dev", "volumeHandle": id}}}));
        }
    }
    let kubeconfig = ctl.dir.path().join("kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    api.token("bench-token", "prometheus", &[]);
    api.allow("prometheus", "get", "/metrics");
    let metrics_port = free_port();
    tokio::time::sleep(Duration::from_millis(1500)).await; // the inventory is written at most once a second
    let disc = Proc(
        Command::new(binary("discoverer"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--state-dir={}", ctl.state_dir.display()))
            .arg(format!("--node-name={NODE_ID}"))
            .arg("--discovery-period=1")
            .arg(format!("--metrics-address=127.0.0.1:{metrics_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("discoverer"),
    );
    let orphans = eventually(Duration::from_secs(30), || {
        http_get(metrics_port, "/metrics")
            .1
            .matches("cloud_data_discovery_orphaned_disk_info{")
            .count()
            == 50
    })
    .await;
    assert!(orphans, "the discoverer did not finish a cycle");
    let proxy_port = free_port();
    let proxy = Proc(
        Command::new(binary("rbac-proxy"))
            .arg(format!("--secure-listen-address=127.0.0.1:{proxy_port}"))
            .arg(format!("--upstream=http://127.0.0.1:{metrics_port}/"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .stderr(Stdio::null())
            .spawn()
            .expect("rbac-proxy"),
    );
    let url = format!("https://127.0.0.1:{proxy_port}/metrics");
    assert!(
        eventually(Duration::from_secs(10), || Command::new("curl")
            .args(["-sk", "-o", "/dev/null", &url])
            .status()
            .is_ok_and(|s| s.success()))
        .await
    );
    // 4 clients × 250 requests over keep-alive connections.
    let clients: Vec<Child> = (0..4)
        .map(|_| {
            let mut cmd = Command::new("curl");
            cmd.args([
                "-sk",
                "-o",
                "/dev/null",
                "-H",
                "Authorization: Bearer bench-token",
            ]);
            for _ in 0..250 {
                cmd.arg(&url);
            }
            cmd.spawn().expect("curl")
        })
        .collect();
    for mut cl in clients {
        assert!(cl.wait().expect("curl").success());
    }
    tokio::time::sleep(Duration::from_secs(3)).await; // three more discovery cycles
    peaks.insert("overcast-discoverer/discoverer", peak_rss_kib(disc.0.id()));
    peaks.insert("overcast-discoverer/rbac-proxy", peak_rss_kib(proxy.0.id()));

    let work = tempfile::tempdir().expect("tempdir");
    peaks.insert(
        "overcast-cloud-controller-manager/ccm",
        ccm_peak(work.path()).await,
    );

    // What the manifests give each container (the local overlay; the base is the same).
    let m = Manifests::load(&deploy_dir().join("overlays/local")).expect("render");
    let mut resources: BTreeMap<String, ResourceRequirements> = BTreeMap::new();
    for p in m.pods() {
        for c in &p.spec.containers {
            resources.insert(
                format!("{}/{}", p.name, c.name),
                c.resources.clone().unwrap_or_default(),
            );
        }
    }
    let quantity = |r: &ResourceRequirements, which: &str| -> String {
        let map = if which == "limit" {
            &r.limits
        } else {
            &r.requests
        };
        map.as_ref()
            .and_then(|m| m.get("memory"))
            .map(|q| q.0.clone())
            .unwrap_or_else(|| "-".into())
    };

    println!(
        "Peak resident memory (VmHWM) under load; KiB→MiB. Raw baseline: `sleep` {} MiB.",
        mib(baseline)
    );
    println!(
        "csi controller idle before the load: {} MiB",
        mib(idle_controller)
    );
    println!();
    println!("| container | peak MiB | request | limit | limit / peak |");
    println!("|---|---:|---:|---:|---:|");
    let mut over = Vec::new();
    for (name, kib) in &peaks {
        let r = resources
            .get(*name)
            .unwrap_or_else(|| panic!("{name} is not in the manifests"));
        let limit = quantity(r, "limit");
        let ratio = memory_kib(&limit) as f64 / *kib as f64;
        println!(
            "| {name} | {} | {} | {limit} | {ratio:.1}× |",
            mib(*kib),
            quantity(r, "request")
        );
        if memory_kib(&limit) < *kib {
            over.push(*name);
        }
    }
    println!();
    println!("Children of the node plugin (their peaks add to the node container's):");
    println!("| tool | peak MiB |");
    println!("|---|---:|");
    for (tool, kib) in &tool_peaks {
        println!("| {tool} | {} |", mib(*kib));
    }
    let node_total =
        peaks["overcast-csi-node/csi"] + tool_peaks.iter().map(|(_, k)| *k).max().unwrap_or(0);
    let node_limit = memory_kib(&quantity(&resources["overcast-csi-node/csi"], "limit"));
    println!();
    println!(
        "node plugin + largest tool: {} MiB against a {} MiB limit",
        mib(node_total),
        node_limit >> 10
    );
    if node_total > node_limit {
        over.push("overcast-csi-node/csi (+ mkfs)");
    }
    drop(registrar);
    if !over.is_empty() {
        eprintln!("limits below the measured peak: {over:?}");
        std::process::exit(1);
    }
}
