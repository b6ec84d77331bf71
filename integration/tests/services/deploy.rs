//! `deploy/`: every base and overlay renders, every object parses as the API type it
//! claims, and what must agree does — driver names, socket paths between containers and
//! the path kubelet dials, ports, labels and selectors, ServiceAccounts and Secrets, the
//! cloud and its zone, images and the binaries the Dockerfiles install. The RBAC rules
//! are checked against the API calls each service declares next to its code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use overcast_cloud_local::cloud_config::LocalCloudConfig;
use overcast_csi::validation::{REGION_KEY, ZONE_KEY};
use overcast_integration::kustomize::{self, by_id};
use overcast_integration::manifests::{
    deploy_dir, env, env_field, flag, has_flag, kustomizations, memory_kib, Manifests, Pod,
};
use overcast_integration::say_skipped;
use overcast_kube::ApiCall;

const CSI_IMAGE: &str = "ghcr.io/overcast-dev/overcast-csi";
const CCM_IMAGE: &str = "ghcr.io/overcast-dev/overcast-ccm";
const NODE_SOCKET_DIR_ON_HOST: &str = "/var/lib/kubelet/plugins/csi.overcast.dev";

/// One overlay per cloud, named after it. A `<cloud>-without-deckhouse` twin is checked
/// apart (`a_twin_without_deckhouse_is_its_overlay_and_the_namespace`): it is its overlay
/// and node-manager's namespace, nothing else.
fn overlays() -> Vec<(String, Manifests)> {
    let dirs = kustomizations("overlays");
    assert!(!dirs.is_empty(), "no overlays under deploy/overlays");
    dirs.iter()
        .filter(|d| !d.to_string_lossy().ends_with("-without-deckhouse"))
        .map(|d| {
            let cloud = d.file_name().unwrap().to_string_lossy().into_owned();
            (cloud, Manifests::load(d).unwrap_or_else(|e| panic!("{e}")))
        })
        .collect()
}

#[test]
fn every_base_and_overlay_renders_as_typed_objects() {
    let mut count = 0;
    for dir in kustomizations("base")
        .into_iter()
        .chain(kustomizations("overlays"))
    {
        let m = Manifests::load(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert!(!m.all.is_empty(), "{} renders nothing", dir.display());
        count += m.all.len();
        // Node-manager's namespace is Deckhouse's where Deckhouse runs: not labelled ours.
        for r in m.all.iter().filter(|r| r.kind() != "Namespace") {
            let labels = &r.object["metadata"]["labels"];
            assert_eq!(
                labels["app.kubernetes.io/name"],
                "overcast",
                "{} {} carries the suite's label",
                r.kind(),
                r.name()
            );
        }
    }
    assert!(count > 40, "{count} objects");
    let clouds: Vec<String> = overlays().into_iter().map(|(c, _)| c).collect();
    for cloud in ["local", "zvirt", "dvp", "openstack", "vsphere"] {
        assert!(clouds.iter().any(|c| c == cloud), "no overlay for {cloud}");
    }
}

/// The renderer must be told apart from a broken one: a patch of a missing object, a
/// misspelt field and an unsupported kustomize feature all fail.
#[test]
fn the_renderer_and_the_typed_parse_refuse_what_they_cannot_honour() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let write = |name: &str, text: &str| std::fs::write(d.join(name), text).unwrap();
    write(
        "sa.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n  namespace: x\n  labels: {app.kubernetes.io/name: overcast}\n",
    );
    write(
        "kustomization.yaml",
        "resources: [sa.yaml]\nnamePrefix: p-\n",
    );
    let err = Manifests::load(d).unwrap_err();
    assert!(err.contains("namePrefix"), "{err}");
    write(
        "patch.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: b\n",
    );
    write(
        "kustomization.yaml",
        "resources: [sa.yaml]\npatches:\n  - path: patch.yaml\n",
    );
    let err = Manifests::load(d).unwrap_err();
    assert!(err.contains("0 objects match"), "{err}");
    write(
        "sa.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n  namespace: x\nautomountServiceAccountTokn: false\n",
    );
    write("kustomization.yaml", "resources: [sa.yaml]\n");
    let err = Manifests::load(d).unwrap_err();
    assert!(err.contains("automountServiceAccountTokn"), "{err}");
    write(
        "sa.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n  namespace: x\nautomountServiceAccountToken: \"no\"\n",
    );
    assert!(Manifests::load(d).is_err(), "a string where a bool belongs");
}

/// With `kubectl` on the machine, its kustomize must render every overlay to the same
/// objects as the test renderer (so the strategic-merge subset above is kustomize's).
#[test]
fn kubectl_kustomize_agrees_with_the_test_renderer() {
    let Ok(out) = std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
    else {
        say_skipped("kubectl kustomize cross-check: kubectl is not installed");
        return;
    };
    if !out.status.success() {
        say_skipped("kubectl kustomize cross-check: kubectl does not run");
        return;
    }
    for dir in kustomizations("base")
        .into_iter()
        .chain(kustomizations("overlays"))
    {
        let out = std::process::Command::new("kubectl")
            .arg("kustomize")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl kustomize {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs = kustomize::parse_stream(&String::from_utf8_lossy(&out.stdout), &dir).unwrap();
        let ours: Vec<_> = kustomize::render(&dir)
            .unwrap()
            .into_iter()
            .map(|r| r.object)
            .collect();
        // kubectl writes a whole float (a schema's `minimum: 1.0`) back as an integer.
        let theirs: Vec<_> = theirs.into_iter().map(whole_floats_as_integers).collect();
        let ours: Vec<_> = ours.into_iter().map(whole_floats_as_integers).collect();
        let (theirs, ours) = (by_id(&theirs), by_id(&ours));
        assert_eq!(
            theirs.keys().collect::<Vec<_>>(),
            ours.keys().collect::<Vec<_>>(),
            "{}",
            dir.display()
        );
        for (id, object) in &theirs {
            assert_eq!(object, &ours[id], "{}: {id}", dir.display());
        }
    }
}

/// The path `inside` a container, as (volume, path within the volume).
fn volume_path(pod: &Pod, c: &Container, inside: &str) -> (String, String) {
    let m = c
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| inside == m.mount_path || inside.starts_with(&format!("{}/", m.mount_path)))
        .max_by_key(|m| m.mount_path.len())
        .unwrap_or_else(|| panic!("{}/{}: {inside} is on no volume", pod.name, c.name));
    let rest = inside[m.mount_path.len()..].trim_start_matches('/');
    let sub = m.sub_path.clone().unwrap_or_default();
    (
        m.name.clone(),
        Path::new(&sub).join(rest).display().to_string(),
    )
}

fn host_path(pod: &Pod, volume: &str) -> Option<String> {
    pod.spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == volume)
        .and_then(|v| v.host_path.as_ref())
        .map(|h| h.path.clone())
}

fn socket(address: &str) -> &str {
    address.strip_prefix("unix://").unwrap_or(address)
}

fn privileged(c: &Container) -> bool {
    c.security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false)
}

/// The port a probe or Service names, resolved against a container's ports.
fn port_number(c: &Container, port: &IntOrString) -> Option<i32> {
    match port {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port),
    }
}

fn address_port(address: &str) -> i32 {
    address
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{address} has no port"))
}

fn liveness_port(pod: &Pod, c: &Container) -> (i32, String) {
    let probe: &Probe = c
        .liveness_probe
        .as_ref()
        .unwrap_or_else(|| panic!("{}/{} has no liveness probe", pod.name, c.name));
    let get = probe.http_get.as_ref().expect("an HTTP probe");
    let port = port_number(c, &get.port).unwrap_or_else(|| {
        panic!(
            "{}/{}: probe port {:?} is not a container port",
            pod.name, c.name, get.port
        )
    });
    (port, get.path.clone().unwrap_or_default())
}

/// The CSI driver's name per overlay: upstream's where a cloud's PersistentVolumes must
/// keep working when Overcast replaces its driver (a PV names its driver for good).
fn driver_name(cloud: &str) -> String {
    match cloud {
        "dvp" => "csi.dvp.deckhouse.io".into(),
        // Deckhouse's zVirt module deploys openshift/ovirt-csi-driver under this name
        // (its templates/csi/csidriver.yaml and storage-classes.yaml).
        "zvirt" => "csi.ovirt.org".into(),
        // cinder-csi-plugin's (and Deckhouse's openstack module's).
        "openstack" => "cinder.csi.openstack.org".into(),
        // vsphere-csi-driver's name, on every vSphere PV it made.
        "vsphere" => "csi.vsphere.vmware.com".into(),
        other => format!("{other}.csi.overcast.dev"),
    }
}

#[test]
fn csi_driver_names_sockets_and_kubelet_paths_agree() {
    for (cloud, m) in overlays() {
        let at = |what: &str| format!("overlay {cloud}: {what}");
        // One CSIDriver, named for the cloud, with the spec the issue names.
        assert_eq!(m.csi_drivers.len(), 1, "{}", at("one CSIDriver"));
        let driver = m.csi_drivers[0].metadata.name.clone().unwrap();
        assert_eq!(driver, driver_name(&cloud), "{}", at("driver name"));
        let spec = &m.csi_drivers[0].spec;
        assert_eq!(spec.attach_required, Some(true), "{}", at("attachRequired"));
        assert_eq!(
            spec.pod_info_on_mount,
            Some(false),
            "{}",
            at("podInfoOnMount")
        );
        assert_eq!(
            spec.fs_group_policy.as_deref(),
            Some("File"),
            "{}",
            at("fsGroupPolicy")
        );
        assert_eq!(
            spec.volume_lifecycle_modes.as_deref(),
            Some(&["Persistent".to_owned()][..]),
            "{}",
            at("persistent volumes only")
        );
        // Every StorageClass provisions with it.
        for sc in &m.storage_classes {
            assert_eq!(sc.provisioner, driver, "{}", at("StorageClass provisioner"));
        }

        let controller = m.pod("overcast-csi-controller");
        let node = m.pod("overcast-csi-node");
        for pod in [&controller, &node] {
            let csi = pod.container("csi");
            assert_eq!(
                env(csi, "CSI_DRIVER_NAME").as_deref(),
                Some(&driver[..]),
                "{}",
                at("csi --driver-name")
            );
            assert_eq!(
                env_field(csi, "KUBE_NODE_NAME").as_deref(),
                Some("spec.nodeName"),
                "{}",
                at("the node id is the Node's name")
            );
            assert_eq!(
                csi.image.as_deref().map(|i| i.starts_with(CSI_IMAGE)),
                Some(true)
            );
        }
        let mode = |p: &Pod| flag(p.container("csi"), "mode");
        assert_eq!(
            mode(&controller).as_deref(),
            Some("controller"),
            "{}",
            at("controller mode")
        );
        assert_eq!(mode(&node).as_deref(), Some("node"), "{}", at("node mode"));
        assert_eq!(
            env(controller.container("csi"), "OVERCAST_CLOUD").as_deref(),
            Some(&cloud[..])
        );

        // The sidecars dial the socket the csi container serves: same volume, same file.
        let endpoint = flag(controller.container("csi"), "endpoint").expect("--endpoint");
        let served = volume_path(&controller, controller.container("csi"), socket(&endpoint));
        for name in ["csi-provisioner", "csi-attacher", "csi-resizer"] {
            let c = controller.container(name);
            let address = flag(c, "csi-address").unwrap_or_else(|| panic!("{name} --csi-address"));
            assert_eq!(
                volume_path(&controller, c, socket(&address)),
                served,
                "{}",
                at(name)
            );
            assert!(
                has_flag(c, "leader-election"),
                "{}",
                at(&format!("{name} elects a leader"))
            );
            assert_eq!(
                flag(c, "leader-election-namespace").as_deref(),
                controller.namespace.as_str().into()
            );
        }
        let provisioner = controller.container("csi-provisioner");
        assert!(
            has_flag(provisioner, "extra-create-metadata"),
            "{}",
            at("extra create metadata")
        );
        // The snapshot sidecar only where the cloud cuts snapshots (it exits at its start
        // on a driver that advertises none): the local cloud's, OpenStack's, DVP's and
        // vSphere's overlays.
        // It dials the same socket, elects a leader, and sends the VolumeSnapshot's names.
        let snapshotter = controller
            .spec
            .containers
            .iter()
            .find(|c| c.name == "csi-snapshotter");
        assert_eq!(
            snapshotter.is_some(),
            matches!(
                cloud.as_str(),
                "local" | "openstack" | "dvp" | "dvp-without-deckhouse" | "vsphere"
            ),
            "{}",
            at("csi-snapshotter only where the cloud cuts snapshots")
        );
        if let Some(c) = snapshotter {
            let address = flag(c, "csi-address").expect("csi-snapshotter --csi-address");
            assert_eq!(
                volume_path(&controller, c, socket(&address)),
                served,
                "{}",
                at("csi-snapshotter")
            );
            assert!(
                has_flag(c, "leader-election"),
                "{}",
                at("csi-snapshotter elects a leader")
            );
            assert!(
                has_flag(c, "extra-create-metadata"),
                "{}",
                at("csi-snapshotter's metadata")
            );
        }
        // Capacity tracking: the driver says so, the provisioner publishes it, owned by the
        // Deployment (pod → ReplicaSet → Deployment), found through its own pod's name.
        assert_eq!(
            m.csi_drivers[0].spec.storage_capacity,
            Some(true),
            "{}",
            at("CSIDriver storageCapacity")
        );
        assert!(
            has_flag(provisioner, "enable-capacity"),
            "{}",
            at("--enable-capacity")
        );
        assert_eq!(controller.kind, "Deployment");
        assert_eq!(
            flag(provisioner, "capacity-ownerref-level").as_deref(),
            Some("2")
        );
        assert_eq!(
            env_field(provisioner, "NAMESPACE").as_deref(),
            Some("metadata.namespace")
        );
        assert_eq!(
            env_field(provisioner, "POD_NAME").as_deref(),
            Some("metadata.name")
        );
        assert_eq!(
            flag(provisioner, "feature-gates").as_deref(),
            Some("Topology=true")
        );
        let fstype = flag(provisioner, "default-fstype").expect("--default-fstype");
        assert!(
            ["ext4", "xfs"].contains(&fstype.as_str()),
            "{}",
            at("a fstype the node formats")
        );
        let (port, path) = liveness_port(&controller, controller.container("csi"));
        let metrics =
            flag(controller.container("csi"), "metrics-address").expect("--metrics-address");
        assert_eq!(
            (port, path.as_str()),
            (address_port(&metrics), "/healthz"),
            "{}",
            at("controller health")
        );

        // Node: the registrar and kubelet reach the node socket.
        let csi = node.container("csi");
        let registrar = node.container("registrar");
        let endpoint = flag(csi, "endpoint").expect("node --endpoint");
        let (volume, file) = volume_path(&node, csi, socket(&endpoint));
        let address = flag(registrar, "csi-address").expect("registrar --csi-address");
        assert_eq!(
            volume_path(&node, registrar, socket(&address)),
            (volume.clone(), file.clone()),
            "{}",
            at("registrar dials the node socket")
        );
        let on_host = format!(
            "{}/{file}",
            host_path(&node, &volume).expect("socket dir is a hostPath")
        );
        assert_eq!(on_host, format!("{NODE_SOCKET_DIR_ON_HOST}/csi.sock"));
        assert_eq!(
            flag(registrar, "kubelet-registration-path").as_deref(),
            Some(&on_host[..]),
            "{}",
            at("kubelet dials the socket's host path")
        );
        let reg_dir =
            flag(registrar, "plugin-registration-dir").expect("--plugin-registration-dir");
        let (reg_volume, rest) = volume_path(&node, registrar, &reg_dir);
        assert_eq!(rest, "");
        assert_eq!(
            host_path(&node, &reg_volume).as_deref(),
            Some("/var/lib/kubelet/plugins_registry")
        );
        // The node state file lives on the host, so a restarted pod still knows its mounts.
        let state = flag(csi, "node-state-dir").expect("--node-state-dir");
        let (state_volume, _) = volume_path(&node, csi, &state);
        assert!(
            host_path(&node, &state_volume).is_some(),
            "{}",
            at("node state on the host")
        );

        // kubelet's directory with Bidirectional propagation, /dev, privileged.
        let kubelet = csi
            .volume_mounts
            .iter()
            .flatten()
            .find(|v| host_path(&node, &v.name).as_deref() == Some("/var/lib/kubelet"))
            .expect("kubelet dir mounted");
        assert_eq!(
            kubelet.mount_path,
            "/var/lib/kubelet",
            "{}",
            at("pod paths are kubelet's")
        );
        assert_eq!(kubelet.mount_propagation.as_deref(), Some("Bidirectional"));
        assert!(csi.volume_mounts.iter().flatten().any(
            |v| v.mount_path == "/dev" && host_path(&node, &v.name).as_deref() == Some("/dev")
        ));
        assert!(privileged(csi), "{}", at("node csi is privileged"));
        let (port, path) = liveness_port(&node, registrar);
        let health = flag(registrar, "health-address").expect("--health-address");
        assert_eq!(
            (port, path.as_str()),
            (address_port(&health), "/healthz"),
            "{}",
            at("registrar health")
        );
    }
}

#[test]
fn storage_classes_match_the_topology_the_driver_reports() {
    for (cloud, m) in overlays() {
        let defaults: Vec<_> = m
            .storage_classes
            .iter()
            .filter(|s| {
                s.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("storageclass.kubernetes.io/is-default-class"))
                    .map(String::as_str)
                    == Some("true")
            })
            .collect();
        assert_eq!(
            defaults.len(),
            1,
            "overlay {cloud}: one default StorageClass"
        );
        assert_eq!(
            defaults[0].volume_binding_mode.as_deref(),
            Some("WaitForFirstConsumer")
        );
        assert_eq!(defaults[0].allow_volume_expansion, Some(true));
        let pinned: Vec<_> = m
            .storage_classes
            .iter()
            .filter(|s| s.allowed_topologies.is_some())
            .collect();
        assert!(
            !pinned.is_empty(),
            "overlay {cloud}: an example with allowedTopologies"
        );
        let zone_config = m
            .secrets
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some("overcast-cloud-config"))
            .and_then(|s| s.string_data.as_ref()?.get("cloud-config").cloned())
            .unwrap_or_else(|| panic!("overlay {cloud}: cloud-config Secret"));
        for sc in &pinned {
            for term in sc.allowed_topologies.iter().flatten() {
                for e in term.match_label_expressions.iter().flatten() {
                    assert!(
                        [ZONE_KEY, REGION_KEY].contains(&e.key.as_str()),
                        "overlay {cloud}: {} is not a key NodeGetInfo reports",
                        e.key
                    );
                    if cloud == "local" {
                        let c = LocalCloudConfig::parse(&zone_config).unwrap();
                        let want = if e.key == ZONE_KEY {
                            c.zone(None)
                        } else {
                            c.region(None)
                        };
                        assert_eq!(e.values, vec![want], "the zone the cloud-config names");
                    }
                }
            }
        }
        for sc in &m.storage_classes {
            if let Some(fs) = sc
                .parameters
                .as_ref()
                .and_then(|p| p.get("csi.storage.k8s.io/fstype"))
            {
                assert!(
                    ["ext4", "xfs"].contains(&fs.as_str()),
                    "overlay {cloud}: fstype {fs}"
                );
            }
        }
    }
}

#[test]
fn workloads_agree_on_labels_ports_accounts_secrets_and_the_cloud() {
    for (cloud, m) in overlays() {
        let at = |what: &str| format!("overlay {cloud}: {what}");
        let pods = m.pods();
        for p in &pods {
            assert!(
                !p.selector.is_empty(),
                "{}",
                at(&format!("{} selects by labels", p.name))
            );
            for (k, v) in &p.selector {
                assert_eq!(
                    p.labels.get(k),
                    Some(v),
                    "{}",
                    at(&format!("{} selector matches its pods", p.name))
                );
            }
        }
        // Selectors select exactly one workload's pods.
        let selects = |sel: &BTreeMap<String, String>| -> Vec<&Pod> {
            pods.iter()
                .filter(|p| sel.iter().all(|(k, v)| p.labels.get(k) == Some(v)))
                .collect()
        };
        for s in &m.services {
            let spec = s.spec.as_ref().unwrap();
            let chosen = selects(spec.selector.as_ref().unwrap());
            assert_eq!(chosen.len(), 1, "{}", at("a Service selects one workload"));
            for port in spec.ports.iter().flatten() {
                let target = port
                    .target_port
                    .clone()
                    .unwrap_or(IntOrString::Int(port.port));
                assert!(
                    chosen[0]
                        .spec
                        .containers
                        .iter()
                        .any(|c| port_number(c, &target).is_some_and(|n| c
                            .ports
                            .iter()
                            .flatten()
                            .any(|p| p.container_port == n))),
                    "{}",
                    at("the Service's targetPort is a container port")
                );
            }
        }
        for p in &pods {
            if let Some(a) = p
                .spec
                .affinity
                .as_ref()
                .and_then(|a| a.pod_affinity.as_ref())
            {
                for term in a
                    .required_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                {
                    let sel = term
                        .label_selector
                        .as_ref()
                        .and_then(|s| s.match_labels.clone())
                        .unwrap_or_default();
                    assert_eq!(
                        selects(&sel).len(),
                        1,
                        "{}",
                        at("podAffinity names a workload")
                    );
                }
            }
            // ServiceAccounts exist; Secrets mounted exist and hold the keys read.
            let sa = p
                .spec
                .service_account_name
                .clone()
                .unwrap_or_else(|| "default".into());
            assert!(
                m.service_accounts
                    .iter()
                    .any(|s| s.metadata.name.as_deref() == Some(&sa[..])
                        && s.metadata.namespace.as_deref() == Some(&p.namespace[..])),
                "{}",
                at(&format!(
                    "{} runs as ServiceAccount {sa}, which exists",
                    p.name
                ))
            );
            for v in p.spec.volumes.iter().flatten() {
                if let Some(secret) = &v.secret {
                    let name = secret.secret_name.clone().unwrap_or_default();
                    assert!(
                        m.secrets
                            .iter()
                            .any(|s| s.metadata.name.as_deref() == Some(&name[..])
                                && s.metadata.namespace.as_deref() == Some(&p.namespace[..])),
                        "{}",
                        at(&format!(
                            "{} mounts Secret {name}, which the overlay provides",
                            p.name
                        ))
                    );
                }
            }
            for c in &p.spec.containers {
                if let Some(path) = flag(c, "cloud-config") {
                    let (volume, key) = volume_path(p, c, &path);
                    let secret = p
                        .spec
                        .volumes
                        .iter()
                        .flatten()
                        .find(|v| v.name == volume)
                        .and_then(|v| v.secret.clone())
                        .expect("cloud-config from a Secret");
                    let s = m
                        .secrets
                        .iter()
                        .find(|s| s.metadata.name == secret.secret_name)
                        .unwrap();
                    let has = s.string_data.as_ref().is_some_and(|d| d.contains_key(&key))
                        || s.data.as_ref().is_some_and(|d| d.contains_key(&key));
                    assert!(
                        has,
                        "{}",
                        at(&format!(
                            "{}/{}: --cloud-config names key {key} of the Secret",
                            p.name, c.name
                        ))
                    );
                }
                // A probe's port is one of the container's, and the one it serves on.
                if let Some(probe) = c.liveness_probe.as_ref().and_then(|p| p.http_get.as_ref()) {
                    assert!(
                        port_number(c, &probe.port).is_some(),
                        "{}",
                        at(&format!("{}/{} probe port", p.name, c.name))
                    );
                }
                for port in c.ports.iter().flatten() {
                    let serves = ["metrics-address", "health-address", "secure-listen-address"]
                        .iter()
                        .filter_map(|f| flag(c, f))
                        .any(|a| address_port(&a) == port.container_port);
                    assert!(
                        serves,
                        "{}",
                        at(&format!(
                            "{}/{} listens on port {}",
                            p.name, c.name, port.container_port
                        ))
                    );
                }
                // Requests and limits on every container (sized in BENCHMARKS.md).
                let r = c.resources.as_ref().unwrap_or_else(|| {
                    panic!("{}", at(&format!("{}/{} resources", p.name, c.name)))
                });
                let req = r.requests.as_ref().expect("requests");
                let lim = r.limits.as_ref().expect("limits");
                assert!(
                    req.contains_key("cpu") && req.contains_key("memory"),
                    "{}",
                    at(&c.name)
                );
                assert!(
                    memory_kib(&lim["memory"].0) >= memory_kib(&req["memory"].0),
                    "{}",
                    at(&c.name)
                );
                // The API refuses privileged with allowPrivilegeEscalation: false.
                if privileged(c) {
                    assert_ne!(
                        c.security_context
                            .as_ref()
                            .and_then(|s| s.allow_privilege_escalation),
                        Some(false),
                        "{}",
                        at(&c.name)
                    );
                }
            }
        }
        // Privileged: the node plugin everywhere; the controller only for the local cloud.
        for p in &pods {
            for c in &p.spec.containers {
                let allowed = (p.name == "overcast-csi-node" && c.name == "csi")
                    || (cloud == "local" && p.name == "overcast-csi-controller" && c.name == "csi");
                assert!(
                    !privileged(c) || allowed,
                    "{}",
                    at(&format!("{}/{} is privileged", p.name, c.name))
                );
            }
        }
        // One cloud for every service of the overlay.
        let ccm = m.pod("overcast-cloud-controller-manager");
        let disc = m.pod("overcast-discoverer");
        assert_eq!(
            env(ccm.container("ccm"), "OVERCAST_CLOUD").as_deref(),
            Some(&cloud[..])
        );
        assert_eq!(
            env(disc.container("discoverer"), "OVERCAST_CLOUD").as_deref(),
            Some(&cloud[..])
        );
        // The proxy fronts the discoverer's metrics address, the only way in.
        let upstream = flag(disc.container("rbac-proxy"), "upstream").unwrap();
        let metrics = flag(disc.container("discoverer"), "metrics-address").unwrap();
        assert!(
            metrics.starts_with("127.0.0.1:"),
            "{}",
            at("discoverer metrics on loopback only")
        );
        assert_eq!(upstream, format!("http://{metrics}/"));
        assert_eq!(
            flag(disc.container("rbac-proxy"), "ignore-paths").as_deref(),
            Some("/healthz")
        );
        let (_, path) = liveness_port(&disc, disc.container("rbac-proxy"));
        assert_eq!(path, "/healthz");
        let lease_ns = flag(ccm.container("ccm"), "leader-elect-namespace").unwrap();
        assert_eq!(lease_ns, overcast_kube::leader::DEFAULT_LEASE_NAMESPACE);
        assert_eq!(
            flag(ccm.container("ccm"), "leader-elect-lease-name").as_deref(),
            Some(overcast_kube::leader::DEFAULT_LEASE_NAME)
        );
        // Outside the local cloud the controllers' image runs as non-root.
        if cloud != "local" {
            for p in [&ccm, &disc] {
                assert_eq!(
                    p.spec
                        .security_context
                        .as_ref()
                        .and_then(|s| s.run_as_non_root),
                    Some(true),
                    "{}",
                    at(&p.name)
                );
            }
        }
        // The local cloud's services share the state directory the CSI controller writes,
        // and every one that reports or uses the zone reads it from the same file.
        if cloud == "local" {
            let readers = [
                ("overcast-csi-controller", "csi"),
                ("overcast-csi-node", "csi"),
                ("overcast-cloud-controller-manager", "ccm"),
                ("overcast-discoverer", "discoverer"),
            ];
            let mut sources = BTreeSet::new();
            for (pod, container) in readers {
                let p = m.pod(pod);
                let c = p.container(container);
                let path = flag(c, "cloud-config").unwrap_or_else(|| {
                    panic!(
                        "{}",
                        at(&format!("{pod}/{container} reads no cloud-config"))
                    )
                });
                assert!(
                    flag(c, "zone").is_none() && flag(c, "region").is_none(),
                    "{}",
                    at("no zone flag overrides the file")
                );
                let (volume, key) = volume_path(&p, c, &path);
                let secret = p
                    .spec
                    .volumes
                    .iter()
                    .flatten()
                    .find(|v| v.name == volume)
                    .and_then(|v| v.secret.clone())
                    .and_then(|s| s.secret_name);
                sources.insert((secret, key));
            }
            assert_eq!(
                sources.len(),
                1,
                "{}",
                at(&format!("one cloud-config for all: {sources:?}"))
            );
            let controller = m.pod("overcast-csi-controller");
            let state = flag(controller.container("csi"), "state-dir").expect("--state-dir");
            let (v, rest) = volume_path(&controller, controller.container("csi"), &state);
            let host = host_path(&controller, &v).expect("state on the host");
            let read =
                flag(disc.container("discoverer"), "state-dir").expect("discoverer --state-dir");
            let (dv, drest) = volume_path(&disc, disc.container("discoverer"), &read);
            assert_eq!(
                (host_path(&disc, &dv).unwrap(), drest),
                (host, rest),
                "{}",
                at("one state directory")
            );
            assert!(
                ccm.spec.host_network == Some(true),
                "{}",
                at("local ccm sees the node's addresses")
            );
        }
    }
}

/// A Dockerfile's final stage: its base image, the packages it installs, the files it
/// copies from the build stage, its user.
struct FinalStage {
    stages: usize,
    base: String,
    packages: Vec<String>,
    binaries: Vec<String>,
    user: Option<String>,
    build_command: String,
}

fn dockerfile(name: &str) -> FinalStage {
    let path = overcast_integration::package_dir().join("..").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    // Join continuation lines, drop comments.
    let joined = text.replace("\\\n", " ");
    let lines: Vec<&str> = joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let stages: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("FROM "))
        .map(|(i, _)| i)
        .collect();
    let last = *stages.last().expect("a FROM");
    let build_command = lines[..last]
        .iter()
        .filter(|l| l.starts_with("RUN "))
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    // `FROM ${BASE}` is the base its `ARG BASE=…` names by default (what a plain
    // `docker build` uses; deploy/images/build.sh passes a local one).
    let mut base = lines[last].split_whitespace().nth(1).unwrap().to_owned();
    if let Some(arg) = base.strip_prefix("${").and_then(|b| b.strip_suffix('}')) {
        let prefix = format!("ARG {arg}=");
        base = lines
            .iter()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("{name}: FROM ${{{arg}}} without a default"))
            .to_owned();
    }
    let mut f = FinalStage {
        stages: stages.len(),
        base,
        packages: Vec::new(),
        binaries: Vec::new(),
        user: None,
        build_command,
    };
    for l in &lines[last + 1..] {
        if let Some(run) = l.strip_prefix("RUN ") {
            if let Some((_, rest)) = run.split_once("apt-get install") {
                let words = rest.split("&&").next().unwrap_or_default();
                f.packages.extend(
                    words
                        .split_whitespace()
                        .filter(|w| !w.starts_with('-'))
                        .map(str::to_owned),
                );
            }
        }
        if let Some(copy) = l.strip_prefix("COPY ") {
            let words: Vec<&str> = copy.split_whitespace().collect();
            assert!(
                words[0].starts_with("--from="),
                "{name}: the final stage copies only build output"
            );
            let dest = words.last().unwrap();
            for src in &words[1..words.len() - 1] {
                let file = src.rsplit('/').next().unwrap();
                f.binaries.push(format!("{}{file}", dest));
            }
        }
        if let Some(user) = l.strip_prefix("USER ") {
            f.user = Some(user.to_owned());
        }
    }
    f
}

/// Which Debian package owns a program on this (Debian 12) machine, the image's base.
fn package_of(program: &str) -> Option<String> {
    // With merged /usr, dpkg knows some programs only by their /sbin or /bin path.
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .find_map(|dir| {
            let out = std::process::Command::new("dpkg")
                .arg("-S")
                .arg(format!("{dir}/{program}"))
                .output()
                .ok()?;
            let text = String::from_utf8_lossy(&out.stdout);
            Some(text.split(':').next()?.trim().to_owned())
                .filter(|p| out.status.success() && !p.is_empty())
        })
}

#[test]
fn images_carry_the_binaries_the_manifests_run_and_no_build_tools() {
    let csi = dockerfile("Dockerfile.csi");
    let ccm = dockerfile("Dockerfile.ccm");
    for (name, f, bins) in [
        ("Dockerfile.csi", &csi, &["csi", "registrar"][..]),
        (
            "Dockerfile.ccm",
            &ccm,
            &["ccm", "discoverer", "rbac-proxy"][..],
        ),
    ] {
        assert!(f.stages >= 2, "{name}: multi-stage");
        assert!(
            f.build_command.contains("cargo build --release --locked"),
            "{name}: release build from the lock file"
        );
        for b in bins {
            assert!(
                f.build_command.contains(&format!("--bin {b}")),
                "{name} builds {b}"
            );
            assert!(
                f.binaries.contains(&format!("/usr/local/bin/{b}")),
                "{name} installs {b}"
            );
        }
        assert!(
            !f.base.contains("rust"),
            "{name}: the final image is not the build image"
        );
        for tool in ["cargo", "rustc", "gcc", "build-essential", "make"] {
            assert!(
                !f.packages.iter().any(|p| p == tool),
                "{name} installs {tool}"
            );
        }
    }
    assert_eq!(
        ccm.user.as_deref(),
        Some("65532:65532"),
        "the controllers' image runs as non-root"
    );
    assert!(ccm.base.contains("nonroot"));
    // The node side's programs come from packages the CSI image installs.
    let mut missing = Vec::new();
    for program in overcast_mount::format::PROGRAMS {
        match package_of(program) {
            Some(pkg) => assert!(
                csi.packages.contains(&pkg),
                "Dockerfile.csi lacks {pkg} (for {program})"
            ),
            None => missing.push(*program),
        }
    }
    if !missing.is_empty() {
        say_skipped(&format!(
            "image package check for {missing:?}: not installed here"
        ));
    }

    // Every container of every overlay runs a binary its image installs, at the
    // workspace's version.
    let version = env!("CARGO_PKG_VERSION");
    for (cloud, m) in overlays() {
        for p in m.pods() {
            for c in &p.spec.containers {
                let image = c.image.clone().unwrap();
                let f = if image.starts_with(CSI_IMAGE) {
                    &csi
                } else if image.starts_with(CCM_IMAGE) {
                    &ccm
                } else {
                    assert!(
                        image.starts_with("registry.k8s.io/sig-storage/"),
                        "overlay {cloud}: {image}"
                    );
                    continue;
                };
                assert!(
                    image.ends_with(&format!(":{version}")),
                    "overlay {cloud}: {image} is not at {version}"
                );
                let command = c
                    .command
                    .as_ref()
                    .and_then(|c| c.first())
                    .cloned()
                    .expect("a command");
                assert!(
                    f.binaries.contains(&command),
                    "overlay {cloud}: {}/{} runs {command}, not in its image",
                    p.name,
                    c.name
                );
            }
        }
    }
}

/// The binaries need only the libraries the final images carry (distroless/cc: glibc and
/// libgcc). The test profile's binaries link the same libraries as the release ones.
#[test]
fn binaries_link_only_glibc_and_libgcc() {
    for bin in ["ccm", "discoverer", "rbac-proxy", "csi", "registrar"] {
        let path: PathBuf = overcast_integration::binary(bin);
        let out = std::process::Command::new("readelf")
            .arg("-d")
            .arg(&path)
            .output();
        let Ok(out) = out else {
            say_skipped("binaries link check: readelf is not installed");
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let needed: BTreeSet<&str> = text
            .lines()
            .filter(|l| l.contains("(NEEDED)"))
            .filter_map(|l| l.split('[').nth(1)?.split(']').next())
            .collect();
        assert!(needed.contains("libc.so.6"), "{bin}: {text}");
        let allowed = [
            "libc.so.6",
            "libm.so.6",
            "libgcc_s.so.1",
            "libdl.so.2",
            "libpthread.so.0",
            "librt.so.1",
            "ld-linux-x86-64.so.2",
        ];
        for lib in &needed {
            assert!(
                allowed.contains(lib),
                "{bin} needs {lib}, which the final image lacks"
            );
        }
    }
}

const TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The ServiceAccount whose token container `c` holds where in-cluster clients read it:
/// a projected token is the pod's account, a token Secret the account it is annotated
/// for; automatic mounting (unless turned off) is the pod's account.
fn identity(m: &Manifests, pod: &Pod, c: &Container) -> Option<String> {
    let pod_account = pod
        .spec
        .service_account_name
        .clone()
        .unwrap_or_else(|| "default".into());
    let Some(mount) = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|v| v.mount_path.trim_end_matches('/') == TOKEN_DIR)
    else {
        let sa = m.service_accounts.iter().find(|s| {
            s.metadata.name.as_deref() == Some(&pod_account[..])
                && s.metadata.namespace.as_deref() == Some(&pod.namespace[..])
        });
        let automount = pod
            .spec
            .automount_service_account_token
            .or(sa.and_then(|s| s.automount_service_account_token))
            .unwrap_or(true);
        return automount.then_some(pod_account);
    };
    let volume = pod
        .spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)?;
    if let Some(projected) = &volume.projected {
        let has_token = projected.sources.iter().flatten().any(|s| {
            s.service_account_token
                .as_ref()
                .is_some_and(|t| t.path == "token")
        });
        return has_token.then_some(pod_account);
    }
    let name = volume.secret.as_ref()?.secret_name.clone()?;
    let secret = m.secrets.iter().find(|s| {
        s.metadata.name.as_deref() == Some(&name[..])
            && s.metadata.namespace.as_deref() == Some(&pod.namespace[..])
    })?;
    assert_eq!(
        secret.type_.as_deref(),
        Some("kubernetes.io/service-account-token"),
        "{} mounts Secret {name} as its token",
        c.name
    );
    secret
        .metadata
        .annotations
        .as_ref()?
        .get("kubernetes.io/service-account.name")
        .cloned()
}

/// One RBAC grant: (group, resource, verb, namespace scope, names).
type Grant = (String, String, String, Option<String>, Vec<String>);

/// What a ServiceAccount is granted, rule by rule, expanded to one verb per grant.
fn grants(m: &Manifests, namespace: &str, account: &str) -> Vec<Grant> {
    let is_subject = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && s.name == account
                && s.namespace.as_deref() == Some(namespace)
        })
    };
    let mut out = Vec::new();
    let mut expand = |rules: &Option<Vec<k8s_openapi::api::rbac::v1::PolicyRule>>,
                      scope: Option<String>| {
        for r in rules.iter().flatten() {
            for g in r.api_groups.iter().flatten() {
                for res in r.resources.iter().flatten() {
                    for v in &r.verbs {
                        let mut names = r.resource_names.clone().unwrap_or_default();
                        names.sort();
                        out.push((g.clone(), res.clone(), v.clone(), scope.clone(), names));
                    }
                }
            }
        }
    };
    for b in &m.cluster_role_bindings {
        if is_subject(&b.subjects) {
            let role = m
                .cluster_roles
                .iter()
                .find(|r| r.metadata.name.as_deref() == Some(&b.role_ref.name[..]))
                .unwrap_or_else(|| panic!("ClusterRole {} is missing", b.role_ref.name));
            expand(&role.rules, None);
        }
    }
    for b in &m.role_bindings {
        if is_subject(&b.subjects) {
            let ns = b.metadata.namespace.clone();
            let rules = match b.role_ref.kind.as_str() {
                "Role" => m
                    .roles
                    .iter()
                    .find(|r| {
                        r.metadata.name.as_deref() == Some(&b.role_ref.name[..])
                            && r.metadata.namespace == ns
                    })
                    .map(|r| r.rules.clone()),
                _ => m
                    .cluster_roles
                    .iter()
                    .find(|r| r.metadata.name.as_deref() == Some(&b.role_ref.name[..]))
                    .map(|r| r.rules.clone()),
            };
            expand(
                &rules.unwrap_or_else(|| {
                    panic!("{} {} is missing", b.role_ref.kind, b.role_ref.name)
                }),
                ns,
            );
        }
    }
    out
}

fn expected(calls: &[&[ApiCall]]) -> Vec<Grant> {
    let mut out = Vec::new();
    for list in calls {
        for c in *list {
            for v in c.verbs {
                let mut names: Vec<String> = c.names.iter().map(|n| n.to_string()).collect();
                names.sort();
                out.push((
                    c.group.into(),
                    c.resource.into(),
                    v.to_string(),
                    c.namespace.map(Into::into),
                    names,
                ));
            }
        }
    }
    out
}

#[test]
fn rbac_grants_exactly_the_api_calls_each_service_makes() {
    for (cloud, m) in overlays() {
        // Nothing anywhere is granted by wildcard.
        let rules = m
            .cluster_roles
            .iter()
            .flat_map(|r| r.rules.clone().unwrap_or_default())
            .chain(
                m.roles
                    .iter()
                    .flat_map(|r| r.rules.clone().unwrap_or_default()),
            );
        for r in rules {
            let all: Vec<&String> = r
                .api_groups
                .iter()
                .flatten()
                .chain(r.resources.iter().flatten())
                .chain(r.verbs.iter())
                .collect();
            assert!(
                !all.iter().any(|s| s.contains('*')),
                "overlay {cloud}: a wildcard in {r:?}"
            );
        }
        // Each of our programs, by the identity whose token its container holds, is
        // granted exactly the calls it lists; an identity two programs share would be
        // granted the union, so no two programs may share one.
        let mut holders: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for pod in m.pods() {
            for c in &pod.spec.containers {
                let Some(program) = c.command.iter().flatten().next() else {
                    continue;
                };
                // vSphere's ccm and discoverer also read upstream's credentials Secret.
                let credentials: &[ApiCall] = match cloud.as_str() {
                    "vsphere" => overcast_cloud_vsphere::credentials::API_CALLS,
                    _ => &[],
                };
                let capi_calls: Vec<ApiCall>;
                let node_api_calls: Vec<ApiCall>;
                let calls: &[ApiCall] = match program.rsplit('/').next() {
                    // A node plugin that reads its zone from its Node (DVP's, OpenStack's)
                    // or its volumes' attachments (vSphere's, DVP's).
                    Some("csi")
                        if pod.name == "overcast-csi-node"
                            && !node_calls(&cloud, &m).is_empty() =>
                    {
                        node_api_calls = node_calls(&cloud, &m);
                        &node_api_calls
                    }
                    // The driver and the registrar talk to no API: they hold no token.
                    Some("csi") | Some("registrar") => {
                        assert_eq!(
                            identity(&m, &pod, c),
                            None,
                            "overlay {cloud}: {} {} holds an API token it never uses",
                            pod.name,
                            c.name
                        );
                        continue;
                    }
                    Some("ccm") => overcast_ccm::API_CALLS,
                    Some("discoverer") => overcast_discoverer::api_calls::API_CALLS,
                    Some("rbac-proxy") => overcast_rbac_proxy::api_calls::API_CALLS,
                    Some("capi") => {
                        capi_calls =
                            overcast_capi::api_calls::for_cloud(&cloud).unwrap_or_else(|| {
                                panic!("overlay {cloud} runs capi, which does not serve it")
                            });
                        &capi_calls
                    }
                    _ => continue,
                };
                let Some(account) = identity(&m, &pod, c) else {
                    panic!("overlay {cloud}: {} {} holds no token", pod.name, c.name);
                };
                holders
                    .entry(account.clone())
                    .or_default()
                    .push(format!("{}/{}", pod.name, c.name));
                let mut have = grants(&m, &pod.namespace, &account);
                let mut want = match program.rsplit('/').next() {
                    Some("ccm" | "discoverer") => expected(&[calls, credentials]),
                    _ => expected(&[calls]),
                };
                have.sort();
                have.dedup();
                want.sort();
                want.dedup();
                let missing: Vec<_> = want.iter().filter(|g| !have.contains(g)).collect();
                let extra: Vec<_> = have.iter().filter(|g| !want.contains(g)).collect();
                assert!(
                    missing.is_empty(),
                    "overlay {cloud}: {} ({account}) lacks {missing:?}",
                    c.name
                );
                assert!(
                    extra.is_empty(),
                    "overlay {cloud}: {} ({account}) is granted more than it calls: {extra:?}",
                    c.name
                );
            }
        }
        for (account, containers) in &holders {
            assert_eq!(
                containers.len(),
                1,
                "overlay {cloud}: {containers:?} share the identity {account}"
            );
        }
        for want in [
            "overcast-cloud-controller-manager",
            "overcast-discoverer",
            "overcast-rbac-proxy",
        ] {
            assert!(
                holders.contains_key(want),
                "overlay {cloud}: nothing runs as {want}"
            );
        }
        // Elsewhere the node plugin talks to no API: no token, no bindings.
        let node = m.pod("overcast-csi-node");
        if node_calls(&cloud, &m).is_empty() {
            assert_eq!(node.spec.automount_service_account_token, Some(false));
            assert!(grants(
                &m,
                &node.namespace,
                node.spec.service_account_name.as_deref().unwrap()
            )
            .is_empty());
        }
    }
}

/// The API calls the overlay's node plugin makes: its Node (its place, when its cloud
/// does not give it), and its volumes' attachments (when its cloud's ids do not name
/// their disks).
fn node_calls(cloud: &str, m: &Manifests) -> Vec<ApiCall> {
    let mut calls = Vec::new();
    if zone_from_labels(cloud, m) {
        calls.extend_from_slice(overcast_csi::api_calls::NODE_ZONE_FROM_LABELS);
    }
    let unknown = node_identity_of(cloud, m)
        .is_some_and(|i| i.disk_of_volume == overcast_cloud::DiskOfVolume::Unknown);
    if unknown {
        calls.extend_from_slice(overcast_csi::api_calls::NODE_ATTACHMENTS);
    }
    calls
}

/// The overlay's node plugin's identity, given the overlay's own cloud-config (vSphere's
/// place decides by its `[Labels]`).
fn node_identity_of(cloud: &str, m: &Manifests) -> Option<overcast_clouds::NodeIdentity> {
    let name = cloud.parse::<overcast_cloud::CloudName>().ok()?;
    let dir = tempfile::tempdir().unwrap();
    let mut s = overcast_clouds::Settings::new(name);
    if let Some(text) = cloud_config(m) {
        let path = dir.path().join("cloud-config");
        std::fs::write(&path, text).unwrap();
        s.cloud_config = Some(path);
    }
    overcast_clouds::node_identity(&s).ok()
}

/// Whether the overlay's node plugin reads its place from its Node.
fn zone_from_labels(cloud: &str, m: &Manifests) -> bool {
    node_identity_of(cloud, m).is_some_and(|i| i.zone.is_none())
}

/// The local overlay brings the InstanceTypesCatalog CRD (Deckhouse brings its own): it
/// must be the resource the discoverer writes, cluster-scoped as its RBAC grants it, with
/// the fields it writes.
#[test]
fn the_catalog_crd_is_the_resource_the_discoverer_writes() {
    use overcast_discoverer::api_calls::{
        CATALOG_GROUP, CATALOG_KIND, CATALOG_PLURAL, CATALOG_VERSION,
    };
    let (_, m) = overlays()
        .into_iter()
        .find(|(c, _)| c == "local")
        .expect("local overlay");
    assert_eq!(m.crds.len(), 1);
    let crd = &m.crds[0];
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some(&format!("{CATALOG_PLURAL}.{CATALOG_GROUP}")[..])
    );
    assert_eq!(crd.spec.group, CATALOG_GROUP);
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!(crd.spec.names.kind, CATALOG_KIND);
    assert_eq!(crd.spec.names.plural, CATALOG_PLURAL);
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == CATALOG_VERSION)
        .expect("the version the discoverer writes");
    assert!(version.served && version.storage);
    let schema = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("schema");
    let items = schema.properties.as_ref().expect("properties")["instanceTypes"]
        .items
        .as_ref()
        .expect("items");
    let k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(item) = items else {
        panic!("one schema for every item");
    };
    let fields = item.properties.as_ref().expect("item properties");
    for f in ["name", "cpu", "memory", "rootDisk"] {
        assert!(fields.contains_key(f), "the CRD lacks {f}");
    }
}

/// `deploy/policies/discoverer-secrets.yaml`, evaluated as the API server would: its
/// match condition names the account the discoverer runs as, and its validations admit
/// what the discoverer writes and refuse the token-Secret attack of issue 13.
#[test]
fn the_secret_policy_admits_what_the_discoverer_writes_and_refuses_a_token_secret() {
    use overcast_discoverer::api_calls::{NAMESPACE, SECRET};
    use serde_json::{json, Value};
    let text = std::fs::read_to_string(
        overcast_integration::package_dir().join("../deploy/policies/discoverer-secrets.yaml"),
    )
    .unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let policy = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .expect("policy");
    let binding = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
        .expect("binding");
    for d in &docs {
        assert_eq!(d["apiVersion"], "admissionregistration.k8s.io/v1");
    }
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    let rules = &policy["spec"]["matchConstraints"]["resourceRules"][0];
    assert_eq!(rules["resources"], json!(["secrets"]));
    assert_eq!(rules["operations"], json!(["CREATE", "UPDATE"]));

    // The account the manifests run the discoverer as.
    let (_, m) = overlays().into_iter().find(|(c, _)| c == "local").unwrap();
    let pod = m.pod("overcast-discoverer");
    let account = identity(&m, &pod, pod.container("discoverer")).unwrap();
    let discoverer = format!("system:serviceaccount:{}:{account}", pod.namespace);
    assert_eq!(pod.namespace, NAMESPACE);

    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c["expression"].as_str().unwrap().to_owned())
            .collect()
    };
    let conditions = strings(&policy["spec"]["matchConditions"]);
    let validations = strings(&policy["spec"]["validations"]);
    let eval = |expr: &str, user: &str, object: &Value| -> bool {
        let program = cel::Program::compile(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
        let mut ctx = cel::Context::default();
        ctx.add_variable("object", object.clone()).unwrap();
        ctx.add_variable("request", json!({"userInfo": {"username": user}}))
            .unwrap();
        match program.execute(&ctx) {
            Ok(cel::Value::Bool(b)) => b,
            other => panic!("{expr} on {object}: {other:?}"),
        }
    };
    // Admitted unless the policy matches and a validation fails.
    let admitted = |user: &str, object: &Value| -> bool {
        !conditions.iter().all(|c| eval(c, user, object))
            || validations.iter().all(|v| eval(v, user, object))
    };
    let secret = |name: &str, type_: Option<&str>, annotations: Value| {
        let mut s = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "data": {"discovery-data.json": "e30="}});
        if let Some(t) = type_ {
            s["type"] = json!(t);
        }
        if !annotations.is_null() {
            s["metadata"]["annotations"] = annotations;
        }
        s
    };
    let ours = secret(SECRET, Some("Opaque"), Value::Null);
    assert!(admitted(&discoverer, &ours), "what the discoverer writes");
    assert!(admitted(&discoverer, &secret(SECRET, None, Value::Null)));
    assert!(admitted(
        &discoverer,
        &secret(SECRET, Some("Opaque"), json!({"note": "x"}))
    ));
    let attack = secret(
        SECRET,
        Some("kubernetes.io/service-account-token"),
        json!({"kubernetes.io/service-account.name": "overcast-cloud-controller-manager"}),
    );
    assert!(!admitted(&discoverer, &attack), "the token-Secret attack");
    for other_type in [
        "kubernetes.io/service-account-token",
        "kubernetes.io/dockerconfigjson",
    ] {
        assert!(
            !admitted(&discoverer, &secret(SECRET, Some(other_type), Value::Null)),
            "{other_type}"
        );
    }
    assert!(!admitted(
        &discoverer,
        &secret(
            SECRET,
            Some("Opaque"),
            json!({"kubernetes.io/service-account.name": "overcast-cloud-controller-manager"})
        )
    ));
    assert!(!admitted(
        &discoverer,
        &secret("another", Some("Opaque"), Value::Null)
    ));
    // Nobody else is this policy's business.
    assert!(admitted("system:serviceaccount:kube-system:other", &attack));
    assert!(admitted("admin", &attack));
}

/// The overlay's cloud-config text.
fn cloud_config(m: &Manifests) -> Option<String> {
    m.secrets
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some("overcast-cloud-config"))
        .and_then(|s| s.string_data.as_ref()?.get("cloud-config").cloned())
}

/// `v` with every whole number held as a float made an integer.
fn whole_floats_as_integers(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Number(n) if n.is_f64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => Value::from(f as i64),
            _ => Value::Number(n),
        },
        Value::Array(a) => Value::Array(a.into_iter().map(whole_floats_as_integers).collect()),
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, whole_floats_as_integers(v)))
                .collect(),
        ),
        other => other,
    }
}

/// The machine templates' `spec.template.spec` is immutable, as the Cluster API contract
/// says, by the CRDs' own validation rule: the rule is where it belongs, and — evaluated
/// here with a CEL interpreter, as the API server evaluates it on an update — admits the
/// same spec and refuses a changed one. (The kit's v1.25 API server runs without CRD
/// validation rules and drops them, so no server is asked.)
#[test]
fn machine_templates_refuse_a_changed_spec() {
    use serde_json::{json, Value};
    let mut seen = 0;
    for (cloud, m) in overlays() {
        for r in m.all.iter().filter(|r| {
            r.kind() == "CustomResourceDefinition"
                && r.name()
                    .ends_with("machinetemplates.infrastructure.cluster.x-k8s.io")
        }) {
            let template = &r.object["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
                ["properties"]["spec"]["properties"]["template"];
            let rules = template["properties"]["spec"]["x-kubernetes-validations"]
                .as_array()
                .unwrap_or_else(|| {
                    panic!(
                        "overlay {cloud}: {} has no rule on spec.template.spec",
                        r.name()
                    )
                });
            assert_eq!(rules.len(), 1, "{}", r.name());
            let rule = rules[0]["rule"].as_str().unwrap();
            assert!(rules[0]["message"].as_str().unwrap().contains("immutable"));
            let program = cel::Program::compile(rule).unwrap_or_else(|e| panic!("{rule}: {e}"));
            let eval = |old: &Value, new: &Value| {
                let mut ctx = cel::Context::default();
                ctx.add_variable("self", new.clone()).unwrap();
                ctx.add_variable("oldSelf", old.clone()).unwrap();
                match program.execute(&ctx) {
                    Ok(cel::Value::Bool(b)) => b,
                    other => panic!("{rule}: {other:?}"),
                }
            };
            let spec = json!({"vmClassName": "generic", "cpu": {"cores": 4, "cpuFraction": "100%"}, "memory": "8Gi"});
            let mut changed = spec.clone();
            changed["cpu"]["cores"] = json!(8);
            let mut added = spec.clone();
            added["bootloader"] = json!("BIOS");
            assert!(eval(&spec, &spec.clone()), "the same spec is admitted");
            assert!(!eval(&spec, &changed), "a changed field is refused");
            assert!(!eval(&spec, &added), "an added field is refused");
            seen += 1;
        }
    }
    assert_eq!(
        seen, 2,
        "one template CRD in each of the zvirt and dvp overlays"
    );
}

#[test]
fn a_twin_without_deckhouse_is_its_overlay_and_the_namespace() {
    let mut twins = 0;
    for dir in kustomizations("overlays") {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let Some(cloud) = name.strip_suffix("-without-deckhouse") else {
            continue;
        };
        twins += 1;
        let twin = Manifests::load(&dir).unwrap_or_else(|e| panic!("{e}"));
        let base = Manifests::load(&dir.with_file_name(cloud)).unwrap_or_else(|e| panic!("{e}"));
        let ids = |m: &Manifests| {
            let mut v: Vec<String> = m.all.iter().map(|r| r.id()).collect();
            v.sort();
            v
        };
        let mut want = ids(&base);
        want.push("v1|Namespace||d8-cloud-instance-manager".to_owned());
        want.sort();
        assert_eq!(ids(&twin), want, "{name}");
        for r in &base.all {
            let same = twin.all.iter().find(|t| t.id() == r.id()).unwrap();
            assert_eq!(same.object, r.object, "{name}: {} differs", r.id());
        }
    }
    assert_eq!(twins, 2, "zvirt and dvp have their twins");
}

/// Each overlay whose cloud cuts snapshots has its VolumeSnapshotClass apart, in
/// `<overlay>/snapshot-class` (a fresh cluster lacks the snapshot CRDs: the overlay must
/// apply without them), for the overlay's driver; no other overlay has one.
#[test]
fn a_snapshot_class_is_beside_the_overlay_whose_cloud_cuts_snapshots() {
    for (cloud, m) in overlays() {
        let dir = deploy_dir()
            .join("overlays")
            .join(&cloud)
            .join("snapshot-class");
        let has_sidecar = m.pods().iter().any(|p| {
            p.spec
                .containers
                .iter()
                .any(|c| c.name == "csi-snapshotter")
        });
        assert_eq!(
            dir.is_dir(),
            has_sidecar,
            "overlay {cloud}: a snapshot class iff the sidecar"
        );
        if !dir.is_dir() {
            continue;
        }
        let objects = kustomize::render(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(objects.len(), 1, "overlay {cloud}: one VolumeSnapshotClass");
        let class = &objects[0].object;
        assert_eq!(class["apiVersion"], "snapshot.storage.k8s.io/v1");
        assert_eq!(class["kind"], "VolumeSnapshotClass");
        assert_eq!(class["driver"], driver_name(&cloud), "overlay {cloud}");
        assert_eq!(class["deletionPolicy"], "Delete");
    }
}
