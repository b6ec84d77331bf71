//! The real `capi --cloud zvirt` with the kit's API server and the zVirt engine simulator
//! (its default latencies: a clone `image_locked` 400 ms, a grown disk locked 300 ms, a
//! start `wait_for_launch` 200 ms then `powering_up` 300 ms, the guest's address 300 ms after
//! `up`, 2 ms an answer): for 1 and for 50 machines made at once, each machine's time from
//! its objects' creation to `ready` and the engine calls per machine; then the engine calls
//! of reconciles at rest (every machine's object touched). Baseline in the same run: one
//! VM made by hand through the same client (`EngineVms`: create, start, address), polled
//! every 100 ms. The provider looks at a VM on its way every `--poll-interval` (1 s here).
//!
//! `OVERCAST_TEST_KUBECONFIG=… cargo bench -p overcast-integration --bench capi`

use std::time::{Duration, Instant};

use http::Method;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use overcast_capi::crd::zvirt::{ZvirtCluster, ZvirtMachine};
use overcast_cloud::{Machines, VmPhase};
use overcast_cloud_zvirt::{Config, EngineVms, VmSpec};
use overcast_integration::capi;
use overcast_integration::figures::ms;
use overcast_integration::real::wait_for;
use overcast_integration::zvirt_sim::{Engine, Latency};
use serde_json::json;

const GIB: u64 = 1 << 30;

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let Ok(kubeconfig) = std::env::var("OVERCAST_TEST_KUBECONFIG") else {
        println!("SKIPPED: set OVERCAST_TEST_KUBECONFIG (the kit's kube-up.sh) to measure capi");
        return;
    };
    let client = overcast_integration::real::client(&kubeconfig).await;
    let mut crds = capi::core_crds();
    crds.extend(capi::provider_crds("zvirt"));
    capi::install(&client, &crds).await;
    let ns = format!("overcast-bench-capi-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let (by_id, files) = (dir.path().join("by-id"), dir.path().join("disks"));
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    let engine = Engine::new(&files, &by_id, 1 << 45, Latency::default());
    engine.start().await;
    // Its loop devices go however this ends.
    let _unplug = engine.unplug_on_drop();
    engine.add_template("ubuntu-2204", 10 * GIB);
    let profile = engine.add_vnic_profile("ovirtmgmt");
    let names = |n: usize| (0..n).map(move |i| format!("bench-{n}-{i}"));
    for (i, name) in names(1)
        .chain(names(50))
        .chain(["baseline".to_owned()])
        .enumerate()
    {
        engine.set_guest_ips_on_boot(&name, &[&format!("10.2.{}.{}", i / 200, i % 200 + 10)]);
    }
    let cloud_config = engine.cloud_config(dir.path());
    let config = Config::load(Some(&cloud_config), &|_| None).unwrap();
    let e = overcast_cloud_zvirt::connect(&config, None).unwrap();
    let cluster_id = e
        .json("bench", Method::GET, "/clusters", None)
        .await
        .unwrap()["cluster"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Baseline: one VM by hand through the same client, polled every 100 ms.
    let vms = EngineVms::new(e.clone());
    let spec = VmSpec {
        cluster_id: cluster_id.clone(),
        template: "ubuntu-2204".into(),
        sockets: 2,
        cores: 1,
        threads: 1,
        memory_mib: 4096,
        root_disk_gib: 30,
        nic_name: "nic1".into(),
        vnic_profile_id: profile.clone(),
        host_name: "baseline".into(),
    };
    let before = engine.total_calls();
    let t = Instant::now();
    let vm = vms
        .create("baseline", &spec, capi::CLOUD_INIT.as_bytes())
        .await
        .unwrap();
    let poll = Duration::from_millis(100);
    loop {
        let now = vms.find("baseline").await.unwrap().unwrap();
        if now.phase == VmPhase::Stopped {
            break;
        }
        tokio::time::sleep(poll).await;
    }
    vms.start(&vm, &spec, &[]).await.unwrap();
    while vms
        .addresses(&vm)
        .await
        .map(|a| a.is_empty())
        .unwrap_or(true)
    {
        tokio::time::sleep(poll).await;
    }
    let baseline = (t.elapsed(), engine.total_calls() - before);

    capi::zvirt_cluster(&client, &ns, &cluster_id).await;
    capi::mark_provisioned(&client, &ns).await;
    let _capi = capi::spawn_zvirt(&kubeconfig, &cloud_config, &ns);
    let zcs: Api<ZvirtCluster> = Api::namespaced(client.clone(), &ns);
    wait_for(
        "the ZvirtCluster ready",
        Duration::from_secs(60),
        async || {
            zcs.get("zvirt")
                .await
                .ok()
                .filter(|z| z.status.as_ref().is_some_and(|s| s.ready))
        },
    )
    .await;
    let zms: Api<ZvirtMachine> = Api::namespaced(client.clone(), &ns);

    let mut rows = Vec::new();
    for n in [1usize, 50] {
        let before = engine.total_calls();
        let t = Instant::now();
        futures::future::join_all(names(n).map(|name| {
            let (client, ns, profile) = (client.clone(), ns.clone(), profile.clone());
            async move { capi::zvirt_machine(&client, &ns, &name, &profile).await }
        }))
        .await;
        let mut ready: Vec<Option<Duration>> = vec![None; n];
        while ready.iter().any(Option::is_none) {
            assert!(
                t.elapsed() < Duration::from_secs(300),
                "{n} machines not ready in 5 min"
            );
            for (i, name) in names(n).enumerate() {
                if ready[i].is_none()
                    && zms
                        .get_opt(&name)
                        .await
                        .ok()
                        .flatten()
                        .and_then(|z| z.status)
                        .is_some_and(|s| s.ready)
                {
                    ready[i] = Some(t.elapsed());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let times: Vec<Duration> = ready.into_iter().flatten().collect();
        let calls = engine.total_calls() - before;
        rows.push((n, times, calls));
    }

    // At rest: every machine's object changed, each change reconciled; the engine asked
    // nothing.
    let before = engine.total_calls();
    for name in names(1).chain(names(50)) {
        zms.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"bench": "touched"}}})),
        )
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let at_rest = engine.total_calls() - before;

    println!("capi --cloud zvirt on the engine simulator (default latencies), --poll-interval 1");
    println!("| machines at once | created → ready p50 | p95 | max | engine calls per machine |");
    println!("|---|---|---|---|---|");
    for (n, times, calls) in rows {
        println!(
            "| {n} | {} | {} | {} | {:.1} |",
            ms(percentile(times.clone(), 0.5)),
            ms(percentile(times.clone(), 0.95)),
            ms(percentile(times, 1.0)),
            calls as f64 / n as f64
        );
    }
    println!(
        "| baseline: one VM by hand (EngineVms, polled every 100 ms) | {} | | | {} |",
        ms(baseline.0),
        baseline.1
    );
    println!("engine calls for 51 reconciles at rest (every machine's object touched): {at_rest}");
    let _ = namespaces.delete(&ns, &Default::default()).await;
}
