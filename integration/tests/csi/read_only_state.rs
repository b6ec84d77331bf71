//! The node's state directory read-only (a read-only mount of it, as a hardened node may
//! give the plugin), with the real binary on real loop devices and mounts (issue 71):
//! the start goes on where the previous release started; unstage and unpublish are
//! served, what they unmounted forgotten in memory; a stage is refused with one error
//! that names the directory, nothing mounted.

use nix::mount::{mount, MsFlags};
use overcast_integration::kubelet::Kubelet;
use overcast_integration::*;
use tonic::Code;

/// Makes `dir` a read-only mount of itself (undone by the driver's cleanup, which
/// unmounts everything under its directory).
fn make_read_only(dir: &std::path::Path) {
    mount(Some(dir), dir, None::<&str>, MsFlags::MS_BIND, None::<&str>).expect("bind");
    mount(
        None::<&str>,
        dir,
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY,
        None::<&str>,
    )
    .expect("remount read-only");
}

#[tokio::test]
async fn a_read_only_node_state_directory_unstages_and_refuses_a_stage_clearly() {
    let mut csi = Csi::start(&[]).await;
    let node_dir = csi.dir.path().join("node");
    let mut k = Kubelet::new(&csi).await;
    let a = k.create("pvc-ro-state-a", 16 * MIB).await;
    let b = k.create("pvc-ro-state-b", 16 * MIB).await;
    let ctx = k.attach(&a).await;
    k.stage(&a, &ctx, mount_cap("ext4")).await.unwrap();
    k.publish(&a, &ctx, mount_cap("ext4"), false).await.unwrap();
    std::fs::write(k.target(&a).join("data"), b"kept").unwrap();

    // The directory as an earlier release left it (its records, no `FORMAT`), then made
    // read-only under a restarted plugin.
    csi.kill9();
    std::fs::remove_file(node_dir.join("FORMAT")).unwrap();
    make_read_only(&node_dir);
    assert!(
        std::fs::write(node_dir.join("probe"), b"").is_err(),
        "the directory is read-only"
    );
    csi.resume().await;
    let log = csi.log_text();
    assert!(
        log.contains("state directory is read-only"),
        "the start says so: {log}"
    );

    let mut k = Kubelet::new(&csi).await;
    // Both unmount and answer (each asked twice by the helpers), the record kept on disk.
    k.unpublish(&a).await;
    k.unstage(&a).await;
    assert!(
        std::fs::read_to_string(node_dir.join("volumes.json"))
            .unwrap()
            .contains(&a),
        "the file is as it was"
    );

    // A stage records before it mounts: refused, naming the directory, nothing mounted.
    let ctx = k.attach(&b).await;
    let refused = k
        .stage(&b, &ctx, mount_cap("ext4"))
        .await
        .expect_err("a stage cannot be recorded");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains("read-only")
            && refused.message().contains(&node_dir.display().to_string()),
        "{}",
        refused.message()
    );
    assert!(!is_mount_point(&k.staging(&b)), "nothing mounted");
}
