//! Every master and static node Deckhouse's zVirt layouts made, taken over — for each
//! version of them the code index holds ([`super::deckhouse`]): the engine's objects as
//! that version's files make them (its CPU topology, boot and etcd disk sizes, etcd disk
//! interface, cloud-init with a static address where it can give one, host name, stop
//! behaviour), with the options that change what it writes switched on, the state it
//! leaves as the oVirt provider it ran writes it (its schema; what its Read stores, taken
//! from the engine; its provider address and tool version); then as an operator
//! switching: `terraform-provider-overcast migrate-state`, our layout's `init` and
//! `plan -detailed-exitcode` with Terraform 1.0.3 and with a newer one → no change and no
//! engine write; `apply` → nothing happens; a bigger root disk → an in-place resize, the
//! VM kept; `destroy`. A version Terraform itself refuses made no node; a state no layout
//! of ours can keep is refused by `migrate-state`, naming the resource and the attribute.

use std::collections::BTreeMap;
use std::path::Path;

use overcast_integration::terraform::Run;
use serde_json::Value;

use super::deckhouse::{Network, Objects, Version, BASES, MASTERS, STATICS};
use super::made::*;
use super::*;

const OURS: &str = "registry.terraform.io/terraform-provider-ovirt/ovirt";
/// `terraform-provider-overcast migrate-state < state`: (the migrated state or `None`
/// when refused, stderr).
fn migrate_state(state: &Value) -> (Option<Value>, String) {
    let (ok, out, said) = terraform::migrate_state(state.to_string().as_bytes());
    if !ok {
        assert!(out.is_empty(), "a refusal wrote a state");
        return (None, said);
    }
    (Some(serde_json::from_slice(&out).unwrap()), said)
}

/// The engine's calls other than reads since `before`.
fn writes_since(engine: &Engine, before: &BTreeMap<String, u64>) -> Vec<(String, u64)> {
    engine
        .calls()
        .into_iter()
        .filter(|(k, n)| !k.starts_with("GET") && before.get(k) != Some(n))
        .collect()
}

fn plan_says(run: &Run, what: &str) -> bool {
    run.stdout.contains(what)
}

/// What a version Terraform refuses says: the construct `hcl` of its file in a module of
/// its own, `init` and `validate`.
fn refused_by_terraform(bin: &Path, root: &Path, v: &Version, (hcl, error): (&str, &str)) {
    let head = "terraform {\n  required_providers {\n    ovirt = { source = \"terraform-provider-ovirt/ovirt\" }\n  }\n}\n";
    let ws = Workspace::new(
        bin,
        root,
        "refused",
        ("terraform-provider-ovirt", "ovirt"),
        &[("main.tf", &format!("{head}{hcl}"))],
    );
    // A file Terraform cannot read at all stops `init` already; else `validate` says it.
    let init = tf(|| ws.try_init());
    let run = if init.code == 0 {
        tf(|| ws.run(&["validate", "-no-color"]))
    } else {
        init
    };
    assert!(
        run.code == 1 && run.stderr.contains(error),
        "{}: Terraform took what it should refuse:\n{}\n{}",
        v.label,
        run.stdout,
        run.stderr
    );
}

/// `v`'s node taken over as an operator would; what the first plan did, for the docs.
#[allow(clippy::too_many_arguments)]
fn take_over(
    bin: &Path,
    newer: Option<&Path>,
    root: &Path,
    engine: &Engine,
    url: &str,
    ids: &BTreeMap<&str, String>,
    v: &Version,
) {
    let what = v.label;
    if let Some(refusal) = v.refused_by_terraform {
        refused_by_terraform(bin, root, v, refusal);
        return;
    }
    let made = made_as_deckhouse(bin, root, url, ids, v);
    let before = engine.calls();
    let layouts = terraform::copy_layouts("zvirt", root);
    let ours = Workspace::module(
        bin,
        root,
        layouts.join("layouts/standard").join(layout(v.kind)),
        ("terraform-provider-ovirt", "ovirt"),
    );
    let vars = |root_gb: Option<u64>, name: &str| {
        let f = root.join(format!("vars-{name}.json"));
        std::fs::write(&f, variables(v, url, ids, root_gb).to_string()).unwrap();
        format!("-var-file={}", f.display())
    };
    let vars_file = vars(None, "as-made");

    // The switch: their state, migrated.
    let theirs = deckhouse_state(engine, ids, &made, v);
    let (migrated, said) = migrate_state(&theirs);
    let Some(migrated) = migrated else {
        // Only a state no layout of ours can keep is refused: the VM of the layout
        // before terraform-modules is named without the node's index.
        assert!(
            v.vm_name == "tf-master"
                && said.contains("ovirt_vm.master_vm")
                && said.contains("name"),
            "{what}: migrate-state refused: {said}"
        );
        remove_deckhouse_node(bin, root, v);
        engine.finish_removals();
        return;
    };
    assert!(
        v.vm_name != "tf-master",
        "{what}: a VM named without its index was migrated"
    );
    let provider = |s: &Value| {
        s["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["provider"].as_str().unwrap_or_default().to_owned())
            .collect::<std::collections::BTreeSet<_>>()
    };
    if v.tool.provider.starts_with("registry.terraform.io/ovirt/") {
        assert_eq!(
            provider(&migrated),
            [format!("provider[\"{OURS}\"]")].into(),
            "{what}"
        );
        assert!(said.contains("moved"), "{what}: {said}");
    }
    if v.root_default_gb.is_none() {
        assert!(
            said.contains(&format!(
                "ovirt_disk_resize.{}_boot_disk_resize",
                word(v.kind)
            )),
            "{what}: no boot disk resize added: {said}"
        );
    }
    std::fs::write(ours.dir.join("terraform.tfstate"), migrated.to_string()).unwrap();
    if v.tool.provider.starts_with("registry.opentofu.org/") {
        // OpenTofu's registry (dhctl ran OpenTofu): planned with Terraform here (no
        // OpenTofu can be installed on this machine), so the state moves to Terraform's
        // as a user switching tools does it.
        ours.install_under(
            "registry.opentofu.org",
            ("terraform-provider-ovirt", "ovirt"),
        );
        tf(|| ours.init());
        tf(|| {
            ours.run(&[
                "state",
                "replace-provider",
                "-auto-approve",
                v.tool.provider,
                OURS,
            ])
            .ok()
        });
    } else {
        tf(|| ours.init());
    }

    // The first plan, with each Terraform: no change.
    let plan = tf(|| ours.plan(&[&vars_file]));
    expect(
        &plan,
        0,
        &format!("{what}: the first plan (Terraform 1.0.3)"),
    );
    if let Some(newer) = newer {
        let with_newer = ours.using(newer);
        tf(|| with_newer.init());
        let plan = tf(|| with_newer.plan(&[&vars_file]));
        expect(
            &plan,
            0,
            &format!("{what}: the first plan ({})", newer.display()),
        );
    }
    if v.objects != Objects::None {
        // The cluster moved to the ModuleConfig: dhctl passes the objects instead.
        let f = root.join(format!("vars-{}-objects.json", layout(v.kind)));
        std::fs::write(&f, objects(v, url, ids, MEMORY_MIB).to_string()).unwrap();
        let plan = tf(|| ours.plan(&[&format!("-var-file={}", f.display())]));
        expect(
            &plan,
            0,
            &format!("{what}: the first plan from the ModuleConfig's objects"),
        );
        // And they are what is read: the class's memory doubled there is a change.
        std::fs::write(&f, objects(v, url, ids, 2 * MEMORY_MIB).to_string()).unwrap();
        let plan = tf(|| ours.plan(&[&format!("-var-file={}", f.display())]));
        expect(&plan, 2, &format!("{what}: a bigger class in the objects"));
        assert!(plan_says(&plan, "memory"), "{what}: {}", plan.stdout);
    }
    let writes = writes_since(engine, &before);
    assert!(
        writes.is_empty(),
        "{what}: the plans wrote to the engine: {writes:?}"
    );

    // apply: nothing happens.
    let applied = tf(|| {
        ours.run(&[
            "apply",
            "-input=false",
            "-no-color",
            "-auto-approve",
            &vars_file,
        ])
        .ok()
    });
    assert!(
        plan_says(&applied, "0 added, 0 changed, 0 destroyed"),
        "{what}: {}",
        applied.stdout
    );
    let writes = writes_since(engine, &before);
    assert!(
        writes.is_empty(),
        "{what}: the apply wrote to the engine: {writes:?}"
    );
    let vm = engine.vm_by_name(v.vm_name).expect("the VM");
    assert_eq!(vm["id"], made["vm"], "{what}: the VM was replaced");
    if v.network != Network::None {
        // The static address the engine holds is the one the node was made with.
        assert_eq!(
            vm["initialization"]["nic_configurations"]["nic_configuration"][0]["ip"]["address"],
            addresses(v.kind)[0],
            "{what}: {vm}"
        );
    }

    // A real change: a bigger root disk grows in place, the VM kept.
    let boot = |engine: &Engine| {
        engine
            .disks()
            .into_iter()
            .find(|(_, alias, _)| alias == &format!("{}_Disk1", v.vm_name))
            .expect("the boot disk")
    };
    let bigger_gb = boot(engine).2 / GIB + 10;
    let bigger = vars(Some(bigger_gb), "bigger");
    let plan = tf(|| ours.plan(&[&bigger]));
    expect(&plan, 2, &format!("{what}: the plan of a bigger disk"));
    assert!(
        plan_says(&plan, "0 to add, 1 to change, 0 to destroy"),
        "{what}: {}",
        plan.stdout
    );
    tf(|| {
        ours.run(&[
            "apply",
            "-input=false",
            "-no-color",
            "-auto-approve",
            &bigger,
        ])
        .ok()
    });
    assert_eq!(
        boot(engine).2,
        bigger_gb * GIB,
        "{what}: the boot disk was not grown"
    );
    let vm = engine.vm_by_name(v.vm_name).expect("the VM");
    assert_eq!(vm["id"], made["vm"], "{what}: the VM was replaced");
    let (sockets, cores, _) = (v.cpu)(CPUS);
    assert_eq!(
        vm["cpu"]["topology"]["sockets"],
        sockets.to_string(),
        "{what}: the topology changed"
    );
    assert_eq!(vm["cpu"]["topology"]["cores"], cores.to_string(), "{what}");
    expect(
        &tf(|| ours.plan(&[&bigger])),
        0,
        &format!("{what}: after the resize"),
    );

    // Taken over whole: destroy removes what Deckhouse made.
    tf(|| {
        ours.run(&[
            "destroy",
            "-input=false",
            "-no-color",
            "-auto-approve",
            &bigger,
        ])
        .ok()
    });
    engine.finish_removals();
    assert!(
        engine.vm_by_name(v.vm_name).is_none(),
        "{what}: destroy left the VM"
    );
    // The engine removes a VM's disks as a job, a moment after the VM.
    let started = std::time::Instant::now();
    while engine
        .disks()
        .iter()
        .any(|(_, alias, _)| alias.starts_with(v.vm_name))
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{what}: destroy left a disk: {:?}",
            engine.disks()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The objects of a refused version removed by the module that made them.
fn remove_deckhouse_node(bin: &Path, root: &Path, v: &Version) {
    let ws = Workspace::module(
        bin,
        root,
        root.join(format!("deckhouse-{}", layout(v.kind))),
        ("terraform-provider-ovirt", "ovirt"),
    );
    tf(|| {
        ws.run(&["destroy", "-input=false", "-no-color", "-auto-approve"])
            .ok()
    });
}

/// The engine, its template, vNIC profile and storage domain; its loop devices go however
/// the test ends.
async fn engine_for(root: &Path) -> (Engine, String, BTreeMap<&'static str, String>) {
    let (by_id, files) = (root.join("by-id"), root.join("disks"));
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    let engine = Engine::new(&files, &by_id, 400 * GIB, Latency::default());
    let url = engine.start().await;
    let ids = BTreeMap::from([
        ("template", engine.add_template("ubuntu-2204", 10 * GIB)),
        ("profile", engine.add_vnic_profile("ovirtmgmt")),
        ("domain", engine.storage_domain_id("data")),
    ]);
    engine.set_guest_ips_on_boot("tf-master", &["10.1.0.5"]);
    engine.set_guest_ips_on_boot("tf-master-0", &["10.1.0.5"]);
    engine.set_guest_ips_on_boot("tf-worker-0", &["10.1.0.6"]);
    (engine, url, ids)
}

/// Every version's nodes of `versions`: the first plan after the switch changes nothing,
/// on Terraform 1.0.3 and a newer Terraform.
async fn each_version(versions: &[Version], what: &str) {
    let Some(bin) = terraform::binary(what) else {
        return;
    };
    let newer = terraform::newer(what, &bin);
    let dir = tempfile::tempdir().unwrap();
    let (engine, url, ids) = engine_for(dir.path()).await;
    let _unplug = engine.unplug_on_drop();
    // `OVERCAST_TEST_VERSION=<part of a label>` runs those alone (while working on one).
    let only = std::env::var("OVERCAST_TEST_VERSION").ok();
    for (i, v) in versions.iter().enumerate() {
        if only.as_deref().is_some_and(|o| !v.label.contains(o)) {
            continue;
        }
        eprintln!("-- {what}: {} ({})", v.label, v.files.join(", "));
        let at = dir.path().join(format!("v{i}"));
        std::fs::create_dir_all(&at).unwrap();
        take_over(&bin, newer.as_deref(), &at, &engine, &url, &ids, v);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_deckhouse_master_plans_no_change_after_the_switch() {
    each_version(MASTERS, "the zVirt masters' takeover test").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_deckhouse_static_node_plans_no_change_after_the_switch() {
    each_version(STATICS, "the zVirt static nodes' takeover test").await;
}

/// The type Terraform records beside a value of an HCL object literal in a state.
fn type_of(v: &Value) -> Value {
    match v {
        Value::String(_) => json!("string"),
        Value::Number(_) => json!("number"),
        Value::Bool(_) => json!("bool"),
        Value::Array(a) => json!(["tuple", a.iter().map(type_of).collect::<Vec<_>>()]),
        Value::Object(o) => json!([
            "object",
            o.iter()
                .map(|(k, v)| (k.clone(), type_of(v)))
                .collect::<serde_json::Map<_, _>>()
        ]),
        Value::Null => json!("dynamic"),
    }
}

/// base-infrastructure makes nothing: the first plan over each version's state changes
/// at most its discovery data output (the early one lacked `storageDomains` and
/// `zones`), and no resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_deckhouse_base_infrastructure_changes_at_most_its_output() {
    let Some(bin) = terraform::binary("the zVirt base-infrastructure takeover test") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (engine, url, ids) = engine_for(dir.path()).await;
    let _unplug = engine.unplug_on_drop();
    let newest = (BASES.last().unwrap().output)();
    for (i, base) in BASES.iter().enumerate() {
        let root = dir.path().join(format!("b{i}"));
        std::fs::create_dir_all(&root).unwrap();
        let layouts = terraform::copy_layouts("zvirt", &root);
        let ws = Workspace::module(
            &bin,
            &root,
            layouts.join("layouts/standard/base-infrastructure"),
            ("terraform-provider-ovirt", "ovirt"),
        );
        let output = (base.output)();
        let state = json!({"version": 4, "terraform_version": "0.14.8", "serial": 2,
            "lineage": "0b7e1f55-0000-4c2e-9a51-3f1d2c7b8a90",
            "outputs": {"cloud_discovery_data": {"value": output, "type": type_of(&output)}},
            "resources": []});
        std::fs::write(ws.dir.join("terraform.tfstate"), state.to_string()).unwrap();
        tf(|| ws.init());
        let f = root.join("vars.json");
        std::fs::write(
            &f,
            var_file(&url, &ids["profile"], &ids["domain"], 0, "master").to_string(),
        )
        .unwrap();
        let plan = tf(|| ws.plan(&[&format!("-var-file={}", f.display())]));
        if output == newest {
            expect(&plan, 0, base.label);
        } else {
            // An output's change only: no resource planned.
            expect(&plan, 2, base.label);
            assert!(
                plan.stdout.contains("Changes to Outputs") && !plan.stdout.contains("Plan:"),
                "{}: {}",
                base.label,
                plan.stdout
            );
        }
    }
    assert_eq!(
        engine.total_calls(),
        0,
        "base-infrastructure called the engine"
    );
}
