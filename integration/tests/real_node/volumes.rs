//! Volumes beyond the first claim: growth in a running pod, a raw device, and the
//! controller replaced while it provisions.

use std::time::Duration;

use overcast_integration::real_node::{claim, disk_files, pod, Node, Volume};

use super::NS;

/// An xfs claim (online ext4 growth needs CAP_SYS_RESOURCE, which these machines
/// withhold) expanded while its pod runs: the pod sees the new size.
pub fn expand_in_a_running_pod(node: &Node) {
    let class = r#"apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: overcast-it-xfs}
provisioner: local.csi.overcast.dev
volumeBindingMode: WaitForFirstConsumer
allowVolumeExpansion: true
parameters: {csi.storage.k8s.io/fstype: xfs}
"#;
    node.apply(
        "grows",
        &[
            class.to_owned(),
            claim(NS, "grows", "overcast-it-xfs", "300Mi", false),
            pod(NS, "grows", Volume::Claim("grows"), "sleep 3600"),
        ],
    );
    let size_kib = |out: &str| -> u64 {
        out.lines()
            .last()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let before = size_kib(&node.wait_for(
        "the xfs pod Running",
        Duration::from_secs(180),
        &["-n", NS, "exec", "grows", "--", "df", "-k", "/data"],
        |out| out.contains("/data"),
    ));
    node.kubectl(&[
        "-n",
        NS,
        "patch",
        "pvc",
        "grows",
        "--type=merge",
        "-p",
        r#"{"spec":{"resources":{"requests":{"storage":"600Mi"}}}}"#,
    ]);
    node.wait_for(
        "the pod sees the grown filesystem",
        Duration::from_secs(180),
        &["-n", NS, "exec", "grows", "--", "df", "-k", "/data"],
        |out| size_kib(out) > before + 200 * 1024,
    );
    node.wait_for(
        "the claim's capacity",
        Duration::from_secs(60),
        &[
            "-n",
            NS,
            "get",
            "pvc",
            "grows",
            "-o",
            "jsonpath={.status.capacity.storage}",
        ],
        |out| out.trim() == "600Mi",
    );
}

/// A block-mode claim used as a raw device: what is written at an offset reads back.
pub fn raw_block_device(node: &Node) {
    node.apply(
        "raw",
        &[
            claim(NS, "raw", "overcast-local", "32Mi", true),
            pod(
                NS,
                "raw",
                Volume::Block("raw"),
                "echo raw-bytes | dd of=/dev/xvda bs=512 seek=2048 conv=fsync && sleep 3600",
            ),
        ],
    );
    node.wait_for(
        "the raw device reads back what was written",
        Duration::from_secs(180),
        &[
            "-n",
            NS,
            "exec",
            "raw",
            "--",
            "sh",
            "-c",
            "dd if=/dev/xvda bs=512 skip=2048 count=1 2>/dev/null | head -c 9",
        ],
        |out| out == "raw-bytes",
    );
}

/// The csi controller's pod deleted right after a claim is made (while the provisioner
/// may be provisioning it): the claim still gets one volume once a new controller runs,
/// and the node holds exactly one disk file per PersistentVolume — nothing leaked.
pub fn controller_deleted_mid_provisioning(node: &Node) {
    node.apply(
        "again",
        &[
            claim(NS, "again", "overcast-local", "32Mi", false),
            pod(
                NS,
                "again",
                Volume::Claim("again"),
                "echo again > /data/file && sleep 3600",
            ),
        ],
    );
    node.kubectl(&[
        "-n",
        "kube-system",
        "delete",
        "pod",
        "-l",
        "app.kubernetes.io/component=csi-controller",
        "--wait=false",
    ]);
    node.wait_for(
        "the claim's pod Running after the controller was replaced",
        Duration::from_secs(240),
        &["-n", NS, "exec", "again", "--", "cat", "/data/file"],
        |out| out.trim() == "again",
    );
    let pvs = node.kubectl(&["get", "pv", "-o", "name"]).lines().count();
    let claims = node
        .kubectl(&["-n", NS, "get", "pvc", "-o", "name"])
        .lines()
        .count();
    assert_eq!(pvs, claims, "one volume a claim");
    assert_eq!(disk_files(), pvs, "one disk file a volume: nothing leaked");
}
