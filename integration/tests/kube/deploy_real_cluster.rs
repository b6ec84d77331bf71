//! Every object of every overlay sent to a real API server as a server-side-apply dry run
//! (nothing is stored): the server's own validation and admission judge the manifests.
//! Runs only when `OVERCAST_TEST_KUBECONFIG` names a kubeconfig whose user may apply
//! RBAC and CRDs (cluster-admin); otherwise it says clearly that it was skipped.

use kube::api::{DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{pinned_kind, Scope};
use kube::{Api, Client, Config};
use overcast_integration::manifests::{kustomizations, Manifests};
use overcast_integration::{real, say_skipped};

const ENV: &str = "OVERCAST_TEST_KUBECONFIG";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_overlay_passes_the_api_servers_validation() {
    let Ok(path) = std::env::var(ENV) else {
        say_skipped(&format!(
            "set {ENV} to a disposable cluster's kubeconfig to dry-run deploy/ against a real API server"
        ));
        return;
    };
    let kc = kube::config::Kubeconfig::read_from(&path).expect("read kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig");
    let client = Client::try_from(config).expect("client");
    let params = PatchParams::apply("overcast-deploy-test").force().dry_run();
    for dir in kustomizations("overlays") {
        let m = Manifests::load(&dir).unwrap_or_else(|e| panic!("{e}"));
        // The namespaces the manifests use exist where they run (node-manager's
        // d8-cloud-instance-manager on Deckhouse): made here if this server lacks them.
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        for ns in m.all.iter().filter_map(|r| r.namespace()) {
            if namespaces.get_opt(ns).await.ok().flatten().is_none() {
                let _ = namespaces
                    .create(
                        &Default::default(),
                        &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))
                            .expect("namespace"),
                    )
                    .await;
            }
        }
        for r in &m.all {
            let api_version = r.object["apiVersion"].as_str().unwrap_or_default();
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let gvk = GroupVersionKind::gvk(group, version, r.kind());
            let (resource, caps) = pinned_kind(&client, &gvk)
                .await
                .unwrap_or_else(|e| panic!("{}: the server has no {gvk:?}: {e}", dir.display()));
            let api: Api<DynamicObject> = match caps.scope {
                Scope::Namespaced => Api::namespaced_with(
                    client.clone(),
                    r.namespace().unwrap_or("default"),
                    &resource,
                ),
                Scope::Cluster => Api::all_with(client.clone(), &resource),
            };
            api.patch(r.name(), &params, &Patch::Apply(&r.object))
                .await
                .unwrap_or_else(|e| {
                    panic!("{}: {} {} refused: {e}", dir.display(), r.kind(), r.name())
                });
        }
    }
}

/// As a user installs: `kubectl apply -k deploy/overlays/<cloud>` with the kubectl CLI
/// (its own validation on, as by default), each overlay on a fresh API server of the kit's
/// — no namespace, CRD or object of another test's there. What an overlay needs is in it,
/// or in its `-without-deckhouse` twin (node-manager's namespace, which Deckhouse makes);
/// its CRDs pass kubectl's checks as they are.
#[test]
fn every_overlay_applies_with_kubectl_on_a_fresh_cluster() {
    if std::env::var(ENV).is_err() {
        say_skipped(&format!(
            "set {ENV} (the kit's kube-up.sh) to apply every overlay with kubectl on fresh API servers"
        ));
        return;
    }
    let Some(kit) = real::kit_scripts() else {
        say_skipped("the kit's kube-up.sh is not beside the project (set OVERCAST_KIT_DIR): the overlays were not applied with kubectl");
        return;
    };
    if std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        say_skipped("kubectl is not on the PATH: the overlays were not applied with it");
        return;
    }
    for dir in kustomizations("overlays") {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        // An overlay for a Deckhouse cluster never carries a Namespace (its `kubectl delete
        // -k` would delete Deckhouse's, with every machine object in it); on a cluster
        // without Deckhouse its `-without-deckhouse` twin, which does, is what is applied.
        let m = Manifests::load(&dir).unwrap_or_else(|e| panic!("{e}"));
        if !name.ends_with("-without-deckhouse") {
            assert!(
                m.namespaces.is_empty(),
                "{name} carries a Namespace: {:?}",
                m.namespaces
            );
        }
        if dir
            .with_file_name(format!("{name}-without-deckhouse"))
            .is_dir()
        {
            continue;
        }
        let fresh = real::FreshApiServer::up(&kit);
        let out = fresh.kubectl(&["apply", "-k", dir.to_str().unwrap()]);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "kubectl apply -k {}: {said}",
            dir.display()
        );
        // Everything it rendered is on the server.
        assert_eq!(
            said.lines()
                .filter(|l| l.ends_with(" created") || l.ends_with(" configured"))
                .count(),
            m.all.len(),
            "{}: {said}",
            dir.display()
        );
    }
}
