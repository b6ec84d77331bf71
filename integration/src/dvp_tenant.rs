//! A tenant account in the parent, bound to exactly the RBAC the deploy manifests give.

use std::path::Path;

use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// An account in the parent bound to exactly `deploy/parent/dvp/rbac.yaml`, in
/// `namespace` (the manifest's `my-cluster` replaced): its Role, and with
/// `cluster_role` also its optional ClusterRole (made per namespace, so tests do not
/// share one; [`drop_tenant`] removes it). Returns a client that talks as that account.
pub async fn tenant(admin_kubeconfig: &str, namespace: &str, cluster_role: bool) -> Client {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let admin = crate::real::client(admin_kubeconfig).await;
    let text = std::fs::read_to_string(crate::package_dir().join("../deploy/parent/dvp/rbac.yaml"))
        .expect("deploy/parent/dvp/rbac.yaml");
    // The manifest's namespace is a placeholder, in metadata, subjects and resourceNames.
    let text = text.replace("my-cluster", namespace);
    let docs: Vec<serde_json::Value> = text
        .split("\n---")
        .filter_map(|d| serde_saphyr::from_str::<serde_json::Value>(d).ok())
        .filter(|d| d.is_object())
        .collect();
    let pp = PostParams::default();
    let cluster_name = cluster_role_name(namespace);
    for doc in docs {
        let kind = doc["kind"].as_str().expect("kind").to_owned();
        let made = match kind.as_str() {
            "ServiceAccount" => Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
                .create(&pp, &serde_json::from_value(doc).expect("sa"))
                .await
                .map(|_| ()),
            "Role" => Api::<Role>::namespaced(admin.clone(), namespace)
                .create(&pp, &serde_json::from_value(doc).expect("role"))
                .await
                .map(|_| ()),
            "RoleBinding" => Api::<RoleBinding>::namespaced(admin.clone(), namespace)
                .create(&pp, &serde_json::from_value(doc).expect("binding"))
                .await
                .map(|_| ()),
            "ClusterRole" if !cluster_role => Ok(()),
            "ClusterRole" => {
                let mut role: ClusterRole = serde_json::from_value(doc).expect("cluster role");
                role.metadata.name = Some(cluster_name.clone());
                let made = Api::<ClusterRole>::all(admin.clone())
                    .create(&pp, &role)
                    .await
                    .map(|_| ());
                let binding: ClusterRoleBinding = serde_json::from_value(json!({
                    "metadata": {"name": cluster_name},
                    "subjects": [{"kind": "ServiceAccount", "name": "overcast-dvp", "namespace": namespace}],
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_name},
                }))
                .expect("cluster role binding");
                made.and(
                    Api::<ClusterRoleBinding>::all(admin.clone())
                        .create(&pp, &binding)
                        .await
                        .map(|_| ()),
                )
            }
            other => panic!("unexpected {other} in the parent RBAC manifest"),
        };
        match made {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("{kind} of the parent RBAC manifest: {e}"),
        }
    }
    let req: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).expect("token");
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create_token_request("overcast-dvp", &pp, &req)
        .await
        .expect("a token for the parent account")
        .status
        .expect("token status")
        .token;
    let kubeconfig = kube::config::Kubeconfig::read_from(admin_kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    crate::real::as_account(&config, &token).await
}

fn cluster_role_name(namespace: &str) -> String {
    format!("overcast-dvp-{namespace}")
}

/// Removes what [`tenant`] made outside the namespace.
pub async fn drop_tenant(admin: &Client, namespace: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let name = cluster_role_name(namespace);
    let dp = DeleteParams::default();
    let _ = Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(&name, &dp)
        .await;
    let _ = Api::<ClusterRole>::all(admin.clone())
        .delete(&name, &dp)
        .await;
}

/// The provider's way to the parent through the simulator's proxy (what a test plays
/// outages on, and counts reads through): a `Parent` for `sim`'s namespace, its calls
/// counted in `metrics`, and the proxy's kubeconfig (for a binary's cloud-config).
pub async fn through_proxy(
    sim: &overcast_sim_dvp::DvpSim,
    dir: &Path,
    metrics: std::sync::Arc<overcast_cloud_http::ApiMetrics>,
) -> (overcast_cloud_dvp::Parent, std::path::PathBuf) {
    let proxied = sim.api_proxy(dir).await;
    let kc = kube::config::Kubeconfig::read_from(&proxied).expect("the proxy's kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("the proxy's config");
    let parent = overcast_cloud_dvp::Parent::from_config(config, sim.namespace.clone(), metrics)
        .expect("a parent through the proxy");
    (parent, proxied)
}
