//! The zVirt simulator ([`crate::zvirt_sim`]) as the cloud of the kit's node and the
//! second one: served at the kit's pod gateway, where the suite's pods reach it; its VMs
//! `vm` and `vm-b` at the nodes' addresses; the disks it plugs into a VM linked under the
//! host's `/dev`, which every node plugin mounts. The suite is swapped from the local
//! overlay to `integration/real-node-zvirt` (the zvirt overlay as a user applies it).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Cloud, Said};
use crate::node_b;
use crate::real_node::Node;
use crate::zvirt_sim::{Engine, Latency};

/// Where the simulator listens: the kit's pod gateway (`node-up.sh`'s bridge, the kit
/// node's address). `integration/real-node-zvirt`'s cloud-config names it.
pub const SIM_ADDRESS: &str = "10.244.0.1:18480";
/// The kit node's address, its VM's guest address.
const VM_ADDRESS: &str = "10.244.0.1";
/// Where the simulator links the disks it plugs; the overlay's `CSI_DEVICE_BY_ID_DIR`.
const BY_ID: &str = "/dev/overcast-zvirt-sim";
/// The simulator's disk files.
const DISKS: &str = "/var/lib/overcast-test-zvirt-sim";
/// oVirt's driver name, which the zvirt overlay keeps.
const DRIVER: &str = "csi.ovirt.org";
const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// The simulator, serving until dropped; its loop devices and files go with it.
pub struct Zvirt {
    engine: Engine,
    /// `vm`'s and `vm-b`'s VM ids.
    a: String,
    b: String,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Zvirt {
    pub fn start() -> Zvirt {
        for dir in [DISKS, BY_ID] {
            let _ = std::fs::remove_dir_all(dir);
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
        }
        let engine = Engine::new(
            Path::new(DISKS),
            Path::new(BY_ID),
            20 << 30,
            Latency::default(),
        );
        let mut ids = Vec::new();
        for (name, address) in [("vm", VM_ADDRESS), (node_b::NAME, node_b::ADDRESS)] {
            let id = engine.add_vm(name);
            engine.set_vm_ips(&id, &[address]);
            engine.set_guest_ips_on_boot(name, &[address]);
            ids.push(id);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the simulator");
        runtime.block_on(engine.start_on(SIM_ADDRESS));
        let (b, a) = (ids.pop().expect("vm-b"), ids.pop().expect("vm"));
        Zvirt {
            engine,
            a,
            b,
            runtime: Some(runtime),
        }
    }

    /// The disks the engine holds: (id, alias, size).
    pub fn disks(&self) -> Vec<(String, String, u64)> {
        self.engine.disks()
    }
}

impl Drop for Zvirt {
    fn drop(&mut self) {
        self.engine.unplug_all();
        drop(self.runtime.take());
        let _ = std::fs::remove_dir_all(DISKS);
        let _ = std::fs::remove_dir_all(BY_ID);
    }
}

impl Cloud for Zvirt {
    fn name(&self) -> &str {
        "the zVirt simulator"
    }
    fn storage_class(&self) -> &str {
        "overcast-zvirt"
    }
    fn driver(&self) -> &str {
        DRIVER
    }
    fn say(&self, what: Said) {
        self.engine.set_html(what == Said::HtmlPage);
        let status = match what {
            Said::Running => "up",
            Said::Off => "down",
            Said::HostLost => "not_responding",
            Said::HtmlPage => return,
            Said::NoInventory => panic!("an engine always has an inventory"),
        };
        self.engine.set_vm_status(&self.b, status);
    }
}

fn overlay() -> PathBuf {
    crate::package_dir().join("real-node-zvirt")
}

/// The suite moved from the local cloud to the simulator, as a user moves a cluster:
/// the local install deleted, the zvirt overlay applied. The kit's node is registered
/// anew first: a providerID is never changed once set, and `local://vm` is not zVirt's.
/// The zvirt ccm then gives it its VM's.
pub fn install(node: &Node, sim: &Zvirt) {
    node.kubectl(&[
        "delete",
        "-k",
        crate::real_node::overlay().to_str().unwrap(),
        "--ignore-not-found",
        "--wait=true",
        "--timeout=180s",
    ]);
    register_vm_anew(node);
    node.import_images();
    node.kubectl(&["apply", "-k", overlay().to_str().unwrap()]);
    node.wait_for(
        "vm initialized by the zvirt ccm",
        Duration::from_secs(120),
        &[
            "get",
            "node",
            "vm",
            "-o",
            "jsonpath={.spec.providerID} {.spec.taints[*].key}",
        ],
        |out| out.starts_with(&format!("zvirt://{} ", sim.a)) && !out.contains(UNINITIALIZED),
    );
    node.wait_for(
        "the zvirt node plugin registered on vm",
        Duration::from_secs(180),
        &[
            "get",
            "csinode",
            "vm",
            "-o",
            "jsonpath={.spec.drivers[*].name}",
        ],
        |out| out.contains(DRIVER),
    );
}

/// The zvirt install deleted and the kit's node registered anew (uninitialized, as the
/// kit made it), so that a later install starts where this test's did.
pub fn uninstall(node: &Node) {
    node.kubectl(&[
        "delete",
        "-k",
        overlay().to_str().unwrap(),
        "--ignore-not-found",
        "--wait=true",
        "--timeout=180s",
    ]);
    register_vm_anew(node);
}

/// The kit's Node deleted and kubelet restarted: it registers the node again, tainted
/// uninitialized (it runs with `--cloud-provider=external`); its pods keep running.
fn register_vm_anew(node: &Node) {
    node.kubectl(&["delete", "node", "vm", "--wait=true"]);
    node.restart_kubelet();
    node.wait_for(
        "vm registered anew",
        Duration::from_secs(60),
        &["get", "node", "vm", "-o", "jsonpath={.spec.taints[*].key}"],
        |out| out.contains(UNINITIALIZED),
    );
}
