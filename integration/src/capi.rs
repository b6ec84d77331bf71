//! Cluster API in the kit's API server for the `capi` tests: Cluster API's own CRDs (the
//! kit's, `../shared/kit/crds/cluster-api/`) and the providers' from `deploy/crds/`, and
//! what CAPI's core controllers would do to the objects (the kit runs none of them).

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

/// A worker's parent VM as `capi --cloud dvp` asks for it (capdvp's defaults), booting
/// `image` (a ClusterVirtualImage) with `additional` disks of 512 MiB.
pub fn dvp_vm_spec(image: &str, additional: usize) -> overcast_cloud_dvp::machines::VmSpec {
    overcast_cloud_dvp::machines::VmSpec {
        class: "generic".into(),
        cores: 2,
        core_fraction: "100%".into(),
        memory: "4Gi".into(),
        bootloader: "EFI".into(),
        run_policy: "AlwaysOnUnlessStoppedManually".into(),
        live_migration_policy: "PreferSafe".into(),
        image_kind: "ClusterVirtualImage".into(),
        image_name: image.into(),
        root_disk_bytes: 1 << 30,
        root_disk_storage_class: None,
        additional_disks: vec![(1 << 29, None); additional],
    }
}

/// Where the kit's Cluster API CRDs are.
pub fn capi_crd_dir() -> PathBuf {
    crate::package_dir().join("../../shared/kit/crds/cluster-api")
}

/// The providers' CRDs as shipped (`deploy/crds/<provider>/capi-<provider>.yaml`).
pub fn provider_crds(provider: &str) -> Vec<CustomResourceDefinition> {
    provider_crds_in(&crate::package_dir().join("../deploy"), provider)
}

/// The same from the `deploy` directory `deploy` (an earlier release's).
pub fn provider_crds_in(deploy: &Path, provider: &str) -> Vec<CustomResourceDefinition> {
    let path = deploy
        .join("crds")
        .join(provider)
        .join(format!("capi-{provider}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.split("\n---\n")
        .skip(1)
        .map(|d| serde_saphyr::from_str(d).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

/// Cluster API's core CRDs from the kit.
pub fn core_crds() -> Vec<CustomResourceDefinition> {
    let dir = capi_crd_dir();
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read CRD");
        out.push(
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        );
    }
    out
}

/// Applies `crds` (server-side) and waits until each is established.
pub async fn install(client: &Client, crds: &[CustomResourceDefinition]) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd.name_any();
        api.patch(
            &name,
            &PatchParams::apply("overcast-it").force(),
            &Patch::Apply(crd),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {name}: {e}"));
    }
    for crd in crds {
        let name = crd.name_any();
        crate::real::wait_for(
            &format!("CRD {name} established"),
            Duration::from_secs(30),
            async || {
                let crd = api.get(&name).await.ok()?;
                crd.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            },
        )
        .await;
    }
}

/// The cloud-init every test machine boots with.
pub const CLOUD_INIT: &str = "#cloud-config\nruncmd:\n- echo 'joined' > /tmp/joined\n";

/// The real `capi --cloud zvirt` for namespace `ns` (its Lease named after it), looking at
/// VMs on their way every second.
pub fn spawn_zvirt(kubeconfig: &str, cloud_config: &Path, ns: &str) -> crate::KillOnDrop {
    let port = crate::free_port();
    spawn_zvirt_with(&crate::binary("capi"), kubeconfig, cloud_config, ns, port)
}

/// The same with the `capi` binary `capi` (an earlier release's), its metrics on
/// `metrics_port`.
pub fn spawn_zvirt_with(
    capi: &Path,
    kubeconfig: &str,
    cloud_config: &Path,
    ns: &str,
    metrics_port: u16,
) -> crate::KillOnDrop {
    crate::KillOnDrop(
        std::process::Command::new(capi)
            .arg("--cloud=zvirt")
            .arg(format!("--cloud-config={}", cloud_config.display()))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--namespace={ns}"))
            .arg("--poll-interval=1")
            .arg(format!("--leader-elect-lease-name={ns}"))
            .arg(format!("--metrics-address=127.0.0.1:{metrics_port}"))
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("capi"),
    )
}

/// The real `capi --cloud dvp` for namespace `ns` (its Lease named after it), of the
/// cluster `cluster_uuid`, looking at VMs on their way every second; and its metrics port.
pub fn spawn_dvp(
    kubeconfig: &str,
    cloud_config: &Path,
    ns: &str,
    cluster_uuid: &str,
) -> (crate::KillOnDrop, u16) {
    let port = crate::free_port();
    let child = spawn_dvp_with(
        &crate::binary("capi"),
        kubeconfig,
        cloud_config,
        ns,
        cluster_uuid,
        port,
    );
    (child, port)
}

/// The same with the `capi` binary `capi` (an earlier release's), its metrics on
/// `metrics_port`.
pub fn spawn_dvp_with(
    capi: &Path,
    kubeconfig: &str,
    cloud_config: &Path,
    ns: &str,
    cluster_uuid: &str,
    metrics_port: u16,
) -> crate::KillOnDrop {
    crate::KillOnDrop(
        std::process::Command::new(capi)
            .arg("--cloud=dvp")
            .arg(format!("--cloud-config={}", cloud_config.display()))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--namespace={ns}"))
            .arg(format!("--cluster-uuid={cluster_uuid}"))
            .arg("--poll-interval=1")
            .arg(format!("--leader-elect-lease-name={ns}"))
            .arg(format!("--metrics-address=127.0.0.1:{metrics_port}"))
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("capi"),
    )
}

/// Every call a binary made to the parent (`dvp_api_requests_total` on its metrics port),
/// once its metrics answer.
pub async fn parent_calls(port: u16) -> u64 {
    crate::real::wait_for("the metrics", Duration::from_secs(20), async || {
        let (code, text) = crate::http_get(port, "/metrics");
        (code == 200).then(|| {
            text.lines()
                .filter(|l| l.starts_with("dvp_api_requests_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum()
        })
    })
    .await
}

/// A Cluster API core kind at v1beta2 (the kit's storage version).
pub fn core(kind: &str, plural: &str) -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind),
        plural,
    )
}

/// An infrastructure provider's kinds: their `apiVersion`, the cluster's and the machine's.
pub struct Infra {
    pub api_version: &'static str,
    pub cluster_kind: &'static str,
    pub machine_kind: &'static str,
}

pub const ZVIRT: Infra = Infra {
    api_version: "infrastructure.cluster.x-k8s.io/v1",
    cluster_kind: "ZvirtCluster",
    machine_kind: "ZvirtMachine",
};

pub const DVP: Infra = Infra {
    api_version: "infrastructure.cluster.x-k8s.io/v1alpha1",
    cluster_kind: "DeckhouseCluster",
    machine_kind: "DeckhouseMachine",
};

impl Infra {
    fn api(&self, client: &Client, ns: &str, kind: &str) -> Api<kube::api::DynamicObject> {
        let (group, version) = self.api_version.split_once('/').expect("group/version");
        Api::namespaced_with(
            client.clone(),
            ns,
            &kube::core::ApiResource::from_gvk_with_plural(
                &kube::core::GroupVersionKind::gvk(group, version, kind),
                &format!("{}s", kind.to_ascii_lowercase()),
            ),
        )
    }
}

/// An owner reference to the Cluster API core object `kind`/`name` (uid `uid`), as
/// CAPI's controllers set it.
fn owned_by(kind: &str, name: &str, uid: &str) -> serde_json::Value {
    serde_json::json!([{
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "name": name,
        "uid": uid, "controller": true, "blockOwnerDeletion": true,
    }])
}

/// The Cluster `name` and its infrastructure cluster of the same name (`spec`), owned as
/// CAPI's cluster controller owns it.
pub async fn cluster(
    client: &Client,
    ns: &str,
    infra: &Infra,
    name: &str,
    spec: serde_json::Value,
) {
    use kube::api::{DynamicObject, PostParams};
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &core("Cluster", "clusters"));
    let cluster = clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": name},
                "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": infra.cluster_kind, "name": name}},
            }))
            .expect("cluster"),
        )
        .await
        .expect("create the Cluster");
    infra
        .api(client, ns, infra.cluster_kind)
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "apiVersion": infra.api_version, "kind": infra.cluster_kind,
                "metadata": {"name": name, "ownerReferences": owned_by("Cluster", name, &cluster.uid().expect("uid"))},
                "spec": spec,
            }))
            .expect("infrastructure cluster"),
        )
        .await
        .expect("create the infrastructure cluster");
}

/// The Cluster `zvirt` and its ZvirtCluster for engine cluster `engine_cluster`.
pub async fn zvirt_cluster(client: &Client, ns: &str, engine_cluster: &str) {
    cluster(
        client,
        ns,
        &ZVIRT,
        "zvirt",
        serde_json::json!({"id": engine_cluster}),
    )
    .await
}

/// CAPI's cluster controller's part: the Cluster's infrastructure is provisioned.
pub async fn mark_provisioned(client: &Client, ns: &str) {
    mark_provisioned_named(client, ns, "zvirt").await
}

/// [`mark_provisioned`] for the Cluster `name`.
pub async fn mark_provisioned_named(client: &Client, ns: &str, name: &str) {
    use kube::api::DynamicObject;
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &core("Cluster", "clusters"));
    clusters
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"initialization": {"infrastructureProvisioned": true}}})),
        )
        .await
        .expect("the Cluster's status");
}

/// A Machine of the Cluster `cluster`, its bootstrap Secret (`CLOUD_INIT`) and its
/// infrastructure machine of the same name (`spec`), as a MachineSet makes them.
pub async fn machine(
    client: &Client,
    ns: &str,
    infra: &Infra,
    cluster: &str,
    name: &str,
    spec: serde_json::Value,
) {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{DynamicObject, PostParams};
    use serde_json::json;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": format!("{name}-bootstrap")},
                "type": "cluster.x-k8s.io/secret",
                "stringData": {"value": CLOUD_INIT, "format": "cloud-config"},
            }))
            .expect("secret"),
        )
        .await
        .expect("create the bootstrap Secret");
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &core("Machine", "machines"));
    let m = machines
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
                "spec": {
                    "clusterName": cluster,
                    "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": infra.machine_kind, "name": name},
                },
            }))
            .expect("machine"),
        )
        .await
        .expect("create the Machine");
    infra
        .api(client, ns, infra.machine_kind)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": infra.api_version, "kind": infra.machine_kind,
                "metadata": {"name": name, "ownerReferences": owned_by("Machine", name, &m.uid().expect("uid"))},
                "spec": spec,
            }))
            .expect("infrastructure machine"),
        )
        .await
        .expect("create the infrastructure machine");
}

/// A Machine of the Cluster `zvirt` and its ZvirtMachine (the template's shape on vNIC
/// profile `profile`).
pub async fn zvirt_machine(client: &Client, ns: &str, name: &str, profile: &str) {
    let spec = serde_json::json!({
        "template": "ubuntu-2204", "vnicProfileID": profile,
        "cpu": {"sockets": 2, "cores": 1, "threads": 1}, "memory": 4096, "rootDiskSizeGb": 30,
    });
    machine(client, ns, &ZVIRT, "zvirt", name, spec).await
}

/// A DeckhouseMachine's spec as node-manager renders it for a worker booting `image`
/// (a ClusterVirtualImage): 2 cores, 4 GiB, a 1 GiB root disk.
pub fn dvp_machine_spec(image: &str) -> serde_json::Value {
    serde_json::json!({
        "vmClassName": "generic", "cpu": {"cores": 2, "cpuFraction": "100%"},
        "memory": "4Gi", "rootDiskSize": "1Gi", "rootDiskStorageClass": "",
        "bootDiskImageRef": {"kind": "ClusterVirtualImage", "name": image},
    })
}
