//! Every object of every overlay sent to a real API server as a server-side-apply dry run
//! (nothing is stored): the server's own validation and admission judge the manifests.
//! Runs only when `OVERCAST_TEST_KUBECONFIG` names a kubeconfig whose user may apply
//! RBAC and CRDs (cluster-admin); otherwise it says clearly that it was skipped.

use kube::api::{DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{pinned_kind, Scope};
use kube::{Api, Client, Config};
use overcast_integration::manifests::{kustomizations, Manifests};
use overcast_integration::say_skipped;

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
