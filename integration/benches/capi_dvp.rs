//! The real `capi --cloud dvp` with the kit's API server and the DVP simulator as the
//! parent (its latency: each transition 200 ms — a disk Provisioning → Ready, a VM
//! Pending → Starting → Running): for 1 and for 50 machines made at once, each machine's
//! time from its objects' creation to `ready` and the parent calls per machine (the
//! binary's own `dvp_api_requests_total`); then the parent calls of reconciles at rest
//! (every machine's object touched). Baseline in the same run: one VM made by hand through
//! the same client (`ParentVms`: create, then its phase and address polled every 100 ms).
//! The provider looks at a VM on its way every `--poll-interval` (1 s here).
//!
//! `OVERCAST_TEST_KUBECONFIG=… cargo bench -p overcast-integration --bench capi_dvp`

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use overcast_capi::crd::dvp::DeckhouseMachine;
use overcast_cloud::{Machines, VmPhase};
use overcast_cloud_dvp::machines::ParentVms;
use overcast_cloud_dvp::Parent;
use overcast_cloud_http::ApiMetrics;
use overcast_integration::capi::{self, CLOUD_INIT};
use overcast_integration::dvp_sim::{self, DvpSim};
use overcast_integration::figures::ms;
use overcast_integration::real::wait_for;
use serde_json::json;

const LATENCY: Duration = Duration::from_millis(200);

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn calls(port: u16) -> u64 {
    let (_, text) = overcast_integration::http_get(port, "/metrics");
    text.lines()
        .filter(|l| l.starts_with("dvp_api_requests_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::main]
async fn main() {
    let Ok(kubeconfig) = std::env::var("OVERCAST_TEST_KUBECONFIG") else {
        println!(
            "SKIPPED: set OVERCAST_TEST_KUBECONFIG (the kit's kube-up.sh) to measure capi on DVP"
        );
        return;
    };
    let client = overcast_integration::real::client(&kubeconfig).await;
    let mut crds = capi::core_crds();
    crds.extend(capi::provider_crds("dvp"));
    capi::install(&client, &crds).await;
    dvp_sim::install_crds(&client).await;
    let pid = std::process::id();
    let ns = format!("overcast-bench-capi-dvp-{pid}");
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    let parent_ns = format!("{ns}-parent");
    let sim = DvpSim::start(client.clone(), &parent_ns, LATENCY).await;
    let image = format!("overcast-bench-{pid}");
    sim.add_image("ClusterVirtualImage", &image, 1 << 29, true)
        .await;

    // Baseline: one VM by hand through the same client.
    let by_hand = Arc::new(ApiMetrics::unregistered());
    let vms = ParentVms::new(
        Parent::new(client.clone(), parent_ns.clone(), Arc::clone(&by_hand)),
        "bench",
    );
    let spec = capi::dvp_vm_spec(&image, 0);
    let started = Instant::now();
    let vm = vms
        .create("by-hand", &spec, CLOUD_INIT.as_bytes())
        .await
        .unwrap();
    loop {
        if vms.find("by-hand").await.unwrap().map(|v| v.phase) == Some(VmPhase::Running)
            && !vms.addresses(&vm).await.unwrap().is_empty()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let baseline = started.elapsed();
    let baseline_calls = by_hand.total();

    let dir = tempfile::tempdir().unwrap();
    let indented: String = std::fs::read_to_string(&kubeconfig)
        .unwrap()
        .lines()
        .map(|l| format!("  {l}\n"))
        .collect();
    let conf = dir.path().join("cloud-config");
    std::fs::write(
        &conf,
        format!("namespace: {parent_ns}\nkubeconfig: |\n{indented}"),
    )
    .unwrap();
    let port = overcast_integration::free_port();
    let _capi = overcast_integration::KillOnDrop(
        std::process::Command::new(overcast_integration::binary("capi"))
            .args(["--cloud=dvp", "--cluster-uuid=bench", "--poll-interval=1"])
            .arg(format!("--cloud-config={}", conf.display()))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--namespace={ns}"))
            .arg(format!("--leader-elect-lease-name={ns}"))
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The Cluster and its infrastructure, provisioned.
    capi::cluster(&client, &ns, &capi::DVP, "dvp", json!({})).await;
    capi::mark_provisioned_named(&client, &ns, "dvp").await;
    wait_for("capi's metrics", Duration::from_secs(30), async || {
        (overcast_integration::http_get(port, "/metrics").0 == 200).then_some(())
    })
    .await;

    let dms: Api<DeckhouseMachine> = Api::namespaced(client.clone(), &ns);
    println!("| machines at once | created → ready p50 | p95 | max | parent calls per machine |");
    println!("|---|---|---|---|---|");
    let mut all = Vec::new();
    for (round, n) in [(0usize, 1usize), (1, 50)] {
        let names: Vec<String> = (0..n).map(|i| format!("m{round}-{i}")).collect();
        let before = calls(port);
        let t0 = Instant::now();
        let mut made = tokio::task::JoinSet::new();
        for name in names.clone() {
            let (client, ns, image) = (client.clone(), ns.clone(), image.clone());
            made.spawn(async move {
                capi::machine(
                    &client,
                    &ns,
                    &capi::DVP,
                    "dvp",
                    &name,
                    capi::dvp_machine_spec(&image),
                )
                .await
            });
        }
        while made.join_next().await.is_some() {}
        let mut times = Vec::new();
        let mut pending: Vec<String> = names.clone();
        while !pending.is_empty() {
            let mut still = Vec::new();
            for name in pending {
                let ready = dms
                    .get(&name)
                    .await
                    .ok()
                    .and_then(|d| d.status)
                    .is_some_and(|s| s.ready);
                if ready {
                    times.push(t0.elapsed());
                } else {
                    still.push(name);
                }
            }
            pending = still;
            assert!(
                t0.elapsed() < Duration::from_secs(300),
                "machines not ready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let per = (calls(port) - before) as f64 / n as f64;
        println!(
            "| {n} | {} | {} | {} | {per:.1} |",
            ms(percentile(times.clone(), 0.5)),
            ms(percentile(times.clone(), 0.95)),
            ms(percentile(times, 1.0)),
        );
        all.extend(names);
    }
    println!(
        "| baseline: one VM by hand, polled every 100 ms | {} | | | {baseline_calls} |",
        ms(baseline)
    );
    // At rest: every machine's object touched; nothing asked of the parent.
    let before = calls(port);
    for name in &all {
        dms.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"bench/touched": "1"}}})),
        )
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    println!(
        "\nAt rest: {} parent calls for {} reconciles (every machine's object touched once ready).",
        calls(port) - before,
        all.len()
    );
    drop(sim);
}
