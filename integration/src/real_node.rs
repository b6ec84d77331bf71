//! The kit's real node (`../shared/kit/node-up.sh`: kube-apiserver, controller-manager,
//! scheduler, containerd and kubelet v1.25) as the real-node test and benchmark use it:
//! kubectl as the admin, our images imported into its containerd, the suite installed with
//! `kubectl apply -k integration/real-node`, and the claims and pods they make.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::say_skipped;

/// The local cloud's driver, as the local overlay names it.
pub const DRIVER: &str = "local.csi.overcast.dev";

pub struct Node {
    pub kubeconfig: String,
    images: PathBuf,
    import: String,
}

impl Node {
    /// The node `node-up.sh` started and the images `deploy/images/build.sh` built, from
    /// the environment; `None` (said SKIPPED) without them.
    pub fn from_env() -> Option<Node> {
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

    /// `kubectl ARGS` as the admin; its stdout, or a panic with what it said.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.try_kubectl(args)
            .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
    }

    pub fn try_kubectl(&self, args: &[&str]) -> Result<String, String> {
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
    pub fn wait_for(
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
                let ccm = self
                    .try_kubectl(&[
                        "-n",
                        "kube-system",
                        "logs",
                        "deployment/overcast-cloud-controller-manager",
                        "--tail=120",
                    ])
                    .unwrap_or_else(|e| e);
                panic!(
                    "{what}: not after {limit:?}; last: {last:?}\npods:\n{pods}\nevents:\n{events}\n\
                     who wrote each node's taints:\n{}\nthe ccm's log:\n{ccm}",
                    self.taint_writers()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Each Node's taints and the managers whose field sets own them (`managedFields`:
    /// which controller wrote the list last, and when) — what a wait on a taint needs to
    /// say when it fails.
    fn taint_writers(&self) -> String {
        let Ok(out) = self.try_kubectl(&["get", "nodes", "-o", "json", "--show-managed-fields"])
        else {
            return String::new();
        };
        let doc: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let mut said = String::new();
        for n in doc["items"].as_array().into_iter().flatten() {
            said += &format!(
                "{} taints={} resourceVersion={}\n",
                n["metadata"]["name"], n["spec"]["taints"], n["metadata"]["resourceVersion"]
            );
            for m in n["metadata"]["managedFields"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if m["fieldsV1"]["f:spec"].get("f:taints").is_some() {
                    said += &format!(
                        "  taints written by {} ({} {}, {})\n",
                        m["manager"], m["operation"], m["subresource"], m["time"]
                    );
                }
            }
        }
        said
    }

    /// kubelet restarted (node-up's script: SIGTERM, then started with the same flags);
    /// returns once it answers its health check. Its pods keep running.
    pub fn restart_kubelet(&self) {
        let restart = std::env::var("OVERCAST_TEST_KUBELET_RESTART").expect("node-up sets it");
        let out = Command::new(&restart).output().expect("kubelet restart");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Our two images into the node's containerd.
    pub fn import_images(&self) {
        self.import_images_with(&self.import);
    }

    /// Our two images into a containerd through its import command (a second node's).
    pub fn import_images_with(&self, import: &str) {
        self.import_images_from(import, &self.images);
    }

    /// The two images in `images` (an earlier release's) through `import`.
    fn import_images_from(&self, import: &str, images: &Path) {
        for image in ["overcast-csi", "overcast-ccm"] {
            let archive = images.join(format!("{image}.tar"));
            let out = Command::new(import)
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

    /// The suite installed as a user installs it, and waited for until every pod is ready.
    pub fn install(&self) {
        self.import_images();
        self.kubectl(&["apply", "-k", overlay().to_str().unwrap()]);
        self.wait_suite_ready();
    }

    /// An earlier release's suite installed as a user of that release did: its images
    /// (tagged with its commit) imported, its own `integration/real-node` overlay applied
    /// with that tag, every pod waited for.
    pub fn install_release(&self, release: &crate::release::Release, images: &Path) {
        self.import_images_from(&self.import, images);
        let dir = std::env::temp_dir().join(format!("overcast-real-node-{}", release.commit));
        std::fs::create_dir_all(&dir).unwrap();
        // kustomize takes a base by a relative path only ("new root cannot be absolute").
        let base = release.src("integration/real-node");
        let up = "../".repeat(dir.components().count().saturating_sub(1));
        let base = format!("{up}{}", base.display().to_string().trim_start_matches('/'));
        std::fs::write(
            dir.join("kustomization.yaml"),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
                 resources:\n  - {}\nimages:\n  - name: localhost/overcast-csi\n    newTag: {c}\n\
                 \x20 - name: localhost/overcast-ccm\n    newTag: {c}\n",
                base,
                c = release.commit
            ),
        )
        .unwrap();
        self.kubectl(&["apply", "-k", dir.to_str().unwrap()]);
        self.wait_suite_ready();
    }

    /// Every Deployment of the suite rolled out and available, the node plugin too (over
    /// an earlier release's, its pods replaced first).
    fn wait_suite_ready(&self) {
        for name in [
            "deployment/overcast-csi-controller",
            "deployment/overcast-cloud-controller-manager",
            "deployment/overcast-discoverer",
            "daemonset/overcast-csi-node",
        ] {
            self.kubectl(&[
                "-n",
                "kube-system",
                "rollout",
                "status",
                name,
                "--timeout=180s",
            ]);
        }
        for (kind, name) in [
            ("deployment", "overcast-csi-controller"),
            ("deployment", "overcast-cloud-controller-manager"),
            ("deployment", "overcast-discoverer"),
        ] {
            self.wait_for(
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
        self.wait_node_plugin_ready("the node DaemonSet ready");
    }

    pub fn wait_node_plugin_ready(&self, what: &str) {
        self.wait_for(
            what,
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
    }

    /// Applies `docs` (YAML documents) with kubectl; `what` names the temporary file.
    pub fn apply(&self, what: &str, docs: &[String]) {
        let path = std::env::temp_dir().join(format!("overcast-real-node-{what}.yaml"));
        std::fs::write(&path, docs.join("---\n")).unwrap();
        self.kubectl(&["apply", "-f", path.to_str().unwrap()]);
    }
}

/// The test overlay: the local overlay with only the images pointed at what was built here.
pub fn overlay() -> PathBuf {
    crate::package_dir().join("real-node")
}

/// Loop devices backed by the local cloud's disk files on this machine.
pub fn local_loops() -> Vec<String> {
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

/// The disk files of the local cloud on this node (not their metadata files).
pub fn disk_files() -> usize {
    std::fs::read_dir("/var/lib/overcast/local/disks")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".img"))
                .count()
        })
        .unwrap_or(0)
}

/// A claim of `class` in namespace `ns`; `block` for a raw device.
pub fn claim(ns: &str, name: &str, class: &str, size: &str, block: bool) -> String {
    let mode = if block { "\n  volumeMode: Block" } else { "" };
    format!(
        r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}, namespace: {ns}}}
spec:
  accessModes: [ReadWriteOnce]{mode}
  storageClassName: {class}
  resources: {{requests: {{storage: {size}}}}}
"#
    )
}

/// What a busybox pod gets at `/data`.
pub enum Volume<'a> {
    /// The claim, mounted.
    Claim(&'a str),
    /// The claim as the raw device `/dev/xvda`.
    Block(&'a str),
    /// An emptyDir: no CSI at all, the benchmark's baseline.
    EmptyDir,
}

/// A busybox pod in namespace `ns` running `command` with `volume`.
pub fn pod(ns: &str, name: &str, volume: Volume, command: &str) -> String {
    let (key, entry) = match volume {
        Volume::Block(_) => ("volumeDevices", "devicePath: /dev/xvda"),
        _ => ("volumeMounts", "mountPath: /data"),
    };
    let source = match volume {
        Volume::Claim(c) | Volume::Block(c) => format!("persistentVolumeClaim: {{claimName: {c}}}"),
        Volume::EmptyDir => "emptyDir: {}".to_owned(),
    };
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}}}
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
    {source}
"#
    )
}
