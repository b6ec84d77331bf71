//! Load balancers on the simulator's real Octavia (no-op drivers): for a Service of two
//! ports and three nodes, the cloud calls and the time of a new load balancer (fully
//! populated, one create), of the same Service ensured again, of a node joining, and of
//! the deletion — next to, in the same run, the same body created by hand and polled to
//! ACTIVE (the floor any client pays) and one bare GET. With `OVERCAST_TEST_KUBECONFIG`
//! (the kit's API server) also Service create → ingress and Service delete → gone through
//! the real `ccm` binary.
//!
//! `../shared/sim/openstack/ossim-up.sh && OVERCAST_TEST_OPENSTACK_OPENRC=/tmp/ossim/openrc \
//!  cargo bench --workspace --bench openstack_lbs`
//!
//! The node-joining figure uses `provider-requires-serial-api-calls`: the simulator's
//! Octavia leaves the children of a one-call create PENDING_CREATE for good, so they can
//! take no change (see `integration/tests/clouds/openstack_real_cloud/octavia.rs`).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use k8s_openapi::api::core::v1::Service as KubeService;
use kube::api::{Api, DeleteParams, PostParams};
use overcast_cloud::{Backend, LbPort, LoadBalancerSpec, LoadBalancers, Protocol, ServiceRef};
use overcast_cloud_http::ApiMetrics;
use overcast_cloud_openstack::config::LoadBalancerOpts;
use overcast_cloud_openstack::octavia::api::Waits;
use overcast_cloud_openstack::octavia::OctaviaLoadBalancers;
use overcast_cloud_openstack::{Config, OpenStack, Service};
use overcast_integration::figures::{median, ms};
use overcast_integration::{binary, free_port, KillOnDrop};
use serde_json::{json, Value};

const CLUSTER: &str = "overcast-bench";
const ROUNDS: usize = 5;

async fn call(os: &OpenStack, method: Method, path: &str, body: Option<Value>) -> Value {
    let r = os
        .call(
            Service::LoadBalancer,
            "bench",
            method,
            path,
            body.as_ref(),
            None,
        )
        .await
        .expect("octavia");
    serde_json::from_slice(&r.body).unwrap_or(Value::Null)
}

fn spec(name: &str, nodes: usize) -> LoadBalancerSpec {
    let mut s = LoadBalancerSpec {
        name: format!("a{}", name.replace('-', "")),
        service: ServiceRef {
            namespace: "bench".into(),
            name: name.into(),
            uid: name.into(),
        },
        ports: vec![
            LbPort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 80,
                node_port: 30080,
            },
            LbPort {
                name: "dns".into(),
                protocol: Protocol::Udp,
                port: 53,
                node_port: 30053,
            },
        ],
        backends: (0..nodes)
            .map(|i| Backend {
                node: format!("node-{i}"),
                address: format!("10.0.0.{}", 230 + i),
                labels: BTreeMap::new(),
            })
            .collect(),
        ..LoadBalancerSpec::default()
    };
    s.annotations.insert(
        "service.beta.kubernetes.io/openstack-internal-load-balancer".into(),
        "true".into(),
    );
    s
}

/// Retries what the simulator's SQLite fails ("database is locked" → ERROR), as the ccm
/// would; how many retries it took is printed.
async fn retried<T>(what: &str, mut f: impl AsyncFnMut() -> overcast_cloud::Result<T>) -> T {
    for attempt in 1..=5 {
        match f().await {
            Ok(v) => return v,
            Err(e) if attempt < 5 => eprintln!("{what}: {e} (retried)"),
            Err(e) => panic!("{what}: {e}"),
        }
    }
    unreachable!()
}

struct Figure {
    times: Vec<Duration>,
    calls: Vec<u64>,
}

impl Figure {
    fn new() -> Self {
        Self {
            times: Vec::new(),
            calls: Vec::new(),
        }
    }
    fn row(&self, what: &str) {
        let mut calls = self.calls.clone();
        calls.sort();
        println!(
            "| {what} | {} | {} |",
            calls[calls.len() / 2],
            ms(median(self.times.clone()))
        );
    }
}

#[tokio::main]
async fn main() {
    let Ok(openrc) = std::env::var("OVERCAST_TEST_OPENSTACK_OPENRC") else {
        println!("SKIPPED: set OVERCAST_TEST_OPENSTACK_OPENRC (the openrc of ../shared/sim/openstack/ossim-up.sh)");
        return;
    };
    let env = overcast_integration::ossim::openrc(&openrc);
    let dir = tempfile::tempdir().unwrap();
    let conf = overcast_integration::ossim::cloud_conf(&env, dir.path());
    let config = Config::load(Some(&conf)).expect("cloud.conf");
    let metrics = Arc::new(ApiMetrics::unregistered());
    let os = overcast_cloud_openstack::connect(&config, Some(Arc::clone(&metrics))).unwrap();
    let subnet = env["OSSIM_SUBNET_ID"].clone();
    let waits = Waits {
        first: Duration::from_millis(250),
        longest: Duration::from_secs(2),
        deadline: Duration::from_secs(120),
    };
    let opts = LoadBalancerOpts {
        subnet_id: Some(subnet.clone()),
        ..LoadBalancerOpts::default()
    };
    let one_call =
        OctaviaLoadBalancers::new(Arc::clone(&os), opts.clone(), CLUSTER.into()).with_waits(waits);
    let serial = OctaviaLoadBalancers::new(
        Arc::clone(&os),
        LoadBalancerOpts {
            provider_requires_serial_api_calls: true,
            ..opts
        },
        CLUSTER.into(),
    )
    .with_waits(waits);
    // Token, catalog and Octavia's version document before anything is counted.
    let warm = spec("bench-warm", 3);
    retried("warm-up", async || {
        one_call.ensure_load_balancer(&warm).await
    })
    .await;
    retried("warm-up delete", async || {
        one_call.delete_load_balancer(&warm.reference()).await
    })
    .await;

    let (mut made, mut again, mut deleted) = (Figure::new(), Figure::new(), Figure::new());
    let (mut joined, mut by_hand, mut bare) = (Figure::new(), Figure::new(), Figure::new());
    for round in 0..ROUNDS {
        let s = spec(&format!("bench-{round}"), 3);
        let (before, t) = (metrics.total(), Instant::now());
        retried("ensure", async || one_call.ensure_load_balancer(&s).await).await;
        made.times.push(t.elapsed());
        made.calls.push(metrics.total() - before);

        let (before, t) = (metrics.total(), Instant::now());
        retried("again", async || one_call.ensure_load_balancer(&s).await).await;
        again.times.push(t.elapsed());
        again.calls.push(metrics.total() - before);

        let (before, t) = (metrics.total(), Instant::now());
        retried("delete", async || {
            one_call.delete_load_balancer(&s.reference()).await
        })
        .await;
        deleted.times.push(t.elapsed());
        deleted.calls.push(metrics.total() - before);

        // A node joins a load balancer made child by child.
        let mut s = spec(&format!("bench-serial-{round}"), 3);
        retried("serial", async || serial.ensure_load_balancer(&s).await).await;
        s.backends = spec("x", 4).backends;
        let (before, t) = (metrics.total(), Instant::now());
        retried("join", async || serial.ensure_load_balancer(&s).await).await;
        joined.times.push(t.elapsed());
        joined.calls.push(metrics.total() - before);
        retried("serial delete", async || {
            serial.delete_load_balancer(&s.reference()).await
        })
        .await;

        // The floor: the same body by hand, polled every 250 ms to ACTIVE.
        let (before, t) = (metrics.total(), Instant::now());
        let members = |port: u16| -> Vec<Value> {
            (0..3)
                .map(|i| json!({"name": format!("node-{i}"), "address": format!("10.0.0.{}", 230 + i), "protocol_port": port, "subnet_id": subnet}))
                .collect()
        };
        let body = json!({"loadbalancer": {
        "name": format!("{CLUSTER}-by-hand-{round}"), "vip_subnet_id": subnet,
        "listeners": [
            {"name": "l0", "protocol": "TCP", "protocol_port": 80, "default_pool":
                {"name": "p0", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": members(30080)}},
            {"name": "l1", "protocol": "UDP", "protocol_port": 53, "default_pool":
                {"name": "p1", "protocol": "UDP", "lb_algorithm": "ROUND_ROBIN", "members": members(30053)}},
        ]}});
        let made_by_hand = call(&os, Method::POST, "/v2/lbaas/loadbalancers", Some(body)).await;
        let id = made_by_hand["loadbalancer"]["id"]
            .as_str()
            .expect("created by hand")
            .to_owned();
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let lb = call(
                &os,
                Method::GET,
                &format!("/v2/lbaas/loadbalancers/{id}"),
                None,
            )
            .await;
            match lb["loadbalancer"]["provisioning_status"].as_str() {
                Some("ACTIVE") => break,
                Some("ERROR") => panic!("by hand: ERROR"),
                _ => {}
            }
        }
        by_hand.times.push(t.elapsed());
        by_hand.calls.push(metrics.total() - before);
        let (before, t) = (metrics.total(), Instant::now());
        call(
            &os,
            Method::GET,
            &format!("/v2/lbaas/loadbalancers/{id}"),
            None,
        )
        .await;
        bare.times.push(t.elapsed());
        bare.calls.push(metrics.total() - before);
        call(
            &os,
            Method::DELETE,
            &format!("/v2/lbaas/loadbalancers/{id}?cascade=true"),
            None,
        )
        .await;
    }
    println!("Octavia, a Service of 2 ports and 3 nodes, median of {ROUNDS}:\n");
    println!("| operation | cloud calls | time |");
    println!("|---|---|---|");
    made.row("new load balancer (one create, awaited ACTIVE)");
    again.row("the same Service ensured again");
    joined.row("a 4th node joins (serial mode)");
    deleted.row("deleted (cascade, awaited gone)");
    by_hand.row("baseline: the same body by hand, polled to ACTIVE");
    bare.row("baseline: one bare load balancer GET");

    if let Ok(kubeconfig) = std::env::var("OVERCAST_TEST_KUBECONFIG") {
        end_to_end(&kubeconfig, &conf, &subnet).await;
    } else {
        println!(
            "\nSKIPPED Service → ingress: set OVERCAST_TEST_KUBECONFIG (the kit's API server)"
        );
    }
}

/// Service create → ingress, and delete → gone, through the real ccm.
async fn end_to_end(kubeconfig: &str, conf: &std::path::Path, subnet: &str) {
    let mut text = std::fs::read_to_string(conf).unwrap();
    text.push_str(&format!("[LoadBalancer]\nsubnet-id = {subnet}\n"));
    std::fs::write(conf, text).unwrap();
    let _ccm = KillOnDrop(
        Command::new(binary("ccm"))
            .arg("--cloud=openstack")
            .arg(format!("--cloud-config={}", conf.display()))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--cluster-name={CLUSTER}"))
            .arg("--controllers=service")
            .arg("--leader-elect=false")
            .arg(format!("--metrics-address=127.0.0.1:{}", free_port()))
            .stderr(Stdio::null())
            .spawn()
            .expect("ccm"),
    );
    let client = overcast_integration::real::client(kubeconfig).await;
    let services: Api<KubeService> = Api::namespaced(client, "default");
    let (mut up, mut down) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let name = format!("overcast-bench-lb-{round}");
        let svc: KubeService = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "annotations": {
                "service.beta.kubernetes.io/openstack-internal-load-balancer": "true"}},
            "spec": {"type": "LoadBalancer", "selector": {"app": "none"},
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        }))
        .unwrap();
        let t = Instant::now();
        services.create(&PostParams::default(), &svc).await.unwrap();
        loop {
            let s = services.get(&name).await.unwrap();
            let ip = s
                .status
                .and_then(|s| s.load_balancer)
                .and_then(|l| l.ingress)
                .is_some_and(|i| !i.is_empty());
            if ip {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(120), "{name}: no ingress");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        up.push(t.elapsed());
        let t = Instant::now();
        services
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        while services.get_opt(&name).await.unwrap().is_some() {
            assert!(t.elapsed() < Duration::from_secs(180), "{name}: not gone");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        down.push(t.elapsed());
    }
    println!("\nThrough the real ccm and the kit's API server, median of {ROUNDS}:\n");
    println!("| Service create → ingress | Service delete → gone (load balancer deleted first) |");
    println!("|---|---|");
    println!("| {} | {} |", ms(median(up)), ms(median(down)));
}
