//! What the upstream node plugins leave on a node that switches to ours, at their own
//! mount layouts (docs/migrate/): cinder-csi-plugin and vsphere-csi-driver mount the
//! device at the staging path and bind it into the pod; the oVirt and DVP drivers never
//! mount the staging path — they mount the device straight onto the pod's target. Their
//! attachments' publish contexts: cinder's Nova `DevicePath`, the oVirt and DVP drivers'
//! empty one, vSphere's `diskUUID`.

use overcast_cloud::DiskOfVolume;

use super::*;

fn ctx(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

impl Node {
    async fn stage_with(
        &self,
        node: &NodeService,
        publish_context: HashMap<String, String>,
    ) -> Result<(), tonic::Status> {
        node.stage(csi::NodeStageVolumeRequest {
            volume_id: VOL.into(),
            staging_target_path: self.staging().display().to_string(),
            publish_context,
            volume_capability: Some(mount_cap("ext4")),
            ..Default::default()
        })
        .await
        .map(|_| ())
    }
}

/// The oVirt/DVP layout: the device mounted on the target, the staging path empty. On a
/// cloud whose ids name their disks (zVirt), ours takes the target's mount away and
/// answers the unstage; on one whose ids do not (DVP), it refuses and keeps the mount.
#[tokio::test]
async fn a_device_the_ovirt_driver_mounted_on_the_target_is_unpublished() {
    let n = node();
    n.host.disk(VOL, 1, Content::Filesystem("ext4".into()));
    std::fs::create_dir_all(n.staging()).unwrap();
    std::fs::create_dir_all(n.target()).unwrap();
    n.host
        .mount_fs(Path::new("/dev/sd1"), &n.target(), "ext4", &[])
        .unwrap();

    let dvp = n.forgetful(DiskOfVolume::Unknown);
    let e = dvp.unpublish(unpublish_req(&n)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert_eq!(n.host.mounted_at(&n.target()), 1, "kept: it cannot be told");

    let zvirt = n.forgetful(DiskOfVolume::Serial);
    zvirt.unpublish(unpublish_req(&n)).await.unwrap();
    assert_eq!(n.host.mounted_at(&n.target()), 0);
    assert!(
        !n.target().exists(),
        "the empty target directory is removed"
    );
    // Its staging path holds nothing: unstaged at once, and the disk may be detached.
    zvirt.unstage(unstage_req(&n)).await.unwrap();
    assert!(n.host.mounts.lock().unwrap().is_empty());
}

/// The cinder-csi/vsphere-csi layout: staged on the staging path, bound into the pod. The
/// unstage waits for the pod's bind to go, then both go.
#[tokio::test]
async fn a_volume_cinder_csi_staged_and_bound_is_unpublished_then_unstaged() {
    let n = node();
    n.host.disk(VOL, 1, Content::Filesystem("ext4".into()));
    std::fs::create_dir_all(n.staging()).unwrap();
    std::fs::create_dir_all(n.target()).unwrap();
    n.host
        .mount_fs(Path::new("/dev/sd1"), &n.staging(), "ext4", &[])
        .unwrap();
    n.host.bind(&n.staging(), &n.target(), false, &[]).unwrap();

    let openstack = n.forgetful(DiskOfVolume::Serial);
    let e = openstack.unstage(unstage_req(&n)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert_eq!(n.host.mounted_at(&n.staging()), 1);
    openstack.unpublish(unpublish_req(&n)).await.unwrap();
    openstack.unstage(unstage_req(&n)).await.unwrap();
    assert!(n.host.mounts.lock().unwrap().is_empty());
}

/// A volume another driver attached, staged by ours after the switch (a pod started on
/// it): the attachment's context is that driver's. Cinder's Nova device name and the
/// oVirt driver's empty context name no disk; the volume's id does (its serial). On DVP
/// the id does not, and the stage says how to get an attachment ours can read.
#[tokio::test]
async fn a_volume_another_driver_attached_stages_by_the_disk_its_id_names() {
    for context in [ctx(&[("DevicePath", "/dev/vdb")]), ctx(&[])] {
        let n = node();
        n.host.disk(VOL, 1, Content::Filesystem("ext4".into()));
        let openstack = n.forgetful(DiskOfVolume::Serial);
        n.stage_with(&openstack, context.clone()).await.unwrap();
        assert_eq!(n.host.mounted_at(&n.staging()), 1);
        let record = openstack.state.get(VOL).unwrap();
        assert_eq!(record.device.as_deref(), Some(Path::new("/dev/sd1")));

        let m = node();
        m.host.disk(VOL, 1, Content::Filesystem("ext4".into()));
        let dvp = m.forgetful(DiskOfVolume::Unknown);
        let e = m.stage_with(&dvp, context.clone()).await.unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
        assert!(e.message().contains("drain the node"), "{e}");
        assert_eq!(m.host.mounted_at(&m.staging()), 0);
    }
    // Ours with a devicePath alone is still refused: it names a device, not the disk.
    let n = node();
    n.host.disk(VOL, 1, Content::Blank);
    let openstack = n.forgetful(DiskOfVolume::Serial);
    let e = n
        .stage_with(&openstack, ctx(&[("devicePath", "/dev/sd1")]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(n.host.formatted.lock().unwrap().is_empty());
}

/// On a cloud whose ids do not name their disks (vSphere, DVP), a mount with no record
/// is the volume's when its attachment to this node — the VolumeAttachment kubelet reads
/// — names the disk mounted: then it is unmounted; an attachment naming no disk
/// (another driver's empty context) or none at all leaves it refused and kept.
#[tokio::test]
async fn without_records_the_attachment_names_the_disk_where_the_id_does_not() {
    use super::super::attachment::Attachments;
    let fixed = |context: Option<&[(&str, &str)]>| {
        Attachments::Fixed(
            context
                .map(|c| HashMap::from([(VOL.to_owned(), ctx(c))]))
                .unwrap_or_default(),
        )
    };
    // (its attachment's context, whether the mount goes, the answer's code)
    for (attachment, unmounted, code) in [
        (None, false, Code::FailedPrecondition),
        (Some(&[][..]), false, Code::FailedPrecondition),
        // Another disk named: the volume is not at that path (the spec's OK), and the
        // mount stays.
        (Some(&[("serial", "another-disk")][..]), false, Code::Ok),
        (Some(&[("serial", "md5-of-the-uid")][..]), true, Code::Ok),
    ] {
        let n = node();
        n.host
            .disk("md5-of-the-uid", 1, Content::Filesystem("ext4".into()));
        n.host
            .disk("another-disk", 2, Content::Filesystem("ext4".into()));
        std::fs::create_dir_all(n.target()).unwrap();
        n.host
            .mount_fs(Path::new("/dev/sd1"), &n.target(), "ext4", &[])
            .unwrap();
        let dvp = n
            .forgetful(DiskOfVolume::Unknown)
            .with_attachments(fixed(attachment));
        let answer = dvp.unpublish(unpublish_req(&n)).await;
        assert_eq!(
            answer.as_ref().err().map_or(Code::Ok, |e| e.code()),
            code,
            "{attachment:?}: {answer:?}"
        );
        assert_eq!(
            n.host.mounted_at(&n.target()),
            usize::from(!unmounted),
            "{attachment:?}"
        );
    }
}
