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

use std::sync::Arc;
use std::time::Instant;

use http::Method;
use overcast_cloud::instances::Instances;
use overcast_cloud_http::ApiMetrics;
use overcast_cloud_openstack::config::Networking;
use overcast_cloud_openstack::{Config, NovaInstances, OpenStack, Service};

use overcast_integration::figures::{median, ms};
use overcast_integration::ossim_project::{self, call, grow_to, servers, tiny_flavor};

const PREFIX: &str = "overcast-bench-node";
const REPEAT: usize = 5;

/// Our servers (id, status), by name prefix.
async fn ours(os: &OpenStack) -> Vec<(String, String)> {
    servers(os, PREFIX)
        .await
        .into_iter()
        .map(|(id, _, status)| (id, status))
        .collect()
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
    let net = ossim_project::prepare(&admin, PREFIX).await;
    let flavor = tiny_flavor(&admin, PREFIX).await;

    println!("| servers | calls, one list_instances | time (median of {REPEAT}) | OCCM's per-node calls, measured | their time | one bare server GET |");
    println!("|---|---|---|---|---|---|");
    let sizes: Vec<usize> = std::env::var("OVERCAST_BENCH_SERVERS")
        .unwrap_or_else(|_| "10,100,500".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    for n in sizes {
        grow_to(&admin, &flavor, &env["OSSIM_IMAGE_ID"], &net, PREFIX, n).await;
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
