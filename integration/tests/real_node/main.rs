//! The suite on the kit's real node (kube-apiserver, controller-manager, scheduler,
//! containerd and kubelet v1.25), installed the way a user installs it: the images built
//! here by `deploy/images/build.sh`, imported into the node's containerd, `kubectl apply
//! -k integration/real-node` (the local overlay with only the images pointed at those
//! tags and the kit's sidecars) — over an earlier release's suite and a pod on a volume it
//! made, where that release's images were made ([`upgrade`]). Then a PVC mounted into a
//! running pod by the real kubelet. `.ci/run`'s real-node step runs it (`-- --ignored`) with `OVERCAST_TEST_NODE`
//! and `OVERCAST_TEST_IMAGES` set; run so without them, it says it was skipped.

use std::time::{Duration, Instant};

use overcast_integration::real_node::{claim, disk_files, local_loops, pod, Node, Volume, DRIVER};

mod fencing;
mod load_balancer;
mod lost_state;
mod snapshots;
mod upgrade;
mod volumes;

const NS: &str = "overcast-it-node";

/// The whole install and a volume's life in pods, in order (one node, one install).
/// `.ci/run` runs it on the kit's node (`--ignored`); a plain `cargo test` lists it as
/// ignored, since it needs the node and the images.
#[test]
#[ignore = "needs the kit's real node and the images: .ci/run runs it (cargo test --test real_node -- --ignored)"]
fn the_suite_installs_with_kubectl_apply_and_serves_a_pvc_to_pods() {
    let Some(node) = Node::from_env() else {
        return;
    };
    // Where the test's time goes: each phase's start, on stderr.
    let t0 = Instant::now();
    let phase = |what: &str| eprintln!("[{:>4}s] {what}", t0.elapsed().as_secs());
    // From an earlier release, where its images were made: a pod on a volume it made,
    // then this release applied over it (below, as a user upgrades).
    phase("the earlier release and its writer");
    let writer = upgrade::an_earlier_release_with_a_writer(&node, NS);
    phase("this release installed");
    node.install();
    // kubelet registered the driver through our registrar: the CSINode lists it.
    let csinode = node.wait_for(
        "the CSINode lists the driver",
        Duration::from_secs(60),
        &[
            "get",
            "csinode",
            "vm",
            "-o",
            "jsonpath={.spec.drivers[?(@.name==\"local.csi.overcast.dev\")]}",
        ],
        |out| out.contains(DRIVER),
    );
    assert!(csinode.contains("topology.kubernetes.io/zone"), "{csinode}");
    assert!(csinode.contains("allocatable"), "{csinode}");
    the_ccm_initialized_the_node_on_its_kubelets_address(&node);

    if let Some(uid) = &writer {
        upgrade::the_writer_kept_its_volume_through_the_roll(&node, NS, uid);
        phase("the way back and forth");
        upgrade::and_through_a_downgrade_and_back(&node, NS, uid);
    } else {
        let _ = node.try_kubectl(&["create", "namespace", NS]);
        node.apply(
            "writer",
            &[
                claim(NS, "data", "overcast-local", "64Mi", false),
                pod(NS, "writer", Volume::Claim("data"), upgrade::WRITER),
            ],
        );
    }
    phase("the writer's volume: a pod again, stats, the node plugin and kubelet replaced");
    node.wait_for(
        "the pod Running with its volume",
        Duration::from_secs(180),
        &[
            "-n",
            NS,
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
        &["-n", NS, "exec", "writer", "--", "cat", "/data/file"],
        |out| out.trim() == "hello-from-a-pod",
    );
    // The pod goes and comes back: the data is still there.
    node.kubectl(&["-n", NS, "delete", "pod", "writer", "--wait=true"]);
    node.apply(
        "reader",
        &[pod(NS, "reader", Volume::Claim("data"), "sleep 3600")],
    );
    node.wait_for(
        "the data survives the pod",
        Duration::from_secs(180),
        &["-n", NS, "exec", "reader", "--", "cat", "/data/file"],
        |out| out.trim() == "hello-from-a-pod",
    );
    assert!(
        !local_loops().is_empty(),
        "the volume is a loop device on the node"
    );

    // kubelet reports the volume's stats, as for any CSI volume it mounts.
    node.wait_for(
        "kubelet_volume_stats for the claim",
        Duration::from_secs(120),
        &["get", "--raw", "/api/v1/nodes/vm/proxy/metrics"],
        |out| {
            out.lines().any(|l| {
                l.starts_with("kubelet_volume_stats_capacity_bytes")
                    && l.contains(&format!("namespace=\"{NS}\""))
                    && l.contains("persistentvolumeclaim=\"data\"")
            })
        },
    );
    // The node plugin's pod replaced under a mounted volume: the mount survives (the pod
    // still reads it), and the later unmount works (below).
    node.kubectl(&[
        "-n",
        "kube-system",
        "delete",
        "pod",
        "-l",
        "app.kubernetes.io/component=csi-node",
        "--wait=true",
    ]);
    node.wait_node_plugin_ready("the node DaemonSet ready again");
    assert_eq!(
        node.kubectl(&["-n", NS, "exec", "reader", "--", "cat", "/data/file"])
            .trim(),
        "hello-from-a-pod",
        "the volume stays mounted while the node plugin is replaced"
    );
    // kubelet restarted: the pod keeps its volume.
    node.restart_kubelet();
    node.wait_for(
        "the pod's volume after kubelet's restart",
        Duration::from_secs(60),
        &["-n", NS, "exec", "reader", "--", "cat", "/data/file"],
        |out| out.trim() == "hello-from-a-pod",
    );
    phase("volumes");
    volumes::expand_in_a_running_pod(&node);
    volumes::raw_block_device(&node);
    volumes::controller_deleted_mid_provisioning(&node);
    phase("snapshots");
    snapshots::a_restore_holds_the_first_data_and_a_clone_the_second(&node);
    phase("lost state");
    lost_state::grows_after_the_controller_was_replaced(&node);
    lost_state::node_plugin_killed_during_first_mkfs(&node);
    lost_state::node_plugin_without_records(&node);
    phase("a load balancer");
    load_balancer::a_load_balancer_service_reaches_its_pod(&node);
    phase("fencing on the local cloud");
    fencing::volumes_follow_their_pod_when_its_vm_dies(&node);

    phase("everything deleted");
    // Everything deleted: no loop device, no disk file, no mount left.
    node.kubectl(&["delete", "namespace", NS, "--wait=true", "--timeout=180s"]);
    let _ = node.try_kubectl(&["delete", "storageclass", "overcast-it-xfs"]);
    node.wait_for(
        "the PV gone",
        Duration::from_secs(120),
        &["get", "pv", "-o", "name"],
        |out| out.trim().is_empty(),
    );
    let started = Instant::now();
    while !local_loops().is_empty() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        local_loops().is_empty(),
        "loop devices left: {:?}; every loop device (one backed by another loop device \
         is kubelet's lock on a raw block volume): {}",
        local_loops(),
        String::from_utf8_lossy(
            &std::process::Command::new("losetup")
                .args(["-l", "-O", "NAME,BACK-FILE,BACK-INO,AUTOCLEAR"])
                .output()
                .map(|o| o.stdout)
                .unwrap_or_default()
        )
    );
    assert_eq!(disk_files(), 0, "no disk file left");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts
            .lines()
            .any(|l| l.contains(DRIVER) && l.contains("/pv/")),
        "no volume mount left"
    );

    // Last: the suite moved to the zVirt simulator (the kit's node registered anew), and
    // fencing again there.
    phase("fencing on the zVirt simulator");
    fencing::volumes_follow_their_pod_on_the_zvirt_simulator(&node);
    phase("done");
}

/// kubelet runs with `--cloud-provider=external` (`.ci/run` starts the node so), as on
/// every cluster a ccm serves: it registered the node tainted uninitialized and wrote its
/// `--node-ip` (the kit's bridge) as `alpha.kubernetes.io/provided-node-ip`. The ccm
/// initialized it — the providerID, the taint gone — and of the host's addresses (its
/// uplink, the bridge, …) kept the one kubelet was given as the only InternalIP, as
/// upstream's cloud-node controller does. Before, every address of the host was an
/// InternalIP, and which one a balancer or the API server took depended on the order.
fn the_ccm_initialized_the_node_on_its_kubelets_address(node: &Node) {
    let given = node.kubectl(&[
        "get",
        "node",
        "vm",
        "-o",
        "jsonpath={.metadata.annotations.alpha\\.kubernetes\\.io/provided-node-ip}",
    ]);
    let given = given.trim();
    assert!(
        !given.is_empty(),
        "kubelet ran without --cloud-provider=external: start the node with \
         KIT_NODE_KUBELET_ARGS=--cloud-provider=external, as .ci/run does"
    );
    node.wait_for(
        "the node initialized by the ccm",
        Duration::from_secs(60),
        &[
            "get",
            "node",
            "vm",
            "-o",
            "jsonpath={.spec.providerID} {.spec.taints[*].key}",
        ],
        |out| {
            out.trim() == "local://vm"
                && !out.contains("node.cloudprovider.kubernetes.io/uninitialized")
        },
    );
    node.wait_for(
        "the address kubelet was given as the only InternalIP",
        Duration::from_secs(30),
        &[
            "get",
            "node",
            "vm",
            "-o",
            "jsonpath={.status.addresses[?(@.type==\"InternalIP\")].address}",
        ],
        |out| out.trim() == given,
    );
}
