//! A disk is never attached twice: the local cloud's detach reports done only when the
//! kernel has unbound the loop device, publish reuses (or refuses) an existing binding
//! of the disk's file, and delete refuses a file the kernel still reaches. Replays issue
//! 12 §1 with real loop devices, a real ext4 and real mounts.

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use overcast_integration::kubelet::Kubelet;
use overcast_integration::*;
use tonic::Code;

fn files_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

fn autoclear(index: u32) -> String {
    std::fs::read_to_string(format!("/sys/block/loop{index}/loop/autoclear"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn loop_index(ctx: &HashMap<String, String>) -> u32 {
    ctx["devicePath"]
        .strip_prefix("/dev/loop")
        .and_then(|n| n.parse().ok())
        .expect("a loop device path")
}

#[tokio::test]
async fn a_mounted_disk_is_not_detached_nor_attached_twice_and_loses_nothing() {
    let csi = Csi::start(&[]).await;
    let mut k = Kubelet::new(&csi).await;
    let id = k.create("twice", 32 * MIB).await;
    let ctx = k.attach(&id).await;
    k.stage(&id, &ctx, mount_cap("ext4")).await.unwrap();
    k.publish(&id, &ctx, mount_cap("ext4"), false)
        .await
        .unwrap();
    let target = k.target(&id);
    for i in 0..20 {
        std::fs::write(target.join(format!("first-{i}")), b"acknowledged").unwrap();
    }

    // The attacher detaches while the node still has the filesystem mounted: refused
    // after the short wait for a device the node is letting go of (2 s), with the
    // reason, and nothing changed.
    let started = Instant::now();
    let err =
        k.c.controller_unpublish_volume(unpublish_request(&id))
            .await
            .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message().contains(&ctx["devicePath"]) && err.message().contains("mounted"),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "EBUSY is answered once the release wait is over"
    );
    assert_eq!(csi.loops().len(), 1, "still bound");
    assert_eq!(autoclear(loop_index(&ctx)), "0", "no unbind left pending");

    // The volume is still published there, so a second publish is the same attachment,
    // not a second device on the same file.
    let again = k.attach(&id).await;
    assert_eq!(again, ctx);
    assert_eq!(csi.loops().len(), 1);

    // Nor can it be deleted under the mount.
    let err = k.c.delete_volume(delete_request(&id)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert_eq!(csi.disk_files().len(), 1);

    // A second stage elsewhere of the same volume is refused: one filesystem, one mount.
    let other_staging = k.root.join("staging-2");
    std::fs::create_dir_all(&other_staging).unwrap();
    let mut req = k.stage_req(&id, &ctx, mount_cap("ext4"));
    req.staging_target_path = other_staging.display().to_string();
    let err = k.n.node_stage_volume(req).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(!is_mount_point(&other_staging));

    for i in 0..20 {
        std::fs::write(target.join(format!("second-{i}")), b"acknowledged").unwrap();
    }
    k.unpublish(&id).await;
    k.unstage(&id).await;
    k.detach(&id).await;
    assert!(csi.loops().is_empty(), "detached once the node let go");

    // Every acknowledged file is on the disk.
    let ctx = k.attach(&id).await;
    k.stage(&id, &ctx, mount_cap("ext4")).await.unwrap();
    assert_eq!(files_in(&k.staging(&id)), 41, "40 files and lost+found");
    k.unstage(&id).await;
    k.detach(&id).await;
    k.c.delete_volume(delete_request(&id)).await.unwrap();
    assert!(csi.all_disk_dir_files().is_empty());
}

#[tokio::test]
async fn a_device_held_open_is_not_detached_until_it_is_closed() {
    let csi = Csi::start(&[]).await;
    let mut k = Kubelet::new(&csi).await;
    let id = k.create("held", 16 * MIB).await;
    let ctx = k.attach(&id).await;
    let index = loop_index(&ctx);

    // Not mounted, but open (a block-mode pod, a backup tool): LOOP_CLR_FD would only
    // schedule the unbind for the last close.
    let holder = std::fs::File::open(&ctx["devicePath"]).unwrap();
    let err =
        k.c.controller_unpublish_volume(unpublish_request(&id))
            .await
            .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("open in another process"), "{err:?}");
    assert_eq!(csi.loops().len(), 1);
    assert_eq!(
        autoclear(index),
        "0",
        "the refused detach left no unbind pending for the last close"
    );
    // Still attached as far as the cloud is concerned; closing does not unbind it.
    drop(holder);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        csi.loops().len(),
        1,
        "the device stayed bound after the close"
    );
    assert_eq!(k.attach(&id).await, ctx);

    k.detach(&id).await;
    assert!(csi.loops().is_empty());
}

#[tokio::test]
async fn a_binding_nobody_recorded_is_adopted_by_publish_and_blocks_delete() {
    let csi = Csi::start(&[]).await;
    let mut k = Kubelet::new(&csi).await;
    let id = k.create("stray", 16 * MIB).await;
    let file = csi.disks_dir().join(format!("{id}.img"));
    // What a crash between bind and record, or a detach reported too early, leaves.
    let out = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stray = String::from_utf8_lossy(&out.stdout).trim().to_owned();

    let err = k.c.delete_volume(delete_request(&id)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains(&stray), "{err:?}");
    assert!(file.exists(), "a bound file is never unlinked");

    let ctx = k.attach(&id).await;
    assert_eq!(ctx["devicePath"], stray, "the existing binding is reused");
    assert_eq!(csi.loops().len(), 1);

    // A restart finds it recorded and keeps it.
    let mut csi = csi;
    csi.restart().await;
    let mut k = Kubelet::new(&csi).await;
    assert_eq!(k.attach(&id).await, ctx);
    assert_eq!(csi.loops().len(), 1);
    k.detach(&id).await;
    k.c.delete_volume(delete_request(&id)).await.unwrap();
    assert!(csi.loops().is_empty() && csi.all_disk_dir_files().is_empty());
}

#[tokio::test]
async fn a_restart_leaves_an_unrecorded_mounted_binding_alone() {
    let mut csi = Csi::start(&[]).await;
    let mut k = Kubelet::new(&csi).await;
    let id = k.create("leftover", 16 * MIB).await;
    let file = csi.disks_dir().join(format!("{id}.img"));
    let out = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&file)
        .output()
        .unwrap();
    let stray = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(Command::new("mkfs.ext4")
        .args(["-q", &stray])
        .status()
        .unwrap()
        .success());
    let mnt = csi.dir.path().join("by-hand");
    std::fs::create_dir_all(&mnt).unwrap();
    nix::mount::mount(
        Some(stray.as_str()),
        &mnt,
        Some("ext4"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .unwrap();

    // Start-up repair detaches unrecorded bindings, but never one in use: the driver
    // starts, and the mount keeps working.
    csi.restart().await;
    assert_eq!(csi.loops().len(), 1);
    std::fs::write(mnt.join("still-here"), b"x").unwrap();
    let mut k2 = Kubelet::new(&csi).await;
    assert_eq!(
        k2.c.delete_volume(delete_request(&id))
            .await
            .unwrap_err()
            .code(),
        Code::FailedPrecondition
    );
    nix::mount::umount2(&mnt, nix::mount::MntFlags::empty()).unwrap();
    drop(k);
    // The kernel may hold the device a moment after the unmount (CI of issue 72, under
    // load: the restart's repair found it held and rightly kept it): the start below is
    // of a driver whose device no one holds any more.
    released(&csi.loops());
    csi.restart().await;
    assert!(
        csi.loops().is_empty(),
        "unused once unmounted: detached on start"
    );
    let mut k = Kubelet::new(&csi).await;
    k.c.delete_volume(delete_request(&id)).await.unwrap();
}

/// Waits (up to 10 s) until no one holds each of `loops`: an exclusive open of the device
/// succeeds, as it fails while a filesystem on it is still mounted or released.
fn released(loops: &[(u32, std::path::PathBuf)]) {
    use std::os::unix::fs::OpenOptionsExt;
    let until = Instant::now() + Duration::from_secs(10);
    for (n, _) in loops {
        let device = format!("/dev/loop{n}");
        while std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_EXCL.bits())
            .open(&device)
            .is_err()
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
