//! Snapshots on DVP through the real `csi` binary's socket, on the simulated parent (the
//! kit's API server with the virtualization CRDs and DVP's VirtualDiskSnapshot CRD,
//! `overcast_integration::dvp_sim` playing its controllers, each transition taking the
//! latency below): CreateSnapshot of a detached 64 MiB volume until it is ready,
//! CreateVolume from it (a restore) and from the volume (a clone, through a temporary
//! snapshot), DeleteSnapshot. The parent's requests (watches included), its writes and
//! the bytes of its answers (watches left out) are counted at the simulator's proxy, which
//! the binary reaches the parent through. Baseline in the same run: CreateVolume of a blank
//! volume, and one bare GET of a VirtualDisk.
//!
//! `eval "$(../shared/kit/kube-up.sh /tmp/kube)" && cargo bench -p overcast-integration --bench dvp_snapshots`

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use overcast_cloud_http::ApiMetrics;
use overcast_integration::dvp_sim::{self, DvpSim};
use overcast_integration::figures::{median, ms};
use overcast_integration::{csi_v1 as csi, real, Csi};

const ROUNDS: usize = 10;
const SIZE: i64 = 64 << 20;

fn with_source(name: &str, source: csi::volume_content_source::Type) -> csi::CreateVolumeRequest {
    let mut r = overcast_integration::create_request(name, SIZE);
    r.volume_content_source = Some(csi::VolumeContentSource {
        r#type: Some(source),
    });
    r
}

/// What one operation cost: time, requests, writes, answered bytes.
#[derive(Default)]
struct Costs {
    times: Vec<Duration>,
    requests: Vec<u64>,
    writes: Vec<u64>,
    bytes: Vec<u64>,
}

fn range(v: &[u64]) -> String {
    let (lo, hi) = (
        v.iter().min().copied().unwrap_or(0),
        v.iter().max().copied().unwrap_or(0),
    );
    if lo == hi {
        lo.to_string()
    } else {
        format!("{lo}–{hi}")
    }
}

#[tokio::main]
async fn main() {
    let Some(path) = real::kubeconfig("the DVP snapshot benchmark") else {
        return;
    };
    let client = real::client(&path).await;
    dvp_sim::install_crds(&client).await;
    dvp_sim::sweep(&client, "overcast-bench-dvps-").await;
    let ns = format!("overcast-bench-dvps-{}", std::process::id());
    let latency = Duration::from_millis(100);
    let sim = DvpSim::start(client.clone(), &ns, latency).await;
    let work = tempfile::tempdir().unwrap();
    let (_, proxied) =
        dvp_sim::through_proxy(&sim, work.path(), Arc::new(ApiMetrics::unregistered())).await;
    let kubeconfig = std::fs::read_to_string(&proxied).unwrap();
    let indented: String = kubeconfig.lines().map(|l| format!("  {l}\n")).collect();
    let config = work.path().join("cloud-config");
    std::fs::write(
        &config,
        format!("namespace: {ns}\nkubeconfig: |\n{indented}"),
    )
    .unwrap();
    let driver = Csi::start(&[
        "--cloud=dvp",
        &format!("--cloud-config={}", config.display()),
        &format!("--device-by-id-dir={}", sim.by_id.display()),
    ])
    .await;
    let mut c = driver.controller().await;
    let faults = Arc::clone(&sim.faults);
    let counters = move || {
        (
            faults.proxied.load(Ordering::Relaxed),
            faults.writes.lock().unwrap().len() as u64,
            faults.answered.load(Ordering::Relaxed),
        )
    };
    let ops = [
        "CreateVolume (blank, baseline)",
        "CreateSnapshot until ready",
        "CreateVolume from the snapshot",
        "CreateVolume from the volume (clone)",
        "DeleteSnapshot",
    ];
    let mut costs: BTreeMap<&str, Costs> = BTreeMap::new();
    let mut floor = Vec::new();
    let disks: kube::Api<overcast_cloud_dvp::api::VirtualDisk> = kube::Api::namespaced_with(
        client.clone(),
        &ns,
        &overcast_cloud_dvp::api::virtual_disk(),
    );
    for i in 0..ROUNDS {
        let (source, snapshot) = (format!("pvc-src-{i}"), format!("snapshot-{i}"));
        let mut measure =
            async |op: &'static str,
                   f: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>| {
                let (r0, w0, b0) = counters();
                let started = Instant::now();
                f.await;
                let took = started.elapsed();
                let (r1, w1, b1) = counters();
                let e = costs.entry(op).or_default();
                e.times.push(took);
                e.requests.push(r1 - r0);
                e.writes.push(w1 - w0);
                e.bytes.push(b1 - b0);
            };
        let mut c1 = c.clone();
        let req = overcast_integration::create_request(&source, SIZE);
        measure(
            ops[0],
            Box::pin(async move {
                c1.create_volume(req).await.expect("create");
            }),
        )
        .await;
        let started = Instant::now();
        let _ = disks.get(&source).await.expect("bare get");
        floor.push(started.elapsed());
        let mut c2 = c.clone();
        let (s2, n2) = (source.clone(), snapshot.clone());
        measure(
            ops[1],
            Box::pin(async move {
                loop {
                    let s = c2
                        .create_snapshot(csi::CreateSnapshotRequest {
                            name: n2.clone(),
                            source_volume_id: s2.clone(),
                            ..Default::default()
                        })
                        .await
                        .expect("cut")
                        .into_inner()
                        .snapshot
                        .unwrap();
                    if s.ready_to_use {
                        break;
                    }
                }
            }),
        )
        .await;
        let mut c3 = c.clone();
        let req = with_source(
            &format!("pvc-restored-{i}"),
            csi::volume_content_source::Type::Snapshot(
                csi::volume_content_source::SnapshotSource {
                    snapshot_id: snapshot.clone(),
                },
            ),
        );
        measure(
            ops[2],
            Box::pin(async move {
                c3.create_volume(req).await.expect("restore");
            }),
        )
        .await;
        let mut c4 = c.clone();
        let req = with_source(
            &format!("pvc-clone-{i}"),
            csi::volume_content_source::Type::Volume(csi::volume_content_source::VolumeSource {
                volume_id: source.clone(),
            }),
        );
        measure(
            ops[3],
            Box::pin(async move {
                c4.create_volume(req).await.expect("clone");
            }),
        )
        .await;
        let mut c5 = c.clone();
        let id = snapshot.clone();
        measure(
            ops[4],
            Box::pin(async move {
                c5.delete_snapshot(csi::DeleteSnapshotRequest {
                    snapshot_id: id,
                    ..Default::default()
                })
                .await
                .expect("delete snapshot");
            }),
        )
        .await;
        for v in [
            source,
            format!("pvc-restored-{i}"),
            format!("pvc-clone-{i}"),
        ] {
            c.delete_volume(overcast_integration::delete_request(&v))
                .await
                .expect("delete");
        }
    }
    println!(
        "DVP snapshots through the csi binary's socket on the simulated parent (transition latency {}), {SIZE} bytes, {ROUNDS} rounds, medians (requests, writes and answered bytes: min–max)",
        ms(latency)
    );
    println!("| operation | parent requests | of them writes | bytes answered | time |");
    println!("|---|---|---|---|---|");
    for op in ops {
        let e = costs.remove(op).unwrap_or_default();
        println!(
            "| {op} | {} | {} | {} | {} |",
            range(&e.requests),
            range(&e.writes),
            range(&e.bytes),
            ms(median(e.times))
        );
    }
    println!(
        "| baseline: one bare GET of a VirtualDisk (not through the proxy) | 1 | 0 | — | {} |",
        ms(median(floor))
    );
    drop(driver);
    let vds: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        client.clone(),
        &ns,
        &overcast_cloud_dvp::api::virtual_disk_snapshot(),
    );
    let _ = vds
        .delete_collection(&Default::default(), &Default::default())
        .await;
    let _ = disks
        .delete_collection(&Default::default(), &Default::default())
        .await;
    real::wait_for::<()>(
        "the simulator's clean-up",
        Duration::from_secs(30),
        async || {
            let left = disks.list(&Default::default()).await.ok()?.items.len()
                + vds.list(&Default::default()).await.ok()?.items.len();
            (left == 0).then_some(())
        },
    )
    .await;
    drop(sim);
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let _ = namespaces.delete(&ns, &Default::default()).await;
}
