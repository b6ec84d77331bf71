//! The parent's VMs as the Cluster API provider makes them (`overcast_cloud_dvp::ParentVms`),
//! on the simulated parent: made as capdvp makes them, waiting for their image, started
//! by DVP once their disks and Secret are there, a Secret lost mid-create made again,
//! a Degraded VM failed, another cluster's VM of a shared name left alone, and removal detaching a user's disk (kept) and taking the VM
//! with its own disks and Secret — as the tenant account `deploy/parent/dvp/rbac.yaml`
//! binds, so that manifest is proven to be all the provider needs.

use k8s_openapi::api::core::v1::Secret;
use kube::api::DynamicObject;
use overcast_cloud::machines::{Machines, Vm, VmPhase};
use overcast_cloud_dvp::machines::{ParentVms, VmSpec};

use super::*;

const GIB: u64 = 1 << 30;

fn vm_spec(image: &str) -> VmSpec {
    overcast_integration::capi::dvp_vm_spec(image, 1)
}

/// The `Ready` condition's reason of a disk, and the VM's conditions' reasons.
async fn disk_reason(world: &World, name: &str) -> Option<String> {
    let d = world.parent.disks().get_opt(name).await.ok()??;
    d.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")?
        .reason
}

async fn vm_condition(world: &World, name: &str, type_: &str) -> Option<(String, String)> {
    let vm = world.parent.vms().get_opt(name).await.ok()??;
    let c = vm
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)?;
    Some((c.reason.unwrap_or_default(), c.message.unwrap_or_default()))
}

async fn phase(vms: &ParentVms, name: &str) -> Option<VmPhase> {
    vms.find(name).await.ok()?.map(|v| v.phase)
}

#[tokio::test]
async fn a_machine_s_vm_is_made_started_repaired_and_removed_with_its_parts() {
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the DVP machines test", "machines").await else {
        return;
    };
    let pid = std::process::id();
    let image = format!("overcast-it-ubuntu-{pid}");
    let slow_image = format!("overcast-it-slow-{pid}");
    // As the tenant bound to exactly deploy/parent/dvp/rbac.yaml (its capi Role too).
    let tenant = dvp_sim::tenant(
        &std::env::var(real::ENV).unwrap(),
        &world.sim.namespace,
        false,
    )
    .await;
    let parent = Parent::new(
        tenant,
        world.sim.namespace.clone(),
        Arc::new(ApiMetrics::unregistered()),
    );
    let vms = ParentVms::new(parent.clone(), "c0ffee00-uuid");
    let machine = vm_spec(&image);

    // capdvp's check before a VM is made, as this account: without the optional
    // ClusterRole the class and a ClusterVirtualImage cannot be read (Forbidden: not
    // checked, never "absent"); a VirtualImage of the namespace can, and one that is not
    // there is said.
    assert_eq!(vms.refusal(&machine).await.expect("refusal"), None);
    let mut namespaced = machine.clone();
    namespaced.image_kind = "VirtualImage".into();
    let why = vms
        .refusal(&namespaced)
        .await
        .expect("refusal")
        .expect("a VirtualImage that is not there");
    assert!(
        why.starts_with(&format!("VirtualImage '{image}' not found in namespace")),
        "{why}"
    );

    // Made before its image exists: the VM and its parts as capdvp makes them; the boot
    // disk waits for the image, the VM for its disks.
    let vm = vms
        .create("capi-w-1", &machine, b"#cloud-config\nhostname: capi-w-1\n")
        .await
        .expect("create");
    assert_eq!(vm.phase, VmPhase::Creating);
    assert!(
        vms.create("capi-w-1", &machine, b"").await.is_err(),
        "a second create of the name is the parent's refusal"
    );
    let obj: DynamicObject = world
        .parent
        .dynamic(&overcast_cloud_dvp::api::virtual_machine(), true)
        .get("capi-w-1")
        .await
        .unwrap();
    let labels = obj.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["deckhouse.io/managed-by"], "deckhouse");
    assert_eq!(labels["dvp.deckhouse.io/cluster-uuid"], "c0ffee00-uuid");
    assert_eq!(labels["dvp.deckhouse.io/hostname"], "capi-w-1");
    let s = &obj.data["spec"];
    assert_eq!(
        s["provisioning"]["userDataRef"]["name"],
        "cloud-init-capi-w-1"
    );
    assert_eq!(s["runPolicy"], "AlwaysOnUnlessStoppedManually");
    assert_eq!(s["cpu"]["coreFraction"], "100%");
    assert_eq!(
        s["blockDeviceRefs"],
        serde_json::json!([
            {"kind": "VirtualDisk", "name": "capi-w-1-boot"},
            {"kind": "VirtualDisk", "name": "capi-w-1-additional-disk-0"},
        ])
    );
    let secrets: Api<Secret> = Api::namespaced(world.parent.client.clone(), &world.sim.namespace);
    let secret = secrets.get("cloud-init-capi-w-1").await.unwrap();
    assert_eq!(
        secret.type_.as_deref(),
        Some(overcast_cloud_dvp::machines::CLOUD_INIT_TYPE)
    );
    assert_eq!(
        secret.data.unwrap()["userData"].0,
        b"#cloud-config\nhostname: capi-w-1\n"
    );
    assert_eq!(
        secret.metadata.owner_references.unwrap()[0].name,
        "capi-w-1"
    );
    real::wait_for(
        "the boot disk waiting for its image",
        Duration::from_secs(20),
        async || {
            (disk_reason(&world, "capi-w-1-boot").await.as_deref() == Some("DatasourceIsNotFound"))
                .then_some(())
        },
    )
    .await;
    let (reason, message) = real::wait_for(
        "the VM waiting for its disks",
        Duration::from_secs(20),
        async || vm_condition(&world, "capi-w-1", "BlockDevicesReady").await,
    )
    .await;
    assert_eq!(reason, "BlockDevicesNotReady", "{message}");
    assert_eq!(phase(&vms, "capi-w-1").await, Some(VmPhase::Creating));
    assert!(vms.addresses(&vm).await.unwrap().is_empty());

    // The image imported: the disks become Ready, DVP starts the VM.
    world
        .sim
        .add_image("ClusterVirtualImage", &image, GIB / 2, true)
        .await;
    real::wait_for("the VM running", Duration::from_secs(30), async || {
        (phase(&vms, "capi-w-1").await == Some(VmPhase::Running)).then_some(())
    })
    .await;
    let ips = vms.addresses(&vm).await.unwrap();
    assert!(
        ips.len() == 1 && ips[0].to_string().starts_with("10.66.10."),
        "{ips:?}"
    );

    // A create cut short after the VM (its Secret lost): the VM waits, saying why, until
    // start makes the Secret again.
    world
        .sim
        .add_image("ClusterVirtualImage", &slow_image, GIB / 2, false)
        .await;
    let w2 = vms
        .create("capi-w-2", &vm_spec(&slow_image), b"#cloud-config\n")
        .await
        .unwrap();
    secrets
        .delete("cloud-init-capi-w-2", &DeleteParams::default())
        .await
        .unwrap();
    let (reason, message) = real::wait_for(
        "the VM without its Secret",
        Duration::from_secs(20),
        async || {
            vm_condition(&world, "capi-w-2", "ProvisioningReady")
                .await
                .filter(|(_, m)| m.contains("not found"))
        },
    )
    .await;
    assert_eq!(reason, "ProvisioningNotReady", "{message}");
    vms.start(&w2, &vm_spec(&slow_image), b"#cloud-config\n")
        .await
        .unwrap();
    assert!(secrets
        .get_opt("cloud-init-capi-w-2")
        .await
        .unwrap()
        .is_some());
    world
        .sim
        .set_image_ready("ClusterVirtualImage", &slow_image, GIB / 2, true)
        .await;
    real::wait_for(
        "the repaired VM running",
        Duration::from_secs(30),
        async || (phase(&vms, "capi-w-2").await == Some(VmPhase::Running)).then_some(()),
    )
    .await;

    // A VM DVP cannot run: failed, named.
    world
        .sim
        .faults
        .degraded_vms
        .lock()
        .unwrap()
        .insert("capi-w-3".into());
    let w3 = vms
        .create("capi-w-3", &machine, b"#cloud-config\n")
        .await
        .unwrap();
    real::wait_for("the VM degraded", Duration::from_secs(30), async || {
        (phase(&vms, "capi-w-3").await == Some(VmPhase::Failed("Degraded".into()))).then_some(())
    })
    .await;

    // A class the parent lacks: the VM waits, saying so, until the class exists and is
    // Ready (the vm controller's class.go).
    let class = format!("overcast-it-class-{pid}");
    let classless = VmSpec {
        class: class.clone(),
        ..machine.clone()
    };
    let w5 = vms
        .create("capi-w-5", &classless, b"#cloud-config\n")
        .await
        .unwrap();
    let (reason, message) = real::wait_for(
        "the VM waiting for its class",
        Duration::from_secs(20),
        async || vm_condition(&world, "capi-w-5", "ClassReady").await,
    )
    .await;
    assert_eq!(reason, "VirtualMachineClassNotReady");
    assert_eq!(
        message,
        format!("VirtualMachineClassName {class:?} not found")
    );
    world.sim.set_vm_class(&class, false).await;
    real::wait_for(
        "the VM waiting for its class to be Ready",
        Duration::from_secs(20),
        async || {
            vm_condition(&world, "capi-w-5", "ClassReady")
                .await
                .filter(|(_, m)| m.ends_with("is not ready"))
        },
    )
    .await;
    assert_eq!(phase(&vms, "capi-w-5").await, Some(VmPhase::Creating));
    world.sim.set_vm_class(&class, true).await;
    real::wait_for(
        "the VM running in its class",
        Duration::from_secs(30),
        async || (phase(&vms, "capi-w-5").await == Some(VmPhase::Running)).then_some(()),
    )
    .await;
    vms.remove(&w5).await.expect("remove");
    world.sim.delete_vm_class(&class).await;

    // Another cluster sharing the namespace has a machine of the same name: its VM is
    // never adopted, finished or removed here, and its parts are kept.
    let other = ParentVms::new(parent.clone(), "another-cluster-uuid");
    other
        .create("capi-shared", &machine, b"#cloud-config\n")
        .await
        .expect("the other cluster's create");
    let refused = vms
        .find("capi-shared")
        .await
        .expect_err("another cluster's VM adopted");
    assert!(
        matches!(refused, CloudError::Conflict(_))
            && refused.to_string().contains("another-cluster-uuid"),
        "{refused}"
    );
    let theirs = Vm {
        id: "capi-shared".into(),
        name: "capi-shared".into(),
        phase: VmPhase::Creating,
        waiting_for: None,
    };
    assert!(vms.start(&theirs, &machine, b"").await.is_err());
    assert_eq!(
        vms.remove(&theirs)
            .await
            .expect("remove of a VM this cluster never had"),
        Default::default()
    );
    assert!(
        other.find("capi-shared").await.unwrap().is_some(),
        "the other cluster's VM is kept"
    );
    assert!(world
        .parent
        .disks()
        .get_opt("capi-shared-boot")
        .await
        .unwrap()
        .is_some());
    assert!(secrets
        .get_opt("cloud-init-capi-shared")
        .await
        .unwrap()
        .is_some());
    other
        .remove(&theirs)
        .await
        .expect("the other cluster's removal");
    // A user's disk already named like a machine's boot disk: never booted from.
    let user_disks = world.disks(Duration::from_secs(30));
    let squatter = user_disks.create_disk(spec("capi-w-6-boot")).await.unwrap();
    let w6 = vms
        .create("capi-w-6", &machine, b"#cloud-config\n")
        .await
        .expect_err("a VM on a stranger's disk");
    assert!(
        matches!(w6, CloudError::Conflict(_)) && w6.to_string().contains("capi-w-6-boot"),
        "{w6}"
    );
    let made = Vm {
        id: "capi-w-6".into(),
        name: "capi-w-6".into(),
        phase: VmPhase::Creating,
        waiting_for: None,
    };
    vms.remove(&made).await.expect("the half-made VM removed");
    assert!(
        user_disks.disk(&squatter.id).await.is_ok(),
        "the user's disk is kept"
    );
    user_disks.delete_disk(&squatter.id).await.unwrap();
    // A name whose boot disk the parent would refuse: refused before any call.
    let dotted = vms
        .create("capi.w.4", &machine, b"")
        .await
        .expect_err("a dotted name");
    assert!(matches!(dotted, CloudError::InvalidArgument(_)), "{dotted}");
    assert!(world
        .parent
        .vms()
        .get_opt("capi.w.4")
        .await
        .unwrap()
        .is_none());

    // A user's volume attached through CSI, and a user's disk named like the VM's parts:
    // the removal detaches the first and keeps both.
    let disks = world.disks(Duration::from_secs(30));
    let data = disks.create_disk(spec("pvc-user-data")).await.unwrap();
    disks
        .attach_disk(&data.id, "capi-w-1", false)
        .await
        .unwrap();
    let lookalike = disks
        .create_disk(spec("capi-w-1-additional-disk-7"))
        .await
        .unwrap();
    let removal = vms.remove(&vm).await.expect("remove");
    assert_eq!(removal.detached, std::slice::from_ref(&data.id));
    assert!(vms.find("capi-w-1").await.unwrap().is_none());
    for gone in ["capi-w-1-boot", "capi-w-1-additional-disk-0"] {
        real::wait_for(
            &format!("{gone} deleted"),
            Duration::from_secs(20),
            async || {
                world
                    .parent
                    .disks()
                    .get_opt(gone)
                    .await
                    .ok()?
                    .is_none()
                    .then_some(())
            },
        )
        .await;
    }
    assert!(secrets
        .get_opt("cloud-init-capi-w-1")
        .await
        .unwrap()
        .is_none());
    assert!(
        disks.disk(&data.id).await.is_ok(),
        "the user's volume is kept"
    );
    assert!(
        disks.disk(&lookalike.id).await.is_ok(),
        "a look-alike is kept"
    );
    assert_eq!(
        vms.remove(&vm).await.unwrap(),
        Default::default(),
        "removed again: nothing left to do"
    );
    for v in [&w2, &w3] {
        vms.remove(v).await.expect("remove");
    }
    for d in [&data.id, &lookalike.id] {
        disks.delete_disk(d).await.unwrap();
    }
    let images = world
        .parent
        .dynamic(&overcast_cloud_dvp::api::cluster_virtual_image(), false);
    for i in [&image, &slow_image] {
        let _ = images.delete(i, &DeleteParams::default()).await;
    }
    world.finish().await;
}
