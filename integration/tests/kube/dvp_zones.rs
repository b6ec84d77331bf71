//! Zones on DVP, against the simulated parent (`overcast_integration::dvp_sim` on the kit's
//! API server): the parent's Nodes carry `topology.kubernetes.io/zone`, its StorageClasses
//! are local (bound on first consumer, pinned to the consumer's host), zonal (pinned to a
//! zone of `allowedTopologies`) or network (usable anywhere), and the disks' real PVCs and
//! PVs say so. Runs when `OVERCAST_TEST_KUBECONFIG` names a disposable cluster.
//!
//! A file of its own: the zoned parent Nodes made here would give zones to the other DVP
//! tests, which share the kit's API server (test binaries run one after another).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use overcast_cloud::{DiskSpec, Disks, Zone};
use overcast_cloud_dvp::{DvpDisks, Parent, Waits};
use overcast_cloud_http::ApiMetrics;
use overcast_integration::dvp_sim::{self, DvpSim};
use overcast_integration::real;

use overcast_integration::dvp_sim::PARENT;

const REGION: &str = "zt-region";

fn zone(z: &str) -> Zone {
    Zone {
        zone: z.into(),
        region: REGION.into(),
    }
}

/// A parent with two zones (a node each, plus one without a zone), three StorageClasses
/// and a VM in each zone.
struct Zoned {
    sim: DvpSim,
    admin: kube::Client,
    /// Names of the StorageClasses: local, zonal (zone b), network.
    local: String,
    zonal_b: String,
    network: String,
}

impl Zoned {
    async fn new(what: &str, test: &str) -> Option<Self> {
        let path = real::kubeconfig(what)?;
        let admin = real::client(&path).await;
        dvp_sim::install_crds(&admin).await;
        dvp_sim::sweep(&admin, &format!("overcast-it-dvp-zones-{test}-")).await;
        let ns = format!("overcast-it-dvp-zones-{test}-{}", std::process::id());
        let sim = DvpSim::start(admin.clone(), &ns, Duration::from_millis(100)).await;
        for (node, z) in [("a1", Some("zt-a")), ("b1", Some("zt-b")), ("x1", None)] {
            let mut labels = serde_json::json!({});
            if let Some(z) = z {
                labels["topology.kubernetes.io/zone"] = z.into();
                labels["topology.kubernetes.io/region"] = REGION.into();
            }
            sim.add_node(&format!("{ns}-{node}"), labels, false).await;
        }
        let classes: Api<StorageClass> = Api::all(admin.clone());
        let local = format!("{ns}-local");
        let zonal_b = format!("{ns}-zonal-b");
        let network = format!("{ns}-network");
        for doc in [
            serde_json::json!({"metadata": {"name": local}, "provisioner": "local.sim",
                "volumeBindingMode": "WaitForFirstConsumer"}),
            serde_json::json!({"metadata": {"name": zonal_b}, "provisioner": "zonal.sim",
                "volumeBindingMode": "Immediate",
                "allowedTopologies": [{"matchLabelExpressions": [
                    {"key": "topology.kubernetes.io/zone", "values": ["zt-b"]}]}]}),
            serde_json::json!({"metadata": {"name": network}, "provisioner": "network.sim",
                "volumeBindingMode": "Immediate"}),
        ] {
            classes
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(doc).unwrap(),
                )
                .await
                .expect("StorageClass");
        }
        Some(Self {
            sim,
            admin,
            local,
            zonal_b,
            network,
        })
    }

    fn node(&self, n: &str) -> String {
        format!("{}-{n}", self.sim.namespace)
    }

    fn spec(&self, name: &str, class: &str, asked: Zone) -> DiskSpec {
        DiskSpec {
            name: name.into(),
            size_bytes: 16 << 20,
            zone: asked,
            parameters: BTreeMap::from([("dvpStorageClass".to_owned(), class.to_owned())]),
            metadata: BTreeMap::new(),
            source: None,
        }
    }

    async fn finish(self) {
        let disks: Api<overcast_cloud_dvp::api::VirtualDisk> = Api::namespaced_with(
            self.admin.clone(),
            &self.sim.namespace,
            &overcast_cloud_dvp::api::virtual_disk(),
        );
        let vmbdas: Api<overcast_cloud_dvp::api::Vmbda> = Api::namespaced_with(
            self.admin.clone(),
            &self.sim.namespace,
            &overcast_cloud_dvp::api::vmbda(),
        );
        let lp = kube::api::ListParams::default();
        let _ = vmbdas
            .delete_collection(&DeleteParams::default(), &lp)
            .await;
        let _ = disks.delete_collection(&DeleteParams::default(), &lp).await;
        let _ = real::wait_for::<()>(
            "the simulator's clean-up",
            Duration::from_secs(30),
            async || {
                let n = disks.list(&lp).await.ok()?.items.len()
                    + vmbdas.list(&lp).await.ok()?.items.len();
                (n == 0).then_some(())
            },
        )
        .await;
        let classes: Api<StorageClass> = Api::all(self.admin.clone());
        for c in [&self.local, &self.zonal_b, &self.network] {
            let _ = classes.delete(c, &DeleteParams::default()).await;
        }
        self.sim.remove_nodes().await;
        dvp_sim::drop_tenant(&self.admin, &self.sim.namespace).await;
        let ns = self.sim.namespace.clone();
        drop(self.sim);
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(self.admin.clone())
            .delete(&ns, &DeleteParams::default())
            .await;
    }
}

fn waits() -> Waits {
    Waits {
        disk_ready: Duration::from_secs(30),
        attached: Duration::from_secs(30),
        detached: Duration::from_secs(30),
        resized: Duration::from_secs(30),
        deleted: Duration::from_secs(30),
    }
}

/// As an account bound to exactly `deploy/parent/dvp/rbac.yaml` (with its ClusterRole):
/// the zones are the parent nodes'; a volume is made in the zone asked for and then
/// recorded where the parent's storage can really be used — the zone asked for on local
/// storage (its first attachment, in that zone, binds it there), the zone the parent
/// bound it in on zonal storage, none on network storage.
#[tokio::test]
async fn volumes_are_placed_where_the_parent_s_storage_can_be_used() {
    let _turn = PARENT.lock().await;
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(world) = Zoned::new("DVP zones of volumes", "disks").await else {
        return;
    };
    let ns = world.sim.namespace.clone();
    world
        .sim
        .add_vm("vm-b", "host-b", "10.66.1.2", &world.node("b1"))
        .await;
    let tenant = dvp_sim::tenant(&std::env::var(real::ENV).unwrap(), &ns, true).await;
    let metrics = Arc::new(ApiMetrics::unregistered());
    let disks = DvpDisks::new(
        Parent::new(tenant, ns.clone(), Arc::clone(&metrics)),
        64,
        waits(),
    );
    assert_eq!(
        disks.zones().await.unwrap(),
        vec![zone("zt-a"), zone("zt-b")],
        "the zoned parent nodes' zones; the node without one adds none"
    );

    // Network storage: asked in a, usable anywhere.
    let net = disks
        .create_disk(world.spec("pvc-net", &world.network, zone("zt-a")))
        .await
        .expect("network disk");
    assert_eq!(net.zone, Zone::default(), "network storage: no zone");
    // Zonal storage that bound the disk in b, though a was asked: b.
    let elsewhere = disks
        .create_disk(world.spec("pvc-zonal-a", &world.zonal_b, zone("zt-a")))
        .await
        .expect("zonal disk");
    assert_eq!(elsewhere.zone, zone("zt-b"), "recorded where it was bound");
    let zonal = disks
        .create_disk(world.spec("pvc-zonal-b", &world.zonal_b, zone("zt-b")))
        .await
        .expect("zonal disk");
    assert_eq!(zonal.zone, zone("zt-b"));
    // Local storage: waits for its first consumer; in the zone asked for.
    let local = disks
        .create_disk(world.spec("pvc-local", &world.local, zone("zt-b")))
        .await
        .expect("local disk");
    assert_eq!(local.zone, zone("zt-b"));
    let phase = |name: &str| {
        let api: Api<overcast_cloud_dvp::api::VirtualDisk> = Api::namespaced_with(
            world.admin.clone(),
            &ns,
            &overcast_cloud_dvp::api::virtual_disk(),
        );
        let name = name.to_owned();
        async move {
            api.get(&name)
                .await
                .unwrap()
                .status
                .and_then(|s| s.phase)
                .unwrap_or_default()
        }
    };
    assert_eq!(phase("pvc-local").await, "WaitForFirstConsumer");
    // Its first attachment, to the VM in b, binds it on that VM's parent node.
    disks
        .attach_disk("pvc-local", "host-b", false)
        .await
        .expect("attach binds it");
    assert_eq!(phase("pvc-local").await, "Ready");
    let pv: k8s_openapi::api::core::v1::PersistentVolume = Api::all(world.admin.clone())
        .get(&format!(
            "pv-{}",
            api_target(&world.admin, &ns, "pvc-local").await
        ))
        .await
        .expect("its PV");
    let pinned = serde_json::to_value(pv.spec.unwrap().node_affinity).unwrap();
    assert!(
        pinned.to_string().contains(&world.node("b1")),
        "the PV is pinned to the VM's host: {pinned}"
    );
    // A repeated create (a retried CreateVolume) settles it again: still b.
    let again = disks
        .create_disk(world.spec("pvc-local", &world.local, zone("zt-b")))
        .await
        .expect("again");
    assert_eq!(again.zone, zone("zt-b"));
    // What get and list say is what was recorded.
    let listed: BTreeMap<String, Zone> = disks
        .list_disks()
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.id, d.zone))
        .collect();
    assert_eq!(
        listed,
        BTreeMap::from([
            ("pvc-local".to_owned(), zone("zt-b")),
            ("pvc-net".to_owned(), Zone::default()),
            ("pvc-zonal-a".to_owned(), zone("zt-b")),
            ("pvc-zonal-b".to_owned(), zone("zt-b")),
        ])
    );
    assert_eq!(disks.disk("pvc-net").await.unwrap().zone, Zone::default());
    disks.detach_disk("pvc-local", "host-b").await.unwrap();
    for id in ["pvc-local", "pvc-net", "pvc-zonal-a", "pvc-zonal-b"] {
        disks.delete_disk(id).await.expect("delete");
    }
    // Calls a zoned create costs beyond an unzoned one: the bound disk's PVC, its PV
    // and the parent's Nodes (counted in BENCHMARKS.md).
    for request in [
        "persistentvolumeclaim_get",
        "persistentvolume_get",
        "node_list",
    ] {
        assert!(metrics.requests(request) >= 1, "{request} was not asked");
    }
    world.finish().await;
}

/// The disk's target PVC name, as the simulator set it.
async fn api_target(admin: &kube::Client, ns: &str, disk: &str) -> String {
    let api: Api<overcast_cloud_dvp::api::VirtualDisk> =
        Api::namespaced_with(admin.clone(), ns, &overcast_cloud_dvp::api::virtual_disk());
    api.get(disk)
        .await
        .unwrap()
        .status
        .and_then(|s| s.target)
        .and_then(|t| t.persistent_volume_claim_name)
        .expect("target PVC")
}

/// The real binaries: the node plugin (`csi --cloud dvp`, no parent credentials) answers
/// NodeGetInfo only once the real `ccm` has initialized its Node, with the zone of the
/// parent node its VM runs on; the controller makes a volume asked for in that zone there
/// (its topology pins it), and one on network storage with no topology.
#[tokio::test]
async fn the_node_plugin_reports_the_zone_the_ccm_found_and_volumes_follow_it() {
    use overcast_integration::{csi_v1 as csi, Csi, NODE_ID, ZONE_KEY};
    let _turn = PARENT.lock().await;
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(world) = Zoned::new("DVP zones through the binaries", "bin").await else {
        return;
    };
    let kubeconfig = std::env::var(real::ENV).unwrap();
    world
        .sim
        .add_vm("vm-node", NODE_ID, "10.66.1.3", &world.node("b1"))
        .await;
    // This cluster's Node of that VM, as kubelet registers it: not initialized yet.
    world
        .sim
        .add_node(NODE_ID, serde_json::json!({}), true)
        .await;
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("cloud-config");
    let indented: String = std::fs::read_to_string(&kubeconfig)
        .unwrap()
        .lines()
        .map(|l| format!("  {l}\n"))
        .collect();
    std::fs::write(
        &config,
        format!(
            "namespace: {}\nkubeconfig: |\n{indented}",
            world.sim.namespace
        ),
    )
    .unwrap();
    let driver = Csi::start(&[
        "--cloud=dvp",
        &format!("--cloud-config={}", config.display()),
        &format!("--device-by-id-dir={}", world.sim.by_id.display()),
        &format!("--kubeconfig={kubeconfig}"),
        "--node-zone-wait-seconds=40",
    ])
    .await;
    let mut n = driver.node().await;
    // kubelet asks at registration; the ccm is not running yet.
    let asked = tokio::spawn(async move { n.node_get_info(csi::NodeGetInfoRequest {}).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!asked.is_finished(), "answered before the ccm decided");
    let _ccm = overcast_integration::KillOnDrop(
        std::process::Command::new(overcast_integration::binary("ccm"))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg("--cloud=dvp")
            .arg(format!("--cloud-config={}", config.display()))
            .arg("--controllers=node")
            .arg("--leader-elect=false")
            .arg(format!(
                "--metrics-address=127.0.0.1:{}",
                overcast_integration::free_port()
            ))
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let info = tokio::time::timeout(Duration::from_secs(40), asked)
        .await
        .expect("answered once the ccm initialized the node")
        .unwrap()
        .expect("NodeGetInfo")
        .into_inner();
    let topology = info.accessible_topology.unwrap().segments;
    assert_eq!(topology.get(ZONE_KEY).map(String::as_str), Some("zt-b"));
    assert_eq!(
        topology
            .get("topology.kubernetes.io/region")
            .map(String::as_str),
        Some(REGION)
    );

    // The controller: WaitForFirstConsumer sends the node's topology as preferred.
    let mut c = driver.controller().await;
    let node_topology = csi::Topology {
        segments: topology.clone(),
    };
    let a = csi::Topology {
        segments: [(ZONE_KEY.to_owned(), "zt-a".to_owned())].into(),
    };
    let mut create = overcast_integration::create_request("pvc-zoned", 16 << 20);
    create
        .parameters
        .insert("dvpStorageClass".into(), world.local.clone());
    create.accessibility_requirements = Some(csi::TopologyRequirement {
        requisite: vec![a.clone(), node_topology.clone()],
        preferred: vec![node_topology.clone()],
    });
    let volume = c
        .create_volume(create.clone())
        .await
        .expect("create")
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(volume.accessible_topology, vec![node_topology.clone()]);
    // A retry answers the same volume.
    let again = c.create_volume(create).await.expect("retry").into_inner();
    assert_eq!(
        again.volume.unwrap().accessible_topology,
        vec![node_topology]
    );
    // Network storage: usable from every zone, so no topology; a retry naming zones
    // finds it acceptable.
    let mut net = overcast_integration::create_request("pvc-anywhere", 16 << 20);
    net.parameters
        .insert("dvpStorageClass".into(), world.network.clone());
    net.accessibility_requirements = Some(csi::TopologyRequirement {
        requisite: vec![a.clone()],
        preferred: vec![a.clone()],
    });
    for _ in 0..2 {
        let v = c
            .create_volume(net.clone())
            .await
            .expect("network volume")
            .into_inner()
            .volume
            .unwrap();
        assert!(v.accessible_topology.is_empty(), "{v:?}");
    }
    // A zone no parent node has cannot be served.
    let mut nowhere = overcast_integration::create_request("pvc-nowhere", 16 << 20);
    nowhere.accessibility_requirements = Some(csi::TopologyRequirement {
        requisite: vec![csi::Topology {
            segments: [(ZONE_KEY.to_owned(), "zt-nowhere".to_owned())].into(),
        }],
        preferred: vec![],
    });
    let err = c.create_volume(nowhere).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    for id in ["pvc-zoned", "pvc-anywhere"] {
        c.delete_volume(overcast_integration::delete_request(id))
            .await
            .expect("delete");
    }
    drop(driver);
    world.finish().await;
}

/// A node plugin whose Node never gets initialized answers UNAVAILABLE (retryable: the
/// registrar is restarted and kubelet asks again), saying what it waits for; one whose
/// Node was initialized without a zone reports none.
#[tokio::test]
async fn a_node_not_initialized_is_unavailable_and_one_without_a_zone_has_none() {
    use overcast_integration::{csi_v1 as csi, Csi, NODE_ID};
    let _turn = PARENT.lock().await;
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(world) = Zoned::new("DVP node zone waits", "wait").await else {
        return;
    };
    let kubeconfig = std::env::var(real::ENV).unwrap();
    world
        .sim
        .add_node(NODE_ID, serde_json::json!({}), true)
        .await;
    let driver = Csi::start(&[
        "--mode=node",
        "--cloud=dvp",
        &format!("--kubeconfig={kubeconfig}"),
        "--node-zone-wait-seconds=2",
    ])
    .await;
    let mut n = driver.node().await;
    let err = n
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(err.message().contains("uninitialized"), "{}", err.message());
    world
        .sim
        .add_node(NODE_ID, serde_json::json!({}), false)
        .await;
    let info = n
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .expect("NodeGetInfo")
        .into_inner();
    assert!(info.accessible_topology.unwrap().segments.is_empty());
    assert_eq!(info.node_id, NODE_ID);
    drop(driver);
    world.finish().await;
}

/// Discovery as the account with the optional cluster grant: the parent nodes' zones,
/// and the instance types a VirtualMachineClass allows (the real CRD's schema checks the
/// class) next to the VMs' own.
#[tokio::test]
async fn with_the_cluster_grant_discovery_lists_the_zones_and_what_the_classes_allow() {
    use overcast_cloud::discovery::Discovery;
    use overcast_cloud_dvp::DvpDiscovery;
    let _turn = PARENT.lock().await;
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(world) = Zoned::new("DVP discovery with the cluster grant", "disc").await else {
        return;
    };
    let ns = world.sim.namespace.clone();
    world
        .sim
        .add_vm("vm-a", "host-a", "10.66.1.1", &world.node("a1"))
        .await;
    // Its root disk (its first VirtualDisk), whose size the VM's instance type carries.
    let roots: Api<overcast_cloud_dvp::api::VirtualDisk> = Api::namespaced_with(
        world.admin.clone(),
        &ns,
        &overcast_cloud_dvp::api::virtual_disk(),
    );
    roots
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualDisk",
                "metadata": {"name": "vm-a-root"},
                "spec": {"persistentVolumeClaim": {"size": "1536Mi"}},
            }))
            .unwrap(),
        )
        .await
        .expect("the VM's root disk");
    real::wait_for(
        "the root disk's capacity",
        Duration::from_secs(30),
        async || {
            roots
                .get("vm-a-root")
                .await
                .ok()?
                .status?
                .capacity
                .map(|_| ())
        },
    )
    .await;
    let classes: Api<kube::api::DynamicObject> = Api::all_with(
        world.admin.clone(),
        &overcast_cloud_dvp::api::virtual_machine_class(),
    );
    let class = format!("{ns}-small");
    classes
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "apiVersion": "virtualization.deckhouse.io/v1alpha2",
                "kind": "VirtualMachineClass",
                "metadata": {"name": class},
                "spec": {
                    "cpu": {"type": "Host"},
                    "sizingPolicies": [{"cores": {"min": 1, "max": 2},
                        "memory": {"perCore": {"min": "2Gi", "max": "4Gi"}}}],
                },
            }))
            .unwrap(),
        )
        .await
        .expect("a VirtualMachineClass the real schema admits");
    let tenant = dvp_sim::tenant(&std::env::var(real::ENV).unwrap(), &ns, true).await;
    let parent = Parent::new(tenant, ns.clone(), Arc::new(ApiMetrics::unregistered()));
    let discovery = DvpDiscovery::new(parent.clone(), DvpDisks::new(parent, 64, waits()));
    let doc = discovery.discovery_data().await.expect("discovery data");
    assert_eq!(doc["zones"], serde_json::json!(["zt-a", "zt-b"]));
    let types: BTreeMap<String, (u32, u64, u64)> = discovery
        .instance_types()
        .await
        .expect("instance types")
        .into_iter()
        .map(|t| (t.name, (t.cpu, t.memory_mib, t.root_disk_gib)))
        .collect();
    assert_eq!(types.get(&format!("{class}-1c-2gi")), Some(&(1, 2048, 0)));
    assert_eq!(types.get(&format!("{class}-2c-4gi")), Some(&(2, 4096, 0)));
    assert_eq!(
        types.get("generic-2c-4gi"),
        Some(&(2, 4096, 2)),
        "the VM's own shape, its 1.5 GiB root disk rounded up: {types:?}"
    );
    let conditions = discovery.conditions().await.expect("conditions");
    assert!(
        conditions.iter().all(|c| c.ok),
        "every condition holds with the full grant: {conditions:?}"
    );
    let _ = classes.delete(&class, &DeleteParams::default()).await;
    world.finish().await;
}
