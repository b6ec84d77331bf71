//! Deckhouse's vSphere discovery data from vcsim: the datacenter, the zones tagged on its
//! cluster, the datastores tagged with zones (their inventory path and Deckhouse's
//! Kubernetes-safe name), the storage policies vcsim's PBM has; the VMs' shapes; the
//! conditions; the CNS volumes of this cluster alone.

use overcast_cloud::Discovery;
use overcast_cloud_vsphere::cns::{Cns, CreateSpec};
use overcast_cloud_vsphere::discovery::VsphereDiscovery;
use overcast_cloud_vsphere::inventory::View;

use super::sim::Rest;
use super::*;

#[tokio::test]
async fn the_discovery_data_names_zones_zoned_datastores_and_policies() {
    let Some(sim) = Vcsim::start("discovery", &[]) else {
        return;
    };
    let vc = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let found = View::new(Arc::clone(&vc), &["ClusterComputeResource", "Datastore"])
        .retrieve(&[
            ("ClusterComputeResource", &["name"]),
            ("Datastore", &["name"]),
        ])
        .await
        .unwrap();
    let cluster = found
        .iter()
        .find(|p| p.obj.kind == "ClusterComputeResource")
        .unwrap()
        .obj
        .clone();
    let ds = found.iter().find(|p| p.obj.kind == "Datastore").unwrap();
    let ds_name = ds.text("name").unwrap().to_owned();
    let rest = Rest::login(&sim).await;
    let zones = rest.category("k8s-zone").await;
    rest.tag(&zones, "zone-a", &cluster).await;
    rest.tag(&zones, "zone-b", &ds.obj).await;

    let discovery = VsphereDiscovery::new(
        Arc::clone(&vc),
        "DC0".into(),
        Some("k8s-zone".into()),
        "overcast-disc".into(),
    );
    let data = discovery.discovery_data().await.unwrap();
    assert_eq!(data["apiVersion"], "deckhouse.io/v1");
    assert_eq!(data["kind"], "VsphereCloudDiscoveryData");
    assert_eq!(data["datacenter"], "DC0");
    assert_eq!(data["zones"], serde_json::json!(["zone-a"]));
    let stores = data["datastores"].as_array().unwrap();
    assert_eq!(stores.len(), 1, "{data}");
    assert_eq!(stores[0]["path"], format!("/DC0/datastore/{ds_name}"));
    assert_eq!(
        stores[0]["name"],
        overcast_cloud_vsphere::slug::kubernetes_name(&ds_name)
    );
    assert_eq!(stores[0]["zones"], serde_json::json!(["zone-b"]));
    assert_eq!(stores[0]["datastoreType"], "Datastore");
    assert!(
        !stores[0]["datastoreURL"].as_str().unwrap().is_empty(),
        "{data}"
    );
    let policies = data["storagePolicies"].as_array().unwrap();
    assert!(!policies.is_empty(), "vcsim's PBM has policies: {data}");
    assert!(policies
        .iter()
        .all(|p| p["name"].is_string() && p["id"].is_string()));

    let types = discovery.instance_types().await.unwrap();
    assert!(
        types
            .iter()
            .any(|t| t.name == "vsphere-vm.cpu-1.mem-0gb" && t.memory_mib == 32),
        "{types:?}"
    );
    let conditions = discovery.conditions().await.unwrap();
    assert!(conditions.iter().all(|c| c.ok), "{conditions:?}");

    // Only this cluster's CNS volumes.
    let cns = Cns::new(Arc::clone(&vc));
    for cluster_id in ["overcast-disc", "another-cluster"] {
        cns.create(&CreateSpec {
            name: format!("pvc-{cluster_id}"),
            capacity_mb: 16,
            datastores: vec![ds.obj.clone()],
            profile_id: None,
            cluster_id: cluster_id.into(),
            vsphere_user: "user".into(),
            metadata: Default::default(),
            snapshot: None,
        })
        .await
        .unwrap();
    }
    let disks = discovery.cluster_disks().await.unwrap();
    assert_eq!(disks.len(), 1, "{disks:?}");
    assert_eq!(disks[0].name, "pvc-overcast-disc");

    // A datacenter that is not there: said, as a failed condition and an error.
    let lost = VsphereDiscovery::new(vc, "DC9".into(), None, "x".into());
    assert!(lost.discovery_data().await.is_err());
    let c = lost.conditions().await.unwrap();
    assert!(c.iter().any(|c| c.name == "datacenter" && !c.ok), "{c:?}");
}

/// The real discoverer (`--cloud vsphere`) against vcsim and a faithful in-process API
/// server: the discovery Secret's `VsphereCloudDiscoveryData`, the InstanceTypesCatalog
/// from the VMs' shapes, the conditions, and this cluster's CNS volume no PV names
/// reported as an orphan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_discoverer_publishes_what_the_vcenter_holds() {
    use overcast_integration::fake_api::FakeApi;
    use serde_json::Value;
    const SECRETS: &str = "/api/v1/namespaces/kube-system/secrets";
    const CATALOGS: &str = "/apis/deckhouse.io/v1alpha1/instancetypescatalogs";
    let Some(sim) = Vcsim::start("discoverer on vsphere", &[]) else {
        return;
    };
    let vc = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let ds = View::new(Arc::clone(&vc), &["Datastore"])
        .retrieve(&[("Datastore", &["name"])])
        .await
        .unwrap()[0]
        .obj
        .clone();
    let orphan = Cns::new(Arc::clone(&vc))
        .create(&CreateSpec {
            name: "pvc-orphan".into(),
            capacity_mb: 16,
            datastores: vec![ds],
            profile_id: None,
            cluster_id: "overcast-it".into(),
            vsphere_user: "user".into(),
            metadata: [(
                overcast_cloud_vsphere::cns::PV_NAME.to_owned(),
                "pvc-orphan".to_owned(),
            )]
            .into(),
            snapshot: None,
        })
        .await
        .unwrap();
    let api = FakeApi::default();
    let url = api.start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    let conf = sim.conf(dir.path(), "");
    let port = overcast_integration::free_port();
    let _discoverer = overcast_integration::KillOnDrop(
        std::process::Command::new(overcast_integration::binary("discoverer"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--cloud=vsphere")
            .arg(format!("--cloud-config={}", conf.display()))
            .arg("--cluster=overcast-it")
            .arg("--discovery-period=1")
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let document = || -> Option<Value> {
        let secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(api.get(SECRETS, "d8-cloud-provider-discovery-data")?).ok()?;
        serde_json::from_slice(&secret.data?.get("discovery-data.json")?.0).ok()
    };
    assert!(
        overcast_integration::eventually(Duration::from_secs(20), || document().is_some()).await,
        "the discovery Secret"
    );
    let doc = document().unwrap();
    assert_eq!(doc["apiVersion"], "deckhouse.io/v1");
    assert_eq!(doc["kind"], "VsphereCloudDiscoveryData");
    assert_eq!(doc["datacenter"], "DC0");
    assert!(
        overcast_integration::eventually(Duration::from_secs(10), || api
            .get(CATALOGS, "for-cluster-autoscaler")
            .is_some())
        .await
    );
    let catalog = api.get(CATALOGS, "for-cluster-autoscaler").unwrap();
    assert!(
        catalog["instanceTypes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "vsphere-vm.cpu-1.mem-0gb"),
        "{catalog}"
    );
    let conditions = api.published_conditions().await;
    assert!(
        conditions
            .iter()
            .any(|c| c["name"] == "vcenter" && c["ok"] == true),
        "{conditions:?}"
    );
    let metric =
        format!("cloud_data_discovery_orphaned_disk_info{{id=\"{orphan}\",name=\"pvc-orphan\"}} 1");
    assert!(
        overcast_integration::eventually(Duration::from_secs(10), || {
            overcast_integration::http_get(port, "/metrics")
                .1
                .contains(&metric)
        })
        .await,
        "{}",
        overcast_integration::http_get(port, "/metrics").1
    );
}
