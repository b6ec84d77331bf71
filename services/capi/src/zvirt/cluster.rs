//! The ZvirtCluster controller: once Cluster API's Cluster owns it, its control plane
//! endpoint is the management cluster's API server (as capz sets it) and it is ready —
//! unless `spec.id` names no engine cluster, which capz's code meant to report (its check
//! is commented out upstream) and this one does: `failureReason: ClusterMisconfigured`
//! and a message saying which id, never ready, looked at again as the engine may change.

use std::sync::Arc;

use http::Method;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::ResourceExt;
use overcast_cloud::CloudError;
use serde_json::json;

use super::Context;
use crate::crd::zvirt::{
    ZvirtCluster, ZvirtClusterStatus, CLUSTER_ID_NOT_PROVIDED, REASON_CLUSTER_MISCONFIGURED,
};
use crate::{Error, Result};

pub async fn reconcile(zc: Arc<ZvirtCluster>, ctx: Arc<Context>) -> Result<Action> {
    let key = crate::retry::key_of(zc.as_ref());
    let outcome = reconcile_once(zc, Arc::clone(&ctx)).await;
    ctx.retries.settle(&key, outcome)
}

async fn reconcile_once(zc: Arc<ZvirtCluster>, ctx: Arc<Context>) -> Result<Action> {
    let owned = zc
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Cluster" && o.api_version.starts_with(crate::core::GROUP));
    if !owned || zc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = zc.namespace().unwrap_or_default();
    let api: Api<ZvirtCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let mut status = ZvirtClusterStatus::default();
    let mut again = Action::await_change();
    if zc.spec.id.is_empty() {
        status.failure_reason = Some(REASON_CLUSTER_MISCONFIGURED.into());
        status.failure_message = Some(CLUSTER_ID_NOT_PROVIDED.into());
    } else {
        match ctx
            .engine
            .json(
                "cluster_get",
                Method::GET,
                &format!("/clusters/{}", zc.spec.id),
                None,
            )
            .await
        {
            Ok(_) => status.ready = true,
            Err(CloudError::NotFound { .. }) => {
                status.failure_reason = Some(REASON_CLUSTER_MISCONFIGURED.into());
                status.failure_message = Some(format!(
                    "the engine has no cluster with id {:?} (ZvirtCluster spec.id)",
                    zc.spec.id
                ));
                again = Action::requeue(ctx.poll * 6);
            }
            Err(e) => return Err(Error::Cloud(e)),
        }
    }
    if let Some((host, port)) = &ctx.api_server {
        let endpoint = zc.spec.control_plane_endpoint.as_ref();
        if endpoint.map(|e| (&e.host, e.port)) != Some((host, *port)) {
            api.patch(
                &zc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"controlPlaneEndpoint": {"host": host, "port": port}}}),
                ),
            )
            .await?;
        }
    }
    if zc.status.as_ref() != Some(&status) {
        // Written whole: a failure that passed must not linger.
        let mut body = json!({"status": status});
        for k in ["failureReason", "failureMessage"] {
            if body["status"].get(k).is_none() {
                body["status"][k] = serde_json::Value::Null;
            }
        }
        body["status"]["ready"] = json!(status.ready);
        api.patch_status(&zc.name_any(), &PatchParams::default(), &Patch::Merge(body))
            .await?;
    }
    Ok(again)
}

pub fn error_policy(zc: Arc<ZvirtCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.retries.after_failure(zc.as_ref(), error)
}
