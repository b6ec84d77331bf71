//! A master and a static node Deckhouse's DVP layouts made, taken over. The test makes
//! their objects as Deckhouse's `terraform-modules` (release 1.76) write them through
//! hashicorp/kubernetes — names ending in their hashes ([`super::deckhouse`]), their
//! labels, annotations, owner references and specs, the cloud-init Secret from their
//! template — running in the simulated parent, and the Terraform state those layouts
//! leave (`kubernetes_manifest` and `kubernetes_secret` in their modules, the readiness
//! and owner-reference resources, the data sources, the outputs). Then as an operator
//! switching: `terraform-provider-dvp migrate-state` on each state, our layout's `init`,
//! `plan -detailed-exitcode`: no change (base-infrastructure's too), and the parent saw no
//! write — nothing made, changed or deleted; an apply changes nothing either; later,
//! destroy removes the nodes' objects and leaves Deckhouse's NetworkPolicy.

use serde_json::{json, Value};

use super::*;

const K8S: &str = "provider[\"registry.terraform.io/hashicorp/kubernetes\"]";
const CLUSTER_UUID: &str = "5c4e1a7e-1111-4222-8333-944444444444";

/// A `kubernetes_manifest` resource as hashicorp/kubernetes stores it (dynamic values as
/// `{"value", "type"}`).
fn manifest(module: &str, name: &str, object: &DynamicObject, index: Option<u32>) -> Value {
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

fn beside(module: Option<&str>, mode: &str, ty: &str, name: &str) -> Value {
    let mut r = json!({"mode": mode, "type": ty, "name": name, "provider": K8S,
        "instances": [{"schema_version": 0, "attributes": {"id": name}, "sensitive_attributes": []}]});
    if let Some(m) = module {
        r["module"] = json!(m);
    }
    r
}

/// A release of Deckhouse's DVP layouts, as far as what it writes differs here (the names
/// differ by [`deckhouse::Node::since_1_77`]):
/// - ≤ 1.74 (`candi/cloud-providers/dvp/terraform-modules/master/main.tf` @6e01cad3,
///   `master/variables.tf` @023a52f3): the VM's `runPolicy: AlwaysOn` and no
///   `liveMigrationPolicy` (the parent's default applies), the VM labelled with the four
///   `dvp.deckhouse.io/*` labels and no `deckhouse.io/managed-by`, the disks, address and
///   Secret unlabelled; readiness by `wait` blocks in the manifests, no owner references;
/// - ≥ 1.75: the VM's `runPolicy: AlwaysOnUnlessStoppedManually` and
///   `liveMigrationPolicy: PreferForced` (`candi/cloud-providers/dvp/layouts/standard/
///   master-node/variables.tf` @095e8372, the layout's defaults), the labels
///   `deckhouse.io/managed-by` and `dvp.deckhouse.io/cluster-uuid` on every object (1.75,
///   #17267), `kubernetes_resource_ready_v1` and (1.76, #16777) owner references;
/// - 1.76 on: labels on the cloud-init Secret (CHANGELOG-v1.76, #20436); 1.75's has none;
/// - 1.77 on: the Secret `immutable` (`terraform-modules/master/main.tf` @76036b98) and
///   the disks named without their storage class.
struct Release {
    label: &'static str,
    /// 1.75 on: the policies, `managed-by`, labelled disks and address, readiness resources.
    since_1_75: bool,
    secret_labels: bool,
    secret_immutable: bool,
}

const RELEASE_1_74: Release = Release {
    label: "1.74",
    since_1_75: false,
    secret_labels: false,
    secret_immutable: false,
};
const RELEASE_1_76: Release = Release {
    label: "1.76",
    since_1_75: true,
    secret_labels: true,
    secret_immutable: false,
};
const RELEASE_1_77: Release = Release {
    label: "1.77",
    since_1_75: true,
    secret_labels: true,
    secret_immutable: true,
};

/// Makes node `n` as Deckhouse's layout of `release` does and returns its state as that
/// layout leaves it: the objects, waited for as its readiness resources wait, and the
/// outputs.
async fn made_by_deckhouse(
    w: &World,
    n: &deckhouse::Node<'_>,
    module: &str,
    release: &Release,
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
            "metadata": {"name": n.vmip("Auto"), "namespace": ns, "labels": infra_labels},
            "spec": {"staticIP": "", "type": "Auto"}}),
    )
    .await;
    let vmip_name = n.vmip("Auto");
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
        "virtualMachineIPAddressName": n.vmip("Auto"),
    });
    if release.since_1_75 {
        vm_labels["deckhouse.io/managed-by"] = json!("deckhouse");
        vm_spec["runPolicy"] = json!("AlwaysOnUnlessStoppedManually");
        vm_spec["liveMigrationPolicy"] = json!("PreferForced");
    }
    post(
        &api::virtual_machine(),
        json!({"apiVersion": v, "kind": "VirtualMachine",
            "metadata": {"name": n.vm(&leased), "namespace": ns, "labels": vm_labels,
                "annotations": {"last_applied_destructive_vm_parameters": params.to_string(),
                    "last_applied_destructive_vm_parameters_hash": n.vm(&leased).rsplit('-').next().unwrap()}},
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
        (api::virtual_machine_ip_address(), n.vmip("Auto")),
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
            &get(api::virtual_machine_ip_address(), n.vmip("Auto")).await,
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
async fn base_made_by_deckhouse(w: &World) -> Value {
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

/// `terraform-provider-dvp migrate-state` as an operator runs it, into the workspace.
fn migrate_into(ws: &Workspace, state: &Value) -> String {
    use std::io::Write;
    let mut child =
        std::process::Command::new(overcast_integration::binary("terraform-provider-overcast"))
            .arg("migrate-state")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(state.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{said}");
    std::fs::write(ws.dir.join("terraform.tfstate"), &out.stdout).unwrap();
    said
}

fn writes(w: &World) -> Vec<String> {
    w.sim
        .faults
        .writes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_and_a_node_deckhouses_layouts_made_are_taken_over_unchanged() {
    let Some((w, bin)) = World::new("the DVP Terraform takeover test", "takeover").await else {
        return;
    };
    let root = w.dir.path().to_owned();
    let (m, n) = (w.node("master", 0), w.node("worker", 0));
    // A third node, of the same group, made by 1.77 (its disks and VM named otherwise).
    let n77 = deckhouse::Node {
        since_1_77: true,
        ..w.node("worker", 1)
    };
    let base_state = base_made_by_deckhouse(&w).await;
    // One node of each release: a cluster made with 1.74 and grown with 1.76 and 1.77
    // (1.75 differs from 1.74 by what 1.76 also writes, and from 1.76 by the Secret's
    // labels, which 1.74's lacks too).
    let master_state = made_by_deckhouse(&w, &m, "module.master", &RELEASE_1_74).await;
    let node_state = made_by_deckhouse(&w, &n, "module.static-node", &RELEASE_1_76).await;
    let node77_state = made_by_deckhouse(&w, &n77, "module.static-node", &RELEASE_1_77).await;
    let before = w.objects().await;
    let versions = async || {
        let mut out = Vec::new();
        for ar in [
            api::virtual_machine(),
            api::virtual_disk(),
            api::virtual_machine_ip_address(),
        ] {
            for o in w.api(&ar).list(&ListParams::default()).await.unwrap().items {
                out.push(format!(
                    "{}={}",
                    o.name_any(),
                    o.resource_version().unwrap()
                ));
            }
        }
        out.sort();
        out
    };
    let versions_before = versions().await;

    let base = Workspace::module(&bin, &root, w.layout("base-infrastructure"), PROVIDER);
    let said = migrate_into(&base, &base_state);
    assert!(said.contains("NetworkPolicy isolated-tf stays"), "{said}");
    let master = Workspace::module(&bin, &root, w.layout("master-node"), PROVIDER);
    let said = migrate_into(&master, &master_state);
    assert!(
        said.contains("module.master.kubernetes_manifest.vm (VirtualMachine"),
        "{said}"
    );
    assert!(
        !said.contains("bootstrap"),
        "the Secret's data was printed: {said}"
    );
    let node = Workspace::module(&bin, &root, w.layout("static-node"), PROVIDER);
    migrate_into(&node, &node_state);
    // Its own state, in a copy of the layout of its own (as dhctl keeps one per node).
    let second = root.join("node-1");
    std::fs::create_dir_all(&second).unwrap();
    terraform::copy_layouts("dvp", &second);
    let node77 = Workspace::module(
        &bin,
        &second,
        second.join("dvp/layouts/standard/static-node"),
        PROVIDER,
    );
    migrate_into(&node77, &node77_state);
    tf(|| base.init());
    tf(|| master.init());
    tf(|| node.init());
    tf(|| node77.init());

    let v = w.vars(0, "master", &w.kubeconfig_b64);
    let nv = w.vars(0, "worker", &w.kubeconfig_b64);
    expect(
        &tf(|| base.plan(&[&v])),
        0,
        "base-infrastructure's plan after the migration",
    );
    let plan = tf(|| master.plan(&[&v]));
    expect(&plan, 0, "the master's plan after the migration");
    expect(
        &tf(|| node.plan(&[&nv])),
        0,
        "the static node's plan after the migration",
    );
    let nv1 = w.vars(1, "worker", &w.kubeconfig_b64);
    expect(
        &tf(|| node77.plan(&[&nv1])),
        0,
        "the 1.77 static node's plan after the migration",
    );
    // And with the machine's newer Terraform (Deckhouse's newest layouts need ≥ 1.2).
    if let Some(newer) = terraform::newer("the DVP Terraform takeover test", &bin) {
        for (ws, vars, what) in [
            (&base, &v, "base-infrastructure"),
            (&master, &v, "the master"),
            (&node, &nv, "the static node"),
            (&node77, &nv1, "the 1.77 static node"),
        ] {
            let ws = ws.using(&newer);
            tf(|| ws.init());
            expect(
                &tf(|| ws.plan(&[vars])),
                0,
                &format!("{what}'s plan with {}", newer.display()),
            );
        }
    }
    // A cluster moved to ModuleConfig version 2 (1.77 on): dhctl passes its objects
    // instead of the configuration; the same nodes plan no change from them.
    for (ws, index, group, what) in [
        (&master, 0, "master", "the master"),
        (&node77, 1, "worker", "the 1.77 static node"),
    ] {
        let mv = w.vars_as(index, group, &w.kubeconfig_b64, Inputs::ModuleConfig);
        expect(
            &tf(|| ws.plan(&[&mv])),
            0,
            &format!("{what}'s plan from ModuleConfig v2's inputs"),
        );
    }
    assert_eq!(
        writes(&w),
        Vec::<String>::new(),
        "the plans wrote to the parent"
    );
    // dhctl's converge applies: nothing made, changed or deleted.
    for (ws, vars) in [(&master, &v), (&node, &nv), (&node77, &nv1)] {
        let applied = tf(|| {
            ws.run(&["apply", "-input=false", "-no-color", "-auto-approve", vars])
                .ok()
        });
        assert!(
            applied.stdout.contains("0 added, 0 changed, 0 destroyed"),
            "{}",
            applied.stdout
        );
    }
    assert_eq!(
        writes(&w),
        Vec::<String>::new(),
        "the applies wrote to the parent"
    );
    assert_eq!(w.objects().await, before);
    assert_eq!(versions().await, versions_before, "an object changed");
    let out = tf(|| master.outputs());
    assert_eq!(
        out["kubernetes_data_device_path"]["value"],
        master_state["outputs"]["kubernetes_data_device_path"]["value"]
    );

    // A real change: the instance class names a run policy and a label; the VM takes
    // them in place, keeping what else it has.
    let vm_name = m.vm(&w.leased(&m.vmip("Auto")).await);
    let vm = w.api(&api::virtual_machine()).get(&vm_name).await.unwrap();
    let (uid, migration) = (
        vm.metadata.uid.clone(),
        vm.data["spec"]["liveMigrationPolicy"].clone(),
    );
    assert_eq!(vm.data["spec"]["runPolicy"], "AlwaysOn", "1.74's, kept");
    assert!(
        !vm.labels().contains_key("deckhouse.io/managed-by"),
        "1.74's labels, kept"
    );
    let file = v.trim_start_matches("-var-file=");
    let mut body: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    body["providerClusterConfiguration"]["masterNodeGroup"]["instanceClass"]["virtualMachine"]
        ["runPolicy"] = json!("AlwaysOnUnlessStoppedManually");
    body["providerClusterConfiguration"]["masterNodeGroup"]["instanceClass"]["virtualMachine"]
        ["additionalLabels"] = json!({"team": "platform"});
    let changed = format!("{file}.run-policy.json");
    std::fs::write(&changed, body.to_string()).unwrap();
    let cv = format!("-var-file={changed}");
    let plan = tf(|| master.plan(&[&cv]));
    expect(&plan, 2, "the master's plan of another run policy");
    assert!(
        plan.stdout.contains("0 to add, 1 to change, 0 to destroy"),
        "{} ({})",
        plan.stdout,
        RELEASE_1_74.label
    );
    tf(|| {
        master
            .run(&["apply", "-input=false", "-no-color", "-auto-approve", &cv])
            .ok()
    });
    let vm = w.api(&api::virtual_machine()).get(&vm_name).await.unwrap();
    assert_eq!(
        vm.data["spec"]["runPolicy"],
        "AlwaysOnUnlessStoppedManually"
    );
    assert_eq!(vm.data["spec"]["liveMigrationPolicy"], migration);
    assert_eq!(
        vm.labels().get("team").map(String::as_str),
        Some("platform")
    );
    assert!(!vm.labels().contains_key("deckhouse.io/managed-by"));
    assert_eq!(vm.metadata.uid, uid, "the VM was replaced");
    expect(&tf(|| master.plan(&[&cv])), 0, "the plan after the change");

    // Ours now: destroy removes everything Deckhouse made.
    for (ws, vars) in [(&node77, &nv1), (&node, &nv), (&master, &v)] {
        tf(|| {
            ws.run(&[
                "destroy",
                "-input=false",
                "-no-color",
                "-auto-approve",
                vars,
            ])
            .ok()
        });
    }
    assert_eq!(
        w.objects().await,
        Vec::<String>::new(),
        "destroy left objects"
    );
    // No longer managed, not deleted: the isolation stays until someone removes it.
    let policies = kube::discovery::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("networking.k8s.io", "v1", "NetworkPolicy"),
        "networkpolicies",
    );
    assert!(w
        .api(&policies)
        .get_opt("isolated-tf")
        .await
        .unwrap()
        .is_some());
}
