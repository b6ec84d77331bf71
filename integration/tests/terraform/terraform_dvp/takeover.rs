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

use super::made::*;
use super::*;

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
