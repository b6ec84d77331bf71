//! The parent's RBAC manifest, and nothing more, for the provider.

use super::*;

/// The provider needs no more in the parent than `deploy/parent/dvp/rbac.yaml` grants: the
/// conformance suite, a snapshot and a restore from it, instances and a balancer, run as an account bound to exactly that
/// (without the optional ClusterRole: instances then carry no zone, and say so once).
#[tokio::test]
async fn the_parent_rbac_manifest_is_all_the_provider_needs() {
    use overcast_cloud::{
        Backend, Instances, LbPort, LoadBalancerSpec, LoadBalancers, Protocol, ServiceRef,
    };
    use overcast_cloud_dvp::DvpLoadBalancers;
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the DVP parent RBAC test", "rbac").await else {
        return;
    };
    let ns = world.sim.namespace.clone();
    // The optional ClusterRole is left out on purpose.
    let tenant = dvp_sim::tenant(&std::env::var(real::ENV).unwrap(), &ns, false).await;
    let parent = Parent::new(tenant, ns.clone(), Arc::new(ApiMetrics::unregistered()));

    let disks: Arc<dyn Disks> = Arc::new(DvpDisks::new(
        parent.clone(),
        64,
        waits(Duration::from_secs(30)),
    ));
    conformance::disks(&DiskHarness {
        disks: Arc::clone(&disks),
        node: "worker-1".into(),
        gone_node: "worker-gone".into(),
        zone: Zone::default(),
        parameters: BTreeMap::new(),
        prefix: "r-".into(),
        states: None,
        held_for: Duration::from_secs(3),
    })
    .await;
    disks.available_capacity(None).await.expect("GetCapacity");
    // Snapshots and a restore, as the tenant.
    let source = disks
        .create_disk(DiskSpec {
            name: "r-snap-source".into(),
            size_bytes: 16 << 20,
            zone: Zone::default(),
            parameters: BTreeMap::new(),
            metadata: BTreeMap::new(),
            source: None,
        })
        .await
        .expect("create as the tenant");
    let cut = disks
        .create_snapshot(overcast_cloud::SnapshotSpec {
            name: "r-snap".into(),
            source: source.id.clone(),
            parameters: BTreeMap::new(),
            metadata: BTreeMap::new(),
        })
        .await
        .expect("snapshot as the tenant");
    assert!(cut.ready, "{cut:?}");
    let (listed, _) = disks
        .list_snapshots_page(Some(&source.id), None, 0)
        .await
        .expect("list snapshots as the tenant");
    assert_eq!(listed.len(), 1);
    let restored = disks
        .create_disk(DiskSpec {
            name: "r-restored".into(),
            size_bytes: 16 << 20,
            zone: Zone::default(),
            parameters: BTreeMap::new(),
            metadata: BTreeMap::new(),
            source: Some(overcast_cloud::DiskSource::Snapshot(cut.id.clone())),
        })
        .await
        .expect("restore as the tenant");
    disks
        .delete_snapshot(&cut.id)
        .await
        .expect("delete the snapshot as the tenant");
    for d in [restored.id, source.id] {
        disks.delete_disk(&d).await.expect("delete as the tenant");
    }
    let instances = DvpInstances::new(parent.clone());
    conformance::instances(&instances, "worker-1").await;
    assert!(instances
        .list_instances()
        .await
        .unwrap()
        .iter()
        .all(|i| i.zone.is_none()));

    // Discovery as the tenant: what it may not read is left out and said.
    let discovery = overcast_cloud_dvp::DvpDiscovery::new(
        parent.clone(),
        DvpDisks::new(parent.clone(), 64, waits(Duration::from_secs(30))),
    );
    use overcast_cloud::discovery::Discovery;
    let doc = discovery.discovery_data().await.expect("discovery data");
    assert_eq!(doc["kind"], "DVPCloudDiscoveryData");
    assert_eq!(doc["zones"], serde_json::json!(["default"]));
    assert!(doc.get("storageClasses").is_none(), "{doc}");
    let conditions = discovery.conditions().await.expect("conditions");
    let by_name = |n: &str| {
        conditions
            .iter()
            .find(|c| c.name == n)
            .unwrap_or_else(|| panic!("{n}: {conditions:?}"))
    };
    assert!(by_name("parent-reachable").ok);
    assert!(by_name("permissions").ok, "{conditions:?}");
    assert!(by_name("namespace").ok, "{conditions:?}");
    assert!(!by_name("storage-classes").ok, "{conditions:?}");

    let lbs = DvpLoadBalancers::new(parent, Duration::from_secs(30));
    let spec = LoadBalancerSpec {
        name: "a0123456789abcdef0123456789abcde".into(),
        service: ServiceRef {
            namespace: "default".into(),
            name: "web".into(),
            uid: "01234567-89ab-cdef-0123-456789abcdef".into(),
        },
        ports: vec![LbPort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 80,
            node_port: 30080,
        }],
        backends: vec![Backend {
            node: "worker-1".into(),
            address: "10.66.0.11".into(),
            labels: BTreeMap::new(),
        }],
        ..LoadBalancerSpec::default()
    };
    let status = lbs
        .ensure_load_balancer(&spec)
        .await
        .expect("ensure as the tenant");
    assert!(!status.ingress_ips.is_empty());
    lbs.delete_load_balancer(&spec.reference())
        .await
        .expect("delete as the tenant");
    world.finish().await;
}
