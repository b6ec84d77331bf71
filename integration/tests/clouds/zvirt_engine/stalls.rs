//! The engine hung, then refusing, then back, behind a front that plays it
//! (`overcast_integration::stall_front`), for each service that calls it on its own: the
//! csi controller and the discoverer (issue 61; the ccm's is `vsphere_real_cloud::ccm`,
//! vcsim stopped). Each says within one sync period which endpoint does not answer and
//! since when, its `zvirt_api_last_success_timestamp_seconds` stops advancing, nothing is
//! deleted or written over meanwhile, and it says when the engine answers again.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use overcast_integration::stall_front::{Mode, StallFront};
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
    let out = Command::new("curl")
        .args(["-s", &format!("http://127.0.0.1:{metrics_port}/metrics")])
        .output()
        .ok()?;
    let key = format!("zvirt_api_last_success_timestamp_seconds{{endpoint=\"{endpoint}\"}}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&key).map(|v| v.trim().parse().ok()))?
}

/// Lines of `log` that say `what` about `endpoint`.
fn said(log: &Path, what: &str, endpoint: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(what) && l.contains(endpoint))
        .count()
}

const SILENT: &str = "the cloud endpoint does not answer";
const BACK: &str = "the cloud endpoint answers again";

/// Waits until `log` has said `what` about `endpoint` `n` times; how long it took.
async fn until_said(log: &Path, what: &str, endpoint: &str, n: usize, limit: Duration) -> Duration {
    let t = Instant::now();
    while said(log, what, endpoint) < n {
        assert!(
            t.elapsed() < limit,
            "{what:?} about {endpoint} said {} times in {limit:?}, not {n}:\n{}",
            said(log, what, endpoint),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    t.elapsed()
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
    front.set(Mode::Hang);
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
    front.set(Mode::Refuse);
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
    front.set(Mode::Pass);
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
    let answered = last_success(port, &endpoint).expect("the gauge");

    front.set(Mode::Hang);
    let took = until_said(&log, SILENT, &endpoint, 1, Duration::from_secs(20)).await;
    eprintln!("discoverer: said the hung engine after {took:?}");
    front.set(Mode::Refuse);
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

    front.set(Mode::Pass);
    until_said(&log, BACK, &endpoint, 1, Duration::from_secs(20)).await;
    assert!(last_success(port, &endpoint).unwrap() > answered);
    assert_eq!(
        secret(),
        Some(written),
        "the same engine, the same document"
    );
}
