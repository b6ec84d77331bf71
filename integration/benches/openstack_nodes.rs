//! The ccm's node sync on OpenStack at 10, 100 and 500 servers (Nova's fake driver, the
//! simulator's real Nova and Neutron): cloud calls and time for one `list_instances` —
//! what every node sync costs — next to, in the same run, OCCM's per-node pattern
//! measured on the same servers (a server GET and a port list for each node, what its
//! InstancesV2 sends per node per sync; a flavor GET too below Nova 2.47, not counted
//! here) and one bare server GET.
//!
//! `../shared/sim/openstack/ossim-up.sh && OVERCAST_TEST_OPENSTACK_OPENRC=/tmp/ossim/openrc \
//!  cargo bench --workspace --bench openstack_nodes` (boots up to 500 servers, on a 64 MiB
//! flavor of its own, with Nova's multiple-create, raising the project's quotas; deletes
//! them at the end).
//! `OVERCAST_BENCH_SERVERS=10,100` runs fewer sizes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use overcast_cloud::instances::Instances;
use overcast_cloud_http::ApiMetrics;
use overcast_cloud_openstack::client::Microversion;
use overcast_cloud_openstack::config::Networking;
use overcast_cloud_openstack::{Config, NovaInstances, OpenStack, Service};
use serde_json::{json, Value};

use overcast_integration::figures::{median, ms};

const PREFIX: &str = "overcast-bench-node";
const REPEAT: usize = 5;

async fn call(
    os: &OpenStack,
    service: Service,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let version = (service == Service::Compute).then_some(Microversion(2, 47));
    let r = os
        .call(service, "bench", method, path, body.as_ref(), version)
        .await
        .expect("call");
    (
        r.status.as_u16(),
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

/// Our servers' ids, by name prefix.
async fn ours(os: &OpenStack) -> Vec<(String, String)> {
    let (_, doc) = call(
        os,
        Service::Compute,
        Method::GET,
        &format!("/servers/detail?name=^{PREFIX}&limit=1000"),
        None,
    )
    .await;
    doc["servers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["status"].as_str().unwrap_or("").to_owned(),
            )
        })
        .filter(|(_, status)| status != "DELETED")
        .collect()
}

/// A flavor small enough that 500 fit on the simulator's one fake compute host (800,000 MiB
/// of RAM at Nova's 1.5 allocation ratio: m1.small's 4 GiB filled it at 288 servers).
async fn tiny_flavor(os: &OpenStack) -> Value {
    let name = format!("{PREFIX}-tiny");
    let (_, flavors) = call(os, Service::Compute, Method::GET, "/flavors", None).await;
    if let Some(f) = flavors["flavors"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["name"] == name.as_str())
    {
        return f["id"].clone();
    }
    let (status, made) = call(
        os,
        Service::Compute,
        Method::POST,
        "/flavors",
        Some(json!({"flavor": {"name": name, "vcpus": 1, "ram": 64, "disk": 0}})),
    )
    .await;
    assert_eq!(status, 200, "{made}");
    made["flavor"]["id"].clone()
}

/// Boots servers until `n` of ours are ACTIVE: Nova's multiple-create, 10 a request, each
/// batch waited for before the next. (Fifty at once drove the simulator's Nova — SQLite —
/// into "database is locked" and ERROR for a third of them, with none finishing.)
async fn grow_to(os: &OpenStack, env: &BTreeMap<String, String>, net: &str, n: usize) {
    let flavor = tiny_flavor(os).await;
    let started = Instant::now();
    loop {
        let all = ours(os).await;
        let active = all.iter().filter(|(_, s)| s == "ACTIVE").count();
        if active >= n {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3600),
            "{active} of {n} ACTIVE after an hour"
        );
        // The simulator can fail a build under load: those are deleted and replaced.
        for (id, _) in all.iter().filter(|(_, s)| s == "ERROR") {
            call(
                os,
                Service::Compute,
                Method::DELETE,
                &format!("/servers/{id}"),
                None,
            )
            .await;
        }
        let building = all.iter().filter(|(_, s)| s == "BUILD").count();
        if building == 0 {
            let batch = (n - active).min(10);
            let (status, body) = call(
                os,
                Service::Compute,
                Method::POST,
                "/servers",
                Some(json!({"server": {
                    "name": format!("{PREFIX}-{}", all.len()), "imageRef": env["OSSIM_IMAGE_ID"],
                    "flavorRef": flavor, "networks": [{"uuid": net}],
                    "min_count": batch, "max_count": batch,
                }})),
            )
            .await;
            assert_eq!(status, 202, "{body}");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

#[tokio::main]
async fn main() {
    let Ok(openrc) = std::env::var("OVERCAST_TEST_OPENSTACK_OPENRC") else {
        println!(
            "SKIPPED: set OVERCAST_TEST_OPENSTACK_OPENRC to run the OpenStack nodes benchmark"
        );
        return;
    };
    let env = overcast_integration::ossim::openrc(&openrc);
    let dir = tempfile::tempdir().unwrap();
    let conf = overcast_integration::ossim::cloud_conf(&env, dir.path());
    let config = Config::load(Some(&conf)).unwrap();
    let metrics = Arc::new(ApiMetrics::unregistered());
    let os = overcast_cloud_openstack::connect(&config, Some(Arc::clone(&metrics))).unwrap();
    // The bench's own calls (booting, quotas) on a client of their own, not counted.
    let admin = overcast_cloud_openstack::connect(&config, None).unwrap();
    let project = admin
        .session()
        .await
        .expect("token")
        .project_id
        .clone()
        .expect("a project-scoped token");
    call(
        &admin,
        Service::Compute,
        Method::PUT,
        &format!("/os-quota-sets/{project}"),
        Some(json!({"quota_set": {"instances": -1, "cores": -1, "ram": -1}})),
    )
    .await;
    call(
        &admin,
        Service::Network,
        Method::PUT,
        &format!("/v2.0/quotas/{project}"),
        Some(json!({"quota": {"port": -1}})),
    )
    .await;
    let (_, found) = call(
        &admin,
        Service::Network,
        Method::GET,
        &format!("/v2.0/networks?name={PREFIX}"),
        None,
    )
    .await;
    let net = match found["networks"][0]["id"].as_str() {
        Some(id) => id.to_owned(),
        None => {
            let (_, made) = call(
                &admin,
                Service::Network,
                Method::POST,
                "/v2.0/networks",
                Some(json!({"network": {"name": PREFIX}})),
            )
            .await;
            let id = made["network"]["id"].as_str().unwrap().to_owned();
            call(
                &admin,
                Service::Network,
                Method::POST,
                "/v2.0/subnets",
                Some(json!({"subnet": {"network_id": id, "ip_version": 4, "cidr": "10.200.0.0/22", "name": PREFIX}})),
            )
            .await;
            id
        }
    };

    println!("| servers | calls, one list_instances | time (median of {REPEAT}) | OCCM's per-node calls, measured | their time | one bare server GET |");
    println!("|---|---|---|---|---|---|");
    let sizes: Vec<usize> = std::env::var("OVERCAST_BENCH_SERVERS")
        .unwrap_or_else(|_| "10,100,500".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    for n in sizes {
        grow_to(&admin, &env, &net, n).await;
        let nova = NovaInstances::new(
            Arc::clone(&os),
            Networking::default(),
            config.region.clone(),
            false,
        );
        nova.list_instances()
            .await
            .expect("warm-up: version document, token");
        let total = ours(&admin)
            .await
            .iter()
            .filter(|(_, s)| s == "ACTIVE")
            .count();
        let (mut ours_t, mut calls) = (Vec::new(), 0);
        for _ in 0..REPEAT {
            let before = metrics.total();
            let t = Instant::now();
            let all = nova.list_instances().await.expect("list");
            ours_t.push(t.elapsed());
            calls = metrics.total() - before;
            assert!(all.len() >= total, "{} listed of {total}", all.len());
        }
        // OCCM: per node, the server by id and its ports.
        let ids: Vec<String> = ours(&admin)
            .await
            .into_iter()
            .filter(|(_, s)| s == "ACTIVE")
            .map(|(id, _)| id)
            .collect();
        let before = metrics.total();
        let t = Instant::now();
        for id in &ids {
            call(
                &os,
                Service::Compute,
                Method::GET,
                &format!("/servers/{id}"),
                None,
            )
            .await;
            call(
                &os,
                Service::Network,
                Method::GET,
                &format!("/v2.0/ports?device_id={id}"),
                None,
            )
            .await;
        }
        let per_node = t.elapsed();
        let per_node_calls = metrics.total() - before;
        let mut bare = Vec::new();
        for _ in 0..REPEAT {
            let t = Instant::now();
            call(
                &os,
                Service::Compute,
                Method::GET,
                &format!("/servers/{}", ids[0]),
                None,
            )
            .await;
            bare.push(t.elapsed());
        }
        println!(
            "| {total} | {calls} | {} | {per_node_calls} | {} | {} |",
            ms(median(ours_t)),
            ms(per_node),
            ms(median(bare))
        );
    }
    if std::env::var("OVERCAST_BENCH_KEEP").is_err() {
        for (id, _) in ours(&admin).await {
            call(
                &admin,
                Service::Compute,
                Method::DELETE,
                &format!("/servers/{id}"),
                None,
            )
            .await;
        }
    }
}
