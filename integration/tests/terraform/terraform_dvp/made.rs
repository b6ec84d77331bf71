//! What Deckhouse's DVP layouts leave in the parent and in their Terraform state, made
//! here apart from our layouts: the objects as their `terraform-modules` write them through
//! hashicorp/kubernetes — names ending in their hashes ([`super::deckhouse`]), labels,
//! annotations, owner references, specs, the cloud-init Secret from their template — and
//! the state (`kubernetes_manifest` and `kubernetes_secret` in their modules, the readiness
//! and owner-reference resources, the data sources, the outputs).

use kube::api::{Api, DynamicObject};
use kube::ResourceExt;
use serde_json::{json, Value};

use super::deckhouse::Release;
use super::*;

pub(super) const K8S: &str = "provider[\"registry.terraform.io/hashicorp/kubernetes\"]";
pub(super) const CLUSTER_UUID: &str = "5c4e1a7e-1111-4222-8333-944444444444";

/// A `kubernetes_manifest` resource as hashicorp/kubernetes stores it (dynamic values as
/// `{"value", "type"}`).
pub(super) fn manifest(
    module: &str,
    name: &str,
    object: &DynamicObject,
    index: Option<u32>,
) -> Value {
    let object = serde_json::to_value(object).unwrap();
    let mut instance = json!({
        "schema_version": 1,
        "attributes": {
            "computed_fields": null, "field_manager": [], "timeouts": [], "wait": [], "wait_for": null,
            "manifest": {"value": object, "type": ["object", {}]},
            "object": {"value": object, "type": ["object", {}]},
        },
        "sensitive_attributes": [],
    });
    if let Some(i) = index {
        instance["index_key"] = json!(i);
    }
    json!({"module": module, "mode": "managed", "type": "kubernetes_manifest", "name": name,
           "provider": K8S, "instances": [instance]})
}

pub(super) fn beside(module: Option<&str>, mode: &str, ty: &str, name: &str) -> Value {
    let mut r = json!({"mode": mode, "type": ty, "name": name, "provider": K8S,
        "instances": [{"schema_version": 0, "attributes": {"id": name}, "sensitive_attributes": []}]});
    if let Some(m) = module {
        r["module"] = json!(m);
    }
    r
}

/// Makes node `n` as Deckhouse's layout of `release` does and returns its state as that
/// layout leaves it: the objects, waited for as its readiness resources wait, and the
/// outputs. The VM takes the class's labels and annotations of `extras`, and the
/// cluster's labels where the version writes them (`cluster_labels`).
pub(super) async fn made_by_deckhouse(
    w: &World,
    n: &deckhouse::Node<'_>,
    module: &str,
    release: &Release,
    extras: &Extras,
    cluster_labels: bool,
) -> Value {
    let ns = &w.sim.namespace;
    let hostname = n.hostname();
    let labels = json!({"deckhouse.io/managed-by": "deckhouse",
        "dvp.deckhouse.io/cluster-uuid": CLUSTER_UUID, "dvp.deckhouse.io/hostname": hostname});
    // The disks' and address's (none before 1.75).
    let infra_labels = if release.since_1_75 {
        labels.clone()
    } else {
        json!({})
    };
    let post = async |ar: &kube::discovery::ApiResource, body: Value| -> DynamicObject {
        let obj: DynamicObject = serde_json::from_value(body).unwrap();
        w.api(ar)
            .create(&kube::api::PostParams::default(), &obj)
            .await
            .unwrap()
    };
    let v = "virtualization.deckhouse.io/v1alpha2";
    post(
        &api::virtual_machine_ip_address(),
        json!({"apiVersion": v, "kind": "VirtualMachineIPAddress",
            "metadata": {"name": n.vmip(n.address), "namespace": ns, "labels": infra_labels},
            "spec": if n.address == "Auto" { json!({"staticIP": "", "type": "Auto"}) }
                    else { json!({"staticIP": n.address, "type": "Static"}) }}),
    )
    .await;
    let vmip_name = n.vmip(n.address);
    let leased = real::wait_for("the address leased", Duration::from_secs(30), async || {
        let o = w
            .api(&api::virtual_machine_ip_address())
            .get(&vmip_name)
            .await
            .ok()?;
        o.data["status"]["address"]
            .as_str()
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
    })
    .await;
    let root_params = n.root_params();
    post(
        &api::virtual_disk(),
        json!({"apiVersion": v, "kind": "VirtualDisk",
            "metadata": {"name": n.root_disk(), "namespace": ns, "labels": infra_labels, "annotations": {
                "last_applied_destructive_root_disk_parameters": root_params.to_string(),
                "last_applied_destructive_root_disk_parameters_hash": n.root_disk().rsplit('-').next().unwrap()}},
            "spec": {"dataSource": {"type": "ObjectRef", "objectRef": {"kind": n.image.0, "name": n.image.1}},
                     "persistentVolumeClaim": {"size": "10Gi"}}}),
    )
    .await;
    let mut block_devices = vec![json!({"kind": "VirtualDisk", "name": n.root_disk()})];
    if n.etcd.is_some() {
        post(
            &api::virtual_disk(),
            json!({"apiVersion": v, "kind": "VirtualDisk",
                "metadata": {"name": n.etcd_disk(), "namespace": ns, "labels": infra_labels, "annotations": {
                    "last_applied_destructive_root_disk_parameters": n.etcd_params().unwrap().to_string(),
                    "last_applied_destructive_root_disk_parameters_hash": n.etcd_disk().rsplit('-').next().unwrap()}},
                "spec": {"persistentVolumeClaim": {"size": "2Gi"}}}),
        )
        .await;
        block_devices.push(json!({"kind": "VirtualDisk", "name": n.etcd_disk()}));
    }
    // The class's additional disks, after the others (their own module each).
    for i in 0..n.additional_disks {
        post(
            &api::virtual_disk(),
            json!({"apiVersion": v, "kind": "VirtualDisk",
                "metadata": {"name": n.additional_disk(i), "namespace": ns, "labels": infra_labels, "annotations": {
                    "last_applied_destructive_additional_disk_parameters": n.additional_params().to_string(),
                    "last_applied_destructive_additional_disk_parameters_hash": n.additional_disk(i).rsplit('-').next().unwrap()}},
                "spec": {"persistentVolumeClaim": {"size": "1Gi"}}}),
        )
        .await;
        block_devices.push(json!({"kind": "VirtualDisk", "name": n.additional_disk(i)}));
    }
    // templates/cloudinit.tftpl with dhctl's bootstrap.
    let user_data = format!(
        "runcmd:\n- echo bootstrap\n\n\nhostname: {hostname}\nprefer_fqdn_over_hostname: false\nssh_authorized_keys:\n  - \"{}\"\n\nusers:\n- default\n",
        n.ssh_key
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(w.sim.client.clone(), ns);
    let secret = secrets
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": n.secret(&leased), "namespace": ns,
                    "labels": if release.secret_labels { labels.clone() } else { json!({}) }},
                "type": "provisioning.virtualization.deckhouse.io/cloud-init",
                "immutable": release.secret_immutable,
                "stringData": {"userData": user_data},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let params = n.vm_params(&leased);
    let group = if n.etcd.is_some() { "master" } else { "worker" };
    let mut vm_labels = json!({"dvp.deckhouse.io/cluster-prefix": n.prefix,
        "dvp.deckhouse.io/cluster-uuid": CLUSTER_UUID, "dvp.deckhouse.io/node-group": group,
        "dvp.deckhouse.io/hostname": hostname});
    let mut vm_spec = json!({
        "terminationGracePeriodSeconds": 90, "enableParavirtualization": true, "osType": "Generic",
        "virtualMachineClassName": "generic", "disruptions": {"restartApprovalMode": "Automatic"},
        "cpu": {"coreFraction": n.core_fraction, "cores": n.cores}, "memory": {"size": n.memory},
        "blockDeviceRefs": block_devices,
        "provisioning": {"type": "UserDataRef", "userDataRef": {"kind": "Secret", "name": n.secret(&leased)}},
        "runPolicy": "AlwaysOn",
        "virtualMachineIPAddressName": n.vmip(n.address),
    });
    if release.since_1_75 {
        vm_labels["deckhouse.io/managed-by"] = json!("deckhouse");
        vm_spec["runPolicy"] = json!("AlwaysOnUnlessStoppedManually");
        vm_spec["liveMigrationPolicy"] = json!("PreferForced");
    }
    // The class's labels, then the cluster's (`merge({identity}, merge(<class's>,
    // <cluster's>))`); its annotations after Deckhouse's own.
    let mut more = extras.labels.as_object().cloned().unwrap_or_default();
    if cluster_labels {
        more.extend(
            extras
                .cluster_labels
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
    }
    vm_labels.as_object_mut().unwrap().extend(more);
    let mut annotations = json!({"last_applied_destructive_vm_parameters": params.to_string(),
        "last_applied_destructive_vm_parameters_hash": n.vm(&leased).rsplit('-').next().unwrap()});
    annotations
        .as_object_mut()
        .unwrap()
        .extend(extras.annotations.as_object().cloned().unwrap_or_default());
    post(
        &api::virtual_machine(),
        json!({"apiVersion": v, "kind": "VirtualMachine",
            "metadata": {"name": n.vm(&leased), "namespace": ns, "labels": vm_labels,
                "annotations": annotations},
            "spec": vm_spec}),
    )
    .await;
    let vm_name = n.vm(&leased);
    let vm = real::wait_for(
        "Deckhouse's VM Running",
        Duration::from_secs(60),
        async || {
            let vm = w.api(&api::virtual_machine()).get(&vm_name).await.ok()?;
            (vm.data["status"]["phase"] == "Running").then_some(vm)
        },
    )
    .await;
    // kubernetes_owner_references_v1 (not before 1.75 here): the VM owns its disks,
    // address and Secret.
    let owner = json!({"metadata": {"ownerReferences": [{"apiVersion": v, "kind": "VirtualMachine",
        "name": vm_name, "uid": vm.metadata.uid}]}});
    let owned = [
        (api::virtual_disk(), n.root_disk()),
        (api::virtual_machine_ip_address(), n.vmip(n.address)),
    ]
    .into_iter()
    .chain(n.etcd.map(|_| (api::virtual_disk(), n.etcd_disk())));
    if release.since_1_75 {
        for (ar, name) in owned {
            w.api(&ar)
                .patch(&name, &Default::default(), &kube::api::Patch::Merge(&owner))
                .await
                .unwrap();
        }
        secrets
            .patch(
                &n.secret(&leased),
                &Default::default(),
                &kube::api::Patch::Merge(&owner),
            )
            .await
            .unwrap();
    }

    let get =
        async |ar: kube::discovery::ApiResource, name: String| w.api(&ar).get(&name).await.unwrap();
    let mut resources = vec![
        manifest(
            "module.root-disk",
            "root-disk",
            &get(api::virtual_disk(), n.root_disk()).await,
            None,
        ),
        beside(
            Some("module.root-disk"),
            "managed",
            "kubernetes_resource_ready_v1",
            "root-disk",
        ),
        beside(
            None,
            "managed",
            "kubernetes_owner_references_v1",
            "root-disk",
        ),
        manifest(
            "module.ipv4-address",
            "ipv4_address",
            &get(api::virtual_machine_ip_address(), n.vmip(n.address)).await,
            Some(0),
        ),
        beside(
            Some("module.ipv4-address"),
            "data",
            "kubernetes_resource",
            "ipv4_address",
        ),
        beside(
            None,
            "managed",
            "kubernetes_owner_references_v1",
            "ipv4-address",
        ),
        manifest(module, "vm", &vm, None),
        beside(
            Some(module),
            "managed",
            "kubernetes_resource_ready_v1",
            "vm",
        ),
        beside(Some(module), "data", "kubernetes_resource", "vm_data"),
        json!({"module": module, "mode": "managed", "type": "kubernetes_secret", "name": "cloudinit-secret",
            "provider": K8S, "instances": [{"schema_version": 0, "attributes": {
                "id": format!("{ns}/{}", secret.name_any()), "type": "provisioning.virtualization.deckhouse.io/cloud-init",
                "data": {"userData": user_data}, "binary_data": null, "immutable": release.secret_immutable, "wait_for_service_account_token": true,
                "metadata": [{"name": secret.name_any(), "namespace": ns,
                    "labels": if release.secret_labels { labels.clone() } else { json!({}) }, "annotations": null,
                    "generate_name": "", "generation": 0, "resource_version": secret.resource_version(),
                    "uid": secret.metadata.uid}]},
                "sensitive_attributes": [[{"type": "get_attr", "value": "data"}]]}]}),
        beside(
            None,
            "managed",
            "kubernetes_owner_references_v1",
            "cloudinit-secret",
        ),
    ];
    for i in 0..n.additional_disks {
        let module = format!("module.additional-disk[\"{i}\"]");
        resources.push(manifest(
            &module,
            "additional_disk",
            &get(api::virtual_disk(), n.additional_disk(i)).await,
            None,
        ));
        resources.push(beside(
            Some(&module),
            "managed",
            "kubernetes_resource_ready_v1",
            "additional_disk",
        ));
    }
    if !release.since_1_75 {
        // ≤ 1.74 waited in the manifests themselves (`wait { fields = {...} }`) and
        // referenced no owners.
        resources.retain(|r| {
            !matches!(
                r["type"].as_str(),
                Some("kubernetes_resource_ready_v1" | "kubernetes_owner_references_v1")
            )
        });
        for r in &mut resources {
            let phase = match r["name"].as_str() {
                Some("vm") => "Running",
                Some("ipv4_address") => "Bound",
                _ => continue,
            };
            if r["type"] == "kubernetes_manifest" {
                r["instances"][0]["attributes"]["wait"] =
                    json!([{"condition": [], "fields": {"status.phase": phase}, "rollout": false}]);
            }
        }
    }
    let mut outputs = json!({});
    if n.etcd.is_some() {
        let etcd = get(api::virtual_disk(), n.etcd_disk()).await;
        let path = format!(
            "/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_{:x}",
            md5::compute(etcd.metadata.uid.as_deref().unwrap())
        );
        resources.push(manifest(
            "module.kubernetes-data-disk",
            "kubernetes-data-disk",
            &etcd,
            None,
        ));
        let ip = vm.data["status"]["ipAddress"].clone();
        outputs = json!({
            "master_ip_address_for_ssh": {"value": ip, "type": "string"},
            "node_internal_ip_address": {"value": ip, "type": "string"},
            "kubernetes_data_device_path": {"value": path, "type": "string"},
        });
    }
    json!({"version": 4, "terraform_version": "1.0.3", "serial": 9,
           "lineage": format!("d8-{}-{hostname}", release.label), "outputs": outputs, "resources": resources})
}

/// base-infrastructure as Deckhouse's layout leaves it: the NetworkPolicy isolating the
/// cluster's VMs (made in the parent), the checks of the parent (`terraform_data` and two
/// data sources), the discovery data output.
pub(super) async fn base_made_by_deckhouse(w: &World) -> Value {
    let ns = &w.sim.namespace;
    let ar = kube::discovery::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("networking.k8s.io", "v1", "NetworkPolicy"),
        "networkpolicies",
    );
    let policy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "isolated-tf", "namespace": ns},
        "spec": {"podSelector": {"matchLabels": {"dvp.deckhouse.io/cluster-uuid": CLUSTER_UUID}},
                 "policyTypes": ["Ingress", "Egress"],
                 "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}]}],
                 "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]},
    }))
    .unwrap();
    let policy = w
        .api(&ar)
        .create(&kube::api::PostParams::default(), &policy)
        .await
        .unwrap();
    let mut np = manifest("", "isolated_cluster_prefix_network_policy", &policy, None);
    np.as_object_mut().unwrap().remove("module");
    np["each"] = json!("map");
    np["instances"][0]["index_key"] = json!("isolated_cluster_prefix");
    json!({"version": 4, "terraform_version": "1.0.3", "serial": 3, "lineage": "d8-cluster",
    "outputs": {"cloud_discovery_data": {
        "value": {"apiVersion": "deckhouse.io/v1", "kind": "DVPCloudDiscoveryData", "zones": ["default"]},
        "type": ["object", {"apiVersion": "string", "kind": "string", "zones": ["tuple", ["string"]]}]}},
    "resources": [
        np,
        {"module": "module.validation", "mode": "managed", "type": "terraform_data", "name": "validation",
         "provider": "provider[\"terraform.io/builtin/terraform\"]", "instances": [{"schema_version": 0,
         "attributes": {"id": "7c1d-validation", "input": null, "output": null, "triggers_replace": null}}]},
        beside(Some("module.validation"), "data", "kubernetes_resources", "virtual_machine_classes"),
        beside(Some("module.validation"), "data", "kubernetes_resources", "images"),
    ]})
}
