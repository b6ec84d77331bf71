//! A cluster switched from the oVirt CSI driver (Deckhouse's zVirt module deploys
//! openshift/ovirt-csi-driver as `csi.ovirt.org`): a volume that driver made, attached
//! and mounted is served by ours under the same driver name — listed, staged from that
//! driver's (empty) publish context, unmounted where that driver mounted it, detached,
//! expanded and deleted — with the engine's real calls and a real filesystem on the
//! disk the engine plugs.

use http::Method;
use overcast_integration::upstream_node::{a_pod_reads, format_ext4, mount, run_ok};
use serde_json::json;

use super::*;

/// The PV name external-provisioner gave it, which that driver makes the disk's alias.
const PV: &str = "pvc-0b3c1f4e-6a8d-4c1e-9f2a-7d5e3b9c1a20";

#[tokio::test]
async fn a_volume_the_ovirt_csi_driver_made_and_mounted_lives_on_with_ours() {
    let s = sim(Latency::default()).await;
    let vm = s.engine.add_vm("worker-0");
    let engine =
        overcast_cloud_zvirt::connect(&config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD), None)
            .unwrap();
    // The disk as that driver's CreateVolume makes it (go-ovirt-client's
    // buildDiskObjectForCreation): size, domain, format, sparse and alias — no
    // description, no other mark.
    let made = engine
        .json(
            "disk_add",
            Method::POST,
            "/disks",
            Some(&json!({
                "alias": PV,
                "provisioned_size": GIB.to_string(),
                "format": "cow",
                "sparse": "true",
                "storage_domains": {"storage_domain": [{"name": "data"}]},
            })),
        )
        .await
        .unwrap();
    let id = made["id"].as_str().unwrap().to_owned();
    // It waits for the disk to be `ok`, as go-ovirt-client's CreateDisk does.
    let started = std::time::Instant::now();
    loop {
        let d = engine
            .json("disk_get", Method::GET, &format!("/disks/{id}"), None)
            .await
            .unwrap();
        if d["status"] == "ok" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{d}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Its ControllerPublish: a virtio-scsi attachment, active, not bootable; its
    // VolumeAttachment's attachmentMetadata is empty.
    engine
        .json(
            "diskattachment_add",
            Method::POST,
            &format!("/vms/{vm}/diskattachments"),
            Some(&json!({"disk": {"id": id}, "interface": "virtio_scsi",
                "bootable": "false", "active": "true"})),
        )
        .await
        .unwrap();
    let serial: String = id.chars().take(20).collect();
    let device = s.by_id.join(format!("scsi-0QEMU_QEMU_HARDDISK_{serial}"));
    let started = std::time::Instant::now();
    while !device.exists() {
        assert!(started.elapsed() < Duration::from_secs(30), "never plugged");
        let _ = s.engine.disks(); // advances the engine's transitions
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Its node plugin: NodeStage only formats; NodePublish mounts the device straight
    // onto the pod's target. kubelet's paths; the staging directory stays empty.
    let work = s.dir.path().join("kubelet");
    let _unmount = Unmount(work.clone());
    let staging = work.join("plugins/kubernetes.io/csi/csi.ovirt.org/0b3c/globalmount");
    let target = work.join(format!("pods/p1/volumes/kubernetes.io~csi/{PV}/mount"));
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::create_dir_all(&target).unwrap();
    format_ext4(&device);
    mount(&device, &target);
    std::fs::write(target.join("data"), b"written under ovirt-csi-driver").unwrap();
    // Another pod's target of the same volume holding something else (a tmpfs): not
    // this volume's disk, so ours must keep it.
    let other = work.join(format!("pods/p2/volumes/kubernetes.io~csi/{PV}/mount"));
    std::fs::create_dir_all(&other).unwrap();
    run_ok(
        std::process::Command::new("mount")
            .args(["-t", "tmpfs", "tmpfs"])
            .arg(&other),
    );

    // The images switched: ours, under that driver's name.
    let conf = s.cloud_config();
    let driver = Csi::start(&[
        "--cloud=zvirt",
        "--driver-name=csi.ovirt.org",
        &format!("--cloud-config={}", conf.display()),
        &format!("--node-id={vm}"),
        "--cluster=overcast-it",
        &format!("--device-by-id-dir={}", s.by_id.display()),
    ])
    .await;
    let (mut c, mut n) = (driver.controller().await, driver.node().await);

    // Listed (before: left out — ours were told by the description we write), with its
    // attachment; reported to the orphan check under its PV's name.
    let listed = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries;
    let entry = listed
        .iter()
        .find(|e| e.volume.as_ref().is_some_and(|v| v.volume_id == id))
        .unwrap_or_else(|| panic!("the upstream disk is not listed: {listed:?}"));
    assert_eq!(entry.volume.as_ref().unwrap().capacity_bytes, GIB as i64);
    assert_eq!(
        entry.status.as_ref().unwrap().published_node_ids,
        vec![vm.as_str()]
    );
    // A create that driver began before the switch, repeated to ours: the same disk.
    let mut create = overcast_integration::create_request(PV, GIB as i64);
    create.parameters = parameters("data").into_iter().collect();
    let again = c.create_volume(create).await.unwrap().into_inner();
    assert_eq!(again.volume.unwrap().volume_id, id);
    assert_eq!(s.engine.disks().len(), 1, "{:?}", s.engine.disks());

    // The pods go: ours unmounts what that driver mounted, keeps the other mount, and
    // answers the unstage of a staging path it never mounted.
    n.node_unpublish_volume(overcast_integration::node_unpublish_request(&id, &target))
        .await
        .expect("unpublish");
    assert!(!overcast_integration::is_mount_point(&target));
    n.node_unpublish_volume(overcast_integration::node_unpublish_request(&id, &other))
        .await
        .expect("unpublish of another mount: the volume is not there");
    assert!(overcast_integration::is_mount_point(&other), "kept");
    n.node_unstage_volume(overcast_integration::unstage_request(&id, &staging))
        .await
        .expect("unstage");

    // A new pod while the attachment is still that driver's: staged from its empty
    // context by the disk the id names, and the data is there.
    let staging2 = work.join("plugins/kubernetes.io/csi/csi.ovirt.org/0b3c-2/globalmount");
    let target2 = work.join(format!("pods/p3/volumes/kubernetes.io~csi/{PV}/mount"));
    let empty = std::collections::HashMap::new();
    a_pod_reads(
        &mut n,
        &id,
        &empty,
        &staging2,
        &target2,
        b"written under ovirt-csi-driver",
    )
    .await;

    // Detached, grown, deleted by ours.
    c.controller_unpublish_volume(overcast_integration::detach_request(&id, &vm))
        .await
        .expect("detach");
    assert!(!device.exists(), "the engine unplugged it");
    let grown = c
        .controller_expand_volume(overcast_integration::expand_request(&id, 2 * GIB as i64))
        .await
        .expect("expand")
        .into_inner();
    assert_eq!(grown.capacity_bytes, 2 * GIB as i64);
    c.delete_volume(overcast_integration::delete_request(&id))
        .await
        .expect("delete");
    assert!(s.engine.disks().is_empty(), "{:?}", s.engine.disks());
    overcast_integration::upstream_node::unmount(&other);
}
