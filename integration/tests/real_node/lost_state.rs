//! The driver's own state lost or half-done, on the real node: the controller's pod
//! replaced under attached volumes (its loop devices then show `/disks/vol-….img`), and
//! the node plugin killed in the middle of a volume's first mkfs.

use std::collections::BTreeMap;
use std::time::Duration;

use overcast_integration::real_node::{claim, local_loops, pod, Node, Volume};

use super::NS;

/// Every disk file is bound to one loop device at most: two devices caching one file
/// are two writers on one filesystem.
pub fn one_loop_device_per_disk(what: &str) {
    let mut per_file: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in local_loops() {
        let device = line.split(':').next().unwrap_or_default().to_owned();
        let file = line
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .trim_end_matches(')')
            .to_owned();
        per_file.entry(file).or_default().push(device);
    }
    let doubled: Vec<_> = per_file.iter().filter(|(_, d)| d.len() > 1).collect();
    assert!(
        doubled.is_empty(),
        "{what}: a disk bound twice: {doubled:?}"
    );
}

/// After the controller's pod was replaced (`controller_deleted_mid_provisioning`), the
/// volumes it had attached keep their one device each, and the xfs claim grows again
/// in its running pod: the device the mount is on is the one that grows.
pub fn grows_after_the_controller_was_replaced(node: &Node) {
    one_loop_device_per_disk("after the controller's pod was replaced");
    let size_kib = |out: &str| -> u64 {
        out.lines()
            .last()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let before = size_kib(&node.kubectl(&["-n", NS, "exec", "grows", "--", "df", "-k", "/data"]));
    node.kubectl(&[
        "-n",
        NS,
        "patch",
        "pvc",
        "grows",
        "--type=merge",
        "-p",
        r#"{"spec":{"resources":{"requests":{"storage":"900Mi"}}}}"#,
    ]);
    node.wait_for(
        "the pod sees its filesystem grown after the controller was replaced",
        Duration::from_secs(180),
        &["-n", NS, "exec", "grows", "--", "df", "-k", "/data"],
        |out| size_kib(out) > before + 200 * 1024,
    );
    one_loop_device_per_disk("after the growth");
}

/// The node plugin killed in the middle of a new volume's first mkfs (the
/// `kill-during-mkfs` fault point, armed through the DaemonSet's environment, fires
/// once): kubelet's retry reaches the restarted plugin, which formats the disk again,
/// and the pod runs on a clean filesystem.
pub fn node_plugin_killed_during_first_mkfs(node: &Node) {
    let restarts = || -> u64 {
        node.kubectl(&[
            "-n",
            "kube-system",
            "get",
            "pod",
            "-l",
            "app.kubernetes.io/component=csi-node",
            "-o",
            "jsonpath={.items[0].status.containerStatuses[?(@.name==\"csi\")].restartCount}",
        ])
        .trim()
        .parse()
        .unwrap_or(0)
    };
    node.kubectl(&[
        "-n",
        "kube-system",
        "set",
        "env",
        "daemonset/overcast-csi-node",
        "-c",
        "csi",
        "OVERCAST_FAULTS=kill-during-mkfs",
    ]);
    node.kubectl(&[
        "-n",
        "kube-system",
        "rollout",
        "status",
        "daemonset/overcast-csi-node",
        "--timeout=180s",
    ]);
    let restarts_before = restarts();
    node.apply(
        "mkfs-killed",
        &[
            claim(NS, "mkfs-killed", "overcast-local", "32Mi", false),
            pod(
                NS,
                "mkfs-killed",
                Volume::Claim("mkfs-killed"),
                "echo formatted-again > /data/file && sync && sleep 3600",
            ),
        ],
    );
    node.wait_for(
        "the pod Running on a volume whose first format was killed",
        Duration::from_secs(240),
        &["-n", NS, "exec", "mkfs-killed", "--", "cat", "/data/file"],
        |out| out.trim() == "formatted-again",
    );
    assert!(
        restarts() > restarts_before,
        "the fault point killed the node plugin during mkfs"
    );
    let mounted = node.kubectl(&["-n", NS, "exec", "mkfs-killed", "--", "mount"]);
    assert!(
        mounted
            .lines()
            .any(|l| l.contains(" /data ") && l.contains("ext4") && l.contains("rw")),
        "a writable ext4 at /data: {mounted}"
    );
    node.kubectl(&[
        "-n",
        "kube-system",
        "set",
        "env",
        "daemonset/overcast-csi-node",
        "-c",
        "csi",
        "OVERCAST_FAULTS-",
    ]);
    node.kubectl(&[
        "-n",
        "kube-system",
        "rollout",
        "status",
        "daemonset/overcast-csi-node",
        "--timeout=180s",
    ]);
    one_loop_device_per_disk("after the node plugin was killed during mkfs");
}
