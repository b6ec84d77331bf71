//! Every master and static node Deckhouse's DVP layouts made, taken over — for each
//! version of them the code index holds ([`super::deckhouse::VERSIONS`]): the node's
//! objects as that version's modules write them ([`super::made`]), in the simulated
//! parent, with the options that change what it writes switched on — a static address,
//! the class's labels and annotations, an additional disk (static nodes), the cluster's
//! `additionalVMLabels` where the version reads them — and the state it leaves. Then as an
//! operator switching: `terraform-provider-overcast migrate-state`, our layout's `init` and
//! `plan -detailed-exitcode` with Terraform 1.0.3 and the newer one (and from the
//! ModuleConfig's objects, from 1.77): no change, and the parent saw no write; an apply
//! changes nothing, no object's resourceVersion moves; a new label and annotation in the
//! class reach the same VM in place; destroy removes the node. A version whose objects no
//! DVP serves now is refused by `migrate-state`; one whose VM the parent refuses made none.
//! Base-infrastructure's takeover leaves Deckhouse's NetworkPolicy in the parent.

use serde_json::{json, Value};

use super::deckhouse::{Kind, Refusal, Version, VERSIONS};
use super::made::*;
use super::*;

fn migrate_state(state: &Value) -> (bool, Vec<u8>, String) {
    terraform::migrate_state(state.to_string().as_bytes())
}

/// `terraform-provider-dvp migrate-state` as an operator runs it, into the workspace.
fn migrate_into(ws: &Workspace, state: &Value) -> String {
    let (ok, out, said) = migrate_state(state);
    assert!(ok, "{said}");
    std::fs::write(ws.dir.join("terraform.tfstate"), out).unwrap();
    said
}

/// What the parent's API proxy saw written so far.
fn writes(w: &World) -> Vec<String> {
    w.sim
        .faults
        .writes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// A 2024 state (DVP's API of then: `VirtualMachineDisk`, `VirtualMachineIPAddressClaim`,
/// in one module; `candi/cloud-providers/dvp/terraform-modules/master-node/main.tf`
/// @d8077f48 — `kubernetes_manifest` `master-root-disk`, `kubernetes-data-disk`, `vmip`,
/// `vm`, `kubernetes_secret` `master-cloudinit-secret`; the static node's @6cbde322 alike).
fn state_2024(v: &Version, ns: &str) -> Value {
    let (module, disk) = match v.kind {
        Kind::Master => ("module.master-node", "master-root-disk"),
        Kind::Static => ("module.static-node", "static-node-root-disk"),
    };
    let object = |kind: &str, name: &str| {
        json!({"module": module, "mode": "managed", "type": "kubernetes_manifest", "name": name,
            "provider": K8S, "instances": [{"schema_version": 1, "attributes": {
                "manifest": {"value": {"apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": kind,
                    "metadata": {"name": format!("tf-{name}"), "namespace": ns}},
                    "type": ["object", {}]}}}]})
    };
    json!({"version": 4, "terraform_version": "1.5.7", "serial": 4, "lineage": "d8-2024",
        "outputs": {}, "resources": [
            object("VirtualMachineDisk", disk),
            object("VirtualMachineIPAddressClaim", "vmip"),
            object("VirtualMachine", "vm"),
    ]})
}

/// `v`'s node, made as it makes it, taken over as an operator would; `i` its place in
/// the table (its static address).
async fn take_over(
    w: &World,
    bin: &std::path::Path,
    newer: Option<&std::path::Path>,
    v: &Version,
    i: usize,
) {
    let what = v.label;
    let (group, module, layout) = match v.kind {
        Kind::Master => ("master", "module.master", "master-node"),
        Kind::Static => ("worker", "module.static-node", "static-node"),
    };
    let address = format!("10.66.30.{}", 10 + i);
    let n = deckhouse::Node {
        since_1_77: v.names_1_77,
        address: &address,
        additional_disks: u32::from(v.kind == Kind::Static && v.additional_disks),
        ..w.node(group, 0)
    };
    let extras = Extras {
        address: Some(address.clone()),
        additional_disks: n.additional_disks,
        labels: json!({"app": "postgres"}),
        annotations: json!({"owner": "dba-team"}),
        cluster_labels: if v.cluster_labels {
            json!({"team": "infra"})
        } else {
            Value::Null
        },
        run_policy: None,
    };
    match v.refusal {
        Some(Refusal::Api2024) => {
            let (ok, out, said) = migrate_state(&state_2024(v, &w.sim.namespace));
            assert!(!ok && out.is_empty(), "{what}: migrated: {said}");
            for kind in ["VirtualMachineDisk", "VirtualMachineIPAddressClaim"] {
                assert!(said.contains(kind), "{what}: {said}");
            }
            return;
        }
        Some(Refusal::NestedDiskList) => {
            // Its VM as it writes it, even without additional disks: the parent refuses it.
            let vm: kube::api::DynamicObject = serde_json::from_value(json!({
                "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachine",
                "metadata": {"name": format!("{}-nested", n.hostname()), "namespace": w.sim.namespace},
                "spec": {"virtualMachineClassName": "generic", "runPolicy": "AlwaysOn",
                    "cpu": {"cores": 2, "coreFraction": "50%"}, "memory": {"size": "4Gi"},
                    "blockDeviceRefs": [{"kind": "VirtualDisk", "name": n.root_disk()}, []]},
            }))
            .unwrap();
            let refused = w
                .api(&api::virtual_machine())
                .create(&Default::default(), &vm)
                .await
                .expect_err("the parent took a VM with a list in its blockDeviceRefs");
            assert!(
                refused.to_string().contains("blockDeviceRefs"),
                "{what}: {refused}"
            );
            return;
        }
        None => {}
    }
    let state = made_by_deckhouse(w, &n, module, v.release, &extras, v.cluster_labels).await;
    let before = w.resource_versions().await;
    let written = writes(w).len();
    let dir = w.dir.path().join(format!("v{i}"));
    std::fs::create_dir_all(&dir).unwrap();
    terraform::copy_layouts("dvp", &dir);
    let ws = Workspace::module(
        bin,
        &dir,
        dir.join("dvp/layouts/standard").join(layout),
        PROVIDER,
    );
    let said = migrate_into(&ws, &state);
    assert!(
        said.contains(&format!("{module}.kubernetes_manifest.vm (VirtualMachine")),
        "{what}: {said}"
    );
    assert!(
        !said.contains("bootstrap"),
        "{what}: the Secret's data was printed: {said}"
    );
    tf(|| ws.init());

    // The first plans: no change, from each Terraform and each shape of inputs.
    let vars = |extras: &Extras, inputs| w.vars_with(0, group, &w.kubeconfig_b64, inputs, extras);
    let vf = vars(&extras, Inputs::ClusterConfiguration);
    expect(
        &tf(|| ws.plan(&[&vf])),
        0,
        &format!("{what}: the first plan (Terraform 1.0.3)"),
    );
    if let Some(newer) = newer {
        let with = ws.using(newer);
        tf(|| with.init());
        expect(
            &tf(|| with.plan(&[&vf])),
            0,
            &format!("{what}: the first plan ({})", newer.display()),
        );
    }
    if v.objects {
        let mv = vars(&extras, Inputs::ModuleConfig);
        expect(
            &tf(|| ws.plan(&[&mv])),
            0,
            &format!("{what}: the first plan from ModuleConfig v2's inputs"),
        );
    }
    assert_eq!(
        writes(w)[written..],
        [] as [String; 0],
        "{what}: the plans wrote to the parent"
    );
    // dhctl's converge applies: nothing made, changed or deleted.
    let applied = tf(|| {
        ws.run(&["apply", "-input=false", "-no-color", "-auto-approve", &vf])
            .ok()
    });
    assert!(
        applied.stdout.contains("0 added, 0 changed, 0 destroyed"),
        "{what}: {}",
        applied.stdout
    );
    assert_eq!(
        writes(w)[written..],
        [] as [String; 0],
        "{what}: the apply wrote to the parent"
    );
    assert_eq!(
        w.resource_versions().await,
        before,
        "{what}: an object changed"
    );

    // A real change: a new label and annotation in the class reach the same VM in place,
    // keeping the cluster's labels and Deckhouse's own annotations; the run policy too.
    let leased = w.leased(&n.vmip(&address)).await;
    assert_eq!(leased, address, "{what}: the static address");
    let vm_name = n.vm(&leased);
    let vm = w.api(&api::virtual_machine()).get(&vm_name).await.unwrap();
    let migration = vm.data["spec"]["liveMigrationPolicy"].clone();
    if !v.release.since_1_75 {
        assert_eq!(vm.data["spec"]["runPolicy"], "AlwaysOn", "{what}: its own");
    }
    let mut more = extras.clone();
    more.labels["tier"] = json!("gold");
    more.annotations["backup"] = json!("daily");
    more.run_policy = Some("AlwaysOnUnlessStoppedManually");
    let cv = vars(&more, Inputs::ClusterConfiguration);
    let plan = tf(|| ws.plan(&[&cv]));
    expect(&plan, 2, &format!("{what}: the plan of a new label"));
    assert!(
        plan.stdout.contains("0 to add, 1 to change, 0 to destroy"),
        "{what}: {}",
        plan.stdout
    );
    tf(|| {
        ws.run(&["apply", "-input=false", "-no-color", "-auto-approve", &cv])
            .ok()
    });
    let after = w.api(&api::virtual_machine()).get(&vm_name).await.unwrap();
    assert_eq!(
        after.metadata.uid, vm.metadata.uid,
        "{what}: the VM was replaced"
    );
    let labels = after.labels();
    assert_eq!(
        labels.get("tier").map(String::as_str),
        Some("gold"),
        "{what}"
    );
    assert_eq!(
        labels.get("app").map(String::as_str),
        Some("postgres"),
        "{what}"
    );
    if v.cluster_labels {
        assert_eq!(
            labels.get("team").map(String::as_str),
            Some("infra"),
            "{what}"
        );
    }
    assert_eq!(
        labels.contains_key("deckhouse.io/managed-by"),
        v.release.since_1_75,
        "{what}: its identity labels, kept as made"
    );
    let annotations = after.annotations();
    assert_eq!(
        annotations.get("backup").map(String::as_str),
        Some("daily"),
        "{what}"
    );
    assert_eq!(
        annotations.get("owner").map(String::as_str),
        Some("dba-team"),
        "{what}"
    );
    assert_eq!(
        annotations.get("last_applied_destructive_vm_parameters"),
        vm.annotations()
            .get("last_applied_destructive_vm_parameters"),
        "{what}: Deckhouse's own annotation"
    );
    assert_eq!(
        after.data["spec"]["liveMigrationPolicy"], migration,
        "{what}"
    );
    expect(
        &tf(|| ws.plan(&[&cv])),
        0,
        &format!("{what}: the plan after the change"),
    );

    // Ours now: destroy removes everything Deckhouse made of the node.
    tf(|| {
        ws.run(&["destroy", "-input=false", "-no-color", "-auto-approve", &cv])
            .ok()
    });
    assert_eq!(
        w.objects().await,
        Vec::<String>::new(),
        "{what}: destroy left objects"
    );
}

/// Every version's node: the first plan after the switch changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_deckhouse_node_is_taken_over_unchanged() {
    let Some((w, bin)) = World::new("the DVP Terraform takeover test", "takeover").await else {
        return;
    };
    let newer = terraform::newer("the DVP Terraform takeover test", &bin);
    // `OVERCAST_TEST_VERSION=<part of a label>` runs those alone (while working on one).
    let only = std::env::var("OVERCAST_TEST_VERSION").ok();
    for (i, v) in VERSIONS.iter().enumerate() {
        if only.as_deref().is_some_and(|o| !v.label.contains(o)) {
            continue;
        }
        eprintln!(
            "-- the DVP takeover test: {} ({})",
            v.label,
            v.files.join(", ")
        );
        take_over(&w, &bin, newer.as_deref(), v, i).await;
    }
}

/// base-infrastructure: Deckhouse's NetworkPolicy stays in the parent, unmanaged; the
/// discovery data output is Deckhouse's, so the first plan changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base_infrastructure_is_taken_over_and_its_network_policy_left() {
    let Some((w, bin)) = World::new(
        "the DVP Terraform base-infrastructure takeover test",
        "takeover-base",
    )
    .await
    else {
        return;
    };
    let root = w.dir.path().to_owned();
    let base_state = base_made_by_deckhouse(&w).await;
    let base = Workspace::module(&bin, &root, w.layout("base-infrastructure"), PROVIDER);
    let said = migrate_into(&base, &base_state);
    assert!(said.contains("NetworkPolicy isolated-tf stays"), "{said}");
    tf(|| base.init());
    let v = w.vars(0, "master", &w.kubeconfig_b64);
    expect(
        &tf(|| base.plan(&[&v])),
        0,
        "base-infrastructure's plan after the migration",
    );
    if let Some(newer) = terraform::newer("the DVP base-infrastructure takeover test", &bin) {
        let with = base.using(&newer);
        tf(|| with.init());
        expect(
            &tf(|| with.plan(&[&v])),
            0,
            &format!("base-infrastructure's plan with {}", newer.display()),
        );
    }
    assert_eq!(
        writes(&w),
        Vec::<String>::new(),
        "the plans wrote to the parent"
    );
    tf(|| {
        base.run(&["destroy", "-input=false", "-no-color", "-auto-approve", &v])
            .ok()
    });
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
