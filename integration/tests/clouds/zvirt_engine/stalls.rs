//! The engine hung, then refusing, then back, behind a front that plays it
//! (`overcast_integration::stall_front`), for each service that calls it on its own: the
//! csi controller, the discoverer and the ccm (issue 61; the ccm on a stopped vcsim is
//! `vsphere_real_cloud::ccm`, DVP's parent cluster `kube::dvp_stalls`). Each says within one sync period which endpoint does not answer and
//! since when, its `zvirt_api_last_success_timestamp_seconds` stops advancing, nothing is
//! deleted or written over meanwhile, and it says when the engine answers again.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use overcast_integration::stall_front::{self, said, until_said, Mode, StallFront, BACK, SILENT};
use overcast_integration::{csi_v1 as csi, free_port, Csi};

use super::*;

/// The engine's own address behind the front, and a cloud-config naming the front.
async fn behind_a_front(s: &Sim) -> (StallFront, std::path::PathBuf) {
    let url: http::Uri = s.url.parse().unwrap();
    let engine = url.authority().unwrap().as_str().parse().unwrap();
    let front = StallFront::start(engine).await;
    let conf = s.dir.path().join("cloud-config-front");
    std::fs::write(
        &conf,
        format!(
            "server: {}\nusername: {}\npassword: {}\n",
            s.url.replacen(
                url.authority().unwrap().as_str(),
                &front.addr.to_string(),
                1
            ),
            zvirt_sim::USER,
            zvirt_sim::PASSWORD
        ),
    )
    .unwrap();
    (front, conf)
}

/// The time of the endpoint's last answer, from the service's /metrics.
fn last_success(metrics_port: u16, endpoint: &str) -> Option<f64> {
    stall_front::last_success("zvirt", metrics_port, endpoint)
}

#[tokio::test]
async fn the_csi_controller_says_a_hung_then_refusing_engine_and_loses_nothing() {
    let s = sim(Latency::default()).await;
    let (front, conf) = behind_a_front(&s).await;
    let endpoint = front.addr.to_string();
    let port = free_port();
    let log = s.dir.path().join("csi.log");
    let driver = Csi::start_logging_to(
        &[
            "--mode=controller",
            "--cloud=zvirt",
            &format!("--cloud-config={}", conf.display()),
            &format!("--metrics-address=127.0.0.1:{port}"),
        ],
        log.clone(),
    )
    .await;
    let mut c = driver.controller().await;
    let mut create = overcast_integration::create_request("pvc-stalls", GIB as i64);
    create.parameters = parameters("data").into_iter().collect();
    let id = c
        .create_volume(create.clone())
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let answered = last_success(port, &endpoint).expect("the gauge, once it answered");
    assert!(answered > 0.0);

    // Hung: a listing waits on it, and the controller says so while it waits.
    front.set(Mode::Hang).await;
    let waiting = {
        let mut c = driver.controller().await;
        tokio::spawn(async move { c.list_volumes(csi::ListVolumesRequest::default()).await })
    };
    let took = until_said(&log, SILENT, &endpoint, 1, Duration::from_secs(20)).await;
    assert!(front.held() > 0, "the call reached the hung front");
    eprintln!("csi controller: said the hung engine after {took:?}");
    assert_eq!(
        last_success(port, &endpoint),
        Some(answered),
        "no answer, no advance"
    );

    // Refusing: calls fail fast (the provisioner retries them, as here every 2 s), said
    // again once the last warning is 30 s old.
    front.set(Mode::Refuse).await;
    let t = Instant::now();
    while said(&log, SILENT, &endpoint) < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(45),
            "not said again while refusing"
        );
        let refused = c.list_volumes(csi::ListVolumesRequest::default()).await;
        assert!(refused.is_err(), "nothing answers: {refused:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert_eq!(last_success(port, &endpoint), Some(answered));
    let _ = waiting.await;

    // Back: the next call answers, and that is said; the volume is as it was.
    front.set(Mode::Pass).await;
    let listed = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(
        listed
            .entries
            .iter()
            .any(|e| e.volume.as_ref().unwrap().volume_id == id),
        "{listed:?}"
    );
    until_said(&log, BACK, &endpoint, 1, Duration::from_secs(10)).await;
    assert!(last_success(port, &endpoint).unwrap() > answered);
    assert!(
        s.engine
            .disks()
            .iter()
            .any(|(_, alias, _)| alias == "pvc-stalls"),
        "the disk is still the engine's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_discoverer_says_a_hung_then_refusing_engine_and_keeps_its_secret() {
    use overcast_integration::fake_api::FakeApi;
    const SECRETS: &str = "/api/v1/namespaces/kube-system/secrets";
    const NAME: &str = "d8-cloud-provider-discovery-data";
    let s = sim(Latency::default()).await;
    let (front, conf) = behind_a_front(&s).await;
    let endpoint = front.addr.to_string();
    let api = FakeApi::default();
    let url = api.start().await;
    let kubeconfig = s.dir.path().join("kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    let port = free_port();
    let log = s.dir.path().join("discoverer.log");
    let _discoverer = overcast_integration::KillOnDrop(
        Command::new(overcast_integration::binary("discoverer"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--cloud=zvirt")
            .arg(format!("--cloud-config={}", conf.display()))
            .arg("--cluster=overcast-it")
            .arg("--discovery-period=1")
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let secret = || api.get(SECRETS, NAME).map(|s| s["data"].clone());
    assert!(
        overcast_integration::eventually(Duration::from_secs(20), || secret().is_some()).await,
        "the discovery Secret"
    );
    let written = secret().unwrap();
    let before = last_success(port, &endpoint).expect("the gauge");

    front.set(Mode::Hang).await;
    let took = until_said(&log, SILENT, &endpoint, 1, Duration::from_secs(20)).await;
    eprintln!("discoverer: said the hung engine after {took:?}");
    // Read once the silence is said, not before the hang: a round that started before it
    // may have been answered in between (CI: 11 ms later), and that answer is the last.
    let answered = last_success(port, &endpoint).expect("the gauge");
    assert!(answered >= before);
    front.set(Mode::Refuse).await;
    until_said(&log, SILENT, &endpoint, 2, Duration::from_secs(45)).await;
    assert_eq!(
        last_success(port, &endpoint),
        Some(answered),
        "no answer, no advance"
    );
    assert_eq!(
        secret(),
        Some(written.clone()),
        "nothing written over while it is silent"
    );

    front.set(Mode::Pass).await;
    until_said(&log, BACK, &endpoint, 1, Duration::from_secs(20)).await;
    assert!(last_success(port, &endpoint).unwrap() > answered);
    assert_eq!(
        secret(),
        Some(written),
        "the same engine, the same document"
    );
}

/// The ccm with node sync and fencing on, the engine hung then refusing: it says which
/// endpoint does not answer, tells the Node whose kubelet stopped reporting that its
/// fencing is held back (`FencingHeldBack`: only the engine can say its VM is off),
/// taints and deletes nothing, and says when the engine answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ccm_says_a_hung_then_refusing_engine_and_fences_nothing() {
    use overcast_integration::fake_api::FakeApi;
    use serde_json::json;
    const NODES: &str = "/api/v1/nodes";
    const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";
    let s = sim(Latency::default()).await;
    let w0 = s.engine.add_vm("worker-0");
    // Running, its kubelet silent since long ago: fencing asks the engine whether it is off.
    let w1 = s.engine.add_vm("worker-1");
    let (front, conf) = behind_a_front(&s).await;
    let endpoint = front.addr.to_string();
    let api = FakeApi::default();
    let url = api.start().await;
    let kubeconfig = s.dir.path().join("kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    let node = |name: &str, vm: &str, ready: &str| {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"providerID": format!("zvirt://{vm}")},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    };
    api.put(NODES, node("worker-0", &w0, "True"));
    api.put(NODES, node("worker-1", &w1, "Unknown"));
    let port = free_port();
    let log = s.dir.path().join("ccm.log");
    let _ccm = overcast_integration::KillOnDrop(
        Command::new(overcast_integration::binary("ccm"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--cloud=zvirt")
            .arg(format!("--cloud-config={}", conf.display()))
            .arg("--controllers=node,node-lifecycle,node-fencing")
            .arg("--node-fencing-grace=1s")
            .arg("--leader-elect=false")
            .arg("--node-sync-period=1")
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let show = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        overcast_integration::eventually(Duration::from_secs(20), || {
            last_success(port, &endpoint).is_some_and(|t| t > 0.0)
        })
        .await,
        "a sync answered:\n{}",
        show()
    );
    let untouched = |what: &str| {
        for name in ["worker-0", "worker-1"] {
            let n = api
                .get(NODES, name)
                .unwrap_or_else(|| panic!("{what}: {name} deleted:\n{}", show()));
            assert!(
                !n["spec"]["taints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|t| t["key"] == "node.kubernetes.io/out-of-service"),
                "{what}: {name} fenced: {n}"
            );
        }
    };
    untouched("the engine answering that worker-1's VM runs");

    front.set(Mode::Hang).await;
    let took = until_said(&log, SILENT, &endpoint, 1, Duration::from_secs(20)).await;
    eprintln!("ccm: said the hung engine after {took:?}");
    let held_back = || {
        api.list(EVENTS)
            .into_iter()
            .find(|e| e["reason"] == "FencingHeldBack" && e["regarding"]["name"] == "worker-1")
    };
    assert!(
        overcast_integration::eventually(Duration::from_secs(30), || held_back().is_some()).await,
        "a FencingHeldBack event on worker-1; events: {:?}\n{}",
        api.list(EVENTS),
        show()
    );
    let event = held_back().unwrap();
    assert_eq!(event["type"], "Warning", "{event}");
    assert!(
        api.list(EVENTS)
            .iter()
            .all(|e| e["regarding"]["name"] != "worker-0"),
        "the node whose kubelet reports is told nothing: {:?}",
        api.list(EVENTS)
    );
    // Read once the silence is said: the last answer before it.
    let answered = last_success(port, &endpoint).expect("the gauge");

    front.set(Mode::Refuse).await;
    until_said(&log, SILENT, &endpoint, 2, Duration::from_secs(45)).await;
    assert_eq!(
        last_success(port, &endpoint),
        Some(answered),
        "no answer, no advance"
    );
    untouched("the engine hung, then refusing");

    front.set(Mode::Pass).await;
    until_said(&log, BACK, &endpoint, 1, Duration::from_secs(20)).await;
    assert!(last_success(port, &endpoint).unwrap() > answered);
    // Syncs that answer again: worker-1's VM still runs, so it is still not fenced.
    tokio::time::sleep(Duration::from_secs(3)).await;
    untouched("the engine back");
}
