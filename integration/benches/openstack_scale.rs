//! What the OpenStack binaries cost the cloud as the project grows beyond the cluster
//! (issue 70): a project holding this cluster's 5 servers and one volume of ours, and
//! `N − 5` servers and `(N − 5) / 5` volumes of another cluster (another cluster's
//! `cinder.csi.openstack.org/cluster`), on the simulator's real Nova, Neutron and Cinder.
//! Through the real binaries — the ccm (node controllers, an in-process API server with
//! the 5 Nodes), the csi controller on its socket, the discoverer — each counting its own
//! calls and body bytes (`openstack_api_requests_total`, `openstack_api_body_bytes_total`
//! on its metrics endpoint, read as a user reads them):
//!
//! - ccm: one node sync (calls and bytes over a window of periodic syncs, divided by the
//!   syncs its own metric counted), and a new Node, without a providerID, from its
//!   creation to its initialization;
//! - csi: ListVolumes whole (every volume of the project, as cinder-csi-plugin answers)
//!   and with `max_entries 1`;
//! - discoverer: one pass;
//! - each process's resident set (VmRSS) and peak (VmHWM) after;
//! - the baseline, in the same run, through the provider's own client: what a node sync
//!   read before this issue (every server and every port of the project).
//!
//! Fails when any operation's bytes at the largest size exceed twice those at the
//! smallest, except ListVolumes whole, which lists the project by design (reported).
//! `../shared/sim/openstack/ossim-up.sh && OVERCAST_TEST_OPENSTACK_OPENRC=/tmp/ossim/openrc
//! cargo bench -p overcast-integration --bench openstack_scale` (`OVERCAST_BENCH_SERVERS=10,200`, the default:
//! the project's sizes; boots on a 64 MiB flavor of its own with Nova's multiple-create,
//! raising the project's quotas, and deletes what it made at the end).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use overcast_cloud::instances::Instances;
use overcast_cloud_http::ApiMetrics;
use overcast_cloud_openstack::config::Networking;
use overcast_cloud_openstack::{Config, NovaInstances, OpenStack};
use overcast_integration::fake_api::FakeApi;
use overcast_integration::ossim_project::{
    self, grow_to, servers, sweep, tiny_flavor, volumes, volumes_to,
};
use overcast_integration::scale::{self, scrape, Cost, Size};
use overcast_integration::{csi_v1 as csi, free_port, peak_rss_kib, rss_kib, Csi};
use serde_json::json;

const PREFIX: &str = "overcast-bench-scale";
const NODES: &str = "/api/v1/nodes";
const OURS: usize = 5;
const CLUSTER: &str = "overcast-bench-scale";
const OTHER_CLUSTER: &str = "overcast-bench-scale-other";

/// A process's own count of cloud calls and body bytes so far.
fn moved(port: u16) -> (f64, f64) {
    (
        scrape(port, "openstack_api_requests_total"),
        scrape(port, "openstack_api_body_bytes_total"),
    )
}

struct Project {
    env: BTreeMap<String, String>,
    conf: std::path::PathBuf,
    config: Config,
    admin: Arc<OpenStack>,
    net: String,
}

async fn one_size(p: &Project, n: usize, dir: &std::path::Path) -> Size {
    let image = p.env["OSSIM_IMAGE_ID"].clone();
    let others = n.saturating_sub(OURS);
    let flavor = tiny_flavor(&p.admin, PREFIX).await;
    grow_to(
        &p.admin,
        &flavor,
        &image,
        &p.net,
        &format!("{PREFIX}-w"),
        OURS,
    )
    .await;
    grow_to(
        &p.admin,
        &flavor,
        &image,
        &p.net,
        &format!("{PREFIX}-x"),
        others,
    )
    .await;
    let theirs = json!({"cinder.csi.openstack.org/cluster": OTHER_CLUSTER});
    volumes_to(&p.admin, &format!("{PREFIX}-v"), &theirs, others / 5).await;
    let ours: Vec<(String, String, String)> = servers(&p.admin, &format!("{PREFIX}-w"))
        .await
        .into_iter()
        .filter(|s| s.2 == "ACTIVE")
        .take(OURS)
        .collect();
    let mut size = Size::new(servers(&p.admin, PREFIX).await.len());

    // The baseline: what a node sync read before, through the provider's own client.
    let metrics = Arc::new(ApiMetrics::unregistered());
    let os = overcast_cloud_openstack::connect(&p.config, Some(Arc::clone(&metrics))).unwrap();
    let nova = NovaInstances::new(
        Arc::clone(&os),
        Networking::default(),
        p.config.region.clone(),
        false,
    );
    nova.list_instances().await.expect("warm-up");
    let (calls, bytes) = (metrics.total(), metrics.bytes());
    let t = Instant::now();
    nova.list_instances().await.expect("list");
    size.ops.insert(
        "baseline: every server and port (a sync before)",
        Cost {
            calls: (metrics.total() - calls) as f64,
            bytes: (metrics.bytes() - bytes) as f64,
            took: t.elapsed(),
        },
    );

    // The csi controller, one volume of ours.
    let csi_port = free_port();
    let csi = Csi::start(&[
        "--cloud=openstack",
        &format!("--cloud-config={}", p.conf.display()),
        &format!("--node-id={}", ours[0].0),
        "--zone=nova",
        &format!("--cluster={CLUSTER}"),
        &format!("--metrics-address=127.0.0.1:{csi_port}"),
    ])
    .await;
    let mut c = csi.controller().await;
    let name = &format!("{PREFIX}-ours");
    let ours_volume = c
        .create_volume(overcast_integration::create_request(name, 1 << 30))
        .await
        .expect("create")
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let every = volumes(&p.admin, PREFIX).await.len();
    for (label, max) in [
        ("csi: ListVolumes (the project, as cinder-csi)", 0),
        ("csi: ListVolumes, max_entries 1", 1),
    ] {
        let (listed, cost) = scale::measured(|| moved(csi_port), async {
            c.list_volumes(csi::ListVolumesRequest {
                max_entries: max,
                starting_token: String::new(),
            })
            .await
            .expect("list")
            .into_inner()
        })
        .await;
        match max {
            0 => assert!(
                listed.entries.len() >= every,
                "{label}: {}",
                listed.entries.len()
            ),
            _ => assert_eq!(listed.entries.len(), 1, "{label}"),
        }
        size.ops.insert(label, cost);
    }
    size.rss
        .insert("csi", (rss_kib(csi.pid()), peak_rss_kib(csi.pid())));

    // The ccm with the Nodes, four initialized.
    let api = FakeApi::default();
    let api_url = api.start().await;
    let kubeconfig = dir.join("kubeconfig");
    FakeApi::kubeconfig(&api_url, &kubeconfig);
    let node = |name: &str, provider: Option<&str>| {
        let mut n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        match provider {
            Some(id) => n["spec"]["providerID"] = json!(format!("openstack:///{id}")),
            None => {
                n["spec"]["taints"] = json!([{"key": "node.cloudprovider.kubernetes.io/uninitialized",
                    "value": "true", "effect": "NoSchedule"}])
            }
        }
        n
    };
    for (id, name, _) in ours.iter().take(OURS - 1) {
        api.put(NODES, node(name, Some(id)));
    }
    let port = free_port();
    let ccm = scale::ccm("openstack", &kubeconfig, &p.conf, port);
    let sync = scale::per_pass(
        || moved(port),
        port,
        "ccm_reconciles_total{controller=\"node\"}",
        "ccm_reconcile_duration_seconds_sum{controller=\"node\"}",
        Duration::from_secs(10),
    )
    .await;
    size.ops.insert("ccm: one node sync", sync);
    let (new_id, newcomer, _) = &ours[OURS - 1];
    let (_, c2) = scale::measured(|| moved(port), async {
        api.put(NODES, node(newcomer, None));
        assert!(
            overcast_integration::eventually(Duration::from_secs(60), || {
                api.get(NODES, newcomer)
                    .is_some_and(|n| n["spec"]["providerID"] == format!("openstack:///{new_id}"))
            })
            .await,
            "the new Node initialized"
        );
    })
    .await;
    size.ops.insert("ccm: a new Node initialized", c2);
    let pid = ccm.0.id();
    size.rss.insert("ccm", (rss_kib(pid), peak_rss_kib(pid)));
    drop(ccm);

    // The discoverer, one pass.
    let port = free_port();
    let discoverer = scale::discoverer(
        "openstack",
        &kubeconfig,
        &p.conf,
        port,
        &[&format!("--cluster={CLUSTER}")],
    );
    let pass = scale::per_pass(
        || moved(port),
        port,
        "cloud_data_discovery_cycle_duration_seconds_count",
        "cloud_data_discovery_cycle_duration_seconds_sum",
        Duration::from_secs(10),
    )
    .await;
    size.ops.insert("discoverer: one pass", pass);
    let pid = discoverer.0.id();
    size.rss
        .insert("discoverer", (rss_kib(pid), peak_rss_kib(pid)));
    drop(discoverer);

    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: ours_volume,
        ..Default::default()
    })
    .await
    .expect("delete our volume");
    drop(csi);
    size
}

#[tokio::main]
async fn main() {
    let Ok(openrc) = std::env::var("OVERCAST_TEST_OPENSTACK_OPENRC") else {
        println!(
            "SKIPPED: set OVERCAST_TEST_OPENSTACK_OPENRC to run the OpenStack scale benchmark"
        );
        return;
    };
    let env = overcast_integration::ossim::openrc(&openrc);
    let dir = tempfile::tempdir().unwrap();
    let conf = overcast_integration::ossim::cloud_conf(&env, dir.path());
    let config = Config::load(Some(&conf)).unwrap();
    let admin = overcast_cloud_openstack::connect(&config, None).unwrap();
    let net = ossim_project::prepare(&admin, PREFIX).await;
    let project = Project {
        env,
        conf,
        config,
        admin,
        net,
    };
    sweep(&project.admin, PREFIX).await;
    let mut sizes: Vec<usize> = std::env::var("OVERCAST_BENCH_SERVERS")
        .unwrap_or_else(|_| "10,200".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    // The project only grows between sizes.
    sizes.sort_unstable();
    let mut measured = Vec::new();
    for n in sizes {
        measured.push(one_size(&project, n, dir.path()).await);
    }
    let grew = overcast_integration::scale::report("servers", &measured, |op| {
        op.starts_with("baseline") || op.contains("the project")
    });
    let (first, last) = (&measured[0], &measured[measured.len() - 1]);
    if std::env::var("OVERCAST_BENCH_KEEP").is_err() {
        sweep(&project.admin, PREFIX).await;
    }
    assert!(
        grew.is_empty(),
        "bytes at {} servers more than twice those at {}: {grew:?}",
        last.size,
        first.size
    );
}
