//! The real `capi --cloud dvp` with the kit's API server (Cluster API's core CRDs and the
//! provider's from `deploy/crds/`) and the DVP simulator as the parent cluster (the kit
//! plays both); the test plays Cluster API's core controllers (it makes the Cluster, the
//! Machine and the bootstrap Secret, sets owner references, and marks the Cluster's
//! infrastructure provisioned once the DeckhouseCluster is). A DeckhouseMachine gets its
//! parent VM with capdvp's shape, boot disk from its image and cloud-init Secret, then its
//! providerID, addresses, `ready` and `initialization.provisioned`; a Degraded VM fails
//! its machine, a stopped one is not ready (not forced on); a paused Cluster and a machine
//! at rest cost the parent no call; a class or boot image the parent lacks is refused
//! before anything is made (capdvp's check) and retried, and a VM waiting for its class
//! says so; a name DVP would refuse fails its machine at once; another cluster's VM of a
//! machine's name is never adopted nor removed; a `kill -9` mid-create and a restart
//! leave one VM that comes up; deleting a machine removes its VM and parts, then the finalizer, and a
//! parent outage during the delete keeps the finalizer until the parent answers. Needs
//! `OVERCAST_TEST_KUBECONFIG`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use overcast_capi::crd::common::ConditionStatus;
use overcast_capi::crd::dvp::{DeckhouseCluster, DeckhouseMachine, VM_READY_CONDITION};
use overcast_cloud::Machines;
use overcast_cloud_dvp::{machines::ParentVms, Parent};
use overcast_cloud_http::ApiMetrics;
use overcast_integration::capi::{self, CLOUD_INIT};
use overcast_integration::dvp_sim::{self, DvpSim};
use overcast_integration::real::{self, wait_for};
use serde_json::json;

const GIB: u64 = 1 << 30;

fn ns() -> &'static str {
    static NS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NS.get_or_init(|| format!("overcast-it-capi-dvp-{}", std::process::id()))
}

/// A Machine, its bootstrap Secret and its DeckhouseMachine booting `image` (half a
/// core's time, a 2 GiB root disk and one additional disk).
async fn machine(client: &Client, name: &str, image: &str) {
    let mut spec = capi::dvp_machine_spec(image);
    spec["cpu"]["cpuFraction"] = json!("50%");
    spec["rootDiskSize"] = json!("2Gi");
    spec["additionalDisks"] = json!([{"size": "1Gi", "storageClass": ""}]);
    capi::machine(client, ns(), &capi::DVP, "dvp", name, spec).await
}

async fn until(
    dms: &Api<DeckhouseMachine>,
    name: &str,
    what: &str,
    f: impl Fn(&DeckhouseMachine) -> bool,
) -> DeckhouseMachine {
    wait_for(what, Duration::from_secs(60), async || {
        dms.get_opt(name).await.ok().flatten().filter(|d| f(d))
    })
    .await
}

#[tokio::test]
async fn capi_makes_dvp_machines_as_capdvp_does_and_removes_them_whole() {
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(kubeconfig) = real::kubeconfig("the DVP Cluster API provider") else {
        return;
    };
    let client = real::client(&kubeconfig).await;
    let mut crds = capi::core_crds();
    crds.extend(capi::provider_crds("dvp"));
    capi::install(&client, &crds).await;
    dvp_sim::install_crds(&client).await;
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns()}})).unwrap(),
        )
        .await;
    let parent_ns = format!("{}-parent", ns());
    let sim = DvpSim::start(client.clone(), &parent_ns, Duration::from_millis(100)).await;
    let image = format!("overcast-it-capi-{}", std::process::id());
    sim.add_image("ClusterVirtualImage", &image, GIB / 2, true)
        .await;
    let dir = tempfile::tempdir().unwrap();
    // The parent reached through a proxy a test can take down.
    let proxied = sim.api_proxy(dir.path()).await;
    let indented: String = std::fs::read_to_string(&proxied)
        .unwrap()
        .lines()
        .map(|l| format!("  {l}\n"))
        .collect();
    let conf = dir.path().join("cloud-config");
    std::fs::write(
        &conf,
        format!("namespace: {parent_ns}\nkubeconfig: |\n{indented}"),
    )
    .unwrap();
    let (mut capi_process, mut metrics) = capi::spawn_dvp(&kubeconfig, &conf, ns(), "0f1e2d3c-it");

    capi::cluster(&client, ns(), &capi::DVP, "dvp", json!({})).await;
    let dcs: Api<DeckhouseCluster> = Api::namespaced(client.clone(), ns());
    wait_for(
        "the DeckhouseCluster provisioned",
        Duration::from_secs(30),
        async || {
            let s = dcs.get("dvp").await.ok()?.status?;
            (s.ready && s.initialization?.provisioned == Some(true)).then_some(())
        },
    )
    .await;
    let dms: Api<DeckhouseMachine> = Api::namespaced(client.clone(), ns());
    machine(&client, "w-1", &image).await;
    // Cluster API's cluster controller has not said the infrastructure is ready: waits.
    let waiting = until(&dms, "w-1", "waiting for the Cluster", |d| {
        d.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.reason == "WaitingForClusterInfrastructure")
        })
    })
    .await;
    assert!(waiting.spec.provider_id.is_none());
    capi::mark_provisioned_named(&client, ns(), "dvp").await;

    let dm = until(&dms, "w-1", "the machine ready", |d| {
        d.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    assert_eq!(dm.spec.provider_id.as_deref(), Some("dvp://w-1"));
    let s = dm.status.unwrap();
    assert_eq!(s.initialization.unwrap().provisioned, Some(true));
    let ready = s
        .conditions
        .iter()
        .find(|c| c.type_ == VM_READY_CONDITION)
        .unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::True, "VMRunning")
    );
    let kinds: Vec<(&str, &str)> = s
        .addresses
        .iter()
        .map(|a| (a.type_.as_str(), a.address.as_str()))
        .collect();
    assert_eq!(&kinds[..2], [("Hostname", "w-1"), ("InternalDNS", "w-1")]);
    assert!(
        kinds
            .iter()
            .any(|(t, a)| *t == "InternalIP" && a.starts_with("10.66.10.")),
        "{kinds:?}"
    );
    // In the parent: the VM as capdvp makes it, its cloud-init from the bootstrap data.
    let parent_vms = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &parent_ns,
        &overcast_cloud_dvp::api::virtual_machine(),
    );
    let vm = parent_vms.get("w-1").await.unwrap();
    assert_eq!(vm.labels()["dvp.deckhouse.io/cluster-uuid"], "0f1e2d3c-it");
    assert_eq!(vm.data["spec"]["cpu"]["coreFraction"], "50%");
    assert_eq!(vm.data["spec"]["liveMigrationPolicy"], "PreferSafe");
    let parent_secrets: Api<Secret> = Api::namespaced(client.clone(), &parent_ns);
    let init = parent_secrets.get("cloud-init-w-1").await.unwrap();
    assert_eq!(init.data.unwrap()["userData"].0, CLOUD_INIT.as_bytes());

    // A VM DVP cannot run, before its Node joined: the machine fails, said so.
    sim.faults.degraded_vms.lock().unwrap().insert("w-2".into());
    machine(&client, "w-2", &image).await;
    let failed = until(&dms, "w-2", "the machine failed", |d| {
        d.status
            .as_ref()
            .is_some_and(|s| s.failure_reason.is_some())
    })
    .await;
    let s = failed.status.unwrap();
    assert_eq!(s.failure_reason.as_deref(), Some("CreateError"));
    assert!(!s.ready);

    // Stopped before it came up: not ready, said so, not forced on; started again, ready.
    sim.faults.stopped_vms.lock().unwrap().insert("w-3".into());
    machine(&client, "w-3", &image).await;
    until(&dms, "w-3", "the machine stopped", |d| {
        d.status.as_ref().is_some_and(|s| {
            !s.ready && s.conditions.iter().any(|c| c.reason == "VMInStoppedState")
        })
    })
    .await;
    sim.faults.stopped_vms.lock().unwrap().clear();
    until(&dms, "w-3", "the machine ready after its start", |d| {
        d.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;

    // At rest: no call to the parent.
    let before = capi::parent_calls(metrics).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(capi::parent_calls(metrics).await, before, "calls at rest");

    // Paused: a new machine waits and the parent is not asked anything.
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns(), &capi::core("Cluster", "clusters"));
    clusters
        .patch(
            "dvp",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = capi::parent_calls(metrics).await;
    machine(&client, "w-4", &image).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        capi::parent_calls(metrics).await,
        before,
        "calls while paused"
    );
    let parent_vms_now = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &parent_ns,
        &overcast_cloud_dvp::api::virtual_machine(),
    );
    assert!(parent_vms_now.get_opt("w-4").await.unwrap().is_none());
    clusters
        .patch(
            "dvp",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    until(&dms, "w-4", "the unpaused machine ready", |d| {
        d.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;

    // kill -9 as soon as the VM exists, then a restart: one VM, its parts made, ready.
    machine(&client, "w-5", &image).await;
    wait_for("the VM made", Duration::from_secs(30), async || {
        parent_vms_now.get_opt("w-5").await.ok()?.map(|_| ())
    })
    .await;
    drop(capi_process);
    (capi_process, metrics) = capi::spawn_dvp(&kubeconfig, &conf, ns(), "0f1e2d3c-it");
    until(&dms, "w-5", "the machine ready after the restart", |d| {
        d.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    let named: Vec<String> = parent_vms_now
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|v| v.name_any())
        .filter(|n| n.starts_with("w-5"))
        .collect();
    assert_eq!(named, ["w-5"]);
    assert!(
        capi::parent_calls(metrics).await > 0,
        "the restarted process found the VM"
    );

    // A name whose boot disk DVP would refuse: failed at once, saying why, no VM made.
    machine(&client, "w.6", &image).await;
    let refused = until(&dms, "w.6", "the dotted machine failed", |d| {
        d.status
            .as_ref()
            .is_some_and(|s| s.failure_reason.is_some())
    })
    .await;
    let s = refused.status.unwrap();
    assert_eq!(s.failure_reason.as_deref(), Some("InvalidConfiguration"));
    assert!(
        s.failure_message
            .as_deref()
            .unwrap_or("")
            .contains("w.6-boot"),
        "{s:?}"
    );
    assert!(parent_vms_now.get_opt("w.6").await.unwrap().is_none());
    // A name too long for the VM's hostname label (the parent's API server would refuse
    // the VM on every try): failed at once too.
    let long = format!("w-7-{}", "x".repeat(60));
    machine(&client, &long, &image).await;
    let refused = until(&dms, &long, "the long-named machine failed", |d| {
        d.status
            .as_ref()
            .is_some_and(|s| s.failure_reason.is_some())
    })
    .await;
    let s = refused.status.unwrap();
    assert_eq!(s.failure_reason.as_deref(), Some("InvalidConfiguration"));
    assert!(
        s.failure_message
            .as_deref()
            .unwrap_or("")
            .contains("dvp.deckhouse.io/hostname"),
        "{s:?}"
    );
    assert!(parent_vms_now.get_opt(&long).await.unwrap().is_none());

    // Another cluster's VM of this machine's name in the shared namespace: never adopted.
    let other = ParentVms::new(
        Parent::new(
            client.clone(),
            parent_ns.clone(),
            Arc::new(ApiMetrics::unregistered()),
        ),
        "another-cluster",
    );
    other
        .create("w-7", &capi::dvp_vm_spec(&image, 0), b"#cloud-config\n")
        .await
        .unwrap();
    machine(&client, "w-7", &image).await;
    let foreign = until(&dms, "w-7", "the other cluster's VM refused", |d| {
        d.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.reason == "VMError" && c.message.contains("not this cluster's"))
        })
    })
    .await;
    assert!(foreign.spec.provider_id.is_none());

    // A class the parent lacks: refused before anything is made, in capdvp's words, and
    // retried: once the class is there (not ready yet), the VM is made and waits for it,
    // saying what the parent says.
    let class = format!("overcast-it-missing-{}", std::process::id());
    let mut classless = capi::dvp_machine_spec(&image);
    classless["vmClassName"] = json!(class);
    capi::machine(&client, ns(), &capi::DVP, "dvp", "w-8", classless).await;
    let refused = until(&dms, "w-8", "the machine refused for its class", |d| {
        d.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.reason == "VMError"
                    && c.message.contains(&format!(
                        "resource validation failed: VirtualMachineClass '{class}' not found in parent DVP cluster"
                    ))
            })
        })
    })
    .await;
    assert!(
        refused.status.unwrap().failure_reason.is_none(),
        "retried, not failed"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(parent_vms_now.get_opt("w-8").await.unwrap().is_none());
    sim.set_vm_class(&class, false).await;
    until(&dms, "w-8", "the machine waiting for its class", |d| {
        d.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.reason == "VMNotReady"
                    && c.message
                        .contains(&format!("VirtualMachineClassName {class:?} is not ready"))
            })
        })
    })
    .await;
    // A boot image the parent lacks: refused the same way, nothing made.
    capi::machine(
        &client,
        ns(),
        &capi::DVP,
        "dvp",
        "w-9",
        capi::dvp_machine_spec("overcast-it-no-image"),
    )
    .await;
    until(&dms, "w-9", "the machine refused for its image", |d| {
        d.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.reason == "VMError"
                    && c.message.contains(
                        "ClusterVirtualImage 'overcast-it-no-image' not found in parent DVP cluster",
                    )
            })
        })
    })
    .await;
    assert!(parent_vms_now.get_opt("w-9").await.unwrap().is_none());

    // The parent down during a delete: the finalizer stays until it answers.
    sim.faults
        .api_down
        .store(true, std::sync::atomic::Ordering::Relaxed);
    dms.delete("w-5", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let held = dms.get("w-5").await.expect("kept while the parent is down");
    assert!(held
        .finalizers()
        .iter()
        .any(|f| f.starts_with("deckhousemachine")));
    assert!(parent_vms_now.get_opt("w-5").await.unwrap().is_some());
    sim.faults
        .api_down
        .store(false, std::sync::atomic::Ordering::Relaxed);

    // Deleted: the VM and its disks and Secret go, then the finalizer.
    for name in [
        "w-1", "w-2", "w-3", "w-4", "w.6", "w-7", "w-8", "w-9", &long,
    ] {
        dms.delete(name, &DeleteParams::default()).await.unwrap();
    }
    wait_for("the machines gone", Duration::from_secs(60), async || {
        let left = dms.list(&Default::default()).await.ok()?.items.len();
        (left == 0).then_some(())
    })
    .await;
    let kept = other
        .find("w-7")
        .await
        .unwrap()
        .expect("the other cluster's VM kept");
    other.remove(&kept).await.unwrap();
    assert!(parent_vms.get_opt("w-1").await.unwrap().is_none());
    assert!(parent_secrets
        .get_opt("cloud-init-w-1")
        .await
        .unwrap()
        .is_none());
    wait_for(
        "the parent's disks gone",
        Duration::from_secs(30),
        async || {
            let disks: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                &parent_ns,
                &overcast_cloud_dvp::api::virtual_disk(),
            );
            disks
                .list(&Default::default())
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
    let images = Api::<DynamicObject>::all_with(
        client.clone(),
        &overcast_cloud_dvp::api::cluster_virtual_image(),
    );
    let _ = images.delete(&image, &DeleteParams::default()).await;
    sim.delete_vm_class(&class).await;
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns(), &capi::core("Machine", "machines"));
    for name in [
        "w-1", "w-2", "w-3", "w-4", "w-5", "w.6", "w-7", "w-8", "w-9", &long,
    ] {
        let _ = machines.delete(name, &DeleteParams::default()).await;
    }
    drop(capi_process);
    drop(sim);
}
