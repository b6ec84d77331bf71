//! A volume cinder-csi-plugin made, attached, staged and bound, served by ours under
//! `cinder.csi.openstack.org` after a switch — on the real Cinder and Nova: made and
//! attached by the test exactly as that driver's CreateVolume and ControllerPublish call
//! them, staged and bound at kubelet's paths as its node does; then ours lists it, takes
//! the pod's and the staging mounts away, stages it again from that driver's `DevicePath`
//! context, detaches, grows and deletes it.

use overcast_integration::upstream_node::{a_pod_reads, bind, format_ext4, mount};
use overcast_integration::{csi_v1 as csi, Csi};

use super::*;

async fn volume(cloud: &Cloud, id: &str) -> Value {
    let r = cloud
        .os
        .call(
            Service::BlockStorage,
            "volume_get",
            Method::GET,
            &format!("/volumes/{id}"),
            None,
            None,
        )
        .await
        .unwrap();
    serde_json::from_slice::<Value>(&r.body).unwrap()["volume"].clone()
}

async fn until_status(cloud: &Cloud, id: &str, status: &str) {
    let started = std::time::Instant::now();
    loop {
        let v = volume(cloud, id).await;
        if v["status"] == status {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "{v}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn a_volume_cinder_csi_made_attached_and_mounted_lives_on_with_ours() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let pid = std::process::id();
    let server = cloud.boot(&format!("overcast-it-cinder-{pid}")).await;
    // external-provisioner's PV name; cinder-csi-plugin names the volume after it.
    let pv = format!("overcast-it-pvc-cinder-{pid}");
    // Its CreateVolume (openstack_volumes.go): name, size, zone, its fixed description,
    // its cluster metadata.
    let made = cloud
        .os
        .call(
            Service::BlockStorage,
            "volume_create",
            Method::POST,
            "/volumes",
            Some(&json!({"volume": {
                "name": pv, "size": 1, "availability_zone": "nova",
                "description": "Created by OpenStack Cinder CSI driver",
                "metadata": {"cinder.csi.openstack.org/cluster": "overcast-it"},
            }})),
            None,
        )
        .await
        .unwrap();
    assert_eq!(made.status.as_u16(), 202, "{made:?}");
    let id = serde_json::from_slice::<Value>(&made.body).unwrap()["volume"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    until_status(&cloud, &id, "available").await;
    // Its ControllerPublish: Nova's os-volume_attachments; the VolumeAttachment's
    // attachmentMetadata is the Nova device name.
    let (code, attached) = cloud
        .compute(
            "server_volume_attach",
            Method::POST,
            &format!("/servers/{server}/os-volume_attachments"),
            Some(&json!({"volumeAttachment": {"volumeId": id}})),
        )
        .await;
    assert_eq!(code, 200, "{attached}");
    let device_path = attached["volumeAttachment"]["device"]
        .as_str()
        .unwrap_or("/dev/vdb")
        .to_owned();
    until_status(&cloud, &id, "in-use").await;
    let upstream_context =
        std::collections::HashMap::from([("DevicePath".to_owned(), device_path)]);

    // The guest's disk (Nova's fake driver makes none), formatted and mounted as its
    // node's NodeStage does (FormatAndMount on the staging path), bound into the pod.
    let work = tempfile::tempdir().unwrap();
    let by_id = work.path().join("by-id");
    std::fs::create_dir_all(&by_id).unwrap();
    let disk = GuestDisk::new(work.path(), &by_id, &id, 1 << 30);
    let device = overcast_cloud_local::loopdev::device_path(disk.index);
    let kubelet = work.path().join("kubelet");
    let _unmount = Unmount(kubelet.clone());
    let staging =
        kubelet.join("plugins/kubernetes.io/csi/cinder.csi.openstack.org/3f7a/globalmount");
    let target = kubelet.join(format!("pods/p1/volumes/kubernetes.io~csi/{pv}/mount"));
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::create_dir_all(&target).unwrap();
    format_ext4(&device);
    mount(&device, &staging);
    bind(&staging, &target);
    std::fs::write(target.join("data"), b"written under cinder-csi-plugin").unwrap();

    // The images switched: ours, under that driver's name.
    let conf = cloud_conf_through_login_cache(&cloud.env, work.path());
    let driver = Csi::start(&[
        "--cloud=openstack",
        "--driver-name=cinder.csi.openstack.org",
        &format!("--cloud-config={}", conf.display()),
        &format!("--node-id={server}"),
        "--zone=nova",
        "--cluster=overcast-it",
        &format!("--device-by-id-dir={}", by_id.display()),
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
        .find(|e| e.volume.as_ref().is_some_and(|v| v.volume_id == id))
        .unwrap_or_else(|| panic!("not listed: {listed:?}"));
    assert_eq!(
        entry.status.as_ref().unwrap().published_node_ids,
        vec![server.as_str()]
    );

    // Reported to the orphan check under its PV's name: the volume's name, as that
    // driver (without the provisioner's --extra-create-metadata) records nothing else.
    let discovery = overcast_cloud_openstack::OpenStackDiscovery::new(
        Arc::clone(&cloud.os),
        cloud.disks(),
        "overcast-it".into(),
    );
    use overcast_cloud::discovery::Discovery;
    let reported = discovery
        .cluster_disks()
        .await
        .unwrap()
        .into_iter()
        .find(|d| d.id == id)
        .expect("reported as this cluster's");
    assert_eq!(reported.metadata["csi.storage.k8s.io/pv/name"], pv);

    // The pod goes: the bind, then the staging mount, taken away by ours.
    let e = n
        .node_unstage_volume(overcast_integration::unstage_request(&id, &staging))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    n.node_unpublish_volume(overcast_integration::node_unpublish_request(&id, &target))
        .await
        .expect("unpublish");
    n.node_unstage_volume(overcast_integration::unstage_request(&id, &staging))
        .await
        .expect("unstage");
    assert!(!overcast_integration::is_mount_point(&staging));
    assert!(!overcast_integration::is_mount_point(&target));

    // A new pod while the attachment is still that driver's: staged from its DevicePath
    // context by the disk the id names.
    let target2 = kubelet.join(format!("pods/p2/volumes/kubernetes.io~csi/{pv}/mount"));
    a_pod_reads(
        &mut n,
        &id,
        &upstream_context,
        &staging,
        &target2,
        b"written under cinder-csi-plugin",
    )
    .await;

    // Detached, grown, deleted by ours.
    c.controller_unpublish_volume(overcast_integration::detach_request(&id, &server))
        .await
        .expect("detach");
    assert_eq!(volume(&cloud, &id).await["status"], "available");
    let grown = c
        .controller_expand_volume(overcast_integration::expand_request(&id, 2 << 30))
        .await
        .expect("expand")
        .into_inner();
    assert_eq!(grown.capacity_bytes, 2 << 30);
    c.delete_volume(overcast_integration::delete_request(&id))
        .await
        .expect("delete");
    let gone = cloud
        .os
        .call(
            Service::BlockStorage,
            "volume_get",
            Method::GET,
            &format!("/volumes/{id}"),
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(gone.status.as_u16(), 404);
    drop(disk);
    cloud.delete_server(&server).await;
}

struct Unmount(std::path::PathBuf);
impl Drop for Unmount {
    fn drop(&mut self) {
        overcast_integration::unmount_under(&self.0);
    }
}
