//! The zVirt provider against the engine simulator (`sim/zvirt/src/`, its
//! default latencies: a disk locked 300 ms after create and resize, an attachment inactive
//! 200 ms, a removal 150 ms, 2 ms an answer): engine calls and wall time per CSI operation,
//! how long attach answers after the engine reports the attachment active (what the poll
//! schedule costs), and the calls and time of one ccm node sync at 1 and 200 VMs.
//! Baseline in the same run: one bare GET of a disk.
//!
//! `cargo bench -p overcast-integration --bench zvirt` (as root: attachments are loop
//! devices).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use overcast_cloud::{DiskSpec, Disks, Instances, Zone};
use overcast_cloud_zvirt::{Config, EngineDisks, EngineInstances, Waits};
use overcast_integration::zvirt_sim::{self, Engine, Latency};

use overcast_integration::figures::{median, ms};

const ROUNDS: usize = 10;

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let (by_id, files) = (dir.path().join("by-id"), dir.path().join("disks"));
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    let engine = Engine::new(&files, &by_id, 1 << 40, Latency::default());
    let url = engine.start().await;
    let vm = engine.add_vm("worker-0");
    engine.set_vm_ips(&vm, &["10.1.0.10"]);
    let env = |k: &str| match k {
        "ZVIRT_API_URL" => Some(url.clone()),
        "ZVIRT_USERNAME" => Some(zvirt_sim::USER.to_owned()),
        "ZVIRT_PASSWORD" => Some(zvirt_sim::PASSWORD.to_owned()),
        _ => None,
    };
    let config = Config::load(None, &env).unwrap();
    let client = overcast_cloud_zvirt::connect(&config, None).unwrap();
    let disks = EngineDisks::new(client.clone(), "bench".into(), 16, Waits::default());
    let parameters = BTreeMap::from([
        ("storageDomainName".to_owned(), "data".to_owned()),
        ("thinProvisioning".to_owned(), "true".to_owned()),
    ]);
    // The session first: the SSO login is a one-off, not a per-operation cost.
    disks.probe().await.unwrap();

    let mut times: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    let mut calls: BTreeMap<&str, u64> = BTreeMap::new();
    let mut after_active = Vec::new();
    let mut measure =
        async |what: &'static str,
               f: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>| {
            let before = engine.total_calls();
            let t = Instant::now();
            f.await;
            times.entry(what).or_default().push(t.elapsed());
            *calls.entry(what).or_default() += engine.total_calls() - before;
        };
    for i in 0..ROUNDS {
        let spec = DiskSpec {
            name: format!("bench-{i}"),
            size_bytes: 1 << 30,
            zone: Zone::default(),
            parameters: parameters.clone(),
            metadata: BTreeMap::new(),
            source: None,
        };
        let made = std::cell::RefCell::new(None);
        measure(
            "baseline: GET a disk",
            Box::pin(async {
                let _ = disks.disk("00000000-0000-4000-8000-000000000000").await;
            }),
        )
        .await;
        // As the csi creates: the class's placement (where the domain's data center is,
        // checked against the topology), then the disk.
        measure(
            "create",
            Box::pin(async {
                let place = disks.placement(&parameters).await.unwrap().unwrap();
                let spec = DiskSpec {
                    zone: place,
                    ..spec
                };
                *made.borrow_mut() = Some(disks.create_disk(spec).await.unwrap());
            }),
        )
        .await;
        let id = made.borrow().as_ref().unwrap().id.clone();
        let returned = std::cell::Cell::new(Instant::now());
        measure(
            "publish (attach)",
            Box::pin(async {
                disks.attach_disk(&id, &vm, false).await.unwrap();
                returned.set(Instant::now());
            }),
        )
        .await;
        if let Some(active) = engine.active_at(&vm, &id) {
            after_active.push(returned.get().saturating_duration_since(active));
        }
        measure(
            "list (one disk attached)",
            Box::pin(async {
                let listed = disks.list_disks().await.unwrap();
                assert_eq!(
                    listed[0].attachments.len(),
                    1,
                    "the list says where it is attached"
                );
            }),
        )
        .await;
        measure(
            "expand",
            Box::pin(async {
                disks.expand_disk(&id, 2 << 30).await.unwrap();
            }),
        )
        .await;
        measure(
            "unpublish (detach)",
            Box::pin(async {
                disks.detach_disk(&id, &vm).await.unwrap();
            }),
        )
        .await;
        measure(
            "delete",
            Box::pin(async {
                disks.delete_disk(&id).await.unwrap();
            }),
        )
        .await;
    }
    println!("zVirt provider against the engine simulator, {ROUNDS} rounds (median wall time, engine calls per operation):");
    for (what, t) in &times {
        println!(
            "  {what:<24} {:>9}  {:.1} calls",
            ms(median(t.clone())),
            calls[what] as f64 / ROUNDS as f64
        );
    }
    println!(
        "  publish answers {} (median) after the engine reports the attachment active",
        ms(median(after_active))
    );

    let instances = EngineInstances::new(client);
    for n in [1usize, 200] {
        while engine.vm_count() < n {
            let k = engine.vm_count();
            let id = engine.add_vm(&format!("worker-{k}"));
            engine.set_vm_ips(&id, &["10.1.0.11"]);
        }
        let mut t = Vec::new();
        let before = engine.total_calls();
        for _ in 0..ROUNDS {
            let s = Instant::now();
            let listed = instances.list_instances().await.unwrap();
            t.push(s.elapsed());
            assert_eq!(listed.len(), engine.vm_count());
        }
        println!(
            "  node sync at {n:>3} VMs     {:>9}  {:.1} calls",
            ms(median(t)),
            (engine.total_calls() - before) as f64 / ROUNDS as f64
        );
    }
    engine.unplug_all();
}
