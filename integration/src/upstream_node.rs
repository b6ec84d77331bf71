//! What an upstream node plugin leaves on a node, played by the switch tests
//! (docs/migrate/): a filesystem made and mounted as its NodeStage/NodePublish do
//! (cinder-csi and vsphere-csi on the staging path, bound into the pod; the oVirt and DVP
//! drivers straight onto the pod's target), and the pod a switched node serves next.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use crate::{mount_cap, NodeClient};

/// Runs `cmd`, panicking with what it said when it fails.
pub fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {out:?}");
}

/// ext4 on `device`, as the upstream's NodeStage formats a blank disk.
pub fn format_ext4(device: &Path) {
    run_ok(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(device));
}

/// `device` mounted at `at`.
pub fn mount(device: &Path, at: &Path) {
    run_ok(Command::new("mount").arg(device).arg(at));
}

/// `from` bound at `to` (a pod's target of a staged volume).
pub fn bind(from: &Path, to: &Path) {
    run_ok(Command::new("mount").arg("--bind").arg(from).arg(to));
}

pub fn unmount(at: &Path) {
    run_ok(Command::new("umount").arg(at));
}

/// A new pod on volume `id` through our node plugin, with the attachment's `context`:
/// staged at `staging`, published at `target`, its `data` file read back, then
/// unpublished and unstaged.
pub async fn a_pod_reads(
    n: &mut NodeClient,
    id: &str,
    context: &HashMap<String, String>,
    staging: &Path,
    target: &Path,
    data: &[u8],
) {
    std::fs::create_dir_all(staging).unwrap();
    n.node_stage_volume(crate::stage_request(
        id,
        context,
        staging,
        mount_cap("ext4"),
    ))
    .await
    .unwrap_or_else(|e| panic!("stage with the context {context:?}: {e:?}"));
    n.node_publish_volume(crate::node_publish_request(
        id,
        context,
        staging,
        target,
        mount_cap("ext4"),
    ))
    .await
    .expect("publish");
    assert_eq!(std::fs::read(target.join("data")).unwrap(), data);
    n.node_unpublish_volume(crate::node_unpublish_request(id, target))
        .await
        .expect("unpublish");
    n.node_unstage_volume(crate::unstage_request(id, staging))
        .await
        .expect("unstage");
}
