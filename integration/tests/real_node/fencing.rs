//! Fencing on two real nodes: the kit's (`vm`) and a second one beside it
//! (`integration/scripts/node-b.sh`: its own kubelet and containerd in their own
//! namespaces), on the local cloud and then on the zVirt simulator. A StatefulSet's pod
//! writes to its volume on `vm-b`; `vm-b` is powered off (every process killed at once,
//! its mounts gone with its namespace). While the cloud gives no positive answer — an
//! HTML page where its inventory should be, the VM reported running, no inventory at all,
//! the VM's host lost — nothing is fenced and the volume stays attached to `vm-b`. Once
//! the cloud reports the VM off, the ccm's fencing taints the node out of service, and
//! Kubernetes (NodeOutOfServiceVolumeDetach, on in the kit's controller-manager) deletes
//! the pod, detaches the volume and the StatefulSet's pod runs on `vm` with the data
//! `vm-b` wrote. `vm-b` powered on again: the taint comes off.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use overcast_integration::fencing::{
    attachment, config_secret, configure, pod_node_and_ready, pv_of, run_ccm, statefulset,
    taints_of_b, wait_pod_ready_on, zvirt, Ccm, Cloud, Local, Said, KUBELET_ARGS, MACHINES_HOST,
    OUT_OF_SERVICE,
};
use overcast_integration::node_b::{self, NodeB};
use overcast_integration::real_node::Node;
use overcast_integration::say_skipped;

const NS: &str = "overcast-it-fencing";
/// The ccm's fencing grace and node sync period in this test, seconds.
const GRACE: u64 = 5;
const SYNC: u64 = 5;
const CCM: Ccm = Ccm {
    fencing: true,
    grace: Some(GRACE),
    sync_period: Some(SYNC),
};

/// Nothing fenced and nothing detached for `hold`: the taint never came, the volume
/// stayed attached to `vm-b` and the pod bound to it.
fn nothing_fenced_for(node: &Node, pv: &str, hold: Duration, why: &str) {
    let until = Instant::now() + hold;
    while Instant::now() < until {
        let taints = taints_of_b(node);
        assert!(
            !taints.contains(OUT_OF_SERVICE),
            "{why}: fenced all the same ({taints})"
        );
        assert_eq!(
            attachment(node, pv),
            format!("{}:true", node_b::NAME),
            "{why}: the volume moved"
        );
        assert!(
            pod_node_and_ready(node, NS).starts_with(node_b::NAME),
            "{why}: the pod left vm-b"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The messages of the events `reason` on this `vm-b` (its Node's `uid`: the node of an
/// earlier run had the same name).
fn events(node: &Node, uid: &str, reason: &str) -> String {
    node.kubectl(&[
        "get",
        "events",
        "-A",
        "--field-selector",
        &format!("reason={reason},involvedObject.kind=Node,involvedObject.uid={uid}"),
        "-o",
        "jsonpath={.items[*].message}",
    ])
}

/// The kit node's directory, when its controller-manager runs with the gate fencing
/// needs; `None` (said SKIPPED) otherwise.
fn fencing_kit() -> Option<PathBuf> {
    let Some(kit) = node_b::kit_node_dir() else {
        say_skipped("fencing: the kit node's directory is unknown (OVERCAST_TEST_KIT_NODE_DIR)");
        return None;
    };
    if !node_b::controller_manager_gates(&kit).contains("NodeOutOfServiceVolumeDetach=true") {
        say_skipped(
            "fencing: the kit's controller-manager runs without NodeOutOfServiceVolumeDetach \
             (start the node with KIT_FEATURE_GATES=NodeOutOfServiceVolumeDetach=true, as .ci/run does)",
        );
        return None;
    }
    Some(kit)
}

/// On the local cloud, its inventory the instances file the test rewrites.
pub fn volumes_follow_their_pod_when_its_vm_dies(node: &Node) {
    let Some(kit) = fencing_kit() else {
        return;
    };
    Local.say(Said::Running);
    configure(node, &CCM);
    vm_b_dies_and_comes_back(
        node,
        &kit,
        &Local,
        &[Said::HtmlPage, Said::Running, Said::NoInventory],
    );
    node.apply("fencing-config-back", &[config_secret(false)]);
    let _ = std::fs::remove_dir_all(MACHINES_HOST);
}

/// On the zVirt simulator, the suite installed from the zvirt overlay (upstream's driver
/// name): its engine's HTML page, `vm-b`'s VM on a host the engine lost
/// (`not_responding`) and its VM `up` fence nothing; `down` does. Every disk the test
/// made is gone from the engine at its end.
pub fn volumes_follow_their_pod_on_the_zvirt_simulator(node: &Node) {
    let Some(kit) = fencing_kit() else {
        return;
    };
    let sim = zvirt::Zvirt::start();
    zvirt::install(node, &sim);
    run_ccm(node, &CCM);
    vm_b_dies_and_comes_back(
        node,
        &kit,
        &sim,
        &[Said::HtmlPage, Said::HostLost, Said::Running],
    );
    node.wait_for(
        "the claim's disk deleted from the engine",
        Duration::from_secs(120),
        &["get", "pv", "-o", "name"],
        |out| out.trim().is_empty(),
    );
    assert!(sim.disks().is_empty(), "disks left: {:?}", sim.disks());
    zvirt::uninstall(node);
}

/// `vm-b` up with the StatefulSet's pod on it; powered off while `cloud` says each of
/// `uncertain` (nothing fenced), then off (fenced, the pod on `vm` with its data); then
/// powered on (the taint gone). The namespace and `vm-b` gone at the end.
fn vm_b_dies_and_comes_back(node: &Node, kit: &Path, cloud: &dyn Cloud, uncertain: &[Said]) {
    eprintln!("fencing on {}", cloud.name());
    cloud.say(Said::Running);
    // A test beside, its disk mounted while vm-b's mount namespace is made.
    let mut neighbour = overcast_integration::neighbour::NeighbourMount::new();
    let Some(b) = NodeB::up(
        kit,
        Path::new("/tmp/overcast-node-b"),
        &node.kubeconfig,
        KUBELET_ARGS,
    ) else {
        return;
    };
    assert!(
        neighbour.unmounted_is_free(Duration::from_secs(2)),
        "vm-b's mount namespace keeps a disk of a test beside it busy"
    );
    drop(neighbour);
    // Its images are the kit node's, copied at its start (ours among them): nothing to import.
    node.wait_for(
        "vm-b initialized by the ccm and its node plugin registered",
        Duration::from_secs(120),
        &[
            "get",
            "csinode",
            node_b::NAME,
            "-o",
            "jsonpath={.spec.drivers[*].name}",
        ],
        |out| out.contains(cloud.driver()),
    );

    // The pod on vm-b: vm cordoned while it is scheduled.
    let _ = node.try_kubectl(&["create", "namespace", NS]);
    node.kubectl(&["cordon", "vm"]);
    node.apply(
        "fencing-statefulset",
        &[statefulset(NS, cloud.storage_class())],
    );
    wait_pod_ready_on(node, NS, node_b::NAME, Duration::from_secs(180));
    node.kubectl(&["uncordon", "vm"]);
    let pv = pv_of(node, NS);
    assert_eq!(attachment(node, &pv), format!("{}:true", node_b::NAME));
    let uid = node.kubectl(&[
        "get",
        "node",
        node_b::NAME,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);

    // vm-b dies; the cloud gives no positive answer.
    b.power_off();
    cloud.say(uncertain[0]);
    node.wait_for(
        "vm-b's lease expired (Ready Unknown)",
        Duration::from_secs(120),
        &[
            "get",
            "node",
            node_b::NAME,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ],
        |out| out.trim() == "Unknown",
    );
    let hold = Duration::from_secs(GRACE + 2 * SYNC + 3);
    for said in uncertain {
        cloud.say(*said);
        nothing_fenced_for(node, &pv, hold, &format!("{said:?} on {}", cloud.name()));
    }

    // The cloud reports it off: fenced, and the pod runs on vm with vm-b's data.
    let off = Instant::now();
    cloud.say(Said::Off);
    node.wait_for(
        "vm-b tainted out of service",
        Duration::from_secs(60),
        &[
            "get",
            "node",
            node_b::NAME,
            "-o",
            "jsonpath={.spec.taints[*].key}",
        ],
        |out| out.contains(OUT_OF_SERVICE),
    );
    let tainted = off.elapsed();
    wait_pod_ready_on(node, NS, "vm", Duration::from_secs(300));
    eprintln!(
        "fencing on {}: tainted {:?} and the pod Ready on vm {:?} after the cloud reported vm-b off",
        cloud.name(),
        tainted,
        off.elapsed()
    );
    assert_eq!(
        node.kubectl(&["-n", NS, "exec", "fenced-0", "--", "cat", "/data/file"])
            .trim(),
        format!("written-on-{}", node_b::NAME),
        "the data vm-b wrote"
    );
    assert_eq!(attachment(node, &pv), "vm:true");
    assert!(
        events(node, &uid, "OutOfServiceTaintApplied").contains("powered off"),
        "the event on the Node"
    );

    // vm-b powered on again: Ready, its VM running, the taint comes off.
    cloud.say(Said::Running);
    b.start(kit, KUBELET_ARGS);
    node.wait_for(
        "the out-of-service taint removed from vm-b",
        Duration::from_secs(90),
        &[
            "get",
            "node",
            node_b::NAME,
            "-o",
            "jsonpath={.spec.taints[*].key}",
        ],
        |out| !out.contains(OUT_OF_SERVICE),
    );
    assert!(!events(node, &uid, "OutOfServiceTaintRemoved").is_empty());
    // The annotation goes once the node lifecycle controller has taken its taints off:
    // its write (kube-controller-manager v1.25, before kubernetes#113136) may carry the
    // list it read before ours went — CI28 saw our taint back that way — and then the
    // ccm, its annotation still there, removes it again. At the end, both gone.
    node.wait_for(
        "the ccm's annotation released from vm-b, its taint off",
        Duration::from_secs(90),
        &[
            "get",
            "node",
            node_b::NAME,
            "-o",
            "jsonpath={.metadata.annotations.overcast\\.dev/fenced}|{.spec.taints[*].key}",
        ],
        |out| {
            let (annotation, taints) = out.split_once('|').unwrap_or((out, ""));
            annotation.trim().is_empty() && !taints.contains(OUT_OF_SERVICE)
        },
    );

    node.kubectl(&["delete", "namespace", NS, "--wait=true", "--timeout=180s"]);
    // Off with its disk kept: the next phase powers it on with the images it has.
    b.switch_off();
}
