//! Fencing on two real nodes: the kit's (`vm`) and a second one beside it
//! (`integration/scripts/node-b.sh`: its own kubelet and containerd in their own
//! namespaces). A StatefulSet's pod writes to its volume on `vm-b`; `vm-b` is powered off
//! (every process killed at once, its mounts gone with its namespace). While the cloud
//! gives no positive answer — an HTML page where its inventory should be, then the VM
//! reported running — nothing is fenced and the volume stays attached to `vm-b`. Once the
//! cloud reports the VM off, the ccm's fencing taints the node out of service, and
//! Kubernetes (NodeOutOfServiceVolumeDetach, on in the kit's controller-manager) deletes
//! the pod, detaches the volume and the StatefulSet's pod runs on `vm` with the data
//! `vm-b` wrote. `vm-b` powered on again: the taint comes off.

use std::path::Path;
use std::time::{Duration, Instant};

use overcast_integration::fencing::{
    attachment, config_secret, configure, pod_node_and_ready, pv_of, remove_machines, statefulset,
    taints_of_b, vm_b, wait_pod_ready_on, write_machines, Ccm, KUBELET_ARGS, MACHINES_HOST,
    OUT_OF_SERVICE,
};
use overcast_integration::node_b::{self, NodeB};
use overcast_integration::real_node::Node;
use overcast_integration::say_skipped;

const NS: &str = "overcast-it-fencing";
/// The ccm's fencing grace and node sync period in this test, seconds.
const GRACE: u64 = 5;
const SYNC: u64 = 5;

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

fn events(node: &Node, reason: &str) -> String {
    node.kubectl(&[
        "get",
        "events",
        "-A",
        "--field-selector",
        &format!(
            "reason={reason},involvedObject.kind=Node,involvedObject.name={}",
            node_b::NAME
        ),
        "-o",
        "jsonpath={.items[*].message}",
    ])
}

pub fn volumes_follow_their_pod_when_its_vm_dies(node: &Node) {
    let Some(kit) = node_b::kit_node_dir() else {
        say_skipped("fencing: the kit node's directory is unknown (OVERCAST_TEST_KIT_NODE_DIR)");
        return;
    };
    if !node_b::controller_manager_gates(&kit).contains("NodeOutOfServiceVolumeDetach=true") {
        say_skipped(
            "fencing: the kit's controller-manager runs without NodeOutOfServiceVolumeDetach \
             (start the node with KIT_FEATURE_GATES=NodeOutOfServiceVolumeDetach=true, as .ci/run does)",
        );
        return;
    }
    write_machines(&vm_b("running"));
    configure(
        node,
        &Ccm {
            fencing: true,
            grace: Some(GRACE),
            sync_period: Some(SYNC),
        },
    );
    let Some(b) = NodeB::up(
        &kit,
        Path::new("/tmp/overcast-node-b"),
        &node.kubeconfig,
        KUBELET_ARGS,
    ) else {
        return;
    };
    node.import_images_with(&b.import);
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
        |out| out.contains(overcast_integration::real_node::DRIVER),
    );

    // The pod on vm-b: vm cordoned while it is scheduled.
    let _ = node.try_kubectl(&["create", "namespace", NS]);
    node.kubectl(&["cordon", "vm"]);
    node.apply("fencing-statefulset", &[statefulset(NS)]);
    wait_pod_ready_on(node, NS, node_b::NAME, Duration::from_secs(180));
    node.kubectl(&["uncordon", "vm"]);
    let pv = pv_of(node, NS);
    assert_eq!(attachment(node, &pv), format!("{}:true", node_b::NAME));

    // vm-b dies. The cloud's inventory is an HTML page: no answer.
    b.power_off();
    write_machines("<html><body><h1>502 Bad Gateway</h1></body></html>");
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
    nothing_fenced_for(node, &pv, hold, "an HTML page for an inventory");
    // The cloud says the VM runs: it may still write.
    write_machines(&vm_b("running"));
    nothing_fenced_for(node, &pv, hold, "the VM reported running");
    remove_machines();
    nothing_fenced_for(node, &pv, hold, "no inventory at all");

    // The cloud reports it off: fenced, and the pod runs on vm with vm-b's data.
    let off = Instant::now();
    write_machines(&vm_b("shutdown"));
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
        "fencing: tainted {:?} and the pod Ready on vm {:?} after the cloud reported vm-b off",
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
        events(node, "OutOfServiceTaintApplied").contains("powered off"),
        "the event on the Node"
    );

    // vm-b powered on again: Ready, its VM running, the taint comes off.
    write_machines(&vm_b("running"));
    b.start(&kit, KUBELET_ARGS);
    node.import_images_with(&b.import);
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
    assert!(!events(node, "OutOfServiceTaintRemoved").is_empty());

    node.kubectl(&["delete", "namespace", NS, "--wait=true", "--timeout=180s"]);
    drop(b);
    node.apply("fencing-config-back", &[config_secret(false)]);
    let _ = std::fs::remove_dir_all(MACHINES_HOST);
}
