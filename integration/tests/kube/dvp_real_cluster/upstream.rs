//! A volume Deckhouse's dvp-csi-driver made and attached, met by ours after a switch
//! under the same name (`csi.dvp.deckhouse.io`): the VirtualDisk and its
//! VirtualMachineBlockDeviceAttachment written as that driver's CreateVolume and
//! ControllerPublish write them (dvp-common `disk.go`, `compute.go`), its filesystem
//! mounted straight onto the pod's target as its node does. Ours lists, publishes,
//! detaches, grows and deletes it; on the node it refuses — and keeps — the mount it
//! cannot tell is the volume's, and refuses to stage from that driver's empty context,
//! saying to drain the node (docs/migrate/dvp.md); once drained, ours attaches it again
//! and the data is there.

use kube::api::PostParams;
use overcast_integration::upstream_node::{a_pod_reads, format_ext4, mount, unmount};
use overcast_integration::{csi_v1 as csi, mount_cap, Csi, NODE_ID};

use super::csi::scopeguard;
use super::*;

#[tokio::test]
async fn a_volume_the_dvp_csi_driver_made_and_attached_lives_on_with_ours() {
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the dvp-csi-driver's volume with ours", "upstream").await else {
        return;
    };
    world
        .sim
        .add_vm("vm-test-node", NODE_ID, "10.66.0.21", "parent-a")
        .await;
    let vm = world.parent.vms().get("vm-test-node").await.unwrap();
    // The parent's StorageClass the cluster's class names in `dvpStorageClass`.
    let classes: Api<k8s_openapi::api::storage::v1::StorageClass> =
        Api::all(world.parent.client.clone());
    let class = format!("{}-sc", world.sim.namespace);
    let _ = classes
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": class}, "provisioner": "parent.example",
                "volumeBindingMode": "Immediate",
            }))
            .unwrap(),
        )
        .await;

    // Its CreateVolume: the VirtualDisk named as the PV, with its labels (the hostname
    // label empty: CSI passes none), the class and size.
    let pv = "pvc-0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";
    let disk: VirtualDisk = serde_json::from_value(serde_json::json!({
        "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualDisk",
        "metadata": {"name": pv, "labels": {
            "deckhouse.io/managed-by": "deckhouse",
            "dvp.deckhouse.io/cluster-uuid": "6b7c5d1e-2f3a-4b5c-8d9e-0a1b2c3d4e5f",
            "dvp.deckhouse.io/hostname": "",
            "virtualDiskName": pv,
        }},
        "spec": {"persistentVolumeClaim": {"storageClassName": class, "size": "32Mi"}},
    }))
    .unwrap();
    world
        .parent
        .disks()
        .create(&PostParams::default(), &disk)
        .await
        .unwrap();
    // Its ControllerPublish: `vmbda-<disk>-<hostname>`, labelled with both, owned by the VM.
    let vmbda_name = format!("vmbda-{pv}-{NODE_ID}");
    let vmbda: Vmbda = serde_json::from_value(serde_json::json!({
        "apiVersion": "virtualization.deckhouse.io/v1alpha2",
        "kind": "VirtualMachineBlockDeviceAttachment",
        "metadata": {"name": vmbda_name,
            "labels": {"virtualMachineDiskName": pv, "virtualMachineName": NODE_ID},
            "ownerReferences": [{"apiVersion": "virtualization.deckhouse.io/v1alpha2",
                "kind": "VirtualMachine", "name": vm.name_any(),
                "uid": vm.metadata.uid.clone().unwrap()}]},
        "spec": {"virtualMachineName": vm.name_any(),
            "blockDeviceRef": {"kind": "VirtualDisk", "name": pv}},
    }))
    .unwrap();
    world
        .vmbdas()
        .create(&PostParams::default(), &vmbda)
        .await
        .unwrap();
    let device = real::wait_for("the disk attached", Duration::from_secs(60), async || {
        world.sim.device_of(&vmbda_name)
    })
    .await;

    // Its node: NodeStage formats, NodePublish mounts the device on the pod's target.
    let work = tempfile::tempdir().unwrap();
    let _unmount = scopeguard(work.path().to_path_buf());
    let staging = work.path().join("globalmount");
    let target = work
        .path()
        .join(format!("pods/p1/volumes/kubernetes.io~csi/{pv}/mount"));
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::create_dir_all(&target).unwrap();
    format_ext4(&device);
    mount(&device, &target);
    std::fs::write(target.join("data"), b"written under dvp-csi-driver").unwrap();

    let config = world.cloud_config(work.path());
    let driver = Csi::start(&[
        "--cloud=dvp",
        "--driver-name=csi.dvp.deckhouse.io",
        &format!("--cloud-config={}", config.display()),
        &format!("--device-by-id-dir={}", world.sim.by_id.display()),
    ])
    .await;
    let (mut c, mut n) = (driver.controller().await, driver.node().await);
    let listed = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries;
    let entry = listed
        .iter()
        .find(|e| e.volume.as_ref().is_some_and(|v| v.volume_id == pv))
        .unwrap_or_else(|| panic!("not listed: {listed:?}"));
    assert_eq!(
        entry.status.as_ref().unwrap().published_node_ids,
        vec![NODE_ID]
    );
    // Reported as that driver's disk under its PV's name (what the orphan report
    // matches PVs by); a create it began before the switch, repeated to ours, answers
    // with it.
    let reported = world
        .disks(Duration::from_secs(30))
        .list_disks()
        .await
        .unwrap()
        .into_iter()
        .find(|d| d.id == pv)
        .unwrap();
    assert_eq!(reported.metadata["csi.storage.k8s.io/pv/name"], pv);
    assert_eq!(reported.metadata["overcast.dev/made-by"], "dvp-csi-driver");
    let mut create = overcast_integration::create_request(pv, 32 << 20);
    create
        .parameters
        .insert("dvpStorageClass".into(), class.clone());
    let again = c
        .create_volume(create)
        .await
        .expect("create again")
        .into_inner();
    assert_eq!(again.volume.unwrap().volume_id, pv);
    // The same attachment asked of ours: its own VMBDA found, nothing made.
    let ours = c
        .controller_publish_volume(overcast_integration::publish_request(pv, false))
        .await
        .expect("publish of an attached volume")
        .into_inner()
        .publish_context;
    assert_eq!(world.sim.attached_count(), 1);

    // Without a record, the mount that driver made is not provably the volume's here:
    // refused and kept; a stage from its empty context says to drain the node.
    let e = n
        .node_unpublish_volume(overcast_integration::node_unpublish_request(pv, &target))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(overcast_integration::is_mount_point(&target), "kept");
    let empty = std::collections::HashMap::new();
    let e = n
        .node_stage_volume(overcast_integration::stage_request(
            pv,
            &empty,
            &staging,
            mount_cap("ext4"),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("drain the node"), "{e:?}");

    // The node drained while that driver's plugin still ran (it unmounts its own), the
    // attachment deleted by ours, then made again by ours: staged with its data.
    unmount(&target);
    c.controller_unpublish_volume(overcast_integration::detach_request(pv, NODE_ID))
        .await
        .expect("detach");
    assert_eq!(world.sim.attached_count(), 0);
    let ctx = c
        .controller_publish_volume(overcast_integration::publish_request(pv, false))
        .await
        .expect("attach by ours")
        .into_inner()
        .publish_context;
    assert_eq!(ctx, ours, "the same disk, the same context");
    let target2 = work
        .path()
        .join(format!("pods/p2/volumes/kubernetes.io~csi/{pv}/mount"));
    a_pod_reads(
        &mut n,
        pv,
        &ctx,
        &staging,
        &target2,
        b"written under dvp-csi-driver",
    )
    .await;
    c.controller_unpublish_volume(overcast_integration::detach_request(pv, NODE_ID))
        .await
        .expect("detach");
    let grown = c
        .controller_expand_volume(overcast_integration::expand_request(pv, 64 << 20))
        .await
        .expect("expand")
        .into_inner();
    assert_eq!(grown.capacity_bytes, 64 << 20);
    c.delete_volume(overcast_integration::delete_request(pv))
        .await
        .expect("delete");
    assert!(world.parent.disks().get_opt(pv).await.unwrap().is_none());
    drop(driver);
    let _ = classes.delete(&class, &DeleteParams::default()).await;
    world.finish().await;
}
