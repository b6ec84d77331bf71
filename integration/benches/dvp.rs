//! The DVP provider on the simulated parent (the kit's API server with the real
//! virtualization CRDs, `overcast_integration::dvp_sim`): parent-cluster API calls and
//! time per CSI operation and per node sync, and how long after the VMBDA reports
//! `Attached` the attach call answers. Baseline in the same run: one bare GET of a
//! VirtualDisk and one bare list of the VMs (the floor of any call).
//!
//! `eval "$(../shared/kit/kube-up.sh /tmp/kube)" && cargo bench -p overcast-integration --bench dvp`

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use overcast_cloud::{DiskSpec, Disks, Instances, Zone};
use overcast_cloud_dvp::{DvpDisks, DvpInstances, Parent, Waits};
use overcast_cloud_http::ApiMetrics;
use overcast_integration::dvp_sim::{self, DvpSim};
use overcast_integration::real;

use overcast_integration::figures::{median, ms};

const ROUNDS: usize = 10;
const VMS: usize = 200;

#[tokio::main]
async fn main() {
    let Some(path) = real::kubeconfig("the DVP benchmark") else {
        return;
    };
    let client = real::client(&path).await;
    dvp_sim::install_crds(&client).await;
    dvp_sim::sweep(&client, "overcast-bench-dvp-").await;
    let ns = format!("overcast-bench-dvp-{}", std::process::id());
    // The parent's own latency per transition, as its controllers take time.
    let latency = Duration::from_millis(100);
    let sim = DvpSim::start(client.clone(), &ns, latency).await;
    sim.add_vm("vm-bench", "bench-node", "10.66.1.1", "parent-a")
        .await;
    let metrics = Arc::new(ApiMetrics::unregistered());
    let parent = Parent::new(client.clone(), ns.clone(), Arc::clone(&metrics));
    let disks = DvpDisks::new(parent.clone(), 64, Waits::default());

    let ops = ["create", "attach", "expand", "detach", "delete"];
    let mut times: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    let mut calls: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut after_attached = Vec::new();
    let mut floor = Vec::new();
    for i in 0..ROUNDS {
        let name = format!("bench-{i}");
        let mut step =
            async |op: &'static str,
                   f: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>| {
                let before = metrics.total();
                let started = Instant::now();
                f.await;
                times.entry(op).or_default().push(started.elapsed());
                calls.entry(op).or_default().push(metrics.total() - before);
            };
        let spec = DiskSpec {
            name: name.clone(),
            size_bytes: 16 << 20,
            zone: Zone::default(),
            parameters: BTreeMap::new(),
            metadata: BTreeMap::new(),
            source: None,
        };
        step(
            "create",
            Box::pin(async {
                disks.create_disk(spec).await.expect("create");
            }),
        )
        .await;
        let started = Instant::now();
        let _ = parent.disks().get(&name).await.expect("bare get");
        floor.push(started.elapsed());
        step(
            "attach",
            Box::pin(async {
                disks
                    .attach_disk(&name, "bench-node", false)
                    .await
                    .expect("attach");
                let at = sim
                    .attached_at(&format!("vmbda-{name}-bench-node"))
                    .expect("attached");
                after_attached.push(at.elapsed());
            }),
        )
        .await;
        step(
            "expand",
            Box::pin(async {
                disks.expand_disk(&name, 32 << 20).await.expect("expand");
            }),
        )
        .await;
        step(
            "detach",
            Box::pin(async {
                disks
                    .detach_disk(&name, "bench-node")
                    .await
                    .expect("detach");
            }),
        )
        .await;
        step(
            "delete",
            Box::pin(async {
                disks.delete_disk(&name).await.expect("delete");
            }),
        )
        .await;
    }

    println!(
        "DVP provider on the simulated parent (transition latency {}), {ROUNDS} rounds, medians",
        ms(latency)
    );
    println!("| operation | parent API calls | time |");
    println!("|---|---|---|");
    for op in ops {
        let c = calls.remove(op).unwrap_or_default();
        let (lo, hi) = (
            c.iter().min().copied().unwrap_or(0),
            c.iter().max().copied().unwrap_or(0),
        );
        let range = if lo == hi {
            lo.to_string()
        } else {
            format!("{lo}–{hi}")
        };
        println!(
            "| {op} | {range} | {} |",
            ms(median(times.remove(op).unwrap_or_default()))
        );
    }
    println!(
        "| baseline: one bare GET of a VirtualDisk | 1 | {} |",
        ms(median(floor))
    );

    // Zones: the parent's nodes carry them, and a zonal StorageClass binds at once.
    for (node, zone) in [("a1", "bench-a"), ("b1", "bench-b")] {
        sim.add_node(
            &format!("{ns}-{node}"),
            serde_json::json!({"topology.kubernetes.io/zone": zone}),
            false,
        )
        .await;
    }
    let class = format!("{ns}-zonal");
    let classes: kube::Api<k8s_openapi::api::storage::v1::StorageClass> =
        kube::Api::all(client.clone());
    classes
        .create(
            &Default::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": class}, "provisioner": "zonal.sim",
                "allowedTopologies": [{"matchLabelExpressions": [
                    {"key": "topology.kubernetes.io/zone", "values": ["bench-b"]}]}],
            }))
            .unwrap(),
        )
        .await
        .expect("StorageClass");
    let zone_b = Zone {
        zone: "bench-b".into(),
        region: String::new(),
    };
    let (mut zone_calls, mut zone_times) = (Vec::new(), Vec::new());
    let (mut zoned_calls, mut zoned_times) = (Vec::new(), Vec::new());
    for i in 0..ROUNDS {
        let before = metrics.total();
        let started = Instant::now();
        let zones = disks.zones().await.expect("zones");
        zone_times.push(started.elapsed());
        zone_calls.push(metrics.total() - before);
        assert_eq!(zones.len(), 2);
        let spec = DiskSpec {
            name: format!("bench-zoned-{i}"),
            size_bytes: 16 << 20,
            zone: zone_b.clone(),
            parameters: BTreeMap::from([("dvpStorageClass".to_owned(), class.clone())]),
            metadata: BTreeMap::new(),
            source: None,
        };
        let before = metrics.total();
        let started = Instant::now();
        let made = disks.create_disk(spec).await.expect("zoned create");
        zoned_times.push(started.elapsed());
        zoned_calls.push(metrics.total() - before);
        assert_eq!(made.zone, zone_b);
        disks.delete_disk(&made.id).await.expect("delete");
    }
    println!(
        "| zones (CreateVolume and GetCapacity ask them) | {} | {} |",
        zone_calls[0],
        ms(median(zone_times))
    );
    println!(
        "| create on zonal storage (the bound PV's zones recorded) | {}–{} | {} |",
        zoned_calls.iter().min().unwrap(),
        zoned_calls.iter().max().unwrap(),
        ms(median(zoned_times))
    );
    let _ = classes.delete(&class, &Default::default()).await;
    println!(
        "attach answered after the VMBDA reported Attached: median {}",
        ms(median(after_attached))
    );

    for i in 0..VMS {
        sim.add_vm(
            &format!("vm-sync-{i}"),
            &format!("sync-{i}"),
            &format!("10.66.2.{}", i % 250),
            "parent-a",
        )
        .await;
    }
    let instances = DvpInstances::new(parent.clone());
    let mut sync_times = Vec::new();
    let mut sync_calls = Vec::new();
    let mut list_floor = Vec::new();
    for _ in 0..ROUNDS {
        let before = metrics.total();
        let started = Instant::now();
        let all = instances.list_instances().await.expect("list");
        sync_times.push(started.elapsed());
        sync_calls.push(metrics.total() - before);
        assert_eq!(all.len(), VMS + 1);
        let started = Instant::now();
        let _ = parent
            .vms()
            .list(&Default::default())
            .await
            .expect("bare list");
        list_floor.push(started.elapsed());
    }
    println!(
        "node sync ({} VMs): {} parent API calls (VMs, the parent's Nodes), {}; baseline bare list of the VMs {}",
        VMS + 1,
        sync_calls[0],
        ms(median(sync_times)),
        ms(median(list_floor))
    );
    sim.remove_nodes().await;
    drop(sim);
    dvp_sim::sweep_namespace(&client, &ns).await;
}
