//! Volume topology on vcsim, as vsphere-csi-driver places volumes: zone and region tags
//! (REST tagging) on vcsim's cluster, its standalone host and its datacenter; a datastore
//! made on the cluster's three hosts only (CreateLocalDatastore on each, as an ESXi host
//! mounts a datastore); the provider, then the real csi binary, place volumes by them.

use std::collections::BTreeMap;

use overcast_cloud::{CloudError, DiskSpec, Disks, Zone};
use overcast_cloud_vsphere::cns::Cns;
use overcast_cloud_vsphere::config::Config;
use overcast_cloud_vsphere::disks::VsphereDisks;
use overcast_cloud_vsphere::inventory::{properties, View};
use overcast_cloud_vsphere::session::Endpoint;
use overcast_cloud_vsphere::soap::{el, Moref};
use overcast_cloud_vsphere::vms::{snapshot, VIEW_TYPES};
use overcast_integration::{csi_v1 as csi, Csi};

use super::sim::Rest;
use super::*;

const LABELS: &str = "[Labels]\nzone = k8s-zone\nregion = k8s-region\n\
                      topology-categories = k8s-region,k8s-zone\n";
const ZONE_ALIAS: &str = "topology.csi.vmware.com/k8s-zone";
const REGION_ALIAS: &str = "topology.csi.vmware.com/k8s-region";

fn zone(z: &str) -> Zone {
    Zone {
        region: "region-1".into(),
        zone: z.into(),
    }
}

/// vcsim's default inventory tagged: region-1 on the datacenter, zone-a on the cluster
/// (three hosts), zone-b on the standalone host; and a datastore on the cluster's hosts
/// alone, made in `dir`. Returns that datastore's URL.
async fn zoned_inventory(sim: &Vcsim, vc: &Arc<Vcenter>, dir: &std::path::Path) -> String {
    let snap = snapshot(&View::new(Arc::clone(vc), VIEW_TYPES))
        .await
        .unwrap();
    let of_kind = |kind: &str| -> Vec<Moref> {
        snap.entities
            .keys()
            .filter(|m| m.kind == kind)
            .cloned()
            .collect()
    };
    let parent_kind = |m: &Moref| snap.entities[m].parent.as_ref().unwrap().kind.clone();
    let hosts = of_kind("HostSystem");
    let (in_cluster, standalone): (Vec<Moref>, Vec<Moref>) = hosts
        .into_iter()
        .partition(|h| parent_kind(h) == "ClusterComputeResource");
    assert_eq!((in_cluster.len(), standalone.len()), (3, 1));
    let rest = Rest::login(sim).await;
    let zones = rest.category("k8s-zone").await;
    let regions = rest.category("k8s-region").await;
    rest.tag(&regions, "region-1", &of_kind("Datacenter")[0])
        .await;
    rest.tag(&zones, "zone-a", &of_kind("ClusterComputeResource")[0])
        .await;
    rest.tag(&zones, "zone-b", &standalone[0]).await;
    let path = dir.join("ds-a");
    std::fs::create_dir_all(&path).unwrap();
    for host in &in_cluster {
        let p = properties(vc, host, &["configManager.datastoreSystem"])
            .await
            .unwrap();
        let dss = p
            .get("configManager.datastoreSystem")
            .and_then(Moref::of)
            .unwrap();
        vc.call(
            Endpoint::Vim,
            "CreateLocalDatastore",
            &(dss.xml("_this") + &el("name", "ds-a") + &el("path", path.to_str().unwrap())),
            false,
        )
        .await
        .unwrap();
    }
    path.display().to_string()
}

fn spec(name: &str, zone: Zone, url: Option<&str>) -> DiskSpec {
    DiskSpec {
        name: name.into(),
        size_bytes: 1 << 30,
        zone,
        parameters: url
            .map(|u| BTreeMap::from([("datastoreurl".to_owned(), u.to_owned())]))
            .unwrap_or_default(),
        metadata: BTreeMap::new(),
        source: None,
    }
}

/// The provider: the zones are the hosts'; a volume goes on a datastore every host of
/// its zone mounts, and is read back in the zone (or whole region) its datastore is
/// reached from; a datastore the zone's hosts do not all mount is refused with
/// RESOURCE_EXHAUSTED, and has no capacity there.
#[tokio::test]
async fn volumes_go_where_every_host_of_their_zone_reaches() {
    let Some(sim) = Vcsim::start("topology", &[]) else {
        return;
    };
    let metrics = Arc::new(ApiMetrics::unregistered());
    let vc = vcenter(&sim, &metrics);
    let dir = tempfile::tempdir().unwrap();
    let ds_a = zoned_inventory(&sim, &vc, dir.path()).await;
    let config = Config::load_with(Some(&sim.conf(dir.path(), LABELS)), &|_| None).unwrap();
    let disks =
        VsphereDisks::new(Cns::new(Arc::clone(&vc)), "it".into(), 59).with_topology(&config);

    assert_eq!(
        disks.zones().await.unwrap(),
        [zone("zone-a"), zone("zone-b")]
    );

    // On the cluster's own datastore: zone-a's.
    let a = disks
        .create_disk(spec("pvc-a", zone("zone-a"), Some(&ds_a)))
        .await
        .unwrap();
    assert_eq!(a.zone, zone("zone-a"));
    assert_eq!(
        disks.disk_by_name("pvc-a").await.unwrap().unwrap().zone,
        zone("zone-a"),
        "read back from its datastore"
    );
    // The standalone host does not mount it.
    let e = disks
        .create_disk(spec("pvc-b", zone("zone-b"), Some(&ds_a)))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, CloudError::ResourceExhausted(m) if m.contains("zone-b")),
        "{e:?}"
    );
    assert!(disks.disk_by_name("pvc-b").await.unwrap().is_none());
    // Without a datastore named: LocalDS_0, the one zone-b's host mounts, which every
    // zone reaches: the whole region.
    let b = disks
        .create_disk(spec("pvc-b", zone("zone-b"), None))
        .await
        .unwrap();
    assert_eq!(b.zone, zone(""), "every zone of region-1 reaches LocalDS_0");
    let listed: Vec<(String, Zone)> = disks
        .list_disks()
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.name, d.zone))
        .collect();
    assert!(
        listed.contains(&("pvc-a".into(), zone("zone-a"))),
        "{listed:?}"
    );
    assert!(listed.contains(&("pvc-b".into(), zone(""))), "{listed:?}");

    let url = BTreeMap::from([("datastoreurl".to_owned(), ds_a.clone())]);
    assert!(
        disks
            .available_capacity_for(Some(&zone("zone-a")), &url)
            .await
            .unwrap()
            > 0
    );
    assert_eq!(
        disks
            .available_capacity_for(Some(&zone("zone-b")), &url)
            .await
            .unwrap(),
        0,
        "zone-b's host does not mount ds-a"
    );
    assert!(
        disks
            .available_capacity(Some(&zone("zone-b")))
            .await
            .unwrap()
            > 0
    );

    // What placement costs: one PropertyCollector call and one tag call.
    let (pc, tags) = (
        metrics.requests("RetrievePropertiesEx"),
        metrics.requests("tag_list_attached"),
    );
    disks.zones().await.unwrap();
    assert_eq!(
        (
            metrics.requests("RetrievePropertiesEx") - pc,
            metrics.requests("tag_list_attached") - tags
        ),
        (1, 1)
    );
}

/// The real csi binary with `topology-categories`: NodeGetInfo (its place from
/// `--zone`/`--region`, as no ccm runs here) and CreateVolume answer both the
/// well-known keys and vsphere-csi-driver's; a requisite in upstream's keys alone (a PV
/// it made) is understood; a StorageClass datastore the zone does not reach is
/// RESOURCE_EXHAUSTED, and GetCapacity there 0.
#[tokio::test]
async fn the_csi_driver_answers_upstreams_topology_keys() {
    let Some(sim) = Vcsim::start("csi topology", &[]) else {
        return;
    };
    let vc = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let dir = tempfile::tempdir().unwrap();
    let ds_a = zoned_inventory(&sim, &vc, dir.path()).await;
    let conf = sim.conf(dir.path(), LABELS);
    let driver = Csi::start(&[
        "--cloud=vsphere",
        &format!("--cloud-config={}", conf.display()),
        "--node-id=node-a",
        "--zone=zone-a",
        "--region=region-1",
    ])
    .await;
    let (mut c, mut n) = (driver.controller().await, driver.node().await);
    let info = n
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    let segments = info.accessible_topology.unwrap().segments;
    assert_eq!(
        segments,
        BTreeMap::from([
            (
                "topology.kubernetes.io/zone".to_owned(),
                "zone-a".to_owned()
            ),
            (ZONE_ALIAS.to_owned(), "zone-a".to_owned()),
            (
                "topology.kubernetes.io/region".to_owned(),
                "region-1".to_owned()
            ),
            (REGION_ALIAS.to_owned(), "region-1".to_owned()),
        ])
        .into_iter()
        .collect()
    );

    let upstream = |z: &str| csi::Topology {
        segments: [
            (ZONE_ALIAS.to_owned(), z.to_owned()),
            (REGION_ALIAS.to_owned(), "region-1".to_owned()),
        ]
        .into_iter()
        .collect(),
    };
    let create = |name: &str, z: &str, url: Option<&str>| {
        let mut r = overcast_integration::create_request(name, 1 << 30);
        r.accessibility_requirements = Some(csi::TopologyRequirement {
            requisite: vec![upstream(z)],
            preferred: vec![upstream(z)],
        });
        if let Some(u) = url {
            r.parameters.insert("datastoreurl".into(), u.into());
        }
        r
    };
    let v = c
        .create_volume(create("pvc-top-a", "zone-a", Some(&ds_a)))
        .await
        .expect("create in zone-a")
        .into_inner()
        .volume
        .unwrap();
    let t = &v.accessible_topology[0].segments;
    assert_eq!(
        t.get(ZONE_ALIAS).map(String::as_str),
        Some("zone-a"),
        "{t:?}"
    );
    assert_eq!(
        t.get("topology.kubernetes.io/zone").map(String::as_str),
        Some("zone-a")
    );
    let st = c
        .create_volume(create("pvc-top-b", "zone-b", Some(&ds_a)))
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::ResourceExhausted, "{st:?}");
    let capacity = |z: &str| csi::GetCapacityRequest {
        accessible_topology: Some(upstream(z)),
        parameters: [("datastoreurl".to_owned(), ds_a.clone())]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    let in_b = c
        .get_capacity(capacity("zone-b"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(in_b.available_capacity, 0);
    let in_a = c
        .get_capacity(capacity("zone-a"))
        .await
        .unwrap()
        .into_inner();
    assert!(in_a.available_capacity > 0);
}
