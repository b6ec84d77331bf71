//! The ccm's node sync on vSphere (vcsim): SOAP calls and time for one `list_instances` —
//! what every node sync costs — for vcsim's default inventory (4 VMs) and for larger ones
//! (`-vm N` VMs per resource pool; the default model has two pools), next to, in the same
//! run, the per-node pattern of cloud-provider-vsphere's instances (a SearchIndex
//! `FindByUuid` and a property read of `guest`, `summary` and `config` for each node, what
//! its `DiscoverNode` sends) and one bare `CurrentTime` call. A sync with `[Labels]` adds
//! one REST call (the tags on the VMs' hosts, clusters and datacenters).
//!
//! `OVERCAST_TEST_VCSIM=/tmp/vcsim/vcsim cargo bench --workspace --bench vsphere_nodes`;
//! `OVERCAST_BENCH_VMS=0,50` chooses the `-vm` values (0: the default inventory).

use std::sync::Arc;
use std::time::Instant;

use overcast_cloud::instances::Instances;
use overcast_cloud_http::ApiMetrics;
use overcast_cloud_vsphere::config::Config;
use overcast_cloud_vsphere::instances::{Source, VsphereInstances};
use overcast_cloud_vsphere::inventory::properties;
use overcast_cloud_vsphere::session::Endpoint;
use overcast_cloud_vsphere::soap::Moref;
use overcast_integration::figures::{median, ms};
use overcast_integration::vcsim::Vcsim;

const REPEAT: usize = 5;

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = std::env::var("OVERCAST_BENCH_VMS")
        .unwrap_or_else(|_| "0,50,250".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    println!("| VMs | SOAP calls, one list_instances | time (median of {REPEAT}) | upstream's per-node calls, measured | their time | one bare CurrentTime |");
    println!("|---|---|---|---|---|---|");
    for per_pool in sizes {
        let args: Vec<String> = if per_pool == 0 {
            Vec::new()
        } else {
            vec!["-vm".into(), per_pool.to_string()]
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let Some(sim) = Vcsim::start("vsphere_nodes bench", &args) else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let conf = sim.conf(dir.path(), "");
        let config = Config::load_with(Some(&conf), &|_| None).unwrap();
        let vc = &config.vcenters[0];
        let metrics = Arc::new(ApiMetrics::unregistered());
        let client =
            overcast_cloud_vsphere::provider::connect(vc, Some(Arc::clone(&metrics))).unwrap();
        let instances = VsphereInstances::new(
            vec![Source::new(
                Arc::clone(&client),
                vc.datacenters.clone(),
                vc.ip_family.clone(),
            )],
            &config,
        );
        // Warm-up: the service content, the login, the view.
        let all = instances.list_instances().await.expect("warm-up");
        let (mut times, mut calls) = (Vec::new(), 0);
        for _ in 0..REPEAT {
            let before = metrics.total();
            let t = Instant::now();
            let again = instances.list_instances().await.expect("list");
            times.push(t.elapsed());
            calls = metrics.total() - before;
            assert_eq!(again.len(), all.len());
        }
        // Upstream: per node, FindByUuid then the VM's guest, summary and config.
        let before = metrics.total();
        let t = Instant::now();
        for i in &all {
            let uuid = i.provider_id.trim_start_matches("vsphere://");
            let vm = overcast_cloud_vsphere::search::vm_by_uuid(&client, None, uuid)
                .await
                .unwrap()
                .expect("found");
            properties(&client, &vm, &["guest", "summary", "config"])
                .await
                .unwrap();
        }
        let per_node = t.elapsed();
        let per_node_calls = metrics.total() - before;
        let mut bare = Vec::new();
        let this = Moref::new("ServiceInstance", "ServiceInstance");
        for _ in 0..REPEAT {
            let t = Instant::now();
            client
                .call(Endpoint::Vim, "CurrentTime", &this.xml("_this"), true)
                .await
                .unwrap();
            bare.push(t.elapsed());
        }
        println!(
            "| {} | {calls} | {} | {per_node_calls} | {} | {} |",
            all.len(),
            ms(median(times)),
            ms(per_node),
            ms(median(bare))
        );
    }
}
