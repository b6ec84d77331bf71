//! The `dvp` provider: a cluster's machines as objects of its parent DVP cluster, on
//! Overcast's DVP client (`overcast_cloud_dvp::Parent`: its deadlines, error typing and
//! call counting). Resources: `dvp_virtual_machine`, `dvp_virtual_disk` (from an image, or
//! blank), `dvp_virtual_machine_ip_address`, `dvp_cloud_init_secret` — each made in the
//! parent namespace and done when the parent says it is ready.
//!
//! An object of the same name already in the namespace is never taken over: the create
//! fails naming it (import it to manage it).

// The core's modules under the names this crate's files use.
pub(crate) use overcast_terraform_core::{cty, resource, schema};

use std::sync::Arc;

use base64::Engine as _;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::Api;
use overcast_cloud::CloudError;
use overcast_cloud_dvp::parent::Parent;
use overcast_cloud_http::ApiMetrics;
use serde_json::Value as J;

use crate::cty::{Type, Value};
use crate::resource::{until, Diag, Outcome};
use crate::schema::{required, string, Block, Obj};
use overcast_terraform_core::server::Server;

mod disk;
pub mod migrate;
mod parts;
mod vm;

pub type Cloud = Arc<Parent>;

fn provider_block() -> Block {
    Block::new(
        "The parent DVP cluster and the namespace of this cluster's machines.",
        vec![
            required(
                "kubeconfig_base64",
                Type::String,
                "The parent cluster's kubeconfig, base64 (DVPClusterConfiguration's provider.kubeconfigDataBase64).",
            )
            .sensitive(),
            required("namespace", Type::String, "The parent namespace."),
        ],
    )
}

async fn configure(c: Obj) -> Outcome<Cloud> {
    let encoded = string(&c, "kubeconfig_base64").unwrap_or_default();
    let text = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| {
            Diag::at(
                "kubeconfig_base64",
                "kubeconfig_base64 is not base64 text",
                "",
            )
        })?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).map_err(|_| {
        Diag::at(
            "kubeconfig_base64",
            "kubeconfig_base64 is not a kubeconfig",
            // The parser's message quotes the text around the error — the kubeconfig's
            // credentials, which are never shown.
            "it does not parse as a kubeconfig's YAML",
        )
    })?;
    let namespace = string(&c, "namespace").unwrap_or_default().to_owned();
    if namespace.is_empty() {
        return Err(Diag::at("namespace", "namespace is required", ""));
    }
    let config = overcast_cloud_dvp::config::Config {
        namespace,
        kubeconfig,
        // The layouts name every object they manage; nothing here lists the namespace, so
        // the cluster's UUID (which narrows the CSI's and discoverer's listings) is not needed.
        cluster_uuid: None,
        unknown_keys: Vec::new(),
    };
    let parent = Parent::connect(&config, Arc::new(ApiMetrics::unregistered()))
        .await
        .map_err(|e| {
            Diag::at(
                "kubeconfig_base64",
                "Cannot use the parent's kubeconfig",
                e.to_string(),
            )
        })?;
    Ok(Arc::new(parent))
}

pub fn server() -> Server<Cloud> {
    Server::new(provider_block(), Box::new(|c| Box::pin(configure(c))))
        .resource("dvp_virtual_machine", vm::VirtualMachine)
        .resource("dvp_virtual_disk", disk::VirtualDisk)
        .resource("dvp_virtual_machine_ip_address", parts::IpAddress)
        .resource("dvp_cloud_init_secret", parts::CloudInitSecret)
}

/// The `labels` attribute every resource has.
fn labels_type() -> Type {
    Type::Map(Box::new(Type::String))
}

fn labels_of(o: &Obj) -> serde_json::Map<String, J> {
    strings_at(o, "labels")
}

/// The map of strings `attr` of `o` (labels, annotations) as JSON.
fn strings_at(o: &Obj, attr: &str) -> serde_json::Map<String, J> {
    match o.get(attr) {
        Some(Value::Map(m)) => m
            .iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k.clone(), J::String(s.clone()))),
                _ => None,
            })
            .collect(),
        _ => serde_json::Map::new(),
    }
}

/// The object's labels as a refresh records them: after an import all of them; else only
/// the keys the state holds (a label the parent's controllers add is not the user's, and
/// must not show as a change), so a user's label changed or removed out of band shows.
/// None is an empty map after an import or where the state held a map, so a layout's
/// `labels` whose every key `ignore_changes` keeps (an object made unlabelled by an older
/// Deckhouse) plans no change; null only where the state held null.
fn labels_value(state: &Obj, m: Option<&std::collections::BTreeMap<String, String>>) -> Value {
    map_value(state, "labels", m)
}

/// [`labels_value`] for the map `attr` (annotations too: DVP's controllers write neither
/// on its objects — the API's "CR handling contract" —, so after an import every key is
/// one a person or a layout wrote).
fn map_value(
    state: &Obj,
    attr: &str,
    m: Option<&std::collections::BTreeMap<String, String>>,
) -> Value {
    let ours = strings_at(state, attr);
    let imported = !matches!(state.get("name"), Some(Value::String(_)));
    let kept: std::collections::BTreeMap<String, Value> = m
        .into_iter()
        .flatten()
        .filter(|(k, _)| imported || ours.contains_key(*k))
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    if kept.is_empty() && !imported && !matches!(state.get(attr), Some(Value::Map(_))) {
        Value::Null
    } else {
        Value::Map(kept)
    }
}

/// A Kubernetes object name (RFC 1123 subdomain, as the API server checks it) — checked
/// before any call, so a bad one is a diagnostic naming the attribute.
fn check_name(o: &Obj, attr: &str, out: &mut Vec<Diag>) {
    if let Some(n) = string(o, attr) {
        let ok = !n.is_empty()
            && n.len() <= 253
            && n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && n.starts_with(|c: char| c.is_ascii_alphanumeric())
            && n.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !ok {
            out.push(Diag::at(
                attr,
                format!("{attr} is not a Kubernetes name"),
                format!("{n:?}: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"),
            ));
        }
    }
}

fn name_of(o: &Obj, attr: &str) -> Outcome<String> {
    let mut bad = Vec::new();
    check_name(o, attr, &mut bad);
    match (bad.pop(), string(o, attr)) {
        (Some(d), _) => Err(d),
        (None, Some(n)) => Ok(n.to_owned()),
        (None, None) => Err(Diag::at(attr, format!("{attr} is required"), "")),
    }
}

async fn get(
    parent: &Parent,
    request: &'static str,
    api: &Api<DynamicObject>,
    name: &str,
) -> Outcome<Option<DynamicObject>> {
    parent
        .get_opt(request, api, name)
        .await
        .map_err(|e| Diag::cloud(&format!("read {name}"), e))
}

/// Creates `obj`; one of its name already there is refused, never taken over.
async fn create(
    parent: &Parent,
    request: &'static str,
    api: &Api<DynamicObject>,
    kind: &str,
    obj: &DynamicObject,
) -> Outcome<DynamicObject> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    match parent
        .call(request, &format!("create {kind} {name}"), api.create(&PostParams::default(), obj))
        .await
    {
        Ok(o) => Ok(o),
        Err(CloudError::Conflict(_)) => Err(Diag::at(
            "name",
            format!("{kind} {name} already exists"),
            format!(
                "a {kind} of that name is in namespace {}: it is not taken over (import it to manage it, or choose another name)",
                parent.namespace
            ),
        )),
        Err(e) => Err(Diag::cloud(&format!("create {kind} {name}"), e)),
    }
}

/// A merge patch of `name`'s metadata and spec.
async fn patch(
    parent: &Parent,
    request: &'static str,
    api: &Api<DynamicObject>,
    name: &str,
    body: J,
) -> Outcome<DynamicObject> {
    parent
        .call(
            request,
            &format!("update {name}"),
            api.patch(name, &PatchParams::default(), &Patch::Merge(&body)),
        )
        .await
        .map_err(|e| Diag::cloud(&format!("update {name}"), e))
}

/// Deletes `name` and waits until it is gone (its finalizers done).
async fn delete(
    parent: &Parent,
    request: &'static str,
    get_request: &'static str,
    api: &Api<DynamicObject>,
    name: &str,
) -> Outcome<()> {
    parent
        .delete(request, api, name, &DeleteParams::default())
        .await
        .map_err(|e| Diag::cloud(&format!("delete {name}"), e))?;
    until(&format!("{name} deleted"), || async {
        Ok(get(parent, get_request, api, name)
            .await?
            .is_none()
            .then_some(()))
    })
    .await
}

/// The first condition of `obj` that is not True, as "<type>: <reason> (<message>)" —
/// what an object waits for.
fn waiting_for(obj: &DynamicObject) -> String {
    obj.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["status"] != "True"))
        .map(|c| {
            format!(
                "{}: {} ({})",
                c["type"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or("?"),
                c["message"].as_str().unwrap_or("")
            )
        })
        .unwrap_or_else(|| "no condition said".into())
}

fn dynamic(
    kind: &str,
    name: &str,
    labels: serde_json::Map<String, J>,
    spec: J,
) -> Outcome<DynamicObject> {
    serde_json::from_value(serde_json::json!({
        "apiVersion": format!("{}/{}", overcast_cloud_dvp::api::GROUP, overcast_cloud_dvp::api::VERSION),
        "kind": kind,
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }))
    .map_err(|e| Diag::new(format!("{kind} {name}"), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(kubeconfig: &str, namespace: &str) -> Obj {
        Obj::from([
            (
                "kubeconfig_base64".to_owned(),
                Value::String(kubeconfig.into()),
            ),
            ("namespace".to_owned(), Value::String(namespace.into())),
        ])
    }

    #[tokio::test]
    async fn a_bad_provider_block_is_a_diagnostic_naming_the_attribute_and_not_its_value() {
        let secret = "c2VjcmV0LXRva2VuLTdmM2E6IFs=";
        for (c, attr) in [
            (block("not base64 !", "tenant"), "kubeconfig_base64"),
            (block(secret, "tenant"), "kubeconfig_base64"),
            (
                block(
                    &base64::engine::general_purpose::STANDARD
                        .encode("apiVersion: v1\nkind: Config\n"),
                    "",
                ),
                "namespace",
            ),
        ] {
            let d = configure(c).await.expect_err("refused");
            assert_eq!(d.attribute.as_deref(), Some(attr), "{d:?}");
            assert!(!format!("{d:?}").contains("secret-token"), "{d:?}");
        }
    }
}
