//! What the fencing test and benchmark share on the kit's node and a second one
//! ([`crate::node_b`]): a cloud made to say what it says of the second node's VM — the
//! local cloud's inventory as a file they rewrite, or the zVirt simulator ([`zvirt`]) —
//! the suite configured to read it, and a StatefulSet whose pod starts on the second node.

use std::path::Path;
use std::time::Duration;

use crate::node_b;
use crate::real_node::Node;

/// Where the instances file lives on the host, and where the csi controller and the ccm
/// read it: the local overlay's own place (deploy/overlays/local, its `machines` volume).
pub const MACHINES_HOST: &str = "/var/lib/overcast/machines";
const MACHINES_POD: &str = "/etc/overcast/machines";
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
/// kubelet as the clusters a ccm serves run it.
pub const KUBELET_ARGS: &str = "--cloud-provider=external";

pub mod zvirt;

/// What a cloud says of the second node's VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Said {
    /// Its VM runs: it may still write.
    Running,
    /// Its VM is powered off: the one positive answer fencing acts on.
    Off,
    /// An HTML error page where the answer should be.
    HtmlPage,
    /// No inventory at all (the local cloud's instances file gone).
    NoInventory,
    /// The cloud lost the VM's host: it cannot tell (zVirt's `not_responding`).
    HostLost,
}

/// A cloud the fencing test runs on: its StorageClass and driver, and a way to make it
/// say what it says of the second node's VM.
pub trait Cloud {
    fn name(&self) -> &str;
    fn storage_class(&self) -> &str;
    fn driver(&self) -> &str;
    fn say(&self, what: Said);
}

/// The local cloud, its inventory the instances file at [`MACHINES_HOST`].
pub struct Local;

impl Cloud for Local {
    fn name(&self) -> &str {
        "the local cloud"
    }
    fn storage_class(&self) -> &str {
        "overcast-local"
    }
    fn driver(&self) -> &str {
        crate::real_node::DRIVER
    }
    fn say(&self, what: Said) {
        match what {
            Said::Running => write_machines(&vm_b("running")),
            Said::Off => write_machines(&vm_b("shutdown")),
            Said::HtmlPage => write_machines("<html><body><h1>502 Bad Gateway</h1></body></html>"),
            Said::NoInventory => remove_machines(),
            Said::HostLost => panic!("the local cloud has no word for a lost host"),
        }
    }
}

/// The inventory, replaced at once (as a cloud's changes: never half-written).
pub fn write_machines(text: &str) {
    std::fs::create_dir_all(MACHINES_HOST).unwrap();
    let tmp = Path::new(MACHINES_HOST).join(".instances.json.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, Path::new(MACHINES_HOST).join("instances.json")).unwrap();
}

pub fn remove_machines() {
    let _ = std::fs::remove_file(Path::new(MACHINES_HOST).join("instances.json"));
}

/// The second node's VM in `state` (`running`, `shutdown`), at its address.
pub fn vm_b(state: &str) -> String {
    format!(
        r#"[{{"name": "{}", "addresses": [{{"type": "InternalIP", "address": "{}"}}], "state": "{state}"}}]"#,
        node_b::NAME,
        node_b::ADDRESS
    )
}

/// The local overlay's own cloud-config Secret (deploy/overlays/local/cloud-config.yaml),
/// with its `instancesFile` line uncommented or as shipped.
pub fn config_secret(instances: bool) -> String {
    let overlay = std::fs::read_to_string(
        crate::package_dir().join("../deploy/overlays/local/cloud-config.yaml"),
    )
    .unwrap();
    if !instances {
        return overlay;
    }
    let line = format!("# instancesFile: {MACHINES_POD}/instances.json");
    assert!(
        overlay.contains(&line),
        "the local overlay's cloud-config says where the instances file is: {line}"
    );
    overlay.replace(&line, &line[2..])
}

/// How the ccm runs: fencing or not, and its timings (`None`: the defaults).
pub struct Ccm {
    pub fencing: bool,
    pub grace: Option<u64>,
    pub sync_period: Option<u64>,
}

/// The csi controller and the ccm read the instances file — the overlay's `instancesFile`
/// line uncommented, as the quickstart says, nothing else patched — and are restarted to
/// read it; the ccm runs as `ccm` says, on `vm` (the node that lives). Waits for both to
/// roll out.
pub fn configure(node: &Node, ccm: &Ccm) {
    node.apply("fencing-config", &[config_secret(true)]);
    node.kubectl(&[
        "-n",
        "kube-system",
        "rollout",
        "restart",
        "deployment",
        "overcast-csi-controller",
    ]);
    run_ccm(node, ccm);
}

fn patch(node: &Node, deployment: &str, body: &str) {
    node.kubectl(&[
        "-n",
        "kube-system",
        "patch",
        "deployment",
        deployment,
        "-p",
        body,
    ]);
}

/// The ccm runs as `ccm` says, on `vm` (the node that lives); waits for it and the csi
/// controller to roll out.
pub fn run_ccm(node: &Node, ccm: &Ccm) {
    let args = node.kubectl(&[
        "-n",
        "kube-system",
        "get",
        "deployment",
        "overcast-cloud-controller-manager",
        "-o",
        "jsonpath={.spec.template.spec.containers[?(@.name==\"ccm\")].args}",
    ]);
    let mut args: Vec<String> = serde_json::from_str(&args).expect("the ccm's args");
    args.retain(|a| {
        ![
            "--controllers",
            "--node-fencing-grace",
            "--node-sync-period",
        ]
        .iter()
        .any(|f| a.starts_with(f))
    });
    if ccm.fencing {
        args.push("--controllers=*,node-fencing".to_owned());
    }
    if let Some(g) = ccm.grace {
        args.push(format!("--node-fencing-grace={g}s"));
    }
    if let Some(s) = ccm.sync_period {
        args.push(format!("--node-sync-period={s}"));
    }
    let body = serde_json::json!({"spec": {"template": {"spec": {
        "nodeSelector": {"kubernetes.io/hostname": "vm"},
        "containers": [{"name": "ccm", "args": args}],
    }}}});
    patch(node, "overcast-cloud-controller-manager", &body.to_string());
    for name in [
        "overcast-csi-controller",
        "overcast-cloud-controller-manager",
    ] {
        node.kubectl(&[
            "-n",
            "kube-system",
            "rollout",
            "status",
            "deployment",
            name,
            "--timeout=180s",
        ]);
    }
}

/// A StatefulSet of one pod in `ns`, tolerating the second node's taint, writing
/// `written-on-<node>` to its new volume of `class`, Ready while it can read it.
pub fn statefulset(ns: &str, class: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: fenced, namespace: {ns}}}
spec:
  serviceName: fenced
  replicas: 1
  selector: {{matchLabels: {{app: fenced}}}}
  template:
    metadata: {{labels: {{app: fenced}}}}
    spec:
      terminationGracePeriodSeconds: 1
      tolerations: [{{key: {taint}, operator: Exists, effect: NoSchedule}}]
      containers:
      - name: c
        image: busybox:1.35.0
        imagePullPolicy: Never
        command: [sh, -c, "[ -f /data/file ] || (echo written-on-$NODE > /data/file && sync); sleep 3600"]
        env: [{{name: NODE, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}]
        readinessProbe: {{exec: {{command: [cat, /data/file]}}, periodSeconds: 1}}
        volumeMounts: [{{name: data, mountPath: /data}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: {class}
      resources: {{requests: {{storage: 64Mi}}}}
"#,
        taint = node_b::TAINT
    )
}

const POD_NODE_AND_READY: &str =
    "jsonpath={.spec.nodeName} {.status.conditions[?(@.type==\"Ready\")].status}";

/// `<node> <Ready status>` of the StatefulSet's pod (empty while there is none).
pub fn pod_node_and_ready(node: &Node, ns: &str) -> String {
    node.try_kubectl(&["-n", ns, "get", "pod", "fenced-0", "-o", POD_NODE_AND_READY])
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Waits until the StatefulSet's pod is Ready on `on`.
pub fn wait_pod_ready_on(node: &Node, ns: &str, on: &str, limit: Duration) {
    node.wait_for(
        &format!("the pod Ready on {on}"),
        limit,
        &["-n", ns, "get", "pod", "fenced-0", "-o", POD_NODE_AND_READY],
        |out| out.trim() == format!("{on} True"),
    );
}

/// The StatefulSet's pod moved to the second node: `vm` cordoned while it is placed.
pub fn pod_to_vm_b(node: &Node, ns: &str) {
    node.kubectl(&["cordon", "vm"]);
    if !pod_node_and_ready(node, ns).starts_with(node_b::NAME) {
        let _ = node.try_kubectl(&["-n", ns, "delete", "pod", "fenced-0", "--wait=true"]);
    }
    wait_pod_ready_on(node, ns, node_b::NAME, Duration::from_secs(180));
    node.kubectl(&["uncordon", "vm"]);
}

/// A field of the second node's Node (`jsonpath`), empty when it cannot be read.
fn of_b(node: &Node, jsonpath: &str) -> String {
    node.try_kubectl(&["get", "node", node_b::NAME, "-o", jsonpath])
        .unwrap_or_default()
        .trim()
        .to_owned()
}

pub fn taints_of_b(node: &Node) -> String {
    of_b(node, "jsonpath={.spec.taints[*].key}")
}

/// Where the PV is attached, as the attach/detach controller recorded it
/// (`<node>:<attached> …`).
pub fn attachment(node: &Node, pv: &str) -> String {
    node.kubectl(&[
        "get",
        "volumeattachment",
        "-o",
        &format!(
            "jsonpath={{range .items[?(@.spec.source.persistentVolumeName==\"{pv}\")]}}{{.spec.nodeName}}:{{.status.attached}} {{end}}"
        ),
    ])
    .trim()
    .to_owned()
}

/// The second node's Ready condition's status.
pub fn ready_of_b(node: &Node) -> String {
    of_b(
        node,
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    )
}

/// The PV of the StatefulSet's claim.
pub fn pv_of(node: &Node, ns: &str) -> String {
    node.kubectl(&[
        "-n",
        ns,
        "get",
        "pvc",
        "data-fenced-0",
        "-o",
        "jsonpath={.spec.volumeName}",
    ])
    .trim()
    .to_owned()
}
