//! The real `capi --cloud zvirt` with the kit's API server (Cluster API's core CRDs and
//! the provider's from `deploy/crds/`) and the zVirt engine simulator; the test plays
//! Cluster API's core controllers (it makes the Cluster, the Machine and the bootstrap
//! Secret, sets owner references, and marks the Cluster's infrastructure provisioned
//! once the ZvirtCluster is ready). A ZvirtMachine gets its VM cloned, finished and
//! started with the asked shape and cloud-init, then its providerID, addresses and
//! `ready`; at rest it costs the engine no call; a paused Cluster stops every call; a
//! `kill -9` mid-create and a restart leave one VM; deleting the machine with a CSI volume
//! attached keeps the volume, detached; an engine outage during a delete keeps the
//! finalizer until the engine answers again. Needs `OVERCAST_TEST_KUBECONFIG`.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use overcast_capi::crd::zvirt::{ZvirtCluster, ZvirtMachine};
use overcast_cloud::{DiskSpec, Disks, Zone};
use overcast_cloud_zvirt::{Config, EngineDisks, Waits};
use overcast_integration::capi::{self, CLOUD_INIT};
use overcast_integration::real::wait_for;
use overcast_integration::zvirt_sim::{self, Engine, Latency};
use overcast_integration::KillOnDrop;
use serde_json::{json, Value};

/// This run's namespace: the kit runs no namespace controller, so an earlier run's stays
/// Terminating for good; each run takes a new one.
fn ns() -> &'static str {
    static NS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NS.get_or_init(|| format!("overcast-it-capi-zvirt-{}", std::process::id()))
}
const GIB: u64 = 1 << 30;
fn capi(kubeconfig: &str, cloud_config: &std::path::Path) -> KillOnDrop {
    capi::spawn_zvirt(kubeconfig, cloud_config, ns())
}

async fn machine(client: &Client, name: &str) {
    capi::zvirt_machine(client, ns(), name, PROFILE.get().unwrap()).await;
}

static PROFILE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The ZvirtMachine once `f` holds for it.
async fn until(
    zms: &Api<ZvirtMachine>,
    name: &str,
    what: &str,
    f: impl Fn(&ZvirtMachine) -> bool,
) -> ZvirtMachine {
    wait_for(what, Duration::from_secs(90), async || {
        zms.get_opt(name).await.ok().flatten().filter(|z| f(z))
    })
    .await
}

#[tokio::test]
async fn capi_makes_zvirt_machines_as_capz_does_and_keeps_their_volumes() {
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(kubeconfig) = overcast_integration::real::kubeconfig("the zVirt Cluster API provider")
    else {
        return;
    };
    let client = overcast_integration::real::client(&kubeconfig).await;
    let mut crds = overcast_integration::capi::core_crds();
    crds.extend(overcast_integration::capi::provider_crds("zvirt"));
    overcast_integration::capi::install(&client, &crds).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(ns(), &DeleteParams::default()).await;
    wait_for(
        "the namespace of an earlier run gone",
        Duration::from_secs(60),
        async || namespaces.get_opt(ns()).await.ok()?.is_none().then_some(()),
    )
    .await;
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns()}})).unwrap(),
        )
        .await
        .unwrap();

    // The engine: a template, a vNIC profile, guests that report addresses once up; a
    // clone takes a while, as a real copy does.
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
    // Its loop devices go however this ends.
    let _unplug = engine.unplug_on_drop();
    engine.add_template("ubuntu-2204", 10 * GIB);
    PROFILE.get_or_init(|| engine.add_vnic_profile("ovirtmgmt"));
    for (vm, ip) in [
        ("capi-worker-0", "10.1.0.7"),
        ("capi-worker-1", "10.1.0.8"),
        ("capi-worker-2", "10.1.0.9"),
    ] {
        engine.set_guest_ips_on_boot(vm, &["127.0.0.1", ip]);
    }
    let cloud_config = dir.path().join("cloud-config");
    std::fs::write(
        &cloud_config,
        format!(
            "server: {url}\nusername: {}\npassword: {}\n",
            zvirt_sim::USER,
            zvirt_sim::PASSWORD
        ),
    )
    .unwrap();
    let config = Config::load(Some(&cloud_config), &|_| None).unwrap();
    let e = overcast_cloud_zvirt::connect(&config, None).unwrap();
    let engine_cluster = e.json("it", Method::GET, "/clusters", None).await.unwrap()["cluster"][0]
        ["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // The Cluster and its ZvirtCluster, as node-manager and CAPI's cluster controller make them.
    capi::zvirt_cluster(&client, ns(), &engine_cluster).await;
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns(), &capi::core("Cluster", "clusters"));
    let zcs: Api<ZvirtCluster> = Api::namespaced(client.clone(), ns());
    let zms: Api<ZvirtMachine> = Api::namespaced(client.clone(), ns());
    machine(&client, "capi-worker-0").await;

    let mut capi_proc = capi(&kubeconfig, &cloud_config);
    let zc = wait_for(
        "the ZvirtCluster ready",
        Duration::from_secs(60),
        async || {
            zcs.get("zvirt")
                .await
                .ok()
                .filter(|z| z.status.as_ref().is_some_and(|s| s.ready))
        },
    )
    .await;
    let endpoint = zc
        .spec
        .control_plane_endpoint
        .expect("a control plane endpoint");
    assert_eq!(endpoint.host, "127.0.0.1");
    // node-manager's Secret, with the engine and its credentials in `zvirt`.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let registration = wait_for(
        "node-manager's Secret",
        Duration::from_secs(30),
        async || {
            secrets
                .get_opt("d8-node-manager-cloud-provider")
                .await
                .ok()
                .flatten()
        },
    )
    .await
    .data
    .unwrap_or_default();
    let text = |k: &str| String::from_utf8_lossy(&registration[k].0).into_owned();
    assert_eq!(text("type"), "zvirt");
    assert_eq!(text("capiClusterKind"), "ZvirtCluster");
    assert_eq!(text("capiMachineTemplateKind"), "ZvirtMachineTemplate");
    let zvirt: Value = serde_json::from_str(&text("zvirt")).unwrap();
    assert_eq!(zvirt["server"], url.as_str());
    assert_eq!(zvirt["username"], zvirt_sim::USER);
    // Until CAPI says the cluster's infrastructure is provisioned, the machine waits and
    // the engine is not asked for a VM.
    until(
        &zms,
        "capi-worker-0",
        "the wait for the cluster's infrastructure",
        |z| {
            z.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.reason.as_deref() == Some("WaitingForClusterInfrastructure"))
            })
        },
    )
    .await;
    assert_eq!(engine.vm_count(), 0);
    clusters
        .patch_status(
            "zvirt",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"initialization": {"infrastructureProvisioned": true}}}),
            ),
        )
        .await
        .unwrap();

    // kill -9 while the clone runs; the restarted provider adopts the VM it finds.
    wait_for("the VM cloned", Duration::from_secs(30), async || {
        (engine.vm_count() == 1).then_some(())
    })
    .await;
    capi_proc.0.kill().unwrap();
    let _ = capi_proc.0.wait();
    let capi_proc = capi(&kubeconfig, &cloud_config);
    let ready = until(&zms, "capi-worker-0", "the machine ready", |z| {
        z.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    assert_eq!(engine.vm_count(), 1, "a second VM was made");
    let vm_id = ready.spec.id.clone();
    assert_eq!(
        ready.spec.provider_id.as_deref(),
        Some(format!("zvirt://{vm_id}").as_str())
    );
    let status = ready.status.clone().unwrap();
    let addresses: Vec<(&str, &str)> = status
        .addresses
        .iter()
        .map(|a| (a.type_.as_str(), a.address.as_str()))
        .collect();
    assert_eq!(
        addresses,
        [
            ("Hostname", "capi-worker-0"),
            ("InternalDNS", "capi-worker-0"),
            ("InternalIP", "10.1.0.7"),
            ("ExternalIP", "10.1.0.7")
        ]
    );
    assert!(status
        .conditions
        .iter()
        .any(|c| c.type_ == "VirtualMachineReady" && c.status == "True"));
    assert!(ready
        .finalizers()
        .iter()
        .any(|f| f == "zvirtmachine.infrastructure.cluster.x-k8s.io"));
    // The VM as capz makes it.
    let vm = engine.vm_by_name("capi-worker-0").unwrap();
    assert_eq!(vm["id"], vm_id.as_str());
    assert_eq!(vm["type"], "high_performance");
    assert_eq!(vm["initialization"]["custom_script"], CLOUD_INIT);
    assert_eq!(vm["initialization"]["host_name"], "capi-worker-0");
    assert_eq!(vm["status"], "up");
    assert_eq!(vm["nics"][0]["name"], "nic1");
    assert!(engine
        .disks()
        .iter()
        .any(|(_, alias, size)| alias == "capi-worker-0_Disk1" && *size == 30 * GIB));

    // At rest: a change to the object costs the engine nothing.
    let calls = engine.total_calls();
    zms.patch(
        "capi-worker-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"touched": "1"}}})),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        engine.total_calls(),
        calls,
        "a machine at rest called the engine: {:?}",
        engine.calls()
    );

    // Paused: a new machine gets no VM and the engine no call.
    clusters
        .patch(
            "zvirt",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    machine(&client, "capi-worker-1").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        engine.total_calls(),
        calls,
        "a paused cluster's machine called the engine"
    );
    assert_eq!(engine.vm_count(), 1);
    clusters
        .patch(
            "zvirt",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    let second = until(&zms, "capi-worker-1", "the unpaused machine ready", |z| {
        z.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;

    // Deleted with a CSI volume attached: the volume is detached and kept.
    let csi = EngineDisks::new(
        Arc::clone(&e),
        "overcast-it".into(),
        16,
        Waits {
            unlocked: Duration::from_secs(30),
            active: Duration::from_secs(30),
            gone: Duration::from_secs(30),
        },
    );
    let volume = csi
        .create_disk(DiskSpec {
            name: "pvc-of-worker-0".into(),
            size_bytes: GIB,
            zone: Zone::default(),
            parameters: [("storageDomainName".to_owned(), "data".to_owned())].into(),
            metadata: Default::default(),
            source: None,
        })
        .await
        .unwrap();
    csi.attach_disk(&volume.id, &vm_id, false).await.unwrap();
    zms.delete("capi-worker-0", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the machine gone", Duration::from_secs(60), async || {
        zms.get_opt("capi-worker-0")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        e.json("it", Method::GET, &format!("/vms/{vm_id}"), None)
            .await
            .is_err(),
        "the VM outlived its machine"
    );
    let kept = csi
        .disk(&volume.id)
        .await
        .expect("the CSI volume was deleted with the VM");
    assert!(kept.attachments.is_empty(), "{kept:?}");

    // A spec.id pointed at another VM (anyone who may edit the object can) does not make
    // a delete remove that VM: only the Machine's own goes.
    let bystander = engine.add_vm("bystander");
    zms.patch(
        "capi-worker-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"id": bystander}})),
    )
    .await
    .unwrap();
    // The engine down during a delete: the finalizer stays until it answers.
    engine.set_html(true);
    zms.delete("capi-worker-1", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let held = zms
        .get("capi-worker-1")
        .await
        .expect("the machine went while the engine was down");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(held
        .finalizers()
        .iter()
        .any(|f| f == "zvirtmachine.infrastructure.cluster.x-k8s.io"));
    engine.set_html(false);
    wait_for(
        "the machine gone once the engine answers",
        Duration::from_secs(90),
        async || {
            zms.get_opt("capi-worker-1")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(e
        .json("it", Method::GET, &format!("/vms/{}", second.spec.id), None)
        .await
        .is_err());
    assert!(
        e.json("it", Method::GET, &format!("/vms/{bystander}"), None)
            .await
            .is_ok(),
        "a delete removed the VM spec.id was pointed at"
    );
    drop(capi_proc);
    let _ = secrets
        .delete("d8-node-manager-cloud-provider", &DeleteParams::default())
        .await;
    let _ = namespaces.delete(ns(), &DeleteParams::default()).await;
}
