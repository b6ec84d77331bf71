//! The API steps of docs/migrate/README.md, run with the kubectl CLI against the kit's real
//! API server, per cloud: upstream's CSIDriver (as its chart or module ships it), a
//! PersistentVolume and an attached VolumeAttachment exactly as upstream's sidecars write
//! them; then upstream's controller scaled to 0, the CSIDriver deleted, `kubectl apply -k`
//! of our overlay, upstream's node DaemonSet deleted — after which every PV and
//! VolumeAttachment is untouched (same resourceVersion), the CSIDriver and StorageClasses
//! are ours under the PVs' driver name — and the roll back. Runs when
//! `OVERCAST_TEST_KUBECONFIG` is set and kubectl is installed; otherwise says it skipped.

use std::process::Command;

use overcast_integration::say_skipped;
use serde_json::{json, Value};

const ENV: &str = "OVERCAST_TEST_KUBECONFIG";

struct Upstream {
    cloud: &'static str,
    driver: &'static str,
    /// Upstream's CSIDriver spec.
    csidriver: Value,
    volume_handle: &'static str,
    volume_attributes: Value,
    /// (key, value) of the PV's node affinity, where upstream writes one.
    affinity: Option<(&'static str, &'static str)>,
    /// The VolumeAttachment's attachmentMetadata (the publish context).
    publish_context: Value,
    /// Where upstream runs, and its controller Deployment and node DaemonSet.
    namespace: &'static str,
    controller: &'static str,
    node: &'static str,
}

fn upstreams() -> Vec<Upstream> {
    vec![
        // cloud-provider-openstack's chart (cinder-csi-driver.yaml); the PV as
        // external-provisioner writes cinder's CreateVolume answer (v1.31: topology, no
        // context); ControllerPublish's DevicePath.
        Upstream {
            cloud: "openstack",
            driver: "cinder.csi.openstack.org",
            csidriver: json!({"attachRequired": true, "podInfoOnMount": true,
                "volumeLifecycleModes": ["Persistent", "Ephemeral"]}),
            volume_handle: "3f7a1c52-9b1e-4c8e-a0d2-5e6f7a8b9c0d",
            volume_attributes: json!({"storage.kubernetes.io/csiProvisionerIdentity":
                "1732000000000-8081-cinder.csi.openstack.org"}),
            affinity: Some(("topology.cinder.csi.openstack.org/zone", "nova")),
            publish_context: json!({"DevicePath": "/dev/vdb"}),
            namespace: "d8-cloud-provider-openstack",
            controller: "csi-controller",
            node: "csi-node",
        },
        // ovirt-csi-driver (`csidriver.yaml`: attachRequired, podInfoOnMount); volume id =
        // the disk id, no topology, an empty publish context.
        Upstream {
            cloud: "zvirt",
            driver: "csi.ovirt.org",
            csidriver: json!({"attachRequired": true, "podInfoOnMount": true}),
            volume_handle: "6d3b2a10-4c5e-4f60-8a71-92b3c4d5e6f7",
            volume_attributes: json!({"storage.kubernetes.io/csiProvisionerIdentity":
                "1732000000000-8081-csi.ovirt.org"}),
            affinity: None,
            publish_context: json!({}),
            namespace: "d8-cloud-provider-zvirt",
            controller: "csi-controller",
            node: "csi-node",
        },
        // vsphere-csi-driver v3.0.3: its volume type in the context, diskUUID published.
        Upstream {
            cloud: "vsphere",
            driver: "csi.vsphere.vmware.com",
            csidriver: json!({"attachRequired": true, "podInfoOnMount": false}),
            volume_handle: "8b2c7e34-1d5f-4a6b-9c8d-0e1f2a3b4c5d",
            volume_attributes: json!({"type": "vSphere CNS Block Volume",
                "storage.kubernetes.io/csiProvisionerIdentity":
                    "1732000000000-8081-csi.vsphere.vmware.com"}),
            affinity: Some(("failure-domain.beta.kubernetes.io/zone", "zone-a")),
            publish_context: json!({"type": "vSphere CNS Block Volume",
                "diskUUID": "6000c29a5b1d8e3f9c2b7a4d1e0f3a5b"}),
            namespace: "d8-cloud-provider-vsphere",
            controller: "csi-controller",
            node: "csi-node",
        },
        // Deckhouse's DVP module (csidriver.yaml: podInfoOnMount false); volume id = the
        // VirtualDisk's name = the PV name; empty context.
        Upstream {
            cloud: "dvp",
            driver: "csi.dvp.deckhouse.io",
            csidriver: json!({"attachRequired": true, "podInfoOnMount": false}),
            volume_handle: "pvc-0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0",
            volume_attributes: json!({"storage.kubernetes.io/csiProvisionerIdentity":
                "1732000000000-8081-csi.dvp.deckhouse.io"}),
            affinity: None,
            publish_context: json!({}),
            namespace: "d8-cloud-provider-dvp",
            controller: "csi-controller",
            node: "csi-node",
        },
    ]
}

struct Kubectl {
    kubeconfig: String,
}

impl Kubectl {
    fn run(&self, args: &[&str], stdin: Option<&Value>) -> Result<String, String> {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        let out = if let Some(doc) = stdin {
            use std::io::Write;
            let mut child = cmd
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("kubectl");
            child
                .stdin
                .take()
                .unwrap()
                .write_all(doc.to_string().as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        } else {
            cmd.output().expect("kubectl")
        };
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            Ok(text)
        } else {
            Err(text)
        }
    }

    fn ok(&self, args: &[&str]) -> String {
        self.run(args, None)
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
    }

    fn create(&self, doc: &Value) {
        self.run(&["create", "-f", "-"], Some(doc))
            .unwrap_or_else(|e| panic!("kubectl create {doc}: {e}"));
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }
}

fn pv_name(u: &Upstream) -> String {
    match u.cloud {
        "dvp" => u.volume_handle.to_owned(),
        cloud => format!("pvc-switch-{cloud}"),
    }
}

/// What the switch must not touch: the PV's and the VolumeAttachment's resourceVersions.
fn versions(k: &Kubectl, u: &Upstream) -> (String, String) {
    let pv = k.json(&["get", "pv", &pv_name(u)]);
    let va = k.json(&["get", "volumeattachment", &format!("va-switch-{}", u.cloud)]);
    let rv = |o: &Value| {
        o["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(va["status"]["attached"], true);
    // An empty map is stored as none.
    let context = match &va["status"]["attachmentMetadata"] {
        Value::Null => json!({}),
        other => other.clone(),
    };
    assert_eq!(context, u.publish_context);
    (rv(&pv), rv(&va))
}

/// Upstream's objects, as its chart and sidecars leave them on a running cluster.
fn upstream_cluster(k: &Kubectl, u: &Upstream) {
    let _ = k.run(&["create", "namespace", u.namespace], None);
    k.create(
        &json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": {"name": u.driver}, "spec": u.csidriver}),
    );
    let labels = json!({"app": format!("{}-{}", u.cloud, u.controller)});
    k.create(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": u.controller, "namespace": u.namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                {"name": "csi-plugin", "image": "upstream.invalid/csi:stand-in"}]}}}}));
    let node_labels = json!({"app": format!("{}-{}", u.cloud, u.node)});
    k.create(&json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": u.node, "namespace": u.namespace},
        "spec": {"selector": {"matchLabels": node_labels},
            "template": {"metadata": {"labels": node_labels}, "spec": {"containers": [
                {"name": "csi-plugin", "image": "upstream.invalid/csi:stand-in"}]}}}}));
    let mut pv = json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": pv_name(u),
            "annotations": {"pv.kubernetes.io/provisioned-by": u.driver},
            "finalizers": ["kubernetes.io/pv-protection",
                "external-provisioner.volume.kubernetes.io/finalizer"]},
        "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
            "csi": {"driver": u.driver, "fsType": "ext4", "volumeHandle": u.volume_handle,
                "volumeAttributes": u.volume_attributes},
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": format!("{}-upstream", u.cloud),
            "volumeMode": "Filesystem"}});
    if let Some((key, value)) = u.affinity {
        pv["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]}});
    }
    k.create(&pv);
    let va = format!("va-switch-{}", u.cloud);
    k.create(
        &json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": va},
        "spec": {"attacher": u.driver, "nodeName": "worker-0",
            "source": {"persistentVolumeName": pv_name(u)}}}),
    );
    // external-attacher's answer, in the status subresource.
    let status = json!({"status": {"attached": true, "attachmentMetadata": u.publish_context}});
    k.ok(&[
        "patch",
        "volumeattachment",
        &va,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
}

fn overlay(cloud: &str) -> String {
    overcast_integration::package_dir()
        .join("../deploy/overlays")
        .join(cloud)
        .display()
        .to_string()
}

/// `kubectl apply -k` of our overlay, with kubectl's validation on, as a user runs it.
fn apply_overlay(k: &Kubectl, cloud: &str) -> Result<String, String> {
    let dir = overlay(cloud);
    k.run(&["apply", "-k", &dir], None)
}

/// Removes the test's objects (and, with `ours`, the overlay's, waited for: a later test
/// installing the same CRDs must not meet them terminating).
fn cleanup(k: &Kubectl, u: &Upstream, ours: bool) {
    let pv = pv_name(u);
    let _ = k.run(
        &[
            "patch",
            "pv",
            &pv,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
        None,
    );
    for args in [
        vec!["delete", "pv", &pv, "--ignore-not-found"],
        vec![
            "delete",
            "volumeattachment",
            &format!("va-switch-{}", u.cloud),
            "--ignore-not-found",
        ],
        // Its namespace stays: an API server without a namespace controller (the kit's)
        // would keep it terminating.
        vec![
            "-n",
            u.namespace,
            "delete",
            "deployment",
            u.controller,
            "--ignore-not-found",
        ],
        vec![
            "-n",
            u.namespace,
            "delete",
            "daemonset",
            u.node,
            "--ignore-not-found",
        ],
        vec!["delete", "csidriver", u.driver, "--ignore-not-found"],
    ] {
        let _ = k.run(&args, None);
    }
    if ours {
        let dir = overlay(u.cloud);
        // Bounded: a CRD's deletion waits for every object of its kind, and one another
        // test left with a finalizer held it — and this lane — for good (a run here).
        let _ = k.run(
            &["delete", "-k", &dir, "--ignore-not-found", "--timeout=120s"],
            None,
        );
    }
}

#[test]
fn each_cloud_s_switch_keeps_every_volume_and_rolls_back() {
    // It applies and deletes the overlays' cluster-wide objects, which other tests use.
    let _cluster = overcast_integration::real::cluster_turn_blocking();
    let Ok(kubeconfig) = std::env::var(ENV) else {
        say_skipped(&format!(
            "set {ENV} to a disposable cluster's kubeconfig to run the switch steps of docs/migrate/"
        ));
        return;
    };
    if Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        say_skipped("the switch steps of docs/migrate/: kubectl is not installed");
        return;
    }
    let k = Kubectl { kubeconfig };
    // Node-manager's namespace, which a Deckhouse cluster has (the overlays' capi parts).
    let _ = k.run(&["create", "namespace", "d8-cloud-instance-manager"], None);
    for u in upstreams() {
        cleanup(&k, &u, false);
        upstream_cluster(&k, &u);
        let before = versions(&k, &u);

        // 0/1: upstream's controller stopped.
        k.ok(&[
            "-n",
            u.namespace,
            "scale",
            "deployment",
            u.controller,
            "--replicas=0",
        ]);
        // Without step 2 the apply fails on the CSIDriver's immutable fields — and says so.
        let refused = apply_overlay(&k, u.cloud).expect_err("applied over upstream's CSIDriver");
        assert!(
            refused.contains("field is immutable"),
            "{}: {refused}",
            u.cloud
        );
        // 2, 3: the CSIDriver replaced, ours applied.
        k.ok(&["delete", "csidriver", u.driver]);
        apply_overlay(&k, u.cloud).unwrap_or_else(|e| panic!("{}: {e}", u.cloud));
        // 4: upstream's node plugins gone.
        k.ok(&["-n", u.namespace, "delete", "daemonset", u.node]);

        // 5: nothing of the volumes changed; the driver they name is ours.
        assert_eq!(
            versions(&k, &u),
            before,
            "{}: the PV or its attachment changed",
            u.cloud
        );
        let driver = k.json(&["get", "csidriver", u.driver]);
        assert_eq!(
            driver["metadata"]["labels"]["app.kubernetes.io/name"],
            "overcast"
        );
        let classes = k.json(&[
            "get",
            "storageclass",
            "-l",
            "app.kubernetes.io/name=overcast",
        ]);
        let provisioners: Vec<&str> = classes["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| {
                c["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&format!("overcast-{}", u.cloud)))
            })
            .filter_map(|c| c["provisioner"].as_str())
            .collect();
        assert!(!provisioners.is_empty(), "{}: no StorageClass", u.cloud);
        assert!(
            provisioners.iter().all(|p| *p == u.driver),
            "{}: {provisioners:?}",
            u.cloud
        );
        let node = k.json(&["-n", "kube-system", "get", "daemonset", "overcast-csi-node"]);
        let env = &node["spec"]["template"]["spec"]["containers"][0]["env"];
        assert!(
            env.as_array()
                .unwrap()
                .iter()
                .any(|e| e["name"] == "CSI_DRIVER_NAME" && e["value"] == u.driver),
            "{}: the node plugin serves another name: {env}",
            u.cloud
        );

        // Roll back: ours' controller stopped, its CSIDriver replaced by upstream's again.
        k.ok(&[
            "-n",
            "kube-system",
            "scale",
            "deployment",
            "overcast-csi-controller",
            "--replicas=0",
        ]);
        k.ok(&["delete", "csidriver", u.driver]);
        k.create(
            &json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
            "metadata": {"name": u.driver}, "spec": u.csidriver}),
        );
        assert_eq!(
            versions(&k, &u),
            before,
            "{}: changed by the roll back",
            u.cloud
        );
        cleanup(&k, &u, true);
    }
}
