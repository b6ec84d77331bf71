use super::*;

/// Discovery against what the services hold: the seeded flavors, image, zone, networks
/// (the external one left out), the default volume type; the catalog from the flavors;
/// conditions; this cluster's volumes only. Then the real `discoverer` binary publishes
/// it to the kit's API server (when `OVERCAST_TEST_KUBECONFIG` is set too) and reports a
/// volume of this cluster that no PV names as an orphan.
#[tokio::test]
async fn discovery_reports_what_the_services_hold() {
    use overcast_cloud::discovery::Discovery;
    use overcast_cloud::DiskSpec;
    use overcast_cloud_openstack::OpenStackDiscovery;
    let _turn = CLOUD.lock().await;
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let pid = std::process::id();
    let discovery =
        OpenStackDiscovery::new(Arc::clone(&cloud.os), cloud.disks(), "overcast-it".into());
    let doc = discovery.discovery_data().await.expect("discovery data");
    assert_eq!(doc["apiVersion"], "deckhouse.io/v1alpha1");
    assert_eq!(doc["kind"], "OpenStackCloudProviderDiscoveryData");
    assert!(
        doc["flavors"]
            .as_array()
            .unwrap()
            .contains(&json!("m1.small")),
        "{doc}"
    );
    let small = doc["flavorsDetails"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "m1.small")
        .expect("m1.small details")
        .clone();
    let (_, flavor) = cloud
        .compute("flavor_list", Method::GET, "/flavors/detail", None)
        .await;
    let truth = flavor["flavors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "m1.small")
        .unwrap()
        .clone();
    assert_eq!(
        small,
        json!({"name": "m1.small", "ram": truth["ram"], "vcpus": truth["vcpus"], "disk": truth["disk"]})
    );
    assert!(
        doc["imagesDetails"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["id"] == cloud.env["OSSIM_IMAGE_ID"].as_str()),
        "{doc}"
    );
    assert!(
        doc["zones"].as_array().unwrap().contains(&json!("nova")),
        "{doc}"
    );
    let (_, net) = {
        let resp = cloud
            .os
            .call(
                Service::Network,
                "network_get",
                Method::GET,
                &format!("/v2.0/networks/{}", cloud.env["OSSIM_NET_ID"]),
                None,
                None,
            )
            .await
            .unwrap();
        (
            resp.status,
            serde_json::from_slice::<Value>(&resp.body).unwrap(),
        )
    };
    let net_name = net["network"]["name"].as_str().unwrap();
    let networks = doc["additionalNetworks"].as_array().unwrap();
    assert!(networks.contains(&json!(net_name)), "{doc}");
    assert!(
        !networks.contains(&json!("public")),
        "the external network is no node network: {doc}"
    );
    let default = doc["volumeTypes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["isDefault"] == true)
        .count();
    assert_eq!(default, 1, "one default volume type: {doc}");
    let types = discovery.instance_types().await.expect("instance types");
    let t = types
        .iter()
        .find(|t| t.name == "m1.small")
        .expect("m1.small");
    assert_eq!(u64::from(t.cpu), truth["vcpus"].as_u64().unwrap());
    assert_eq!(t.memory_mib, truth["ram"].as_u64().unwrap());
    let conditions = discovery.conditions().await.expect("conditions");
    assert!(conditions.iter().all(|c| c.ok), "{conditions:?}");

    // This cluster's volume with a PV name no PV has, and another cluster's.
    let ours = created(
        &cloud.disks(),
        DiskSpec {
            name: format!("overcast-it-orphan-{pid}"),
            size_bytes: 1 << 30,
            zone: Zone::default(),
            parameters: BTreeMap::new(),
            metadata: [(
                "csi.storage.k8s.io/pv/name".to_owned(),
                format!("pvc-gone-{pid}"),
            )]
            .into(),
            source: None,
        },
    )
    .await;
    let theirs = created(
        &CinderDisks::new(
            Arc::clone(&cloud.os),
            "another-cluster".into(),
            String::new(),
            Vec::new(),
            60,
            false,
            Waits::default(),
        ),
        DiskSpec {
            name: format!("overcast-it-theirs-{pid}"),
            size_bytes: 1 << 30,
            zone: Zone::default(),
            parameters: BTreeMap::new(),
            metadata: BTreeMap::new(),
            source: None,
        },
    )
    .await;
    let listed: Vec<String> = discovery
        .cluster_disks()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert!(
        listed.contains(&ours.id) && !listed.contains(&theirs.id),
        "{listed:?}"
    );

    // A Cinder whose operator took `metadata` out of its resource_filters.json refuses the
    // listing by this cluster's metadata (a 400, in front of the real Cinder): the
    // project's volumes are listed whole and filtered here — the same volumes.
    {
        use overcast_integration::faulty_front::{Fault, FaultyFront};
        let home = cloud.env["OS_REGION_NAME"].clone();
        let keystone = super::keystone::Keystone::new(&cloud).await;
        let (_, cinder) = keystone.endpoint("volumev3", &home);
        let (host, _) = super::keystone::split(&cinder);
        let front = FaultyFront::start(host.parse().expect("Cinder's host:port")).await;
        front.set(Fault::RefuseFilter("metadata"));
        keystone.faulty_region(&home, &front, "volumev3");
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("cloud.conf");
        let text = std::fs::read_to_string(cloud_conf_through_login_cache(&cloud.env, dir.path()))
            .unwrap();
        std::fs::write(
            &conf,
            text.replace(
                &format!("region = {home}"),
                &format!("region = {}", super::keystone::FAULTY_REGION),
            ),
        )
        .unwrap();
        let config = Config::load(Some(&conf)).expect("cloud.conf");
        let os = overcast_cloud_openstack::connect(&config, None).expect("client");
        let refused = OpenStackDiscovery::new(
            Arc::clone(&os),
            CinderDisks::new(
                os,
                "overcast-it".into(),
                super::keystone::FAULTY_REGION.into(),
                Vec::new(),
                60,
                false,
                Waits::default(),
            ),
            "overcast-it".into(),
        );
        let whole: Vec<String> = refused
            .cluster_disks()
            .await
            .map(|disks| disks.into_iter().map(|d| d.id).collect())
            .unwrap_or_else(|e| panic!("listed whole after the refusal: {e}"));
        keystone.drop_region();
        assert!(front.faulted() >= 1, "Cinder was asked with the filter");
        let (mut a, mut b) = (whole, listed.clone());
        a.sort();
        b.sort();
        assert_eq!(a, b, "the same volumes, listed whole and filtered here");
    }

    if let Ok(kubeconfig) = std::env::var("OVERCAST_TEST_KUBECONFIG") {
        use k8s_openapi::api::core::v1::Secret;
        let admin = overcast_integration::real::client(&kubeconfig).await;
        let secrets: kube::Api<Secret> = kube::Api::namespaced(admin, "kube-system");
        let _ = secrets
            .delete("d8-cloud-provider-discovery-data", &Default::default())
            .await;
        // What the installer knew: kept where discovery says nothing, replaced where it does.
        let _ = secrets
            .delete("d8-provider-cluster-configuration", &Default::default())
            .await;
        let installer = json!({"apiVersion": "deckhouse.io/v1alpha1", "kind": "OpenStackCloudProviderDiscoveryData",
            "mainNetwork": "net-from-installer", "defaultImageName": "ubuntu-22-04", "zones": ["stale"]});
        secrets
            .create(
                &Default::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": "d8-provider-cluster-configuration", "namespace": "kube-system"},
                    "stringData": {"cloud-provider-discovery-data.json": installer.to_string()},
                }))
                .unwrap(),
            )
            .await
            .expect("the installer's Secret");
        let dir = tempfile::tempdir().unwrap();
        let conf = cloud_conf_through_login_cache(&cloud.env, dir.path());
        let port = overcast_integration::free_port();
        let _d = overcast_integration::KillOnDrop(
            std::process::Command::new(overcast_integration::binary("discoverer"))
                .arg(format!("--kubeconfig={kubeconfig}"))
                .arg("--cloud=openstack")
                .arg(format!("--cloud-config={}", conf.display()))
                .arg("--cluster=overcast-it")
                .arg("--discovery-period=2")
                .arg(format!("--metrics-address=127.0.0.1:{port}"))
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        let secret = overcast_integration::real::wait_for(
            "the discovery Secret",
            Duration::from_secs(60),
            async || {
                secrets
                    .get_opt("d8-cloud-provider-discovery-data")
                    .await
                    .ok()?
            },
        )
        .await;
        let published: Value =
            serde_json::from_slice(&secret.data.unwrap()["discovery-data.json"].0).unwrap();
        assert_eq!(published["kind"], "OpenStackCloudProviderDiscoveryData");
        assert_eq!(published["flavorsDetails"], doc["flavorsDetails"]);
        assert_eq!(published["mainNetwork"], "net-from-installer");
        assert_eq!(published["defaultImageName"], "ubuntu-22-04");
        assert_eq!(
            published["zones"], doc["zones"],
            "the cloud's zones replace the installer's"
        );
        let _ = secrets
            .delete("d8-provider-cluster-configuration", &Default::default())
            .await;
        overcast_integration::real::wait_for(
            "the orphan reported",
            Duration::from_secs(60),
            async || {
                let (_, body) = overcast_integration::http_get(port, "/metrics");
                body.lines()
                    .any(|l| {
                        l.starts_with("cloud_data_discovery_orphaned_disk_info{")
                            && l.contains(&ours.id)
                    })
                    .then_some(())
            },
        )
        .await;
        let (_, body) = overcast_integration::http_get(port, "/metrics");
        assert!(
            !body.contains(&theirs.id),
            "another cluster's volume is none of ours"
        );
        assert!(
            body.contains("openstack_api_requests_total{request=\"flavor_list\"}"),
            "{body}"
        );
    } else {
        overcast_integration::say_skipped("set OVERCAST_TEST_KUBECONFIG too to run the OpenStack discoverer binary against the kit");
    }
    let disks = cloud.disks();
    disks.delete_disk(&ours.id).await.unwrap();
    disks.delete_disk(&theirs.id).await.unwrap();
}
