//! The DVP Cluster API provider's upgrade: the earlier release's `capi --cloud dvp` with
//! that release's CRDs makes a DeckhouseMachine on the DVP simulator's parent — its VM,
//! boot disk and cloud-init Secret as capdvp makes them, then `ready`,
//! `initialization.provisioned`, providerID and addresses. After the upgrade (SIGTERM,
//! this release's CRDs and `capi`), since this release reads a machine at rest from
//! `initialization` (capdvp's newer controller writes only that) and releases capdvp's
//! finalizer from a deleted cluster, what the earlier release left must read as at rest:
//! the machine and the cluster unchanged, spec and status; the parent not asked anything
//! and none of its objects written, also after a change to the machine makes it reconcile
//! again; then deleted, the VM and its parts removed by this release. Needs
//! `OVERCAST_TEST_KUBECONFIG` and the release (`.ci/run`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::{Client, ResourceExt};
use overcast_capi::crd::dvp::{DeckhouseCluster, DeckhouseMachine};
use overcast_integration::capi;
use overcast_integration::dvp_sim::{self, DvpSim};
use overcast_integration::real::{self, wait_for};
use overcast_integration::release;
use serde_json::{json, Value};

use super::{taken_over, Cleanup, RELEASE};

const GIB: u64 = 1 << 30;
const MACHINE: &str = "upgrade-1";
const CLUSTER_UUID: &str = "5a6b7c8d-upgrade-it";

/// What a write to the parent would change, of every object the machine has there: each
/// VM, disk, attachment and address's identity, generation (its spec), labels,
/// annotations and finalizers, and each Secret's resourceVersion (a Secret has no status
/// that its own controller writes). The simulator's status writes are not in it.
async fn parent_objects(client: &Client, ns: &str) -> BTreeMap<String, Value> {
    let mut seen = BTreeMap::new();
    for resource in [
        overcast_cloud_dvp::api::virtual_machine(),
        overcast_cloud_dvp::api::virtual_disk(),
        overcast_cloud_dvp::api::vmbda(),
        overcast_cloud_dvp::api::virtual_machine_ip_address(),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        for o in api.list(&Default::default()).await.unwrap().items {
            seen.insert(
                format!("{}/{}", resource.kind, o.name_any()),
                json!({
                    "uid": o.uid(), "generation": o.metadata.generation,
                    "labels": o.labels(), "annotations": o.annotations(),
                    "finalizers": o.finalizers(), "spec": o.data["spec"],
                }),
            );
        }
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    for s in secrets.list(&Default::default()).await.unwrap().items {
        seen.insert(
            format!("Secret/{}", s.name_any()),
            json!({"uid": s.uid(), "resourceVersion": s.resource_version()}),
        );
    }
    seen
}

#[tokio::test]
async fn a_dvp_machine_an_earlier_release_made_is_at_rest_after_the_upgrade() {
    let what = "the DVP Cluster API provider's upgrade test";
    let _cluster = real::cluster_turn().await;
    let Some(kubeconfig) = real::kubeconfig(what) else {
        return;
    };
    let Some(old) = release::get(RELEASE, what) else {
        return;
    };
    let client = real::client(&kubeconfig).await;
    // The earlier release's CRDs, as its manifests installed them.
    let mut crds = capi::core_crds();
    crds.extend(capi::provider_crds_in(&old.src("deploy"), "dvp"));
    capi::install(&client, &crds).await;
    dvp_sim::install_crds(&client).await;
    let ns = format!("overcast-it-capi-dvp-upgrade-{}", std::process::id());
    let parent_ns = format!("{ns}-parent");
    let _cleanup = Cleanup {
        kubeconfig: kubeconfig.clone(),
        namespaces: vec![
            (ns.clone(), &["deckhousemachines", "deckhouseclusters"]),
            (
                parent_ns.clone(),
                &[
                    "virtualmachineblockdeviceattachments.virtualization.deckhouse.io",
                    "virtualmachines.virtualization.deckhouse.io",
                    "virtualdisks.virtualization.deckhouse.io",
                    "virtualmachineipaddresses.virtualization.deckhouse.io",
                ],
            ),
        ],
    };
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    let sim = DvpSim::start(client.clone(), &parent_ns, Duration::from_millis(100)).await;
    let image = format!("overcast-it-capi-upgrade-{}", std::process::id());
    sim.add_image("ClusterVirtualImage", &image, GIB / 2, true)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let parent = sim.api_proxy(dir.path()).await;
    let indented: String = std::fs::read_to_string(&parent)
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

    // The earlier release makes the cluster and the machine.
    let old_port = overcast_integration::free_port();
    let mut old_capi = capi::spawn_dvp_with(
        &old.bin("capi"),
        &kubeconfig,
        &conf,
        &ns,
        CLUSTER_UUID,
        old_port,
    );
    capi::cluster(&client, &ns, &capi::DVP, "dvp", json!({})).await;
    let dcs: Api<DeckhouseCluster> = Api::namespaced(client.clone(), &ns);
    let dms: Api<DeckhouseMachine> = Api::namespaced(client.clone(), &ns);
    wait_for(
        "the DeckhouseCluster provisioned (the earlier release)",
        Duration::from_secs(60),
        async || dcs.get("dvp").await.ok()?.status?.ready.then_some(()),
    )
    .await;
    capi::mark_provisioned_named(&client, &ns, "dvp").await;
    capi::machine(
        &client,
        &ns,
        &capi::DVP,
        "dvp",
        MACHINE,
        capi::dvp_machine_spec(&image),
    )
    .await;
    let made = wait_for(
        "the machine ready (the earlier release)",
        Duration::from_secs(90),
        async || {
            dms.get(MACHINE)
                .await
                .ok()
                .filter(|d| d.status.as_ref().is_some_and(|s| s.ready))
        },
    )
    .await;
    assert_eq!(made.spec.provider_id.as_deref(), Some("dvp://upgrade-1"));
    // Stopped as its pod is on an upgrade.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old_capi.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = old_capi.0.wait();
    // What it left, read back after it stopped (its last status writes included).
    let machine_before = dms.get(MACHINE).await.unwrap();
    let cluster_before = dcs.get("dvp").await.unwrap();
    let parent_before = parent_objects(&client, &parent_ns).await;
    assert!(
        parent_before.contains_key(&format!("VirtualMachine/{MACHINE}"))
            && parent_before.contains_key(&format!("Secret/cloud-init-{MACHINE}")),
        "the earlier release made the VM and its cloud-init: {:?}",
        parent_before.keys()
    );

    // This release: its CRDs, then its capi on the same objects.
    capi::install(&client, &capi::provider_crds("dvp")).await;
    let port = overcast_integration::free_port();
    let new_capi = capi::spawn_dvp_with(
        &overcast_integration::binary("capi"),
        &kubeconfig,
        &conf,
        &ns,
        CLUSTER_UUID,
        port,
    );
    taken_over(
        port,
        &dms,
        MACHINE,
        ("DeckhouseMachine", "DeckhouseCluster"),
    )
    .await;
    let machine_after = dms.get(MACHINE).await.unwrap();
    let cluster_after = dcs.get("dvp").await.unwrap();
    assert_eq!(
        machine_after.spec, machine_before.spec,
        "the machine's spec"
    );
    assert_eq!(
        machine_after.status, machine_before.status,
        "the machine's status: the earlier release's machine was not read as at rest"
    );
    assert_eq!(machine_after.finalizers(), machine_before.finalizers());
    assert_eq!(
        cluster_after.spec, cluster_before.spec,
        "the cluster's spec"
    );
    assert_eq!(
        cluster_after.status, cluster_before.status,
        "the cluster's status"
    );
    assert_eq!(
        capi::parent_calls(port).await,
        0,
        "this release asked the parent about a machine at rest"
    );
    assert_eq!(
        parent_objects(&client, &parent_ns).await,
        parent_before,
        "this release wrote to the parent"
    );

    // Deleted: this release removes the VM, its disks and cloud-init the earlier one made.
    dms.delete(MACHINE, &DeleteParams::default()).await.unwrap();
    wait_for("the machine gone", Duration::from_secs(90), async || {
        dms.get_opt(MACHINE).await.ok()?.is_none().then_some(())
    })
    .await;
    let left = parent_objects(&client, &parent_ns).await;
    assert!(
        !left.keys().any(|k| k.contains(MACHINE)),
        "the machine's parts stayed in the parent: {:?}",
        left.keys()
    );
    drop(new_capi);
    let images = Api::<DynamicObject>::all_with(
        client.clone(),
        &overcast_cloud_dvp::api::cluster_virtual_image(),
    );
    let _ = images.delete(&image, &DeleteParams::default()).await;
    drop(sim);
}
