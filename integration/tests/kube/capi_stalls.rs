//! The real `capi --cloud zvirt` with the engine hung, then refusing, then back, while a
//! machine is being made (issue 61): the engine behind `overcast_integration::stall_front`
//! once its VM is cloned, while capi polls it. capi says within 10 s which endpoint does
//! not answer, `zvirt_api_last_success_timestamp_seconds` stops advancing, no VM is made
//! twice or removed meanwhile, and once the engine answers it says so and the machine
//! becomes ready with the one VM. Needs `OVERCAST_TEST_KUBECONFIG`.

use std::process::{Command, Stdio};
use std::time::Duration;

use http::Method;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use overcast_capi::crd::zvirt::ZvirtMachine;
use overcast_cloud_zvirt::Config;
use overcast_integration::capi;
use overcast_integration::real::{self, wait_for};
use overcast_integration::stall_front::{
    last_success, said, until_said, Mode, StallFront, BACK, SILENT,
};
use overcast_integration::zvirt_sim::{self, Engine, Latency};
use overcast_integration::{free_port, KillOnDrop};
use serde_json::json;

const GIB: u64 = 1 << 30;

#[tokio::test]
async fn capi_says_a_hung_then_refusing_engine_and_makes_one_vm() {
    let _cluster = real::cluster_turn().await;
    let Some(kubeconfig) = real::kubeconfig("capi with a hung engine") else {
        return;
    };
    let client = real::client(&kubeconfig).await;
    let mut crds = capi::core_crds();
    crds.extend(capi::provider_crds("zvirt"));
    capi::install(&client, &crds).await;
    // The kit runs no namespace controller: each run takes a namespace of its own.
    let ns = format!("overcast-it-capi-stalls-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let (by_id, files) = (dir.path().join("by-id"), dir.path().join("disks"));
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    let latency = Latency {
        clone: Duration::from_secs(3),
        ..Latency::default()
    };
    let engine = Engine::new(&files, &by_id, 200 * GIB, latency);
    let url = engine.start().await;
    let _unplug = engine.unplug_on_drop();
    engine.add_template("ubuntu-2204", 10 * GIB);
    let profile = engine.add_vnic_profile("ovirtmgmt");
    engine.set_guest_ips_on_boot("capi-stall-0", &["127.0.0.1", "10.1.0.17"]);
    let direct = dir.path().join("cloud-config-direct");
    let credentials = format!(
        "username: {}\npassword: {}\n",
        zvirt_sim::USER,
        zvirt_sim::PASSWORD
    );
    std::fs::write(&direct, format!("server: {url}\n{credentials}")).unwrap();
    let e = overcast_cloud_zvirt::connect(&Config::load(Some(&direct), &|_| None).unwrap(), None)
        .unwrap();
    let engine_cluster = e.json("it", Method::GET, "/clusters", None).await.unwrap()["cluster"][0]
        ["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // capi reaches the engine through the front.
    let uri: http::Uri = url.parse().unwrap();
    let authority = uri.authority().unwrap().as_str().to_owned();
    let front = StallFront::start(authority.parse().unwrap()).await;
    let endpoint = front.addr.to_string();
    let fronted = dir.path().join("cloud-config");
    std::fs::write(
        &fronted,
        format!(
            "server: {}\n{credentials}",
            url.replacen(&authority, &endpoint, 1)
        ),
    )
    .unwrap();

    capi::zvirt_cluster(&client, &ns, &engine_cluster).await;
    capi::zvirt_machine(&client, &ns, "capi-stall-0", &profile).await;
    let port = free_port();
    let log = dir.path().join("capi.log");
    let _capi = KillOnDrop(
        Command::new(overcast_integration::binary("capi"))
            .arg("--cloud=zvirt")
            .arg(format!("--cloud-config={}", fronted.display()))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--namespace={ns}"))
            .arg("--poll-interval=1")
            .arg(format!("--leader-elect-lease-name={ns}"))
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("capi"),
    );
    let show = || std::fs::read_to_string(&log).unwrap_or_default();
    capi::mark_provisioned(&client, &ns).await;
    // Hung while the clone runs and capi polls it.
    wait_for("the VM cloned", Duration::from_secs(60), async || {
        (engine.vm_count() == 1).then_some(())
    })
    .await;
    front.set(Mode::Hang).await;
    let took = until_said(&log, SILENT, &endpoint, 1, Duration::from_secs(20)).await;
    eprintln!("capi: said the hung engine after {took:?}");
    let answered = last_success("zvirt", port, &endpoint).expect("the gauge");
    assert!(answered > 0.0, "it answered before the hang");

    front.set(Mode::Refuse).await;
    until_said(&log, SILENT, &endpoint, 2, Duration::from_secs(45)).await;
    assert_eq!(
        last_success("zvirt", port, &endpoint),
        Some(answered),
        "no answer, no advance"
    );
    assert_eq!(engine.vm_count(), 1, "a VM made or removed while silent");

    front.set(Mode::Pass).await;
    until_said(&log, BACK, &endpoint, 1, Duration::from_secs(30)).await;
    let zms: Api<ZvirtMachine> = Api::namespaced(client.clone(), &ns);
    wait_for(
        "the machine ready once the engine answers",
        Duration::from_secs(90),
        async || {
            zms.get_opt("capi-stall-0")
                .await
                .ok()
                .flatten()
                .filter(|z| z.status.as_ref().is_some_and(|s| s.ready))
        },
    )
    .await;
    assert!(last_success("zvirt", port, &endpoint).unwrap() > answered);
    assert_eq!(engine.vm_count(), 1, "one VM: {}", show());
    assert!(
        said(&log, SILENT, &endpoint) >= 2,
        "the warnings are in capi's own log"
    );

    // Removed as CAPI removes it (its VM with it), so nothing is left with a finalizer.
    zms.delete("capi-stall-0", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the machine removed", Duration::from_secs(60), async || {
        zms.get_opt("capi-stall-0")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(engine.vm_count(), 0, "its VM removed with it");
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
}
