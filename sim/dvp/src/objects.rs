//! What every simulated controller does to its objects: its finalizer on and off, its
//! status written, its conditions shaped as the real controllers write them.

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::FINALIZER;

pub(super) async fn add_finalizer<K>(api: &Api<K>, obj: &K) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut finalizers = obj.finalizers().to_vec();
    finalizers.push(FINALIZER.to_owned());
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
}

pub(super) async fn remove_finalizer<K>(api: &Api<K>, obj: &K) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let finalizers: Vec<&String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .collect();
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

pub(super) async fn set_status<K>(
    api: &Api<K>,
    name: &str,
    status: serde_json::Value,
) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .map(|_| ())
}

pub(super) fn cond(type_: &str, ok: bool, reason: &str, message: &str) -> serde_json::Value {
    json!({
        "type": type_, "status": if ok { "True" } else { "False" }, "reason": reason,
        "message": message, "lastTransitionTime": "2026-11-23T00:00:00Z",
    })
}

/// Polls `f` every 200 ms until it gives a value; panics after `limit`.
pub(super) async fn wait_for<T>(
    what: &str,
    limit: Duration,
    mut f: impl AsyncFnMut() -> Option<T>,
) -> T {
    let end = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
