//! An upgrade of Overcast under a DVP cluster dhctl made with our layouts: an earlier
//! release's provider and layouts (the binaries and files of that commit, built by
//! `.ci/run`; none of this release's code writes them) make the cluster's base, a master
//! and a static node in the simulated parent; then this release as dhctl converges after
//! the upgrade — each module's working directory made afresh from this release's layouts,
//! the state the earlier release left copied in, `init` with this release's provider,
//! `plan -detailed-exitcode` with the same inputs, and the converge's `apply`. What an
//! upgrade must give: no resource changed (an output may be: base-infrastructure's
//! discovery data is Deckhouse's exactly now), nothing written to the parent, and a plan
//! of no change after.

use overcast_integration::release;

use super::*;

/// The release whose provider and layouts made the cluster: the last before our layouts
/// took Deckhouse's names, labels and defaults (0eeb907).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_an_earlier_release_made_plans_no_change_after_the_upgrade() {
    upgraded_from("688adc9").await;
}

/// The release of 2026-11-28, whose layouts had Deckhouse's names already.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_1c81bb4_made_plans_no_change_after_the_upgrade() {
    upgraded_from("1c81bb4").await;
}

/// `commit`'s provider and layouts make the cluster; this release converges over it.
async fn upgraded_from(commit: &str) {
    let what = "the DVP Terraform upgrade test";
    let Some(old) = release::get(commit, what) else {
        return;
    };
    let Some((w, bin)) = World::new(what, &format!("upgrade-{commit}")).await else {
        return;
    };
    let root = w.dir.path().to_owned();
    // The earlier release's layouts, in a directory of their own (its provider is
    // installed in the plugin directories there).
    let old_root = root.join(format!("release-{commit}"));
    std::fs::create_dir_all(&old_root).unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(old.src("deploy/terraform/dvp"))
        .arg(&old_root)
        .status()
        .unwrap();
    assert!(copied.success());
    let old_provider = old.bin("terraform-provider-overcast");
    let master_vars = w.vars(0, "master", &w.kubeconfig_b64);
    let node_vars = w.vars(0, "worker", &w.kubeconfig_b64);
    let modules = [
        ("base-infrastructure", &master_vars),
        ("master-node", &master_vars),
        ("static-node", &node_vars),
    ];
    let old_module = |module: &str| old_root.join("dvp/layouts/standard").join(module);
    for (module, vars) in modules {
        let ws =
            Workspace::module_with(&bin, &old_root, old_module(module), PROVIDER, &old_provider);
        tf(|| ws.init());
        tf(|| {
            ws.run(&["apply", "-input=false", "-no-color", "-auto-approve", vars])
                .ok()
        });
    }
    let objects = w.objects().await;
    assert!(
        objects.iter().filter(|o| o.starts_with("vm/")).count() == 2,
        "{commit} made a master and a node: {objects:?}"
    );
    let before = w.resource_versions().await;
    // What the earlier release wrote is behind us: from here, the parent must see none.
    w.sim
        .faults
        .writes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clear();

    for (module, vars) in modules {
        let ws = Workspace::module(&bin, &root, w.layout(module), PROVIDER);
        std::fs::copy(
            old_module(module).join("terraform.tfstate"),
            ws.dir.join("terraform.tfstate"),
        )
        .unwrap();
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
    assert_eq!(
        *w.sim
            .faults
            .writes
            .lock()
            .unwrap_or_else(|e| e.into_inner()),
        Vec::<String>::new(),
        "the converge wrote to the parent"
    );
    assert_eq!(
        w.resource_versions().await,
        before,
        "an object in the parent changed"
    );
    assert_eq!(w.objects().await, objects);
}
