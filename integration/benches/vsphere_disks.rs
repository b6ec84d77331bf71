//! The vSphere CSI controller's cloud calls and times per operation on vcsim's CNS: each
//! operation of the provider (`VsphereDisks`, what the csi binary runs) counted on its own
//! client — SOAP to `/sdk` and CNS to `/vsanHealth`, task polls included — median over
//! `OVERCAST_BENCH_VOLUMES` (default 10) volumes, next to one bare `CnsQueryVolume` by id
//! measured in the same run. create → publish is a create and the first attach, as the
//! provisioner and the attacher send them. The ESXi host's part of an attach (the VM's
//! virtual disk, which vcsim's CNS does not add) is played on a separate client, not
//! counted.
//!
//! `OVERCAST_TEST_VCSIM=/tmp/vcsim/vcsim cargo bench --workspace --bench vsphere_disks`
//! (`OVERCAST_BENCH_VMS=100`: 100 VMs per host, vcsim's `-vm`, for a larger inventory).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use overcast_cloud::{DiskSpec, Disks, Zone};
use overcast_cloud_http::ApiMetrics;
use overcast_cloud_vsphere::cns::{Cns, Filter};
use overcast_cloud_vsphere::config::Config;
use overcast_cloud_vsphere::disks::{VsphereDisks, CTX_DISK_UUID};
use overcast_integration::figures::{median, ms};
use overcast_integration::vcsim::{plug_disk, set_host_name, unplug_disk, vms, Vcsim};

#[derive(Default)]
struct Op {
    calls: Vec<u64>,
    bytes: Vec<u64>,
    times: Vec<Duration>,
}

impl Op {
    fn row(&self, name: &str) {
        let mid = |v: &[u64]| {
            let mut v = v.to_vec();
            v.sort();
            v.get(v.len() / 2).copied().unwrap_or(0)
        };
        println!(
            "| {name} | {} | {:.1} KiB | {} |",
            mid(&self.calls),
            mid(&self.bytes) as f64 / 1024.0,
            ms(median(self.times.clone()))
        );
    }
}

async fn measure<T>(
    metrics: &ApiMetrics,
    op: &mut Op,
    f: impl std::future::Future<Output = T>,
) -> T {
    let (before, bytes) = (metrics.total(), metrics.bytes());
    let t = Instant::now();
    let out = f.await;
    op.times.push(t.elapsed());
    op.calls.push(metrics.total() - before);
    op.bytes.push(metrics.bytes() - bytes);
    out
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("OVERCAST_BENCH_VOLUMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    // `OVERCAST_BENCH_VMS`: VMs per host (vcsim's `-vm`), for a larger inventory.
    let vms_arg = std::env::var("OVERCAST_BENCH_VMS").ok();
    let args: Vec<&str> = vms_arg.iter().flat_map(|n| ["-vm", n.as_str()]).collect();
    let Some(sim) = Vcsim::start("vsphere_disks bench", &args) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let conf = sim.conf(dir.path(), "");
    let config = Config::load_with(Some(&conf), &|_| None).unwrap();
    let vc = &config.vcenters[0];
    let metrics = Arc::new(ApiMetrics::unregistered());
    let client = overcast_cloud_vsphere::provider::connect(vc, Some(Arc::clone(&metrics))).unwrap();
    let admin = overcast_cloud_vsphere::provider::connect(vc, None).unwrap();
    let disks = VsphereDisks::new(Cns::new(Arc::clone(&client)), "overcast-bench".into(), 59);
    disks.probe().await.unwrap();
    // The node is known by its guest's host name, as a kubelet's node is.
    let (vm_name, vm) = vms(&admin).await[0].clone();
    let node = "bench-node".to_owned();
    set_host_name(&admin, &vm, &node).await;
    let spec = |i: usize| DiskSpec {
        name: format!("pvc-bench-{i}"),
        size_bytes: 1 << 30,
        zone: Zone::default(),
        parameters: BTreeMap::new(),
        metadata: BTreeMap::new(),
        source: None,
    };
    // Warm-up: the login, the view.
    disks.list_disks().await.unwrap();
    let (mut create, mut attach, mut again, mut detach, mut expand, mut delete) =
        <(Op, Op, Op, Op, Op, Op)>::default();
    let mut to_publish = Op::default();
    let mut bare = Vec::new();
    let admin_cns = Cns::new(Arc::clone(&admin));
    for i in 0..n {
        let t = Instant::now();
        let d = measure(&metrics, &mut create, disks.create_disk(spec(i)))
            .await
            .unwrap();
        let a = measure(
            &metrics,
            &mut attach,
            disks.attach_disk(&d.id, &node, false),
        )
        .await
        .unwrap();
        to_publish.times.push(t.elapsed());
        to_publish.calls.push(create.calls[i] + attach.calls[i]);
        to_publish.bytes.push(create.bytes[i] + attach.bytes[i]);
        plug_disk(
            &admin,
            &vm,
            &vm_name,
            &d.id,
            &a.publish_context[CTX_DISK_UUID],
        )
        .await;
        measure(&metrics, &mut again, disks.attach_disk(&d.id, &node, false))
            .await
            .unwrap();
        measure(&metrics, &mut expand, disks.expand_disk(&d.id, 2 << 30))
            .await
            .unwrap();
        measure(&metrics, &mut detach, disks.detach_disk(&d.id, &node))
            .await
            .unwrap();
        unplug_disk(&admin, &vm, &d.id).await;
        let t = Instant::now();
        admin_cns
            .query(&Filter {
                ids: vec![d.id.clone()],
                ..Filter::default()
            })
            .await
            .unwrap();
        bare.push(t.elapsed());
        measure(&metrics, &mut delete, disks.delete_disk(&d.id))
            .await
            .unwrap();
    }
    // A create with volume topology (`[Labels]` zone and region categories): the same,
    // plus the hosts' and datastores' placement read and its tag call. vcsim's hosts carry
    // no tags here: the calls are the same with tags (their names are read once and kept).
    let zoned_conf = sim.conf(
        dir.path(),
        "[Labels]\nzone = k8s-zone\nregion = k8s-region\n",
    );
    let zoned_config = Config::load_with(Some(&zoned_conf), &|_| None).unwrap();
    let zoned = VsphereDisks::new(Cns::new(Arc::clone(&client)), "overcast-bench".into(), 59)
        .with_topology(&zoned_config);
    zoned.zones().await.unwrap();
    let mut zoned_create = Op::default();
    for i in 0..n {
        let d = measure(&metrics, &mut zoned_create, zoned.create_disk(spec(n + i)))
            .await
            .unwrap();
        zoned.delete_disk(&d.id).await.unwrap();
    }
    println!(
        "| operation ({n} volumes, median) | SOAP + CNS calls | bytes (bodies, both ways) | time |"
    );
    println!("|---|---|---|---|");
    create.row("create (CreateVolume)");
    zoned_create.row("create with volume topology");
    attach.row("attach (ControllerPublish)");
    to_publish.row("create → publish");
    again.row("attach again, already attached");
    expand.row("expand 1 → 2 GiB");
    detach.row("detach (ControllerUnpublish)");
    delete.row("delete");
    println!(
        "| baseline: one bare CnsQueryVolume by id | 1 | | {} |",
        ms(median(bare))
    );
}
