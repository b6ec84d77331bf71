//! A volume vsphere-csi-driver's node staged and bound, met by ours after a switch under
//! the same name (`csi.vsphere.vmware.com`), on vcsim with the test playing the ESXi host
//! and the guest. The volume is ours' CNS volume (ours makes it as that driver's
//! CreateVolume does: docs/migrate/vsphere.md); what is that driver's is the node's
//! layout (the device mounted on the staging path, bound into the pod) and the
//! attachment's publish context (`type` and `diskUUID`, no `wwn`). Without a record, ours
//! cannot tell from the id that such a mount is the volume's (the CNS id does not name the
//! disk): with no VolumeAttachment to read it refuses and keeps the mount; with that
//! driver's VolumeAttachment in the API (the kit's, when `OVERCAST_TEST_KUBECONFIG` is
//! set) its `diskUUID` names the disk, and both mounts are taken away — the live switch.
//! A new pod then stages from that driver's context — its `diskUUID` read as the WWN —
//! with the data.

use overcast_integration::upstream_node::{a_pod_reads, bind, format_ext4, mount, unmount};
use overcast_integration::{csi_v1 as csi, mount_cap, Csi};

use super::*;

struct Cleanup(std::path::PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        overcast_integration::unmount_under(&self.0);
        overcast_integration::detach_loops_under(&self.0);
    }
}

#[tokio::test]
async fn a_volume_vsphere_csi_staged_and_bound_goes_by_its_attachment_and_stages_from_its_context()
{
    let Some(sim) = Vcsim::start("a volume vsphere-csi-driver staged, with ours", &[]) else {
        return;
    };
    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let (vm_name, vm) = super::sim::vms(&admin).await[0].clone();
    // A Node's name (vcsim's VM names are not: upper case, underscores) as the guest's
    // host name, which is how the driver finds a node's VM.
    let node = "worker-upstream".to_owned();
    super::sim::reconfigure(
        &admin,
        &vm,
        &super::sim::Guest {
            host_name: &node,
            ip: "10.0.0.99",
            guest_id: "otherLinux64Guest",
            cpus: 2,
            memory_mb: 2048,
        },
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let _cleanup = Cleanup(dir.path().to_owned());
    let by_id = dir.path().join("by-id");
    std::fs::create_dir_all(&by_id).unwrap();
    let conf = dir.path().join("vsphere.conf");
    std::fs::write(
        &conf,
        format!(
            "[Global]\nport = {}\nca-file = {}\n[VirtualCenter \"127.0.0.1\"]\nuser = k8s\n\
             password = pw\ndatacenters = DC0\n",
            sim.port,
            sim.ca_file.display()
        ),
    )
    .unwrap();
    let kubeconfig = overcast_integration::real::kubeconfig("the node reading a VolumeAttachment");
    let mut args = vec![
        "--cloud=vsphere".to_owned(),
        "--driver-name=csi.vsphere.vmware.com".to_owned(),
        format!("--cloud-config={}", conf.display()),
        format!("--node-id={node}"),
        "--cluster=overcast-it".to_owned(),
        format!("--device-by-id-dir={}", by_id.display()),
    ];
    if let Some(path) = &kubeconfig {
        args.push(format!("--kubeconfig={path}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let driver = Csi::start(&args).await;
    let (mut c, mut n) = (driver.controller().await, driver.node().await);
    let id = c
        .create_volume(overcast_integration::create_request(
            "pvc-vsphere-upstream",
            1 << 30,
        ))
        .await
        .expect("create")
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let ours = c
        .controller_publish_volume(overcast_integration::attach_request(
            &id,
            &node,
            mount_cap("ext4"),
        ))
        .await
        .expect("attach")
        .into_inner()
        .publish_context;
    let uuid = ours["diskUUID"].clone();
    super::sim::plug_disk(&admin, &vm, &vm_name, &id, &uuid).await;
    let file = dir.path().join("disk.img");
    std::fs::File::create(&file)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let index = overcast_cloud_local::loopdev::attach(&file, false, "overcast-it-vsphere").unwrap();
    let device = overcast_cloud_local::loopdev::device_path(index);
    std::os::unix::fs::symlink(&device, by_id.join(format!("wwn-0x{uuid}"))).unwrap();
    // That driver's VolumeAttachment: its context has no `wwn`.
    let upstream_context: std::collections::HashMap<String, String> = [
        ("type".to_owned(), "vSphere CNS Block Volume".to_owned()),
        ("diskUUID".to_owned(), uuid.clone()),
    ]
    .into();

    // Its node: the device formatted and mounted on the staging path, bound into the pod.
    let kubelet = dir.path().join("kubelet");
    let staging = kubelet.join("plugins/kubernetes.io/csi/csi.vsphere.vmware.com/8b2c/globalmount");
    let target = kubelet.join("pods/p1/volumes/kubernetes.io~csi/pvc-vsphere-upstream/mount");
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::create_dir_all(&target).unwrap();
    format_ext4(&device);
    mount(&device, &staging);
    bind(&staging, &target);
    std::fs::write(target.join("data"), b"written under vsphere-csi-driver").unwrap();

    // No record, an id that does not name the disk: refused, and both mounts kept.
    for e in [
        n.node_unpublish_volume(overcast_integration::node_unpublish_request(&id, &target))
            .await
            .map(|_| ())
            .unwrap_err(),
        n.node_unstage_volume(overcast_integration::unstage_request(&id, &staging))
            .await
            .map(|_| ())
            .unwrap_err(),
    ] {
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    }
    assert!(overcast_integration::is_mount_point(&target));
    assert!(overcast_integration::is_mount_point(&staging));

    match &kubeconfig {
        // That driver's VolumeAttachment, as the attach/detach controller names it and
        // external-attacher answers it: its diskUUID names the mounted disk.
        Some(path) => {
            use k8s_openapi::api::storage::v1::VolumeAttachment;
            use kube::api::{Patch, PatchParams, PostParams};
            let client = overcast_integration::real::client(path).await;
            let vas: kube::Api<VolumeAttachment> = kube::Api::all(client);
            let name = overcast_csi::node::attachment::attachment_name(
                &id,
                "csi.vsphere.vmware.com",
                &node,
            );
            let _ = vas.delete(&name, &Default::default()).await;
            let va: VolumeAttachment = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"attacher": "csi.vsphere.vmware.com", "nodeName": node,
                    "source": {"persistentVolumeName": "pvc-vsphere-upstream"}},
            }))
            .unwrap();
            vas.create(&PostParams::default(), &va).await.unwrap();
            vas.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"status": {"attached": true,
                    "attachmentMetadata": upstream_context}})),
            )
            .await
            .unwrap();
            n.node_unpublish_volume(overcast_integration::node_unpublish_request(&id, &target))
                .await
                .expect("unpublish by the attachment's diskUUID");
            n.node_unstage_volume(overcast_integration::unstage_request(&id, &staging))
                .await
                .expect("unstage by the attachment's diskUUID");
            assert!(!overcast_integration::is_mount_point(&target));
            assert!(!overcast_integration::is_mount_point(&staging));
            vas.delete(&name, &Default::default()).await.unwrap();
        }
        // No API (said skipped above): drained while that driver's plugin still ran, it
        // unmounted its own.
        None => {
            unmount(&target);
            unmount(&staging);
        }
    }
    // A new pod on the same attachment stages from that driver's context.
    let target2 = kubelet.join("pods/p2/volumes/kubernetes.io~csi/pvc-vsphere-upstream/mount");
    a_pod_reads(
        &mut n,
        &id,
        &upstream_context,
        &staging,
        &target2,
        b"written under vsphere-csi-driver",
    )
    .await;
    c.controller_unpublish_volume(overcast_integration::detach_request(&id, &node))
        .await
        .expect("detach");
    super::sim::unplug_disk(&admin, &vm, &id).await;
    c.delete_volume(overcast_integration::delete_request(&id))
        .await
        .expect("delete");
    let listed = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert!(listed
        .iter()
        .all(|e| e.volume.as_ref().is_some_and(|v| v.volume_id != id)));
}
