//! A rolling upgrade on the real node: the suite of an earlier release (its images, made
//! by `.ci/run` from that release's binaries with its own `build.sh` and Dockerfiles, and
//! its own overlay) and a pod writing into a volume that release provisioned, attached,
//! staged and published; then `kubectl apply -k` of this release's overlay, as
//! docs/deploy.md says to upgrade: the Deployments and the node DaemonSet roll, and the
//! pod — reading its file every second, and exiting (a restart kubelet counts) the moment
//! it cannot — keeps running through it. The main test goes on from there with this
//! release: the pod deleted (the earlier release's mounts unpublished and unstaged, the
//! volume detached, by this release) and a new pod mounting the volume. Before that, the
//! way back: the earlier release applied again over this one (as docs/deploy.md says a
//! downgrade meets: its node plugin finds this release's `volumes.json` unreadable, sets
//! it aside and serves from what is mounted), then this release again — the pod running
//! and reading through both rolls.

use std::time::Duration;

use overcast_integration::real_node::{claim, pod, Node, Volume};
use overcast_integration::release;

/// The release the cluster is upgraded from.
pub const RELEASE: &str = "688adc9";

/// The pod that writes its file and then reads it every second, exiting when it cannot.
pub const WRITER: &str =
    "echo hello-from-a-pod > /data/file && sync && while cat /data/file > /dev/null; do sleep 1; done; exit 1";

/// The earlier release installed and the writer running on a volume of its making: the
/// writer's uid; `None` (said skipped) without that release's binaries or images — the
/// main test then installs this release alone.
pub fn an_earlier_release_with_a_writer(node: &Node, ns: &str) -> Option<String> {
    let what = "the rolling upgrade on the real node";
    let old = release::get(RELEASE, what)?;
    let images = old.images(what)?;
    node.install_release(&old, &images);
    let _ = node.try_kubectl(&["create", "namespace", ns]);
    node.apply(
        "writer",
        &[
            claim(ns, "data", "overcast-local", "64Mi", false),
            pod(ns, "writer", Volume::Claim("data"), WRITER),
        ],
    );
    node.wait_for(
        "the pod Running with its volume (the earlier release's)",
        Duration::from_secs(180),
        &[
            "-n",
            ns,
            "get",
            "pod",
            "writer",
            "-o",
            "jsonpath={.status.phase}",
        ],
        |out| out.trim() == "Running",
    );
    node.wait_for(
        "the pod wrote its file",
        Duration::from_secs(30),
        &["-n", ns, "exec", "writer", "--", "cat", "/data/file"],
        |out| out.trim() == "hello-from-a-pod",
    );
    // The node plugin serving it is that release's.
    let images = node.kubectl(&[
        "-n",
        "kube-system",
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/component=csi-node",
        "-o",
        "jsonpath={.items[*].spec.containers[*].image}",
    ]);
    assert!(images.contains(&format!(":{RELEASE}")), "{images}");
    Some(node.kubectl(&[
        "-n",
        ns,
        "get",
        "pod",
        "writer",
        "-o",
        "jsonpath={.metadata.uid}",
    ]))
}

/// After this release's apply rolled out: the same writer pod, never restarted, still
/// reading its data, and every pod of the suite this release's.
pub fn the_writer_kept_its_volume_through_the_roll(node: &Node, ns: &str, uid: &str) {
    only_pods_of(
        node,
        |images| !images.contains(&format!(":{RELEASE}")),
        "the earlier",
    );
    the_writer_still_reads(node, ns, uid, "the upgrade", true);
}

/// The earlier release applied over this one, then this one again: the writer the same
/// pod, reading, through both.
pub fn and_through_a_downgrade_and_back(node: &Node, ns: &str, uid: &str) {
    let what = "the downgrade on the real node";
    let old = release::get(RELEASE, what).expect("the release the upgrade started from");
    let images = old.images(what).expect("its images");
    node.install_release(&old, &images);
    // Every image of ours the earlier release's (the sidecars' are the same in both).
    only_pods_of(
        node,
        |images| {
            images
                .split_whitespace()
                .filter(|i| i.starts_with("localhost/overcast-"))
                .all(|i| i.ends_with(&format!(":{RELEASE}")))
        },
        "this",
    );
    the_writer_still_reads(node, ns, uid, "the downgrade", false);
    node.install();
    only_pods_of(
        node,
        |images| !images.contains(&format!(":{RELEASE}")),
        "the earlier",
    );
    the_writer_still_reads(node, ns, uid, "the upgrade after the downgrade", true);
}

/// Waits until the suite's pods' images satisfy `only` (rolled out: an old pod may still
/// be terminating a moment); `whose` names the release that must be gone.
fn only_pods_of(node: &Node, only: impl Fn(&str) -> bool, whose: &str) {
    node.wait_for(
        &format!("no pod of {whose} release left"),
        Duration::from_secs(60),
        &[
            "-n",
            "kube-system",
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=overcast",
            "-o",
            "jsonpath={.items[*].spec.containers[*].image}",
        ],
        only,
    );
}

/// The writer `uid` Running, never restarted, its file read; and, after this release's
/// roll, every disk on one loop device (a file bound twice is two caches of one disk).
/// 688adc9's controller binds the writer's disk again when it starts (its start-up
/// matched devices by path, and the device this release's pod bound shows another):
/// after the downgrade there are two, which this release's next start repairs.
fn the_writer_still_reads(node: &Node, ns: &str, uid: &str, through: &str, ours: bool) {
    let loops = std::panic::catch_unwind(|| {
        if ours {
            super::lost_state::one_loop_device_per_disk(&format!("after {through}"))
        }
    });
    if let Err(e) = loops {
        let logs = node
            .try_kubectl(&[
                "-n",
                "kube-system",
                "logs",
                "deployment/overcast-csi-controller",
                "-c",
                "csi",
                "--tail=200",
            ])
            .unwrap_or_else(|e| e);
        eprintln!("the csi controller's log after {through}:\n{logs}");
        std::panic::resume_unwind(e);
    }
    let state = node.kubectl(&[
        "-n",
        ns,
        "get",
        "pod",
        "writer",
        "-o",
        "jsonpath={.metadata.uid} {.status.phase} {.status.containerStatuses[0].restartCount}",
    ]);
    assert_eq!(
        state.trim(),
        format!("{uid} Running 0"),
        "the writer did not keep its volume through {through}"
    );
    assert_eq!(
        node.kubectl(&["-n", ns, "exec", "writer", "--", "cat", "/data/file"])
            .trim(),
        "hello-from-a-pod"
    );
}
