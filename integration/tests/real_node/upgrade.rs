//! A rolling upgrade on the real node: the suite of an earlier release (its images, made
//! by `.ci/run` from that release's binaries with its own `build.sh` and Dockerfiles, and
//! its own overlay) and a pod writing into a volume that release provisioned, attached,
//! staged and published; then `kubectl apply -k` of this release's overlay, as
//! docs/deploy.md says to upgrade: the Deployments and the node DaemonSet roll, and the
//! pod — reading its file every second, and exiting (a restart kubelet counts) the moment
//! it cannot — keeps running through it. The main test goes on from there with this
//! release: the pod deleted (the earlier release's mounts unpublished and unstaged, the
//! volume detached, by this release) and a new pod mounting the volume.

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
    // Asked for, not yet in CI: in its one CI run (CI25) every check of the upgrade held,
    // and the zVirt fencing phase at the end of the same test then failed (its pod left
    // Pending: "running PreFilter plugin VolumeBinding"), which the runs without the
    // upgrade pass. Until that is understood it runs only when asked.
    if std::env::var_os("OVERCAST_TEST_ROLLING_UPGRADE").is_none() {
        overcast_integration::say_skipped(&format!(
            "set OVERCAST_TEST_ROLLING_UPGRADE=1 to run {what} (not yet in CI: the zVirt \
             fencing phase after it failed in its one CI run, not yet understood)"
        ));
        return None;
    }
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
    // (Rolled out: an old pod may still be terminating a moment.)
    node.wait_for(
        "no pod of the earlier release left",
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
        |images| !images.contains(&format!(":{RELEASE}")),
    );
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
        "the writer did not keep its volume through the upgrade"
    );
    assert_eq!(
        node.kubectl(&["-n", ns, "exec", "writer", "--", "cat", "/data/file"])
            .trim(),
        "hello-from-a-pod"
    );
}
