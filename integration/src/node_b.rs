//! A second real node beside the kit's (`integration/scripts/node-b.sh`): its own kubelet
//! and containerd in their own network, mount and cgroup namespaces on this machine, so that
//! a test can power it off — every process of it killed at once, its mounts and network
//! gone — while the kit's node takes its pods.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::say_skipped;

/// The second node's name.
pub const NAME: &str = "vm-b";
/// The taint it registers with: only pods that tolerate it (and DaemonSets) land there.
pub const TAINT: &str = "overcast.dev/node-b";
/// Its address, as kubelet's `--node-ip` gives it.
pub const ADDRESS: &str = "10.250.0.2";

fn script() -> PathBuf {
    crate::package_dir().join("scripts/node-b.sh")
}

/// The kit node's directory (`node-up.sh DIR`): `OVERCAST_TEST_KIT_NODE_DIR`, else where
/// its `kubelet-restart` command lives.
pub fn kit_node_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("OVERCAST_TEST_KIT_NODE_DIR") {
        return Some(dir.into());
    }
    let restart = PathBuf::from(std::env::var_os("OVERCAST_TEST_KUBELET_RESTART")?);
    let dir = restart.parent()?.to_path_buf();
    dir.join("env").exists().then_some(dir)
}

/// The kit's kube-controller-manager's `--feature-gates` value (empty without one).
pub fn controller_manager_gates(kit: &Path) -> String {
    let pids = std::fs::read_to_string(kit.join("pids")).unwrap_or_default();
    let Some(pid) = pids
        .lines()
        .find_map(|l| l.strip_prefix("kube-controller-manager "))
    else {
        return String::new();
    };
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).unwrap_or_default();
    String::from_utf8_lossy(&cmdline)
        .split('\0')
        .find_map(|a| a.strip_prefix("--feature-gates=").map(str::to_owned))
        .unwrap_or_default()
}

pub struct NodeB {
    dir: PathBuf,
    kubeconfig: String,
    /// Dropped powered off with its disk kept ([`NodeB::switch_off`]), not removed.
    keep_disk: bool,
    /// `DIR/image-import`: images into its containerd.
    pub import: String,
}

impl NodeB {
    /// Starts it beside the kit node in `kit` (kubelet flags `kubelet_args` added), and
    /// waits until it is Ready — powered on with its disk where an earlier one was
    /// [`NodeB::switch_off`]ed in `dir`; `None`, said SKIPPED, without the kit node.
    pub fn up(kit: &Path, dir: &Path, kubeconfig: &str, kubelet_args: &str) -> Option<NodeB> {
        if !kit.join("env").exists() {
            say_skipped("no kit node to start a second node beside (../shared/kit/node-up.sh)");
            return None;
        }
        let node = NodeB {
            dir: dir.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            keep_disk: false,
            import: dir.join("image-import").to_string_lossy().into_owned(),
        };
        node.start(kit, kubelet_args);
        Some(node)
    }

    /// Starts it again after [`NodeB::power_off`] (the VM powered on): the same Node.
    pub fn start(&self, kit: &Path, kubelet_args: &str) {
        let out = Command::new(script())
            .args(["up".as_ref(), kit.as_os_str(), self.dir.as_os_str()])
            .env("NODE_B_KUBELET_ARGS", kubelet_args)
            .output()
            .expect("node-b.sh");
        assert!(
            out.status.success(),
            "node-b.sh up failed:\n{}\nkubelet log: {}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.join("kubelet.log"))
                .unwrap_or_default()
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    /// The VM stops as by a pull of the plug: every process of the node killed at once,
    /// nothing told (kubelet posts no status, nothing unmounts).
    pub fn power_off(&self) {
        let out = Command::new(script())
            .args(["power-off".as_ref(), self.dir.as_os_str()])
            .output()
            .expect("node-b.sh");
        assert!(
            out.status.success(),
            "node-b.sh power-off: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Powered off and its Node deleted, its disk (the images in its containerd) kept for
    /// the next [`NodeB::up`] on the same directory: a power-on, which copies only the
    /// images it lacks. `node-b.sh down` (CI's cleanup, or a later `NodeB`'s drop) removes
    /// the disk.
    pub fn switch_off(mut self) {
        self.keep_disk = true;
    }

    fn node_deleted(&self) {
        let _ = Command::new("kubectl")
            .env("KUBECONFIG", &self.kubeconfig)
            .args(["delete", "node", NAME, "--ignore-not-found", "--wait=false"])
            .output();
    }
}

impl Drop for NodeB {
    fn drop(&mut self) {
        let command = if self.keep_disk { "power-off" } else { "down" };
        let _ = Command::new(script())
            .args([command.as_ref(), self.dir.as_os_str()])
            .output();
        self.node_deleted();
    }
}
