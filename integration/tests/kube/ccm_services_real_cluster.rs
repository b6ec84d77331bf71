//! The ccm's service controller against a real Kubernetes API server with a cloud whose
//! load balancers take seconds (as a real cloud's do): Services reconcile concurrently,
//! so N Services finish in about the time of one. Run only when `OVERCAST_TEST_KUBECONFIG`
//! names a kubeconfig for a disposable cluster (the test creates and deletes Services
//! prefixed `overcast-it-slow-` in `default`); otherwise it says clearly that it was skipped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::reflector;
use kube::Api;
use overcast_ccm::metrics::Metrics;
use overcast_ccm::services::{self, ServiceSync};
use overcast_cloud::{LoadBalancerRef, LoadBalancerSpec, LoadBalancerStatus, LoadBalancers};
use overcast_integration::real::{client, wait_for};
use overcast_integration::say_skipped;
use serde_json::json;

const ENV: &str = "OVERCAST_TEST_KUBECONFIG";
/// What one balancer takes in this cloud.
const DELAY: Duration = Duration::from_secs(2);
const N: usize = 6;

/// A cloud whose every ensure takes `DELAY`; counts how many run at once.
#[derive(Default)]
struct SlowLbs {
    running: AtomicUsize,
    most: AtomicUsize,
    ensured: AtomicUsize,
}

#[async_trait]
impl LoadBalancers for SlowLbs {
    async fn get_load_balancer(
        &self,
        _: &LoadBalancerRef,
    ) -> overcast_cloud::Result<Option<LoadBalancerStatus>> {
        Ok(None)
    }
    async fn ensure_load_balancer(
        &self,
        spec: &LoadBalancerSpec,
    ) -> overcast_cloud::Result<LoadBalancerStatus> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(DELAY).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.ensured.fetch_add(1, Ordering::SeqCst);
        let n = spec.service.name.bytes().map(u32::from).sum::<u32>() % 250;
        Ok(LoadBalancerStatus {
            ingress_ips: vec![format!("127.243.0.{}", n + 1)],
            ..LoadBalancerStatus::default()
        })
    }
    async fn delete_load_balancer(&self, _: &LoadBalancerRef) -> overcast_cloud::Result<()> {
        Ok(())
    }
}

async fn create(services: &Api<Service>, name: &str) {
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "selector": {"app": "none"}, "ports": [{"port": 18081, "protocol": "TCP"}]},
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
}

async fn gone(services: &Api<Service>, name: &str) {
    wait_for(
        "the finalizer released",
        Duration::from_secs(30),
        async || services.get_opt(name).await.ok()?.is_none().then_some(()),
    )
    .await;
}

async fn balanced(services: &Api<Service>, name: &str) {
    wait_for(
        &format!("{name}'s address"),
        Duration::from_secs(60),
        async || {
            let s = services.get(name).await.ok()?;
            s.status?.load_balancer?.ingress?.first()?.ip.clone()
        },
    )
    .await;
}

#[tokio::test]
async fn slow_balancers_reconcile_concurrently_on_a_real_api_server() {
    let Ok(kubeconfig) = std::env::var(ENV) else {
        say_skipped(&format!(
            "set {ENV} to a disposable cluster's kubeconfig to run the service controller against a real API server"
        ));
        return;
    };
    // Its controller reconciles every Service there, another test's among them, and the
    // turn's start sweeps `overcast-it-` Services away: this test's own while it runs,
    // were it to run outside one.
    let _cluster = overcast_integration::real::cluster_turn().await;
    let c = client(&kubeconfig).await;
    let services: Api<Service> = Api::namespaced(c.clone(), "default");
    let lbs = Arc::new(SlowLbs::default());
    let sync = ServiceSync::new(
        c.clone(),
        Arc::clone(&lbs) as Arc<dyn LoadBalancers>,
        Metrics::unregistered(),
    );
    // No nodes: the backends are not what this test is about.
    let (nodes, _writer) = reflector::store::<Node>();
    let controller = tokio::spawn(services::run(
        Arc::new(sync),
        nodes,
        futures::stream::pending(),
        N as u16,
    ));

    // Ones left by a run that failed hold our finalizer: the running controller lets
    // them go. Then the counts start.
    let names: Vec<String> = (0..N).map(|i| format!("overcast-it-slow-{i}")).collect();
    for name in names
        .iter()
        .chain(["overcast-it-slow-one".to_owned()].iter())
    {
        if services
            .delete(name, &DeleteParams::default())
            .await
            .is_ok()
        {
            gone(&services, name).await;
        }
    }
    while lbs.running.load(Ordering::SeqCst) > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    lbs.most.store(0, Ordering::SeqCst);
    lbs.ensured.store(0, Ordering::SeqCst);

    // The baseline, in the same run: one Service alone.
    let started = Instant::now();
    create(&services, "overcast-it-slow-one").await;
    balanced(&services, "overcast-it-slow-one").await;
    let one = started.elapsed();

    let started = Instant::now();
    for name in &names {
        create(&services, name).await;
    }
    for name in &names {
        balanced(&services, name).await;
    }
    let all = started.elapsed();
    println!(
        "one Service: {one:?}; {N} Services: {all:?}; at most {} balancers at once",
        lbs.most.load(Ordering::SeqCst)
    );
    assert_eq!(
        lbs.most.load(Ordering::SeqCst),
        N,
        "all {N} were in the cloud at once"
    );
    // One after another they would take N × DELAY (12 s); together about one's time.
    assert!(
        all < one + DELAY,
        "{N} Services took {all:?}, one took {one:?}: they did not reconcile concurrently"
    );
    assert_eq!(
        lbs.ensured.load(Ordering::SeqCst),
        N + 1,
        "one cloud call per Service: our own status patches cost none"
    );

    // Deleting them goes through the finalizer, which the controller releases.
    for name in names
        .iter()
        .chain(["overcast-it-slow-one".to_owned()].iter())
    {
        services
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    for name in names
        .iter()
        .chain(["overcast-it-slow-one".to_owned()].iter())
    {
        gone(&services, name).await;
    }
    controller.abort();
}
