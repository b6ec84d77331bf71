//! The suite on the kit's real node (kube-apiserver, controller-manager, scheduler,
//! containerd and kubelet v1.25), installed the way a user installs it: the images built
//! here by `deploy/images/build.sh`, imported into the node's containerd, `kubectl apply
//! -k integration/real-node` (the local overlay with only the images pointed at those
//! tags and the kit's sidecars). Then a PVC mounted into a running pod by the real
//! kubelet. `.ci/run`'s real-node step runs it (`-- --ignored`) with `OVERCAST_TEST_NODE`
//! and `OVERCAST_TEST_IMAGES` set; run so without them, it says it was skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use overcast_integration::say_skipped;

const NS: &str = "overcast-it-node";

struct Node {
    kubeconfig: String,
    images: PathBuf,
    import: String,
}

fn node() -> Option<Node> {
    let vars = (
        std::env::var("OVERCAST_TEST_KUBECONFIG"),
        std::env::var("OVERCAST_TEST_NODE"),
        std::env::var("OVERCAST_TEST_IMAGES"),
        std::env::var("OVERCAST_TEST_IMAGE_IMPORT"),
    );
    match vars {
        (Ok(kubeconfig), Ok(_), Ok(images), Ok(import)) => Some(Node {
            kubeconfig,
            images: images.into(),
            import,
        }),
        _ => {
            say_skipped("set OVERCAST_TEST_NODE, OVERCAST_TEST_IMAGE_IMPORT (../shared/kit/node-up.sh) and OVERCAST_TEST_IMAGES (deploy/images/build.sh's output) to run the suite on a real node");
            None
        }
    }
}

impl Node {
    /// `kubectl ARGS` as the admin; its stdout, or a panic with what it said.
    fn kubectl(&self, args: &[&str]) -> String {
        self.try_kubectl(args)
            .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
    }

    fn try_kubectl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("kubectl")
            .env("KUBECONFIG", &self.kubeconfig)
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Waits until `kubectl ARGS` prints something for which `done` holds.
    fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        args: &[&str],
        done: impl Fn(&str) -> bool,
    ) -> String {
        let started = Instant::now();
        loop {
            let last = self.try_kubectl(args);
            if let Ok(out) = &last {
                if done(out) {
                    return out.clone();
                }
            }
            if started.elapsed() > limit {
                let pods = self
                    .try_kubectl(&["get", "pods", "-A", "-o", "wide"])
                    .unwrap_or_default();
                let events = self
                    .try_kubectl(&["get", "events", "-A", "--sort-by=.lastTimestamp"])
                    .unwrap_or_default();
                panic!(
                    "{what}: not after {limit:?}; last: {last:?}\npods:\n{pods}\nevents:\n{events}"
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn import_images(&self) {
        for image in ["overcast-csi", "overcast-ccm"] {
            let archive = self.images.join(format!("{image}.tar"));
            let out = Command::new(&self.import)
                .arg(&archive)
                .output()
                .expect("image import");
            assert!(
                out.status.success(),
                "import {}: {}{}",
                archive.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

fn overlay() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("real-node")
}

/// Loop devices backed by the local cloud's disk files on this machine.
fn local_loops() -> Vec<String> {
    let out = Command::new("losetup")
        .args(["-a"])
        .output()
        .expect("losetup");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        // The path as the binding process saw it: a controller pod that was replaced
        // shows `/disks/vol-…` (its mount of the state directory is gone), so the disk
        // file's own naming is what is looked for.
        .filter(|l| l.contains("/disks/vol-"))
        .map(str::to_owned)
        .collect()
}

/// The whole install and a volume's life in pods, in order (one node, one install).
/// `.ci/run` runs it on the kit's node (`--ignored`); a plain `cargo test` lists it as
/// ignored, since it needs the node and the images.
#[test]
#[ignore = "needs the kit's real node and the images: .ci/run runs it (cargo test --test real_node -- --ignored)"]
fn the_suite_installs_with_kubectl_apply_and_serves_a_pvc_to_pods() {
    let Some(node) = node() else {
        return;
    };
    node.import_images();
    node.kubectl(&["apply", "-k", overlay().to_str().unwrap()]);
    for (kind, name) in [
        ("deployment", "overcast-csi-controller"),
        ("deployment", "overcast-cloud-controller-manager"),
        ("deployment", "overcast-discoverer"),
    ] {
        node.wait_for(
            &format!("{kind} {name} available"),
            Duration::from_secs(180),
            &[
                "-n",
                "kube-system",
                "get",
                kind,
                name,
                "-o",
                "jsonpath={.status.availableReplicas}",
            ],
            |out| out.trim() == "1",
        );
    }
    node.wait_for(
        "the node DaemonSet ready",
        Duration::from_secs(180),
        &[
            "-n",
            "kube-system",
            "get",
            "daemonset",
            "overcast-csi-node",
            "-o",
            "jsonpath={.status.numberReady}",
        ],
        |out| out.trim() == "1",
    );
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
        |out| out.contains("local.csi.overcast.dev"),
    );
    assert!(csinode.contains("topology.kubernetes.io/zone"), "{csinode}");
    assert!(csinode.contains("allocatable"), "{csinode}");

    let _ = node.try_kubectl(&["create", "namespace", NS]);
    apply(
        &node,
        "writer",
        &[
            claim("data", "overcast-local", "64Mi", false),
            pod(
                "writer",
                "data",
                "echo hello-from-a-pod > /data/file && sync && sleep 3600",
                false,
            ),
        ],
    );
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
    apply(
        &node,
        "reader",
        &[pod("reader", "data", "sleep 3600", false)],
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
    node.wait_for(
        "the node DaemonSet ready again",
        Duration::from_secs(120),
        &[
            "-n",
            "kube-system",
            "get",
            "daemonset",
            "overcast-csi-node",
            "-o",
            "jsonpath={.status.numberReady}",
        ],
        |out| out.trim() == "1",
    );
    assert_eq!(
        node.kubectl(&["-n", NS, "exec", "reader", "--", "cat", "/data/file"])
            .trim(),
        "hello-from-a-pod",
        "the volume stays mounted while the node plugin is replaced"
    );
    // kubelet restarted: the pod keeps its volume.
    let restart = std::env::var("OVERCAST_TEST_KUBELET_RESTART").expect("node-up sets it");
    let out = Command::new(&restart).output().expect("kubelet restart");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    node.wait_for(
        "the pod's volume after kubelet's restart",
        Duration::from_secs(60),
        &["-n", NS, "exec", "reader", "--", "cat", "/data/file"],
        |out| out.trim() == "hello-from-a-pod",
    );
    expand_in_a_running_pod(&node);
    raw_block_device(&node);
    controller_deleted_mid_provisioning(&node);

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
        "loop devices left: {:?}",
        local_loops()
    );
    assert_eq!(disk_files(), 0, "no disk file left");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts
            .lines()
            .any(|l| l.contains("local.csi.overcast.dev") && l.contains("/pv/")),
        "no volume mount left"
    );
}

/// An xfs claim (online ext4 growth needs CAP_SYS_RESOURCE, which these machines
/// withhold) expanded while its pod runs: the pod sees the new size.
fn expand_in_a_running_pod(node: &Node) {
    let class = r#"apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: overcast-it-xfs}
provisioner: local.csi.overcast.dev
volumeBindingMode: WaitForFirstConsumer
allowVolumeExpansion: true
parameters: {csi.storage.k8s.io/fstype: xfs}
"#;
    apply(
        node,
        "grows",
        &[
            class.to_owned(),
            claim("grows", "overcast-it-xfs", "300Mi", false),
            pod("grows", "grows", "sleep 3600", false),
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
fn raw_block_device(node: &Node) {
    apply(
        node,
        "raw",
        &[
            claim("raw", "overcast-local", "32Mi", true),
            pod(
                "raw",
                "raw",
                "echo raw-bytes | dd of=/dev/xvda bs=512 seek=2048 conv=fsync && sleep 3600",
                true,
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

/// The disk files of the local cloud on this node.
fn disk_files() -> usize {
    std::fs::read_dir("/var/lib/overcast/local/disks")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The csi controller's pod deleted right after a claim is made (while the provisioner
/// may be provisioning it): the claim still gets one volume once a new controller runs,
/// and the node holds exactly one disk file per PersistentVolume — nothing leaked.
fn controller_deleted_mid_provisioning(node: &Node) {
    apply(
        node,
        "again",
        &[
            claim("again", "overcast-local", "32Mi", false),
            pod(
                "again",
                "again",
                "echo again > /data/file && sleep 3600",
                false,
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

/// A claim of `class` in the test's namespace; `block` for a raw device.
fn claim(name: &str, class: &str, size: &str, block: bool) -> String {
    let mode = if block { "\n  volumeMode: Block" } else { "" };
    format!(
        r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}, namespace: {NS}}}
spec:
  accessModes: [ReadWriteOnce]{mode}
  storageClassName: {class}
  resources: {{requests: {{storage: {size}}}}}
"#
    )
}

/// A busybox pod running `command` with claim `claim` at `/data` (or, `block`, as the
/// device `/dev/xvda`).
fn pod(name: &str, claim: &str, command: &str, block: bool) -> String {
    let (key, entry) = if block {
        ("volumeDevices", "devicePath: /dev/xvda")
    } else {
        ("volumeMounts", "mountPath: /data")
    };
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {NS}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox:1.35.0
    imagePullPolicy: Never
    command: [sh, -c, "{command}"]
    {key}: [{{name: data, {entry}}}]
  volumes:
  - name: data
    persistentVolumeClaim: {{claimName: {claim}}}
"#
    )
}

/// Applies `docs` (YAML documents) with kubectl.
fn apply(node: &Node, what: &str, docs: &[String]) {
    let path = std::env::temp_dir().join(format!("overcast-real-node-{what}.yaml"));
    std::fs::write(&path, docs.join("---\n")).unwrap();
    node.kubectl(&["apply", "-f", path.to_str().unwrap()]);
}
