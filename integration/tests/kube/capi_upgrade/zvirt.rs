//! An upgrade of the Cluster API provider with machines running: an earlier release's
//! `capi --cloud zvirt` (that commit's binary, built by `.ci/run`; none of this release's
//! code writes its objects) with that release's CRDs makes a machine in the zVirt engine
//! simulator — VM cloned, started, `ready`, its providerID and addresses; it is stopped
//! as its pod is on an upgrade (SIGTERM); this release's CRDs are applied and this
//! release's `capi` takes over the same objects. What an upgrade must give: the machine
//! stays ready with the same VM, its spec and status as the earlier release left them but
//! for what this release adds — `status.initialization.provisioned`, which Cluster API
//! v1beta2 reads and that release never wrote, brought forward — no call that changes
//! anything in the engine, and no second VM, also after a change to the object makes it
//! reconcile again; then the machine deleted: its VM removed, by this release. Needs
//! `OVERCAST_TEST_KUBECONFIG` and the release (`.ci/run`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use kube::ResourceExt;
use overcast_capi::crd::zvirt::{ZvirtCluster, ZvirtMachine};
use overcast_integration::capi;
use overcast_integration::real::{self, wait_for};
use overcast_integration::release;
use overcast_integration::zvirt_sim::{self, Engine, Latency};
use serde_json::json;

use super::{taken_over, Cleanup, RELEASE};

const GIB: u64 = 1 << 30;

#[tokio::test]
async fn a_machine_an_earlier_release_made_is_kept_as_it_is_after_the_upgrade() {
    let what = "the Cluster API provider's upgrade test";
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
    crds.extend(capi::provider_crds_in(&old.src("deploy"), "zvirt"));
    capi::install(&client, &crds).await;
    // This run's namespace (the kit runs no namespace controller: one per run).
    let ns = format!("overcast-it-capi-upgrade-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _cleanup = Cleanup {
        kubeconfig: kubeconfig.clone(),
        namespaces: vec![(ns.clone(), &["zvirtmachines", "zvirtclusters"])],
    };
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
    let engine = Engine::new(&files, &by_id, 200 * GIB, Latency::default());
    let url = engine.start().await;
    let _unplug = engine.unplug_on_drop();
    engine.add_template("ubuntu-2204", 10 * GIB);
    let profile = engine.add_vnic_profile("ovirtmgmt");
    engine.set_guest_ips_on_boot("capi-upgrade-0", &["10.1.0.17"]);
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
    capi::zvirt_cluster(&client, &ns, zvirt_sim::CLUSTER_ID).await;
    capi::zvirt_machine(&client, &ns, "capi-upgrade-0", &profile).await;
    let zcs: Api<ZvirtCluster> = Api::namespaced(client.clone(), &ns);
    let zms: Api<ZvirtMachine> = Api::namespaced(client.clone(), &ns);

    // The earlier release makes the machine.
    let old_port = overcast_integration::free_port();
    let mut old_capi =
        capi::spawn_zvirt_with(&old.bin("capi"), &kubeconfig, &cloud_config, &ns, old_port);
    wait_for(
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
    capi::mark_provisioned(&client, &ns).await;
    let made = wait_for(
        "the machine ready (the earlier release)",
        Duration::from_secs(90),
        async || {
            zms.get("capi-upgrade-0")
                .await
                .ok()
                .filter(|z| z.status.as_ref().is_some_and(|s| s.ready))
        },
    )
    .await;
    assert_eq!(engine.vm_count(), 1);
    let vm = engine.vm_by_name("capi-upgrade-0").expect("its VM");
    assert_eq!(
        made.spec.provider_id,
        Some(format!("zvirt://{}", vm["id"].as_str().unwrap()))
    );
    // Stopped as its pod is on an upgrade.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old_capi.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = old_capi.0.wait();
    // What it left, read back after it stopped (its last status writes included).
    let machine_before = zms.get("capi-upgrade-0").await.unwrap();
    let cluster_before = zcs.get("zvirt").await.unwrap();
    let written = engine.writes();

    // This release: its CRDs, then its capi on the same objects.
    capi::install(&client, &capi::provider_crds("zvirt")).await;
    let port = overcast_integration::free_port();
    let new_capi = capi::spawn_zvirt_with(
        &overcast_integration::binary("capi"),
        &kubeconfig,
        &cloud_config,
        &ns,
        port,
    );
    taken_over(
        port,
        &zms,
        "capi-upgrade-0",
        ("ZvirtMachine", "ZvirtCluster"),
    )
    .await;
    let machine_after = zms.get("capi-upgrade-0").await.unwrap();
    let cluster_after = zcs.get("zvirt").await.unwrap();
    assert_eq!(
        machine_after.spec, machine_before.spec,
        "the machine's spec changed"
    );
    // Brought forward: the v1beta2 contract's field, which that release never wrote.
    let mut brought = machine_after.status.clone().expect("a status");
    assert_eq!(
        brought.initialization.take().and_then(|i| i.provisioned),
        Some(true),
        "this release did not bring the machine's `initialization` forward"
    );
    assert_eq!(
        Some(brought),
        machine_before.status,
        "the machine's status changed beyond `initialization`"
    );
    assert_eq!(machine_after.finalizers(), machine_before.finalizers());
    assert_eq!(
        cluster_after.spec, cluster_before.spec,
        "the cluster's spec changed"
    );
    assert_eq!(
        cluster_after.status, cluster_before.status,
        "the cluster's status changed"
    );
    assert_eq!(engine.writes(), written, "this release wrote to the engine");
    assert_eq!(engine.vm_count(), 1, "a second VM was made");

    // Deleted: this release removes the VM the earlier one made, and lets the object go.
    zms.delete("capi-upgrade-0", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the machine gone", Duration::from_secs(90), async || {
        zms.get_opt("capi-upgrade-0")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(engine.vm_count(), 0, "the machine's VM stayed");
    drop(new_capi);
}
