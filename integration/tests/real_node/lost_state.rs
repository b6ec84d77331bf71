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
    // kubelet reports the container's restart in the pod's status a few seconds after
    // the restart itself (its status sync), possibly after the pod above is Running.
    let started = std::time::Instant::now();
    while restarts() <= restarts_before && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(500));
    }
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

/// A node plugin without records — an image that lost its node state, or one that never
/// kept any (another driver's, before a switch): what the node plugin recorded is deleted
/// and its pod replaced under a running pod. The pod deleted, its volume is still
/// unmounted (the node calls decide from what the kernel says is mounted: the loop device
/// of the volume's own disk file) and detached — its loop device unbound — and a new pod
/// on the claim gets it back with its data.
pub fn node_plugin_without_records(node: &Node) {
    node.apply(
        "unrecorded",
        &[
            claim(NS, "unrecorded", "overcast-local", "32Mi", false),
            pod(
                NS,
                "unrecorded-1",
                Volume::Claim("unrecorded"),
                "echo kept-without-records > /data/file && sync && sleep 3600",
            ),
        ],
    );
    node.wait_for(
        "the first pod wrote its file",
        Duration::from_secs(180),
        &["-n", NS, "exec", "unrecorded-1", "--", "cat", "/data/file"],
        |out| out.trim() == "kept-without-records",
    );
    let pv = node.kubectl(&[
        "-n",
        NS,
        "get",
        "pvc",
        "unrecorded",
        "-o",
        "jsonpath={.spec.volumeName}",
    ]);
    let handle = node.kubectl(&[
        "get",
        "pv",
        pv.trim(),
        "-o",
        "jsonpath={.spec.csi.volumeHandle}",
    ]);
    let handle = handle.trim().to_owned();
    assert!(
        local_loops().iter().any(|l| l.contains(&handle)),
        "attached: {:?}",
        local_loops()
    );

    // The records go, and the plugin's pod with them (nothing of them in its memory).
    let plugin_dir = node.kubectl(&[
        "-n",
        "kube-system",
        "get",
        "daemonset",
        "overcast-csi-node",
        "-o",
        "jsonpath={.spec.template.spec.volumes[?(@.name==\"plugin-dir\")].hostPath.path}",
    ]);
    let records = std::path::Path::new(plugin_dir.trim()).join("node");
    assert!(
        records.is_dir(),
        "the node plugin's records at {}",
        records.display()
    );
    for entry in std::fs::read_dir(&records).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    node.kubectl(&[
        "-n",
        "kube-system",
        "delete",
        "pod",
        "-l",
        "app.kubernetes.io/component=csi-node",
        "--wait=true",
    ]);
    node.wait_node_plugin_ready("the node plugin back, without records");

    // The pod goes: unmounted, unstaged and detached.
    node.kubectl(&[
        "-n",
        NS,
        "delete",
        "pod",
        "unrecorded-1",
        "--wait=true",
        "--timeout=120s",
    ]);
    node.wait_for(
        "the volume detached once its pod went",
        Duration::from_secs(180),
        &[
            "get",
            "volumeattachment",
            "-o",
            "jsonpath={.items[*].spec.source.persistentVolumeName}",
        ],
        |out| !out.contains(pv.trim()),
    );
    assert!(
        !local_loops().iter().any(|l| l.contains(&handle)),
        "its loop device unbound: {:?}",
        local_loops()
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.lines().any(|l| l.contains(pv.trim())),
        "no mount of the volume left"
    );

    // A new pod: attached, staged and published again, with the data.
    node.apply(
        "unrecorded-2",
        &[pod(
            NS,
            "unrecorded-2",
            Volume::Claim("unrecorded"),
            "sleep 3600",
        )],
    );
    node.wait_for(
        "the data in a new pod after the records were lost",
        Duration::from_secs(180),
        &["-n", NS, "exec", "unrecorded-2", "--", "cat", "/data/file"],
        |out| out.trim() == "kept-without-records",
    );
    one_loop_device_per_disk("after the node plugin lost its records");
}
