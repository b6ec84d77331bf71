//! DVP's parent cluster hung, then refusing, then back (issue 61): the provider reaches
//! it through kube's client, not cloud-http, so its calls say the silence themselves
//! (`overcast_cloud_dvp::parent`). The real csi controller (`--cloud=dvp`) on the
//! simulated parent, its kubeconfig naming a front before the kit's API server
//! (`overcast_integration::stall_front`, below TLS: the server's certificate is for
//! 127.0.0.1, whatever the port): it says within 10 s which endpoint does not answer,
//! `dvp_api_last_success_timestamp_seconds{endpoint}` stops advancing, nothing is deleted,
//! and it says when the parent answers again.

use std::time::Duration;

use kube::api::{Api, DeleteParams};
use overcast_cloud_dvp::api::{self as dvp_api, VirtualDisk};
use overcast_integration::dvp_sim::{self, DvpSim, PARENT};
use overcast_integration::stall_front::{
    last_success, said, until_said, Mode, StallFront, BACK, SILENT,
};
use overcast_integration::{csi_v1 as csi, free_port, real, Csi};

const TEST: &str = "overcast-it-dvp-stalls-";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_csi_controller_on_dvp_says_a_hung_then_refusing_parent_and_loses_nothing() {
    let _turn = PARENT.lock().await;
    let Some(path) = real::kubeconfig("the DVP provider with its parent cluster hung") else {
        return;
    };
    let client = real::client(&path).await;
    dvp_sim::install_crds(&client).await;
    // What an earlier run's failed test left (its simulator gone, its finalizers not).
    dvp_sim::sweep(&client, TEST).await;
    let ns = format!("{TEST}{}", std::process::id());
    let sim = DvpSim::start(client.clone(), &ns, Duration::from_millis(100)).await;

    // The parent's kubeconfig as an operator writes it, its server the front's address.
    let kubeconfig = std::fs::read_to_string(&path).unwrap();
    let parsed = kube::config::Kubeconfig::read_from(&path).unwrap();
    let server = parsed.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .expect("the kubeconfig's server");
    let authority = server
        .parse::<http::Uri>()
        .unwrap()
        .authority()
        .unwrap()
        .to_string();
    let front = StallFront::start(authority.parse().expect("an IP and port")).await;
    let endpoint = front.addr.to_string();
    let fronted = kubeconfig.replacen(&authority, &endpoint, 1);
    let indented: String = fronted.lines().map(|l| format!("  {l}\n")).collect();
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("cloud-config");
    std::fs::write(
        &config,
        format!("namespace: {ns}\nkubeconfig: |\n{indented}"),
    )
    .unwrap();

    let port = free_port();
    let log = work.path().join("csi.log");
    let driver = Csi::start_logging_to(
        &[
            "--mode=controller",
            "--cloud=dvp",
            &format!("--cloud-config={}", config.display()),
            &format!("--metrics-address=127.0.0.1:{port}"),
        ],
        log.clone(),
    )
    .await;
    let mut c = driver.controller().await;
    let mut create = overcast_integration::create_request("pvc-dvp-stalls", 32 << 20);
    create
        .parameters
        .insert("csi.storage.k8s.io/pvc/name".into(), "data".into());
    let id = c
        .create_volume(create)
        .await
        .expect("create")
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let before = last_success("dvp", port, &endpoint).expect("the gauge, once it answered");
    assert!(before > 0.0);

    // Hung: a listing waits on it, and the controller says so while it waits.
    front.set(Mode::Hang).await;
    let waiting = {
        let mut c = driver.controller().await;
        tokio::spawn(async move { c.list_volumes(csi::ListVolumesRequest::default()).await })
    };
    let took = until_said(&log, SILENT, &endpoint, 1, Duration::from_secs(20)).await;
    assert!(front.held() > 0, "the call reached the hung front");
    eprintln!("csi controller on DVP: said the hung parent after {took:?}");
    let answered = last_success("dvp", port, &endpoint).expect("the gauge");
    assert!(answered >= before);

    // Refusing: calls fail fast (the provisioner retries them, as here every 2 s), said
    // again once the last warning is 30 s old.
    front.set(Mode::Refuse).await;
    let t = std::time::Instant::now();
    while said(&log, SILENT, &endpoint) < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(45),
            "not said again while refusing:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let refused = c.list_volumes(csi::ListVolumesRequest::default()).await;
        assert!(refused.is_err(), "nothing answers: {refused:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert_eq!(
        last_success("dvp", port, &endpoint),
        Some(answered),
        "no answer, no advance"
    );
    let _ = waiting.await;

    // Back: the next call answers, and that is said; the disk is as it was.
    front.set(Mode::Pass).await;
    let listed = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .expect("listed once the parent answers")
        .into_inner();
    assert!(
        listed
            .entries
            .iter()
            .any(|e| e.volume.as_ref().unwrap().volume_id == id),
        "{listed:?}"
    );
    until_said(&log, BACK, &endpoint, 1, Duration::from_secs(10)).await;
    assert!(last_success("dvp", port, &endpoint).unwrap() > answered);
    let disks: Api<VirtualDisk> =
        Api::namespaced_with(client.clone(), &ns, &dvp_api::virtual_disk());
    assert!(
        disks.get_opt(&id).await.unwrap().is_some(),
        "the disk is still the parent's"
    );

    // Deleted while the simulator still runs (its finalizer), then the namespace.
    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: id.clone(),
        ..Default::default()
    })
    .await
    .expect("delete");
    drop(sim);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
}
