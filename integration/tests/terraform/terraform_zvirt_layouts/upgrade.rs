//! An upgrade of Overcast under a zVirt cluster dhctl made with our layouts: an earlier
//! release's provider and layouts (that commit's binaries and files, built by `.ci/run`;
//! none of this release's code writes them) make a master and a static node in the
//! engine simulator; then this release as dhctl converges after the upgrade — each
//! module's working directory made afresh from this release's layouts, the state the
//! earlier release left put through `terraform-provider-overcast migrate-state` (that
//! release's layouts named the provider `ovirt/ovirt`, as Deckhouse's 2024 ones did; ours
//! now name it `terraform-provider-ovirt/ovirt`, and Terraform refuses a state of another
//! address; its resources also move to the addresses the layouts give them now), `init`
//! with this release's provider, `plan -detailed-exitcode` with the same inputs and the
//! converge's `apply`: no resource changed, no write to the engine, no change after.

use overcast_integration::release;

use super::*;

/// The release whose provider and layouts made the cluster (before the zVirt takeover's
/// schema changes, 5e88a76, and upstream's `initialization_*` attributes, e0b2026).
const PROVIDER: (&str, &str) = ("terraform-provider-ovirt", "ovirt");

/// `terraform-provider-overcast migrate-state < from > to`, as docs/deploy.md says to
/// run it on each state after this upgrade; what it said.
fn migrate_state(from: &std::path::Path, to: &std::path::Path) -> String {
    let (ok, out, said) = terraform::migrate_state(&std::fs::read(from).unwrap());
    assert!(ok, "migrate-state: {said}");
    std::fs::write(to, out).unwrap();
    said
}

/// 688adc9: its layouts gave the provider the address `ovirt/ovirt` and their own
/// resource addresses, which `migrate-state` moves to Deckhouse's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_an_earlier_release_made_plans_no_change_after_the_upgrade() {
    upgraded_from(
        "688adc9",
        ("ovirt", "ovirt"),
        Some("module.master.ovirt_vm.vm"),
    )
    .await;
}

/// 1c81bb4: its layouts were Deckhouse's already (the provider's address and the
/// resources'); `migrate-state` is run as the docs say and has nothing to move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_1c81bb4_made_plans_no_change_after_the_upgrade() {
    upgraded_from("1c81bb4", PROVIDER, None).await;
}

/// `commit`'s provider (at the address its layouts gave it, `release_provider`) and
/// layouts make the cluster; this release converges over the state, migrated first
/// (`moved`: an address the master's migration must name).
async fn upgraded_from(commit: &str, release_provider: (&str, &str), moved: Option<&str>) {
    let what = "the zVirt Terraform upgrade test";
    let Some(old) = release::get(commit, what) else {
        return;
    };
    let Some(bin) = terraform::binary(what) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (by_id, files) = (root.join("by-id"), root.join("disks"));
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    let engine = Engine::new(&files, &by_id, 200 * GIB, Latency::default());
    let url = engine.start().await;
    let _unplug = engine.unplug_on_drop();
    engine.add_template("ubuntu-2204", 10 * GIB);
    let profile = engine.add_vnic_profile("ovirtmgmt");
    let domain = engine.storage_domain_id("data");
    engine.set_guest_ips_on_boot("tf-master-0", &["10.1.0.5"]);
    engine.set_guest_ips_on_boot("tf-worker-0", &["10.1.0.6"]);
    let vars = |index, group| {
        let f = root.join(format!("vars-{group}-{index}.json"));
        std::fs::write(
            &f,
            var_file(&url, &profile, &domain, index, group).to_string(),
        )
        .unwrap();
        format!("-var-file={}", f.display())
    };
    let (master_vars, node_vars) = (vars(0, "master"), vars(0, "worker"));
    let modules = [
        ("base-infrastructure", &master_vars),
        ("master-node", &master_vars),
        ("static-node", &node_vars),
    ];

    // The earlier release's layouts and provider, in a directory of their own.
    let old_root = root.join(format!("release-{commit}"));
    std::fs::create_dir_all(&old_root).unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(old.src("deploy/terraform/zvirt"))
        .arg(&old_root)
        .status()
        .unwrap();
    assert!(copied.success());
    let old_provider = old.bin("terraform-provider-overcast");
    let old_module = |module: &str| old_root.join("zvirt/layouts/standard").join(module);
    for (module, vars) in modules {
        let ws = Workspace::module_with(
            &bin,
            &old_root,
            old_module(module),
            release_provider,
            &old_provider,
        );
        tf(|| ws.init());
        tf(|| {
            ws.run(&["apply", "-input=false", "-no-color", "-auto-approve", vars])
                .ok()
        });
    }
    assert!(
        engine.vm_by_name("tf-master-0").is_some(),
        "{commit} made no master"
    );
    assert!(
        engine.vm_by_name("tf-worker-0").is_some(),
        "{commit} made no node"
    );
    let (vms, disks) = (engine.vm_count(), engine.disks());
    let written = engine.writes();

    let layouts = terraform::copy_layouts("zvirt", root);
    for (module, vars) in modules {
        let ws = Workspace::module(
            &bin,
            root,
            layouts.join("layouts/standard").join(module),
            PROVIDER,
        );
        let said = migrate_state(
            &old_module(module).join("terraform.tfstate"),
            &ws.dir.join("terraform.tfstate"),
        );
        if let Some(moved) = moved.filter(|_| module == "master-node") {
            assert!(said.contains(moved), "{said}");
        }
        tf(|| ws.init());
        // No resource to change; an output may (dhctl's converge applies that, which
        // changes nothing in the cloud): after it, nothing at all.
        tf(|| {
            ws.converges_unchanged(
                vars,
                &format!("{module}'s plan by this release on the state {commit} left"),
            )
        });
    }
    assert_eq!(engine.writes(), written, "the converge wrote to the engine");
    assert_eq!((engine.vm_count(), engine.disks()), (vms, disks));
}
