//! The real `discoverer` against the faithful fake API, with the real CSI driver making
//! the disks: the discovery Secret, conditions ConfigMap and instance-type catalog are
//! published, unchanged data is not rewritten, a cloud failure keeps the last good
//! Secret and shows in the metrics, and disks no PersistentVolume references are
//! reported as orphans — also one the driver kept at start without knowing whose it is.

use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use overcast_integration::fake_api::FakeApi;
use overcast_integration::*;
use serde_json::{json, Value};

use overcast_integration::KillOnDrop as Proc;

const SECRETS: &str = "/api/v1/namespaces/kube-system/secrets";
const CATALOGS: &str = "/apis/deckhouse.io/v1alpha1/instancetypescatalogs";

fn secret_document(api: &FakeApi) -> Option<Value> {
    let secret: Secret =
        serde_json::from_value(api.get(SECRETS, "d8-cloud-provider-discovery-data")?).ok()?;
    serde_json::from_slice(&secret.data?.get("discovery-data.json")?.0).ok()
}

fn secret_writes(api: &FakeApi) -> usize {
    api.seen()
        .iter()
        .filter(|r| {
            r.method == "PATCH" && r.path == format!("{SECRETS}/d8-cloud-provider-discovery-data")
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discoverer_publishes_what_changed_reports_orphans_and_survives_cloud_errors() {
    let mut csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let mut ids = Vec::new();
    for (name, pv) in [("a", Some("pv-a")), ("b", Some("pv-b")), ("manual", None)] {
        let mut req = create_request(name, MIB);
        if let Some(pv) = pv {
            req.parameters
                .insert("csi.storage.k8s.io/pv/name".into(), pv.into());
        }
        ids.push(
            c.create_volume(req)
                .await
                .unwrap()
                .into_inner()
                .volume
                .unwrap()
                .volume_id,
        );
    }
    // A disk file nothing explains (no record, no metadata), kept at the driver's start.
    csi.kill9();
    let unexplained = "vol-66666666666666666666666666666666";
    std::fs::write(
        csi.disks_dir().join(format!("{unexplained}.img")),
        vec![1u8; 1 << 20],
    )
    .unwrap();
    csi.resume().await;
    ids.push(unexplained.to_owned());
    let inventory = csi.state_dir.join("inventory.json");
    let listed = || {
        std::fs::read_to_string(&inventory)
            .map(|t| ids.iter().all(|id| t.contains(id)))
            .unwrap_or(false)
    };
    assert!(
        eventually(Duration::from_secs(5), listed).await,
        "the driver keeps an inventory of its disks"
    );

    let api = FakeApi::default();
    let url = api.start().await;
    let kubeconfig = csi.dir.path().join("kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    api.put(
        "/api/v1/persistentvolumes",
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-a"},
               "spec": {"csi": {"driver": "local.csi.overcast.dev", "volumeHandle": ids[0]}}}),
    );
    let port = free_port();
    let _d = Proc(
        Command::new(binary("discoverer"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--state-dir={}", csi.state_dir.display()))
            .arg(format!("--zone={ZONE}"))
            .arg(format!("--region={REGION}"))
            .arg(format!("--node-name={NODE_ID}"))
            .arg("--discovery-period=1")
            .arg("--stale-after=3")
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    assert!(
        eventually(Duration::from_secs(20), || secret_document(&api).is_some()).await,
        "the discovery Secret"
    );
    let doc = secret_document(&api).unwrap();
    assert_eq!(doc["apiVersion"], "deckhouse.io/v1");
    assert_eq!(doc["kind"], "LocalCloudProviderDiscoveryData");
    assert_eq!(doc["zones"], json!([ZONE]));
    assert_eq!(doc["region"], REGION);
    assert!(doc["storage"]["capacityBytes"].as_u64().unwrap() > 0);

    let conditions = api.published_conditions().await;
    assert!(
        conditions
            .iter()
            .any(|c| c["name"] == "state-directory" && c["ok"] == true),
        "{conditions:?}"
    );
    assert!(conditions.iter().all(|c| c.get("message").is_some()));

    assert!(
        eventually(Duration::from_secs(10), || api
            .get(CATALOGS, "for-cluster-autoscaler")
            .is_some())
        .await
    );
    let catalog = api.get(CATALOGS, "for-cluster-autoscaler").unwrap();
    let t = &catalog["instanceTypes"][0];
    assert!(
        t["name"].as_str().unwrap().starts_with("local."),
        "{catalog}"
    );
    assert!(
        t["memory"].as_str().unwrap().ends_with("Mi")
            && t["rootDisk"].as_str().unwrap().ends_with("Gi")
    );

    // Orphans: b was made by the cluster and has no PV; a has one; manual was never the cluster's.
    let orphan = format!(
        "cloud_data_discovery_orphaned_disk_info{{id=\"{}\",name=\"b\"}} 1",
        ids[1]
    );
    assert!(
        eventually(Duration::from_secs(10), || http_get(port, "/metrics")
            .1
            .contains(&orphan))
        .await,
        "{}",
        http_get(port, "/metrics").1
    );
    let metrics = http_get(port, "/metrics").1;
    assert!(
        !metrics.contains(&ids[0]) && !metrics.contains(&ids[2]),
        "{metrics}"
    );
    // The kept disk nothing explains is reported too, under its id.
    assert!(
        metrics.contains(&format!(
            "cloud_data_discovery_orphaned_disk_info{{id=\"{unexplained}\",name=\"{unexplained}\"}} 1"
        )),
        "{metrics}"
    );
    assert!(metrics.contains("cloud_data_discovery_cloud_request_error{type=\"discovery_data\"} 0"));

    // Unchanged data is not written again.
    let writes = secret_writes(&api);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        secret_writes(&api),
        writes,
        "cycles with unchanged data do not write"
    );
    assert_eq!(writes, 1);

    // The cloud fails (its state directory is gone): the error is counted, the Secret stays.
    let moved = csi.dir.path().join("state-moved");
    std::fs::rename(&csi.state_dir, &moved).unwrap();
    let failing = "cloud_data_discovery_cloud_request_error{type=\"discovery_data\"} 1";
    assert_eq!(http_get(port, "/healthz").0, 200, "fresh");
    let seen_failure = eventually(Duration::from_secs(15), || {
        http_get(port, "/metrics").1.contains(failing)
    })
    .await;
    // Nothing good for longer than --stale-after: the probe says so, with why.
    let stale = eventually(Duration::from_secs(15), || {
        http_get(port, "/healthz").0 == 503
    })
    .await;
    let why = http_get(port, "/healthz").1;
    std::fs::rename(&moved, &csi.state_dir).unwrap();
    assert!(seen_failure, "{}", http_get(port, "/metrics").1);
    assert!(stale, "/healthz stayed 200 while nothing was published");
    assert!(why.contains("no discovery cycle"), "{why}");
    assert!(
        eventually(Duration::from_secs(40), || http_get(port, "/healthz").0
            == 200)
        .await,
        "/healthz recovers with the cloud"
    );
    assert_eq!(
        secret_document(&api).unwrap(),
        doc,
        "the last good Secret is kept"
    );
    assert_eq!(secret_writes(&api), 1);
    let checked =
        api.assert_calls_within("discoverer", overcast_discoverer::api_calls::API_CALLS, &[]);
    assert!(checked >= 8, "{checked} requests");
}
