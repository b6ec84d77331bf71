//! What the infrastructure providers read of Cluster API's own objects (`cluster.x-k8s.io`):
//! the Machine that owns an infrastructure machine, its Cluster, pausing, the bootstrap
//! data. Read untyped at the storage version (v1beta2), with the v1beta1 spellings also
//! understood, since an API server without CAPI's conversion webhook serves either as
//! stored.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind, ObjectMeta};
use kube::Client;
use serde_json::Value;

use crate::Error;

pub const GROUP: &str = "cluster.x-k8s.io";
/// The label that names a Machine's Cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// An object (the infrastructure machine or its Cluster) carrying it is left alone.
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";

pub fn machine_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, "v1beta2", "Machine"),
        "machines",
    )
}

pub fn cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, "v1beta2", "Cluster"),
        "clusters",
    )
}

/// The name of the Machine that owns an object (its controller owner reference of kind
/// Machine in the `cluster.x-k8s.io` group), as CAPI's `GetOwnerMachine` finds it.
pub fn owner_machine_name(meta: &ObjectMeta) -> Option<String> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "Machine" && o.api_version.starts_with(GROUP))
        .map(|o| o.name.clone())
}

/// The owner Machine, if it is set and exists.
pub async fn owner_machine(client: &Client, meta: &ObjectMeta) -> Result<Option<Value>, Error> {
    let (Some(name), Some(ns)) = (owner_machine_name(meta), meta.namespace.as_deref()) else {
        return Ok(None);
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &machine_resource());
    Ok(api
        .get_opt(&name)
        .await?
        .map(|m| serde_json::to_value(m).unwrap_or_default()))
}

/// The Cluster a Machine belongs to (its `cluster.x-k8s.io/cluster-name` label).
pub async fn cluster_of(client: &Client, machine: &Value) -> Result<Option<Value>, Error> {
    let (Some(name), Some(ns)) = (
        machine["metadata"]["labels"][CLUSTER_NAME_LABEL].as_str(),
        machine["metadata"]["namespace"].as_str(),
    ) else {
        return Ok(None);
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &cluster_resource());
    Ok(api
        .get_opt(name)
        .await?
        .map(|c| serde_json::to_value(c).unwrap_or_default()))
}

/// CAPI's `IsPaused`: the Cluster's `spec.paused`, or the annotation on either object.
pub fn paused(cluster: &Value, meta: &ObjectMeta) -> bool {
    cluster["spec"]["paused"].as_bool() == Some(true)
        || cluster["metadata"]["annotations"][PAUSED_ANNOTATION].is_string()
        || meta
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(PAUSED_ANNOTATION))
}

/// Whether the Cluster's infrastructure is ready: v1beta2's
/// `status.initialization.infrastructureProvisioned`, v1beta1's `infrastructureReady`.
pub fn infrastructure_ready(cluster: &Value) -> bool {
    cluster["status"]["initialization"]["infrastructureProvisioned"].as_bool() == Some(true)
        || cluster["status"]["infrastructureReady"].as_bool() == Some(true)
}

/// The name of the Secret with the Machine's bootstrap data, once the bootstrap provider
/// has made it.
pub fn bootstrap_secret_name(machine: &Value) -> Option<&str> {
    machine["spec"]["bootstrap"]["dataSecretName"].as_str()
}

/// Whether the Machine's Node has joined (its `status.nodeRef`).
pub fn has_node(machine: &Value) -> bool {
    machine["status"]["nodeRef"]["name"].is_string()
}

/// The bootstrap data: the Secret's key `value`, as every bootstrap provider writes it.
pub async fn bootstrap_data(client: &Client, ns: &str, name: &str) -> Result<Vec<u8>, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = api.get(name).await?;
    secret
        .data
        .and_then(|mut d| d.remove("value"))
        .map(|v| v.0)
        .ok_or_else(|| {
            Error::Invalid(format!(
                "bootstrap data Secret {ns}/{name} has no key \"value\""
            ))
        })
}

/// The name of the Cluster's infrastructure object (`spec.infrastructureRef.name`).
pub fn infrastructure_name(cluster: &Value) -> Option<&str> {
    cluster["spec"]["infrastructureRef"]["name"].as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn either_contract_s_readiness_and_pause_are_read() {
        assert!(infrastructure_ready(
            &json!({"status": {"initialization": {"infrastructureProvisioned": true}}})
        ));
        assert!(infrastructure_ready(
            &json!({"status": {"infrastructureReady": true}})
        ));
        assert!(!infrastructure_ready(&json!({"status": {}})));
        let meta = ObjectMeta::default();
        assert!(paused(&json!({"spec": {"paused": true}}), &meta));
        assert!(paused(
            &json!({"metadata": {"annotations": {PAUSED_ANNOTATION: ""}}}),
            &meta
        ));
        let annotated = ObjectMeta {
            annotations: Some([(PAUSED_ANNOTATION.to_owned(), String::new())].into()),
            ..Default::default()
        };
        assert!(paused(&json!({}), &annotated));
        assert!(!paused(&json!({"spec": {"paused": false}}), &meta));
    }
}
