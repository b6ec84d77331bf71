//! A record older than the mount it names: kept across a time the node plugin ran without
//! it (an image that had lost its state, then the old one back), while the volume's disk
//! was detached and came back as another device — whose old name now belongs to another
//! disk.

use overcast_cloud::DiskOfVolume;

use super::*;

#[tokio::test]
async fn an_old_record_does_not_hold_a_mount_of_the_volume_s_own_disk() {
    let n = node();
    n.host.disk(VOL, 1, Content::Blank);
    n.stage(VOL, "ext4").await.unwrap();
    // Detached while the records were elsewhere: the disk is /dev/sd2 now, /dev/sd1 is
    // another volume's, and the staging path holds the volume's disk again.
    n.host.unmount_all(&n.staging()).unwrap();
    n.host
        .disk("another-volume", 1, Content::Filesystem("ext4".into()));
    n.host.disk(VOL, 2, Content::Filesystem("ext4".into()));
    n.host
        .mount_fs(Path::new("/dev/sd2"), &n.staging(), "ext4", &[])
        .unwrap();

    let blind = n.forgetful(DiskOfVolume::Unknown);
    blind
        .state
        .update(VOL, |v| {
            v.staging = Some(n.staging());
            v.device = Some("/dev/sd1".into());
        })
        .unwrap();
    let e = blind.unstage(unstage_req(&n)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert_eq!(
        n.host.mounted_at(&n.staging()),
        1,
        "kept: it cannot be told"
    );

    let node = n.forgetful(DiskOfVolume::Serial);
    node.state
        .update(VOL, |v| {
            v.staging = Some(n.staging());
            v.device = Some("/dev/sd1".into());
        })
        .unwrap();
    node.unstage(unstage_req(&n)).await.unwrap();
    assert_eq!(n.host.mounted_at(&n.staging()), 0);

    // Another disk mounted there under the old record: still refused.
    n.host
        .mount_fs(Path::new("/dev/sd1"), &n.staging(), "ext4", &[])
        .unwrap();
    node.state
        .update(VOL, |v| {
            v.staging = Some(n.staging());
            v.device = Some("/dev/sd3".into());
        })
        .unwrap();
    n.host.disk("third", 3, Content::Blank);
    let e = node.unstage(unstage_req(&n)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert_eq!(n.host.mounted_at(&n.staging()), 1);
}
