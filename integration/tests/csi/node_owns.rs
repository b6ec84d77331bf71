//! The node plugin formats only its volume's own, provably blank disk, and unmounts or
//! removes only what it mounted or created for that volume. Replays issue 12 §2, §3 and
//! the unstage guard of §6 with real loop devices, filesystems and mounts.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Command;

use overcast_integration::csi_v1 as csi;
use overcast_integration::kubelet::Kubelet;
use overcast_integration::*;
use tonic::Code;

fn blkid_type(device: &str) -> String {
    let out = Command::new("blkid")
        .args(["-p", "-s", "TYPE", "-o", "value", device])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The block device the host's root filesystem lives on, if it has one.
fn root_device() -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info.lines().find(|l| l.split(' ').nth(4) == Some("/"))?;
    let numbers = line.split(' ').nth(2)?;
    let uevent = std::fs::read_to_string(format!("/sys/dev/block/{numbers}/uevent")).ok()?;
    uevent
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(|n| format!("/dev/{n}"))
}

#[tokio::test]
async fn only_the_volume_s_own_blank_disk_is_formatted() {
    let csi = Csi::start(&["--device-wait-seconds=1"]).await;
    let mut k = Kubelet::new(&csi).await;
    let id = k.create("own", 16 * MIB).await;
    let ctx = k.attach(&id).await;

    // A publish context that names a device, not this volume's disk: the host's root
    // disk. Refused before anything looks at it.
    if let Some(root) = root_device() {
        let forged = HashMap::from([("devicePath".to_owned(), root.clone())]);
        let err = k.stage(&id, &forged, mount_cap("ext4")).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains("not the disk of volume"), "{err:?}");
    } else {
        say_skipped("the root filesystem has no block device here; the devicePath-only case ran with /dev/loop0 instead");
    }
    let bare = HashMap::from([("devicePath".to_owned(), ctx["devicePath"].clone())]);
    assert_eq!(
        k.stage(&id, &bare, mount_cap("ext4"))
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument,
        "a bare devicePath is refused even when it is the right device"
    );

    // Another volume's disk named for this volume: refused, and that disk stays blank.
    let other = k.create("other", 16 * MIB).await;
    let octx = k.attach(&other).await;
    let err = k.stage(&id, &octx, mount_cap("ext4")).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(blkid_type(&octx["devicePath"]), "");

    // Raw data without a signature blkid knows (a block-mode volume's database, say):
    // "nothing found" is not "blank".
    {
        let mut dev = std::fs::OpenOptions::new()
            .write(true)
            .open(&ctx["devicePath"])
            .unwrap();
        dev.seek(SeekFrom::Start(8192)).unwrap();
        dev.write_all(b"application rows, not a filesystem")
            .unwrap();
        dev.sync_all().unwrap();
    }
    let err = k.stage(&id, &ctx, mount_cap("ext4")).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let mut dev = std::fs::File::open(&ctx["devicePath"]).unwrap();
    let mut buf = [0u8; 34];
    dev.seek(SeekFrom::Start(8192)).unwrap();
    dev.read_exact(&mut buf).unwrap();
    assert_eq!(
        &buf, b"application rows, not a filesystem",
        "the data survived"
    );
    drop(dev);
    assert!(!is_mount_point(&k.staging(&id)));

    // A blank disk someone else holds exclusively: not probed as blank, not formatted.
    let held = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(&octx["devicePath"])
        .unwrap();
    let err = k.stage(&other, &octx, mount_cap("ext4")).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("mounted or held"), "{err:?}");
    drop(held);
    assert_eq!(blkid_type(&octx["devicePath"]), "", "not formatted");

    // Once free, the blank disk is formatted and staged.
    k.stage(&other, &octx, mount_cap("ext4")).await.unwrap();
    assert_eq!(blkid_type(&octx["devicePath"]), "ext4");
    k.unstage(&other).await;
    k.detach(&other).await;
    k.detach(&id).await;
}

#[tokio::test]
async fn unpublish_and_unstage_touch_only_what_the_driver_made() {
    let csi = Csi::start(&[]).await;
    let mut k = Kubelet::new(&csi).await;
    let victims = csi.dir.path().join("victims");
    std::fs::create_dir_all(&victims).unwrap();
    let file = victims.join("victim.txt");
    std::fs::write(&file, b"not the driver's").unwrap();
    let foreign = victims.join("foreign-tmpfs");
    std::fs::create_dir_all(&foreign).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        &foreign,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=1m"),
    )
    .unwrap();
    let unknown = "vol-0123456789abcdef0123456789abcdef";

    // Unknown volume, someone else's file: success (idempotent), and the file stays.
    k.n.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: unknown.into(),
        target_path: file.display().to_string(),
    })
    .await
    .unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), b"not the driver's");
    // Unknown volume, someone else's mount: success, and it stays mounted.
    k.n.node_unstage_volume(csi::NodeUnstageVolumeRequest {
        volume_id: unknown.into(),
        staging_target_path: foreign.display().to_string(),
    })
    .await
    .unwrap();
    assert!(is_mount_point(&foreign));

    // A real volume, staged and published — then the same calls with its id but paths
    // it was never at.
    let id = k.create("real", 16 * MIB).await;
    let ctx = k.attach(&id).await;
    k.stage(&id, &ctx, mount_cap("ext4")).await.unwrap();
    k.publish(&id, &ctx, mount_cap("ext4"), false)
        .await
        .unwrap();
    k.n.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: id.clone(),
        target_path: file.display().to_string(),
    })
    .await
    .unwrap();
    assert!(file.exists());
    k.n.node_unstage_volume(csi::NodeUnstageVolumeRequest {
        volume_id: id.clone(),
        staging_target_path: foreign.display().to_string(),
    })
    .await
    .unwrap();
    assert!(is_mount_point(&foreign));
    assert!(
        is_mount_point(&k.target(&id)),
        "its own target is untouched"
    );

    // §6: unstaging under a live publish is refused; both mounts stay.
    let err =
        k.n.node_unstage_volume(csi::NodeUnstageVolumeRequest {
            volume_id: id.clone(),
            staging_target_path: k.staging(&id).display().to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains(&k.target(&id).display().to_string()));
    assert!(is_mount_point(&k.staging(&id)) && is_mount_point(&k.target(&id)));
    std::fs::write(k.target(&id).join("still-works"), b"x").unwrap();

    // A symlink planted as a target: never followed.
    let link = k.root.join("pods/pod-2/volumes/link");
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&foreign, &link).unwrap();
    let mut req = k.publish_req(&id, &ctx, mount_cap("ext4"), false);
    req.target_path = link.display().to_string();
    let err = k.n.node_publish_volume(req).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    // A target directory holding files is not mounted over.
    let full = k.root.join("pods/pod-3/volumes/full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("precious"), b"x").unwrap();
    let mut req = k.publish_req(&id, &ctx, mount_cap("ext4"), false);
    req.target_path = full.display().to_string();
    let err = k.n.node_publish_volume(req).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(!is_mount_point(&full) && full.join("precious").exists());
    let mounts_of_foreign = |p: &Path| {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.split(' ').nth(4) == Some(p.to_str().unwrap()))
            .count()
    };
    assert_eq!(
        mounts_of_foreign(&foreign),
        1,
        "nothing stacked on the link's target"
    );

    // In order, everything goes, and the victims are as they were.
    k.unpublish(&id).await;
    k.unstage(&id).await;
    k.detach(&id).await;
    assert!(is_mount_point(&foreign));
    assert_eq!(std::fs::read(&file).unwrap(), b"not the driver's");
    assert!(link.is_symlink());
}
